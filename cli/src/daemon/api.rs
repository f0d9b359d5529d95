//! The daemon's HTTP API: runs (create, list, show, cancel, approvals), a
//! run's events as Server-Sent Events, sessions (show, remove, compact),
//! health.
//!
//! Every request passes [`super::guard`] first: its `Host`/`Origin`
//! must name this daemon and, except for `/healthz`, it must carry the token.
//! Bodies are the types of [`troupe_protocol::api`], read with a hard limit
//! ([`BODY_LIMIT`]) and parsed here, so an oversized or malformed body gets
//! the same JSON error shape as everything else; the requests that start or
//! steer runs are refused when they carry a field the daemon does not know.
//! Handlers only translate between HTTP and the [`Runtime`] handle and the
//! store; how a run request becomes a run is the [`Prepare`] function the
//! daemon is built with.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use troupe_actors::{AgentStatus, EventSubscription, RunSubmission, Runtime, RuntimeError};
use troupe_protocol::api::{
    self as wire, ApprovalAnswer, CompactRequest, HEALTH_PATH, PATH_PREFIX, RunLimits, RunMessage,
    RunRequest,
};
use troupe_protocol::events::EventKind;
use troupe_store::{IdMatch, RunRecord, SessionMeta, Store, StoreError};

use super::error::ApiError;
use super::idle::{Activity, StreamGuard};
use super::{guard, peer, server};
use crate::telemetry::ClientExport;

/// The largest request body accepted (1 MiB).
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;

/// A run ready to submit, with what the person should be told first.
pub(crate) struct PreparedRun {
    /// The submission.
    pub submission: RunSubmission,
    /// Start-up warnings (a broken role file, a setting with no effect).
    pub warnings: Vec<String>,
}

/// Turns a run request into a submission (configuration, provider, tools).
pub(crate) type Prepare =
    Arc<dyn Fn(RunRequest) -> BoxFuture<'static, Result<PreparedRun, ApiError>> + Send + Sync>;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// The runtime runs go to.
    pub runtime: Runtime,
    /// The store runs and sessions are read from.
    pub store: Store,
    /// The data directory (spill files live below it).
    pub data_dir: std::path::PathBuf,
    /// The bearer token.
    pub token: Arc<str>,
    /// The address the daemon listens on (for `Host`/`Origin` checks).
    pub listen: SocketAddr,
    /// Further host names requests may use (`--allow-host`).
    pub allowed_hosts: Arc<Vec<String>>,
    /// How a run request becomes a submission.
    pub prepare: Prepare,
    /// Set when the daemon stops accepting runs.
    pub closing: Arc<AtomicBool>,
    /// Requests and open streams, for the idle limit.
    pub activity: Arc<Activity>,
    /// Streams of the clients that own runs.
    pub owners: Arc<Owners>,
    /// Exports runs where their clients asked (`None`: as the daemon does).
    pub per_run: Option<crate::telemetry::PerRunExport>,
    /// What `GET /v1/daemon` tells besides what the state holds.
    pub about: Arc<About>,
    /// Cancelled when the daemon stops: held client connections end.
    pub stopping: tokio_util::sync::CancellationToken,
    /// The cluster this daemon is a node of (`troupe serve --cluster`).
    pub cluster: Option<Arc<super::cluster::ClusterNode>>,
}

/// The daemon's own facts for `GET /v1/daemon`.
#[derive(Debug, Clone)]
pub(crate) struct About {
    /// When it started.
    pub started: chrono::DateTime<chrono::Utc>,
    /// Its idle limit.
    pub idle_exit: Option<Duration>,
    /// Its Unix socket, when it has one.
    pub socket: Option<std::path::PathBuf>,
    /// Where it exports spans.
    pub otlp_endpoint: Option<String>,
    /// Its log filter.
    pub log_filter: String,
    /// Why the daemon before it ended, when a store write hung there.
    pub previous_stall: Option<String>,
}

/// The path of the daemon's own status.
pub(crate) const STATUS_PATH: &str = "/daemon";

/// The path of the cluster's status.
pub(crate) const CLUSTER_PATH: &str = "/cluster";

/// The path a client holds open while it is open itself (a chat waiting
/// for its next message): the daemon counts it as a client and does not
/// leave for being idle while it is held.
pub(crate) const PRESENCE_PATH: &str = "/clients/presence";

/// The API's router.
pub(crate) fn router(state: ApiState) -> Router {
    let path = |rest: &str| format!("{PATH_PREFIX}{rest}");
    Router::new()
        .route(HEALTH_PATH, get(health))
        .route(&path("/runs"), post(create_run).get(list_runs))
        .route(&path("/runs/{id}"), get(show_run))
        .route(&path("/runs/{id}/events"), get(run_events))
        .route(&path("/runs/{id}/cancel"), post(cancel_run))
        .route(&path("/runs/{id}/approvals/{approval_id}"), post(approve))
        .route(&path("/runs/{id}/messages"), post(send_message))
        .route(&path("/sessions"), get(list_sessions))
        .route(
            &path("/sessions/{id}"),
            get(show_session).delete(remove_session),
        )
        .route(&path("/sessions/{id}/compact"), post(compact_session))
        .route(&path("/sessions/{id}/rewind"), post(rewind_session))
        .route(&path("/sessions/{id}/plan"), get(session_plans))
        .route(&path("/sessions/{id}/undo"), post(undo_session))
        .route(&path("/clean"), post(clean))
        .route(
            &path("/sessions/{id}/checkpoints"),
            get(session_checkpoints),
        )
        .route(&path("/views"), post(render_view))
        .route(&path(PRESENCE_PATH), get(hold_presence))
        .route(&path(STATUS_PATH), get(daemon_status))
        .route(&path(CLUSTER_PATH), get(cluster_status))
        .route(
            &path(super::cluster_ops::DRAIN_PATH),
            post(super::cluster_ops::drain),
        )
        .route(
            &path(super::cluster_ops::RESUME_PATH),
            post(super::cluster_ops::resume),
        )
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(middleware::from_fn_with_state(state.clone(), guard_request))
        .with_state(state)
}

