//! The failover path of a cluster node (docs/cluster.md, "Sessions, leases
//! and fencing").
//!
//! A node holds each run it took by a [`Hold`]: the run's record is claimed
//! and renewed by revision, its events are published on the condition that
//! the run's subject is where this node left it, and the writes its store
//! makes to the run's session are copied to the cluster's sessions stream
//! by the [`SessionTee`] on the same kind of condition. When the queue
//! delivers a run again because its node's lease lapsed, the node it
//! reaches claims the run, loads its session from the stream into its own
//! store, answers the calls that were running with a node-failure result,
//! and continues the run under the same id, its events after a `run_moved`.
//! A node whose conditional write is refused has lost the run: it cancels
//! its copy (its tool processes are killed with it) and writes nothing more
//! to the cluster for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use troupe_cluster::{Cluster, HeldWriteError, StoredSession, fencing};
use troupe_protocol::api::RunSummary;
use troupe_protocol::cluster::{MAX_MESSAGE_BYTES, SessionRecord, SessionWrite, VERSION};
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_protocol::model::ToolResult;
use troupe_store::{
    CompactionMarker, LedgerEntry, NewSession, RunRecord, Store, StoreError, TeedWrite, WriteTee,
};

/// How many times a write the server did not take is tried again.
const WRITE_ATTEMPTS: u32 = 30;

/// How long a node waits before trying a write again.
const WRITE_RETRY: Duration = Duration::from_secs(1);

/// How long reading a run's earlier events waits for the next one.
const EVENTS_WAIT: Duration = Duration::from_secs(10);

/// The observer of the store's writes that copies the sessions of the
/// runs this node holds to the cluster.
#[derive(Default)]
pub(crate) struct SessionTee {
    sessions: Mutex<HashMap<String, mpsc::UnboundedSender<TeedWrite>>>,
    /// Session id → the sequence of the sessions stream this node's store
    /// matches: the last write of the session it published or read back.
    synced: Mutex<HashMap<String, u64>>,
}

impl WriteTee for SessionTee {
    fn wants(&self, session: &str) -> bool {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.contains_key(session)
    }

    fn written(&self, session: &str, write: TeedWrite) {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = sessions.get(session) {
            let _ = sender.send(write);
        }
    }
}

impl SessionTee {
    /// From now on, the writes of `session` are handed to the receiver.
    fn register(&self, session: &str) -> mpsc::UnboundedReceiver<TeedWrite> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.insert(session.to_string(), sender);
        receiver
    }

    /// The writes of `session` are no longer copied.
    pub(crate) fn unregister(&self, session: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.remove(session);
    }

    /// The sequence of the sessions stream this node's copy of `session`
    /// is known to match; `None` when this node has not written nor read
    /// it since it started.
    fn synced_at(&self, session: &str) -> Option<u64> {
        let synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        synced.get(session).copied()
    }

    /// This node's copy of `session` matches the stream up to `sequence`.
    fn set_synced(&self, session: &str, sequence: u64) {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let at = synced.entry(session.to_string()).or_insert(sequence);
        *at = (*at).max(sequence);
    }
}

/// A run this node holds in the cluster.
pub(crate) struct Hold {
    run_id: String,
    session_id: String,
    cluster: Cluster,
    tee: Arc<SessionTee>,
    /// The revision of the run's record this node wrote last.
    revision: tokio::sync::Mutex<u64>,
    /// The stream sequence of the run's last event this node published.
    events_last: tokio::sync::Mutex<u64>,
    /// The run's trace context, carried in the events' headers.
    traceparent: Option<String>,
    /// Cancelled once another node holds the run.
    fenced: CancellationToken,
    /// Cancelled once the run ended here ([`release`]).
    ended: CancellationToken,
}

impl Hold {
    /// Whether another node took the run.
    pub(crate) fn fenced(&self) -> &CancellationToken {
        &self.fenced
    }

