//! OpenAI Responses adapter (`protocol = "openai-responses"`): the request
//! body, the SSE event decoder, the chaining of stored responses, and the
//! [`Provider`] that ties them to `http`.
//!
//! This is one of the modules that know a wire format; nothing here leaks past
//! [`ChatRequest`], [`StreamEvent`] and [`ProviderError`]. Transport, retries and
//! the error envelope are shared with the Chat Completions adapter.
//!
//! Request (`POST {base_url}/responses`): the system prompt in `instructions`,
//! the whole history in `input` (user and assistant `message` items,
//! `function_call` items with their `call_id`, `function_call_output` items
//! answering them, and the model's `reasoning` items sent back exactly as they
//! came), tools in Responses' flat shape, `store: false`, and
//! `prompt_cache_key` = the session id. With thinking configured the request
//! asks for reasoning summaries and `include: ["reasoning.encrypted_content"]`,
//! so reasoning survives without the provider keeping anything. With
//! `store = true` the provider keeps responses and a request that extends the
//! previous one of its session sends `previous_response_id` and only the items
//! after that response's output.
//!
//! Response: `response.output_text.delta` and
//! `response.reasoning_summary_text.delta` are yielded as they arrive;
//! `response.output_item.done` is the truth for each item (a function call is
//! yielded then, complete; a reasoning item becomes a
//! [`StreamEvent::RedactedThinking`] holding the item's JSON verbatim);
//! argument deltas are keyed by `item_id` and mapped to the `call_id` that
//! `response.output_item.added` announced. The stream ends at
//! `response.completed`, `response.incomplete`, `response.failed` or `error`;
//! a body that closes before one of them is a broken stream.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::http::{ErrorResponse, Wire, WireProvider};
use super::openai::{
    ErrorFields, add_bearer_key, describe, error_fields, error_from_response, error_kind,
    joined_text, system_text, tool_output_text,
};
use super::retry::RetryPolicy;
use super::sse::{Progress, SseEvent, WireDecoder, excerpt};
use super::{
    ChatRequest, EventStream, Provider, ProviderError, ProviderErrorKind, ResponseMetadata,
    StreamEvent,
};
use troupe_config::ResolvedProvider;
use troupe_protocol::model::{ContentBlock, Message, Role, StopReason, ToolCall, Usage};

/// Path of the Responses endpoint below the base URL.
pub(crate) const RESPONSES_PATH: &str = "/responses";
/// What a request asks to be included so reasoning can be sent back statelessly.
pub(crate) const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";
/// Item type of the model's reasoning.
pub(crate) const REASONING_ITEM: &str = "reasoning";

// ---------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_response_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    max_output_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<ReasoningParam>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    include: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    input: &'a [Box<RawValue>],
}

#[derive(Serialize)]
struct ReasoningParam {
    effort: &'static str,
    summary: &'static str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Message {
        role: &'static str,
        content: ItemContent<'a>,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: String,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ItemContent<'a> {
    Text(String),
    Parts(Vec<InputPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InputPart<'a> {
    InputText { text: &'a str },
    InputImage { image_url: String },
}

/// The reasoning effort asked for a thinking budget: up to 4,096 tokens is
/// low, up to 16,384 medium, more is high.
pub(crate) fn effort_for_budget(budget: u32) -> &'static str {
    match budget {
        0..=4_096 => "low",
        4_097..=16_384 => "medium",
        _ => "high",
    }
}

/// Whether a stored reasoning block is a Responses reasoning item that can go
/// back in `input`, and as what: a JSON object of type `reasoning` with an
/// `id`, carrying its encrypted content unless the provider keeps responses
/// (`store`). With `store` it goes back as it came; without, it goes back
/// without its `id`, since the provider kept no item to name and answers an
/// item named by id with 404 ("Items are not persisted when `store` is set to
/// false"). Anything else (another protocol's thinking) is left out.
pub(crate) fn reasoning_item(data: &str, store: bool) -> Option<Box<RawValue>> {
    let mut value: Value = serde_json::from_str(data).ok()?;
    let object = value.as_object_mut()?;
    if object.get("type").and_then(Value::as_str) != Some(REASONING_ITEM)
        || !object.get("id").is_some_and(Value::is_string)
    {
        return None;
    }
    let encrypted = object
        .get("encrypted_content")
        .and_then(Value::as_str)
        .is_some_and(|content| !content.is_empty());
    if store {
        return RawValue::from_string(data.to_owned()).ok();
    }
    if !encrypted {
        return None;
    }
    object.remove("id");
    serde_json::value::to_raw_value(&value).ok()
}

/// Whether a stored reasoning block came from this protocol (a Responses
/// reasoning item), so another protocol's adapter leaves it out: a session
/// resumed on another provider must not send it an item it cannot read.
pub(crate) fn is_reasoning_item(data: &str) -> bool {
    data.trim_start().starts_with('{') && reasoning_item(data, true).is_some()
}

fn raw(item: &Item<'_>) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(item)
}

fn user_item(message: &Message) -> Option<Item<'_>> {
    let has_image = message
        .content
        .iter()
        .any(|block| matches!(block, ContentBlock::Image { .. }));
    if has_image {
        let parts = message
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    Some(InputPart::InputText { text })
                }
                ContentBlock::Image { media_type, data } => Some(InputPart::InputImage {
                    image_url: format!("data:{media_type};base64,{data}"),
                }),
                _ => None,
            })
            .collect();
        return Some(Item::Message {
            role: "user",
            content: ItemContent::Parts(parts),
        });
    }
    Some(Item::Message {
        role: "user",
        content: ItemContent::Text(joined_text(&message.content)?),
    })
}

