//! The run actor: one per run, between the runtime and the run's agents
//! (DESIGN.md: runtime → run → agents). The run's decisions — its door, the
//! stops of its tree, approval routing, its ending — are made by
//! [`RunMachine`] (`troupe_agent::run`); this actor interprets its effects
//! and keeps the I/O handles they name:
//!
//! - the run record and the first and last events (`run_started`,
//!   `run_finished`) written and emitted as the machine says: the prompt and
//!   the record durable before `run_started`, the record's end before
//!   `run_finished`;
//! - the run's [`SharedAccount`] (budgets, stop cause, the cancellation
//!   root), its sub-agent slots and the wall-clock watchdog;
//! - the tree's agents by path (their actor references and tokens: cancel
//!   one, ask every one its status) and the answer channels of questions by
//!   approval id (an MCP server's elicitation, see `reach`);
//! - the main agent, whose panic is contained here: the machine ends the run
//!   with an error; the session is repaired from the store on its next run.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio_util::sync::CancellationToken;
use troupe_agent::compact::offload::Ledger;
use troupe_agent::run::{
    RunEffect, RunInput, RunMachine, RunRefusal, RunSetup, SessionBack, join_notes,
};
pub(crate) use troupe_agent::session::SessionState;
use troupe_agent::session::Transcript;
use troupe_agent::{
    AgentLoop, AgentSpec, AgentStatus, Approver, Budget, RunAccount, RunLedger, RunOutcome,
};
use troupe_config::Limits;
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::{ApprovalOutcome, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_store::{NewSession, RunBounds, RunRecord, RunState, Store, StoreError};

use crate::account::SharedAccount;
use crate::agent::{AgentActor, AgentArgs, AgentMsg, Report, Work};
use crate::api::{RunHandle, RuntimeError, SubmitReply};
use crate::env::{AgentEnv, AgentSeat, CatalogueKey, LiveCatalogue};
use crate::event_log::EventSink;
use crate::port::Port;
use crate::slots::SlotHolder;
use crate::tasks::OwnedTasks;
use crate::tree::{TreeNews, TreePort};

pub(crate) use troupe_agent::run::RunJob;

/// The prompt a compaction run is recorded with.
pub(crate) const COMPACT_PROMPT: &str = "(compact the conversation)";

/// What a run starts from.
pub(crate) struct RunArgs {
    pub run_id: String,
    pub session_id: String,
    pub prompt: String,
    pub job: RunJob,
    pub env: Arc<AgentEnv>,
    pub permissions: Arc<PermissionEngine>,
    pub limits: Limits,
    pub approver: Approver,
    pub session: SessionState,
    /// How the session was opened (`None`: kept in memory from its last run).
    pub opening: Option<crate::hook_gate::SessionOpening>,
    /// The new session the run's first write creates.
    pub create: Option<NewSessionWrite>,
    /// The submitter's answer, sent once the run is recorded.
    pub answer: SubmitAnswer,
    pub events: EventSink,
    /// Where the run tells that its session is free and that it ended (the
    /// runtime's mailbox).
    pub ended: Port<RunEnded>,
    /// The parent of the main agent's span: none (the run is its trace's
    /// root) unless the run was placed from elsewhere.
    pub parent_span: tracing::Span,
}

/// What a run tells the runtime that started it as it ends, in this order.
pub(crate) enum RunEnded {
    /// The session is free for its next run. Sent before `run_finished` is
    /// emitted: the runtime's mailbox has it before any request a client
    /// makes on seeing that event.
    SessionFree {
        run_id: String,
        /// The session as the run leaves it (none: reopened from the store).
        session: Option<SessionState>,
    },
    /// The run is over.
    Over { run_id: String, outcome: RunOutcome },
}

/// A new session, created by its first run's first write, with the memory
/// its later runs send.
pub(crate) struct NewSessionWrite {
    pub session: NewSession,
    pub memory: String,
}

/// The answer to the submitter of a run: the handle, sent once the run is
/// recorded (its first write is durable or failed).
pub(crate) struct SubmitAnswer {
    pub reply: SubmitReply,
    pub handle: RunHandle,
}

/// Messages of the run actor.
pub(crate) enum RunMsg {
    /// Cancel the whole run.
    Cancel,
    /// Cancel one agent (and what runs below it) by path.
    CancelAgent {
        path: String,
        reply: RpcReplyPort<Result<(), RuntimeError>>,
    },
    /// Answer an approval (routed to the agent that asked).
    Approve {
        approval_id: String,
        outcome: ApprovalOutcome,
        reason: Option<String>,
        reply: RpcReplyPort<Result<(), RuntimeError>>,
    },
    /// Text the person wrote for the main agent's next model call.
    Message {
        text: String,
        reply: RpcReplyPort<Result<(), RuntimeError>>,
    },
    /// What every agent of the tree is doing.
    Statuses(RpcReplyPort<Vec<AgentStatus>>),
    /// The main agent's history.
    History(RpcReplyPort<Vec<Message>>),
    /// Traffic from the run's own agents and timers.
    Internal(RunInternal),
}

/// Traffic from the run's agents and timers.
pub(crate) enum RunInternal {
    /// The hooks at the run's door answered.
    Gated(troupe_hooks::HookVerdict),
    /// News of an agent of the tree.
    Tree(TreeNews),
    /// The wall-clock budget is used up.
    WallClock,
    /// The run record written at the door is durable (or the write failed).
    Recorded(Result<(), StoreError>),
    /// The opened run's record and history are durable (or the write
    /// failed): what [`RunEffect::OpenRun`] started.
    Opened(Result<(), StoreError>),
    /// The store's confirmation deadline for the run's end is over.
    EndOverdue,
    /// The run's end is recorded (durable, or the write failed): what
    /// [`RunEffect::WriteEnd`] started, with the tree's usage then.
    EndRecorded {
        usage: Usage,
        recorded: Result<(), StoreError>,
    },
}

impl RunMsg {
    pub(crate) fn internal(internal: RunInternal) -> Self {
        Self::Internal(internal)
    }
}

/// The run actor.
pub(crate) struct RunActor;

/// What the main agent starts with.
struct MainStart {
    limits: Limits,
    approver: Approver,
    transcript: Transcript,
    /// The session had a history before this run.
    resumed: bool,
    job: RunJob,
}

/// What a run opens with, until [`RunEffect::OpenRun`] opens it.
struct Opening {
    session: SessionState,
    limits: Limits,
    approver: Approver,
}

/// A registered agent of the tree.
struct TreeAgent {
    agent: ActorRef<AgentMsg>,
    token: CancellationToken,
}

/// The answer to a request the run is handling.
type Reply = RpcReplyPort<Result<(), RuntimeError>>;

/// State of one run.
pub(crate) struct RunActorState {
    run_id: String,
    session_id: String,
    env: Arc<AgentEnv>,
    permissions: Arc<PermissionEngine>,
    events: EventSink,
    ended: Port<RunEnded>,
    account: Arc<SharedAccount>,
    /// How many sub-agents of the run may work at once.
    parallel_subagents: u32,
    /// The parent of the main agent's span.
    parent_span: tracing::Span,
    /// The run's decisions.
    machine: RunMachine,
    /// What the hooks at the door read.
    check: DoorCheck,
    /// When the run was submitted.
    started: DateTime<Utc>,
    /// The tree's agents by path.
    agents: HashMap<String, TreeAgent>,
    /// The answer channels of open questions by approval id.
    questions: HashMap<String, tokio::sync::oneshot::Sender<troupe_tools::Answer>>,
    main: Option<ActorRef<AgentMsg>>,
    /// The new session the run's first write creates.
    create: Option<NewSessionWrite>,
    /// The submitter's answer, until the run is recorded.
    answer: Option<SubmitAnswer>,
    /// The main agent's start and how much of its history is being made
    /// durable, while the opening write is under way.
    opening_write: Option<(MainStart, usize)>,
    /// The session as submitted, until the run opens on it.
    opening: Option<Opening>,
    /// What the main agent starts with, from the run's opening until it is
    /// spawned.
    start: Option<MainStart>,
    /// The session as the main agent left it.
    left_by_main: Option<SessionState>,
    /// The wall-clock timer (`send_after`), aborted once the tree is
    /// cancelled or the run stops.
    wall_clock: Option<Timer>,
    /// While the end of the run is being recorded: whether it was told
    /// (durable, failed or overdue), the tree's usage then, and the timer of
    /// the store's confirmation deadline.
    end_write: Option<(Arc<AtomicBool>, Usage, Timer)>,
    /// Its tasks (hooks on a message, status and history queries, the hooks
    /// at the door): aborted when it stops.
    tasks: OwnedTasks,
}

/// The task of a message sent to the run later.
type Timer = tokio::task::JoinHandle<Result<(), ractor::MessagingErr<RunMsg>>>;

impl Actor for RunActor {
    type Msg = RunMsg;
    type State = RunActorState;
    type Arguments = RunArgs;

    /// Hands the run's first write to the store's writer and returns: the
    /// runtime that spawns it never waits for the disk. Without hooks at the
    /// door that write opens the run; with them the run is recorded with its
    /// prompt withheld and opens on their verdict, in a task of the run's
    /// own, so that a slow SessionStart or UserPromptSubmit hook holds up
    /// this run only. The submitter gets its handle once the first write is
    /// durable.
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let root = CancellationToken::new();
        let budget = Budget::from_limits(&args.limits, args.env.price.is_some());
        let started = Utc::now();
        let account = Arc::new(SharedAccount::new(
            RunAccount::new(budget, started),
            root.clone(),
        ));
        let door_hooks = crate::hook_gate::has_door_hooks(&args.env, args.job, args.opening);
        let machine = RunMachine::new(RunSetup {
            prompt: args.prompt.clone(),
            job: args.job,
            last_active: args.session.last_active,
            wall_clock: args.limits.wall_clock,
            rewind: args.session.rewind.as_deref().cloned(),
        });
        let mut state = RunActorState {
            run_id: args.run_id,
            session_id: args.session_id,
            env: args.env,
            permissions: args.permissions,
            events: args.events,
            ended: args.ended,
            account,
            machine,
            check: DoorCheck {
                prompt: args.prompt,
                job: args.job,
                opening: args.opening,
                root,
            },
            started,
            parallel_subagents: args.limits.max_parallel_subagents,
            parent_span: args.parent_span,
            create: args.create,
            answer: Some(args.answer),
            opening_write: None,
            agents: HashMap::new(),
            questions: HashMap::new(),
            main: None,
            opening: Some(Opening {
                session: args.session,
                limits: args.limits,
                approver: args.approver,
            }),
            start: None,
            left_by_main: None,
            wall_clock: None,
            end_write: None,
            tasks: OwnedTasks::default(),
        };
        let submitted = RunInput::Submitted {
            door_hooks,
            now: Utc::now(),
        };
        state.apply(&myself, submitted, None).await;
        Ok(state)
    }

    /// The run supervises its main agent from here on: the hooks at the
    /// door start (their verdict comes back as a message: a cancel can kill
    /// them), or the opened run's main agent is spawned, linked.
    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.apply(&myself, RunInput::Running, None).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RunMsg::Cancel => state.apply(&myself, RunInput::CancelRequested, None).await,
            RunMsg::CancelAgent { path, reply } => {
                let input = RunInput::CancelAgentRequested { path };
                state.apply(&myself, input, Some(reply)).await;
            }
            RunMsg::Approve {
                approval_id,
                outcome,
                reason,
                reply,
            } => {
                let input = RunInput::ApproveRequested {
                    approval_id,
                    outcome,
                    reason,
                };
                state.apply(&myself, input, Some(reply)).await;
            }
            RunMsg::Message { text, reply } => {
                let Some(main) = state.main.clone() else {
                    let _ = reply.send(Err(RuntimeError::Gone));
                    return Ok(());
                };
                let (env, events) = (state.env.clone(), state.events.clone());
                let (session_id, run_id) = (state.session_id.clone(), state.run_id.clone());
                let cancel = state.account.root().clone();
                // Its hooks run outside the mailbox; the text goes on only
                // if none blocked it.
                state.tasks.spawn(async move {
                    let gate = crate::hook_gate::message_written(
                        &env,
                        &session_id,
                        &run_id,
                        &text,
                        cancel,
                    )
                    .await;
                    for report in &gate.reports {
                        events.emit(report.event_kind());
                    }
                    let result = match gate.blocked {
                        Some(reason) => Err(RuntimeError::HookBlocked(reason)),
                        None => {
                            let text =
                                join_notes(gate.prompt_note(), Some(text)).unwrap_or_default();
                            main.cast(AgentMsg::work(Work::UserMessage { run_id, text }))
                                .map_err(|_| RuntimeError::Gone)
                        }
                    };
                    let _ = reply.send(result);
                });
            }
            RunMsg::Statuses(reply) => {
                let agents: Vec<ActorRef<AgentMsg>> =
                    state.agents.values().map(|a| a.agent.clone()).collect();
                // Asked outside the mailbox: a busy agent never holds up the run.
                state.tasks.spawn(async move {
                    let mut statuses = Vec::with_capacity(agents.len());
                    for agent in agents {
                        if let Ok(status) =
                            ractor::call_t!(agent, AgentMsg::Status, STATUS_TIMEOUT_MS)
                        {
                            statuses.push(status);
                        }
                    }
                    statuses.sort_by(|a, b| a.path.cmp(&b.path));
                    let _ = reply.send(statuses);
                });
            }
            RunMsg::History(reply) => match state.main.clone() {
                Some(main) => {
                    let run = myself.clone();
                    state.tasks.spawn(async move {
                        match ractor::call_t!(main, AgentMsg::History, STATUS_TIMEOUT_MS) {
                            Ok(history) => {
                                let _ = reply.send(history);
                            }
                            // The main agent is done: its report is ahead of
                            // this in the run's mailbox, so the run ends (and
                            // drops the question) before it comes round again.
                            Err(_) => {
                                let _ = run.cast(RunMsg::History(reply));
                            }
                        }
                    });
                }
                None => drop(reply),
            },
            RunMsg::Internal(internal) => state.on_internal(&myself, internal).await,
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.wall_clock.take() {
            timer.abort();
        }
        if let Some((_, _, timer)) = state.end_write.take() {
            timer.abort();
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The run never stops because its agent did: it ends the run cleanly.
        if let SupervisionEvent::ActorFailed(cell, err) = event
            && state
                .main
                .as_ref()
                .is_some_and(|main| main.get_id() == cell.get_id())
        {
            tracing::error!(run = %state.run_id, %err, "the main agent failed");
            let failed = RunInput::MainFailed {
                error: err.to_string(),
            };
            state.apply(&myself, failed, None).await;
        }
        Ok(())
    }
}

