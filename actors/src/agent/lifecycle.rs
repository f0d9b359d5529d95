//! An agent's life around its loop: registration with the run actor (its
//! registry of agents by path and its approval broker), the token watcher,
//! timers, the durable writes the loop asks for, and the report that ends it.

use std::time::Duration;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use troupe_runtime::agent::{AgentLoop, RunOutcome};
use troupe_runtime::config::RuleEntry;
use troupe_runtime::model::ToolResult;

use super::{AgentMsg, AgentState, Report, Work};
use crate::run::{RunInternal, RunMsg};

/// Tells the run actor this agent exists (cancel by path, status).
pub(super) fn register(
    run: &ActorRef<RunMsg>,
    myself: &ActorRef<AgentMsg>,
    machine: &AgentLoop,
    token: &CancellationToken,
) {
    let _ = run.cast(RunMsg::internal(RunInternal::AgentStarted {
        path: machine.spec().path.clone(),
        agent: myself.clone(),
        token: token.clone(),
    }));
}

/// Turns the cancellation of the agent's token into [`Work::Interrupted`].
/// The task ends with the token (a finished loop cancels its own).
pub(super) fn watch_token(myself: &ActorRef<AgentMsg>, token: CancellationToken) {
    let agent = myself.clone();
    tokio::spawn(async move {
        token.cancelled().await;
        let _ = agent.cast(AgentMsg::work(Work::Interrupted));
    });
}

/// Routes answers to `approval_id` to this agent.
pub(super) fn open_approval(
    run: &ActorRef<RunMsg>,
    myself: &ActorRef<AgentMsg>,
    approval_id: String,
) {
    let _ = run.cast(RunMsg::internal(RunInternal::ApprovalOpened {
        approval_id,
        agent: myself.clone(),
    }));
}

/// Approval requests that no longer wait.
pub(super) fn close_approvals(run: &ActorRef<RunMsg>, approval_ids: Vec<String>) {
    let _ = run.cast(RunMsg::internal(RunInternal::ApprovalsClosed {
        approval_ids,
    }));
}

/// Feeds [`Work::CleanupGraceOver`] after `after`.
pub(super) fn arm_grace(myself: &ActorRef<AgentMsg>, epoch: u64, after: Duration) {
    let agent = myself.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = agent.cast(AgentMsg::work(Work::CleanupGraceOver { epoch }));
    });
}

impl AgentState {
    /// Writes what the store lacks of the history and makes it durable.
    pub(super) fn save(&mut self) -> Result<(), String> {
        let session = self.machine.session_id().to_string();
        let store = self.env.store.clone();
        self.machine
            .transcript_mut()
            .save(&store, &session, true)
            .and_then(|()| {
                if self.pending_stored {
                    // The tool message holding them is durable now.
                    store.clear_pending_results(&session)?;
                    self.pending_stored = false;
                }
                Ok(())
            })
            .map_err(|err| {
                tracing::error!(%session, %err, "store write failed");
                err.to_string()
            })
    }

    /// Stores one finished call's result before its turn's tool message exists.
    pub(super) fn save_pending(&mut self, result: &ToolResult) -> Result<(), String> {
        let session = self.machine.session_id();
        self.env
            .store
            .put_pending_result(session, result)
            .and_then(|()| self.env.store.flush())
            .map(|()| self.pending_stored = true)
            .map_err(|err| {
                tracing::error!(%session, %err, "store write failed");
                err.to_string()
            })
    }

    /// Keeps "always" rules with the run's main session (best effort).
    pub(super) fn save_rules(&self, rules: &[RuleEntry]) {
        if let Err(err) = self.env.store.put_session_rules(&self.root_session, rules) {
            tracing::warn!(%err, "could not keep the approval rule with the session");
        }
    }

    /// The loop is over: report the outcome and stop.
    pub(super) fn finish(&mut self, myself: &ActorRef<AgentMsg>, outcome: RunOutcome) {
        let path = self.machine.spec().path.clone();
        let _ = self
            .run
            .cast(RunMsg::internal(RunInternal::AgentEnded { path }));
        match self.report.take() {
            Some(Report::Run) => {
                let transcript = self.machine.take_transcript();
                let _ = self.run.cast(RunMsg::internal(RunInternal::MainFinished {
                    outcome,
                    transcript,
                }));
            }
            Some(Report::Parent {
                agent,
                epoch,
                index,
            }) => {
                // A lent slot goes back to the parent; an own one to the pool.
                let slot = self.slot.release();
                let _ = agent.cast(AgentMsg::work(Work::ChildDone {
                    epoch,
                    index,
                    outcome,
                    slot,
                }));
            }
            None => {}
        }
        myself.stop(None);
    }
}
