//! Invariants of an OpenAI Responses request body.
//!
//! The history is a flat list of `input` items. The model's output of one
//! response (`reasoning`, `function_call` and assistant `message` items) is a
//! group; the `function_call_output` items after it must answer each of its
//! calls exactly once (same `call_id`) and nothing else. Owns the Responses
//! rules only; the rule list and the shared helpers live beside it.

use std::collections::HashSet;

use serde_json::Value;

use super::{Findings, Rule, is_blank, non_empty_str};

/// Roles a message item may have.
const ROLES: [&str; 4] = ["system", "developer", "user", "assistant"];

pub(super) fn check(body: &Value, out: &mut Findings) {
    let Some(request) =
        out.check_openai_head(body, |tool| tool.get("name").and_then(Value::as_str))
    else {
        return;
    };
    let chained = non_empty_str(request.get("previous_response_id"));
    let stored = request.get("store").and_then(Value::as_bool) == Some(true);
    let Some(input) = request.get("input").and_then(Value::as_array) else {
        out.push(Rule::MalformedRequest, "`input` is missing or not an array");
        return;
    };
    check_items(input, chained, stored, out);
}

/// What an input item is, for the pairing rules.
enum Kind<'a> {
    /// A message of a person or the system.
    Prompt,
    /// Output of the model; a function call carries its `call_id`.
    Output(Option<&'a str>),
    /// A function call's output, with the `call_id` it answers.
    Result(&'a str),
    /// Unusable (already reported).
    Invalid,
}

fn classify<'a>(item: &'a Value, at: &str, stored: bool, out: &mut Findings) -> Kind<'a> {
    // With store: false the provider keeps no item, so an item naming one by
    // its `id` is answered "404 Item with id … not found. Items are not
    // persisted when `store` is set to false".
    if !stored && let Some(id) = item.get("id") {
        out.push(
            Rule::MalformedRequest,
            format!(
                "{at} carries the item id {id} in a request with store: false, where no item \
                 is kept: the provider answers 404 (item not found)"
            ),
        );
    }
    let role = item.get("role").and_then(Value::as_str);
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .or(role.map(|_| "message"));
    match kind {
        Some("message") => {
            let Some(role) = role else {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a message without `role`"),
                );
                return Kind::Invalid;
            };
            if !ROLES.contains(&role) {
                out.push(
                    Rule::InvalidRole,
                    format!("{at} has role {role:?}; allowed: {}", ROLES.join(", ")),
                );
                return Kind::Invalid;
            }
            check_content(item.get("content"), at, out);
            if role == "assistant" {
                Kind::Output(None)
            } else {
                Kind::Prompt
            }
        }
        Some("function_call") => {
            for field in ["call_id", "name"] {
                if !non_empty_str(item.get(field)) {
                    out.push(
                        Rule::MalformedRequest,
                        format!("{at} is a function_call without a `{field}`"),
                    );
                }
            }
            if !item.get("arguments").is_some_and(Value::is_string) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a function_call whose `arguments` is not a string"),
                );
            }
            Kind::Output(item.get("call_id").and_then(Value::as_str))
        }
        Some("function_call_output") => {
            if !item.get("output").is_some_and(Value::is_string) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a function_call_output whose `output` is not a string"),
                );
            }
            match item.get("call_id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => Kind::Result(id),
                _ => {
                    out.push(
                        Rule::MalformedRequest,
                        format!("{at} is a function_call_output without `call_id`"),
                    );
                    Kind::Invalid
                }
            }
        }
        Some("reasoning") => {
            if stored && !non_empty_str(item.get("id")) {
                out.push(
                    Rule::MalformedRequest,
                    format!("{at} is a reasoning item without `id` in a request with store: true"),
                );
            }
            if !stored && !non_empty_str(item.get("encrypted_content")) {
                out.push(
                    Rule::UnsignedThinking,
                    format!(
                        "{at} is a reasoning item without `encrypted_content` in a request with store: false"
                    ),
                );
            }
            Kind::Output(None)
        }
        other => {
            out.push(
                Rule::MalformedRequest,
                format!("{at} has the unknown item type {other:?}"),
            );
            Kind::Invalid
        }
    }
}

