//! Each response kind, rendered in both wire formats, streamed and complete.

use serde_json::{Value, json};
use troupe_scripted::{
    Protocol, Response, Script, ScriptedServer, StopReason, Usage, text, thinking, tool_call_raw,
};

use crate::support::{Assembled, ask, assemble_anthropic, assemble_openai, events, payloads, post};

/// 50 characters: five deltas of ten.
const ANSWER: &str = "Hello from the scripted model, streamed in pieces.";

#[tokio::test]
async fn anthropic_text_stream_has_the_live_event_sequence() {
    let server = ScriptedServer::start(Script::new().then(text(ANSWER).with_chunk_chars(10)))
        .await
        .unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "hi", true),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(
        response.headers()["request-id"]
            .to_str()
            .unwrap()
            .starts_with("req_")
    );
    let events = events(response).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
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
    let payloads = payloads(&events);
    assert_eq!(payloads[0]["message"]["model"], "claude-test");
    assert!(
        payloads[0]["message"]["id"]
            .as_str()
            .unwrap()
            .starts_with("msg_01")
    );
    assert_eq!(payloads[0]["message"]["role"], "assistant");
    let message = assemble_anthropic(&events);
    assert_eq!(message.text, ANSWER);
    assert_eq!(message.stop_reason.as_deref(), Some("end_turn"));
    assert!(message.stopped);
    // Without scripted usage the server estimates from sizes.
    assert!(message.usage["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        message.usage["output_tokens"],
        (ANSWER.len() as u64).div_ceil(4)
    );
}

#[tokio::test]
async fn anthropic_thinking_text_and_parallel_tool_calls() {
    let usage = Usage::new(598, 92)
        .with_cache_read(18_639)
        .with_cache_creation(120);
    let script = Script::new().then(
        thinking("The user wants two files read.", "EoQDCm0IDhgC-signature")
            .and_text("Reading both.")
            .and_tool_call(
                "read_file",
                json!({"path": "src/main.rs", "limit": 12_345_678_901_u64}),
            )
            .and_tool_call("list_dir", json!({}))
            .with_usage(usage)
            .with_chunk_chars(4),
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "read", true),
    )
    .await;
    let events = events(response).await;
    let message = assemble_anthropic(&events);
    assert_eq!(message.thinking, "The user wants two files read.");
    assert_eq!(message.signature, "EoQDCm0IDhgC-signature");
    assert_eq!(message.text, "Reading both.");
    assert_eq!(message.tool_calls.len(), 2);
    for call in &message.tool_calls {
        assert!(call.id.starts_with("toolu_01"), "{}", call.id);
    }
    assert_ne!(message.tool_calls[0].id, message.tool_calls[1].id);
    assert_eq!(message.tool_calls[0].name, "read_file");
    let args: Value = serde_json::from_str(&message.tool_calls[0].arguments).unwrap();
    assert_eq!(
        args,
        json!({"path": "src/main.rs", "limit": 12_345_678_901_u64})
    );
    assert_eq!(message.tool_calls[1].arguments, "{}");
    assert_eq!(message.stop_reason.as_deref(), Some("tool_use"));
    for usage_json in [&message.start_usage, &message.usage] {
        assert_eq!(usage_json["input_tokens"], 598);
        assert_eq!(usage_json["cache_read_input_tokens"], 18_639);
        assert_eq!(usage_json["cache_creation_input_tokens"], 120);
    }
    assert_eq!(message.usage["output_tokens"], 92);
    // Tool input always opens with an empty fragment, and arguments are split.
    let tool_deltas: Vec<String> = payloads(&events)
        .iter()
        .filter(|p| p["delta"]["type"] == "input_json_delta" && p["index"] == 2)
        .map(|p| p["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tool_deltas[0], "");
    assert!(tool_deltas.len() > 3);
}

#[tokio::test]
async fn anthropic_complete_message() {
    let script = Script::new().then(
        thinking("hmm", "sig")
            .and_text("Done.")
            .and_tool_call("grep", json!({"pattern": "fn main"}))
            .with_stop_reason(StopReason::MaxTokens),
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "hi", false),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(
        body["content"][0],
        json!({"type": "thinking", "thinking": "hmm", "signature": "sig"})
    );
    assert_eq!(body["content"][1], json!({"type": "text", "text": "Done."}));
    assert_eq!(body["content"][2]["type"], "tool_use");
    assert!(
        body["content"][2]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_01")
    );
    assert_eq!(body["content"][2]["input"], json!({"pattern": "fn main"}));
    assert_eq!(body["stop_reason"], "max_tokens");
    assert!(body["usage"]["cache_read_input_tokens"].is_u64());
}

#[tokio::test]
async fn openai_text_stream_with_include_usage() {
    let usage = Usage::new(14, 30).with_cache_read(1024);
    let script = Script::new().then(text(ANSWER).with_usage(usage));
    let server = ScriptedServer::start(script).await.unwrap();
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "hi", true),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().contains_key("x-request-id"));
    let events = events(response).await;
    assert!(
        events.iter().all(|e| e.event == "message"),
        "OpenAI events are unnamed"
    );
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks = payloads(&events);
    // Default chunking: several content deltas.
    let content_deltas = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(content_deltas > 3);
    // Every chunk but the last carries "usage": null.
    for chunk in &chunks[..chunks.len() - 1] {
        assert_eq!(chunk["usage"], Value::Null);
        assert!(chunk.get("usage").is_some());
        assert_eq!(chunk["model"], "gpt-test");
        assert!(chunk["id"].as_str().unwrap().starts_with("chatcmpl-"));
    }
    let message = assemble_openai(&events);
    assert_eq!(message.content, ANSWER);
    assert_eq!(message.finish_reason.as_deref(), Some("stop"));
    let usage = message.usage.expect("include_usage chunk");
    assert_eq!(usage["prompt_tokens"], 14 + 1024);
    assert_eq!(usage["completion_tokens"], 30);
    assert_eq!(usage["total_tokens"], 14 + 1024 + 30);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1024);
    assert!(message.done);
}