/// Host/Origin for every request; the token for all but `/healthz`. A
/// request with the right token marks its connection authenticated (see
/// [`server::Connection`]). Starting a run, answering an approval, writing
/// to a run and removing or rewinding a session are the owner's alone: a peer that is a
/// command of a run, or a local peer that cannot be identified, is refused
/// them (see [`peer`]).
async fn guard_request(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    state.activity.touch();
    let headers = request.headers();
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    if let Err(err) = guard::check_origin(
        text(header::HOST),
        text(header::ORIGIN),
        state.listen,
        &state.allowed_hosts,
    ) {
        return err.into_response();
    }
    match guard::check_token(text(header::AUTHORIZATION), &state.token) {
        // The connection has shown the token: it is no stranger any more.
        Ok(()) => {
            if let Some(connection) = request.extensions().get::<server::Connection>() {
                connection.authenticated();
            }
        }
        Err(err) if request.uri().path() != HEALTH_PATH => return err.into_response(),
        Err(_) => {}
    }
    // A command of a run, token or not, never widens what runs unasked.
    if let Some(what) = peer::owner_only(request.method(), request.uri().path()) {
        let from = request.extensions().get::<peer::Peer>().copied();
        if let Err(err) = peer::require_owner(from, what).await {
            return err.into_response();
        }
    }
    next.run(request).await
}

/// Reads a body of at most [`BODY_LIMIT`] bytes.
async fn body_bytes(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .map_err(|_| ApiError::too_large(BODY_LIMIT))
}

fn malformed(err: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("malformed JSON body: {err}"))
}

/// Reads a JSON body of at most [`BODY_LIMIT`] bytes.
async fn json_body<T: DeserializeOwned>(body: Body) -> Result<T, ApiError> {
    serde_json::from_slice(&body_bytes(body).await?).map_err(malformed)
}

/// Reads a JSON body of at most [`BODY_LIMIT`] bytes, refusing one with a
/// field `T` does not know (see [`strict_from_slice`]).
async fn strict_json_body<T: DeserializeOwned + Serialize>(body: Body) -> Result<T, ApiError> {
    strict_from_slice(&body_bytes(body).await?)
}

/// Reads `bytes` as `T` and refuses them (400) when they hold a field `T`
/// does not know, at any depth: a request that starts or steers a run is
/// carried out as asked or not at all, never with part of it ignored. A
/// field is known when it is still there once `T` is written back, so every
/// field of such a `T` is always written (an absent value as `null`).
pub(crate) fn strict_from_slice<T: DeserializeOwned + Serialize>(
    bytes: &[u8],
) -> Result<T, ApiError> {
    let read: T = serde_json::from_slice(bytes).map_err(malformed)?;
    let given: Value = serde_json::from_slice(bytes).map_err(malformed)?;
    let known = serde_json::to_value(&read)
        .map_err(|err| ApiError::internal(format!("the request could not be read: {err}")))?;
    match unknown_field(&given, &known) {
        Some(field) => Err(ApiError::bad_request(format!(
            "malformed JSON body: unknown field `{field}`"
        ))),
        None => Ok(read),
    }
}

/// The first field of `given` that `known` lacks, as a dotted path.
fn unknown_field(given: &Value, known: &Value) -> Option<String> {
    let (Value::Object(given), Value::Object(known)) = (given, known) else {
        return None;
    };
    given
        .iter()
        .find_map(|(name, value)| match known.get(name) {
            None => Some(name.clone()),
            Some(inner) => unknown_field(value, inner).map(|path| format!("{name}.{path}")),
        })
}

/// Maps the runtime's errors to API errors.
fn runtime_error(err: RuntimeError) -> ApiError {
    match err {
        RuntimeError::UnknownRun(_)
        | RuntimeError::UnknownAgent(_)
        | RuntimeError::UnknownApproval(_)
        | RuntimeError::UnknownSession(_) => ApiError::not_found(err.to_string()),
        RuntimeError::SessionBusy(_) => ApiError::conflict(err.to_string()),
        RuntimeError::HookBlocked(_) => ApiError::unprocessable(err.to_string()),
        RuntimeError::NothingToCompact(_) => ApiError::unprocessable(err.to_string()),
        RuntimeError::Gone => ApiError::unavailable(err.to_string()),
        RuntimeError::Start(_) | RuntimeError::RunStart(_) | RuntimeError::Store(_) => {
            ApiError::internal(err.to_string())
        }
    }
}

/// The session id `given` (an id, a short id or a unique prefix) names;
/// 404 when it names none.
fn resolve_session(store: &Store, given: &str) -> Result<String, ApiError> {
    crate::ids::resolve(store, crate::ids::IdKind::Session, given).map_err(|err| match err.code {
        crate::EXIT_USAGE => ApiError::not_found(err.message),
        _ => ApiError::internal(err.message),
    })
}

