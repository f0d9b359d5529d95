//! Invariants checked on every request, for every wire protocol: the rules a
//! valid conversation history obeys (every tool call answered exactly once, no
//! orphan results, valid roles, no empty content, signed thinking, at most four
//! cache breakpoints, valid and unique tool names, …).
//!
//! [`check_request`] is a pure function from a protocol and a parsed body to the
//! list of violations; the server answers a violating request with an HTTP 400
//! naming them and records them. This module must not touch HTTP or the script.

mod anthropic;
mod openai;
mod openai_responses;

use std::collections::HashSet;
use std::fmt;

use serde_json::Value;

use crate::request::Protocol;

/// SPEC §2: Anthropic accepts at most 4 `cache_control` breakpoints per request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Longest tool name both APIs accept (`^[A-Za-z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Which rule a request broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The body is not JSON, or a required field is missing or has the wrong
    /// type (`model`, Anthropic `max_tokens`, `messages`, block fields, …).
    MalformedRequest,
    /// `messages` is empty (or, OpenAI, holds only system messages).
    NoMessages,
    /// A role the protocol does not accept (Anthropic: `user`/`assistant`
    /// only, the system prompt is the top-level `system` field; OpenAI:
    /// `system`/`developer`/`user`/`assistant`/`tool`).
    InvalidRole,
    /// The first message (after system messages, OpenAI) is not a user message.
    FirstMessageNotUser,
    /// The request does not end with a user (or, OpenAI, tool) message.
    LastMessageNotUser,
    /// A tool call has no result in the immediately following message(s).
    UnansweredToolCall,
    /// A tool result answers no call of the immediately preceding assistant
    /// message.
    OrphanToolResult,
    /// Two tool calls share an id.
    DuplicateToolCallId,
    /// A tool call is answered more than once.
    DuplicateToolResult,
    /// An empty (or whitespace-only) text block or string content; OpenAI
    /// assistant content may be null/absent only when it has `tool_calls`.
    EmptyContent,
    /// An Anthropic thinking block without a signature (or a redacted thinking
    /// block without data).
    UnsignedThinking,
    /// An Anthropic user message has a `tool_result` block after another block.
    ToolResultNotFirst,
    /// More than [`MAX_CACHE_BREAKPOINTS`] `cache_control` markers.
    TooManyCacheBreakpoints,
    /// A tool name outside `^[A-Za-z0-9_-]{1,64}$`.
    InvalidToolName,
    /// Two offered tools share a name.
    DuplicateToolName,
    /// A request arrived after every turn of the script was consumed.
    ScriptExhausted,
    /// A request arrived that no unconsumed turn matches.
    NoTurnMatched,
    /// A request arrived on a path or method the server does not serve.
    UnknownEndpoint,
}

impl Rule {
    /// A short stable name, e.g. `unanswered-tool-call`.
    pub fn code(self) -> &'static str {
        match self {
            Self::MalformedRequest => "malformed-request",
            Self::NoMessages => "no-messages",
            Self::InvalidRole => "invalid-role",
            Self::FirstMessageNotUser => "first-message-not-user",
            Self::LastMessageNotUser => "last-message-not-user",
            Self::UnansweredToolCall => "unanswered-tool-call",
            Self::OrphanToolResult => "orphan-tool-result",
            Self::DuplicateToolCallId => "duplicate-tool-call-id",
            Self::DuplicateToolResult => "duplicate-tool-result",
            Self::EmptyContent => "empty-content",
            Self::UnsignedThinking => "unsigned-thinking",
            Self::ToolResultNotFirst => "tool-result-not-first",
            Self::TooManyCacheBreakpoints => "too-many-cache-breakpoints",
            Self::InvalidToolName => "invalid-tool-name",
            Self::DuplicateToolName => "duplicate-tool-name",
            Self::ScriptExhausted => "script-exhausted",
            Self::NoTurnMatched => "no-turn-matched",
            Self::UnknownEndpoint => "unknown-endpoint",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One broken rule, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What exactly is wrong, naming the message/block index or id.
    pub detail: String,
    /// Index of the offending request (see `RecordedRequest::index`), when the
    /// server recorded it.
    pub request_index: Option<usize>,
    /// The endpoint's protocol, when known.
    pub protocol: Option<Protocol>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(index) = self.request_index {
            write!(f, "request #{index} ")?;
        }
        if let Some(protocol) = self.protocol {
            write!(f, "({protocol}) ")?;
        }
        write!(f, "[{}] {}", self.rule, self.detail)
    }
}

/// Checks a parsed request body against every invariant of `protocol`.
pub fn check_request(protocol: Protocol, body: &Value) -> Vec<Violation> {
    let mut findings = Findings::new(protocol);
    match protocol {
        Protocol::Anthropic => anthropic::check(body, &mut findings),
        Protocol::OpenAi => openai::check(body, &mut findings),
        Protocol::OpenAiResponses => openai_responses::check(body, &mut findings),
    }
    findings.violations
}