/// What the hooks at a run's door read.
#[derive(Clone)]
struct DoorCheck {
    prompt: String,
    job: RunJob,
    opening: Option<crate::hook_gate::SessionOpening>,
    root: CancellationToken,
}

/// The verdict of the hooks at a run's door (none for a compaction run,
/// which has no prompt).
async fn door_gate(
    env: &AgentEnv,
    session_id: &str,
    run_id: &str,
    door: &DoorCheck,
) -> troupe_hooks::HookVerdict {
    match door.job {
        RunJob::Prompt => {
            crate::hook_gate::before_prompt(
                env,
                session_id,
                run_id,
                door.opening,
                &door.prompt,
                door.root.clone(),
            )
            .await
        }
        RunJob::Compact => troupe_hooks::HookVerdict::default(),
    }
}

/// How long a status or history query waits for one agent.
const STATUS_TIMEOUT_MS: u64 = 5_000;

/// Answers the request being handled with `result` (once).
fn answer(reply: &mut Option<Reply>, result: Result<(), RuntimeError>) {
    if let Some(reply) = reply.take() {
        let _ = reply.send(result);
    }
}

impl RunActorState {
    /// The layer-1 decisions kept with the run's session (none when they
    /// cannot be read: they are made again).
    fn stored_ledger(&self) -> Ledger {
        match self.env.store.ledger(&self.session_id) {
            Ok(entries) => Ledger::from_entries(&entries),
            Err(err) => {
                tracing::warn!(%err, "the session's layer-1 decisions could not be read");
                Ledger::default()
            }
        }
    }

