//! The records the session store keeps (SPEC §9, §10) and the pure rules that
//! derive session metadata from messages (title, message count, update time).
//!
//! These are plain serde types; how they are keyed and enveloped is
//! `store::layout`'s business, and this module touches no database.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{Message, Role};
use troupe_protocol::task_plan::TaskPlan;

/// SPEC §9: a session title is the first user message, at most this many
/// characters.
pub const TITLE_MAX_CHARS: usize = 50;

/// What a caller provides to create a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSession {
    /// The session id (a UUID in practice; no NUL, at most 256 bytes).
    pub id: String,
    /// The working directory the session runs in.
    pub cwd: PathBuf,
    /// Provider name from the configuration.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// The parent session, for sub-agents and forks; `None` for a top-level
    /// session.
    pub parent: Option<String>,
    /// Where the session's agent sits in its run's agent tree (for example
    /// `main/explorer-1`); `None` for a top-level session.
    #[serde(default)]
    pub agent_path: Option<String>,
    /// The run that created this child session; `None` for a top-level
    /// session.
    #[serde(default)]
    pub run_id: Option<String>,
    /// For a fork: its history begins with the first messages of another
    /// session, read from there instead of being copied.
    #[serde(default)]
    pub fork_of: Option<ForkBase>,
}

/// Where a fork's history begins: the first `len` messages of `session` (its
/// parent's, stored and flushed before the fork exists, never rewritten by
/// the parent's later turns). The fork's own records start at index `len`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkBase {
    /// The session holding the shared beginning.
    pub session: String,
    /// How many of its messages the fork shares.
    pub len: u64,
}

/// What listing shows of a session (SPEC §9), kept apart from its history so
/// listing reads no messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The session id.
    pub id: String,
    /// The first user message, whitespace collapsed, at most
    /// [`TITLE_MAX_CHARS`] characters; empty until there is one.
    pub title: String,
    /// The working directory.
    pub cwd: PathBuf,
    /// Provider name.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// When the session was created.
    pub created: DateTime<Utc>,
    /// When a message was last written.
    pub updated: DateTime<Utc>,
    /// Number of messages of the full history (highest stored index + 1).
    pub message_count: u64,
    /// The parent session, for sub-agents and forks; `None` for a top-level
    /// session.
    #[serde(default)]
    pub parent: Option<String>,
    /// Where the session's agent sits in its run's agent tree (for example
    /// `main/explorer-1`); `None` for a top-level session. Records written
    /// before this field existed read as `None`.
    #[serde(default)]
    pub agent_path: Option<String>,
    /// The run that created this child session; `None` for a top-level
    /// session. Records written before this field existed read as `None`.
    #[serde(default)]
    pub run_id: Option<String>,
    /// For a fork: the session and length its history begins with.
    #[serde(default)]
    pub fork_of: Option<ForkBase>,
    /// For a branch: the session whose conversation was rewound, leaving
    /// this copy of its whole history behind. Records written before this
    /// field existed read as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_of: Option<Branch>,
}

/// Where a branch comes from: `session` was rewound to its first `cut_len`
/// messages at `at`, and the branch keeps the history it had before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    /// The rewound session (which kept its id).
    pub session: String,
    /// How many messages the rewound session kept.
    pub cut_len: u64,
    /// When the rewind happened.
    pub at: DateTime<Utc>,
}

/// A rewind the session's next prompt tells the model of: `note` goes
/// before the prompt's text, once, and the run that carries it emits the
/// `rewound` event with the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRewind {
    /// The short note for the model.
    pub note: String,
    /// The run (1-based, in start order) the conversation was rewound to.
    pub to_run: u64,
    /// The branch session keeping the history from before.
    pub branch: String,
    /// How many messages were removed.
    pub removed_messages: u64,
    /// Whether the files were restored too.
    pub files_restored: bool,
}

impl SessionMeta {
    /// Whether this is a child session (a sub-agent's or a fork's transcript).
    pub fn is_child(&self) -> bool {
        self.parent.is_some()
    }
}

/// The stored form of a session's metadata: the listed part plus what the
/// title rule needs to stay correct when messages arrive out of order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    /// The listed metadata.
    pub meta: SessionMeta,
    /// Index of the message the title was taken from.
    #[serde(default)]
    pub title_index: Option<u64>,
    /// The rewind the next prompt tells of (kept in the head, never in the
    /// `sessions` record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<PendingRewind>,
}

