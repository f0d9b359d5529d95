//! The agent loop as a sans-IO state machine (SPEC §3; DESIGN.md principle 2):
//! [`AgentLoop::on`] takes one [`Input`] — something that happened — and
//! returns the [`Effect`]s to carry out, in order. It never awaits, never
//! touches the store, the network or a process; it decides. One loop serves
//! the main agent, sub-agents and forks: what differs is its [`LoopSetup`].
//!
//! Phases: idle → saving → streaming → saving → executing (approvals pending
//! inside) → saving → streaming … → saving → done; an interruption passes
//! through "cancelling" while running tools and children stop. Every durable
//! write is an [`Effect::Save`] whose result comes back as [`Input::Saved`]
//! before the step that depends on it happens ("durable before visible"), so
//! an interpreter may perform it synchronously or on a blocking thread.
//!
//! Messages of an earlier step carry its epoch and are ignored. Nothing here
//! recurses per call: a response with thousands of calls is a loop.
//!
//! The interpreter (`troupe-actors`' agent actor) performs effects and feeds
//! back inputs. It owns what the loop only names: the agent's cancellation
//! token (whose cancellation it turns into [`Input::Interrupted`]), one
//! token per model call, summary and execution (by epoch, cancelled on
//! [`Effect::Cancel`]), the run's cancellation root ([`Effect::StopTree`]),
//! and the real spans behind the [`SpanId`]s the loop opens, notes and
//! closes ([`Effect::Span`]). Every span the loop opens is closed by the time
//! it is done.

mod compaction;
mod ending;
mod execution;
mod hooks;
mod turn;

pub use compaction::ContextSetup;
pub use hooks::{HookCall, HookRequest};

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::account::RunLedger;
use crate::catalogue::{CatalogueSource, ToolCatalogue};
use crate::guard::LoopGuard;
use crate::plan::ExecutionGroup;
use crate::roles::RoleSet;
use crate::session::Transcript;
use crate::subagent::ChildPlan;
use crate::{AgentSpec, Approver, RunOutcome};
use troupe_config::Price;
use troupe_llm::{ChatRequest, ProviderError, ResponseAccumulator, StreamEvent};
use troupe_permissions::{PermissionEngine, PermissionRequest};
use troupe_protocol::events::{ApprovalOutcome, EventKind};
use troupe_protocol::model::SystemPrompt;
use troupe_protocol::model::{Message, ToolCall, ToolResult, Usage};
use troupe_protocol::permission::RuleEntry;
use troupe_protocol::task_plan::TaskPlan;
use troupe_telemetry::genai::{ContentCapture, ToolErrorKind};
use troupe_telemetry::span_ops::{SpanId, SpanKind, SpanNote, SpanOp};
use troupe_tools::{Tool, ToolOutput};

/// Everything an agent's loop is made of.
pub struct LoopSetup {
    /// Who the agent is in the tree.
    pub spec: AgentSpec,
    /// The run it works for.
    pub run_id: String,
    /// The session holding its transcript.
    pub session_id: String,
    /// The session whose prompt cache its requests share (the provider's
    /// cache key): the run's main session, whose prefix a fork repeats.
    pub cache_key: String,
    /// For a sub-agent, its task (announced in `subagent_started`).
    pub task: Option<String>,
    /// The system prompt it is sent.
    pub system: SystemPrompt,
    /// The tools it may call.
    pub catalogue: Arc<ToolCatalogue>,
    /// Where newer tools come from, asked before each model request (none:
    /// the catalogue stays as given, as a fork's must).
    pub catalogue_source: Option<Arc<dyn CatalogueSource>>,
    /// The roles its `agent` calls may name.
    pub roles: Arc<RoleSet>,
    /// The permission engine (shared by the tree of one run).
    pub permissions: Arc<PermissionEngine>,
    /// The run's shared account.
    pub account: Arc<dyn RunLedger>,
    /// Who answers approvals.
    pub approver: Approver,
    /// Provider entry's name, for spans.
    pub provider_name: String,
    /// Provider system (`anthropic`, `openai`), for spans.
    pub provider_system: String,
    /// Model id, for spans.
    pub model: String,
    /// Prices for the cost budget, when known.
    pub price: Option<Price>,
    /// Whether content goes on spans.
    pub capture: ContentCapture,
    /// The history it starts from (what is not stored yet is saved first).
    pub transcript: Transcript,
    /// The context window and the session's layer-1 decisions.
    pub context: ContextSetup,
    /// The hooks of the run.
    pub hooks: Arc<troupe_hooks::HookSet>,
    /// Capture the project's files before each turn that can change them
    /// ([`Effect::Checkpoint`]).
    pub checkpoints: bool,
}

