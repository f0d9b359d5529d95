//! Turns protocol-neutral scripted responses and faults into wire bytes:
//! SSE events, complete JSON bodies and error bodies, for the Anthropic
//! Messages, OpenAI Chat Completions and OpenAI Responses protocols.
//!
//! Everything here is a pure function of a [`Plan`] (a response whose ids and
//! usage are already resolved) or of an error description, so the exact shapes
//! are unit-tested without a server. This module must not touch sockets,
//! timing or server state.

pub(crate) mod anthropic;
pub(crate) mod openai;
pub(crate) mod openai_responses;

use bytes::Bytes;
use serde_json::Value;

use crate::fault::Fault;
use crate::request::Protocol;
use crate::response::{Block, StopReason, Usage};

/// One server-sent event: an optional `event:` name and one `data:` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseFrame {
    /// The `event:` field (Anthropic names every event; OpenAI names none).
    pub event: Option<String>,
    /// The `data:` payload, one line.
    pub data: String,
}

impl SseFrame {
    /// An Anthropic-style event whose name is the payload's `type`.
    pub(crate) fn named(event: &str, data: &Value) -> Self {
        Self {
            event: Some(event.to_owned()),
            data: data.to_string(),
        }
    }

    /// An unnamed event (OpenAI chunks, `[DONE]`).
    pub(crate) fn data(data: impl Into<String>) -> Self {
        Self {
            event: None,
            data: data.into(),
        }
    }

    /// The wire form: `event: …\n` (if named), `data: …\n`, blank line.
    pub(crate) fn to_bytes(&self) -> Bytes {
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(event) = &self.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&self.data);
        out.push_str("\n\n");
        Bytes::from(out)
    }
}

/// A response ready to render: tool ids filled in, usage decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Content blocks; every tool call has `Some(id)`.
    pub blocks: Vec<Block>,
    /// Usage to report.
    pub usage: Usage,
    /// Stop reason to report.
    pub stop_reason: StopReason,
    /// Characters per streamed delta (at least 1).
    pub chunk_chars: usize,
    /// Model name echoed from the request.
    pub model: String,
    /// Message / completion id.
    pub message_id: String,
    /// Unix time of creation (OpenAI `created`).
    pub created: u64,
    /// OpenAI: whether the request asked for `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Splits `text` into pieces of at most `chars` characters (never inside a
