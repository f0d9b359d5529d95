//! The provider adapters without HTTP: recorded streams of both APIs through the
//! public decoders (compared with an independent reference parse), malformed and
//! broken streams, and the request body builders.

use std::time::Duration;

use crate::decoding::{chunked, collect};
use bytes::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use troupe_config::ResolvedProvider;
use troupe_llm::{
    ChatRequest, ProviderError, ResponseAccumulator, ResponseMetadata, StreamEvent, anthropic,
    openai,
};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::{
    ContentBlock, Message, Role, StopReason, ToolCall, ToolOutputPart, ToolResult, Usage,
};
use troupe_protocol::model::{ProviderErrorKind, SystemPrompt, ToolDefinition};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sse");
/// Ways to cut a body into chunks: whole, byte by byte, and odd sizes.
const CHUNKINGS: [usize; 4] = [usize::MAX, 1, 7, 61];

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DATA}/{name}")).unwrap()
}

fn expected(name: &str) -> Value {
    let all: Value =
        serde_json::from_slice(&std::fs::read(format!("{DATA}/EXPECTED.json")).unwrap()).unwrap();
    all[name].clone()
}

fn ok_events(results: Vec<Result<StreamEvent, ProviderError>>) -> Vec<StreamEvent> {
    results
        .into_iter()
        .map(|result| result.expect("no error"))
        .collect()
}

fn accumulate(events: &[StreamEvent]) -> ResponseAccumulator {
    let mut acc = ResponseAccumulator::new();
    for event in events {
        acc.push(event);
    }
    acc
}

fn anthropic_usage(expected: &Value) -> Usage {
    Usage {
        input: expected["input_tokens"].as_u64().unwrap(),
        output: expected["output_tokens"].as_u64().unwrap(),
        cache_read: expected["cache_read_input_tokens"].as_u64().unwrap(),
        cache_write: expected["cache_creation_input_tokens"].as_u64().unwrap(),
    }
}

fn openai_usage(expected: &Value) -> Usage {
    let cached = expected["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    Usage {
        input: expected["prompt_tokens"].as_u64().unwrap() - cached,
        output: expected["completion_tokens"].as_u64().unwrap(),
        cache_read: cached,
        cache_write: 0,
    }
}

/// The blocks the reference parser found, in the protocol-neutral model.
fn anthropic_blocks(expected: &Value) -> Vec<ContentBlock> {
    expected["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| match block["type"].as_str().unwrap() {
            "text" => ContentBlock::Text {
                text: block["text"].as_str().unwrap().into(),
            },
            "thinking" => ContentBlock::Thinking {
                thinking: block["thinking"].as_str().unwrap().into(),
                signature: Some(block["signature"].as_str().unwrap().into()),
            },
            "tool_use" => {
                let concat = block["input_json_concat"].as_str().unwrap();
                ContentBlock::ToolCall(ToolCall {
                    id: block["id"].as_str().unwrap().into(),
                    name: block["name"].as_str().unwrap().into(),
                    input: if concat.is_empty() {
                        "{}".into()
                    } else {
                        concat.into()
                    },
                })
            }
            other => panic!("unexpected block type {other}"),
        })
        .collect()
}

/// Final events: every tool call before the last usage, the stop last.
fn assert_final_order(events: &[StreamEvent]) {
    let stop = events.len() - 1;
    assert!(matches!(events[stop], StreamEvent::Stop(_)), "{events:?}");
    assert!(
        matches!(events[stop - 1], StreamEvent::Usage(_)),
        "{events:?}"
    );
    assert!(
        events[..stop - 1]
            .iter()
            .all(|e| !matches!(e, StreamEvent::Stop(_))),
        "one stop only"
    );
}

const ANTHROPIC_COMPLETE: [&str; 6] = [
    "anthropic_text_cache_write.sse",
    "anthropic_text_cache_read.sse",
    "anthropic_text_then_tool_use.sse",
    "anthropic_parallel_tool_use.sse",
    "anthropic_thinking_tool_use.sse",
    "anthropic_thinking_text.sse",
];

const OPENAI_ALL: [&str; 4] = [
    "openai_text_include_usage.sse",
    "openai_parallel_tool_calls.sse",
    "openai_usage_details_length.sse",
    "openai_compat_deepseek_reasoning_tool_cached.sse",
];

