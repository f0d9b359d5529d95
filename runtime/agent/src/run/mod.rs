//! A run as a sans-IO state machine, like the agent loop it starts:
//! [`RunMachine::on`] takes one [`RunInput`] — something that happened to the
//! run — and returns the [`RunEffect`]s to carry out, in order. It holds what
//! the run decides and the bookkeeping those decisions read; it never awaits
//! and touches no store, clock, task or token. Time comes in as input values.
//!
//! What it decides:
//!
//! - **The door.** With hooks at the door (SessionStart, UserPromptSubmit)
//!   the run is recorded with its prompt withheld ([`CHECKED_PROMPT`]) while
//!   they check it. A prompt a hook blocked is recorded as [`BLOCKED_PROMPT`],
//!   never joins the history, and the run ends `stopped`/`hook_blocked` with
//!   the session as it was. A prompt that passed is recorded and joins the
//!   history (after the pause and hook notes) before `run_started`; the main
//!   agent starts once the interpreter runs and can supervise it.
//! - **The main agent's end.** Its outcome is the run's; its failure (a
//!   panic, or no start at all) ends the run `error`/`agent_failed`, and the
//!   session is read back from the store on its next run.
//! - **Stops.** A cancel or the wall-clock budget stops the whole tree
//!   through the run's account (the first cause wins; the wall clock's notice
//!   is told only when it is that first cause); one agent is cancelled by its
//!   path.
//! - **Approval routing.** Each open approval id routes its answer to the
//!   agent that opened it, or to the tool call waiting on a question; an id
//!   nobody waits for (never opened, closed, or a question already answered)
//!   is refused.
//! - **The ending, once.** The tree is cancelled and the record's end
//!   written; once the store answered, `run_finished` (the last event, with
//!   the whole tree's usage) and the session goes back to the runtime. When
//!   the end could not be recorded the store error is told and a finished
//!   run is downgraded to `error`/`store_error`.
//!
//! The interpreter (`troupe-actors`' run actor) keeps the I/O handles — the
//! agents' actor references and tokens by path, the questions' answer
//! channels by approval id — and carries out effects, feeding back the
//! inputs they produce ([`RunInput::Opened`], [`RunInput::MainSpawned`],
//! [`RunInput::EndRecorded`]).

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use troupe_hooks::HookVerdict;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunStatus};
use troupe_protocol::model::{Message, Usage};

use crate::resume::{pause_note, user_message};
use crate::{LimitHit, RunOutcome, StopCause};
use troupe_store::PendingRewind;

/// The prompt recorded for a run while its hooks at the door check it.
pub const CHECKED_PROMPT: &str = "(withheld: being checked by the hooks at the door)";

/// The prompt recorded for a run whose prompt a hook blocked.
pub const BLOCKED_PROMPT: &str = "(withheld: blocked by a UserPromptSubmit hook)";

/// The message a run ends with when a hook blocked its prompt.
pub fn blocked_text(reason: &str) -> String {
    format!("A UserPromptSubmit hook blocked the prompt: {reason}")
}

/// Two optional notes as one, blank-line separated.
pub fn join_notes(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
        (a, b) => a.or(b),
    }
}

/// What a run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunJob {
    /// The prompt joins the history and the main agent works on it.
    Prompt,
    /// The main agent only compacts the session's history (manual
    /// compaction): no prompt joins it, no model turn is taken.
    Compact,
}

/// What a run starts from.
#[derive(Debug, Clone)]
pub struct RunSetup {
    /// The prompt as submitted.
    pub prompt: String,
    /// What the run is for.
    pub job: RunJob,
    /// When the session was last active (for the pause note).
    pub last_active: Option<DateTime<Utc>>,
    /// The run's wall-clock budget.
    pub wall_clock: Duration,
    /// A rewind of the conversation the prompt tells the model of (its note
    /// goes first in the prompt's message; `rewound` follows `run_started`).
    pub rewind: Option<PendingRewind>,
}

