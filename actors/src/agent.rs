//! The agent actor: one per agent, an explicit state machine that runs the ReAct
//! loop of SPEC §3 (DESIGN.md principles 1–4, 8).
//!
//! The mailbox stays responsive: the model stream runs in a task that sends each
//! stream event back as a message, every tool call runs in its own
//! [`ToolExecutor`](crate::executor::ToolExecutor) linked to this actor, and
//! approvals arrive as messages — so `Cancel`, `Approve` and `Status` are
//! handled at once whatever the agent is doing. Every decision (execution plan,
//! stop conditions, history repair, permission) is a pure function of
//! `troupe-runtime`; the handlers only sequence them.
//!
//! Phases: idle → streaming → executing (with approvals pending inside) →
//! streaming … → idle; cancellation passes through "cancelling" while running
//! tools stop their processes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};
use troupe_runtime::agent::history::complete_results;
use troupe_runtime::agent::resume::{pause_note, user_message};
use troupe_runtime::agent::{
    AgentSpec, Budget, CANCELLED_RESULT, EMPTY_RESPONSE_PLACEHOLDER, ExecutionGroup, LimitHit,
    LoopGuard, RunTally, plan_execution,
};
use troupe_runtime::config::{Limits, PermissionMode, Price, RuleEntry, RuleSource};
use troupe_runtime::events::{ApprovalOutcome, EventKind, RunStatus, preview};
use troupe_runtime::llm::{
    ChatRequest, Provider, ProviderError, ResponseAccumulator, StreamEvent, SystemPrompt,
    ToolDefinition,
};
use troupe_runtime::model::{ContentBlock, Message, StopReason, ToolCall, ToolResult, Usage};
use troupe_runtime::permissions::{Decision, PermissionEngine, PermissionRequest};
use troupe_runtime::sandbox::PathSandbox;
use troupe_runtime::session::Transcript;
use troupe_runtime::store::{RunRecord, RunState, Store, StoreError};
use troupe_runtime::telemetry::genai::{self, ContentCapture, ToolErrorKind};
use troupe_runtime::telemetry::propagation::traceparent_of;
use troupe_runtime::tools::background::BackgroundTasks;
use troupe_runtime::tools::registry::ToolRegistry;
use troupe_runtime::tools::{Tool, ToolContext};

use crate::event_log::EventSink;
use crate::executor::{CLEANUP_GRACE, ExecutorArgs, ReportTo, ToolExecutor, ToolReport};

/// Everything an agent works with that does not change during a session.
pub struct AgentEnv {
    /// The model provider.
    pub provider: Arc<dyn Provider>,
    /// Prices for cost budgets, when known.
    pub price: Option<Price>,
    /// Every tool available to this agent.
    pub registry: Arc<ToolRegistry>,
    /// The path sandbox.
    pub sandbox: Arc<PathSandbox>,
    /// The system prompt (stable part fixed for the session).
    pub system: SystemPrompt,
    /// Where large outputs are spilled.
    pub spill_dir: PathBuf,
    /// Environment given to child processes.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Background shell tasks of the session.
    pub background: Arc<BackgroundTasks>,
    /// Default per-call timeout.
    pub tool_timeout: Duration,
    /// The durable store of sessions, runs and events.
    pub store: Store,
    /// Whether prompts, completions and tool arguments go on spans.
    pub capture: ContentCapture,
}

/// Whether someone can answer approval requests during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// A person answers through the front door (terminal, API, `troupe approve`).
    Present,
    /// Nobody can answer: an `ask` decision becomes a reasoned denial.
    Absent,
}

/// How a run ended, as reported to whoever started it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Status.
    pub status: RunStatus,
    /// Stop reason.
    pub stop_reason: String,
    /// Final answer text.
    pub final_text: String,
    /// Usage over the run.
    pub usage: Usage,
}

/// Starts one run (one user message) on an agent.
pub struct RunStart {
    /// Run id.
    pub run_id: String,
    /// The user's message.
    pub prompt: String,
    /// Where events go.
    pub events: EventSink,
    /// Limits of this run.
    pub limits: Limits,
    /// Who answers approvals.
    pub approver: Approver,
    /// Cancelled to cancel the run (children: turns, tools, streams).
    pub cancel: CancellationToken,
    /// Receives the outcome.
    pub done: oneshot::Sender<RunOutcome>,
    /// Parent of the run's `invoke_agent` span: `Span::none()` for a main
    /// agent (its span is the trace root), the spawning `execute_tool` span for
    /// a sub-agent.
    pub parent_span: Span,
}

/// A snapshot of what the agent is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatus {
    /// Agent path.
    pub path: String,
    /// Phase name: `idle`, `streaming`, `executing`, `awaiting_approval`, `cancelling`.
    pub phase: &'static str,
    /// Messages in history.
    pub history_len: usize,
    /// Turns taken in the current run.
    pub turns: u32,
    /// Approval ids waiting for an answer.
    pub pending_approvals: Vec<String>,
}

/// Messages of the agent actor.
pub enum AgentMsg {
    /// Start a run with a user message.
    Run(Box<RunStart>),
    /// One item from the model stream of turn `turn`.
    Model {
        /// Turn the stream belongs to.
        turn: u64,
        /// The item.
        item: Result<StreamEvent, ProviderError>,
    },
    /// The model stream of turn `turn` ended.
    ModelEnded {
        /// Turn the stream belonged to.
        turn: u64,
    },
    /// A tool call finished.
    ToolDone(ToolReport),
    /// An approval was answered.
    Approve {
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with a denial.
        reason: Option<String>,
    },
    /// Cancel the current run.
    Cancel,
    /// The wall-clock budget of run `0` is used up: stop what is running.
    Deadline(String),
    /// What the agent is doing.
    Status(RpcReplyPort<AgentStatus>),
    /// A copy of the history.
    History(RpcReplyPort<Vec<Message>>),
    /// Change the permission mode for later calls.
    SetMode(PermissionMode),
}