#[tokio::test]
async fn anthropic_fixtures_match_the_reference_parse_at_every_chunking() {
    for name in ANTHROPIC_COMPLETE {
        let expected = expected(name);
        for size in CHUNKINGS {
            let events = ok_events(
                collect(anthropic::decode_sse(
                    "claude",
                    chunked(fixture(name), size),
                ))
                .await,
            );
            let context = format!("{name} in chunks of {size}");
            assert_final_order(&events);
            // message_start: the message's id and model, then its usage,
            // before any content.
            assert_eq!(
                events[0],
                StreamEvent::Metadata(ResponseMetadata {
                    id: expected["message_id"].as_str().map(String::from),
                    model: expected["model"].as_str().map(String::from),
                }),
                "{context}"
            );
            assert!(matches!(events[1], StreamEvent::Usage(_)), "{context}");
            let usage = anthropic_usage(&expected["usage"]);
            assert_eq!(
                events[events.len() - 2],
                StreamEvent::Usage(usage),
                "{context}"
            );
            let stop = StopReason::from_wire(expected["stop_reason"].as_str().unwrap());
            assert_eq!(
                events[events.len() - 1],
                StreamEvent::Stop(stop),
                "{context}"
            );
            let acc = accumulate(&events);
            assert_eq!(
                acc.blocks(),
                anthropic_blocks(&expected).as_slice(),
                "{context}"
            );
            assert_eq!(acc.usage(), usage, "{context}");
        }
    }
}

#[tokio::test]
async fn anthropic_fixtures_known_values() {
    let decode = |name: &'static str| async move {
        accumulate(&ok_events(
            collect(anthropic::decode_sse("claude", chunked(fixture(name), 13))).await,
        ))
    };

    let acc = decode("anthropic_text_then_tool_use.sse").await;
    assert_eq!(acc.stop_reason(), Some(&StopReason::ToolUse));
    assert_eq!(
        acc.usage(),
        Usage {
            input: 377,
            output: 65,
            cache_read: 0,
            cache_write: 0
        }
    );
    assert_eq!(
        acc.blocks(),
        &[
            ContentBlock::Text {
                text: "I'll check the current weather in Paris for you.".into()
            },
            ContentBlock::ToolCall(ToolCall {
                id: "toolu_01NRLabsLyVHZPKxbKvkfSMn".into(),
                name: "get_weather".into(),
                input: r#"{"location": "Paris"}"#.into(),
            }),
        ]
    );

    let acc = decode("anthropic_parallel_tool_use.sse").await;
    let ids: Vec<(String, String)> = acc
        .blocks()
        .iter()
        .map(|block| match block {
            ContentBlock::ToolCall(call) => (call.id.clone(), call.input.clone()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            (
                "toolu_01LtEf4h1QW7KCKLsYMuhTNB".into(),
                r#"{"query": "alpha"}"#.into()
            ),
            (
                "toolu_016tfZE7otAFSBjhc67wu189".into(),
                r#"{"query": "beta"}"#.into()
            ),
            (
                "toolu_01XkU35z8BVWqqc9tijDuLrA".into(),
                r#"{"query": "gamma"}"#.into()
            ),
        ]
    );
    assert_eq!(acc.usage().output, 110);

    let acc = decode("anthropic_thinking_tool_use.sse").await;
    match acc.blocks() {
        [
            ContentBlock::Thinking {
                thinking,
                signature: Some(signature),
            },
            ContentBlock::ToolCall(call),
        ] => {
            assert_eq!(thinking.chars().count(), 180);
            assert!(thinking.starts_with("The user wants me to:\n1. Use the fixed_version tool"));
            assert_eq!(signature.len(), 524);
            assert!(signature.starts_with("EoQDCm0IDhgC"));
            assert_eq!(call.id, "toolu_01825dXWLSoJwCst1qTsiWdb");
            assert_eq!(call.name, "fixed_version");
            assert_eq!(call.input, "{}");
        }
        other => panic!("unexpected blocks {other:?}"),
    }

    let acc = decode("anthropic_thinking_text.sse").await;
    match acc.blocks() {
        [
            ContentBlock::Thinking {
                thinking,
                signature: Some(signature),
            },
            ContentBlock::Text { text },
        ] => {
            assert_eq!(thinking.chars().count(), 202);
            assert_eq!(signature.len(), 504);
            assert!(signature.starts_with("EvMCCkYICxgC") && signature.ends_with("QYAQ=="));
            assert_eq!(text.chars().count(), 1021);
            assert!(text.starts_with(
                "Here are the basic steps for safely crossing the street:\n\n**At intersections with traffic lights:**"
            ));
            assert!(text.ends_with("Always prioritize safety over speed when crossing streets."));
        }
        other => panic!("unexpected blocks {other:?}"),
    }
    assert_eq!(acc.stop_reason(), Some(&StopReason::EndTurn));

    let acc = decode("anthropic_text_cache_write.sse").await;
    assert_eq!(acc.usage().cache_write, 18_639);
    assert_eq!(acc.stop_reason(), Some(&StopReason::MaxTokens));
    let acc = decode("anthropic_text_cache_read.sse").await;
    assert_eq!(acc.usage().cache_read, 18_639);
    assert_eq!(acc.usage().total(), 18_643);
}

