//! One node's connection to the cluster ([`Cluster`]): joining (connect,
//! check JetStream, create or check the streams, the consumer and the
//! buckets), the work queue, run events, run and node records, and actions
//! routed by request/reply.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, kv, stream};
use async_nats::{ConnectOptions, HeaderMap};
use futures::StreamExt;
use troupe_protocol::api::RunSummary;
use troupe_protocol::cluster::{
    ActionReply, ClusterEvent, ClusterRun, MessageError, NodeRecord, RunAction, Submission,
    VERSION, Versioned, decode, is_valid_token,
};
use troupe_protocol::events::RunEvent;

use crate::names::{
    EVENTS_STREAM, EVENTS_SUBJECTS, NODES_BUCKET, RUNS_BUCKET, SUBMISSIONS_CONSUMER,
    SUBMISSIONS_STREAM, SUBMIT_SUBJECT, TRACEPARENT_HEADER, action_subject, events_subject,
};
use crate::settings::{self, ClusterSettings, UrlAuth};
use crate::{ClusterError, rules};

/// How long the first connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long run events and records are kept on the server.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a node's record outlives its last heartbeat.
pub const NODE_RECORD_AGE: Duration = Duration::from_secs(600);

/// How long an action waits for the node that runs the run.
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's connection to the cluster.
#[derive(Clone)]
pub struct Cluster {
    client: async_nats::Client,
    pub(crate) jetstream: jetstream::Context,
    consumer: consumer::PullConsumer,
    pub(crate) events: stream::Stream,
    /// The sessions of clustered runs (`crate::failover`).
    pub(crate) sessions: stream::Stream,
    nodes: kv::Store,
    pub(crate) runs: kv::Store,
    pub(crate) settings: ClusterSettings,
    masked_url: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.masked_url)
            .field("node", &self.settings.node)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Joins the cluster: connects with the URL's token or user and
    /// password, or the `.creds` file; checks that the server offers
    /// JetStream; creates (or checks) the streams, the shared consumer and
    /// the buckets.
    pub async fn connect(settings: ClusterSettings) -> Result<Self, ClusterError> {
        settings::check(&settings)?;
        let url = settings::parse_url(&settings.url)?;
        let masked_url = url.masked.clone();
        let mut options = match &settings.credentials {
            Some(path) => ConnectOptions::with_credentials_file(path)
                .await
                .map_err(|err| {
                    ClusterError::Settings(format!(
                        "cannot read the credentials file {}: {err}",
                        path.display()
                    ))
                })?,
            None => ConnectOptions::new(),
        };
        options = match url.auth {
            UrlAuth::None => options,
            UrlAuth::Token(token) => options.token(token),
            UrlAuth::UserPassword(user, password) => options.user_and_password(user, password),
        };
        let client = options
            .name(format!("troupe {}", settings.node))
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(url.address.as_str())
            .await
            .map_err(|err| ClusterError::Connect {
                url: masked_url.clone(),
                cause: err.to_string(),
            })?;
        let jetstream = jetstream::new(client.clone());
        jetstream
            .query_account()
            .await
            .map_err(|err| ClusterError::NoJetStream {
                url: masked_url.clone(),
                cause: err.to_string(),
            })?;
        let submissions = ensure_stream(
            &jetstream,
            stream::Config {
                name: SUBMISSIONS_STREAM.into(),
                subjects: vec![SUBMIT_SUBJECT.into()],
                retention: stream::RetentionPolicy::WorkQueue,
                max_message_size: max_message_size(),
                num_replicas: settings.replicas,
                ..Default::default()
            },
        )
        .await?;
        let consumer = submissions
            .get_or_create_consumer(
                SUBMISSIONS_CONSUMER,
                consumer::pull::Config {
                    durable_name: Some(SUBMISSIONS_CONSUMER.into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: settings.lease,
                    ..Default::default()
                },
            )
            .await
            .map_err(|err| ClusterError::setup(SUBMISSIONS_CONSUMER, err))?;
        let events = ensure_stream(
            &jetstream,
            stream::Config {
                name: EVENTS_STREAM.into(),
                subjects: vec![EVENTS_SUBJECTS.into()],
                retention: stream::RetentionPolicy::Limits,
                max_age: RETENTION,
                max_message_size: max_message_size(),
                num_replicas: settings.replicas,
                ..Default::default()
            },
        )
        .await?;
        let sessions = crate::failover::sessions_stream(&jetstream, settings.replicas).await?;
        let nodes =
            ensure_bucket(&jetstream, NODES_BUCKET, NODE_RECORD_AGE, settings.replicas).await?;
        let runs = ensure_bucket(&jetstream, RUNS_BUCKET, RETENTION, settings.replicas).await?;
        crate::replicas::raise_all(&jetstream, settings.replicas).await?;
        tracing::info!(url = %masked_url, node = %settings.node, "joined the cluster");
        Ok(Self {
            client,
            jetstream,
            consumer,
            events,
            sessions,
            nodes,
            runs,
            settings,
            masked_url,
        })
    }

    /// This node's settings.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.settings.node
    }

    /// The connection to the server.
    pub(crate) fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The server's URL with its secret masked.
    pub fn masked_url(&self) -> &str {
        &self.masked_url
    }

    /// Whether the node is connected to the server now: an error saying so
    /// while the client is reconnecting. A write made then would wait in
    /// the client's buffer and reach the server only once it is back, long
    /// after its caller gave up on it.
    pub fn connected(&self) -> Result<(), ClusterError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(ClusterError::request(
                "reach the server",
                format!("the node is not connected to the server ({state})"),
            )),
        }
    }

    /// Hands a run to the work queue, with the submitter's trace context;
    /// answers once the server stored it.
    pub async fn submit(
        &self,
        submission: &Submission,
        traceparent: Option<&str>,
    ) -> Result<(), ClusterError> {
        let body = serde_json::to_vec(submission)?;
        let mut headers = HeaderMap::new();
        if let Some(traceparent) = traceparent {
            headers.insert(TRACEPARENT_HEADER, traceparent);
        }
        let ack = self
            .jetstream
            .publish_with_headers(SUBMIT_SUBJECT, headers, body.into())
            .await
            .map_err(|err| ClusterError::request("submit a run", err))?;
        ack.await
            .map_err(|err| ClusterError::request("submit a run", err))?;
        Ok(())
    }

    /// Takes the next submission from the work queue, waiting at most
    /// `wait`: `None` when none came. A message that does not read as a
    /// submission is logged and terminated (never redelivered) and also
    /// answers `None`.
    pub async fn take(&self, wait: Duration) -> Result<Option<Taken>, ClusterError> {
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(1)
            .expires(wait)
            .messages()
            .await
            .map_err(|err| ClusterError::request("take a submission", err))?;
        let Some(message) = batch.next().await else {
            return Ok(None);
        };
        let message = message.map_err(|err| ClusterError::request("take a submission", err))?;
        let submission = match decode::<Submission>(&message.payload) {
            Ok(submission) => submission,
            Err(err) => {
                tracing::warn!(
                    subject = %message.subject,
                    bytes = message.payload.len(),
                    %err,
                    "dropped a message of the work queue that is not a submission"
                );
                if let Err(err) = message.ack_with(AckKind::Term).await {
                    tracing::warn!(%err, "the dropped message could not be terminated");
                }
                return Ok(None);
            }
        };
        let traceparent = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(TRACEPARENT_HEADER))
            .map(|value| value.as_str().to_string())
            .filter(|value| value.len() <= 128);
        let deliveries = message.info().map_or(1, |info| info.delivered);
        Ok(Some(Taken {
            submission,
            traceparent,
            deliveries,
            message,
        }))
    }

    /// Publishes an event of a run this node runs on the run's subject;
    /// answers once the server stored it.
    pub async fn publish_event(&self, event: &RunEvent) -> Result<(), ClusterError> {
        let body = serde_json::to_vec(&ClusterEvent {
            v: VERSION,
            node: self.settings.node.clone(),
            event: event.clone(),
        })?;
        let ack = self
            .jetstream
            .publish(events_subject(&event.run_id), body.into())
            .await
            .map_err(|err| ClusterError::request("publish an event", err))?;
        ack.await
            .map_err(|err| ClusterError::request("publish an event", err))?;
        Ok(())
    }

    /// Every event of run `run_id` from sequence number `from_seq` on, in
    /// order, as the node that runs it published them; waits for events not
    /// yet published.
    pub async fn events(&self, run_id: &str, from_seq: u64) -> Result<RunEvents, ClusterError> {
        let consumer = self
            .events
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: events_subject(run_id),
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|err| ClusterError::request("read a run's events", err))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|err| ClusterError::request("read a run's events", err))?;
        Ok(RunEvents {
            messages,
            run_id: run_id.to_string(),
            from_seq,
        })
    }

    /// The sequence number of the last event of run `run_id` the cluster
    /// holds (0 when it holds none, or the last message on the run's
    /// subject does not read as its event).
    pub async fn last_event_seq(&self, run_id: &str) -> Result<u64, ClusterError> {
        match self
            .events
            .get_last_raw_message_by_subject(&events_subject(run_id))
            .await
        {
            Ok(message) => Ok(readable::<ClusterEvent>(EVENTS_STREAM, &message.payload)
                .filter(|event| event.event.run_id == run_id)
                .map_or(0, |event| event.event.seq)),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
            Err(err) => Err(ClusterError::request("read a run's last event", err)),
        }
    }

    /// Writes a run's record (which node runs it, its summary).
    pub async fn put_run(&self, summary: &RunSummary) -> Result<(), ClusterError> {
        let body = serde_json::to_vec(&ClusterRun {
            v: VERSION,
            summary: summary.clone(),
        })?;
        self.runs
            .put(&summary.run_id, body.into())
            .await
            .map_err(|err| ClusterError::request("write a run's record", err))?;
        Ok(())
    }

    /// A run's record; `None` for a run the cluster does not know (or whose
    /// record does not read, which is logged).
    pub async fn run(&self, run_id: &str) -> Result<Option<RunSummary>, ClusterError> {
        if !is_valid_token(run_id) {
            return Ok(None);
        }
        let value = self
            .runs
            .get(run_id)
            .await
            .map_err(|err| ClusterError::request("read a run's record", err))?;
        Ok(value
            .and_then(|bytes| readable::<ClusterRun>(RUNS_BUCKET, &bytes))
            .filter(|run| run.summary.run_id == run_id)
            .map(|run| run.summary))
    }

    /// Every run's record that reads.
    pub async fn runs(&self) -> Result<Vec<RunSummary>, ClusterError> {
        Ok(read_all::<ClusterRun>(&self.runs, RUNS_BUCKET)
            .await?
            .into_iter()
            .filter(|(key, run)| *key == run.summary.run_id)
            .map(|(_, run)| run.summary)
            .collect())
    }

    /// Writes this node's record with the runs it runs now.
    pub async fn heartbeat(
        &self,
        running: Vec<String>,
        draining: bool,
        addr: &str,
    ) -> Result<(), ClusterError> {
        let record = NodeRecord {
            v: VERSION,
            node: self.settings.node.clone(),
            capacity: self.settings.capacity,
            running,
            draining,
            heartbeat: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            addr: addr.to_string(),
        };
        let body = serde_json::to_vec(&record)?;
        self.nodes
            .put(&self.settings.node, body.into())
            .await
            .map_err(|err| ClusterError::request("write the node's heartbeat", err))?;
        Ok(())
    }

    /// Removes this node's record: it has left the cluster.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        self.nodes
            .delete(&self.settings.node)
            .await
            .map_err(|err| ClusterError::request("remove the node's record", err))
    }

    /// Every node's record that reads, with whether its heartbeat is stale.
    pub async fn nodes(&self) -> Result<Vec<(NodeRecord, bool)>, ClusterError> {
        let now = chrono::Utc::now();
        let lease = self.settings.lease;
        Ok(read_all::<NodeRecord>(&self.nodes, NODES_BUCKET)
            .await?
            .into_iter()
            .filter(|(key, node)| *key == node.node)
            .map(|(_, node)| {
                let stale = rules::heartbeat_stale(&node.heartbeat, now, lease);
                (node, stale)
            })
            .collect())
    }

    /// Answers actions on run `run_id`, which this node runs, until the
    /// returned subscription is dropped.
    pub async fn serve_actions(&self, run_id: &str) -> Result<ActionRequests, ClusterError> {
        let subscriber = self
            .client
            .subscribe(action_subject(run_id))
            .await
            .map_err(|err| ClusterError::request("answer a run's actions", err))?;
        // The server knows of the subscription before this returns: an
        // action sent from here on reaches it (a request racing the
        // subscription would get "no responders").
        self.round_trip()
            .await
            .map_err(|err| ClusterError::request("answer a run's actions", err))?;
        Ok(ActionRequests {
            subscriber,
            client: self.client.clone(),
            run_id: run_id.to_string(),
        })
    }

    /// Returns once the server has read everything this connection sent
    /// before: a message published to a fresh inbox on this connection comes
    /// back to it only after the server has handled the commands sent ahead
    /// of it (a flush only empties the client's buffer).
    async fn round_trip(&self) -> Result<(), String> {
        let inbox = self.client.new_inbox();
        let mut echo = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|err| err.to_string())?;
        self.client
            .publish(inbox, bytes::Bytes::new())
            .await
            .map_err(|err| err.to_string())?;
        let answered = tokio::time::timeout(ACTION_TIMEOUT, echo.next()).await;
        let _ = echo.unsubscribe().await;
        match answered {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("the connection closed".to_owned()),
            Err(_) => Err("the server did not answer in time".to_owned()),
        }
    }

    /// Sends an action to the node that runs its run: its answer, or `None`
    /// when no node answers for the run.
    pub async fn request_action(
        &self,
        action: &RunAction,
    ) -> Result<Option<ActionReply>, ClusterError> {
        let body = serde_json::to_vec(action)?;
        let request = self
            .client
            .request(action_subject(&action.run_id), body.into());
        let reply = match tokio::time::timeout(ACTION_TIMEOUT, request).await {
            Err(_) => {
                return Err(ClusterError::request(
                    "route an action",
                    "no answer in time",
                ));
            }
            Ok(Err(err)) if err.kind() == async_nats::RequestErrorKind::NoResponders => {
                return Ok(None);
            }
            Ok(Err(err)) => return Err(ClusterError::request("route an action", err)),
            Ok(Ok(reply)) => reply,
        };
        decode::<ActionReply>(&reply.payload)
            .map(Some)
            .map_err(|err| ClusterError::request("route an action", err))
    }
}

