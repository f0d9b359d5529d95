//! The agent loop's decisions as pure functions (SPEC §3; DESIGN.md principle 1):
//! how a turn's tool calls are grouped for execution, when the loop stops, how a
//! history is checked and closed, and the texts shown when it stops. The actor
//! that runs the loop (`troupe-actors`) only sequences these.

pub mod agent_tool;
pub mod guard;
pub mod history;
pub mod plan;
pub mod resume;
pub mod roles;

pub use guard::{Budget, LimitHit, LoopGuard, RunTally};
pub use history::{HistoryError, validate_history};
pub use plan::{ExecutionGroup, plan_execution};

use std::time::Duration;

/// SPEC §3: default per-call tool timeout.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// SPEC §3: turns per user message for the main agent.
pub const DEFAULT_MAX_TURNS: u32 = 25;
/// SPEC §3: turns in a row where every call names an unknown tool, main agent.
pub const UNKNOWN_TOOL_TURNS_MAIN: u32 = 3;
/// SPEC §3 / §7: the same for sub-agents.
pub const UNKNOWN_TOOL_TURNS_SUBAGENT: u32 = 2;
/// SPEC §3: identical calls (same tool, same canonical arguments) in a row that stop the loop.
pub const REPEATED_CALL_LIMIT: u32 = 3;
/// SPEC §3: the result given to a call that was cancelled before it finished.
pub const CANCELLED_RESULT: &str = "(cancelled)";
/// SPEC §3: recorded in place of an empty final response.
pub const EMPTY_RESPONSE_PLACEHOLDER: &str = "(no response)";

/// Who an agent is and what it may do (DESIGN.md principle 4: the main agent,
/// sub-agents and forks are the same actor with a different spec).
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
    /// Tools this agent may use (system tools are always allowed); `None` = all.
    pub tool_allowlist: Option<Vec<String>>,
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
            tool_allowlist: None,
            depth: 0,
            is_fork: false,
        }
    }
}
