//! The spans of a run, following the OpenTelemetry GenAI semantic conventions
//! (SPEC §11): attribute keys, span names, `error.type` values, and helpers that
//! create each kind of span with every field declared up front.
//!
//! Owns the shape of the trace; does not decide when a span starts or ends (the
//! actors do: a span ends when its last handle is dropped) and never sends
//! anything anywhere (the pipeline does).
//!
//! Every helper takes the parent explicitly (`&Span`; pass `&Span::none()` for
//! a root, `&Span::current()` for the current one). Fields that are only known
//! later (usage, response model, outcome, error) are declared `Empty` and filled
//! with the `record_*` helpers, so log lines and spans carry the same names.
//!
//! Numbers are recorded as `i64`: `tracing-opentelemetry` turns `u64` fields
//! into strings. `gen_ai.response.finish_reasons` is a string array, which a
//! `tracing` field cannot hold, so it is set on the OpenTelemetry span directly.
//! Content (prompts, completions, tool arguments and results) goes through
//! [`ContentCapture`] and is recorded only when `[telemetry] capture_content`
//! is on.

use std::borrow::Cow;

use opentelemetry::trace::Status;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use serde_json::json;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::TRACE_TARGET;
use troupe_protocol::events::{ApprovalOutcome, RunStatus};
use troupe_protocol::model::ProviderErrorKind;
use troupe_protocol::model::{
    ContentBlock, Message, Role, StopReason, ToolOutputPart, ToolResult, Usage,
};
use troupe_protocol::permission::Decision;

// ---- attribute keys (GenAI semantic conventions) ----

/// `gen_ai.request.model`: the model asked for.
pub(crate) const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`: the model that answered.
pub(crate) const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.id`: the provider's id of the response.
pub(crate) const RESPONSE_ID: &str = "gen_ai.response.id";
/// `gen_ai.usage.input_tokens`: every input token, cached ones included.
pub(crate) const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub(crate) const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens`: input tokens read from the prompt cache.
pub(crate) const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.cache_creation.input_tokens`: input tokens written to the prompt cache.
pub(crate) const USAGE_CACHE_CREATION_INPUT_TOKENS: &str =
    "gen_ai.usage.cache_creation.input_tokens";
