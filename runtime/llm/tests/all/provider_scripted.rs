//! The real provider adapters (Anthropic Messages, OpenAI Chat Completions and
//! OpenAI Responses)
//! driven over loopback HTTP against the scripted model server
//! (`troupe-scripted`): exact streamed events (text, thinking, parallel tool
//! calls, usage, stop reasons), the request bodies a realistic multi-turn
//! conversation produces (checked by the server's protocol invariants and
//! asserted field by field), retries and error kinds for every scripted fault,
//! and cancellation by dropping the stream.
//!
//! Every scenario is an `async fn(Wire)` run once per protocol by
//! [`for_each_wire!`], so the test names read `anthropic_wire::…`,
//! `openai_wire::…` and `openai_responses_wire::…`. Every await is bounded by [`TEST_TIMEOUT`]; the strict
//! server panics at drop if a request broke a protocol invariant, so a test
//! that provokes one on purpose takes the violations first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_config::resolve::resolve_entry;
use troupe_config::{ResolvedProvider, parse_config_file};
use troupe_llm::anthropic::{self, AnthropicProvider};
use troupe_llm::openai::{self, OpenAiProvider};
use troupe_llm::openai_responses::{self, OpenAiResponsesProvider};
use troupe_llm::retry::RetryPolicy;
use troupe_llm::{
    ChatRequest, EventStream, Provider, ProviderError, ResponseAccumulator, ResponseMetadata,
    StreamEvent, build_provider,
};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::{
    ContentBlock, Message, Role, StopReason, ToolCall, ToolOutputPart, ToolResult, Usage,
};
use troupe_protocol::model::{ProviderErrorKind, SystemPrompt, ToolDefinition};
use troupe_scripted as scripted;
use troupe_scripted::{Block, Fault, Matcher, Response, Rule, Script, ScriptedServer, Turn, text};

/// Upper bound of every wait in these tests; nothing comes close to it.
const TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Backoff base in tests: far below every server-requested delay, so a gap of
/// at least the requested delay proves the delay was honoured.
const FAST_BASE: Duration = Duration::from_millis(10);
/// Idle timeout of the stall scenarios.
const SHORT_IDLE: Duration = Duration::from_millis(500);
/// `max_tokens` of the test configuration.
const MAX_TOKENS: u32 = 1_024;
/// Thinking budget of the configuration used for the multi-turn request.
const THINKING_BUDGET: u32 = 16_000;
/// Characters per streamed delta in these scripts, so short texts arrive as
/// many deltas.
const CHUNK: usize = 3;

/// The protocol a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Anthropic,
    OpenAi,
    OpenAiResponses,
}

impl Wire {
    /// SSE events the scripted server sends before the first text delta of a
    /// text-only response: Anthropic `message_start`, `content_block_start`,
    /// `ping`; OpenAI the role chunk; Responses `response.created`,
    /// `response.in_progress` and `response.output_item.added`.
    fn lead_events(self) -> usize {
        match self {
            Self::Anthropic | Self::OpenAiResponses => 3,
            Self::OpenAi => 1,
        }
    }
}

/// Generates one `#[tokio::test]` per protocol for each scenario function.
macro_rules! for_each_wire {
    ($($name:ident),* $(,)?) => {
        mod anthropic_wire {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Wire::Anthropic).await;
                }
            )*
        }
        mod openai_wire {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Wire::OpenAi).await;
                }
            )*
        }
        mod openai_responses_wire {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Wire::OpenAiResponses).await;
                }
            )*
        }
    };
}

for_each_wire!(
    text_streams_in_many_deltas_with_exact_usage,
    stop_reasons_map_to_the_neutral_model,
    thinking_streams_as_thinking_events,
    parallel_tool_calls_arrive_complete_and_in_order,
    concurrent_streams_on_one_provider_stay_apart,
    multi_turn_request_body_is_valid_and_exact,
    an_invalid_history_is_rejected_by_the_invariant_checker,
    rate_limit_waits_for_retry_after_ms,
    rate_limit_waits_for_retry_after_seconds,
    overload_and_server_errors_are_retried_then_succeed,
    a_non_json_gateway_error_is_retried,
    retries_stop_after_max_retries_with_the_last_error_kind,
    prompt_too_long_is_not_retried,
    authentication_failure_is_not_retried,
    a_non_json_error_body_names_the_status,
    a_stream_cut_after_content_is_broken_and_not_retried,
    a_stream_cut_before_content_is_retried,
    a_stall_after_content_hits_the_idle_timeout_without_retry,
    a_stall_before_content_is_retried,
    a_server_silent_past_the_idle_timeout_is_retried,
    a_malformed_sse_line_is_a_malformed_response,
    a_midstream_error_after_content_is_not_retried,
    a_midstream_error_before_content_is_retried,
    dropping_the_stream_aborts_the_response,
    build_provider_streams_with_the_configured_policy,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Awaits `future` at most [`TEST_TIMEOUT`].
async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(TEST_TIMEOUT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {TEST_TIMEOUT:?} waiting for {what}"),
    }
}

async fn start(script: Script) -> ScriptedServer {
    within(
        "the scripted server to start",
        ScriptedServer::start(script),
    )
    .await
    .expect("the scripted server starts")
}

fn config(server: &ScriptedServer, wire: Wire) -> ResolvedProvider {
    let (protocol, base_url) = match wire {
        Wire::Anthropic => (Protocol::Anthropic, server.anthropic_base_url()),
        Wire::OpenAi => (Protocol::OpenAi, server.openai_base_url()),
        Wire::OpenAiResponses => (Protocol::OpenAiResponses, server.openai_base_url()),
    };
    ResolvedProvider {
        name: "scripted".into(),
        protocol,
        model: "model-under-test".into(),
        base_url,
        api_key: Some("sk-test-key".into()),
        api_key_env: "TEST_API_KEY".into(),
        context_window: 200_000,
        max_tokens: MAX_TOKENS,
        thinking_budget: None,
        price: None,
        idle_timeout: TEST_TIMEOUT,
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

/// The adapter of `wire` for `config`, with quick backoff.
fn adapter(wire: Wire, config: &ResolvedProvider, max_retries: u32) -> Arc<dyn Provider> {
    let policy = fast_retries(max_retries);
    match wire {
        Wire::Anthropic => Arc::new(AnthropicProvider::with_retry_policy(config, policy).unwrap()),
        Wire::OpenAi => Arc::new(OpenAiProvider::with_retry_policy(config, policy).unwrap()),
        Wire::OpenAiResponses => {
            Arc::new(OpenAiResponsesProvider::with_retry_policy(config, policy).unwrap())
        }
    }
}

fn provider(server: &ScriptedServer, wire: Wire, max_retries: u32) -> Arc<dyn Provider> {
    adapter(wire, &config(server, wire), max_retries)
}

fn provider_with_idle(
    server: &ScriptedServer,
    wire: Wire,
    max_retries: u32,
    idle: Duration,
) -> Arc<dyn Provider> {
    let mut cfg = config(server, wire);
    cfg.idle_timeout = idle;
    adapter(wire, &cfg, max_retries)
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user_text("Say hello.")],
        ..ChatRequest::default()
    }
}