    /// This node lost the run: it stops writing anything for it.
    fn fence(&self, why: &str) {
        if !self.fenced.is_cancelled() {
            tracing::warn!(run = %self.run_id, node = %self.cluster.node(), %why, "another node holds the run now; this node stops its copy");
            self.fenced.cancel();
            self.tee.unregister(&self.session_id);
        }
    }

    /// Writes the run's record on the condition that this node wrote its
    /// last revision; a refusal fences the node.
    pub(crate) async fn put_record(&self, summary: &RunSummary) {
        let mut revision = self.revision.lock().await;
        for _ in 0..WRITE_ATTEMPTS {
            if self.fenced.is_cancelled() {
                return;
            }
            match self.cluster.put_run_held(summary, *revision).await {
                Ok(written) => {
                    *revision = written;
                    return;
                }
                Err(HeldWriteError::Fenced(why)) => {
                    let holder = self.cluster.run_holder(&self.run_id).await;
                    match self.after_refusal(holder, &why) {
                        Some(at) => *revision = at,
                        None => return,
                    }
                }
                Err(HeldWriteError::Failed(err)) => {
                    tracing::warn!(run = %self.run_id, %err, "the run's record was not shared");
                    return;
                }
            }
        }
    }

    /// What follows a refused write, from who wrote last where it was meant
    /// to go ([`fencing::after_refusal`]): the sequence to write after, or
    /// `None` once the hold is fenced.
    fn after_refusal(
        &self,
        last: Result<Option<(Option<String>, u64)>, troupe_cluster::ClusterError>,
        why: &str,
    ) -> Option<u64> {
        let (writer, at) = match last {
            Ok(Some((writer, at))) => (writer, at),
            // Refused, yet nothing is there: nobody else's claim.
            Ok(None) => (None, 0),
            Err(err) => {
                tracing::warn!(run = %self.run_id, %err, "who wrote last could not be read");
                self.fence(why);
                return None;
            }
        };
        match fencing::after_refusal(writer.as_deref(), self.cluster.node()) {
            fencing::AfterRefusal::WriteAfter => Some(at),
            fencing::AfterRefusal::Fenced => {
                self.fence(why);
                None
            }
        }
    }

    /// Publishes an event of the run on the condition that this node
    /// published the run's last event; a refusal fences the node.
    pub(crate) async fn publish_event(&self, event: &RunEvent) {
        for _ in 0..WRITE_ATTEMPTS {
            if self.fenced.is_cancelled() {
                return;
            }
            let mut last = self.events_last.lock().await;
            match self
                .cluster
                .publish_event_held(event, *last, self.traceparent.as_deref())
                .await
            {
                Ok(sequence) => {
                    *last = sequence;
                    return;
                }
                Err(HeldWriteError::Fenced(why)) => {
                    let writer = self.cluster.last_event_writer(&self.run_id).await;
                    match self.after_refusal(writer, &why) {
                        Some(sequence) => *last = sequence,
                        None => return,
                    }
                }
                Err(HeldWriteError::Failed(err)) => {
                    tracing::warn!(run = %self.run_id, seq = event.seq, %err, "an event was not published; trying again");
                    drop(last);
                    tokio::time::sleep(WRITE_RETRY).await;
                }
            }
        }
        tracing::warn!(run = %self.run_id, seq = event.seq, "an event was not published");
    }

    /// Publishes one write of the run's session after `expected`; the new
    /// last sequence, or `None` when this node was fenced.
    async fn publish_session(&self, record: &SessionRecord, mut expected: u64) -> Option<u64> {
        for _ in 0..WRITE_ATTEMPTS {
            if self.fenced.is_cancelled() {
                return None;
            }
            match self.cluster.publish_session(record, expected).await {
                Ok(sequence) => {
                    self.tee.set_synced(&self.session_id, sequence);
                    return Some(sequence);
                }
                Err(HeldWriteError::Fenced(why)) => {
                    let writer = self.cluster.last_session_writer(&self.session_id).await;
                    expected = self.after_refusal(writer, &why)?;
                }
                Err(HeldWriteError::Failed(err)) => {
                    tracing::warn!(session = %self.session_id, %err, "a session write was not shared; trying again");
                    tokio::time::sleep(WRITE_RETRY).await;
                }
            }
        }
        tracing::warn!(session = %self.session_id, "a session write was not shared");
        Some(expected)
    }
}

