//! OpenAI Chat Completions adapter (SPEC §2), for api.openai.com and any
//! OpenAI-compatible server (vLLM, llama.cpp, Ollama, DeepSeek) through
//! `base_url`: the request body, the SSE chunk decoder, the error envelope, and
//! the [`Provider`] that ties them to `http`.
//!
//! This is one of the two modules that know a wire format; nothing here leaks
//! past [`ChatRequest`], [`StreamEvent`] and [`ProviderError`]. It must not hold
//! retry or transport logic (that is `http` and `retry`).
//!
//! Request (`POST {base_url}/chat/completions`, the base URL includes `/v1`): one
//! system message (Stable, a blank line, Environment), one `role:"tool"` message
//! per tool result, thinking never sent back, tools in the given order, and
//! `stream_options.include_usage` so usage arrives in the stream.
//!
//! Response: `delta.content` and `delta.reasoning_content`/`delta.reasoning` are
//! yielded as they arrive; tool-call fragments are accumulated by `index` and
//! yielded complete, in index order, when the finish reason arrives; usage and
//! the stop reason close the stream at `[DONE]` (or at the end of the body once a
//! finish reason was seen).

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::{Deserialize, Serialize};

use super::http::{self, ErrorResponse, Wire, WireProvider};
use super::retry::RetryPolicy;
use super::sse::{Progress, SseEvent, WireDecoder, excerpt};
use super::{
    ChatRequest, EventStream, Provider, ProviderError, ProviderErrorKind, ResponseMetadata,
    StreamEvent,
};
use troupe_config::ResolvedProvider;
use troupe_protocol::model::{
    ContentBlock, Message, Role, StopReason, SystemPrompt, ToolCall, ToolOutputPart, Usage,
};

/// Path of the Chat Completions endpoint below the base URL.
pub(crate) const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";
/// Host whose models take `max_completion_tokens`.
pub(crate) const OPENAI_HOST: &str = "api.openai.com";
/// Text standing in for an image in a tool message (tool messages carry text only).
pub const IMAGE_OMITTED: &str = "[image omitted]";
/// The data payload that ends a Chat Completions stream.
pub(crate) const DONE: &str = "[DONE]";

/// Whether the token limit is sent as `max_completion_tokens` (true) or
/// `max_tokens` (false).
///
/// api.openai.com's newer (reasoning) models reject `max_tokens` with
/// `unsupported_parameter`, while many OpenAI-compatible servers only know
/// `max_tokens`; so the newer name is used for the OpenAI host only.
pub(crate) fn uses_max_completion_tokens(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .ok()
        .and_then(|url| {
            url.host_str()
                .map(|host| host.eq_ignore_ascii_case(OPENAI_HOST))
        })
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    messages: Vec<WireMessage<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionDef<'a>,
}

#[derive(Serialize)]
struct FunctionDef<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: String,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(String),
    Parts(Vec<UserPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum UserPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionCall<'a>,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// The text of a tool result as OpenAI's protocols carry it: the non-empty
/// text parts joined with newlines, an image standing as [`IMAGE_OMITTED`].
pub(crate) fn tool_output_text(result: &troupe_protocol::model::ToolResult) -> String {
    let mut content = String::new();
    for part in &result.content {
        let text = match part {
            ToolOutputPart::Text { text } if text.is_empty() => continue,
            ToolOutputPart::Text { text } => text.as_str(),
            ToolOutputPart::Image { .. } => IMAGE_OMITTED,
        };
        if !content.is_empty() {
            content.push('\n');
        }
        content.push_str(text);
    }
    content
}

fn tool_message<'a>(result: &'a troupe_protocol::model::ToolResult) -> WireMessage<'a> {
    WireMessage::Tool {
        tool_call_id: &result.call_id,
        content: tool_output_text(result),
    }
}

