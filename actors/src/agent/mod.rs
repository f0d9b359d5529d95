//! The agent actor: one per agent — the main agent, a sub-agent or a fork —
//! all running the same sans-IO loop ([`AgentLoop`], DESIGN.md principles 2
//! and 4). The actor only interprets the loop's effects and feeds back what
//! happened: it never decides.
//!
//! The mailbox stays responsive: the model stream runs in a task
//! (`stream`), every tool call in its own [`ToolExecutor`] and every child
//! agent in its own actor, both linked to this one (`calls`); durable writes
//! go to the store's writer thread, whose answer comes back as a message
//! (`Work::Saved`, `Work::PendingSaved`): "durable" is a state the loop
//! waits in, never a disk wait on an async worker.
//!
//! The loop names what to stop; the actor holds the tokens. The agent's own
//! token is a child of its parent's (the main agent's, of the run's root); a
//! watcher task turns its cancellation into [`Input::Interrupted`], so
//! stopping the run, an ancestor or this very agent reaches everything below.
//! Each model call, summary and execution runs under a token of its epoch,
//! a child of the agent's ([`Effect::Cancel`] stops one,
//! [`Effect::StopBelow`] all of them); [`Effect::StopTree`] cancels the
//! run's root. The real spans behind the loop's span ids live in a
//! [`SpanTable`] whose root is the agent's parent span ([`Effect::Span`]).
//!
//! A panic in a handler fails only this actor: its state's drop guard cancels
//! its token (so its tools, stream and children stop), and its supervisor —
//! the parent agent or the run actor — answers for it.
//!
//! [`ToolExecutor`]: crate::executor::ToolExecutor

mod calls;
mod compaction;
mod lifecycle;
mod memory;
pub(crate) mod msg;
mod stream;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::AbortOnDropHandle;
use troupe_agent::{AgentLoop, Effect, Input};
use troupe_telemetry::span_ops::SpanTable;

use crate::slots::SlotHolder;
use crate::tasks::OwnedTasks;
use tracing::Instrument;
use troupe_llm::Provider;

use crate::account::SharedAccount;
use crate::env::AgentEnv;
use crate::event_log::EventSink;
use crate::tree::TreePort;

pub(crate) use msg::Work;
pub(crate) use msg::{AgentMsg, Internal};

/// Where an agent's outcome goes when its loop is over.
pub(crate) enum Report {
    /// The main agent: to the run actor, with the session's transcript.
    Run,
    /// A child: to its parent, as the result of call `index` of `epoch`.
    Parent {
        agent: ActorRef<AgentMsg>,
        epoch: u64,
        index: usize,
    },
}

/// Arguments of a new agent.
pub(crate) struct AgentArgs {
    /// The loop it runs.
    pub machine: AgentLoop,
    /// Its environment.
    pub env: Arc<AgentEnv>,
    /// The provider it calls (a role may name another model).
    pub provider: Arc<dyn Provider>,
    /// Where its events go, under its path.
    pub events: EventSink,
    /// Where it tells its run what happens in the tree (broker, registry).
    pub run: TreePort,
    /// The run's main session (where "always" rules are kept).
    pub root_session: String,
    /// Where its outcome goes.
    pub report: Report,
    /// Its sub-agent slot.
    pub slot: SlotHolder,
    /// Its own token (a child of its parent's, or of the run's root).
    pub token: CancellationToken,
    /// The run's account, shared by the tree.
    pub account: Arc<SharedAccount>,
    /// Parent of its `invoke_agent` span: none for the main agent (the trace
    /// root), the `execute_tool agent` span that started it for a sub-agent.
    pub parent_span: tracing::Span,
}

/// The agent actor.
pub(crate) struct AgentActor;

/// A child agent being run for a call.
struct ChildEntry {
    epoch: u64,
    index: usize,
    path: String,
    is_fork: bool,
    token: CancellationToken,
    events: EventSink,
    started: Instant,
}

