//! A daemon that is a node of a cluster (`troupe serve --cluster URL`): it
//! hands the runs it accepts to the cluster's work queue, takes runs from
//! it while it has room, publishes the events and records of the runs it
//! runs, shows every run of the cluster, and routes actions on a run to the
//! node that runs it (see docs/cluster.md).
//!
//! Placement: `POST /v1/runs` chooses the run and session ids, writes the
//! run's record (no node yet) and publishes the request; the answer is
//! `201` at once. A node takes one submission whenever one of its
//! `capacity` slots is free, prepares it as a local request is prepared,
//! starts it under the given ids below a `placement` span that continues
//! the submitter's trace, renews its lease every third of it and
//! acknowledges it once the run has ended. A run that continues a session
//! runs on the node it was submitted to, which loads the session from the
//! cluster when its store does not hold it.
//!
//! Failover (`super::failover`): a node claims each run it takes by a
//! revision-conditional write of its record (`place`); a run delivered
//! again after its node's lease lapsed is taken over (`take_over`), and a
//! node whose conditional write is refused stops its copy.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use troupe_actors::{EventSubscription, SessionTarget};
use troupe_cluster::fencing::{self, ClaimDecision};
use troupe_cluster::{ActionRequests, Cluster, ClusterSettings, StoredSession, Taken, rules};
use troupe_protocol::api::{self as wire, RunRequest, RunState, RunSummary};
use troupe_protocol::cluster::{Action, RunAction, Submission, VERSION};
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Usage;

use super::api::{self, ApiState};
use super::error::ApiError;
use super::failover::{self, Hold, SessionTee};

/// How long one fetch from the work queue waits for a submission.
const TAKE_WAIT: Duration = Duration::from_secs(5);

/// How long the node waits after the server refused a fetch.
const TAKE_RETRY: Duration = Duration::from_secs(1);

/// How `troupe serve` was told to join a cluster.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterFlags {
    /// `--cluster` or `TROUPE_CLUSTER`.
    pub url: Option<String>,
    /// `--node`.
    pub node: Option<String>,
    /// `--capacity`.
    pub capacity: Option<u32>,
}

/// The settings a node joins with: the flags, then the user's `[cluster]`
/// table; `None` when neither names a server.
pub(crate) fn settings(
    flags: &ClusterFlags,
    file: &troupe_config::ClusterFile,
    host: &str,
    pid: u32,
) -> Option<ClusterSettings> {
    let url = flags.url.clone().or_else(|| file.url.clone())?;
    Some(ClusterSettings {
        url,
        credentials: file.credentials.clone(),
        node: flags
            .node
            .clone()
            .unwrap_or_else(|| troupe_cluster::settings::default_node_name(host, pid)),
        capacity: flags
            .capacity
            .unwrap_or(troupe_cluster::settings::DEFAULT_CAPACITY),
        lease: file
            .lease_secs
            .map_or(troupe_cluster::settings::DEFAULT_LEASE, Duration::from_secs),
        replicas: file
            .replicas
            .unwrap_or(troupe_cluster::replicas::DEFAULT_REPLICAS),
    })
}

/// This machine's host name (`node` when it cannot be read).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "node".into())
}

/// The daemon's membership of the cluster.
pub(crate) struct ClusterNode {
    /// The connection.
    pub cluster: Cluster,
    /// One permit per run this node may run at once.
    slots: Arc<Semaphore>,
    /// The runs this node runs now.
    running: std::sync::Mutex<BTreeSet<String>>,
    /// Where the daemon's API listens.
    addr: String,
    /// The tasks that share the runs of this node with the cluster.
    mirrors: tokio_util::task::TaskTracker,
    /// The heartbeat's task, ended as the node leaves.
    heartbeat: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether the node takes no new runs (`troupe cluster drain`).
    pub(crate) draining: tokio::sync::watch::Sender<bool>,
    /// Copies the sessions of the runs this node holds to the cluster.
    tee: Arc<SessionTee>,
}

impl ClusterNode {
    /// A node of `cluster` whose API listens on `addr`.
    pub(crate) fn new(cluster: Cluster, addr: String) -> Arc<Self> {
        let capacity = usize::try_from(cluster.settings().capacity).unwrap_or(1);
        Arc::new(Self {
            cluster,
            slots: Arc::new(Semaphore::new(capacity)),
            running: std::sync::Mutex::default(),
            addr,
            mirrors: tokio_util::task::TaskTracker::new(),
            heartbeat: std::sync::Mutex::default(),
            draining: tokio::sync::watch::Sender::new(false),
            tee: Arc::default(),
        })
    }