/// What a checkpoint the loop asked for captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointTaken {
    /// Its number in the session.
    pub number: u64,
    /// The store's commit.
    pub commit: String,
    /// The files equal the last checkpoint's: no new one was made.
    pub unchanged: bool,
    /// How many paths the snapshot left out.
    pub skipped: u64,
}

/// Something that happened to the agent.
#[derive(Debug)]
pub enum Input {
    /// Start working (the transcript ends with the task).
    Begin,
    /// The last [`Effect::Save`] finished.
    Saved(Result<(), String>),
    /// The [`Effect::SavePending`] of call `index` finished.
    PendingSaved {
        /// Epoch of the execution.
        epoch: u64,
        /// Call index.
        index: usize,
        /// Whether it is durable.
        result: Result<(), String>,
    },
    /// One event of the model stream of `epoch`.
    Model {
        /// Epoch of the model call.
        epoch: u64,
        /// The event.
        event: StreamEvent,
    },
    /// The model stream of `epoch` failed.
    ModelFailed {
        /// Epoch of the model call.
        epoch: u64,
        /// Why.
        error: ProviderError,
    },
    /// The model stream of `epoch` ended.
    ModelEnded {
        /// Epoch of the model call.
        epoch: u64,
    },
    /// Call `index` of the execution `epoch` produced its output (a tool, or a
    /// child agent's report).
    CallFinished {
        /// Epoch of the execution.
        epoch: u64,
        /// Call index.
        index: usize,
        /// What it produced.
        output: ToolOutput,
        /// How long it ran.
        duration: Duration,
        /// Why it failed, when the runner knows better than the output
        /// (timeout, cancellation, panic, could not start).
        error: Option<ToolErrorKind>,
    },
    /// A person answered an approval request.
    Approval {
        /// The approval id.
        approval_id: String,
        /// The answer.
        outcome: ApprovalOutcome,
        /// Reason given with a denial.
        reason: Option<String>,
    },
    /// The agent's token was cancelled: the run, an ancestor or this agent
    /// was stopped. The cause is the account's stop cause (none: a cancel).
    Interrupted,
    /// The cleanup grace of the interrupted execution `epoch` is over.
    CleanupGraceOver {
        /// Epoch of the execution.
        epoch: u64,
    },
    /// Save number `save` was not confirmed within `SAVE_DEADLINE` of an
    /// interruption.
    SaveOverdue {
        /// Which save ([`Effect::ArmSaveDeadline`]).
        save: u64,
    },
    /// The interpreter carried out an [`Effect::Offload`]: the results it
    /// spilled (call id and spill file); the others are tried next turn.
    Offloaded {
        /// Call id and path of each spilled result.
        spilled: Vec<(String, String)>,
    },
    /// The summary call of `epoch` ([`Effect::Summarise`]) answered.
    Summarised {
        /// Epoch of the summary call.
        epoch: u64,
        /// Its whole text, or why it failed.
        result: Result<String, ProviderError>,
        /// Its usage.
        usage: Usage,
    },
    /// The person wrote to the agent while it works: the text joins the
    /// history before the agent's next model call (announced with a
    /// `user_message` event then). A loop that is over ignores it, and text
    /// that no later model call took is dropped with the loop: whoever sent
    /// it sees no `user_message` event and can send it as a new prompt.
    UserMessage {
        /// What the person wrote.
        text: String,
    },
    /// The files of an [`Effect::Checkpoint`] are captured (or could not
    /// be: the turn goes on without them); the calls may start.
    Checkpointed {
        /// Epoch of the execution it precedes.
        epoch: u64,
        /// Captured, or why not.
        result: Result<(), String>,
    },
    /// The checkpoint whose files were captured is recorded (its tree,
    /// commit and ref written), or could not be.
    CheckpointRecorded {
        /// The agent's turn it precedes.
        turn: u64,
        /// The calls it precedes.
        tool_call_ids: Vec<String>,
        /// What was recorded, or why nothing was.
        result: Result<CheckpointTaken, String>,
    },
    /// The hooks of an [`Effect::RunHooks`] ran.
    HooksRan {
        /// What they answer.
        call: HookCall,
        /// What they decided.
        verdict: troupe_hooks::HookVerdict,
    },
}

