//! History consistency (SPEC §3): the rules a conversation must keep so that the
//! next request is valid for every protocol, the check that enforces them, and
//! the repairs used when a turn ends early (cancellation, errors, limits, a
//! process that died).
//!
//! The rules: the first message is a user message; every tool call of an
//! assistant message is answered by exactly one result in the tool message that
//! immediately follows it; no result without its call; no call id twice; no empty
//! text block; tool messages carry only results.

use std::collections::HashSet;

use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};

/// A broken rule, with the index of the offending message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The history does not start with a user message.
    #[error("message 0 has role {}; a history starts with a user message", .0.as_str())]
    FirstNotUser(Role),
    /// Calls of an assistant message have no result right after it.
    #[error(
        "message {index}: tool calls {} have no result in the next message",
        ids.join(", ")
    )]
    Unanswered {
        /// Index of the assistant message.
        index: usize,
        /// The unanswered call ids.
        ids: Vec<String>,
    },
    /// A result answers no call of the preceding assistant message.
    #[error("message {index}: result for {id} answers no call of the previous message")]
    Orphan {
        /// Index of the tool message.
        index: usize,
        /// The result's call id.
        id: String,
    },
    /// The same call id appears twice.
    #[error("message {index}: call id {id} appears more than once")]
    Duplicate {
        /// Index of the message.
        index: usize,
        /// The id.
        id: String,
    },
    /// A text block is empty.
    #[error("message {index}: empty text block")]
    EmptyText {
        /// Index of the message.
        index: usize,
    },
    /// A block is in a message of the wrong role.
    #[error("message {index}: {what} in a message of role {}", role.as_str())]
    Misplaced {
        /// Index of the message.
        index: usize,
        /// What is misplaced.
        what: &'static str,
        /// The message's role.
        role: Role,
    },
}

/// Checks every rule over the whole history.
pub fn validate_history(history: &[Message]) -> Result<(), HistoryError> {
    if let Some(first) = history.first()
        && first.role != Role::User
    {
        return Err(HistoryError::FirstNotUser(first.role));
    }
    let mut seen_calls = HashSet::new();
    for (index, message) in history.iter().enumerate() {
        for block in &message.content {
            match (block, message.role) {
                (ContentBlock::Text { text }, _) if text.is_empty() => {
                    return Err(HistoryError::EmptyText { index });
                }
                (ContentBlock::ToolCall(call), Role::Assistant)
                    if !seen_calls.insert(call.id.clone()) =>
                {
                    return Err(HistoryError::Duplicate {
                        index,
                        id: call.id.clone(),
                    });
                }
                (ContentBlock::ToolCall(_), Role::Assistant) => {}
                (ContentBlock::ToolCall(_), role) => {
                    return Err(HistoryError::Misplaced {
                        index,
                        what: "tool call",
                        role,
                    });
                }
                (ContentBlock::ToolResult(_), Role::Tool) => {}
                (ContentBlock::ToolResult(_), role) => {
                    return Err(HistoryError::Misplaced {
                        index,
                        what: "tool result",
                        role,
                    });
                }
                (_, Role::Tool) => {
                    return Err(HistoryError::Misplaced {
                        index,
                        what: "non-result block",
                        role: Role::Tool,
                    });
                }
                _ => {}
            }
        }
        match message.role {
            Role::Assistant => {
                let calls: Vec<&ToolCall> = message.tool_calls().collect();
                if calls.is_empty() {
                    continue;
                }
                let answered: Vec<&str> = match history.get(index + 1) {
                    Some(next) if next.role == Role::Tool => next
                        .tool_results_iter()
                        .map(|result| result.call_id.as_str())
                        .collect(),
                    _ => Vec::new(),
                };
                let missing: Vec<String> = calls
                    .iter()
                    .filter(|call| !answered.contains(&call.id.as_str()))
                    .map(|call| call.id.clone())
                    .collect();
                if !missing.is_empty() {
                    return Err(HistoryError::Unanswered {
                        index,
                        ids: missing,
                    });
                }
            }
            Role::Tool => {
                let calls: Vec<&str> = match index.checked_sub(1).map(|i| &history[i]) {
                    Some(prev) if prev.role == Role::Assistant => {
                        prev.tool_calls().map(|call| call.id.as_str()).collect()
                    }
                    _ => Vec::new(),
                };
                let mut answered = HashSet::new();
                for result in message.tool_results_iter() {
                    if !calls.contains(&result.call_id.as_str()) {
                        return Err(HistoryError::Orphan {
                            index,
                            id: result.call_id.clone(),
                        });
                    }
                    if !answered.insert(result.call_id.as_str()) {
                        return Err(HistoryError::Duplicate {
                            index,
                            id: result.call_id.clone(),
                        });
                    }
                }
            }
            Role::User => {}
        }
    }
    Ok(())
}