#[tokio::test]
async fn anthropic_overloaded_midstream_yields_partial_text_then_the_error() {
    let name = "anthropic_overloaded_midstream.sse";
    let expected = expected(name);
    for size in CHUNKINGS {
        let results = collect(anthropic::decode_sse(
            "claude",
            chunked(fixture(name), size),
        ))
        .await;
        let (last, events) = results.split_last().unwrap();
        let events: Vec<StreamEvent> = events.iter().cloned().map(Result::unwrap).collect();
        let error = last.clone().unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Overloaded, "{error}");
        assert_eq!(
            error.request_id.as_deref(),
            Some("req_011CecahFk1FfxfFLw1ja8sL")
        );
        assert_eq!(error.status, None);
        assert!(error.message.contains("Overloaded"), "{error}");
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::Stop(_))));
        let acc = accumulate(&events);
        assert_eq!(acc.stop_reason(), None);
        assert_eq!(
            acc.blocks(),
            anthropic_blocks(&expected).as_slice(),
            "chunks of {size}"
        );
        assert_eq!(acc.usage(), anthropic_usage(&expected["usage"]));
        assert_eq!(acc.usage().input, 617);
    }
}

#[tokio::test]
async fn openai_fixtures_match_the_reference_parse_at_every_chunking() {
    for name in OPENAI_ALL {
        let expected = expected(name);
        for size in CHUNKINGS {
            let context = format!("{name} in chunks of {size}");
            let events =
                ok_events(collect(openai::decode_sse("gpt", chunked(fixture(name), size))).await);
            assert_final_order(&events);
            // The completion's id and model, once, first.
            assert_eq!(
                events[0],
                StreamEvent::Metadata(ResponseMetadata {
                    id: expected["id"].as_str().map(String::from),
                    model: expected["model"].as_str().map(String::from),
                }),
                "{context}"
            );
            assert_eq!(
                events
                    .iter()
                    .filter(|e| matches!(e, StreamEvent::Metadata(_)))
                    .count(),
                1,
                "{context}"
            );
            let usage = openai_usage(&expected["usage"]);
            assert_eq!(
                events[events.len() - 2],
                StreamEvent::Usage(usage),
                "{context}"
            );
            let stop = StopReason::from_wire(expected["finish_reason"].as_str().unwrap());
            assert_eq!(
                events[events.len() - 1],
                StreamEvent::Stop(stop),
                "{context}"
            );

            let acc = accumulate(&events);
            let mut text = String::new();
            let mut thinking = String::new();
            let mut calls = Vec::new();
            for block in acc.blocks() {
                match block {
                    ContentBlock::Text { text: t } => text.push_str(t),
                    ContentBlock::Thinking { thinking: t, .. } => thinking.push_str(t),
                    ContentBlock::ToolCall(call) => calls.push(call.clone()),
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(text, expected["content"].as_str().unwrap(), "{context}");
            assert_eq!(
                thinking,
                expected["reasoning_content"].as_str().unwrap_or(""),
                "{context}"
            );
            let expected_calls: Vec<ToolCall> = expected["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|call| ToolCall {
                    id: call["id"].as_str().unwrap().into(),
                    name: call["name"].as_str().unwrap().into(),
                    input: call["arguments"].as_str().unwrap().into(),
                })
                .collect();
            assert_eq!(calls, expected_calls, "{context}");
        }
    }
}

#[tokio::test]
async fn openai_fixtures_known_values() {
    let decode = |name: &'static str| async move {
        ok_events(collect(openai::decode_sse("gpt", chunked(fixture(name), 29))).await)
    };

    let events = decode("openai_parallel_tool_calls.sse").await;
    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(call) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_JMW1whyEaYG438VE1OIflxA2");
    assert_eq!(calls[0].name, "GetWeatherArgs");
    assert_eq!(
        calls[0].input,
        r#"{"city": "Edinburgh", "country": "GB", "units": "c"}"#
    );
    assert_eq!(calls[1].id, "call_DNYTawLBoN8fj3KN6qU9N1Ou");
    assert_eq!(calls[1].name, "get_stock_price");
    assert_eq!(
        calls[1].input,
        r#"{"ticker": "AAPL", "exchange": "NASDAQ"}"#
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::TextDelta(_)))
    );
    assert_eq!(
        events[events.len() - 2],
        StreamEvent::Usage(Usage {
            input: 149,
            output: 60,
            cache_read: 0,
            cache_write: 0
        })
    );

    let events = decode("openai_compat_deepseek_reasoning_tool_cached.sse").await;
    assert_eq!(
        events[events.len() - 2],
        StreamEvent::Usage(Usage {
            input: 19,
            output: 83,
            cache_read: 320,
            cache_write: 0
        })
    );
    assert_eq!(
        events[events.len() - 1],
        StreamEvent::Stop(StopReason::ToolUse)
    );
    assert!(
        matches!(&events[events.len() - 3], StreamEvent::ToolCall(call)
        if call.id == "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF" && call.input == r#"{"location": "San Francisco"}"#)
    );

    let events = decode("openai_usage_details_length.sse").await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(
        events[0],
        StreamEvent::Metadata(ResponseMetadata {
            id: Some("chatcmpl-C4Hq5a6K3RaPMymUv70btQNYv6SvY".into()),
            model: Some("gpt-5-nano-2025-08-07".into()),
        })
    );
    assert_eq!(events[2], StreamEvent::Stop(StopReason::MaxTokens));
    assert_eq!(
        events[1],
        StreamEvent::Usage(Usage {
            input: 12,
            output: 100,
            cache_read: 0,
            cache_write: 0
        })
    );

    let events = decode("openai_text_include_usage.sse").await;
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.starts_with("I'm unable to provide real-time weather updates."));
    assert_eq!(
        events[events.len() - 1],
        StreamEvent::Stop(StopReason::EndTurn)
    );
}

