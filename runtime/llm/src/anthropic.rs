//! Anthropic Messages adapter (SPEC §2): the request body, the SSE event decoder,
//! the error envelope, and the [`Provider`] that ties them to `http`.
//!
//! This is one of the two modules that know a wire format; nothing here leaks
//! past [`ChatRequest`], [`StreamEvent`] and [`ProviderError`]. It must not hold
//! retry or transport logic (that is `http` and `retry`).
//!
//! Request (`POST {base_url}/v1/messages`): the system prompt is sent as two text
//! blocks, Stable with a cache breakpoint and Environment without; tools in the
//! given order; all tool results of a turn become one user message of
//! `tool_result` blocks; consecutive messages of the same wire role are merged
//! (tool results first) so roles alternate; a rolling cache breakpoint marks the
//! last block of the newest message (2 breakpoints in all, the limit is
//! [`MAX_CACHE_BREAKPOINTS`]). Thinking blocks go back with their signatures
//! unchanged so extended thinking stays on across tool turns. `max_tokens` is
//! the resolved configuration's value as is: it already makes room for the
//! thinking budget.
//!
//! Response: the message's id and model first (`message_start`); text and
//! thinking deltas are yielded as they arrive; a tool call is
//! yielded complete at its `content_block_stop`; usage after `message_start` and
//! at `message_stop`, then the stop reason. An `error` event ends the stream with
//! a typed error; a body that ends before `message_stop` is a broken stream.

use std::borrow::Cow;
use std::collections::VecDeque;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use super::http::{self, ErrorResponse, Wire, WireProvider};
use super::retry::RetryPolicy;
use super::sse::{Progress, SseEvent, WireDecoder, excerpt};
use super::{
    ChatRequest, EventStream, Provider, ProviderError, ProviderErrorKind, ResponseMetadata,
    StreamEvent, ToolDefinition,
};
use troupe_config::ResolvedProvider;
use troupe_protocol::model::{ContentBlock, Message, Role, StopReason, ToolOutputPart, Usage};

/// The API version header value this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Path of the Messages endpoint below the base URL.
pub(crate) const MESSAGES_PATH: &str = "/v1/messages";
/// SPEC §2: at most this many cache breakpoints per request (an API limit).
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

// ---------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<ThinkingParam>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<WireBlock<'a>>,
    messages: Vec<WireMessage<'a>>,
}

#[derive(Serialize)]
struct ThinkingParam {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

impl<'a> ImageSource<'a> {
    fn base64(media_type: &'a str, data: &'a str) -> Self {
        Self {
            kind: "base64",
            media_type,
            data,
        }
    }
}

/// Tool input: the model's raw JSON object, or `{}` when it was not one.
struct ToolInput<'a>(Option<&'a RawValue>);

impl<'a> ToolInput<'a> {
    fn parse(input: &'a str) -> Self {
        let raw = serde_json::from_str::<&RawValue>(input)
            .ok()
            .filter(|raw| raw.get().trim_start().starts_with('{'));
        Self(raw)
    }
}

impl Serialize for ToolInput<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(raw) => raw.serialize(serializer),
            None => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResultPart<'a> {
    Text { text: &'a str },
    Image { source: ImageSource<'a> },
}

/// A `tool_result`'s content: a lone text as the plain string the API also
/// accepts (the shorter form, sent with every later request), anything else
/// as a list of parts.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(&'a str),
    Parts(Vec<ResultPart<'a>>),
}

impl<'a> ResultContent<'a> {
    fn of(parts: Vec<ResultPart<'a>>) -> Self {
        match parts.as_slice() {
            [ResultPart::Text { text }] => Self::Text(text),
            _ => Self::Parts(parts),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Self::Parts(parts) if parts.is_empty())
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "ResultContent::is_empty")]
        content: ResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl WireBlock<'_> {
    /// Marks this block as a cache breakpoint; false for blocks that cannot carry one.
    fn set_cache_control(&mut self) -> bool {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => {
                *cache_control = Some(EPHEMERAL);
                true
            }
            Self::Thinking { .. } | Self::RedactedThinking { .. } => false,
        }
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

/// A wire message being assembled: tool results are kept apart so a merged user
/// message lists them first.
struct Pending<'a> {
    role: &'static str,
    results: Vec<WireBlock<'a>>,
    others: Vec<WireBlock<'a>>,
}

const USER: &str = "user";
const ASSISTANT: &str = "assistant";

