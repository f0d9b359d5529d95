//! Anthropic Messages wire shapes: the SSE event sequence of a streamed
//! message, the complete message object, error bodies and the mid-stream
//! `error` event (fixtures/sse/anthropic_*.sse, fixtures/ERRORS.md A1–A4).
//!
//! Pure functions only; the OpenAI shapes live beside this file.

use serde_json::{Value, json};

use super::{ErrorKind, Plan, SseFrame, split_chars};
use crate::response::Block;

/// A ping is sent after the first `content_block_start` (as the live API does)
/// and again after every this many content deltas.
pub(crate) const PING_EVERY_DELTAS: usize = 16;

/// `output_tokens` reported in `message_start` (the live API reports a small
/// running count there; the final count comes in `message_delta`).
const MESSAGE_START_OUTPUT_TOKENS: u64 = 1;

/// Body text of a 429 (fixtures/ERRORS.md A4, short variant).
pub(crate) const RATE_LIMIT_MESSAGE: &str =
    "This request would exceed your account's rate limit. Please try again later.";

/// ERRORS.md A2: `prompt is too long: N tokens > M maximum`.
pub(crate) fn prompt_too_long_message(tokens: u64, maximum: u64) -> String {
    format!("prompt is too long: {tokens} tokens > {maximum} maximum")
}

fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::ContextLength => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Server => "api_error",
        ErrorKind::Overloaded => "overloaded_error",
    }
}

/// ERRORS.md A1: `{"type":"error","error":{"type","message"},"request_id"}`.
pub(crate) fn error_body(kind: ErrorKind, message: &str, request_id: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(kind), "message": message},
        "request_id": request_id,
    })
}

/// ERRORS.md A3: the mid-stream overloaded error as sent on the wire.
pub(crate) fn overloaded_event(request_id: &str) -> SseFrame {
    SseFrame::named(
        "error",
        &json!({
            "type": "error",
            "error": {"details": null, "type": "overloaded_error", "message": "Overloaded"},
            "request_id": request_id,
        }),
    )
}

fn event(data: &Value) -> SseFrame {
    // The live API names every event after its payload's `type`.
    let name = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    SseFrame::named(name, data)
}

fn ping() -> SseFrame {
    event(&json!({"type": "ping"}))
}

fn usage_json(plan: &Plan, output_tokens: u64) -> Value {
    json!({
        "input_tokens": plan.usage.input_tokens,
        "cache_creation_input_tokens": plan.usage.cache_creation_input_tokens,
        "cache_read_input_tokens": plan.usage.cache_read_input_tokens,
        "output_tokens": output_tokens,
    })
}

