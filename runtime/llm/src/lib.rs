//! The LLM engine: the `Provider` trait, the request and stream-event types, typed
//! provider errors, and the adapters (SPEC §2).
//!
//! Only `anthropic`, `openai` and `openai_responses` know a wire format. Everything above this module
//! sees [`ChatRequest`], [`StreamEvent`] and [`ProviderError`]. Adding a protocol
//! touches one adapter file and one match arm in [`build_provider`].

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub(crate) mod accumulate;
pub mod anthropic;
pub(crate) mod error;
pub mod http;
pub mod openai;
pub mod openai_responses;
pub mod retry;
pub mod sse;

use std::sync::Arc;
use troupe_protocol::model::{ProviderErrorKind, SystemPrompt, ToolDefinition};

use futures::stream::BoxStream;

use troupe_config::ResolvedProvider;
use troupe_protocol::model::Protocol;
use troupe_protocol::model::{Message, StopReason, ToolCall, Usage};

pub use accumulate::ResponseAccumulator;
pub use error::ProviderError;

/// One model call.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// System prompt.
    pub system: SystemPrompt,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered, in the stable order they must be sent in.
    pub tools: Vec<ToolDefinition>,
    /// The session whose prompt cache the request shares, when there is one
    /// (an agent's own session; a sub-agent names its run's main session,
    /// whose prefix a fork repeats). `openai-responses` sends it as
    /// `prompt_cache_key` and chains stored responses per session.
    pub session_id: Option<String>,
}

/// What the provider says about a response before its content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseMetadata {
    /// The provider's id of the response (Anthropic `msg_…`, OpenAI
    /// `chatcmpl-…`).
    pub id: Option<String>,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
}

/// What a provider stream yields, in order. The response's metadata comes
/// first, once, when the provider sends any; text and thinking arrive as
/// deltas; tool calls arrive complete (arguments fully accumulated); usage
/// events carry cumulative totals for the response so far (the last one wins);
/// `Stop` is the last event of a successful stream; `Retrying` says a failed
/// attempt is about to be repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The response's id and model (Anthropic `message_start`, the first
    /// OpenAI chunk). Not content: it does not end the right to retry.
    Metadata(ResponseMetadata),
    /// A piece of answer text.
    TextDelta(String),
    /// A piece of thinking text.
    ThinkingDelta(String),
    /// The signature closing the current thinking block.
    ThinkingSignature(String),
    /// An encrypted thinking block, to be sent back verbatim.
    RedactedThinking(String),
    /// A complete tool call.
    ToolCall(ToolCall),
    /// Cumulative usage of this response so far.
    Usage(Usage),
    /// The response ended normally.
    Stop(StopReason),
    /// An attempt failed before any content and the request is sent again
    /// after a delay (the retry policy's decision). Not content: what follows
    /// is the next attempt's response.
    Retrying(retry::Retrying),
}

/// A stream of events from one model call. Dropping it aborts the HTTP request.
pub type EventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A model provider: three capabilities only (SPEC §2). Optional capabilities
/// live in separate traits.
pub trait Provider: Send + Sync {
    /// The configured provider name (e.g. `claude`).
    fn name(&self) -> &str;
    /// The provider system as the GenAI conventions name it (`anthropic`,
    /// `openai`): the protocol it speaks.
    fn system(&self) -> &'static str;
    /// The model id sent to the provider.
    fn model(&self) -> &str;
    /// Starts one streaming model call. The request body is built before this
    /// returns; the stream performs the HTTP call, its retries, and parsing.
    fn stream(&self, request: &ChatRequest) -> EventStream;
}

/// Builds the adapter for a resolved provider configuration.
pub fn build_provider(config: &ResolvedProvider) -> Result<Arc<dyn Provider>, ProviderError> {
    match config.protocol {
        Protocol::Anthropic => Ok(Arc::new(anthropic::AnthropicProvider::new(config)?)),
        Protocol::OpenAi => Ok(Arc::new(openai::OpenAiProvider::new(config)?)),
        Protocol::OpenAiResponses => Ok(Arc::new(openai_responses::OpenAiResponsesProvider::new(
            config,
        )?)),
    }
}