/// A text worth sending: Anthropic rejects empty and whitespace-only text blocks.
fn sendable(text: &str) -> bool {
    !text.trim().is_empty()
}

fn map_message<'a>(message: &'a Message) -> Pending<'a> {
    let role = match message.role {
        Role::Assistant => ASSISTANT,
        Role::User | Role::Tool => USER,
    };
    let mut pending = Pending {
        role,
        results: Vec::new(),
        others: Vec::new(),
    };
    for block in &message.content {
        match (block, role) {
            (ContentBlock::Text { text }, _) if sendable(text) => {
                pending.others.push(WireBlock::Text {
                    text,
                    cache_control: None,
                });
            }
            (ContentBlock::Image { media_type, data }, USER) => {
                pending.others.push(WireBlock::Image {
                    source: ImageSource::base64(media_type, data),
                    cache_control: None,
                });
            }
            (
                ContentBlock::Thinking {
                    thinking,
                    signature: Some(signature),
                },
                ASSISTANT,
            ) => pending.others.push(WireBlock::Thinking {
                thinking,
                signature,
            }),
            // A Responses reasoning item (a session resumed on another
            // provider) means nothing to Anthropic and would be refused.
            (ContentBlock::RedactedThinking { data }, ASSISTANT)
                if !crate::openai_responses::is_reasoning_item(data) =>
            {
                pending.others.push(WireBlock::RedactedThinking { data });
            }
            (ContentBlock::ToolCall(call), ASSISTANT) => pending.others.push(WireBlock::ToolUse {
                id: &call.id,
                name: &call.name,
                input: ToolInput::parse(&call.input),
                cache_control: None,
            }),
            (ContentBlock::ToolResult(result), USER) => {
                let content = result
                    .content
                    .iter()
                    .filter_map(|part| match part {
                        ToolOutputPart::Text { text } if !text.is_empty() => {
                            Some(ResultPart::Text { text })
                        }
                        ToolOutputPart::Text { .. } => None,
                        ToolOutputPart::Image { media_type, data } => Some(ResultPart::Image {
                            source: ImageSource::base64(media_type, data),
                        }),
                    })
                    .collect();
                pending.results.push(WireBlock::ToolResult {
                    tool_use_id: &result.call_id,
                    content: ResultContent::of(content),
                    is_error: result.is_error,
                    cache_control: None,
                });
            }
            // Empty text, unsigned thinking (refused by the API), and blocks that
            // do not belong to the role are not sent.
            _ => tracing::debug!(role, "dropping a block the Messages API would refuse"),
        }
    }
    pending
}

/// Maps the conversation to Messages API messages: same-role neighbours merged
/// (tool results first), empty messages dropped, a rolling cache breakpoint on
/// the last block of the newest message.
fn map_messages(messages: &[Message]) -> Vec<WireMessage<'_>> {
    let mut merged: Vec<Pending<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let pending = map_message(message);
        if pending.results.is_empty() && pending.others.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some(last) if last.role == pending.role => {
                last.results.extend(pending.results);
                last.others.extend(pending.others);
            }
            _ => merged.push(pending),
        }
    }
    let mut out: Vec<WireMessage<'_>> = merged
        .into_iter()
        .map(|pending| {
            let mut content = pending.results;
            content.extend(pending.others);
            WireMessage {
                role: pending.role,
                content,
            }
        })
        .collect();
    if let Some(last) = out.last_mut() {
        for block in last.content.iter_mut().rev() {
            if block.set_cache_control() {
                break;
            }
        }
    }
    out
}

fn map_tools(tools: &[ToolDefinition]) -> Vec<WireTool<'_>> {
    tools
        .iter()
        .map(|tool| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
        })
        .collect()
}