/// Appends the items of an assistant message, in block order: reasoning items
/// verbatim, text as assistant messages, tool calls as `function_call` items.
fn assistant_items(
    message: &Message,
    store: bool,
    out: &mut Vec<Box<RawValue>>,
) -> Result<(), serde_json::Error> {
    for block in &message.content {
        match block {
            ContentBlock::RedactedThinking { data } => out.extend(reasoning_item(data, store)),
            ContentBlock::Text { text } if !text.trim().is_empty() => {
                out.push(raw(&Item::Message {
                    role: "assistant",
                    content: ItemContent::Text(text.clone()),
                })?);
            }
            ContentBlock::ToolCall(call) => out.push(raw(&Item::FunctionCall {
                call_id: &call.id,
                name: &call.name,
                arguments: if call.input.trim().is_empty() {
                    "{}"
                } else {
                    &call.input
                },
            })?),
            _ => {}
        }
    }
    Ok(())
}

/// The `input` items of a request: the whole history, oldest first (pure).
pub(crate) fn input_items(
    request: &ChatRequest,
    store: bool,
) -> Result<Vec<Box<RawValue>>, serde_json::Error> {
    let mut items = Vec::with_capacity(request.messages.len() * 2);
    for message in &request.messages {
        for result in message.tool_results_iter() {
            items.push(raw(&Item::FunctionCallOutput {
                call_id: &result.call_id,
                output: tool_output_text(result),
            })?);
        }
        match message.role {
            Role::User | Role::Tool => {
                if let Some(item) = user_item(message) {
                    items.push(raw(&item)?);
                }
            }
            Role::Assistant => assistant_items(message, store, &mut items)?,
        }
    }
    Ok(items)
}

/// What the provider keeps of the last completed response of a session
/// (`store = true`): its id and the input items its request sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredResponse {
    /// The response's id.
    pub response_id: String,
    /// The `input` items of the request that produced it, as sent.
    pub input: Vec<String>,
}

/// Whether an item is output of the model (reasoning, a function call, an
/// assistant message): what the provider already holds after a response.
fn is_model_output(item: &RawValue) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(item.get()) else {
        return false;
    };
    match value.get("type").and_then(Value::as_str) {
        Some(REASONING_ITEM | "function_call") => true,
        Some("message") => value.get("role").and_then(Value::as_str) == Some("assistant"),
        _ => false,
    }
}

