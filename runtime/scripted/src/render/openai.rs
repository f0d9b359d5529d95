//! OpenAI Chat Completions wire shapes: the chunk sequence of a streamed
//! completion (with `tool_calls[].index` fragments and the `include_usage`
//! chunk), the complete `chat.completion` object, error bodies and the
//! mid-stream `{"error":…}` chunk (fixtures/sse/openai_*.sse, ERRORS.md O1–O4).
//!
//! Pure functions only; the Anthropic shapes live beside this file.

use serde_json::{Map, Value, json};

use super::{ErrorKind, Plan, SseFrame, split_chars};
use crate::response::Block;

/// The stream terminator.
pub(crate) const DONE: &str = "[DONE]";

/// Body text of a 429 (fixtures/ERRORS.md O3, shortened).
pub(crate) const RATE_LIMIT_MESSAGE: &str =
    "Rate limit reached for requests. Please try again in 1s.";

/// Text of the mid-stream error chunk.
const MIDSTREAM_ERROR_MESSAGE: &str =
    "The server had an error while processing your request. Sorry about that!";

/// ERRORS.md O2: the classic `context_length_exceeded` message.
pub(crate) fn context_length_message(tokens: u64, maximum: u64) -> String {
    format!(
        "This model's maximum context length is {maximum} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
    )
}

/// ERRORS.md O1: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error_body(kind: ErrorKind, message: &str) -> Value {
    let (kind, param, code) = match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None, None),
        ErrorKind::ContextLength => (
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        ErrorKind::Authentication => ("invalid_request_error", None, Some("invalid_api_key")),
        ErrorKind::RateLimit => ("requests", None, Some("rate_limit_exceeded")),
        ErrorKind::Server | ErrorKind::Overloaded => ("server_error", None, None),
    };
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// ERRORS.md O4: a `data:` chunk carrying an `error` object.
pub(crate) fn error_chunk() -> SseFrame {
    SseFrame::data(error_body(ErrorKind::Server, MIDSTREAM_ERROR_MESSAGE).to_string())
}

fn usage_json(plan: &Plan) -> Value {
    let prompt = plan.usage.prompt_tokens();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": plan.usage.output_tokens,
        "total_tokens": prompt + plan.usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.usage.cache_read_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

fn chunk(plan: &Plan, choices: Value, usage: Option<Value>) -> SseFrame {
    let mut object = Map::new();
    object.insert("id".into(), json!(plan.message_id));
    object.insert("object".into(), json!("chat.completion.chunk"));
    object.insert("created".into(), json!(plan.created));
    object.insert("model".into(), json!(plan.model));
    object.insert("choices".into(), choices);
    // With include_usage every chunk carries `usage`: null except the last
    // (ERRORS.md O4).
    if plan.include_usage {
        object.insert("usage".into(), usage.unwrap_or(Value::Null));
    }
    SseFrame::data(Value::Object(object).to_string())
}

fn delta_chunk(plan: &Plan, delta: Value, finish_reason: Option<&str>) -> SseFrame {
    chunk(
        plan,
        json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]),
        None,
    )
}