type Item = Result<StreamEvent, ProviderError>;

async fn collect(stream: EventStream) -> Vec<Item> {
    within("the stream to end", stream.collect::<Vec<_>>()).await
}

/// Whether an event is a response's (not the announcement of a retry).
fn of_a_response(event: &StreamEvent) -> bool {
    !matches!(event, StreamEvent::Retrying(_))
}

/// The events of a stream that must succeed, retry announcements left out.
async fn events_of(stream: EventStream) -> Vec<StreamEvent> {
    collect(stream)
        .await
        .into_iter()
        .map(|item| item.expect("the stream succeeds"))
        .filter(of_a_response)
        .collect()
}

/// The events before the error that ends a failed stream (retry
/// announcements left out), and the error.
fn split_error(items: Vec<Item>) -> (Vec<StreamEvent>, ProviderError) {
    let mut items = items;
    let error = items
        .pop()
        .expect("the stream yielded something")
        .expect_err("the stream ends with an error");
    let events = items
        .into_iter()
        .map(|item| item.expect("only the last item is an error"))
        .filter(of_a_response)
        .collect();
    (events, error)
}

/// `text` split into pieces of `chars` characters, as the server streams it.
fn pieces(text: &str, chars: usize) -> Vec<String> {
    let all: Vec<char> = text.chars().collect();
    all.chunks(chars).map(|c| c.iter().collect()).collect()
}

fn text_deltas(text: &str, chars: usize) -> Vec<StreamEvent> {
    pieces(text, chars)
        .into_iter()
        .map(StreamEvent::TextDelta)
        .collect()
}

fn thinking_deltas(text: &str, chars: usize) -> Vec<StreamEvent> {
    pieces(text, chars)
        .into_iter()
        .map(StreamEvent::ThinkingDelta)
        .collect()
}

/// The usage the adapter reports for a scripted usage. OpenAI has no cache
/// writes: `prompt_tokens` (input + reads + writes) minus `cached_tokens`
/// (reads) is its uncached input.
fn neutral_usage(wire: Wire, usage: scripted::Usage) -> Usage {
    match wire {
        Wire::Anthropic => Usage {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cache_read: usage.cache_read_input_tokens,
            cache_write: usage.cache_creation_input_tokens,
        },
        Wire::OpenAi | Wire::OpenAiResponses => Usage {
            input: usage.input_tokens + usage.cache_creation_input_tokens,
            output: usage.output_tokens,
            cache_read: usage.cache_read_input_tokens,
            cache_write: 0,
        },
    }
}

/// The metadata event of the response the server sent to request `index`:
/// the id it generated and the model it echoed.
fn response_metadata(server: &ScriptedServer, index: usize) -> StreamEvent {
    let request = &server.requests()[index];
    let id = request.response_id.clone();
    assert!(id.is_some(), "request {index} got a response");
    StreamEvent::Metadata(ResponseMetadata {
        id,
        model: Some("model-under-test".into()),
    })
}

/// The exact event sequence of a successful response to request `index`: its
/// id and model first (Anthropic `message_start`, the first OpenAI chunk), then
/// Anthropic reports the usage of `message_start` (one output token so far);
/// both end with the final usage and the stop reason.
fn expected_events(
    wire: Wire,
    (server, index): (&ScriptedServer, usize),
    content: Vec<StreamEvent>,
    usage: scripted::Usage,
    stop: StopReason,
) -> Vec<StreamEvent> {
    let total = neutral_usage(wire, usage);
    let mut events = vec![response_metadata(server, index)];
    if wire == Wire::Anthropic {
        events.push(StreamEvent::Usage(Usage {
            output: total.output.min(1),
            ..total
        }));
    }
    events.extend(content);
    events.push(StreamEvent::Usage(total));
    events.push(StreamEvent::Stop(stop));
    events
}

/// The text carried by the content events.
fn text_of(events: &[StreamEvent]) -> String {
    let mut acc = ResponseAccumulator::new();
    for event in events {
        acc.push(event);
    }
    acc.into_message().text()
}

/// Only the content events (text, thinking, tool calls).
fn content_of(events: &[StreamEvent]) -> Vec<StreamEvent> {
    events
        .iter()
        .filter(|e| {
            !matches!(
                e,
                StreamEvent::Metadata(_) | StreamEvent::Usage(_) | StreamEvent::Stop(_)
            )
        })
        .cloned()
        .collect()
}

/// A scripted tool call with a fixed id and raw argument text.
fn raw_call(id: &str, name: &str, arguments: &str) -> Block {
    Block::ToolCall(scripted::ToolCall {
        id: Some(id.into()),
        name: name.into(),
        arguments: arguments.into(),
    })
}

fn neutral_call(id: &str, name: &str, input: &str) -> StreamEvent {
    StreamEvent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: input.into(),
    })
}

/// A text reply streamed in [`CHUNK`]-character deltas.
fn chunked(reply: &str) -> Response {
    text(reply).with_chunk_chars(CHUNK)
}

/// The content events of a response cut after its first `k` text deltas.
fn partial_text(reply: &str, k: usize) -> Vec<StreamEvent> {
    text_deltas(reply, CHUNK).into_iter().take(k).collect()
}

/// Asserts that exactly `requests` requests arrived and that `spare` turns
/// (scripted to catch an unwanted retry) were left unconsumed.
fn assert_attempts(server: &ScriptedServer, wire: Wire, requests: usize, spare: usize) {
    assert_eq!(server.request_count(), requests, "{wire:?}: requests");
    assert_eq!(server.remaining_turns(), spare, "{wire:?}: unused turns");
}

// ---------------------------------------------------------------------------
// Successful responses
// ---------------------------------------------------------------------------

async fn text_streams_in_many_deltas_with_exact_usage(wire: Wire) {
    let reply = "Hello there! This answer arrives in many small pieces, ünïcödé included.";
    let usage = match wire {
        Wire::Anthropic => scripted::Usage::new(1_200, 40)
            .with_cache_read(1_000)
            .with_cache_creation(150),
        Wire::OpenAi | Wire::OpenAiResponses => scripted::Usage::new(19, 83).with_cache_read(320),
    };
    let server = start(Script::new().then(chunked(reply).with_usage(usage))).await;
    let events = events_of(provider(&server, wire, 0).stream(&hello())).await;
    let expected = expected_events(
        wire,
        (&server, 0),
        text_deltas(reply, CHUNK),
        usage,
        StopReason::EndTurn,
    );
    assert_eq!(events, expected, "{wire:?}");
    assert!(text_deltas(reply, CHUNK).len() > 20, "many deltas");
    assert_eq!(text_of(&events), reply);
    let last_usage = events.iter().rev().find_map(|e| match e {
        StreamEvent::Usage(u) => Some(*u),
        _ => None,
    });
    let wanted = match wire {
        Wire::Anthropic => Usage {
            input: 1_200,
            output: 40,
            cache_read: 1_000,
            cache_write: 150,
        },
        Wire::OpenAi | Wire::OpenAiResponses => Usage {
            input: 19,
            output: 83,
            cache_read: 320,
            cache_write: 0,
        },
    };
    assert_eq!(last_usage, Some(wanted), "{wire:?}");
    assert_attempts(&server, wire, 1, 0);
    assert!(server.aborted_streams().is_empty());
}

