//! The run actor: one per run, between the runtime and the run's agents
//! (DESIGN.md: runtime → run → agents). It owns everything run-wide:
//!
//! - the run record and the first and last events (`run_started`,
//!   `run_finished`): the prompt and the record are durable before
//!   `run_started`, the record's end before `run_finished`;
//! - the shared [`RunAccount`] (budgets, stop cause, the cancellation root,
//!   sub-agent slots) and the wall-clock watchdog;
//! - a registry of the tree's agents by path (cancel one child, status);
//! - the approval broker: each open approval id routes answers to whichever
//!   agent asked, at any depth, or to the tool call waiting on a question
//!   (an MCP server's elicitation, see `reach`).
//!
//! A panic of the main agent is contained here: the tree below is cancelled
//! and the run ends with an error; the session is repaired from the store on
//! its next run.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio_util::sync::CancellationToken;
use troupe_agent::compact::offload::Ledger;
use troupe_agent::resume::{pause_note, user_message};
use troupe_agent::session::Transcript;
use troupe_agent::{
    AgentLoop, AgentSpec, AgentStatus, Approver, Budget, ContextSetup, LimitHit, LoopSetup,
    RunAccount, RunOutcome, SlotHolder, StopCause,
};
use troupe_config::Limits;
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_protocol::permission::RuleEntry;
use troupe_store::{RunRecord, RunState, StoreError};

use crate::agent::{AgentActor, AgentArgs, AgentMsg, Report, Work};
use crate::env::AgentEnv;
use crate::event_log::EventSink;
use crate::runtime::{RuntimeError, RuntimeMsg};

/// A session between runs: its history and what it keeps.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    /// The history and what of it is stored.
    pub transcript: Transcript,
    /// When the session was last active (for the pause note).
    pub last_active: Option<DateTime<Utc>>,
    /// "Allow always" rules kept with the session.
    pub rules: Vec<RuleEntry>,
}

