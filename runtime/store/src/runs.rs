//! Runs, their events (SPEC §1.4, replayed from the store on reconnect) and
//! generic per-run span records.
//!
//! A run record is written with an index entry under its session so that a
//! session's runs are found without scanning every run. Events are keyed by
//! `(run_id, seq)`; sequence numbers are assigned by the caller's event log,
//! never here. Nothing here decides what a run's state should be.

use super::layout::{self, check_child_id, check_id};
use super::records::RunRecord;
use super::tee::TeedWrite;
use super::{Store, StoreError, decode_listed, decode_one, run_what};
use troupe_protocol::events::{EventKind, RunEvent};

impl Store {
    /// Inserts or replaces a run record. Its session must exist.
    ///
    /// The record is one atomic insert into the `runs` tree; the index entry
    /// under its session is written before it (and a stale one of another
    /// session removed after it), each a single insert or removal, never a
    /// transaction over trees (sled 0.34 can hang in those under sustained
    /// writes). A crash between them leaves at most an index entry naming a
    /// run that is not there, or not of that session, and listing passes
    /// over both.
    pub fn put_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        check_id("run", &run.run_id)?;
        self.require_session(&run.session_id)?;
        let value = layout::encode(run)?;
        // Written only when missing: its value says whether the run's
        // events were compacted, which a later record must not undo.
        let _ = self
            .inner
            .session_runs
            .compare_and_swap(
                layout::child_key(&run.session_id, &run.run_id),
                None as Option<&[u8]>,
                Some(&[] as &[u8]),
            )
            .map_err(self.sled_err("store a run"))?;
        let previous = self
            .inner
            .runs
            .insert(run.run_id.as_bytes(), value)
            .map_err(self.sled_err("store a run"))?;
        if let Some(previous) = previous
            && let Ok(previous) = layout::decode::<RunRecord>(&previous)
            && previous.session_id != run.session_id
        {
            self.inner
                .session_runs
                .remove(layout::child_key(&previous.session_id, &run.run_id))
                .map_err(self.sled_err("store a run"))?;
        }
        self.tee(&run.session_id, || TeedWrite::Run(run.clone()));
        Ok(())
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
                        && run.session_id == session
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

    /// Compacts the events of an ended run: each agent's unbroken streak of
    /// text deltas (or of thinking deltas) becomes one event holding the
    /// streak's text, at the sequence number and time of its last delta;
    /// every other event stays as it was. One batch into the events tree.
    /// Idempotent. Marks the run's index entry so that retention does not
    /// look at it again. Returns how many records were removed.
    ///
    /// A reader that resumes from a sequence number inside a streak gets
    /// the whole streak again (text it saw once more, never text lost).
    pub fn compact_run_events(&self, run_id: &str) -> Result<u64, StoreError> {
        check_id("run", run_id)?;
        let mut events = Vec::new();
        for item in self
            .inner
            .events
            .range(layout::numbered_key(run_id, 0)..layout::owner_end(run_id))
        {
            let (key, value) = item.map_err(self.sled_err("read events"))?;
            if let Some(event) = decode_listed::<RunEvent>(layout::EVENTS_TREE, &key, &value) {
                events.push(event);
            }
        }
        let plan = compacted_events(&events);
        let removed = plan.removed.len() as u64;
        if removed > 0 {
            let mut batch = sled::Batch::default();
            for seq in &plan.removed {
                batch.remove(layout::numbered_key(run_id, *seq));
            }
            for event in &plan.merged {
                batch.insert(
                    layout::numbered_key(run_id, event.seq),
                    layout::encode(event)?,
                );
            }
            self.inner
                .events
                .apply_batch(batch)
                .map_err(self.sled_err("compact events"))?;
        }
        if let Some(run) = self.run(run_id)? {
            self.inner
                .session_runs
                .insert(layout::child_key(&run.session_id, run_id), COMPACTED_MARK)
                .map_err(self.sled_err("compact events"))?;
        }
        Ok(removed)
    }