/// Tool input as a JSON value for places that need an object (block start is
/// always `{}`; the complete message parses the arguments, keeping malformed
/// text as a string so it still reaches the client).
fn input_value(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// The full event sequence of a streamed message: `message_start`, per block
/// `content_block_start` / `content_block_delta`… / `content_block_stop`, pings,
/// `message_delta` (stop reason and cumulative usage), `message_stop`.
pub(crate) fn stream_frames(plan: &Plan) -> Vec<SseFrame> {
    let mut frames = vec![event(&json!({
        "type": "message_start",
        "message": {
            "id": plan.message_id,
            "type": "message",
            "role": "assistant",
            "model": plan.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage_json(plan, plan.usage.output_tokens.min(MESSAGE_START_OUTPUT_TOKENS)),
        }
    }))];
    let mut deltas = 0usize;
    let mut push_delta = |frames: &mut Vec<SseFrame>, index: usize, delta: Value| {
        frames.push(event(
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        deltas += 1;
        if deltas.is_multiple_of(PING_EVERY_DELTAS) {
            frames.push(ping());
        }
    };
    for (index, block) in plan.blocks.iter().enumerate() {
        let start = match block {
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::Thinking { .. } => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolCall(call) => json!({
                "type": "tool_use",
                "id": call.id.as_deref().unwrap_or_default(),
                "name": call.name,
                "input": {},
            }),
        };
        frames.push(event(
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            frames.push(ping());
        }
        match block {
            Block::Text(text) => {
                for piece in split_chars(text, plan.chunk_chars) {
                    push_delta(
                        &mut frames,
                        index,
                        json!({"type": "text_delta", "text": piece}),
                    );
                }
            }
            Block::Thinking { text, signature } => {
                for piece in split_chars(text, plan.chunk_chars) {
                    push_delta(
                        &mut frames,
                        index,
                        json!({"type": "thinking_delta", "thinking": piece}),
                    );
                }
                push_delta(
                    &mut frames,
                    index,
                    json!({"type": "signature_delta", "signature": signature}),
                );
            }
            Block::RedactedThinking { .. } => {}
            Block::ToolCall(call) => {
                // The live API always opens tool input with an empty fragment
                // (fixtures/sse/EXPECTED.md point 3).
                push_delta(
                    &mut frames,
                    index,
                    json!({"type": "input_json_delta", "partial_json": ""}),
                );
                for piece in split_chars(&call.arguments, plan.chunk_chars) {
                    push_delta(
                        &mut frames,
                        index,
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    );
                }
            }
        }
        frames.push(event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if plan.blocks.is_empty() {
        frames.push(ping());
    }
    frames.push(event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": plan.stop_reason.anthropic(), "stop_sequence": null},
        "usage": usage_json(plan, plan.usage.output_tokens),
    })));
    frames.push(event(&json!({"type": "message_stop"})));
    frames
}

/// The complete message object of a non-streamed response.
pub(crate) fn message_body(plan: &Plan) -> Value {
    let content: Vec<Value> = plan
        .blocks
        .iter()
        .map(|block| match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Thinking { text, signature } => {
                json!({"type": "thinking", "thinking": text, "signature": signature})
            }
            Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolCall(call) => json!({
                "type": "tool_use",
                "id": call.id.as_deref().unwrap_or_default(),
                "name": call.name,
                "input": input_value(&call.arguments),
            }),
        })
        .collect();
    json!({
        "id": plan.message_id,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": plan.stop_reason.anthropic(),
        "stop_sequence": null,
        "usage": usage_json(plan, plan.usage.output_tokens),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{StopReason, ToolCall, Usage};

    fn plan(blocks: Vec<Block>) -> Plan {
        Plan {
            blocks,
            usage: Usage::new(377, 65).with_cache_read(100),
            stop_reason: StopReason::ToolUse,
            chunk_chars: 5,
            model: "claude-test".into(),
            message_id: "msg_01x".into(),
            created: 0,
            include_usage: false,
        }
    }

    use super::super::typed_payloads as payloads;

    #[test]
    fn text_then_tool_use_sequence() {
        let frames = stream_frames(&plan(vec![
            Block::Text("I'll check.".into()),
            Block::ToolCall(ToolCall {
                id: Some("toolu_01A".into()),
                name: "get_weather".into(),
                arguments: r#"{"location":"Paris"}"#.into(),
            }),
        ]));
        let events = payloads(&frames);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(events[0]["message"]["usage"]["input_tokens"], 377);
        assert_eq!(
            events[0]["message"]["usage"]["cache_read_input_tokens"],
            100
        );
        assert_eq!(events[7]["content_block"]["id"], "toolu_01A");
        assert_eq!(events[8]["delta"]["partial_json"], "");
        let json: String = events[8..13]
            .iter()
            .map(|e| e["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(json, r#"{"location":"Paris"}"#);
        assert_eq!(events[14]["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[14]["usage"]["output_tokens"], 65);
    }

    #[test]
    fn thinking_ends_with_signature_delta() {
        let frames = stream_frames(&plan(vec![Block::Thinking {
            text: "hmm, ok".into(),
            signature: "EoQD".into(),
        }]));
        let events = payloads(&frames);
        assert_eq!(events[1]["content_block"]["signature"], "");
        assert_eq!(events[3]["delta"]["type"], "thinking_delta");
        assert_eq!(
            events[5]["delta"],
            json!({"type": "signature_delta", "signature": "EoQD"})
        );
        assert_eq!(events[6]["type"], "content_block_stop");
    }

    #[test]
    fn pings_recur_in_long_streams() {
        let long = "x".repeat(5 * PING_EVERY_DELTAS * 2);
        let frames = stream_frames(&plan(vec![Block::Text(long)]));
        let pings = frames
            .iter()
            .filter(|f| f.event.as_deref() == Some("ping"))
            .count();
        assert_eq!(pings, 3);
    }

    #[test]
    fn complete_message_parses_input() {
        let body = message_body(&plan(vec![
            Block::ToolCall(ToolCall {
                id: Some("toolu_1".into()),
                name: "ls".into(),
                arguments: String::new(),
            }),
            Block::ToolCall(ToolCall {
                id: Some("toolu_2".into()),
                name: "ls".into(),
                arguments: "{\"n\": 12345678901234567890}".into(),
            }),
        ]));
        assert_eq!(body["content"][0]["input"], json!({}));
        assert_eq!(
            body["content"][1]["input"]["n"].to_string(),
            "12345678901234567890"
        );
        assert_eq!(body["stop_reason"], "tool_use");
        assert_eq!(body["usage"]["output_tokens"], 65);
    }

    #[test]
    fn overloaded_event_shape() {
        let frame = overloaded_event("req_1");
        assert_eq!(frame.event.as_deref(), Some("error"));
        let value: Value = serde_json::from_str(&frame.data).unwrap();
        assert_eq!(value["error"]["type"], "overloaded_error");
        assert_eq!(value["request_id"], "req_1");
    }
}
