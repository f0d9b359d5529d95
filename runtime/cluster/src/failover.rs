//! What a node does to hold a run so that another can take it over: the
//! run's record claimed and renewed by revision, its events and its
//! session's writes published on the condition that the subject's last
//! sequence is the one this node wrote (the fencing token), and a session
//! read back from [`SESSIONS_STREAM`] by the node that continues it.
//!
//! A write refused on its condition is [`HeldWriteError::Fenced`]: another
//! node claimed the run since, and this node must stop its copy.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, context, kv, stream};
use futures::StreamExt;
use troupe_protocol::api::RunSummary;
use troupe_protocol::cluster::{ClusterEvent, ClusterRun, SessionRecord, VERSION};
use troupe_protocol::events::RunEvent;

use crate::ClusterError;
use crate::fencing::{self, Refusal};
use crate::names::{
    EVENTS_STREAM, RUNS_BUCKET, SESSIONS_STREAM, SESSIONS_SUBJECTS, TRACEPARENT_HEADER,
    events_subject, session_subject,
};
use crate::node::{Cluster, RETENTION, ensure_stream, max_message_size, readable};

/// How long reading a session back waits for its next record.
const READ_WAIT: Duration = Duration::from_secs(10);

/// A conditional write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HeldWriteError {
    /// The condition failed: another node claimed the run.
    #[error("another node holds the run now ({0})")]
    Fenced(String),
    /// The server did not take it for another reason.
    #[error(transparent)]
    Failed(#[from] ClusterError),
}

impl HeldWriteError {
    /// A failed write's error, fenced when the server refused its condition.
    fn of(what: &str, wrong_last: bool, cause: impl std::fmt::Display) -> Self {
        match fencing::refusal(wrong_last) {
            Refusal::Fenced => Self::Fenced(format!("{what}: {cause}")),
            Refusal::Unavailable => Self::Failed(ClusterError::request(what, cause)),
        }
    }
}

/// A session as the cluster holds it.
#[derive(Debug, Default)]
pub struct StoredSession {
    /// Its writes that read, in order.
    pub records: Vec<SessionRecord>,
    /// The stream sequence of each of `records`.
    pub sequences: Vec<u64>,
    /// The stream sequence of the last message on its subject (0: none);
    /// the next write names it.
    pub last_seq: u64,
}

