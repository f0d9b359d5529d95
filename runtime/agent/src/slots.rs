//! Which session a submitted run may run in, as the root of the actor tree
//! keeps them (SPEC §9: one run per session at a time): each session it knows
//! is running a run, being opened from the store for one, or idle between
//! runs with its history in memory. [`SessionSlots`] decides admissions,
//! removals and what an ended run leaves, and forgets idle histories after
//! their keeping time; the runtime actor only carries out what it decides.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::session::{SessionState, keep_idle_session};

/// A session the runtime knows.
#[derive(Debug)]
enum Slot {
    /// The run with this id is in progress.
    Running(String),
    /// Its stored history is being read for a run about to start.
    Opening,
    /// Between runs, with what it keeps in memory.
    Idle(SessionState),
}

/// What a run asking to continue a session gets.
#[derive(Debug)]
pub enum Admission {
    /// Kept in memory since its last run: go on from it.
    Kept(SessionState),
    /// Not in memory: read it from the store (the session is marked as
    /// opening until [`SessionSlots::opened`] or [`SessionSlots::forget`]).
    FromStore,
    /// A run is in progress or about to start in it.
    Busy,
}

/// The sessions the runtime knows, by id.
#[derive(Debug)]
pub struct SessionSlots {
    slots: HashMap<String, Slot>,
    /// How long an idle session's history stays in memory.
    keep_idle: chrono::Duration,
}

impl SessionSlots {
    /// No session known yet; idle histories are kept for `keep_idle`.
    pub fn new(keep_idle: chrono::Duration) -> Self {
        Self {
            slots: HashMap::new(),
            keep_idle,
        }
    }

    /// A run asks to continue session `id`.
    pub fn continue_session(&mut self, id: &str) -> Admission {
        match self.slots.remove(id) {
            Some(Slot::Idle(session)) => Admission::Kept(session),
            Some(busy @ (Slot::Running(_) | Slot::Opening)) => {
                self.slots.insert(id.to_owned(), busy);
                Admission::Busy
            }
            None => {
                self.slots.insert(id.to_owned(), Slot::Opening);
                Admission::FromStore
            }
        }
    }

    /// A run asks for a new session `id`: false when the id is known already.
    pub fn new_session(&mut self, id: &str) -> bool {
        if self.slots.contains_key(id) {
            return false;
        }
        self.slots.insert(id.to_owned(), Slot::Opening);
        true
    }

    /// Session `id`, admitted, could not be opened or its run could not
    /// start: it is not known in memory any more.
    pub fn forget(&mut self, id: &str) {
        self.slots.remove(id);
    }

    /// Session `id` was opened from the store but its run does not start (the
    /// request was refused): it waits idle in memory as it was read.
    pub fn opened(&mut self, id: &str, session: SessionState) {
        self.slots.insert(id.to_owned(), Slot::Idle(session));
    }

    /// Run `run_id` started in the admitted session `id`.
    pub fn started(&mut self, id: &str, run_id: &str) {
        self.slots
            .insert(id.to_owned(), Slot::Running(run_id.to_owned()));
    }

    /// The run in session `id` ended at `now`, leaving `session` (none: the
    /// session is reopened and repaired from the store next time). Idle
    /// histories past their keeping time are forgotten first.
    pub fn ended(&mut self, id: &str, session: Option<SessionState>, now: DateTime<Utc>) {
        self.forget_idle(now);
        match session {
            Some(session) => {
                self.slots.insert(id.to_owned(), Slot::Idle(session));
            }
            None => {
                self.slots.remove(id);
            }
        }
    }

    /// Asks to remove session `id`: false while a run is in progress or
    /// about to start in it; otherwise it leaves memory (the caller removes
    /// it from the store).
    pub fn remove(&mut self, id: &str) -> bool {
        match self.slots.get(id) {
            Some(Slot::Running(_) | Slot::Opening) => false,
            _ => {
                self.slots.remove(id);
                true
            }
        }
    }

