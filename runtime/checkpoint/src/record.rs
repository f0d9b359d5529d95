//! What a checkpoint says: who took it and when ([`SnapshotMeta`], given by
//! the caller), the tree it captured, its parent and what it skipped
//! ([`CheckpointRecord`]).
//!
//! The record is kept in the checkpoint's commit message, as one JSON object
//! after a one-line subject, so a store is self-describing: listing a
//! session's refs and reading their messages gives back every record, with
//! no file beside the store to keep in step. [`encode_message`] and
//! [`decode_message`] are pure.

use serde::{Deserialize, Serialize};

use crate::CheckpointError;
use crate::skip::Skipped;

/// The longest session id accepted.
pub const MAX_SESSION_ID_CHARS: usize = 128;

/// What the caller knows about the moment of a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// The session (names the ref namespace `refs/troupe/SESSION/`).
    pub session: String,
    /// The run within the session.
    pub run: String,
    /// The turn within the run.
    pub turn: u64,
    /// The agent's path in the agent tree (`main`, `main/reviewer`, ...).
    pub agent_path: String,
    /// The tool calls this checkpoint precedes.
    pub tool_call_ids: Vec<String>,
    /// Why it was taken (records written before kinds existed read as
    /// turns).
    #[serde(default)]
    pub kind: CheckpointKind,
}

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// Before the first call of a turn that can change files.
    #[default]
    Turn,
    /// When a run that took checkpoints ended: the files as it left them.
    RunEnd,
    /// Before an undo restored checkpoint number `target`.
    BeforeUndo {
        /// The checkpoint the undo restored.
        target: u64,
    },
    /// Before one agent's turn (checkpoint number `target`) was undone
    /// alone: only the files that turn changed were restored.
    BeforeAgentUndo {
        /// The turn's checkpoint.
        target: u64,
    },
    /// Before a redo restored the state an undo replaced.
    BeforeRedo,
    /// Before a rewind restored the files as run number `to_run` left them
    /// (checkpoint number `target`).
    BeforeRewind {
        /// The run (numbered from 1 in its session) rewound to.
        to_run: u64,
        /// The checkpoint the rewind restored.
        target: u64,
    },
}

impl CheckpointKind {
    /// Whether a snapshot of this kind makes a commit even when the work
    /// tree equals the session's last checkpoint: the records of undos,
    /// redos and rewinds are the session's undo history, so they are kept
    /// whatever the files hold. Pure.
    pub fn always_recorded(self) -> bool {
        !matches!(self, Self::Turn | Self::RunEnd)
    }

    /// Whether a snapshot of this kind by agent `agent` whose files equal
    /// the session's last checkpoint (of kind `head`, by `head_agent`) is
    /// that checkpoint, with no commit: an agent's turns that changed
    /// nothing cost nothing, and so does a run's end that changed nothing
    /// since its last turn. A turn after another agent's turn or after any
    /// other kind (a run's end, an undo) is recorded, so that every turn
    /// that changes files starts from a record of its own agent's turn, for
    /// an undo of the whole session or of that agent alone. Pure.
    pub fn same_as(self, agent: &str, head: Self, head_agent: &str) -> bool {
        match self {
            Self::Turn => head == Self::Turn && agent == head_agent,
            Self::RunEnd => true,
            _ => !self.always_recorded(),
        }
    }

    /// The short name shown in listings. Pure.
    pub fn label(self) -> &'static str {
        match self {
            Self::Turn => "turn",
            Self::RunEnd => "run end",
            Self::BeforeUndo { .. } => "before undo",
            Self::BeforeAgentUndo { .. } => "before agent undo",
            Self::BeforeRedo => "before redo",
            Self::BeforeRewind { .. } => "before rewind",
        }
    }
}

/// Everything a checkpoint records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// Who took it.
    #[serde(flatten)]
    pub meta: SnapshotMeta,
    /// When (RFC 3339, UTC).
    pub time: String,
    /// The tree captured.
    pub tree: String,
    /// The session's previous checkpoint (a commit id), if any.
    pub parent: Option<String>,
    /// What the snapshot left out, and why.
    pub skipped: Vec<Skipped>,
    /// True when the tree equals the previous checkpoint's: no commit was
    /// made, and the checkpoint is the previous one.
    #[serde(default)]
    pub unchanged: bool,
}

/// A checkpoint: a commit of the store and its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The commit holding the tree (for an unchanged snapshot, the previous
    /// checkpoint's).
    pub commit: String,
    /// Its number within the session (`refs/troupe/SESSION/NUMBER`).
    pub number: u64,
    /// The record.
    pub record: CheckpointRecord,
}

impl Checkpoint {
    /// The tree this checkpoint captured.
    pub fn tree(&self) -> &str {
        &self.record.tree
    }

    /// The ref naming this checkpoint.
    pub fn ref_name(&self) -> String {
        session_ref(&self.record.meta.session, self.number)
    }
}

/// `refs/troupe/SESSION/NUMBER`.
pub fn session_ref(session: &str, number: u64) -> String {
    format!("{}{number}", session_prefix(session))
}

/// `refs/troupe/SESSION/`, the namespace of a session's refs.
pub fn session_prefix(session: &str) -> String {
    format!("refs/troupe/{session}/")
}

