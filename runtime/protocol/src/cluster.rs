//! What Troupe nodes say to each other through NATS JetStream: a run handed
//! to the work queue ([`Submission`]), an event of a run ([`ClusterEvent`]),
//! a node's record ([`NodeRecord`]), a run's record ([`ClusterRun`]), an
//! action on a run that another node holds ([`RunAction`], answered by
//! [`ActionReply`]), and one write of a clustered run's session
//! ([`SessionRecord`]).
//!
//! Every message carries its version in a `v` field ([`VERSION`]). A node
//! reads each one with [`decode`], which refuses an oversized body, a body
//! that is not the expected JSON, a foreign version and ids that could not
//! name a subject or a key ([`is_valid_token`]) before anything acts on it:
//! whatever arrives from the engine is untrusted input.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::api::{ApprovalAnswer, RunRequest, RunSummary};
use crate::events::RunEvent;
use crate::model::{Message, ToolResult};

/// The version of every message this build writes and reads.
pub const VERSION: u32 = 1;

/// The largest message a node reads (1 MiB, the NATS server's default
/// payload limit).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The longest id ([`is_valid_token`]) a message may carry.
pub const MAX_TOKEN_CHARS: usize = 128;

/// A run handed to the work queue by the node that accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    /// [`VERSION`].
    pub v: u32,
    /// The run id the submitting node answered with; the taking node runs
    /// the run under it.
    pub run_id: String,
    /// The id of the new session the run starts.
    pub session_id: String,
    /// The node that accepted the request.
    pub submitted_by: String,
    /// When it was accepted (RFC 3339).
    pub submitted_at: String,
    /// The request as the client sent it (its `session_id` is `None`: a
    /// queued run starts a new session).
    pub request: RunRequest,
}

/// One event of a run, published on the run's subject by the node that runs
/// it, in the run's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterEvent {
    /// [`VERSION`].
    pub v: u32,
    /// The node that runs the run.
    pub node: String,
    /// The event, with its own `seq`.
    pub event: RunEvent,
}

/// A node's record in the nodes bucket, rewritten with every heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRecord {
    /// [`VERSION`].
    pub v: u32,
    /// The node's name.
    pub node: String,
    /// The most runs it runs at once.
    pub capacity: u32,
    /// The runs it runs now.
    pub running: Vec<String>,
    /// It takes no new runs.
    pub draining: bool,
    /// Its last heartbeat (RFC 3339).
    pub heartbeat: String,
    /// Where its API listens.
    pub addr: String,
}

/// A run's record in the runs bucket: which node runs it and its summary as
/// `GET /v1/runs` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterRun {
    /// [`VERSION`].
    pub v: u32,
    /// The run's summary; its `node` is `None` until a node takes the run.
    pub summary: RunSummary,
}

/// An action on a run, sent by request/reply to the node that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAction {
    /// [`VERSION`].
    pub v: u32,
    /// The run.
    pub run_id: String,
    /// What to do.
    pub action: Action,
}

/// What a [`RunAction`] asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// `POST /v1/runs/{id}/cancel`.
    Cancel,
    /// `POST /v1/runs/{id}/approvals/{approval_id}`.
    Approve {
        /// The approval.
        approval_id: String,
        /// The answer.
        answer: ApprovalAnswer,
    },
    /// `POST /v1/runs/{id}/messages`.
    Message {
        /// The text.
        text: String,
    },
}

/// The answer of the node that runs the run: the HTTP status and JSON body
/// its own API gives for the action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionReply {
    /// [`VERSION`].
    pub v: u32,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// One write of a clustered run's session, published on the session's
/// subject by the node that runs the run, in the order its store wrote
/// them. Read back in order, the records rebuild the session in another
/// node's store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    /// [`VERSION`].
    pub v: u32,
    /// The session written.
    pub session_id: String,
    /// The node that wrote it.
    pub node: String,
    /// What was written.
    pub write: SessionWrite,
}

/// What a [`SessionRecord`] wrote. The store's own records (a new session,
/// a compaction marker, a ledger decision, a run record) travel as the JSON
/// the store reads them from, checked by the store when they are loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionWrite {
    /// The session was created.
    Created {
        /// The store's record of the new session.
        session: serde_json::Value,
    },
    /// Messages were written at their indexes; with `truncate_at`, every
    /// message from that index on was removed after them.
    Messages {
        /// `(index, message)` pairs.
        messages: Vec<(u64, Message)>,
        /// Where the history was cut, if it was.
        truncate_at: Option<u64>,
    },
    /// A finished call's result, kept until its turn's message exists.
    PendingResult {
        /// The result.
        result: ToolResult,
    },
    /// The pending results were cleared (their message exists).
    PendingCleared,
    /// A compaction marker.
    Marker {
        /// The store's marker.
        marker: serde_json::Value,
    },
    /// A context-management decision on a call's result.
    Ledger {
        /// The store's ledger entry.
        entry: serde_json::Value,
    },
    /// A node claimed the run that writes this session: the writes of
    /// any other node after this one are refused.
    Claimed {
        /// The run claimed.
        run_id: String,
    },
    /// A run of the session was recorded (started, or ended).
    Run {
        /// The store's run record.
        run: serde_json::Value,
    },
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageError {
    /// Larger than [`MAX_MESSAGE_BYTES`].
    Oversized(usize),
    /// Not the expected JSON.
    Malformed(String),
    /// Another version than [`VERSION`].
    ForeignVersion(u64),
    /// An id that cannot name a subject or a key.
    InvalidId(String),
}