/// `gen_ai.response.finish_reasons`: string array.
pub(crate) const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.conversation.id`: the session id (SPEC §11).
pub(crate) const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.tool.call.id`.
pub(crate) const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `error.type`: low-cardinality class of the failure (see [`ToolErrorKind`]).
pub(crate) const ERROR_TYPE: &str = "error.type";
/// `gen_ai.input.messages` (content; JSON, only with content capture).
pub(crate) const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// `gen_ai.output.messages` (content; JSON, only with content capture).
pub(crate) const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `gen_ai.system_instructions` (content; JSON, only with content capture).
pub(crate) const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
/// `gen_ai.tool.call.arguments` (content; only with content capture).
pub(crate) const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.tool.call.result` (content; only with content capture).
pub(crate) const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

/// `troupe.run_id`: set on `invoke_agent` spans ([`super::RUN_ID_ATTRIBUTE`]).
pub(crate) const RUN_ID: &str = super::RUN_ID_ATTRIBUTE;
/// `troupe.run.status`: how an agent run ended (`finished`, `stopped`, …).
pub(crate) const RUN_STATUS: &str = "troupe.run.status";
/// `troupe.provider.entry`: the name of the provider entry in the user's
/// configuration (`gen_ai.provider.name` is the provider system).
pub(crate) const PROVIDER_ENTRY: &str = "troupe.provider.entry";
/// `troupe.approval.outcome`: `allow`, `allow_always`, `deny`, `cancel`.
pub(crate) const APPROVAL_OUTCOME: &str = "troupe.approval.outcome";
/// `troupe.permission.decision` (attribute of the [`PERMISSION_EVENT`] span event).
pub(crate) const PERMISSION_DECISION: &str = "troupe.permission.decision";
/// `troupe.permission.reason` (attribute of the [`PERMISSION_EVENT`] span event).
pub(crate) const PERMISSION_REASON: &str = "troupe.permission.reason";
/// `troupe.compaction.tokens_before`: estimated tokens before compaction.
pub(crate) const COMPACTION_TOKENS_BEFORE: &str = "troupe.compaction.tokens_before";
/// `troupe.compaction.tokens_after`: estimated tokens after compaction.
pub(crate) const COMPACTION_TOKENS_AFTER: &str = "troupe.compaction.tokens_after";
/// `troupe.hook.exit_code`.
pub(crate) const HOOK_EXIT_CODE: &str = "troupe.hook.exit_code";
/// `troupe.hook.outcome`: `continue`, `block`, `error`, `timeout`.
pub(crate) const HOOK_OUTCOME: &str = "troupe.hook.outcome";
/// `troupe.mcp.server`: the configured server name.
pub const MCP_SERVER: &str = "troupe.mcp.server";
/// How connecting to an MCP server ended: `connected`, `failed`, `timed_out`.
pub(crate) const MCP_OUTCOME: &str = "troupe.mcp.outcome";

/// Name of the span event recording a permission decision.
pub(crate) const PERMISSION_EVENT: &str = "permission";

// ---- operation names and span names ----

/// `gen_ai.operation.name` of a model call.
pub(crate) const OP_CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub(crate) const OP_EXECUTE_TOOL: &str = "execute_tool";
/// `gen_ai.operation.name` of an agent run.
pub(crate) const OP_INVOKE_AGENT: &str = "invoke_agent";
/// Operation (span name prefix) of an approval wait.
pub const OP_AWAIT_APPROVAL: &str = "await_approval";
/// Operation (span name prefix) of a compaction.
pub const OP_COMPACT: &str = "compact";
/// Operation (span name prefix) of a hook run.
pub const OP_HOOK: &str = "hook";
/// MCP method of a connection handshake.
pub(crate) const MCP_INITIALIZE: &str = "initialize";
/// MCP method of a tool call.
pub const MCP_TOOLS_CALL: &str = "tools/call";
/// `gen_ai.tool.type` of every Troupe tool.
pub(crate) const TOOL_TYPE_FUNCTION: &str = "function";

/// `{operation} {target}`, the GenAI span-name rule; just the operation when
/// the target is empty.
pub(crate) fn span_name(operation: &str, target: &str) -> String {
    if target.is_empty() {
        operation.to_string()
    } else {
        format!("{operation} {target}")
    }
}

/// `chat {model}`.
pub(crate) fn chat_span_name(model: &str) -> String {
    span_name(OP_CHAT, model)
}

/// `execute_tool {tool}`.
pub(crate) fn tool_span_name(tool: &str) -> String {
    span_name(OP_EXECUTE_TOOL, tool)
}

/// `invoke_agent {agent}`.
pub(crate) fn agent_span_name(agent: &str) -> String {
    span_name(OP_INVOKE_AGENT, agent)
}

// ---- error.type ----

/// Why a tool call failed, as `error.type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolErrorKind {
    /// Refused by the permission engine, a hook or a person.
    Denied,
    /// The model named a tool that does not exist.
    UnknownTool,
    /// The arguments failed validation.
    InvalidArguments,
    /// The tool ran and reported an error.
    Failed,
    /// The tool panicked (its executor failed).
    Panicked,
    /// The call's timeout expired.
    TimedOut,
    /// The run was cancelled while the call ran.
    Cancelled,
}

impl ToolErrorKind {
    /// The `error.type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::UnknownTool => "unknown_tool",
            Self::InvalidArguments => "invalid_arguments",
            Self::Failed => "tool_error",
            Self::Panicked => "panic",
            Self::TimedOut => "timeout",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `error.type` of a failed model call: the provider error kind's name.
pub(crate) fn provider_error_type(kind: ProviderErrorKind) -> &'static str {
    kind.as_str()
}