/// Builds the JSON body of a streaming Messages request (pure; see the module
/// doc for the mapping rules).
pub fn request_body(
    config: &ResolvedProvider,
    request: &ChatRequest,
) -> Result<Vec<u8>, ProviderError> {
    let mut system = Vec::with_capacity(2);
    if sendable(&request.system.stable) {
        system.push(WireBlock::Text {
            text: &request.system.stable,
            cache_control: Some(EPHEMERAL),
        });
    }
    if sendable(&request.system.environment) {
        system.push(WireBlock::Text {
            text: &request.system.environment,
            cache_control: None,
        });
    }
    let body = Body {
        model: &config.model,
        // Sent as resolved: the configuration already made room for the
        // thinking budget (`config::resolve`), so it is never added again here.
        max_tokens: config.max_tokens,
        stream: true,
        thinking: config.thinking_budget.map(|budget_tokens| ThinkingParam {
            kind: "enabled",
            budget_tokens,
        }),
        tools: map_tools(&request.tools),
        system,
        messages: map_messages(&request.messages),
    };
    serde_json::to_vec(&body).map_err(|err| {
        ProviderError::new(
            &config.name,
            ProviderErrorKind::Configuration,
            format!("cannot encode the request: {err}"),
        )
    })
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The token counts of a `prompt is too long: N tokens > M maximum` message
/// (ERRORS.md A2), as `(actual, maximum)`.
pub(crate) fn prompt_too_long_counts(message: &str) -> Option<(u64, u64)> {
    let (_, rest) = message.split_once("prompt is too long: ")?;
    let (actual, rest) = rest.split_once(" tokens > ")?;
    let (maximum, _) = rest.split_once(" maximum")?;
    Some((actual.trim().parse().ok()?, maximum.trim().parse().ok()?))
}

/// The structured prompt-too-long forms of an `invalid_request_error` message.
fn is_structured_prompt_too_long(message: &str) -> bool {
    prompt_too_long_counts(message).is_some()
        || message.contains("input length and `max_tokens` exceed context limit")
}

/// Error kind of an Anthropic error `type` (HTTP body or `error` event).
pub(crate) fn error_kind(
    error_type: &str,
    message: &str,
    status: Option<u16>,
) -> ProviderErrorKind {
    match error_type {
        "invalid_request_error"
            if is_structured_prompt_too_long(message)
                || http::is_prompt_too_long_text(status, message) =>
        {
            ProviderErrorKind::PromptTooLong
        }
        "invalid_request_error" if message.contains("credit balance") => ProviderErrorKind::Quota,
        "invalid_request_error" | "not_found_error" => ProviderErrorKind::InvalidRequest,
        "authentication_error" | "permission_error" => ProviderErrorKind::Authentication,
        "billing_error" => ProviderErrorKind::Quota,
        "request_too_large" => ProviderErrorKind::PromptTooLong,
        "rate_limit_error" => ProviderErrorKind::RateLimited,
        "overloaded_error" => ProviderErrorKind::Overloaded,
        "api_error" | "timeout_error" => ProviderErrorKind::Server,
        _ if http::is_prompt_too_long_text(status, message) => ProviderErrorKind::PromptTooLong,
        _ => status.map_or(ProviderErrorKind::Server, http::status_kind),
    }
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
    #[serde(default)]
    request_id: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: String,
}

/// Classifies an HTTP error response from its `{"type":"error","error":{...}}`
/// envelope, falling back on the status for other bodies.
pub(crate) fn error_from_response(provider: &str, response: &ErrorResponse) -> ProviderError {
    match serde_json::from_str::<ErrorEnvelope>(&response.body) {
        Ok(envelope) => {
            let kind = error_kind(
                &envelope.error.kind,
                &envelope.error.message,
                Some(response.status),
            );
            let mut error = response.error(
                provider,
                kind,
                format!("{}: {}", envelope.error.kind, envelope.error.message),
            );
            if error.request_id.is_none() {
                error.request_id = envelope.request_id;
            }
            error
        }
        Err(_) => response.unstructured(provider),
    }
}

// ---------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct Tagged<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overrides the fields of `usage` this snapshot carries.
    fn apply(self, usage: &mut Usage) {
        if let Some(value) = self.input_tokens {
            usage.input = value;
        }
        if let Some(value) = self.output_tokens {
            usage.output = value;
        }
        if let Some(value) = self.cache_creation_input_tokens {
            usage.cache_write = value;
        }
        if let Some(value) = self.cache_read_input_tokens {
            usage.cache_read = value;
        }
    }
}

#[derive(Deserialize)]
struct MessageStart {
    message: StartMessage,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct BlockStart<'a> {
    index: u64,
    #[serde(borrow)]
    content_block: StartBlock<'a>,
}

#[derive(Deserialize)]
struct StartBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BlockDelta<'a> {
    index: u64,
    #[serde(borrow)]
    delta: Delta<'a>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
}

