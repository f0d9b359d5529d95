//! The OpenAI Responses adapter without a live provider: event sequences
//! written from the documented stream format (`tests/data/responses/*.sse`)
//! through the public decoder at several chunkings, hostile and broken
//! streams, the byte-exact request body each scenario's next request
//! produces (`*.request.json`), and requests chained by
//! `previous_response_id` against the scripted server.

use std::time::Duration;

use crate::decoding::{chunked, collect};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use troupe_config::ResolvedProvider;
use troupe_llm::openai_responses::{self, OpenAiResponsesProvider};
use troupe_llm::retry::RetryPolicy;
use troupe_llm::{
    ChatRequest, Provider, ProviderError, ResponseAccumulator, ResponseMetadata, StreamEvent,
};
use troupe_protocol::model::{
    Message, Protocol, ProviderErrorKind, StopReason, SystemPrompt, ToolCall, ToolDefinition,
    ToolResult, Usage,
};
use troupe_scripted::{Script, ScriptedServer, text};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/responses");
/// Ways to cut a body into chunks: whole, byte by byte, and odd sizes.
const CHUNKINGS: [usize; 4] = [usize::MAX, 1, 7, 61];
const TEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Set to rewrite the `*.request.json` files from the current builder.
const UPDATE_VAR: &str = "TROUPE_UPDATE_REQUEST_BODIES";
/// The session every request here belongs to.
const SESSION: &str = "sess_0123";
const MODEL: &str = "gpt-5-2025-08-07";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/{name}")).unwrap()
}

/// Decodes `body` at every chunking and checks they all agree.
async fn decode(body: &str) -> Vec<Result<StreamEvent, ProviderError>> {
    let mut first = None;
    for size in CHUNKINGS {
        let results = collect(openai_responses::decode_sse(
            "test",
            chunked(body.as_bytes().to_vec(), size),
        ))
        .await;
        match &first {
            None => first = Some(results),
            Some(first) => assert_eq!(&results, first, "chunks of {size} bytes"),
        }
    }
    first.unwrap()
}

async fn decode_ok(name: &str) -> Vec<StreamEvent> {
    decode(&fixture(name))
        .await
        .into_iter()
        .map(|result| result.expect("no error"))
        .collect()
}

fn metadata(id: &str) -> StreamEvent {
    StreamEvent::Metadata(ResponseMetadata {
        id: Some(id.into()),
        model: Some(MODEL.into()),
    })
}

fn texts(pieces: &[&str]) -> Vec<StreamEvent> {
    pieces
        .iter()
        .map(|piece| StreamEvent::TextDelta((*piece).into()))
        .collect()
}

fn usage(input: u64, output: u64, cache_read: u64) -> StreamEvent {
    StreamEvent::Usage(Usage {
        input,
        output,
        cache_read,
        cache_write: 0,
    })
}

fn call(id: &str, name: &str, input: &str) -> StreamEvent {
    StreamEvent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: input.into(),
    })
}

/// The `item` of the `response.output_item.done` event of output `index`,
/// exactly as the fixture holds it.
fn done_item(name: &str, index: u64) -> String {
    #[derive(serde::Deserialize)]
    struct Done {
        output_index: u64,
        item: Box<RawValue>,
    }
    fixture(name)
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| data.contains("\"response.output_item.done\""))
        .filter_map(|data| serde_json::from_str::<Done>(data).ok())
        .find(|done| done.output_index == index)
        .map(|done| done.item.get().to_owned())
        .unwrap()
}

fn config(thinking: Option<u32>) -> ResolvedProvider {
    ResolvedProvider {
        name: "test".into(),
        protocol: Protocol::OpenAiResponses,
        model: "gpt-5".into(),
        base_url: "https://api.openai.com/v1".into(),
        api_key: Some("key".into()),
        api_key_env: "OPENAI_API_KEY".into(),
        context_window: 400_000,
        max_tokens: 8_192,
        thinking_budget: thinking,
        price: None,
        idle_timeout: Duration::from_secs(300),
        max_retries: 4,
        store: false,
    }
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        system: SystemPrompt {
            stable: "You are Troupe.".into(),
            environment: "cwd: /work".into(),
        },
        messages,
        tools: ["read_file", "bash"]
            .iter()
            .map(|name| ToolDefinition {
                name: (*name).into(),
                description: format!("The {name} tool."),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            })
            .collect(),
        session_id: Some(SESSION.into()),
    }
}