/// What a run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunJob {
    /// The prompt joins the history and the main agent works on it.
    Prompt,
    /// The main agent only compacts the session's history (manual
    /// compaction): no prompt joins it, no model turn is taken.
    Compact,
}

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
    pub events: EventSink,
    pub runtime: ActorRef<RuntimeMsg>,
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
    /// An agent of the tree started.
    AgentStarted {
        path: String,
        agent: ActorRef<AgentMsg>,
        token: CancellationToken,
    },
    /// An agent of the tree ended.
    AgentEnded { path: String },
    /// An agent waits for an answer to `approval_id`.
    ApprovalOpened {
        approval_id: String,
        agent: ActorRef<AgentMsg>,
    },
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
    /// The wall-clock budget is used up.
    WallClock,
    /// The run's end is recorded (durable, or the write failed): what
    /// [`RunActorState::end`] started, [`RunActorState::finish`] completes.
    EndRecorded {
        outcome: RunOutcome,
        session: Option<SessionState>,
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

/// What a run opens with. Without hooks at the door the run opens in
/// `pre_start`, which the runtime awaits; with them it opens in `post_start`,
/// in the run's own task, so that a slow SessionStart or UserPromptSubmit
/// hook holds up this run only, never the runtime that starts every run.
struct Door {
    /// What its hooks read.
    check: DoorCheck,
    session: SessionState,
    limits: Limits,
    approver: Approver,
    /// When the run was submitted.
    started: chrono::DateTime<Utc>,
}

/// A registered agent of the tree.
struct TreeAgent {
    agent: ActorRef<AgentMsg>,
    token: CancellationToken,
}

/// State of one run.
pub(crate) struct RunActorState {
    run_id: String,
    session_id: String,
    env: Arc<AgentEnv>,
    permissions: Arc<PermissionEngine>,
    events: EventSink,
    runtime: ActorRef<RuntimeMsg>,
    account: Arc<RunAccount>,
    agents: HashMap<String, TreeAgent>,
    broker: HashMap<String, ActorRef<AgentMsg>>,
    questions: HashMap<String, tokio::sync::oneshot::Sender<troupe_tools::Answer>>,
    main: Option<ActorRef<AgentMsg>>,
    /// What the run opens with, while its hooks at the door wait for
    /// `post_start`.
    door: Option<Door>,
    /// What the main agent starts with, until `post_start` spawns it.
    start: Option<MainStart>,
    /// A hook blocked the prompt: the run ends at once with this outcome,
    /// the session as it was.
    blocked: Option<(RunOutcome, SessionState)>,
    ended: bool,
}

impl Actor for RunActor {
    type Msg = RunMsg;
    type State = RunActorState;
    type Arguments = RunArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let root = CancellationToken::new();
        let budget = Budget::from_limits(&args.limits, args.env.price.is_some());
        let account = Arc::new(RunAccount::new(
            budget,
            root.clone(),
            args.limits.max_parallel_subagents,
        ));
        let mut state = RunActorState {
            run_id: args.run_id,
            session_id: args.session_id,
            env: args.env,
            permissions: args.permissions,
            events: args.events,
            runtime: args.runtime,
            account,
            agents: HashMap::new(),
            broker: HashMap::new(),
            questions: HashMap::new(),
            main: None,
            door: None,
            start: None,
            blocked: None,
            ended: false,
        };
        let door = Door {
            check: DoorCheck {
                prompt: args.prompt,
                job: args.job,
                opening: args.opening,
                root,
            },
            session: args.session,
            limits: args.limits,
            approver: args.approver,
            started: Utc::now(),
        };
        if crate::hook_gate::has_door_hooks(&state.env, door.check.job, door.check.opening) {
            // Known to the store at once (`troupe runs`, the daemon's API),
            // with no word of the prompt before the hooks passed it.
            let record = state.record(CHECKED_PROMPT.to_owned(), door.started);
            if let Err(err) = state.env.store.put_run(&record) {
                tracing::error!(run = %state.run_id, %err, "the run could not be recorded");
            }
            state.door = Some(door);
        } else {
            // No hook to ask: the run opens at once.
            let gate = troupe_hooks::HookVerdict::default();
            state.open_with(&myself, door, gate).await;
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match &state.door {
            // The hooks at the door run in a task: the mailbox stays open (a
            // cancel kills them), and the run opens on their verdict.
            Some(door) => state.gate_at_door(&myself, door),
            None => state.launch(&myself).await,
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RunMsg::Cancel => {
                state.account.stop(StopCause::Cancelled);
            }
            RunMsg::CancelAgent { path, reply } => {
                let result = match state.agents.get(&path) {
                    Some(agent) => {
                        agent.token.cancel();
                        Ok(())
                    }
                    None => Err(RuntimeError::UnknownAgent(path)),
                };
                let _ = reply.send(result);
            }
            RunMsg::Approve {
                approval_id,
                outcome,
                reason,
                reply,
            } => {
                if let Some(question) = state.questions.remove(&approval_id) {
                    let _ = reply.send(
                        question
                            .send((outcome, reason))
                            .map_err(|_| RuntimeError::UnknownApproval(approval_id)),
                    );
                    return Ok(());
                }
                let result = match state.broker.get(&approval_id) {
                    Some(agent) => agent
                        .cast(AgentMsg::work(Work::Approve {
                            run_id: state.run_id.clone(),
                            approval_id,
                            outcome,
                            reason,
                        }))
                        .map_err(|_| RuntimeError::Gone),
                    None => Err(RuntimeError::UnknownApproval(approval_id)),
                };
                let _ = reply.send(result);
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
                tokio::spawn(async move {
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
                tokio::spawn(async move {
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
                    tokio::spawn(async move {
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
            RunMsg::Internal(RunInternal::Gated(gate)) => {
                if let Some(door) = state.door.take() {
                    state.open_with(&myself, door, gate).await;
                    state.launch(&myself).await;
                }
            }
            RunMsg::Internal(internal) => state.on_internal(&myself, internal),
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
            state.account.root().cancel();
            state.events.emit(EventKind::Error {
                kind: "agent_failed".into(),
                message: format!("the agent failed: {err}"),
            });
            state.end(
                &myself,
                RunOutcome {
                    status: RunStatus::Error,
                    stop_reason: "agent_failed".into(),
                    final_text: String::new(),
                    usage: Usage::default(),
                },
                None,
            );
        }
        Ok(())
    }
}

/// The prompt recorded for a run whose prompt a hook blocked.
const BLOCKED_PROMPT: &str = "(withheld: blocked by a UserPromptSubmit hook)";

/// The prompt recorded for a run while its hooks at the door run.
const CHECKED_PROMPT: &str = "(withheld: being checked by the hooks at the door)";

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

/// Two optional notes as one, blank-line separated.
fn join_notes(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
        (a, b) => a.or(b),
    }
}

/// How long a status or history query waits for one agent.
const STATUS_TIMEOUT_MS: u64 = 5_000;

/// Feeds [`RunInternal::WallClock`] when the wall-clock budget is used up,
/// unless the run ends first.
fn watch_wall_clock(run: &ActorRef<RunMsg>, limit: std::time::Duration, root: CancellationToken) {
    let run = run.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(limit) => {
                let _ = run.cast(RunMsg::internal(RunInternal::WallClock));
            }
            _ = root.cancelled() => {}
        }
    });
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
        let machine = AgentLoop::new(LoopSetup {
            spec: AgentSpec::main(limits.max_turns),
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            task: None,
            system: self.env.system.clone(),
            catalogue,
            roles: self.env.roles.clone(),
            permissions: self.permissions.clone(),
            account: self.account.clone(),
            approver,
            provider_name: self.env.provider.name().to_string(),
            model: self.env.provider.model().to_string(),
            price: self.env.price,
            capture: self.env.capture,
            transcript,
            token: self.account.root().child_token(),
            // The main agent's span is the root of the run's trace.
            parent_span: tracing::Span::none(),
            context: ContextSetup {
                window: self.env.context_window,
                ledger: self.stored_ledger(),
                work_ahead: self.env.work_ahead,
                resumed,
                compact_only: job == RunJob::Compact,
            },
            hooks: self.env.hooks.clone(),
        });
        let args = AgentArgs {
            machine,
            env: self.env.clone(),
            provider: self.env.provider.clone(),
            events: self.events.clone(),
            run: myself.clone(),
            root_session: self.session_id.clone(),
            report: Report::Run,
            slot: SlotHolder::default(),
            catalogue_key: Some(crate::env::CatalogueKey::main()),
        };
        Actor::spawn_linked(None, AgentActor, args, myself.get_cell())
            .await
            .map(|(agent, _)| agent)
            .map_err(|err| err.to_string())
    }

    fn on_internal(&mut self, myself: &ActorRef<RunMsg>, internal: RunInternal) {
        match internal {
            // Handled in `handle`, which awaits the store.
            RunInternal::Gated(_) => {}
            RunInternal::AgentStarted { path, agent, token } => {
                self.agents.insert(path, TreeAgent { agent, token });
            }
            RunInternal::AgentEnded { path } => {
                self.agents.remove(&path);
            }
            RunInternal::ApprovalOpened { approval_id, agent } => {
                self.broker.insert(approval_id, agent);
            }
            RunInternal::QuestionOpened { approval_id, reply } => {
                self.questions.insert(approval_id, reply);
            }
            RunInternal::ApprovalsClosed { approval_ids } => {
                for id in approval_ids {
                    self.broker.remove(&id);
                    self.questions.remove(&id);
                }
            }
            RunInternal::MainFinished {
                outcome,
                transcript,
            } => {
                let session = SessionState {
                    transcript,
                    last_active: Some(Utc::now()),
                    rules: self.permissions.session_rules(),
                };
                self.end(myself, outcome, Some(session));
            }
            RunInternal::EndRecorded {
                outcome,
                session,
                recorded,
            } => self.finish(myself, outcome, session, recorded),
            RunInternal::WallClock => {
                if self.ended {
                    return;
                }
                let hit = LimitHit::WallClock {
                    limit: self.account.budget().wall_clock,
                };
                if self.account.stop_cause().is_none() {
                    self.events.emit(EventKind::notice(hit.notice()));
                }
                self.account.stop(StopCause::Limit(hit));
            }
        }
    }

    /// Runs the hooks at the door in a task; their verdict comes back as
    /// [`RunInternal::Gated`]. They run before anything of the prompt is
    /// stored: a blocked prompt never enters the history.
    fn gate_at_door(&self, myself: &ActorRef<RunMsg>, door: &Door) {
        let (env, session_id, run_id) = (
            self.env.clone(),
            self.session_id.clone(),
            self.run_id.clone(),
        );
        let check = door.check.clone();
        let run = myself.clone();
        tokio::spawn(async move {
            let gate = door_gate(&env, &session_id, &run_id, &check).await;
            let _ = run.cast(RunMsg::internal(RunInternal::Gated(gate)));
        });
    }

    /// Starts the opened run's main agent, or ends a run whose prompt a hook
    /// blocked. The main agent is linked once this actor runs (it
    /// supervises it).
    async fn launch(&mut self, myself: &ActorRef<RunMsg>) {
        if let Some((outcome, session)) = self.blocked.take() {
            self.end(myself, outcome, Some(session));
            return;
        }
        let Some(start) = self.start.take() else {
            return;
        };
        match self.spawn_main(myself, start).await {
            Ok(main) => self.main = Some(main),
            Err(err) => self.end(
                myself,
                RunOutcome {
                    status: RunStatus::Error,
                    stop_reason: "agent_failed".into(),
                    final_text: format!("the agent could not start: {err}"),
                    usage: Usage::default(),
                },
                None,
            ),
        }
    }

    /// Opens the run once the hooks at its door gave `gate`: the run record
    /// and the prompt are made durable before anyone is told the run
    /// started. Leaves the main agent's start in `start`, a blocked prompt's
    /// outcome in `blocked`, or ends the run when the store fails.
    async fn open_with(
        &mut self,
        myself: &ActorRef<RunMsg>,
        door: Door,
        gate: troupe_hooks::HookVerdict,
    ) {
        let mut session = door.session;
        let resumed = !session.transcript.is_empty();
        let prompt = match &gate.blocked {
            Some(_) => BLOCKED_PROMPT.to_owned(),
            None => door.check.prompt.clone(),
        };
        // Durable before visible: the run record and the prompt are on disk
        // before anyone is told the run started, let alone the model.
        let now = Utc::now();
        let record = self.record(prompt.clone(), door.started);
        if let Some(reason) = gate.blocked.clone() {
            if let Err(err) = self.env.store.put_run(&record) {
                tracing::error!(run = %self.run_id, %err, "the run could not be recorded");
            }
            self.events.emit(EventKind::RunStarted { prompt });
            for report in &gate.reports {
                self.events.emit(report.event_kind());
            }
            let text = crate::hook_gate::blocked_text(&reason);
            self.events.emit(EventKind::Error {
                kind: "hook_blocked".into(),
                message: text.clone(),
            });
            let outcome = RunOutcome {
                status: RunStatus::Stopped,
                stop_reason: "hook_blocked".into(),
                final_text: text,
                usage: Usage::default(),
            };
            self.blocked = Some((outcome, session));
            return;
        }
        if door.check.job == RunJob::Prompt {
            let pause = session
                .last_active
                .and_then(|last| (now - last).to_std().ok())
                .and_then(pause_note);
            let note = join_notes(pause, gate.prompt_note());
            session
                .transcript
                .push(user_message(&door.check.prompt, note));
        }
        // Written here, made durable on the store's writer thread: no worker
        // waits for the disk.
        let written = self.env.store.put_run(&record).and_then(|()| {
            session
                .transcript
                .save(&self.env.store, &self.session_id, false)
        });
        let started = match written {
            Ok(()) => self.env.store.commit_and_wait(|_| Ok(())).await,
            Err(err) => Err(err),
        };
        if let Err(err) = started {
            self.fail_start(myself, err, session.transcript);
            return;
        }
        self.events.emit(EventKind::RunStarted { prompt });
        for report in &gate.reports {
            self.events.emit(report.event_kind());
        }
        watch_wall_clock(myself, door.limits.wall_clock, door.check.root);
        self.start = Some(MainStart {
            limits: door.limits,
            approver: door.approver,
            transcript: session.transcript,
            resumed,
            job: door.check.job,
        });
    }

    /// The record of this run, running since `started`, with `prompt`.
    fn record(&self, prompt: String, started: chrono::DateTime<Utc>) -> RunRecord {
        RunRecord {
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            prompt,
            status: RunState::Running,
            stop_reason: None,
            started,
            ended: None,
            pid: std::process::id(),
        }
    }

    /// The record or the prompt could not be stored: the run ends before it began.
    fn fail_start(&mut self, myself: &ActorRef<RunMsg>, err: StoreError, transcript: Transcript) {
        tracing::error!(run = %self.run_id, %err, "the run could not be recorded");
        self.events.emit(EventKind::Error {
            kind: "store".into(),
            message: format!("the session could not be saved: {err}"),
        });
        let mut transcript = transcript;
        let text = "(The run stopped: its history could not be saved.)";
        transcript.close(text);
        self.end(
            myself,
            RunOutcome {
                status: RunStatus::Error,
                stop_reason: "store_error".into(),
                final_text: text.into(),
                usage: Usage::default(),
            },
            None,
        );
    }

    /// Ends the run once: everything below cancelled, the record's end
    /// written and made durable on the store's writer thread (no worker
    /// waits for the disk); [`RunInternal::EndRecorded`] then completes it
    /// ([`RunActorState::finish`]).
    fn end(
        &mut self,
        myself: &ActorRef<RunMsg>,
        mut outcome: RunOutcome,
        session: Option<SessionState>,
    ) {
        if self.ended {
            return;
        }
        self.ended = true;
        outcome.usage = self.account.tally().usage;
        // Nothing of the run outlives it (the watchdog, stragglers).
        self.account.root().cancel();
        let run_id = self.run_id.clone();
        let (status, stop_reason) = (outcome.status, outcome.stop_reason.clone());
        // Told once: when the write is durable, or when the disk has not
        // answered within CONFIRM_DEADLINE (a run must end even then).
        let ending = Arc::new(std::sync::Mutex::new(Some((outcome, session))));
        let deliver = {
            let run = myself.clone();
            move |recorded: Result<(), StoreError>| {
                let taken = ending.lock().ok().and_then(|mut ending| ending.take());
                if let Some((outcome, session)) = taken {
                    let _ = run.cast(RunMsg::internal(RunInternal::EndRecorded {
                        outcome,
                        session,
                        recorded,
                    }));
                }
            }
        };
        let overdue = deliver.clone();
        tokio::spawn(async move {
            tokio::time::sleep(troupe_store::CONFIRM_DEADLINE).await;
            overdue(Err(troupe_store::unconfirmed("the end of the run")));
        });
        self.env.store.commit(
            move |store| {
                let Some(mut record) = store.run(&run_id)? else {
                    return Ok(());
                };
                record.status = RunState::Ended(status);
                record.stop_reason = Some(stop_reason);
                record.ended = Some(Utc::now());
                store.put_run(&record)
            },
            deliver,
        );
    }

    /// Completes [`RunActorState::end`] once the record's end is durable (or
    /// could not be written): `run_finished` (the last event) with the whole
    /// tree's usage, the runtime told, the actor stopped.
    fn finish(
        &mut self,
        myself: &ActorRef<RunMsg>,
        mut outcome: RunOutcome,
        session: Option<SessionState>,
        recorded: Result<(), StoreError>,
    ) {
        if let Err(err) = recorded {
            tracing::error!(run = %self.run_id, %err, "could not record the end of the run");
            self.events.emit(EventKind::Error {
                kind: "store".into(),
                message: format!("the end of the run could not be saved: {err}"),
            });
            if outcome.status == RunStatus::Finished {
                outcome.status = RunStatus::Error;
                outcome.stop_reason = "store_error".into();
            }
        }
        self.events.emit(EventKind::RunFinished {
            status: outcome.status,
            stop_reason: outcome.stop_reason.clone(),
            final_text: outcome.final_text.clone(),
            usage_total: outcome.usage,
        });
        let _ = self.runtime.cast(RuntimeMsg::RunEnded {
            run_id: self.run_id.clone(),
            outcome,
            session,
        });
        myself.stop(None);
    }
}