/// `error.type` of an agent run that ended this way, or `None` when the end is
/// not a failure (finished, stopped by a limit, cancelled by someone).
pub(crate) fn run_error_type(status: RunStatus) -> Option<&'static str> {
    match status {
        RunStatus::Error | RunStatus::Interrupted => Some(status.as_str()),
        RunStatus::Finished | RunStatus::Stopped | RunStatus::Cancelled => None,
    }
}

/// `gen_ai.response.finish_reasons` entry of a stop reason (Troupe's neutral names).
pub(crate) fn finish_reason(reason: &StopReason) -> Cow<'static, str> {
    match reason {
        StopReason::EndTurn => Cow::Borrowed("end_turn"),
        StopReason::ToolUse => Cow::Borrowed("tool_use"),
        StopReason::MaxTokens => Cow::Borrowed("max_tokens"),
        StopReason::StopSequence => Cow::Borrowed("stop_sequence"),
        StopReason::Refusal => Cow::Borrowed("refusal"),
        StopReason::Other(other) => Cow::Owned(other.clone()),
    }
}

/// A token count as an attribute value (`u64` would become a string; counts
/// beyond `i64::MAX` do not occur and saturate).
pub(crate) fn token_count(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

/// `gen_ai.usage.input_tokens` of a usage: uncached, cache-read and
/// cache-written input together (the conventions count cached tokens as input).
pub(crate) fn total_input_tokens(usage: &Usage) -> u64 {
    usage
        .input
        .saturating_add(usage.cache_read)
        .saturating_add(usage.cache_write)
}

// ---- span helpers ----

/// `invoke_agent {agent}`: one agent run. The main agent's is the root of the
/// run's trace (`parent` = `Span::none()`, or a span carrying a remote parent);
/// a sub-agent's is a child of the spawning `execute_tool agent` span. Every
/// agent span carries the run id, which files the trace in the local store.
pub fn agent_span(parent: &Span, run_id: &str, agent: &str, conversation_id: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "invoke_agent",
        otel.name = %agent_span_name(agent),
        gen_ai.operation.name = OP_INVOKE_AGENT,
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = conversation_id,
        troupe.run_id = run_id,
        troupe.run.status = Empty,
        error.type = Empty,
    )
}

/// Span name of placing a run on a node of a cluster.
pub const OP_PLACEMENT: &str = "placement";

/// `placement`: a run handed to the cluster's work queue (`side` `submit`, on
/// the node that accepted it; a root) or taken from it (`take`, on the node
/// that runs it, whose main agent's span is its child; its parent is the
/// submitter's span, set from the submission's `traceparent`). The run id is
/// `troupe.placement.run_id`, not `troupe.run_id`: the submitting node does
/// not run the run, so its local store does not file the span.
pub fn placement_span(side: &str, run_id: &str, node: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: None,
        "placement",
        otel.name = OP_PLACEMENT,
        troupe.placement.side = side,
        troupe.placement.run_id = run_id,
        troupe.node = node,
    )
}

/// Span name of a run taken over by another node of a cluster.
pub const OP_RUN_MOVED: &str = "run_moved";

/// `run_moved`: the node `to_node` took run `run_id` over from `from_node`,
/// whose lease lapsed. Its parent is the run's trace (set from the
/// submission's `traceparent`); the continued run's main agent is its
/// child, so a run that moved stays one trace across nodes.
pub fn run_moved_span(run_id: &str, from_node: &str, to_node: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: None,
        "run_moved",
        otel.name = OP_RUN_MOVED,
        troupe.placement.run_id = run_id,
        troupe.moved.from_node = from_node,
        troupe.moved.to_node = to_node,
        troupe.node = to_node,
    )
}

/// Records how an agent run ended; error and interrupted runs get error status.
pub fn record_run_end(span: &Span, status: RunStatus) {
    span.record(RUN_STATUS, status.as_str());
    if let Some(error_type) = run_error_type(status) {
        record_error(span, error_type);
    }
}