    /// Spawns the main agent, linked to the run.
    async fn spawn_main(
        &mut self,
        myself: &ActorRef<RunMsg>,
        start: MainStart,
    ) -> Result<ActorRef<AgentMsg>, String> {
        let MainStart {
            limits,
            approver,
            transcript,
            resumed,
            job,
        } = start;
        let catalogue = self.env.main_catalogue().map_err(|err| err.to_string())?;
        let machine = AgentLoop::new(self.env.loop_setup(AgentSeat {
            spec: AgentSpec::main(limits.max_turns),
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            cache_key: self.session_id.clone(),
            task: None,
            system: self.env.system.clone(),
            catalogue,
            catalogue_source: Some(LiveCatalogue::new(self.env.clone(), CatalogueKey::main())),
            permissions: self.permissions.clone(),
            account: self.account.clone(),
            approver,
            provider: self.env.provider.clone(),
            transcript,
            ledger: self.stored_ledger(),
            resumed,
            compact_only: job == RunJob::Compact,
        }));
        let args = AgentArgs {
            machine,
            env: self.env.clone(),
            provider: self.env.provider.clone(),
            events: self.events.clone(),
            run: tree_port(myself),
            root_session: self.session_id.clone(),
            report: Report::Run,
            slot: SlotHolder::for_run(self.parallel_subagents),
            token: self.account.root().child_token(),
            account: self.account.clone(),
            // The main agent's span is the root of the run's trace, or the
            // child of the span that placed the run.
            parent_span: self.parent_span.clone(),
        };
        Actor::spawn_linked(None, AgentActor, args, myself.get_cell())
            .await
            .map(|(agent, _)| agent)
            .map_err(|err| err.to_string())
    }