/// Something that happened to the run.
#[derive(Debug)]
pub enum RunInput {
    /// The run was submitted: `door_hooks` says whether hooks at its door
    /// (SessionStart, UserPromptSubmit) check the prompt first; `now` is the
    /// time (for the pause note of a run that opens at once).
    Submitted {
        /// Hooks at the door check the prompt before the run opens.
        door_hooks: bool,
        /// The time now.
        now: DateTime<Utc>,
    },
    /// The interpreter runs and can supervise the main agent: the hooks at
    /// the door may start, the main agent may be spawned.
    Running,
    /// The hooks at the door answered ([`RunEffect::CheckDoor`]).
    DoorChecked {
        /// What they decided.
        verdict: HookVerdict,
        /// The time now (for the pause note).
        now: DateTime<Utc>,
    },
    /// The run record and the prompt of a [`RunEffect::OpenRun`] are durable,
    /// or could not be stored.
    Opened(Result<(), String>),
    /// The main agent of a [`RunEffect::SpawnMain`] started, or could not.
    MainSpawned(Result<(), String>),
    /// The main agent's loop is over.
    MainFinished(RunOutcome),
    /// The main agent failed (panicked).
    MainFailed {
        /// Why.
        error: String,
    },
    /// An agent of the tree started.
    AgentStarted {
        /// Its path (`main`, `main/explorer-1`).
        path: String,
    },
    /// An agent of the tree ended.
    AgentEnded {
        /// Its path.
        path: String,
    },
    /// The agent at `path` waits for the answer to `approval_id`.
    ApprovalOpened {
        /// The approval id.
        approval_id: String,
        /// The agent that asked.
        path: String,
    },
    /// A tool call waits for the answer to the question `approval_id`.
    QuestionOpened {
        /// The approval id.
        approval_id: String,
    },
    /// Approval requests that no longer wait.
    ApprovalsClosed {
        /// Their ids.
        approval_ids: Vec<String>,
    },
    /// Someone answered approval `approval_id`.
    ApproveRequested {
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with it.
        reason: Option<String>,
    },
    /// Someone asked to cancel the whole run.
    CancelRequested,
    /// Someone asked to cancel one agent (and what runs below it).
    CancelAgentRequested {
        /// Its path.
        path: String,
    },
    /// The wall-clock budget is used up.
    WallClockOver {
        /// The tree was already stopped (the account has a stop cause).
        tree_stopped: bool,
    },
    /// The record's end of a [`RunEffect::WriteEnd`] is durable, or could not
    /// be written (or the store did not answer in time).
    EndRecorded {
        /// Whether it is durable.
        recorded: Result<(), String>,
        /// The whole tree's usage when the end was written.
        usage: Usage,
    },
}

/// Why a request to the run is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRefusal {
    /// No agent of the tree has this path.
    UnknownAgent(String),
    /// Nobody waits for an answer to this approval id.
    UnknownApproval(String),
    /// The agent that asked is gone.
    Gone,
}

/// Which session a run hands back to the runtime when it finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionBack {
    /// The session as submitted (a blocked prompt never joined it).
    Unchanged,
    /// The main agent's history as it left it.
    LeftByMain,
    /// None: the runtime reads the session back from the store (and repairs
    /// it there) on its next run.
    FromStore,
}

/// Something the interpreter must do, in order.
#[derive(Debug, PartialEq)]
pub enum RunEffect {
    /// Write the run record with `prompt` (best effort; no answer).
    RecordRun {
        /// The prompt as recorded.
        prompt: String,
    },
    /// Run the hooks at the door on the prompt (in a task); answer with
    /// [`RunInput::DoorChecked`].
    CheckDoor,
    /// Add `message` (when there is one) to the session's history, write the
    /// run record with `prompt` and the history, and make both durable;
    /// answer with [`RunInput::Opened`].
    OpenRun {
        /// The prompt as recorded.
        prompt: String,
        /// The user message that joins the history (none for a compaction).
        message: Option<Message>,
    },
    /// Emit an event under the main agent's path.
    Emit(EventKind),
    /// Feed [`RunInput::WallClockOver`] after `after`, unless the run ends
    /// first.
    ArmWallClock {
        /// The wall-clock budget.
        after: Duration,
    },
    /// Spawn the main agent on the opened session; answer with
    /// [`RunInput::MainSpawned`].
    SpawnMain,
    /// Stop the whole tree through the run's account (`RunAccount::stop`:
    /// the first cause wins, the root token is cancelled).
    StopTree(StopCause),
    /// Cancel the run's root token: nothing of the run outlives it.
    CancelTree,
    /// Cancel the token of the agent at `path`; the request succeeded.
    CancelAgent {
        /// Its path.
        path: String,
    },
    /// Hand the answer to the agent at `path`; the request succeeded unless
    /// the agent cannot be reached ([`RunRefusal::Gone`]).
    DeliverApproval {
        /// The agent that asked.
        path: String,
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with it.
        reason: Option<String>,
    },
    /// Hand the answer to the tool call waiting on question `approval_id`;
    /// the request succeeded unless it no longer waits
    /// ([`RunRefusal::UnknownApproval`]).
    AnswerQuestion {
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with it.
        reason: Option<String>,
    },
    /// Refuse the request.
    Refuse(RunRefusal),
    /// Write the record's end and make it durable, taking the whole tree's
    /// usage now; answer with [`RunInput::EndRecorded`] (within the store's
    /// confirmation deadline).
    WriteEnd {
        /// How the run ended.
        status: RunStatus,
        /// Why.
        stop_reason: String,
    },
    /// The session is free for its next run: hand it back to the runtime.
    /// Comes before `run_finished` is emitted, so a client that acts on that
    /// event finds the session free.
    FreeSession {
        /// The session handed back.
        session: SessionBack,
    },
    /// The run is over: tell the runtime (with `outcome`) and stop.
    Finish {
        /// How the run ended, with the whole tree's usage.
        outcome: RunOutcome,
    },
}