#[tokio::test]
async fn openai_parallel_tool_calls_accumulate_by_index() {
    let script = Script::new()
        .then(
            text("Checking both.")
                .and_tool_call("get_weather", json!({"city": "Paris", "units": "c"}))
                .and_tool_call_with_id("call_fixed", "get_stock_price", json!({"ticker": "AAPL"}))
                .with_chunk_chars(3),
        )
        .then(tool_call_raw("grep", "{\"pattern\": \"unterminated"));
    let server = ScriptedServer::start(script).await.unwrap();
    let mut body = ask(Protocol::OpenAi, "go", true);
    body.as_object_mut().unwrap().remove("stream_options");
    let events = events(post(&server, Protocol::OpenAi, &body).await).await;
    let message = assemble_openai(&events);
    assert_eq!(message.content, "Checking both.");
    assert_eq!(message.tool_calls.len(), 2);
    assert!(message.tool_calls[0].id.starts_with("call_"));
    assert_eq!(message.tool_calls[0].name, "get_weather");
    assert_eq!(
        message.tool_calls[0].arguments,
        r#"{"city":"Paris","units":"c"}"#
    );
    assert_eq!(
        message.tool_calls[1],
        Assembled {
            id: "call_fixed".into(),
            name: "get_stock_price".into(),
            arguments: r#"{"ticker":"AAPL"}"#.into(),
        }
    );
    assert_eq!(message.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        message.usage, None,
        "no usage chunk unless include_usage was asked for"
    );
    let chunks = payloads(&events);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    let fragments = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0)
        .count();
    assert!(fragments > 3, "arguments are split over several chunks");

    // Malformed arguments reach the client byte for byte.
    let events = crate::support::events(
        post(
            &server,
            Protocol::OpenAi,
            &ask(Protocol::OpenAi, "again", true),
        )
        .await,
    )
    .await;
    let message = assemble_openai(&events);
    assert_eq!(
        message.tool_calls[0].arguments,
        "{\"pattern\": \"unterminated"
    );
}

#[tokio::test]
async fn openai_reasoning_and_complete_completion() {
    let script = Script::new()
        .then(
            thinking("Need the weather tool.", "sig")
                .and_tool_call("weather", json!({"location": "SF"})),
        )
        .then(
            thinking("Short.", "sig")
                .and_text("It is sunny.")
                .with_usage(Usage::new(19, 83).with_cache_read(320)),
        );
    let server = ScriptedServer::start(script).await.unwrap();
    let events = events(
        post(
            &server,
            Protocol::OpenAi,
            &ask(Protocol::OpenAi, "weather?", true),
        )
        .await,
    )
    .await;
    let message = assemble_openai(&events);
    assert_eq!(message.reasoning, "Need the weather tool.");
    assert_eq!(message.content, "");
    assert_eq!(message.tool_calls[0].name, "weather");
    let first = &payloads(&events)[0];
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(first["choices"][0]["delta"]["content"], Value::Null);

    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "and now?", false),
    )
    .await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "It is sunny.");
    assert_eq!(choice["message"]["reasoning_content"], "Short.");
    assert!(choice["message"].get("tool_calls").is_none());
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 339);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 320);
}

#[tokio::test]
async fn stop_reasons_map_per_protocol() {
    let cases = [
        (StopReason::MaxTokens, "max_tokens", "length"),
        (StopReason::StopSequence, "stop_sequence", "stop"),
        (StopReason::Refusal, "refusal", "content_filter"),
    ];
    let script: Script = cases
        .iter()
        .flat_map(|(reason, _, _)| {
            let response = text("partial").with_stop_reason(*reason);
            [response.clone(), response]
        })
        .collect();
    let server = ScriptedServer::start(script).await.unwrap();
    for (_, anthropic, openai) in cases {
        let events_a = events(
            post(
                &server,
                Protocol::Anthropic,
                &ask(Protocol::Anthropic, "x", true),
            )
            .await,
        )
        .await;
        assert_eq!(
            assemble_anthropic(&events_a).stop_reason.as_deref(),
            Some(anthropic)
        );
        let events_o =
            events(post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await).await;
        assert_eq!(
            assemble_openai(&events_o).finish_reason.as_deref(),
            Some(openai)
        );
    }
}

#[tokio::test]
async fn empty_response_still_completes() {
    let server = ScriptedServer::start(Script::new().then(Response::empty()))
        .await
        .unwrap();
    let events = events(
        post(
            &server,
            Protocol::Anthropic,
            &ask(Protocol::Anthropic, "x", true),
        )
        .await,
    )
    .await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        ["message_start", "ping", "message_delta", "message_stop"]
    );
}
