//! Sessions and their messages: creation, metadata, listing, message writes
//! that keep metadata in step (one atomic batch into one tree), resume
//! loading and JSONL export.
//!
//! A session's metadata is two records: what never changes after creation in
//! the `sessions` tree, and its head (count, update time, title) in the
//! `messages` tree beside the messages, so that messages and the metadata
//! they change are written by one batch. Listing reads the `sessions` tree
//! and each session's head, never a message. Nothing here touches runs,
//! events or the cleanup policy.

use std::io::Write;

use super::family;
use super::history::HistoryBuilder;
use super::layout::{self, check_id};
use super::records::{
    CompactionMarker, LoadedHistory, NewSession, SessionHead, SessionMeta, SessionRecord,
    SkippedRecord,
};
use super::records::{ForkBase, PendingRewind};
use super::tee::TeedWrite;
use super::{Store, StoreError, decode_listed, decode_one, session_what};
use troupe_protocol::model::Message;

/// How an export's destination is named in errors (it is a writer, not a path).
const EXPORT_TARGET: &str = "the output";

/// What a write of messages does with the session's pending rewind.
pub(crate) enum HeadRewind {
    /// Leaves it as it is.
    Keep,
    /// Clears it (the prompt that told it is stored).
    Clear,
    /// Sets it (the history was cut).
    Set(PendingRewind),
}

/// Messages expected in a history when the metadata gives no better figure.
const MAX_PREALLOCATED_MESSAGES: u64 = 100_000;

/// A message record read by index: the message, or why it is unreadable.
type IndexedRecord = (u64, Result<Message, String>);

/// How many fork bases are followed when a history is read (forks do not
/// fork, so real chains are one step long; damaged records may loop).
const MAX_FORK_BASE_DEPTH: u32 = 4;

impl Store {
    /// Creates a session with no messages. Fails with
    /// [`StoreError::AlreadyExists`] when the id is taken, and with
    /// [`StoreError::InvalidId`] for an id, parent id or run id that cannot be
    /// a key, or a session that names itself as its parent. A child session
    /// (with `parent`) is created like any other; its parent need not exist
    /// yet.
    pub fn create_session(&self, new: &NewSession) -> Result<SessionMeta, StoreError> {
        check_id("session", &new.id)?;
        if let Some(parent) = &new.parent {
            check_id("session", parent)?;
            if *parent == new.id {
                return Err(StoreError::InvalidId {
                    what: "parent session",
                    id: parent.clone(),
                    reason: "a session cannot be its own parent".to_owned(),
                });
            }
        }
        if let Some(run_id) = &new.run_id {
            check_id("run", run_id)?;
        }
        if let Some(base) = &new.fork_of {
            check_id("session", &base.session)?;
            if base.session == new.id {
                return Err(StoreError::InvalidId {
                    what: "fork base",
                    id: base.session.clone(),
                    reason: "a session cannot begin with itself".to_owned(),
                });
            }
        }
        let record = SessionRecord::new(new, self.now());
        let value = layout::encode(&record)?;
        let swapped = self
            .inner
            .sessions
            .compare_and_swap(new.id.as_bytes(), None as Option<&[u8]>, Some(value))
            .map_err(self.sled_err("create a session"))?;
        if swapped.is_err() {
            return Err(StoreError::AlreadyExists {
                what: session_what(&new.id),
            });
        }
        self.tee(&new.id, || TeedWrite::Created(new.clone()));
        Ok(record.meta)
    }

    /// The metadata of a session, `None` when it does not exist.
    pub fn session(&self, id: &str) -> Result<Option<SessionMeta>, StoreError> {
        Ok(self.session_record(id)?.map(|record| record.meta))
    }

    /// Every session, child sessions included, most recently updated first.
    /// Reads only metadata, never a history; a damaged metadata record is
    /// skipped with a warning.
    pub fn list_sessions(&self) -> Result<Vec<SessionMeta>, StoreError> {
        let mut sessions = self.read_sessions()?;
        sessions.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
        Ok(sessions)
    }

    /// The direct child sessions of `parent` (sessions whose
    /// [`SessionMeta::parent`] is `parent`), oldest first. One pass over the
    /// metadata, like listing: no history is read. A child with damaged
    /// metadata cannot be found (it is skipped with a warning).
    pub fn child_sessions(&self, parent: &str) -> Result<Vec<SessionMeta>, StoreError> {
        check_id("session", parent)?;
        let sessions = self.read_sessions()?;
        Ok(family::children(&sessions, parent)
            .into_iter()
            .cloned()
            .collect())
    }

