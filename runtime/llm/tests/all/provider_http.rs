//! The providers over real HTTP against a small loopback server scripted per
//! test: retries (what, how often, how long apart), error kinds, broken and
//! stalled streams, malformed data, and cancellation by dropping the stream.
//!
//! The server speaks just enough HTTP/1.1 for reqwest: it reads each request,
//! records it with its arrival time, and plays the next scripted reply, either a
//! complete response or a chunked stream that can be cut or left stalled.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use troupe_config::ResolvedProvider;
use troupe_llm::anthropic::AnthropicProvider;
use troupe_llm::openai::OpenAiProvider;
use troupe_llm::openai_responses::OpenAiResponsesProvider;
use troupe_llm::retry::{RetryPolicy, Retrying};
use troupe_llm::{
    ChatRequest, EventStream, Provider, ProviderError, ResponseAccumulator, StreamEvent,
};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::ProviderErrorKind;
use troupe_protocol::model::{ContentBlock, Message, StopReason};

/// Upper bound of any wait in these tests; nothing should come close.
const TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Backoff base used in tests so retries are quick.
const FAST_BASE: Duration = Duration::from_millis(10);

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sse");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/{name}")).unwrap()
}

// ---------------------------------------------------------------------------
// Scripted loopback server
// ---------------------------------------------------------------------------

/// One step of a streamed (chunked) response.
#[derive(Clone)]
enum Step {
    /// Send these bytes as one chunk.
    Send(String),
    /// Close the connection without finishing the body.
    Cut,
    /// Send nothing more; report when the client goes away.
    Stall,
}

/// One scripted reply.
#[derive(Clone)]
enum Reply {
    /// A complete response.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A `text/event-stream` response played step by step; a script that does not
    /// end in `Cut` or `Stall` finishes the body normally.
    Stream(Vec<Step>),
    /// No answer at all; report when the client goes away.
    Silent,
}

fn full(status: u16, headers: &[(&'static str, &str)], body: &str) -> Reply {
    Reply::Full {
        status,
        headers: headers
            .iter()
            .map(|(name, value)| (*name, value.to_string()))
            .collect(),
        body: body.to_string(),
    }
}

fn stream(steps: &[Step]) -> Reply {
    Reply::Stream(steps.to_vec())
}

fn send(text: &str) -> Step {
    Step::Send(text.to_string())
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Recorded {
    at: Instant,
    head: String,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    }
}

struct Server {
    base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    gone: mpsc::UnboundedReceiver<()>,
}

impl Server {
    async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (gone_tx, gone) = mpsc::unbounded_channel();
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(
                    socket,
                    script.clone(),
                    recorded.clone(),
                    gone_tx.clone(),
                ));
            }
        });
        Self {
            base,
            requests,
            gone,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request; `None` when the client closed the connection.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    buf.drain(..head_end + length);
    Some(Recorded { at, head, body })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn serve(
    mut socket: TcpStream,
    script: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    gone: mpsc::UnboundedSender<()>,
) {
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut socket, &mut buf).await {
        requests.lock().unwrap().push(request);
        let reply = script.lock().unwrap().pop_front().unwrap_or_else(|| {
            full(
                500,
                &[("content-type", "text/plain")],
                "the test script has no more replies",
            )
        });
        match reply {
            Reply::Silent => {
                let mut sink = [0u8; 1024];
                while let Ok(n) = socket.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
                let _ = gone.send(());
                return;
            }
            Reply::Full {
                status,
                headers,
                body,
            } => {
                let mut head = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\n",
                    reason(status),
                    body.len()
                );
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(body.as_bytes()).await.is_err()
                {
                    return;
                }
            }
            Reply::Stream(steps) => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nrequest-id: req_http_header\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for step in steps {
                    match step {
                        Step::Send(text) => {
                            let chunk = format!("{:x}\r\n{text}\r\n", text.len());
                            if socket.write_all(chunk.as_bytes()).await.is_err() {
                                return;
                            }
                            let _ = socket.flush().await;
                        }
                        Step::Cut => return,
                        Step::Stall => {
                            // Wait for the client to close (read returns 0 or fails).
                            let mut sink = [0u8; 1024];
                            while let Ok(n) = socket.read(&mut sink).await {
                                if n == 0 {
                                    break;
                                }
                            }
                            let _ = gone.send(());
                            return;
                        }
                    }
                }
                if socket.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn config(protocol: Protocol, base_url: &str) -> ResolvedProvider {
    ResolvedProvider {
        name: "test".into(),
        protocol,
        model: "model-x".into(),
        base_url: base_url.into(),
        api_key: Some("secret-key".into()),
        api_key_env: "TEST_KEY".into(),
        context_window: 200_000,
        max_tokens: 1_024,
        thinking_budget: None,
        price: None,
        idle_timeout: Duration::from_secs(10),
        max_retries: 4,
        store: false,
    }
}

fn fast_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: FAST_BASE,
        max_delay: FAST_BASE * 4,
    }
}