/// Arguments of a new agent.
pub struct AgentArgs {
    /// The session whose history this agent carries.
    pub session_id: String,
    /// Who the agent is.
    pub spec: AgentSpec,
    /// Its environment.
    pub env: Arc<AgentEnv>,
    /// Its permission engine (session rules accumulate in it).
    pub permissions: PermissionEngine,
    /// Initial permission mode.
    pub mode: PermissionMode,
    /// The history so far (empty for a new session).
    pub transcript: Transcript,
    /// When the session was last active (for the pause note).
    pub last_active: Option<chrono::DateTime<chrono::Utc>>,
}

/// The agent actor.
pub struct AgentActor;

/// State of one agent.
pub struct AgentState {
    session_id: String,
    spec: AgentSpec,
    env: Arc<AgentEnv>,
    permissions: PermissionEngine,
    mode: PermissionMode,
    transcript: Transcript,
    last_active: Option<chrono::DateTime<chrono::Utc>>,
    /// Results of the running turn were stored as pending results.
    pending_stored: bool,
    /// Increases with every model call and every execution, so late messages
    /// of an earlier turn are recognised and ignored.
    turn: u64,
    run: Option<ActiveRun>,
    /// Calls decided to run, waiting to get their executor spawned at the end of
    /// the current handler (spawning is async; decisions are not).
    launches: Vec<Launch>,
}

/// A call to start in its own executor.
struct Launch {
    turn: u64,
    index: usize,
    tool: Arc<dyn Tool>,
    args: Value,
    outside_read_approved: bool,
    span: Span,
}

/// A run in progress.
struct ActiveRun {
    run_id: String,
    events: EventSink,
    cancel: CancellationToken,
    guard: LoopGuard,
    budget: Budget,
    tally: RunTally,
    started: Instant,
    approver: Approver,
    done: Option<oneshot::Sender<RunOutcome>>,
    phase: Phase,
    /// `invoke_agent`: the run's span; every step's span is below it.
    span: Span,
}

enum Phase {
    /// Waiting for the next model call to start (transient).
    Between,
    /// A model stream is running.
    Streaming {
        acc: ResponseAccumulator,
        cancel: CancellationToken,
        /// `chat {model}` of this call.
        span: Span,
    },
    /// Tool calls of the last response are running.
    Executing(Execution),
    /// Cancelled; waiting for running tools to stop their processes.
    Cancelling {
        execution: Option<Execution>,
        outcome: RunOutcome,
        deadline: Instant,
    },
}

/// The execution of one response's tool calls.
struct Execution {
    calls: Vec<ToolCall>,
    results: Vec<Option<ToolResult>>,
    durations: Vec<u64>,
    groups: Vec<ExecutionGroup>,
    group: usize,
    /// Calls of the current group still waiting for a result.
    waiting: usize,
    approvals: HashMap<String, PendingApproval>,
    executors: HashMap<ActorId, usize>,
    cancel: CancellationToken,
    /// `execute_tool {tool}` of each call, from its decision to its result.
    spans: Vec<Option<Span>>,
}

impl Execution {
    /// Records call `index`'s result (once) and ends its span.
    fn settle(
        &mut self,
        index: usize,
        result: ToolResult,
        error: Option<ToolErrorKind>,
        capture: ContentCapture,
    ) -> bool {
        if self.results[index].is_some() {
            return false;
        }
        if let Some(span) = self.spans[index].take() {
            capture.record_tool_result(&span, &result);
            if let Some(kind) = error.or(result.is_error.then_some(ToolErrorKind::Failed)) {
                genai::record_tool_error(&span, kind);
            }
        }
        self.results[index] = Some(result);
        self.waiting = self.waiting.saturating_sub(1);
        true
    }
}

struct PendingApproval {
    index: usize,
    request: PermissionRequest,
    args: Value,
    /// The wait for the answer.
    span: Span,
}

/// What the permission step decided for one call, before anything runs.
enum Prepared {
    /// Run it.
    Run {
        tool: Arc<dyn Tool>,
        args: Value,
        outside_approved: bool,
    },
    /// Answer it at once with this error.
    Refuse(String, ToolErrorKind),
    /// Ask a person first.
    Ask {
        request: PermissionRequest,
        args: Value,
        reason: String,
    },
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        args.permissions.set_mode(args.mode);
        Ok(AgentState {
            session_id: args.session_id,
            spec: args.spec,
            env: args.env,
            permissions: args.permissions,
            mode: args.mode,
            transcript: args.transcript,
            last_active: args.last_active,
            pending_stored: false,
            turn: 0,
            run: None,
            launches: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::Run(start) => state.start_run(&myself, *start),
            AgentMsg::Model { turn, item } if turn == state.turn => {
                state.on_model_item(&myself, item)
            }
            AgentMsg::ModelEnded { turn } if turn == state.turn => state.on_model_end(&myself),
            AgentMsg::Model { .. } | AgentMsg::ModelEnded { .. } => {}
            AgentMsg::ToolDone(report) => state.on_tool_done(&myself, report),
            AgentMsg::Approve {
                approval_id,
                outcome,
                reason,
            } => state.on_approval(&myself, approval_id, outcome, reason),
            AgentMsg::Cancel => state.cancel_run(&myself),
            AgentMsg::Deadline(run_id) => state.on_deadline(&myself, &run_id),
            AgentMsg::Status(reply) => {
                let _ = reply.send(state.status());
            }
            AgentMsg::History(reply) => {
                let _ = reply.send(state.transcript.messages().to_vec());
            }
            AgentMsg::SetMode(mode) => {
                state.mode = mode;
                state.permissions.set_mode(mode);
            }
        }
        state.launch_pending(&myself).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a child stopped: a failed executor is one failed call.
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            state.on_executor_failed(&myself, &cell, err.to_string());
        }
        state.launch_pending(&myself).await;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(run) = &state.run {
            run.cancel.cancel();
        }
        Ok(())
    }
}

