//! The event log of one run: the single place where a run's events get their
//! sequence numbers and timestamps, are stored, and are fanned out to readers
//! (CLI renderer, `--json`, the daemon's SSE streams).
//!
//! One actor per run, so the order of `seq` is the order in which emissions
//! arrived. Each agent's own emissions stay in order (a mailbox is FIFO per
//! sender); emissions of parallel agents interleave. Each event is stored
//! before it is broadcast; the run's last event is also made durable first,
//! by the store's writer thread (the log waits for its answer without holding
//! an async worker), and broadcast through a ring of
//! [`crate::subscription::LIVE_BUFFER`] events that never waits:
//! the log keeps no history in memory and a reader that falls behind catches
//! up from the store (`EventSubscription`), so no reader can grow memory or
//! slow the run.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::broadcast;
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_store::Store;

#[cfg(test)]
use crate::subscription::EventSubscription;
use crate::subscription::LIVE_BUFFER;

/// Messages of the event log.
pub(crate) enum EventLogMsg {
    /// Record and broadcast one event.
    Emit {
        /// The emitting agent.
        agent_path: Arc<str>,
        /// The event.
        kind: EventKind,
    },
}

/// The event-log actor.
pub(crate) struct EventLog;

/// The live side of a run's events: subscribe to it, then read the store (see
/// [`EventSubscription::live`](crate::subscription::EventSubscription::live)).
pub(crate) type LiveEvents = broadcast::Sender<Arc<RunEvent>>;

/// A new live ring for one run's events.
pub(crate) fn live_events() -> LiveEvents {
    broadcast::channel(LIVE_BUFFER).0
}

/// Identity of the run whose events are logged.
pub(crate) struct EventLogArgs {
    /// Run id.
    pub run_id: String,
    /// Session id.
    pub session_id: String,
    /// Where events are stored before they are broadcast.
    pub store: Store,
    /// Where they are broadcast.
    pub live: LiveEvents,
    /// The `seq` of the run's first event here (1, or after the events a
    /// run continued from another node had there).
    pub first_seq: u64,
}

/// State of the event log.
pub(crate) struct EventLogState {
    run_id: String,
    session_id: String,
    /// The sequence number of the next event.
    next_seq: u64,
    live: LiveEvents,
    store: Store,
    store_failed: bool,
}

impl Actor for EventLog {
    type Msg = EventLogMsg;
    type State = EventLogState;
    type Arguments = EventLogArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(EventLogState {
            run_id: args.run_id,
            session_id: args.session_id,
            next_seq: args.first_seq.max(1),
            live: args.live,
            store: args.store,
            store_failed: false,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            EventLogMsg::Emit { agent_path, kind } => state.record(&agent_path, kind).await,
        }
        Ok(())
    }
}

impl EventLogState {
    /// Stores an event before anyone sees it (DESIGN.md principle 6); the
    /// last event of a run is made durable by the store's writer, awaited at
    /// most [`troupe_store::CONFIRM_DEADLINE`].
    /// Returns the store's error the first time it fails (later failures of
    /// the same run are only logged).
    async fn store_event(&mut self, event: &RunEvent) -> Option<String> {
        // Only the run actor emits `run_finished`, once, as the last event.
        let last = matches!(event.kind, EventKind::RunFinished { .. });
        let mut stored = self.store.append_event(event);
        if last && stored.is_ok() {
            let durable = self.store.commit_and_wait(|_| Ok(()));
            stored = tokio::time::timeout(troupe_store::CONFIRM_DEADLINE, durable)
                .await
                .unwrap_or_else(|_| Err(troupe_store::unconfirmed("the run's events")));
        }
        match stored {
            Ok(()) => None,
            Err(err) => {
                tracing::error!(run = %self.run_id, %err, "an event could not be stored");
                if self.store_failed {
                    return None;
                }
                self.store_failed = true;
                Some(err.to_string())
            }
        }
    }

    /// Numbers, stores and broadcasts one event.
    async fn record(&mut self, agent_path: &str, kind: EventKind) {
        let event = RunEvent {
            seq: self.next_seq,
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            agent_path: agent_path.to_string(),
            ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind,
        };
        let failure = self.store_event(&event).await;
        let finished = matches!(event.kind, EventKind::RunFinished { .. });
        let error = failure.map(|message| EventKind::Error {
            kind: "store".into(),
            message: format!("events of this run could not be stored: {message}"),
        });
        match error {
            // The run's last event stays last: the store error goes before it.
            Some(error) if finished => {
                let mut event = event;
                self.broadcast(RunEvent {
                    kind: error,
                    ..event.clone()
                });
                event.seq = self.next_seq;
                self.broadcast(event);
            }
            Some(error) => {
                let path = event.agent_path.clone();
                self.broadcast(event);
                // Not `run_finished`, so this record stores without awaiting
                // and cannot fail again (the failure is reported once).
                Box::pin(self.record(&path, error)).await;
            }
            None => self.broadcast(event),
        }
    }

    /// Sends one event to the live readers (none is an error for nobody) and
    /// moves the sequence on.
    fn broadcast(&mut self, event: RunEvent) {
        self.next_seq = event.seq + 1;
        let _ = self.live.send(Arc::new(event));
    }
}

/// A cheap handle agents use to emit events under their own path.
#[derive(Clone)]
pub(crate) struct EventSink {
    log: ActorRef<EventLogMsg>,
    agent_path: Arc<str>,
}

