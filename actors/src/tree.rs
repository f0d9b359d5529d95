//! What the agents of a run's tree tell their run: that they started and
//! ended (its registry of agents by path), that they wait for an approval or
//! a question's answer (its broker), and how the main agent's loop ended.
//! Agents tell it through a [`TreePort`] the run builds, so they never name
//! the run's messages.

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use troupe_agent::RunOutcome;
use troupe_agent::session::Transcript;

use crate::agent::msg::AgentMsg;
use crate::port::Port;

/// News of one agent of a run's tree.
pub(crate) enum TreeNews {
    /// An agent of the tree started.
    AgentStarted {
        path: String,
        agent: ActorRef<AgentMsg>,
        token: CancellationToken,
    },
    /// An agent of the tree ended.
    AgentEnded { path: String },
    /// The agent at `path` waits for an answer to `approval_id`.
    ApprovalOpened { approval_id: String, path: String },
    /// A tool call waits for the answer to the question `approval_id`.
    QuestionOpened {
        approval_id: String,
        reply: tokio::sync::oneshot::Sender<troupe_tools::Answer>,
    },
    /// Approval requests that no longer wait.
    ApprovalsClosed { approval_ids: Vec<String> },
    /// The main agent's loop is over.
    MainFinished {
        outcome: RunOutcome,
        transcript: Transcript,
    },
}

/// Where the agents of a run's tree send their news: the run's mailbox.
pub(crate) type TreePort = Port<TreeNews>;