/// The run id `given` names: the id of the one run whose id starts with it
/// (the id itself when it is whole), or `given` unchanged when no stored run
/// matches (a run only just submitted; the handler answers 404 for one that
/// does not exist). Several matches are a 400 listing them.
fn resolve_run(store: &Store, given: &str) -> Result<String, ApiError> {
    match store.find_run(given) {
        Ok(IdMatch::NoMatch) => Ok(given.to_string()),
        Ok(found) => crate::ids::outcome(crate::ids::IdKind::Run, given, found)
            .map_err(ApiError::bad_request),
        Err(StoreError::InvalidId { reason, .. }) => Err(ApiError::bad_request(format!(
            "invalid run id {given:?}: {reason}"
        ))),
        Err(err) => Err(store_error(err)),
    }
}

fn store_error(err: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("the store could not be read: {err}"))
}

async fn health(State(state): State<ApiState>) -> axum::Json<wire::Health> {
    let stats = state.runtime.stats().await.ok();
    axum::Json(wire::Health {
        status: "ok".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        runs_in_progress: stats.map(|s| s.runs_in_progress),
        sessions_in_memory: stats.map(|s| s.sessions_in_memory),
    })
}

async fn daemon_status(State(state): State<ApiState>) -> axum::Json<wire::DaemonStatus> {
    let stats = state.runtime.stats().await.ok();
    let about = &state.about;
    let uptime = chrono::Utc::now()
        .signed_duration_since(about.started)
        .num_seconds();
    axum::Json(wire::DaemonStatus {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        addr: state.listen.to_string(),
        socket: about.socket.as_ref().map(|path| path.display().to_string()),
        data_dir: state.data_dir.display().to_string(),
        started: timestamp(&about.started),
        uptime_secs: u64::try_from(uptime).unwrap_or(0),
        runs_in_progress: stats.map(|s| s.runs_in_progress),
        // This request's own connection is not one.
        open_clients: state.activity.open_streams(),
        idle_exit_secs: about.idle_exit.map(|idle| idle.as_secs()),
        otlp_endpoint: about.otlp_endpoint.clone(),
        log_filter: about.log_filter.clone(),
        allowed_hosts: state.allowed_hosts.as_ref().clone(),
        previous_stall: about.previous_stall.clone(),
        cluster: state.cluster.as_ref().map(|node| wire::ClusterConnection {
            node: node.name().to_string(),
            url: node.cluster.masked_url().to_string(),
            connected: node.cluster.connected().is_ok(),
        }),
    })
}

async fn create_run(State(state): State<ApiState>, body: Body) -> Result<Response, ApiError> {
    if state.closing.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the daemon is shutting down"));
    }
    let request: RunRequest = strict_json_body(body).await?;
    if request.prompt.trim().is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if !request.cwd.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "cwd {} is not an absolute path",
            request.cwd.display()
        )));
    }
    super::cluster_ops::check_workspace_request(&request)?;
    // A node of a cluster hands a new run to the cluster; a run that
    // continues a session runs here, where the session is stored (loaded
    // from the cluster when another node ran it or wrote it since), and
    // its writes to the session are copied to the cluster.
    let mut shared_session = None;
    if let Some(node) = &state.cluster
        && let Some(session_id) = &request.session_id
    {
        shared_session = super::cluster::load_session(node, &state, session_id)
            .await
            .map(|last_seq| (session_id.clone(), last_seq));
    }
    if let Some(node) = &state.cluster
        && request.session_id.is_none()
    {
        let created = super::cluster::submit(node, request).await?;
        return Ok((StatusCode::CREATED, axum::Json(created)).into_response());
    }
    let request = super::cluster_ops::with_workspace(&state, request, None)
        .await
        .map_err(ApiError::unprocessable)?;
    // The client's telemetry settings travel with its environment: a run
    // whose client exports elsewhere than the daemon gets its own exporter.
    let export = match (&state.per_run, &request.env) {
        (Some(per_run), Some(vars)) => per_run.wanted(vars),
        _ => ClientExport::AsTheDaemon,
    };
    // The daemon's log is one stream at its own filter: a client that asked
    // for another is told so.
    let log_notice = match (&state.per_run, &request.env) {
        (Some(per_run), Some(vars)) => per_run.log_notice(vars),
        _ => None,
    };
    let mut prepared = (state.prepare)(request).await?;
    prepared.warnings.extend(log_notice);
    let own = match (&state.per_run, export) {
        (Some(per_run), ClientExport::Own(settings)) => {
            per_run.announce_run();
            Some((per_run, settings))
        }
        (_, ClientExport::Unusable(warning)) => {
            prepared.warnings.push(warning);
            None
        }
        _ => None,
    };
    // The session's writes are kept for the cluster from the run's first.
    let session_copy = match (&state.cluster, shared_session) {
        (Some(node), Some((session_id, last_seq))) => Some(super::cluster::SessionCopy::watch(
            node,
            &session_id,
            last_seq,
        )),
        _ => None,
    };
    let handle = match state.runtime.submit(prepared.submission).await {
        Ok(handle) => handle,
        Err(err) => {
            if let Some((per_run, _)) = &own {
                per_run.withdraw();
            }
            if let (Some(node), Some(copy)) = (&state.cluster, session_copy) {
                copy.abandon(node);
            }
            return Err(runtime_error(err));
        }
    };
    if let Some((per_run, settings)) = &own
        && let Some(warning) = per_run.start(&handle.run_id, settings)
    {
        prepared.warnings.push(warning);
    }
    if let Some(node) = &state.cluster {
        super::cluster::mirror_local(&state, node, &handle.run_id, session_copy);
    }
    let created = wire::RunCreated {
        run_id: handle.run_id,
        session_id: handle.session_id,
        warnings: prepared.warnings,
    };
    Ok((StatusCode::CREATED, axum::Json(created)).into_response())
}