impl std::fmt::Display for MessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Oversized(bytes) => write!(
                f,
                "the message has {bytes} bytes, more than {MAX_MESSAGE_BYTES}"
            ),
            Self::Malformed(err) => write!(f, "the message is malformed: {err}"),
            Self::ForeignVersion(v) => {
                write!(f, "the message has version {v}; this node reads {VERSION}")
            }
            Self::InvalidId(id) => write!(f, "the message names an invalid id {id:?}"),
        }
    }
}

impl std::error::Error for MessageError {}

/// A message type: what [`decode`] checks beyond its shape.
pub trait Versioned: DeserializeOwned {
    /// The ids the message names, each of which must be a valid token.
    fn ids(&self) -> Vec<&str>;
}

impl Versioned for Submission {
    fn ids(&self) -> Vec<&str> {
        vec![&self.run_id, &self.session_id, &self.submitted_by]
    }
}

impl Versioned for ClusterEvent {
    fn ids(&self) -> Vec<&str> {
        vec![&self.node, &self.event.run_id]
    }
}

impl Versioned for NodeRecord {
    fn ids(&self) -> Vec<&str> {
        vec![&self.node]
    }
}

impl Versioned for ClusterRun {
    fn ids(&self) -> Vec<&str> {
        let mut ids = vec![self.summary.run_id.as_str()];
        ids.extend(self.summary.node.as_deref());
        ids
    }
}

impl Versioned for RunAction {
    fn ids(&self) -> Vec<&str> {
        vec![&self.run_id]
    }
}

impl Versioned for SessionRecord {
    fn ids(&self) -> Vec<&str> {
        let mut ids = vec![self.session_id.as_str(), self.node.as_str()];
        if let SessionWrite::Claimed { run_id } = &self.write {
            ids.push(run_id);
        }
        ids
    }
}