    /// Compacts the events of every run that ended before `ended_before` and
    /// was not compacted yet (see [`Store::compact_run_events`]). Each run
    /// is compacted on the writer thread,
    /// waited for, so agents' saves go between one and the next; never call
    /// it from a write handed to the writer. Returns how many runs were
    /// compacted.
    pub fn compact_ended_runs(
        &self,
        ended_before: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, StoreError> {
        let mut waiting = Vec::new();
        for item in self.inner.session_runs.iter() {
            let (key, value) = item.map_err(self.sled_err("list runs"))?;
            if value.as_ref() == COMPACTED_MARK {
                continue;
            }
            if let Some((_, run_id)) = layout::split_child_key(&key) {
                waiting.push(run_id.to_string());
            }
        }
        let mut compacted = 0;
        for run_id in waiting {
            let ended = self.run(&run_id).ok().flatten().is_some_and(|run| {
                !run.status.is_running() && run.ended.is_some_and(|at| at < ended_before)
            });
            if ended {
                self.through_writer(move |store| store.compact_run_events(&run_id))?;
                compacted += 1;
            }
        }
        Ok(compacted)
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

/// The value of a run's index entry once its events are compacted (empty
/// before).
const COMPACTED_MARK: &[u8] = b"c";

/// What compacting a run's events changes: the sequence numbers whose
/// records go, and the merged events written in place of a streak's last.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct EventCompaction {
    /// Records removed.
    pub removed: Vec<u64>,
    /// Records rewritten with a streak's whole text.
    pub merged: Vec<RunEvent>,
}

/// The delta kind of an event: 1 for text, 2 for thinking, 0 for others.
fn delta_kind(kind: &EventKind) -> u8 {
    match kind {
        EventKind::TextDelta { .. } => 1,
        EventKind::ThinkingDelta { .. } => 2,
        _ => 0,
    }
}

/// The pure rule of [`Store::compact_run_events`]: for each agent, each
/// unbroken streak (no other event of that agent between) of two or more
/// deltas of one kind becomes its last delta with the streak's whole text.
pub(crate) fn compacted_events(events: &[RunEvent]) -> EventCompaction {
    use std::collections::HashMap;
    // Per agent: the streak in progress, as (kind, seqs, text).
    let mut open: HashMap<&str, (u8, Vec<usize>, String)> = HashMap::new();
    let mut plan = EventCompaction::default();
    let close = |streak: (u8, Vec<usize>, String), plan: &mut EventCompaction| {
        let (_, positions, text) = streak;
        let Some((&last, earlier)) = positions.split_last() else {
            return;
        };
        if earlier.is_empty() {
            return;
        }
        plan.removed.extend(earlier.iter().map(|&i| events[i].seq));
        let mut merged = events[last].clone();
        merged.kind = match merged.kind {
            EventKind::ThinkingDelta { .. } => EventKind::ThinkingDelta { text },
            _ => EventKind::TextDelta { text },
        };
        plan.merged.push(merged);
    };
    for (position, event) in events.iter().enumerate() {
        let kind = delta_kind(&event.kind);
        let agent = event.agent_path.as_str();
        let continues = open
            .get(agent)
            .is_some_and(|(open_kind, _, _)| kind != 0 && *open_kind == kind);
        if !continues && let Some(streak) = open.remove(agent) {
            close(streak, &mut plan);
        }
        if kind == 0 {
            continue;
        }
        let text = match &event.kind {
            EventKind::TextDelta { text } | EventKind::ThinkingDelta { text } => text.as_str(),
            _ => "",
        };
        let streak = open
            .entry(agent)
            .or_insert_with(|| (kind, Vec::new(), String::new()));
        streak.1.push(position);
        streak.2.push_str(text);
    }
    let mut rest: Vec<_> = open.into_values().collect();
    rest.sort_by_key(|(_, positions, _)| positions.first().copied());
    for streak in rest {
        close(streak, &mut plan);
    }
    plan.removed.sort_unstable();
    plan.merged.sort_by_key(|event| event.seq);
    plan
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, agent: &str, kind: EventKind) -> RunEvent {
        RunEvent {
            seq,
            run_id: "r".into(),
            session_id: "s".into(),
            agent_path: agent.into(),
            ts: format!("t{seq}"),
            kind,
        }
    }

    fn text(seq: u64, agent: &str, text: &str) -> RunEvent {
        event(seq, agent, EventKind::TextDelta { text: text.into() })
    }

    fn thinking(seq: u64, agent: &str, text: &str) -> RunEvent {
        event(seq, agent, EventKind::ThinkingDelta { text: text.into() })
    }

    fn iteration(seq: u64, agent: &str) -> RunEvent {
        event(seq, agent, EventKind::Iteration { n: 1 })
    }

    #[test]
    fn each_agents_streak_of_one_kind_becomes_its_last_delta_with_the_whole_text() {
        let events = vec![
            iteration(1, "main"),
            thinking(2, "main", "let me "),
            thinking(3, "main", "think"),
            text(4, "main", "Hel"),
            // Another agent's events interleave without breaking main's streak.
            text(5, "main/a", "x"),
            text(6, "main", "lo"),
            text(7, "main/a", "y"),
            iteration(8, "main/a"),
            text(9, "main/a", "z"),
            text(10, "main", "!"),
            iteration(11, "main"),
            text(12, "main", "alone"),
        ];
        let plan = compacted_events(&events);
        assert_eq!(plan.removed, vec![2, 4, 5, 6]);
        assert_eq!(
            plan.merged,
            vec![
                thinking(3, "main", "let me think"),
                text(7, "main/a", "xy"),
                text(10, "main", "Hello!"),
            ]
        );
        // Compacting what was compacted changes nothing.
        let mut after: Vec<RunEvent> = events
            .into_iter()
            .filter(|e| !plan.removed.contains(&e.seq))
            .map(|e| {
                plan.merged
                    .iter()
                    .find(|m| m.seq == e.seq)
                    .cloned()
                    .unwrap_or(e)
            })
            .collect();
        after.sort_by_key(|e| e.seq);
        assert_eq!(compacted_events(&after), EventCompaction::default());
    }

    #[test]
    fn nothing_changes_without_two_deltas_in_a_row() {
        let events = vec![
            iteration(1, "main"),
            text(2, "main", "a"),
            iteration(3, "main"),
        ];
        assert_eq!(compacted_events(&events), EventCompaction::default());
        assert_eq!(compacted_events(&[]), EventCompaction::default());
    }
}