fn user_message(message: &Message) -> Option<WireMessage<'_>> {
    let has_image = message
        .content
        .iter()
        .any(|block| matches!(block, ContentBlock::Image { .. }));
    if has_image {
        let parts: Vec<UserPart<'_>> = message
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    Some(UserPart::Text { text })
                }
                ContentBlock::Image { media_type, data } => Some(UserPart::ImageUrl {
                    image_url: ImageUrl {
                        url: format!("data:{media_type};base64,{data}"),
                    },
                }),
                _ => None,
            })
            .collect();
        return Some(WireMessage::User {
            content: UserContent::Parts(parts),
        });
    }
    let text = joined_text(&message.content)?;
    Some(WireMessage::User {
        content: UserContent::Text(text),
    })
}

/// The non-blank text blocks joined with newlines, or `None` when there are none.
pub(crate) fn joined_text(blocks: &[ContentBlock]) -> Option<String> {
    let mut out: Option<String> = None;
    for block in blocks {
        if let ContentBlock::Text { text } = block
            && !text.trim().is_empty()
        {
            match &mut out {
                Some(joined) => {
                    joined.push('\n');
                    joined.push_str(text);
                }
                None => out = Some(text.clone()),
            }
        }
    }
    out
}

fn assistant_message(message: &Message) -> Option<WireMessage<'_>> {
    let tool_calls: Vec<WireToolCall<'_>> = message
        .tool_calls()
        .map(|call| WireToolCall {
            id: &call.id,
            kind: "function",
            function: FunctionCall {
                name: &call.name,
                arguments: if call.input.trim().is_empty() {
                    "{}"
                } else {
                    &call.input
                },
            },
        })
        .collect();
    let content = joined_text(&message.content);
    if content.is_none() && tool_calls.is_empty() {
        return None;
    }
    Some(WireMessage::Assistant {
        content,
        tool_calls,
    })
}

fn map_messages<'a>(request: &'a ChatRequest, out: &mut Vec<WireMessage<'a>>) {
    for message in &request.messages {
        // Tool results become one tool message each, wherever they appear.
        for result in message.tool_results_iter() {
            out.push(tool_message(result));
        }
        let mapped = match message.role {
            Role::User | Role::Tool => user_message(message),
            Role::Assistant => assistant_message(message),
        };
        out.extend(mapped);
    }
}

/// The system prompt as one text (Stable, a blank line, Environment), or
/// `None` when both parts are blank.
pub(crate) fn system_text(system: &SystemPrompt) -> Option<String> {
    let stable = system.stable.trim_end();
    let environment = system.environment.trim();
    match (stable.is_empty(), environment.is_empty()) {
        (true, true) => None,
        (false, true) => Some(system.stable.clone()),
        (true, false) => Some(system.environment.clone()),
        (false, false) => Some(format!("{}\n\n{}", system.stable, system.environment)),
    }
}

/// Builds the JSON body of a streaming Chat Completions request (pure; see the
/// module doc for the mapping rules).
pub fn request_body(
    config: &ResolvedProvider,
    request: &ChatRequest,
) -> Result<Vec<u8>, ProviderError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(content) = system_text(&request.system) {
        messages.push(WireMessage::System { content });
    }
    map_messages(request, &mut messages);
    let completion = uses_max_completion_tokens(&config.base_url);
    let body = Body {
        model: &config.model,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_completion_tokens: completion.then_some(config.max_tokens),
        max_tokens: (!completion).then_some(config.max_tokens),
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: FunctionDef {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.input_schema,
                },
            })
            .collect(),
        messages,
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

/// The fields of an OpenAI-style error object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ErrorFields {
    /// `message`.
    pub message: String,
    /// `type`.
    pub error_type: Option<String>,
    /// `code` (a string, or a number written as one).
    pub code: Option<String>,
}