impl Versioned for ActionReply {
    fn ids(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Whether `id` can be one token of a NATS subject and a key of a bucket:
/// 1 to [`MAX_TOKEN_CHARS`] ASCII letters, digits, `-` and `_` (no `.`,
/// `*`, `>` or space, which would change the subject it is put in).
pub fn is_valid_token(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_TOKEN_CHARS
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// The version field alone, read before the whole message.
#[derive(Deserialize)]
struct VersionOnly {
    v: Option<serde_json::Value>,
}

/// Reads a message of type `T`: refused when larger than
/// [`MAX_MESSAGE_BYTES`], not JSON, of another version than [`VERSION`],
/// not of `T`'s shape, or naming an id that is not a valid token.
pub fn decode<T: Versioned>(bytes: &[u8]) -> Result<T, MessageError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::Oversized(bytes.len()));
    }
    let version: VersionOnly =
        serde_json::from_slice(bytes).map_err(|err| MessageError::Malformed(err.to_string()))?;
    match version.v {
        Some(serde_json::Value::Number(number)) if number.as_u64() == Some(u64::from(VERSION)) => {}
        Some(serde_json::Value::Number(number)) => {
            return Err(MessageError::ForeignVersion(
                number.as_u64().unwrap_or(u64::MAX),
            ));
        }
        _ => {
            return Err(MessageError::Malformed(
                "no numeric version field `v`".into(),
            ));
        }
    }
    let message: T =
        serde_json::from_slice(bytes).map_err(|err| MessageError::Malformed(err.to_string()))?;
    if let Some(bad) = message.ids().into_iter().find(|id| !is_valid_token(id)) {
        return Err(MessageError::InvalidId(bad.to_string()));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RunState;

    fn submission() -> Submission {
        Submission {
            v: VERSION,
            run_id: "0193-run".into(),
            session_id: "0193-session".into(),
            submitted_by: "node-a".into(),
            submitted_at: "2026-01-01T00:00:00Z".into(),
            request: serde_json::from_str(r#"{"prompt":"hi","cwd":"/tmp"}"#).unwrap(),
        }
    }

    #[test]
    fn a_message_is_read_back_as_written() {
        let bytes = serde_json::to_vec(&submission()).unwrap();
        assert_eq!(decode::<Submission>(&bytes).unwrap(), submission());
        let run = ClusterRun {
            v: VERSION,
            summary: RunSummary {
                agents: None,
                ended: None,
                node: Some("node-b".into()),
                prompt: "p".into(),
                run_id: "r1".into(),
                session_id: "s1".into(),
                started: "2026-01-01T00:00:00Z".into(),
                status: RunState::Running,
                stop_reason: None,
            },
        };
        let bytes = serde_json::to_vec(&run).unwrap();
        assert_eq!(decode::<ClusterRun>(&bytes).unwrap(), run);
        let action = RunAction {
            v: VERSION,
            run_id: "r1".into(),
            action: Action::Approve {
                approval_id: "r1-1".into(),
                answer: serde_json::from_str(r#"{"outcome":"allow"}"#).unwrap(),
            },
        };
        let bytes = serde_json::to_vec(&action).unwrap();
        assert_eq!(decode::<RunAction>(&bytes).unwrap(), action);
        let record = SessionRecord {
            v: VERSION,
            session_id: "s1".into(),
            node: "node-b".into(),
            write: SessionWrite::Messages {
                messages: vec![(3, Message::user_text("go on"))],
                truncate_at: Some(4),
            },
        };
        let bytes = serde_json::to_vec(&record).unwrap();
        assert_eq!(decode::<SessionRecord>(&bytes).unwrap(), record);
    }

    #[test]
    fn a_session_record_naming_a_subject_escape_or_an_unknown_write_is_refused() {
        let escape = br#"{"v":1,"session_id":"s.>","node":"n","write":{"kind":"pending_cleared"}}"#;
        assert!(matches!(
            decode::<SessionRecord>(escape),
            Err(MessageError::InvalidId(_))
        ));
        let unknown = br#"{"v":1,"session_id":"s","node":"n","write":{"kind":"rm_rf"}}"#;
        assert!(matches!(
            decode::<SessionRecord>(unknown),
            Err(MessageError::Malformed(_))
        ));
        let cleared = br#"{"v":1,"session_id":"s","node":"n","write":{"kind":"pending_cleared"}}"#;
        assert_eq!(
            decode::<SessionRecord>(cleared).unwrap().write,
            SessionWrite::PendingCleared
        );
    }

    #[test]
    fn garbage_foreign_versions_and_oversized_bodies_are_refused() {
        assert!(matches!(
            decode::<Submission>(b"not json"),
            Err(MessageError::Malformed(_))
        ));
        assert!(matches!(
            decode::<Submission>(b"[1,2]"),
            Err(MessageError::Malformed(_))
        ));
        assert!(matches!(
            decode::<Submission>(br#"{"run_id":"x"}"#),
            Err(MessageError::Malformed(_))
        ));
        assert!(matches!(
            decode::<Submission>(br#"{"v":"1"}"#),
            Err(MessageError::Malformed(_))
        ));
        let mut foreign = serde_json::to_value(submission()).unwrap();
        foreign["v"] = 2.into();
        let bytes = serde_json::to_vec(&foreign).unwrap();
        assert_eq!(
            decode::<Submission>(&bytes),
            Err(MessageError::ForeignVersion(2))
        );
        assert!(matches!(
            decode::<Submission>(br#"{"v":-1}"#),
            Err(MessageError::ForeignVersion(_))
        ));
        let huge = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            decode::<Submission>(&huge),
            Err(MessageError::Oversized(MAX_MESSAGE_BYTES + 1))
        );
        // A field the version does not have is a malformed message.
        let mut extra = serde_json::to_value(submission()).unwrap();
        extra["sudo"] = true.into();
        let bytes = serde_json::to_vec(&extra).unwrap();
        assert!(matches!(
            decode::<Submission>(&bytes),
            Err(MessageError::Malformed(_))
        ));
    }

    #[test]
    fn ids_that_would_change_a_subject_are_refused() {
        for bad in [
            "",
            "a.b",
            "*",
            ">",
            "a b",
            "é",
            &"x".repeat(MAX_TOKEN_CHARS + 1),
        ] {
            assert!(!is_valid_token(bad), "{bad:?}");
            let mut message = submission();
            message.run_id = bad.to_string();
            let bytes = serde_json::to_vec(&message).unwrap();
            assert!(
                matches!(
                    decode::<Submission>(&bytes),
                    Err(MessageError::InvalidId(_))
                ),
                "{bad:?}"
            );
        }
        for good in ["0193a-b_c", "host-1234", &"x".repeat(MAX_TOKEN_CHARS)] {
            assert!(is_valid_token(good), "{good:?}");
        }
    }
}
