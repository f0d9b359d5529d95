//! Records kept with a session besides its messages: tool results that finished
//! before their tool message was written, compaction markers, the layer-1
//! replacement ledger (SPEC §10), "allow always" rules, the project memory
//! the session's prompt holds and the task plan of the session's agent.
//!
//! Each write checks that the session exists; each list returns records in the
//! order they were written and skips damaged ones with a warning. What the
//! records mean (when a result is pending, when to compact, what to replace)
//! is decided elsewhere.

use super::layout::{self, check_child_id};
use super::records::{CompactionMarker, LedgerEntry, LedgerRecord, PendingRecord, StoredTaskPlan};
use super::tee::TeedWrite;
use super::{Store, StoreError, decode_listed, decode_one};
use troupe_protocol::model::ToolResult;
use troupe_protocol::permission::RuleEntry;
use troupe_protocol::task_plan::TaskPlan;

impl Store {
    /// Stores a tool result that finished before its turn's tool message was
    /// written, keyed by its call id (a second result for the same call id
    /// replaces the first).
    pub fn put_pending_result(&self, session: &str, result: &ToolResult) -> Result<(), StoreError> {
        self.require_session(session)?;
        check_child_id("call", &result.call_id)?;
        let record = PendingRecord {
            order: self.next_id()?,
            result: result.clone(),
        };
        self.inner
            .pending
            .insert(
                layout::child_key(session, &result.call_id),
                layout::encode(&record)?,
            )
            .map_err(self.sled_err("store a tool result"))?;
        self.tee(session, || TeedWrite::PendingResult(result.clone()));
        Ok(())
    }

    /// The session's pending tool results, in the order they were stored.
    pub fn pending_results(&self, session: &str) -> Result<Vec<ToolResult>, StoreError> {
        self.require_session(session)?;
        let mut records: Vec<PendingRecord> =
            self.scan_session(&self.inner.pending, layout::PENDING_TREE, session)?;
        records.sort_by_key(|record| record.order);
        Ok(records.into_iter().map(|record| record.result).collect())
    }

    /// Removes every pending tool result of the session (once they are part of
    /// a stored tool message).
    pub fn clear_pending_results(&self, session: &str) -> Result<(), StoreError> {
        layout::check_id("session", session)?;
        self.remove_prefix(
            &self.inner.pending,
            &layout::owner_prefix(session),
            "clear tool results",
        )?;
        self.tee(session, || TeedWrite::PendingCleared);
        Ok(())
    }

    /// Appends a compaction marker; the newest one is where
    /// [`Store::load_history`] starts.
    pub fn put_marker(&self, session: &str, marker: &CompactionMarker) -> Result<(), StoreError> {
        self.require_session(session)?;
        let value = layout::encode(marker)?;
        let key = layout::numbered_key(session, self.next_id()?);
        self.inner
            .markers
            .insert(key, value)
            .map_err(self.sled_err("store a compaction marker"))?;
        self.tee(session, || TeedWrite::Marker(marker.clone()));
        Ok(())
    }

    /// The session's compaction markers, oldest first.
    pub fn markers(&self, session: &str) -> Result<Vec<CompactionMarker>, StoreError> {
        self.require_session(session)?;
        self.scan_session(&self.inner.markers, layout::MARKERS_TREE, session)
    }

    /// Records a layer-1 decision for a call id (a second entry for the same
    /// call id replaces the first; the compactor decides once).
    pub fn put_ledger_entry(&self, session: &str, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.require_session(session)?;
        check_child_id("call", &entry.call_id)?;
        let record = LedgerRecord {
            order: self.next_id()?,
            entry: entry.clone(),
        };
        self.inner
            .ledger
            .insert(
                layout::child_key(session, &entry.call_id),
                layout::encode(&record)?,
            )
            .map_err(self.sled_err("store a ledger entry"))?;
        self.tee(session, || TeedWrite::Ledger(entry.clone()));
        Ok(())
    }