impl SessionRecord {
    /// A fresh record for a new session created at `now`.
    pub(crate) fn new(new: &NewSession, now: DateTime<Utc>) -> Self {
        Self {
            meta: SessionMeta {
                id: new.id.clone(),
                title: String::new(),
                cwd: new.cwd.clone(),
                provider: new.provider.clone(),
                model: new.model.clone(),
                created: now,
                updated: now,
                message_count: 0,
                parent: new.parent.clone(),
                agent_path: new.agent_path.clone(),
                run_id: new.run_id.clone(),
                fork_of: new.fork_of.clone(),
                branch_of: None,
            },
            title_index: None,
            rewind: None,
        }
    }

    /// Applies the write of message `index` at `now`: the count covers the
    /// index, the update time moves, and the title comes from the earliest
    /// user message with text.
    pub(crate) fn apply_message(&mut self, index: u64, message: &Message, now: DateTime<Utc>) {
        self.meta.message_count = self.meta.message_count.max(index.saturating_add(1));
        self.meta.updated = now;
        let may_title = self.title_index.is_none_or(|current| index <= current);
        if may_title && message.role == Role::User {
            let title = session_title(&message.text());
            if !title.is_empty() {
                self.meta.title = title;
                self.title_index = Some(index);
            }
        }
    }

    /// Applies the removal of every message from index `len` on at `now`.
    pub(crate) fn apply_truncate(&mut self, len: u64, now: DateTime<Utc>) {
        self.meta.message_count = self.meta.message_count.min(len);
        self.meta.updated = now;
        if self.title_index.is_some_and(|index| index >= len) {
            self.meta.title.clear();
            self.title_index = None;
        }
    }
}

/// The part of a session's metadata that its message writes change: the
/// count, the update time and the title. It is kept in the `messages` tree
/// beside the messages (key `session_id 0x00`), so one batch into one tree
/// writes a step's messages together with the metadata they change; the
/// `sessions` record keeps what never changes after creation. A store
/// written before heads existed has none: the `sessions` record's own
/// fields are the head then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionHead {
    /// Number of messages of the full history (highest stored index + 1).
    pub message_count: u64,
    /// When a message was last written.
    pub updated: DateTime<Utc>,
    /// The session's title.
    pub title: String,
    /// Index of the message the title was taken from.
    #[serde(default)]
    pub title_index: Option<u64>,
    /// A rewind the next prompt tells of, until that prompt is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<PendingRewind>,
}

impl SessionRecord {
    /// The head of this record's metadata.
    pub(crate) fn head(&self) -> SessionHead {
        SessionHead {
            message_count: self.meta.message_count,
            updated: self.meta.updated,
            title: self.meta.title.clone(),
            title_index: self.title_index,
            rewind: self.rewind.clone(),
        }
    }

    /// This record with `head` in place of its own count, update time and
    /// title.
    pub(crate) fn with_head(mut self, head: SessionHead) -> Self {
        self.meta.message_count = head.message_count;
        self.meta.updated = head.updated;
        self.meta.title = head.title;
        self.title_index = head.title_index;
        self.rewind = head.rewind;
        self
    }
}

/// SPEC §9: the title of a session from its first user message: whitespace
/// runs collapsed to one space, trimmed, cut to at most [`TITLE_MAX_CHARS`]
/// characters on a character boundary.
pub(crate) fn session_title(text: &str) -> String {
    let mut title = String::new();
    let mut chars = 0usize;
    for word in text.split_whitespace() {
        if chars > 0 {
            if chars == TITLE_MAX_CHARS {
                break;
            }
            title.push(' ');
            chars += 1;
        }
        for ch in word.chars() {
            if chars == TITLE_MAX_CHARS {
                break;
            }
            title.push(ch);
            chars += 1;
        }
    }
    let trimmed = title.trim_end().len();
    title.truncate(trimmed);
    title
}

