//! The agent loop's decisions as pure functions (SPEC §3; DESIGN.md principle 1):
//! how a turn's tool calls are grouped for execution, when the loop stops, how a
//! history is checked and closed, and the texts shown when it stops. The actor
//! that runs the loop (`troupe-actors`) only sequences these.

pub mod guard;
pub mod history;
pub mod plan;

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