/// `chat {model}`: one model call (span kind client). `provider` is the
/// provider system as the conventions name it (`anthropic`, `openai`); the
/// configuration entry's own name goes in `troupe.provider.entry`
/// ([`record_provider_entry`]).
pub fn chat_span(parent: &Span, provider: &str, model: &str, conversation_id: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "chat",
        otel.name = %chat_span_name(model),
        otel.kind = "client",
        gen_ai.operation.name = OP_CHAT,
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.conversation.id = conversation_id,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        troupe.provider.entry = Empty,
        error.type = Empty,
    )
}

/// Records on a `chat` span the name of the provider entry in the user's
/// configuration (`claude`, `work-openai`).
pub fn record_provider_entry(span: &Span, entry: &str) {
    span.record(PROVIDER_ENTRY, entry);
}

/// Records the token usage of a response on its `chat` span.
pub fn record_usage(span: &Span, usage: &Usage) {
    span.record(USAGE_INPUT_TOKENS, token_count(total_input_tokens(usage)));
    span.record(USAGE_OUTPUT_TOKENS, token_count(usage.output));
    span.record(USAGE_CACHE_READ_INPUT_TOKENS, token_count(usage.cache_read));
    span.record(
        USAGE_CACHE_CREATION_INPUT_TOKENS,
        token_count(usage.cache_write),
    );
}

/// Records the model that answered and, when the provider gave one, the response id.
pub fn record_response(span: &Span, model: &str, response_id: Option<&str>) {
    span.record(RESPONSE_MODEL, model);
    if let Some(id) = response_id {
        span.record(RESPONSE_ID, id);
    }
}

/// Records why the response ended (`gen_ai.response.finish_reasons`, a string array).
pub fn record_finish(span: &Span, reason: &StopReason) {
    let reasons = vec![StringValue::from(finish_reason(reason).into_owned())];
    span.set_attribute(
        RESPONSE_FINISH_REASONS,
        Value::Array(Array::String(reasons)),
    );
}

/// Records a failed model call: `error.type` from the provider error kind, error status.
pub fn record_chat_error(span: &Span, kind: ProviderErrorKind) {
    record_error(span, provider_error_type(kind));
}

/// `execute_tool {tool}`: one tool call.
pub fn tool_span(parent: &Span, tool: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "execute_tool",
        otel.name = %tool_span_name(tool),
        gen_ai.operation.name = OP_EXECUTE_TOOL,
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = TOOL_TYPE_FUNCTION,
        error.type = Empty,
    )
}

/// Records a failed tool call: `error.type` and error status.
pub fn record_tool_error(span: &Span, kind: ToolErrorKind) {
    record_error(span, kind.as_str());
}

/// Sets `error.type` and error status (described by the same value) on a span
/// created by one of these helpers (on spans without an `error.type` field,
/// such as `await_approval`, only the status is set).
pub fn record_error(span: &Span, error_type: &str) {
    span.record(ERROR_TYPE, error_type);
    span.set_status(Status::error(error_type.to_string()));
}

/// Adds the permission decision of a call as a span event (on its
/// `execute_tool` span): decision (`allow`, `ask`, `deny`) and reason.
pub fn permission_event(span: &Span, decision: &Decision) {
    let name = match decision {
        Decision::Allow { .. } => "allow",
        Decision::Ask { .. } => "ask",
        Decision::Deny { .. } => "deny",
    };
    span.add_event(
        PERMISSION_EVENT,
        vec![
            KeyValue::new(PERMISSION_DECISION, name),
            KeyValue::new(PERMISSION_REASON, decision.reason().to_string()),
        ],
    );
}

/// `await_approval {tool}`: the time a call waits for a person (a child of the
/// call's `execute_tool` span).
pub fn approval_span(parent: &Span, tool: &str, call_id: &str, approval_id: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "await_approval",
        otel.name = %span_name(OP_AWAIT_APPROVAL, tool),
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        troupe.approval.id = approval_id,
        troupe.approval.outcome = Empty,
    )
}