fn anthropic(server: &Server, max_retries: u32) -> AnthropicProvider {
    AnthropicProvider::with_retry_policy(
        &config(Protocol::Anthropic, &server.base),
        fast_retries(max_retries),
    )
    .unwrap()
}

fn anthropic_with_idle(server: &Server, max_retries: u32, idle: Duration) -> AnthropicProvider {
    let mut cfg = config(Protocol::Anthropic, &server.base);
    cfg.idle_timeout = idle;
    AnthropicProvider::with_retry_policy(&cfg, fast_retries(max_retries)).unwrap()
}

fn openai(server: &Server, max_retries: u32) -> OpenAiProvider {
    OpenAiProvider::with_retry_policy(
        &config(Protocol::OpenAi, &format!("{}/v1", server.base)),
        fast_retries(max_retries),
    )
    .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user_text("hello")],
        ..ChatRequest::default()
    }
}

async fn collect(stream: EventStream) -> Vec<Result<StreamEvent, ProviderError>> {
    tokio::time::timeout(TEST_TIMEOUT, stream.collect::<Vec<_>>())
        .await
        .expect("the stream finished in time")
}

/// The events and the final error of a failed stream, retry announcements
/// left out.
fn split_error(
    results: Vec<Result<StreamEvent, ProviderError>>,
) -> (Vec<StreamEvent>, ProviderError) {
    let mut results = results;
    let error = results
        .pop()
        .expect("at least one item")
        .expect_err("the stream ends with an error");
    let events = results
        .into_iter()
        .map(|r| r.expect("only the last item is an error"))
        .filter(|event| !matches!(event, StreamEvent::Retrying(_)))
        .collect();
    (events, error)
}

/// The retry announcements of a stream, in order.
fn retries_of(results: &[Result<StreamEvent, ProviderError>]) -> Vec<Retrying> {
    results
        .iter()
        .filter_map(|result| match result {
            Ok(StreamEvent::Retrying(retrying)) => Some(retrying.clone()),
            _ => None,
        })
        .collect()
}

fn only_error(results: Vec<Result<StreamEvent, ProviderError>>) -> ProviderError {
    let (events, error) = split_error(results);
    assert!(events.is_empty(), "{events:?}");
    error
}

fn text_of(events: &[StreamEvent]) -> String {
    let mut acc = ResponseAccumulator::new();
    for event in events {
        acc.push(event);
    }
    acc.into_message().text()
}

const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
const TEXT: &str = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n";
const END: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

fn ok_stream() -> Reply {
    stream(&[send(START), send(TEXT), send(END)])
}

fn assert_success(results: Vec<Result<StreamEvent, ProviderError>>) {
    let events: Vec<StreamEvent> = results.into_iter().map(|r| r.expect("no error")).collect();
    assert_eq!(text_of(&events), "Hello");
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::EndTurn)));
}

const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit. Please try again later."}}"#;
const OVERLOADED: &str = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CX7J5ZXp3npD8nY7VYZvm"}"#;
const API_ERROR: &str =
    r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
const JSON: (&str, &str) = ("content-type", "application/json");

