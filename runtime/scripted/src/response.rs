//! Protocol-neutral scripted responses: what the model "says" on one turn.
//!
//! A [`Response`] is an ordered list of [`Block`]s (thinking, text, tool calls)
//! plus optional usage, stop reason and chunk size. It knows nothing of either
//! wire format: the `render` module turns it into Anthropic or OpenAI bytes for
//! the endpoint it was requested on. This module must not touch HTTP or the
//! server state.
//!
//! The free functions [`text`], [`thinking`], [`tool_call`] and friends start a
//! response; the `and_*` methods append blocks and the `with_*` methods set
//! options:
//!
//! ```
//! use serde_json::json;
//! use troupe_scripted::{text, StopReason, Usage};
//!
//! let reply = text("Let me read both files.")
//!     .and_tool_call("read_file", json!({"path": "src/a.rs"}))
//!     .and_tool_call("read_file", json!({"path": "src/b.rs"}))
//!     .with_usage(Usage::new(1200, 40).with_cache_read(1000));
//! assert_eq!(reply.effective_stop_reason(), StopReason::ToolUse);
//! ```

use serde_json::Value;

/// One content block of a scripted response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// Extended thinking with its provider signature. Anthropic streams it as
    /// `thinking_delta`s closed by one `signature_delta`; OpenAI-compatible
    /// servers stream `reasoning_content` deltas (the signature has no OpenAI
    /// form and is dropped there).
    Thinking {
        /// The thinking text.
        text: String,
        /// The opaque signature the client must send back unchanged.
        signature: String,
    },
    /// An encrypted thinking block (Anthropic `redacted_thinking`); not rendered
    /// on the OpenAI endpoint.
    RedactedThinking {
        /// The opaque payload.
        data: String,
    },
    /// Answer text, streamed in chunks.
    Text(String),
    /// A tool call.
    ToolCall(ToolCall),
}

/// A scripted tool call. `arguments` is raw JSON text, sent byte for byte (split
/// over several deltas when streamed), so a script can also send malformed
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Call id; `None` means "generate a protocol-looking one" (`toolu_…` on the
    /// Anthropic endpoint, `call_…` on the OpenAI endpoint).
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Raw JSON text of the arguments.
    pub arguments: String,
}

/// Token usage reported with a response, in Anthropic's terms:
/// `input_tokens` excludes the cache reads and writes (fixtures/sse/EXPECTED.md
/// point 5). On the OpenAI endpoint `prompt_tokens` is the sum of all three and
/// `prompt_tokens_details.cached_tokens` is the cache read count (point 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
}

impl Usage {
    /// Usage with the given uncached input and output counts and no cache use.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// Sets the cache read count.
    #[must_use]
    pub fn with_cache_read(mut self, tokens: u64) -> Self {
        self.cache_read_input_tokens = tokens;
        self
    }

    /// Sets the cache write count.
    #[must_use]
    pub fn with_cache_creation(mut self, tokens: u64) -> Self {
        self.cache_creation_input_tokens = tokens;
        self
    }

    /// The whole prompt: uncached input plus cache reads and writes (OpenAI's
    /// `prompt_tokens`).
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// Natural end (`end_turn` / `stop`).
    EndTurn,
    /// The response asks for tool calls (`tool_use` / `tool_calls`).
    ToolUse,
    /// Output limit reached (`max_tokens` / `length`).
    MaxTokens,
    /// A stop sequence matched (`stop_sequence` / `stop`).
    StopSequence,
    /// The model refused (`refusal` / `content_filter`).
    Refusal,
}

impl StopReason {
    /// The Anthropic `stop_reason` string.
    pub fn anthropic(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
        }
    }

    /// The OpenAI `finish_reason` string.
    pub fn openai(self) -> &'static str {
        match self {
            Self::EndTurn | Self::StopSequence => "stop",
            Self::ToolUse => "tool_calls",
            Self::MaxTokens => "length",
            Self::Refusal => "content_filter",
        }
    }
}

/// A protocol-neutral scripted model response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    blocks: Vec<Block>,
    usage: Option<Usage>,
    stop_reason: Option<StopReason>,
    chunk_chars: Option<usize>,
}

impl Response {
    /// A response with no content blocks (the model said nothing).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Appends a text block.
    #[must_use]
    pub fn and_text(mut self, text: impl Into<String>) -> Self {
        self.blocks.push(Block::Text(text.into()));
        self
    }

    /// Appends a thinking block with its signature.
    #[must_use]
    pub fn and_thinking(mut self, text: impl Into<String>, signature: impl Into<String>) -> Self {
        self.blocks.push(Block::Thinking {
            text: text.into(),
            signature: signature.into(),
        });
        self
    }

    /// Appends a redacted thinking block.
    #[must_use]
    pub fn and_redacted_thinking(mut self, data: impl Into<String>) -> Self {
        self.blocks
            .push(Block::RedactedThinking { data: data.into() });
        self
    }