    /// The session's ledger, in the order the decisions were recorded.
    pub fn ledger(&self, session: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.require_session(session)?;
        let mut records: Vec<LedgerRecord> =
            self.scan_session(&self.inner.ledger, layout::LEDGER_TREE, session)?;
        records.sort_by_key(|record| record.order);
        Ok(records.into_iter().map(|record| record.entry).collect())
    }

    /// Replaces the session's "allow always" rules.
    pub fn put_session_rules(&self, session: &str, rules: &[RuleEntry]) -> Result<(), StoreError> {
        self.require_session(session)?;
        self.inner
            .rules
            .insert(session.as_bytes(), layout::encode(&rules)?)
            .map_err(self.sled_err("store session rules"))?;
        Ok(())
    }

    /// The session's "allow always" rules (empty when none were stored).
    pub fn session_rules(&self, session: &str) -> Result<Vec<RuleEntry>, StoreError> {
        self.require_session(session)?;
        let raw = self
            .inner
            .rules
            .get(session.as_bytes())
            .map_err(self.sled_err("read session rules"))?;
        match raw {
            Some(raw) => decode_one(format!("rules of session {session:?}"), &raw),
            None => Ok(Vec::new()),
        }
    }

    /// Keeps the project memory the session's stable prompt holds (empty:
    /// none), so its later runs send the same prompt.
    pub fn put_session_memory(&self, session: &str, memory: &str) -> Result<(), StoreError> {
        self.require_session(session)?;
        self.inner
            .memory
            .insert(session.as_bytes(), layout::encode(&memory)?)
            .map_err(self.sled_err("store the session's memory"))?;
        Ok(())
    }

    /// The project memory kept with the session; `None` when none was kept
    /// (a session from before memory was kept).
    pub fn session_memory(&self, session: &str) -> Result<Option<String>, StoreError> {
        self.require_session(session)?;
        let raw = self
            .inner
            .memory
            .get(session.as_bytes())
            .map_err(self.sled_err("read the session's memory"))?;
        raw.map(|raw| decode_one(format!("memory of session {session:?}"), &raw))
            .transpose()
    }

    /// Replaces the task plan of the session's agent (stamped with the
    /// order it was set in, so a rewind knows whether it came later).
    pub fn put_task_plan(&self, session: &str, plan: &TaskPlan) -> Result<(), StoreError> {
        self.require_session(session)?;
        let record = StoredTaskPlan::Stamped {
            order: self.next_id()?,
            plan: plan.clone(),
        };
        self.inner
            .task_plans
            .insert(session.as_bytes(), layout::encode(&record)?)
            .map_err(self.sled_err("store the task plan"))?;
        Ok(())
    }

    /// The task plan of the session's agent; `None` when it made none.
    pub fn task_plan(&self, session: &str) -> Result<Option<TaskPlan>, StoreError> {
        self.require_session(session)?;
        let raw = self
            .inner
            .task_plans
            .get(session.as_bytes())
            .map_err(self.sled_err("read the task plan"))?;
        raw.map(|raw| {
            decode_one::<StoredTaskPlan>(format!("task plan of session {session:?}"), &raw)
                .map(StoredTaskPlan::into_plan)
        })
        .transpose()
    }

    /// Every readable record under `session 0x00` in `tree`, in key order.
    pub(crate) fn scan_session<T: serde::de::DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        tree_name: &str,
        owner: &str,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        for item in tree.scan_prefix(layout::owner_prefix(owner)) {
            let (key, value) = item.map_err(self.sled_err("read records"))?;
            if let Some(record) = decode_listed(tree_name, &key, &value) {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Removes every key of `tree` that starts with `prefix`, in one batch.
    /// Returns how many were removed.
    pub(crate) fn remove_prefix(
        &self,
        tree: &sled::Tree,
        prefix: &[u8],
        op: &'static str,
    ) -> Result<usize, StoreError> {
        let mut batch = sled::Batch::default();
        let mut count = 0usize;
        for key in tree.scan_prefix(prefix).keys() {
            batch.remove(key.map_err(self.sled_err(op))?);
            count += 1;
        }
        if count > 0 {
            tree.apply_batch(batch).map_err(self.sled_err(op))?;
        }
        Ok(count)
    }
}
