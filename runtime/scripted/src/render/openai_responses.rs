//! OpenAI Responses wire shapes: the named event sequence of a streamed
//! response (`response.created`, one `output_item.added` … `output_item.done`
//! run per item with its text, argument and reasoning-summary deltas, and
//! `response.completed` or `response.incomplete`), the complete `response`
//! object, and the `response.failed` event that breaks a stream.
//!
//! Thinking renders as a `reasoning` item: its text as the summary, its
//! signature (or a redacted block's data) as the `encrypted_content`. Error
//! bodies of HTTP replies are Chat Completions' envelope, which the Responses
//! endpoint shares. Pure functions only.

use serde_json::{Value, json};

use super::{Plan, SseFrame, split_chars};
use crate::response::{Block, StopReason};

/// Text of the `response.failed` event a broken stream ends with.
const FAILED_MESSAGE: &str =
    "The server had an error while processing your request. Sorry about that!";

/// The id of output item `index` of a response: `{prefix}_{index}` followed
/// by the response id's random part, so ids differ across responses.
fn item_id(plan: &Plan, prefix: &str, index: usize) -> String {
    let tail = plan
        .message_id
        .strip_prefix("resp_")
        .unwrap_or(&plan.message_id);
    format!("{prefix}_{index}{tail}")
}

fn usage_json(plan: &Plan) -> Value {
    let input = plan.usage.prompt_tokens();
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": plan.usage.cache_read_input_tokens},
        "output_tokens": plan.usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + plan.usage.output_tokens,
    })
}

