//! `troupe serve`: the runtime daemon. One process owns a data directory's
//! store and runs every submitted run on one actor runtime, behind the HTTP
//! API of [`api`].
//!
//! Start-up: refuse when another live daemon owns the home (its
//! `daemon.json` names a live process), open the store, mark runs a dead
//! process left unfinished as interrupted, create the token on first start,
//! bind (loopback and any free port unless `--listen` says otherwise) and
//! write `daemon.json` `{addr, pid}`. Its soft open-files limit is raised to
//! the hard one, and connections are served by [`server`] under the limits of
//! [`connections`]. Runs of one project share its MCP
//! servers ([`mcp_hubs`]). SIGTERM, SIGINT or SIGHUP: stop accepting runs,
//! cancel the runs in progress and wait for their last events (bounded),
//! stop the runtime, shut every MCP server down, flush the store, remove
//! `daemon.json`, exit 0.
//!
//! With `--cluster URL` (or `[cluster] url`, `TROUPE_CLUSTER`) the daemon is
//! a node of a NATS JetStream cluster ([`cluster`]): it joins before
//! anything else, and a server that cannot be reached, refuses the
//! credentials or has no JetStream ends the start with exit 2.

pub(crate) mod api;
pub(crate) mod cluster;
pub(crate) mod cluster_ops;
pub(crate) mod connections;
pub(crate) mod control;
pub(crate) mod error;
pub(crate) mod failover;
pub(crate) mod guard;
pub(crate) mod home;
pub(crate) mod idle;
pub(crate) mod mcp_hubs;
pub(crate) mod peer;
pub(crate) mod server;
pub(crate) mod spawn;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use troupe_actors::{Approver, Runtime};
use troupe_protocol::api::RunRequest;
use troupe_store::Store;

use self::api::{ApiState, Prepare, PreparedRun};
use self::error::ApiError;
use self::home::DaemonState;
use self::idle::Activity;
use self::mcp_hubs::McpHubs;
use crate::EXIT_RUNTIME;
use crate::project::{Locations, RunOptions};
use crate::setup;

/// How long a stopping daemon waits for cancelled runs to write their last
/// events.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// How long a group of store writes may run before the daemon gives up on
/// its store: it records the stall, removes `daemon.json` and exits with
/// [`crate::EXIT_STORE_STALLED`], and the next client starts a fresh daemon,
/// which marks the runs left behind interrupted. A hung sled write cannot be
/// cancelled; only a new process gets the store back.
pub(crate) const STORE_STALL_DEADLINE: Duration = Duration::from_secs(30);

/// Where the daemon listens unless told otherwise: loopback, any free port
/// (clients find it in `daemon.json`).
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:0";

/// How `troupe serve` was asked to run.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServeOptions {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--allow-host`.
    pub allowed_hosts: Vec<String>,
    /// `--idle-exit`: exit after this long with nothing to do.
    pub idle_exit: Option<Duration>,
    /// The limits on connections.
    pub limits: connections::Limits,
    /// `--cluster`, `--node`, `--capacity`.
    pub cluster: cluster::ClusterFlags,
}

/// Runs `troupe serve`; returns the exit code.
pub(crate) async fn serve(options: ServeOptions) -> u8 {
    let joined = match join_cluster(&options.cluster).await {
        Ok(joined) => joined,
        Err(message) => {
            eprintln!("troupe serve: {message}");
            return crate::EXIT_USAGE;
        }
    };
    match run_daemon(options, joined).await {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("troupe serve: {message}");
            EXIT_RUNTIME
        }
    }
}

/// Joins the cluster the flags or the user's `[cluster]` table name; `None`
/// when neither names one.
async fn join_cluster(
    flags: &cluster::ClusterFlags,
) -> Result<Option<troupe_cluster::Cluster>, String> {
    let file = match Locations::from_process() {
        Ok(locations) => locations.cluster_settings(),
        Err(_) => Default::default(),
    };
    let Some(settings) = cluster::settings(flags, &file, &cluster::host_name(), std::process::id())
    else {
        return Ok(None);
    };
    let joined = troupe_cluster::Cluster::connect(settings)
        .await
        .map_err(|err| err.to_string())?;
    eprintln!(
        "troupe serve: node {} of the cluster at {}",
        joined.node(),
        joined.masked_url()
    );
    Ok(Some(joined))
}