/// A submission this node took from the work queue: it stays with this
/// node while [`Taken::progress`] is called within every lease, until
/// [`Taken::ack`].
pub struct Taken {
    /// The submission.
    pub submission: Submission,
    /// The submitter's W3C trace context.
    pub traceparent: Option<String>,
    /// How many times the queue delivered it (more than 1: a node that took
    /// it before let its lease lapse).
    pub deliveries: i64,
    message: jetstream::Message,
}

impl Taken {
    /// Renews the lease: the message stays with this node for another
    /// lease.
    pub async fn progress(&self) -> Result<(), ClusterError> {
        self.message
            .ack_with(AckKind::Progress)
            .await
            .map_err(|err| ClusterError::request("renew a run's lease", err))
    }

    /// The run is over: the message leaves the queue.
    pub async fn ack(&self) -> Result<(), ClusterError> {
        self.message
            .double_ack()
            .await
            .map_err(|err| ClusterError::request("acknowledge a run", err))
    }

    /// This node will not run it after all (it is stopping): the message is
    /// delivered again at once, to another node.
    pub async fn release(&self) -> Result<(), ClusterError> {
        self.message
            .ack_with(AckKind::Nak(None))
            .await
            .map_err(|err| ClusterError::request("release a submission", err))
    }

    /// The run cannot be run by any node: the message leaves the queue
    /// without being redelivered.
    pub async fn terminate(&self) -> Result<(), ClusterError> {
        self.message
            .ack_with(AckKind::Term)
            .await
            .map_err(|err| ClusterError::request("drop a submission", err))
    }
}