/// Where the run is at its door.
#[derive(Debug)]
enum Door {
    /// Not submitted yet.
    Waiting,
    /// The hooks at the door check the prompt.
    Checking,
    /// The record and the prompt are being made durable; the hooks' reports
    /// are told after `run_started`.
    Opening {
        /// The `hook` events of the door's verdict.
        reports: Vec<EventKind>,
    },
    /// Open: the main agent starts once the interpreter runs.
    Open,
    /// A hook blocked the prompt: the run ends once the interpreter runs.
    Blocked {
        /// The text it ends with.
        text: String,
    },
    /// Past the door: the main agent was spawned, or the run ended.
    Through,
}

/// Who waits for the answer to an approval id.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Waiting {
    /// The agent at this path.
    Agent(String),
    /// A tool call, on a question.
    Question,
}

/// One run's decisions: the door, its stops, approval routing and its
/// ending (see the module documentation).
#[derive(Debug)]
pub struct RunMachine {
    setup: RunSetup,
    /// Where the run is at its door.
    door: Door,
    /// The interpreter runs (it can supervise the main agent).
    running: bool,
    /// The tree's agents by path.
    agents: BTreeSet<String>,
    /// Who waits for each open approval id.
    broker: HashMap<String, Waiting>,
    /// The run is ending: nothing ends it again.
    ended: bool,
    /// The outcome and session of the ending, until its record is written.
    ending: Option<(RunOutcome, SessionBack)>,
}

impl RunMachine {
    /// A run about to be submitted.
    pub fn new(setup: RunSetup) -> Self {
        Self {
            setup,
            door: Door::Waiting,
            running: false,
            agents: BTreeSet::new(),
            broker: HashMap::new(),
            ended: false,
            ending: None,
        }
    }

