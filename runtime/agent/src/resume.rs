//! Repairs of a history loaded from the store (SPEC §9): what to do with the
//! traces a killed process left, so that the next request is valid and no work
//! is silently repeated.
//!
//! - Tool calls without results get the results that were recorded while their
//!   turn ran (pending results), or the error result "interrupted before
//!   completion" — never a re-execution.
//! - Orphan results, duplicate results and empty text blocks are dropped.
//! - A history that does not end with a plain assistant message is closed with
//!   one saying the run was interrupted.
//! - After a long pause the next user message carries a note to re-read files.
//!
//! Everything here is pure; the agent writes the repaired messages back once.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use troupe_protocol::model::{ContentBlock, Message, Role, ToolResult};

use super::history::{close_with, ends_with_assistant};

/// SPEC §9: the result of a call that started but never finished.
pub const INTERRUPTED_RESULT: &str = "interrupted before completion (the process running it stopped); it was not run again — check its effects before repeating it";
/// The result of a call that was running on a cluster node when the node
/// failed, given by the node that continues the run.
pub const NODE_FAILURE_RESULT: &str = "interrupted by a node failure (the cluster node running it stopped answering; the run went on on another node); it was not run again — check its effects before repeating it";
/// Closes a history whose run was interrupted.
pub const INTERRUPTED_CLOSING: &str =
    "(This run was interrupted before it finished. Send a message to continue.)";
/// What stands first in a history whose first messages could not be read:
/// every provider wants a conversation to begin with the person.
pub(crate) const LOST_START: &str = "(The beginning of this conversation could not be read.)";

/// SPEC §9: a pause longer than this adds a note to the next user message.
pub(crate) const PAUSE_NOTE_AFTER: Duration = Duration::from_secs(6 * 3600);

/// What a repair changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Calls answered from results recorded before the process stopped.
    pub recovered_results: Vec<String>,
    /// Calls answered "interrupted before completion".
    pub interrupted_calls: Vec<String>,
    /// Results dropped because no call matched them.
    pub dropped_results: Vec<String>,
    /// Empty text blocks removed.
    pub dropped_empty_blocks: usize,
    /// Whether a closing assistant message was added.
    pub closed: bool,
    /// Whether the history no longer began with a person's message (its first
    /// records were unreadable) and `LOST_START` was put first.
    pub restored_start: bool,
}

impl RepairReport {
    /// True when nothing had to change.
    pub fn is_clean(&self) -> bool {
        *self == Self::default()
    }
}

/// Repairs `history` in place using `pending` results (recorded as calls
/// finished, before their tool message was written).
pub fn repair_history(history: &mut Vec<Message>, pending: &[ToolResult]) -> RepairReport {
    let mut report = RepairReport::default();
    let pending: HashMap<&str, &ToolResult> = pending
        .iter()
        .map(|result| (result.call_id.as_str(), result))
        .collect();

    // Empty text blocks, then messages left empty.
    for message in history.iter_mut() {
        let before = message.content.len();
        message.content.retain(
            |block| !matches!(block, ContentBlock::Text { text } if text.trim().is_empty()),
        );
        report.dropped_empty_blocks += before - message.content.len();
    }
    history.retain(|message| !message.content.is_empty());

    let mut repaired: Vec<Message> = Vec::with_capacity(history.len() + 1);
    let mut index = 0;
    while index < history.len() {
        let message = history[index].clone();
        index += 1;
        match message.role {
            Role::Assistant => {
                let calls: Vec<String> = message.tool_calls().map(|c| c.id.clone()).collect();
                repaired.push(message);
                if calls.is_empty() {
                    continue;
                }
                // The results that follow, if the next message is a tool message.
                let mut found: HashMap<String, ToolResult> = HashMap::new();
                if let Some(next) = history.get(index)
                    && next.role == Role::Tool
                {
                    for result in next.tool_results_iter() {
                        if calls.contains(&result.call_id) && !found.contains_key(&result.call_id) {
                            found.insert(result.call_id.clone(), result.clone());
                        } else {
                            report.dropped_results.push(result.call_id.clone());
                        }
                    }
                    index += 1;
                }
                let results = calls
                    .iter()
                    .map(|id| {
                        if let Some(result) = found.remove(id) {
                            result
                        } else if let Some(result) = pending.get(id.as_str()) {
                            report.recovered_results.push(id.clone());
                            (*result).clone()
                        } else {
                            report.interrupted_calls.push(id.clone());
                            ToolResult::text(id.clone(), INTERRUPTED_RESULT, true)
                        }
                    })
                    .collect();
                repaired.push(Message::tool_results(results));
            }
            Role::Tool => {
                // A tool message not right after an assistant message with calls.
                report
                    .dropped_results
                    .extend(message.tool_results_iter().map(|r| r.call_id.clone()));
            }
            Role::User => repaired.push(message),
        }
    }
    // Duplicate call ids across the history would be rejected: keep the first.
    dedupe_call_ids(&mut repaired, &mut report);
    if repaired
        .first()
        .is_some_and(|first| first.role != Role::User)
    {
        repaired.insert(0, Message::user_text(LOST_START));
        report.restored_start = true;
    }
    *history = repaired;
    if !history.is_empty() && !ends_with_assistant(history) {
        close_with(history, INTERRUPTED_CLOSING);
        report.closed = true;
    }
    report
}