/// A history loaded for resume (SPEC §9): the summary of the last compaction
/// marker, then every message kept after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedHistory {
    /// The summary messages of the last marker, then the stored messages from
    /// its `first_kept` on, oldest first; unreadable records are left out.
    pub messages: Vec<Message>,
    /// Full-history index of `messages[summary_len]` (the marker's
    /// `first_kept`, 0 without a marker).
    pub first_index: u64,
    /// How many leading messages are the marker's summary.
    pub summary_len: usize,
    /// Message records that could not be used (undecodable, truncated, a
    /// missing range), with the reason; loading carries on past them.
    pub skipped: Vec<SkippedRecord>,
    /// When the session last had a message written.
    pub last_updated: Option<DateTime<Utc>>,
    /// The index the next message gets: the session's message count.
    pub next_index: u64,
    /// Compaction markers that could not be decoded (index = the marker's
    /// sequence number); an earlier readable marker was used instead.
    pub skipped_markers: Vec<SkippedRecord>,
}

/// A stored record that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedRecord {
    /// Full-history index of the message (for a gap, its first missing index).
    pub index: u64,
    /// Why it was skipped.
    pub reason: String,
}

/// A compaction marker (SPEC §10): from here on, the history is the summary
/// followed by the messages from `first_kept` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionMarker {
    /// Full-history index of the first message kept verbatim.
    pub first_kept: u64,
    /// The messages that replace everything before `first_kept`.
    pub summary: Vec<Message>,
    /// When the compaction happened.
    pub created: DateTime<Utc>,
    /// Estimated tokens before.
    pub before_tokens: u64,
    /// Estimated tokens after.
    pub after_tokens: u64,
}

/// One layer-1 decision (SPEC §10), recorded once per call id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The tool call whose result was judged.
    pub call_id: String,
    /// Whether the result is replaced by a preview.
    pub replaced: bool,
    /// Where the full result was spilled, when replaced.
    pub spill_path: Option<PathBuf>,
    /// Size of the original result in bytes.
    pub original_bytes: u64,
}

/// The state of a run: still running, or ended with a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "RunStateName", into = "RunStateName")]
pub enum RunState {
    /// The run is active (or its process died and nobody has marked it yet).
    Running,
    /// The run ended.
    Ended(RunStatus),
}

impl RunState {
    /// Whether the run is still marked running.
    pub fn is_running(self) -> bool {
        self == Self::Running
    }

    /// The name stored and shown: `running` or the status name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ended(status) => status.as_str(),
        }
    }
}

/// The serialised form of [`RunState`]: one flat name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RunStateName {
    Running,
    Finished,
    Stopped,
    Cancelled,
    Error,
    Interrupted,
}

impl From<RunStateName> for RunState {
    fn from(name: RunStateName) -> Self {
        match name {
            RunStateName::Running => Self::Running,
            RunStateName::Finished => Self::Ended(RunStatus::Finished),
            RunStateName::Stopped => Self::Ended(RunStatus::Stopped),
            RunStateName::Cancelled => Self::Ended(RunStatus::Cancelled),
            RunStateName::Error => Self::Ended(RunStatus::Error),
            RunStateName::Interrupted => Self::Ended(RunStatus::Interrupted),
        }
    }
}

impl From<RunState> for RunStateName {
    fn from(state: RunState) -> Self {
        match state {
            RunState::Running => Self::Running,
            RunState::Ended(RunStatus::Finished) => Self::Finished,
            RunState::Ended(RunStatus::Stopped) => Self::Stopped,
            RunState::Ended(RunStatus::Cancelled) => Self::Cancelled,
            RunState::Ended(RunStatus::Error) => Self::Error,
            RunState::Ended(RunStatus::Interrupted) => Self::Interrupted,
        }
    }
}

/// One run of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub run_id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The prompt as submitted.
    pub prompt: String,
    /// Running, or how it ended.
    pub status: RunState,
    /// The stop reason once ended (`end_turn`, `max_turns`, ...).
    pub stop_reason: Option<String>,
    /// When it started.
    pub started: DateTime<Utc>,
    /// When it ended.
    pub ended: Option<DateTime<Utc>>,
    /// The process that ran it.
    pub pid: u32,
    /// Where the run sits in its session's history; `None` for a run
    /// recorded before boundaries were kept (it cannot be rewound to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<RunBounds>,
}

/// Where a run begins and ends in its session's history, and the store's
/// order when it ended: a compaction marker, ledger entry, pending result or
/// task plan stored with a higher order was made after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBounds {
    /// The history's length when the run's prompt was added (the prompt's
    /// index).
    pub start: u64,
    /// The history's length when the run ended; `None` while it runs.
    #[serde(default)]
    pub end: Option<u64>,
    /// The store's order (a database-wide increasing id) taken when the run
    /// ended.
    #[serde(default)]
    pub end_order: Option<u64>,
}

