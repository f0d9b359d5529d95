//! The agent loop and its decisions, without actors or I/O (SPEC §3, §7;
//! DESIGN.md principles 1, 2 and 4): the loop itself as a sans-IO state machine
//! ([`machine::AgentLoop`]: inputs in, effects out) that serves the main agent,
//! sub-agents and forks alike; the run around it as another
//! ([`run::RunMachine`]: its door, stops, approval routing and ending); and the
//! pure rules they apply — how a turn's tool calls are grouped for execution,
//! when the loop stops, the run's shared account, each agent's tool catalogue,
//! roles, forks, how a history is checked and closed, and the texts shown when
//! it stops. The actors of `troupe-actors` only interpret the machines' effects.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod compact;
pub mod prompt;
pub mod session;
pub mod slots;

pub(crate) mod account;
pub mod agent_tool;
pub mod catalogue;
pub(crate) mod guard;
pub(crate) mod history;
pub(crate) mod machine;
pub(crate) mod plan;
pub mod resume;
pub mod roles;
pub mod run;
pub mod subagent;

pub use account::{RunAccount, RunLedger, StopCause, ToolCallGrant};
pub use catalogue::{CatalogueSource, ToolCatalogue};
pub use guard::{Budget, LimitHit};
pub use history::validate_history;
pub use machine::{
    AgentLaunch, AgentLoop, AgentStatus, CheckpointTaken, ContextSetup, Effect, HookCall,
    HookRequest, Input, LoopSetup, ToolLaunch,
};
pub(crate) use plan::{ExecutionGroup, plan_execution};

use std::time::Duration;

use troupe_protocol::events::RunStatus;
use troupe_protocol::model::Usage;

/// SPEC §3: turns in a row where every call names an unknown tool, main agent.
pub(crate) const UNKNOWN_TOOL_TURNS_MAIN: u32 = 3;
/// SPEC §3 / §7: the same for sub-agents.
pub(crate) const UNKNOWN_TOOL_TURNS_SUBAGENT: u32 = 2;
/// SPEC §3: identical calls (same tool, same canonical arguments) in a row that stop the loop.
pub(crate) const REPEATED_CALL_LIMIT: u32 = 3;
/// SPEC §3: recorded in place of an empty final response.
pub(crate) const EMPTY_RESPONSE_PLACEHOLDER: &str = "(no response)";
/// After a timeout or a cancellation a tool's token is cancelled and it gets
/// this long to stop its processes (bash needs 2 s between SIGTERM and
/// SIGKILL) before it is given up on.
pub const CLEANUP_GRACE: Duration = Duration::from_secs(5);
/// How long an interrupted agent still waits for a save in flight before it
/// ends without it (a disk that never answers must not make a run
/// uncancellable).
pub(crate) const SAVE_DEADLINE: Duration = troupe_store::CONFIRM_DEADLINE;

/// Whether someone can answer approval requests during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// A person answers through the front door (terminal, API, `troupe approve`).
    Present,
    /// Nobody can answer: an `ask` decision becomes a reasoned denial.
    Absent,
}

/// How an agent's run of the loop ended (for the main agent: how the run ended).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Status.
    pub status: RunStatus,
    /// Stop reason (`end_turn`, `cancelled`, a limit's reason, …).
    pub stop_reason: String,
    /// Final answer text, or the text that closed the history.
    pub final_text: String,
    /// Usage: the agent's own, or the whole tree's for a run.
    pub usage: Usage,
}

/// Who an agent is in the tree (DESIGN.md principle 4: the main agent,
/// sub-agents and forks are the same loop with a different spec; what it may
/// call is its [`ToolCatalogue`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// Path in the agent tree: `main`, `main/explorer-2`.
    pub path: String,
    /// Role name (`main`, `general`, `explorer`, or a project role).
    pub role: String,
    /// Turn limit per user message.
    pub max_turns: u32,
    /// Unknown-tool turns in a row that stop the loop.
    pub unknown_tool_limit: u32,
    /// Nesting depth: 0 for the main agent.
    pub depth: u32,
    /// True for a fork (started from a copy of its parent's history).
    pub is_fork: bool,
}

impl AgentSpec {
    /// The main agent with the given turn limit.
    pub fn main(max_turns: u32) -> Self {
        Self {
            path: "main".into(),
            role: "main".into(),
            max_turns,
            unknown_tool_limit: UNKNOWN_TOOL_TURNS_MAIN,
            depth: 0,
            is_fork: false,
        }
    }
}
