//! Typed provider errors (SPEC §2 errors).
//!
//! Every failure of a model call becomes one [`ProviderError`] with a
//! [`ProviderErrorKind`] that the loop decides on: prompt-too-long triggers an
//! emergency compaction, retryable kinds are retried by `llm::retry` while nothing
//! has been delivered, the rest end the turn with an `error` event.

use std::time::Duration;
use troupe_protocol::model::ProviderErrorKind;

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {kind_text}{status_text}: {message}", kind_text = .kind.as_str(), status_text = self.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
pub struct ProviderError {
    /// What kind of failure.
    pub kind: ProviderErrorKind,
    /// Human-readable explanation, including the provider's own message.
    pub message: String,
    /// Provider name the error came from.
    pub provider: String,
    /// HTTP status, when the failure was an HTTP response.
    pub status: Option<u16>,
    /// The provider's request id, when known.
    pub request_id: Option<String>,
    /// How long the provider asked us to wait (`retry-after`), when given.
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// An error of the given kind with a message.
    pub fn new(
        provider: impl Into<String>,
        kind: ProviderErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            provider: provider.into(),
            status: None,
            request_id: None,
            retry_after: None,
        }
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets the request id.
    pub fn with_request_id(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }

    /// Sets the server-requested delay.
    pub fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// True for the prompt-too-long kind.
    pub fn is_prompt_too_long(&self) -> bool {
        self.kind == ProviderErrorKind::PromptTooLong
    }
}