/// The stream of sessions, created at start when missing.
pub(crate) async fn sessions_stream(
    jetstream: &jetstream::Context,
    replicas: usize,
) -> Result<stream::Stream, ClusterError> {
    ensure_stream(
        jetstream,
        stream::Config {
            name: SESSIONS_STREAM.into(),
            subjects: vec![SESSIONS_SUBJECTS.into()],
            retention: stream::RetentionPolicy::Limits,
            max_age: RETENTION,
            max_message_size: max_message_size(),
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await
}

impl Cluster {
    /// A run's record with the revision it was written at; `None` when the
    /// cluster holds none (or it does not read).
    pub async fn run_entry(&self, run_id: &str) -> Result<Option<(RunSummary, u64)>, ClusterError> {
        let entry = self
            .runs
            .entry(run_id)
            .await
            .map_err(|err| ClusterError::request("read a run's record", err))?;
        Ok(entry.and_then(|entry| {
            if entry.operation != kv::Operation::Put {
                return None;
            }
            readable::<ClusterRun>(RUNS_BUCKET, &entry.value)
                .filter(|run| run.summary.run_id == run_id)
                .map(|run| (run.summary, entry.revision))
        }))
    }

    /// Writes a run's record on the condition that its last revision is
    /// `revision` (the one this node read or wrote last): the new revision.
    /// How a node claims a run, and renews its hold on it.
    pub async fn put_run_held(
        &self,
        summary: &RunSummary,
        revision: u64,
    ) -> Result<u64, HeldWriteError> {
        let body = serde_json::to_vec(&ClusterRun {
            v: VERSION,
            summary: summary.clone(),
        })
        .map_err(ClusterError::from)?;
        self.runs
            .update(&summary.run_id, body.into(), revision)
            .await
            .map_err(|err| {
                let wrong_last = err.kind() == kv::UpdateErrorKind::WrongLastRevision;
                HeldWriteError::of("write a run's record", wrong_last, err)
            })
    }

    /// The last event of run `run_id` the cluster holds: its `seq` and its
    /// sequence in the stream (both 0 when there is none; the `seq` is 0
    /// when the last message does not read as the run's event).
    pub async fn last_event(&self, run_id: &str) -> Result<(u64, u64), ClusterError> {
        match self
            .events
            .get_last_raw_message_by_subject(&events_subject(run_id))
            .await
        {
            Ok(message) => Ok((
                readable::<ClusterEvent>(EVENTS_STREAM, &message.payload)
                    .filter(|event| event.event.run_id == run_id)
                    .map_or(0, |event| event.event.seq),
                message.sequence,
            )),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok((0, 0)),
            Err(err) => Err(ClusterError::request("read a run's last event", err)),
        }
    }

    /// Publishes an event of a run this node holds on the condition that
    /// the last message on the run's subject is at `expected` (0: none),
    /// with the run's trace context: the event's sequence in the stream.
    pub async fn publish_event_held(
        &self,
        event: &RunEvent,
        expected: u64,
        traceparent: Option<&str>,
    ) -> Result<u64, HeldWriteError> {
        let body = serde_json::to_vec(&ClusterEvent {
            v: VERSION,
            node: self.settings.node.clone(),
            event: event.clone(),
        })
        .map_err(ClusterError::from)?;
        self.publish_held(
            events_subject(&event.run_id),
            body,
            expected,
            traceparent,
            "publish an event",
        )
        .await
    }

    /// Publishes a write of a session this node's run holds, on the
    /// condition that the last message on the session's subject is at
    /// `expected` (0: none): the write's sequence in the stream.
    pub async fn publish_session(
        &self,
        record: &SessionRecord,
        expected: u64,
    ) -> Result<u64, HeldWriteError> {
        let body = serde_json::to_vec(record).map_err(ClusterError::from)?;
        self.publish_held(
            session_subject(&record.session_id),
            body,
            expected,
            None,
            "write a session",
        )
        .await
    }

    async fn publish_held(
        &self,
        subject: String,
        body: Vec<u8>,
        expected: u64,
        traceparent: Option<&str>,
        what: &str,
    ) -> Result<u64, HeldWriteError> {
        let mut publish = context::Publish::build()
            .payload(body.into())
            .expected_last_subject_sequence(expected);
        if let Some(traceparent) = traceparent {
            publish = publish.header(TRACEPARENT_HEADER, traceparent);
        }
        let failed = |err: context::PublishError| {
            let wrong_last = is_wrong_last(&err);
            HeldWriteError::of(what, wrong_last, err)
        };
        let ack = self
            .jetstream
            .send_publish(subject, publish)
            .await
            .map_err(failed)?;
        ack.await.map(|ack| ack.sequence).map_err(failed)
    }

    /// Who wrote the last message on session `session_id`'s subject (`None`
    /// when it does not read) and its sequence; `None` when there is none.
    pub async fn last_session_writer(
        &self,
        session_id: &str,
    ) -> Result<Option<(Option<String>, u64)>, ClusterError> {
        match self
            .sessions
            .get_last_raw_message_by_subject(&session_subject(session_id))
            .await
        {
            Ok(message) => Ok(Some((
                readable::<SessionRecord>(SESSIONS_STREAM, &message.payload)
                    .map(|record| record.node),
                message.sequence,
            ))),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => Err(ClusterError::request("read a session", err)),
        }
    }

    /// Who published the last message on run `run_id`'s events subject
    /// (`None` when it does not read) and its sequence; `None` when there
    /// is none.
    pub async fn last_event_writer(
        &self,
        run_id: &str,
    ) -> Result<Option<(Option<String>, u64)>, ClusterError> {
        match self
            .events
            .get_last_raw_message_by_subject(&events_subject(run_id))
            .await
        {
            Ok(message) => Ok(Some((
                readable::<ClusterEvent>(EVENTS_STREAM, &message.payload).map(|event| event.node),
                message.sequence,
            ))),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => Err(ClusterError::request("read a run's last event", err)),
        }
    }

    /// Which node the run's record names (`Some("")` for none, `None` when
    /// it does not read) and its revision; `None` when there is no record.
    pub async fn run_holder(
        &self,
        run_id: &str,
    ) -> Result<Option<(Option<String>, u64)>, ClusterError> {
        let entry = self
            .runs
            .entry(run_id)
            .await
            .map_err(|err| ClusterError::request("read a run's record", err))?;
        Ok(entry.map(|entry| {
            let node = readable::<ClusterRun>(RUNS_BUCKET, &entry.value)
                .filter(|run| run.summary.run_id == run_id)
                .map(|run| run.summary.node.unwrap_or_default());
            (node, entry.revision)
        }))
    }

    /// Every write of session `session_id` the cluster holds, in order;
    /// a message that does not read, or names another session, is logged
    /// and left out.
    pub async fn stored_session(&self, session_id: &str) -> Result<StoredSession, ClusterError> {
        let subject = session_subject(session_id);
        let last_seq = match self
            .sessions
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => message.sequence,
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                return Ok(StoredSession::default());
            }
            Err(err) => return Err(ClusterError::request("read a session", err)),
        };
        let consumer = self
            .sessions
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: subject,
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|err| ClusterError::request("read a session", err))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|err| ClusterError::request("read a session", err))?;
        let mut records = Vec::new();
        let mut sequences = Vec::new();
        loop {
            let message = match tokio::time::timeout(READ_WAIT, messages.next()).await {
                Err(_) => return Err(ClusterError::request("read a session", "no answer in time")),
                Ok(None) => break,
                Ok(Some(Err(err))) => return Err(ClusterError::request("read a session", err)),
                Ok(Some(Ok(message))) => message,
            };
            let sequence = message
                .info()
                .map_err(|err| ClusterError::request("read a session", err))?
                .stream_sequence;
            if let Some(record) = readable::<SessionRecord>(SESSIONS_STREAM, &message.payload) {
                if record.session_id == session_id {
                    records.push(record);
                    sequences.push(sequence);
                } else {
                    tracing::warn!(session = %session_id, "dropped a session write naming another session");
                }
            }
            if sequence >= last_seq {
                break;
            }
        }
        Ok(StoredSession {
            records,
            sequences,
            last_seq,
        })
    }
}

/// Whether a publish was refused because the subject's last sequence was
/// not the one named.
fn is_wrong_last(err: &context::PublishError) -> bool {
    err.kind() == context::PublishErrorKind::WrongLastSequence
}
