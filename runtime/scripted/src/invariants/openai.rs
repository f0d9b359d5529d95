//! Invariants of an OpenAI Chat Completions request body.
//!
//! Owns the OpenAI rules only; the rule list, the shared helpers and the
//! Anthropic rules live beside it.

use std::collections::HashSet;

use serde_json::Value;

use super::{Findings, Rule, is_blank, is_valid_tool_name, non_empty_str};

/// Roles Chat Completions accepts.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

pub(super) fn check(body: &Value, out: &mut Findings) {
    let Some(request) = out.check_openai_head(body, |tool| {
        tool.get("function")
            .and_then(|function| function.get("name"))
            .and_then(Value::as_str)
    }) else {
        return;
    };
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        out.push(
            Rule::MalformedRequest,
            "`messages` is missing or not an array",
        );
        return;
    };
    check_messages(messages, out);
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn tool_calls(message: &Value) -> &[Value] {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn check_messages(messages: &[Value], out: &mut Findings) {
    if messages.is_empty() {
        out.push(Rule::NoMessages, "`messages` is empty");
        return;
    }
    let mut call_ids = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let Some(role) = role(message) else {
            out.push(
                Rule::MalformedRequest,
                format!("messages[{i}] has no string `role`"),
            );
            continue;
        };
        if !ROLES.contains(&role) {
            out.push(
                Rule::InvalidRole,
                format!(
                    "messages[{i}] has role {role:?}; allowed: {}",
                    ROLES.join(", ")
                ),
            );
            continue;
        }
        let at = format!("messages[{i}]");
        match role {
            "assistant" => check_assistant(message, &at, &mut call_ids, out),
            "tool" => {
                if !non_empty_str(message.get("tool_call_id")) {
                    out.push(
                        Rule::MalformedRequest,
                        format!("{at} is a tool message without `tool_call_id`"),
                    );
                }
                check_content(message.get("content"), &at, false, out);
            }
            _ => check_content(message.get("content"), &at, false, out),
        }
    }
    match messages
        .iter()
        .position(|m| !matches!(role(m), Some("system" | "developer")))
    {
        None => out.push(
            Rule::NoMessages,
            "`messages` holds only system/developer messages",
        ),
        Some(first) => {
            if role(&messages[first]) != Some("user") {
                out.push(
                    Rule::FirstMessageNotUser,
                    format!(
                        "messages[{first}] has role {:?}; the first message after the system messages must be a user message",
                        role(&messages[first]).unwrap_or("")
                    ),
                );
            }
        }
    }
    let last = messages.len() - 1;
    if !matches!(role(&messages[last]), Some("user" | "tool")) {
        out.push(
            Rule::LastMessageNotUser,
            format!(
                "messages[{last}] has role {:?}; the request must end with a user or tool message",
                role(&messages[last]).unwrap_or("")
            ),
        );
    }
    check_tool_pairing(messages, out);
}

fn check_assistant(message: &Value, at: &str, call_ids: &mut HashSet<String>, out: &mut Findings) {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(calls)) if calls.is_empty() => {
            out.push(
                Rule::MalformedRequest,
                format!("{at}.tool_calls is an empty array; omit it instead"),
            );
            &[][..]
        }
        Some(Value::Array(calls)) => calls.as_slice(),
        Some(_) => {
            out.push(
                Rule::MalformedRequest,
                format!("{at}.tool_calls is not an array"),
            );
            &[][..]
        }
    };
    check_content(message.get("content"), at, !calls.is_empty(), out);
    for (k, call) in calls.iter().enumerate() {
        let call_at = format!("{at}.tool_calls[{k}]");
        match call.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => out.check_call_id(call_ids, id, &call_at),
            _ => out.push(Rule::MalformedRequest, format!("{call_at} has no id")),
        }
        if call.get("type").and_then(Value::as_str) != Some("function") {
            out.push(
                Rule::MalformedRequest,
                format!("{call_at} must have \"type\": \"function\""),
            );
        }
        let function = call.get("function");
        match function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) if is_valid_tool_name(name) => {}
            Some(name) => out.push(
                Rule::InvalidToolName,
                format!("{call_at} calls {name:?}, which does not match ^[A-Za-z0-9_-]{{1,64}}$"),
            ),
            None => out.push(
                Rule::MalformedRequest,
                format!("{call_at} has no function.name"),
            ),
        }
        if !function
            .and_then(|f| f.get("arguments"))
            .is_some_and(Value::is_string)
        {
            out.push(
                Rule::MalformedRequest,
                format!("{call_at}.function.arguments must be a string of JSON text"),
            );
        }
    }
}