    /// What an agent of the tree told the run: the handles it carries are
    /// kept (or dropped) here, what happened is the machine's input.
    fn on_tree_news(&mut self, news: TreeNews) -> RunInput {
        match news {
            TreeNews::AgentStarted { path, agent, token } => {
                self.agents.insert(path.clone(), TreeAgent { agent, token });
                RunInput::AgentStarted { path }
            }
            TreeNews::AgentEnded { path } => {
                self.agents.remove(&path);
                RunInput::AgentEnded { path }
            }
            TreeNews::ApprovalOpened { approval_id, path } => {
                RunInput::ApprovalOpened { approval_id, path }
            }
            TreeNews::QuestionOpened { approval_id, reply } => {
                self.questions.insert(approval_id.clone(), reply);
                RunInput::QuestionOpened { approval_id }
            }
            TreeNews::ApprovalsClosed { approval_ids } => {
                for id in &approval_ids {
                    self.questions.remove(id);
                }
                RunInput::ApprovalsClosed { approval_ids }
            }
            TreeNews::MainFinished {
                outcome,
                transcript,
            } => {
                self.left_by_main = Some(SessionState {
                    transcript,
                    last_active: Some(Utc::now()),
                    rules: self.permissions.session_rules(),
                    rewind: None,
                });
                RunInput::MainFinished(outcome)
            }
        }
    }