/// The complete output item of block `index`.
fn output_item(plan: &Plan, index: usize, block: &Block) -> Value {
    match block {
        Block::Thinking { text, signature } => json!({
            "type": "reasoning",
            "id": item_id(plan, "rs", index),
            "summary": [{"type": "summary_text", "text": text}],
            "encrypted_content": signature,
        }),
        Block::RedactedThinking { data } => json!({
            "type": "reasoning",
            "id": item_id(plan, "rs", index),
            "summary": [],
            "encrypted_content": data,
        }),
        Block::Text(text) => json!({
            "type": "message",
            "id": item_id(plan, "msg", index),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Block::ToolCall(call) => json!({
            "type": "function_call",
            "id": item_id(plan, "fc", index),
            "call_id": call.id.as_deref().unwrap_or_default(),
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }),
    }
}

/// The output item as `output_item.added` announces it: no content yet.
fn added_item(plan: &Plan, index: usize, block: &Block) -> Value {
    let mut item = output_item(plan, index, block);
    match block {
        Block::Thinking { .. } | Block::RedactedThinking { .. } => {
            item["summary"] = json!([]);
        }
        Block::Text(_) => {
            item["status"] = json!("in_progress");
            item["content"] = json!([]);
        }
        Block::ToolCall(_) => {
            item["status"] = json!("in_progress");
            item["arguments"] = json!("");
        }
    }
    item
}

/// The `response` object in a state.
fn response_object(plan: &Plan, status: &str, output: Vec<Value>, finished: bool) -> Value {
    let incomplete = (status == "incomplete").then(|| {
        json!({"reason": match plan.stop_reason {
            StopReason::Refusal => "content_filter",
            _ => "max_output_tokens",
        }})
    });
    json!({
        "id": plan.message_id,
        "object": "response",
        "created_at": plan.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "model": plan.model,
        "output": output,
        "store": false,
        "usage": if finished { usage_json(plan) } else { Value::Null },
    })
}

/// The status a finished response reports for the plan's stop reason.
fn final_status(plan: &Plan) -> &'static str {
    match plan.stop_reason {
        StopReason::MaxTokens | StopReason::Refusal => "incomplete",
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => "completed",
    }
}

/// Builds the frames, numbering them with `sequence_number` as the API does.
struct Frames {
    frames: Vec<SseFrame>,
}

impl Frames {
    fn push(&mut self, mut event: Value) {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        event["sequence_number"] = json!(self.frames.len());
        self.frames.push(SseFrame::named(&kind, &event));
    }
}

fn item_frames(plan: &Plan, index: usize, block: &Block, out: &mut Frames) {
    out.push(json!({
        "type": "response.output_item.added",
        "output_index": index,
        "item": added_item(plan, index, block),
    }));
    let id = match block {
        Block::Thinking { .. } | Block::RedactedThinking { .. } => item_id(plan, "rs", index),
        Block::Text(_) => item_id(plan, "msg", index),
        Block::ToolCall(_) => item_id(plan, "fc", index),
    };
    match block {
        Block::Thinking { text, .. } => {
            for piece in split_chars(text, plan.chunk_chars) {
                out.push(json!({
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": id,
                    "output_index": index,
                    "summary_index": 0,
                    "delta": piece,
                }));
            }
            out.push(json!({
                "type": "response.reasoning_summary_text.done",
                "item_id": id,
                "output_index": index,
                "summary_index": 0,
                "text": text,
            }));
        }
        Block::RedactedThinking { .. } => {}
        Block::Text(text) => {
            for piece in split_chars(text, plan.chunk_chars) {
                out.push(json!({
                    "type": "response.output_text.delta",
                    "item_id": id,
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                }));
            }
            out.push(json!({
                "type": "response.output_text.done",
                "item_id": id,
                "output_index": index,
                "content_index": 0,
                "text": text,
            }));
        }
        Block::ToolCall(call) => {
            for piece in split_chars(&call.arguments, plan.chunk_chars) {
                out.push(json!({
                    "type": "response.function_call_arguments.delta",
                    "item_id": id,
                    "output_index": index,
                    "delta": piece,
                }));
            }
            out.push(json!({
                "type": "response.function_call_arguments.done",
                "item_id": id,
                "output_index": index,
                "arguments": call.arguments,
            }));
        }
    }
    out.push(json!({
        "type": "response.output_item.done",
        "output_index": index,
        "item": output_item(plan, index, block),
    }));
}

/// The full event sequence of a streamed response.
pub(crate) fn stream_frames(plan: &Plan) -> Vec<SseFrame> {
    let mut out = Frames { frames: Vec::new() };
    for kind in ["response.created", "response.in_progress"] {
        out.push(json!({
            "type": kind,
            "response": response_object(plan, "in_progress", Vec::new(), false),
        }));
    }
    for (index, block) in plan.blocks.iter().enumerate() {
        item_frames(plan, index, block, &mut out);
    }
    let status = final_status(plan);
    out.push(json!({
        "type": format!("response.{status}"),
        "response": complete_body(plan),
    }));
    out.frames
}

/// The complete `response` object of a non-streamed response.
pub(crate) fn complete_body(plan: &Plan) -> Value {
    let output = plan
        .blocks
        .iter()
        .enumerate()
        .map(|(index, block)| output_item(plan, index, block))
        .collect();
    response_object(plan, final_status(plan), output, true)
}

/// The `response.failed` event of a stream broken by a server error.
pub(crate) fn failed_event(response_id: &str) -> SseFrame {
    let event = json!({
        "type": "response.failed",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "failed",
            "error": {"code": "server_error", "message": FAILED_MESSAGE},
            "output": [],
            "usage": null,
        },
    });
    SseFrame::named("response.failed", &event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{ToolCall, Usage};

    fn plan(blocks: Vec<Block>, stop_reason: StopReason) -> Plan {
        Plan {
            blocks,
            usage: Usage::new(19, 83).with_cache_read(320),
            stop_reason,
            chunk_chars: 4,
            model: "gpt-test".into(),
            message_id: "resp_X".into(),
            created: 1_700_000_000,
            include_usage: false,
        }
    }

    use super::super::typed_payloads as events;

    #[test]
    fn calls_stream_arguments_by_item_id_and_end_completed() {
        let frames = stream_frames(&plan(
            vec![
                Block::Thinking {
                    text: "plan it".into(),
                    signature: "gAAAA-enc".into(),
                },
                Block::ToolCall(ToolCall {
                    id: Some("call_A".into()),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.rs"}"#.into(),
                }),
            ],
            StopReason::ToolUse,
        ));
        let events = events(&frames);
        assert_eq!(events[0]["type"], "response.created");
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n);
        }
        let added: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .collect();
        assert_eq!(added[1]["item"]["call_id"], "call_A");
        assert_eq!(added[1]["item"]["arguments"], "");
        let arguments: String = events
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .inspect(|e| assert_eq!(e["item_id"], added[1]["item"]["id"]))
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(arguments, r#"{"path":"a.rs"}"#);
        let done: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .collect();
        assert_eq!(done[0]["item"]["encrypted_content"], "gAAAA-enc");
        assert_eq!(done[0]["item"]["summary"][0]["text"], "plan it");
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["usage"]["input_tokens"], 339);
        assert_eq!(
            last["response"]["usage"]["input_tokens_details"]["cached_tokens"],
            320
        );
        assert_eq!(last["response"]["output"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn output_limits_end_incomplete() {
        let frames = stream_frames(&plan(
            vec![Block::Text("cut".into())],
            StopReason::MaxTokens,
        ));
        let events = events(&frames);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        let body = complete_body(&plan(vec![Block::Text("no".into())], StopReason::Refusal));
        assert_eq!(body["incomplete_details"]["reason"], "content_filter");
    }
}