/// `content` of any message: a non-blank string or a non-empty array of parts
/// whose text parts are non-blank. Null/absent only when `may_be_absent`
/// (assistant messages with tool calls).
fn check_content(content: Option<&Value>, at: &str, may_be_absent: bool, out: &mut Findings) {
    match content {
        None | Some(Value::Null) => {
            if !may_be_absent {
                out.push(Rule::EmptyContent, format!("{at} has no content"));
            }
        }
        Some(Value::String(text)) => {
            if is_blank(text) {
                out.push(
                    Rule::EmptyContent,
                    format!("{at}.content is an empty string"),
                );
            }
        }
        Some(Value::Array(parts)) => {
            if parts.is_empty() {
                out.push(
                    Rule::EmptyContent,
                    format!("{at}.content is an empty array"),
                );
            }
            for (k, part) in parts.iter().enumerate() {
                if part.get("type").and_then(Value::as_str) == Some("text")
                    && part
                        .get("text")
                        .and_then(Value::as_str)
                        .is_none_or(is_blank)
                {
                    out.push(
                        Rule::EmptyContent,
                        format!("{at}.content[{k}] is an empty text part"),
                    );
                }
            }
        }
        Some(_) => out.push(
            Rule::MalformedRequest,
            format!("{at}.content must be a string, an array of parts or null"),
        ),
    }
}