async fn stop_reasons_map_to_the_neutral_model(wire: Wire) {
    use scripted::StopReason as Scripted;
    let cases = [
        (Scripted::EndTurn, StopReason::EndTurn, StopReason::EndTurn),
        (
            Scripted::MaxTokens,
            StopReason::MaxTokens,
            StopReason::MaxTokens,
        ),
        (
            Scripted::StopSequence,
            StopReason::StopSequence,
            // OpenAI says `stop` for both a natural end and a stop sequence.
            StopReason::EndTurn,
        ),
        (Scripted::Refusal, StopReason::Refusal, StopReason::Refusal),
        (Scripted::ToolUse, StopReason::ToolUse, StopReason::ToolUse),
    ];
    let script: Script = cases
        .iter()
        .map(|(scripted, _, _)| text("partial answer").with_stop_reason(*scripted))
        .collect();
    let server = start(script).await;
    let provider = provider(&server, wire, 0);
    for (scripted, anthropic, openai) in cases.clone() {
        let events = events_of(provider.stream(&hello())).await;
        let wanted = match wire {
            Wire::Anthropic => anthropic,
            Wire::OpenAi => openai,
            // A completed response without function calls ends the turn.
            Wire::OpenAiResponses if scripted == Scripted::ToolUse => StopReason::EndTurn,
            Wire::OpenAiResponses => openai,
        };
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Stop(wanted)),
            "{wire:?} {scripted:?}"
        );
        assert_eq!(text_of(&events), "partial answer");
    }
    assert_attempts(&server, wire, cases.len(), 0);
}

async fn thinking_streams_as_thinking_events(wire: Wire) {
    const SIGNATURE: &str = "EqQBCkgIARABGAIiQL2sig==";
    const REDACTED: &str = "EmwKAhgBEgy3va3pzix/LafPsn4a";
    let thought = "The user wants a greeting; read the file first.";
    let answer = "Reading it.";
    let input = r#"{"path": "a.rs"}"#;
    let usage = scripted::Usage::new(50, 30);
    let reply = scripted::thinking(thought, SIGNATURE)
        .and_redacted_thinking(REDACTED)
        .and_text(answer)
        .and_block(raw_call("call_t1", "read_file", input))
        .with_chunk_chars(CHUNK)
        .with_usage(usage);
    let server = start(Script::new().then(reply).then(chunked("Hello!"))).await;
    let provider = provider(&server, wire, 0);
    let events = events_of(provider.stream(&hello())).await;
    let mut content = thinking_deltas(thought, CHUNK);
    // Responses reasoning items come back verbatim, as the server wrote them.
    let reasoning_items: Vec<String> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::RedactedThinking(data) if wire == Wire::OpenAiResponses => {
                Some(data.clone())
            }
            _ => None,
        })
        .collect();
    match wire {
        Wire::Anthropic => {
            content.push(StreamEvent::ThinkingSignature(SIGNATURE.into()));
            content.push(StreamEvent::RedactedThinking(REDACTED.into()));
        }
        // OpenAI-compatible servers have no signature and no redacted form.
        Wire::OpenAi => {}
        Wire::OpenAiResponses => {
            let parsed: Vec<Value> = reasoning_items
                .iter()
                .map(|item| serde_json::from_str(item).unwrap())
                .collect();
            assert_eq!(parsed.len(), 2, "{events:?}");
            assert_eq!(parsed[0]["type"], "reasoning");
            assert_eq!(parsed[0]["encrypted_content"], SIGNATURE);
            assert_eq!(parsed[0]["summary"][0]["text"], thought);
            assert_eq!(parsed[1]["encrypted_content"], REDACTED);
            content.extend(
                reasoning_items
                    .iter()
                    .cloned()
                    .map(StreamEvent::RedactedThinking),
            );
        }
    }
    content.extend(text_deltas(answer, CHUNK));
    content.push(neutral_call("call_t1", "read_file", input));
    assert_eq!(
        events,
        expected_events(wire, (&server, 0), content, usage, StopReason::ToolUse),
        "{wire:?}"
    );

    // The accumulated message goes back in the next request: the thinking
    // stays on across the tool turn with its signature (Anthropic), and the
    // server's invariant checker accepts the history.
    let mut acc = ResponseAccumulator::new();
    events.iter().for_each(|e| acc.push(e));
    let assistant = acc.into_message();
    let follow_up = ChatRequest {
        messages: vec![
            Message::user_text("Say hello."),
            assistant,
            Message::tool_results(vec![ToolResult::text("call_t1", "fn a() {}", false)]),
        ],
        ..ChatRequest::default()
    };
    let events = events_of(provider.stream(&follow_up)).await;
    assert_eq!(text_of(&events), "Hello!");
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let sent = requests[1].messages();
    match wire {
        Wire::Anthropic => assert_eq!(
            sent[1]["content"],
            json!([
                {"type": "thinking", "thinking": thought, "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "text", "text": answer},
                {"type": "tool_use", "id": "call_t1", "name": "read_file", "input": {"path": "a.rs"}}
            ])
        ),
        Wire::OpenAi => assert_eq!(
            sent[1],
            json!({"role": "assistant", "content": answer, "tool_calls": [
                {"id": "call_t1", "type": "function",
                 "function": {"name": "read_file", "arguments": input}}
            ]})
        ),
        Wire::OpenAiResponses => {
            // Sent back without the id naming them (store: false keeps none).
            let reasoning: Vec<Value> = reasoning_items
                .iter()
                .map(|item| {
                    let mut item: Value = serde_json::from_str(item).unwrap();
                    item.as_object_mut().unwrap().remove("id");
                    item
                })
                .collect();
            assert_eq!(
                sent[1..],
                [
                    reasoning[0].clone(),
                    reasoning[1].clone(),
                    json!({"type": "message", "role": "assistant", "content": answer}),
                    json!({"type": "function_call", "call_id": "call_t1", "name": "read_file", "arguments": input}),
                    json!({"type": "function_call_output", "call_id": "call_t1", "output": "fn a() {}"}),
                ]
            );
            // The encrypted content goes back byte for byte.
            let raw = String::from_utf8(
                openai_responses::request_body(&config(&server, wire), &follow_up).unwrap(),
            )
            .unwrap();
            for item in &reasoning {
                let encrypted = item["encrypted_content"].as_str().unwrap();
                assert!(raw.contains(&format!("\"{encrypted}\"")), "{raw}");
            }
        }
    }
}