/// State of one agent.
pub(crate) struct AgentState {
    machine: AgentLoop,
    env: Arc<AgentEnv>,
    provider: Arc<dyn Provider>,
    events: EventSink,
    run: TreePort,
    root_session: String,
    report: Option<Report>,
    slot: SlotHolder,
    /// The agent's own token.
    token: CancellationToken,
    /// The run's account, shared by the tree.
    account: Arc<SharedAccount>,
    /// The tokens of the model calls and summaries that may still run, by
    /// epoch (children of `token`; dropped when they answer).
    epochs: BTreeMap<u64, CancellationToken>,
    /// The spans the loop opened, below the agent's parent span.
    spans: SpanTable,
    /// The token of the latest execution, by epoch (a child of `token`);
    /// its calls and child agents each run under a child of it.
    execution: Option<(u64, CancellationToken)>,
    /// Executors by actor, with the call they run.
    executors: HashMap<ActorId, (u64, usize)>,
    /// Children by actor.
    children: HashMap<ActorId, ChildEntry>,
    /// Pending results were handed to the writer and wait for the next save
    /// to clear them.
    pending_stored: bool,
    /// What the outcome waits for, still running: hooks that only report,
    /// checkpoints being taken or recorded (their events come first), the
    /// run's last checkpoint.
    outcome_waits_for: Vec<AbortOnDropHandle<()>>,
    /// Its tasks (the model stream, waits for a slot, hooks' ends): aborted
    /// when it stops.
    tasks: OwnedTasks,
    /// The compactor of its session, once a summary was asked for.
    compactor: Option<crate::compactor::CompactorHandle>,
    /// Cancels the agent's token when the state is dropped — also after a panic,
    /// when `post_stop` does not run.
    _stop_below_on_drop: DropGuard,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let token = args.token;
        lifecycle::register(&args.run, &myself, &args.machine, &token);
        let mut tasks = OwnedTasks::default();
        lifecycle::watch_token(&mut tasks, &myself, token.clone());
        myself.cast(AgentMsg::work(Work::Begin))?;
        Ok(AgentState {
            machine: args.machine,
            env: args.env,
            provider: args.provider,
            events: args.events,
            run: args.run,
            root_session: args.root_session,
            report: Some(args.report),
            slot: args.slot,
            token: token.clone(),
            account: args.account,
            epochs: BTreeMap::new(),
            execution: None,
            spans: SpanTable::new(args.parent_span),
            executors: HashMap::new(),
            children: HashMap::new(),
            pending_stored: false,
            compactor: None,
            outcome_waits_for: Vec::new(),
            tasks,
            _stop_below_on_drop: token.drop_guard(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let input = match message {
            AgentMsg::Status(reply) => {
                let _ = reply.send(state.machine.status());
                return Ok(());
            }
            AgentMsg::History(reply) => {
                let _ = reply.send(state.machine.transcript().messages().to_vec());
                return Ok(());
            }
            AgentMsg::Internal(Internal(work)) => state.input_of(&myself, work).await,
        };
        if let Some(input) = input {
            state.drive(&myself, input).await;
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a child stopped: a failed executor or child
        // agent is one failed call.
        if let SupervisionEvent::ActorFailed(cell, err) = event
            && let Some(input) = state.on_child_failed(cell.get_id(), err.to_string())
        {
            state.drive(&myself, input).await;
        }
        Ok(())
    }
}

impl AgentState {
    /// The token of the model call or summary of `epoch`.
    fn epoch_token(&mut self, epoch: u64) -> CancellationToken {
        self.epochs
            .entry(epoch)
            .or_insert_with(|| self.token.child_token())
            .clone()
    }

    /// A token for one call of the execution of `epoch` (one execution runs
    /// at a time: a later one replaces the token of the one before).
    fn call_token(&mut self, epoch: u64) -> CancellationToken {
        match &self.execution {
            Some((current, token)) if *current == epoch => token.child_token(),
            _ => {
                let token = self.token.child_token();
                let call = token.child_token();
                self.execution = Some((epoch, token));
                call
            }
        }
    }

    /// Turns the loop's traffic into the loop's input (some traffic is
    /// handled here: a free slot starts a waiting child).
    async fn input_of(&mut self, myself: &ActorRef<AgentMsg>, work: Work) -> Option<Input> {
        match work {
            Work::Begin => Some(Input::Begin),
            Work::Model { epoch, item } => Some(match item {
                Ok(event) => Input::Model { epoch, event },
                Err(error) => {
                    self.epochs.remove(&epoch);
                    Input::ModelFailed { epoch, error }
                }
            }),
            Work::ModelEnded { epoch } => {
                self.epochs.remove(&epoch);
                Some(Input::ModelEnded { epoch })
            }
            Work::Summarised {
                epoch,
                result,
                usage,
            } => {
                self.epochs.remove(&epoch);
                Some(Input::Summarised {
                    epoch,
                    result,
                    usage,
                })
            }
            Work::ToolDone(report) => {
                self.executors
                    .retain(|_, call| *call != (report.epoch, report.index));
                Some(Input::CallFinished {
                    epoch: report.epoch,
                    index: report.index,
                    output: report.output,
                    duration: report.duration,
                    error: report.error,
                })
            }
            Work::ChildDone {
                epoch,
                index,
                outcome,
                slot,
            } => self.on_child_done(epoch, index, outcome, slot),
            Work::SlotReady {
                launch,
                permit,
                token,
            } => {
                let slot = SlotHolder::new(self.slot.pool().clone(), permit, false);
                self.spawn_child(myself, *launch, slot, token).await
            }
            Work::Approve {
                run_id,
                approval_id,
                outcome,
                reason,
            } => (run_id == self.machine.run_id()).then_some(Input::Approval {
                approval_id,
                outcome,
                reason,
            }),
            Work::UserMessage { run_id, text } => {
                (run_id == self.machine.run_id()).then_some(Input::UserMessage { text })
            }
            Work::Saved { result } => Some(Input::Saved(result)),
            Work::PendingSaved {
                epoch,
                index,
                result,
            } => Some(Input::PendingSaved {
                epoch,
                index,
                result,
            }),
            Work::Interrupted => Some(Input::Interrupted),
            Work::CleanupGraceOver { epoch } => Some(Input::CleanupGraceOver { epoch }),
            Work::SaveOverdue { save } => Some(Input::SaveOverdue { save }),
            Work::HooksRan { call, verdict } => Some(Input::HooksRan { call, verdict }),
            Work::Checkpointed { epoch, result } => Some(Input::Checkpointed { epoch, result }),
            Work::CheckpointRecorded {
                turn,
                tool_call_ids,
                result,
            } => Some(Input::CheckpointRecorded {
                turn,
                tool_call_ids,
                result,
            }),
            Work::FinishAfterHooks(outcome) => {
                self.finish(myself, outcome);
                None
            }
        }
    }

    /// Feeds `first` to the loop and carries out its effects; effects that
    /// answer at once (starting a child that cannot start) feed the loop
    /// again. A queue, not recursion.
    async fn drive(&mut self, myself: &ActorRef<AgentMsg>, first: Input) {
        let mut inputs = VecDeque::from([first]);
        while let Some(input) = inputs.pop_front() {
            for effect in self.machine.on(chrono::Utc::now(), input) {
                if let Some(next) = self.perform(myself, effect).await {
                    inputs.push_back(next);
                }
            }
        }
    }

    /// Carries out one effect; returns the input it produced at once, if any.
    async fn perform(&mut self, myself: &ActorRef<AgentMsg>, effect: Effect) -> Option<Input> {
        match effect {
            Effect::Emit(kind) => {
                self.events.emit(kind);
                None
            }
            Effect::Save { messages, .. } => {
                self.save(myself, messages);
                None
            }
            Effect::SavePending {
                epoch,
                index,
                result,
            } => {
                self.save_pending(myself, epoch, index, result);
                None
            }
            Effect::SaveRules(rules) => {
                self.save_rules(&rules);
                None
            }
            Effect::SaveTaskPlan(plan) => {
                self.save_task_plan(plan);
                None
            }
            Effect::Offload(plan) => {
                let session = self.machine.session_id().to_string();
                let spilled =
                    compaction::offload(&self.env.store, &session, &self.env.spill_dir, plan).await;
                Some(Input::Offloaded { spilled })
            }
            Effect::Summarise {
                epoch,
                request,
                span,
            } => {
                let cancel = self.epoch_token(epoch);
                let span = self.spans.get(span);
                self.summarise(myself, epoch, request, cancel, span).await
            }
            Effect::SaveMarker(marker) => {
                let session = self.machine.session_id().to_string();
                compaction::save_marker(myself, &self.env.store, &session, marker);
                None
            }
            Effect::CallModel {
                epoch,
                request,
                span,
            } => {
                if let Some(checkpoints) = &self.env.checkpoints {
                    checkpoints.prepare();
                }
                let cancel = self.epoch_token(epoch);
                let span = self.spans.get(span);
                stream::start(
                    &mut self.tasks,
                    myself,
                    &self.provider,
                    epoch,
                    request,
                    cancel,
                    span,
                );
                None
            }
            Effect::Checkpoint { epoch, meta, span } => {
                let parent = self.spans.get(span);
                self.checkpoint(myself, epoch, meta, parent)
            }
            Effect::RunTool(launch) => self.start_tool(myself, launch).await,
            Effect::StartAgent(launch) => self.start_child(myself, launch).await,
            Effect::AwaitApproval { approval_id } => {
                let path = self.machine.spec().path.clone();
                lifecycle::open_approval(&self.run, path, approval_id);
                None
            }
            Effect::ApprovalsClosed(ids) => {
                lifecycle::close_approvals(&self.run, ids);
                None
            }
            Effect::Cancel { epoch } => {
                if let Some(token) = self.epochs.remove(&epoch) {
                    token.cancel();
                }
                if let Some((_, token)) = self.execution.take_if(|(e, _)| *e == epoch) {
                    token.cancel();
                }
                None
            }
            Effect::StopBelow => {
                self.token.cancel();
                None
            }
            Effect::StopTree => {
                self.account.cancel_tree();
                None
            }
            Effect::Span(op) => {
                self.spans.apply(op);
                None
            }
            Effect::RunHooks(request) => {
                let reports_only = request.call == troupe_agent::HookCall::Report;
                // Hooks that only report are not stopped by the end of this
                // agent's loop: the run waits for them (a cancelled run
                // still kills them). The others stop with the agent.
                let cancel = if reports_only {
                    self.account.root().clone()
                } else {
                    self.token.clone()
                };
                let span = self.spans.get(request.span);
                let running = run_hooks(myself, &self.env, *request, cancel, span);
                if reports_only {
                    self.outcome_waits_for.retain(|hook| !hook.is_finished());
                    self.outcome_waits_for
                        .push(AbortOnDropHandle::new(tokio::spawn(running)));
                } else {
                    self.tasks.spawn(running);
                }
                None
            }
            Effect::UpdateMemory { digest } => {
                memory::start_update(&self.env, &self.provider, digest);
                None
            }
            Effect::ArmCleanupGrace { epoch, after } => {
                lifecycle::arm_timer(myself, after, Work::CleanupGraceOver { epoch });
                None
            }
            Effect::ArmSaveDeadline { save, after } => {
                lifecycle::arm_timer(myself, after, Work::SaveOverdue { save });
                None
            }
            Effect::Finished(outcome) => {
                // Release whatever still hangs below this agent.
                self.token.cancel();
                self.capture_run_end();
                let waits = std::mem::take(&mut self.outcome_waits_for);
                if waits.iter().all(|task| task.is_finished()) {
                    self.finish(myself, outcome);
                } else {
                    // Reporting hooks (PostCompact, Notification), each
                    // within its timeout, and checkpoints end before the
                    // outcome goes out.
                    let agent = myself.clone();
                    self.tasks.spawn(async move {
                        for task in waits {
                            let _ = task.await;
                        }
                        let _ = agent.cast(AgentMsg::work(Work::FinishAfterHooks(outcome)));
                    });
                }
                None
            }
        }
    }
}

impl AgentState {
    /// Takes the checkpoint the loop asked for in a task: the calls of
    /// `epoch` wait for [`Work::Checkpointed`] (the files captured), and
    /// [`Work::CheckpointRecorded`] follows once it is written. Without
    /// checkpoints (never asked then) the answer is at once.
    fn checkpoint(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        epoch: u64,
        meta: troupe_checkpoint::SnapshotMeta,
        parent: tracing::Span,
    ) -> Option<Input> {
        let Some(checkpoints) = self.env.checkpoints.clone() else {
            return Some(Input::Checkpointed {
                epoch,
                result: Err("checkpoints are off".to_owned()),
            });
        };
        let agent = myself.clone();
        let span = tracing::info_span!(
            parent: &parent,
            "checkpoint",
            "troupe.checkpoint.turn" = meta.turn,
            "troupe.checkpoint.number" = tracing::field::Empty,
        );
        let (turn, tool_call_ids) = (meta.turn, meta.tool_call_ids.clone());
        // The outcome waits for it: an agent whose last turn ends before
        // its checkpoint is recorded still tells of it.
        self.outcome_waits_for.retain(|task| !task.is_finished());
        let task = tokio::spawn(
            async move {
                let recorded = match checkpoints.snapshot(meta).await {
                    Ok(recorded) => {
                        let _ = agent.cast(AgentMsg::work(Work::Checkpointed {
                            epoch,
                            result: Ok(()),
                        }));
                        recorded
                    }
                    Err(err) => {
                        tracing::warn!(%err, "no checkpoint before the turn");
                        let _ = agent.cast(AgentMsg::work(Work::Checkpointed {
                            epoch,
                            result: Err(err),
                        }));
                        return;
                    }
                };
                let result = recorded.await;
                match &result {
                    Ok(taken) => {
                        tracing::Span::current().record("troupe.checkpoint.number", taken.number);
                    }
                    Err(err) => tracing::warn!(%err, "the checkpoint could not be recorded"),
                }
                let _ = agent.cast(AgentMsg::work(Work::CheckpointRecorded {
                    turn,
                    tool_call_ids,
                    result,
                }));
            }
            .instrument(span),
        );
        self.outcome_waits_for.push(AbortOnDropHandle::new(task));
        None
    }

    /// The main agent's end: the run's files as it left them are captured
    /// (when the run took checkpoints) before its outcome is reported, like
    /// the hooks that only report.
    fn capture_run_end(&mut self) {
        let Some(checkpoints) = self.env.checkpoints.clone() else {
            return;
        };
        if self.machine.spec().depth != 0 || !checkpoints.needs_run_end() {
            return;
        }
        let session = self.root_session.clone();
        let run = self.machine.run_id().to_owned();
        self.outcome_waits_for
            .push(AbortOnDropHandle::new(tokio::spawn(async move {
                checkpoints.run_end(session, run).await;
            })));
    }
}

/// The task that runs the hooks of `request` (they may take their whole
/// timeout); the verdict comes back as [`Work::HooksRan`].
fn run_hooks(
    agent: &ActorRef<AgentMsg>,
    env: &AgentEnv,
    request: troupe_agent::HookRequest,
    cancel: CancellationToken,
    span: tracing::Span,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let agent = agent.clone();
    let hooks = env.hooks.clone();
    let ctx = troupe_hooks::HookContext {
        place: request.place,
        child_env: env.child_env.clone(),
        parent_span: span,
        cancel,
        sandbox: Arc::new(env.os_sandbox.for_hooks()),
    };
    async move {
        let verdict = troupe_hooks::fire(
            &hooks,
            request.event,
            request.subject.as_deref(),
            request.payload,
            &ctx,
        )
        .await;
        let _ = agent.cast(AgentMsg::work(Work::HooksRan {
            call: request.call,
            verdict,
        }));
    }
}