/// Claims run `summary.run_id` for this node at the record's `revision`:
/// the hold, or `None` when another node claimed it first (or the server
/// did not take the claim).
pub(crate) async fn claim(
    cluster: &Cluster,
    tee: &Arc<SessionTee>,
    summary: &RunSummary,
    revision: u64,
    traceparent: Option<String>,
) -> Option<Arc<Hold>> {
    let mut claimed = summary.clone();
    claimed.node = Some(cluster.node().to_string());
    match cluster.put_run_held(&claimed, revision).await {
        Ok(revision) => Some(Arc::new(Hold {
            run_id: summary.run_id.clone(),
            session_id: summary.session_id.clone(),
            cluster: cluster.clone(),
            tee: tee.clone(),
            revision: tokio::sync::Mutex::new(revision),
            events_last: tokio::sync::Mutex::new(0),
            traceparent,
            fenced: CancellationToken::new(),
            ended: CancellationToken::new(),
        })),
        Err(err) => {
            tracing::info!(run = %summary.run_id, %err, "the run was not claimed");
            None
        }
    }
}

/// Starts copying the writes of the held run's session to the cluster,
/// after the stream's sequence `last_seq`; ends once the hold is fenced or
/// the run's session is released ([`release`]).
pub(crate) fn copy_session(hold: &Arc<Hold>, last_seq: u64) {
    let writes = hold.tee.register(&hold.session_id);
    copy_session_writes(hold, writes, last_seq);
}

/// From now on, the writes of `session_id` this node's store makes are
/// kept for [`copy_session_writes`] (a run that continues the session here
/// starts writing as soon as it is submitted).
pub(crate) fn watch_session(
    tee: &SessionTee,
    session_id: &str,
) -> mpsc::UnboundedReceiver<TeedWrite> {
    tee.register(session_id)
}

/// A hold on a run that continues a session on the node it was submitted
/// to: no submission and no claim, only the session's writes, published on
/// the same condition as those of a run taken from the queue.
pub(crate) fn hold_session(
    cluster: &Cluster,
    tee: &Arc<SessionTee>,
    run_id: &str,
    session_id: &str,
) -> Arc<Hold> {
    Arc::new(Hold {
        run_id: run_id.to_string(),
        session_id: session_id.to_string(),
        cluster: cluster.clone(),
        tee: tee.clone(),
        revision: tokio::sync::Mutex::new(0),
        events_last: tokio::sync::Mutex::new(0),
        traceparent: None,
        fenced: CancellationToken::new(),
        ended: CancellationToken::new(),
    })
}

/// Publishes `writes` of the held run's session after the stream's
/// sequence `last_seq`, in order, until the hold is fenced or the run's
/// session is released ([`release`]).
pub(crate) fn copy_session_writes(
    hold: &Arc<Hold>,
    mut writes: mpsc::UnboundedReceiver<TeedWrite>,
    last_seq: u64,
) {
    let hold = hold.clone();
    tokio::spawn(async move {
        let mut expected = last_seq;
        loop {
            let write = tokio::select! {
                write = writes.recv() => write,
                () = hold.fenced.cancelled() => None,
            };
            let Some(write) = write else { return };
            for record in session_records(&hold.session_id, hold.cluster.node(), write) {
                match hold.publish_session(&record, expected).await {
                    Some(sequence) => expected = sequence,
                    None => return,
                }
            }
        }
    });
}

/// The run ended here: its session's writes are no longer copied (those
/// already handed over are still published).
pub(crate) fn release(hold: &Hold) {
    hold.tee.unregister(&hold.session_id);
    hold.ended.cancel();
}