/// The assistant message a response's events make.
fn assistant(events: &[StreamEvent]) -> Message {
    let mut acc = ResponseAccumulator::new();
    events.iter().for_each(|event| acc.push(event));
    acc.into_message()
}

/// Compares the body with `{scenario}.request.json`, byte for byte.
fn assert_request_body(scenario: &str, body: &[u8]) {
    let path = format!("{DATA}/{scenario}.request.json");
    if std::env::var_os(UPDATE_VAR).is_some() {
        std::fs::write(&path, body).unwrap();
    }
    let recorded = std::fs::read(&path).unwrap();
    assert_eq!(
        String::from_utf8_lossy(body),
        String::from_utf8_lossy(&recorded),
        "{scenario}: the request body changed (set {UPDATE_VAR} to record it again)"
    );
}

// ---------------------------------------------------------------------------
// Documented event sequences
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_text_answer_streams_its_deltas_then_usage_and_end_turn() {
    let events = decode_ok("text.sse").await;
    let mut wanted = vec![metadata(
        "resp_68e0a1text0000000000000000000000000000000000001",
    )];
    wanted.extend(texts(&["Hello", "! The answer", " is 42", "."]));
    wanted.push(usage(296, 21, 1_024));
    wanted.push(StreamEvent::Stop(StopReason::EndTurn));
    assert_eq!(events, wanted);
    let body = openai_responses::request_body(
        &config(None),
        &request(vec![Message::user_text("What is the answer?")]),
    )
    .unwrap();
    let value: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["store"], false);
    assert_eq!(value["prompt_cache_key"], SESSION);
    assert_eq!(value["instructions"], "You are Troupe.\n\ncwd: /work");
    assert!(value.get("include").is_none() && value.get("reasoning").is_none());
    assert_eq!(
        value["tools"][0],
        json!({"type": "function", "name": "read_file", "description": "The read_file tool.",
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}})
    );
    assert_request_body("text", &body);
}

#[tokio::test]
async fn a_call_with_arguments_over_many_deltas_arrives_complete() {
    let name = "tool_call_split_arguments.sse";
    let events = decode_ok(name).await;
    let arguments =
        r#"{"path":"src/main.rs","offset":12345678901234567890,"note":"café \"quoted\""}"#;
    assert_eq!(
        events,
        [
            metadata("resp_68e0a2call0000000000000000000000000000000000002"),
            call("call_Qz1", "read_file", arguments),
            usage(410, 57, 0),
            StreamEvent::Stop(StopReason::ToolUse),
        ]
    );
    assert!(fixture(name).matches("arguments.delta").count() > 10);
    // The next request carries the call and its output under the same call_id.
    let next = request(vec![
        Message::user_text("Read main."),
        assistant(&events),
        Message::tool_results(vec![ToolResult::text("call_Qz1", "fn main() {}", false)]),
    ]);
    let body = openai_responses::request_body(&config(None), &next).unwrap();
    let value: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        value["input"][1],
        json!({"type": "function_call", "call_id": "call_Qz1", "name": "read_file", "arguments": arguments})
    );
    assert_eq!(
        value["input"][2],
        json!({"type": "function_call_output", "call_id": "call_Qz1", "output": "fn main() {}"})
    );
    // The big integer goes out as the model wrote it.
    assert!(String::from_utf8_lossy(&body).contains("12345678901234567890"));
    assert_request_body("tool_call_split_arguments", &body);
}