fn check_tool_pairing(messages: &[Value], out: &mut Findings) {
    let mut paired_tool_messages = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        if role(message) != Some("assistant") {
            continue;
        }
        let calls: Vec<&str> = tool_calls(message)
            .iter()
            .filter_map(|call| call.get("id").and_then(Value::as_str))
            .collect();
        if calls.is_empty() {
            continue;
        }
        let run_end = messages[i + 1..]
            .iter()
            .position(|m| role(m) != Some("tool"))
            .map_or(messages.len(), |offset| i + 1 + offset);
        let results: Vec<&str> = messages[i + 1..run_end]
            .iter()
            .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
            .collect();
        paired_tool_messages.extend(i + 1..run_end);
        let results_at = if run_end > i + 1 {
            format!("messages[{}..{}]", i + 1, run_end)
        } else {
            format!("the tool messages after messages[{i}]")
        };
        out.check_pairing(&calls, &format!("messages[{i}]"), &results, &results_at);
    }
    for (i, message) in messages.iter().enumerate() {
        if role(message) == Some("tool") && !paired_tool_messages.contains(&i) {
            let id = message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            out.push(
                Rule::OrphanToolResult,
                format!("messages[{i}] answers {id:?} but does not follow an assistant message with tool calls"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::invariants::{Rule, check_request};
    use crate::request::Protocol;

    fn rules(body: &Value) -> Vec<Rule> {
        check_request(Protocol::OpenAi, body)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    fn request(messages: Value) -> Value {
        json!({"model": "gpt", "messages": messages})
    }

    /// A valid history: system, developer, a parallel tool round trip, a final
    /// tool message.
    fn valid() -> Value {
        json!({
            "model": "gpt",
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [
                {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}
            ],
            "messages": [
                {"role": "system", "content": "stable\n\nenvironment"},
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": "fix the bug"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "none"}]}
            ]
        })
    }

    #[test]
    fn valid_history_passes() {
        assert_eq!(rules(&valid()), []);
        let mut body = valid();
        body["messages"][3]["content"] = json!("Reading both.");
        body["messages"][3]["reasoning_content"] = json!("think");
        assert_eq!(rules(&body), []);
        let mut body = valid();
        body["messages"][3]
            .as_object_mut()
            .expect("object")
            .remove("content");
        assert_eq!(rules(&body), []);
    }

    #[test]
    fn malformed_bodies() {
        assert_eq!(rules(&json!("text")), [Rule::MalformedRequest]);
        let mut body = valid();
        body["model"] = json!(null);
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        let mut body = valid();
        body["messages"][3]["tool_calls"][0]["function"]["arguments"] = json!({"path": "a"});
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        let mut body = valid();
        body["tools"][0]["type"] = json!("custom");
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
    }

    #[test]
    fn no_messages() {
        assert_eq!(rules(&request(json!([]))), [Rule::NoMessages]);
        assert_eq!(
            rules(&request(json!([{"role": "system", "content": "s"}]))),
            [Rule::NoMessages, Rule::LastMessageNotUser]
        );
        assert_eq!(
            rules(&request(json!([{"role": "user", "content": "hi"}]))),
            []
        );
    }

    #[test]
    fn invalid_role() {
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "function", "name": "f", "content": "x"},
            {"role": "user", "content": "again"}
        ]));
        assert_eq!(rules(&body), [Rule::InvalidRole]);
    }

    #[test]
    fn first_message_must_be_user() {
        let body = request(json!([
            {"role": "system", "content": "s"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "hi"}
        ]));
        assert_eq!(rules(&body), [Rule::FirstMessageNotUser]);
    }

    #[test]
    fn last_message_must_be_user_or_tool() {
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}
        ]));
        assert_eq!(rules(&body), [Rule::LastMessageNotUser]);
    }

    #[test]
    fn unanswered_tool_call() {
        let mut body = valid();
        body["messages"].as_array_mut().expect("array").pop();
        assert_eq!(rules(&body), [Rule::UnansweredToolCall]);
        // A result separated from its call by a user message does not count.
        let mut body = valid();
        if let Some(messages) = body["messages"].as_array_mut() {
            messages.insert(5, json!({"role": "user", "content": "wait"}));
        }
        assert_eq!(
            rules(&body),
            [Rule::UnansweredToolCall, Rule::OrphanToolResult]
        );
    }

    #[test]
    fn orphan_tool_result() {
        let mut body = valid();
        body["messages"][5]["tool_call_id"] = json!("call_9");
        assert_eq!(
            rules(&body),
            [Rule::UnansweredToolCall, Rule::OrphanToolResult]
        );
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_0", "content": "x"}
        ]));
        assert_eq!(rules(&body), [Rule::OrphanToolResult]);
    }

    #[test]
    fn duplicate_tool_call_id() {
        let mut body = valid();
        body["messages"][3]["tool_calls"][1]["id"] = json!("call_1");
        body["messages"][5]["tool_call_id"] = json!("call_1");
        assert_eq!(
            rules(&body),
            [Rule::DuplicateToolCallId, Rule::DuplicateToolResult]
        );
    }

    #[test]
    fn duplicate_tool_result() {
        let mut body = valid();
        if let Some(messages) = body["messages"].as_array_mut() {
            messages.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "again"}));
        }
        assert_eq!(rules(&body), [Rule::DuplicateToolResult]);
    }

    #[test]
    fn empty_content() {
        for (path, value) in [
            ("/messages/2/content", json!("")),
            ("/messages/2/content", json!(null)),
            ("/messages/2/content", json!([])),
            ("/messages/0/content", json!(" ")),
            ("/messages/3/content", json!("")),
            ("/messages/4/content", json!("")),
            ("/messages/5/content/0/text", json!("")),
        ] {
            let mut body = valid();
            if let Some(slot) = body.pointer_mut(path) {
                *slot = value;
            }
            assert_eq!(rules(&body), [Rule::EmptyContent], "{path}");
        }
        // Assistant content may be null only when the message has tool calls.
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null},
            {"role": "user", "content": "again"}
        ]));
        assert_eq!(rules(&body), [Rule::EmptyContent]);
    }

    #[test]
    fn tool_names_valid_and_unique() {
        let mut body = valid();
        body["tools"][1]["function"]["name"] = json!("x".repeat(65));
        assert_eq!(rules(&body), [Rule::InvalidToolName]);
        let mut body = valid();
        body["tools"][1]["function"]["name"] = json!("read_file");
        assert_eq!(rules(&body), [Rule::DuplicateToolName]);
        let mut body = valid();
        body["messages"][3]["tool_calls"][1]["function"]["name"] = json!("grep!");
        assert_eq!(rules(&body), [Rule::InvalidToolName]);
    }
}