/// Records the answer to an approval.
pub fn record_approval(span: &Span, outcome: &ApprovalOutcome) {
    span.record(APPROVAL_OUTCOME, outcome.as_str());
}

/// `compact {trigger}`: one context compaction (`auto`, `manual`, `emergency`,
/// `background`), with the estimate before it.
pub fn compaction_span(parent: &Span, trigger: &str, tokens_before: u64) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "compact",
        otel.name = %span_name(OP_COMPACT, trigger),
        troupe.compaction.trigger = trigger,
        troupe.compaction.tokens_before = token_count(tokens_before),
        troupe.compaction.tokens_after = Empty,
        error.type = Empty,
    )
}

/// Records the estimate after a compaction.
pub fn record_compaction(span: &Span, tokens_after: u64) {
    span.record(COMPACTION_TOKENS_AFTER, token_count(tokens_after));
}

/// `hook {event}`: one hook command run (SPEC §6).
pub fn hook_span(parent: &Span, event: &str, command: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "hook",
        otel.name = %span_name(OP_HOOK, event),
        troupe.hook.event = event,
        troupe.hook.command = command,
        troupe.hook.exit_code = Empty,
        troupe.hook.outcome = Empty,
        error.type = Empty,
    )
}

/// Records how a hook ended: its exit code (if it exited) and outcome
/// (`continue`, `block`, `error`, `timeout`).
pub fn record_hook(span: &Span, exit_code: Option<i32>, outcome: &str) {
    if let Some(code) = exit_code {
        span.record(HOOK_EXIT_CODE, i64::from(code));
    }
    span.record(HOOK_OUTCOME, outcome);
}

/// `initialize {server}`: connecting to an MCP server (span kind client);
/// `transport` is `pipe` for stdio servers and `tcp` for HTTP ones.
pub fn mcp_connect_span(parent: &Span, server: &str, transport: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "mcp",
        otel.name = %span_name(MCP_INITIALIZE, server),
        otel.kind = "client",
        mcp.method.name = MCP_INITIALIZE,
        network.transport = transport,
        troupe.mcp.server = server,
        troupe.mcp.outcome = Empty,
        error.type = Empty,
    )
}

/// `network.transport` of an MCP server's transport (`stdio` or `http`).
pub fn mcp_network_transport(transport: &str) -> &'static str {
    if transport == "stdio" { "pipe" } else { "tcp" }
}

/// Records how connecting to an MCP server ended (`connected`, `failed`,
/// `timed_out`); anything but `connected` is an error.
pub fn record_mcp_connect(span: &Span, outcome: &str) {
    span.record(MCP_OUTCOME, outcome);
    if outcome != "connected" {
        record_error(span, outcome);
    }
}

/// `tools/call {tool}`: one MCP tool call (span kind client), a child of the
/// call's `execute_tool` span; `tool` is the server's own tool name.
pub fn mcp_call_span(parent: &Span, server: &str, tool: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "mcp",
        otel.name = %span_name(MCP_TOOLS_CALL, tool),
        otel.kind = "client",
        mcp.method.name = MCP_TOOLS_CALL,
        gen_ai.operation.name = OP_EXECUTE_TOOL,
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        troupe.mcp.server = server,
        error.type = Empty,
    )
}

// ---- content ----

/// Whether prompt and completion content is recorded (`[telemetry]
/// capture_content`, SPEC §11: only when the user opts in). Every method does
/// nothing when capture is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentCapture {
    enabled: bool,
}

impl ContentCapture {
    /// Capture on or off.
    pub fn new(enabled: bool) -> Self {
        Self { enabled }
    }

    /// True when content is recorded.
    pub fn is_enabled(self) -> bool {
        self.enabled
    }

    /// Records the system prompt on a `chat` span (`gen_ai.system_instructions`).
    pub fn record_system_instructions(self, span: &Span, system: &str) {
        if self.enabled {
            let parts = json!([{ "type": "text", "content": system }]);
            span.set_attribute(SYSTEM_INSTRUCTIONS, parts.to_string());
        }
    }