    /// Its name.
    pub(crate) fn name(&self) -> &str {
        self.cluster.node()
    }

    /// Leaves the cluster as the daemon stops (after its runs were
    /// cancelled): waits, at most `grace`, until the last events and records
    /// of its runs are shared and their submissions acknowledged, then
    /// removes the node's record.
    pub(crate) async fn leave(&self, grace: Duration) {
        self.mirrors.close();
        if tokio::time::timeout(grace, self.mirrors.wait())
            .await
            .is_err()
        {
            tracing::warn!("runs were still being shared with the cluster when the node left");
        }
        let heartbeat = self
            .heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(heartbeat) = heartbeat {
            heartbeat.abort();
            let _ = heartbeat.await;
        }
        if let Err(err) = self.cluster.leave().await {
            tracing::warn!(%err, "the node's record was not removed");
        }
    }

    /// Whether it takes no new runs.
    pub(crate) fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    pub(crate) fn running(&self) -> Vec<String> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.iter().cloned().collect()
    }

    fn is_running(&self, run_id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.contains(run_id)
    }

    fn set_running(&self, run_id: &str, running: bool) {
        let mut runs = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running {
            runs.insert(run_id.to_string());
        } else {
            runs.remove(run_id);
        }
    }
}

/// Starts the node's heartbeat and its taking of runs; both end when the
/// daemon stops.
pub(crate) fn start(state: ApiState, node: Arc<ClusterNode>) {
    state.store.set_tee(node.tee.clone());
    let beating = tokio::spawn(heartbeat(node.clone(), state.stopping.clone()));
    *node.heartbeat.lock().unwrap_or_else(|p| p.into_inner()) = Some(beating);
    super::cluster_ops::answer_commands(&state, &node);
    tokio::spawn(take_runs(state, node));
}

/// Writes the node's record every third of the lease.
async fn heartbeat(node: Arc<ClusterNode>, stopping: tokio_util::sync::CancellationToken) {
    let mut ticks = tokio::time::interval(rules::renewal_period(node.cluster.settings().lease));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stopping.cancelled() => return,
        }
        write_heartbeat(&node).await;
    }
}

/// Writes the node's record now.
pub(crate) async fn write_heartbeat(node: &ClusterNode) {
    let draining = node.is_draining();
    if let Err(err) = node
        .cluster
        .heartbeat(node.running(), draining, &node.addr)
        .await
    {
        tracing::warn!(%err, "the node's heartbeat was not written");
    }
}

/// Takes one submission whenever a slot is free, until the daemon closes.
async fn take_runs(state: ApiState, node: Arc<ClusterNode>) {
    loop {
        let permit = tokio::select! {
            permit = node.slots.clone().acquire_owned() => permit,
            () = state.stopping.cancelled() => return,
        };
        let Ok(permit) = permit else { return };
        if state.closing.load(std::sync::atomic::Ordering::SeqCst)
            || !super::cluster_ops::wait_while_draining(&node, &state.stopping).await
        {
            return;
        }
        let taken = tokio::select! {
            taken = node.cluster.take(TAKE_WAIT) => taken,
            () = state.stopping.cancelled() => return,
        };
        match taken {
            Ok(Some(taken)) if state.closing.load(std::sync::atomic::Ordering::SeqCst) => {
                // Taken as the daemon began to stop: another node runs it.
                if let Err(err) = taken.release().await {
                    tracing::warn!(%err, "a submission was not released");
                }
                return;
            }
            Ok(Some(taken)) if node.is_draining() => {
                // Taken as the node began to drain: another node runs it.
                if let Err(err) = taken.release().await {
                    tracing::warn!(%err, "a submission was not released");
                }
            }
            Ok(Some(taken)) => {
                node.mirrors
                    .spawn(run_taken(state.clone(), node.clone(), taken, permit));
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(%err, "no submission could be taken");
                tokio::time::sleep(TAKE_RETRY).await;
            }
        }
    }
}