/// A tool call to run in a tool executor.
pub struct ToolLaunch {
    /// Epoch of the execution (reported back in [`Input::CallFinished`]).
    pub epoch: u64,
    /// Call index.
    pub index: usize,
    /// Call id.
    pub call_id: String,
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Validated arguments.
    pub args: Value,
    /// A person approved this very call, or an allow rule names the path it
    /// reads (lets a read-only tool read outside the allowed roots).
    pub outside_read_approved: bool,
    /// The call's `execute_tool` span.
    pub span: SpanId,
}

/// A child agent to start for an `agent` call.
pub struct AgentLaunch {
    /// Epoch of the execution (reported back in [`Input::CallFinished`]).
    pub epoch: u64,
    /// Call index.
    pub index: usize,
    /// Call id.
    pub call_id: String,
    /// Who the child is (its path set) and what it starts from.
    pub child: Box<ChildPlan>,
    /// The `execute_tool agent` span: parent of the child's `invoke_agent`.
    pub span: SpanId,
}

/// Something the interpreter must do, in order.
pub enum Effect {
    /// Emit an event under this agent's path.
    Emit(EventKind),
    /// Write these messages of the transcript (those the store lacks, with
    /// their store indices) and flush; answer with [`Input::Saved`]. Once it
    /// succeeded, the first `upto` messages of the transcript are stored.
    Save {
        /// The transcript's length this save covers.
        upto: usize,
        /// The messages to write, with their store indices.
        messages: Vec<(u64, Message)>,
    },
    /// Store a finished call's result before its turn's tool message exists
    /// and flush; answer with [`Input::PendingSaved`].
    SavePending {
        /// Epoch of the execution.
        epoch: u64,
        /// Call index.
        index: usize,
        /// The result.
        result: ToolResult,
    },
    /// Keep the session's "always" rules with the session (best effort).
    SaveRules(Vec<RuleEntry>),
    /// Keep the agent's task plan with its session (best effort).
    SaveTaskPlan(TaskPlan),
    /// Layer 1: write each result of `spill` to its spill file, keep the
    /// decisions with the session and flush; answer with
    /// [`Input::Offloaded`] naming the results spilled.
    Offload(crate::compact::offload::OffloadPlan),
    /// Ask the model for a summary (no tools); answer with
    /// [`Input::Summarised`] carrying its whole text. Stop on
    /// [`Effect::Cancel`] of its epoch.
    Summarise {
        /// Epoch of the call.
        epoch: u64,
        /// The request.
        request: ChatRequest,
        /// The `compaction` span the call runs in.
        span: SpanId,
    },
    /// Store the compaction marker (the summary and where the kept messages
    /// begin) and flush; answer with [`Input::Saved`].
    SaveMarker(troupe_store::CompactionMarker),
    /// Start a model call; stream its events back as [`Input::Model`],
    /// [`Input::ModelFailed`], [`Input::ModelEnded`]. Stop on
    /// [`Effect::Cancel`] of its epoch (dropping the stream aborts the
    /// request).
    CallModel {
        /// Epoch of the call.
        epoch: u64,
        /// The request.
        request: ChatRequest,
        /// The `chat` span the stream is polled in.
        span: SpanId,
    },
    /// Capture the project's files before the calls of execution `epoch`
    /// run (they wait for it); answer with [`Input::Checkpointed`] once the
    /// files are captured, then with [`Input::CheckpointRecorded`] once the
    /// checkpoint is written.
    Checkpoint {
        /// Epoch of the execution.
        epoch: u64,
        /// Who takes it, before which calls.
        meta: troupe_checkpoint::SnapshotMeta,
        /// The agent's `invoke_agent` span: the snapshot's parent.
        span: SpanId,
    },
    /// Run a tool call; it stops on [`Effect::Cancel`] of its epoch.
    RunTool(ToolLaunch),
    /// Start a child agent; it stops on [`Effect::Cancel`] of its epoch.
    StartAgent(AgentLaunch),
    /// Stop what runs for `epoch`: its model call, its summary call, or the
    /// tool calls and child agents of its execution.
    Cancel {
        /// The epoch whose work stops.
        epoch: u64,
    },
    /// Stop everything that runs below this agent (its model call, its
    /// summaries, its tool calls and child agents): the agent's token.
    StopBelow,
    /// Open, note or close a span.
    Span(SpanOp),
    /// Stop the whole tree of the run (its cancellation root): the run's
    /// account says why ([`RunLedger::stop`] was asked first). Every agent
    /// hears of it as [`Input::Interrupted`].
    StopTree,
    /// An approval request waits for an answer: route answers to this agent.
    AwaitApproval {
        /// The approval id.
        approval_id: String,
    },
    /// Approval requests that no longer wait.
    ApprovalsClosed(Vec<String>),
    /// Run hooks (in a task: they may take their whole timeout); answer
    /// with [`Input::HooksRan`].
    RunHooks(Box<HookRequest>),
    /// Feed [`Input::SaveOverdue`] after `after`.
    ArmSaveDeadline {
        /// Which save.
        save: u64,
        /// How long it may still take.
        after: Duration,
    },
    /// Update the project memory from `digest` (what the person and the
    /// agent said recently) in the background: a side request that never
    /// answers the loop, so neither its result nor its usage reaches the
    /// history or the context estimate, and its failure never ends the run.
    UpdateMemory {
        /// The recent conversation (see `troupe_tools::memory::conversation_digest`).
        digest: String,
    },
    /// Feed [`Input::CleanupGraceOver`] after `after`.
    ArmCleanupGrace {
        /// Epoch of the execution.
        epoch: u64,
        /// How long running calls may take to stop.
        after: Duration,
    },
    /// The loop is over: whatever still runs below the agent is released
    /// (its token is cancelled), then the outcome is reported.
    Finished(RunOutcome),
}