async fn concurrent_streams_on_one_provider_stay_apart(wire: Wire) {
    // Two calls in flight at once on one provider (parallel sub-agents), each
    // routed by its task: every stream gets exactly its own answer.
    let slow = |reply: &str| Turn::new(chunked(reply)).with_chunk_delay(Duration::from_millis(5));
    let server = start(
        Script::new()
            .then(slow("alpha answer, streamed slowly").when(Matcher::first_user_contains("alpha")))
            .then(slow("beta answer, also slow").when(Matcher::first_user_contains("beta"))),
    )
    .await;
    let provider = provider(&server, wire, 0);
    let ask = |task: &str| ChatRequest {
        messages: vec![Message::user_text(task)],
        ..ChatRequest::default()
    };
    let (alpha, beta) = futures::join!(
        events_of(provider.stream(&ask("task alpha"))),
        events_of(provider.stream(&ask("task beta")))
    );
    assert_eq!(
        content_of(&alpha),
        text_deltas("alpha answer, streamed slowly", CHUNK)
    );
    assert_eq!(
        content_of(&beta),
        text_deltas("beta answer, also slow", CHUNK)
    );
    assert_attempts(&server, wire, 2, 0);
}

async fn parallel_tool_calls_arrive_complete_and_in_order(wire: Wire) {
    let preface = "Reading both files.";
    let read = r#"{"path": "docs/résumé.md", "lines": [1, 2, 3]}"#;
    let grep = r#"{"pattern": "fn main\\(", "max_count": 12345678901234567890}"#;
    let usage = scripted::Usage::new(700, 120).with_cache_read(600);
    let reply = text(preface)
        .and_block(raw_call("call_read_7Qx", "read_file", read))
        .and_block(raw_call("call_grep_9Zt", "grep", grep))
        .and_block(raw_call("call_list_3Kp", "list_dir", ""))
        .with_chunk_chars(CHUNK)
        .with_usage(usage);
    let server = start(Script::new().then(reply)).await;
    let events = events_of(provider(&server, wire, 0).stream(&hello())).await;
    let mut content = text_deltas(preface, CHUNK);
    content.push(neutral_call("call_read_7Qx", "read_file", read));
    content.push(neutral_call("call_grep_9Zt", "grep", grep));
    content.push(neutral_call("call_list_3Kp", "list_dir", "{}"));
    assert_eq!(
        events,
        expected_events(wire, (&server, 0), content, usage, StopReason::ToolUse),
        "{wire:?}"
    );
    // The raw argument text, byte for byte: spacing, escapes, non-ASCII and an
    // integer beyond f64 precision survive.
    let inputs: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(call) => Some(call.input.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(inputs, [read, grep, "{}"]);
    assert!(inputs[1].contains("12345678901234567890"));
    assert!(
        pieces(grep, CHUNK).len() > 10,
        "arguments split over many deltas"
    );
}

// ---------------------------------------------------------------------------
// Request bodies
// ---------------------------------------------------------------------------

const STABLE: &str = "You are Troupe, a coding agent.\nRules: read before you edit.";
const ENVIRONMENT: &str = "cwd: /work/project\nplatform: linux\ndate: 2025-06-01";
const GREP_INPUT: &str = r#"{"pattern": "Counter::new(", "max_count": 12345678901234567890}"#;
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object", "properties": {}}),
    }
}

/// Tools in an order that is not alphabetical, to see it kept.
const TOOL_ORDER: [&str; 4] = ["read_file", "grep", "edit_file", "screenshot"];

fn call(id: &str, name: &str, input: &str) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: input.into(),
    })
}

/// A realistic conversation: signed thinking, text, parallel tool calls (one
/// with a big integer), their results (one an error, one with an image), a
/// second tool turn, then the result and a new user message.
fn conversation() -> ChatRequest {
    ChatRequest {
        system: SystemPrompt {
            stable: STABLE.into(),
            environment: ENVIRONMENT.into(),
        },
        tools: TOOL_ORDER.iter().map(|name| tool(name)).collect(),
        messages: vec![
            Message::user_text("The counter overflows in src/counter.rs; fix it."),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "Read the file, find the callers.".into(),
                        signature: Some("sig-turn-1".into()),
                    },
                    ContentBlock::Text {
                        text: "Let me look at the file and its callers.".into(),
                    },
                    call("call_read", "read_file", r#"{"path": "src/counter.rs"}"#),
                    call("call_grep", "grep", GREP_INPUT),
                    call("call_shot", "screenshot", "{}"),
                ],
            },
            Message::tool_results(vec![
                ToolResult::text("call_read", "pub struct Counter(u8);", false),
                ToolResult::text(
                    "call_grep",
                    "grep: unclosed group in pattern `Counter::new(`",
                    true,
                ),
                ToolResult {
                    call_id: "call_shot".into(),
                    content: vec![
                        ToolOutputPart::Text {
                            text: "screen captured".into(),
                        },
                        ToolOutputPart::Image {
                            media_type: "image/png".into(),
                            data: PNG.into(),
                        },
                    ],
                    is_error: false,
                },
            ]),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "u8 is too small; widen it.".into(),
                        signature: Some("sig-turn-2".into()),
                    },
                    call(
                        "call_edit",
                        "edit_file",
                        r#"{"path":"src/counter.rs","old":"u8","new":"u64"}"#,
                    ),
                ],
            },
            Message::tool_results(vec![ToolResult::text("call_edit", "edited 1 line", false)]),
            Message::user_text("Also explain the fix briefly."),
        ],
        session_id: None,
    }
}

/// JSON paths of every `cache_control` marker in a body.
fn cache_breakpoints(value: &Value, path: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key == "cache_control" {
                    out.push(path.clone());
                } else {
                    cache_breakpoints(child, format!("{path}/{key}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                cache_breakpoints(child, format!("{path}/{index}"), out);
            }
        }
        _ => {}
    }
}

