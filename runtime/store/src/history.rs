//! Assembling a resumable history from stored records (SPEC §9 resume: "load
//! from the last compaction marker, skip unreadable records").
//!
//! Pure: it receives already-read `(index, decoded or reason)` pairs in key
//! order and decides what goes into the history and what is reported as
//! skipped (undecodable records and missing index ranges). It never reads the
//! database and never repairs the conversation itself (pairing calls with
//! results is the resume repair's job, outside the store).

use chrono::{DateTime, Utc};

use super::records::{CompactionMarker, LoadedHistory, SkippedRecord};
use troupe_protocol::model::Message;

/// Builds a [`LoadedHistory`] from the records read after a marker.
#[derive(Debug)]
pub(crate) struct HistoryBuilder {
    messages: Vec<Message>,
    skipped: Vec<SkippedRecord>,
    first_index: u64,
    summary_len: usize,
    next_expected: u64,
}

impl HistoryBuilder {
    /// Starts from `marker` (or from the beginning without one), expecting
    /// about `capacity` messages.
    pub(super) fn new(marker: Option<CompactionMarker>, capacity: usize) -> Self {
        let (first_index, summary) = match marker {
            Some(marker) => (marker.first_kept, marker.summary),
            None => (0, Vec::new()),
        };
        let summary_len = summary.len();
        let mut messages = summary;
        messages.reserve(capacity);
        Self {
            messages,
            skipped: Vec::new(),
            first_index,
            summary_len,
            next_expected: first_index,
        }
    }

    /// Adds the record of message `index` (records arrive in increasing index
    /// order, none below the marker's `first_kept`).
    pub(super) fn push(&mut self, index: u64, decoded: Result<Message, String>) {
        if index > self.next_expected {
            self.skipped.push(gap(self.next_expected, index));
        }
        self.next_expected = index.saturating_add(1);
        match decoded {
            Ok(message) => self.messages.push(message),
            Err(reason) => self.skipped.push(SkippedRecord { index, reason }),
        }
    }

    /// Records a key in the session's range that is not a message key.
    pub(super) fn push_bad_key(&mut self, key: &[u8]) {
        self.skipped.push(SkippedRecord {
            index: self.next_expected,
            reason: format!("record with a malformed key ({} bytes) ignored", key.len()),
        });
    }

    /// Finishes: messages expected up to `message_count` but never seen are
    /// reported as a gap.
    pub(super) fn finish(
        mut self,
        message_count: u64,
        last_updated: Option<DateTime<Utc>>,
        skipped_markers: Vec<SkippedRecord>,
    ) -> LoadedHistory {
        if message_count > self.next_expected {
            self.skipped.push(gap(self.next_expected, message_count));
        }
        LoadedHistory {
            messages: self.messages,
            first_index: self.first_index,
            summary_len: self.summary_len,
            skipped: self.skipped,
            last_updated,
            next_index: message_count.max(self.next_expected),
            skipped_markers,
        }
    }
}

/// The record reporting that messages `from..to` are missing.
fn gap(from: u64, to: u64) -> SkippedRecord {
    let count = to - from;
    let reason = if count == 1 {
        format!("message {from} is missing")
    } else {
        format!(
            "messages {from} to {} are missing ({count} messages)",
            to - 1
        )
    };
    SkippedRecord {
        index: from,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(first_kept: u64) -> CompactionMarker {
        CompactionMarker {
            first_kept,
            summary: vec![Message::user_text("summary")],
            created: Utc::now(),
            before_tokens: 100,
            after_tokens: 10,
        }
    }

    #[test]
    fn without_marker_loads_everything_in_order() {
        let mut builder = HistoryBuilder::new(None, 3);
        for i in 0..3 {
            builder.push(i, Ok(Message::user_text(format!("m{i}"))));
        }
        let history = builder.finish(3, None, Vec::new());
        assert_eq!(history.messages.len(), 3);
        assert_eq!(history.first_index, 0);
        assert_eq!(history.summary_len, 0);
        assert_eq!(history.next_index, 3);
        assert!(history.skipped.is_empty());
    }

    #[test]
    fn marker_summary_comes_first() {
        let mut builder = HistoryBuilder::new(Some(marker(5)), 2);
        builder.push(5, Ok(Message::user_text("five")));
        builder.push(6, Ok(Message::assistant_text("six")));
        let history = builder.finish(7, None, Vec::new());
        assert_eq!(history.summary_len, 1);
        assert_eq!(history.first_index, 5);
        assert_eq!(history.messages[0].text(), "summary");
        assert_eq!(history.messages[1].text(), "five");
        assert!(history.skipped.is_empty());
    }

    #[test]
    fn undecodable_records_and_gaps_are_reported_and_skipped() {
        let mut builder = HistoryBuilder::new(None, 4);
        builder.push(0, Ok(Message::user_text("a")));
        builder.push(1, Err("truncated record".into()));
        builder.push(4, Ok(Message::assistant_text("b")));
        builder.push(6, Ok(Message::user_text("c")));
        let history = builder.finish(9, None, Vec::new());
        assert_eq!(history.messages.len(), 3);
        let reported: Vec<(u64, &str)> = history
            .skipped
            .iter()
            .map(|s| (s.index, s.reason.as_str()))
            .collect();
        assert_eq!(
            reported,
            vec![
                (1, "truncated record"),
                (2, "messages 2 to 3 are missing (2 messages)"),
                (5, "message 5 is missing"),
                (7, "messages 7 to 8 are missing (2 messages)"),
            ]
        );
        assert_eq!(history.next_index, 9);
    }

    #[test]
    fn next_index_covers_records_beyond_the_count() {
        let mut builder = HistoryBuilder::new(None, 1);
        builder.push(0, Ok(Message::user_text("a")));
        let history = builder.finish(0, None, Vec::new());
        assert_eq!(history.next_index, 1);
    }
}