// ---------------------------------------------------------------------------
// Successful calls
// ---------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_request_shape_and_streamed_response() {
    let server = Server::start(vec![stream(&[send(&fixture(
        "anthropic_text_then_tool_use.sse",
    ))])])
    .await;
    let provider = anthropic(&server, 0);
    assert_eq!(provider.name(), "test");
    assert_eq!(provider.model(), "model-x");
    let events: Vec<StreamEvent> = collect(provider.stream(&request()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::ToolUse)));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall(c) if c.name == "get_weather"))
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert!(
        req.head.starts_with("POST /v1/messages HTTP/1.1"),
        "{}",
        req.head
    );
    assert_eq!(req.header("x-api-key").as_deref(), Some("secret-key"));
    assert_eq!(
        req.header("anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(
        req.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(req.header("accept").as_deref(), Some("text/event-stream"));
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body["messages"][0]["content"][0]["text"], "hello");
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn openai_request_shape_and_streamed_response() {
    let server = Server::start(vec![stream(&[send(&fixture(
        "openai_parallel_tool_calls.sse",
    ))])])
    .await;
    let events: Vec<StreamEvent> = collect(openai(&server, 0).stream(&request()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let calls = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCall(_)))
        .count();
    assert_eq!(calls, 2);
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::ToolUse)));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]
            .head
            .starts_with("POST /v1/chat/completions HTTP/1.1")
    );
    assert_eq!(
        requests[0].header("authorization").as_deref(),
        Some("Bearer secret-key")
    );
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["max_tokens"], 1_024);
    assert_eq!(
        body["messages"][0],
        serde_json::json!({"role": "user", "content": "hello"})
    );
}

fn openai_responses(server: &Server, max_retries: u32) -> OpenAiResponsesProvider {
    OpenAiResponsesProvider::with_retry_policy(
        &config(Protocol::OpenAiResponses, &format!("{}/v1", server.base)),
        fast_retries(max_retries),
    )
    .unwrap()
}

fn responses_fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/data/responses/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[tokio::test]
async fn openai_responses_http_errors_are_classified_as_chat_completions_errors() {
    // 429 with a delay, then 500, then the stream: both retried, the delay honoured.
    let server = Server::start(vec![
        full(
            429,
            &[JSON, ("retry-after-ms", "300")],
            r#"{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        full(500, &[JSON], r#"{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}"#),
        stream(&[send(&responses_fixture("text.sse"))]),
    ])
    .await;
    let results = collect(openai_responses(&server, 4).stream(&request())).await;
    let retries = retries_of(&results);
    assert_eq!(
        retries
            .iter()
            .map(|r| (r.kind, r.status))
            .collect::<Vec<_>>(),
        [
            (ProviderErrorKind::RateLimited, Some(429)),
            (ProviderErrorKind::Server, Some(500))
        ]
    );
    assert_eq!(retries[0].delay, Duration::from_millis(300));
    let events: Vec<StreamEvent> = results
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| !matches!(e, StreamEvent::Retrying(_)))
        .collect();
    assert_eq!(text_of(&events), "Hello! The answer is 42.");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].at - requests[0].at >= Duration::from_millis(300));
    assert!(requests[0].head.starts_with("POST /v1/responses HTTP/1.1"));
    assert_eq!(
        requests[0].header("authorization").as_deref(),
        Some("Bearer secret-key")
    );
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["store"], false);
    assert_eq!(
        body["input"][0],
        serde_json::json!({"type": "message", "role": "user", "content": "hello"})
    );

    // A prompt over the window and an exhausted quota are final.
    for (status, body, kind) in [
        (
            400,
            r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
            ProviderErrorKind::PromptTooLong,
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            ProviderErrorKind::Quota,
        ),
    ] {
        let server = Server::start(vec![
            full(status, &[JSON, ("x-request-id", "req_r1")], body),
            ok_stream(),
        ])
        .await;
        let error = only_error(collect(openai_responses(&server, 4).stream(&request())).await);
        assert_eq!(error.kind, kind, "{error}");
        assert_eq!(error.status, Some(status));
        assert_eq!(error.request_id.as_deref(), Some("req_r1"));
        assert_eq!(server.requests().len(), 1);
    }
}

