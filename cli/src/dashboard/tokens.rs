//! Tokens per run for the runs list, summed from each run's `usage` events
//! and kept between refreshes: each look reads only the events stored
//! since the last one, so a live list costs the store a short range read
//! per shown run. At most [`MAX_RUNS`] runs are remembered; past that the
//! memory starts again.

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

#[cfg(test)]
mod tests {
    use troupe_protocol::events::EventKind;

    use super::*;

    fn event(seq: u64, kind: EventKind) -> RunEvent {
        crate::dashboard::model::test_event(seq, "main", kind)
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
