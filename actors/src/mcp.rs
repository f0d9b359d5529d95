//! MCP servers as actors (DESIGN.md: `McpSupervisor ─ McpServer (per server)`,
//! SPEC §8).
//!
//! One [`McpServerActor`] per configured server owns that server's session
//! (and, for stdio, its child process group). It connects in a task of its
//! own, so its mailbox stays free; the connect and the first tool list are
//! bounded by [`CONNECT_TIMEOUT`]. Once ready it publishes its tools in the
//! shared [`McpState`], re-lists them when the server says they changed, and
//! watches the connection: when the server exits or the session breaks, it
//! withdraws its tools, records why and stops. The [`McpSupervisor`] then
//! starts a fresh server actor after an exponentially growing delay
//! ([`restart_delay`]); a server that stays up for a while is healthy again.
//! A panic in a server actor is one failed server, restarted the same way.
//!
//! [`McpHub`] is the handle front doors hold: it starts the tree, exposes the
//! state, and shuts everything down concurrently within [`SHUTDOWN_BUDGET`],
//! killing every stdio server's whole process group. Dropping the last
//! handle without shutting down stops the tree too (sessions are then cut
//! rather than closed, and the process groups killed).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use troupe_mcp::RmcpTool;
use troupe_mcp::state::next_attempt;
use troupe_mcp::tool::tools_of;
use troupe_mcp::{
    CONNECT_TIMEOUT, Connection, McpServerSpec, McpState, SHUTDOWN_BUDGET, ServerPhase,
    restart_delay,
};
use troupe_telemetry::genai;

/// Time a shutdown leaves, beyond the servers' budget, for the actors'
/// replies.
const REPLY_ROOM: Duration = Duration::from_millis(500);

/// The environment a stdio server starts from (`None`: this process's).
pub type BaseEnv = Option<Arc<Vec<(String, String)>>>;

/// Messages of a server actor.
pub(crate) enum McpServerMsg {
    /// Connect (sent to itself at start).
    Connect,
    /// The connect task succeeded.
    Connected(Box<Connection>, Vec<RmcpTool>),
    /// The connect task failed.
    ConnectFailed(String),
    /// The server said its tools changed; a fresh list.
    Tools(Vec<RmcpTool>),
    /// The connection ended.
    Lost(String),
    /// Close the session (shutdown) and stop.
    Close(Duration, RpcReplyPort<()>),
}

/// Arguments of a server actor.
pub(crate) struct McpServerArgs {
    /// The server.
    pub spec: McpServerSpec,
    /// Where its status goes.
    pub state: Arc<McpState>,
    /// The environment a stdio server starts from.
    pub base_env: BaseEnv,
    /// Its supervisor, told when the server ended.
    pub supervisor: ActorRef<McpSupervisorMsg>,
}

/// The actor owning one server's session.
pub(crate) struct McpServerActor;

/// State of a server actor.
pub(crate) struct McpServerState {
    spec: McpServerSpec,
    state: Arc<McpState>,
    base_env: BaseEnv,
    supervisor: ActorRef<McpSupervisorMsg>,
    connection: Option<Arc<Connection>>,
    ready_at: Option<Instant>,
    /// Cancels the connect task and the watcher when the actor goes away
    /// (also after a panic, when `post_stop` does not run).
    _stop_tasks: DropGuard,
    tasks: CancellationToken,
    /// The end was reported to the supervisor.
    reported: bool,
}