/// Checks that `session` can name a ref on its own: 1 to
/// [`MAX_SESSION_ID_CHARS`] ASCII letters, digits, `-`, `_` and `.`, not
/// starting with `.` nor ending with `.lock`, without `..`. Pure.
pub fn check_session_id(session: &str) -> Result<(), CheckpointError> {
    let well_formed = !session.is_empty()
        && session.len() <= MAX_SESSION_ID_CHARS
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !session.starts_with('.')
        && !session.ends_with(".lock")
        && !session.contains("..");
    if well_formed {
        Ok(())
    } else {
        Err(CheckpointError::InvalidSession(session.to_owned()))
    }
}

/// The commit message holding `record`: a subject line naming the session
/// and number, a blank line, the record as JSON. Pure.
pub fn encode_message(record: &CheckpointRecord, number: u64) -> String {
    // Serialising plain data with string keys cannot fail; an empty object
    // would still be a valid message.
    let json = serde_json::to_string(record).unwrap_or_else(|_| "{}".to_owned());
    format!(
        "Troupe checkpoint {} {number}\n\n{json}\n",
        record.meta.session
    )
}

/// The record kept in a commit message written by [`encode_message`]. Pure.
pub fn decode_message(commit: &str, message: &str) -> Result<CheckpointRecord, CheckpointError> {
    let body = message
        .split_once("\n\n")
        .map(|(_, body)| body.trim())
        .ok_or_else(|| CheckpointError::Record {
            commit: commit.to_owned(),
            detail: "no body".to_owned(),
        })?;
    serde_json::from_str(body).map_err(|err| CheckpointError::Record {
        commit: commit.to_owned(),
        detail: err.to_string(),
    })
}

/// The number of a session ref, from its full name. Pure.
pub fn ref_number(session: &str, ref_name: &str) -> Option<u64> {
    ref_name
        .strip_prefix(&session_prefix(session))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skip::SkipReason;

    fn record() -> CheckpointRecord {
        CheckpointRecord {
            meta: SnapshotMeta {
                session: "s-1".into(),
                run: "r1".into(),
                turn: 3,
                agent_path: "main/reviewer".into(),
                tool_call_ids: vec!["call_1".into(), "call \"2\"\n".into()],
                kind: CheckpointKind::BeforeUndo { target: 2 },
            },
            time: "2026-12-03T21:00:00Z".into(),
            tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
            parent: None,
            skipped: vec![Skipped {
                path: "big\nname.bin".into(),
                reason: SkipReason::LargeFile {
                    bytes: 11 * 1024 * 1024,
                },
            }],
            unchanged: false,
        }
    }

    #[test]
    fn a_record_survives_its_commit_message() {
        let message = encode_message(&record(), 7);
        assert!(message.starts_with("Troupe checkpoint s-1 7\n\n{"));
        assert_eq!(decode_message("c", &message).unwrap(), record());
    }

    #[test]
    fn a_record_without_a_kind_is_a_turn_and_only_undo_records_always_commit() {
        let mut json = serde_json::to_value(record()).unwrap();
        assert!(json.as_object_mut().unwrap().remove("kind").is_some());
        let message = format!("Troupe checkpoint s-1 1\n\n{json}\n");
        assert_eq!(
            decode_message("c", &message).unwrap().meta.kind,
            CheckpointKind::Turn
        );
        assert!(!CheckpointKind::Turn.always_recorded());
        assert!(!CheckpointKind::RunEnd.always_recorded());
        assert!(CheckpointKind::BeforeRedo.always_recorded());
        assert!(CheckpointKind::BeforeUndo { target: 1 }.always_recorded());
        assert!(
            CheckpointKind::BeforeRewind {
                to_run: 1,
                target: 1
            }
            .always_recorded()
        );
    }

    #[test]
    fn only_a_turn_after_the_same_agents_turn_or_a_run_end_with_the_same_files_makes_no_commit() {
        use CheckpointKind::*;
        let main = "main";
        assert!(Turn.same_as(main, Turn, main));
        assert!(!Turn.same_as("main/general-1", Turn, main));
        assert!(!Turn.same_as(main, RunEnd, main));
        assert!(!Turn.same_as(main, BeforeUndo { target: 1 }, main));
        assert!(RunEnd.same_as(main, Turn, "main/general-1"));
        assert!(RunEnd.same_as(main, RunEnd, main));
        assert!(!BeforeRedo.same_as(main, BeforeRedo, main));
        assert!(!BeforeUndo { target: 1 }.same_as(main, Turn, main));
    }

    #[test]
    fn a_message_without_a_record_is_an_error_naming_the_commit() {
        for message in ["subject only", "subject\n\nnot json", ""] {
            let err = decode_message("abc", message).unwrap_err();
            assert!(err.to_string().contains("abc"), "{err}");
        }
    }

    #[test]
    fn only_plain_session_ids_name_refs() {
        for good in ["s1", "0193a-b_c.d", &"x".repeat(128)] {
            assert!(check_session_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "a..b",
            "a/b",
            "../../heads/main",
            "a b",
            "x.lock",
            "a\nb",
            "é",
            "a:b",
            "a*",
            &"x".repeat(129),
        ] {
            assert!(check_session_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ref_numbers_are_read_from_the_sessions_namespace_only() {
        assert_eq!(session_ref("s", 4), "refs/troupe/s/4");
        assert_eq!(ref_number("s", "refs/troupe/s/12"), Some(12));
        assert_eq!(ref_number("s", "refs/troupe/s2/12"), None);
        assert_eq!(ref_number("s", "refs/troupe/s/x"), None);
    }
}
