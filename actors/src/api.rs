//! The types of the runtime's handle ([`crate::Runtime`]): what a front door
//! submits, the handle of a started run, what the runtime holds and its
//! errors. Every actor of the tree may name them; none of them names an
//! actor.

use std::sync::Arc;

use ractor::RpcReplyPort;
use tokio::sync::oneshot;
use troupe_agent::{Approver, RunOutcome};
use troupe_config::Limits;
use troupe_permissions::PermissionEngine;
use troupe_protocol::permission::PermissionMode;
use troupe_store::StoreError;

use crate::env::AgentEnv;
use crate::subscription::EventSubscription;

/// Errors of the runtime handle.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime actor could not start.
    #[error("the runtime could not start: {0}")]
    Start(String),
    /// The runtime actor is gone.
    #[error("the runtime is not running")]
    Gone,
    /// No such run (it may have ended).
    #[error("no running run {0}")]
    UnknownRun(String),
    /// No agent with this path in the run.
    #[error("no running agent {0} in this run")]
    UnknownAgent(String),
    /// No approval with this id waits in the run.
    #[error("no approval {0} is waiting in this run")]
    UnknownApproval(String),
    /// A run could not start.
    #[error("the run could not start: {0}")]
    RunStart(String),
    /// No session with this id exists.
    #[error("no session {0}; list sessions with `troupe sessions list`")]
    UnknownSession(String),
    /// The session already has a run in progress.
    #[error("session {0} already has a run in progress; wait for it or cancel it")]
    SessionBusy(String),
    /// A UserPromptSubmit hook blocked the text.
    #[error("a UserPromptSubmit hook blocked the message: {0}")]
    HookBlocked(String),
    /// The session's history is too short to compact.
    #[error(
        "session {0} is too short to compact: all of it would be kept verbatim as the recent part"
    )]
    NothingToCompact(String),
    /// The store refused a read or write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which session a run belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTarget {
    /// A new session, with this id when given.
    New(Option<String>),
    /// An existing session: kept in memory since its last run, or its stored
    /// history (repaired).
    Continue(String),
}

/// What a front door submits.
pub struct RunSubmission {
    /// The user's message.
    pub prompt: String,
    /// The session: a new one, or one to continue.
    pub session: SessionTarget,
    /// The agents' environment.
    pub env: Arc<AgentEnv>,
    /// The permission engine (the session's "always" rules are added to it).
    pub permissions: PermissionEngine,
    /// Permission mode for this run.
    pub mode: PermissionMode,
    /// Limits of this run.
    pub limits: Limits,
    /// Who answers approvals.
    pub approver: Approver,
}

/// A started run.
pub struct RunHandle {
    /// Run id.
    pub run_id: String,
    /// Session id.
    pub session_id: String,
    /// Every event of the run, from the first (bounded memory, however
    /// slowly it is read).
    pub events: EventSubscription,
    /// The outcome, once the run ends.
    pub outcome: oneshot::Receiver<RunOutcome>,
}

/// The answer to a submission.
pub(crate) type SubmitReply = RpcReplyPort<Result<RunHandle, RuntimeError>>;

/// What the runtime holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Runs in progress.
    pub runs_in_progress: usize,
    /// Sessions whose history is in memory (running or idle).
    pub sessions_in_memory: usize,
}