/// The results of a turn's calls in call order: every call without a result
/// gets an error result with `missing_text` (e.g. "(cancelled)").
pub(crate) fn complete_results(
    calls: &[ToolCall],
    results: Vec<Option<ToolResult>>,
    missing_text: &str,
) -> Vec<ToolResult> {
    let mut results = results;
    results.resize(calls.len(), None);
    calls
        .iter()
        .zip(results)
        .map(|(call, result)| {
            result.unwrap_or_else(|| ToolResult::text(call.id.clone(), missing_text, true))
        })
        .collect()
}

/// True when the history ends with an assistant message whose calls are all
/// answered — i.e. a closing message is not needed.
pub(crate) fn ends_with_assistant(history: &[Message]) -> bool {
    matches!(history.last(), Some(last) if last.role == Role::Assistant && last.tool_calls().next().is_none())
}

/// Closes an early exit: appends `text` as an assistant message unless the
/// history already ends with a plain assistant message, in which case the text
/// is appended to it as a separate text block.
pub(crate) fn close_with(history: &mut Vec<Message>, text: &str) {
    if ends_with_assistant(history)
        && let Some(last) = history.last_mut()
    {
        last.content.push(ContentBlock::Text {
            text: text.to_string(),
        });
        return;
    }
    history.push(Message::assistant_text(text));
}

/// A call id renamed by [`repair_call_ids`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenamedCall {
    /// Index of the call among the message's calls.
    pub index: usize,
    /// The id the provider sent.
    pub from: String,
    /// The id it has in history from now on.
    pub to: String,
}

/// Makes the call ids of a new assistant `message` unique before anything
/// runs (a hostile or buggy server may repeat ids, which every later request
/// would carry and real APIs refuse): the first call with an id keeps it; a
/// later call repeating it, one reusing an id of the earlier history
/// (`taken`), or one without an id gets `{id}_{n}` (`call_{n}` for an empty
/// id) with the smallest `n >= 2` that no call has. The message is what
/// history keeps, so every later request carries the new ids and the results
/// pair with them. Returns the renames, in call order.
pub(crate) fn repair_call_ids(message: &mut Message, taken: &HashSet<String>) -> Vec<RenamedCall> {
    // Ids kept as sent are claimed first, so a fresh id never takes one that
    // a later call of the message legitimately has.
    let kept: HashSet<String> = message
        .tool_calls()
        .map(|call| call.id.clone())
        .filter(|id| !id.is_empty() && !taken.contains(id))
        .collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut renamed = Vec::new();
    for (index, call) in message
        .content
        .iter_mut()
        .filter_map(|block| match block {
            ContentBlock::ToolCall(call) => Some(call),
            _ => None,
        })
        .enumerate()
    {
        if call.id.is_empty() || taken.contains(&call.id) || seen.contains(&call.id) {
            let base = if call.id.is_empty() {
                "call"
            } else {
                call.id.as_str()
            };
            let fresh = (2u64..)
                .map(|n| format!("{base}_{n}"))
                .find(|id| !taken.contains(id) && !seen.contains(id) && !kept.contains(id))
                .unwrap_or_default();
            renamed.push(RenamedCall {
                index,
                from: std::mem::replace(&mut call.id, fresh.clone()),
                to: fresh,
            });
        }
        seen.insert(call.id.clone());
    }
    renamed
}