fn string_field(value: &serde_json::Value, key: &str) -> Option<String> {
    match value.get(key)? {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Reads an error object: `{"error":{...}}` (OpenAI), `{"error":"text"}`
/// (Ollama), or a top-level `{"object":"error",...}` (vLLM).
pub(crate) fn error_fields(value: &serde_json::Value) -> Option<ErrorFields> {
    let fields = |object: &serde_json::Value| ErrorFields {
        message: string_field(object, "message").unwrap_or_default(),
        error_type: string_field(object, "type"),
        code: string_field(object, "code"),
    };
    match value.get("error") {
        Some(object @ serde_json::Value::Object(_)) => Some(fields(object)),
        Some(serde_json::Value::String(text)) => Some(ErrorFields {
            message: text.clone(),
            ..ErrorFields::default()
        }),
        _ if value.get("object").and_then(|o| o.as_str()) == Some("error") => Some(fields(value)),
        _ => None,
    }
}

/// Error kind of an OpenAI error: structured `code`/`type` first, message text
/// second, then the HTTP status (or, mid-stream, the type).
pub(crate) fn error_kind(fields: &ErrorFields, status: Option<u16>) -> ProviderErrorKind {
    let code = fields.code.as_deref();
    let error_type = fields.error_type.as_deref();
    if code == Some("context_length_exceeded") {
        return ProviderErrorKind::PromptTooLong;
    }
    if code == Some("insufficient_quota") || error_type == Some("insufficient_quota") {
        return ProviderErrorKind::Quota;
    }
    if http::is_prompt_too_long_text(status, &fields.message) {
        return ProviderErrorKind::PromptTooLong;
    }
    if let Some(status) = status.filter(|status| !http::is_success(*status)) {
        return http::status_kind(status);
    }
    match code.or(error_type) {
        Some("rate_limit_exceeded" | "rate_limit_error") => ProviderErrorKind::RateLimited,
        Some("invalid_request_error" | "invalid_prompt") => ProviderErrorKind::InvalidRequest,
        Some("invalid_api_key" | "authentication_error") => ProviderErrorKind::Authentication,
        _ => ProviderErrorKind::Server,
    }
}

/// `code: message` (or `type: message`) of an error object, for messages.
pub(crate) fn describe(fields: &ErrorFields) -> String {
    let label = fields
        .code
        .as_deref()
        .or(fields.error_type.as_deref())
        .unwrap_or("error");
    format!("{label}: {}", fields.message)
}

/// Classifies an HTTP error response from its error envelope, falling back on
/// the status for other bodies.
pub(crate) fn error_from_response(provider: &str, response: &ErrorResponse) -> ProviderError {
    let fields = serde_json::from_str::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|value| error_fields(&value));
    match fields {
        Some(fields) => {
            let kind = error_kind(&fields, Some(response.status));
            response.error(provider, kind, describe(&fields))
        }
        None => response.unstructured(provider),
    }
}

// ---------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    delta: Option<ChoiceDelta>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize, Clone, Copy)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// `prompt_tokens` includes the cached tokens; [`Usage::input`] does not.
    fn to_usage(self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0);
        Usage {
            input: self.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output: self.completion_tokens.unwrap_or(0),
            cache_read: cached,
            cache_write: 0,
        }
    }
}

/// A tool call being assembled from fragments.
#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Decoder of one Chat Completions response.
pub(crate) struct OpenAiDecoder {
    provider: String,
    request_id: Option<String>,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<StopReason>,
    usage: Option<Usage>,
    /// The response's id and model were yielded.
    described: bool,
}

impl OpenAiDecoder {
    pub(crate) fn new(provider: &str, request_id: Option<String>) -> Self {
        Self {
            provider: provider.to_string(),
            request_id,
            calls: BTreeMap::new(),
            finish: None,
            usage: None,
            described: false,
        }
    }

    fn error(&self, kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(&self.provider, kind, message).with_request_id(self.request_id.clone())
    }

    /// Queues the accumulated tool calls, in index order.
    fn flush_calls(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        for (index, call) in std::mem::take(&mut self.calls) {
            let Some(name) = call.name.filter(|name| !name.is_empty()) else {
                return Err(self.error(
                    ProviderErrorKind::MalformedResponse,
                    format!("tool call at index {index} has no function name"),
                ));
            };
            let input = if call.arguments.trim().is_empty() {
                "{}".to_string()
            } else {
                call.arguments
            };
            out.push_back(StreamEvent::ToolCall(ToolCall {
                // A server that sends no id still needs results paired with calls.
                id: call.id.unwrap_or_else(|| format!("call_{index}")),
                name,
                input,
            }));
        }
        Ok(())
    }

