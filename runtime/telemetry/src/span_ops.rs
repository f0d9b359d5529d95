//! Spans as values, for machines that may not touch a subscriber: a machine
//! names its spans with [`SpanId`]s and says what happens to them with
//! [`SpanOp`]s (open one of the GenAI kinds, note what became known, close
//! it); its interpreter keeps the real `tracing` spans in a [`SpanTable`] and
//! carries the operations out in order, through the [`crate::genai`]
//! helpers. The trace is the same as when the helpers are called directly:
//! the operations map onto them one to one.
//!
//! A span ends when it is closed, or at the latest when its table is
//! dropped (an interpreter that stops early ends what its machine left
//! open). Work that runs inside a span (a tool call, a model stream) holds a
//! handle from [`SpanTable::get`], which keeps the span open until that work
//! is over, as a clone of a `tracing::Span` does.

use std::collections::HashMap;

use tracing::Span;

use crate::genai::{self, ContentCapture, ToolErrorKind};
use troupe_protocol::events::{ApprovalOutcome, RunStatus};
use troupe_protocol::model::{Message, ProviderErrorKind, StopReason, ToolResult, Usage};
use troupe_protocol::permission::Decision;

/// A span as a machine names it: unique within one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub u64);

/// Which span to open, with what is known when it starts (the arguments of
/// the matching `genai::*_span` helper).
#[derive(Debug, Clone, PartialEq)]
pub enum SpanKind {
    /// `invoke_agent {agent}` ([`genai::agent_span`]).
    Agent {
        /// The run id.
        run_id: String,
        /// The agent's path.
        agent: String,
        /// The session id.
        conversation_id: String,
    },
    /// `chat {model}` ([`genai::chat_span`], [`genai::record_provider_entry`]).
    Chat {
        /// The provider system (`anthropic`, `openai`).
        provider: String,
        /// The provider entry's name in the configuration.
        entry: String,
        /// The model asked for.
        model: String,
        /// The session id.
        conversation_id: String,
    },
    /// `execute_tool {tool}` ([`genai::tool_span`]).
    Tool {
        /// The tool's name.
        tool: String,
        /// The call id.
        call_id: String,
    },
    /// `await_approval {tool}` ([`genai::approval_span`]).
    Approval {
        /// The tool's name.
        tool: String,
        /// The call id.
        call_id: String,
        /// The approval id.
        approval_id: String,
    },
    /// `compact {trigger}` ([`genai::compaction_span`]).
    Compaction {
        /// `auto`, `manual`, `emergency`, `ahead`.
        trigger: String,
        /// The estimate before it.
        tokens_before: u64,
    },
}

/// What became known about an open span (the `genai::record_*` helpers and
/// the content capture; a machine notes content only when capture is on).
#[derive(Debug, Clone, PartialEq)]
pub enum SpanNote {
    /// How an agent run ended ([`genai::record_run_end`]).
    RunEnd(RunStatus),
    /// A response's token usage ([`genai::record_usage`]).
    Usage(Usage),
    /// The model that answered and the response id ([`genai::record_response`]).
    Response {
        /// The model that answered.
        model: String,
        /// The provider's response id, when it sent one.
        response_id: Option<String>,
    },
    /// Why the response ended ([`genai::record_finish`]).
    Finish(StopReason),
    /// A failed model call ([`genai::record_chat_error`]).
    ChatError(ProviderErrorKind),
    /// A failed tool call ([`genai::record_tool_error`]).
    ToolError(ToolErrorKind),
    /// `error.type` and error status ([`genai::record_error`]).
    Error(&'static str),
    /// The permission decision of a call ([`genai::permission_event`]).
    Permission(Decision),
    /// The answer to an approval ([`genai::record_approval`]).
    Approval(ApprovalOutcome),
    /// The estimate after a compaction ([`genai::record_compaction`]).
    Compaction {
        /// The estimate after it.
        tokens_after: u64,
    },
    /// The system prompt sent (content capture).
    SystemInstructions(String),
    /// The messages sent (content capture).
    InputMessages(Vec<Message>),
    /// The response (content capture).
    OutputMessage {
        /// The assistant message.
        message: Message,
        /// Why it ended.
        reason: StopReason,
    },
    /// A call's arguments (content capture).
    ToolArguments(String),
    /// A call's result (content capture).
    ToolResult(ToolResult),
}

/// One thing that happens to a span, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanOp {
    /// Open `id` as a child of `parent` (none: of the table's root).
    Open {
        /// The new span.
        id: SpanId,
        /// Its parent.
        parent: Option<SpanId>,
        /// What it is.
        kind: SpanKind,
    },
    /// Record `note` on `id`.
    Note {
        /// The span.
        id: SpanId,
        /// What became known.
        note: SpanNote,
    },
    /// `id` is over (work still running inside it keeps it open until it ends).
    Close {
        /// The span.
        id: SpanId,
    },
}