/// A run's events as the cluster holds them ([`Cluster::events`]).
pub struct RunEvents {
    messages: consumer::pull::Ordered,
    run_id: String,
    from_seq: u64,
}

impl RunEvents {
    /// The next event at or after the first sequence number wanted; waits
    /// for it. A message on the run's subject that does not read as one of
    /// its events, or repeats one already given, is logged and skipped.
    /// `None` once the stream cannot be read any more.
    pub async fn next(&mut self) -> Option<RunEvent> {
        loop {
            let message = match self.messages.next().await? {
                Ok(message) => message,
                Err(err) => {
                    tracing::warn!(run = %self.run_id, %err, "a run's events could not be read");
                    return None;
                }
            };
            let Some(event) = readable::<ClusterEvent>(EVENTS_STREAM, &message.payload) else {
                continue;
            };
            if event.event.run_id != self.run_id {
                tracing::warn!(run = %self.run_id, "dropped an event naming another run");
                continue;
            }
            if event.event.seq < self.from_seq {
                continue;
            }
            self.from_seq = event.event.seq.saturating_add(1);
            return Some(event.event);
        }
    }
}

/// Actions on one run sent to this node ([`Cluster::serve_actions`]).
pub struct ActionRequests {
    subscriber: async_nats::Subscriber,
    client: async_nats::Client,
    run_id: String,
}

