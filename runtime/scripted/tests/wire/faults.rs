//! Each fault: status, headers, bodies, broken streams.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_scripted::{Fault, Protocol, Script, ScriptedServer, Turn, text};

use crate::support::{WAIT, ask, assemble_anthropic, assemble_openai, events, post, raw_body};

const BOTH: [Protocol; 2] = [Protocol::Anthropic, Protocol::OpenAi];

/// Starts a server whose script is `fault` once per protocol.
async fn serve_twice(fault: Fault) -> ScriptedServer {
    ScriptedServer::start(Script::new().then(fault.clone()).then(fault))
        .await
        .unwrap()
}

/// The error object of a body in either protocol's shape, checking the shape.
fn error_of(protocol: Protocol, body: &Value) -> Value {
    if protocol == Protocol::Anthropic {
        assert_eq!(body["type"], "error");
        assert!(body["request_id"].as_str().unwrap().starts_with("req_"));
    } else {
        for key in ["message", "type", "param", "code"] {
            assert!(body["error"].get(key).is_some(), "OpenAI error has {key}");
        }
    }
    body["error"].clone()
}

#[tokio::test]
async fn rate_limited_with_retry_after_headers() {
    let server = ScriptedServer::start(
        Script::new()
            .then(Fault::rate_limited(3))
            .then(Fault::rate_limited_ms(1500))
            .then(Fault::RateLimited {
                retry_after_secs: Some(2),
                retry_after_ms: Some(2000),
            }),
    )
    .await
    .unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    assert!(response.headers().get("retry-after-ms").is_none());
    assert!(response.headers().contains_key("request-id"));
    let error = error_of(Protocol::Anthropic, &response.json().await.unwrap());
    assert_eq!(error["type"], "rate_limit_error");

    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after-ms"], "1500");
    assert!(response.headers().get("retry-after").is_none());
    let error = error_of(Protocol::OpenAi, &response.json().await.unwrap());
    assert_eq!(error["code"], "rate_limit_exceeded");

    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(response.headers()["retry-after-ms"], "2000");
}

#[tokio::test]
async fn a_fault_consumes_its_turn() {
    let server = ScriptedServer::start(
        Script::new()
            .then(Fault::rate_limited(1))
            .then(text("after retry")),
    )
    .await
    .unwrap();
    for protocol in [Protocol::Anthropic] {
        let first = post(&server, protocol, &ask(protocol, "x", true)).await;
        assert_eq!(first.status(), 429);
        let second = post(&server, protocol, &ask(protocol, "x", true)).await;
        assert_eq!(second.status(), 200);
        assert_eq!(
            assemble_anthropic(&events(second).await).text,
            "after retry"
        );
    }
    let requests = server.requests();
    assert_eq!(requests[0].turn, Some(0));
    assert_eq!(requests[1].turn, Some(1));
    assert_eq!(server.remaining_turns(), 0);
}

#[tokio::test]
async fn overloaded_is_529() {
    let server = serve_twice(Fault::Overloaded).await;
    for protocol in BOTH {
        let response = post(&server, protocol, &ask(protocol, "x", true)).await;
        assert_eq!(response.status().as_u16(), 529);
        let error = error_of(protocol, &response.json().await.unwrap());
        match protocol {
            Protocol::Anthropic => {
                assert_eq!(
                    error,
                    json!({"type": "overloaded_error", "message": "Overloaded"})
                );
            }
            Protocol::OpenAi | Protocol::OpenAiResponses => {
                assert_eq!(error["type"], "server_error")
            }
        }
    }
}

#[tokio::test]
async fn server_errors_500_502_503() {
    let script = Script::new()
        .then(Fault::InternalError)
        .then(Fault::BadGateway)
        .then(Fault::ServiceUnavailable)
        .then(Fault::InternalError)
        .then(Fault::BadGateway)
        .then(Fault::ServiceUnavailable);
    let server = ScriptedServer::start(script).await.unwrap();
    for protocol in BOTH {
        for status in [500, 502, 503] {
            let response = post(&server, protocol, &ask(protocol, "x", true)).await;
            assert_eq!(response.status().as_u16(), status);
            let error = error_of(protocol, &response.json().await.unwrap());
            let expected = if protocol == Protocol::Anthropic {
                "api_error"
            } else {
                "server_error"
            };
            assert_eq!(error["type"], expected);
        }
    }
}