/// The chaining decision of a stored session (pure): when `items` start with
/// the input of the previous response, followed by that response's output,
/// the request names the previous response and sends only the items after
/// them; otherwise (history compacted or rewritten, nothing new) it sends
/// everything and names no previous response. Returns the previous response
/// id and the index of the first item to send.
pub(crate) fn chain_from<'s>(
    previous: Option<&'s StoredResponse>,
    items: &[Box<RawValue>],
) -> (Option<&'s str>, usize) {
    let Some(previous) = previous else {
        return (None, 0);
    };
    let prefix = previous.input.len();
    let extends = items.len() > prefix
        && items
            .iter()
            .zip(&previous.input)
            .all(|(item, sent)| item.get() == sent.as_str());
    if !extends {
        return (None, 0);
    }
    let first_new = items[prefix..]
        .iter()
        .position(|item| !is_model_output(item))
        .map_or(items.len(), |offset| prefix + offset);
    if first_new == prefix || first_new == items.len() {
        return (None, 0);
    }
    (Some(previous.response_id.as_str()), first_new)
}

fn encode_error(config: &ResolvedProvider, err: &serde_json::Error) -> ProviderError {
    ProviderError::new(
        &config.name,
        ProviderErrorKind::Configuration,
        format!("cannot encode the request: {err}"),
    )
}

/// Builds the JSON body of a streaming Responses request from its `input`
/// items (pure; see the module doc for the mapping rules).
pub(crate) fn body_from_items(
    config: &ResolvedProvider,
    request: &ChatRequest,
    previous_response_id: Option<&str>,
    input: &[Box<RawValue>],
) -> Result<Vec<u8>, ProviderError> {
    let thinking = config.thinking_budget;
    let body = Body {
        model: &config.model,
        stream: true,
        store: config.store,
        previous_response_id,
        instructions: system_text(&request.system),
        max_output_tokens: config.max_tokens,
        reasoning: thinking.map(|budget| ReasoningParam {
            effort: effort_for_budget(budget),
            summary: "auto",
        }),
        include: if thinking.is_some() {
            vec![INCLUDE_ENCRYPTED_REASONING]
        } else {
            Vec::new()
        },
        prompt_cache_key: request.session_id.as_deref().filter(|id| !id.is_empty()),
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.input_schema,
            })
            .collect(),
        input,
    };
    serde_json::to_vec(&body).map_err(|err| encode_error(config, &err))
}

