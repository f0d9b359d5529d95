//! Following a run's events with bounded memory, however slow the reader.
//!
//! The [event log](crate::event_log) stores every event before it broadcasts
//! it, and broadcasts through a fixed-size ring ([`LIVE_BUFFER`] events): the
//! run never waits for a reader and no reader can make the log hold more. An
//! [`EventSubscription`] delivers every event from the sequence number it was
//! asked for, in order, exactly once: what it missed — the backlog before it
//! subscribed, or events the ring overwrote while it was not reading — it reads
//! back from the store in pages of [`CATCH_UP_PAGE`] events, then it follows
//! the live ring again. A run that has ended is read from the store alone.
//!
//! The decision taken for each live event ([`place`]) is pure and unit-tested;
//! the subscription only sequences store reads and ring receives.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast;
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_store::Store;

/// Events the live ring of a run keeps for readers that fall behind.
pub(crate) const LIVE_BUFFER: usize = 1024;

/// Events read from the store at a time while catching up.
pub(crate) const CATCH_UP_PAGE: usize = 256;

/// What to do with an event that arrived live, given the next sequence
/// number the reader wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Already delivered (it was read from the store): skip it.
    Seen,
    /// The one wanted next: deliver it.
    Next,
    /// Events before it were missed: read them from the store first.
    After {
        /// The first sequence number the live ring still had.
        live_seq: u64,
    },
}

/// Where a live event with `seq` goes when `next_seq` is wanted next.
pub(crate) fn place(next_seq: u64, seq: u64) -> Placement {
    match seq.cmp(&next_seq) {
        std::cmp::Ordering::Less => Placement::Seen,
        std::cmp::Ordering::Equal => Placement::Next,
        std::cmp::Ordering::Greater => Placement::After { live_seq: seq },
    }
}

/// Every event of one run from a chosen sequence number, in order.
///
/// `recv` is cancel-safe (it can sit in a `select!`): an event is taken
/// from the ring or the store only in the poll that returns it.
pub struct EventSubscription {
    store: Store,
    run_id: String,
    /// The sequence number to deliver next.
    next_seq: u64,
    /// The store is read while `next_seq` is below this number: `u64::MAX`
    /// = to the store's end (the backlog at the start; everything left
    /// once the live ring closed), a live event's number = the gap before
    /// it, 0 = nothing to read (following the live ring).
    stored_below: u64,
    /// Events read from the store and not yet delivered (at most a page).
    page: VecDeque<RunEvent>,
    /// A live event that came ahead of a gap, delivered once the gap is read.
    ahead: Option<Arc<RunEvent>>,
    /// The live ring; `None` once the run's log is gone (or for a run that
    /// had ended before the subscription).
    live: Option<broadcast::Receiver<Arc<RunEvent>>>,
    /// The run's last event was delivered.
    finished: bool,
}

impl EventSubscription {
    /// Follows a live run from `from_seq` (1 = everything). `live` must have
    /// been subscribed before this call: every event broadcast before that
    /// was stored before it, so reading the store to its end and then
    /// following `live` misses nothing.
    pub fn live(
        store: Store,
        run_id: String,
        from_seq: u64,
        live: broadcast::Receiver<Arc<RunEvent>>,
    ) -> Self {
        Self {
            live: Some(live),
            ..Self::stored(store, run_id, from_seq)
        }
    }

    /// Reads a run that is not in progress here (it ended, or another process
    /// ran it) from the store alone, from `from_seq`.
    pub fn stored(store: Store, run_id: String, from_seq: u64) -> Self {
        Self {
            store,
            run_id,
            next_seq: from_seq.max(1),
            stored_below: u64::MAX,
            page: VecDeque::new(),
            ahead: None,
            live: None,
            finished: false,
        }
    }

    /// The run this subscription follows.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The next event, or `None` after the run's last event (`run_finished`
    /// of the main agent) or when nothing more can come. A store that cannot
    /// be read ends the subscription with an error in the log.
    pub async fn recv(&mut self) -> Option<RunEvent> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(event) = self.page.pop_front() {
                return Some(self.deliver(event));
            }
            if self.next_seq < self.stored_below {
                match self.read_page() {
                    Some(true) => continue,
                    Some(false) => {}
                    None => return None,
                }
            }
            if let Some(ahead) = self.ahead.take() {
                // The gap before it is read (or lost with a failed store).
                return Some(self.deliver(Arc::unwrap_or_clone(ahead)));
            }
            let live = self.live.as_mut()?;
            match live.recv().await {
                Ok(event) => match place(self.next_seq, event.seq) {
                    Placement::Seen => {}
                    Placement::Next => return Some(self.deliver(Arc::unwrap_or_clone(event))),
                    Placement::After { live_seq } => {
                        self.stored_below = live_seq;
                        self.ahead = Some(event);
                    }
                },
                // The ring overwrote events this reader had not taken; the
                // next receive says where it resumes and the store fills in.
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(run = %self.run_id, missed, "event reader fell behind; catching up from the store");
                }
                // The log is gone: whatever is left is in the store.
                Err(broadcast::error::RecvError::Closed) => {
                    self.live = None;
                    self.stored_below = u64::MAX;
                }
            }
        }
    }

    /// Reads the next page from the store. `Some(true)`: events were read;
    /// `Some(false)`: the store has nothing more below `stored_below`;
    /// `None`: the store failed.
    fn read_page(&mut self) -> Option<bool> {
        let wanted = (self.stored_below - self.next_seq).min(CATCH_UP_PAGE as u64) as usize;
        match self.store.events_page(&self.run_id, self.next_seq, wanted) {
            Ok(events) => {
                let events: Vec<RunEvent> = events
                    .into_iter()
                    .take_while(|event| event.seq < self.stored_below)
                    .collect();
                if events.is_empty() {
                    if self.stored_below != u64::MAX {
                        // Nothing stored in a gap (the store failed while the
                        // run went on): go on from the live events.
                        tracing::warn!(
                            run = %self.run_id,
                            from = self.next_seq,
                            to = self.stored_below,
                            "events missing from the store were skipped"
                        );
                        self.next_seq = self.stored_below;
                    } else if self.live.is_some() {
                        // The backlog is read: follow the live ring.
                        self.stored_below = 0;
                    } else {
                        // Read to the end of a run that is not live.
                        self.finished = true;
                    }
                    return Some(false);
                }
                self.page.extend(events);
                Some(true)
            }
            Err(err) => {
                tracing::error!(run = %self.run_id, %err, "the run's events could not be read back");
                self.finished = true;
                None
            }
        }
    }

    /// Hands out `event` and moves past it.
    fn deliver(&mut self, event: RunEvent) -> RunEvent {
        self.next_seq = event.seq + 1;
        if matches!(event.kind, EventKind::RunFinished { .. }) && event.agent_path == "main" {
            self.finished = true;
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_event_is_skipped_delivered_or_waits_for_the_gap() {
        assert_eq!(place(5, 3), Placement::Seen);
        assert_eq!(place(5, 4), Placement::Seen);
        assert_eq!(place(5, 5), Placement::Next);
        assert_eq!(place(5, 9), Placement::After { live_seq: 9 });
        assert_eq!(place(1, 1), Placement::Next);
    }
}
