//! Invariant checks through HTTP: the 400 answer, recording, strict mode.
//! (Every rule's positive and negative cases are unit-tested beside the
//! checks; these tests prove the server applies them to every request.)

use serde_json::{Value, json};
use troupe_scripted::{Protocol, Rule, Script, ScriptedServer, ServerConfig, text};

use crate::support::{ask, assemble_anthropic, assemble_openai, client, endpoint, events, post};

/// An Anthropic history whose tool call was never answered.
fn anthropic_unanswered_call() -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": true,
        "messages": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]},
            {"role": "user", "content": "never mind"}
        ]
    })
}

/// An OpenAI history with a tool result nobody asked for.
fn openai_orphan_result() -> Value {
    json!({
        "model": "gpt-test",
        "stream": true,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_9", "content": "stray"}
        ]
    })
}

#[tokio::test]
async fn anthropic_violation_is_a_400_and_does_not_consume_a_turn() {
    let server = ScriptedServer::start(Script::new().then(text("valid answer")))
        .await
        .unwrap();
    let response = post(&server, Protocol::Anthropic, &anthropic_unanswered_call()).await;
    assert_eq!(response.status(), 400);
    assert!(response.headers().contains_key("request-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("[unanswered-tool-call]"), "{message}");
    assert!(message.contains("toolu_1"), "{message}");

    // The turn is still there for a valid request.
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "hi", true),
    )
    .await;
    assert_eq!(
        assemble_anthropic(&events(response).await).text,
        "valid answer"
    );

    let violations = server.take_violations();
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].rule, Rule::UnansweredToolCall);
    assert_eq!(violations[0].request_index, Some(0));
    assert_eq!(violations[0].protocol, Some(Protocol::Anthropic));
    assert_eq!(server.requests()[0].turn, None);
    assert_eq!(server.requests()[1].turn, Some(0));
}

#[tokio::test]
async fn openai_violation_is_a_400_in_the_openai_shape() {
    let server = ScriptedServer::start(Script::new().then(text("valid answer")))
        .await
        .unwrap();
    let response = post(&server, Protocol::OpenAi, &openai_orphan_result()).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[orphan-tool-result]")
    );
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "hi", true),
    )
    .await;
    assert_eq!(
        assemble_openai(&events(response).await).content,
        "valid answer"
    );
    let rules: Vec<Rule> = server.take_violations().iter().map(|v| v.rule).collect();
    assert_eq!(rules, [Rule::OrphanToolResult]);
}

#[tokio::test]
async fn several_violations_are_all_named() {
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    let body = json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "tools": [{"name": "read file", "input_schema": {}}],
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": ""}
        ]
    });
    let response = post(&server, Protocol::Anthropic, &body).await;
    assert_eq!(response.status(), 400);
    let rules: Vec<Rule> = server.take_violations().iter().map(|v| v.rule).collect();
    assert_eq!(
        rules,
        [
            Rule::InvalidToolName,
            Rule::InvalidRole,
            Rule::EmptyContent,
            Rule::FirstMessageNotUser
        ]
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_malformed_request() {
    let server = ScriptedServer::start(Script::new().then(text("unused")))
        .await
        .unwrap();
    let response = client()
        .post(endpoint(&server, Protocol::OpenAi))
        .header("content-type", "application/json")
        .body("{\"model\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let violations = server.take_violations();
    assert_eq!(violations[0].rule, Rule::MalformedRequest);
    assert!(violations[0].detail.contains("not JSON"));
    assert_eq!(server.requests()[0].body, Value::Null);
}

#[tokio::test]
async fn valid_tool_round_trips_pass_in_both_protocols() {
    let server = ScriptedServer::start(Script::new().then(text("a")).then(text("b")))
        .await
        .unwrap();
    let anthropic = json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": true,
        "messages": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "ls", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.rs"}]}
        ]
    });
    assert_eq!(
        post(&server, Protocol::Anthropic, &anthropic)
            .await
            .status(),
        200
    );
    let openai = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.rs"}
        ]
    });
    assert_eq!(post(&server, Protocol::OpenAi, &openai).await.status(), 200);
    assert!(server.violations().is_empty());
}

#[tokio::test]
#[should_panic(expected = "dropped with 1 protocol violation(s)")]
async fn strict_server_panics_on_drop_with_violations() {
    let server = ScriptedServer::start(Script::new().then(text("unused")))
        .await
        .unwrap();
    let response = post(&server, Protocol::Anthropic, &anthropic_unanswered_call()).await;
    assert_eq!(response.status(), 400);
    drop(server);
}

#[tokio::test]
async fn non_strict_server_does_not_panic_on_drop() {
    let server = ScriptedServer::start_with(
        Script::new().then(text("unused")),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let response = post(&server, Protocol::OpenAi, &openai_orphan_result()).await;
    assert_eq!(
        response.status(),
        400,
        "violations are still answered with a 400"
    );
    assert_eq!(server.violations().len(), 1, "and still recorded");
    drop(server);
}