/// Builds the JSON body of a streaming Responses request that sends the
/// whole history (pure; what every request is with `store = false`).
pub fn request_body(
    config: &ResolvedProvider,
    request: &ChatRequest,
) -> Result<Vec<u8>, ProviderError> {
    let items = input_items(request, config.store).map_err(|err| encode_error(config, &err))?;
    body_from_items(config, request, None, &items)
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The delay a rate-limit message asks for ("Please try again in 1.5s",
/// "… in 250ms"), when it names one.
pub(crate) fn delay_in_message(message: &str) -> Option<Duration> {
    let lower = message.to_ascii_lowercase();
    let start = lower.find("try again in ")? + "try again in ".len();
    let rest = &lower[start..];
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let number: f64 = rest[..number_len].parse().ok()?;
    if !number.is_finite() || number < 0.0 {
        return None;
    }
    let unit = rest[number_len..].trim_start();
    let secs = if unit.starts_with("ms") {
        number / 1_000.0
    } else if unit.starts_with('s') {
        number
    } else if unit.starts_with('m') {
        number * 60.0
    } else {
        return None;
    };
    Duration::try_from_secs_f64(secs).ok()
}

// ---------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------

/// A function call being streamed.
#[derive(Default)]
struct PartialCall {
    call_id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Decoder of one Responses stream.
pub(crate) struct ResponsesDecoder {
    provider: String,
    request_id: Option<String>,
    /// Calls announced by `output_item.added`, by item id.
    calls: HashMap<String, PartialCall>,
    /// Text yielded so far, by message item id.
    texts: HashMap<String, String>,
    /// Whether the response produced a function call.
    called: bool,
    /// The response's id and model were yielded.
    described: bool,
}

fn str_of<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get(key).and_then(Value::as_str)
}

fn count(value: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(value, |value, key| value.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The usage of a `response` object: `input_tokens` includes the cached
/// tokens, [`Usage::input`] does not; reasoning tokens are part of
/// `output_tokens`.
pub(crate) fn usage_of(response: &Value) -> Option<Usage> {
    let usage = response.get("usage").filter(|usage| usage.is_object())?;
    let cached = count(usage, &["input_tokens_details", "cached_tokens"]);
    let reasoning = count(usage, &["output_tokens_details", "reasoning_tokens"]);
    tracing::debug!(reasoning_tokens = reasoning, "response usage");
    Some(Usage {
        input: count(usage, &["input_tokens"]).saturating_sub(cached),
        output: count(usage, &["output_tokens"]),
        cache_read: cached,
        cache_write: 0,
    })
}

/// The stop reason of an incomplete response from its
/// `incomplete_details.reason`.
pub(crate) fn incomplete_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("max_output_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None => StopReason::Other("incomplete".to_owned()),
    }
}

impl ResponsesDecoder {
    pub(crate) fn new(provider: &str, request_id: Option<String>) -> Self {
        Self {
            provider: provider.to_owned(),
            request_id,
            calls: HashMap::new(),
            texts: HashMap::new(),
            called: false,
            described: false,
        }
    }

    fn error(&self, kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(&self.provider, kind, message).with_request_id(self.request_id.clone())
    }

    /// An error reported in the stream (`response.failed`, `error`).
    fn stream_error(&self, fields: &ErrorFields) -> ProviderError {
        let kind = error_kind(fields, None);
        let delay = (kind == ProviderErrorKind::RateLimited)
            .then(|| delay_in_message(&fields.message))
            .flatten();
        self.error(
            kind,
            format!("error during the stream: {}", describe(fields)),
        )
        .with_retry_after(delay)
    }

    fn describe_response(&mut self, response: &Value, out: &mut VecDeque<StreamEvent>) {
        if self.described {
            return;
        }
        let metadata = ResponseMetadata {
            id: str_of(response, "id")
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
            model: str_of(response, "model")
                .filter(|model| !model.is_empty())
                .map(str::to_owned),
        };
        if metadata != ResponseMetadata::default() {
            self.described = true;
            out.push_back(StreamEvent::Metadata(metadata));
        }
    }

    fn item_added(&mut self, item: &Value) {
        if str_of(item, "type") != Some("function_call") {
            return;
        }
        let Some(item_id) = str_of(item, "id") else {
            return;
        };
        let call = self.calls.entry(item_id.to_owned()).or_default();
        call.call_id = str_of(item, "call_id")
            .filter(|id| !id.is_empty())
            .map(str::to_owned);
        call.name = str_of(item, "name")
            .filter(|name| !name.is_empty())
            .map(str::to_owned);
        if let Some(arguments) = str_of(item, "arguments") {
            call.arguments = arguments.to_owned();
        }
    }

    fn item_done(
        &mut self,
        item: &Value,
        raw_item: Option<&RawValue>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let item_id = str_of(item, "id").unwrap_or_default();
        match str_of(item, "type") {
            Some("function_call") => {
                let announced = self.calls.remove(item_id).unwrap_or_default();
                let call_id = str_of(item, "call_id")
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned)
                    .or(announced.call_id);
                let name = str_of(item, "name")
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .or(announced.name);
                let (Some(id), Some(name)) = (call_id, name) else {
                    return Err(self.error(
                        ProviderErrorKind::MalformedResponse,
                        format!("function call item {item_id:?} has no call_id or no name"),
                    ));
                };
                let arguments = str_of(item, "arguments")
                    .map(str::to_owned)
                    .unwrap_or(announced.arguments);
                let input = if arguments.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    arguments
                };
                self.called = true;
                out.push_back(StreamEvent::ToolCall(ToolCall { id, name, input }));
            }
            Some(REASONING_ITEM) => {
                if let Some(raw_item) = raw_item {
                    out.push_back(StreamEvent::RedactedThinking(raw_item.get().to_owned()));
                }
            }
            Some("message") => {
                // The done item is the truth: text that never came as deltas
                // is yielded now.
                let full = message_text(item);
                let streamed = self.texts.remove(item_id).unwrap_or_default();
                if let Some(rest) = full.strip_prefix(streamed.as_str())
                    && !rest.is_empty()
                {
                    out.push_back(StreamEvent::TextDelta(rest.to_owned()));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn text_delta(&mut self, event: &Value, out: &mut VecDeque<StreamEvent>) {
        let Some(delta) = str_of(event, "delta").filter(|delta| !delta.is_empty()) else {
            return;
        };
        if let Some(item_id) = str_of(event, "item_id") {
            self.texts
                .entry(item_id.to_owned())
                .or_default()
                .push_str(delta);
        }
        out.push_back(StreamEvent::TextDelta(delta.to_owned()));
    }

    fn finish(&mut self, response: &Value, reason: StopReason, out: &mut VecDeque<StreamEvent>) {
        self.describe_response(response, out);
        if let Some(usage) = usage_of(response) {
            out.push_back(StreamEvent::Usage(usage));
        }
        out.push_back(StreamEvent::Stop(reason));
    }
}

/// The output text (and refusal text) of a message item, joined.
fn message_text(item: &Value) -> String {
    item.get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|part| str_of(part, "text").or_else(|| str_of(part, "refusal")))
                .collect()
        })
        .unwrap_or_default()
}

/// The `item` of an `output_item` event, verbatim.
#[derive(serde::Deserialize)]
struct ItemEvent<'a> {
    #[serde(borrow)]
    item: &'a RawValue,
}

impl WireDecoder for ResponsesDecoder {
    fn on_event(
        &mut self,
        event: SseEvent<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Progress, ProviderError> {
        let data = event.data.trim();
        let value: Value = serde_json::from_str(data).map_err(|err| {
            self.error(
                ProviderErrorKind::MalformedResponse,
                format!("malformed stream event: {err}; data: {}", excerpt(data)),
            )
        })?;
        let kind = str_of(&value, "type").unwrap_or(event.event);
        let response = value.get("response").unwrap_or(&Value::Null);
        match kind {
            "response.created" | "response.in_progress" => self.describe_response(response, out),
            "response.output_item.added" => {
                if let Some(item) = value.get("item") {
                    self.item_added(item);
                }
            }
            "response.function_call_arguments.delta" => {
                if let (Some(item_id), Some(delta)) =
                    (str_of(&value, "item_id"), str_of(&value, "delta"))
                {
                    self.calls
                        .entry(item_id.to_owned())
                        .or_default()
                        .arguments
                        .push_str(delta);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                self.text_delta(&value, out);
            }
            "response.reasoning_summary_text.delta" => {
                if let Some(delta) = str_of(&value, "delta").filter(|delta| !delta.is_empty()) {
                    out.push_back(StreamEvent::ThinkingDelta(delta.to_owned()));
                }
            }
            "response.output_item.done" => {
                let raw_item = serde_json::from_str::<ItemEvent<'_>>(data)
                    .ok()
                    .map(|event| event.item);
                if let Some(item) = value.get("item") {
                    self.item_done(item, raw_item, out)?;
                }
            }
            "response.completed" => {
                let reason = if self.called {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                };
                self.finish(response, reason, out);
                return Ok(Progress::Finished);
            }
            "response.incomplete" => {
                let reason = response
                    .get("incomplete_details")
                    .and_then(|details| str_of(details, "reason"));
                self.finish(response, incomplete_reason(reason), out);
                return Ok(Progress::Finished);
            }
            "response.failed" => {
                let fields = response
                    .get("error")
                    .filter(|error| error.is_object())
                    .map(|error| ErrorFields {
                        message: str_of(error, "message").unwrap_or_default().to_owned(),
                        error_type: str_of(error, "type").map(str::to_owned),
                        code: str_of(error, "code").map(str::to_owned),
                    })
                    .unwrap_or_else(|| ErrorFields {
                        message: "the response failed without an error object".to_owned(),
                        ..ErrorFields::default()
                    });
                return Err(self.stream_error(&fields));
            }
            "error" => {
                // `{"type":"error","code","message"}`, or an error envelope.
                let fields = error_fields(&value).unwrap_or_else(|| ErrorFields {
                    message: str_of(&value, "message").unwrap_or_default().to_owned(),
                    error_type: None,
                    code: str_of(&value, "code").map(str::to_owned),
                });
                return Err(self.stream_error(&fields));
            }
            _ => {}
        }
        Ok(Progress::Continue)
    }

    fn on_end(&mut self, _out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        Err(self.error(
            ProviderErrorKind::StreamBroken,
            "the response stream ended before response.completed",
        ))
    }
}

/// Decodes a Responses SSE body into stream events (no HTTP involved: tests
/// feed bytes directly). Errors of the byte stream pass through.
pub fn decode_sse(
    provider: &str,
    bytes: impl futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
) -> EventStream {
    super::sse::decode_body(provider, bytes, ResponsesDecoder::new(provider, None))
}

// ---------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------

/// The protocol pieces `http` needs.
pub(crate) struct ResponsesWire;

impl Wire for ResponsesWire {
    type Decoder = ResponsesDecoder;
    const PATH: &'static str = RESPONSES_PATH;

    fn decoder(&self, provider: &str, request_id: Option<String>) -> ResponsesDecoder {
        ResponsesDecoder::new(provider, request_id)
    }

    fn error(&self, provider: &str, response: &ErrorResponse) -> ProviderError {
        error_from_response(provider, response)
    }

    fn add_headers(
        &self,
        config: &ResolvedProvider,
        headers: &mut HeaderMap,
    ) -> Result<(), ProviderError> {
        add_bearer_key(config, headers)
    }

    fn request_body(
        &self,
        config: &ResolvedProvider,
        request: &ChatRequest,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(config, request)
    }
}

/// The last stored response of each session (`store = true`).
type StoredResponses = Arc<Mutex<BTreeMap<String, StoredResponse>>>;

/// OpenAI Responses streaming provider.
pub struct OpenAiResponsesProvider {
    wire: WireProvider<ResponsesWire>,
    stored: StoredResponses,
}

impl OpenAiResponsesProvider {
    /// Builds the provider with the retry policy of the configuration.
    pub fn new(config: &ResolvedProvider) -> Result<Self, ProviderError> {
        Self::with_retry_policy(config, RetryPolicy::with_max_retries(config.max_retries))
    }

    /// Builds the provider with an explicit retry policy.
    pub fn with_retry_policy(
        config: &ResolvedProvider,
        retry: RetryPolicy,
    ) -> Result<Self, ProviderError> {
        Ok(Self {
            wire: WireProvider::new(config, retry, ResponsesWire)?,
            stored: Arc::default(),
        })
    }

    /// The chained streaming call of a stored session: the body names the
    /// previous response when the history extends it, and a completed
    /// response becomes the session's previous one.
    fn stream_stored(&self, request: &ChatRequest, session: &str) -> EventStream {
        let config = self.wire.config();
        let items = match input_items(request, true) {
            Ok(items) => items,
            Err(err) => return self.wire.stream_body(Err(encode_error(config, &err))),
        };
        let body = {
            let stored = self
                .stored
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (previous, first) = chain_from(stored.get(session), &items);
            body_from_items(config, request, previous, &items[first..])
        };
        let input: Vec<String> = items.iter().map(|item| item.get().to_owned()).collect();
        let stored = self.stored.clone();
        let session = session.to_owned();
        let mut response_id: Option<String> = None;
        self.wire
            .stream_body(body)
            .inspect(move |event| match event {
                Ok(StreamEvent::Metadata(metadata)) => response_id.clone_from(&metadata.id),
                Ok(StreamEvent::Stop(_)) => {
                    if let Some(id) = response_id.take() {
                        stored
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert(
                                session.clone(),
                                StoredResponse {
                                    response_id: id,
                                    input: input.clone(),
                                },
                            );
                    }
                }
                _ => {}
            })
            .boxed()
    }
}

impl Provider for OpenAiResponsesProvider {
    fn name(&self) -> &str {
        self.wire.name()
    }

    fn system(&self) -> &'static str {
        "openai"
    }

    fn model(&self) -> &str {
        self.wire.model()
    }

    fn stream(&self, request: &ChatRequest) -> EventStream {
        match request.session_id.as_deref() {
            Some(session) if self.wire.config().store && !session.is_empty() => {
                self.stream_stored(request, session)
            }
            _ => self.wire.stream(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_items(items: &[&str]) -> Vec<Box<RawValue>> {
        items
            .iter()
            .map(|item| RawValue::from_string((*item).to_owned()).unwrap())
            .collect()
    }

    const USER: &str = r#"{"type":"message","role":"user","content":"hi"}"#;
    const REASONING: &str = r#"{"type":"reasoning","id":"rs_1","summary":[]}"#;
    const CALL: &str = r#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}"#;
    const OUTPUT: &str = r#"{"type":"function_call_output","call_id":"c1","output":"ok"}"#;

    #[test]
    fn effort_follows_the_budget() {
        assert_eq!(effort_for_budget(1_024), "low");
        assert_eq!(effort_for_budget(4_096), "low");
        assert_eq!(effort_for_budget(16_000), "medium");
        assert_eq!(effort_for_budget(32_000), "high");
    }

    #[test]
    fn reasoning_items_go_back_only_when_they_can_be_used() {
        let encrypted =
            r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}"#;
        assert_eq!(reasoning_item(encrypted, true).unwrap().get(), encrypted);
        // Without store the item goes back whole but for the id naming it.
        assert_eq!(
            reasoning_item(encrypted, false).unwrap().get(),
            r#"{"encrypted_content":"gAAA","summary":[],"type":"reasoning"}"#
        );
        // Without encrypted content only a provider that keeps responses knows it.
        assert!(reasoning_item(REASONING, false).is_none());
        assert_eq!(reasoning_item(REASONING, true).unwrap().get(), REASONING);
        // Another protocol's redacted thinking, or a hostile string, stays out.
        assert!(reasoning_item("EqQBCgIYAhIM", true).is_none());
        assert!(reasoning_item(r#"{"type":"message","id":"m"}"#, true).is_none());
        assert!(reasoning_item(r#"{"type":"reasoning"}"#, true).is_none());
        assert!(reasoning_item("[1,2]", true).is_none());
        assert!(is_reasoning_item(REASONING));
        assert!(!is_reasoning_item("EqQBCgIYAhIM"));
    }

    #[test]
    fn a_stored_session_sends_only_what_follows_the_previous_output() {
        let previous = StoredResponse {
            response_id: "resp_1".into(),
            input: vec![USER.to_owned()],
        };
        let items = raw_items(&[USER, REASONING, CALL, OUTPUT]);
        assert_eq!(chain_from(Some(&previous), &items), (Some("resp_1"), 3));
        assert_eq!(chain_from(None, &items), (None, 0));
        // A rewritten history (compaction) starts over.
        let other = raw_items(&[
            r#"{"type":"message","role":"user","content":"summary"}"#,
            OUTPUT,
        ]);
        assert_eq!(chain_from(Some(&previous), &other), (None, 0));
        // Nothing new after the previous output: everything is sent.
        let no_new = raw_items(&[USER, CALL]);
        assert_eq!(chain_from(Some(&previous), &no_new), (None, 0));
        // No output of the previous response in the history: starts over.
        let no_output = raw_items(&[USER, USER]);
        assert_eq!(chain_from(Some(&previous), &no_output), (None, 0));
        // The same history again (a retry after a failure) is not chained.
        assert_eq!(chain_from(Some(&previous), &raw_items(&[USER])), (None, 0));
    }

    #[test]
    fn rate_limit_delays_in_messages() {
        let d = |text: &str| delay_in_message(text);
        assert_eq!(
            d("Rate limit reached for gpt-5. Please try again in 1.5s."),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            d("Please try again in 250ms."),
            Some(Duration::from_millis(250))
        );
        assert_eq!(d("Please try again in 2m."), Some(Duration::from_secs(120)));
        assert_eq!(d("Please try again later."), None);
        assert_eq!(d("try again in 1e999s"), None);
        assert_eq!(d("no advice"), None);
    }

    #[test]
    fn incomplete_reasons_map_to_stop_reasons() {
        assert_eq!(
            incomplete_reason(Some("max_output_tokens")),
            StopReason::MaxTokens
        );
        assert_eq!(
            incomplete_reason(Some("content_filter")),
            StopReason::Refusal
        );
        assert_eq!(
            incomplete_reason(Some("other")),
            StopReason::Other("other".into())
        );
    }

    #[test]
    fn usage_excludes_cached_tokens_from_input() {
        let response: Value = serde_json::from_str(
            r#"{"usage":{"input_tokens":339,"input_tokens_details":{"cached_tokens":320},"output_tokens":83,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":422}}"#,
        )
        .unwrap();
        assert_eq!(
            usage_of(&response),
            Some(Usage {
                input: 19,
                output: 83,
                cache_read: 320,
                cache_write: 0
            })
        );
        assert_eq!(usage_of(&serde_json::json!({"usage": null})), None);
    }
}