impl std::fmt::Debug for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Emit(kind) => write!(f, "Emit({})", kind.type_name()),
            Self::Save { upto, .. } => write!(f, "Save(upto {upto})"),
            Self::SavePending { index, .. } => write!(f, "SavePending({index})"),
            Self::SaveRules(rules) => write!(f, "SaveRules({})", rules.len()),
            Self::SaveTaskPlan(plan) => write!(f, "SaveTaskPlan({})", plan.plan.len()),
            Self::Offload(plan) => write!(f, "Offload({}, {})", plan.spill.len(), plan.kept.len()),
            Self::Summarise { epoch, .. } => write!(f, "Summarise({epoch})"),
            Self::SaveMarker(marker) => write!(f, "SaveMarker({})", marker.first_kept),
            Self::CallModel { epoch, .. } => write!(f, "CallModel({epoch})"),
            Self::Checkpoint { epoch, .. } => write!(f, "Checkpoint({epoch})"),
            Self::RunTool(launch) => write!(f, "RunTool({}, {})", launch.index, launch.tool.name()),
            Self::StartAgent(launch) => {
                write!(
                    f,
                    "StartAgent({}, {})",
                    launch.index, launch.child.spec.path
                )
            }
            Self::AwaitApproval { approval_id } => write!(f, "AwaitApproval({approval_id})"),
            Self::ApprovalsClosed(ids) => write!(f, "ApprovalsClosed({ids:?})"),
            Self::Cancel { epoch } => write!(f, "Cancel({epoch})"),
            Self::StopTree => write!(f, "StopTree"),
            Self::StopBelow => write!(f, "StopBelow"),
            Self::Span(op) => write!(f, "Span({op:?})"),
            Self::ArmCleanupGrace { epoch, .. } => write!(f, "ArmCleanupGrace({epoch})"),
            Self::ArmSaveDeadline { save, .. } => write!(f, "ArmSaveDeadline({save})"),
            Self::UpdateMemory { digest } => write!(f, "UpdateMemory({})", digest.len()),
            Self::RunHooks(request) => write!(f, "RunHooks({})", request.event),
            Self::Finished(outcome) => write!(f, "Finished({})", outcome.status.as_str()),
        }
    }
}