/// Whether `name` matches `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Collects violations for one request.
struct Findings {
    protocol: Protocol,
    violations: Vec<Violation>,
}

impl Findings {
    fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            violations: Vec::new(),
        }
    }

    fn push(&mut self, rule: Rule, detail: impl Into<String>) {
        self.violations.push(Violation {
            rule,
            detail: detail.into(),
            request_index: None,
            protocol: Some(self.protocol),
        });
    }

    /// Checks offered tool names for validity and uniqueness.
    fn check_tool_names<'a>(&mut self, names: impl Iterator<Item = (usize, Option<&'a str>)>) {
        let mut seen = HashSet::new();
        for (index, name) in names {
            match name {
                None => self.push(
                    Rule::MalformedRequest,
                    format!("tools[{index}] has no string name"),
                ),
                Some(name) => {
                    if !is_valid_tool_name(name) {
                        self.push(
                            Rule::InvalidToolName,
                            format!("tools[{index}] name {name:?} does not match ^[A-Za-z0-9_-]{{1,64}}$"),
                        );
                    }
                    if !seen.insert(name) {
                        self.push(
                            Rule::DuplicateToolName,
                            format!("tools[{index}] repeats the tool name {name:?}"),
                        );
                    }
                }
            }
        }
    }

    /// The checks both OpenAI protocols make before their conversation: the
    /// body is an object with a `model`, and every offered tool is a
    /// `function` with a valid, unique name (`name_of` finds it). Returns the
    /// body's fields, or `None` when the body is not an object.
    fn check_openai_head<'a>(
        &mut self,
        body: &'a Value,
        name_of: impl Fn(&Value) -> Option<&str>,
    ) -> Option<&'a serde_json::Map<String, Value>> {
        let Some(request) = body.as_object() else {
            self.push(
                Rule::MalformedRequest,
                "the request body is not a JSON object",
            );
            return None;
        };
        if !non_empty_str(request.get("model")) {
            self.push(
                Rule::MalformedRequest,
                "`model` is missing or not a non-empty string",
            );
        }
        if let Some(tools) = request.get("tools") {
            match tools.as_array() {
                Some(tools) => {
                    for (i, tool) in tools.iter().enumerate() {
                        if tool.get("type").and_then(Value::as_str) != Some("function") {
                            self.push(
                                Rule::MalformedRequest,
                                format!("tools[{i}] must have \"type\": \"function\""),
                            );
                        }
                    }
                    self.check_tool_names(
                        tools.iter().enumerate().map(|(i, tool)| (i, name_of(tool))),
                    );
                }
                None => self.push(Rule::MalformedRequest, "`tools` is not an array"),
            }
        }
        Some(request)
    }

    /// Checks that a call id has not been seen in this request.
    fn check_call_id(&mut self, seen: &mut HashSet<String>, id: &str, location: &str) {
        if !seen.insert(id.to_owned()) {
            self.push(
                Rule::DuplicateToolCallId,
                format!("{location} reuses the tool call id {id:?}"),
            );
        }
    }

    /// Reports calls with no result, results with no call, and repeated
    /// results, for one assistant message and the results that follow it.
    fn check_pairing(
        &mut self,
        calls: &[&str],
        calls_at: &str,
        results: &[&str],
        results_at: &str,
    ) {
        for call in calls {
            if !results.contains(call) {
                self.push(
                    Rule::UnansweredToolCall,
                    format!("tool call {call:?} of {calls_at} has no result in {results_at}"),
                );
            }
        }
        let mut reported = HashSet::new();
        for result in results {
            if !calls.contains(result) {
                self.push(
                    Rule::OrphanToolResult,
                    format!("the result for {result:?} in {results_at} answers no tool call of {calls_at}"),
                );
            } else if results.iter().filter(|r| *r == result).count() > 1
                && reported.insert(*result)
            {
                self.push(
                    Rule::DuplicateToolResult,
                    format!("tool call {result:?} is answered more than once in {results_at}"),
                );
            }
        }
    }
}

/// Whether `value` is a non-empty string.
fn non_empty_str(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

/// Whether a string is empty or only whitespace (both APIs reject such text).
fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_name_rule() {
        assert!(is_valid_tool_name("read_file"));
        assert!(is_valid_tool_name("mcp__fs-read"));
        assert!(is_valid_tool_name(&"a".repeat(MAX_TOOL_NAME_LEN)));
        assert!(!is_valid_tool_name(&"a".repeat(MAX_TOOL_NAME_LEN + 1)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("read file"));
        assert!(!is_valid_tool_name("fs.read"));
        assert!(!is_valid_tool_name("lecture_é"));
    }

    #[test]
    fn violation_display_names_rule_and_request() {
        let violation = Violation {
            rule: Rule::OrphanToolResult,
            detail: "x".into(),
            request_index: Some(3),
            protocol: Some(Protocol::OpenAi),
        };
        assert_eq!(
            violation.to_string(),
            "request #3 (openai) [orphan-tool-result] x"
        );
    }
}
