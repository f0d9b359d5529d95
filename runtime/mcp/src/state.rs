//! What every MCP server is doing, shared by the actors that run the servers
//! (writers) and the runs, the catalogue and `troupe mcp list` (readers)
//! (SPEC §8).
//!
//! Each change of a server's status is announced on a watch channel; a change
//! of the set of tools also raises the tools generation, which is what an
//! agent compares to know that its catalogue is stale (a status change that
//! keeps the tools leaves the catalogue, and so the cached request prefix,
//! alone). The decisions about time are pure functions: how long a run's first
//! request still waits for servers that are starting (`startup_wait`) and
//! how long a supervisor waits before restarting a server ([`restart_delay`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::spec::McpServerSpec;
use super::tool::McpTool;
use troupe_tools::Tool;

/// First delay before a restart.
pub(crate) const RESTART_BASE_DELAY: Duration = Duration::from_millis(500);

/// Longest delay between restarts.
pub(crate) const RESTART_MAX_DELAY: Duration = Duration::from_secs(60);

/// A server up this long counts as healthy: its next failure restarts at once
/// (after the base delay) again.
pub(crate) const HEALTHY_UPTIME: Duration = Duration::from_secs(60);

/// What a server is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPhase {
    /// Connecting for the first time.
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// It failed to start; it is tried again later.
    Failed,
    /// It ended after having been ready; it is being restarted.
    Restarting,
    /// Shut down.
    Stopped,
}

impl ServerPhase {
    /// The name shown in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
        }
    }
}

/// One server's status.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    /// The entry's name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The command line or URL.
    pub target: String,
    /// What it is doing.
    pub phase: ServerPhase,
    /// Its offered tools, sorted by name (empty unless ready).
    pub tools: Vec<Arc<McpTool>>,
    /// Why some of its tools are not offered.
    pub skipped: Vec<String>,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// Restarts so far.
    pub restarts: u32,
    /// How long a run's first request waits for it while it starts.
    pub grace: Duration,
    /// The name and version it announced.
    pub server_info: String,
}

impl ServerStatus {
    /// A server about to connect for the first time.
    pub fn starting(spec: &McpServerSpec) -> Self {
        Self {
            name: spec.name.clone(),
            transport: spec.transport_name(),
            target: spec.target(),
            phase: ServerPhase::Starting,
            tools: Vec::new(),
            skipped: Vec::new(),
            last_error: None,
            restarts: 0,
            grace: spec.startup_grace,
            server_info: String::new(),
        }
    }

    /// Names of its offered tools.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }
}

/// The shared status of a set of servers.
pub struct McpState {
    started: Instant,
    servers: RwLock<BTreeMap<String, ServerStatus>>,
    tools_generation: AtomicU64,
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for McpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpState")
            .field("servers", &self.statuses().len())
            .field("tools_generation", &self.tools_generation())
            .finish()
    }
}

impl McpState {
    /// Every server of `specs` starting, from now.
    pub fn new(specs: &[McpServerSpec]) -> Self {
        let servers = specs
            .iter()
            .map(|spec| (spec.name.clone(), ServerStatus::starting(spec)))
            .collect();
        Self {
            started: Instant::now(),
            servers: RwLock::new(servers),
            tools_generation: AtomicU64::new(0),
            changes: watch::channel(0).0,
        }
    }

    /// Changes the status of `server` (unknown names are ignored) and
    /// announces it; the tools generation rises when its tools changed.
    pub fn update(&self, server: &str, change: impl FnOnce(&mut ServerStatus)) {
        let tools_changed = {
            let mut servers = self.servers.write().unwrap_or_else(PoisonError::into_inner);
            let Some(status) = servers.get_mut(server) else {
                return;
            };
            let handles = |s: &ServerStatus| -> Vec<*const McpTool> {
                s.tools.iter().map(Arc::as_ptr).collect()
            };
            let before = handles(status);
            change(status);
            // New handles (a restart) are a change even under the same names.
            before != handles(status)
        };
        if tools_changed {
            self.tools_generation.fetch_add(1, Ordering::SeqCst);
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// The statuses, by name.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        let servers = self.servers.read().unwrap_or_else(PoisonError::into_inner);
        servers.values().cloned().collect()
    }

    /// The status of `server`.
    pub fn status(&self, server: &str) -> Option<ServerStatus> {
        let servers = self.servers.read().unwrap_or_else(PoisonError::into_inner);
        servers.get(server).cloned()
    }

    /// Rises whenever the set of offered tools changes.
    pub fn tools_generation(&self) -> u64 {
        self.tools_generation.load(Ordering::SeqCst)
    }

    /// The tools of every ready server, sorted by name, with the generation
    /// they belong to.
    pub fn tools(&self) -> (u64, Vec<Arc<dyn Tool>>) {
        let servers = self.servers.read().unwrap_or_else(PoisonError::into_inner);
        let generation = self.tools_generation();
        let mut tools: Vec<Arc<McpTool>> = servers
            .values()
            .filter(|s| s.phase == ServerPhase::Ready)
            .flat_map(|s| s.tools.iter().cloned())
            .collect();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        let tools = tools
            .into_iter()
            .map(|tool| tool as Arc<dyn Tool>)
            .collect();
        (generation, tools)
    }

    /// A receiver that sees every status change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Waits while a server is still starting for the first time and its
    /// grace period (counted from when the servers were started) lasts.
    pub async fn wait_for_startup(&self) {
        let mut changes = self.subscribe();
        loop {
            let pending: Vec<Duration> = self
                .statuses()
                .iter()
                .filter(|s| s.phase == ServerPhase::Starting)
                .map(|s| s.grace)
                .collect();
            let Some(wait) = startup_wait(&pending, self.started.elapsed()) else {
                return;
            };
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep(wait) => return,
            }
        }
    }