/// A snapshot of what an agent is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatus {
    /// Agent path.
    pub path: String,
    /// Phase name: `idle`, `saving`, `compacting`, `streaming`,
    /// `checkpointing`, `executing`,
    /// `awaiting_approval`, `hooking`, `cancelling`, `done`.
    pub phase: &'static str,
    /// Messages in history.
    pub history_len: usize,
    /// Turns taken.
    pub turns: u32,
    /// Approval ids waiting for an answer.
    pub pending_approvals: Vec<String>,
}

/// What to do once the pending [`Effect::Save`] succeeded.
enum AfterSave {
    /// Call the model.
    ModelCall,
    /// Report these finish events, then call the model: the last call of
    /// the turn's results were made durable by this save (the turn's tool
    /// message) rather than by a save of their own, so they are seen only
    /// now.
    Announce(Vec<EventKind>),
    /// Run the calls of the response just recorded.
    Execute(Vec<ToolCall>),
    /// End the loop.
    Finish(RunOutcome),
    /// End the turn: the history is too long even compacted (its estimate).
    TooLong(u64),
    /// Run the Stop hooks, then end with this outcome (or go on once).
    StopHooks(RunOutcome),
    /// Compact the history (the loop's only job).
    Compact,
}

enum Phase {
    /// Not begun.
    Idle,
    /// Waiting for [`Input::Saved`].
    Saving(AfterSave),
    /// Layer 1: waiting for [`Input::Offloaded`].
    Offloading,
    /// A summary call is running.
    Summarising(compaction::Summarising),
    /// A model stream is running.
    Streaming(Streaming),
    /// The calls of the last response are running.
    Executing(Execution),
    /// The Stop hooks run; the outcome if they let the agent end.
    Hooking(RunOutcome),
    /// Interrupted; waiting for running calls to stop.
    Cancelling(Cancelling),
    /// The loop is over.
    Done,
}

struct Streaming {
    epoch: u64,
    acc: ResponseAccumulator,
    /// `chat {model}` of this call.
    span: SpanId,
}

struct Cancelling {
    execution: Execution,
    outcome: RunOutcome,
    unfinished: String,
}

/// One call of an execution.
struct CallState {
    result: Option<ToolResult>,
    duration_ms: u64,
    /// `execute_tool {tool}`, from its decision to its result.
    span: Option<SpanId>,
    /// An executor or child agent is working on it.
    running: bool,
    /// Its result is durable (stored as a pending result, or needs no
    /// storing: refused calls are answered again the same way).
    durable: bool,
    /// A PreToolUse hook blocked it, for this reason.
    hook_block: Option<String>,
    /// Notes of its PreToolUse hooks, appended to its result.
    hook_notes: Vec<String>,
    /// The `hook` events of its PreToolUse hooks, held until its
    /// `tool_started` is emitted so that a block follows the call it blocks.
    hook_reports: Vec<EventKind>,
    /// Its result, while its PostToolUse hooks run.
    held: Option<hooks::HeldResult>,
    /// Its PreToolUse hooks have run (they run once per call, also when a
    /// rewrite moves it into a group of its own).
    pre_hooked: bool,
}

/// What a call runs as, once allowed.
enum Launchable {
    Tool { tool: Arc<dyn Tool>, args: Value },
    Agent(Box<ChildPlan>),
}

struct PendingApproval {
    index: usize,
    request: PermissionRequest,
    launch: Launchable,
    /// The wait for the answer.
    span: SpanId,
}