    /// Appends a tool call with a generated id; `arguments` is serialised to
    /// compact JSON.
    #[must_use]
    pub fn and_tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.and_block_call(None, name.into(), arguments.to_string())
    }

    /// Appends a tool call with the given id.
    #[must_use]
    pub fn and_tool_call_with_id(
        self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
    ) -> Self {
        self.and_block_call(Some(id.into()), name.into(), arguments.to_string())
    }

    /// Appends a tool call whose arguments are sent as this exact text, valid
    /// JSON or not.
    #[must_use]
    pub fn and_tool_call_raw(self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.and_block_call(None, name.into(), arguments.into())
    }

    /// Appends any block.
    #[must_use]
    pub fn and_block(mut self, block: Block) -> Self {
        self.blocks.push(block);
        self
    }

    fn and_block_call(mut self, id: Option<String>, name: String, arguments: String) -> Self {
        self.blocks.push(Block::ToolCall(ToolCall {
            id,
            name,
            arguments,
        }));
        self
    }

    /// Sets the usage reported with this response. Without it the server
    /// reports an estimate (see [`crate::ServerConfig`]).
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the stop reason (default: see [`Response::effective_stop_reason`]).
    #[must_use]
    pub fn with_stop_reason(mut self, stop_reason: StopReason) -> Self {
        self.stop_reason = Some(stop_reason);
        self
    }

    /// Sets how many characters each streamed text, thinking or argument delta
    /// carries (at least 1; default from [`crate::ServerConfig`]).
    #[must_use]
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = Some(chars);
        self
    }

    /// The content blocks, in order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Mutable access to the blocks (the server fills in generated tool ids).
    pub(crate) fn blocks_mut(&mut self) -> &mut [Block] {
        &mut self.blocks
    }

    /// The scripted usage, if any.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The scripted chunk size, if any.
    pub fn chunk_chars(&self) -> Option<usize> {
        self.chunk_chars
    }

    /// The tool calls of this response, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.blocks.iter().filter_map(|block| match block {
            Block::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The stop reason sent: the scripted one, else `ToolUse` when the response
    /// has tool calls, else `EndTurn`.
    pub fn effective_stop_reason(&self) -> StopReason {
        match self.stop_reason {
            Some(reason) => reason,
            None if self.tool_calls().next().is_some() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        }
    }

    /// Number of characters of model output (text, thinking, arguments), used
    /// for the output-token estimate.
    pub(crate) fn output_chars(&self) -> usize {
        self.blocks
            .iter()
            .map(|block| match block {
                Block::Thinking { text, .. } | Block::Text(text) => text.chars().count(),
                Block::RedactedThinking { data } => data.chars().count(),
                Block::ToolCall(call) => call.name.chars().count() + call.arguments.chars().count(),
            })
            .sum()
    }
}

/// A response made of one text block.
pub fn text(text: impl Into<String>) -> Response {
    Response::empty().and_text(text)
}

/// A response that starts with a thinking block.
pub fn thinking(text: impl Into<String>, signature: impl Into<String>) -> Response {
    Response::empty().and_thinking(text, signature)
}

/// A response made of one tool call with a generated id.
pub fn tool_call(name: impl Into<String>, arguments: Value) -> Response {
    Response::empty().and_tool_call(name, arguments)
}

/// A response made of one tool call with the given id.
pub fn tool_call_with_id(
    id: impl Into<String>,
    name: impl Into<String>,
    arguments: Value,
) -> Response {
    Response::empty().and_tool_call_with_id(id, name, arguments)
}

/// A response made of one tool call whose arguments are this exact text.
pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Response {
    Response::empty().and_tool_call_raw(name, arguments)
}

/// A response made of several parallel tool calls with generated ids.
pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Response {
    calls
        .into_iter()
        .fold(Response::empty(), |response, (name, arguments)| {
            response.and_tool_call(name, arguments)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_stop_reason_follows_tool_calls() {
        assert_eq!(text("hi").effective_stop_reason(), StopReason::EndTurn);
        assert_eq!(
            tool_call("read_file", json!({})).effective_stop_reason(),
            StopReason::ToolUse
        );
        assert_eq!(
            tool_call("read_file", json!({}))
                .with_stop_reason(StopReason::MaxTokens)
                .effective_stop_reason(),
            StopReason::MaxTokens
        );
    }

    #[test]
    fn builders_keep_block_order_and_raw_arguments() {
        let response = thinking("hmm", "sig")
            .and_text("ok")
            .and_tool_call_raw("grep", "{\"pattern\": ")
            .and_tool_call_with_id("toolu_x", "read_file", json!({"path": "a"}));
        assert_eq!(response.blocks().len(), 4);
        let calls: Vec<&ToolCall> = response.tool_calls().collect();
        assert_eq!(calls[0].arguments, "{\"pattern\": ");
        assert_eq!(calls[0].id, None);
        assert_eq!(calls[1].id.as_deref(), Some("toolu_x"));
        assert_eq!(calls[1].arguments, r#"{"path":"a"}"#);
    }

    #[test]
    fn parallel_tool_calls_builder() {
        let response = tool_calls([("a", json!({"x": 1})), ("b", json!({}))]);
        let names: Vec<&str> = response.tool_calls().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn usage_maps_to_openai_prompt_tokens() {
        let usage = Usage::new(3, 1).with_cache_read(10).with_cache_creation(5);
        assert_eq!(usage.prompt_tokens(), 18);
        assert_eq!(StopReason::MaxTokens.openai(), "length");
        assert_eq!(StopReason::ToolUse.anthropic(), "tool_use");
    }
}