    /// Traffic from the run's agents and timers: the handles it carries are
    /// kept (or dropped) here, what happened goes to the machine.
    async fn on_internal(&mut self, myself: &ActorRef<RunMsg>, internal: RunInternal) {
        let internal = match internal {
            // The disk has not answered in time: the run ends without it,
            // unless the answer came first.
            RunInternal::EndOverdue => match self.end_write.take() {
                Some((told, usage, _)) if !told.swap(true, Ordering::SeqCst) => {
                    RunInternal::EndRecorded {
                        usage,
                        recorded: Err(troupe_store::unconfirmed("the end of the run")),
                    }
                }
                _ => return,
            },
            other => other,
        };
        let input = match internal {
            RunInternal::Gated(verdict) => RunInput::DoorChecked {
                verdict,
                now: Utc::now(),
            },
            RunInternal::Tree(news) => self.on_tree_news(news),
            RunInternal::WallClock => RunInput::WallClockOver {
                tree_stopped: self.account.stop_cause().is_some(),
            },
            RunInternal::Recorded(recorded) => {
                if let Err(err) = recorded {
                    tracing::error!(run = %self.run_id, %err, "the run could not be recorded");
                }
                self.answer_submitter();
                return;
            }
            RunInternal::Opened(opened) => {
                let opened = match opened {
                    Ok(()) => {
                        if let Some((mut start, saved)) = self.opening_write.take() {
                            start.transcript.mark_saved(saved);
                            self.start = Some(start);
                        }
                        Ok(())
                    }
                    Err(err) => {
                        tracing::error!(run = %self.run_id, %err, "the run could not be recorded");
                        Err(err.to_string())
                    }
                };
                self.answer_submitter();
                RunInput::Opened(opened)
            }
            RunInternal::EndOverdue => return,
            RunInternal::EndRecorded { usage, recorded } => {
                if let Some((_, _, timer)) = self.end_write.take() {
                    timer.abort();
                }
                if let Err(err) = &recorded {
                    tracing::error!(run = %self.run_id, %err, "could not record the end of the run");
                }
                RunInput::EndRecorded {
                    recorded: recorded.map_err(|err| err.to_string()),
                    usage,
                }
            }
        };
        self.apply(myself, input, None).await;
    }