// ---------------------------------------------------------------------------
// Retries
// ---------------------------------------------------------------------------

#[tokio::test]
async fn rate_limit_429_is_retried_after_retry_after_ms() {
    let server = Server::start(vec![
        full(429, &[JSON, ("retry-after-ms", "300")], RATE_LIMITED),
        ok_stream(),
    ])
    .await;
    assert_success(collect(anthropic(&server, 4).stream(&request())).await);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].at - requests[0].at >= Duration::from_millis(300));
    assert_eq!(
        requests[0].body, requests[1].body,
        "the same body is resent"
    );
}

#[tokio::test]
async fn rate_limit_429_is_retried_after_retry_after_seconds() {
    let server = Server::start(vec![
        full(
            429,
            &[JSON, ("retry-after", "1")],
            r#"{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        stream(&[send(&fixture("openai_text_include_usage.sse"))]),
    ])
    .await;
    let results = collect(openai(&server, 4).stream(&request())).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].at - requests[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn overloaded_529_and_server_500_are_retried() {
    let server = Server::start(vec![
        full(529, &[JSON], OVERLOADED),
        full(500, &[JSON], API_ERROR),
        full(
            502,
            &[("content-type", "text/html")],
            "<html>Bad Gateway</html>",
        ),
        full(503, &[JSON], API_ERROR),
        ok_stream(),
    ])
    .await;
    assert_success(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test]
async fn retries_stop_at_max_retries_with_the_last_error() {
    let server = Server::start(vec![
        full(529, &[JSON], OVERLOADED),
        full(529, &[JSON], OVERLOADED),
        full(529, &[JSON, ("request-id", "req_last")], OVERLOADED),
        ok_stream(),
    ])
    .await;
    let results = collect(anthropic(&server, 2).stream(&request())).await;
    // Each retry is announced before its wait, numbered against the maximum.
    let retries = retries_of(&results);
    assert_eq!(
        retries
            .iter()
            .map(|r| (r.retry, r.max_retries, r.kind, r.status))
            .collect::<Vec<_>>(),
        [
            (1, 2, ProviderErrorKind::Overloaded, Some(529)),
            (2, 2, ProviderErrorKind::Overloaded, Some(529)),
        ]
    );
    assert!(retries[1].delay >= retries[0].delay, "{retries:?}");
    let error = only_error(results);
    assert_eq!(error.kind, ProviderErrorKind::Overloaded, "{error}");
    assert_eq!(error.status, Some(529));
    assert_eq!(error.request_id.as_deref(), Some("req_last"));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn server_can_forbid_or_request_a_retry() {
    let server = Server::start(vec![
        full(503, &[JSON, ("x-should-retry", "false")], API_ERROR),
        ok_stream(),
    ])
    .await;
    let error = only_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![
        full(
            409,
            &[JSON, ("x-should-retry", "true")],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"conflict"}}"#,
        ),
        ok_stream(),
    ])
    .await;
    assert_success(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_refused_connection_to_a_literal_address_fails_at_once_naming_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    // Slow retries: a retry would show as a `Retrying` event and seconds.
    let provider = AnthropicProvider::with_retry_policy(
        &config(Protocol::Anthropic, &base),
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(8),
        },
    )
    .unwrap();
    let results = collect(provider.stream(&request())).await;
    assert!(
        results
            .iter()
            .all(|item| !matches!(item, Ok(StreamEvent::Retrying(_)))),
        "{results:?}"
    );
    let error = only_error(results);
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error}");
    assert!(error.message.contains(&base), "{error}");
    assert!(
        error.message.contains("nothing listens at that address"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// Errors that are not retried
// ---------------------------------------------------------------------------

#[tokio::test]
async fn prompt_too_long_is_surfaced_without_retry() {
    let server = Server::start(vec![
        full(
            400,
            &[JSON, ("request-id", "req_011CVQe1dLrGNMJyE1ghG1av")],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}"#,
        ),
        ok_stream(),
    ])
    .await;
    let error = only_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert!(error.is_prompt_too_long(), "{error}");
    assert_eq!(error.status, Some(400));
    assert_eq!(
        error.request_id.as_deref(),
        Some("req_011CVQe1dLrGNMJyE1ghG1av")
    );
    assert!(error.message.contains("208310 tokens > 200000"), "{error}");
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![
        full(
            400,
            &[JSON, ("x-request-id", "req_13d9")],
            r#"{"error":{"message":"This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ),
        ok_stream(),
    ])
    .await;
    let error = only_error(collect(openai(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::PromptTooLong);
    assert_eq!(error.request_id.as_deref(), Some("req_13d9"));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn authentication_and_quota_errors_are_not_retried() {
    let server = Server::start(vec![
        full(
            401,
            &[JSON],
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        ),
        ok_stream(),
    ])
    .await;
    let error = only_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::Authentication);
    assert!(error.message.contains("invalid x-api-key"));
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![
        full(
            429,
            &[JSON, ("retry-after", "1")],
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
        ),
        ok_stream(),
    ])
    .await;
    let error = only_error(collect(openai(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::Quota);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn non_json_error_bodies_give_a_clear_error() {
    let server = Server::start(vec![full(
        502,
        &[("content-type", "text/html")],
        "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>",
    )])
    .await;
    let error = only_error(collect(anthropic(&server, 0).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(502));
    assert!(error.message.contains("HTTP 502"), "{error}");
    assert!(error.message.contains("502 Bad Gateway"), "{error}");
    assert!(error.to_string().contains("HTTP 502"), "{error}");

    let server = Server::start(vec![full(
        404,
        &[("content-type", "text/plain")],
        "404 page not found",
    )])
    .await;
    let error = only_error(collect(openai(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::InvalidRequest);
    assert!(error.message.contains("404 page not found"), "{error}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_json_body_instead_of_a_stream_is_malformed() {
    let server = Server::start(vec![full(
        200,
        &[JSON],
        r#"{"id":"chatcmpl-1","choices":[{"message":{"content":"hi"}}]}"#,
    )])
    .await;
    let error = only_error(collect(openai(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("text/event-stream"), "{error}");
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------------------
// Broken, stalled and malformed streams
// ---------------------------------------------------------------------------

#[tokio::test]
async fn stream_cut_after_content_is_broken_without_retry() {
    let server = Server::start(vec![
        stream(&[send(START), send(TEXT), Step::Cut]),
        ok_stream(),
    ])
    .await;
    let (events, error) = split_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken, "{error}");
    assert!(
        error.message.contains("broke"),
        "a transport error: {error}"
    );
    assert_eq!(text_of(&events), "Hello");
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Stop(_))));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stream_ending_early_after_content_is_broken_without_retry() {
    // The body ends cleanly but without message_stop.
    let server = Server::start(vec![stream(&[send(START), send(TEXT)]), ok_stream()]).await;
    let (events, error) = split_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken, "{error}");
    assert_eq!(error.request_id.as_deref(), Some("req_http_header"));
    assert_eq!(text_of(&events), "Hello");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stream_cut_before_content_is_retried() {
    let server = Server::start(vec![
        stream(&[send(START), Step::Cut]),
        stream(&[Step::Cut]),
        ok_stream(),
    ])
    .await;
    assert_success(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn midstream_overload_is_retried_only_before_content() {
    let error_event = "event: error\ndata: {\"type\":\"error\",\"error\":{\"details\":null,\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_mid\"}\n\n";
    let server = Server::start(vec![stream(&[send(START), send(error_event)]), ok_stream()]).await;
    assert_success(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(server.requests().len(), 2);

    let server = Server::start(vec![
        stream(&[send(&fixture("anthropic_overloaded_midstream.sse"))]),
        ok_stream(),
    ])
    .await;
    let (events, error) = split_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::Overloaded);
    assert_eq!(
        error.request_id.as_deref(),
        Some("req_011CecahFk1FfxfFLw1ja8sL")
    );
    assert!(text_of(&events).starts_with("The version is **0.32a0**."));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stalled_stream_after_content_hits_the_idle_timeout() {
    let server = Server::start(vec![stream(&[send(START), send(TEXT), Step::Stall])]).await;
    let provider = anthropic_with_idle(&server, 4, Duration::from_millis(300));
    let started = Instant::now();
    let (events, error) = split_error(collect(provider.stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::IdleTimeout, "{error}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(text_of(&events), "Hello");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_idle_timeout() {
    let mut server = Server::start(vec![Reply::Silent, Reply::Silent]).await;
    let provider = anthropic_with_idle(&server, 1, Duration::from_millis(200));
    let error = only_error(collect(provider.stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::IdleTimeout, "{error}");
    assert!(error.message.contains("response headers"), "{error}");
    assert_eq!(server.requests().len(), 2, "retried once before giving up");
    for _ in 0..2 {
        tokio::time::timeout(TEST_TIMEOUT, server.gone.recv())
            .await
            .expect("each abandoned request is closed")
            .expect("the server is running");
    }
}

#[tokio::test]
async fn a_body_ending_right_after_done_without_a_blank_line_completes() {
    let server = Server::start(vec![stream(&[send(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n",
    )])])
    .await;
    let mut stream = openai(&server, 0).stream(&request());
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(TEST_TIMEOUT, stream.next())
        .await
        .expect("an item in time")
    {
        events.push(event.unwrap());
    }
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("ok".into()),
            StreamEvent::Stop(StopReason::EndTurn)
        ]
    );
    // Polling a finished stream again is harmless.
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn stalled_stream_before_content_is_retried() {
    let server = Server::start(vec![stream(&[send(START), Step::Stall]), ok_stream()]).await;
    let provider = anthropic_with_idle(&server, 4, Duration::from_millis(200));
    assert_success(collect(provider.stream(&request())).await);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn malformed_sse_data_is_reported_without_retry() {
    let server = Server::start(vec![
        stream(&[
            send(START),
            send("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\n\n"),
        ]),
        ok_stream(),
    ])
    .await;
    let (events, error) = split_error(collect(anthropic(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse, "{error}");
    assert!(error.message.contains("content_block_start"), "{error}");
    // Only what message_start carries (no content) came before the error.
    assert!(
        events
            .iter()
            .all(|e| matches!(e, StreamEvent::Metadata(_) | StreamEvent::Usage(_))),
        "{events:?}"
    );
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![stream(&[send(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {oops}\n\n",
    )])])
    .await;
    let (events, error) = split_error(collect(openai(&server, 4).stream(&request())).await);
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse, "{error}");
    assert_eq!(events, vec![StreamEvent::TextDelta("a".into())]);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let mut server = Server::start(vec![stream(&[send(START), send(TEXT), Step::Stall])]).await;
    let provider = anthropic(&server, 0);
    let mut events = provider.stream(&request());
    loop {
        let event = tokio::time::timeout(TEST_TIMEOUT, events.next())
            .await
            .expect("an event in time")
            .expect("the stream is open")
            .expect("no error");
        if matches!(event, StreamEvent::TextDelta(_)) {
            break;
        }
    }
    drop(events);
    tokio::time::timeout(TEST_TIMEOUT, server.gone.recv())
        .await
        .expect("the server saw the client go away")
        .expect("the server is running");
}

#[tokio::test]
async fn the_accumulated_message_of_a_stream_is_a_valid_history_entry() {
    let server = Server::start(vec![stream(&[send(&fixture(
        "anthropic_thinking_tool_use.sse",
    ))])])
    .await;
    let mut acc = ResponseAccumulator::new();
    for result in collect(anthropic(&server, 0).stream(&request())).await {
        acc.push(&result.unwrap());
    }
    let message = acc.into_message();
    assert!(matches!(
        message.content[0],
        ContentBlock::Thinking {
            signature: Some(_),
            ..
        }
    ));
    assert!(matches!(&message.content[1], ContentBlock::ToolCall(call) if call.input == "{}"));
}
