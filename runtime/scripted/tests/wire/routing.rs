//! Turn selection, script exhaustion, push_turn, recording and waiting.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_scripted::{
    Matcher, Protocol, Rule, Script, ScriptedServer, Turn, WaitError, text, tool_call,
};

use crate::support::{WAIT, ask, assemble_anthropic, assemble_openai, client, events, post};

async fn anthropic_text(server: &ScriptedServer, prompt: &str) -> String {
    let response = post(
        server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, prompt, true),
    )
    .await;
    assert_eq!(response.status(), 200);
    assemble_anthropic(&events(response).await).text
}

#[tokio::test]
async fn parallel_requests_are_routed_by_content() {
    // Turns are listed in the opposite order from the requests' arrival.
    let script = Script::new()
        .when(
            Matcher::first_user_contains("gamma"),
            text("reviewed gamma"),
        )
        .when(Matcher::first_user_contains("beta"), text("reviewed beta"))
        .when(
            Matcher::first_user_contains("alpha"),
            text("reviewed alpha"),
        );
    let server = ScriptedServer::start(script).await.unwrap();
    let (a, b, c) = tokio::join!(
        anthropic_text(&server, "review module alpha"),
        anthropic_text(&server, "review module beta"),
        anthropic_text(&server, "review module gamma"),
    );
    assert_eq!(
        (a.as_str(), b.as_str(), c.as_str()),
        ("reviewed alpha", "reviewed beta", "reviewed gamma")
    );
    assert_eq!(server.remaining_turns(), 0);
}

#[tokio::test]
async fn first_matching_unconsumed_turn_wins() {
    let script = Script::new()
        .when(
            Matcher::last_user_contains("special"),
            text("special answer"),
        )
        .then(text("generic one"))
        .then(text("generic two"));
    let server = ScriptedServer::start(script).await.unwrap();
    assert_eq!(anthropic_text(&server, "plain").await, "generic one");
    assert_eq!(
        anthropic_text(&server, "something special").await,
        "special answer"
    );
    assert_eq!(
        anthropic_text(&server, "something special").await,
        "generic two"
    );
    let turns: Vec<Option<usize>> = server.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(1), Some(0), Some(2)]);
}

#[tokio::test]
async fn system_protocol_and_predicate_matchers() {
    let script = Script::new()
        .then(Turn::new(text("from the planner")).when(Matcher::system_contains("planner")))
        .then(Turn::new(text("openai only")).when(Matcher::protocol(Protocol::OpenAi)))
        .then(
            Turn::new(text("with tools")).when(Matcher::predicate("offers read_file", |r| {
                r.tool_names().iter().any(|n| n == "read_file")
            })),
        );
    let server = ScriptedServer::start(script).await.unwrap();

    let mut body = ask(Protocol::Anthropic, "x", true);
    body["tools"] = json!([{"name": "read_file", "input_schema": {"type": "object"}}]);
    let response = post(&server, Protocol::Anthropic, &body).await;
    assert_eq!(
        assemble_anthropic(&events(response).await).text,
        "with tools"
    );

    let mut body = ask(Protocol::Anthropic, "x", true);
    body["system"] = json!([{"type": "text", "text": "You are the planner."}]);
    let response = post(&server, Protocol::Anthropic, &body).await;
    assert_eq!(
        assemble_anthropic(&events(response).await).text,
        "from the planner"
    );

    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(
        assemble_openai(&events(response).await).content,
        "openai only"
    );
}

#[tokio::test]
async fn exhausted_script_is_a_500_and_a_violation() {
    let server = ScriptedServer::start(Script::new().then(text("only")))
        .await
        .unwrap();
    assert_eq!(anthropic_text(&server, "one").await, "only");
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let response = post(&server, protocol, &ask(protocol, "two", true)).await;
        assert_eq!(response.status(), 500);
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("script exhausted"), "{message}");
    }
    let violations = server.take_violations();
    assert_eq!(violations.len(), 2);
    assert!(violations.iter().all(|v| v.rule == Rule::ScriptExhausted));
    assert_eq!(violations[0].request_index, Some(1));
    assert_eq!(violations[1].protocol, Some(Protocol::OpenAi));
    assert!(
        server.violations().is_empty(),
        "take_violations clears them"
    );
}