/// Runs a submission this node took, holding `permit` until it ends.
async fn run_taken(
    state: ApiState,
    node: Arc<ClusterNode>,
    taken: Taken,
    permit: OwnedSemaphorePermit,
) {
    let Submission {
        run_id,
        session_id,
        submitted_by,
        request,
        ..
    } = taken.submission.clone();
    let span = troupe_telemetry::genai::placement_span("take", &run_id, node.name());
    if let Some(traceparent) = &taken.traceparent
        && let Err(err) = troupe_telemetry::propagation::set_remote_parent(&span, traceparent)
    {
        tracing::debug!(%err, "the submission's trace context was not read");
    }
    if node.is_running(&run_id) {
        // Delivered again while this node still runs it (a renewal did not
        // reach the server in time): the lease is renewed on this delivery
        // too, and the run goes on.
        if let Err(err) = taken.progress().await {
            tracing::warn!(run = %run_id, %err, "the run's lease was not renewed");
        }
        return;
    }
    let hold = match place(&state, &node, &taken, &run_id, &session_id).await {
        Placed::Start(hold) => hold,
        Placed::TakeOver(hold, from_node, stored) => {
            let resumed = RunRequest {
                session_id: Some(session_id.clone()),
                prompt: failover::continuation_prompt(&from_node, node.name()),
                ..request
            };
            take_over(state, node, taken, hold, (from_node, stored), resumed).await;
            drop(permit);
            return;
        }
        Placed::Done => return,
    };
    failover::copy_session(&hold, 0);
    failover::stop_when_fenced(&hold, state.runtime.clone());
    let prompt = request.prompt.clone();
    let request = match super::cluster_ops::taken_here(&state, request, &run_id).await {
        Ok(request) => request,
        Err(message) => {
            failover::release(&hold);
            failed_to_start(&node, &run_id, &session_id, &prompt, &message).await;
            finish_message(&taken).await;
            return;
        }
    };
    let prepared = match (state.prepare)(RunRequest {
        session_id: None,
        ..request
    })
    .await
    {
        Ok(prepared) => prepared,
        Err(err) => {
            failover::release(&hold);
            failed_to_start(&node, &run_id, &session_id, &prompt, &err.message).await;
            finish_message(&taken).await;
            return;
        }
    };
    let mut submission = prepared.submission;
    submission.session = SessionTarget::New(Some(session_id.clone()));
    let handle = match state
        .runtime
        .submit_as(submission, run_id.clone(), span.clone())
        .await
    {
        Ok(handle) => handle,
        Err(err) => {
            failover::release(&hold);
            failed_to_start(&node, &run_id, &session_id, &prompt, &err.to_string()).await;
            finish_message(&taken).await;
            return;
        }
    };
    tracing::info!(run = %run_id, from = %submitted_by, "took a run from the cluster");
    for warning in prepared.warnings {
        tracing::warn!(run = %run_id, %warning, "a queued run started with a warning");
    }
    mirror(state, node, run_id, handle.events, Some(taken), Some(hold)).await;
    drop(permit);
}

/// What a node does with a submission it took.
enum Placed {
    /// The node claimed a run no node ran yet: it starts it.
    Start(Arc<Hold>),
    /// The node claimed a run whose node let its lease lapse (named), with
    /// the run's session as the cluster holds it: it continues it.
    TakeOver(Arc<Hold>, String, StoredSession),
    /// Nothing to run here (done with, or left to the queue).
    Done,
}

/// Decides, from the run's record, whether this node claims the run it
/// took ([`fencing::claim_decision`]), and claims it.
async fn place(
    state: &ApiState,
    node: &ClusterNode,
    taken: &Taken,
    run_id: &str,
    session_id: &str,
) -> Placed {
    let entry = match node.cluster.run_entry(run_id).await {
        Ok(entry) => entry,
        Err(err) => {
            // Left unacknowledged: the queue delivers it again.
            tracing::warn!(run = %run_id, %err, "the run's record could not be read");
            return Placed::Done;
        }
    };
    let decision = fencing::claim_decision(
        entry.as_ref().map(|(run, _)| run),
        node.name(),
        taken.deliveries,
    );
    let claim = |entry: Option<(RunSummary, u64)>| async {
        let (summary, revision) = entry?;
        failover::claim(
            &node.cluster,
            &node.tee,
            &summary,
            revision,
            taken.traceparent.clone(),
        )
        .await
    };
    match decision {
        ClaimDecision::Drop => {
            finish_message(taken).await;
            Placed::Done
        }
        ClaimDecision::Leave => Placed::Done,
        ClaimDecision::Start if state.store.run(run_id).ok().flatten().is_some() => {
            lost_run(node, taken, run_id).await;
            Placed::Done
        }
        ClaimDecision::Start => claim(entry).await.map_or(Placed::Done, Placed::Start),
        ClaimDecision::TakeOver { from_node } => {
            let stored = match node.cluster.stored_session(session_id).await {
                Ok(stored) => stored,
                Err(err) => {
                    tracing::warn!(run = %run_id, %err, "the run's session could not be read from the cluster");
                    StoredSession::default()
                }
            };
            let here = state.store.session(session_id).ok().flatten().is_some();
            if stored.records.is_empty() || here {
                // Nothing to continue from (or a copy of its own here):
                // what it had done cannot be continued here.
                lost_run(node, taken, run_id).await;
                return Placed::Done;
            }
            match claim(entry).await {
                Some(hold) => Placed::TakeOver(hold, from_node, stored),
                None => Placed::Done,
            }
        }
    }
}