    /// Waits until no server is starting (each connect is bounded, so this
    /// ends), or `limit` has passed.
    pub async fn wait_settled(&self, limit: Duration) {
        let mut changes = self.subscribe();
        let deadline = Instant::now() + limit;
        while self
            .statuses()
            .iter()
            .any(|s| s.phase == ServerPhase::Starting)
        {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// How much longer a run's first request waits, given the grace periods of
/// the servers still starting and the time since they were started: the
/// longest grace still running, or `None` when there is nothing to wait for.
pub(crate) fn startup_wait(starting_graces: &[Duration], elapsed: Duration) -> Option<Duration> {
    starting_graces
        .iter()
        .filter_map(|grace| grace.checked_sub(elapsed))
        .filter(|left| !left.is_zero())
        .max()
}

/// The delay before restart number `attempt` (0 for the first): doubling from
/// `RESTART_BASE_DELAY`, at most `RESTART_MAX_DELAY`.
pub fn restart_delay(attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
    RESTART_BASE_DELAY
        .saturating_mul(factor)
        .min(RESTART_MAX_DELAY)
}

/// The attempt number after a failure: back to 0 when the server had been up
/// for `HEALTHY_UPTIME`, else one more.
pub fn next_attempt(attempt: u32, uptime: Option<Duration>) -> u32 {
    match uptime {
        Some(up) if up >= HEALTHY_UPTIME => 0,
        _ => attempt.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::McpTransportSpec;

    fn spec(name: &str, grace: u64) -> McpServerSpec {
        McpServerSpec {
            name: name.into(),
            transport: McpTransportSpec::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![],
            },
            startup_grace: Duration::from_secs(grace),
            project_root: None,
            redaction: Default::default(),
        }
    }

    #[test]
    fn the_first_request_waits_for_the_longest_grace_still_running() {
        let s = Duration::from_secs;
        assert_eq!(startup_wait(&[], s(0)), None);
        assert_eq!(startup_wait(&[s(3)], s(1)), Some(s(2)));
        assert_eq!(startup_wait(&[s(3), s(10)], s(1)), Some(s(9)));
        assert_eq!(startup_wait(&[s(3)], s(3)), None);
        assert_eq!(startup_wait(&[s(3)], s(5)), None);
    }

    #[test]
    fn restarts_back_off_exponentially_up_to_a_cap() {
        assert_eq!(restart_delay(0), Duration::from_millis(500));
        assert_eq!(restart_delay(1), Duration::from_secs(1));
        assert_eq!(restart_delay(3), Duration::from_secs(4));
        assert_eq!(restart_delay(10), RESTART_MAX_DELAY);
        assert_eq!(restart_delay(u32::MAX), RESTART_MAX_DELAY);
        assert_eq!(next_attempt(3, Some(HEALTHY_UPTIME)), 0);
        assert_eq!(next_attempt(3, Some(Duration::from_secs(1))), 4);
        assert_eq!(next_attempt(3, None), 4);
        assert_eq!(next_attempt(u32::MAX, None), u32::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_ends_with_the_grace_or_when_no_server_is_starting() {
        let state = Arc::new(McpState::new(&[spec("slow", 3), spec("quick", 1)]));
        let started = Instant::now();
        state.wait_for_startup().await;
        assert_eq!(started.elapsed(), Duration::from_secs(3));

        let state = Arc::new(McpState::new(&[spec("a", 3)]));
        let writer = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.update("a", |s| s.phase = ServerPhase::Failed);
        });
        let started = Instant::now();
        state.wait_for_startup().await;
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[test]
    fn tool_generation_rises_only_when_tools_change() {
        let state = McpState::new(&[spec("a", 3)]);
        state.update("a", |s| s.last_error = Some("x".into()));
        assert_eq!(state.tools_generation(), 0);
        state.update("a", |s| s.phase = ServerPhase::Failed);
        assert_eq!(state.tools_generation(), 0);
        state.update("nope", |s| s.phase = ServerPhase::Ready);
        assert_eq!(state.statuses().len(), 1);
        assert_eq!(state.status("a").unwrap().phase, ServerPhase::Failed);
        assert_eq!(ServerPhase::Restarting.as_str(), "restarting");
    }
}
