//! Shared helpers: an HTTP client, valid request bodies for every protocol, and
//! SSE reading.

use std::sync::Once;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::StreamExt;
use serde_json::{Value, json};
use troupe_scripted::{Protocol, ScriptedServer};

/// Upper bound for every wait in these tests (never reached when they pass).
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// An HTTP client (reqwest needs a TLS provider installed even for plain http).
pub(crate) fn client() -> reqwest::Client {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
        .timeout(WAIT)
        .build()
        .expect("client builds")
}

/// The endpoint URL for `protocol`, built from the base URL the SDKs would use.
pub(crate) fn endpoint(server: &ScriptedServer, protocol: Protocol) -> String {
    match protocol {
        Protocol::Anthropic => format!("{}/v1/messages", server.anthropic_base_url()),
        Protocol::OpenAi => format!("{}/chat/completions", server.openai_base_url()),
        Protocol::OpenAiResponses => format!("{}/responses", server.openai_base_url()),
    }
}

/// A valid one-message request asking `prompt`.
pub(crate) fn ask(protocol: Protocol, prompt: &str, stream: bool) -> Value {
    match protocol {
        Protocol::Anthropic => json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "stream": stream,
            "system": "You are a scripted test.",
            "messages": [{"role": "user", "content": prompt}]
        }),
        Protocol::OpenAi => json!({
            "model": "gpt-test",
            "stream": stream,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "You are a scripted test."},
                {"role": "user", "content": prompt}
            ]
        }),
        Protocol::OpenAiResponses => json!({
            "model": "gpt-test",
            "stream": stream,
            "store": false,
            "instructions": "You are a scripted test.",
            "input": [{"type": "message", "role": "user", "content": prompt}]
        }),
    }
}

/// Posts `body` to the endpoint of `protocol`.
pub(crate) async fn post(
    server: &ScriptedServer,
    protocol: Protocol,
    body: &Value,
) -> reqwest::Response {
    client()
        .post(endpoint(server, protocol))
        .header("x-api-key", "test-key")
        .json(body)
        .send()
        .await
        .expect("request reaches the server")
}

/// Reads a whole SSE response into events.
pub(crate) async fn events(response: reqwest::Response) -> Vec<Event> {
    response
        .bytes_stream()
        .eventsource()
        .map(|event| event.expect("well-formed SSE"))
        .collect()
        .await
}

/// The JSON payloads of the events (`[DONE]` excluded).
pub(crate) fn payloads(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| serde_json::from_str(&e.data).expect("JSON event data"))
        .collect()
}

/// Reads the raw body until the stream ends or fails; returns the text received
/// and whether it failed.
pub(crate) async fn raw_body(response: reqwest::Response) -> (String, bool) {
    let mut stream = response.bytes_stream();
    let mut text = Vec::new();
    while let Some(piece) = stream.next().await {
        match piece {
            Ok(bytes) => text.extend_from_slice(&bytes),
            Err(_) => return (String::from_utf8_lossy(&text).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&text).into_owned(), false)
}

/// A complete tool call as a client would assemble it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assembled {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Assembles an Anthropic stream the way a client must: text, thinking,
/// signature, tool calls from `input_json_delta`s, stop reason, final usage.
#[derive(Debug, Default)]
pub(crate) struct AnthropicMessage {
    pub text: String,
    pub thinking: String,
    pub signature: String,
    pub tool_calls: Vec<Assembled>,
    pub stop_reason: Option<String>,
    pub usage: Value,
    pub start_usage: Value,
    pub pings: usize,
    pub stopped: bool,
}

pub(crate) fn assemble_anthropic(events: &[Event]) -> AnthropicMessage {
    let mut message = AnthropicMessage::default();
    let mut open_kind = String::new();
    for event in events {
        let payload: Value = serde_json::from_str(&event.data).expect("JSON event data");
        assert_eq!(
            event.event,
            payload["type"].as_str().unwrap_or_default(),
            "event name = type"
        );
        match event.event.as_str() {
            "message_start" => message.start_usage = payload["message"]["usage"].clone(),
            "ping" => message.pings += 1,
            "content_block_start" => {
                let block = &payload["content_block"];
                open_kind = block["type"].as_str().unwrap_or_default().to_owned();
                if open_kind == "tool_use" {
                    assert_eq!(block["input"], json!({}));
                    message.tool_calls.push(Assembled {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        arguments: String::new(),
                    });
                }
            }
            "content_block_delta" => {
                let delta = &payload["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => message.text += delta["text"].as_str().unwrap_or_default(),
                    "thinking_delta" => {
                        message.thinking += delta["thinking"].as_str().unwrap_or_default();
                    }
                    "signature_delta" => {
                        message.signature += delta["signature"].as_str().unwrap_or_default();
                    }
                    "input_json_delta" => {
                        assert_eq!(open_kind, "tool_use");
                        let call = message.tool_calls.last_mut().expect("open tool_use");
                        call.arguments += delta["partial_json"].as_str().unwrap_or_default();
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => open_kind.clear(),
            "message_delta" => {
                message.stop_reason = payload["delta"]["stop_reason"].as_str().map(str::to_owned);
                message.usage = payload["usage"].clone();
            }
            "message_stop" => message.stopped = true,
            other => panic!("unexpected event {other}"),
        }
    }
    message
}

/// Assembles an OpenAI chunk stream the way a client must (tool calls by
/// `index`, id and name from the first fragment).
#[derive(Debug, Default)]
pub(crate) struct OpenAiMessage {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<Assembled>,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub done: bool,
}

pub(crate) fn assemble_openai(events: &[Event]) -> OpenAiMessage {
    let mut message = OpenAiMessage::default();
    for event in events {
        assert!(!message.done, "nothing may follow [DONE]");
        if event.data == "[DONE]" {
            message.done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(&event.data).expect("JSON chunk");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(
                chunk["choices"],
                json!([]),
                "usage rides on a choices:[] chunk"
            );
            message.usage = Some(usage.clone());
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            message.content += text;
        }
        if let Some(text) = delta["reasoning_content"].as_str() {
            message.reasoning += text;
        }
        for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = fragment["index"].as_u64().expect("index") as usize;
            if index == message.tool_calls.len() {
                message.tool_calls.push(Assembled {
                    id: fragment["id"]
                        .as_str()
                        .expect("id on first fragment")
                        .to_owned(),
                    name: fragment["function"]["name"]
                        .as_str()
                        .expect("name on first fragment")
                        .to_owned(),
                    arguments: String::new(),
                });
            } else {
                assert!(
                    fragment.get("id").is_none(),
                    "id only on the first fragment"
                );
            }
            message.tool_calls[index].arguments += fragment["function"]["arguments"]
                .as_str()
                .unwrap_or_default();
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            message.finish_reason = Some(reason.to_owned());
        }
    }
    message
}