/// Continues on this node a run whose node let its lease lapse: its
/// session loaded from the cluster and repaired, a `run_moved` event and
/// span, then the run under its own id with `request` (its session, a
/// message saying the run moved).
async fn take_over(
    state: ApiState,
    node: Arc<ClusterNode>,
    taken: Taken,
    hold: Arc<Hold>,
    (from_node, stored): (String, StoredSession),
    request: RunRequest,
) {
    let run_id = taken.submission.run_id.clone();
    let span = troupe_telemetry::genai::run_moved_span(&run_id, &from_node, node.name());
    if let Some(traceparent) = &taken.traceparent
        && let Err(err) = troupe_telemetry::propagation::set_remote_parent(&span, traceparent)
    {
        tracing::debug!(%err, "the submission's trace context was not read");
    }
    let first_seq = match failover::take_over(&hold, &state.store, stored, &from_node).await {
        Ok(first_seq) => first_seq,
        Err(err) => {
            tracing::warn!(run = %run_id, %err, "the run could not be taken over");
            if !hold.fenced().is_cancelled() {
                lost_run(&node, &taken, &run_id).await;
            }
            failover::release(&hold);
            return;
        }
    };
    failover::stop_when_fenced(&hold, state.runtime.clone());
    // As at a first start: the run's repository checked out here, and this
    // node's own keys in place of the secrets the submission left out.
    let request = match super::cluster_ops::taken_here(&state, request, &run_id).await {
        Ok(request) => request,
        Err(err) => {
            tracing::warn!(run = %run_id, %err, "a run taken over could not get its workspace");
            failover::release(&hold);
            lost_run(&node, &taken, &run_id).await;
            return;
        }
    };
    let started = match (state.prepare)(request).await {
        Ok(prepared) => state
            .runtime
            .submit_continuing(prepared.submission, run_id.clone(), first_seq, span.clone())
            .await
            .map_err(|err| err.to_string()),
        Err(err) => Err(err.message),
    };
    match started {
        Ok(handle) => {
            tracing::info!(run = %run_id, from = %from_node, "took a run over from a node that stopped answering");
            mirror(state, node, run_id, handle.events, Some(taken), Some(hold)).await;
        }
        Err(err) => {
            tracing::warn!(run = %run_id, %err, "a run taken over could not go on");
            failover::release(&hold);
            lost_run(&node, &taken, &run_id).await;
        }
    }
}

/// The copy to the cluster of the writes of a session that a run
/// continues on the node it was submitted to, from before the run starts.
pub(crate) struct SessionCopy {
    session_id: String,
    /// The stream's sequence of the session's last write in the cluster.
    last_seq: u64,
    writes: tokio::sync::mpsc::UnboundedReceiver<troupe_store::TeedWrite>,
}

/// Brings this node's copy of a session up to the cluster's (loads it when
/// the store does not hold it or holds an older copy) before a run
/// continues it here: the stream's sequence of the session's last write,
/// `None` when the cluster does not hold the session (or cannot be read),
/// whose run's writes then stay in this node's store.
pub(crate) async fn load_session(
    node: &ClusterNode,
    state: &ApiState,
    session_id: &str,
) -> Option<u64> {
    if !troupe_protocol::cluster::is_valid_token(session_id) {
        return None;
    }
    match failover::load_session(
        &node.cluster,
        &state.runtime,
        &state.store,
        &node.tee,
        session_id,
    )
    .await
    {
        Ok((last_seq, loaded)) => {
            if loaded {
                tracing::info!(session = %session_id, "loaded a session from the cluster");
            }
            if last_seq.is_none() {
                tracing::info!(session = %session_id, "the cluster holds no copy of the session; its run's writes stay on this node");
            }
            last_seq
        }
        Err(err) => {
            tracing::warn!(session = %session_id, %err, "the session could not be loaded from the cluster");
            None
        }
    }
}

impl SessionCopy {
    /// From now on, the writes of `session_id` this node's store makes are
    /// kept for the cluster, after the stream's sequence `last_seq`.
    pub(crate) fn watch(node: &ClusterNode, session_id: &str, last_seq: u64) -> Self {
        Self {
            session_id: session_id.to_string(),
            last_seq,
            writes: failover::watch_session(&node.tee, session_id),
        }
    }

