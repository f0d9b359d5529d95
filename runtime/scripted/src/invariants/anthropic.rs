//! Invariants of an Anthropic Messages request body.
//!
//! Owns the Anthropic rules only; the rule list, the shared helpers and the
//! OpenAI rules live beside it.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::{Findings, MAX_CACHE_BREAKPOINTS, Rule, is_blank, is_valid_tool_name, non_empty_str};

pub(super) fn check(body: &Value, out: &mut Findings) {
    let Some(request) = body.as_object() else {
        out.push(
            Rule::MalformedRequest,
            "the request body is not a JSON object",
        );
        return;
    };
    if !non_empty_str(request.get("model")) {
        out.push(
            Rule::MalformedRequest,
            "`model` is missing or not a non-empty string",
        );
    }
    let max_tokens = request.get("max_tokens").and_then(Value::as_u64);
    if max_tokens.is_none_or(|max| max == 0) {
        out.push(
            Rule::MalformedRequest,
            "`max_tokens` is missing or not a positive integer",
        );
    }
    check_thinking(request.get("thinking"), max_tokens, out);
    check_system(request.get("system"), out);
    if let Some(tools) = request.get("tools") {
        match tools.as_array() {
            Some(tools) => out.check_tool_names(
                tools
                    .iter()
                    .enumerate()
                    .map(|(i, tool)| (i, tool.get("name").and_then(Value::as_str))),
            ),
            None => out.push(Rule::MalformedRequest, "`tools` is not an array"),
        }
    }
    let breakpoints = count_cache_breakpoints(request);
    if breakpoints > MAX_CACHE_BREAKPOINTS {
        out.push(
            Rule::TooManyCacheBreakpoints,
            format!("{breakpoints} cache_control breakpoints; at most {MAX_CACHE_BREAKPOINTS} are allowed"),
        );
    }
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        out.push(
            Rule::MalformedRequest,
            "`messages` is missing or not an array",
        );
        return;
    };
    check_messages(messages, out);
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` with N below
/// `max_tokens` (the API refuses `max_tokens <= budget_tokens`).
fn check_thinking(thinking: Option<&Value>, max_tokens: Option<u64>, out: &mut Findings) {
    let Some(thinking) = thinking else {
        return;
    };
    if thinking.get("type").and_then(Value::as_str) != Some("enabled") {
        return;
    }
    match thinking.get("budget_tokens").and_then(Value::as_u64) {
        None => out.push(
            Rule::MalformedRequest,
            "`thinking.budget_tokens` is missing or not an integer",
        ),
        Some(budget) => {
            if let Some(max) = max_tokens
                && max <= budget
            {
                out.push(
                    Rule::MalformedRequest,
                    format!(
                        "`max_tokens` must be greater than `thinking.budget_tokens`: {max} <= {budget}"
                    ),
                );
            }
        }
    }
}

fn check_system(system: Option<&Value>, out: &mut Findings) {
    match system {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            if is_blank(text) {
                out.push(
                    Rule::EmptyContent,
                    "`system` is an empty string; omit it instead",
                );
            }
        }
        Some(Value::Array(blocks)) => {
            if blocks.is_empty() {
                out.push(
                    Rule::EmptyContent,
                    "`system` is an empty array; omit it instead",
                );
            }
            for (j, block) in blocks.iter().enumerate() {
                match block.get("text").and_then(Value::as_str) {
                    Some(text) if is_blank(text) => {
                        out.push(
                            Rule::EmptyContent,
                            format!("system[{j}] is an empty text block"),
                        );
                    }
                    Some(_) => {}
                    None => out.push(
                        Rule::MalformedRequest,
                        format!("system[{j}] is not a text block"),
                    ),
                }
            }
        }
        Some(_) => out.push(
            Rule::MalformedRequest,
            "`system` must be a string or an array of text blocks",
        ),
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn blocks(message: &Value) -> &[Value] {
    message
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// Ids of the blocks of `kind` (`tool_use` → `id`, `tool_result` → `tool_use_id`).
fn ids_of<'a>(message: &'a Value, kind: &str, id_field: &str) -> Vec<&'a str> {
    blocks(message)
        .iter()
        .filter(|block| block_type(block) == Some(kind))
        .filter_map(|block| block.get(id_field).and_then(Value::as_str))
        .collect()
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
        match role {
            "user" | "assistant" => {}
            "system" => out.push(
                Rule::InvalidRole,
                format!("messages[{i}] has role \"system\"; the system prompt belongs in the top-level `system` field"),
            ),
            other => out.push(
                Rule::InvalidRole,
                format!("messages[{i}] has role {other:?}; only \"user\" and \"assistant\" are allowed"),
            ),
        }
        match message.get("content") {
            Some(Value::String(text)) => {
                if is_blank(text) {
                    out.push(
                        Rule::EmptyContent,
                        format!("messages[{i}].content is an empty string"),
                    );
                }
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() {
                    out.push(
                        Rule::EmptyContent,
                        format!("messages[{i}].content is an empty array"),
                    );
                }
                let mut seen_other_block = false;
                for (j, block) in blocks.iter().enumerate() {
                    let at = format!("messages[{i}].content[{j}]");
                    check_block(block, role, &at, &mut seen_other_block, &mut call_ids, out);
                }
            }
            _ => out.push(
                Rule::MalformedRequest,
                format!("messages[{i}].content is missing or neither a string nor an array"),
            ),
        }
    }
    if role(&messages[0]) != Some("user") {
        out.push(
            Rule::FirstMessageNotUser,
            format!(
                "messages[0] has role {:?}; the conversation must start with a user message",
                role(&messages[0]).unwrap_or("")
            ),
        );
    }
    let last = messages.len() - 1;
    if role(&messages[last]) != Some("user") {
        out.push(
            Rule::LastMessageNotUser,
            format!(
                "messages[{last}] has role {:?}; the request must end with a user message",
                role(&messages[last]).unwrap_or("")
            ),
        );
    }
    check_tool_pairing(messages, out);
}

fn check_block(
    block: &Value,
    role: &str,
    at: &str,
    seen_other_block: &mut bool,
    call_ids: &mut HashSet<String>,
    out: &mut Findings,
) {
    let Some(kind) = block_type(block) else {
        out.push(Rule::MalformedRequest, format!("{at} has no string `type`"));
        return;
    };
    if kind != "tool_result" {
        *seen_other_block = true;
    }
    match kind {
        "text" => match block.get("text").and_then(Value::as_str) {
            Some(text) if is_blank(text) => {
                out.push(Rule::EmptyContent, format!("{at} is an empty text block"));
            }
            Some(_) => {}
            None => out.push(
                Rule::MalformedRequest,
                format!("{at} is a text block without `text`"),
            ),
        },
        "thinking" if !non_empty_str(block.get("signature")) => out.push(
            Rule::UnsignedThinking,
            format!("{at} is a thinking block without its signature"),
        ),
        "redacted_thinking" if !non_empty_str(block.get("data")) => out.push(
            Rule::UnsignedThinking,
            format!("{at} is a redacted_thinking block without `data`"),
        ),
        "tool_use" => {
            if role != "assistant" {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a tool_use block in a {role} message"),
                );
            }
            match block.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => out.check_call_id(call_ids, id, at),
                _ => out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a tool_use block without an id"),
                ),
            }
            match block.get("name").and_then(Value::as_str) {
                Some(name) if is_valid_tool_name(name) => {}
                Some(name) => out.push(
                    Rule::InvalidToolName,
                    format!("{at} calls {name:?}, which does not match ^[A-Za-z0-9_-]{{1,64}}$"),
                ),
                None => out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a tool_use block without a name"),
                ),
            }
            if !block.get("input").is_some_and(Value::is_object) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} tool_use `input` must be a JSON object"),
                );
            }
        }
        "tool_result" => {
            if role != "user" {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a tool_result block in a {role} message"),
                );
            }
            if *seen_other_block {
                out.push(
                    Rule::ToolResultNotFirst,
                    format!("{at} is a tool_result after another block; tool_result blocks must come first"),
                );
            }
            if !non_empty_str(block.get("tool_use_id")) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a tool_result without `tool_use_id`"),
                );
            }
            if block.get("is_error").is_some_and(|flag| !flag.is_boolean()) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} `is_error` must be a boolean"),
                );
            }
            check_result_content(block.get("content"), at, out);
        }
        _ => {}
    }
}

fn check_result_content(content: Option<&Value>, at: &str, out: &mut Findings) {
    match content {
        Some(Value::String(text)) if is_blank(text) => out.push(
            Rule::EmptyContent,
            format!("{at} tool_result content is an empty string"),
        ),
        None | Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            for (k, part) in parts.iter().enumerate() {
                if block_type(part) == Some("text")
                    && part
                        .get("text")
                        .and_then(Value::as_str)
                        .is_none_or(is_blank)
                {
                    out.push(
                        Rule::EmptyContent,
                        format!("{at}.content[{k}] is an empty text block"),
                    );
                }
            }
        }
        Some(_) => out.push(
            Rule::MalformedRequest,
            format!("{at} tool_result content must be a string or an array"),
        ),
    }
}

fn check_tool_pairing(messages: &[Value], out: &mut Findings) {
    for (i, message) in messages.iter().enumerate() {
        match role(message) {
            Some("assistant") => {
                let calls = ids_of(message, "tool_use", "id");
                if calls.is_empty() {
                    continue;
                }
                // Results for these calls must be in the next message, if it is
                // a user message; orphans and duplicates there are reported when
                // that message is visited.
                let results = match messages.get(i + 1) {
                    Some(next) if role(next) == Some("user") => {
                        ids_of(next, "tool_result", "tool_use_id")
                    }
                    _ => Vec::new(),
                };
                for call in &calls {
                    if !results.contains(call) {
                        out.push(
                            Rule::UnansweredToolCall,
                            format!(
                                "tool call {call:?} of messages[{i}] has no tool_result in messages[{}]",
                                i + 1
                            ),
                        );
                    }
                }
            }
            Some("user") => {
                let results = ids_of(message, "tool_result", "tool_use_id");
                if results.is_empty() {
                    continue;
                }
                let calls = match i.checked_sub(1).map(|p| &messages[p]) {
                    Some(previous) if role(previous) == Some("assistant") => {
                        ids_of(previous, "tool_use", "id")
                    }
                    _ => Vec::new(),
                };
                let calls_at = match i.checked_sub(1) {
                    Some(p) => format!("messages[{p}]"),
                    None => "any earlier message".to_owned(),
                };
                // Unanswered calls were reported from the assistant side; only
                // orphans and duplicates remain to be found here.
                let answered: Vec<&str> = results
                    .iter()
                    .copied()
                    .filter(|r| calls.contains(r))
                    .collect();
                out.check_pairing(&answered, &calls_at, &results, &format!("messages[{i}]"));
            }
            _ => {}
        }
    }
}

/// Counts `cache_control` markers where Anthropic accepts them: tool
/// definitions, system blocks, message content blocks and the blocks nested in
/// `tool_result` content.
fn count_cache_breakpoints(request: &Map<String, Value>) -> usize {
    fn marked(block: &Value) -> usize {
        usize::from(block.get("cache_control").is_some_and(|c| !c.is_null()))
    }
    fn in_blocks(blocks: Option<&Value>) -> usize {
        blocks.and_then(Value::as_array).map_or(0, |blocks| {
            blocks
                .iter()
                .map(|block| marked(block) + in_blocks(block.get("content")))
                .sum()
        })
    }
    let tools = in_blocks(request.get("tools"));
    let system = in_blocks(request.get("system"));
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |messages| {
            messages.iter().map(|m| in_blocks(m.get("content"))).sum()
        });
    tools + system + messages
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::invariants::{Rule, check_request};
    use crate::request::Protocol;

    fn rules(body: &Value) -> Vec<Rule> {
        check_request(Protocol::Anthropic, body)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    fn request(messages: Value) -> Value {
        json!({"model": "claude", "max_tokens": 1024, "messages": messages})
    }

    /// A valid history with thinking, a tool round trip and a final user turn.
    fn valid() -> Value {
        json!({
            "model": "claude",
            "max_tokens": 1024,
            "stream": true,
            "system": [
                {"type": "text", "text": "stable", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "environment"}
            ],
            "tools": [
                {"name": "read_file", "input_schema": {"type": "object", "properties": {"cache_control": {"type": "string"}}}},
                {"name": "grep", "input_schema": {"type": "object"}}
            ],
            "messages": [
                {"role": "user", "content": "fix the bug"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "look first", "signature": "EoQD"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "grep", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "none"}], "is_error": true},
                    {"type": "text", "text": "reminder", "cache_control": {"type": "ephemeral"}}
                ]}
            ]
        })
    }

    #[test]
    fn valid_history_passes() {
        assert_eq!(rules(&valid()), []);
    }

    #[test]
    fn malformed_bodies() {
        assert_eq!(rules(&json!([1, 2])), [Rule::MalformedRequest]);
        let mut body = valid();
        if let Some(object) = body.as_object_mut() {
            object.remove("max_tokens");
        }
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        let mut body = valid();
        body["model"] = json!("");
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        let mut body = valid();
        body["messages"][1]["content"][2]["input"] = json!("{\"path\":\"a\"}");
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        let mut body = valid();
        body.as_object_mut().expect("object").remove("messages");
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
    }

    #[test]
    fn thinking_budget_must_be_below_max_tokens() {
        let mut body = valid();
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1000});
        assert_eq!(rules(&body), []);
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        body["thinking"] = json!({"type": "enabled"});
        assert_eq!(rules(&body), [Rule::MalformedRequest]);
        body["thinking"] = json!({"type": "disabled"});
        assert_eq!(rules(&body), []);
    }

    #[test]
    fn no_messages() {
        assert_eq!(rules(&request(json!([]))), [Rule::NoMessages]);
        assert_eq!(
            rules(&request(json!([{"role": "user", "content": "hi"}]))),
            []
        );
    }

    #[test]
    fn invalid_role() {
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "again"}
        ]));
        assert_eq!(rules(&body), [Rule::InvalidRole]);
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "content": "x"},
            {"role": "user", "content": "again"}
        ]));
        assert_eq!(rules(&body), [Rule::InvalidRole]);
    }

    #[test]
    fn first_message_must_be_user() {
        let body = request(json!([
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "hi"}
        ]));
        assert_eq!(rules(&body), [Rule::FirstMessageNotUser]);
    }

    #[test]
    fn last_message_must_be_user() {
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}
        ]));
        assert_eq!(rules(&body), [Rule::LastMessageNotUser]);
    }

    #[test]
    fn unanswered_tool_call() {
        let mut body = valid();
        body["messages"][2]["content"]
            .as_array_mut()
            .expect("array")
            .remove(1);
        assert_eq!(rules(&body), [Rule::UnansweredToolCall]);
        // A tool call answered two messages later is still unanswered.
        let body = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": "interrupting"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
        ]));
        assert_eq!(
            rules(&body),
            [Rule::UnansweredToolCall, Rule::OrphanToolResult]
        );
    }

    #[test]
    fn orphan_tool_result() {
        let mut body = valid();
        body["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_9");
        assert_eq!(
            rules(&body),
            [Rule::UnansweredToolCall, Rule::OrphanToolResult]
        );
        let body = request(json!([
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "x"}]}
        ]));
        assert_eq!(rules(&body), [Rule::OrphanToolResult]);
    }

    #[test]
    fn duplicate_tool_call_id() {
        let mut body = valid();
        body["messages"][1]["content"][3]["id"] = json!("toolu_1");
        body["messages"][2]["content"][1]["tool_use_id"] = json!("toolu_1");
        assert_eq!(
            rules(&body),
            [Rule::DuplicateToolCallId, Rule::DuplicateToolResult]
        );
    }

    #[test]
    fn duplicate_tool_result() {
        let mut body = valid();
        let extra = json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "again"});
        body["messages"][2]["content"]
            .as_array_mut()
            .expect("array")
            .insert(2, extra);
        assert_eq!(rules(&body), [Rule::DuplicateToolResult]);
    }

    #[test]
    fn empty_content() {
        for (path, value) in [
            ("/messages/0/content", json!("")),
            ("/messages/0/content", json!([])),
            ("/messages/1/content/1/text", json!("  ")),
            ("/messages/2/content/0/content", json!("")),
            ("/messages/2/content/1/content/0/text", json!("")),
            ("/system/1/text", json!("")),
        ] {
            let mut body = valid();
            if let Some(slot) = body.pointer_mut(path) {
                *slot = value;
            }
            assert_eq!(rules(&body), [Rule::EmptyContent], "{path}");
        }
    }

    #[test]
    fn unsigned_thinking() {
        let mut body = valid();
        body["messages"][1]["content"][0]["signature"] = json!("");
        assert_eq!(rules(&body), [Rule::UnsignedThinking]);
        let mut body = valid();
        body["messages"][1]["content"][0] = json!({"type": "thinking", "thinking": "x"});
        assert_eq!(rules(&body), [Rule::UnsignedThinking]);
        let mut body = valid();
        body["messages"][1]["content"][0] = json!({"type": "redacted_thinking", "data": "abc"});
        assert_eq!(rules(&body), []);
    }

    #[test]
    fn tool_result_must_come_first() {
        let mut body = valid();
        let content = body["messages"][2]["content"].as_array_mut();
        if let Some(content) = content {
            content.rotate_right(1);
        }
        assert_eq!(
            rules(&body),
            [Rule::ToolResultNotFirst, Rule::ToolResultNotFirst]
        );
    }

    #[test]
    fn at_most_four_cache_breakpoints() {
        let mut body = valid();
        let marker = json!({"type": "ephemeral"});
        body["tools"][0]["cache_control"] = marker.clone();
        body["messages"][0]["content"] =
            json!([{"type": "text", "text": "fix", "cache_control": marker.clone()}]);
        assert_eq!(rules(&body), [], "four breakpoints are allowed");
        body["messages"][2]["content"][1]["content"][0]["cache_control"] = marker;
        assert_eq!(rules(&body), [Rule::TooManyCacheBreakpoints]);
    }

    #[test]
    fn tool_names_valid_and_unique() {
        let mut body = valid();
        body["tools"][1]["name"] = json!("grep files");
        assert_eq!(rules(&body), [Rule::InvalidToolName]);
        let mut body = valid();
        body["tools"][1]["name"] = json!("read_file");
        assert_eq!(rules(&body), [Rule::DuplicateToolName]);
        let mut body = valid();
        body["messages"][1]["content"][3]["name"] = json!("mcp.grep");
        assert_eq!(rules(&body), [Rule::InvalidToolName]);
    }
}