/// Cancels the local run once the hold is fenced (until the run ended
/// here).
pub(crate) fn stop_when_fenced(hold: &Arc<Hold>, runtime: troupe_actors::Runtime) {
    let hold = hold.clone();
    tokio::spawn(async move {
        tokio::select! {
            // A fenced run is cancelled even when it ended here since.
            biased;
            () = hold.fenced.cancelled() => {}
            () = hold.ended.cancelled() => return,
        }
        match runtime.cancel(&hold.run_id).await {
            Ok(()) => {
                tracing::warn!(run = %hold.run_id, "cancelled the copy of a run another node holds")
            }
            Err(err) => tracing::debug!(run = %hold.run_id, %err, "the fenced run had ended"),
        }
    });
}

/// The cluster's records of one store write: one record, or one per
/// message when together they would be larger than a message may be (a
/// single message larger than that is left out, and logged).
pub(crate) fn session_records(
    session_id: &str,
    node: &str,
    write: TeedWrite,
) -> Vec<SessionRecord> {
    let record = |write| SessionRecord {
        v: VERSION,
        session_id: session_id.to_string(),
        node: node.to_string(),
        write,
    };
    let value = |value: Result<serde_json::Value, serde_json::Error>| {
        value.unwrap_or_else(|err| {
            tracing::warn!(%err, "a session write could not be encoded");
            serde_json::Value::Null
        })
    };
    let whole = match write {
        TeedWrite::Created(new) => SessionWrite::Created {
            session: value(serde_json::to_value(new)),
        },
        TeedWrite::Messages {
            messages,
            truncate_at,
        } => SessionWrite::Messages {
            messages,
            truncate_at,
        },
        TeedWrite::PendingResult(result) => SessionWrite::PendingResult { result },
        TeedWrite::PendingCleared => SessionWrite::PendingCleared,
        TeedWrite::Marker(marker) => SessionWrite::Marker {
            marker: value(serde_json::to_value(marker)),
        },
        TeedWrite::Ledger(entry) => SessionWrite::Ledger {
            entry: value(serde_json::to_value(entry)),
        },
        TeedWrite::Run(run) => SessionWrite::Run {
            run: value(serde_json::to_value(run)),
        },
    };
    let whole = record(whole);
    if fits(&whole) {
        return vec![whole];
    }
    let SessionWrite::Messages {
        messages,
        truncate_at,
    } = whole.write
    else {
        tracing::warn!(session = %session_id, "a session write is too large for the cluster; left out");
        return Vec::new();
    };
    let count = messages.len();
    let mut records = Vec::with_capacity(count);
    for (position, message) in messages.into_iter().enumerate() {
        let one = record(SessionWrite::Messages {
            messages: vec![message],
            truncate_at: (position + 1 == count).then_some(truncate_at).flatten(),
        });
        if fits(&one) {
            records.push(one);
        } else {
            tracing::warn!(session = %session_id, "a message is too large for the cluster; left out of its copy of the session");
        }
    }
    records
}

/// Writes one write of the cluster's copy of session `session_id` into
/// this node's store (a run record of `except_run` is left out). Blocking.
fn apply_write(
    store: &Store,
    session_id: &str,
    write: &SessionWrite,
    except_run: Option<&str>,
) -> Result<(), StoreError> {
    match write {
        SessionWrite::Created { session } => {
            let new: NewSession = decoded(session)?;
            if new.id != session_id {
                return Err(foreign("a session", &new.id));
            }
            store.create_session(&new)?;
        }
        SessionWrite::Messages {
            messages,
            truncate_at,
        } => {
            store.put_messages(session_id, messages.iter().map(|(i, m)| (*i, m)))?;
            if let Some(len) = truncate_at {
                store.truncate_history(session_id, *len)?;
            }
        }
        SessionWrite::PendingResult { result } => store.put_pending_result(session_id, result)?,
        SessionWrite::PendingCleared => store.clear_pending_results(session_id)?,
        SessionWrite::Marker { marker } => {
            store.put_marker(session_id, &decoded::<CompactionMarker>(marker)?)?
        }
        SessionWrite::Ledger { entry } => {
            store.put_ledger_entry(session_id, &decoded::<LedgerEntry>(entry)?)?
        }
        SessionWrite::Claimed { .. } => {}
        SessionWrite::Run { run } => {
            let run: RunRecord = decoded(run)?;
            if run.session_id != session_id {
                return Err(foreign("a run of another session", &run.run_id));
            }
            if except_run != Some(run.run_id.as_str()) {
                store.put_run(&run)?;
            }
        }
    }
    Ok(())
}