/// A time as the API writes it: RFC 3339, as the store's records are
/// written.
pub(crate) fn timestamp(at: &chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A stored run as the API shows it.
pub(crate) fn run_summary(run: &RunRecord) -> wire::RunSummary {
    wire::RunSummary {
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        prompt: run.prompt.clone(),
        status: match run.status {
            troupe_store::RunState::Running => wire::RunState::Running,
            troupe_store::RunState::Ended(status) => status.into(),
        },
        stop_reason: run.stop_reason.clone(),
        started: timestamp(&run.started),
        ended: run.ended.as_ref().map(timestamp),
        agents: None,
        node: None,
    }
}

/// An agent of a run in progress as the API shows it.
fn agent_summary(agent: &AgentStatus) -> wire::AgentSummary {
    wire::AgentSummary {
        path: agent.path.clone(),
        phase: agent.phase.to_string(),
        turns: agent.turns,
        history_len: agent.history_len,
        pending_approvals: agent.pending_approvals.clone(),
    }
}

/// A stored session as the API shows it.
fn session_summary(meta: &SessionMeta) -> wire::SessionSummary {
    wire::SessionSummary {
        id: meta.id.clone(),
        title: meta.title.clone(),
        cwd: meta.cwd.clone(),
        provider: meta.provider.clone(),
        model: meta.model.clone(),
        created: timestamp(&meta.created),
        updated: timestamp(&meta.updated),
        message_count: meta.message_count,
        parent: meta.parent.clone(),
        agent_path: meta.agent_path.clone(),
        run_id: meta.run_id.clone(),
        fork_of: meta.fork_of.as_ref().map(|fork| wire::SessionFork {
            session: fork.session.clone(),
            len: fork.len,
        }),
    }
}

async fn list_runs(State(state): State<ApiState>) -> Result<axum::Json<wire::RunList>, ApiError> {
    let mut runs = state.store.list_runs(None).map_err(store_error)?;
    runs.sort_by(|a, b| b.started.cmp(&a.started).then(b.run_id.cmp(&a.run_id)));
    let runs = runs.iter().map(run_summary).collect();
    let runs = match &state.cluster {
        Some(node) => super::cluster::all_runs(node, own_runs(node, runs)).await?,
        None => runs,
    };
    Ok(axum::Json(wire::RunList { runs }))
}

/// The runs of this node's store, each marked as run by this node.
fn own_runs(
    node: &super::cluster::ClusterNode,
    runs: Vec<wire::RunSummary>,
) -> Vec<wire::RunSummary> {
    runs.into_iter()
        .map(|run| wire::RunSummary {
            node: Some(node.name().to_string()),
            ..run
        })
        .collect()
}

/// `GET /v1/cluster`: the nodes and runs of the cluster; 404 when the
/// daemon is not a node of one.
async fn cluster_status(
    State(state): State<ApiState>,
) -> Result<axum::Json<wire::ClusterStatus>, ApiError> {
    let Some(node) = &state.cluster else {
        return Err(ApiError::not_found(
            "this daemon is not part of a cluster (start it with `troupe serve --cluster URL`)",
        ));
    };
    let runs = state.store.list_runs(None).map_err(store_error)?;
    let runs = own_runs(node, runs.iter().map(run_summary).collect());
    Ok(axum::Json(super::cluster::status(node, runs).await?))
}

/// The cluster's record of a run this node's store does not hold; `None`
/// when the daemon is not a node of a cluster, or holds the run itself.
async fn remote_run(state: &ApiState, id: &str) -> Result<Option<wire::RunSummary>, ApiError> {
    let Some(node) = &state.cluster else {
        return Ok(None);
    };
    if state.store.run(id).map_err(store_error)?.is_some() {
        return Ok(None);
    }
    super::cluster::remote_run(node, id).await
}

/// Routes an action on a run another node of the cluster runs; `None` when
/// the run is this daemon's to act on.
async fn routed(
    state: &ApiState,
    id: &str,
    action: troupe_protocol::cluster::Action,
) -> Option<Result<Response, ApiError>> {
    let node = state.cluster.as_ref()?;
    match remote_run(state, id).await {
        Ok(Some(summary)) => Some(super::cluster::route(node, &summary, action).await),
        Ok(None) => None,
        Err(err) => Some(Err(err)),
    }
}

async fn show_run(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<axum::Json<wire::RunSummary>, ApiError> {
    let id = resolve_run(&state.store, &id)?;
    if let Some(remote) = remote_run(&state, &id).await? {
        return Ok(axum::Json(remote));
    }
    let run = state
        .store
        .run(&id)
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no run {id}")))?;
    let mut summary = run_summary(&run);
    if let Some(node) = &state.cluster {
        summary.node = Some(node.name().to_string());
    }
    if run.status.is_running()
        && let Ok(agents) = state.runtime.agents(&id).await
    {
        summary.agents = Some(agents.iter().map(agent_summary).collect());
    }
    Ok(axum::Json(summary))
}

/// `?from_seq=N` as an alternative to `Last-Event-ID`.
#[derive(Debug, Deserialize)]
struct EventsQuery {
    from_seq: Option<u64>,
    /// The client that started the run follows it: when every such stream
    /// has been gone for [`OWNER_GRACE`] before the run ended, the run is
    /// cancelled (its terminal was closed or its process killed).
    #[serde(default)]
    owner: bool,
}

/// How long a run whose owning client went away waits for it to reconnect
/// before it is cancelled.
pub(crate) const OWNER_GRACE: Duration = Duration::from_secs(3);

/// The event streams of the clients that own runs, counted per run.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    streams: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Owners {
    fn change(&self, run_id: &str, opened: bool) -> usize {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let count = streams.entry(run_id.to_string()).or_default();
        if opened {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
        }
        let left = *count;
        if left == 0 {
            streams.remove(run_id);
        }
        left
    }

    /// Owning streams of `run_id` open now.
    pub(crate) fn open(&self, run_id: &str) -> usize {
        let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.get(run_id).copied().unwrap_or(0)
    }
}

/// True when a run must be cancelled because its owner is gone: no owning
/// stream is open any more, and the run had not ended when the last one
/// closed.
pub(crate) fn owner_gone(owning_streams_left: usize, run_ended: bool) -> bool {
    owning_streams_left == 0 && !run_ended
}

/// Held by an owning stream; when dropped before the run ended and no other
/// owning stream remains, the run is cancelled after [`OWNER_GRACE`] unless
/// the owner reconnected.
struct OwnerGuard {
    owners: Arc<Owners>,
    runtime: Runtime,
    run_id: String,
    ended: bool,
}

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        let left = self.owners.change(&self.run_id, false);
        if !owner_gone(left, self.ended) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (owners, runtime, run_id) = (
            self.owners.clone(),
            self.runtime.clone(),
            self.run_id.clone(),
        );
        handle.spawn(async move {
            tokio::time::sleep(OWNER_GRACE).await;
            if owners.open(&run_id) == 0 && runtime.cancel(&run_id).await.is_ok() {
                tracing::info!(run = %run_id, "the client that started the run went away; cancelled it");
            }
        });
    }
}