fn expected_anthropic_messages() -> Value {
    json!([
        {"role": "user", "content": [
            {"type": "text", "text": "The counter overflows in src/counter.rs; fix it."}
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Read the file, find the callers.", "signature": "sig-turn-1"},
            {"type": "text", "text": "Let me look at the file and its callers."},
            {"type": "tool_use", "id": "call_read", "name": "read_file", "input": {"path": "src/counter.rs"}},
            {"type": "tool_use", "id": "call_grep", "name": "grep",
             "input": {"pattern": "Counter::new(", "max_count": 12_345_678_901_234_567_890_u64}},
            {"type": "tool_use", "id": "call_shot", "name": "screenshot", "input": {}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_read",
             "content": "pub struct Counter(u8);"},
            {"type": "tool_result", "tool_use_id": "call_grep", "is_error": true,
             "content": "grep: unclosed group in pattern `Counter::new(`"},
            {"type": "tool_result", "tool_use_id": "call_shot", "content": [
                {"type": "text", "text": "screen captured"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
            ]}
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "u8 is too small; widen it.", "signature": "sig-turn-2"},
            {"type": "tool_use", "id": "call_edit", "name": "edit_file",
             "input": {"path": "src/counter.rs", "old": "u8", "new": "u64"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_edit",
             "content": "edited 1 line"},
            {"type": "text", "text": "Also explain the fix briefly.", "cache_control": {"type": "ephemeral"}}
        ]}
    ])
}

fn expected_openai_messages() -> Value {
    let function = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    json!([
        {"role": "system", "content": format!("{STABLE}\n\n{ENVIRONMENT}")},
        {"role": "user", "content": "The counter overflows in src/counter.rs; fix it."},
        {"role": "assistant", "content": "Let me look at the file and its callers.", "tool_calls": [
            function("call_read", "read_file", r#"{"path": "src/counter.rs"}"#),
            function("call_grep", "grep", GREP_INPUT),
            function("call_shot", "screenshot", "{}")
        ]},
        {"role": "tool", "tool_call_id": "call_read", "content": "pub struct Counter(u8);"},
        {"role": "tool", "tool_call_id": "call_grep",
         "content": "grep: unclosed group in pattern `Counter::new(`"},
        {"role": "tool", "tool_call_id": "call_shot",
         "content": format!("screen captured\n{}", openai::IMAGE_OMITTED)},
        {"role": "assistant", "content": null, "tool_calls": [
            function("call_edit", "edit_file", r#"{"path":"src/counter.rs","old":"u8","new":"u64"}"#)
        ]},
        {"role": "tool", "tool_call_id": "call_edit", "content": "edited 1 line"},
        {"role": "user", "content": "Also explain the fix briefly."}
    ])
}

async fn multi_turn_request_body_is_valid_and_exact(wire: Wire) {
    let answer = "Widened the counter to u64 so it cannot overflow.";
    let server = start(Script::new().then(chunked(answer))).await;
    let mut cfg = config(&server, wire);
    if wire != Wire::OpenAi {
        // As the configuration resolves `thinking = 16000` with `max_tokens`
        // unwritten: the budget plus room for the answer.
        cfg.thinking_budget = Some(THINKING_BUDGET);
        cfg.max_tokens = THINKING_BUDGET + MAX_TOKENS;
    }
    let request = conversation();
    let events = events_of(adapter(wire, &cfg, 0).stream(&request)).await;
    assert_eq!(
        text_of(&events),
        answer,
        "{wire:?}: the server accepted the body"
    );
    let recorded = within(
        "the request to be recorded",
        server.wait_for_requests(1, TEST_TIMEOUT),
    )
    .await
    .unwrap();
    assert_eq!(recorded.len(), 1);
    assert!(
        server.violations().is_empty(),
        "{wire:?}: {:?}",
        server.violations()
    );
    let req = &recorded[0];
    let body = &req.body;
    assert_eq!(body["model"], "model-under-test");
    assert_eq!(body["stream"], true);
    assert_eq!(
        req.tool_names(),
        TOOL_ORDER,
        "{wire:?}: tools in the given order"
    );

    // The bytes on the wire are exactly what the pure body builder produces;
    // the raw tool input (spacing, the big integer) goes out verbatim.
    let built = match wire {
        Wire::Anthropic => anthropic::request_body(&cfg, &request),
        Wire::OpenAi => openai::request_body(&cfg, &request),
        Wire::OpenAiResponses => openai_responses::request_body(&cfg, &request),
    }
    .unwrap();
    assert_eq!(req.body_len, built.len(), "{wire:?}");
    assert_eq!(&serde_json::from_slice::<Value>(&built).unwrap(), body);
    let raw = String::from_utf8(built).unwrap();
    assert!(raw.contains("12345678901234567890"), "{wire:?}: {raw}");

    match wire {
        Wire::Anthropic => {
            assert_eq!(req.header("x-api-key"), Some("sk-test-key"));
            assert_eq!(
                req.header("anthropic-version"),
                Some(anthropic::ANTHROPIC_VERSION)
            );
            assert_eq!(body["max_tokens"], cfg.max_tokens, "sent as resolved");
            assert_eq!(
                body["thinking"],
                json!({"type": "enabled", "budget_tokens": THINKING_BUDGET})
            );
            assert_eq!(
                body["system"],
                json!([
                    {"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": ENVIRONMENT}
                ])
            );
            assert_eq!(body["messages"], expected_anthropic_messages());
            let mut marks = Vec::new();
            cache_breakpoints(body, String::new(), &mut marks);
            marks.sort();
            assert_eq!(
                marks,
                ["/messages/4/content/1", "/system/0"],
                "exactly on Stable and on the last block of the newest message"
            );
            // Raw input text is sent as is, not re-serialised.
            assert!(raw.contains(GREP_INPUT), "{raw}");
            assert_eq!(
                body["messages"][1]["content"][3]["input"]["max_count"].to_string(),
                "12345678901234567890"
            );
            let results = req.tool_results();
            let flags: Vec<(&str, bool)> = results
                .iter()
                .map(|r| (r.call_id.as_str(), r.is_error))
                .collect();
            assert_eq!(
                flags,
                [
                    ("call_read", false),
                    ("call_grep", true),
                    ("call_shot", false),
                    ("call_edit", false)
                ]
            );
        }
        Wire::OpenAi => {
            assert_eq!(req.header("authorization"), Some("Bearer sk-test-key"));
            assert_eq!(body["max_tokens"], MAX_TOKENS);
            assert!(body.get("max_completion_tokens").is_none());
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
            assert_eq!(body["messages"], expected_openai_messages());
            assert!(!raw.contains("sig-turn"), "no thinking is sent back: {raw}");
            assert!(!raw.contains("cache_control"));
            let tools = body["tools"].as_array().unwrap();
            assert!(tools.iter().all(|t| t["type"] == "function"));
            assert_eq!(
                tools[0]["function"]["parameters"],
                json!({"type": "object", "properties": {}})
            );
        }
        Wire::OpenAiResponses => {
            assert_eq!(req.header("authorization"), Some("Bearer sk-test-key"));
            assert_eq!(body["max_output_tokens"], cfg.max_tokens);
            assert_eq!(body["store"], false);
            assert!(body.get("previous_response_id").is_none());
            assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
            assert_eq!(
                body["reasoning"],
                json!({"effort": "medium", "summary": "auto"})
            );
            assert_eq!(body["instructions"], format!("{STABLE}\n\n{ENVIRONMENT}"));
            assert_eq!(body["input"], expected_responses_input());
            assert!(
                !raw.contains("sig-turn"),
                "Anthropic thinking is not sent: {raw}"
            );
            assert_eq!(
                body["tools"][0],
                json!({"type": "function", "name": "read_file", "description": "The read_file tool.",
                       "parameters": {"type": "object", "properties": {}}})
            );
        }
    }
}

fn expected_responses_input() -> Value {
    let function = |id: &str, name: &str, arguments: &str| json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments});
    let output = |id: &str, output: &str| json!({"type": "function_call_output", "call_id": id, "output": output});
    json!([
        {"type": "message", "role": "user", "content": "The counter overflows in src/counter.rs; fix it."},
        {"type": "message", "role": "assistant", "content": "Let me look at the file and its callers."},
        function("call_read", "read_file", r#"{"path": "src/counter.rs"}"#),
        function("call_grep", "grep", GREP_INPUT),
        function("call_shot", "screenshot", "{}"),
        output("call_read", "pub struct Counter(u8);"),
        output("call_grep", "grep: unclosed group in pattern `Counter::new(`"),
        output("call_shot", &format!("screen captured\n{}", openai::IMAGE_OMITTED)),
        function("call_edit", "edit_file", r#"{"path":"src/counter.rs","old":"u8","new":"u64"}"#),
        output("call_edit", "edited 1 line"),
        {"type": "message", "role": "user", "content": "Also explain the fix briefly."}
    ])
}

/// `max_tokens` and `thinking.budget_tokens` on the wire for a `[providers]`
/// entry: the budget is counted once, in the configuration, and the body
/// carries the resolved values unchanged.
#[tokio::test]
async fn anthropic_thinking_budget_is_counted_once_in_max_tokens() {
    let cases = [
        // The documented default: 16,000 budget + 8,192 for the answer.
        ("thinking = true", 24_192, 16_000),
        ("thinking = 10000", 18_192, 10_000),
        // A written `max_tokens` above the budget is sent as written.
        ("thinking = true\nmax_tokens = 20000", 20_000, 16_000),
        ("thinking = false", 8_192, 0),
    ];
    let script: Script = cases.iter().map(|_| chunked("Thought it over.")).collect();
    let server = start(script).await;
    let env = std::collections::HashMap::from([(
        "ANTHROPIC_API_KEY".to_string(),
        "sk-test-key".to_string(),
    )]);
    for (i, (entry, max_tokens, budget)) in cases.into_iter().enumerate() {
        let text = format!(
            "[providers.claude]\nbase_url = \"{}\"\n{entry}\n",
            server.anthropic_base_url()
        );
        let file = parse_config_file(std::path::Path::new("config.toml"), &text)
            .unwrap_or_else(|err| panic!("{entry}: {err}"));
        let cfg = resolve_entry("claude", &file.providers["claude"], &env)
            .unwrap_or_else(|err| panic!("{entry}: {err}"));
        let events = events_of(adapter(Wire::Anthropic, &cfg, 0).stream(&hello())).await;
        assert_eq!(text_of(&events), "Thought it over.", "{entry}");
        let recorded = within(
            "the request to be recorded",
            server.wait_for_requests(i + 1, TEST_TIMEOUT),
        )
        .await
        .unwrap();
        let body = &recorded[i].body;
        assert_eq!(body["max_tokens"], max_tokens, "{entry}: {body}");
        if budget == 0 {
            assert!(body.get("thinking").is_none(), "{entry}: {body}");
        } else {
            assert_eq!(
                body["thinking"],
                json!({"type": "enabled", "budget_tokens": budget}),
                "{entry}"
            );
        }
    }
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

async fn an_invalid_history_is_rejected_by_the_invariant_checker(wire: Wire) {
    // The checker is live in this setup: a tool call left unanswered is
    // refused with a 400 naming the rule, and the adapter reports it as an
    // invalid request without retrying.
    let server = start(Script::new().then(text("never sent"))).await;
    let request = ChatRequest {
        messages: vec![
            Message::user_text("Look at the file."),
            Message {
                role: Role::Assistant,
                content: vec![call("call_lost", "read_file", r#"{"path":"a"}"#)],
            },
            Message::user_text("Never mind."),
        ],
        ..ChatRequest::default()
    };
    let (events, error) = split_error(collect(provider(&server, wire, 3).stream(&request)).await);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(error.kind, ProviderErrorKind::InvalidRequest, "{error}");
    assert_eq!(error.status, Some(400));
    assert!(error.message.contains("unanswered-tool-call"), "{error}");
    assert_attempts(&server, wire, 1, 1);
    let violations = server.take_violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].rule, Rule::UnansweredToolCall);
    assert_eq!(violations[0].request_index, Some(0));
}

// ---------------------------------------------------------------------------
// Retries
// ---------------------------------------------------------------------------

/// Streams `hello()` through a fresh provider and returns the events and the
/// time from the start of the call to the first content event (which can only
/// come after the retried request arrived).
async fn timed_success(
    server: &ScriptedServer,
    wire: Wire,
    max_retries: u32,
) -> (Vec<StreamEvent>, Duration) {
    let provider = provider(server, wire, max_retries);
    let started = Instant::now();
    let mut stream = provider.stream(&hello());
    let mut events = Vec::new();
    let mut first_content = None;
    while let Some(item) = within("the next event", stream.next()).await {
        let event = item.expect("the retried call succeeds");
        // The retry's announcement comes before the wait; it is not content.
        if !of_a_response(&event) {
            continue;
        }
        if first_content.is_none() && !matches!(event, StreamEvent::Usage(_)) {
            first_content = Some(started.elapsed());
        }
        events.push(event);
    }
    (events, first_content.expect("content arrived"))
}

/// The 429 turn is answered first and the retry by the next turn, in order.
fn assert_turn_order(server: &ScriptedServer, turns: &[usize]) {
    let order: Vec<Option<usize>> = server.requests().iter().map(|r| r.turn).collect();
    let wanted: Vec<Option<usize>> = turns.iter().copied().map(Some).collect();
    assert_eq!(order, wanted);
}

async fn rate_limit_waits_for_retry_after_ms(wire: Wire) {
    const DELAY_MS: u64 = 200;
    let server = start(
        Script::new()
            .then(Fault::rate_limited_ms(DELAY_MS))
            .then(chunked("after the wait")),
    )
    .await;
    let (events, waited) = timed_success(&server, wire, 2).await;
    assert_eq!(text_of(&events), "after the wait");
    assert_attempts(&server, wire, 2, 0);
    assert_turn_order(&server, &[0, 1]);
    // The second request cannot have arrived earlier than the requested delay
    // after the first (the backoff alone would be ~10 ms).
    assert!(
        waited >= Duration::from_millis(DELAY_MS),
        "{wire:?}: retried after {waited:?}"
    );
}

async fn rate_limit_waits_for_retry_after_seconds(wire: Wire) {
    const DELAY_SECS: u64 = 1;
    let server = start(
        Script::new()
            .then(Fault::rate_limited(DELAY_SECS))
            .then(chunked("after a second")),
    )
    .await;
    let (events, waited) = timed_success(&server, wire, 2).await;
    assert_eq!(text_of(&events), "after a second");
    assert_attempts(&server, wire, 2, 0);
    assert_turn_order(&server, &[0, 1]);
    assert!(
        waited >= Duration::from_secs(DELAY_SECS),
        "{wire:?}: retried after {waited:?}"
    );
}

async fn overload_and_server_errors_are_retried_then_succeed(wire: Wire) {
    let usage = scripted::Usage::new(90, 7);
    let server = start(
        Script::new()
            .then(Fault::Overloaded)
            .then(Fault::InternalError)
            .then(Fault::BadGateway)
            .then(Fault::ServiceUnavailable)
            .then(chunked("finally").with_usage(usage)),
    )
    .await;
    let events = events_of(provider(&server, wire, 4).stream(&hello())).await;
    assert_eq!(
        events,
        expected_events(
            wire,
            (&server, 4),
            text_deltas("finally", CHUNK),
            usage,
            StopReason::EndTurn
        ),
        "{wire:?}: only the successful attempt's events"
    );
    assert_attempts(&server, wire, 5, 0);
    assert_turn_order(&server, &[0, 1, 2, 3, 4]);
}

async fn a_non_json_gateway_error_is_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::NonJsonBody {
                status: 502,
                body: "<html><body><h1>502 Bad Gateway</h1></body></html>".into(),
            })
            .then(chunked("through the proxy")),
    )
    .await;
    let events = events_of(provider(&server, wire, 1).stream(&hello())).await;
    assert_eq!(text_of(&events), "through the proxy");
    assert_attempts(&server, wire, 2, 0);
}

async fn retries_stop_after_max_retries_with_the_last_error_kind(wire: Wire) {
    const MAX_RETRIES: u32 = 2;
    const RETRY_AFTER_MS: u64 = 20;
    let cases = [
        (Fault::Overloaded, ProviderErrorKind::Overloaded, 529, None),
        (Fault::InternalError, ProviderErrorKind::Server, 500, None),
        (
            Fault::ServiceUnavailable,
            ProviderErrorKind::Server,
            503,
            None,
        ),
        (
            Fault::rate_limited_ms(RETRY_AFTER_MS),
            ProviderErrorKind::RateLimited,
            429,
            Some(Duration::from_millis(RETRY_AFTER_MS)),
        ),
    ];
    for (fault, kind, status, retry_after) in cases {
        // One more fault than attempts, so an extra retry would be visible.
        let script: Script = std::iter::repeat_n(fault.clone(), MAX_RETRIES as usize + 2).collect();
        let server = start(script).await;
        let items = collect(provider(&server, wire, MAX_RETRIES).stream(&hello())).await;
        // Every retry is announced, numbered, with the failure it follows.
        let announced: Vec<(u32, u32, ProviderErrorKind, Option<u16>)> = items
            .iter()
            .filter_map(|item| match item {
                Ok(StreamEvent::Retrying(r)) => Some((r.retry, r.max_retries, r.kind, r.status)),
                _ => None,
            })
            .collect();
        assert_eq!(
            announced,
            (1..=MAX_RETRIES)
                .map(|n| (n, MAX_RETRIES, kind, Some(status)))
                .collect::<Vec<_>>(),
            "{wire:?} {fault:?}"
        );
        let (events, error) = split_error(items);
        assert!(events.is_empty(), "{wire:?} {fault:?}: {events:?}");
        assert_eq!(error.kind, kind, "{wire:?} {fault:?}: {error}");
        assert_eq!(error.status, Some(status), "{wire:?} {fault:?}");
        assert_eq!(error.retry_after, retry_after, "{wire:?} {fault:?}");
        assert!(error.request_id.is_some(), "{wire:?} {fault:?}: {error:?}");
        assert_attempts(&server, wire, MAX_RETRIES as usize + 1, 1);
    }
}

// ---------------------------------------------------------------------------
// Errors that are not retried
// ---------------------------------------------------------------------------

async fn prompt_too_long_is_not_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::prompt_too_long(208_310, 200_000))
            .then(text("never")),
    )
    .await;
    let (events, error) = split_error(collect(provider(&server, wire, 4).stream(&hello())).await);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(error.kind, ProviderErrorKind::PromptTooLong, "{error}");
    assert!(error.is_prompt_too_long());
    assert_eq!(error.status, Some(400));
    assert!(error.message.contains("208310"), "{error}");
    assert!(error.request_id.is_some(), "{error:?}");
    assert_attempts(&server, wire, 1, 1);
}

