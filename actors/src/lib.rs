//! Troupe's actor tree on `ractor` (DESIGN.md): the runtime actor at the root,
//! one agent actor per agent, a tool executor per call, an event log per run.
//! Actors only sequence the decisions that `troupe-runtime` makes.

pub mod agent;
pub mod event_log;
pub mod executor;
pub mod runtime;

pub use agent::{AgentActor, AgentEnv, AgentMsg, AgentStatus, Approver, RunOutcome};
pub use event_log::{EventLog, EventLogMsg, EventSink};
pub use runtime::{RunHandle, RunSubmission, Runtime, RuntimeError, SessionTarget};
