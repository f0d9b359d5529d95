//! An agent's life around its loop: registration with the run actor (its
//! registry of agents by path and its approval broker), the token watcher,
//! timers, the durable writes the loop asks for (handed to the store's writer
//! thread, answered by message), and the report that ends it.

use std::time::Duration;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use troupe_agent::{AgentLoop, RunOutcome};
use troupe_protocol::model::{Message, ToolResult};
use troupe_protocol::permission::RuleEntry;
use troupe_protocol::task_plan::TaskPlan;

use super::{AgentMsg, AgentState, Report, Work};
use crate::tasks::OwnedTasks;
use crate::tree::{TreeNews, TreePort};

/// Tells the run actor this agent exists (cancel by path, status).
pub(super) fn register(
    run: &TreePort,
    myself: &ActorRef<AgentMsg>,
    machine: &AgentLoop,
    token: &CancellationToken,
) {
    run.send(TreeNews::AgentStarted {
        path: machine.spec().path.clone(),
        agent: myself.clone(),
        token: token.clone(),
    });
}

/// Turns the cancellation of the agent's token into [`Work::Interrupted`].
/// The task ends with the token (a finished loop cancels its own).
pub(super) fn watch_token(
    tasks: &mut OwnedTasks,
    myself: &ActorRef<AgentMsg>,
    token: CancellationToken,
) {
    let agent = myself.clone();
    tasks.spawn(async move {
        token.cancelled().await;
        let _ = agent.cast(AgentMsg::work(Work::Interrupted));
    });
}

/// Routes answers to `approval_id` to the agent at `path` (this agent).
pub(super) fn open_approval(run: &TreePort, path: String, approval_id: String) {
    run.send(TreeNews::ApprovalOpened { approval_id, path });
}

/// Approval requests that no longer wait.
pub(super) fn close_approvals(run: &TreePort, approval_ids: Vec<String>) {
    run.send(TreeNews::ApprovalsClosed { approval_ids });
}

/// Feeds `work` to the agent after `after` (a grace or a deadline; the
/// machine ignores one that no longer applies).
pub(super) fn arm_timer(myself: &ActorRef<AgentMsg>, after: Duration, work: Work) {
    // Not kept: a timer that fires after the agent stopped finds no mailbox.
    drop(myself.send_after(after, move || AgentMsg::work(work)));
}

impl AgentState {
    /// Hands the messages the store lacks (the loop's [`Effect::Save`]) to
    /// the store's writer; the answer comes back as [`Work::Saved`] once it
    /// is durable.
    ///
    /// [`Effect::Save`]: troupe_agent::Effect::Save
    pub(super) fn save(&mut self, myself: &ActorRef<AgentMsg>, messages: Vec<(u64, Message)>) {
        let session = self.machine.session_id().to_string();
        // Every pending result handed over so far is in the history being
        // saved; the writer clears them after storing it (writes keep order).
        let clear_pending = std::mem::take(&mut self.pending_stored);
        let agent = myself.clone();
        self.env.store.commit(
            move |store| {
                store.put_messages(&session, messages.iter().map(|(i, m)| (*i, m)))?;
                if clear_pending {
                    store.clear_pending_results(&session)?;
                }
                Ok(())
            },
            move |outcome| {
                let result = outcome.map_err(|err| {
                    tracing::error!(%err, "store write failed");
                    err.to_string()
                });
                let _ = agent.cast(AgentMsg::work(Work::Saved { result }));
            },
        );
    }

    /// Hands one finished call's result to the store's writer before its
    /// turn's tool message exists; the answer comes back as
    /// [`Work::PendingSaved`] once it is durable.
    pub(super) fn save_pending(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        epoch: u64,
        index: usize,
        result: ToolResult,
    ) {
        let session = self.machine.session_id().to_string();
        self.pending_stored = true;
        let agent = myself.clone();
        self.env.store.commit(
            move |store| store.put_pending_result(&session, &result),
            move |outcome| {
                let result = outcome.map_err(|err| {
                    tracing::error!(%err, "store write failed");
                    err.to_string()
                });
                let _ = agent.cast(AgentMsg::work(Work::PendingSaved {
                    epoch,
                    index,
                    result,
                }));
            },
        );
    }

    /// Keeps "always" rules with the run's main session (best effort, on the
    /// store's writer).
    pub(super) fn save_rules(&self, rules: &[RuleEntry]) {
        let session = self.root_session.clone();
        let rules = rules.to_vec();
        self.env.store.commit(
            move |store| store.put_session_rules(&session, &rules),
            |outcome| {
                if let Err(err) = outcome {
                    tracing::warn!(%err, "could not keep the approval rule with the session");
                }
            },
        );
    }

    /// Keeps the agent's task plan with its own session (best effort, on
    /// the store's writer).
    pub(super) fn save_task_plan(&self, plan: TaskPlan) {
        let session = self.machine.session_id().to_string();
        self.env.store.commit(
            move |store| store.put_task_plan(&session, &plan),
            |outcome| {
                if let Err(err) = outcome {
                    tracing::warn!(%err, "could not keep the task plan with the session");
                }
            },
        );
    }

    /// The loop is over: report the outcome and stop.
    pub(super) fn finish(&mut self, myself: &ActorRef<AgentMsg>, outcome: RunOutcome) {
        let path = self.machine.spec().path.clone();
        self.run.send(TreeNews::AgentEnded { path });
        match self.report.take() {
            Some(Report::Run) => {
                let transcript = self.machine.take_transcript();
                self.run.send(TreeNews::MainFinished {
                    outcome,
                    transcript,
                });
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
