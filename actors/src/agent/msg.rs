//! The agent actor's messages: the queries front doors may send, and the
//! loop's own traffic (stream items, reports of its tools, children and
//! compactor, approvals, timers), which only this crate can build. They sit
//! apart from the actor so that what reports to an agent needs its messages,
//! never the actor itself.

use ractor::RpcReplyPort;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use troupe_agent::{AgentLaunch, AgentStatus, RunOutcome};
use troupe_llm::{ProviderError, StreamEvent};
use troupe_protocol::events::ApprovalOutcome;
use troupe_protocol::model::Message;

use crate::executor::ToolReport;

/// Messages of the agent actor. Only the queries are open to front doors;
/// the loop's own traffic is [`Internal`], which only this crate can build.
pub(crate) enum AgentMsg {
    /// What the agent is doing.
    Status(RpcReplyPort<AgentStatus>),
    /// A copy of the history.
    History(RpcReplyPort<Vec<Message>>),
    /// Work of the agent itself: stream items, reports of its tools and
    /// children, approvals routed by the run's broker, timers.
    Internal(Internal),
}

/// A message only the actors of this crate can build.
pub(crate) struct Internal(pub(crate) Work);

/// The loop's traffic.
pub(crate) enum Work {
    /// Start the loop.
    Begin,
    /// One item of the model stream of `epoch`.
    Model {
        epoch: u64,
        item: Result<StreamEvent, ProviderError>,
    },
    /// The summary call of `epoch` answered (its whole text) or failed.
    Summarised {
        epoch: u64,
        result: Result<String, ProviderError>,
        usage: troupe_protocol::model::Usage,
    },
    /// The model stream of `epoch` ended.
    ModelEnded { epoch: u64 },
    /// A tool executor reported.
    ToolDone(ToolReport),
    /// A child agent ended; a slot it borrowed comes back with it.
    ChildDone {
        epoch: u64,
        index: usize,
        outcome: RunOutcome,
        slot: Option<OwnedSemaphorePermit>,
    },
    /// A sub-agent slot is free for this waiting child.
    SlotReady {
        launch: Box<AgentLaunch>,
        permit: OwnedSemaphorePermit,
        /// The child's token.
        token: CancellationToken,
    },
    /// An approval of run `run_id` was answered.
    Approve {
        run_id: String,
        approval_id: String,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    },
    /// The person wrote to the main agent of run `run_id`.
    UserMessage { run_id: String, text: String },
    /// The writer made a save or a compaction marker durable — or failed.
    Saved { result: Result<(), String> },
    /// The writer made the pending result of call `index` of `epoch` durable
    /// (or failed).
    PendingSaved {
        epoch: u64,
        index: usize,
        result: Result<(), String>,
    },
    /// The agent's token was cancelled.
    Interrupted,
    /// The cleanup grace of the interrupted execution `epoch` is over.
    CleanupGraceOver { epoch: u64 },
    /// Save number `save` was not confirmed in time after an interruption.
    SaveOverdue { save: u64 },
    /// The loop finished while hooks that only report still ran; they are
    /// done now: report the outcome.
    FinishAfterHooks(RunOutcome),
    /// The files of the checkpoint asked for before execution `epoch` are
    /// captured (or could not be).
    Checkpointed {
        epoch: u64,
        result: Result<(), String>,
    },
    /// That checkpoint is recorded (or could not be).
    CheckpointRecorded {
        turn: u64,
        tool_call_ids: Vec<String>,
        result: Result<troupe_agent::CheckpointTaken, String>,
    },
    /// Hooks the loop asked for ran.
    HooksRan {
        call: troupe_agent::HookCall,
        verdict: troupe_hooks::HookVerdict,
    },
}

impl AgentMsg {
    pub(crate) fn work(work: Work) -> Self {
        Self::Internal(Internal(work))
    }
}
