//! The protocol-neutral conversation model (SPEC §2).
//!
//! Everything above the provider adapters speaks these types: messages made of
//! content blocks, token usage, stop reasons. Nothing here knows a wire format;
//! `llm::anthropic`, `llm::openai` and `llm::openai_responses` map these types
//! to and from their protocols.
//!
//! Tool input stays raw JSON text end to end ([`ToolCall::input`]): no float round
//! trip of big integers, and a malformed argument string reaches the tool, which
//! reports the parse error to the model.

use serde::{Deserialize, Serialize};

/// Who said a message. Tool results travel in [`Role::Tool`] messages; the
/// adapters map them to their protocol (Anthropic: a user message of
/// `tool_result` blocks; OpenAI: one `role:"tool"` message per result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A person (or the runtime speaking for one: notices, reminders).
    User,
    /// The model.
    Assistant,
    /// Results of the tool calls of the preceding assistant message.
    Tool,
}

impl Role {
    /// The role's name as it is stored and shown: `user`, `assistant`, `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One complete tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned call id; results are paired with calls by this id.
    pub id: String,
    /// Tool name as the model wrote it (it may name no registered tool).
    pub name: String,
    /// The arguments exactly as the model produced them: JSON text, possibly
    /// malformed. An empty argument string is normalised to `{}` by the adapters.
    pub input: String,
}

impl ToolCall {
    /// Parses [`ToolCall::input`] as JSON, for callers that need a value.
    pub fn input_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.input)
    }
}

/// One part of a tool result: text or an image (MCP tools may return images).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolOutputPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A base64-encoded image.
    Image {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Base64 data without a `data:` prefix.
        data: String,
    },
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The [`ToolCall::id`] this result answers.
    pub call_id: String,
    /// Result content, in order.
    pub content: Vec<ToolOutputPart>,
    /// True when the call failed (denied, invalid arguments, tool error, panic,
    /// timeout, cancellation). The model sees the text either way.
    pub is_error: bool,
}

impl ToolResult {
    /// A text-only result.
    pub fn text(call_id: impl Into<String>, text: impl Into<String>, is_error: bool) -> Self {
        Self {
            call_id: call_id.into(),
            content: vec![ToolOutputPart::Text { text: text.into() }],
            is_error,
        }
    }

    /// All text parts joined with newlines (images are skipped).
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let ToolOutputPart::Text { text } = part {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// Size in bytes of the text and image data carried by this result.
    pub fn content_bytes(&self) -> usize {
        self.content
            .iter()
            .map(|part| match part {
                ToolOutputPart::Text { text } => text.len(),
                ToolOutputPart::Image { data, .. } => data.len(),
            })
            .sum()
    }
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text (never empty in a well-formed history).
        text: String,
    },
    /// Extended thinking, kept with its provider signature so it can be sent back.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature over the thinking; required to send it back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Thinking the provider returned encrypted (`redacted_thinking`); sent back verbatim.
    RedactedThinking {
        /// Opaque provider data.
        data: String,
    },
    /// A tool call (assistant messages only).
    ToolCall(ToolCall),
    /// A tool result (tool messages only).
    ToolResult(ToolResult),
    /// An image (user messages).
    Image {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Base64 data.
        data: String,
    },
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message of one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// An assistant message of one text block.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// A tool message carrying the given results in order.
    pub fn tool_results(results: Vec<ToolResult>) -> Self {
        Self {
            role: Role::Tool,
            content: results.into_iter().map(ContentBlock::ToolResult).collect(),
        }
    }

    /// The tool calls of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The tool results of this message, in order.
    pub fn tool_results_iter(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result),
            _ => None,
        })
    }

    /// All text blocks joined without separator.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// Number of characters of content, used by the token estimate (SPEC §10).
    pub fn char_len(&self) -> usize {
        self.content
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => text.chars().count(),
                ContentBlock::Thinking { thinking, .. } => thinking.chars().count(),
                ContentBlock::RedactedThinking { data } => data.len(),
                ContentBlock::ToolCall(call) => call.name.len() + call.input.chars().count(),
                ContentBlock::ToolResult(result) => result.content_bytes(),
                ContentBlock::Image { data, .. } => data.len(),
            })
            .sum()
    }
}