// ---------------------------------------------------------------------------
// Broken and malformed streams
// ---------------------------------------------------------------------------

fn sse(text: &str) -> impl Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
    chunked(text.as_bytes().to_vec(), usize::MAX)
}

const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":43,\"output_tokens\":1}}}\n\n";
const TEXT_BLOCK: &str = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
const STOP: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":61,\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[tokio::test]
async fn anthropic_stream_without_message_stop_is_broken_after_its_content() {
    let full = fixture("anthropic_text_then_tool_use.sse");
    let text = String::from_utf8(full).unwrap();
    let cut = &text[..text.find("event: message_delta").unwrap()];
    let results = collect(anthropic::decode_sse("claude", sse(cut))).await;
    let (last, events) = results.split_last().unwrap();
    let error = last.clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken, "{error}");
    let events: Vec<StreamEvent> = events.iter().cloned().map(Result::unwrap).collect();
    assert_eq!(accumulate(&events).blocks().len(), 2);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Stop(_))));
}

#[tokio::test]
async fn anthropic_malformed_data_names_the_event_and_never_panics() {
    let body = format!(
        "{START}{TEXT_BLOCK}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"oops\n\n{STOP}"
    );
    let results = collect(anthropic::decode_sse("claude", sse(&body))).await;
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(
        results[0].clone().unwrap(),
        StreamEvent::Metadata(ResponseMetadata {
            id: Some("m".into()),
            model: None
        })
    );
    assert_eq!(
        results[2].clone().unwrap(),
        StreamEvent::TextDelta("Hi".into())
    );
    let error = results[3].clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("content_block_delta"), "{error}");

    let results = collect(anthropic::decode_sse(
        "claude",
        sse("event: message_start\ndata: not json at all\n\n"),
    ))
    .await;
    let error = results[0].clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("message_start") && error.message.contains("not json"));

    let results = collect(anthropic::decode_sse(
        "claude",
        chunked(b"data: \xff\xfe\n\n".to_vec(), usize::MAX),
    ))
    .await;
    assert_eq!(
        results[0].clone().unwrap_err().kind,
        ProviderErrorKind::MalformedResponse
    );
}