    /// Queues the closing events of a finished response.
    fn complete(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        let Some(reason) = self.finish.take() else {
            return Err(self.error(
                ProviderErrorKind::StreamBroken,
                "the response stream ended without a finish_reason",
            ));
        };
        self.flush_calls(out)?;
        if let Some(usage) = self.usage {
            out.push_back(StreamEvent::Usage(usage));
        }
        out.push_back(StreamEvent::Stop(reason));
        Ok(())
    }

    fn stream_error(&self, value: &serde_json::Value) -> ProviderError {
        let fields = error_fields(value).unwrap_or_default();
        let kind = error_kind(&fields, None);
        self.error(
            kind,
            format!("error during the stream: {}", describe(&fields)),
        )
    }
}

impl WireDecoder for OpenAiDecoder {
    fn on_event(
        &mut self,
        event: SseEvent<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Progress, ProviderError> {
        let data = event.data.trim();
        if data == DONE {
            self.complete(out)?;
            return Ok(Progress::Finished);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|err| {
            self.error(
                ProviderErrorKind::MalformedResponse,
                format!("malformed stream chunk: {err}; data: {}", excerpt(data)),
            )
        })?;
        if chunk.error.is_some() || chunk.object.as_deref() == Some("error") {
            let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
            return Err(self.stream_error(&value));
        }
        if !self.described {
            let metadata = ResponseMetadata {
                id: chunk.id.filter(|id| !id.is_empty()).map(Cow::into_owned),
                model: chunk
                    .model
                    .filter(|model| !model.is_empty())
                    .map(Cow::into_owned),
            };
            if metadata != ResponseMetadata::default() {
                self.described = true;
                out.push_back(StreamEvent::Metadata(metadata));
            }
        }
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            if let Some(delta) = choice.delta {
                for thinking in [delta.reasoning_content, delta.reasoning]
                    .into_iter()
                    .flatten()
                {
                    if !thinking.is_empty() {
                        out.push_back(StreamEvent::ThinkingDelta(thinking));
                    }
                }
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        out.push_back(StreamEvent::TextDelta(text));
                    }
                }
                for (position, fragment) in delta.tool_calls.into_iter().flatten().enumerate() {
                    let index = fragment.index.unwrap_or(position as u64);
                    let call = self.calls.entry(index).or_default();
                    if call.id.is_none() {
                        call.id = fragment.id.filter(|id| !id.is_empty());
                    }
                    if let Some(function) = fragment.function {
                        if call.name.is_none() {
                            call.name = function.name.filter(|name| !name.is_empty());
                        }
                        if let Some(arguments) = function.arguments {
                            call.arguments.push_str(&arguments);
                        }
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(StopReason::from_wire(&reason));
                self.flush_calls(out)?;
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.to_usage());
        }
        Ok(Progress::Continue)
    }

    fn on_end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        self.complete(out)
    }
}

/// Decodes a Chat Completions SSE body into stream events (no HTTP involved:
/// tests and benchmarks feed bytes directly). Errors of the byte stream pass
/// through.
pub fn decode_sse(
    provider: &str,
    bytes: impl futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
) -> EventStream {
    super::sse::decode_body(provider, bytes, OpenAiDecoder::new(provider, None))
}

// ---------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------

/// Adds `Authorization: Bearer KEY` when the provider has a key (OpenAI's
/// protocols authenticate alike).
pub(crate) fn add_bearer_key(
    config: &ResolvedProvider,
    headers: &mut HeaderMap,
) -> Result<(), ProviderError> {
    if let Some(key) = &config.api_key {
        headers.insert(
            AUTHORIZATION,
            http::header_value(
                &config.name,
                "Authorization",
                &format!("Bearer {key}"),
                true,
            )?,
        );
    }
    Ok(())
}

/// The protocol pieces `http` needs.
pub(crate) struct OpenAiWire;

impl Wire for OpenAiWire {
    type Decoder = OpenAiDecoder;
    const PATH: &'static str = CHAT_COMPLETIONS_PATH;

