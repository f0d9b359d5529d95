//! A session as an agent holds it: the [`OpenedSession`] a run continues
//! from, the [`Transcript`] of a live agent (which of its messages are
//! stored, and its task plan), and when an idle session stays in memory. Reading and writing
//! them is the loader's (`troupe-loader`'s `session` module), which repairs a
//! stored history with `resume`'s pure repairs and hands it in as a value.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::history::{close_with, ends_with_assistant};
use crate::resume::RepairReport;
use troupe_protocol::model::Message;
use troupe_protocol::permission::RuleEntry;
use troupe_protocol::task_plan::TaskPlan;
use troupe_store::{CompactionMarker, PendingRewind, SkippedRecord};

/// A session between runs: its history and what it keeps.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    /// The history and what of it is stored.
    pub transcript: Transcript,
    /// When the session was last active (for the pause note).
    pub last_active: Option<DateTime<Utc>>,
    /// "Allow always" rules kept with the session.
    pub rules: Vec<RuleEntry>,
    /// A rewind of the conversation its next prompt tells the model of
    /// (boxed: rare, and a kept session stays small).
    pub rewind: Option<Box<PendingRewind>>,
}

/// A session loaded for its next run.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedSession {
    /// The history to continue from (compaction summary first, if any).
    pub history: Vec<Message>,
    /// How many leading messages are a compaction summary (not message records).
    pub summary_len: usize,
    /// Store index of `history[summary_len]`.
    pub first_index: u64,
    /// What the repair changed (already written back).
    pub report: RepairReport,
    /// Records that could not be read and were left out.
    pub skipped: Vec<SkippedRecord>,
    /// When the session last had a message written.
    pub last_updated: Option<DateTime<Utc>>,
    /// "Allow always" rules kept with the session.
    pub rules: Vec<RuleEntry>,
    /// The task plan kept with the session (`update_plan`), when its agent
    /// made one.
    pub task_plan: Option<TaskPlan>,
    /// A rewind of the conversation its next prompt tells the model of.
    pub rewind: Option<PendingRewind>,
}

impl OpenedSession {
    /// Store index the next appended message gets.
    pub fn next_index(&self) -> u64 {
        self.first_index + (self.history.len() - self.summary_len) as u64
    }