#[tokio::test]
async fn anthropic_unknown_events_ping_and_missing_event_lines_are_handled() {
    let body = format!(
        "{START}event: ping\ndata: {{\"type\": \"ping\"}}\n\nevent: brand_new_event\ndata: <not json>\n\n: a comment\n\n{TEXT_BLOCK}{STOP}"
    );
    let events = ok_events(collect(anthropic::decode_sse("claude", sse(&body))).await);
    let acc = accumulate(&events);
    assert_eq!(acc.blocks(), &[ContentBlock::Text { text: "Hi".into() }]);
    // message_delta's input_tokens overrides message_start's.
    assert_eq!(
        acc.usage(),
        Usage {
            input: 61,
            output: 5,
            cache_read: 0,
            cache_write: 0
        }
    );

    // A proxy that strips `event:` lines: dispatch falls back on the data's type.
    let stripped: String = String::from_utf8(fixture("anthropic_text_then_tool_use.sse"))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("event:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let events = ok_events(collect(anthropic::decode_sse("claude", sse(&stripped))).await);
    assert_eq!(events.last(), Some(&StreamEvent::Stop(StopReason::ToolUse)));
    assert_eq!(accumulate(&events).blocks().len(), 2);
}

#[tokio::test]
async fn anthropic_documented_error_event_without_request_id() {
    let body = format!(
        "{START}event: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"api_error\", \"message\": \"Internal server error\"}}}}\n\n"
    );
    let results = collect(anthropic::decode_sse("claude", sse(&body))).await;
    let error = results.last().unwrap().clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.request_id, None);
}

#[tokio::test]
async fn byte_stream_errors_pass_through_after_delivered_events() {
    let chunks: Vec<Result<Bytes, ProviderError>> = vec![
        Ok(Bytes::from(format!("{START}{TEXT_BLOCK}"))),
        Err(ProviderError::new(
            "claude",
            ProviderErrorKind::IdleTimeout,
            "idle",
        )),
        Ok(Bytes::from(STOP)),
    ];
    let results = collect(anthropic::decode_sse(
        "claude",
        futures::stream::iter(chunks),
    ))
    .await;
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(
        results[3].clone().unwrap_err().kind,
        ProviderErrorKind::IdleTimeout
    );
}

#[tokio::test]
async fn openai_broken_malformed_and_error_chunks() {
    // No finish_reason before the end: broken.
    let text = String::from_utf8(fixture("openai_text_include_usage.sse")).unwrap();
    let cut = &text[..text.find("\"finish_reason\":\"stop\"").unwrap()];
    let cut = &cut[..cut.rfind("\n\n").unwrap() + 2];
    let results = collect(openai::decode_sse("gpt", sse(cut))).await;
    let error = results.last().unwrap().clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::StreamBroken, "{error}");
    assert!(results.len() > 1);

    // [DONE] without a finish_reason is broken too.
    let results = collect(openai::decode_sse(
        "gpt",
        sse(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
        ),
    ))
    .await;
    assert_eq!(
        results.last().unwrap().clone().unwrap_err().kind,
        ProviderErrorKind::StreamBroken
    );

    // The finish reason seen and the body ends without [DONE]: complete.
    let events = ok_events(
        collect(openai::decode_sse(
            "gpt",
            sse("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n"),
        ))
        .await,
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("a".into()),
            StreamEvent::Stop(StopReason::EndTurn)
        ]
    );

    let results = collect(openai::decode_sse(
        "gpt",
        sse("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\": [\n\n"),
    ))
    .await;
    assert_eq!(
        results[0].clone().unwrap(),
        StreamEvent::TextDelta("a".into())
    );
    let error = results[1].clone().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("malformed stream chunk"), "{error}");

    for (payload, kind) in [
        (
            r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            ProviderErrorKind::PromptTooLong,
        ),
        (
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            ProviderErrorKind::Quota,
        ),
        (
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#,
            ProviderErrorKind::Server,
        ),
    ] {
        let results = collect(openai::decode_sse(
            "gpt",
            sse(&format!("data: {payload}\n\n")),
        ))
        .await;
        let error = results[0].clone().unwrap_err();
        assert_eq!(error.kind, kind, "{payload}");
        assert_eq!(results.len(), 1);
    }
}