    /// Whether the run is ending (or over).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The paths of the tree's registered agents, in order.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.agents.iter().map(String::as_str)
    }

    /// Handles one input; returns what to do, in order.
    pub fn on(&mut self, input: RunInput) -> Vec<RunEffect> {
        let mut out = Vec::new();
        match input {
            RunInput::Submitted { door_hooks, now } => self.submitted(door_hooks, now, &mut out),
            RunInput::Running => self.on_running(&mut out),
            RunInput::DoorChecked { verdict, now } => {
                if matches!(self.door, Door::Checking) {
                    self.open(&verdict, now, &mut out);
                }
            }
            RunInput::Opened(result) => self.on_opened(result, &mut out),
            RunInput::MainSpawned(Ok(())) => {}
            RunInput::MainSpawned(Err(error)) => self.end(
                RunOutcome {
                    status: RunStatus::Error,
                    stop_reason: "agent_failed".into(),
                    final_text: format!("the agent could not start: {error}"),
                    usage: Usage::default(),
                },
                SessionBack::FromStore,
                &mut out,
            ),
            RunInput::MainFinished(outcome) => {
                self.end(outcome, SessionBack::LeftByMain, &mut out);
            }
            RunInput::MainFailed { error } => {
                out.push(RunEffect::Emit(EventKind::Error {
                    kind: "agent_failed".into(),
                    message: format!("the agent failed: {error}"),
                }));
                self.end(
                    RunOutcome {
                        status: RunStatus::Error,
                        stop_reason: "agent_failed".into(),
                        final_text: String::new(),
                        usage: Usage::default(),
                    },
                    SessionBack::FromStore,
                    &mut out,
                );
            }
            RunInput::AgentStarted { path } => {
                self.agents.insert(path);
            }
            RunInput::AgentEnded { path } => {
                self.agents.remove(&path);
            }
            RunInput::ApprovalOpened { approval_id, path } => {
                self.broker.insert(approval_id, Waiting::Agent(path));
            }
            RunInput::QuestionOpened { approval_id } => {
                self.broker.insert(approval_id, Waiting::Question);
            }
            RunInput::ApprovalsClosed { approval_ids } => {
                for id in approval_ids {
                    self.broker.remove(&id);
                }
            }
            RunInput::ApproveRequested {
                approval_id,
                outcome,
                reason,
            } => out.push(self.route_approval(approval_id, outcome, reason)),
            RunInput::CancelRequested => out.push(RunEffect::StopTree(StopCause::Cancelled)),
            RunInput::CancelAgentRequested { path } => {
                out.push(if self.agents.contains(&path) {
                    RunEffect::CancelAgent { path }
                } else {
                    RunEffect::Refuse(RunRefusal::UnknownAgent(path))
                });
            }
            RunInput::WallClockOver { tree_stopped } => {
                self.wall_clock_over(tree_stopped, &mut out);
            }
            RunInput::EndRecorded { recorded, usage } => {
                self.end_recorded(recorded, usage, &mut out);
            }
        }
        out
    }

    fn submitted(&mut self, door_hooks: bool, now: DateTime<Utc>, out: &mut Vec<RunEffect>) {
        if !matches!(self.door, Door::Waiting) {
            return;
        }
        if door_hooks {
            // Known to the store at once, with no word of the prompt before
            // the hooks passed it.
            out.push(RunEffect::RecordRun {
                prompt: CHECKED_PROMPT.to_owned(),
            });
            self.door = Door::Checking;
            if self.running {
                out.push(RunEffect::CheckDoor);
            }
        } else {
            // No hook to ask: the run opens at once.
            self.open(&HookVerdict::default(), now, out);
        }
    }

    fn on_running(&mut self, out: &mut Vec<RunEffect>) {
        if self.running {
            return;
        }
        self.running = true;
        if matches!(self.door, Door::Checking) {
            out.push(RunEffect::CheckDoor);
        } else {
            self.launch(out);
        }
    }

    /// Opens the run on the door's `verdict`: a blocked prompt is recorded
    /// withheld and the run ends; a prompt that passed is recorded and joins
    /// the history, durable before anyone is told the run started.
    fn open(&mut self, verdict: &HookVerdict, now: DateTime<Utc>, out: &mut Vec<RunEffect>) {
        let reports = verdict.reports.iter().map(|report| report.event_kind());
        if let Some(reason) = &verdict.blocked {
            out.push(RunEffect::RecordRun {
                prompt: BLOCKED_PROMPT.to_owned(),
            });
            out.push(RunEffect::Emit(EventKind::RunStarted {
                prompt: BLOCKED_PROMPT.to_owned(),
            }));
            out.extend(reports.map(RunEffect::Emit));
            let text = blocked_text(reason);
            out.push(RunEffect::Emit(EventKind::Error {
                kind: "hook_blocked".into(),
                message: text.clone(),
            }));
            self.door = Door::Blocked { text };
            self.launch(out);
            return;
        }
        let message = (self.setup.job == RunJob::Prompt).then(|| {
            let pause = self
                .setup
                .last_active
                .and_then(|last| (now - last).to_std().ok())
                .and_then(pause_note);
            let rewind = self.setup.rewind.as_ref().map(|r| r.note.clone());
            let notes = join_notes(rewind, join_notes(pause, verdict.prompt_note()));
            user_message(&self.setup.prompt, notes)
        });
        out.push(RunEffect::OpenRun {
            prompt: self.setup.prompt.clone(),
            message,
        });
        self.door = Door::Opening {
            reports: reports.collect(),
        };
    }

    /// The `rewound` event of the rewind the opened prompt told, if it told
    /// one (only a prompt run's message carries the note).
    fn rewind_told(&self) -> Option<EventKind> {
        let rewind = self.setup.rewind.as_ref()?;
        (self.setup.job == RunJob::Prompt).then(|| EventKind::Rewound {
            to_run: rewind.to_run,
            branch: rewind.branch.clone(),
            removed_messages: rewind.removed_messages,
            files_restored: rewind.files_restored,
        })
    }

    fn on_opened(&mut self, result: Result<(), String>, out: &mut Vec<RunEffect>) {
        if !matches!(self.door, Door::Opening { .. }) {
            return;
        }
        let Door::Opening { reports } = std::mem::replace(&mut self.door, Door::Through) else {
            return;
        };
        match result {
            Ok(()) => {
                out.push(RunEffect::Emit(EventKind::RunStarted {
                    prompt: self.setup.prompt.clone(),
                }));
                if let Some(rewind) = self.rewind_told() {
                    out.push(RunEffect::Emit(rewind));
                }
                out.extend(reports.into_iter().map(RunEffect::Emit));
                out.push(RunEffect::ArmWallClock {
                    after: self.setup.wall_clock,
                });
                self.door = Door::Open;
                self.launch(out);
            }
            // The record or the prompt could not be stored: the run ends
            // before it began.
            Err(error) => {
                out.push(RunEffect::Emit(EventKind::Error {
                    kind: "store".into(),
                    message: format!("the session could not be saved: {error}"),
                }));
                self.end(
                    RunOutcome {
                        status: RunStatus::Error,
                        stop_reason: "store_error".into(),
                        final_text: "(The run stopped: its history could not be saved.)".into(),
                        usage: Usage::default(),
                    },
                    SessionBack::FromStore,
                    out,
                );
            }
        }
    }

    /// Once the interpreter runs: starts the opened run's main agent, or
    /// ends a run whose prompt a hook blocked.
    fn launch(&mut self, out: &mut Vec<RunEffect>) {
        if !self.running {
            return;
        }
        match std::mem::replace(&mut self.door, Door::Through) {
            Door::Open => out.push(RunEffect::SpawnMain),
            Door::Blocked { text } => self.end(
                RunOutcome {
                    status: RunStatus::Stopped,
                    stop_reason: "hook_blocked".into(),
                    final_text: text,
                    usage: Usage::default(),
                },
                SessionBack::Unchanged,
                out,
            ),
            other => self.door = other,
        }
    }

    fn route_approval(
        &mut self,
        approval_id: String,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> RunEffect {
        match self.broker.get(&approval_id).cloned() {
            // A question is answered once.
            Some(Waiting::Question) => {
                self.broker.remove(&approval_id);
                RunEffect::AnswerQuestion {
                    approval_id,
                    outcome,
                    reason,
                }
            }
            Some(Waiting::Agent(path)) if self.agents.contains(&path) => {
                RunEffect::DeliverApproval {
                    path,
                    approval_id,
                    outcome,
                    reason,
                }
            }
            Some(Waiting::Agent(_)) => RunEffect::Refuse(RunRefusal::Gone),
            None => RunEffect::Refuse(RunRefusal::UnknownApproval(approval_id)),
        }
    }

    fn wall_clock_over(&mut self, tree_stopped: bool, out: &mut Vec<RunEffect>) {
        if self.ended {
            return;
        }
        let hit = LimitHit::WallClock {
            limit: self.setup.wall_clock,
        };
        if !tree_stopped {
            out.push(RunEffect::Emit(EventKind::notice(hit.notice())));
        }
        out.push(RunEffect::StopTree(StopCause::Limit(hit)));
    }

    /// Ends the run once: everything below cancelled, the record's end
    /// written; [`RunInput::EndRecorded`] completes it.
    fn end(&mut self, outcome: RunOutcome, session: SessionBack, out: &mut Vec<RunEffect>) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.door = Door::Through;
        out.push(RunEffect::CancelTree);
        out.push(RunEffect::WriteEnd {
            status: outcome.status,
            stop_reason: outcome.stop_reason.clone(),
        });
        self.ending = Some((outcome, session));
    }

    /// Completes the ending once its record is durable (or could not be
    /// written): `run_finished`, the last event, then the finish.
    fn end_recorded(
        &mut self,
        recorded: Result<(), String>,
        usage: Usage,
        out: &mut Vec<RunEffect>,
    ) {
        let Some((mut outcome, session)) = self.ending.take() else {
            return;
        };
        outcome.usage = usage;
        if let Err(error) = recorded {
            out.push(RunEffect::Emit(EventKind::Error {
                kind: "store".into(),
                message: format!("the end of the run could not be saved: {error}"),
            }));
            if outcome.status == RunStatus::Finished {
                outcome.status = RunStatus::Error;
                outcome.stop_reason = "store_error".into();
            }
        }
        out.push(RunEffect::FreeSession { session });
        out.push(RunEffect::Emit(EventKind::RunFinished {
            status: outcome.status,
            stop_reason: outcome.stop_reason.clone(),
            final_text: outcome.final_text.clone(),
            usage_total: outcome.usage,
        }));
        out.push(RunEffect::Finish { outcome });
    }
}