    /// The run did not start: the session's writes are not kept.
    pub(crate) fn abandon(self, node: &ClusterNode) {
        node.tee.unregister(&self.session_id);
    }
}

/// Mirrors a run this node runs that was started here (it continues a
/// session this node's store holds), copying the session's writes to the
/// cluster when `copy` says the cluster holds the session.
pub(crate) fn mirror_local(
    state: &ApiState,
    node: &Arc<ClusterNode>,
    run_id: &str,
    copy: Option<SessionCopy>,
) {
    let (state, node, run_id) = (state.clone(), node.clone(), run_id.to_string());
    let hold = copy.map(|copy| {
        let hold = failover::hold_session(&node.cluster, &node.tee, &run_id, &copy.session_id);
        failover::copy_session_writes(&hold, copy.writes, copy.last_seq);
        failover::stop_when_fenced(&hold, state.runtime.clone());
        hold
    });
    node.clone().mirrors.spawn(async move {
        match state.runtime.subscribe(&run_id, 1).await {
            Ok(events) => mirror(state, node, run_id, events, None, None).await,
            Err(err) => {
                tracing::warn!(run = %run_id, %err, "the run is not shared with the cluster")
            }
        }
        if let Some(hold) = hold {
            failover::release(&hold);
        }
    });
}

/// Publishes a run's record and events to the cluster while it runs here,
/// answers actions on it and renews its lease; once it ended, writes its
/// last record and acknowledges its submission.
async fn mirror(
    state: ApiState,
    node: Arc<ClusterNode>,
    run_id: String,
    mut events: EventSubscription,
    taken: Option<Taken>,
    hold: Option<Arc<Hold>>,
) {
    node.set_running(&run_id, true);
    put_record(&state, &node, &run_id, hold.as_deref()).await;
    let mut actions = match node.cluster.serve_actions(&run_id).await {
        Ok(actions) => {
            let stop = CancellationToken::new();
            let task = tokio::spawn(answer_actions(state.clone(), actions, stop.clone()));
            Some((task, stop))
        }
        Err(err) => {
            tracing::warn!(run = %run_id, %err, "actions on the run cannot be routed here");
            None
        }
    };
    let taken = taken.map(Arc::new);
    let lease = taken.clone().map(|taken| {
        let period = rules::renewal_period(node.cluster.settings().lease);
        let (state, node, run_id, hold) =
            (state.clone(), node.clone(), run_id.clone(), hold.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                if let Err(err) = taken.progress().await {
                    tracing::warn!(%err, "the run's lease was not renewed");
                }
                // The record's revision is the other half of the lease.
                if hold.is_some() {
                    put_record(&state, &node, &run_id, hold.as_deref()).await;
                }
            }
        })
    });
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            () = fenced(hold.as_deref()) => None,
        };
        let Some(event) = event else { break };
        let last =
            matches!(event.kind, EventKind::RunFinished { .. }) && event.agent_path == "main";
        if last {
            // No node sees the run end before this one stops taking its
            // actions: an action sent after the end finds no one to answer
            // (409 at once), never a subscription on its way out.
            stop_answering(actions.take()).await;
        }
        match &hold {
            Some(hold) => hold.publish_event(&event).await,
            None => {
                if let Err(err) = node.cluster.publish_event(&event).await {
                    tracing::warn!(run = %run_id, seq = event.seq, %err, "an event was not published");
                }
            }
        }
        if last {
            break;
        }
    }
    let lost = hold
        .as_ref()
        .is_some_and(|hold| hold.fenced().is_cancelled());
    put_record(&state, &node, &run_id, hold.as_deref()).await;
    if let Some(lease) = lease {
        lease.abort();
    }
    stop_answering(actions).await;
    if let Some(hold) = &hold {
        failover::release(hold);
    }
    // A run another node holds now is its to acknowledge.
    if let Some(taken) = taken
        && !lost
    {
        finish_message(&taken).await;
    }
    node.set_running(&run_id, false);
}

/// Resolves once `hold` is fenced; never without one.
async fn fenced(hold: Option<&Hold>) {
    match hold {
        Some(hold) => hold.fenced().cancelled().await,
        None => std::future::pending().await,
    }
}

/// Writes the cluster's record of a run this node runs from its own store
/// (on the condition of its `hold`, when it holds one).
async fn put_record(state: &ApiState, node: &ClusterNode, run_id: &str, hold: Option<&Hold>) {
    let record = match state.store.run(run_id) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(run = %run_id, %err, "the run's record could not be read");
            return;
        }
    };
    let mut summary = api::run_summary(&record);
    summary.node = Some(node.name().to_string());
    if let Some(hold) = hold {
        hold.put_record(&summary).await;
    } else if let Err(err) = node.cluster.put_run(&summary).await {
        tracing::warn!(run = %run_id, %err, "the run's record was not shared");
    }
}

