//! What the server records about each request, and read-only views over the
//! request body that work the same for every wire protocol (system text, last
//! user text, tool names, tool results).
//!
//! These views are what matchers route on and what tests assert on. This module
//! must not decide anything about responses or invariants.

use serde_json::Value;

/// The wire protocol of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    OpenAi,
    /// OpenAI Responses, `POST /v1/responses`.
    OpenAiResponses,
}

impl Protocol {
    /// The path this protocol is served on.
    pub fn path(self) -> &'static str {
        match self {
            Self::Anthropic => "/v1/messages",
            Self::OpenAi => "/v1/chat/completions",
            Self::OpenAiResponses => "/v1/responses",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::OpenAiResponses => "openai-responses",
        })
    }
}

/// One tool result found in a request, in protocol-neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResultView {
    /// The id of the call it answers (`tool_use_id` / `tool_call_id`).
    pub call_id: String,
    /// Its text content (text parts joined with `\n`).
    pub content: String,
    /// Anthropic `is_error` (always `false` on OpenAI, which has no such flag).
    pub is_error: bool,
}

/// A request as received: protocol, path, headers, parsed body, arrival order.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Arrival order, starting at 0, across both endpoints.
    pub index: usize,
    /// The endpoint's protocol.
    pub protocol: Protocol,
    /// The request path.
    pub path: String,
    /// Headers, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body (`Value::Null` when the body was not JSON).
    pub body: Value,
    /// Size of the raw body in bytes.
    pub body_len: usize,
    /// The script turn that answered it (index into the script, counting
    /// pushed turns), if one did.
    pub turn: Option<usize>,
    /// The response id sent back (`message_start.message.id`, the chunks'
    /// `id`), when the turn sent a response.
    pub response_id: Option<String>,
}

impl RecordedRequest {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether the client asked for a streamed response (`"stream": true`).
    pub fn is_streaming(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The `model` field.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// The `messages` array (empty if absent); on the Responses endpoint the
    /// `input` items (messages carry a `role`, calls and outputs do not).
    pub fn messages(&self) -> &[Value] {
        let key = match self.protocol {
            Protocol::OpenAiResponses => "input",
            Protocol::Anthropic | Protocol::OpenAi => "messages",
        };
        self.body
            .get(key)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The system prompt text. Anthropic: the top-level `system` (string or text
    /// blocks joined with `\n`). OpenAI: every `system`/`developer` message,
    /// joined with `\n`. Responses: `instructions`.
    pub fn system_text(&self) -> String {
        match self.protocol {
            Protocol::OpenAiResponses => self
                .body
                .get("instructions")
                .map(content_text)
                .unwrap_or_default(),
            Protocol::Anthropic => self
                .body
                .get("system")
                .map(content_text)
                .unwrap_or_default(),
            Protocol::OpenAi => join_lines(
                self.messages()
                    .iter()
                    .filter(|m| matches!(role(m), Some("system" | "developer")))
                    .filter_map(|m| m.get("content").map(content_text)),
            ),
        }
    }

    /// The text of the last `user`-role message, if any. Anthropic: its text
    /// blocks and the text of its `tool_result` blocks. OpenAI: its content
    /// (`tool` messages are not user messages there).
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| role(m) == Some("user"))
            .and_then(|m| m.get("content"))
            .map(content_text)
    }

    /// True when the text of some `user`-role message contains `needle`
    /// (a fork's task sits after its copy of the parent's conversation).
    pub fn any_user_text_contains(&self, needle: &str) -> bool {
        self.messages()
            .iter()
            .filter(|m| role(m) == Some("user"))
            .filter_map(|m| m.get("content"))
            .any(|content| content_text(content).contains(needle))
    }

    /// The text of the first `user`-role message (the task), if any.
    pub fn first_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .find(|m| role(m) == Some("user"))
            .and_then(|m| m.get("content"))
            .map(content_text)
    }

    /// Names of the offered tools, in the order sent.
    pub fn tool_names(&self) -> Vec<String> {
        let Some(tools) = self.body.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        tools
            .iter()
            .filter_map(|tool| match self.protocol {
                Protocol::Anthropic => tool.get("name"),
                Protocol::OpenAi => tool.get("function").and_then(|f| f.get("name")),
                Protocol::OpenAiResponses => tool.get("name"),
            })
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    }