#[tokio::test]
async fn openai_tool_calls_accumulate_by_index_and_empty_arguments_become_an_object() {
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"second","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"first","arguments":"{\"n\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"12345678901234567890}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#,
        "[DONE]",
    ];
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    let events = ok_events(collect(openai::decode_sse("gpt", sse(&body))).await);
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolCall(ToolCall {
                id: "call_a".into(),
                name: "first".into(),
                input: r#"{"n":12345678901234567890}"#.into()
            }),
            StreamEvent::ToolCall(ToolCall {
                id: "call_b".into(),
                name: "second".into(),
                input: "{}".into()
            }),
            StreamEvent::Usage(Usage {
                input: 10,
                output: 3,
                cache_read: 0,
                cache_write: 0
            }),
            StreamEvent::Stop(StopReason::ToolUse),
        ]
    );
}

// ---------------------------------------------------------------------------
// Request bodies
// ---------------------------------------------------------------------------

fn config(protocol: Protocol, base_url: &str) -> ResolvedProvider {
    ResolvedProvider {
        name: "test".into(),
        protocol,
        model: "model-x".into(),
        base_url: base_url.into(),
        api_key: Some("key".into()),
        api_key_env: "TEST_KEY".into(),
        context_window: 200_000,
        max_tokens: 8_192,
        thinking_budget: None,
        price: None,
        idle_timeout: Duration::from_secs(300),
        max_retries: 4,
        store: false,
    }
}

fn tools() -> Vec<ToolDefinition> {
    ["read_file", "bash", "grep"]
        .iter()
        .map(|name| ToolDefinition {
            name: (*name).into(),
            description: format!("The {name} tool."),
            input_schema: json!({"type": "object", "properties": {}}),
        })
        .collect()
}

const BIG: &str = "123456789012345678901234567890";

fn conversation() -> Vec<Message> {
    vec![
        Message::user_text("Fix the bug."),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Let me look.".into(),
                    signature: Some("sig+/==".into()),
                },
                ContentBlock::RedactedThinking {
                    data: "opaque".into(),
                },
                ContentBlock::Text { text: "".into() },
                ContentBlock::Text {
                    text: "Reading.".into(),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: "t1".into(),
                    name: "read_file".into(),
                    input: format!(r#"{{"path":"a.rs","offset":{BIG}}}"#),
                }),
                ContentBlock::ToolCall(ToolCall {
                    id: "t2".into(),
                    name: "bash".into(),
                    input: r#"{"command": "ls"#.into(),
                }),
                ContentBlock::ToolCall(ToolCall {
                    id: "t3".into(),
                    name: "grep".into(),
                    input: "[1,2]".into(),
                }),
            ],
        },
        Message::tool_results(vec![
            ToolResult::text("t1", "fn main() {}", false),
            ToolResult {
                call_id: "t2".into(),
                content: vec![ToolOutputPart::Text {
                    text: "invalid arguments".into(),
                }],
                is_error: true,
            },
            ToolResult {
                call_id: "t3".into(),
                content: vec![
                    ToolOutputPart::Text { text: "".into() },
                    ToolOutputPart::Image {
                        media_type: "image/png".into(),
                        data: "iVBOR".into(),
                    },
                ],
                is_error: false,
            },
        ]),
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::Text { text: "  ".into() },
                ContentBlock::Text {
                    text: "Also check tests.".into(),
                },
            ],
        },
    ]
}

fn request() -> ChatRequest {
    ChatRequest {
        system: SystemPrompt {
            stable: "You are Troupe.".into(),
            environment: "cwd: /repo".into(),
        },
        messages: conversation(),
        tools: tools(),
        session_id: None,
    }
}

fn count_breakpoints(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.contains_key("cache_control"))
                + map.values().map(count_breakpoints).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_breakpoints).sum(),
        _ => 0,
    }
}