async fn authentication_failure_is_not_retried(wire: Wire) {
    let server = start(Script::new().then(Fault::Unauthorized).then(text("never"))).await;
    let (events, error) = split_error(collect(provider(&server, wire, 4).stream(&hello())).await);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(error.kind, ProviderErrorKind::Authentication, "{error}");
    assert_eq!(error.status, Some(401));
    assert!(
        error.message.starts_with(
            "the provider rejected the key (401): check TEST_API_KEY, read by \
             [providers.scripted] api_key_env. The server said: "
        ),
        "{error}"
    );
    assert_attempts(&server, wire, 1, 1);
}

async fn a_non_json_error_body_names_the_status(wire: Wire) {
    let page = "<html><body><h1>404 Not Found</h1></body></html>";
    let server = start(
        Script::new()
            .then(Fault::NonJsonBody {
                status: 404,
                body: page.into(),
            })
            .then(text("never")),
    )
    .await;
    let (events, error) = split_error(collect(provider(&server, wire, 4).stream(&hello())).await);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(error.kind, ProviderErrorKind::InvalidRequest, "{error}");
    assert_eq!(error.status, Some(404));
    assert!(error.message.contains("HTTP 404"), "{error}");
    assert!(error.message.contains("non-JSON"), "{error}");
    assert!(error.message.contains("404 Not Found"), "{error}");
    assert!(error.to_string().contains("(HTTP 404)"), "{error}");
    assert_attempts(&server, wire, 1, 1);
}