impl Actor for McpServerActor {
    type Msg = McpServerMsg;
    type State = McpServerState;
    type Arguments = McpServerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(McpServerMsg::Connect)?;
        let tasks = CancellationToken::new();
        Ok(McpServerState {
            spec: args.spec,
            state: args.state,
            base_env: args.base_env,
            supervisor: args.supervisor,
            connection: None,
            ready_at: None,
            _stop_tasks: tasks.clone().drop_guard(),
            tasks,
            reported: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            McpServerMsg::Connect => state.start_connect(&myself),
            McpServerMsg::Connected(connection, tools) => {
                state.on_connected(&myself, Arc::from(connection), &tools)
            }
            McpServerMsg::ConnectFailed(reason) => {
                // Said once; the retries that fail the same way are details.
                let first = state
                    .state
                    .status(&state.spec.name)
                    .is_none_or(|s| s.last_error.is_none());
                if first {
                    tracing::warn!(server = %state.spec.name, %reason, "MCP server could not start");
                } else {
                    tracing::debug!(server = %state.spec.name, %reason, "MCP server could not start");
                }
                state.state.update(&state.spec.name, |s| {
                    s.phase = ServerPhase::Failed;
                    s.tools.clear();
                    s.last_error = Some(reason);
                });
                state.end(&myself);
            }
            McpServerMsg::Tools(tools) => {
                if let Some(connection) = state.connection.clone() {
                    state.publish(&connection, &tools);
                }
            }
            McpServerMsg::Lost(reason) => {
                tracing::warn!(server = %state.spec.name, %reason, "MCP server ended");
                if let Some(connection) = state.connection.take() {
                    // Nothing to wait for: kill what is left of its group.
                    connection.close(Duration::ZERO).await;
                }
                state.state.update(&state.spec.name, |s| {
                    s.phase = ServerPhase::Restarting;
                    s.tools.clear();
                    s.last_error = Some(reason);
                });
                state.end(&myself);
            }
            McpServerMsg::Close(budget, reply) => {
                state.tasks.cancel();
                if let Some(connection) = state.connection.take() {
                    connection.close(budget).await;
                }
                state.state.update(&state.spec.name, |s| {
                    s.phase = ServerPhase::Stopped;
                    s.tools.clear();
                });
                state.reported = true;
                let _ = reply.send(());
                myself.stop(None);
            }
        }
        Ok(())
    }
}

impl McpServerState {
    /// Connects and lists the tools in a task, bounded by the connect timeout.
    fn start_connect(&self, myself: &ActorRef<McpServerMsg>) {
        let spec = self.spec.clone();
        let base_env = self.base_env.clone();
        let me = myself.clone();
        let cancel = self.tasks.clone();
        let span = genai::mcp_connect_span(
            &tracing::Span::none(),
            &spec.name,
            genai::mcp_network_transport(spec.transport_name()),
        );
        let connect_span = span.clone();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let attempt = async {
                    let connection =
                        Connection::connect(&spec, base_env.as_deref().map(Vec::as_slice))
                            .await
                            .map_err(|err| err.0)?;
                    let tools = connection.list_tools().await.map_err(|err| err.0)?;
                    Ok::<_, String>((connection, tools))
                };
                let outcome = tokio::select! {
                    _ = cancel.cancelled() => return,
                    outcome = tokio::time::timeout(CONNECT_TIMEOUT, attempt) => outcome,
                };
                genai::record_mcp_connect(
                    &connect_span,
                    match &outcome {
                        Ok(Ok(_)) => "connected",
                        Ok(Err(_)) => "failed",
                        Err(_) => "timed_out",
                    },
                );
                drop(connect_span);
                let message = match outcome {
                    Ok(Ok((connection, tools))) => {
                        McpServerMsg::Connected(Box::new(connection), tools)
                    }
                    Ok(Err(reason)) => McpServerMsg::ConnectFailed(reason),
                    Err(_) => McpServerMsg::ConnectFailed(format!(
                        "it did not complete the MCP handshake and list its tools within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )),
                };
                // A stopped actor drops the message, and with it the
                // connection, which kills the server's process group.
                let _ = me.cast(message);
            },
            span,
        ));
    }

    fn on_connected(
        &mut self,
        myself: &ActorRef<McpServerMsg>,
        connection: Arc<Connection>,
        tools: &[RmcpTool],
    ) {
        tracing::info!(
            server = %self.spec.name,
            info = %connection.server_info(),
            tools = tools.len(),
            "MCP server ready"
        );
        self.ready_at = Some(Instant::now());
        self.connection = Some(connection.clone());
        self.publish(&connection, tools);
        // Watch the connection: its end, and changes of its tool list.
        let me = myself.clone();
        let cancel = self.tasks.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    reason = connection.ended() => {
                        let _ = me.cast(McpServerMsg::Lost(reason));
                        return;
                    }
                    _ = connection.tools_changed() => {
                        match connection.list_tools().await {
                            Ok(tools) => {
                                if me.cast(McpServerMsg::Tools(tools)).is_err() {
                                    return;
                                }
                            }
                            Err(err) => tracing::warn!(%err, "MCP tools/list after a change failed"),
                        }
                    }
                }
            }
        });
    }

    /// Publishes the tools of the live connection.
    fn publish(&self, connection: &Connection, tools: &[RmcpTool]) {
        let (kept, skipped) = tools_of(&self.spec.name, tools, &connection.link());
        for reason in &skipped {
            tracing::warn!(server = %self.spec.name, "{reason}");
        }
        let info = connection.server_info().to_string();
        self.state.update(&self.spec.name, |s| {
            s.phase = ServerPhase::Ready;
            s.tools = kept;
            s.skipped = skipped;
            s.server_info = info;
        });
    }

    /// Tells the supervisor the server ended, then stops.
    fn end(&mut self, myself: &ActorRef<McpServerMsg>) {
        self.tasks.cancel();
        if !self.reported {
            self.reported = true;
            let uptime = self.ready_at.map(|at| at.elapsed());
            let _ = self.supervisor.cast(McpSupervisorMsg::Ended {
                server: self.spec.name.clone(),
                uptime,
            });
        }
        myself.stop(None);
    }
}