#[tokio::test]
async fn prompt_too_long_in_both_shapes() {
    let server = serve_twice(Fault::prompt_too_long(208_310, 200_000)).await;
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    assert_eq!(response.status(), 400);
    let error = error_of(Protocol::Anthropic, &response.json().await.unwrap());
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(
        error["message"],
        "prompt is too long: 208310 tokens > 200000 maximum"
    );

    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(response.status(), 400);
    let error = error_of(Protocol::OpenAi, &response.json().await.unwrap());
    assert_eq!(error["code"], "context_length_exceeded");
    assert_eq!(error["type"], "invalid_request_error");
    assert!(error["message"].as_str().unwrap().contains("208310 tokens"));
}

#[tokio::test]
async fn unauthorized_is_401() {
    let server = serve_twice(Fault::Unauthorized).await;
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    assert_eq!(response.status(), 401);
    let error = error_of(Protocol::Anthropic, &response.json().await.unwrap());
    assert_eq!(error["type"], "authentication_error");
    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(response.status(), 401);
    let error = error_of(Protocol::OpenAi, &response.json().await.unwrap());
    assert_eq!(error["code"], "invalid_api_key");
}

#[tokio::test]
async fn non_json_and_custom_bodies() {
    let html = "<html><body><h1>502 Bad Gateway</h1></body></html>";
    let script = Script::new()
        .then(Fault::NonJsonBody {
            status: 502,
            body: html.into(),
        })
        .then(Fault::Custom {
            status: 429,
            headers: vec![("x-should-retry".into(), "false".into())],
            body: json!({"error": {"message": "quota", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}})
                .to_string(),
        });
    let server = ScriptedServer::start(script).await.unwrap();
    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(response.status(), 502);
    assert_eq!(response.headers()["content-type"], "text/html");
    let text = response.text().await.unwrap();
    assert_eq!(text, html);
    assert!(serde_json::from_str::<Value>(&text).is_err());

    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_quota");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_stream_closes_without_terminating_events() {
    let reply = text("This answer never finishes.").with_chunk_chars(4);
    let server = serve_twice(Fault::cut_after(4, reply)).await;
    for protocol in BOTH {
        let response = post(&server, protocol, &ask(protocol, "x", true)).await;
        assert_eq!(response.status(), 200);
        let (text, failed) = raw_body(response).await;
        assert!(
            failed,
            "a cut stream ends with a body error, not a clean end"
        );
        assert_eq!(text.matches("data: ").count(), 4, "{text}");
        assert!(text.ends_with("\n\n"), "whole events only: {text:?}");
        assert!(!text.contains("message_stop"));
        assert!(!text.contains("[DONE]"));
    }
    assert!(
        server.aborted_streams().is_empty(),
        "a scripted cut is not a client abort"
    );
}

#[tokio::test]
async fn cut_non_streaming_body_is_truncated() {
    let server = ScriptedServer::start(
        Script::new().then(Fault::cut_after(0, text("complete JSON would be here"))),
    )
    .await
    .unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", false),
    )
    .await;
    assert_eq!(response.status(), 200);
    let declared: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (text, failed) = raw_body(response).await;
    assert!(failed);
    assert!(text.len() < declared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_stream_sends_nothing_after_k_events() {
    let server = serve_twice(Fault::stall_after(3, text("stalls before this is done"))).await;
    for protocol in BOTH {
        let response = post(&server, protocol, &ask(protocol, "x", true)).await;
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let mut received = String::new();
        while received.matches("data: ").count() < 3 {
            let piece = tokio::time::timeout(WAIT, stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            received.push_str(std::str::from_utf8(&piece).unwrap());
        }
        assert_eq!(received.matches("data: ").count(), 3);
        // Client-side idle timeout: nothing more arrives.
        let idle = Duration::from_millis(300);
        let started = Instant::now();
        let next = tokio::time::timeout(idle, stream.next()).await;
        assert!(next.is_err(), "the stall sent more data: {next:?}");
        assert!(started.elapsed() >= idle);
    }
    // Both clients went away (streams dropped): the server saw it.
    let aborted = server.wait_for_aborted_streams(2, WAIT).await.unwrap();
    assert_eq!(aborted.len(), 2);
    assert!(aborted.iter().all(|a| a.events_sent == 3));
}

#[tokio::test]
async fn stalled_stream_ends_at_shutdown() {
    let server = ScriptedServer::start(Script::new().then(Fault::stall_after(1, text("never"))))
        .await
        .unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    let reader = tokio::spawn(raw_body(response));
    server.wait_for_requests(1, WAIT).await.unwrap();
    server.shutdown().await;
    let (text, failed) = tokio::time::timeout(WAIT, reader).await.unwrap().unwrap();
    assert!(failed, "shutdown closes a stalled stream");
    assert_eq!(text.matches("data: ").count(), 1);
}

#[tokio::test]
async fn stalled_non_streaming_body_sends_half_then_nothing() {
    let server = ScriptedServer::start(
        Script::new().then(Fault::stall_after(0, text("complete JSON would be here"))),
    )
    .await
    .unwrap();
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "x", false),
    )
    .await;
    assert_eq!(response.status(), 200);
    let declared: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(WAIT, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!first.is_empty() && first.len() < declared);
    let idle = Duration::from_millis(200);
    assert!(
        tokio::time::timeout(idle, stream.next()).await.is_err(),
        "nothing after the first half"
    );
    drop(stream);
    let aborted = server.wait_for_aborted_streams(1, WAIT).await.unwrap();
    assert_eq!(aborted[0].events_sent, 1);
}