/// The ids of every tool call in `history`.
pub(crate) fn call_ids(history: &[Message]) -> HashSet<String> {
    history
        .iter()
        .flat_map(|message| message.tool_calls())
        .map(|call| call.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read_file".into(),
            input: "{}".into(),
        }
    }

    fn assistant_calls(ids: &[&str]) -> Message {
        Message {
            role: Role::Assistant,
            content: ids
                .iter()
                .map(|id| ContentBlock::ToolCall(call(id)))
                .collect(),
        }
    }

    fn results(ids: &[&str]) -> Message {
        Message::tool_results(
            ids.iter()
                .map(|id| ToolResult::text(*id, "ok", false))
                .collect(),
        )
    }

    #[test]
    fn valid_history_passes() {
        let history = vec![
            Message::user_text("hi"),
            assistant_calls(&["a", "b"]),
            results(&["b", "a"]),
            Message::assistant_text("done"),
            Message::user_text("more"),
        ];
        assert_eq!(validate_history(&history), Ok(()));
        assert_eq!(validate_history(&[]), Ok(()));
    }

    #[test]
    fn errors_name_roles_and_ids_in_words() {
        assert_eq!(
            HistoryError::FirstNotUser(Role::Assistant).to_string(),
            "message 0 has role assistant; a history starts with a user message"
        );
        assert_eq!(
            HistoryError::Unanswered {
                index: 1,
                ids: vec!["a".into(), "b".into()],
            }
            .to_string(),
            "message 1: tool calls a, b have no result in the next message"
        );
        assert_eq!(
            HistoryError::Misplaced {
                index: 2,
                what: "a tool call",
                role: Role::User,
            }
            .to_string(),
            "message 2: a tool call in a message of role user"
        );
    }

    #[test]
    fn detects_every_broken_rule() {
        assert!(matches!(
            validate_history(&[Message::assistant_text("x")]),
            Err(HistoryError::FirstNotUser(Role::Assistant))
        ));
        let unanswered = vec![
            Message::user_text("u"),
            assistant_calls(&["a", "b"]),
            results(&["a"]),
        ];
        assert_eq!(
            validate_history(&unanswered),
            Err(HistoryError::Unanswered {
                index: 1,
                ids: vec!["b".into()]
            })
        );
        let trailing = vec![Message::user_text("u"), assistant_calls(&["a"])];
        assert!(matches!(
            validate_history(&trailing),
            Err(HistoryError::Unanswered { .. })
        ));
        let orphan = vec![
            Message::user_text("u"),
            Message::assistant_text("x"),
            results(&["z"]),
        ];
        assert!(matches!(
            validate_history(&orphan),
            Err(HistoryError::Orphan { .. })
        ));
        let dup_result = vec![
            Message::user_text("u"),
            assistant_calls(&["a"]),
            results(&["a", "a"]),
        ];
        assert!(matches!(
            validate_history(&dup_result),
            Err(HistoryError::Duplicate { .. })
        ));
        let dup_call = vec![
            Message::user_text("u"),
            assistant_calls(&["a"]),
            results(&["a"]),
            assistant_calls(&["a"]),
            results(&["a"]),
        ];
        assert!(matches!(
            validate_history(&dup_call),
            Err(HistoryError::Duplicate { .. })
        ));
        let empty = vec![Message::user_text("")];
        assert!(matches!(
            validate_history(&empty),
            Err(HistoryError::EmptyText { .. })
        ));
        let misplaced = vec![Message {
            role: Role::User,
            content: vec![ContentBlock::ToolCall(call("a"))],
        }];
        assert!(matches!(
            validate_history(&misplaced),
            Err(HistoryError::Misplaced { .. })
        ));
    }

    #[test]
    fn complete_results_fills_in_call_order() {
        let calls = vec![call("a"), call("b"), call("c")];
        let done = vec![None, Some(ToolResult::text("b", "ok", false))];
        let filled = complete_results(&calls, done, "(cancelled)");
        assert_eq!(filled.len(), 3);
        assert_eq!(filled[0].call_id, "a");
        assert!(filled[0].is_error);
        assert_eq!(filled[0].joined_text(), "(cancelled)");
        assert!(!filled[1].is_error);
        assert_eq!(filled[2].joined_text(), "(cancelled)");
    }

    #[test]
    fn close_with_appends_or_extends() {
        let mut history = vec![
            Message::user_text("u"),
            assistant_calls(&["a"]),
            results(&["a"]),
        ];
        close_with(&mut history, "(cancelled)");
        assert_eq!(history.len(), 4);
        assert_eq!(validate_history(&history), Ok(()));
        close_with(&mut history, "again");
        assert_eq!(history.len(), 4);
        assert_eq!(history[3].content.len(), 2);
    }
    fn calls(ids: &[&str]) -> Message {
        Message {
            role: Role::Assistant,
            content: ids
                .iter()
                .map(|id| ContentBlock::ToolCall(call(id)))
                .collect(),
        }
    }

    fn ids_of(message: &Message) -> Vec<String> {
        message.tool_calls().map(|c| c.id.clone()).collect()
    }

    #[test]
    fn repeated_call_ids_get_fresh_ids_and_the_history_stays_valid() {
        let mut message = calls(&["a", "b", "a", "a", "a_2", ""]);
        let renamed = repair_call_ids(&mut message, &HashSet::new());
        // `a_2` is sent by the provider itself: the fresh ids step over it.
        assert_eq!(ids_of(&message), ["a", "b", "a_3", "a_4", "a_2", "call_2"]);
        let pairs: Vec<(usize, &str, &str)> = renamed
            .iter()
            .map(|r| (r.index, r.from.as_str(), r.to.as_str()))
            .collect();
        assert_eq!(pairs, [(2, "a", "a_3"), (3, "a", "a_4"), (5, "", "call_2")]);
        let calls_made: Vec<ToolCall> = message.tool_calls().cloned().collect();
        let history = vec![
            Message::user_text("go"),
            message,
            Message::tool_results(complete_results(&calls_made, Vec::new(), "r")),
        ];
        validate_history(&history).unwrap();
    }

    #[test]
    fn ids_of_earlier_turns_are_not_reused() {
        let earlier = call_ids(&[Message::user_text("go"), calls(&["x", "y"])]);
        let mut message = calls(&["x", "z"]);
        let renamed = repair_call_ids(&mut message, &earlier);
        assert_eq!(ids_of(&message), ["x_2", "z"]);
        assert_eq!(renamed.len(), 1);
        // Unique ids are left alone.
        let mut message = calls(&["p", "q"]);
        assert!(repair_call_ids(&mut message, &earlier).is_empty());
        assert_eq!(ids_of(&message), ["p", "q"]);
    }
}