impl EventSink {
    /// A sink emitting into `log` as `agent_path`.
    pub(crate) fn new(log: ActorRef<EventLogMsg>, agent_path: impl Into<Arc<str>>) -> Self {
        Self {
            log,
            agent_path: agent_path.into(),
        }
    }

    /// The same log under another agent path (for sub-agents).
    pub(crate) fn for_agent(&self, agent_path: impl Into<Arc<str>>) -> Self {
        Self {
            log: self.log.clone(),
            agent_path: agent_path.into(),
        }
    }

    /// Emits one event. A log that is gone (the run was torn down) is not an
    /// error for the emitter: the event is dropped with a debug log.
    pub(crate) fn emit(&self, kind: EventKind) {
        if let Err(err) = self.log.cast(EventLogMsg::Emit {
            agent_path: self.agent_path.clone(),
            kind,
        }) {
            tracing::debug!(%err, "event log gone; event dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::events::RunStatus;
    use troupe_protocol::model::Usage;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        live: LiveEvents,
        log: ActorRef<EventLogMsg>,
        handle: ractor::concurrency::JoinHandle<()>,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let live = live_events();
        let (log, handle) = Actor::spawn(
            None,
            EventLog,
            EventLogArgs {
                run_id: "r1".into(),
                session_id: "s1".into(),
                store: store.clone(),
                live: live.clone(),
                first_seq: 1,
            },
        )
        .await
        .unwrap();
        Fixture {
            _dir: dir,
            store,
            live,
            log,
            handle,
        }
    }

    fn finished() -> EventKind {
        EventKind::RunFinished {
            status: RunStatus::Finished,
            stop_reason: "end_turn".into(),
            final_text: "done".into(),
            usage_total: Usage::default(),
        }
    }

    async fn read_all(mut subscription: EventSubscription) -> Vec<RunEvent> {
        let mut events = Vec::new();
        let wait = std::time::Duration::from_secs(10);
        while let Some(event) = tokio::time::timeout(wait, subscription.recv())
            .await
            .unwrap()
        {
            events.push(event);
        }
        events
    }

    #[tokio::test]
    async fn numbers_stores_and_replays_in_order() {
        let f = fixture().await;
        let sink = EventSink::new(f.log.clone(), "main");
        let early = EventSubscription::live(f.store.clone(), "r1".into(), 1, f.live.subscribe());
        for n in 1..=3 {
            sink.emit(EventKind::Iteration { n });
        }
        // A late reader asks from seq 2: what it missed comes from the store.
        let late = EventSubscription::live(f.store.clone(), "r1".into(), 2, f.live.subscribe());
        sink.for_agent("main/child").emit(EventKind::notice("x"));
        sink.emit(finished());

        let early = read_all(early).await;
        assert_eq!(
            early.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(early[3].agent_path, "main/child");
        assert_eq!(early[0].run_id, "r1");
        let late = read_all(late).await;
        assert_eq!(
            late.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
        assert_eq!(late, early[1..].to_vec());
        // Every event is in the store, in order; a reader of the ended run
        // gets them from there alone.
        let stored = read_all(EventSubscription::stored(f.store.clone(), "r1".into(), 4)).await;
        assert_eq!(stored, early[3..].to_vec());
        f.log.stop(None);
        f.handle.await.unwrap();
    }

    #[tokio::test]
    async fn a_reader_that_never_reads_catches_up_from_the_store() {
        let f = fixture().await;
        let sink = EventSink::new(f.log.clone(), "main");
        let mut stalled =
            EventSubscription::live(f.store.clone(), "r1".into(), 1, f.live.subscribe());
        sink.emit(EventKind::Iteration { n: 1 });
        // It reads the first event live, then stops reading.
        assert_eq!(stalled.recv().await.unwrap().seq, 1);
        let total = (LIVE_BUFFER * 5) as u32;
        for n in 1..=total {
            sink.emit(EventKind::TextDelta {
                text: format!("delta {n}"),
            });
        }
        sink.emit(finished());
        // The log ends (as it does after a run) while the reader has not
        // read a single event: the ring overwrote most of them.
        f.log.drain().unwrap();
        f.handle.await.unwrap();
        let events = read_all(stalled).await;
        assert_eq!(events.len(), total as usize + 1);
        assert!(
            events
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == i as u64 + 2)
        );
        assert!(matches!(
            events.last().unwrap().kind,
            EventKind::RunFinished { .. }
        ));
    }

    #[tokio::test]
    async fn a_reader_that_falls_behind_mid_run_misses_nothing() {
        let f = fixture().await;
        let sink = EventSink::new(f.log.clone(), "main");
        let mut reader =
            EventSubscription::live(f.store.clone(), "r1".into(), 1, f.live.subscribe());
        // A second reader that keeps up tells when the log has broadcast
        // everything emitted so far.
        let mut pacer =
            EventSubscription::live(f.store.clone(), "r1".into(), 1, f.live.subscribe());
        let mut seen = Vec::new();
        // Read a little, let the ring overflow, read again, repeat.
        let mut n = 0u32;
        for _ in 0..4 {
            for _ in 0..(LIVE_BUFFER as u32 * 2) {
                n += 1;
                sink.emit(EventKind::Iteration { n });
            }
            while pacer.recv().await.unwrap().seq < u64::from(n) {}
            for _ in 0..10 {
                seen.push(reader.recv().await.unwrap().seq);
            }
        }
        sink.emit(finished());
        while let Some(event) = reader.recv().await {
            seen.push(event.seq);
        }
        assert_eq!(seen, (1..=u64::from(n) + 1).collect::<Vec<_>>());
        f.log.stop(None);
        f.handle.await.unwrap();
    }
}
