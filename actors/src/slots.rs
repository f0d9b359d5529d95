//! The run's sub-agent slots (SPEC §7: at most `max_parallel_subagents`
//! children work at once per run): a semaphore per run, and the slot each
//! agent holds with the rule for lending it to a child.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The sub-agent slot one agent holds, and the lending rule: an agent that
/// waits for its children does no work of its own, so it lends its slot to
/// the first child it starts and gets it back when that child ends. A chain
/// of nested children therefore always has a slot to go on with, however
/// many slots other agents hold.
#[derive(Debug)]
pub(crate) struct SlotHolder {
    /// The run's pool of slots (its children take theirs from it).
    pool: Arc<Semaphore>,
    /// The permit held, and whether it was lent by the parent.
    held: Option<(OwnedSemaphorePermit, bool)>,
    /// While the held slot is lent to a child: whether it was lent to us.
    lent_out: Option<bool>,
}

impl SlotHolder {
    /// The main agent's holder: no slot of its own, the run's `pool` of
    /// `parallel_subagents` slots (at least one) for its children.
    pub(crate) fn for_run(parallel_subagents: u32) -> Self {
        Self {
            pool: Arc::new(Semaphore::new(parallel_subagents.max(1) as usize)),
            held: None,
            lent_out: None,
        }
    }

    /// A child's holder of `permit` from `pool`; `lent` when the parent lent
    /// it.
    pub(crate) fn new(pool: Arc<Semaphore>, permit: OwnedSemaphorePermit, lent: bool) -> Self {
        Self {
            pool,
            held: Some((permit, lent)),
            lent_out: None,
        }
    }

    /// The held slot, lent to a child starting now (it comes back through
    /// [`SlotHolder::returned`]); `None` when there is none to lend.
    pub(crate) fn lend(&mut self) -> Option<OwnedSemaphorePermit> {
        let (permit, lent) = self.held.take()?;
        self.lent_out = Some(lent);
        Some(permit)
    }

    /// A child gave back the slot this agent lent it.
    pub(crate) fn returned(&mut self, permit: OwnedSemaphorePermit) {
        let lent = self.lent_out.take().unwrap_or(false);
        self.held = Some((permit, lent));
    }

    /// The agent ends: the slot to give back to its parent (one the parent
    /// lent); a slot of its own goes back to the run's pool when dropped here.
    pub(crate) fn release(&mut self) -> Option<OwnedSemaphorePermit> {
        match self.held.take() {
            Some((permit, true)) => Some(permit),
            _ => None,
        }
    }
}

impl SlotHolder {
    /// The run's pool, for a child that needs a slot of its own.
    pub(crate) fn pool(&self) -> &Arc<Semaphore> {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_slot_is_lent_to_the_first_child_and_comes_back() {
        let pool = Arc::new(Semaphore::new(2));
        let own = pool.clone().try_acquire_owned().unwrap();
        let mut parent = SlotHolder::new(pool.clone(), own, false);
        let first = parent.lend().expect("the parent's slot");
        assert!(parent.lend().is_none(), "lent once");
        // The child that got it gives it back at its end…
        let mut child = SlotHolder::new(pool.clone(), first, true);
        let back = child.release().expect("a lent slot goes back");
        parent.returned(back);
        assert_eq!(pool.available_permits(), 1);
        // …and the parent's own slot goes to the pool at its end.
        assert!(parent.release().is_none());
        assert_eq!(pool.available_permits(), 2);
    }

    #[test]
    fn a_lent_slot_stays_lent_through_a_grandchild() {
        let pool = Arc::new(Semaphore::new(1));
        let permit = pool.clone().try_acquire_owned().unwrap();
        // A child holding its parent's slot lends it on to its own child.
        let mut child = SlotHolder::new(pool.clone(), permit, true);
        let mut grandchild = SlotHolder::new(pool.clone(), child.lend().unwrap(), true);
        child.returned(grandchild.release().unwrap());
        assert!(child.release().is_some(), "still the parent's to get back");
        let mut main = SlotHolder::for_run(0);
        assert!(main.lend().is_none());
        assert!(main.release().is_none());
        assert_eq!(main.pool().available_permits(), 1, "at least one slot");
    }
}