// ---------------------------------------------------------------------------
// Broken streams
// ---------------------------------------------------------------------------

const LONG_REPLY: &str = "This answer is interrupted somewhere in the middle.";
/// Text deltas delivered before a mid-stream fault.
const DELIVERED: usize = 4;

/// Asserts a stream that failed after delivering [`DELIVERED`] text deltas.
fn assert_failed_after_text(
    wire: Wire,
    items: Vec<Item>,
    kind: ProviderErrorKind,
) -> ProviderError {
    let (events, error) = split_error(items);
    assert_eq!(
        content_of(&events),
        partial_text(LONG_REPLY, DELIVERED),
        "{wire:?}"
    );
    assert_eq!(
        text_of(&events),
        pieces(LONG_REPLY, CHUNK)[..DELIVERED].concat()
    );
    assert!(
        !events.iter().any(|e| matches!(e, StreamEvent::Stop(_))),
        "{events:?}"
    );
    assert_eq!(error.kind, kind, "{wire:?}: {error}");
    error
}

async fn a_stream_cut_after_content_is_broken_and_not_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::cut_after(
                wire.lead_events() + DELIVERED,
                chunked(LONG_REPLY),
            ))
            .then(text("never")),
    )
    .await;
    let items = collect(provider(&server, wire, 4).stream(&hello())).await;
    assert_failed_after_text(wire, items, ProviderErrorKind::StreamBroken);
    assert_attempts(&server, wire, 1, 1);
}