/// Acknowledges a submission whose run has ended.
async fn finish_message(taken: &Taken) {
    if let Err(err) = taken.ack().await {
        tracing::warn!(%err, "the run's submission was not acknowledged");
    }
}

/// Answers the actions routed to a run this node runs, each with what the
/// local API answers.
async fn answer_actions(state: ApiState, mut requests: ActionRequests, stop: CancellationToken) {
    loop {
        let request = tokio::select! {
            request = requests.next() => request,
            () = stop.cancelled() => break,
        };
        let Some(request) = request else { return };
        answer_action(&state, request).await;
    }
    // The server stops sending the run's actions here; those it sent before
    // are answered (by the local API, as for any other).
    let mut left = match requests.close().await {
        Ok(left) => left,
        Err(err) => {
            tracing::warn!(%err, "the run's actions were not unsubscribed");
            return;
        }
    };
    while let Ok(Some(request)) = tokio::time::timeout(CLOSE_DRAIN, left.next()).await {
        answer_action(&state, request).await;
    }
}

/// How long a run's last actions are waited for once it stops taking them.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// Stops answering a run's actions: once this returns, the unsubscription
/// is on its way to the server ahead of anything published after it.
async fn stop_answering(actions: Option<(tokio::task::JoinHandle<()>, CancellationToken)>) {
    if let Some((task, stop)) = actions {
        stop.cancel();
        if let Err(err) = task.await {
            tracing::warn!(%err, "the task answering a run's actions failed");
        }
    }
}

/// Answers one routed action through the local API.
async fn answer_action(state: &ApiState, request: troupe_cluster::ActionRequest) {
    let RunAction { run_id, action, .. } = request.action.clone();
    let response = match action {
        Action::Cancel => api::cancel_run(State(state.clone()), Path(run_id)).await,
        Action::Approve {
            approval_id,
            answer,
        } => match serde_json::to_vec(&answer) {
            Ok(body) => {
                api::approve(
                    State(state.clone()),
                    Path((run_id, approval_id)),
                    Body::from(body),
                )
                .await
            }
            Err(err) => Err(ApiError::internal(err.to_string())),
        },
        Action::Message { text } => match serde_json::to_vec(&wire::RunMessage { text }) {
            Ok(body) => {
                api::send_message(State(state.clone()), Path(run_id), Body::from(body)).await
            }
            Err(err) => Err(ApiError::internal(err.to_string())),
        },
    };
    let (status, body) = response_parts(response.unwrap_or_else(IntoResponse::into_response)).await;
    if let Err(err) = request.answer(status, body).await {
        tracing::warn!(%err, "an action was not answered");
    }
}

/// The status and JSON body of a response of the local API.
async fn response_parts(response: Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), api::BODY_LIMIT)
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// Publishes the two events of a run that could not start (an error, then
/// `run_finished`) and its record.
async fn failed_to_start(
    node: &ClusterNode,
    run_id: &str,
    session_id: &str,
    prompt: &str,
    message: &str,
) {
    tracing::warn!(run = %run_id, %message, "a run taken from the cluster could not start");
    let now = api::timestamp(&chrono::Utc::now());
    let events = [
        main_event(
            run_id,
            session_id,
            1,
            EventKind::Error {
                kind: "run_start".into(),
                message: format!("the run could not start on node {}: {message}", node.name()),
            },
        ),
        main_event(
            run_id,
            session_id,
            2,
            finished(RunStatus::Error, "run_start".into()),
        ),
    ];
    for event in &events {
        if let Err(err) = node.cluster.publish_event(event).await {
            tracing::warn!(run = %run_id, %err, "an event was not published");
        }
    }
    let summary = RunSummary {
        agents: None,
        ended: Some(now.clone()),
        node: Some(node.name().to_string()),
        prompt: prompt.to_string(),
        run_id: run_id.to_string(),
        session_id: session_id.to_string(),
        started: now,
        status: RunState::Error,
        stop_reason: Some("run_start".into()),
    };
    if let Err(err) = node.cluster.put_run(&summary).await {
        tracing::warn!(run = %run_id, %err, "the run's record was not shared");
    }
}

/// An event of a run's main agent that this node writes itself, now.
fn main_event(run_id: &str, session_id: &str, seq: u64, kind: EventKind) -> RunEvent {
    RunEvent {
        seq,
        run_id: run_id.to_string(),
        session_id: session_id.to_string(),
        agent_path: "main".into(),
        ts: api::timestamp(&chrono::Utc::now()),
        kind,
    }
}