/// Token usage of one model response. Cache fields are zero when the provider
/// reports none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens not read from or written to the cache.
    pub input: u64,
    /// Output tokens (thinking included).
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
}

impl Usage {
    /// Sum of every field: the size of the context this response saw plus what it added.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// Why a model response ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The response hit `max_tokens`.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The model refused.
    Refusal,
    /// A reason this version does not know, kept verbatim.
    Other(String),
}

impl StopReason {
    /// Maps an Anthropic `stop_reason` or OpenAI `finish_reason` string.
    pub fn from_wire(reason: &str) -> Self {
        match reason {
            "end_turn" | "stop" => Self::EndTurn,
            "tool_use" | "tool_calls" | "function_call" => Self::ToolUse,
            "max_tokens" | "length" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" | "content_filter" => Self::Refusal,
            other => Self::Other(other.to_string()),
        }
    }

    /// The name used in events and the store.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
            Self::Other(other) => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_input_keeps_big_integers_and_bad_json_verbatim() {
        let call = ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            input: r#"{"timeout":9007199254740993}"#.into(),
        };
        let json = serde_json::to_string(&ContentBlock::ToolCall(call.clone())).unwrap();
        let back: ContentBlock = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ContentBlock::ToolCall(call));
        assert!(json.contains("9007199254740993"));

        let bad = ToolCall {
            id: "c2".into(),
            name: "bash".into(),
            input: r#"{"command": "ls"#.into(),
        };
        assert!(bad.input_value().is_err());
    }

    #[test]
    fn stop_reasons_map_both_protocols() {
        assert_eq!(StopReason::from_wire("end_turn"), StopReason::EndTurn);
        assert_eq!(StopReason::from_wire("stop"), StopReason::EndTurn);
        assert_eq!(StopReason::from_wire("tool_calls"), StopReason::ToolUse);
        assert_eq!(StopReason::from_wire("length"), StopReason::MaxTokens);
        assert_eq!(
            StopReason::from_wire("pause_turn"),
            StopReason::Other("pause_turn".into())
        );
        assert_eq!(StopReason::from_wire("pause_turn").as_str(), "pause_turn");
    }

    #[test]
    fn protocols_have_their_config_names_and_share_openai_defaults() {
        for protocol in [
            Protocol::Anthropic,
            Protocol::OpenAi,
            Protocol::OpenAiResponses,
        ] {
            let json = serde_json::to_string(&protocol).unwrap();
            assert_eq!(json, format!("\"{}\"", protocol.as_str()));
            assert_eq!(serde_json::from_str::<Protocol>(&json).unwrap(), protocol);
        }
        let responses = Protocol::OpenAiResponses;
        assert_eq!(responses.as_str(), "openai-responses");
        assert_eq!(responses.default_api_key_env(), "OPENAI_API_KEY");
        assert_eq!(responses.base_url_env(), "OPENAI_BASE_URL");
        assert_eq!(responses.public_base_url(), "https://api.openai.com/v1");
        assert_eq!(responses.default_model(), "gpt-5");
    }

    #[test]
    fn usage_total_and_add() {
        let mut a = Usage {
            input: 3,
            output: 1,
            cache_read: 18639,
            cache_write: 0,
        };
        assert_eq!(a.total(), 18643);
        a.add(&Usage {
            input: 1,
            output: 1,
            cache_read: 1,
            cache_write: 1,
        });
        assert_eq!(a.cache_write, 1);
        assert_eq!(a.total(), 18647);
    }

    #[test]
    fn message_helpers() {
        let msg = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "a".into() },
                ContentBlock::ToolCall(ToolCall {
                    id: "1".into(),
                    name: "read_file".into(),
                    input: "{}".into(),
                }),
                ContentBlock::Text { text: "b".into() },
            ],
        };
        assert_eq!(msg.text(), "ab");
        assert_eq!(msg.tool_calls().count(), 1);
        let results = Message::tool_results(vec![ToolResult::text("1", "ok", false)]);
        assert_eq!(
            results.tool_results_iter().next().unwrap().joined_text(),
            "ok"
        );
    }
}