/// The first sequence number a client wants: after `Last-Event-ID`, else
/// `from_seq`, else 1.
pub(crate) fn first_wanted(
    last_event_id: Option<&str>,
    from_seq: Option<u64>,
) -> Result<u64, ApiError> {
    match last_event_id {
        Some(text) => text
            .trim()
            .parse::<u64>()
            .map(|seen| seen.saturating_add(1))
            .map_err(|_| {
                ApiError::bad_request(format!("Last-Event-ID {text:?} is not a sequence number"))
            }),
        None => Ok(from_seq.unwrap_or(1).max(1)),
    }
}

async fn run_events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let last = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok());
    let from = first_wanted(last, query.from_seq)?;
    let id = resolve_run(&state.store, &id)?;
    let subscription = match state.runtime.subscribe(&id, from).await {
        Ok(subscription) => subscription,
        Err(RuntimeError::UnknownRun(_)) if state.cluster.is_some() => {
            return match (&state.cluster, remote_run(&state, &id).await?) {
                (Some(node), Some(_)) => {
                    super::cluster::remote_events(&state, node, &id, from).await
                }
                _ => Err(ApiError::not_found(format!("no run {id}"))),
            };
        }
        Err(err) => return Err(runtime_error(err)),
    };
    // The stream counts as activity (for the idle limit) while it is open.
    let open = state.activity.stream_opened();
    let owner = query.owner.then(|| {
        state.owners.change(&id, true);
        OwnerGuard {
            owners: state.owners.clone(),
            runtime: state.runtime.clone(),
            run_id: id.clone(),
            ended: false,
        }
    });
    let stream = futures::stream::unfold(
        (subscription, open, owner),
        |(mut subscription, open, mut owner): (
            EventSubscription,
            StreamGuard,
            Option<OwnerGuard>,
        )| async move {
            let event = subscription.recv().await?;
            if matches!(event.kind, EventKind::RunFinished { .. })
                && event.agent_path == "main"
                && let Some(owner) = owner.as_mut()
            {
                owner.ended = true;
            }
            let sse = sse_event(&event);
            Some((Ok::<_, Infallible>(sse), (subscription, open, owner)))
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// A run's event as one Server-Sent Event: its `seq` as the id, its JSON
/// as the data.
pub(crate) fn sse_event(event: &troupe_protocol::events::RunEvent) -> Event {
    let data = serde_json::to_string(event).or_else(|err| {
        serde_json::to_string(&wire::StreamError {
            error: err.to_string(),
        })
    });
    Event::default()
        .id(event.seq.to_string())
        .data(data.unwrap_or_default())
}

/// A stream that sends nothing but keep-alives and counts as an open
/// client (see [`PRESENCE_PATH`]) until the client goes away or the daemon
/// stops.
async fn hold_presence(State(state): State<ApiState>) -> Response {
    let open = state.activity.stream_opened();
    let stopping = state.stopping.clone();
    let stream = futures::stream::once(async move {
        stopping.cancelled().await;
        drop(open);
    })
    .filter_map(|()| async { None::<Result<Event, Infallible>> });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// Refuses (409) a run whose record says it has ended: its record is
/// written before its last event, so a client that saw `run_finished` is
/// answered consistently even while the runtime is still letting it go.
fn check_not_ended(store: &Store, id: &str) -> Result<(), ApiError> {
    match store.run(id).map_err(store_error)? {
        Some(run) if !run.status.is_running() => Err(ended_or_unknown(store, id)),
        _ => Ok(()),
    }
}

pub(crate) async fn cancel_run(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = resolve_run(&state.store, &id)?;
    if let Some(answer) = routed(&state, &id, troupe_protocol::cluster::Action::Cancel).await {
        return answer;
    }
    check_not_ended(&state.store, &id)?;
    match state.runtime.cancel(&id).await {
        Ok(()) => Ok(axum::Json(wire::RunCancelling {
            run_id: id,
            cancelling: true,
        })
        .into_response()),
        Err(RuntimeError::UnknownRun(_)) => Err(ended_or_unknown(&state.store, &id)),
        Err(err) => Err(runtime_error(err)),
    }
}

/// A run that is not in progress: 409 when it ended, 404 when unknown.
fn ended_or_unknown(store: &Store, id: &str) -> ApiError {
    match store.run(id) {
        Ok(Some(run)) => ApiError::conflict(format!(
            "run {id} is not in progress (it ended: {})",
            run.status.as_str()
        )),
        Ok(None) => ApiError::not_found(format!("no run {id}")),
        Err(err) => store_error(err),
    }
}

pub(crate) async fn approve(
    State(state): State<ApiState>,
    Path((id, approval_id)): Path<(String, String)>,
    body: Body,
) -> Result<Response, ApiError> {
    let answer: ApprovalAnswer = strict_json_body(body).await?;
    let id = resolve_run(&state.store, &id)?;
    let action = troupe_protocol::cluster::Action::Approve {
        approval_id: approval_id.clone(),
        answer: answer.clone(),
    };
    if let Some(answer) = routed(&state, &id, action).await {
        return answer;
    }
    check_not_ended(&state.store, &id)?;
    let outcome = answer.outcome.clone();
    match state
        .runtime
        .approve(&id, &approval_id, answer.outcome, answer.reason)
        .await
    {
        Ok(()) => Ok(axum::Json(wire::ApprovalAnswered {
            approval_id,
            outcome,
        })
        .into_response()),
        Err(RuntimeError::UnknownRun(_)) => Err(ended_or_unknown(&state.store, &id)),
        Err(err) => Err(runtime_error(err)),
    }
}

pub(crate) async fn send_message(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let message: RunMessage = strict_json_body(body).await?;
    if message.text.trim().is_empty() {
        return Err(ApiError::bad_request("the message text is empty"));
    }
    let id = resolve_run(&state.store, &id)?;
    let action = troupe_protocol::cluster::Action::Message {
        text: message.text.clone(),
    };
    if let Some(answer) = routed(&state, &id, action).await {
        return answer;
    }
    check_not_ended(&state.store, &id)?;
    match state.runtime.send_message(&id, &message.text).await {
        Ok(()) => Ok((
            axum::http::StatusCode::ACCEPTED,
            axum::Json(wire::MessageQueued {
                run_id: id,
                queued: true,
            }),
        )
            .into_response()),
        Err(RuntimeError::UnknownRun(_)) => Err(ended_or_unknown(&state.store, &id)),
        // The main agent is done and the run is ending.
        Err(RuntimeError::Gone) => Err(ApiError::conflict(format!(
            "run {id} is ending and takes no more messages; send it as a new prompt"
        ))),
        Err(err) => Err(runtime_error(err)),
    }
}

/// `DELETE /v1/sessions/{id}`: removes a session (an id or a unique prefix)
/// and its child sessions; 409 while a run of it is in progress.
async fn remove_session(
    State(state): State<ApiState>,
    Path(given): Path<String>,
) -> Result<Response, ApiError> {
    let id =
        crate::sessions::removable_session(&state.store, &given).map_err(|(code, message)| {
            match code {
                crate::EXIT_USAGE => ApiError::not_found(message),
                _ => ApiError::internal(message),
            }
        })?;
    let project = crate::undo::session_project(&state.store, &id).ok();
    match state.runtime.remove_session(&id).await {
        Ok(removed) => {
            troupe_tools::output::remove_spill_dirs(&state.data_dir, &removed);
            crate::undo::forget_checkpoints(&state.data_dir, project, &removed).await;
            let text = crate::sessions::removed_text(&id, &removed);
            Ok(axum::Json(wire::SessionRemoved {
                session_id: id,
                removed,
                text,
            })
            .into_response())
        }
        Err(RuntimeError::SessionBusy(_)) => Err(ApiError::conflict(format!(
            "session {id} has a run in progress; cancel it first (`troupe runs cancel RUN`)"
        ))),
        Err(err) => Err(runtime_error(err)),
    }
}

/// `POST /v1/clean`: the retention policy and the checkpoint sweep now, as
/// `troupe sessions clean` does; what was removed.
async fn clean(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let locations =
        crate::project::Locations::from_process().map_err(|err| ApiError::internal(err.message))?;
    let cleaned = crate::retention::clean_now(&state.store, &locations)
        .await
        .map_err(|(_, message)| ApiError::internal(message))?;
    Ok(axum::Json(cleaned).into_response())
}

/// An undo refusal as an API error: a conflict (a run in progress, files
/// changed outside) is 409, a usage error 404 or 400.
fn undo_error((code, message): (u8, String)) -> ApiError {
    match code {
        crate::undo::EXIT_CONFLICT => ApiError::conflict(message),
        crate::EXIT_USAGE if message.starts_with("no session") => ApiError::not_found(message),
        crate::EXIT_USAGE => ApiError::bad_request(message),
        _ => ApiError::internal(message),
    }
}

/// `POST /v1/sessions/{id}/undo`: plans (`apply: false`) or makes the undo
/// (or redo) of a session's last turn that changed files; 409 while a run
/// of the session is in progress or when files changed outside would be
/// overwritten without `force`.
async fn undo_session(
    State(state): State<ApiState>,
    Path(given): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: crate::undo::UndoRequest = strict_json_body(body).await?;
    let report = crate::undo::undo_session(&state.store, &state.data_dir, &given, request)
        .await
        .map_err(undo_error)?;
    Ok(axum::Json(report).into_response())
}

/// `GET /v1/sessions/{id}/checkpoints`: a session's checkpoints, oldest
/// first, the size of its project's checkpoint store, and the files each
/// run changed.
async fn session_checkpoints(
    State(state): State<ApiState>,
    Path(given): Path<String>,
) -> Result<Response, ApiError> {
    let list = crate::undo::list_checkpoints(&state.store, &state.data_dir, &given)
        .await
        .map_err(undo_error)?;
    Ok(axum::Json(list).into_response())
}

/// `POST /v1/sessions/{id}/compact`: summarises the older history of a
/// session (an id or a unique prefix) now and answers once it is done, with
/// the run that did it and the estimate before and after; 409 while a run of
/// it is in progress, 422 when it is too short to compact, 502 when the
/// summary could not be made.
async fn compact_session(
    State(state): State<ApiState>,
    Path(given): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    if state.closing.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the daemon is shutting down"));
    }
    let request: CompactRequest = strict_json_body(body).await?;
    if !request.cwd.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "cwd {} is not an absolute path",
            request.cwd.display()
        )));
    }
    let id = resolve_session(&state.store, &given)?;
    let prepared = (state.prepare)(RunRequest {
        prompt: String::new(),
        session_id: Some(id.clone()),
        cwd: request.cwd,
        keep_session_cwd: true,
        mode: None,
        provider: request.provider,
        model: request.model,
        limits: RunLimits::default(),
        env: request.env,
        interactive: false,
        repository: None,
        revision: None,
    })
    .await?;
    let mut handle = match state.runtime.compact(prepared.submission).await {
        Ok(handle) => handle,
        Err(RuntimeError::SessionBusy(_)) => {
            return Err(ApiError::conflict(format!(
                "session {id} has a run in progress; compact it once the run has ended"
            )));
        }
        Err(err) => return Err(runtime_error(err)),
    };
    // The estimate before and after, from the run's `compaction` events.
    let mut tokens = (0, 0);
    while let Some(event) = handle.events.recv().await {
        match &event.kind {
            EventKind::Compaction {
                before_tokens,
                after_tokens,
                ..
            } => tokens = (*before_tokens, *after_tokens),
            EventKind::RunFinished { .. } => break,
            _ => {}
        }
    }
    let outcome = handle
        .outcome
        .await
        .map_err(|_| ApiError::internal("the compaction ended without an outcome"))?;
    let text = crate::sessions::compacted_text(&outcome)
        .map_err(|(_, message)| ApiError::bad_gateway(message))?;
    Ok(axum::Json(wire::SessionCompacted {
        session_id: id,
        run_id: handle.run_id,
        before_tokens: tokens.0,
        after_tokens: tokens.1,
        text,
    })
    .into_response())
}