    fn decoder(&self, provider: &str, request_id: Option<String>) -> OpenAiDecoder {
        OpenAiDecoder::new(provider, request_id)
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

/// OpenAI Chat Completions streaming provider.
pub struct OpenAiProvider(WireProvider<OpenAiWire>);

impl OpenAiProvider {
    /// Builds the provider with the retry policy of the configuration.
    pub fn new(config: &ResolvedProvider) -> Result<Self, ProviderError> {
        Self::with_retry_policy(config, RetryPolicy::with_max_retries(config.max_retries))
    }

    /// Builds the provider with an explicit retry policy.
    pub fn with_retry_policy(
        config: &ResolvedProvider,
        retry: RetryPolicy,
    ) -> Result<Self, ProviderError> {
        WireProvider::new(config, retry, OpenAiWire).map(Self)
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn system(&self) -> &'static str {
        "openai"
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

    fn fields(json: &str) -> ErrorFields {
        error_fields(&serde_json::from_str(json).unwrap()).unwrap()
    }

    #[test]
    fn token_field_depends_on_the_host() {
        assert!(uses_max_completion_tokens("https://api.openai.com/v1"));
        assert!(uses_max_completion_tokens("https://API.OpenAI.com/v1/"));
        assert!(!uses_max_completion_tokens("http://127.0.0.1:8000/v1"));
        assert!(!uses_max_completion_tokens("https://api.deepseek.com/v1"));
        assert!(!uses_max_completion_tokens(
            "https://api.openai.com.evil.example/v1"
        ));
        assert!(!uses_max_completion_tokens("not a url"));
    }

    #[test]
    fn error_shapes_of_compatible_servers() {
        let openai = fields(
            r#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}"#,
        );
        assert_eq!(openai.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(openai.error_type.as_deref(), Some("invalid_request_error"));
        let ollama = fields(r#"{"error":"model \"x\" not found"}"#);
        assert_eq!(ollama.message, "model \"x\" not found");
        let vllm =
            fields(r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#);
        assert_eq!(vllm.code.as_deref(), Some("400"));
        assert!(error_fields(&serde_json::json!({"choices": []})).is_none());
    }

    #[test]
    fn error_kinds_structured_first() {
        use ProviderErrorKind::*;
        let quota = fields(
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
        );
        assert_eq!(error_kind(&quota, Some(429)), Quota);
        let rate = fields(
            r#"{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!(error_kind(&rate, Some(429)), RateLimited);
        assert_eq!(error_kind(&rate, None), RateLimited);
        let long = fields(
            r#"{"error":{"message":"This model's maximum context length is 4097 tokens.","type":"invalid_request_error","param":"messages","code":null}}"#,
        );
        assert_eq!(error_kind(&long, Some(400)), PromptTooLong);
        let ctx = fields(r#"{"error":{"message":"x","code":"context_length_exceeded"}}"#);
        assert_eq!(error_kind(&ctx, None), PromptTooLong);
        let server =
            fields(r#"{"error":{"message":"The server had an error","type":"server_error"}}"#);
        assert_eq!(error_kind(&server, None), Server);
        assert_eq!(error_kind(&server, Some(503)), Server);
        let auth = fields(r#"{"error":{"message":"Incorrect API key","code":"invalid_api_key"}}"#);
        assert_eq!(error_kind(&auth, Some(401)), Authentication);
    }

    #[test]
    fn usage_excludes_cached_tokens_from_input() {
        let usage: WireUsage = serde_json::from_str(
            r#"{"prompt_tokens":339,"completion_tokens":83,"prompt_tokens_details":{"cached_tokens":320}}"#,
        )
        .unwrap();
        assert_eq!(
            usage.to_usage(),
            Usage {
                input: 19,
                output: 83,
                cache_read: 320,
                cache_write: 0
            }
        );
        let plain: WireUsage =
            serde_json::from_str(r#"{"prompt_tokens":14,"completion_tokens":30}"#).unwrap();
        assert_eq!(plain.to_usage().input, 14);
        assert_eq!(plain.to_usage().cache_read, 0);
    }
}