    /// Every session below `root`: its children, their children and so on,
    /// breadth first (children before grandchildren, siblings oldest first),
    /// `root` itself excluded. One pass over the metadata; each session comes
    /// once even when damaged records link sessions in a cycle.
    pub fn descendant_sessions(&self, root: &str) -> Result<Vec<SessionMeta>, StoreError> {
        check_id("session", root)?;
        let sessions = self.read_sessions()?;
        Ok(family::descendants(&sessions, root)
            .into_iter()
            .cloned()
            .collect())
    }

    /// The metadata of every readable session, in key order.
    pub(crate) fn read_sessions(&self) -> Result<Vec<SessionMeta>, StoreError> {
        let mut sessions = Vec::new();
        for item in self.inner.sessions.iter() {
            let (key, value) = item.map_err(self.sled_err("list sessions"))?;
            if let Some(record) =
                decode_listed::<SessionRecord>(layout::SESSIONS_TREE, &key, &value)
            {
                sessions.push(self.with_stored_head(record)?.meta);
            }
        }
        Ok(sessions)
    }

    /// Inserts or overwrites message `index` (0-based position in the full
    /// history) and updates the session's message count (highest index + 1),
    /// update time and title in the same atomic batch, so metadata never
    /// disagrees with messages. Durable after [`Store::flush`].
    pub fn put_message(
        &self,
        session: &str,
        index: u64,
        message: &Message,
    ) -> Result<(), StoreError> {
        self.put_messages(session, [(index, message)])
    }

    /// [`Store::put_message`] of several messages as one atomic batch into
    /// one tree: after a crash, all of them and the metadata they change are
    /// there, or none. Writing nothing is a no-op (the session must exist).
    pub fn put_messages<'m>(
        &self,
        session: &str,
        messages: impl IntoIterator<Item = (u64, &'m Message)>,
    ) -> Result<(), StoreError> {
        self.rewrite_messages(session, messages, None, HeadRewind::Keep, "write messages")
            .map(|_| ())
    }

    /// [`Store::put_messages`] of the messages of a run's opening, which
    /// told the session's pending rewind ([`Store::pending_rewind`]): the
    /// same batch clears it, so it is told once.
    pub fn put_messages_telling_rewind<'m>(
        &self,
        session: &str,
        messages: impl IntoIterator<Item = (u64, &'m Message)>,
    ) -> Result<(), StoreError> {
        self.rewrite_messages(session, messages, None, HeadRewind::Clear, "write messages")
            .map(|_| ())
    }

    /// The rewind the session's next prompt tells of, if one waits.
    pub fn pending_rewind(&self, session: &str) -> Result<Option<PendingRewind>, StoreError> {
        match self.session_record(session)? {
            Some(record) => Ok(record.rewind),
            None => Err(StoreError::NotFound {
                what: session_what(session),
            }),
        }
    }

    /// Removes every message from index `len` on (a repair dropping a trailing
    /// message) and lowers the message count to `len`, in one atomic batch.
    /// Returns how many message records were removed.
    pub fn truncate_history(&self, session: &str, len: u64) -> Result<u64, StoreError> {
        self.rewrite_messages(
            session,
            [],
            Some(len),
            HeadRewind::Keep,
            "truncate a history",
        )
    }