async fn run_daemon(
    options: ServeOptions,
    joined: Option<troupe_cluster::Cluster>,
) -> Result<(), String> {
    let ServeOptions {
        listen,
        allowed_hosts,
        idle_exit,
        limits,
        cluster: _,
    } = options;
    // The cap on connections without the token, not the descriptor limit,
    // bounds them: the cap stays within a quarter of the limit raised here.
    let limits = limits.within_open_files(server::raise_open_files());
    let locations = Arc::new(Locations::from_process().map_err(|err| err.message)?);
    let data_dir = locations.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .map_err(|err| format!("cannot create {}: {err}", data_dir.display()))?;
    if let Some(state) = home::read_state(&data_dir)
        && state.pid != std::process::id()
        && home::daemon_alive(&state)
    {
        return Err(format!(
            "a daemon already runs on {} (pid {}, listening on {}); stop it first or use it",
            data_dir.display(),
            state.pid,
            state.addr
        ));
    }
    let store = locations.open_store().map_err(|err| err.message)?;
    watch_store(&store, &data_dir)?;
    // Its commands end with the daemon, even when it is killed (-9).
    let _reaper = match troupe_process::reaper::start() {
        Ok(reaper) => Some(reaper),
        Err(err) => {
            tracing::warn!(%err, "no reaper started: a command may outlive a killed daemon");
            None
        }
    };
    let telemetry = crate::telemetry::start(&store, troupe_telemetry::LogStyle::Detailed);
    let previous_stall = home::take_stall(&data_dir).map(|stall| {
        let sentence = stall.sentence();
        eprintln!("troupe serve: the previous daemon ({sentence})");
        tracing::warn!(previous = %sentence, "the previous daemon ended on a hung store write");
        sentence
    });
    crate::run::report_recovered(&store, false);
    let token = home::load_or_create_token(&data_dir)
        .map_err(|err| format!("cannot create the token in {}: {err}", data_dir.display()))?;
    let listen = listen.unwrap_or_else(|| {
        DEFAULT_LISTEN
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
    });
    let listener =
        server::bind(listen).map_err(|err| format!("cannot listen on {listen}: {err}"))?;
    let bound = listener
        .local_addr()
        .map_err(|err| format!("cannot read the listening address: {err}"))?;
    let socket_path = data_dir.join(home::SOCKET_FILE);
    let unix = match bind_socket(&socket_path) {
        Ok(unix) => Some(unix),
        Err(err) => {
            eprintln!(
                "troupe serve: no Unix socket at {} ({err}); local clients use TCP",
                socket_path.display()
            );
            None
        }
    };
    let runtime = Runtime::start(store.clone())
        .await
        .map_err(|err| err.to_string())?;
    let closing = Arc::new(AtomicBool::new(false));
    let activity = Arc::new(Activity::default());
    let hubs = Arc::new(McpHubs::default());
    let sweeper = tokio::spawn(sweep_hubs(hubs.clone()));
    let retention = tokio::spawn(retain_periodically(store.clone(), locations.clone()));
    let stopping = CancellationToken::new();
    let state = ApiState {
        runtime: runtime.clone(),
        store: store.clone(),
        data_dir: data_dir.clone(),
        token: token.into(),
        listen: bound,
        allowed_hosts: Arc::new(allowed_hosts),
        prepare: prepare_function(store.clone(), locations.clone(), hubs.clone()),
        closing: closing.clone(),
        activity: activity.clone(),
        owners: Default::default(),
        stopping: stopping.clone(),
        per_run: Some(telemetry.per_run()),
        cluster: joined.map(|joined| cluster::ClusterNode::new(joined, bound.to_string())),
        about: Arc::new(api::About {
            started: chrono::Utc::now(),
            idle_exit,
            socket: unix.as_ref().map(|_| socket_path.clone()),
            otlp_endpoint: telemetry.otlp_endpoint(),
            log_filter: telemetry.log_filter(),
            previous_stall,
        }),
    };
    home::write_state(
        &data_dir,
        &DaemonState {
            addr: bound.to_string(),
            pid: std::process::id(),
            socket: unix.as_ref().map(|_| socket_path.clone()),
        },
    )
    .map_err(|err| {
        format!(
            "cannot write {}: {err}",
            home::state_path(&data_dir).display()
        )
    })?;
    eprintln!(
        "troupe serve: listening on http://{bound} (pid {})",
        std::process::id()
    );
    tracing::info!(addr = %bound, "daemon listening");

    let mut terminate = signal(SignalKind::terminate()).map_err(|err| err.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|err| err.to_string())?;
    let mut hangup = signal(SignalKind::hangup()).map_err(|err| err.to_string())?;
    let idle_runtime = runtime.clone();
    let stop = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
            _ = hangup.recv() => {}
            () = until_idle(idle_exit, &idle_runtime, &activity) => {
                let secs = idle_exit.unwrap_or_default().as_secs();
                eprintln!("troupe serve: nothing to do for {secs} s; exiting");
            }
        }
    };
    let cluster_node = state.cluster.clone();
    if let Some(node) = &cluster_node {
        cluster::start(state.clone(), node.clone());
    }
    let listeners = server::Listeners {
        tcp: listener,
        unix,
    };
    let server = tokio::spawn(server::serve(
        listeners,
        api::router(state.clone()).merge(crate::dashboard::router(state)),
        limits,
        stopping.clone(),
    ));
    stop.await;
    eprintln!("troupe serve: stopping");
    closing.store(true, Ordering::SeqCst);
    cancel_runs(&runtime).await;
    if let Some(node) = &cluster_node {
        node.leave(CANCEL_GRACE).await;
    }
    // Open SSE streams end with their runs; the listener closes now.
    stopping.cancel();
    if tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 5 s; closing them");
    }
    runtime.shutdown().await;
    sweeper.abort();
    retention.abort();
    hubs.shutdown().await;
    crate::await_killed_processes().await;
    if let Err(err) = store.flush() {
        eprintln!("troupe serve: the store could not be flushed: {err}");
    }
    telemetry.stop();
    if home::read_state(&data_dir).is_some_and(|state| state.pid == std::process::id()) {
        let _ = std::fs::remove_file(&socket_path);
    }
    home::remove_state(&data_dir);
    Ok(())
}