#[tokio::test]
async fn two_parallel_calls_keep_their_own_arguments_by_item_id() {
    let events = decode_ok("parallel_calls.sse").await;
    assert_eq!(
        events,
        [
            metadata("resp_68e0a3par00000000000000000000000000000000000003"),
            call("call_alpha", "read_file", r#"{"path":"a.rs"}"#),
            call("call_beta", "read_file", r#"{"path":"b.rs"}"#),
            usage(388, 44, 512),
            StreamEvent::Stop(StopReason::ToolUse),
        ]
    );
    let next = request(vec![
        Message::user_text("Read both."),
        assistant(&events),
        Message::tool_results(vec![
            ToolResult::text("call_alpha", "a", false),
            ToolResult::text("call_beta", "b", true),
        ]),
    ]);
    let body = openai_responses::request_body(&config(None), &next).unwrap();
    assert_request_body("parallel_calls", &body);
}

#[tokio::test]
async fn a_reasoning_summary_streams_as_thinking_and_the_item_goes_back_without_its_id() {
    let name = "reasoning_summary.sse";
    let events = decode_ok(name).await;
    let item = done_item(name, 0);
    let mut wanted = vec![metadata(
        "resp_68e0a4rea00000000000000000000000000000000000004",
    )];
    wanted.extend(
        ["**Planning** the", " answer: check the", " file first."]
            .map(|piece| StreamEvent::ThinkingDelta(piece.into())),
    );
    wanted.push(StreamEvent::RedactedThinking(item.clone()));
    wanted.extend(texts(&["Done ", "thinking."]));
    wanted.push(usage(2_048, 310, 0));
    wanted.push(StreamEvent::Stop(StopReason::EndTurn));
    assert_eq!(events, wanted);
    let next = request(vec![
        Message::user_text("Think, then answer."),
        assistant(&events),
        Message::user_text("Go on."),
    ]);
    let body = openai_responses::request_body(&config(Some(16_000)), &next).unwrap();
    let raw = String::from_utf8(body.clone()).unwrap();
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(value["reasoning"]["summary"], "auto");
    // Whole but for the id: with store: false the provider kept no item to
    // name, and answers an item named by id with 404.
    let mut sent_back: Value = serde_json::from_str(&item).unwrap();
    sent_back.as_object_mut().unwrap().remove("id");
    assert_eq!(value["input"][1], sent_back, "{raw}");
    assert_request_body("reasoning_summary", &body);
}

#[tokio::test]
async fn an_incomplete_response_stops_at_max_tokens() {
    let events = decode_ok("incomplete_max_output_tokens.sse").await;
    let mut wanted = vec![metadata(
        "resp_68e0a5inc00000000000000000000000000000000000005",
    )];
    wanted.extend(texts(&["The list goes on: ", "one, two, thr"]));
    wanted.push(usage(300, 16, 0));
    wanted.push(StreamEvent::Stop(StopReason::MaxTokens));
    assert_eq!(events, wanted);
    let next = request(vec![
        Message::user_text("List."),
        assistant(&events),
        Message::user_text("Continue."),
    ]);
    let body = openai_responses::request_body(&config(None), &next).unwrap();
    assert_request_body("incomplete_max_output_tokens", &body);
}

/// The error a fixture ends in, after its metadata.
async fn failure(name: &str) -> ProviderError {
    let mut results = decode(&fixture(name)).await;
    let error = results.pop().unwrap().unwrap_err();
    assert!(
        results
            .iter()
            .all(|result| matches!(result, Ok(StreamEvent::Metadata(_)))),
        "{results:?}"
    );
    error
}

#[tokio::test]
async fn failed_responses_are_typed_errors_with_the_retry_rules() {
    let policy = RetryPolicy::with_max_retries(4);
    let cases = [
        (
            "failed_context_length.sse",
            ProviderErrorKind::PromptTooLong,
            None,
        ),
        ("failed_quota.sse", ProviderErrorKind::Quota, None),
        (
            "failed_rate_limit.sse",
            ProviderErrorKind::RateLimited,
            Some(Duration::from_millis(1_400)),
        ),
        (
            "error_event_rate_limit.sse",
            ProviderErrorKind::RateLimited,
            Some(Duration::from_millis(250)),
        ),
        ("failed_server_error.sse", ProviderErrorKind::Server, None),
    ];
    for (name, kind, delay) in cases {
        let error = failure(name).await;
        assert_eq!(error.kind, kind, "{name}: {error}");
        assert_eq!(error.retry_after, delay, "{name}");
        let retried = policy.decide(&error, 0, false, None, 0.0);
        match kind {
            ProviderErrorKind::PromptTooLong | ProviderErrorKind::Quota => {
                assert_eq!(retried, None, "{name}")
            }
            _ => assert!(retried.is_some(), "{name}"),
        }
        if let Some(delay) = delay {
            assert_eq!(
                retried,
                Some(delay),
                "{name}: the server's delay is honoured"
            );
        }
        // Nothing is retried once content was delivered.
        assert_eq!(policy.decide(&error, 0, true, None, 0.0), None);
    }
}

// ---------------------------------------------------------------------------
// Broken and hostile streams
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_stream_closed_before_completion_is_broken_after_its_content() {
    let full = fixture("text.sse");
    let cut = &full[..full.find("event: response.completed").unwrap()];
    let mut results = decode(cut).await;
    let error = results.pop().unwrap().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken, "{error}");
    let delivered: String = results
        .into_iter()
        .filter_map(|result| match result.unwrap() {
            StreamEvent::TextDelta(text) => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, "Hello! The answer is 42.");
    let error = failure_of("").await;
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken);
}

async fn failure_of(body: &str) -> ProviderError {
    decode(body).await.pop().unwrap().unwrap_err()
}

fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

#[tokio::test]
async fn hostile_events_get_clear_errors_and_unknown_ones_are_ignored() {
    // Malformed JSON.
    let error = failure_of("event: response.output_text.delta\ndata: {\"delta\": \n\n").await;
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("malformed stream event"), "{error}");
    // A call without a call_id is refused, not invented.
    let no_id = event(
        json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "function_call", "id": "fc_1", "name": "bash", "arguments": "{}"}}),
    );
    let error = failure_of(&no_id).await;
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse, "{error}");
    // Deltas for items never announced, unknown event types, a done item
    // whose text never came as deltas, and empty arguments.
    let body = [
        event(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_ghost", "delta": "{\"x\""})),
        event(json!({"type": "response.web_search_call.searching", "item_id": "ws_1"})),
        event(json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "bash", "arguments": ""}})),
        event(json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "bash", "arguments": ""}})),
        event(json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"type": "message", "id": "msg_1", "role": "assistant",
                     "content": [{"type": "output_text", "text": "said at once"}]}})),
        event(json!({"type": "response.completed", "response": {"id": "resp_h", "usage": null}})),
    ]
    .concat();
    let events: Vec<StreamEvent> = decode(&body)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        [
            call("call_2", "bash", "{}"),
            StreamEvent::TextDelta("said at once".into()),
            StreamEvent::Metadata(ResponseMetadata {
                id: Some("resp_h".into()),
                model: None
            }),
            StreamEvent::Stop(StopReason::ToolUse),
        ]
    );
    // A flood of unknown events costs nothing and yields nothing.
    let flood = event(json!({"type": "response.audio.delta", "delta": "x".repeat(1_000)}))
        .repeat(2_000)
        + &event(json!({"type": "response.completed", "response": {}}));
    let events = decode(&flood).await;
    assert_eq!(events, [Ok(StreamEvent::Stop(StopReason::EndTurn))]);
}