/// Messages of the supervisor.
pub(crate) enum McpSupervisorMsg {
    /// A server ended after `uptime` of being ready (`None`: it never was).
    Ended {
        /// The server.
        server: String,
        /// How long it was ready.
        uptime: Option<Duration>,
    },
    /// Start `server` again (after its backoff).
    Restart(String),
    /// Stop restarting; reply with the server actors to close.
    BeginShutdown(RpcReplyPort<Vec<ActorRef<McpServerMsg>>>),
}

/// Arguments of the supervisor.
pub(crate) struct McpSupervisorArgs {
    /// Every server to run.
    pub specs: Vec<McpServerSpec>,
    /// The shared state.
    pub state: Arc<McpState>,
    /// The environment stdio servers start from.
    pub base_env: BaseEnv,
}

/// Supervises one actor per server and restarts them with backoff.
pub(crate) struct McpSupervisor;

/// State of the supervisor.
pub(crate) struct McpSupervisorState {
    specs: HashMap<String, McpServerSpec>,
    state: Arc<McpState>,
    base_env: BaseEnv,
    attempts: HashMap<String, u32>,
    children: HashMap<ActorId, (String, ActorRef<McpServerMsg>)>,
    shutting_down: bool,
}

impl Actor for McpSupervisor {
    type Msg = McpSupervisorMsg;
    type State = McpSupervisorState;
    type Arguments = McpSupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = McpSupervisorState {
            specs: HashMap::new(),
            state: args.state,
            base_env: args.base_env,
            attempts: HashMap::new(),
            children: HashMap::new(),
            shutting_down: false,
        };
        for spec in args.specs {
            let name = spec.name.clone();
            state.specs.insert(name.clone(), spec);
            state.spawn_server(&myself, &name).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            McpSupervisorMsg::Ended { server, uptime } => {
                state.schedule_restart(&myself, &server, uptime)
            }
            McpSupervisorMsg::Restart(server) => {
                if !state.shutting_down {
                    state.state.update(&server, |s| s.restarts += 1);
                    state.spawn_server(&myself, &server).await;
                }
            }
            McpSupervisorMsg::BeginShutdown(reply) => {
                state.shutting_down = true;
                let children = state.children.values().map(|(_, r)| r.clone()).collect();
                let _ = reply.send(children);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a server did: a failed server is restarted.
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.children.remove(&cell.get_id());
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some((server, _)) = state.children.remove(&cell.get_id()) {
                    tracing::error!(%server, %err, "MCP server actor failed");
                    state.state.update(&server, |s| {
                        s.phase = ServerPhase::Failed;
                        s.tools.clear();
                        s.last_error = Some(format!("its actor failed: {err}"));
                    });
                    state.schedule_restart(&myself, &server, None);
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for (_, child) in state.children.values() {
            child.stop(None);
        }
        Ok(())
    }
}

impl McpSupervisorState {
    async fn spawn_server(&mut self, myself: &ActorRef<McpSupervisorMsg>, server: &str) {
        let Some(spec) = self.specs.get(server).cloned() else {
            return;
        };
        let args = McpServerArgs {
            spec,
            state: self.state.clone(),
            base_env: self.base_env.clone(),
            supervisor: myself.clone(),
        };
        match Actor::spawn_linked(None, McpServerActor, args, myself.get_cell()).await {
            Ok((child, _)) => {
                self.children
                    .insert(child.get_id(), (server.to_string(), child));
            }
            Err(err) => {
                tracing::error!(%server, %err, "MCP server actor could not start");
                self.state.update(server, |s| {
                    s.phase = ServerPhase::Failed;
                    s.last_error = Some(format!("its actor could not start: {err}"));
                });
            }
        }
    }

    fn schedule_restart(
        &mut self,
        myself: &ActorRef<McpSupervisorMsg>,
        server: &str,
        uptime: Option<Duration>,
    ) {
        if self.shutting_down {
            return;
        }
        let attempt = self.attempts.get(server).copied().unwrap_or(0);
        let next = next_attempt(attempt, uptime);
        let delay = restart_delay(next.saturating_sub(1));
        self.attempts.insert(server.to_string(), next);
        tracing::info!(%server, delay_ms = delay.as_millis() as u64, "MCP server restarts");
        myself.send_after(delay, {
            let server = server.to_string();
            move || McpSupervisorMsg::Restart(server)
        });
    }
}

/// The handle to a running set of MCP servers. Cheap to clone; the last
/// clone dropped without [`McpHub::shutdown`] stops the servers abruptly.
#[derive(Clone)]
pub struct McpHub(Arc<HubInner>);

struct HubInner {
    state: Arc<McpState>,
    supervisor: ActorRef<McpSupervisorMsg>,
}

impl Drop for HubInner {
    fn drop(&mut self) {
        // Stops every server actor; their connections kill their groups.
        self.supervisor.stop(None);
    }
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("McpHub").field(&self.0.state).finish()
    }
}

impl McpHub {
    /// Starts one supervised actor per server; they connect concurrently.
    pub async fn start(specs: Vec<McpServerSpec>, base_env: BaseEnv) -> Result<Self, String> {
        let state = Arc::new(McpState::new(&specs));
        let args = McpSupervisorArgs {
            specs,
            state: state.clone(),
            base_env,
        };
        let (supervisor, _) = Actor::spawn(None, McpSupervisor, args)
            .await
            .map_err(|err| format!("the MCP supervisor could not start: {err}"))?;
        Ok(Self(Arc::new(HubInner { state, supervisor })))
    }

