//! The local span store for benchmarks that install telemetry once per
//! process but give every measured run its own harness and sled store: a
//! [`SpanSink`] that files each finished span in the store of the run being
//! measured, as the product files spans in its one session store (SPEC §11).
//!
//! It forwards to a [`SpanWriter`] over that store — the product's local span
//! store, which writes spans on a thread of its own — so a traced run pays
//! exactly what the product pays. It must not change how spans are made or
//! exported; it only picks the store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use troupe_store::{SpanWriter, Store};
use troupe_telemetry::{SpanRecord, SpanSink};

/// Forwards finished spans to the store set last.
#[derive(Debug, Default)]
pub struct StoreSwitch {
    current: RwLock<Option<SpanWriter>>,
    unfiled: AtomicU64,
}

impl StoreSwitch {
    /// No store yet: spans are counted as unfiled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Files later spans in `store`.
    pub fn set(&self, store: Store) {
        // The previous writer drains and stops when it is replaced.
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Some(SpanWriter::start(store));
    }

    /// Waits until the current store has every span recorded so far.
    pub fn sync(&self) {
        if let Some(writer) = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            writer.sync();
        }
    }

    /// Spans that ended while no store was set.
    pub fn unfiled(&self) -> u64 {
        self.unfiled.load(Ordering::Relaxed)
    }
}

impl SpanSink for StoreSwitch {
    fn record(&self, run_id: &str, span: SpanRecord) {
        // A panic elsewhere cannot leave an `Option<Store>` half-written, so a
        // poisoned lock is still usable.
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some(writer) => writer.record(run_id, span),
            None => {
                self.unfiled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;
    use troupe_telemetry::SpanStatus;

    use super::*;

    fn record(span_id: &str) -> SpanRecord {
        let now = Utc::now();
        SpanRecord {
            trace_id: "0123456789abcdef0123456789abcdef".into(),
            span_id: span_id.into(),
            parent_span_id: None,
            name: "execute_tool read_file".into(),
            start: now,
            end: now,
            duration_ms: 0.0,
            status: SpanStatus::Unset,
            attributes: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    #[test]
    fn spans_go_to_the_store_set_last() {
        let first_dir = tempfile::tempdir().unwrap();
        let second_dir = tempfile::tempdir().unwrap();
        let first = Store::open(first_dir.path()).unwrap();
        let second = Store::open(second_dir.path()).unwrap();
        let switch = StoreSwitch::new();

        switch.record("run-a", record("00000000000000a0"));
        assert_eq!(switch.unfiled(), 1);

        switch.set(first.clone());
        switch.record("run-a", record("00000000000000a1"));
        switch.set(second.clone());
        switch.record("run-b", record("00000000000000b1"));
        switch.record("run-b", record("00000000000000b2"));

        switch.sync();
        assert_eq!(first.spans("run-a").unwrap().len(), 1);
        assert!(first.spans("run-b").unwrap().is_empty());
        assert_eq!(second.spans("run-b").unwrap().len(), 2);
        assert_eq!(switch.unfiled(), 1);
    }
}
