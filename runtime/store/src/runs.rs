//! Runs, their events (SPEC §1.4, replayed from the store on reconnect) and
//! generic per-run span records.
//!
//! A run record is written with an index entry under its session so that a
//! session's runs are found without scanning every run. Events are keyed by
//! `(run_id, seq)`; sequence numbers are assigned by the caller's event log,
//! never here. Nothing here decides what a run's state should be.

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use super::layout::{self, check_child_id, check_id};
use super::records::RunRecord;
use super::{Store, StoreError, decode_listed, decode_one, run_what, session_what};
use troupe_protocol::events::RunEvent;

impl Store {
    /// Inserts or replaces a run record. Its session must exist.
    pub fn put_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        check_id("run", &run.run_id)?;
        check_id("session", &run.session_id)?;
        let value = layout::encode(run)?;
        let index_key = layout::child_key(&run.session_id, &run.run_id);
        (
            &self.inner.sessions,
            &self.inner.runs,
            &self.inner.session_runs,
        )
            .transaction(|(sessions, runs, session_runs)| {
                if sessions.get(run.session_id.as_bytes())?.is_none() {
                    return Err(ConflictableTransactionError::Abort(StoreError::NotFound {
                        what: session_what(&run.session_id),
                    }));
                }
                let previous = runs.insert(run.run_id.as_bytes(), value.as_slice())?;
                if let Some(previous) = previous
                    && let Ok(previous) = layout::decode::<RunRecord>(&previous)
                    && previous.session_id != run.session_id
                {
                    session_runs.remove(layout::child_key(&previous.session_id, &run.run_id))?;
                }
                session_runs.insert(index_key.as_slice(), &[])?;
                Ok(())
            })
            .map_err(self.tx_err("store a run"))
    }

    /// A run record, `None` when it does not exist.
    pub fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        check_id("run", run_id)?;
        let raw = self
            .inner
            .runs
            .get(run_id.as_bytes())
            .map_err(self.sled_err("read a run"))?;
        raw.map(|raw| decode_one(run_what(run_id), &raw))
            .transpose()
    }

    /// The runs of one session, or of every session, most recently started
    /// first. Damaged records are skipped with a warning.
    pub fn list_runs(&self, session: Option<&str>) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs = match session {
            Some(session) => {
                check_id("session", session)?;
                let mut runs = Vec::new();
                for key in self
                    .inner
                    .session_runs
                    .scan_prefix(layout::owner_prefix(session))
                    .keys()
                {
                    let key = key.map_err(self.sled_err("list runs"))?;
                    let Some(run_id) = layout::parse_child_key(session, &key) else {
                        continue;
                    };
                    let raw = self
                        .inner
                        .runs
                        .get(run_id.as_bytes())
                        .map_err(self.sled_err("read a run"))?;
                    if let Some(raw) = raw
                        && let Some(run) =
                            decode_listed::<RunRecord>(layout::RUNS_TREE, run_id.as_bytes(), &raw)
                    {
                        runs.push(run);
                    }
                }
                runs
            }
            None => self.all_runs()?,
        };
        runs.sort_by(|a, b| {
            b.started
                .cmp(&a.started)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        Ok(runs)
    }

    /// Every run still marked running (after a restart: the runs the previous
    /// process did not finish), most recently started first.
    pub fn unfinished_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs: Vec<RunRecord> = self
            .all_runs()?
            .into_iter()
            .filter(|run| run.status.is_running())
            .collect();
        runs.sort_by(|a, b| {
            b.started
                .cmp(&a.started)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        Ok(runs)
    }

    /// Stores an event under `(run_id, seq)`; storing the same sequence number
    /// again replaces it.
    pub fn append_event(&self, event: &RunEvent) -> Result<(), StoreError> {
        check_id("run", &event.run_id)?;
        self.inner
            .events
            .insert(
                layout::numbered_key(&event.run_id, event.seq),
                layout::encode(event)?,
            )
            .map_err(self.sled_err("store an event"))?;
        Ok(())
    }

    /// The run's events with `seq >= from_seq`, in sequence order. Damaged
    /// records are skipped with a warning.
    pub fn events(&self, run_id: &str, from_seq: u64) -> Result<Vec<RunEvent>, StoreError> {
        self.events_page(run_id, from_seq, usize::MAX)
    }

    /// At most `limit` of the run's events with `seq >= from_seq`, in
    /// sequence order: how a reader catches up without holding a long run's
    /// events at once. Damaged records are skipped with a warning (they do
    /// not count against `limit`).
    pub fn events_page(
        &self,
        run_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, StoreError> {
        check_id("run", run_id)?;
        let start = layout::numbered_key(run_id, from_seq);
        let end = layout::owner_end(run_id);
        let mut events = Vec::new();
        for item in self.inner.events.range(start..end) {
            if events.len() >= limit {
                break;
            }
            let (key, value) = item.map_err(self.sled_err("read events"))?;
            if let Some(event) = decode_listed(layout::EVENTS_TREE, &key, &value) {
                events.push(event);
            }
        }
        Ok(events)
    }

    /// Stores (or replaces) the span record `span_id` of a run.
    pub fn put_span(
        &self,
        run_id: &str,
        span_id: &str,
        record: &serde_json::Value,
    ) -> Result<(), StoreError> {
        check_id("run", run_id)?;
        check_child_id("span", span_id)?;
        self.inner
            .spans
            .insert(layout::child_key(run_id, span_id), layout::encode(record)?)
            .map_err(self.sled_err("store a span"))?;
        Ok(())
    }

    /// The span records of a run, ordered by span id.
    pub fn spans(&self, run_id: &str) -> Result<Vec<serde_json::Value>, StoreError> {
        check_id("run", run_id)?;
        self.scan_session(&self.inner.spans, layout::SPANS_TREE, run_id)
    }

    /// Every readable run record.
    fn all_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs = Vec::new();
        for item in self.inner.runs.iter() {
            let (key, value) = item.map_err(self.sled_err("list runs"))?;
            if let Some(run) = decode_listed(layout::RUNS_TREE, &key, &value) {
                runs.push(run);
            }
        }
        Ok(runs)
    }
}

/// The local span store (SPEC §11): each finished span of a run is kept with
/// the run, so `troupe trace RUN` needs no collector. A failed write is logged,
/// never raised: telemetry must not break a run.
impl troupe_telemetry::SpanSink for Store {
    fn record(&self, run_id: &str, span: troupe_telemetry::SpanRecord) {
        let stored = serde_json::to_value(&span)
            .map_err(StoreError::Encode)
            .and_then(|value| self.put_span(run_id, &span.span_id, &value));
        if let Err(err) = stored {
            tracing::warn!(run = run_id, %err, "a span could not be stored");
        }
    }
}