    /// The servers' shared state.
    pub fn state(&self) -> &Arc<McpState> {
        &self.0.state
    }

    /// How many handles to these servers exist, this one included: a
    /// registry that keeps one knows the servers are in use while it sees
    /// more than one.
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Closes every session concurrently within [`SHUTDOWN_BUDGET`], kills
    /// each stdio server's process group, and stops the supervisor.
    pub async fn shutdown(&self) {
        // Leave room for the replies within the budget.
        self.shutdown_within(SHUTDOWN_BUDGET.saturating_sub(REPLY_ROOM))
            .await;
    }

    /// Closes every session concurrently, gives each server `budget` to end
    /// by itself, then kills what is left of each stdio server's process
    /// group, and stops the supervisor.
    pub async fn shutdown_within(&self, budget: Duration) {
        let supervisor = &self.0.supervisor;
        let children = match supervisor
            .call(McpSupervisorMsg::BeginShutdown, Some(budget + REPLY_ROOM))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(children)) => children,
            _ => Vec::new(),
        };
        let closing = children.into_iter().map(|child| async move {
            let _ = child
                .call(
                    |reply| McpServerMsg::Close(budget, reply),
                    Some(budget + REPLY_ROOM),
                )
                .await;
            child.stop(None);
        });
        futures::future::join_all(closing).await;
        supervisor.stop(None);
    }
}