impl AgentState {
    fn status(&self) -> AgentStatus {
        let (phase, pending) = match self.run.as_ref().map(|run| &run.phase) {
            None => ("idle", Vec::new()),
            Some(Phase::Between) => ("streaming", Vec::new()),
            Some(Phase::Streaming { .. }) => ("streaming", Vec::new()),
            Some(Phase::Executing(execution)) if !execution.approvals.is_empty() => (
                "awaiting_approval",
                execution.approvals.keys().cloned().collect(),
            ),
            Some(Phase::Executing(_)) => ("executing", Vec::new()),
            Some(Phase::Cancelling { .. }) => ("cancelling", Vec::new()),
        };
        AgentStatus {
            path: self.spec.path.clone(),
            phase,
            history_len: self.transcript.len(),
            turns: self.run.as_ref().map(|run| run.guard.turns()).unwrap_or(0),
            pending_approvals: pending,
        }
    }

    fn start_run(&mut self, myself: &ActorRef<AgentMsg>, start: RunStart) {
        if self.run.is_some() {
            let _ = start.done.send(RunOutcome {
                status: RunStatus::Error,
                stop_reason: "busy".into(),
                final_text: format!("agent {} is already running", self.spec.path),
                usage: Usage::default(),
            });
            return;
        }
        let now = chrono::Utc::now();
        let note = self
            .last_active
            .and_then(|last| (now - last).to_std().ok())
            .and_then(pause_note);
        self.transcript.push(user_message(&start.prompt, note));
        self.last_active = Some(now);
        let record = RunRecord {
            run_id: start.run_id.clone(),
            session_id: self.session_id.clone(),
            prompt: start.prompt.clone(),
            status: RunState::Running,
            stop_reason: None,
            started: now,
            ended: None,
            pid: std::process::id(),
        };
        let max_turns = start.limits.max_turns.min(self.spec.max_turns);
        let span = genai::agent_span(
            &start.parent_span,
            &start.run_id,
            &self.spec.path,
            &self.session_id,
        );
        self.run = Some(ActiveRun {
            span,
            run_id: start.run_id,
            events: start.events,
            cancel: start.cancel,
            guard: LoopGuard::new(max_turns, self.spec.unknown_tool_limit),
            budget: Budget::from_limits(&start.limits, self.env.price.is_some()),
            tally: RunTally::default(),
            started: Instant::now(),
            approver: start.approver,
            done: Some(start.done),
            phase: Phase::Between,
        });
        let agent = myself.clone();
        let deadline = start.limits.wall_clock;
        let run_id = self
            .run
            .as_ref()
            .map(|run| run.run_id.clone())
            .unwrap_or_default();
        let cancel = self
            .run
            .as_ref()
            .map(|run| run.cancel.clone())
            .unwrap_or_default();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(deadline) => {
                    let _ = agent.cast(AgentMsg::Deadline(run_id));
                }
                _ = cancel.cancelled() => {}
            }
        });
        // Durable before visible: the run record and the prompt are on disk
        // before anyone is told the run started, let alone the model.
        if let Err(err) = self
            .env
            .store
            .put_run(&record)
            .and_then(|()| self.persist(true))
        {
            self.fail_store(err);
            return;
        }
        if let Some(run) = self.run.as_ref() {
            run.events.emit(EventKind::RunStarted {
                prompt: record.prompt.clone(),
            });
        }
        self.next_model_call(myself);
    }

    /// Writes what the store lacks of the history; with `flush`, durably.
    fn persist(&mut self, flush: bool) -> Result<(), StoreError> {
        self.transcript
            .save(&self.env.store, &self.session_id, flush)?;
        if flush && self.pending_stored {
            // The tool message holding them is durable now.
            self.env.store.clear_pending_results(&self.session_id)?;
            self.pending_stored = false;
        }
        Ok(())
    }

    /// The store refused a write: say so and end the run rather than go on
    /// with work that would not survive (SPEC §9).
    fn fail_store(&mut self, err: StoreError) {
        tracing::error!(session = %self.session_id, %err, "store write failed");
        if let Some(run) = self.run.as_ref() {
            run.events.emit(EventKind::Error {
                kind: "store".into(),
                message: format!("the session could not be saved: {err}"),
            });
        }
        let text = "(The run stopped: its history could not be saved.)";
        self.transcript.close(text);
        self.finish(RunOutcome {
            status: RunStatus::Error,
            stop_reason: "store_error".into(),
            final_text: text.into(),
            usage: Usage::default(),
        });
    }

    /// Checks limits and starts one model call.
    fn next_model_call(&mut self, myself: &ActorRef<AgentMsg>) {
        let Some(run) = self.run.as_mut() else { return };
        if run.cancel.is_cancelled() {
            self.cancel_run(myself);
            return;
        }
        // Durable before visible: everything the model is about to see.
        if let Err(err) = self.persist(true) {
            self.fail_store(err);
            return;
        }
        let Some(run) = self.run.as_mut() else { return };
        if let Some(hit) = run.budget.check(&run.tally, run.started.elapsed()) {
            self.stop_on_limit(hit);
            return;
        }
        let n = match run.guard.begin_turn() {
            Ok(n) => n,
            Err(hit) => {
                self.stop_on_limit(hit);
                return;
            }
        };
        run.events.emit(EventKind::Iteration { n });
        self.turn += 1;
        let turn = self.turn;
        let request = ChatRequest {
            system: self.env.system.clone(),
            messages: self.transcript.messages().to_vec(),
            tools: self.offered_tools(),
        };
        let stream = self.env.provider.stream(&request);
        let Some(run) = self.run.as_mut() else { return };
        let span = genai::chat_span(
            &run.span,
            self.env.provider.name(),
            self.env.provider.model(),
            &self.session_id,
        );
        let capture = self.env.capture;
        if capture.is_enabled() {
            let system = format!(
                "{}\n\n{}",
                request.system.stable, request.system.environment
            );
            capture.record_system_instructions(&span, &system);
            capture.record_input_messages(&span, &request.messages);
        }
        let cancel = run.cancel.child_token();
        run.phase = Phase::Streaming {
            acc: ResponseAccumulator::new(),
            cancel: cancel.clone(),
            span: span.clone(),
        };
        let agent = myself.clone();
        // The stream is polled inside the `chat` span (its logs carry the
        // trace), but messages are sent outside it, and the task lets go of
        // the span before the last one: the span ends with the call, not
        // whenever this task happens to be dropped.
        let stream_task = async move {
            let mut stream = stream;
            loop {
                let item = tokio::select! {
                    // Dropping the stream aborts the HTTP request.
                    _ = cancel.cancelled() => return,
                    item = stream.next().instrument(span.clone()) => item,
                };
                match item {
                    Some(Ok(event)) => {
                        if agent
                            .cast(AgentMsg::Model {
                                turn,
                                item: Ok(event),
                            })
                            .is_err()
                        {
                            return;
                        }
                    }
                    Some(Err(err)) => {
                        drop(span);
                        let _ = agent.cast(AgentMsg::Model {
                            turn,
                            item: Err(err),
                        });
                        return;
                    }
                    None => {
                        drop(span);
                        let _ = agent.cast(AgentMsg::ModelEnded { turn });
                        return;
                    }
                }
            }
        };
        tokio::spawn(stream_task);
    }

    /// Tool definitions offered in this mode, in stable order.
    fn offered_tools(&self) -> Vec<ToolDefinition> {
        let registry = &self.env.registry;
        registry
            .definitions()
            .into_iter()
            .filter(|def| {
                let read_only = registry.is_read_only(&def.name);
                troupe_runtime::permissions::offered_in_mode(self.mode, read_only)
                    && self.allowed_by_spec(&def.name)
            })
            .collect()
    }

    fn allowed_by_spec(&self, name: &str) -> bool {
        match &self.spec.tool_allowlist {
            None => true,
            Some(allow) => {
                allow.iter().any(|allowed| allowed == name)
                    || self
                        .env
                        .registry
                        .get(name)
                        .is_some_and(|tool| tool.is_system())
            }
        }
    }

    fn on_model_item(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        item: Result<StreamEvent, ProviderError>,
    ) {
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Streaming { acc, .. } = &mut run.phase else {
            return;
        };
        match item {
            Ok(event) => {
                match &event {
                    StreamEvent::TextDelta(text) if !text.is_empty() => {
                        run.events.emit(EventKind::TextDelta { text: text.clone() })
                    }
                    StreamEvent::ThinkingDelta(text) if !text.is_empty() => run
                        .events
                        .emit(EventKind::ThinkingDelta { text: text.clone() }),
                    _ => {}
                }
                acc.push(&event);
            }
            Err(err) => self.on_model_error(myself, err),
        }
    }

    /// A failed model call: keep what was delivered, close the history, end the run.
    fn on_model_error(&mut self, _myself: &ActorRef<AgentMsg>, err: ProviderError) {
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Streaming { acc, span, .. } = std::mem::replace(&mut run.phase, Phase::Between)
        else {
            return;
        };
        let usage = acc.usage();
        genai::record_usage(&span, &usage);
        genai::record_chat_error(&span, err.kind);
        drop(span);
        run.tally.add_usage(&usage, self.env.price.as_ref());
        run.events.emit(EventKind::Error {
            kind: err.kind.as_str().to_string(),
            message: err.to_string(),
        });
        let partial = acc.into_message();
        let closing = format!("(The model request failed: {}.)", err.message);
        self.keep_partial_response(partial, "(not run: the model response was cut off)");
        self.transcript.close(&closing);
        self.finish(RunOutcome {
            status: RunStatus::Error,
            stop_reason: "provider_error".into(),
            final_text: closing,
            usage: Usage::default(),
        });
    }

    /// Keeps a partial response in history; calls it contains are answered with
    /// `unrun_text` so the history stays valid.
    fn keep_partial_response(&mut self, partial: Message, unrun_text: &str) {
        if partial.content.is_empty() {
            return;
        }
        let calls: Vec<ToolCall> = partial.tool_calls().cloned().collect();
        self.transcript.push(partial);
        if !calls.is_empty() {
            let results = complete_results(&calls, Vec::new(), unrun_text);
            self.transcript.push(Message::tool_results(results));
        }
    }

    fn on_model_end(&mut self, myself: &ActorRef<AgentMsg>) {
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Streaming { acc, span, .. } = std::mem::replace(&mut run.phase, Phase::Between)
        else {
            return;
        };
        let usage = acc.usage();
        let reason = acc.stop_reason().cloned().unwrap_or(StopReason::EndTurn);
        genai::record_usage(&span, &usage);
        genai::record_response(&span, self.env.provider.model(), None);
        genai::record_finish(&span, &reason);
        run.tally.add_usage(&usage, self.env.price.as_ref());
        run.events.emit(EventKind::usage(&usage));
        let mut message = acc.into_message();
        if message.content.is_empty() {
            message.content.push(ContentBlock::Text {
                text: EMPTY_RESPONSE_PLACEHOLDER.to_string(),
            });
        }
        self.env
            .capture
            .record_output_message(&span, &message, &reason);
        drop(span);
        let calls: Vec<ToolCall> = message.tool_calls().cloned().collect();
        let text = message.text();
        self.transcript.push(message);
        if calls.is_empty() {
            self.finish(RunOutcome {
                status: RunStatus::Finished,
                stop_reason: "end_turn".into(),
                final_text: text,
                usage: Usage::default(),
            });
            return;
        }
        let registry = self.env.registry.clone();
        let known = |name: &str| registry.get(name).is_some();
        if let Some(hit) = run.guard.observe_calls(&calls, known) {
            let notice = hit.notice();
            let results = complete_results(&calls, Vec::new(), &format!("Not run. {notice}"));
            self.transcript.push(Message::tool_results(results));
            self.stop_on_limit(hit);
            return;
        }
        // The calls are durable before any of them runs: a crash during
        // execution leaves them answered "interrupted", never re-run.
        if let Err(err) = self.persist(true) {
            self.fail_store(err);
            return;
        }
        self.start_execution(myself, calls);
    }

    fn start_execution(&mut self, myself: &ActorRef<AgentMsg>, calls: Vec<ToolCall>) {
        let Some(run) = self.run.as_mut() else { return };
        self.turn += 1;
        let read_only: Vec<bool> = calls
            .iter()
            .map(|call| self.env.registry.is_read_only(&call.name))
            .collect();
        let count = calls.len();
        run.phase = Phase::Executing(Execution {
            groups: plan_execution(&read_only),
            calls,
            results: vec![None; count],
            durations: vec![0; count],
            group: 0,
            waiting: 0,
            approvals: HashMap::new(),
            executors: HashMap::new(),
            cancel: run.cancel.child_token(),
            spans: vec![None; count],
        });
        self.start_group(myself);
    }

    /// Starts the current group: decide every call, emit the start events in
    /// order, then launch the allowed calls and ask for the others.
    fn start_group(&mut self, myself: &ActorRef<AgentMsg>) {
        let prepared: Vec<(usize, Prepared, Option<Decision>)> = {
            let Some(run) = self.run.as_ref() else { return };
            let Phase::Executing(execution) = &run.phase else {
                return;
            };
            let group = execution.groups[execution.group];
            group
                .indices()
                .map(|index| {
                    let (prepared, decision) = self.prepare(&execution.calls[index], run.approver);
                    (index, prepared, decision)
                })
                .collect()
        };
        let turn = self.turn;
        let capture = self.env.capture;
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Executing(execution) = &mut run.phase else {
            return;
        };
        for (index, _, decision) in &prepared {
            let call = &execution.calls[*index];
            let span = genai::tool_span(&run.span, &call.name, &call.id);
            if let Some(decision) = decision {
                genai::permission_event(&span, decision);
            }
            capture.record_tool_arguments(&span, &call.input);
            execution.spans[*index] = Some(span);
            run.events.emit(EventKind::ToolStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                args_preview: preview(&call.input),
            });
        }
        run.tally.tool_calls += prepared.len() as u32;
        execution.waiting = prepared.len();
        for (index, prep, _) in prepared {
            match prep {
                Prepared::Refuse(text, kind) => {
                    let result = ToolResult::text(execution.calls[index].id.clone(), text, true);
                    execution.settle(index, result, Some(kind), capture);
                }
                Prepared::Run {
                    tool,
                    args,
                    outside_approved,
                } => self.launches.push(Launch {
                    turn,
                    index,
                    tool,
                    args,
                    outside_read_approved: outside_approved,
                    span: execution.spans[index].clone().unwrap_or_else(Span::none),
                }),
                Prepared::Ask {
                    request,
                    args,
                    reason,
                } => {
                    let call = &execution.calls[index];
                    let approval_id = format!("{}-{}", run.run_id, call.id);
                    let span = genai::approval_span(
                        execution.spans[index].as_ref().unwrap_or(&Span::none()),
                        &call.name,
                        &call.id,
                        &approval_id,
                    );
                    run.events.emit(EventKind::ApprovalRequested {
                        approval_id: approval_id.clone(),
                        tool: call.name.clone(),
                        args: call.input.clone(),
                        reason,
                    });
                    execution.approvals.insert(
                        approval_id,
                        PendingApproval {
                            index,
                            request,
                            args,
                            span,
                        },
                    );
                }
            }
        }
        self.maybe_finish_group(myself);
    }

    /// The permission step for one call (pure decisions from the runtime),
    /// with the permission decision when one was made.
    fn prepare(&self, call: &ToolCall, approver: Approver) -> (Prepared, Option<Decision>) {
        let Some(tool) = self.env.registry.get(&call.name).cloned() else {
            let text = format!(
                "Unknown tool \"{}\". Available tools: {}.",
                call.name,
                self.offered_tools()
                    .iter()
                    .map(|def| def.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return (Prepared::Refuse(text, ToolErrorKind::UnknownTool), None);
        };
        if !self.allowed_by_spec(&call.name) {
            let text = format!(
                "Tool \"{}\" is not available to the {} role.",
                call.name, self.spec.role
            );
            return (Prepared::Refuse(text, ToolErrorKind::Denied), None);
        }
        let args = match self.env.registry.validate(&call.name, &call.input) {
            Ok(args) => args,
            Err(message) => {
                return (
                    Prepared::Refuse(message, ToolErrorKind::InvalidArguments),
                    None,
                );
            }
        };
        let request = PermissionRequest {
            tool_name: call.name.clone(),
            category: tool.category(),
            read_only: tool.read_only(),
            subject: tool.permission_subject(&args),
        };
        let decision = self.permissions.decide(&request);
        let prepared = match &decision {
            Decision::Allow { .. } => Prepared::Run {
                tool,
                args,
                outside_approved: false,
            },
            Decision::Deny { reason } => Prepared::Refuse(
                format!("Permission denied: {reason}"),
                ToolErrorKind::Denied,
            ),
            Decision::Ask { reason } => match approver {
                Approver::Present => Prepared::Ask {
                    request,
                    args,
                    reason: reason.clone(),
                },
                Approver::Absent => Prepared::Refuse(
                    format!(
                        "Permission denied: this call needs approval ({reason}) and nobody can \
                         answer in this run. The user can rerun with --mode accept-edits or \
                         --mode bypass, or add an allow rule."
                    ),
                    ToolErrorKind::Denied,
                ),
            },
        };
        (prepared, Some(decision))
    }

    fn on_tool_done(&mut self, myself: &ActorRef<AgentMsg>, report: ToolReport) {
        if report.turn != self.turn {
            return;
        }
        let Some(run) = self.run.as_mut() else { return };
        let execution = match &mut run.phase {
            Phase::Executing(execution) => execution,
            Phase::Cancelling {
                execution: Some(execution),
                ..
            } => execution,
            _ => return,
        };
        execution
            .executors
            .retain(|_, index| *index != report.index);
        let id = execution.calls[report.index].id.clone();
        let result = report.output.into_result(id);
        let stored = execution
            .settle(report.index, result.clone(), report.error, self.env.capture)
            .then_some(result);
        if stored.is_some() {
            execution.durations[report.index] = report.duration.as_millis() as u64;
        }
        // A finished call's work is durable at once, not only with its turn.
        if let Some(result) = stored
            && let Err(err) = self.store_pending(&result)
        {
            self.fail_store(err);
            return;
        }
        self.maybe_finish_group(myself);
    }

    /// Stores one finished call's result before its turn's tool message exists.
    fn store_pending(&mut self, result: &ToolResult) -> Result<(), StoreError> {
        self.env
            .store
            .put_pending_result(&self.session_id, result)?;
        self.env.store.flush()?;
        self.pending_stored = true;
        Ok(())
    }

    fn on_executor_failed(&mut self, myself: &ActorRef<AgentMsg>, cell: &ActorCell, panic: String) {
        let Some(run) = self.run.as_mut() else { return };
        let execution = match &mut run.phase {
            Phase::Executing(execution) => execution,
            Phase::Cancelling {
                execution: Some(execution),
                ..
            } => execution,
            _ => return,
        };
        let Some(index) = execution.executors.remove(&cell.get_id()) else {
            return;
        };
        tracing::warn!(tool = %execution.calls[index].name, %panic, "tool panicked");
        let id = execution.calls[index].id.clone();
        let result = ToolResult::text(id, format!("tool panicked: {panic}"), true);
        execution.settle(
            index,
            result,
            Some(ToolErrorKind::Panicked),
            self.env.capture,
        );
        self.maybe_finish_group(myself);
    }

    fn on_approval(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        approval_id: String,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) {
        let turn = self.turn;
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Executing(execution) = &mut run.phase else {
            return;
        };
        let Some(pending) = execution.approvals.remove(&approval_id) else {
            tracing::debug!(%approval_id, "answer for an approval that is not pending");
            return;
        };
        run.events.emit(EventKind::ApprovalResolved {
            approval_id,
            outcome: outcome.clone(),
        });
        genai::record_approval(&pending.span, &outcome);
        let index = pending.index;
        match outcome {
            ApprovalOutcome::Cancel => {
                self.cancel_run(myself);
                return;
            }
            ApprovalOutcome::Deny => {
                let text = match reason {
                    Some(reason) if !reason.trim().is_empty() => {
                        format!("The user denied this call: {}", reason.trim())
                    }
                    _ => "The user denied this call.".to_string(),
                };
                let id = execution.calls[index].id.clone();
                let result = ToolResult::text(id, text, true);
                execution.settle(index, result, Some(ToolErrorKind::Denied), self.env.capture);
            }
            ApprovalOutcome::Allow | ApprovalOutcome::AllowAlways => {
                if outcome == ApprovalOutcome::AllowAlways {
                    let rule = self.permissions.always_rule_for(&pending.request);
                    let kept = self
                        .permissions
                        .add_session_rule(RuleEntry {
                            rule,
                            source: RuleSource::Session,
                        })
                        .map_err(|err| err.to_string())
                        .and_then(|()| {
                            // Kept with the session, so a resumed run remembers it.
                            self.env
                                .store
                                .put_session_rules(
                                    &self.session_id,
                                    &self.permissions.session_rules(),
                                )
                                .map_err(|err| err.to_string())
                        });
                    if let Err(err) = kept {
                        tracing::warn!(%err, "could not remember the approval as a rule");
                    }
                }
                let Some(tool) = self.env.registry.get(&execution.calls[index].name).cloned()
                else {
                    return;
                };
                self.launches.push(Launch {
                    turn,
                    index,
                    tool,
                    args: pending.args,
                    outside_read_approved: true,
                    span: execution.spans[index].clone().unwrap_or_else(Span::none),
                });
                return;
            }
        }
        self.maybe_finish_group(myself);
    }

    /// When the current group has every result: emit its finish events in order
    /// and move on (next group, or record the results and call the model).
    fn maybe_finish_group(&mut self, myself: &ActorRef<AgentMsg>) {
        let Some(run) = self.run.as_mut() else { return };
        if let Phase::Cancelling { execution, .. } = &run.phase {
            if execution.as_ref().is_none_or(|e| e.executors.is_empty()) {
                self.complete_cancellation();
            }
            return;
        }
        let Phase::Executing(execution) = &mut run.phase else {
            return;
        };
        if execution.waiting > 0 || !execution.approvals.is_empty() {
            return;
        }
        let group = execution.groups[execution.group];
        for index in group.indices() {
            let call = &execution.calls[index];
            if let Some(result) = &execution.results[index] {
                run.events.emit(EventKind::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    is_error: result.is_error,
                    output_preview: preview(&result.joined_text()),
                    duration_ms: execution.durations[index],
                });
            }
        }
        execution.group += 1;
        if execution.group < execution.groups.len() {
            if run.cancel.is_cancelled() {
                self.cancel_run(myself);
            } else {
                self.start_group(myself);
            }
            return;
        }
        let Phase::Executing(execution) = std::mem::replace(&mut run.phase, Phase::Between) else {
            return;
        };
        let results = complete_results(&execution.calls, execution.results, CANCELLED_RESULT);
        self.transcript.push(Message::tool_results(results));
        self.next_model_call(myself);
    }

    /// Cancels the run: stop the stream, stop tools, answer what did not finish,
    /// close the history; finish once running tools have stopped.
    fn cancel_run(&mut self, myself: &ActorRef<AgentMsg>) {
        self.interrupt(
            myself,
            RunOutcome {
                status: RunStatus::Cancelled,
                stop_reason: "cancelled".into(),
                final_text: CANCELLED_RESULT.to_string(),
                usage: Usage::default(),
            },
            CANCELLED_RESULT,
        );
    }

    /// The wall clock ran out while the run was busy: stop it as a limit.
    fn on_deadline(&mut self, myself: &ActorRef<AgentMsg>, run_id: &str) {
        let Some(run) = self.run.as_ref() else { return };
        if run.run_id != run_id {
            return;
        }
        let hit = LimitHit::WallClock {
            limit: run.budget.wall_clock,
        };
        let notice = hit.notice();
        run.events.emit(EventKind::Notice {
            text: notice.clone(),
        });
        self.interrupt(
            myself,
            RunOutcome {
                status: RunStatus::Stopped,
                stop_reason: hit.stop_reason().to_string(),
                final_text: notice,
                usage: Usage::default(),
            },
            CANCELLED_RESULT,
        );
    }

    /// Interrupts the run: stop the stream, stop tools, answer what did not
    /// finish with `unfinished`, close the history; finish with `outcome` once
    /// running tools have stopped.
    fn interrupt(&mut self, myself: &ActorRef<AgentMsg>, outcome: RunOutcome, unfinished: &str) {
        let Some(run) = self.run.as_mut() else { return };
        run.cancel.cancel();
        match std::mem::replace(&mut run.phase, Phase::Between) {
            Phase::Streaming { acc, cancel, span } => {
                genai::record_error(&span, "cancelled");
                drop(span);
                cancel.cancel();
                run.tally.add_usage(&acc.usage(), self.env.price.as_ref());
                let partial = acc.into_message();
                self.keep_partial_response(partial, unfinished);
                let closing = outcome.final_text.clone();
                self.transcript.close(&closing);
                self.finish(outcome);
            }
            Phase::Executing(execution) => {
                execution.cancel.cancel();
                for approval_id in execution.approvals.keys() {
                    run.events.emit(EventKind::ApprovalResolved {
                        approval_id: approval_id.clone(),
                        outcome: ApprovalOutcome::Cancel,
                    });
                }
                let running = !execution.executors.is_empty();
                run.phase = Phase::Cancelling {
                    execution: Some(execution),
                    outcome,
                    deadline: Instant::now() + CLEANUP_GRACE,
                };
                if running {
                    // Executors report once their tools have stopped; the
                    // deadline bounds the wait.
                    let agent = myself.clone();
                    let run_id = run.run_id.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(CLEANUP_GRACE).await;
                        let _ = agent.cast(AgentMsg::Deadline(run_id));
                    });
                } else {
                    self.complete_cancellation();
                }
            }
            Phase::Cancelling {
                execution,
                outcome,
                deadline,
            } => {
                run.phase = Phase::Cancelling {
                    execution,
                    outcome,
                    deadline,
                };
                if Instant::now() >= deadline {
                    self.complete_cancellation();
                }
            }
            Phase::Between => {
                let closing = outcome.final_text.clone();
                self.transcript.close(&closing);
                self.finish(outcome);
            }
        }
    }

    fn complete_cancellation(&mut self) {
        let Some(run) = self.run.as_mut() else { return };
        let Phase::Cancelling {
            execution, outcome, ..
        } = std::mem::replace(&mut run.phase, Phase::Between)
        else {
            return;
        };
        if let Some(mut execution) = execution {
            for span in execution.spans.iter_mut().filter_map(Option::take) {
                genai::record_tool_error(&span, ToolErrorKind::Cancelled);
            }
            for (index, call) in execution.calls.iter().enumerate() {
                let started_group = execution
                    .groups
                    .get(execution.group)
                    .is_some_and(|group| group.indices().contains(&index));
                if started_group {
                    let result = execution.results[index].as_ref();
                    run.events.emit(EventKind::ToolFinished {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        is_error: result.is_none_or(|r| r.is_error),
                        output_preview: result
                            .map(|r| preview(&r.joined_text()))
                            .unwrap_or_else(|| CANCELLED_RESULT.to_string()),
                        duration_ms: execution.durations[index],
                    });
                }
            }
            let results = complete_results(&execution.calls, execution.results, CANCELLED_RESULT);
            self.transcript.push(Message::tool_results(results));
        }
        let closing = outcome.final_text.clone();
        self.transcript.close(&closing);
        self.finish(outcome);
    }

    fn stop_on_limit(&mut self, hit: LimitHit) {
        let notice = hit.notice();
        if let Some(run) = self.run.as_ref() {
            run.events.emit(EventKind::Notice {
                text: notice.clone(),
            });
        }
        self.transcript.close(&notice);
        self.finish(RunOutcome {
            status: RunStatus::Stopped,
            stop_reason: hit.stop_reason().to_string(),
            final_text: notice,
            usage: Usage::default(),
        });
    }

    /// Ends the run: the last event, the outcome to the starter, back to idle.
    fn finish(&mut self, mut outcome: RunOutcome) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        outcome.usage = run.tally.usage;
        let now = chrono::Utc::now();
        self.last_active = Some(now);
        let ended = self.persist(false).and_then(|()| {
            let mut record =
                self.env
                    .store
                    .run(&run.run_id)?
                    .ok_or_else(|| StoreError::NotFound {
                        what: format!("run {}", run.run_id),
                    })?;
            record.status = RunState::Ended(outcome.status);
            record.stop_reason = Some(outcome.stop_reason.clone());
            record.ended = Some(now);
            self.env.store.put_run(&record)?;
            self.env.store.flush()
        });
        if let Err(err) = ended {
            tracing::error!(session = %self.session_id, %err, "could not record the end of the run");
            run.events.emit(EventKind::Error {
                kind: "store".into(),
                message: format!("the end of the run could not be saved: {err}"),
            });
            // The answer was given but is not on disk: the run did not end well.
            if outcome.status == RunStatus::Finished {
                outcome.status = RunStatus::Error;
                outcome.stop_reason = "store_error".into();
            }
        }
        // The run's span ends before anyone hears the run ended, so a front
        // door that exits right after `run_finished` still exports it.
        genai::record_run_end(&run.span, outcome.status);
        drop(std::mem::replace(&mut run.span, Span::none()));
        run.events.emit(EventKind::RunFinished {
            status: outcome.status,
            stop_reason: outcome.stop_reason.clone(),
            final_text: outcome.final_text.clone(),
            usage_total: outcome.usage,
        });
        if let Some(done) = run.done.take() {
            let _ = done.send(outcome);
        }
        // The run is over: release what still waits on its token (the
        // wall-clock watchdog) instead of leaving it for up to an hour.
        run.cancel.cancel();
    }
}