    /// Writes `messages` at indexes `from`, `from + 1`, … and removes every
    /// message after them, in one atomic batch: how a repaired history is
    /// written back in one step. Returns how many records were removed.
    pub fn replace_history(
        &self,
        session: &str,
        from: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError> {
        let len = from.saturating_add(messages.len() as u64);
        let numbered = (from..).zip(messages);
        self.rewrite_messages(
            session,
            numbered,
            Some(len),
            HeadRewind::Keep,
            "rewrite a history",
        )
    }

    /// The one write path of messages: inserts `messages`, then (with
    /// `truncate_at`) removes every message from that index on, and stores
    /// the session's new head (its pending rewind changed as `rewind` says)
    /// beside them, all in one `apply_batch` into the
    /// `messages` tree. Multi-tree transactions are never used: sled 0.34 can
    /// hang in them under sustained writes, and one batch into one tree is
    /// just as atomic. A session has one writer at a time (its agent, through
    /// the store's writer thread), so reading the head first is safe.
    pub(crate) fn rewrite_messages<'m>(
        &self,
        session: &str,
        messages: impl IntoIterator<Item = (u64, &'m Message)>,
        truncate_at: Option<u64>,
        rewind: HeadRewind,
        op: &'static str,
    ) -> Result<u64, StoreError> {
        check_id("session", session)?;
        let Some(mut record) = self.session_record(session)? else {
            return Err(StoreError::NotFound {
                what: session_what(session),
            });
        };
        let now = self.now();
        let mut batch = sled::Batch::default();
        let mut changed = false;
        let mut teed = Vec::new();
        let teeing = self.tees(session);
        for (index, message) in messages {
            if teeing {
                teed.push((index, message.clone()));
            }
            batch.insert(
                layout::numbered_key(session, index),
                layout::encode(message)?,
            );
            record.apply_message(index, message, now);
            changed = true;
        }
        let mut removed = 0u64;
        if let Some(len) = truncate_at {
            let start = layout::numbered_key(session, len);
            let end = layout::owner_end(session);
            for key in self.inner.messages.range(start..end).keys() {
                batch.remove(key.map_err(self.sled_err("read messages"))?);
                removed += 1;
            }
            record.apply_truncate(len, now);
            changed = true;
        }
        match rewind {
            HeadRewind::Keep => {}
            HeadRewind::Clear => {
                changed |= record.rewind.take().is_some();
            }
            HeadRewind::Set(pending) => {
                record.rewind = Some(pending);
                changed = true;
            }
        }
        if !changed {
            return Ok(0);
        }
        batch.insert(
            layout::owner_prefix(session),
            layout::encode(&record.head())?,
        );
        self.inner
            .messages
            .apply_batch(batch)
            .map_err(self.sled_err(op))?;
        if teeing && (!teed.is_empty() || truncate_at.is_some()) {
            self.tee(session, || TeedWrite::Messages {
                messages: teed,
                truncate_at,
            });
        }
        Ok(removed)
    }

    /// The history to resume from (SPEC §9): the summary of the last readable
    /// compaction marker, then every stored message from its `first_kept` on.
    /// Undecodable or truncated records and missing index ranges are skipped
    /// and reported in `LoadedHistory::skipped`, never an error.
    pub fn load_history(&self, session: &str) -> Result<LoadedHistory, StoreError> {
        let Some(record) = self.session_record(session)? else {
            return Err(StoreError::NotFound {
                what: session_what(session),
            });
        };
        let (marker, skipped_markers) = self.last_marker(session)?;
        let first_kept = marker.as_ref().map_or(0, |m| m.first_kept);
        let expected = record
            .meta
            .message_count
            .saturating_sub(first_kept)
            .min(MAX_PREALLOCATED_MESSAGES);
        let mut builder = HistoryBuilder::new(marker, usize::try_from(expected).unwrap_or(0));
        // A fork begins with its parent's messages, read from the parent; its
        // own records start after them (any below are copies, passed over).
        let mut own_from = first_kept;
        if let Some(base) = &record.meta.fork_of {
            for (index, decoded) in self.base_messages(base, first_kept, 0)? {
                builder.push(index, decoded);
            }
            own_from = own_from.max(base.len);
        }
        let start = layout::numbered_key(session, own_from);
        let end = layout::owner_end(session);
        for item in self.inner.messages.range(start..end) {
            let (key, value) = item.map_err(self.sled_err("read messages"))?;
            match layout::parse_numbered_key(session, &key) {
                Some(index) => builder.push(index, layout::decode::<Message>(&value)),
                None => builder.push_bad_key(&key),
            }
        }
        let history = builder.finish(
            record.meta.message_count,
            Some(record.meta.updated),
            skipped_markers,
        );
        for skipped in &history.skipped {
            tracing::warn!(session, index = skipped.index, reason = %skipped.reason, "message skipped while loading a session");
        }
        Ok(history)
    }

    /// Writes every stored message of the session, oldest first, as one JSON
    /// object per line (compacted messages included). Unreadable records are
    /// left out with a warning. Returns the number of lines written.
    pub fn export_jsonl(&self, session: &str, out: &mut dyn Write) -> Result<u64, StoreError> {
        if self.session_record(session)?.is_none() {
            return Err(StoreError::NotFound {
                what: session_what(session),
            });
        }
        let export_error = |source| StoreError::Io {
            op: format!("write the export of {}", session_what(session)),
            path: EXPORT_TARGET.into(),
            source,
        };
        let mut lines = 0u64;
        let mut write = |message: &Message| -> Result<(), StoreError> {
            serde_json::to_writer(&mut *out, message).map_err(|e| match e.classify() {
                serde_json::error::Category::Io => export_error(e.into()),
                _ => StoreError::Encode(e),
            })?;
            out.write_all(b"\n").map_err(export_error)?;
            lines += 1;
            Ok(())
        };
        // A fork's export begins with the messages it shares with its parent.
        let base = self
            .session_record(session)?
            .and_then(|record| record.meta.fork_of);
        let mut own_from = 0;
        if let Some(base) = &base {
            for (_, decoded) in self.base_messages(base, 0, 0)? {
                if let Ok(message) = decoded {
                    write(&message)?;
                }
            }
            own_from = base.len;
        }
        let own = layout::numbered_key(session, own_from)..layout::owner_end(session);
        for item in self.inner.messages.range(own) {
            let (key, value) = item.map_err(self.sled_err("read messages"))?;
            let Some(message) = decode_listed::<Message>(layout::MESSAGES_TREE, &key, &value)
            else {
                continue;
            };
            write(&message)?;
        }
        out.flush().map_err(export_error)?;
        Ok(lines)
    }

    /// Messages `from..base.len` of a fork's base, as `(index, decoded)` in
    /// index order: the base session's own records, preceded by its own base
    /// when it is itself a fork. A base that is gone or damaged yields what
    /// can be read (the caller reports the gap); nesting is bounded.
    fn base_messages(
        &self,
        base: &ForkBase,
        from: u64,
        depth: u32,
    ) -> Result<Vec<IndexedRecord>, StoreError> {
        let mut out = Vec::new();
        if from >= base.len || depth >= MAX_FORK_BASE_DEPTH {
            return Ok(out);
        }
        let Ok(Some(record)) = self.session_record(&base.session) else {
            return Ok(out);
        };
        let mut start = from;
        if let Some(inner) = &record.meta.fork_of {
            let shared = ForkBase {
                session: inner.session.clone(),
                len: inner.len.min(base.len),
            };
            out = self.base_messages(&shared, from, depth + 1)?;
            start = start.max(shared.len);
        }
        let range = layout::numbered_key(&base.session, start)
            ..layout::numbered_key(&base.session, base.len);
        for item in self.inner.messages.range(range) {
            let (key, value) = item.map_err(self.sled_err("read messages"))?;
            if let Some(index) = layout::parse_numbered_key(&base.session, &key) {
                out.push((index, layout::decode::<Message>(&value)));
            }
        }
        Ok(out)
    }

    /// The stored record of a session; damage is an error.
    pub(crate) fn session_record(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        check_id("session", id)?;
        let raw = self
            .inner
            .sessions
            .get(id.as_bytes())
            .map_err(self.sled_err("read a session"))?;
        raw.map(|raw| decode_one(session_what(id), &raw))
            .transpose()?
            .map(|record| self.with_stored_head(record))
            .transpose()
    }

    /// `record` with the head stored beside its messages, when there is one
    /// (a store written before heads existed has none). A damaged head is
    /// skipped with a warning: the record's own fields stand in for it.
    fn with_stored_head(&self, record: SessionRecord) -> Result<SessionRecord, StoreError> {
        let key = layout::owner_prefix(&record.meta.id);
        let raw = self
            .inner
            .messages
            .get(&key)
            .map_err(self.sled_err("read a session"))?;
        let head =
            raw.and_then(|raw| decode_listed::<SessionHead>(layout::MESSAGES_TREE, &key, &raw));
        Ok(match head {
            Some(head) => record.with_head(head),
            None => record,
        })
    }

    /// Fails with [`StoreError::NotFound`] unless the session exists.
    pub(crate) fn require_session(&self, id: &str) -> Result<(), StoreError> {
        check_id("session", id)?;
        let exists = self
            .inner
            .sessions
            .contains_key(id.as_bytes())
            .map_err(self.sled_err("read a session"))?;
        if exists {
            Ok(())
        } else {
            Err(StoreError::NotFound {
                what: session_what(id),
            })
        }
    }

    /// The newest readable compaction marker, and the newer ones that could not
    /// be read (index = marker sequence number).
    fn last_marker(
        &self,
        session: &str,
    ) -> Result<(Option<CompactionMarker>, Vec<SkippedRecord>), StoreError> {
        let mut skipped = Vec::new();
        for item in self
            .inner
            .markers
            .scan_prefix(layout::owner_prefix(session))
            .rev()
        {
            let (key, value) = item.map_err(self.sled_err("read compaction markers"))?;
            let seq = layout::parse_numbered_key(session, &key).unwrap_or(u64::MAX);
            match layout::decode::<CompactionMarker>(&value) {
                Ok(marker) => return Ok((Some(marker), skipped)),
                Err(reason) => {
                    tracing::warn!(session, seq, %reason, "compaction marker skipped");
                    skipped.push(SkippedRecord { index: seq, reason });
                }
            }
        }
        Ok((None, skipped))
    }
}
