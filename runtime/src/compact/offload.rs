//! Layer 1: tool results too large to keep in the context go to spill files
//! and the model sees a preview with the path instead. Each result is decided
//! once, by call id, in a [`Ledger`] kept with the session: a result replaced
//! (or kept) stays so in every later request, so the request prefix — and the
//! provider's prompt cache — never changes under the model. A spill that
//! failed is not recorded, so it is tried again next turn. The stored history
//! keeps every result whole; the ledger only changes what requests carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{ContentBlock, Message, Role, ToolOutputPart, ToolResult};

/// A single result over this many bytes is offloaded.
pub const SINGLE_RESULT_BYTES: usize = 50 * 1024;
/// A tool message whose results add up to more is offloaded, largest first,
/// until it is under.
pub const MESSAGE_BYTES: usize = 200 * 1024;
/// Lines of the preview.
pub const PREVIEW_LINES: usize = 20;
/// Bytes of the preview.
pub const PREVIEW_BYTES: usize = 2_048;

/// What was decided for one call's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Sent whole.
    Kept,
    /// Sent as this preview; the whole result is in the spill file.
    Replaced {
        /// The text sent instead.
        preview: String,
    },
}

/// Every decision of a session, by call id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    decisions: BTreeMap<String, Decision>,
}

/// A result to write to a spill file before the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillOrder {
    /// The call id (the spill file's name).
    pub call_id: String,
    /// The result's text, whole.
    pub text: String,
}

impl Ledger {
    /// The decision for `call_id`, if made.
    pub fn get(&self, call_id: &str) -> Option<&Decision> {
        self.decisions.get(call_id)
    }

    /// How many results are replaced.
    pub fn replaced(&self) -> usize {
        self.decisions
            .values()
            .filter(|d| matches!(d, Decision::Replaced { .. }))
            .count()
    }

    /// The decisions `messages` need that are not made yet: results to spill
    /// (returned, in order) and results to keep (recorded at once). Tool
    /// messages already fully decided cost one lookup per result.
    pub fn plan(&mut self, messages: &[Message]) -> Vec<SpillOrder> {
        let mut orders = Vec::new();
        for message in messages.iter().filter(|m| m.role == Role::Tool) {
            let undecided: Vec<&ToolResult> = message
                .tool_results_iter()
                .filter(|result| !self.decisions.contains_key(&result.call_id))
                .collect();
            if undecided.is_empty() {
                continue;
            }
            // What the message weighs as it would be sent.
            let mut total: usize = message
                .tool_results_iter()
                .map(|result| match self.decisions.get(&result.call_id) {
                    Some(Decision::Replaced { preview }) => preview.len(),
                    _ => result.content_bytes(),
                })
                .sum();
            let mut by_size = undecided.clone();
            by_size.sort_by(|a, b| b.content_bytes().cmp(&a.content_bytes()));
            let mut spill: Vec<&str> = Vec::new();
            for result in by_size {
                let size = result.content_bytes();
                if has_image(result) {
                    continue; // images are never offloaded as text
                }
                if size > SINGLE_RESULT_BYTES || total > MESSAGE_BYTES {
                    spill.push(&result.call_id);
                    total = total - size + PREVIEW_BYTES;
                }
            }
            for result in undecided {
                if spill.contains(&result.call_id.as_str()) {
                    orders.push(SpillOrder {
                        call_id: result.call_id.clone(),
                        text: result.joined_text(),
                    });
                } else {
                    self.decisions
                        .insert(result.call_id.clone(), Decision::Kept);
                }
            }
        }
        orders
    }

    /// Records a spill that worked: the result is sent as a preview from now on.
    pub fn spilled(&mut self, order: &SpillOrder, path: &str) {
        let preview = preview(&order.text, path);
        self.decisions
            .insert(order.call_id.clone(), Decision::Replaced { preview });
    }

    /// `messages` as requests carry them: replaced results as their previews.
    pub fn apply(&self, messages: &[Message]) -> Vec<Message> {
        messages
            .iter()
            .map(|message| {
                if message.role != Role::Tool || self.decisions.is_empty() {
                    return message.clone();
                }
                let content = message
                    .content
                    .iter()
                    .map(|block| match block {
                        ContentBlock::ToolResult(result) => {
                            match self.decisions.get(&result.call_id) {
                                Some(Decision::Replaced { preview }) => {
                                    ContentBlock::ToolResult(ToolResult::text(
                                        result.call_id.clone(),
                                        preview.clone(),
                                        result.is_error,
                                    ))
                                }
                                _ => block.clone(),
                            }
                        }
                        other => other.clone(),
                    })
                    .collect();
                Message {
                    role: message.role,
                    content,
                }
            })
            .collect()
    }

    /// Forgets the decisions of results no longer in `messages` (after a
    /// summary replaced them).
    pub fn retain_for(&mut self, messages: &[Message]) {
        let present: std::collections::HashSet<&str> = messages
            .iter()
            .flat_map(|m| m.tool_results_iter().map(|r| r.call_id.as_str()))
            .collect();
        self.decisions.retain(|id, _| present.contains(id.as_str()));
    }
}

