//! Faults a turn can answer with instead of a normal response: HTTP errors in
//! the provider's error shape, and broken streams (cut, stalled, malformed,
//! error event mid-stream).
//!
//! A fault is protocol-neutral like a [`Response`]; the `render` module gives it
//! the body shape of the endpoint it was requested on (fixtures/ERRORS.md). A
//! fault consumes its turn, so "429 then success" is two turns. This module only
//! describes faults; it must not touch HTTP or server state.

use crate::response::Response;

/// A scripted failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 429 (`rate_limit_error` / `rate_limit_exceeded`) with the
    /// `retry-after` (seconds) and/or `retry-after-ms` headers when given.
    RateLimited {
        /// Value of the `retry-after` header, in seconds.
        retry_after_secs: Option<u64>,
        /// Value of the `retry-after-ms` header, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// HTTP 529 `overloaded_error` (fixtures/ERRORS.md A3). The OpenAI endpoint
    /// answers 529 too, with a `server_error` body.
    Overloaded,
    /// HTTP 500 (`api_error` / `server_error`).
    InternalError,
    /// HTTP 502 with a JSON error body.
    BadGateway,
    /// HTTP 503 with a JSON error body.
    ServiceUnavailable,
    /// HTTP 400 prompt too long: Anthropic `invalid_request_error` "prompt is too
    /// long: N tokens > M maximum" (ERRORS.md A2); OpenAI
    /// `context_length_exceeded` (ERRORS.md O2).
    PromptTooLong {
        /// Tokens in the prompt (N).
        tokens: u64,
        /// The model's maximum (M).
        maximum: u64,
    },
    /// HTTP 401 (`authentication_error` / `invalid_api_key`).
    Unauthorized,
    /// Any status with a body that is not JSON (as proxies send).
    NonJsonBody {
        /// HTTP status code.
        status: u16,
        /// The body, sent as `text/html`.
        body: String,
    },
    /// Any status, headers and body, sent verbatim (`application/json`).
    Custom {
        /// HTTP status code.
        status: u16,
        /// Extra response headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// Sends the first `after_events` SSE events of `response`, then closes the
    /// connection without the terminating events (`message_stop` / `[DONE]`).
    /// `after_events` is capped so that at least the final event is withheld.
    /// On a non-streaming request: half of the JSON body, then the connection
    /// closes.
    CutStream {
        /// What would have been sent.
        response: Response,
        /// Events sent before the cut.
        after_events: usize,
    },
    /// Sends the first `after_events` SSE events of `response`, then holds the
    /// connection open without data until the client goes away or the server
    /// shuts down. On a non-streaming request: headers and half of the body,
    /// then silence.
    StallStream {
        /// What would have been sent.
        response: Response,
        /// Events sent before the stall.
        after_events: usize,
    },
    /// Sends the first `after_events` SSE events of `response`, then one event
    /// whose `data:` line is not JSON, then the rest of the stream. On a
    /// non-streaming request: a 200 whose body is not JSON.
    MalformedSse {
        /// The response around the malformed event.
        response: Response,
        /// Events sent before the malformed one.
        after_events: usize,
    },
    /// Sends the first `after_events` SSE events of `response`, then an error
    /// event — Anthropic `event: error` with `overloaded_error` (ERRORS.md A3),
    /// OpenAI a `data: {"error":…}` chunk (ERRORS.md O4) — and ends the stream
    /// without the terminating events. On a non-streaming request: the
    /// equivalent HTTP 529.
    ErrorMidStream {
        /// The response interrupted by the error.
        response: Response,
        /// Events sent before the error.
        after_events: usize,
    },
}

impl Fault {
    /// HTTP 429 with `retry-after: <secs>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::RateLimited {
            retry_after_secs: Some(retry_after_secs),
            retry_after_ms: None,
        }
    }

    /// HTTP 429 with `retry-after-ms: <ms>` (and no `retry-after`).
    pub fn rate_limited_ms(retry_after_ms: u64) -> Self {
        Self::RateLimited {
            retry_after_secs: None,
            retry_after_ms: Some(retry_after_ms),
        }
    }

    /// HTTP 400 prompt too long.
    pub fn prompt_too_long(tokens: u64, maximum: u64) -> Self {
        Self::PromptTooLong { tokens, maximum }
    }

    /// See [`Fault::CutStream`].
    pub fn cut_after(after_events: usize, response: Response) -> Self {
        Self::CutStream {
            response,
            after_events,
        }
    }

    /// See [`Fault::StallStream`].
    pub fn stall_after(after_events: usize, response: Response) -> Self {
        Self::StallStream {
            response,
            after_events,
        }
    }

    /// See [`Fault::MalformedSse`].
    pub fn malformed_after(after_events: usize, response: Response) -> Self {
        Self::MalformedSse {
            response,
            after_events,
        }
    }

    /// See [`Fault::ErrorMidStream`].
    pub fn error_after(after_events: usize, response: Response) -> Self {
        Self::ErrorMidStream {
            response,
            after_events,
        }
    }

    /// Mutable access to the partially sent response (to fill generated ids).
    pub(crate) fn stream_response_mut(&mut self) -> Option<&mut Response> {
        match self {
            Self::CutStream { response, .. }
            | Self::StallStream { response, .. }
            | Self::MalformedSse { response, .. }
            | Self::ErrorMidStream { response, .. } => Some(response),
            _ => None,
        }
    }
}