    /// Every tool result in the conversation, oldest first.
    pub fn tool_results(&self) -> Vec<ToolResultView> {
        match self.protocol {
            Protocol::Anthropic => self
                .messages()
                .iter()
                .filter_map(|m| m.get("content").and_then(Value::as_array))
                .flatten()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
                .map(|block| ToolResultView {
                    call_id: str_field(block, "tool_use_id"),
                    content: block.get("content").map(content_text).unwrap_or_default(),
                    is_error: block.get("is_error").and_then(Value::as_bool) == Some(true),
                })
                .collect(),
            Protocol::OpenAi => self
                .messages()
                .iter()
                .filter(|m| role(m) == Some("tool"))
                .map(|m| ToolResultView {
                    call_id: str_field(m, "tool_call_id"),
                    content: m.get("content").map(content_text).unwrap_or_default(),
                    is_error: false,
                })
                .collect(),
            Protocol::OpenAiResponses => self
                .messages()
                .iter()
                .filter(|item| {
                    item.get("type").and_then(Value::as_str) == Some("function_call_output")
                })
                .map(|item| ToolResultView {
                    call_id: str_field(item, "call_id"),
                    content: item.get("output").map(content_text).unwrap_or_default(),
                    is_error: false,
                })
                .collect(),
        }
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn str_field(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn join_lines(parts: impl Iterator<Item = String>) -> String {
    parts.collect::<Vec<_>>().join("\n")
}

/// The text of a content value in either protocol: a string, or an array of
/// parts whose `text` fields (and the content of nested `tool_result` blocks)
/// are joined with `\n`.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => join_lines(parts.iter().filter_map(|part| {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                Some(text.to_owned())
            } else if part.get("type").and_then(Value::as_str) == Some("tool_result") {
                part.get("content").map(content_text)
            } else {
                None
            }
        })),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recorded(protocol: Protocol, body: Value) -> RecordedRequest {
        RecordedRequest {
            index: 0,
            protocol,
            path: protocol.path().to_owned(),
            headers: vec![("x-api-key".into(), "k".into())],
            body,
            body_len: 0,
            turn: None,
            response_id: None,
        }
    }

    #[test]
    fn anthropic_views() {
        let request = recorded(
            Protocol::Anthropic,
            json!({
                "model": "m",
                "stream": true,
                "system": [{"type": "text", "text": "stable"}, {"type": "text", "text": "env"}],
                "tools": [{"name": "read_file", "input_schema": {}}],
                "messages": [
                    {"role": "user", "content": "review alpha"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "file body"}], "is_error": true},
                        {"type": "text", "text": "go on"}
                    ]}
                ]
            }),
        );
        assert_eq!(request.system_text(), "stable\nenv");
        assert_eq!(request.first_user_text().as_deref(), Some("review alpha"));
        assert_eq!(
            request.last_user_text().as_deref(),
            Some("file body\ngo on")
        );
        assert_eq!(request.tool_names(), ["read_file"]);
        assert!(request.is_streaming());
        assert_eq!(request.header("X-API-KEY"), Some("k"));
        assert_eq!(
            request.tool_results(),
            [ToolResultView {
                call_id: "t1".into(),
                content: "file body".into(),
                is_error: true
            }]
        );
    }

    #[test]
    fn responses_views() {
        let request = recorded(
            Protocol::OpenAiResponses,
            json!({
                "model": "m",
                "stream": true,
                "instructions": "stable\n\nenv",
                "tools": [{"type": "function", "name": "grep", "parameters": {}}],
                "input": [
                    {"type": "message", "role": "user", "content": "task gamma"},
                    {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "no match"},
                    {"role": "user", "content": [{"type": "input_text", "text": "go on"}]}
                ]
            }),
        );
        assert_eq!(request.system_text(), "stable\n\nenv");
        assert_eq!(request.first_user_text().as_deref(), Some("task gamma"));
        assert_eq!(request.last_user_text().as_deref(), Some("go on"));
        assert_eq!(request.tool_names(), ["grep"]);
        assert!(request.is_streaming());
        assert_eq!(
            request.tool_results(),
            [ToolResultView {
                call_id: "c1".into(),
                content: "no match".into(),
                is_error: false
            }]
        );
    }

    #[test]
    fn openai_views() {
        let request = recorded(
            Protocol::OpenAi,
            json!({
                "model": "m",
                "tools": [{"type": "function", "function": {"name": "grep", "parameters": {}}}],
                "messages": [
                    {"role": "system", "content": "stable\n\nenv"},
                    {"role": "user", "content": [{"type": "text", "text": "task beta"}]},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "no match"}
                ]
            }),
        );
        assert_eq!(request.system_text(), "stable\n\nenv");
        assert_eq!(request.last_user_text().as_deref(), Some("task beta"));
        assert_eq!(request.tool_names(), ["grep"]);
        assert!(!request.is_streaming());
        assert_eq!(request.tool_results()[0].call_id, "c1");
        assert_eq!(request.tool_results()[0].content, "no match");
    }
}