/// Starts the store writer's watchdog: a group of writes that has not
/// returned within [`STORE_STALL_DEADLINE`] ends the daemon with
/// [`crate::EXIT_STORE_STALLED`], after it records the stall and gives up
/// its `daemon.json` (a hung sled write holds the store for good).
fn watch_store(store: &Store, data_dir: &std::path::Path) -> Result<(), String> {
    let data_dir = data_dir.to_path_buf();
    store
        .watch_writer(STORE_STALL_DEADLINE, move |stall| {
            let record = home::StallRecord {
                pid: std::process::id(),
                started: stall
                    .started
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                waited_ms: u64::try_from(stall.waited.as_millis()).unwrap_or(u64::MAX),
                writes: stall.writes,
            };
            home::write_stall(&data_dir, &record);
            home::remove_state(&data_dir);
            eprintln!(
                "troupe serve: a store write has not returned for {} s; exiting so that \
                 the next client starts a fresh daemon",
                stall.waited.as_secs()
            );
            std::process::exit(i32::from(crate::EXIT_STORE_STALLED));
        })
        .map_err(|err| err.to_string())
}

/// Resolves once the daemon has had nothing to do for `idle` (never when
/// `None`), checking a few times per period.
async fn until_idle(idle: Option<Duration>, runtime: &Runtime, activity: &Activity) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut ticks = tokio::time::interval(period);
    loop {
        ticks.tick().await;
        let running = runtime.running().await.map_or(0, |runs| runs.len());
        if idle::idle_for_too_long(
            std::time::Instant::now(),
            activity.last_request(),
            idle,
            running,
            activity.open_streams(),
        ) {
            return;
        }
    }
}

