//! Troupe's actor tree on `ractor`: the runtime actor at the root,
//! a run actor per run (interpreting the run's machine: record, first and last
//! events, shared budget, watchdog, approval broker), one agent actor per agent of the run's tree
//! (the main agent, sub-agents, forks — one loop for all) with the compactor
//! of its session, a tool executor per call, an event log per run, read through bounded subscriptions, and an MCP
//! supervisor with one actor per configured MCP server. Actors only sequence the decisions that
//! the runtime crates (`troupe-agent` first) make.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod agent;
pub(crate) mod compactor;
pub mod env;
pub mod event_log;
pub mod executor;
pub(crate) mod hook_gate;
pub mod mcp;
pub(crate) mod reach;
pub(crate) mod run;
pub mod runtime;
pub(crate) mod slots;
pub mod subscription;
pub(crate) mod tasks;

pub use agent::{AgentMsg, Internal};
pub use env::{AgentEnv, AgentEnvBuilder, CatalogueCache, CatalogueKey, ProviderForModel};
pub use event_log::{EventLog, EventLogMsg, EventSink};
pub use mcp::McpHub;
pub use run::SessionState;
pub use runtime::{
    KEEP_IDLE_SESSIONS, RunHandle, RunSubmission, Runtime, RuntimeError, RuntimeStats,
    SessionTarget,
};
pub use subscription::EventSubscription;
pub use troupe_agent::{AgentStatus, Approver, RunOutcome};