/// Whether a record fits in one cluster message.
fn fits(record: &SessionRecord) -> bool {
    serde_json::to_vec(record).is_ok_and(|bytes| bytes.len() <= MAX_MESSAGE_BYTES)
}

/// Writes a session the cluster holds into this node's store, which must
/// not hold it, as the node that wrote it left it: its records in order
/// (a run record of `except_run` is left out: that run goes on here), then
/// a node-failure result for each call that has neither a result nor a
/// pending one. Blocking.
pub(crate) fn import_session(
    store: &Store,
    session_id: &str,
    stored: &StoredSession,
    except_run: Option<&str>,
) -> Result<(), StoreError> {
    if store.session(session_id)?.is_some() {
        return Err(StoreError::AlreadyExists {
            what: format!("session {session_id}"),
        });
    }
    let replayed = replay_session(store, session_id, stored, except_run);
    if replayed.is_err() && store.session(session_id)?.is_some() {
        // Half a session is worse than none: what was written goes.
        store.remove_session(session_id)?;
    }
    replayed
}

/// [`import_session`] into a store that did not hold the session.
fn replay_session(
    store: &Store,
    session_id: &str,
    stored: &StoredSession,
    except_run: Option<&str>,
) -> Result<(), StoreError> {
    for record in &stored.records {
        apply_write(store, session_id, &record.write, except_run)?;
    }
    if store.session(session_id)?.is_none() {
        return Err(StoreError::NotFound {
            what: format!("session {session_id} in the cluster"),
        });
    }
    let history = store.load_history(session_id)?.messages;
    let pending = store.pending_results(session_id)?;
    let failed: Vec<ToolResult> = troupe_agent::resume::node_failure_results(&history, &pending);
    for result in &failed {
        store.put_pending_result(session_id, result)?;
    }
    store.flush()
}

/// Brings the copy of session `session_id` this node's store holds, which
/// matches the cluster's up to the stream's sequence `after`, up to the
/// cluster's: the writes the cluster holds after it, in order (a write
/// that would create the session again is refused). Blocking.
pub(crate) fn update_session(
    store: &Store,
    session_id: &str,
    stored: &StoredSession,
    after: u64,
) -> Result<(), StoreError> {
    let newer = stored
        .records
        .iter()
        .zip(&stored.sequences)
        .filter(|(_, sequence)| **sequence > after);
    for (record, _) in newer {
        if matches!(record.write, SessionWrite::Created { .. }) {
            return Err(foreign("the session created again", session_id));
        }
        apply_write(store, session_id, &record.write, None)?;
    }
    store.flush()
}

/// A store record carried as JSON.
fn decoded<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, StoreError> {
    serde_json::from_value(value.clone()).map_err(|err| StoreError::Database {
        detail: format!("a session record of the cluster does not read: {err}"),
    })
}

fn foreign(what: &str, id: &str) -> StoreError {
    StoreError::Database {
        detail: format!("the cluster's copy of the session holds {what} ({id})"),
    }
}