#[derive(Deserialize)]
struct BlockStop {
    index: u64,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    delta: Option<MessageDeltaBody>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A content block between its start and stop.
enum OpenBlock {
    /// Text or thinking: deltas are yielded as they come.
    Streamed,
    /// A tool call whose JSON input is being accumulated.
    ToolUse {
        id: String,
        name: String,
        json: String,
        /// The `input` of `content_block_start`, used when no delta carries any.
        start_input: Option<String>,
    },
    /// A block type this adapter does not surface (server tools, citations...).
    Ignored,
}

/// The event kinds of the Messages stream (SPEC §2).
const EVENT_KINDS: [&str; 8] = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
];

/// Decoder of one Messages response.
pub(crate) struct AnthropicDecoder {
    provider: String,
    request_id: Option<String>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    tool_calls: usize,
    open: Vec<(u64, OpenBlock)>,
}

impl AnthropicDecoder {
    pub(crate) fn new(provider: &str, request_id: Option<String>) -> Self {
        Self {
            provider: provider.to_string(),
            request_id,
            usage: Usage::default(),
            stop_reason: None,
            tool_calls: 0,
            open: Vec::new(),
        }
    }

    fn parse<'d, T: Deserialize<'d>>(&self, name: &str, data: &'d str) -> Result<T, ProviderError> {
        serde_json::from_str(data).map_err(|err| self.malformed(name, data, &err))
    }

    fn malformed(&self, name: &str, data: &str, err: &serde_json::Error) -> ProviderError {
        ProviderError::new(
            &self.provider,
            ProviderErrorKind::MalformedResponse,
            format!("malformed `{name}` event: {err}; data: {}", excerpt(data)),
        )
        .with_request_id(self.request_id.clone())
    }

    fn open_block(&mut self, index: u64) -> Option<&mut OpenBlock> {
        self.open
            .iter_mut()
            .find(|(open, _)| *open == index)
            .map(|(_, block)| block)
    }

    fn handle(
        &mut self,
        name: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Progress, ProviderError> {
        match name {
            "message_start" => {
                let start: MessageStart = self.parse(name, data)?;
                let metadata = ResponseMetadata {
                    id: start.message.id.filter(|id| !id.is_empty()),
                    model: start.message.model.filter(|model| !model.is_empty()),
                };
                if metadata != ResponseMetadata::default() {
                    out.push_back(StreamEvent::Metadata(metadata));
                }
                if let Some(usage) = start.message.usage {
                    usage.apply(&mut self.usage);
                }
                out.push_back(StreamEvent::Usage(self.usage));
            }
            "content_block_start" => {
                let start: BlockStart<'_> = self.parse(name, data)?;
                let block = start.content_block;
                let open = match block.kind.as_ref() {
                    "text" => {
                        if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::TextDelta(text));
                        }
                        OpenBlock::Streamed
                    }
                    "thinking" => {
                        if let Some(thinking) = block.thinking.filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::ThinkingDelta(thinking));
                        }
                        OpenBlock::Streamed
                    }
                    "redacted_thinking" => {
                        out.push_back(StreamEvent::RedactedThinking(
                            block.data.unwrap_or_default(),
                        ));
                        OpenBlock::Ignored
                    }
                    "tool_use" => OpenBlock::ToolUse {
                        id: block.id.unwrap_or_default(),
                        name: block.name.unwrap_or_default(),
                        json: String::new(),
                        start_input: block.input.map(|raw| raw.get().to_string()),
                    },
                    _ => OpenBlock::Ignored,
                };
                self.open.retain(|(index, _)| *index != start.index);
                self.open.push((start.index, open));
            }
            "content_block_delta" => {
                let delta: BlockDelta<'_> = self.parse(name, data)?;
                let index = delta.index;
                let delta = delta.delta;
                match delta.kind.as_ref() {
                    "text_delta" => {
                        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::TextDelta(text));
                        }
                    }
                    "thinking_delta" => {
                        if let Some(thinking) = delta.thinking.filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::ThinkingDelta(thinking));
                        }
                    }
                    "signature_delta" => {
                        if let Some(signature) = delta.signature {
                            out.push_back(StreamEvent::ThinkingSignature(signature));
                        }
                    }
                    "input_json_delta" => {
                        if let (Some(OpenBlock::ToolUse { json, .. }), Some(part)) =
                            (self.open_block(index), delta.partial_json)
                        {
                            json.push_str(&part);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let stop: BlockStop = self.parse(name, data)?;
                if let Some(position) = self.open.iter().position(|(i, _)| *i == stop.index) {
                    let (_, block) = self.open.swap_remove(position);
                    if let OpenBlock::ToolUse {
                        id,
                        name,
                        json,
                        start_input,
                    } = block
                    {
                        out.push_back(StreamEvent::ToolCall(troupe_protocol::model::ToolCall {
                            id,
                            name,
                            input: tool_input(json, start_input),
                        }));
                        self.tool_calls += 1;
                    }
                }
            }
            "message_delta" => {
                let delta: MessageDelta = self.parse(name, data)?;
                if let Some(reason) = delta.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(StopReason::from_wire(&reason));
                }
                if let Some(usage) = delta.usage {
                    usage.apply(&mut self.usage);
                }
            }
            "message_stop" => {
                let reason = self.stop_reason.take().unwrap_or(if self.tool_calls > 0 {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                out.push_back(StreamEvent::Usage(self.usage));
                out.push_back(StreamEvent::Stop(reason));
                return Ok(Progress::Finished);
            }
            "error" => {
                let envelope: ErrorEnvelope = self.parse(name, data)?;
                let kind = error_kind(&envelope.error.kind, &envelope.error.message, None);
                return Err(ProviderError::new(
                    &self.provider,
                    kind,
                    format!(
                        "error event during the stream: {}: {}",
                        envelope.error.kind, envelope.error.message
                    ),
                )
                .with_request_id(envelope.request_id.or_else(|| self.request_id.clone())));
            }
            // "ping" and event kinds added after this version.
            _ => {}
        }
        Ok(Progress::Continue)
    }
}