    /// What opening session `id` had to repair, for people (a `notice`), or
    /// `None` when the stored history was clean.
    pub fn repair_notice(&self, id: &str) -> Option<String> {
        let mut parts = Vec::new();
        if !self.skipped.is_empty() {
            parts.push(format!(
                "{} unreadable record(s) of session {id} were skipped",
                self.skipped.len()
            ));
        }
        let report = &self.report;
        if !report.interrupted_calls.is_empty() || !report.recovered_results.is_empty() {
            parts.push(format!(
                "session {id} repaired: {} call(s) answered as interrupted, {} result(s) recovered",
                report.interrupted_calls.len(),
                report.recovered_results.len()
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// How long the session has been idle at `now`.
    pub fn paused_for(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.last_updated
            .and_then(|updated| (now - updated).to_std().ok())
    }
}

/// Whether an idle session last active at `last_active` stays in memory at
/// `now` when sessions are kept for `keep`.
pub fn keep_idle_session(
    last_active: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    keep: chrono::Duration,
) -> bool {
    last_active.is_some_and(|active| now.signed_duration_since(active) < keep)
}

/// The history of a live agent and which of its messages are already stored,
/// with the agent's task plan (kept with the session apart from the messages).
///
/// Messages are stored under their index in the full history; after a
/// compaction the first `summary_len` messages are the summary (kept with the
/// marker, not as message records) and `history[summary_len]` is stored at
/// `first_index`. Every change marks what must be written; [`Transcript::save`]
/// writes exactly that.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    messages: Vec<Message>,
    summary_len: usize,
    first_index: u64,
    /// Messages `[..saved]` are stored as they are in memory.
    saved: usize,
    /// The agent's task plan (`update_plan`), kept beside the history: it
    /// outlives a compaction and goes wherever the history goes.
    task_plan: Option<TaskPlan>,
}

impl Transcript {
    /// An empty transcript of a new session.
    pub fn new() -> Self {
        Self::default()
    }

    /// The transcript of a session opened from the store (all of it stored).
    pub fn from_opened(opened: &OpenedSession) -> Self {
        Self {
            messages: opened.history.clone(),
            summary_len: opened.summary_len,
            first_index: opened.first_index,
            saved: opened.history.len(),
            task_plan: opened.task_plan.clone(),
        }
    }

    /// The transcript of a fork: `history` whose first `shared` messages are
    /// stored in the session it was forked from (its store record names them),
    /// so only the rest is written to the fork's own session.
    pub fn forked(history: Vec<Message>, shared: usize) -> Self {
        Self {
            saved: shared.min(history.len()),
            messages: history,
            summary_len: 0,
            first_index: 0,
            task_plan: None,
        }
    }

    /// How many leading messages are stored at their own index in this
    /// session — what a fork may share instead of copying. `None` when the
    /// history starts with a compaction summary (kept with a marker, not as
    /// message records).
    pub fn shareable_len(&self) -> Option<usize> {
        (self.summary_len == 0 && self.first_index == 0)
            .then_some(self.saved.min(self.messages.len()))
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when there are no messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Closes an early exit with `text` (see `agent::history::close_with`),
    /// marking a changed last message for rewriting.
    pub fn close(&mut self, text: &str) {
        if ends_with_assistant(&self.messages) {
            self.saved = self.saved.min(self.messages.len() - 1);
        }
        close_with(&mut self.messages, text);
    }

    /// Replaces `messages[..cut]` by `summary` (a compaction): returns the
    /// marker to store, which names the store index of the first message
    /// kept. Everything must be stored first (the kept messages stay where
    /// they are stored); a cut inside an earlier summary moves to its end.
    pub fn compact(
        &mut self,
        summary: Vec<Message>,
        cut: usize,
        created: DateTime<Utc>,
        tokens: (u64, u64),
    ) -> CompactionMarker {
        let cut = cut.clamp(self.summary_len, self.messages.len());
        let first_kept = self.first_index + (cut - self.summary_len) as u64;
        let kept = self.messages.split_off(cut);
        self.summary_len = summary.len();
        self.messages = summary.clone();
        self.messages.extend(kept);
        self.first_index = first_kept;
        self.saved = self.messages.len();
        CompactionMarker {
            first_kept,
            summary,
            created,
            before_tokens: tokens.0,
            after_tokens: tokens.1,
        }
    }

    /// The messages not yet stored, with their store indices.
    pub fn unsaved(&self) -> impl Iterator<Item = (u64, &Message)> {
        let start = self.saved.max(self.summary_len);
        self.messages
            .iter()
            .enumerate()
            .skip(start)
            .map(|(i, message)| (self.first_index + (i - self.summary_len) as u64, message))
    }

    /// Copies of the messages not yet stored, with their store indices, and
    /// the length the transcript has: for a writer that stores them away from
    /// the transcript. Once they are durable, [`Transcript::mark_saved`] with
    /// that length. The transcript must not change in between (the agent loop
    /// waits in its saving phase).
    pub fn unsaved_copy(&self) -> (usize, Vec<(u64, Message)>) {
        let messages = self
            .unsaved()
            .map(|(index, message)| (index, message.clone()))
            .collect();
        (self.messages.len(), messages)
    }

    /// The first `upto` messages are stored (the answer to
    /// [`Transcript::unsaved_copy`]).
    pub fn mark_saved(&mut self, upto: usize) {
        self.saved = upto.min(self.messages.len());
    }

    /// True when every message is stored.
    pub fn is_saved(&self) -> bool {
        self.saved >= self.messages.len()
    }

    /// The agent's task plan, if it made one.
    pub fn task_plan(&self) -> Option<&TaskPlan> {
        self.task_plan.as_ref()
    }

    /// Replaces the agent's task plan.
    pub fn set_task_plan(&mut self, plan: TaskPlan) {
        self.task_plan = Some(plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_sessions_stay_in_memory_only_for_the_keeping_time() {
        let now = chrono::Utc::now();
        let keep = chrono::Duration::minutes(15);
        let ago = |minutes| Some(now - chrono::Duration::minutes(minutes));
        assert!(keep_idle_session(ago(1), now, keep));
        assert!(keep_idle_session(ago(14), now, keep));
        assert!(!keep_idle_session(ago(15), now, keep));
        assert!(!keep_idle_session(ago(600), now, keep));
        // Never active: nothing worth keeping.
        assert!(!keep_idle_session(None, now, keep));
        assert!(!keep_idle_session(ago(0), now, chrono::Duration::zero()));
    }
}