/// The real spans of one machine, by id: the interpreter's side of
/// [`SpanOp`].
#[derive(Debug)]
pub struct SpanTable {
    /// The parent of spans opened without one.
    root: Span,
    spans: HashMap<SpanId, Span>,
}

impl SpanTable {
    /// A table whose spans without a parent hang below `root` (`Span::none()`
    /// for the root of a trace).
    pub fn new(root: Span) -> Self {
        Self {
            root,
            spans: HashMap::new(),
        }
    }

    /// Carries out one operation. Notes and closes of unknown ids are
    /// ignored; a parent that is not open is replaced by the root.
    pub fn apply(&mut self, op: SpanOp) {
        match op {
            SpanOp::Open { id, parent, kind } => {
                let parent = parent
                    .and_then(|parent| self.spans.get(&parent))
                    .unwrap_or(&self.root);
                let span = open(parent, &kind);
                self.spans.insert(id, span);
            }
            SpanOp::Note { id, note } => {
                if let Some(span) = self.spans.get(&id) {
                    record(span, &note);
                }
            }
            SpanOp::Close { id } => {
                self.spans.remove(&id);
            }
        }
    }

    /// A handle on `id` for work that runs inside it (the root when `id` is
    /// not open, so that the work stays in the trace).
    pub fn get(&self, id: SpanId) -> Span {
        self.spans
            .get(&id)
            .cloned()
            .unwrap_or_else(|| self.root.clone())
    }

    /// How many spans are open.
    pub fn open_count(&self) -> usize {
        self.spans.len()
    }
}

fn open(parent: &Span, kind: &SpanKind) -> Span {
    match kind {
        SpanKind::Agent {
            run_id,
            agent,
            conversation_id,
        } => genai::agent_span(parent, run_id, agent, conversation_id),
        SpanKind::Chat {
            provider,
            entry,
            model,
            conversation_id,
        } => {
            let span = genai::chat_span(parent, provider, model, conversation_id);
            genai::record_provider_entry(&span, entry);
            span
        }
        SpanKind::Tool { tool, call_id } => genai::tool_span(parent, tool, call_id),
        SpanKind::Approval {
            tool,
            call_id,
            approval_id,
        } => genai::approval_span(parent, tool, call_id, approval_id),
        SpanKind::Compaction {
            trigger,
            tokens_before,
        } => genai::compaction_span(parent, trigger, *tokens_before),
    }
}

fn record(span: &Span, note: &SpanNote) {
    // The machine notes content only when capture is on.
    let capture = ContentCapture::new(true);
    match note {
        SpanNote::RunEnd(status) => genai::record_run_end(span, *status),
        SpanNote::Usage(usage) => genai::record_usage(span, usage),
        SpanNote::Response { model, response_id } => {
            genai::record_response(span, model, response_id.as_deref())
        }
        SpanNote::Finish(reason) => genai::record_finish(span, reason),
        SpanNote::ChatError(kind) => genai::record_chat_error(span, *kind),
        SpanNote::ToolError(kind) => genai::record_tool_error(span, *kind),
        SpanNote::Error(error_type) => genai::record_error(span, error_type),
        SpanNote::Permission(decision) => genai::permission_event(span, decision),
        SpanNote::Approval(outcome) => genai::record_approval(span, outcome),
        SpanNote::Compaction { tokens_after } => genai::record_compaction(span, *tokens_after),
        SpanNote::SystemInstructions(system) => capture.record_system_instructions(span, system),
        SpanNote::InputMessages(messages) => capture.record_input_messages(span, messages),
        SpanNote::OutputMessage { message, reason } => {
            capture.record_output_message(span, message, reason)
        }
        SpanNote::ToolArguments(arguments) => capture.record_tool_arguments(span, arguments),
        SpanNote::ToolResult(result) => capture.record_tool_result(span, result),
    }
}