    /// The history of session `id` as memory has it: `Ok` with the idle
    /// history, `Err` with the run in progress (`None`: not in memory, or
    /// being opened).
    pub fn history(&self, id: &str) -> Result<&SessionState, Option<&str>> {
        match self.slots.get(id) {
            Some(Slot::Idle(session)) => Ok(session),
            Some(Slot::Running(run_id)) => Err(Some(run_id)),
            Some(Slot::Opening) | None => Err(None),
        }
    }

    /// Sessions in memory (running, opening or idle).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no session is in memory.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Drops the histories of sessions idle for longer than the keeping time
    /// at `now`.
    fn forget_idle(&mut self, now: DateTime<Utc>) {
        let keep = self.keep_idle;
        self.slots.retain(|_, slot| match slot {
            Slot::Running(_) | Slot::Opening => true,
            Slot::Idle(session) => keep_idle_session(session.last_active, now, keep),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    fn idle_since(minute: i64) -> SessionState {
        SessionState {
            last_active: Some(at(minute)),
            ..SessionState::default()
        }
    }

    fn slots() -> SessionSlots {
        SessionSlots::new(chrono::Duration::minutes(15))
    }

    #[test]
    fn a_session_not_in_memory_is_read_from_the_store_once() {
        let mut slots = slots();
        assert!(matches!(slots.continue_session("s"), Admission::FromStore));
        // A second run for it while it is being read waits its turn.
        assert!(matches!(slots.continue_session("s"), Admission::Busy));
        assert!(!slots.remove("s"), "not removed while it opens");
        slots.started("s", "r1");
        assert!(matches!(slots.continue_session("s"), Admission::Busy));
        assert_eq!(slots.history("s").unwrap_err(), Some("r1"));
    }

    #[test]
    fn an_ended_run_leaves_its_session_idle_in_memory_for_the_next() {
        let mut slots = slots();
        assert!(slots.new_session("s"));
        assert!(!slots.new_session("s"), "an id in use is refused");
        slots.started("s", "r1");
        slots.ended("s", Some(idle_since(0)), at(1));
        assert!(slots.history("s").is_ok());
        assert!(matches!(slots.continue_session("s"), Admission::Kept(_)));
        // Taken by the run that continues it: the next one is busy or reads it.
        assert!(matches!(slots.continue_session("s"), Admission::FromStore));
    }

    #[test]
    fn a_run_that_leaves_nothing_has_its_session_read_from_the_store_next() {
        let mut slots = slots();
        assert!(slots.new_session("s"));
        slots.started("s", "r1");
        slots.ended("s", None, at(0));
        assert!(slots.is_empty());
        assert!(matches!(slots.continue_session("s"), Admission::FromStore));
    }

    #[test]
    fn idle_histories_are_forgotten_after_their_keeping_time_when_a_run_ends() {
        let mut slots = slots();
        assert!(slots.new_session("old"));
        slots.ended("old", Some(idle_since(0)), at(0));
        assert!(slots.new_session("busy"));
        slots.started("busy", "r2");
        assert!(slots.new_session("new"));
        slots.ended("new", Some(idle_since(20)), at(20));
        assert_eq!(
            slots.len(),
            2,
            "the old one is forgotten, the running one kept"
        );
        assert_eq!(slots.history("old").unwrap_err(), None);
        assert_eq!(slots.history("busy").unwrap_err(), Some("r2"));
    }

    #[test]
    fn a_refused_or_failed_opening_leaves_the_session_as_read_or_unknown() {
        let mut slots = slots();
        assert!(matches!(slots.continue_session("s"), Admission::FromStore));
        slots.opened("s", idle_since(0));
        assert!(slots.remove("s"), "an idle session may be removed");
        assert!(slots.is_empty());
        assert!(matches!(slots.continue_session("t"), Admission::FromStore));
        slots.forget("t");
        assert!(matches!(slots.continue_session("t"), Admission::FromStore));
    }
}
