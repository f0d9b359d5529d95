//! What the live runs list keeps between refreshes. Tokens per run, summed
//! from each run's `usage` events: each look reads only the events stored
//! since the last one, so a live list costs the store a short range read
//! per shown run; at most [`MAX_RUNS`] runs are remembered, past that the
//! memory starts again. And the rows last rendered for each filter
//! ([`SharedRows`]), so that any number of open dashboards with the same
//! filters cost one look at the store per refresh.

use std::collections::HashMap;
use std::sync::Mutex;

use troupe_protocol::events::RunEvent;
use troupe_protocol::model::Usage;
use troupe_store::{Store, StoreError};

/// The most runs whose tokens are remembered.
pub(crate) const MAX_RUNS: usize = 4_096;

/// What is known of one run: the next sequence number to read and the
/// tokens so far.
type Known = (u64, Usage);

/// `known` advanced over `events` (in order): their usage added, the next
/// sequence number past the last.
pub(crate) fn advance(known: Known, events: &[RunEvent]) -> Known {
    let (mut next, mut usage) = known;
    for event in events {
        if let Some(used) = super::model::usage_of(&event.kind) {
            usage.add(&used);
        }
        next = next.max(event.seq.saturating_add(1));
    }
    (next, usage)
}

/// The remembered tokens of runs.
#[derive(Default)]
pub(crate) struct RunTokens {
    known: Mutex<HashMap<String, Known>>,
}

impl RunTokens {
    /// The tokens run `run_id` has used so far.
    pub(crate) fn of(&self, store: &Store, run_id: &str) -> Result<Usage, StoreError> {
        let known = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned()
            .unwrap_or((1, Usage::default()));
        let events = store.events(run_id, known.0)?;
        let (next, usage) = advance(known, &events);
        let mut remembered = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= MAX_RUNS && !remembered.contains_key(run_id) {
            remembered.clear();
        }
        remembered.insert(run_id.to_string(), (next, usage));
        Ok(usage)
    }
}

/// The most filters whose rows are kept.
pub(crate) const MAX_FILTERS: usize = 64;

/// The rows last rendered for each filter of the live runs list, with when.
#[derive(Default)]
pub(crate) struct SharedRows {
    rendered: Mutex<HashMap<String, (std::time::Instant, std::sync::Arc<str>)>>,
}

impl SharedRows {
    /// The rows for `filter`: those rendered less than `fresh_for` before
    /// `now`, or `render`'s, kept for the next dashboard that asks.
    pub(crate) fn get_or_render<E>(
        &self,
        filter: &str,
        now: std::time::Instant,
        fresh_for: std::time::Duration,
        render: impl FnOnce() -> Result<String, E>,
    ) -> Result<std::sync::Arc<str>, E> {
        if let Some((at, rows)) = self
            .rendered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(filter)
            && now.saturating_duration_since(*at) < fresh_for
        {
            return Ok(rows.clone());
        }
        let rows: std::sync::Arc<str> = render()?.into();
        let mut rendered = self.rendered.lock().unwrap_or_else(|p| p.into_inner());
        if rendered.len() >= MAX_FILTERS && !rendered.contains_key(filter) {
            rendered.clear();
        }
        rendered.insert(filter.to_string(), (now, rows.clone()));
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::events::EventKind;

    use super::*;

    fn event(seq: u64, kind: EventKind) -> RunEvent {
        crate::dashboard::model::test_event(seq, "main", kind)
    }

    #[test]
    fn rows_are_rendered_once_per_filter_while_fresh() {
        use std::time::{Duration, Instant};
        let shared = SharedRows::default();
        let now = Instant::now();
        let fresh = Duration::from_millis(500);
        let mut renders = 0;
        let mut render = |text: &str| {
            renders += 1;
            Ok::<_, ()>(text.to_string())
        };
        assert_eq!(
            &*shared
                .get_or_render("a", now, fresh, || render("1"))
                .unwrap(),
            "1"
        );
        assert_eq!(
            &*shared
                .get_or_render("a", now + Duration::from_millis(100), fresh, || render("2"))
                .unwrap(),
            "1"
        );
        assert_eq!(
            &*shared
                .get_or_render("b", now, fresh, || render("3"))
                .unwrap(),
            "3"
        );
        assert_eq!(
            &*shared
                .get_or_render("a", now + fresh, fresh, || render("4"))
                .unwrap(),
            "4"
        );
        assert_eq!(renders, 3);
        assert!(
            shared
                .get_or_render("c", now, fresh, || Err::<String, _>(()))
                .is_err()
        );
        for n in 0..MAX_FILTERS + 1 {
            let _ = shared.get_or_render(&n.to_string(), now, fresh, || Ok::<_, ()>(String::new()));
        }
        assert!(shared.rendered.lock().unwrap().len() <= MAX_FILTERS);
    }

    #[test]
    fn usage_is_added_once_and_the_next_read_starts_past_it() {
        let usage = |input| EventKind::Usage {
            input,
            output: 1,
            cache_read: 2,
            cache_write: 0,
        };
        let first = advance(
            (1, Usage::default()),
            &[event(1, usage(10)), event(2, EventKind::notice("n"))],
        );
        assert_eq!(first.0, 3);
        assert_eq!(first.1.total(), 13);
        let second = advance(first, &[event(5, usage(5))]);
        assert_eq!(second.0, 6);
        assert_eq!(second.1.input, 15);
        assert_eq!(advance(second, &[]), second);
    }
}
