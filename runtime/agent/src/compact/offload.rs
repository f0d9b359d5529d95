//! Layer 1: tool results too large to keep in the context go to spill files
//! and the model sees a preview with the path instead. Each result is decided
//! once, by call id, in a [`Ledger`] kept with the session: a result replaced
//! (or kept) stays so in every later request, so the request prefix — and the
//! provider's prompt cache — never changes under the model. A spill that
//! failed is not recorded, so it is tried again next turn. The stored history
//! keeps every result whole; the ledger only changes what requests carry.
//! The one exception is pressure ([`Ledger::relief`]): at the threshold, when
//! a summary cannot shrink the history, results kept whole are replaced too,
//! changing the prefix once, as a summary would.

use std::collections::BTreeMap;

use troupe_protocol::model::{ContentBlock, Message, Role, ToolOutputPart, ToolResult};
use troupe_store::LedgerEntry;

/// A single result over this many bytes is offloaded.
pub(crate) const SINGLE_RESULT_BYTES: usize = 50 * 1024;
/// A tool message whose results add up to more is offloaded, largest first,
/// until it is under.
pub(crate) const MESSAGE_BYTES: usize = 200 * 1024;
/// Under pressure (the estimate at the threshold and a summary not worth it,
/// or the recent batch too large to keep verbatim), a result sent whole is
/// offloaded when it is over this many bytes, even one kept before: its
/// preview (at most [`PREVIEW_BYTES`] and a few lines of frame) is then an
/// eighth of it or less. Smaller results cost little and are the likeliest
/// to be what the model works on.
pub(crate) const RELIEF_RESULT_BYTES: usize = 16 * 1024;
/// Bytes of a preview's frame (size, path, instruction), counted when a
/// relief plan estimates what a spill saves.
const PREVIEW_FRAME_BYTES: usize = 512;
/// Lines of the preview.
pub(crate) const PREVIEW_LINES: usize = 20;
/// Bytes of the preview.
pub(crate) const PREVIEW_BYTES: usize = 2_048;

/// What was decided for one call's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Sent whole.
    Kept,
    /// Sent as a preview (made from the result, the same every time); the
    /// whole result is in the spill file at `path`.
    Replaced {
        /// The spill file.
        path: String,
    },
}

/// Every decision of a session, by call id.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    decisions: BTreeMap<String, Decision>,
    /// How many leading messages of the history [`Ledger::plan`] last saw
    /// are fully decided: the next plan starts there, so a turn costs its
    /// new messages, not the whole history. Reset when the history is
    /// replaced ([`Ledger::retain_for`]) or shorter than it.
    scanned: usize,
}

/// Ledgers are equal when their decisions are.
impl PartialEq for Ledger {
    fn eq(&self, other: &Self) -> bool {
        self.decisions == other.decisions
    }
}

impl Eq for Ledger {}

/// What layer 1 decided before a request: results to spill, and results
/// kept whole (to record with the session).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffloadPlan {
    /// Results to write to spill files.
    pub spill: Vec<SpillOrder>,
    /// Decisions to keep results whole, as kept with the session.
    pub kept: Vec<LedgerEntry>,
}

impl OffloadPlan {
    /// Nothing was decided.
    pub fn is_empty(&self) -> bool {
        self.spill.is_empty() && self.kept.is_empty()
    }
}

/// A result to write to a spill file before the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillOrder {
    /// The call id (the spill file's name).
    pub call_id: String,
    /// The result's text, whole.
    pub text: String,
}

/// The spill file name of a call id: the id itself when it is a plain name,
/// else a name derived from it (ids come from the provider and may hold
/// path separators).
pub fn spill_file_name(call_id: &str) -> String {
    let plain = !call_id.is_empty()
        && call_id.len() <= 128
        && call_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        return format!("result-{call_id}");
    }
    let hash = call_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("result-{hash:016x}")
}

impl Ledger {
    /// The ledger kept with a session.
    pub fn from_entries(entries: &[LedgerEntry]) -> Self {
        let decisions = entries
            .iter()
            .map(|entry| {
                let decision = match (&entry.spill_path, entry.replaced) {
                    (Some(path), true) => Decision::Replaced {
                        path: path.display().to_string(),
                    },
                    _ => Decision::Kept,
                };
                (entry.call_id.clone(), decision)
            })
            .collect();
        Self {
            decisions,
            scanned: 0,
        }
    }

    /// The entry to keep with the session for `call_id`'s decision.
    pub fn entry(&self, call_id: &str, original_bytes: u64) -> Option<LedgerEntry> {
        let decision = self.decisions.get(call_id)?;
        Some(LedgerEntry {
            call_id: call_id.to_string(),
            replaced: matches!(decision, Decision::Replaced { .. }),
            spill_path: match decision {
                Decision::Replaced { path } => Some(path.into()),
                Decision::Kept => None,
            },
            original_bytes,
        })
    }

