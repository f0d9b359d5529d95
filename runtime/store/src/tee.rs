//! Telling an observer of the writes of chosen sessions (a cluster node
//! copies a clustered run's session to the cluster as its store writes it).
//!
//! A store has no observer unless [`Store::set_tee`] gave it one; then each
//! write of a session's messages, pending results, compaction markers,
//! ledger decisions and run records asks [`WriteTee::wants`] first and, for
//! a session it wants, hands it the written records once the write
//! succeeded, on the thread that wrote (the store's writer thread for the
//! writes of a run), in the order of the writes. A store without an
//! observer does no more than read an empty cell.

use std::sync::Arc;

use troupe_protocol::model::{Message, ToolResult};

use super::Store;
use super::records::{CompactionMarker, LedgerEntry, NewSession, RunRecord};

/// One write the store performed for a session.
#[derive(Debug, Clone, PartialEq)]
pub enum TeedWrite {
    /// The session was created.
    Created(NewSession),
    /// Messages written at their indexes, then (with `truncate_at`) every
    /// message from that index on removed.
    Messages {
        /// `(index, message)` pairs.
        messages: Vec<(u64, Message)>,
        /// Where the history was cut, if it was.
        truncate_at: Option<u64>,
    },
    /// A pending tool result.
    PendingResult(ToolResult),
    /// The pending results were cleared.
    PendingCleared,
    /// A compaction marker.
    Marker(CompactionMarker),
    /// A ledger decision.
    Ledger(LedgerEntry),
    /// A run record of the session.
    Run(RunRecord),
}

/// An observer of the writes of some sessions. Both calls run on the
/// writing thread and must be quick (look a name up, send to a channel).
pub trait WriteTee: Send + Sync {
    /// Whether the writes of `session` are wanted.
    fn wants(&self, session: &str) -> bool;
    /// `write` was performed on `session` (which [`WriteTee::wants`]).
    fn written(&self, session: &str, write: TeedWrite);
}

impl Store {
    /// Gives the store its observer of session writes; a store has one at
    /// most (`false` when it already had one, which stays).
    pub fn set_tee(&self, tee: Arc<dyn WriteTee>) -> bool {
        self.inner.tee.set(tee).is_ok()
    }

    /// Whether an observer wants the writes of `session`.
    pub(crate) fn tees(&self, session: &str) -> bool {
        self.inner.tee.get().is_some_and(|tee| tee.wants(session))
    }

    /// Tells the observer, if there is one and it wants `session`, of the
    /// write `make` describes (built only then).
    pub(crate) fn tee(&self, session: &str, make: impl FnOnce() -> TeedWrite) {
        if let Some(tee) = self.inner.tee.get()
            && tee.wants(session)
        {
            tee.written(session, make());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Keeps what it is told of session `wanted`.
    struct Recorder {
        wanted: String,
        seen: Mutex<Vec<(String, TeedWrite)>>,
    }

    impl WriteTee for Recorder {
        fn wants(&self, session: &str) -> bool {
            session == self.wanted
        }
        fn written(&self, session: &str, write: TeedWrite) {
            self.seen.lock().unwrap().push((session.into(), write));
        }
    }

    fn new_session(id: &str) -> NewSession {
        NewSession {
            id: id.into(),
            cwd: "/tmp".into(),
            provider: "p".into(),
            model: "m".into(),
            parent: None,
            agent_path: None,
            run_id: None,
            fork_of: None,
        }
    }

    #[test]
    fn the_writes_of_a_wanted_session_are_told_in_order_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let recorder = Arc::new(Recorder {
            wanted: "s".into(),
            seen: Mutex::default(),
        });
        assert!(store.set_tee(recorder.clone()));
        assert!(!store.set_tee(recorder.clone()));
        store.create_session(&new_session("s")).unwrap();
        store.create_session(&new_session("other")).unwrap();
        store
            .put_message("other", 0, &Message::user_text("not told"))
            .unwrap();
        store
            .put_message("s", 0, &Message::user_text("go"))
            .unwrap();
        let result = ToolResult::text("c1", "done", false);
        store.put_pending_result("s", &result).unwrap();
        store.clear_pending_results("s").unwrap();
        store.truncate_history("s", 0).unwrap();
        // A failed write is not told.
        assert!(store.put_pending_result("missing", &result).is_err());
        let seen = recorder.seen.lock().unwrap().clone();
        let writes: Vec<TeedWrite> = seen
            .iter()
            .inspect(|(session, _)| assert_eq!(session, "s"))
            .map(|(_, write)| write.clone())
            .collect();
        assert_eq!(
            writes,
            vec![
                TeedWrite::Created(new_session("s")),
                TeedWrite::Messages {
                    messages: vec![(0, Message::user_text("go"))],
                    truncate_at: None
                },
                TeedWrite::PendingResult(result),
                TeedWrite::PendingCleared,
                TeedWrite::Messages {
                    messages: Vec::new(),
                    truncate_at: Some(0)
                },
            ]
        );
    }
}