fn has_image(result: &ToolResult) -> bool {
    result
        .content
        .iter()
        .any(|part| matches!(part, ToolOutputPart::Image { .. }))
}

/// The text a replaced result is sent as: its size, where it is, its first
/// lines, and the instruction to read the file rather than guess.
pub fn preview(text: &str, path: &str) -> String {
    format!(
        "[content offloaded] original size: {} bytes\n[saved to] {path}\n[head preview]\n{}\n\n\
         The full content is at the path above; read it with read_file instead of guessing \
         from this preview.",
        text.len(),
        head(text)
    )
}

/// The first [`PREVIEW_LINES`] lines or [`PREVIEW_BYTES`] bytes of `text`,
/// whichever is shorter, cut on a character boundary.
pub fn head(text: &str) -> &str {
    let mut end = text.len().min(PREVIEW_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut head = &text[..end];
    if let Some((index, _)) = head.match_indices('\n').nth(PREVIEW_LINES - 1) {
        head = &head[..index];
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall(ToolCall {
                id: id.into(),
                name: "bash".into(),
                input: "{}".into(),
            })],
        }
    }

    fn results(sizes: &[(&str, usize)]) -> Message {
        Message::tool_results(
            sizes
                .iter()
                .map(|(id, size)| ToolResult::text(*id, "x".repeat(*size), false))
                .collect(),
        )
    }

    #[test]
    fn one_large_result_is_spilled_and_the_decision_never_flips() {
        let history = vec![
            Message::user_text("go"),
            call("a"),
            results(&[("a", SINGLE_RESULT_BYTES + 1)]),
        ];
        let mut ledger = Ledger::default();
        let orders = ledger.plan(&history);
        assert_eq!(orders.len(), 1);
        assert_eq!(orders[0].call_id, "a");
        ledger.spilled(&orders[0], "/spill/a");
        let sent = ledger.apply(&history);
        let text = sent[2].tool_results_iter().next().unwrap().joined_text();
        assert!(
            text.starts_with("[content offloaded] original size: 51201 bytes\n[saved to] /spill/a")
        );
        assert!(text.ends_with("instead of guessing from this preview."));
        // Later turns: nothing more to decide, the same request.
        assert!(ledger.plan(&history).is_empty());
        assert_eq!(ledger.apply(&history), sent);
    }

    #[test]
    fn small_results_are_kept_for_good_and_a_failed_spill_is_tried_again() {
        let history = vec![
            Message::user_text("go"),
            call("small"),
            results(&[("small", 10)]),
            call("big"),
            results(&[("big", SINGLE_RESULT_BYTES * 2)]),
        ];
        let mut ledger = Ledger::default();
        let orders = ledger.plan(&history);
        assert_eq!(ledger.get("small"), Some(&Decision::Kept));
        assert_eq!(orders.len(), 1);
        // The spill failed: not recorded, planned again next turn.
        let again = ledger.plan(&history);
        assert_eq!(again, orders);
        assert_eq!(ledger.apply(&history), history);
    }

    #[test]
    fn a_heavy_message_sheds_its_largest_results_first() {
        let kb = 1024;
        let history = vec![
            Message::user_text("go"),
            results(&[
                ("a", 45 * kb),
                ("b", 48 * kb),
                ("c", 40 * kb),
                ("d", 49 * kb),
                ("e", 30 * kb),
            ]),
        ];
        let mut ledger = Ledger::default();
        let orders: Vec<String> = ledger
            .plan(&history)
            .into_iter()
            .map(|o| o.call_id)
            .collect();
        // 212 KiB in all: the largest goes, leaving 163 KiB + a preview.
        assert_eq!(orders, ["d"]);
        for id in ["a", "b", "c", "e"] {
            assert_eq!(ledger.get(id), Some(&Decision::Kept), "{id}");
        }
    }

    #[test]
    fn the_preview_head_is_the_shorter_of_twenty_lines_and_two_kilobytes() {
        let lines: String = (0..50).map(|i| format!("line {i}\n")).collect();
        assert_eq!(head(&lines).lines().count(), 20);
        assert!(head(&lines).ends_with("line 19"));
        let long = "é".repeat(3_000);
        let cut = head(&long);
        assert!(cut.len() <= PREVIEW_BYTES && cut.len() >= PREVIEW_BYTES - 1);
    }

    #[test]
    fn the_ledger_survives_a_round_trip_and_forgets_what_is_gone() {
        let history = vec![call("a"), results(&[("a", SINGLE_RESULT_BYTES + 5)])];
        let mut ledger = Ledger::default();
        let orders = ledger.plan(&history);
        ledger.spilled(&orders[0], "/s/a");
        let stored = serde_json::to_string(&ledger).unwrap();
        let back: Ledger = serde_json::from_str(&stored).unwrap();
        assert_eq!(back, ledger);
        assert_eq!(back.replaced(), 1);
        let mut trimmed = back.clone();
        trimmed.retain_for(&[Message::user_text("summary")]);
        assert_eq!(trimmed, Ledger::default());
    }
}