fn check_content(content: Option<&Value>, at: &str, out: &mut Findings) {
    let empty = match content {
        Some(Value::String(text)) => is_blank(text),
        Some(Value::Array(parts)) => {
            parts.is_empty()
                || parts.iter().any(|part| {
                    part.get("text")
                        .and_then(Value::as_str)
                        .is_some_and(is_blank)
                })
        }
        _ => {
            out.push(
                Rule::MalformedRequest,
                format!("{at} has no string or array `content`"),
            );
            return;
        }
    };
    if empty {
        out.push(Rule::EmptyContent, format!("{at} has empty content"));
    }
}

/// One response's function calls and the outputs that follow them.
#[derive(Default)]
struct Group<'a> {
    calls: Vec<&'a str>,
    calls_at: String,
    results: Vec<&'a str>,
    results_at: String,
}

impl Group<'_> {
    fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.results.is_empty()
    }
}

fn check_items(items: &[Value], chained: bool, stored: bool, out: &mut Findings) {
    if items.is_empty() {
        out.push(Rule::NoMessages, "`input` is empty");
        return;
    }
    let mut call_ids = HashSet::new();
    let mut group = Group::default();
    // A chained request's first outputs answer calls of the stored response.
    let mut first_group = true;
    let mut kinds = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = classify(item, &at, stored, out);
        match &kind {
            Kind::Output(call) => {
                if !group.results.is_empty() {
                    close(std::mem::take(&mut group), chained && first_group, out);
                    first_group = false;
                }
                if group.calls.is_empty() {
                    group.calls_at = format!("the output at {at}");
                }
                if let Some(call) = call {
                    out.check_call_id(&mut call_ids, call, &at);
                    group.calls.push(call);
                }
            }
            Kind::Result(id) => {
                if group.results.is_empty() {
                    group.results_at = format!("the outputs from {at}");
                }
                group.results.push(id);
            }
            Kind::Prompt => {
                if !group.is_empty() {
                    close(std::mem::take(&mut group), chained && first_group, out);
                }
                first_group = false;
            }
            Kind::Invalid => {}
        }
        kinds.push(kind);
    }
    if !group.is_empty() {
        close(group, chained && first_group, out);
    }
    // System and developer messages may come before the history.
    let first = items.iter().position(|item| {
        !matches!(
            item.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        )
    });
    if !chained && let Some(Kind::Output(_) | Kind::Result(_)) = first.map(|i| &kinds[i]) {
        out.push(
            Rule::FirstMessageNotUser,
            "the first input item is output of the model or a function output; a history starts with a user message",
        );
    }
    let last = items.len() - 1;
    if let Kind::Output(_) = kinds[last] {
        out.push(
            Rule::LastMessageNotUser,
            format!(
                "input[{last}] is output of the model; the request must end with a user message or function outputs"
            ),
        );
    }
}