/// Brings this node's copy of a session up to the cluster's before a run
/// continues it here ([`fencing::session_source`]): the cluster's copy is
/// read into the store when the store does not hold the session, or holds
/// an older copy (which it replaces); a copy the store holds that is as new
/// or newer stays. Answers where the session stands in the cluster: `None`
/// when the cluster holds none of it, else the stream's sequence of its last
/// write (the run's writes go after it), and whether it was loaded.
pub(crate) async fn load_session(
    cluster: &Cluster,
    runtime: &troupe_actors::Runtime,
    store: &Store,
    tee: &SessionTee,
    session_id: &str,
) -> Result<(Option<u64>, bool), String> {
    let held = store
        .session(session_id)
        .map_err(|err| err.to_string())?
        .is_some();
    let cluster_last = cluster
        .last_session_writer(session_id)
        .await
        .map_err(|err| err.to_string())?
        .map_or(0, |(_, sequence)| sequence);
    let in_cluster = (cluster_last > 0).then_some(cluster_last);
    let local_at = tee.synced_at(session_id);
    match fencing::session_source(held, local_at, cluster_last) {
        fencing::SessionSource::Local | fencing::SessionSource::Missing => {
            return Ok((in_cluster, false));
        }
        fencing::SessionSource::Cluster => {}
    }
    let stored = cluster
        .stored_session(session_id)
        .await
        .map_err(|err| err.to_string())?;
    if stored.records.is_empty() {
        return Ok((in_cluster, false));
    }
    let last_seq = stored.last_seq;
    let id = session_id.to_string();
    match local_at.filter(|_| held) {
        // The store's copy is older: the writes made since go on top of it,
        // and the runtime forgets the history it kept of it.
        Some(after) => runtime
            .rewrite_session(
                session_id,
                Box::new(move |store| update_session(store, &id, &stored, after)),
            )
            .await
            .map_err(|err| err.to_string())?,
        None => {
            let import_store = store.clone();
            tokio::task::spawn_blocking(move || import_session(&import_store, &id, &stored, None))
                .await
                .map_err(|err| err.to_string())?
                .map_err(|err| err.to_string())?;
        }
    }
    tee.set_synced(session_id, last_seq);
    Ok((Some(last_seq), true))
}

/// What a node that claimed a run another node held does before the run
/// goes on here: the run's session loaded into its store, the claim marked
/// in the session's stream, the run's events so far copied into its store
/// and a `run_moved` event after them, and the session's writes copied from
/// then on. Answers the `seq` the run's next event has, or why the run
/// cannot go on here.
pub(crate) async fn take_over(
    hold: &Arc<Hold>,
    store: &Store,
    stored: StoredSession,
    from_node: &str,
) -> Result<u64, String> {
    let (import_store, session_id, run_id) =
        (store.clone(), hold.session_id.clone(), hold.run_id.clone());
    let last_seq = stored.last_seq;
    tokio::task::spawn_blocking(move || {
        import_session(&import_store, &session_id, &stored, Some(&run_id))
    })
    .await
    .map_err(|err| err.to_string())?
    .map_err(|err| err.to_string())?;
    let claimed = SessionRecord {
        v: VERSION,
        session_id: hold.session_id.clone(),
        node: hold.cluster.node().to_string(),
        write: SessionWrite::Claimed {
            run_id: hold.run_id.clone(),
        },
    };
    let Some(last_seq) = hold.publish_session(&claimed, last_seq).await else {
        return Err("another node claimed the run's session first".into());
    };
    let (last_event, last_event_at) = hold
        .cluster
        .last_event(&hold.run_id)
        .await
        .map_err(|err| err.to_string())?;
    *hold.events_last.lock().await = last_event_at;
    let mut events = earlier_events(&hold.cluster, &hold.run_id, last_event).await?;
    let moved = RunEvent {
        seq: fencing::moved_event_seq(last_event),
        run_id: hold.run_id.clone(),
        session_id: hold.session_id.clone(),
        agent_path: "main".into(),
        ts: super::api::timestamp(&chrono::Utc::now()),
        kind: EventKind::RunMoved {
            from_node: from_node.to_string(),
            to_node: hold.cluster.node().to_string(),
        },
    };
    hold.publish_event(&moved).await;
    if hold.fenced.is_cancelled() {
        return Err("another node claimed the run first".into());
    }
    let first_seq = fencing::first_seq_after_move(moved.seq);
    events.push(moved);
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        events
            .iter()
            .try_for_each(|event| store.append_event(event))
            .and_then(|()| store.flush())
    })
    .await
    .map_err(|err| err.to_string())?
    .map_err(|err| err.to_string())?;
    hold.tee.set_synced(&hold.session_id, last_seq);
    copy_session(hold, last_seq);
    Ok(first_seq)
}