/// UTF-8 sequence). An empty text yields no pieces.
pub(crate) fn split_chars(text: &str, chars: usize) -> Vec<&str> {
    let chars = chars.max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (offset, _) in text.char_indices() {
        if count == chars {
            pieces.push(&text[start..offset]);
            start = offset;
            count = 0;
        }
        count += 1;
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// An HTTP error response, fully described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorReply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers (e.g. `retry-after`).
    pub headers: Vec<(String, String)>,
    /// `Content-Type` of the body.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

/// What kind of error to describe, independent of protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// 400 invalid request.
    InvalidRequest,
    /// 401.
    Authentication,
    /// 429.
    RateLimit,
    /// 500 and other server errors.
    Server,
    /// 529.
    Overloaded,
    /// 400 prompt too long.
    ContextLength,
}

/// HTTP 529, the Anthropic overloaded status (fixtures/ERRORS.md A1).
pub(crate) const STATUS_OVERLOADED: u16 = 529;
/// HTTP 429.
pub(crate) const STATUS_RATE_LIMITED: u16 = 429;
/// HTTP 400.
pub(crate) const STATUS_BAD_REQUEST: u16 = 400;
/// HTTP 401.
pub(crate) const STATUS_UNAUTHORIZED: u16 = 401;
/// HTTP 500.
pub(crate) const STATUS_INTERNAL: u16 = 500;
/// HTTP 502.
pub(crate) const STATUS_BAD_GATEWAY: u16 = 502;
/// HTTP 503.
pub(crate) const STATUS_UNAVAILABLE: u16 = 503;

/// A JSON error in the protocol's error shape.
pub(crate) fn json_error(
    protocol: Protocol,
    status: u16,
    kind: ErrorKind,
    message: &str,
    request_id: &str,
) -> ErrorReply {
    let body = match protocol {
        Protocol::Anthropic => anthropic::error_body(kind, message, request_id),
        Protocol::OpenAi | Protocol::OpenAiResponses => openai::error_body(kind, message),
    };
    ErrorReply {
        status,
        headers: Vec::new(),
        content_type: "application/json",
        body: body.to_string(),
    }
}

/// The HTTP reply for a fault that is answered before any response byte (every
/// fault except the stream faults, which return `None`).
pub(crate) fn fault_reply(
    protocol: Protocol,
    fault: &Fault,
    request_id: &str,
) -> Option<ErrorReply> {
    let reply = match fault {
        Fault::RateLimited {
            retry_after_secs,
            retry_after_ms,
        } => {
            let mut reply = json_error(
                protocol,
                STATUS_RATE_LIMITED,
                ErrorKind::RateLimit,
                match protocol {
                    Protocol::Anthropic => anthropic::RATE_LIMIT_MESSAGE,
                    Protocol::OpenAi | Protocol::OpenAiResponses => openai::RATE_LIMIT_MESSAGE,
                },
                request_id,
            );
            if let Some(secs) = retry_after_secs {
                reply.headers.push(("retry-after".into(), secs.to_string()));
            }
            if let Some(ms) = retry_after_ms {
                reply
                    .headers
                    .push(("retry-after-ms".into(), ms.to_string()));
            }
            reply
        }
        Fault::Overloaded => json_error(
            protocol,
            STATUS_OVERLOADED,
            ErrorKind::Overloaded,
            "Overloaded",
            request_id,
        ),
        Fault::InternalError => json_error(
            protocol,
            STATUS_INTERNAL,
            ErrorKind::Server,
            "Internal server error",
            request_id,
        ),
        Fault::BadGateway => json_error(
            protocol,
            STATUS_BAD_GATEWAY,
            ErrorKind::Server,
            "Bad gateway",
            request_id,
        ),
        Fault::ServiceUnavailable => json_error(
            protocol,
            STATUS_UNAVAILABLE,
            ErrorKind::Server,
            "Service unavailable",
            request_id,
        ),
        Fault::PromptTooLong { tokens, maximum } => {
            let message = match protocol {
                Protocol::Anthropic => anthropic::prompt_too_long_message(*tokens, *maximum),
                Protocol::OpenAi | Protocol::OpenAiResponses => {
                    openai::context_length_message(*tokens, *maximum)
                }
            };
            json_error(
                protocol,
                STATUS_BAD_REQUEST,
                ErrorKind::ContextLength,
                &message,
                request_id,
            )
        }
        Fault::Unauthorized => json_error(
            protocol,
            STATUS_UNAUTHORIZED,
            ErrorKind::Authentication,
            match protocol {
                Protocol::Anthropic => "invalid x-api-key",
                Protocol::OpenAi | Protocol::OpenAiResponses => {
                    "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
                }
            },
            request_id,
        ),
        Fault::NonJsonBody { status, body } => ErrorReply {
            status: *status,
            headers: Vec::new(),
            content_type: "text/html",
            body: body.clone(),
        },
        Fault::Custom {
            status,
            headers,
            body,
        } => ErrorReply {
            status: *status,
            headers: headers.clone(),
            content_type: "application/json",
            body: body.clone(),
        },
        Fault::CutStream { .. }
        | Fault::StallStream { .. }
        | Fault::MalformedSse { .. }
        | Fault::ErrorMidStream { .. } => return None,
    };
    Some(reply)
}

/// The SSE events of a streamed response in the protocol's format.
pub(crate) fn stream_frames(protocol: Protocol, plan: &Plan) -> Vec<SseFrame> {
    match protocol {
        Protocol::Anthropic => anthropic::stream_frames(plan),
        Protocol::OpenAi => openai::stream_frames(plan),
        Protocol::OpenAiResponses => openai_responses::stream_frames(plan),
    }
}

/// The complete JSON body of a non-streamed response.
pub(crate) fn complete_body(protocol: Protocol, plan: &Plan) -> Value {
    match protocol {
        Protocol::Anthropic => anthropic::message_body(plan),
        Protocol::OpenAi => openai::completion_body(plan),
        Protocol::OpenAiResponses => openai_responses::complete_body(plan),
    }
}

/// The error event sent mid-stream (Anthropic `event: error` overloaded;
/// OpenAI a `data: {"error":…}` chunk; Responses `response.failed` with a
/// server error).
pub(crate) fn midstream_error(protocol: Protocol, request_id: &str, plan: &Plan) -> SseFrame {
    match protocol {
        Protocol::Anthropic => anthropic::overloaded_event(request_id),
        Protocol::OpenAi => openai::error_chunk(),
        Protocol::OpenAiResponses => openai_responses::failed_event(&plan.message_id),
    }
}

/// An event whose `data:` line is not JSON (a truncated object).
pub(crate) fn malformed_frame(protocol: Protocol) -> SseFrame {
    match protocol {
        Protocol::Anthropic => SseFrame {
            event: Some("content_block_delta".into()),
            data: MALFORMED_DATA.into(),
        },
        Protocol::OpenAi => SseFrame::data(MALFORMED_DATA),
        Protocol::OpenAiResponses => SseFrame {
            event: Some("response.output_text.delta".into()),
            data: MALFORMED_DATA.into(),
        },
    }
}

/// The `data:` payload of a malformed event: the start of a JSON object.
pub(crate) const MALFORMED_DATA: &str =
    "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {";

/// The JSON of each frame, checked to name its own type in its `event:`
/// line (both the Anthropic and the Responses streams do).
#[cfg(test)]
pub(crate) fn typed_payloads(frames: &[SseFrame]) -> Vec<serde_json::Value> {
    frames
        .iter()
        .map(|frame| {
            let value: serde_json::Value = serde_json::from_str(&frame.data).unwrap();
            assert_eq!(frame.event.as_deref(), value["type"].as_str());
            value
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_respects_char_boundaries() {
        assert_eq!(split_chars("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(split_chars("héllo wörld", 4), ["héll", "o wö", "rld"]);
        assert_eq!(split_chars("", 4), Vec::<&str>::new());
        assert_eq!(split_chars("ab", 0), ["a", "b"]);
        assert_eq!(split_chars("🦀🦀🦀", 2).concat(), "🦀🦀🦀");
    }

    #[test]
    fn frame_wire_form() {
        let frame = SseFrame::named("ping", &serde_json::json!({"type": "ping"}));
        assert_eq!(
            frame.to_bytes(),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        assert_eq!(SseFrame::data("[DONE]").to_bytes(), "data: [DONE]\n\n");
    }

    #[test]
    fn malformed_data_is_not_json() {
        assert!(serde_json::from_str::<Value>(MALFORMED_DATA).is_err());
    }

    #[test]
    fn rate_limit_headers() {
        let fault = Fault::RateLimited {
            retry_after_secs: Some(2),
            retry_after_ms: Some(1500),
        };
        let reply = fault_reply(Protocol::Anthropic, &fault, "req_1").unwrap();
        assert_eq!(reply.status, 429);
        assert_eq!(
            reply.headers,
            [
                ("retry-after".to_owned(), "2".to_owned()),
                ("retry-after-ms".to_owned(), "1500".to_owned())
            ]
        );
        let body: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"]["type"], "rate_limit_error");
        let reply = fault_reply(Protocol::OpenAi, &fault, "req_1").unwrap();
        let body: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    }

    #[test]
    fn prompt_too_long_shapes() {
        let fault = Fault::prompt_too_long(208_310, 200_000);
        let reply = fault_reply(Protocol::Anthropic, &fault, "req_1").unwrap();
        assert_eq!(reply.status, 400);
        let body: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(
            body["error"]["message"],
            "prompt is too long: 208310 tokens > 200000 maximum"
        );
        assert_eq!(body["request_id"], "req_1");
        let reply = fault_reply(Protocol::OpenAi, &fault, "req_1").unwrap();
        let body: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"]["code"], "context_length_exceeded");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "messages");
    }

    #[test]
    fn stream_faults_have_no_up_front_reply() {
        let fault = Fault::cut_after(2, crate::response::text("x"));
        assert_eq!(fault_reply(Protocol::OpenAi, &fault, "r"), None);
    }
}
