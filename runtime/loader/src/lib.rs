//! What an agent starts from, read from disk and handed to `troupe-agent` as
//! values (DESIGN.md principle 1: the machines do no I/O):
//!
//! - [`roles`]: the role files of the user configuration directory and the
//!   project, read as hostile input and parsed by `troupe_agent::roles`;
//! - [`prompt`]: the instruction files, `git status`, the platform and the
//!   date the system prompt tells the model about;
//! - [`session`]: stored sessions opened and repaired for another run, a live
//!   agent's transcript saved, and runs a dead process left behind recovered.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod prompt;
pub mod roles;
pub mod session;

pub use prompt::{GIT_STATUS_BUDGET, build_system_prompt, read_git_status};
pub use roles::{load_roles, project_role_names};
pub use session::{
    RecoveredChild, RecoveredRun, open_session, recover_interrupted_runs, save_transcript,
};