/// The input of a finished tool_use block: the accumulated deltas, else a
/// non-empty `input` from the block start, else `{}`.
fn tool_input(json: String, start_input: Option<String>) -> String {
    if !json.trim().is_empty() {
        return json;
    }
    match start_input {
        Some(input) if !input.trim().is_empty() => {
            let empty = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&input)
                .is_ok_and(|map| map.is_empty());
            if empty { "{}".to_string() } else { input }
        }
        _ => "{}".to_string(),
    }
}

impl WireDecoder for AnthropicDecoder {
    fn on_event(
        &mut self,
        event: SseEvent<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Progress, ProviderError> {
        if EVENT_KINDS.contains(&event.event) {
            return self.handle(event.event, event.data, out);
        }
        if event.event != "message" {
            // An event kind added after this version: ignored, as the API asks.
            return Ok(Progress::Continue);
        }
        // No `event:` line (some proxies strip it): dispatch on the data's type.
        let tagged: Tagged<'_> = self.parse("message", event.data)?;
        let kind = tagged.kind.into_owned();
        self.handle(&kind, event.data, out)
    }

    fn on_end(&mut self, _out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        Err(ProviderError::new(
            &self.provider,
            ProviderErrorKind::StreamBroken,
            "the response stream ended before `message_stop`",
        )
        .with_request_id(self.request_id.clone()))
    }
}

/// Decodes a Messages SSE body into stream events (no HTTP involved: tests and
/// benchmarks feed bytes directly). Errors of the byte stream pass through.
pub fn decode_sse(
    provider: &str,
    bytes: impl futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
) -> EventStream {
    super::sse::decode_body(provider, bytes, AnthropicDecoder::new(provider, None))
}

// ---------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------

/// The protocol pieces `http` needs.
pub(crate) struct AnthropicWire;

impl Wire for AnthropicWire {
    type Decoder = AnthropicDecoder;
    const PATH: &'static str = MESSAGES_PATH;

    fn decoder(&self, provider: &str, request_id: Option<String>) -> AnthropicDecoder {
        AnthropicDecoder::new(provider, request_id)
    }

    fn error(&self, provider: &str, response: &ErrorResponse) -> ProviderError {
        error_from_response(provider, response)
    }

    fn add_headers(
        &self,
        config: &ResolvedProvider,
        headers: &mut HeaderMap,
    ) -> Result<(), ProviderError> {
        let name = &config.name;
        if let Some(key) = &config.api_key {
            headers.insert(
                HeaderName::from_static("x-api-key"),
                http::header_value(name, "x-api-key", key, true)?,
            );
        }
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(())
    }

    fn request_body(
        &self,
        config: &ResolvedProvider,
        request: &ChatRequest,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(config, request)
    }
}

/// Anthropic Messages streaming provider.
pub struct AnthropicProvider(WireProvider<AnthropicWire>);

impl AnthropicProvider {
    /// Builds the provider with the retry policy of the configuration.
    pub fn new(config: &ResolvedProvider) -> Result<Self, ProviderError> {
        Self::with_retry_policy(config, RetryPolicy::with_max_retries(config.max_retries))
    }