/// One action to answer.
pub struct ActionRequest {
    /// What is asked.
    pub action: RunAction,
    reply: async_nats::Subject,
    client: async_nats::Client,
}

impl ActionRequests {
    /// Stops taking the run's actions: the server is told to send no more
    /// (ahead of anything this connection publishes after this returns),
    /// and what it already sent is still read, until `next` ends.
    pub async fn close(mut self) -> Result<Self, ClusterError> {
        self.subscriber
            .unsubscribe()
            .await
            .map_err(|err| ClusterError::request("stop answering a run's actions", err))?;
        Ok(self)
    }

    /// The next action on the run; a message that does not read as one, or
    /// names another run, is logged and skipped. `None` once the
    /// subscription ends.
    pub async fn next(&mut self) -> Option<ActionRequest> {
        loop {
            let message = self.subscriber.next().await?;
            let Some(reply) = message.reply.clone() else {
                tracing::warn!(run = %self.run_id, "dropped an action with nowhere to answer");
                continue;
            };
            let Some(action) = readable::<RunAction>("action", &message.payload) else {
                continue;
            };
            if action.run_id != self.run_id {
                tracing::warn!(run = %self.run_id, "dropped an action naming another run");
                continue;
            }
            return Some(ActionRequest {
                action,
                reply,
                client: self.client.clone(),
            });
        }
    }
}