    /// Feeds `input` to the run's machine and carries out its effects in
    /// order, then those of the inputs they gave back. `reply` answers the
    /// request `input` is, if it is one.
    async fn apply(&mut self, myself: &ActorRef<RunMsg>, input: RunInput, reply: Option<Reply>) {
        let mut reply = reply;
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            for effect in self.machine.on(input) {
                if let Some(next) = self.perform(myself, effect, &mut reply).await {
                    inputs.push_back(next);
                }
            }
        }
    }

    /// Carries out one effect; the input it gives back, if any.
    async fn perform(
        &mut self,
        myself: &ActorRef<RunMsg>,
        effect: RunEffect,
        reply: &mut Option<Reply>,
    ) -> Option<RunInput> {
        match effect {
            RunEffect::RecordRun { prompt } => self.write_record(myself, prompt),
            RunEffect::CheckDoor => self.gate_at_door(myself),
            RunEffect::OpenRun { prompt, message } => {
                return self.open_run(myself, prompt, message);
            }
            RunEffect::Emit(kind) => self.events.emit(kind),
            RunEffect::ArmWallClock { after } => {
                self.wall_clock =
                    Some(myself.send_after(after, || RunMsg::internal(RunInternal::WallClock)));
            }
            RunEffect::SpawnMain => {
                let Some(start) = self.start.take() else {
                    return Some(RunInput::MainSpawned(Err("the run did not open".into())));
                };
                let spawned = self.spawn_main(myself, start).await;
                return Some(RunInput::MainSpawned(spawned.map(|main| {
                    self.main = Some(main);
                })));
            }
            RunEffect::StopTree(cause) => {
                self.account.stop_tree(cause);
            }
            RunEffect::CancelTree => {
                self.account.cancel_tree();
                if let Some(timer) = self.wall_clock.take() {
                    timer.abort();
                }
            }
            RunEffect::CancelAgent { path } => {
                let result = match self.agents.get(&path) {
                    Some(agent) => {
                        agent.token.cancel();
                        Ok(())
                    }
                    None => Err(RuntimeError::UnknownAgent(path)),
                };
                answer(reply, result);
            }
            RunEffect::DeliverApproval {
                path,
                approval_id,
                outcome,
                reason,
            } => {
                let result = match self.agents.get(&path) {
                    Some(agent) => agent
                        .agent
                        .cast(AgentMsg::work(Work::Approve {
                            run_id: self.run_id.clone(),
                            approval_id,
                            outcome,
                            reason,
                        }))
                        .map_err(|_| RuntimeError::Gone),
                    None => Err(RuntimeError::Gone),
                };
                answer(reply, result);
            }
            RunEffect::AnswerQuestion {
                approval_id,
                outcome,
                reason,
            } => {
                let result = match self.questions.remove(&approval_id) {
                    Some(question) => question
                        .send((outcome, reason))
                        .map_err(|_| RuntimeError::UnknownApproval(approval_id)),
                    None => Err(RuntimeError::UnknownApproval(approval_id)),
                };
                answer(reply, result);
            }
            RunEffect::Refuse(refusal) => {
                let error = match refusal {
                    RunRefusal::UnknownAgent(path) => RuntimeError::UnknownAgent(path),
                    RunRefusal::UnknownApproval(id) => RuntimeError::UnknownApproval(id),
                    RunRefusal::Gone => RuntimeError::Gone,
                };
                answer(reply, Err(error));
            }
            RunEffect::WriteEnd {
                status,
                stop_reason,
            } => self.write_end(myself, status, stop_reason),
            RunEffect::FreeSession { session } => {
                let session = match session {
                    SessionBack::Unchanged => self.opening.take().map(|opening| opening.session),
                    SessionBack::LeftByMain => self.left_by_main.take(),
                    SessionBack::FromStore => None,
                };
                self.ended.send(RunEnded::SessionFree {
                    run_id: self.run_id.clone(),
                    session,
                });
            }
            RunEffect::Finish { outcome } => {
                self.answer_submitter();
                self.ended.send(RunEnded::Over {
                    run_id: self.run_id.clone(),
                    outcome,
                });
                myself.stop(None);
            }
        }
        None
    }

    /// Runs the hooks at the door in a task; their verdict comes back as
    /// [`RunInternal::Gated`]. They run before anything of the prompt is
    /// stored: a blocked prompt never enters the history.
    fn gate_at_door(&mut self, myself: &ActorRef<RunMsg>) {
        let (env, session_id, run_id) = (
            self.env.clone(),
            self.session_id.clone(),
            self.run_id.clone(),
        );
        let check = self.check.clone();
        let run = myself.clone();
        self.tasks.spawn(async move {
            let gate = door_gate(&env, &session_id, &run_id, &check).await;
            let _ = run.cast(RunMsg::internal(RunInternal::Gated(gate)));
        });
    }

    /// Opens the run: `message` joins the session's history, and the run
    /// record (with `prompt`) and the history not yet stored are handed to the
    /// store's writer thread (with the new session, if the run creates one),
    /// which makes them durable and answers with [`RunInternal::Opened`]: no
    /// handler waits for the disk. The main agent's start waits for that
    /// answer.
    fn open_run(
        &mut self,
        myself: &ActorRef<RunMsg>,
        prompt: String,
        message: Option<Message>,
    ) -> Option<RunInput> {
        let Some(Opening {
            mut session,
            limits,
            approver,
        }) = self.opening.take()
        else {
            return Some(RunInput::Opened(Err("the run opened already".into())));
        };
        let resumed = !session.transcript.is_empty();
        // The prompt's message told the pending rewind (its note is in it):
        // the write that stores it clears it.
        let tells_rewind = message.is_some() && session.rewind.take().is_some();
        let mut prompt_index = None;
        if let Some(message) = message {
            session.transcript.push(message);
            prompt_index = session.transcript.unsaved().last().map(|(index, _)| index);
        }
        let mut record = self.record(prompt);
        let (saved, unsaved) = session.transcript.unsaved_copy();
        let create = self.create.take();
        let session_id = self.session_id.clone();
        let run = myself.clone();
        self.env.store.commit(
            move |store| {
                match &create {
                    Some(create) => create_session(store, create)?,
                    // Created by an earlier write of this run, or by an
                    // earlier run: a session that is not there is an error,
                    // not a history without its session.
                    None if store.session(&session_id)?.is_none() => {
                        return Err(StoreError::Database {
                            detail: format!("session {session_id} is not in the store"),
                        });
                    }
                    None => {}
                }
                record.history = Some(match prompt_index {
                    Some(start) => RunBounds {
                        start,
                        end: None,
                        end_order: None,
                    },
                    None => store.run_start_bounds(&session_id)?,
                });
                store.put_run(&record)?;
                let unsaved = unsaved.iter().map(|(i, m)| (*i, m));
                if tells_rewind {
                    store.put_messages_telling_rewind(&session_id, unsaved)?;
                } else {
                    store.put_messages(&session_id, unsaved)?;
                }
                Ok(())
            },
            move |opened| {
                let _ = run.cast(RunMsg::internal(RunInternal::Opened(opened)));
            },
        );
        self.opening_write = Some((
            MainStart {
                limits,
                approver,
                transcript: session.transcript,
                resumed,
                job: self.check.job,
            },
            saved,
        ));
        None
    }

    /// Writes the run record with `prompt` (and the new session, if the run
    /// creates one and this is its first write) on the store's writer thread;
    /// [`RunInternal::Recorded`] answers.
    fn write_record(&mut self, myself: &ActorRef<RunMsg>, prompt: String) {
        let mut record = self.record(prompt);
        let create = self.create.take();
        let run = myself.clone();
        self.env.store.commit(
            move |store| {
                if let Some(create) = &create {
                    create_session(store, create)?;
                }
                record.history = Some(store.run_start_bounds(&record.session_id)?);
                store.put_run(&record)
            },
            move |recorded| {
                let _ = run.cast(RunMsg::internal(RunInternal::Recorded(recorded)));
            },
        );
    }

    /// Sends the submitter its run's handle, once.
    fn answer_submitter(&mut self) {
        if let Some(SubmitAnswer { reply, handle }) = self.answer.take() {
            let _ = reply.send(Ok(handle));
        }
    }

    /// The record of this run, running since it was submitted, with `prompt`.
    fn record(&self, prompt: String) -> RunRecord {
        RunRecord {
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            prompt,
            status: RunState::Running,
            stop_reason: None,
            started: self.started,
            ended: None,
            pid: std::process::id(),
            history: None,
        }
    }

    /// Writes the record's end and has the store's writer thread make it
    /// durable (no worker waits for the disk); [`RunInternal::EndRecorded`]
    /// answers, with the whole tree's usage now.
    fn write_end(&mut self, myself: &ActorRef<RunMsg>, status: RunStatus, stop_reason: String) {
        let usage = self.account.usage();
        let run_id = self.run_id.clone();
        // Told once: when the write is durable, or when the disk has not
        // answered within CONFIRM_DEADLINE (a run must end even then).
        let told = Arc::new(AtomicBool::new(false));
        let deliver = {
            let run = myself.clone();
            let told = told.clone();
            move |recorded: Result<(), StoreError>| {
                if !told.swap(true, Ordering::SeqCst) {
                    let _ = run.cast(RunMsg::internal(RunInternal::EndRecorded {
                        usage,
                        recorded,
                    }));
                }
            }
        };
        let deadline = myself.send_after(troupe_store::CONFIRM_DEADLINE, || {
            RunMsg::internal(RunInternal::EndOverdue)
        });
        self.end_write = Some((told, usage, deadline));
        self.env.store.commit(
            move |store| {
                let Some(mut record) = store.run(&run_id)? else {
                    return Ok(());
                };
                record.status = RunState::Ended(status);
                record.stop_reason = Some(stop_reason);
                record.ended = Some(Utc::now());
                // Where the run ends in the history, read on the writer
                // thread after the run's own saves: still one write.
                record.history = Some(store.run_end_bounds(&record.session_id, record.history)?);
                store.put_run(&record)
            },
            deliver,
        );
    }
}

/// Creates a run's new session with the memory its later runs send (a
/// memory that cannot be kept is only logged).
fn create_session(store: &Store, create: &NewSessionWrite) -> Result<(), StoreError> {
    store.create_session(&create.session)?;
    if let Err(err) = store.put_session_memory(&create.session.id, &create.memory) {
        tracing::warn!(%err, "the session's memory could not be kept with it");
    }
    Ok(())
}

/// The port through which the agents of the run's tree tell it their news.
fn tree_port(run: &ActorRef<RunMsg>) -> TreePort {
    let run = run.clone();
    Port::new(move |news| run.cast(RunMsg::internal(RunInternal::Tree(news))).is_ok())
}