    /// Builds the provider with an explicit retry policy.
    pub fn with_retry_policy(
        config: &ResolvedProvider,
        retry: RetryPolicy,
    ) -> Result<Self, ProviderError> {
        WireProvider::new(config, retry, AnthropicWire).map(Self)
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn system(&self) -> &'static str {
        "anthropic"
    }

    fn model(&self) -> &str {
        self.0.model()
    }

    fn stream(&self, request: &ChatRequest) -> EventStream {
        self.0.stream(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;

    fn parse_owned<T: DeserializeOwned>(data: &str) -> T {
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn prompt_too_long_is_read_from_the_structured_error() {
        assert_eq!(
            prompt_too_long_counts("prompt is too long: 208310 tokens > 200000 maximum"),
            Some((208_310, 200_000))
        );
        assert_eq!(
            prompt_too_long_counts(
                "The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"
            ),
            Some((200_049, 200_000))
        );
        assert_eq!(prompt_too_long_counts("prompt is too long"), None);
        use ProviderErrorKind::*;
        assert_eq!(
            error_kind(
                "invalid_request_error",
                "prompt is too long: 209353 tokens > 199999 maximum",
                Some(400)
            ),
            PromptTooLong
        );
        assert_eq!(
            error_kind(
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again",
                Some(400)
            ),
            PromptTooLong
        );
        assert_eq!(
            error_kind(
                "invalid_request_error",
                "messages: field required",
                Some(400)
            ),
            InvalidRequest
        );
    }

    #[test]
    fn error_types_map_to_kinds() {
        use ProviderErrorKind::*;
        for (kind, status, expected) in [
            ("overloaded_error", None, Overloaded),
            ("overloaded_error", Some(529), Overloaded),
            ("api_error", None, Server),
            ("rate_limit_error", Some(429), RateLimited),
            ("authentication_error", Some(401), Authentication),
            ("permission_error", Some(403), Authentication),
            ("not_found_error", Some(404), InvalidRequest),
            ("request_too_large", Some(413), PromptTooLong),
            ("billing_error", Some(402), Quota),
            ("brand_new_error", Some(503), Server),
            ("brand_new_error", None, Server),
        ] {
            assert_eq!(error_kind(kind, "x", status), expected, "{kind}");
        }
        assert_eq!(
            error_kind(
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API.",
                Some(400)
            ),
            Quota
        );
    }

    #[test]
    fn another_protocols_reasoning_items_are_left_out() {
        let item = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}"#;
        let messages = vec![
            Message::user_text("hi"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::RedactedThinking {
                        data: "EqQBCgIYAhIM".into(),
                    },
                    ContentBlock::RedactedThinking { data: item.into() },
                    ContentBlock::Text {
                        text: "hello".into(),
                    },
                ],
            },
        ];
        let wire = serde_json::to_string(&map_messages(&messages)).unwrap();
        assert!(wire.contains("EqQBCgIYAhIM"), "{wire}");
        assert!(!wire.contains("rs_1"), "{wire}");
    }

    #[test]
    fn tool_input_rules() {
        assert_eq!(tool_input(r#"{"a":1}"#.into(), None), r#"{"a":1}"#);
        assert_eq!(tool_input(String::new(), Some("{}".into())), "{}");
        assert_eq!(tool_input("  ".into(), None), "{}");
        assert_eq!(
            tool_input(String::new(), Some(r#"{"q": "x"}"#.into())),
            r#"{"q": "x"}"#
        );
        assert_eq!(tool_input(r#"{"bad"#.into(), None), r#"{"bad"#);
    }

    #[test]
    fn usage_snapshots_override_only_present_fields() {
        let mut usage = Usage::default();
        parse_owned::<WireUsage>(
            r#"{"input_tokens":377,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":1}"#,
        )
        .apply(&mut usage);
        parse_owned::<WireUsage>(r#"{"output_tokens":65}"#).apply(&mut usage);
        assert_eq!(
            usage,
            Usage {
                input: 377,
                output: 65,
                cache_read: 5,
                cache_write: 0
            }
        );
        parse_owned::<WireUsage>(
            r#"{"input_tokens":61,"cache_read_input_tokens":null,"output_tokens":70}"#,
        )
        .apply(&mut usage);
        assert_eq!(usage.input, 61);
        assert_eq!(usage.cache_read, 5);
    }
}