#[test]
fn anthropic_body_system_tools_and_breakpoints() {
    let bytes =
        anthropic::request_body(&config(Protocol::Anthropic, "http://x"), &request()).unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["model"], "model-x");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 8_192);
    assert!(body.get("thinking").is_none());
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "You are Troupe.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "cwd: /repo"},
        ])
    );
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "bash", "grep"]);
    assert_eq!(
        body["tools"][1],
        json!({"name": "bash", "description": "The bash tool.", "input_schema": {"type": "object", "properties": {}}})
    );
    // Stable + the rolling breakpoint on the last block of the newest message.
    assert_eq!(count_breakpoints(&body), 2);
    assert!(count_breakpoints(&body) <= anthropic::MAX_CACHE_BREAKPOINTS);
    let messages = body["messages"].as_array().unwrap();
    let last = messages.last().unwrap()["content"].as_array().unwrap();
    assert_eq!(
        last.last().unwrap(),
        &json!({"type": "text", "text": "Also check tests.", "cache_control": {"type": "ephemeral"}})
    );

    // An empty Environment is omitted, not sent empty.
    let mut req = request();
    req.system.environment.clear();
    let body: Value = serde_json::from_slice(
        &anthropic::request_body(&config(Protocol::Anthropic, "http://x"), &req).unwrap(),
    )
    .unwrap();
    assert_eq!(body["system"].as_array().unwrap().len(), 1);
}

#[test]
fn anthropic_body_messages_merge_roles_and_group_tool_results() {
    let bytes =
        anthropic::request_body(&config(Protocol::Anthropic, "http://x"), &request()).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    // Big integers in tool input survive byte for byte.
    assert!(text.contains(&format!(r#""offset":{BIG}"#)), "{text}");
    // Empty and whitespace-only text is never sent.
    assert!(!text.contains(r#""text":"""#) && !text.contains(r#""text":"  ""#));

    let body: Value = serde_json::from_slice(&bytes).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);

    let assistant = messages[1]["content"].as_array().unwrap();
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": "Let me look.", "signature": "sig+/=="})
    );
    assert_eq!(
        assistant[1],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
    assert_eq!(assistant[2], json!({"type": "text", "text": "Reading."}));
    assert_eq!(assistant[3]["type"], "tool_use");
    assert_eq!(assistant[3]["id"], "t1");
    // Invalid JSON and non-object input become {}.
    assert_eq!(
        assistant[4],
        json!({"type": "tool_use", "id": "t2", "name": "bash", "input": {}})
    );
    assert_eq!(assistant[5]["input"], json!({}));
    assert_eq!(assistant.len(), 6);

    // All results in one user message, first, then the merged user text.
    let user = messages[2]["content"].as_array().unwrap();
    assert_eq!(
        user[0],
        json!({"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}"})
    );
    assert_eq!(
        user[1],
        json!({"type": "tool_result", "tool_use_id": "t2", "content": "invalid arguments", "is_error": true})
    );
    assert_eq!(
        user[2],
        json!({"type": "tool_result", "tool_use_id": "t3", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}]})
    );
    assert_eq!(user[3]["text"], "Also check tests.");
    assert_eq!(user.len(), 4);
}

#[test]
fn anthropic_rolling_breakpoint_lands_on_a_tool_result_and_thinking_is_configured() {
    let mut req = request();
    req.messages.pop();
    let mut cfg = config(Protocol::Anthropic, "http://x");
    // As `thinking = true` resolves: the budget plus room for the answer.
    cfg.thinking_budget = Some(16_000);
    cfg.max_tokens = 8_192 + 16_000;
    let body: Value =
        serde_json::from_slice(&anthropic::request_body(&cfg, &req).unwrap()).unwrap();
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 16_000})
    );
    assert_eq!(body["max_tokens"], 8_192 + 16_000, "sent as resolved");
    let messages = body["messages"].as_array().unwrap();
    let last = messages.last().unwrap()["content"].as_array().unwrap();
    assert_eq!(last.len(), 3);
    assert_eq!(last[2]["cache_control"], json!({"type": "ephemeral"}));
    assert!(last[0].get("cache_control").is_none());
    assert!(messages[0]["content"][0].get("cache_control").is_none());
    assert_eq!(count_breakpoints(&body), 2);
}