/// The events of run `run_id` the cluster holds, up to `last_seq`.
async fn earlier_events(
    cluster: &Cluster,
    run_id: &str,
    last_seq: u64,
) -> Result<Vec<RunEvent>, String> {
    let mut events = Vec::new();
    if last_seq == 0 {
        return Ok(events);
    }
    let mut reader = cluster
        .events(run_id, 1)
        .await
        .map_err(|err| err.to_string())?;
    while events
        .last()
        .is_none_or(|event: &RunEvent| event.seq < last_seq)
    {
        match tokio::time::timeout(EVENTS_WAIT, reader.next()).await {
            Ok(Some(event)) => events.push(event),
            Ok(None) | Err(_) => return Err("the run's events could not be read".into()),
        }
    }
    Ok(events)
}

/// The message that continues a run on the node that took it over.
pub(crate) fn continuation_prompt(from_node: &str, to_node: &str) -> String {
    format!(
        "(The cluster node {from_node} running this run stopped answering; the run goes on on node {to_node}. \
         A tool call that was running there was interrupted and not run again. Continue the task.)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::Message;

    #[test]
    fn a_write_too_large_for_one_message_is_split_by_message() {
        let big = "x".repeat(MAX_MESSAGE_BYTES / 2);
        let write = TeedWrite::Messages {
            messages: vec![
                (0, Message::user_text(big.clone())),
                (1, Message::assistant_text(big.clone())),
            ],
            truncate_at: Some(2),
        };
        let records = session_records("s", "n", write);
        assert_eq!(records.len(), 2);
        assert!(records.iter().all(fits));
        assert!(matches!(
            &records[1].write,
            SessionWrite::Messages {
                truncate_at: Some(2),
                ..
            }
        ));
        assert!(matches!(
            &records[0].write,
            SessionWrite::Messages {
                truncate_at: None,
                ..
            }
        ));
        // A message larger than a cluster message is left out, never sent.
        let huge = TeedWrite::Messages {
            messages: vec![(0, Message::user_text("y".repeat(MAX_MESSAGE_BYTES + 1)))],
            truncate_at: None,
        };
        assert!(session_records("s", "n", huge).is_empty());
    }

    #[test]
    fn a_session_read_back_from_its_records_is_the_session_written() {
        let written = tempfile::tempdir().unwrap();
        let source = Store::open(written.path()).unwrap();
        let tee = Arc::new(SessionTee::default());
        let mut writes = tee.register("s1");
        source.set_tee(tee.clone());
        source
            .create_session(&NewSession {
                id: "s1".into(),
                cwd: "/tmp".into(),
                provider: "p".into(),
                model: "m".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            })
            .unwrap();
        source
            .put_message("s1", 0, &Message::user_text("go"))
            .unwrap();
        let call =
            troupe_protocol::model::ContentBlock::ToolCall(troupe_protocol::model::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                input: "{}".into(),
            });
        source
            .put_message(
                "s1",
                1,
                &Message {
                    role: troupe_protocol::model::Role::Assistant,
                    content: vec![call],
                },
            )
            .unwrap();
        let mut stored = StoredSession::default();
        while let Ok(write) = writes.try_recv() {
            stored.records.extend(session_records("s1", "a", write));
        }
        assert_eq!(stored.records.len(), 3);
        let read = tempfile::tempdir().unwrap();
        let target = Store::open(read.path()).unwrap();
        import_session(&target, "s1", &stored, None).unwrap();
        let opened = troupe_loader::session::open_session(&target, "s1")
            .unwrap()
            .unwrap();
        // The running call is answered with the node failure, not re-run.
        let result = opened
            .history
            .iter()
            .flat_map(|message| message.tool_results_iter())
            .next()
            .unwrap();
        assert_eq!(result.call_id, "c1");
        assert!(
            serde_json::to_string(result)
                .unwrap()
                .contains("interrupted by a node failure")
        );
        troupe_agent::validate_history(&opened.history).unwrap();
        // A store that already holds the session refuses it.
        assert!(import_session(&target, "s1", &stored, None).is_err());
    }

    #[test]
    fn a_copy_naming_another_session_or_not_reading_is_refused_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let record = |write| SessionRecord {
            v: VERSION,
            session_id: "s1".into(),
            node: "a".into(),
            write,
        };
        let foreign = StoredSession {
            records: vec![record(SessionWrite::Created {
                session: serde_json::json!({
                    "id": "other", "cwd": "/tmp", "provider": "p", "model": "m", "parent": null
                }),
            })],
            last_seq: 1,
            ..Default::default()
        };
        let err = import_session(&store, "s1", &foreign, None).unwrap_err();
        assert!(err.to_string().contains("other"), "{err}");
        let unreadable = StoredSession {
            records: vec![record(SessionWrite::Created {
                session: serde_json::json!({"id": 7}),
            })],
            last_seq: 1,
            ..Default::default()
        };
        let err = import_session(&store, "s1", &unreadable, None).unwrap_err();
        assert!(err.to_string().contains("does not read"), "{err}");
        // A copy that breaks off half way leaves nothing behind.
        let broken = StoredSession {
            records: vec![
                record(SessionWrite::Created {
                    session: serde_json::json!({
                        "id": "s1", "cwd": "/tmp", "provider": "p", "model": "m", "parent": null
                    }),
                }),
                record(SessionWrite::Marker {
                    marker: serde_json::json!("not a marker"),
                }),
            ],
            last_seq: 2,
            ..Default::default()
        };
        assert!(import_session(&store, "s1", &broken, None).is_err());
        assert!(store.session("s1").unwrap().is_none());
        // Messages without the session they belong to are refused too.
        let headless = StoredSession {
            records: vec![record(SessionWrite::Messages {
                messages: vec![(0, Message::user_text("go"))],
                truncate_at: None,
            })],
            last_seq: 1,
            ..Default::default()
        };
        assert!(import_session(&store, "s1", &headless, None).is_err());
        assert!(store.list_sessions().unwrap().is_empty());
    }

    #[test]
    fn an_older_copy_takes_only_the_writes_made_after_it_and_never_a_new_session() {
        let record = |write| SessionRecord {
            v: VERSION,
            session_id: "s1".into(),
            node: "b".into(),
            write,
        };
        let created = record(SessionWrite::Created {
            session: serde_json::json!({
                "id": "s1", "cwd": "/tmp", "provider": "p", "model": "m", "parent": null
            }),
        });
        let messages = |from: u64, texts: &[&str]| {
            record(SessionWrite::Messages {
                messages: texts
                    .iter()
                    .enumerate()
                    .map(|(i, text)| (from + i as u64, Message::user_text(*text)))
                    .collect(),
                truncate_at: None,
            })
        };
        let stored = StoredSession {
            records: vec![
                created.clone(),
                messages(0, &["one", "two"]),
                messages(2, &["three"]),
            ],
            sequences: vec![3, 5, 9],
            last_seq: 9,
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // This copy matches the stream up to 5, and holds a change of its
        // own at index 1 that the cluster's later writes do not touch.
        let older = StoredSession {
            records: stored.records[..2].to_vec(),
            sequences: vec![3, 5],
            last_seq: 5,
        };
        import_session(&store, "s1", &older, None).unwrap();
        store
            .put_message("s1", 1, &Message::user_text("two, here"))
            .unwrap();
        update_session(&store, "s1", &stored, 5).unwrap();
        let texts: Vec<String> = store
            .load_history("s1")
            .unwrap()
            .messages
            .iter()
            .map(|message| serde_json::to_string(message).unwrap())
            .collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(
            texts[1].contains("two, here"),
            "earlier writes not replayed"
        );
        assert!(texts[2].contains("three"));
        // A write creating the session again is refused.
        let recreated = StoredSession {
            records: vec![created],
            sequences: vec![12],
            last_seq: 12,
        };
        assert!(update_session(&store, "s1", &recreated, 9).is_err());
    }
}