/// The execution of one response's tool calls.
struct Execution {
    epoch: u64,
    calls: Vec<ToolCall>,
    states: Vec<CallState>,
    groups: Vec<ExecutionGroup>,
    group: usize,
    /// The current group's calls were decided and started.
    group_started: bool,
    /// The current group's PreToolUse hooks.
    group_hooks: hooks::GroupHooks,
    approvals: HashMap<String, PendingApproval>,
    /// The last call to settle was not saved on its own: the turn's tool
    /// message, saved at once, holds its result, and the finish events
    /// wait for that save.
    durable_with_turn: bool,
    /// The call whose plan is the agent's now, of this execution's
    /// `update_plan` calls: a call earlier in the response that finishes
    /// later does not replace it.
    task_plan_from: Option<usize>,
    /// When the response that made these calls is durable.
    response: ResponseSaved,
    /// The calls wait for the checkpoint asked for before them.
    checkpoint_pending: bool,
}

/// When the response whose calls an [`Execution`] runs is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponseSaved {
    /// Before any of its calls started.
    Already,
    /// With the turn's results (calls that only read): until then no result
    /// is saved on its own, and every finish event waits for that save.
    WithResults,
}

/// The loop of one agent.
pub struct AgentLoop {
    /// The time of the input being handled (inputs bring it; the machine
    /// reads no clock).
    now: DateTime<Utc>,
    spec: AgentSpec,
    run_id: String,
    session_id: String,
    cache_key: String,
    task: Option<String>,
    system: SystemPrompt,
    catalogue: Arc<ToolCatalogue>,
    catalogue_source: Option<Arc<dyn CatalogueSource>>,
    roles: Arc<RoleSet>,
    permissions: Arc<PermissionEngine>,
    account: Arc<dyn RunLedger>,
    approver: Approver,
    provider_name: String,
    provider_system: String,
    model: String,
    price: Option<Price>,
    capture: ContentCapture,
    transcript: Transcript,
    /// The agent was interrupted (its token was cancelled, or it stopped
    /// the tree): no new work starts.
    interrupted: bool,
    guard: LoopGuard,
    /// This agent's own usage.
    usage: Usage,
    /// Increases with every model call and every execution.
    epoch: u64,
    phase: Phase,
    /// `invoke_agent`: every step's span is below it (opened on
    /// [`Input::Begin`]).
    span: SpanId,
    /// The last span id given out.
    last_span: u64,
    /// Children started so far (numbers their paths).
    children: u32,
    /// A save failed: later steps do not try again.
    store_failed: bool,
    /// Interrupted while a save was pending.
    interrupt_pending: bool,
    /// Numbers the saves asked for (the current one while saving).
    saves: u64,
    /// The saves and markers handed to the interpreter and not yet
    /// answered, oldest first: how much of the transcript each save covers
    /// (`None` for a compaction marker).
    saves_in_flight: VecDeque<Option<usize>>,
    /// Text the person wrote during the run, for the next model call.
    queued_messages: Vec<String>,
    /// Compaction: estimate, ledger, breaker.
    context: compaction::ContextState,
    /// The hooks of the run.
    hooks: Arc<troupe_hooks::HookSet>,
    /// A Stop hook already made this agent go on once.
    stop_hook_continued: bool,
    /// Checkpoints are taken before turns that can change files.
    checkpoints: bool,
}

impl AgentLoop {
    /// A loop, not yet begun.
    pub fn new(setup: LoopSetup) -> Self {
        Self {
            now: DateTime::<Utc>::default(),
            guard: LoopGuard::new(setup.spec.max_turns, setup.spec.unknown_tool_limit),
            spec: setup.spec,
            run_id: setup.run_id,
            session_id: setup.session_id,
            cache_key: setup.cache_key,
            task: setup.task,
            system: setup.system,
            catalogue: setup.catalogue,
            catalogue_source: setup.catalogue_source,
            roles: setup.roles,
            permissions: setup.permissions,
            account: setup.account,
            approver: setup.approver,
            provider_name: setup.provider_name,
            provider_system: setup.provider_system,
            model: setup.model,
            price: setup.price,
            capture: setup.capture,
            transcript: setup.transcript,
            interrupted: false,
            usage: Usage::default(),
            epoch: 0,
            phase: Phase::Idle,
            span: SpanId(0),
            last_span: 0,
            children: 0,
            store_failed: false,
            interrupt_pending: false,
            saves: 0,
            saves_in_flight: VecDeque::new(),
            queued_messages: Vec::new(),
            context: compaction::ContextState::new(setup.context),
            hooks: setup.hooks,
            stop_hook_continued: false,
            checkpoints: setup.checkpoints,
        }
    }