/// Applies the retention policy now and every
/// [`crate::retention::DAEMON_RETENTION_PERIOD`] on a blocking thread, until
/// aborted. Runs in progress are safe: the store never removes a session with
/// a run marked running, nor the child sessions such a run created.
async fn retain_periodically(store: Store, locations: Arc<Locations>) {
    let mut ticks = tokio::time::interval(crate::retention::DAEMON_RETENTION_PERIOD);
    loop {
        ticks.tick().await;
        let store = store.clone();
        let locations = locations.clone();
        let pass = tokio::task::spawn_blocking({
            let store = store.clone();
            let locations = locations.clone();
            move || {
                crate::retention::apply(&store, &locations, &std::collections::HashSet::new());
            }
        });
        if let Err(err) = pass.await {
            tracing::warn!(%err, "the retention pass stopped");
        }
        crate::retention::sweep_checkpoints(&store, &locations, &std::collections::HashSet::new())
            .await;
    }
}

/// Shuts down the MCP servers no run needs any more, every
/// [`mcp_hubs::SWEEP_PERIOD`], until aborted.
async fn sweep_hubs(hubs: Arc<McpHubs>) {
    let mut ticks = tokio::time::interval(mcp_hubs::SWEEP_PERIOD);
    loop {
        ticks.tick().await;
        hubs.sweep(std::time::Instant::now()).await;
    }
}

/// Cancels every run in progress and waits (bounded) until each has ended.
async fn cancel_runs(runtime: &Runtime) {
    let running = runtime.running().await.unwrap_or_default();
    let mut followers = Vec::new();
    for run_id in running {
        if let Ok(mut events) = runtime.subscribe(&run_id, u64::MAX).await {
            followers.push(async move { while events.recv().await.is_some() {} }.boxed());
        }
        let _ = runtime.cancel(&run_id).await;
    }
    if tokio::time::timeout(CANCEL_GRACE, futures::future::join_all(followers))
        .await
        .is_err()
    {
        tracing::warn!("runs still ending after the grace period; stopping them");
    }
}

/// Prepares runs the way `troupe run` does, from the request's options,
/// with the project's shared MCP servers.
fn prepare_function(store: Store, locations: Arc<Locations>, hubs: Arc<McpHubs>) -> Prepare {
    Arc::new(move |request: RunRequest| {
        let (store, locations, hubs) = (store.clone(), locations.clone(), hubs.clone());
        async move { prepare_run(request, &store, &locations, &hubs).await }.boxed()
    })
}

async fn prepare_run(
    request: RunRequest,
    store: &Store,
    locations: &Locations,
    hubs: &McpHubs,
) -> Result<PreparedRun, ApiError> {
    let session_id = match request.session_id.as_deref() {
        Some(given) => Some(
            crate::ids::resolve(store, crate::ids::IdKind::Session, given).map_err(
                |err| match err.code {
                    crate::EXIT_USAGE => ApiError::not_found(err.message),
                    _ => ApiError::internal(err.message),
                },
            )?,
        ),
        None => None,
    };
    let options = RunOptions {
        cwd: (!request.keep_session_cwd || session_id.is_none()).then(|| request.cwd.clone()),
        provider: request.provider.clone(),
        model: request.model.clone(),
        mode: request.mode,
        max_turns: request.limits.max_turns,
        budget_tokens: request.limits.budget_tokens,
        timeout_secs: request.limits.timeout_secs,
    };
    let client_locations = request
        .env
        .map(|vars| Locations::for_client(locations.data_dir.clone(), vars, request.cwd.clone()));
    let mut prepared = setup::prepare_with(
        &options,
        None,
        store,
        client_locations.as_ref().unwrap_or(locations),
        session_id.as_deref(),
        setup::McpSource::Shared(hubs),
    )
    .await
    .map_err(|err| match err.code {
        crate::EXIT_USAGE => ApiError::unprocessable(err.message),
        _ => ApiError::internal(err.message),
    })?;
    let approver = if request.interactive {
        Approver::Present
    } else {
        Approver::Absent
    };
    let warnings = std::mem::take(&mut prepared.warnings);
    let submission = prepared.into_submission(request.prompt, approver);
    Ok(PreparedRun {
        submission,
        warnings,
    })
}

/// Listens on the Unix socket at `path` (a stale one, left by a daemon that
/// is gone, is replaced), which only this user may connect to.
fn bind_socket(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let (address, _dir) = home::socket_address(path)?;
    let listener = tokio::net::UnixListener::bind(&address)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}