// ---------------------------------------------------------------------------
// Stored responses
// ---------------------------------------------------------------------------

#[tokio::test]
async fn store_true_chains_a_session_by_previous_response_id() {
    let server = tokio::time::timeout(
        TEST_TIMEOUT,
        ScriptedServer::start(
            Script::new()
                .then(text("Reading.").and_tool_call("read_file", json!({"path": "a.rs"})))
                .then(text("Done."))
                .then(text("Fresh.")),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let mut cfg = config(None);
    cfg.base_url = server.openai_base_url();
    cfg.model = "model-under-test".into();
    cfg.store = true;
    let provider =
        OpenAiResponsesProvider::with_retry_policy(&cfg, RetryPolicy::with_max_retries(0)).unwrap();
    let first = request(vec![Message::user_text("Read a.rs.")]);
    let events: Vec<StreamEvent> = collect(provider.stream(&first))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let call_id = events
        .iter()
        .find_map(|event| match event {
            StreamEvent::ToolCall(call) => Some(call.id.clone()),
            _ => None,
        })
        .unwrap();
    let mut second = first.clone();
    second.messages.push(assistant(&events));
    second
        .messages
        .push(Message::tool_results(vec![ToolResult::text(
            &call_id,
            "fn a() {}",
            false,
        )]));
    let events = collect(provider.stream(&second)).await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    // A rewritten history (as after compaction) is sent whole again.
    let third = request(vec![Message::user_text("Summary of before. Go on.")]);
    let events = collect(provider.stream(&third)).await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");

    let requests = server.requests();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    assert_eq!(requests[0].body["store"], true);
    assert!(requests[0].body.get("previous_response_id").is_none());
    assert_eq!(
        requests[1].body["previous_response_id"].as_str(),
        requests[0].response_id.as_deref()
    );
    assert_eq!(
        requests[1].body["input"],
        json!([{"type": "function_call_output", "call_id": call_id, "output": "fn a() {}"}]),
        "only the items after the previous response's output"
    );
    assert!(requests[2].body.get("previous_response_id").is_none());
    assert_eq!(requests[2].body["input"].as_array().unwrap().len(), 1);
}
