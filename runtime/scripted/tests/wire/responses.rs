//! The Responses endpoint (`POST /v1/responses`) over loopback HTTP: the
//! named event sequence of text, reasoning and parallel calls, the complete
//! response object, the call/output pairing checked on every request, faults
//! before and during the stream, and recording.

use serde_json::{Value, json};
use troupe_scripted::{
    Fault, Matcher, Protocol, Rule, Script, ScriptedServer, Usage, text, thinking,
};

use crate::support::{ask, events, payloads, post, raw_body};

const RESPONSES: Protocol = Protocol::OpenAiResponses;

/// The events of `payloads` of `kind`.
fn of_kind<'a>(payloads: &'a [Value], kind: &str) -> Vec<&'a Value> {
    payloads.iter().filter(|p| p["type"] == kind).collect()
}

#[tokio::test]
async fn text_streams_as_named_events_ending_completed() {
    let server = ScriptedServer::start(
        Script::new().then(
            text("Hello from the scripted server.")
                .with_chunk_chars(5)
                .with_usage(Usage::new(40, 7).with_cache_read(1_000)),
        ),
    )
    .await
    .unwrap();
    let response = post(&server, RESPONSES, &ask(RESPONSES, "hi", true)).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-request-id"));
    let events = events(response).await;
    for event in &events {
        let payload: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(
            event.event,
            payload["type"].as_str().unwrap(),
            "named events"
        );
    }
    let payloads = payloads(&events);
    assert_eq!(payloads[0]["type"], "response.created");
    let text: String = of_kind(&payloads, "response.output_text.delta")
        .iter()
        .map(|p| p["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from the scripted server.");
    let last = payloads.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["usage"]["input_tokens"], 1_040);
    assert_eq!(
        last["response"]["usage"]["input_tokens_details"]["cached_tokens"],
        1_000
    );
    let recorded = &server.requests()[0];
    assert_eq!(recorded.protocol, RESPONSES);
    assert_eq!(recorded.path, "/v1/responses");
    assert_eq!(
        recorded.response_id.as_deref(),
        last["response"]["id"].as_str()
    );
    assert!(
        recorded
            .response_id
            .as_deref()
            .unwrap()
            .starts_with("resp_")
    );
}

#[tokio::test]
async fn reasoning_and_parallel_calls_then_their_outputs_come_back() {
    let server = ScriptedServer::start(
        Script::new()
            .then(
                thinking("Two files to read.", "enc-state")
                    .and_tool_call("read_file", json!({"path": "a.rs"}))
                    .and_tool_call("read_file", json!({"path": "b.rs"})),
            )
            .then(text("Both read.")),
    )
    .await
    .unwrap();
    let response = post(&server, RESPONSES, &ask(RESPONSES, "read both", true)).await;
    let payloads = payloads(&events(response).await);
    let done: Vec<Value> = of_kind(&payloads, "response.output_item.done")
        .into_iter()
        .map(|p| p["item"].clone())
        .collect();
    assert_eq!(done[0]["type"], "reasoning");
    assert_eq!(done[0]["encrypted_content"], "enc-state");
    let summary: String = of_kind(&payloads, "response.reasoning_summary_text.delta")
        .iter()
        .map(|p| p["delta"].as_str().unwrap())
        .collect();
    assert_eq!(summary, "Two files to read.");
    let calls = &done[1..];
    assert!(calls.iter().all(|c| c["type"] == "function_call"));
    assert_ne!(calls[0]["call_id"], calls[1]["call_id"]);
    // Argument deltas name the item, not the call.
    for (call, path) in calls.iter().zip(["a.rs", "b.rs"]) {
        let arguments: String = of_kind(&payloads, "response.function_call_arguments.delta")
            .iter()
            .filter(|p| p["item_id"] == call["id"])
            .map(|p| p["delta"].as_str().unwrap())
            .collect();
        assert_eq!(arguments, json!({"path": path}).to_string());
    }
    let mut input = vec![json!({"type": "message", "role": "user", "content": "read both"})];
    // Sent back as a client must with store: false: without the ids naming
    // the items, which the provider did not keep.
    input.extend(done.iter().map(|item| {
        let mut item = item.clone();
        item.as_object_mut().unwrap().remove("id");
        item
    }));
    for call in calls {
        input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "fn x() {}"}));
    }
    let mut body = ask(RESPONSES, "", true);
    body["input"] = Value::Array(input);
    let response = post(&server, RESPONSES, &body).await;
    assert_eq!(response.status(), 200);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].call_id, calls[0]["call_id"].as_str().unwrap());
}

#[tokio::test]
async fn an_unanswered_call_or_an_orphan_output_is_a_400_naming_the_rule() {
    let server = ScriptedServer::start(Script::new().then(text("valid answer")))
        .await
        .unwrap();
    let mut body = ask(RESPONSES, "", true);
    body["input"] = json!([
        {"type": "message", "role": "user", "content": "go"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a"},
        {"type": "function_call_output", "call_id": "call_9", "output": "b"}
    ]);
    let response = post(&server, RESPONSES, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("[unanswered-tool-call]"), "{message}");
    assert!(message.contains("[orphan-tool-result]"), "{message}");
    // The violation consumed no turn.
    let response = post(&server, RESPONSES, &ask(RESPONSES, "hi", false)).await;
    let complete: Value = response.json().await.unwrap();
    assert_eq!(complete["object"], "response");
    assert_eq!(complete["status"], "completed");
    assert_eq!(complete["output"][0]["content"][0]["text"], "valid answer");
    let rules: Vec<Rule> = server.take_violations().iter().map(|v| v.rule).collect();
    assert_eq!(rules, [Rule::UnansweredToolCall, Rule::OrphanToolResult]);
}

#[tokio::test]
async fn faults_in_the_responses_shapes() {
    let server = ScriptedServer::start(
        Script::new()
            .then(Fault::rate_limited(2))
            .then(Fault::prompt_too_long(500_000, 400_000))
            .then(Fault::error_after(3, text("never finished")))
            .then(Fault::cut_after(4, text("cut short"))),
    )
    .await
    .unwrap();
    let response = post(&server, RESPONSES, &ask(RESPONSES, "a", true)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    let response = post(&server, RESPONSES, &ask(RESPONSES, "b", true)).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let response = post(&server, RESPONSES, &ask(RESPONSES, "c", true)).await;
    let payloads = payloads(&events(response).await);
    assert_eq!(payloads.len(), 4);
    let last = payloads.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["code"], "server_error");
    let response = post(&server, RESPONSES, &ask(RESPONSES, "d", true)).await;
    let (body, _) = raw_body(response).await;
    assert!(!body.contains("response.completed"), "{body}");
    assert_eq!(body.matches("\n\n").count(), 4);
}

#[tokio::test]
async fn the_protocol_matcher_tells_the_openai_endpoints_apart() {
    let server = ScriptedServer::start(
        Script::new()
            .when(Matcher::protocol(Protocol::OpenAi), text("chat"))
            .when(Matcher::protocol(RESPONSES), text("responses")),
    )
    .await
    .unwrap();
    let response = post(&server, RESPONSES, &ask(RESPONSES, "x", false)).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["output"][0]["content"][0]["text"], "responses");
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "x", false),
    )
    .await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "chat");
}