#[tokio::test]
async fn unmatched_request_is_a_500_naming_pending_turns() {
    let server =
        ScriptedServer::start(Script::new().when(Matcher::last_user_contains("alpha"), text("a")))
            .await
            .unwrap();
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "beta", true),
    )
    .await;
    assert_eq!(response.status(), 500);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("turn 0: last user message contains \"alpha\"")
    );
    let violations = server.take_violations();
    assert_eq!(violations[0].rule, Rule::NoTurnMatched);
    assert_eq!(
        server.remaining_turns(),
        1,
        "the unmatched turn stays available"
    );
}

#[tokio::test]
async fn push_turn_extends_a_running_script() {
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    server.push_turn(text("pushed first"));
    server
        .push_turn(Turn::new(tool_call("ls", json!({}))).when(Matcher::last_user_contains("list")));
    assert_eq!(server.remaining_turns(), 2);
    assert_eq!(anthropic_text(&server, "hello").await, "pushed first");
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "list files", true),
    )
    .await;
    assert_eq!(
        assemble_openai(&events(response).await).tool_calls[0].name,
        "ls"
    );
    assert_eq!(server.requests()[1].turn, Some(1));
}

#[tokio::test]
async fn requests_are_recorded_in_arrival_order() {
    let server = ScriptedServer::start(Script::new().then(text("a")).then(text("b")))
        .await
        .unwrap();
    let waiter = server.wait_for_requests(2, WAIT);
    let sender = async {
        anthropic_text(&server, "first").await;
        let response = client()
            .post(format!("{}/chat/completions", server.openai_base_url()))
            .bearer_auth("sk-test")
            .header("x-trace", "abc")
            .json(&ask(Protocol::OpenAi, "second", false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    };
    let (recorded, ()) = tokio::join!(waiter, sender);
    let recorded = recorded.unwrap();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].index, 0);
    assert_eq!(recorded[0].protocol, Protocol::Anthropic);
    assert_eq!(recorded[0].path, "/v1/messages");
    assert_eq!(recorded[0].header("x-api-key"), Some("test-key"));
    assert!(recorded[0].is_streaming());
    assert_eq!(recorded[0].model(), Some("claude-test"));
    assert_eq!(recorded[1].index, 1);
    assert_eq!(recorded[1].protocol, Protocol::OpenAi);
    assert_eq!(recorded[1].path, "/v1/chat/completions");
    assert_eq!(recorded[1].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded[1].header("X-Trace"), Some("abc"));
    assert_eq!(recorded[1].last_user_text().as_deref(), Some("second"));
    assert_eq!(recorded[1].system_text(), "You are a scripted test.");
    assert!(recorded[1].body_len > 0);
}

#[tokio::test]
async fn wait_for_requests_times_out_with_a_count() {
    let server = ScriptedServer::start(Script::new().then(text("a")))
        .await
        .unwrap();
    anthropic_text(&server, "only one").await;
    let timeout = Duration::from_millis(50);
    let error = server.wait_for_requests(2, timeout).await.unwrap_err();
    assert_eq!(
        error,
        WaitError::Timeout {
            what: "requests",
            wanted: 2,
            seen: 1,
            timeout
        }
    );
    assert!(error.to_string().contains("1 recorded so far"));
}

#[tokio::test]
async fn base_urls_follow_the_sdks() {
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    let port = server.addr().port();
    assert_eq!(
        server.anthropic_base_url(),
        format!("http://127.0.0.1:{port}")
    );
    assert_eq!(
        server.openai_base_url(),
        format!("http://127.0.0.1:{port}/v1")
    );
    assert!(server.addr().ip().is_loopback());
}

#[tokio::test]
async fn unknown_endpoints_are_404_violations() {
    let server = ScriptedServer::start(Script::new().then(text("unused")))
        .await
        .unwrap();
    // A doubled /v1, the classic base-URL mistake.
    let response = client()
        .post(format!("{}/v1/chat/completions", server.openai_base_url()))
        .json(&ask(Protocol::OpenAi, "x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let response = client()
        .get(format!("{}/v1/messages", server.anthropic_base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let violations = server.take_violations();
    assert_eq!(violations.len(), 2);
    assert!(violations.iter().all(|v| v.rule == Rule::UnknownEndpoint));
    assert!(violations[0].detail.contains("/v1/v1/chat/completions"));
    assert!(violations[1].detail.starts_with("GET /v1/messages"));
    assert_eq!(server.remaining_turns(), 1);
}

#[test]
fn server_handles_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<ScriptedServer>();
    assert_send_sync::<Script>();
}