/// Removes later occurrences of a call id (and their results) from the history.
fn dedupe_call_ids(history: &mut Vec<Message>, report: &mut RepairReport) {
    let mut seen = HashSet::new();
    let mut removed = HashSet::new();
    for message in history.iter_mut() {
        if message.role == Role::Assistant {
            message.content.retain(|block| match block {
                ContentBlock::ToolCall(call) => {
                    if seen.insert(call.id.clone()) {
                        true
                    } else {
                        removed.insert(call.id.clone());
                        false
                    }
                }
                _ => true,
            });
        }
    }
    if removed.is_empty() {
        return;
    }
    let mut last_kept_result: HashSet<String> = HashSet::new();
    for message in history.iter_mut() {
        if message.role == Role::Tool {
            message.content.retain(|block| match block {
                ContentBlock::ToolResult(result) if removed.contains(&result.call_id) => {
                    // The first occurrence's result stays; later ones go.
                    if last_kept_result.insert(result.call_id.clone()) {
                        true
                    } else {
                        report.dropped_results.push(result.call_id.clone());
                        false
                    }
                }
                _ => true,
            });
        }
    }
    history.retain(|message| !message.content.is_empty());
}

/// The note added to the next user message after a long pause.
pub fn pause_note(paused: Duration) -> Option<String> {
    if paused <= PAUSE_NOTE_AFTER {
        return None;
    }
    Some(format!(
        "(This session was paused for {}. Files may have changed since: re-read them before relying on what you saw earlier.)",
        human_duration(paused)
    ))
}

/// "3 days", "7 hours", "45 minutes".
pub(crate) fn human_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (value, unit) = if secs >= 2 * 86_400 {
        (secs / 86_400, "days")
    } else if secs >= 2 * 3_600 {
        (secs / 3_600, "hours")
    } else if secs >= 120 {
        (secs / 60, "minutes")
    } else {
        (secs, "seconds")
    };
    format!("{value} {unit}")
}

/// The user message for `prompt`, with the pause note first when there is one.
pub fn user_message(prompt: &str, note: Option<String>) -> Message {
    let mut content = Vec::with_capacity(2);
    if let Some(note) = note {
        content.push(ContentBlock::Text { text: note });
    }
    content.push(ContentBlock::Text {
        text: prompt.to_string(),
    });
    Message {
        role: Role::User,
        content,
    }
}