    /// Records the messages sent on a `chat` span (`gen_ai.input.messages`).
    pub fn record_input_messages(self, span: &Span, messages: &[Message]) {
        if self.enabled {
            span.set_attribute(INPUT_MESSAGES, input_messages_json(messages).to_string());
        }
    }

    /// Records the response on a `chat` span (`gen_ai.output.messages`).
    pub fn record_output_message(self, span: &Span, message: &Message, reason: &StopReason) {
        if self.enabled {
            span.set_attribute(
                OUTPUT_MESSAGES,
                output_messages_json(message, reason).to_string(),
            );
        }
    }

    /// Records a call's arguments on its `execute_tool` span.
    pub fn record_tool_arguments(self, span: &Span, arguments: &str) {
        if self.enabled {
            span.set_attribute(TOOL_CALL_ARGUMENTS, arguments.to_string());
        }
    }

    /// Records a call's result on its `execute_tool` span.
    pub fn record_tool_result(self, span: &Span, result: &ToolResult) {
        if self.enabled {
            span.set_attribute(TOOL_CALL_RESULT, result_text(result));
        }
    }
}

/// Messages in the conventions' JSON shape: `[{role, parts: [...]}]`.
pub(crate) fn input_messages_json(messages: &[Message]) -> serde_json::Value {
    serde_json::Value::Array(messages.iter().map(message_json).collect())
}

/// A response in the conventions' output shape: `[{role, parts, finish_reason}]`.
pub(crate) fn output_messages_json(message: &Message, reason: &StopReason) -> serde_json::Value {
    let mut value = message_json(message);
    if let serde_json::Value::Object(map) = &mut value {
        map.insert(
            "finish_reason".to_string(),
            serde_json::Value::String(finish_reason(reason).into_owned()),
        );
    }
    serde_json::Value::Array(vec![value])
}

fn message_json(message: &Message) -> serde_json::Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let parts: Vec<serde_json::Value> = message.content.iter().map(part_json).collect();
    json!({ "role": role, "parts": parts })
}

fn part_json(block: &ContentBlock) -> serde_json::Value {
    match block {
        ContentBlock::Text { text } => json!({ "type": "text", "content": text }),
        ContentBlock::Thinking { thinking, .. } => {
            json!({ "type": "reasoning", "content": thinking })
        }
        ContentBlock::RedactedThinking { .. } => json!({ "type": "reasoning", "redacted": true }),
        ContentBlock::ToolCall(call) => json!({
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            // Malformed arguments are kept as the text the model wrote.
            "arguments": call
                .input_value()
                .unwrap_or_else(|_| serde_json::Value::String(call.input.clone())),
        }),
        ContentBlock::ToolResult(result) => json!({
            "type": "tool_call_response",
            "id": result.call_id,
            "response": result_text(result),
        }),
        // Image bytes are not copied into spans; the type and size say what was there.
        ContentBlock::Image { media_type, data } => json!({
            "type": "blob",
            "modality": "image",
            "mime_type": media_type,
            "size": data.len(),
        }),
    }
}