    /// Handles one input that happened at `now`; returns what to do, in
    /// order.
    pub fn on(&mut self, now: DateTime<Utc>, input: Input) -> Vec<Effect> {
        self.now = now;
        let mut out = Vec::new();
        match input {
            Input::Begin => self.begin(&mut out),
            Input::Saved(result) => self.on_saved(result, &mut out),
            Input::PendingSaved {
                epoch,
                index,
                result,
            } => self.on_pending_saved(epoch, index, result, &mut out),
            Input::Model { epoch, event } => self.on_model_event(epoch, event, &mut out),
            Input::ModelFailed { epoch, error } => self.on_model_failed(epoch, error, &mut out),
            Input::ModelEnded { epoch } => self.on_model_ended(epoch, &mut out),
            Input::CallFinished {
                epoch,
                index,
                output,
                duration,
                error,
            } => self.on_call_finished(epoch, index, output, duration, error, &mut out),
            Input::Approval {
                approval_id,
                outcome,
                reason,
            } => self.on_approval(approval_id, outcome, reason, &mut out),
            Input::Interrupted => self.interrupt(&mut out),
            Input::CleanupGraceOver { epoch } => self.on_grace_over(epoch, &mut out),
            Input::SaveOverdue { save } => self.on_save_overdue(save, &mut out),
            Input::UserMessage { text } => self.queue_message(text),
            Input::Offloaded { spilled } => self.on_offloaded(spilled, &mut out),
            Input::Summarised {
                epoch,
                result,
                usage,
            } => self.on_summarised(epoch, result, usage, &mut out),
            Input::HooksRan { call, verdict } => self.on_hooks_ran(call, verdict, &mut out),
            Input::Checkpointed { epoch, result } => self.on_checkpointed(epoch, result, &mut out),
            Input::CheckpointRecorded {
                turn,
                tool_call_ids,
                result,
            } => self.on_checkpoint_recorded(turn, tool_call_ids, result, &mut out),
        }
        out
    }

    /// Who the agent is.
    pub fn spec(&self) -> &AgentSpec {
        &self.spec
    }

    /// The session holding its transcript.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The run it works for.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Its system prompt (a fork is sent exactly this).
    pub fn system(&self) -> &SystemPrompt {
        &self.system
    }

    /// Its tools (a fork is offered exactly these).
    pub fn catalogue(&self) -> &Arc<ToolCatalogue> {
        &self.catalogue
    }

    /// The permission engine (shared by the run's tree).
    pub fn permissions(&self) -> &Arc<PermissionEngine> {
        &self.permissions
    }

    /// Who answers approvals.
    pub fn approver(&self) -> Approver {
        self.approver
    }

    /// The layer-1 decisions (a fork starts from its parent's).
    pub fn ledger(&self) -> &crate::compact::offload::Ledger {
        &self.context.ledger
    }

    /// The history and what of it is stored (the interpreter saves it).
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// Takes the history out of a finished loop (to keep for the session's next run).
    pub fn take_transcript(&mut self) -> Transcript {
        std::mem::take(&mut self.transcript)
    }

    /// True once the loop is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// What the agent is doing.
    pub fn status(&self) -> AgentStatus {
        let (phase, pending) = match &self.phase {
            Phase::Idle => ("idle", Vec::new()),
            Phase::Saving(_) => ("saving", Vec::new()),
            Phase::Offloading | Phase::Summarising(_) => ("compacting", Vec::new()),
            Phase::Streaming(_) => ("streaming", Vec::new()),
            Phase::Executing(execution) if !execution.approvals.is_empty() => {
                let mut ids: Vec<String> = execution.approvals.keys().cloned().collect();
                ids.sort();
                ("awaiting_approval", ids)
            }
            Phase::Executing(execution) if execution.checkpoint_pending => {
                ("checkpointing", Vec::new())
            }
            Phase::Executing(_) => ("executing", Vec::new()),
            Phase::Hooking(_) => ("hooking", Vec::new()),
            Phase::Cancelling(_) => ("cancelling", Vec::new()),
            Phase::Done => ("done", Vec::new()),
        };
        AgentStatus {
            path: self.spec.path.clone(),
            phase,
            history_len: self.transcript.len(),
            turns: self.guard.turns(),
            pending_approvals: pending,
        }
    }

