//! The event log of one run: the single place where a run's events get their
//! sequence numbers and timestamps, are kept for replay, and are fanned out to
//! subscribers (CLI renderer, `--json`, the daemon's SSE streams).
//!
//! One actor per run, so the order of `seq` is the order in which emissions
//! arrived. Each agent's own emissions stay in order (a mailbox is FIFO per
//! sender); emissions of parallel agents interleave. Subscribers get the backlog
//! from the sequence number they ask for and then every new event, over an
//! unbounded channel so a slow reader never loses an event.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use troupe_runtime::events::{EventKind, RunEvent};
use troupe_runtime::store::Store;

/// Messages of the event log.
pub enum EventLogMsg {
    /// Record and broadcast one event.
    Emit {
        /// The emitting agent.
        agent_path: Arc<str>,
        /// The event.
        kind: EventKind,
    },
    /// Receive every event with `seq >= from_seq`, then every new one.
    Subscribe {
        /// First sequence number wanted (1 = everything).
        from_seq: u64,
        /// Where to send them.
        sender: mpsc::UnboundedSender<RunEvent>,
    },
    /// Every event so far.
    Snapshot(RpcReplyPort<Vec<RunEvent>>),
}

/// The event-log actor.
pub struct EventLog;

/// Identity of the run whose events are logged.
pub struct EventLogArgs {
    /// Run id.
    pub run_id: String,
    /// Session id.
    pub session_id: String,
    /// Where events are stored before they are broadcast.
    pub store: Option<Store>,
}

/// State of the event log.
pub struct EventLogState {
    run_id: String,
    session_id: String,
    events: Vec<RunEvent>,
    subscribers: Vec<mpsc::UnboundedSender<RunEvent>>,
    store: Option<Store>,
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
            events: Vec::new(),
            subscribers: Vec::new(),
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
            EventLogMsg::Emit { agent_path, kind } => state.record(&agent_path, kind),
            EventLogMsg::Subscribe { from_seq, sender } => {
                let start = from_seq.saturating_sub(1) as usize;
                let delivered = state
                    .events
                    .iter()
                    .skip(start)
                    .all(|event| sender.send(event.clone()).is_ok());
                if delivered {
                    state.subscribers.push(sender);
                }
            }
            EventLogMsg::Snapshot(reply) => {
                // The caller may have gone away; nothing to do then.
                let _ = reply.send(state.events.clone());
            }
        }
        Ok(())
    }
}

impl EventLogState {
    /// Stores an event before anyone sees it (DESIGN.md principle 6); the
    /// last event of a run is flushed. Returns the store's error the first
    /// time it fails (later failures of the same run are only logged).
    fn store_event(&mut self, event: &RunEvent) -> Option<String> {
        let store = self.store.as_ref()?;
        // Only the run actor emits `run_finished`, once, as the last event.
        let last = matches!(event.kind, EventKind::RunFinished { .. });
        let stored = store
            .append_event(event)
            .and_then(|()| if last { store.flush() } else { Ok(()) });
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

    /// Numbers, keeps and sends one event.
    fn record(&mut self, agent_path: &str, kind: EventKind) {
        let event = RunEvent {
            seq: self.events.len() as u64 + 1,
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            agent_path: agent_path.to_string(),
            ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind,
        };
        let failure = self.store_event(&event);
        let finished = matches!(event.kind, EventKind::RunFinished { .. });
        let error = failure.map(|message| EventKind::Error {
            kind: "store".into(),
            message: format!("events of this run could not be stored: {message}"),
        });
        match error {
            // The run's last event stays last: the store error goes before it.
            Some(error) if finished => {
                let mut event = event;
                let numbered = self.events.len() as u64 + 1;
                self.broadcast(RunEvent {
                    seq: numbered,
                    kind: error,
                    ..event.clone()
                });
                event.seq = numbered + 1;
                self.broadcast(event);
            }
            Some(error) => {
                let path = event.agent_path.clone();
                self.broadcast(event);
                self.record(&path, error);
            }
            None => self.broadcast(event),
        }
    }

    fn broadcast(&mut self, event: RunEvent) {
        self.subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
        self.events.push(event);
    }
}

/// A cheap handle agents use to emit events under their own path.
#[derive(Clone)]
pub struct EventSink {
    log: ActorRef<EventLogMsg>,
    agent_path: Arc<str>,
}

impl EventSink {
    /// A sink emitting into `log` as `agent_path`.
    pub fn new(log: ActorRef<EventLogMsg>, agent_path: impl Into<Arc<str>>) -> Self {
        Self {
            log,
            agent_path: agent_path.into(),
        }
    }

    /// The same log under another agent path (for sub-agents).
    pub fn for_agent(&self, agent_path: impl Into<Arc<str>>) -> Self {
        Self {
            log: self.log.clone(),
            agent_path: agent_path.into(),
        }
    }

    /// The agent path events are emitted under.
    pub fn agent_path(&self) -> &str {
        &self.agent_path
    }

    /// The log actor.
    pub fn log(&self) -> &ActorRef<EventLogMsg> {
        &self.log
    }

    /// Emits one event. A log that is gone (the run was torn down) is not an
    /// error for the emitter: the event is dropped with a debug log.
    pub fn emit(&self, kind: EventKind) {
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

    #[tokio::test]
    async fn numbers_stores_and_replays_in_order() {
        let (log, handle) = Actor::spawn(
            None,
            EventLog,
            EventLogArgs {
                run_id: "r1".into(),
                session_id: "s1".into(),
                store: None,
            },
        )
        .await
        .unwrap();
        let sink = EventSink::new(log.clone(), "main");
        let (early_tx, mut early_rx) = mpsc::unbounded_channel();
        log.cast(EventLogMsg::Subscribe {
            from_seq: 1,
            sender: early_tx,
        })
        .unwrap();
        for n in 1..=3 {
            sink.emit(EventKind::Iteration { n });
        }
        let (late_tx, mut late_rx) = mpsc::unbounded_channel();
        log.cast(EventLogMsg::Subscribe {
            from_seq: 2,
            sender: late_tx,
        })
        .unwrap();
        sink.for_agent("main/child").emit(EventKind::notice("x"));

        let mut early = Vec::new();
        for _ in 0..4 {
            early.push(early_rx.recv().await.unwrap());
        }
        assert_eq!(
            early.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(early[3].agent_path, "main/child");
        assert_eq!(early[0].run_id, "r1");
        let mut late = Vec::new();
        for _ in 0..3 {
            late.push(late_rx.recv().await.unwrap().seq);
        }
        assert_eq!(late, vec![2, 3, 4]);
        let snapshot = ractor::call!(log, EventLogMsg::Snapshot).unwrap();
        assert_eq!(snapshot.len(), 4);
        log.stop(None);
        handle.await.unwrap();
    }
}
