//! Work ahead: from [`super::WORK_AHEAD_PERCENT`] of the threshold a summary
//! of the older history is prepared while the agent goes on; at the threshold
//! it is swapped in with no model call on the agent's path — if the history
//! still starts with exactly what it summarised. A prepared summary is tied
//! to that prefix by a [`PrefixKey`] (how many messages, and a hash of them);
//! one whose prefix changed (another compaction replaced it) is stale and
//! discarded.

use std::hash::{Hash, Hasher};

use troupe_protocol::model::{Message, Role};

use super::work_ahead_threshold;

/// The history prefix a prepared summary was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrefixKey {
    /// Messages summarised: the history's first `len`.
    pub len: usize,
    /// Hash of those messages.
    pub hash: u64,
}

/// The key of `messages[..cut]` (`cut` is clamped to the history).
pub(crate) fn prefix_key(messages: &[Message], cut: usize) -> PrefixKey {
    let len = cut.min(messages.len());
    // Deterministic within the process, which is all a key must be: it never
    // leaves the loop that made it.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for message in &messages[..len] {
        match serde_json::to_vec(message) {
            Ok(bytes) => bytes.hash(&mut hasher),
            // A message that does not serialise hashes by its text; the
            // count still pins the prefix.
            Err(_) => message.text().hash(&mut hasher),
        }
    }
    PrefixKey {
        len,
        hash: hasher.finish(),
    }
}

/// Whether a summary prepared for `key` still fits `messages`: they start
/// with the very prefix it summarised, and the message after it (where the
/// kept tail begins) exists and is not a tool message, so no call is
/// separated from its results.
pub(crate) fn still_matches(key: &PrefixKey, messages: &[Message]) -> bool {
    key.len > 0
        && messages
            .get(key.len)
            .is_some_and(|first_kept| first_kept.role != Role::Tool)
        && prefix_key(messages, key.len) == *key
}

/// Whether to start preparing a summary now: the estimate is at
/// [`super::WORK_AHEAD_PERCENT`] of the `threshold` or more but below it (at
/// the threshold the summary is due, not prepared).
pub(crate) fn should_prepare(estimate: u64, threshold: u64) -> bool {
    estimate >= work_ahead_threshold(threshold) && estimate < threshold
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::{ContentBlock, ToolCall, ToolResult};

    fn history() -> Vec<Message> {
        vec![
            Message::user_text("fix the build"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    input: "{}".into(),
                })],
            },
            Message::tool_results(vec![ToolResult::text("c1", "contents", false)]),
            Message::assistant_text("read it"),
            Message::user_text("now test"),
            Message::assistant_text("tested"),
        ]
    }

    #[test]
    fn a_prepared_summary_stays_valid_while_the_history_only_grows() {
        let mut messages = history();
        let key = prefix_key(&messages, 3);
        assert!(still_matches(&key, &messages));
        messages.push(Message::user_text("more"));
        messages.push(Message::assistant_text("done"));
        assert!(still_matches(&key, &messages), "appending keeps it valid");
    }

    #[test]
    fn a_changed_prefix_makes_it_stale() {
        let messages = history();
        let key = prefix_key(&messages, 3);
        // Another compaction replaced the older messages.
        let mut compacted = vec![Message::user_text("summary of the start")];
        compacted.extend_from_slice(&messages[3..]);
        assert!(!still_matches(&key, &compacted));
        // Same length, one message different.
        let mut edited = messages.clone();
        edited[0] = Message::user_text("fix the tests");
        assert!(!still_matches(&key, &edited));
        // Shorter than the prefix.
        assert!(!still_matches(&key, &messages[..2]));
        // Nothing after the prefix: no tail to keep.
        assert!(!still_matches(&key, &messages[..3]));
    }

    #[test]
    fn a_cut_before_tool_results_or_of_nothing_never_matches() {
        let messages = history();
        assert!(
            !still_matches(&prefix_key(&messages, 2), &messages),
            "the tail would start with results"
        );
        assert!(!still_matches(&prefix_key(&messages, 0), &messages));
        assert_eq!(prefix_key(&messages, 99).len, messages.len());
    }

    #[test]
    fn preparing_starts_at_seventy_percent_and_stops_at_the_threshold() {
        assert!(!should_prepare(6_999, 10_000));
        assert!(should_prepare(7_000, 10_000));
        assert!(should_prepare(9_999, 10_000));
        assert!(!should_prepare(10_000, 10_000));
    }
}