/// `run_finished` of a run that did nothing (more) here.
fn finished(status: RunStatus, stop_reason: String) -> EventKind {
    EventKind::RunFinished {
        status,
        stop_reason,
        final_text: String::new(),
        usage_total: Usage::default(),
    }
}

/// A submission delivered again after the node that took it let its lease
/// lapse: the run is recorded as interrupted and leaves the queue.
async fn lost_run(node: &ClusterNode, taken: &Taken, run_id: &str) {
    tracing::warn!(run = %run_id, deliveries = taken.deliveries, "a run's node lost it; it is recorded as interrupted");
    if let Ok(Some(mut summary)) = node.cluster.run(run_id).await
        && summary.status == RunState::Running
    {
        let lost_by = summary.node.clone().unwrap_or_default();
        summary.status = RunState::Interrupted;
        summary.stop_reason = Some("node_lost".into());
        summary.ended = Some(api::timestamp(&chrono::Utc::now()));
        if let Err(err) = node.cluster.put_run(&summary).await {
            tracing::warn!(run = %run_id, %err, "the run's record was not shared");
        }
        let seq = node.cluster.last_event_seq(run_id).await.unwrap_or(0) + 1;
        let finished = main_event(
            run_id,
            &summary.session_id,
            seq,
            finished(RunStatus::Interrupted, format!("node_lost: {lost_by}")),
        );
        if let Err(err) = node.cluster.publish_event(&finished).await {
            tracing::warn!(run = %run_id, %err, "an event was not published");
        }
    }
    if let Err(err) = taken.terminate().await {
        tracing::warn!(%err, "the lost run's submission was not dropped");
    }
}

/// `POST /v1/runs` on a node: the run's ids are chosen here, its record
/// written and the request handed to the work queue.
pub(crate) async fn submit(
    node: &ClusterNode,
    mut request: RunRequest,
) -> Result<wire::RunCreated, ApiError> {
    request.env = request
        .env
        .map(|env| super::cluster_ops::publishable_env(&env, &request.cwd));
    let run_id = uuid::Uuid::now_v7().to_string();
    let session_id = uuid::Uuid::now_v7().to_string();
    let span = troupe_telemetry::genai::placement_span("submit", &run_id, node.name());
    let traceparent = troupe_telemetry::propagation::traceparent_of(&span);
    let now = chrono::Utc::now();
    let summary = RunSummary {
        agents: None,
        ended: None,
        node: None,
        prompt: request.prompt.clone(),
        run_id: run_id.clone(),
        session_id: session_id.clone(),
        started: api::timestamp(&now),
        status: RunState::Running,
        stop_reason: None,
    };
    let unavailable = |err: troupe_cluster::ClusterError| {
        ApiError::unavailable(format!("the cluster did not take the run: {err}"))
    };
    node.cluster.connected().map_err(unavailable)?;
    node.cluster.put_run(&summary).await.map_err(unavailable)?;
    let submission = Submission {
        v: VERSION,
        run_id: run_id.clone(),
        session_id: session_id.clone(),
        submitted_by: node.name().to_string(),
        submitted_at: api::timestamp(&now),
        request,
    };
    if let Err(err) = node
        .cluster
        .submit(&submission, traceparent.as_deref())
        .await
    {
        let refused = RunSummary {
            status: RunState::Error,
            stop_reason: Some("not_queued".into()),
            ended: Some(api::timestamp(&chrono::Utc::now())),
            ..summary
        };
        let _ = node.cluster.put_run(&refused).await;
        return Err(unavailable(err));
    }
    tracing::info!(run = %run_id, "handed a run to the cluster");
    drop(span);
    Ok(wire::RunCreated {
        run_id,
        session_id,
        warnings: Vec::new(),
    })
}

/// A run of the cluster this node's store does not hold.
pub(crate) async fn remote_run(
    node: &ClusterNode,
    run_id: &str,
) -> Result<Option<RunSummary>, ApiError> {
    node.cluster
        .run(run_id)
        .await
        .map_err(|err| ApiError::unavailable(err.to_string()))
}

/// Every run of the cluster with the runs of this node's store that the
/// cluster does not list (run here before it joined), newest first.
pub(crate) async fn all_runs(
    node: &ClusterNode,
    local: Vec<RunSummary>,
) -> Result<Vec<RunSummary>, ApiError> {
    let mut runs = node
        .cluster
        .runs()
        .await
        .map_err(|err| ApiError::unavailable(err.to_string()))?;
    let known: BTreeSet<String> = runs.iter().map(|run| run.run_id.clone()).collect();
    runs.extend(local.into_iter().filter(|run| !known.contains(&run.run_id)));
    runs.sort_by(|a, b| b.started.cmp(&a.started).then(b.run_id.cmp(&a.run_id)));
    Ok(runs)
}