/// `POST /v1/sessions/{id}/rewind`: goes back to the end of the session's
/// run `to` (an id or a unique prefix; runs numbered from 1): the files
/// restored (`code`) and the conversation cut back (`conversation`, the
/// history from before kept as a branch session). 409 while a run of the
/// session is in progress (checked before anything changes), 422 for a run
/// that cannot be rewound to, 404 for an unknown session; the answer says
/// what was done.
async fn rewind_session(
    State(state): State<ApiState>,
    Path(given): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    if state.closing.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the daemon is shutting down"));
    }
    let request: wire::RewindSession = strict_json_body(body).await?;
    if !request.code && !request.conversation {
        return Err(ApiError::bad_request(
            "nothing to rewind: ask for the conversation, the code or both",
        ));
    }
    let id = resolve_session(&state.store, &given)?;
    let scope = crate::rewind::RewindScope {
        code: request.code,
        conversation: request.conversation,
        force: request.force,
    };
    let rewound = crate::rewind::rewind_on_runtime(
        &state.runtime,
        &state.store,
        &state.data_dir,
        &id,
        request.to,
        scope,
    )
    .await
    .map_err(|err| match err {
        crate::rewind::RewindError::Store(err) if crate::rewind::is_busy(&err) => {
            ApiError::conflict(err.to_string())
        }
        crate::rewind::RewindError::Store(StoreError::Rewind(refusal)) => {
            ApiError::unprocessable(refusal.to_string())
        }
        crate::rewind::RewindError::Store(err @ StoreError::NotFound { .. }) => {
            ApiError::not_found(err.to_string())
        }
        crate::rewind::RewindError::Store(err) => store_error(err),
        crate::rewind::RewindError::Files((crate::undo::EXIT_CONFLICT, message)) => {
            ApiError::conflict(message)
        }
        crate::rewind::RewindError::Files((_, message)) => ApiError::unprocessable(message),
        crate::rewind::RewindError::Runtime(err) => runtime_error(err),
    })?;
    Ok(axum::Json(rewound).into_response())
}