#[tokio::test]
async fn malformed_sse_line_then_the_rest() {
    let server = serve_twice(Fault::malformed_after(2, text("abc").with_chunk_chars(1))).await;
    for protocol in BOTH {
        let response = post(&server, protocol, &ask(protocol, "x", true)).await;
        let (text, failed) = raw_body(response).await;
        assert!(!failed);
        let data: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .collect();
        assert!(serde_json::from_str::<Value>(data[0]).is_ok());
        assert!(serde_json::from_str::<Value>(data[1]).is_ok());
        assert!(
            serde_json::from_str::<Value>(data[2]).is_err(),
            "third data line is not JSON"
        );
        match protocol {
            Protocol::Anthropic => assert!(
                text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
            ),
            Protocol::OpenAi => assert!(text.ends_with("data: [DONE]\n\n")),
            Protocol::OpenAiResponses => assert!(text.contains("event: response.completed\n")),
        }
    }
}

#[tokio::test]
async fn malformed_non_streaming_body() {
    let server = ScriptedServer::start(Script::new().then(Fault::malformed_after(0, text("x"))))
        .await
        .unwrap();
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "x", false),
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

#[tokio::test]
async fn error_event_mid_stream() {
    let reply = text("The version is 0.32, and here's a joke").with_chunk_chars(8);
    let server = serve_twice(Fault::error_after(5, reply)).await;

    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", true),
    )
    .await;
    assert_eq!(response.status(), 200);
    let received = events(response).await;
    let last = received.last().unwrap();
    assert_eq!(last.event, "error");
    let error: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(error["error"]["type"], "overloaded_error");
    assert_eq!(error["error"]["message"], "Overloaded");
    assert!(error["request_id"].as_str().unwrap().starts_with("req_"));
    assert_eq!(received.len(), 6);
    let partial = assemble_anthropic(&received[..5]);
    assert!(!partial.text.is_empty());
    assert!(!partial.stopped);
    assert!(partial.stop_reason.is_none());

    let response = post(&server, Protocol::OpenAi, &ask(Protocol::OpenAi, "x", true)).await;
    let received = events(response).await;
    let last: Value = serde_json::from_str(&received.last().unwrap().data).unwrap();
    assert_eq!(last["error"]["type"], "server_error");
    assert!(last["error"]["message"].is_string());
    assert!(received.iter().all(|e| e.data != "[DONE]"));
    let partial = assemble_openai(&received[..received.len() - 1]);
    assert!(partial.finish_reason.is_none());
    assert!(!partial.content.is_empty());
}

#[tokio::test]
async fn error_mid_stream_on_non_streaming_request_is_529() {
    let server = ScriptedServer::start(Script::new().then(Fault::error_after(2, text("x"))))
        .await
        .unwrap();
    let response = post(
        &server,
        Protocol::Anthropic,
        &ask(Protocol::Anthropic, "x", false),
    )
    .await;
    assert_eq!(response.status().as_u16(), 529);
}

#[tokio::test]
async fn turn_delay_and_chunk_delay_are_honoured() {
    let delay = Duration::from_millis(150);
    let chunk_delay = Duration::from_millis(20);
    let script = Script::new()
        .then(Turn::new(text("late")).with_delay(delay))
        .then(Turn::new(text("paced").with_chunk_chars(1)).with_chunk_delay(chunk_delay));
    let server = ScriptedServer::start(script).await.unwrap();
    let started = Instant::now();
    let response = post(
        &server,
        Protocol::OpenAi,
        &ask(Protocol::OpenAi, "x", false),
    )
    .await;
    assert!(started.elapsed() >= delay);
    assert_eq!(response.status(), 200);

    let started = Instant::now();
    let received = events(
        post(
            &server,
            Protocol::Anthropic,
            &ask(Protocol::Anthropic, "x", true),
        )
        .await,
    )
    .await;
    assert!(started.elapsed() >= chunk_delay * received.len() as u32);
    assert_eq!(assemble_anthropic(&received).text, "paced");
}