/// A tool result stored before its turn's tool message, with the order it
/// arrived in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingRecord {
    /// Arrival order (a database-wide increasing id).
    pub order: u64,
    /// The result.
    pub result: troupe_protocol::model::ToolResult,
}

/// A ledger entry with the order it was recorded in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LedgerRecord {
    /// Recording order (a database-wide increasing id).
    pub order: u64,
    /// The entry.
    pub entry: LedgerEntry,
}

/// A task plan as stored: with the order it was set in, or bare (written
/// before plans were stamped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum StoredTaskPlan {
    /// A plan with the order it was set in (a database-wide increasing id).
    Stamped {
        /// When it was set, in the store's order.
        order: u64,
        /// The plan.
        plan: TaskPlan,
    },
    /// A plan written before plans were stamped.
    Bare(TaskPlan),
}

impl StoredTaskPlan {
    /// The plan itself.
    pub(crate) fn into_plan(self) -> TaskPlan {
        match self {
            Self::Stamped { plan, .. } | Self::Bare(plan) => plan,
        }
    }

    /// The order it was set in; `None` for a plan from before stamps.
    pub(crate) fn order(&self) -> Option<u64> {
        match self {
            Self::Stamped { order, .. } => Some(*order),
            Self::Bare(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use troupe_protocol::model::ContentBlock;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).single().unwrap()
    }

    fn record() -> SessionRecord {
        SessionRecord::new(
            &NewSession {
                id: "s".into(),
                cwd: "/repo".into(),
                provider: "claude".into(),
                model: "m".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            },
            at(0),
        )
    }

    #[test]
    fn title_collapses_whitespace_and_cuts_on_characters() {
        assert_eq!(session_title("  fix\n\tthe   bug  "), "fix the bug");
        assert_eq!(session_title(""), "");
        assert_eq!(session_title(" \n "), "");
        let long = "é".repeat(80);
        let title = session_title(&long);
        assert_eq!(title.chars().count(), TITLE_MAX_CHARS);
        let emoji = "🚀".repeat(60);
        assert_eq!(session_title(&emoji), "🚀".repeat(TITLE_MAX_CHARS));
        // A cut right after a word leaves no trailing space.
        let words = format!("{} next", "a".repeat(TITLE_MAX_CHARS - 1));
        assert_eq!(session_title(&words), "a".repeat(TITLE_MAX_CHARS - 1));
        let exact = format!("{} b", "a".repeat(TITLE_MAX_CHARS - 2));
        assert_eq!(session_title(&exact).chars().count(), TITLE_MAX_CHARS);
    }

    #[test]
    fn message_count_is_highest_index_plus_one() {
        let mut rec = record();
        rec.apply_message(4, &Message::assistant_text("x"), at(5));
        assert_eq!(rec.meta.message_count, 5);
        rec.apply_message(2, &Message::assistant_text("y"), at(6));
        assert_eq!(rec.meta.message_count, 5);
        assert_eq!(rec.meta.updated, at(6));
        assert_eq!(rec.meta.created, at(0));
    }

    #[test]
    fn title_comes_from_the_earliest_user_message_with_text() {
        let mut rec = record();
        rec.apply_message(0, &Message::assistant_text("not a user"), at(1));
        assert_eq!(rec.meta.title, "");
        let image_only = Message {
            role: Role::User,
            content: vec![ContentBlock::Image {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }],
        };
        rec.apply_message(1, &image_only, at(1));
        assert_eq!(rec.meta.title, "");
        rec.apply_message(3, &Message::user_text("later"), at(2));
        assert_eq!(rec.meta.title, "later");
        rec.apply_message(5, &Message::user_text("even later"), at(3));
        assert_eq!(rec.meta.title, "later");
        rec.apply_message(2, &Message::user_text("earlier"), at(4));
        assert_eq!(rec.meta.title, "earlier");
        assert_eq!(rec.title_index, Some(2));
        // Overwriting the title message rewrites the title.
        rec.apply_message(2, &Message::user_text("rewritten"), at(5));
        assert_eq!(rec.meta.title, "rewritten");
    }

    #[test]
    fn truncate_lowers_the_count_and_forgets_a_removed_title() {
        let mut rec = record();
        rec.apply_message(0, &Message::user_text("first"), at(1));
        rec.apply_message(1, &Message::assistant_text("a"), at(1));
        rec.apply_truncate(1, at(2));
        assert_eq!(rec.meta.message_count, 1);
        assert_eq!(rec.meta.title, "first");
        rec.apply_truncate(0, at(3));
        assert_eq!(rec.meta.message_count, 0);
        assert_eq!(rec.meta.title, "");
        assert_eq!(rec.title_index, None);
        rec.apply_truncate(7, at(4));
        assert_eq!(rec.meta.message_count, 0);
    }

    #[test]
    fn a_head_carries_the_changing_metadata_and_nothing_else() {
        let mut rec = record();
        rec.apply_message(0, &Message::user_text("first"), at(1));
        rec.apply_message(1, &Message::assistant_text("a"), at(2));
        let head = rec.head();
        assert_eq!(
            (head.message_count, head.updated, head.title.as_str()),
            (2, at(2), "first")
        );
        let fresh = record().with_head(head);
        assert_eq!(fresh, rec);
        assert_eq!(fresh.meta.created, at(0));
    }

    #[test]
    fn records_written_before_child_sessions_still_decode() {
        // A session record as stored before `agent_path` and `run_id` existed.
        let old = br#"{"v":1,"data":{"meta":{"id":"s","title":"fix it","cwd":"/repo","provider":"claude","model":"m","created":"2026-11-01T00:00:00Z","updated":"2026-11-02T00:00:00Z","message_count":3,"parent":null},"title_index":0}}"#;
        let record: SessionRecord = crate::layout::decode(old).unwrap();
        assert_eq!(record.meta.id, "s");
        assert_eq!(record.meta.message_count, 3);
        assert_eq!(record.meta.parent, None);
        assert_eq!(record.meta.agent_path, None);
        assert_eq!(record.meta.run_id, None);
        assert!(!record.meta.is_child());
        assert_eq!(record.title_index, Some(0));

        // Without `parent` too, and a child record keeps its new fields.
        let older = br#"{"id":"s","title":"","cwd":"/","provider":"p","model":"m","created":"2026-11-01T00:00:00Z","updated":"2026-11-01T00:00:00Z","message_count":0}"#;
        let meta: SessionMeta = serde_json::from_slice(older).unwrap();
        assert_eq!(
            (meta.parent, meta.agent_path, meta.run_id),
            (None, None, None)
        );
        let new: NewSession = serde_json::from_str(
            r#"{"id":"s","cwd":"/","provider":"p","model":"m","parent":null}"#,
        )
        .unwrap();
        assert_eq!((new.agent_path, new.run_id), (None, None));

        let child = SessionRecord::new(
            &NewSession {
                id: "c".into(),
                cwd: "/repo".into(),
                provider: "claude".into(),
                model: "m".into(),
                parent: Some("s".into()),
                agent_path: Some("main/fork-1".into()),
                run_id: Some("r".into()),
                fork_of: None,
            },
            at(0),
        );
        let bytes = crate::layout::encode(&child).unwrap();
        let back: SessionRecord = crate::layout::decode(&bytes).unwrap();
        assert_eq!(back, child);
        assert!(back.meta.is_child());
        assert_eq!(back.meta.agent_path.as_deref(), Some("main/fork-1"));
        assert_eq!(back.meta.run_id.as_deref(), Some("r"));
    }

    #[test]
    fn run_state_serialises_as_one_name() {
        let json = serde_json::to_string(&RunState::Running).unwrap();
        assert_eq!(json, "\"running\"");
        let json = serde_json::to_string(&RunState::Ended(RunStatus::Interrupted)).unwrap();
        assert_eq!(json, "\"interrupted\"");
        for status in [
            RunStatus::Finished,
            RunStatus::Stopped,
            RunStatus::Cancelled,
            RunStatus::Error,
            RunStatus::Interrupted,
        ] {
            let state = RunState::Ended(status);
            let back: RunState =
                serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
            assert_eq!(back, state);
            assert_eq!(state.as_str(), status.as_str());
            assert!(!state.is_running());
        }
        assert!(RunState::Running.is_running());
        assert!(serde_json::from_str::<RunState>("\"paused\"").is_err());
    }
}