/// `POST /v1/views`: a read-only view of the store rendered exactly as the
/// command line prints it (`sessions list|show|export`, `trace`), for
/// commands run while this daemon holds the store.
async fn render_view(
    State(state): State<ApiState>,
    body: Body,
) -> Result<axum::Json<wire::Rendered>, ApiError> {
    let view: wire::View = json_body(body).await?;
    if let (Some(node), wire::View::RunsList { json }) = (&state.cluster, &view) {
        let runs = state.store.list_runs(None).map_err(store_error)?;
        let runs = own_runs(node, runs.iter().map(run_summary).collect());
        let runs = super::cluster::all_runs(node, runs).await?;
        return Ok(axum::Json(crate::cluster::render_runs(&runs, *json)));
    }
    let store = state.store.clone();
    let rendered = tokio::task::spawn_blocking(move || crate::sessions::render_view(&store, &view))
        .await
        .map_err(|err| ApiError::internal(format!("the view failed: {err}")))?;
    Ok(axum::Json(rendered))
}

async fn list_sessions(
    State(state): State<ApiState>,
) -> Result<axum::Json<wire::SessionList>, ApiError> {
    let sessions = state.store.list_sessions().map_err(store_error)?;
    let sessions = sessions.iter().map(session_summary).collect();
    Ok(axum::Json(wire::SessionList { sessions }))
}

