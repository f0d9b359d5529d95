//! Troupe's actor tree on `ractor`: the runtime actor at the root,
//! a run actor per run (interpreting the run's machine: record, first and last
//! events, shared budget, watchdog, approval broker), one agent actor per
//! agent of the run's tree (the main agent, sub-agents, forks — one loop for
//! all) with the compactor of its session, a tool executor per call, an event
//! log per run, read through bounded subscriptions, and an MCP supervisor with
//! one actor per configured MCP server. Actors only sequence the decisions
//! that the runtime crates (`troupe-agent` first) make.
//!
//! Each actor knows the actors it starts, never the one that started it: a
//! child reports through a port its parent gives it (`port::Port`, a callback
//! around the parent's mailbox), so the modules import downwards only —
//! runtime → run → agent → executor and compactor. Front doors use the
//! [`Runtime`] handle and the types beside it; nothing else is public.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod account;
mod agent;
mod api;
mod checkpoints;
mod compactor;
mod env;
mod event_log;
mod executor;
mod hook_gate;
mod mcp;
mod port;
mod reach;
mod run;
mod runtime;
mod slots;
mod subscription;
mod tasks;
mod tree;

pub use api::{RunHandle, RunSubmission, RuntimeError, RuntimeStats, SessionTarget};
pub use env::{AgentEnv, AgentEnvBuilder, ProviderForModel};
pub use mcp::{BaseEnv, McpHub};
pub use runtime::{KEEP_IDLE_SESSIONS, Runtime, SessionRewrite, full_approval_id};
pub use subscription::EventSubscription;
pub use troupe_agent::{AgentStatus, Approver, RunOutcome};