/// Pairs one group's calls and outputs. Outputs that open a chained request
/// answer the stored response, which this request does not show.
fn close(group: Group<'_>, answers_stored_response: bool, out: &mut Findings) {
    if answers_stored_response && group.calls.is_empty() {
        return;
    }
    let results_at = if group.results.is_empty() {
        "the items that follow".to_owned()
    } else {
        group.results_at
    };
    let calls_at = if group.calls_at.is_empty() {
        "the preceding output".to_owned()
    } else {
        group.calls_at
    };
    out.check_pairing(&group.calls, &calls_at, &group.results, &results_at);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Rule, check_request};
    use crate::request::Protocol;

    fn rules(body: &serde_json::Value) -> Vec<Rule> {
        check_request(Protocol::OpenAiResponses, body)
            .into_iter()
            .map(|violation| violation.rule)
            .collect()
    }

    fn body(input: serde_json::Value) -> serde_json::Value {
        json!({"model": "m", "store": false, "input": input})
    }

    fn call(id: &str) -> serde_json::Value {
        json!({"type": "function_call", "call_id": id, "name": "read_file", "arguments": "{}"})
    }

    fn output(id: &str) -> serde_json::Value {
        json!({"type": "function_call_output", "call_id": id, "output": "ok"})
    }

    fn user(text: &str) -> serde_json::Value {
        json!({"type": "message", "role": "user", "content": text})
    }

    #[test]
    fn a_valid_history_passes() {
        let reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "gA"});
        let valid = body(json!([
            user("task"),
            reasoning,
            call("c1"),
            call("c2"),
            output("c1"),
            output("c2"),
            {"type": "message", "role": "assistant", "content": "done"},
            user("more")
        ]));
        assert_eq!(rules(&valid), []);
    }

    #[test]
    fn calls_and_outputs_pair_up() {
        let unanswered = body(json!([user("t"), call("c1"), call("c2"), output("c1")]));
        assert_eq!(rules(&unanswered), [Rule::UnansweredToolCall]);
        let orphan = body(json!([user("t"), call("c1"), output("c1"), output("c9")]));
        assert_eq!(rules(&orphan), [Rule::OrphanToolResult]);
        let late = body(json!([user("t"), call("c1"), user("x"), output("c1")]));
        assert_eq!(
            rules(&late),
            [Rule::UnansweredToolCall, Rule::OrphanToolResult]
        );
        let twice = body(json!([user("t"), call("c1"), output("c1"), output("c1")]));
        assert_eq!(rules(&twice), [Rule::DuplicateToolResult]);
        let reused = body(json!([
            user("t"),
            call("c1"),
            output("c1"),
            call("c1"),
            output("c1")
        ]));
        assert_eq!(rules(&reused), [Rule::DuplicateToolCallId]);
        let ends_with_call = body(json!([user("t"), call("c1")]));
        assert_eq!(
            rules(&ends_with_call),
            [Rule::UnansweredToolCall, Rule::LastMessageNotUser]
        );
    }

    #[test]
    fn a_chained_request_may_open_with_outputs_of_the_stored_response() {
        let mut chained = body(json!([output("c1"), output("c2")]));
        chained["previous_response_id"] = json!("resp_1");
        assert_eq!(rules(&chained), []);
        let unchained = body(json!([output("c1")]));
        assert_eq!(
            rules(&unchained),
            [Rule::OrphanToolResult, Rule::FirstMessageNotUser]
        );
    }

    #[test]
    fn shapes_are_checked() {
        let unsigned = body(json!([user("t"), {"type": "reasoning", "summary": []}, user("u")]));
        assert_eq!(rules(&unsigned), [Rule::UnsignedThinking]);
        let by_id =
            json!([user("t"), {"type": "reasoning", "id": "rs_1", "summary": []}, user("u")]);
        let mut stored = body(by_id.clone());
        stored["store"] = json!(true);
        assert_eq!(rules(&stored), []);
        // Without store no item can be named by its id: the real API answers 404.
        assert_eq!(
            rules(&body(by_id)),
            [Rule::MalformedRequest, Rule::UnsignedThinking]
        );
        let mut anonymous =
            body(json!([user("t"), {"type": "reasoning", "summary": []}, user("u")]));
        anonymous["store"] = json!(true);
        assert_eq!(rules(&anonymous), [Rule::MalformedRequest]);
        assert_eq!(
            rules(&body(
                json!([{"type": "message", "role": "tool", "content": "x"}])
            )),
            [Rule::InvalidRole]
        );
        assert_eq!(rules(&body(json!([user(" ")]))), [Rule::EmptyContent]);
        assert_eq!(rules(&body(json!([]))), [Rule::NoMessages]);
        assert_eq!(
            rules(&body(json!([{"type": "web_search_call"}]))),
            [Rule::MalformedRequest]
        );
        assert_eq!(rules(&json!({"model": "m"})), [Rule::MalformedRequest]);
        let tools = json!({"model": "m", "input": [user("t")], "tools": [
            {"type": "function", "name": "a b"}, {"type": "function", "name": "ok"}, {"type": "function", "name": "ok"}
        ]});
        assert_eq!(
            rules(&tools),
            [Rule::InvalidToolName, Rule::DuplicateToolName]
        );
    }
}