/// The results a node that continues another node's run gives the calls
/// of `history` that have neither a result nor a pending one: each says the
/// call was interrupted by a node failure. Stored as pending results, they
/// answer those calls when the history is repaired ([`repair_history`]).
pub fn node_failure_results(history: &[Message], pending: &[ToolResult]) -> Vec<ToolResult> {
    let mut repaired = history.to_vec();
    repair_history(&mut repaired, pending)
        .interrupted_calls
        .into_iter()
        .map(|call_id| ToolResult::text(call_id, NODE_FAILURE_RESULT, true))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate_history;
    use troupe_protocol::model::ToolCall;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall(ToolCall {
            id: id.into(),
            name: "bash".into(),
            input: "{}".into(),
        })
    }

    fn assistant(blocks: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content: blocks,
        }
    }

    #[test]
    fn a_clean_history_is_untouched() {
        let mut history = vec![Message::user_text("hi"), Message::assistant_text("hello")];
        let report = repair_history(&mut history, &[]);
        assert!(report.is_clean());
        assert_eq!(history.len(), 2);
    }

    /// Found by the property test: the first record unreadable left a
    /// history that began with the model, which no provider accepts.
    #[test]
    fn a_history_whose_start_was_lost_begins_with_a_note() {
        let mut history = vec![
            assistant(vec![Message::assistant_text("earlier").content[0].clone()]),
            Message::user_text("and then"),
            Message::assistant_text("ok"),
        ];
        let report = repair_history(&mut history, &[]);
        assert!(report.restored_start);
        assert_eq!(history[0], Message::user_text(LOST_START));
        assert_eq!(history.len(), 4);
        validate_history(&history).unwrap();
        assert!(repair_history(&mut history, &[]).is_clean());
    }

    #[test]
    fn calls_a_failed_node_left_running_are_answered_with_the_node_failure() {
        let history = vec![
            Message::user_text("go"),
            assistant(vec![call("a"), call("b")]),
        ];
        let pending = vec![ToolResult::text("a", "done a", false)];
        let failed = node_failure_results(&history, &pending);
        assert_eq!(
            failed,
            vec![ToolResult::text("b", NODE_FAILURE_RESULT, true)]
        );
        let mut all = pending.clone();
        all.extend(failed);
        let mut repaired = history.clone();
        let report = repair_history(&mut repaired, &all);
        assert!(report.interrupted_calls.is_empty());
        validate_history(&repaired).unwrap();
        // A history whose calls all have results needs none.
        assert!(node_failure_results(&repaired, &[]).is_empty());
    }

    #[test]
    fn trailing_calls_get_recorded_or_interrupted_results_and_a_closing() {
        let mut history = vec![
            Message::user_text("go"),
            assistant(vec![call("a"), call("b")]),
        ];
        let pending = vec![ToolResult::text("a", "done a", false)];
        let report = repair_history(&mut history, &pending);
        assert_eq!(report.recovered_results, vec!["a"]);
        assert_eq!(report.interrupted_calls, vec!["b"]);
        assert!(report.closed);
        validate_history(&history).unwrap();
        let results: Vec<_> = history[2].tool_results_iter().collect();
        assert_eq!(results[0].joined_text(), "done a");
        assert!(results[1].is_error);
        assert!(
            results[1]
                .joined_text()
                .starts_with("interrupted before completion")
        );
        assert_eq!(history[3].text(), INTERRUPTED_CLOSING);
    }

    #[test]
    fn a_partial_tool_message_is_completed() {
        let mut history = vec![
            Message::user_text("go"),
            assistant(vec![call("a"), call("b")]),
            Message::tool_results(vec![ToolResult::text("b", "ok", false)]),
            Message::assistant_text("end"),
        ];
        let report = repair_history(&mut history, &[]);
        assert_eq!(report.interrupted_calls, vec!["a"]);
        assert!(!report.closed);
        validate_history(&history).unwrap();
        let ids: Vec<_> = history[2]
            .tool_results_iter()
            .map(|r| r.call_id.clone())
            .collect();
        assert_eq!(ids, vec!["a", "b"]);
    }

    #[test]
    fn orphans_and_duplicates_are_dropped() {
        let mut history = vec![
            Message::user_text("go"),
            Message::tool_results(vec![ToolResult::text("x", "orphan", false)]),
            assistant(vec![call("a")]),
            Message::tool_results(vec![
                ToolResult::text("a", "1", false),
                ToolResult::text("a", "2", false),
                ToolResult::text("z", "stray", false),
            ]),
            Message::assistant_text("ok"),
        ];
        let report = repair_history(&mut history, &[]);
        assert_eq!(report.dropped_results, vec!["x", "a", "z"]);
        validate_history(&history).unwrap();
        assert_eq!(history.len(), 4);
    }

    #[test]
    fn a_prompt_without_answer_is_closed_and_empty_blocks_go() {
        let mut history = vec![
            Message::user_text("one"),
            Message::assistant_text(""),
            Message::user_text("two"),
        ];
        let report = repair_history(&mut history, &[]);
        assert_eq!(report.dropped_empty_blocks, 1);
        assert!(report.closed);
        assert_eq!(history.len(), 3);
        assert_eq!(history[0].text(), "one");
        assert_eq!(history[1].text(), "two");
        assert_eq!(history[2].text(), INTERRUPTED_CLOSING);
    }

    #[test]
    fn repeated_call_ids_keep_the_first() {
        let mut history = vec![
            Message::user_text("go"),
            assistant(vec![call("a")]),
            Message::tool_results(vec![ToolResult::text("a", "1", false)]),
            assistant(vec![call("a")]),
            Message::tool_results(vec![ToolResult::text("a", "2", false)]),
            Message::assistant_text("end"),
        ];
        repair_history(&mut history, &[]);
        validate_history(&history).unwrap();
    }

    #[test]
    fn pause_notes() {
        assert_eq!(pause_note(Duration::from_secs(3600)), None);
        assert_eq!(pause_note(PAUSE_NOTE_AFTER), None);
        let note = pause_note(Duration::from_secs(3 * 86_400 + 5)).unwrap();
        assert!(note.contains("paused for 3 days"));
        assert!(note.contains("re-read"));
        assert_eq!(
            human_duration(Duration::from_secs(7 * 3600 + 59)),
            "7 hours"
        );
        assert_eq!(human_duration(Duration::from_secs(90)), "90 seconds");
        let message = user_message("continue", Some("note".into()));
        assert_eq!(message.content.len(), 2);
        assert_eq!(message.text(), "notecontinue");
        assert_eq!(user_message("x", None).content.len(), 1);
    }
}