/// The system prompt in two parts (SPEC §2 prompt caching).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemPrompt {
    /// Identity, rules, tool policy, style, project instructions, memory:
    /// byte-identical for the life of a session. Anthropic puts a cache
    /// breakpoint on it.
    pub stable: String,
    /// Working directory, platform, date (to the day), git status, model, active
    /// skills. No cache breakpoint.
    pub environment: String,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name, `^[A-Za-z0-9_-]{1,64}$`.
    pub name: String,
    /// Description written for the model.
    pub description: String,
    /// JSON Schema (an object schema) of the tool's arguments.
    pub input_schema: serde_json::Value,
}

/// What kind of failure a provider call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// The prompt exceeds the model's context window (Anthropic 400
    /// `prompt is too long`, OpenAI `context_length_exceeded`).
    PromptTooLong,
    /// HTTP 429 rate limit (retryable).
    RateLimited,
    /// HTTP 529 or a mid-stream `overloaded_error` (retryable).
    Overloaded,
    /// HTTP 500/502/503 or another 5xx (500/502/503 are retryable).
    Server,
    /// HTTP 401/403: the key is missing, wrong, or lacks permission.
    Authentication,
    /// Out of quota or credit (a 429 that must not be retried).
    Quota,
    /// Another 4xx: the request was rejected as invalid.
    InvalidRequest,
    /// The connection failed or was reset (retryable before delivery).
    Connection,
    /// Nothing arrived for the idle timeout.
    IdleTimeout,
    /// The stream broke or ended before the response was complete.
    StreamBroken,
    /// The provider sent something that is not valid for its protocol
    /// (malformed SSE data, non-JSON error body, unknown error shape).
    MalformedResponse,
    /// The request could not be built (bad base URL, missing API key).
    Configuration,
}

impl ProviderErrorKind {
    /// Name used in `error{kind}` events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PromptTooLong => "prompt_too_long",
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::Server => "server",
            Self::Authentication => "authentication",
            Self::Quota => "quota",
            Self::InvalidRequest => "invalid_request",
            Self::Connection => "connection",
            Self::IdleTimeout => "idle_timeout",
            Self::StreamBroken => "stream_broken",
            Self::MalformedResponse => "malformed_response",
            Self::Configuration => "configuration",
        }
    }
}

/// Wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// Anthropic Messages API.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// OpenAI Chat Completions API (and compatible servers).
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses API (`POST /v1/responses`).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Protocol {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::OpenAiResponses => "openai-responses",
        }
    }

    /// The environment variable holding this protocol's API key by default.
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::OpenAi | Self::OpenAiResponses => "OPENAI_API_KEY",
        }
    }

    /// The environment variable holding this protocol's base URL.
    pub fn base_url_env(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_BASE_URL",
            Self::OpenAi | Self::OpenAiResponses => "OPENAI_BASE_URL",
        }
    }

    /// The public endpoint. OpenAI's includes the version path, Anthropic's does
    /// not, as in the official SDKs.
    pub fn public_base_url(self) -> &'static str {
        match self {
            Self::Anthropic => "https://api.anthropic.com",
            Self::OpenAi | Self::OpenAiResponses => "https://api.openai.com/v1",
        }
    }

    /// The model used when a provider entry names none.
    pub fn default_model(self) -> &'static str {
        match self {
            Self::Anthropic => "claude-sonnet-4-5",
            Self::OpenAi | Self::OpenAiResponses => "gpt-5",
        }
    }
}