/// The full chunk sequence of a streamed completion: a role chunk, reasoning
/// and content deltas, tool call fragments (id/type/name only on the first
/// fragment of each index), the finish chunk, the `choices: []` usage chunk
/// when `include_usage` was asked for, and `[DONE]`.
pub(crate) fn stream_frames(plan: &Plan) -> Vec<SseFrame> {
    let has_text = plan.blocks.iter().any(|b| matches!(b, Block::Text(_)));
    let first_content = if has_text { json!("") } else { Value::Null };
    let mut frames = vec![delta_chunk(
        plan,
        json!({"role": "assistant", "content": first_content, "refusal": null}),
        None,
    )];
    let mut tool_index = 0usize;
    for block in &plan.blocks {
        match block {
            Block::Thinking { text, .. } => {
                for piece in split_chars(text, plan.chunk_chars) {
                    frames.push(delta_chunk(plan, json!({"reasoning_content": piece}), None));
                }
            }
            Block::RedactedThinking { .. } => {}
            Block::Text(text) => {
                for piece in split_chars(text, plan.chunk_chars) {
                    frames.push(delta_chunk(plan, json!({"content": piece}), None));
                }
            }
            Block::ToolCall(call) => {
                frames.push(delta_chunk(
                    plan,
                    json!({"tool_calls": [{
                        "index": tool_index,
                        "id": call.id.as_deref().unwrap_or_default(),
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }]}),
                    None,
                ));
                for piece in split_chars(&call.arguments, plan.chunk_chars) {
                    frames.push(delta_chunk(
                        plan,
                        json!({"tool_calls": [{"index": tool_index, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
                tool_index += 1;
            }
        }
    }
    frames.push(delta_chunk(
        plan,
        json!({}),
        Some(plan.stop_reason.openai()),
    ));
    if plan.include_usage {
        frames.push(chunk(plan, json!([]), Some(usage_json(plan))));
    }
    frames.push(SseFrame::data(DONE));
    frames
}

/// The complete `chat.completion` object of a non-streamed response.
pub(crate) fn completion_body(plan: &Plan) -> Value {
    let text: String = plan
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let reasoning: String = plan
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let tool_calls: Vec<Value> = plan
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall(call) => Some(json!({
                "id": call.id.as_deref().unwrap_or_default(),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            })),
            _ => None,
        })
        .collect();
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let has_text = plan.blocks.iter().any(|b| matches!(b, Block::Text(_)));
    message.insert(
        "content".into(),
        if has_text { json!(text) } else { Value::Null },
    );
    message.insert("refusal".into(), Value::Null);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    json!({
        "id": plan.message_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "logprobs": null,
            "finish_reason": plan.stop_reason.openai(),
        }],
        "usage": usage_json(plan),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{StopReason, ToolCall, Usage};

    fn plan(blocks: Vec<Block>, include_usage: bool) -> Plan {
        Plan {
            blocks,
            usage: Usage::new(19, 83).with_cache_read(320),
            stop_reason: StopReason::ToolUse,
            chunk_chars: 4,
            model: "gpt-test".into(),
            message_id: "chatcmpl-x".into(),
            created: 1_700_000_000,
            include_usage,
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments: arguments.into(),
        })
    }

    fn parse(frames: &[SseFrame]) -> Vec<Value> {
        frames
            .iter()
            .filter(|f| f.data != DONE)
            .map(|f| serde_json::from_str(&f.data).unwrap())
            .collect()
    }

    #[test]
    fn parallel_tool_calls_accumulate_by_index() {
        let frames = stream_frames(&plan(
            vec![
                call("call_A", "get_weather", r#"{"city":"Paris"}"#),
                call("call_B", "get_stock", r#"{"t":"AAPL"}"#),
            ],
            true,
        ));
        assert_eq!(frames.last().map(|f| f.data.as_str()), Some(DONE));
        let chunks = parse(&frames);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(chunks[0]["choices"][0]["delta"]["content"], Value::Null);
        let mut accumulated: Vec<(String, String, String)> = Vec::new();
        for chunk in &chunks {
            let Some(calls) = chunk["choices"][0]["delta"]["tool_calls"].as_array() else {
                continue;
            };
            for fragment in calls {
                let index = fragment["index"].as_u64().unwrap() as usize;
                if index == accumulated.len() {
                    assert!(fragment["id"].is_string(), "first fragment carries the id");
                    accumulated.push((
                        fragment["id"].as_str().unwrap().into(),
                        fragment["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                } else {
                    assert!(fragment.get("id").is_none(), "later fragments carry no id");
                    assert!(fragment["function"].get("name").is_none());
                }
                accumulated[index].2 += fragment["function"]["arguments"].as_str().unwrap();
            }
        }
        assert_eq!(
            accumulated,
            [
                (
                    "call_A".into(),
                    "get_weather".into(),
                    r#"{"city":"Paris"}"#.into()
                ),
                (
                    "call_B".into(),
                    "get_stock".into(),
                    r#"{"t":"AAPL"}"#.into()
                ),
            ]
        );
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(finish["usage"], Value::Null);
        let usage = &chunks[chunks.len() - 1];
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], 339);
        assert_eq!(
            usage["usage"]["prompt_tokens_details"]["cached_tokens"],
            320
        );
        assert_eq!(usage["usage"]["total_tokens"], 422);
    }

    #[test]
    fn no_usage_chunk_without_include_usage() {
        let frames = stream_frames(&plan(vec![Block::Text("hello world".into())], false));
        let chunks = parse(&frames);
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
        assert_eq!(chunks[0]["choices"][0]["delta"]["content"], "");
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "hello world");
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );
    }

    #[test]
    fn thinking_streams_as_reasoning_content() {
        let frames = stream_frames(&plan(
            vec![
                Block::Thinking {
                    text: "let me see".into(),
                    signature: "sig".into(),
                },
                Block::Text("ok".into()),
            ],
            false,
        ));
        let reasoning: String = parse(&frames)
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["reasoning_content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(reasoning, "let me see");
        assert!(frames.iter().all(|f| !f.data.contains("sig")));
    }

    #[test]
    fn complete_body_shape() {
        let body = completion_body(&plan(
            vec![
                Block::Thinking {
                    text: "hmm".into(),
                    signature: "s".into(),
                },
                call("call_1", "ls", "{}"),
            ],
            false,
        ));
        let message = &body["choices"][0]["message"];
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(message["content"], Value::Null);
        assert_eq!(message["reasoning_content"], "hmm");
        assert_eq!(message["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 320);
    }
}