    /// Start: announce a sub-agent, make the starting history durable, then
    /// call the model.
    fn begin(&mut self, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        // Its parent is the interpreter's: the trace's root for the main
        // agent, the `execute_tool agent` span that started a sub-agent.
        out.push(Effect::Span(SpanOp::Open {
            id: self.span,
            parent: None,
            kind: SpanKind::Agent {
                run_id: self.run_id.clone(),
                agent: self.spec.path.clone(),
                conversation_id: self.session_id.clone(),
            },
        }));
        if let Some(task) = &self.task {
            out.push(Effect::Emit(EventKind::SubagentStarted {
                role: self.spec.role.clone(),
                task: task.clone(),
            }));
        }
        let then = if self.context.compact_only {
            AfterSave::Compact
        } else {
            AfterSave::ModelCall
        };
        self.save_then(then, out);
    }

    /// Opens a span below `parent` (`None`: below the agent's).
    fn open_span(
        &mut self,
        parent: Option<SpanId>,
        kind: SpanKind,
        out: &mut Vec<Effect>,
    ) -> SpanId {
        self.last_span += 1;
        let id = SpanId(self.last_span);
        out.push(Effect::Span(SpanOp::Open {
            id,
            parent: Some(parent.unwrap_or(self.span)),
            kind,
        }));
        id
    }

    /// Asks for a save and waits for it before `then`.
    /// Once the agent is interrupted, every save has a deadline
    /// ([`crate::SAVE_DEADLINE`]).
    fn save_then(&mut self, then: AfterSave, out: &mut Vec<Effect>) {
        self.saves += 1;
        self.phase = Phase::Saving(then);
        let (upto, messages) = self.transcript.unsaved_copy();
        self.saves_in_flight.push_back(Some(upto));
        out.push(Effect::Save { upto, messages });
        if self.interrupted {
            out.push(Effect::ArmSaveDeadline {
                save: self.saves,
                after: crate::SAVE_DEADLINE,
            });
        }
    }

    fn on_saved(&mut self, result: Result<(), String>, out: &mut Vec<Effect>) {
        // Saves are answered in the order they were asked for; a durable
        // one stores the transcript up to where it was then, even when the
        // loop stopped waiting for it.
        if let (Some(Some(upto)), Ok(())) = (self.saves_in_flight.pop_front(), &result) {
            self.transcript.mark_saved(upto);
        }
        let Phase::Saving(_) = &self.phase else {
            return;
        };
        let Phase::Saving(then) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match (result, then) {
            (Ok(()), AfterSave::Finish(outcome)) => self.finished(outcome, out),
            (Ok(()), then) if self.interrupt_pending => {
                self.interrupt_pending = false;
                self.phase = Phase::Saving(then);
                self.interrupt_now(out);
            }
            (Ok(()), AfterSave::ModelCall) => self.model_call(out),
            (Ok(()), AfterSave::Announce(events)) => {
                out.extend(events.into_iter().map(Effect::Emit));
                self.model_call(out);
            }
            (Ok(()), AfterSave::Compact) => self.compact_now(out),
            (Ok(()), AfterSave::TooLong(tokens)) => self.end_too_long(tokens, out),
            (Ok(()), AfterSave::Execute(calls)) => {
                self.start_execution(calls, ResponseSaved::Already, out)
            }
            (Ok(()), AfterSave::StopHooks(outcome)) => self.run_stop_hooks(outcome, out),
            (Err(err), then) => self.save_failed(err, then, out),
        }
    }
}

/// Records `note` on span `id`.
fn note(out: &mut Vec<Effect>, id: SpanId, note: SpanNote) {
    out.push(Effect::Span(SpanOp::Note { id, note }));
}

/// Span `id` is over.
fn close(out: &mut Vec<Effect>, id: SpanId) {
    out.push(Effect::Span(SpanOp::Close { id }));
}