/// A run's events from the cluster as Server-Sent Events, from `from`,
/// ending after the main agent's `run_finished`.
pub(crate) async fn remote_events(
    state: &ApiState,
    node: &ClusterNode,
    run_id: &str,
    from: u64,
) -> Result<Response, ApiError> {
    let events = node
        .cluster
        .events(run_id, from)
        .await
        .map_err(|err| ApiError::unavailable(err.to_string()))?;
    let open = state.activity.stream_opened();
    let stream = futures::stream::unfold((Some(events), open), |(events, open)| async move {
        let mut events = events?;
        let event = events.next().await?;
        let last =
            matches!(event.kind, EventKind::RunFinished { .. }) && event.agent_path == "main";
        let sse = api::sse_event(&event);
        Some((
            Ok::<Event, Infallible>(sse),
            ((!last).then_some(events), open),
        ))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// Routes an action on a run another node runs to it: its answer, or 409
/// when no node runs the run now.
pub(crate) async fn route(
    node: &ClusterNode,
    summary: &RunSummary,
    action: Action,
) -> Result<Response, ApiError> {
    let run_id = summary.run_id.clone();
    let request = RunAction {
        v: VERSION,
        run_id: run_id.clone(),
        action,
    };
    let reply = node
        .cluster
        .request_action(&request)
        .await
        .map_err(|err| ApiError::unavailable(err.to_string()))?;
    match reply {
        Some(reply) => {
            let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_GATEWAY);
            Ok((status, axum::Json(reply.body)).into_response())
        }
        None if summary.status != RunState::Running => Err(ApiError::conflict(format!(
            "run {run_id} is not in progress (it ended: {})",
            serde_json::to_value(summary.status)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string))
                .unwrap_or_default()
        ))),
        None if summary.node.is_none() => Err(ApiError::conflict(format!(
            "run {run_id} waits for a node with room; try again once it started"
        ))),
        None => Err(ApiError::conflict(format!(
            "run {run_id} is not in progress on any node"
        ))),
    }
}

/// `GET /v1/cluster`: the nodes and the runs of the cluster.
pub(crate) async fn status(
    node: &ClusterNode,
    local: Vec<RunSummary>,
) -> Result<wire::ClusterStatus, ApiError> {
    let mut nodes: Vec<wire::ClusterNode> = node
        .cluster
        .nodes()
        .await
        .map_err(|err| ApiError::unavailable(err.to_string()))?
        .into_iter()
        .map(|(record, stale)| wire::ClusterNode {
            node: record.node,
            capacity: record.capacity,
            running: record.running,
            draining: record.draining,
            heartbeat: record.heartbeat,
            stale,
            addr: record.addr,
        })
        .collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(wire::ClusterStatus {
        node: node.name().to_string(),
        url: node.cluster.masked_url().to_string(),
        nodes,
        runs: all_runs(node, local).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_come_before_the_users_file_and_defaults_fill_the_rest() {
        let file = troupe_config::ClusterFile {
            url: Some("nats://file:4222".into()),
            credentials: Some("/c.creds".into()),
            lease_secs: Some(30),
            replicas: Some(3),
            file_repositories: None,
        };
        assert_eq!(
            settings(&ClusterFlags::default(), &Default::default(), "h", 1),
            None
        );
        let from_file = settings(&ClusterFlags::default(), &file, "box.lan", 7).unwrap();
        assert_eq!(from_file.url, "nats://file:4222");
        assert_eq!(from_file.node, "box-lan-7");
        assert_eq!(from_file.capacity, 4);
        assert_eq!(from_file.lease, Duration::from_secs(30));
        assert_eq!(from_file.replicas, 3);
        assert_eq!(
            from_file.credentials.as_deref(),
            Some(std::path::Path::new("/c.creds"))
        );
        let flags = ClusterFlags {
            url: Some("nats://flag:4222".into()),
            node: Some("n1".into()),
            capacity: Some(2),
        };
        let from_flags = settings(&flags, &Default::default(), "h", 1).unwrap();
        assert_eq!(
            (
                from_flags.url.as_str(),
                from_flags.node.as_str(),
                from_flags.capacity
            ),
            ("nats://flag:4222", "n1", 2)
        );
        assert_eq!(from_flags.lease, Duration::from_secs(15));
        assert_eq!(from_flags.replicas, 1);
    }
}