async fn a_stream_cut_before_content_is_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::cut_after(1, chunked(LONG_REPLY)))
            .then(chunked("second try")),
    )
    .await;
    let events = events_of(provider(&server, wire, 2).stream(&hello())).await;
    assert_eq!(content_of(&events), text_deltas("second try", CHUNK));
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::EndTurn)));
    assert_attempts(&server, wire, 2, 0);
}

async fn a_stall_after_content_hits_the_idle_timeout_without_retry(wire: Wire) {
    let sent = wire.lead_events() + DELIVERED;
    let server = start(
        Script::new()
            .then(Fault::stall_after(sent, chunked(LONG_REPLY)))
            .then(text("never")),
    )
    .await;
    let items = collect(provider_with_idle(&server, wire, 4, SHORT_IDLE).stream(&hello())).await;
    let error = assert_failed_after_text(wire, items, ProviderErrorKind::IdleTimeout);
    assert!(error.message.contains("idle timeout"), "{error}");
    assert_attempts(&server, wire, 1, 1);
    // Giving up on the stalled response closed its connection.
    let aborted = within(
        "the stalled stream to be abandoned",
        server.wait_for_aborted_streams(1, TEST_TIMEOUT),
    )
    .await
    .unwrap();
    assert_eq!(aborted.len(), 1);
    assert_eq!(aborted[0].request_index, 0);
    assert_eq!(aborted[0].events_sent, sent);
}

async fn a_stall_before_content_is_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::stall_after(1, chunked(LONG_REPLY)))
            .then(chunked("no stall this time")),
    )
    .await;
    let events = events_of(provider_with_idle(&server, wire, 2, SHORT_IDLE).stream(&hello())).await;
    assert_eq!(
        content_of(&events),
        text_deltas("no stall this time", CHUNK)
    );
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::EndTurn)));
    assert_attempts(&server, wire, 2, 0);
    let aborted = within(
        "the stalled stream to be abandoned",
        server.wait_for_aborted_streams(1, TEST_TIMEOUT),
    )
    .await
    .unwrap();
    assert_eq!(aborted[0].request_index, 0);
}

async fn a_server_silent_past_the_idle_timeout_is_retried(wire: Wire) {
    // No response headers within the idle timeout: the attempt is given up and
    // retried, and the retry is answered by the next turn.
    let silent = Turn::new(text("too late")).with_delay(SHORT_IDLE * 4);
    let server = start(Script::new().then(silent).then(chunked("on time"))).await;
    let events = events_of(provider_with_idle(&server, wire, 1, SHORT_IDLE).stream(&hello())).await;
    assert_eq!(text_of(&events), "on time");
    assert_attempts(&server, wire, 2, 0);
    assert_turn_order(&server, &[0, 1]);
}

async fn a_malformed_sse_line_is_a_malformed_response(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::malformed_after(
                wire.lead_events() + DELIVERED,
                chunked(LONG_REPLY),
            ))
            .then(text("never")),
    )
    .await;
    let items = collect(provider(&server, wire, 4).stream(&hello())).await;
    let error = assert_failed_after_text(wire, items, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("malformed"), "{error}");
    assert_attempts(&server, wire, 1, 1);
}

/// The error kind of the scripted mid-stream error: Anthropic sends an
/// `overloaded_error` event, OpenAI a `server_error` chunk (fixtures ERRORS.md
/// A3, O4).
fn midstream_kind(wire: Wire) -> ProviderErrorKind {
    match wire {
        Wire::Anthropic => ProviderErrorKind::Overloaded,
        Wire::OpenAi | Wire::OpenAiResponses => ProviderErrorKind::Server,
    }
}

async fn a_midstream_error_after_content_is_not_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::error_after(
                wire.lead_events() + DELIVERED,
                chunked(LONG_REPLY),
            ))
            .then(text("never")),
    )
    .await;
    let items = collect(provider(&server, wire, 4).stream(&hello())).await;
    let error = assert_failed_after_text(wire, items, midstream_kind(wire));
    assert_eq!(error.status, None, "an error of the stream, not of HTTP");
    assert_attempts(&server, wire, 1, 1);
}

async fn a_midstream_error_before_content_is_retried(wire: Wire) {
    let server = start(
        Script::new()
            .then(Fault::error_after(1, chunked(LONG_REPLY)))
            .then(chunked("recovered")),
    )
    .await;
    let events = events_of(provider(&server, wire, 2).stream(&hello())).await;
    assert_eq!(content_of(&events), text_deltas("recovered", CHUNK));
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::EndTurn)));
    assert_attempts(&server, wire, 2, 0);
}

// ---------------------------------------------------------------------------
// Cancellation and construction
// ---------------------------------------------------------------------------

async fn dropping_the_stream_aborts_the_response(wire: Wire) {
    let reply = "a slow answer that nobody waits for until its very end";
    let slow =
        Turn::new(text(reply).with_chunk_chars(2)).with_chunk_delay(Duration::from_millis(20));
    let server = start(Script::new().then(slow)).await;
    let provider = provider(&server, wire, 0);
    let mut stream = provider.stream(&hello());
    loop {
        let event = within("the first text delta", stream.next())
            .await
            .expect("the stream yields")
            .expect("no error");
        if matches!(event, StreamEvent::TextDelta(_)) {
            break;
        }
    }
    drop(stream);
    let aborted = within(
        "the abandoned stream to be recorded",
        server.wait_for_aborted_streams(1, TEST_TIMEOUT),
    )
    .await
    .unwrap();
    assert_eq!(aborted.len(), 1);
    assert_eq!(aborted[0].request_index, 0);
    assert!(
        aborted[0].events_sent < pieces(reply, 2).len(),
        "{wire:?}: the response was far from its end: {:?}",
        aborted[0]
    );
    assert_attempts(&server, wire, 1, 0);
}

async fn build_provider_streams_with_the_configured_policy(wire: Wire) {
    // `build_provider` picks the adapter from the configured protocol; with
    // no retries configured a 529 is reported at once.
    let server = start(
        Script::new()
            .then(chunked("built"))
            .then(Fault::Overloaded)
            .then(text("never")),
    )
    .await;
    let mut cfg = config(&server, wire);
    cfg.max_retries = 0;
    let provider = build_provider(&cfg).unwrap();
    assert_eq!(provider.name(), "scripted");
    assert_eq!(provider.model(), "model-under-test");
    let events = events_of(provider.stream(&hello())).await;
    assert_eq!(text_of(&events), "built");
    let (events, error) = split_error(collect(provider.stream(&hello())).await);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(error.kind, ProviderErrorKind::Overloaded, "{error}");
    assert_attempts(&server, wire, 2, 1);
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    let wanted = match wire {
        Wire::Anthropic => "/v1/messages",
        Wire::OpenAi => "/v1/chat/completions",
        Wire::OpenAiResponses => "/v1/responses",
    };
    assert_eq!(paths, [wanted, wanted]);
}