    /// The decisions for a fork: the same, planned over its own history
    /// from the start.
    pub fn forked(&self) -> Self {
        Self {
            decisions: self.decisions.clone(),
            scanned: 0,
        }
    }

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
    pub fn plan(&mut self, messages: &[Message]) -> OffloadPlan {
        let mut plan = OffloadPlan::default();
        let start = if self.scanned <= messages.len() {
            self.scanned
        } else {
            0
        };
        // The first message left with a result to spill: planned again next
        // time, in case its spill fails.
        let mut pending: Option<usize> = None;
        for (index, message) in messages
            .iter()
            .enumerate()
            .skip(start)
            .filter(|(_, m)| m.role == Role::Tool)
        {
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
                    Some(Decision::Replaced { .. }) => PREVIEW_BYTES,
                    _ => result.content_bytes(),
                })
                .sum();
            let mut by_size = undecided.clone();
            by_size.sort_by_key(|result| std::cmp::Reverse(result.content_bytes()));
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
            if !spill.is_empty() {
                pending.get_or_insert(index);
            }
            for result in undecided {
                if spill.contains(&result.call_id.as_str()) {
                    plan.spill.push(SpillOrder {
                        call_id: result.call_id.clone(),
                        text: result.joined_text(),
                    });
                } else {
                    self.decisions
                        .insert(result.call_id.clone(), Decision::Kept);
                    plan.kept.push(LedgerEntry {
                        call_id: result.call_id.clone(),
                        replaced: false,
                        spill_path: None,
                        original_bytes: result.content_bytes() as u64,
                    });
                }
            }
        }
        self.scanned = pending.unwrap_or(messages.len());
        plan
    }

    /// Layer 1 under pressure: results still sent whole and over
    /// [`RELIEF_RESULT_BYTES`], wherever they are (the most recent batch
    /// included, and results kept before), largest first (the newest first
    /// among equals), until what their previews save reaches `needed`
    /// characters — or all of them, when that is not enough. Nothing is
    /// recorded: a result is replaced when its spill worked
    /// ([`Ledger::spilled`]), which turns a decision to keep it into one to
    /// replace it, once; the request prefix changes there as it would after a
    /// summary.
    pub fn relief(&self, messages: &[Message], needed: u64) -> OffloadPlan {
        let mut candidates: Vec<(usize, &ToolResult)> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Tool)
            .flat_map(|(index, m)| m.tool_results_iter().map(move |r| (index, r)))
            .filter(|(_, result)| {
                !matches!(
                    self.decisions.get(&result.call_id),
                    Some(Decision::Replaced { .. })
                ) && !has_image(result)
                    && result.content_bytes() > RELIEF_RESULT_BYTES
            })
            .collect();
        candidates.sort_by_key(|(index, result)| {
            (
                std::cmp::Reverse(result.content_bytes()),
                std::cmp::Reverse(*index),
            )
        });
        let mut plan = OffloadPlan::default();
        let mut saved: u64 = 0;
        for (_, result) in candidates {
            if saved >= needed {
                break;
            }
            let text = result.joined_text();
            saved += (text.len() - head(&text).len()).saturating_sub(PREVIEW_FRAME_BYTES) as u64;
            plan.spill.push(SpillOrder {
                call_id: result.call_id.clone(),
                text,
            });
        }
        plan
    }

    /// Records a spill that worked: the result is sent as a preview from now on.
    pub fn spilled(&mut self, call_id: &str, path: &str) {
        self.decisions.insert(
            call_id.to_string(),
            Decision::Replaced {
                path: path.to_string(),
            },
        );
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
                                Some(Decision::Replaced { path }) => {
                                    ContentBlock::ToolResult(ToolResult::text(
                                        result.call_id.clone(),
                                        preview(&result.joined_text(), path),
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

    /// Characters of `messages` as [`Ledger::apply`] sends them (a replaced
    /// result counts its preview), without building them.
    pub fn sent_chars(&self, messages: &[Message]) -> u64 {
        messages
            .iter()
            .map(|message| {
                let mut chars = message.char_len() as u64;
                for result in message.tool_results_iter() {
                    if let Some(Decision::Replaced { path }) = self.decisions.get(&result.call_id) {
                        let sent = preview(&result.joined_text(), path).len() as u64;
                        chars = chars - result.content_bytes() as u64 + sent;
                    }
                }
                chars
            })
            .sum()
    }

    /// Forgets the decisions of results no longer in `messages` (after a
    /// summary replaced them).
    pub fn retain_for(&mut self, messages: &[Message]) {
        let present: std::collections::HashSet<&str> = messages
            .iter()
            .flat_map(|m| m.tool_results_iter().map(|r| r.call_id.as_str()))
            .collect();
        self.decisions.retain(|id, _| present.contains(id.as_str()));
        self.scanned = 0;
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
pub(crate) fn preview(text: &str, path: &str) -> String {
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
pub(crate) fn head(text: &str) -> &str {
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
    use troupe_protocol::model::ToolCall;

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
        let orders = ledger.plan(&history).spill;
        assert_eq!(orders.len(), 1);
        assert_eq!(orders[0].call_id, "a");
        ledger.spilled(&orders[0].call_id, "/spill/a");
        let sent = ledger.apply(&history);
        let text = sent[2].tool_results_iter().next().unwrap().joined_text();
        assert!(
            text.starts_with("[content offloaded] original size: 51201 bytes\n[saved to] /spill/a")
        );
        assert!(text.ends_with("instead of guessing from this preview."));
        // Later turns: nothing more to decide, the same request.
        assert!(ledger.plan(&history).is_empty());
        assert_eq!(ledger.apply(&history), sent);
        let applied: u64 = sent.iter().map(|m| m.char_len() as u64).sum();
        assert_eq!(ledger.sent_chars(&history), applied);
        assert_eq!(spill_file_name("toolu_01AbC"), "result-toolu_01AbC");
        assert!(!spill_file_name("../../etc/passwd").contains('/'));
        assert_ne!(spill_file_name("a/b"), spill_file_name("a/c"));
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
        let plan = ledger.plan(&history);
        assert_eq!(ledger.get("small"), Some(&Decision::Kept));
        assert_eq!(plan.kept.len(), 1);
        assert_eq!(plan.spill.len(), 1);
        // The spill failed: not recorded, planned again next turn (the kept
        // one is not decided twice).
        let again = ledger.plan(&history);
        assert_eq!(again.spill, plan.spill);
        assert!(again.kept.is_empty());
        assert_eq!(ledger.apply(&history), history);
    }

    #[test]
    fn a_plan_starts_after_the_messages_already_decided() {
        let mut history = vec![Message::user_text("go"), call("a"), results(&[("a", 10)])];
        let mut ledger = Ledger::default();
        ledger.plan(&history);
        assert_eq!(ledger.scanned, 3);
        history.push(call("big"));
        history.push(results(&[("big", SINGLE_RESULT_BYTES * 2)]));
        history.push(call("b"));
        history.push(results(&[("b", 10)]));
        let plan = ledger.plan(&history);
        assert_eq!((plan.spill.len(), plan.kept.len()), (1, 1));
        assert_eq!(ledger.scanned, 4, "stops at the message still to spill");
        ledger.spilled("big", "/s/big");
        assert!(ledger.plan(&history).is_empty());
        assert_eq!(ledger.scanned, history.len());
        // A replaced history is planned from its start again.
        let compacted = vec![
            Message::user_text("summary"),
            call("c"),
            results(&[("c", 10)]),
        ];
        ledger.retain_for(&compacted);
        assert_eq!(ledger.plan(&compacted).kept.len(), 1);
        // A history shorter than what was seen is planned whole.
        let mut other = Ledger::default();
        other.plan(&history);
        assert_eq!(other.plan(&history[..3]).kept.len(), 0);
        assert_eq!(other.scanned, 3);
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
            .spill
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
    fn under_pressure_large_results_go_even_recent_and_kept_ones_largest_first() {
        let kb = 1024;
        let history = vec![
            Message::user_text("go"),
            call("old"),
            results(&[("old", 20 * kb), ("tiny", 4 * kb)]),
            call("a"),
            results(&[
                ("a", 45 * kb),
                ("b", 48 * kb),
                ("c", 49 * kb),
                ("d", 30 * kb),
            ]),
        ];
        let mut ledger = Ledger::default();
        assert!(
            ledger.plan(&history).spill.is_empty(),
            "kept by the usual rule"
        );
        assert_eq!(ledger.get("b"), Some(&Decision::Kept));
        let ids = |plan: OffloadPlan| -> Vec<String> {
            plan.spill.into_iter().map(|order| order.call_id).collect()
        };
        // Largest first, until enough is saved.
        assert_eq!(ids(ledger.relief(&history, 1)), ["c"]);
        assert_eq!(ids(ledger.relief(&history, 60_000)), ["c", "b"]);
        // Not enough to save: every result over the floor, the small ones never.
        assert_eq!(
            ids(ledger.relief(&history, u64::MAX)),
            ["c", "b", "a", "d", "old"]
        );
        // A spill that worked turns a kept result into a replaced one, and it
        // is not planned again.
        ledger.spilled("c", "/s/c");
        assert!(matches!(ledger.get("c"), Some(Decision::Replaced { .. })));
        assert_eq!(ids(ledger.relief(&history, 1)), ["b"]);
        assert!(ledger.plan(&history).is_empty());
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
    fn the_ledger_survives_the_store_and_forgets_what_is_gone() {
        let history = vec![call("a"), results(&[("a", SINGLE_RESULT_BYTES + 5)])];
        let mut ledger = Ledger::default();
        let orders = ledger.plan(&history).spill;
        ledger.spilled(&orders[0].call_id, "/s/a");
        let entry = ledger.entry("a", 51_205).unwrap();
        assert!(entry.replaced);
        let back = Ledger::from_entries(&[entry]);
        assert_eq!(back, ledger);
        assert_eq!(back.replaced(), 1);
        let mut trimmed = back.clone();
        trimmed.retain_for(&[Message::user_text("summary")]);
        assert_eq!(trimmed, Ledger::default());
    }
}