impl AgentState {
    /// Spawns an executor, linked to this agent, for every queued launch. A
    /// launch of an earlier turn (cancelled meanwhile) is dropped.
    async fn launch_pending(&mut self, myself: &ActorRef<AgentMsg>) {
        while let Some(launch) = self.launches.pop() {
            if launch.turn != self.turn {
                continue;
            }
            let Some(run) = self.run.as_mut() else {
                self.launches.clear();
                return;
            };
            let Phase::Executing(execution) = &mut run.phase else {
                continue;
            };
            let call = &execution.calls[launch.index];
            let timeout = launch
                .tool
                .timeout(&launch.args)
                .map(|own| own + CLEANUP_GRACE)
                .unwrap_or(self.env.tool_timeout);
            // Child processes continue the trace: TRACEPARENT of the call's span.
            let child_env = match traceparent_of(&launch.span) {
                Some(traceparent) => {
                    let mut env = (*self.env.child_env).clone();
                    env.push(("TRACEPARENT".into(), traceparent));
                    Arc::new(env)
                }
                None => self.env.child_env.clone(),
            };
            let context = ToolContext {
                call_id: call.id.clone(),
                sandbox: self.env.sandbox.clone(),
                spill_dir: self.env.spill_dir.clone(),
                cancel: execution.cancel.child_token(),
                child_env,
                background: self.env.background.clone(),
                outside_read_approved: launch.outside_read_approved,
            };
            let agent = myself.clone();
            let report_to: ReportTo = Arc::new(move |report| {
                let _ = agent.cast(AgentMsg::ToolDone(report));
            });
            let index = launch.index;
            let args = ExecutorArgs {
                tool: launch.tool,
                args: launch.args,
                context,
                timeout,
                turn: launch.turn,
                index,
                report_to,
                span: launch.span,
            };
            match ToolExecutor::spawn_linked(None, ToolExecutor, args, myself.get_cell()).await {
                Ok((executor, _join)) => {
                    execution.executors.insert(executor.get_id(), index);
                }
                Err(err) => {
                    let id = execution.calls[index].id.clone();
                    let result = ToolResult::text(id, format!("tool could not start: {err}"), true);
                    execution.settle(index, result, Some(ToolErrorKind::Failed), self.env.capture);
                    self.maybe_finish_group(myself);
                }
            }
        }
    }
}