#[tokio::test]
async fn anthropic_thinking_and_signature_are_echoed_unchanged_on_the_next_turn() {
    let events = ok_events(
        collect(anthropic::decode_sse(
            "claude",
            chunked(fixture("anthropic_thinking_tool_use.sse"), 64),
        ))
        .await,
    );
    let assistant = accumulate(&events).into_message();
    let expected = expected("anthropic_thinking_tool_use.sse");
    let req = ChatRequest {
        system: SystemPrompt::default(),
        messages: vec![
            Message::user_text("Use the fixed_version tool, then joke."),
            assistant,
            Message::tool_results(vec![ToolResult::text(
                "toolu_01825dXWLSoJwCst1qTsiWdb",
                "0.32a0",
                false,
            )]),
        ],
        tools: tools(),
        session_id: None,
    };
    let mut cfg = config(Protocol::Anthropic, "http://x");
    cfg.thinking_budget = Some(1_024);
    let body: Value =
        serde_json::from_slice(&anthropic::request_body(&cfg, &req).unwrap()).unwrap();
    assert!(body.get("system").is_none());
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {
                "type": "thinking",
                "thinking": expected["blocks"][0]["thinking"],
                "signature": expected["blocks"][0]["signature"],
            },
            {"type": "tool_use", "id": "toolu_01825dXWLSoJwCst1qTsiWdb", "name": "fixed_version", "input": {}},
        ])
    );
    assert_eq!(body["thinking"]["type"], "enabled");
}

#[test]
fn openai_body_messages_tools_and_token_field() {
    let cfg = config(Protocol::OpenAi, "https://api.openai.com/v1");
    let bytes = openai::request_body(&cfg, &request()).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains(&format!(r#"\"offset\":{BIG}"#)), "{text}");
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_completion_tokens"], 8_192);
    assert!(body.get("max_tokens").is_none());
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "bash", "grep"]);
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "read_file", "description": "The read_file tool.", "parameters": {"type": "object", "properties": {}}}})
    );

    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are Troupe.\n\ncwd: /repo"})
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "Fix the bug."})
    );
    // Thinking is not sent back; arguments are the raw text.
    assert_eq!(
        messages[2],
        json!({
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "read_file", "arguments": format!(r#"{{"path":"a.rs","offset":{BIG}}}"#)}},
                {"id": "t2", "type": "function", "function": {"name": "bash", "arguments": r#"{"command": "ls"#}},
                {"id": "t3", "type": "function", "function": {"name": "grep", "arguments": "[1,2]"}},
            ]
        })
    );
    assert!(!text.contains("Let me look.") && !text.contains("opaque"));
    // One tool message per result; images replaced by a note.
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "t1", "content": "fn main() {}"})
    );
    assert_eq!(
        messages[4],
        json!({"role": "tool", "tool_call_id": "t2", "content": "invalid arguments"})
    );
    assert_eq!(
        messages[5],
        json!({"role": "tool", "tool_call_id": "t3", "content": openai::IMAGE_OMITTED})
    );
    assert_eq!(
        messages[6],
        json!({"role": "user", "content": "Also check tests."})
    );
    assert_eq!(messages.len(), 7);

    // Compatible servers get max_tokens; an empty Environment adds nothing.
    let mut req = request();
    req.system.environment.clear();
    req.messages = vec![Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolCall(ToolCall {
            id: "c".into(),
            name: "bash".into(),
            input: String::new(),
        })],
    }];
    let body: Value = serde_json::from_slice(
        &openai::request_body(&config(Protocol::OpenAi, "http://127.0.0.1:8080/v1"), &req).unwrap(),
    )
    .unwrap();
    assert_eq!(body["max_tokens"], 8_192);
    assert!(body.get("max_completion_tokens").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are Troupe."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ]},
        ])
    );
}

#[test]
fn openai_user_images_become_content_parts() {
    let req = ChatRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![
                ContentBlock::Text {
                    text: "What is this?".into(),
                },
                ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "iVBOR".into(),
                },
            ],
        }],
        ..ChatRequest::default()
    };
    let body: Value = serde_json::from_slice(
        &openai::request_body(&config(Protocol::OpenAi, "http://h/v1"), &req).unwrap(),
    )
    .unwrap();
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
        ]}])
    );
    assert!(body.get("tools").is_none());
}