/// The text of a result, images noted by type.
fn result_text(result: &ToolResult) -> String {
    let mut out = String::new();
    for part in &result.content {
        if !out.is_empty() {
            out.push('\n');
        }
        match part {
            ToolOutputPart::Text { text } => out.push_str(text),
            ToolOutputPart::Image { media_type, .. } => {
                out.push_str("[image ");
                out.push_str(media_type);
                out.push(']');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::ToolCall;

    #[test]
    fn span_names_follow_the_conventions() {
        assert_eq!(
            chat_span_name("claude-sonnet-4-5"),
            "chat claude-sonnet-4-5"
        );
        assert_eq!(tool_span_name("read_file"), "execute_tool read_file");
        assert_eq!(agent_span_name("main"), "invoke_agent main");
        assert_eq!(span_name("initialize", ""), "initialize");
    }

    #[test]
    fn error_types_are_stable_names() {
        let kinds = [
            (ToolErrorKind::Denied, "denied"),
            (ToolErrorKind::UnknownTool, "unknown_tool"),
            (ToolErrorKind::InvalidArguments, "invalid_arguments"),
            (ToolErrorKind::Failed, "tool_error"),
            (ToolErrorKind::Panicked, "panic"),
            (ToolErrorKind::TimedOut, "timeout"),
            (ToolErrorKind::Cancelled, "cancelled"),
        ];
        for (kind, name) in kinds {
            assert_eq!(kind.as_str(), name);
        }
        assert_eq!(
            provider_error_type(ProviderErrorKind::RateLimited),
            "rate_limited"
        );
        assert_eq!(run_error_type(RunStatus::Error), Some("error"));
        assert_eq!(run_error_type(RunStatus::Interrupted), Some("interrupted"));
        assert_eq!(run_error_type(RunStatus::Finished), None);
        assert_eq!(run_error_type(RunStatus::Stopped), None);
        assert_eq!(run_error_type(RunStatus::Cancelled), None);
    }

    #[test]
    fn finish_reasons_use_neutral_names() {
        assert_eq!(finish_reason(&StopReason::EndTurn), "end_turn");
        assert_eq!(finish_reason(&StopReason::ToolUse), "tool_use");
        assert_eq!(finish_reason(&StopReason::MaxTokens), "max_tokens");
        assert_eq!(finish_reason(&StopReason::StopSequence), "stop_sequence");
        assert_eq!(finish_reason(&StopReason::Refusal), "refusal");
        assert_eq!(finish_reason(&StopReason::Other("pause".into())), "pause");
    }

    #[test]
    fn input_tokens_include_cached_tokens() {
        let usage = Usage {
            input: 10,
            output: 5,
            cache_read: 1000,
            cache_write: 200,
        };
        assert_eq!(total_input_tokens(&usage), 1210);
        assert_eq!(token_count(u64::MAX), i64::MAX);
        assert_eq!(token_count(42), 42);
    }

    #[test]
    fn messages_map_to_convention_parts() {
        let messages = vec![
            Message::user_text("list files"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "use glob".into(),
                        signature: None,
                    },
                    ContentBlock::ToolCall(ToolCall {
                        id: "call_1".into(),
                        name: "glob".into(),
                        input: r#"{"pattern":"*.rs"}"#.into(),
                    }),
                    ContentBlock::ToolCall(ToolCall {
                        id: "call_2".into(),
                        name: "glob".into(),
                        input: "{broken".into(),
                    }),
                ],
            },
            Message::tool_results(vec![ToolResult {
                call_id: "call_1".into(),
                content: vec![
                    ToolOutputPart::Text {
                        text: "a.rs".into(),
                    },
                    ToolOutputPart::Image {
                        media_type: "image/png".into(),
                        data: "AAAA".into(),
                    },
                ],
                is_error: false,
            }]),
            Message {
                role: Role::User,
                content: vec![ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "AAAAAAAA".into(),
                }],
            },
        ];
        let value = input_messages_json(&messages);
        let expected = json!([
            {"role": "user", "parts": [{"type": "text", "content": "list files"}]},
            {"role": "assistant", "parts": [
                {"type": "reasoning", "content": "use glob"},
                {"type": "tool_call", "id": "call_1", "name": "glob", "arguments": {"pattern": "*.rs"}},
                {"type": "tool_call", "id": "call_2", "name": "glob", "arguments": "{broken"}
            ]},
            {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "call_1", "response": "a.rs\n[image image/png]"}
            ]},
            {"role": "user", "parts": [
                {"type": "blob", "modality": "image", "mime_type": "image/png", "size": 8}
            ]}
        ]);
        assert_eq!(value, expected);
    }

    #[test]
    fn output_message_carries_the_finish_reason() {
        let value = output_messages_json(&Message::assistant_text("done"), &StopReason::EndTurn);
        assert_eq!(
            value,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "done"}], "finish_reason": "end_turn"}])
        );
    }
}