impl ActionRequest {
    /// Answers the action with the HTTP status and body the local API gave.
    pub async fn answer(self, status: u16, body: serde_json::Value) -> Result<(), ClusterError> {
        let reply = serde_json::to_vec(&ActionReply {
            v: VERSION,
            status,
            body,
        })?;
        self.client
            .publish(self.reply, reply.into())
            .await
            .map_err(|err| ClusterError::request("answer an action", err))
    }
}

/// The largest message the streams take.
pub(crate) fn max_message_size() -> i32 {
    i32::try_from(troupe_protocol::cluster::MAX_MESSAGE_BYTES).unwrap_or(i32::MAX)
}

/// Reads a message of type `T` from `source`, logging one that does not read.
pub(crate) fn readable<T: Versioned>(source: &str, bytes: &[u8]) -> Option<T> {
    match decode::<T>(bytes) {
        Ok(message) => Some(message),
        Err(err) => {
            log_dropped(source, bytes.len(), &err);
            None
        }
    }
}

fn log_dropped(source: &str, bytes: usize, err: &MessageError) {
    tracing::warn!(source, bytes, %err, "dropped a cluster message that does not read");
}

/// Every key of `bucket` with its value, read as `T`; values that do not
/// read are logged and left out.
async fn read_all<T: Versioned>(
    store: &kv::Store,
    bucket: &str,
) -> Result<Vec<(String, T)>, ClusterError> {
    let keys = match store.keys().await {
        Ok(keys) => keys,
        Err(err) => return Err(ClusterError::request(format!("list {bucket}"), err)),
    };
    let keys: Vec<String> = keys.filter_map(|key| async { key.ok() }).collect().await;
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        let value = store
            .get(&key)
            .await
            .map_err(|err| ClusterError::request(format!("read {bucket}"), err))?;
        if let Some(value) = value.and_then(|bytes| readable::<T>(bucket, &bytes)) {
            found.push((key, value));
        }
    }
    Ok(found)
}

/// Creates a stream, or checks that the one there has the retention the
/// cluster needs.
pub(crate) async fn ensure_stream(
    jetstream: &jetstream::Context,
    config: stream::Config,
) -> Result<stream::Stream, ClusterError> {
    let name = config.name.clone();
    let retention = config.retention;
    let mut stream = jetstream
        .get_or_create_stream(config)
        .await
        .map_err(|err| ClusterError::setup(format!("stream {name}"), err))?;
    let info = stream
        .info()
        .await
        .map_err(|err| ClusterError::setup(format!("stream {name}"), err))?;
    if info.config.retention != retention {
        return Err(ClusterError::setup(
            format!("stream {name}"),
            format!(
                "it exists with retention {:?}, not {retention:?}; remove it or use another server",
                info.config.retention
            ),
        ));
    }
    Ok(stream)
}

/// Opens a key-value bucket, creating it when absent.
async fn ensure_bucket(
    jetstream: &jetstream::Context,
    bucket: &str,
    max_age: Duration,
    replicas: usize,
) -> Result<kv::Store, ClusterError> {
    if let Ok(store) = jetstream.get_key_value(bucket).await {
        return Ok(store);
    }
    jetstream
        .create_key_value(kv::Config {
            bucket: bucket.into(),
            history: 1,
            max_age,
            max_value_size: max_message_size(),
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .map_err(|err| ClusterError::setup(format!("bucket {bucket}"), err))
}