async fn show_session(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<axum::Json<wire::SessionDetail>, ApiError> {
    let meta = state
        .store
        .session(&id)
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    let runs = state
        .store
        .list_runs(Some(&id))
        .map_err(store_error)?
        .iter()
        .map(run_summary)
        .collect();
    let messages = state.runtime.history(&id).await.map_err(runtime_error)?;
    Ok(axum::Json(wire::SessionDetail {
        session: session_summary(&meta),
        runs,
        messages,
    }))
}

/// `GET /v1/sessions/{id}/plan`: the task plans of the session's agent and
/// of its sub-agents, by agent path; 404 for an unknown session.
async fn session_plans(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<axum::Json<wire::SessionPlans>, ApiError> {
    let store = state.store.clone();
    let plans = tokio::task::spawn_blocking(move || read_session_plans(&store, &id))
        .await
        .map_err(|err| ApiError::internal(format!("reading the plans failed: {err}")))??;
    Ok(axum::Json(plans))
}

/// The plans [`session_plans`] answers with, read from the store.
fn read_session_plans(store: &Store, id: &str) -> Result<wire::SessionPlans, ApiError> {
    let meta = store
        .session(id)
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    let descendants = store.descendant_sessions(id).map_err(store_error)?;
    let mut plans = Vec::new();
    for session in std::iter::once(meta).chain(descendants) {
        let Some(plan) = store.task_plan(&session.id).map_err(store_error)? else {
            continue;
        };
        plans.push(wire::AgentPlan {
            agent_path: session.agent_path.unwrap_or_else(|| "main".to_owned()),
            explanation: plan.explanation,
            plan: plan.plan,
            session_id: session.id,
        });
    }
    Ok(wire::SessionPlans {
        plans,
        session_id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_cancelled_only_when_its_last_owner_left_before_it_ended() {
        assert!(owner_gone(0, false));
        assert!(!owner_gone(0, true));
        assert!(!owner_gone(1, false));
        let owners = Owners::default();
        assert_eq!(owners.change("r", true), 1);
        assert_eq!(owners.change("r", true), 2);
        assert_eq!(owners.change("r", false), 1);
        assert_eq!(owners.open("r"), 1);
        assert_eq!(owners.change("r", false), 0);
        assert_eq!(owners.open("r"), 0);
        assert_eq!(owners.change("r", false), 0);
    }

    #[test]
    fn replay_starts_after_the_last_event_seen() {
        assert_eq!(first_wanted(None, None).unwrap(), 1);
        assert_eq!(first_wanted(None, Some(0)).unwrap(), 1);
        assert_eq!(first_wanted(None, Some(7)).unwrap(), 7);
        assert_eq!(first_wanted(Some("7"), Some(2)).unwrap(), 8);
        assert_eq!(first_wanted(Some(" 0 "), None).unwrap(), 1);
        assert_eq!(
            first_wanted(Some(&u64::MAX.to_string()), None).unwrap(),
            u64::MAX
        );
        let err = first_wanted(Some("seven"), None).unwrap_err();
        assert_eq!(err.status.as_u16(), 400);
    }

    #[test]
    fn run_requests_refuse_unknown_fields_and_default_the_rest() {
        let request: RunRequest = strict_from_slice(br#"{"prompt":"hi","cwd":"/tmp"}"#).unwrap();
        assert!(!request.interactive);
        assert!(request.limits.max_turns.is_none());
        let err = strict_from_slice::<RunRequest>(br#"{"prompt":"hi","cwd":"/tmp","sudo":true}"#)
            .unwrap_err();
        assert!(err.message.contains("unknown field"), "{err:?}");
    }

    #[test]
    fn strict_requests_refuse_unknown_fields_at_any_depth_and_take_nulls_for_absent_values() {
        let nested = strict_from_slice::<RunRequest>(
            br#"{"prompt":"hi","cwd":"/tmp","limits":{"max_turns":2,"forever":true}}"#,
        )
        .unwrap_err();
        assert_eq!(nested.status.as_u16(), 400);
        assert!(nested.message.contains("`limits.forever`"), "{nested:?}");
        let request: RunRequest = strict_from_slice(
            br#"{"prompt":"hi","cwd":"/tmp","mode":null,"session_id":null,"env":{"A":"1"},"limits":{"max_turns":null}}"#,
        )
        .unwrap();
        assert_eq!(request.mode, None);
        assert_eq!(request.env.unwrap()["A"], "1");
        for (body, field) in [
            (&br#"{"outcome":"deny","why":"x"}"#[..], "why"),
            (
                &br#"{"outcome":"allow-always","reason":null,"x":1}"#[..],
                "x",
            ),
        ] {
            let err = strict_from_slice::<ApprovalAnswer>(body).unwrap_err();
            assert!(err.message.contains(&format!("`{field}`")), "{err:?}");
        }
        let err = strict_from_slice::<RunMessage>(br#"{"text":"hi","urgent":true}"#).unwrap_err();
        assert!(err.message.contains("`urgent`"), "{err:?}");
        let err = strict_from_slice::<CompactRequest>(br#"{"cwd":"/p","keep":1}"#).unwrap_err();
        assert!(err.message.contains("`keep`"), "{err:?}");
        let bad = strict_from_slice::<ApprovalAnswer>(br#"{"outcome":"maybe"}"#).unwrap_err();
        assert!(
            bad.message
                .contains("expected allow, allow_always, deny or cancel"),
            "{bad:?}"
        );
    }
}
