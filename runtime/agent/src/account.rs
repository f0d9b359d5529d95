//! The account of one run, shared by every agent of its tree (SPEC §3 budgets,
//! §7 "children share the run's budget").
//!
//! One [`RunAccount`] per run, behind an `Arc`: every agent adds the usage of
//! its responses to it, asks it before every model call ([`RunAccount::check`])
//! and takes its tool calls from it before running them
//! ([`RunAccount::take_tool_calls`]). The first agent that finds a shared
//! budget used up stops the whole tree through [`RunAccount::stop`], which
//! records why and cancels the run's root token; every agent watches a child
//! of that token and learns the cause from [`RunAccount::stop_cause`].
//!
//! The account also holds the run's sub-agent slots (SPEC §7: at most
//! `max_parallel_subagents` children work at once per run). It owns no I/O and
//! knows nothing of actors.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use troupe_config::Price;
use troupe_protocol::model::Usage;

use super::guard::{Budget, LimitHit, RunTally};

/// Why a run's tree was stopped from above.
#[derive(Debug, Clone, PartialEq)]
pub enum StopCause {
    /// Someone cancelled the run (front door, an approval answered "cancel").
    Cancelled,
    /// A shared budget of the run is used up (tokens, cost, wall clock, tool calls).
    Limit(LimitHit),
}

/// What [`RunAccount::take_tool_calls`] granted.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallGrant {
    /// How many of the wanted calls may run (the first ones, in call order).
    pub granted: u32,
    /// The budget that refused the rest, if any.
    pub hit: Option<LimitHit>,
}

/// The run-wide account: budgets, what was spent, the stop cause, the root
/// cancellation token and the sub-agent slots.
#[derive(Debug)]
pub struct RunAccount {
    budget: Budget,
    started: Instant,
    tally: Mutex<RunTally>,
    stop: OnceLock<StopCause>,
    root: CancellationToken,
    slots: Arc<Semaphore>,
    approvals: std::sync::atomic::AtomicU64,
}

impl RunAccount {
    /// An account with `budget`, whose tree hangs below `root`, allowing
    /// `parallel_subagents` children to work at once (at least one).
    pub fn new(budget: Budget, root: CancellationToken, parallel_subagents: u32) -> Self {
        Self {
            budget,
            started: Instant::now(),
            tally: Mutex::new(RunTally::default()),
            stop: OnceLock::new(),
            root,
            slots: Arc::new(Semaphore::new(parallel_subagents.max(1) as usize)),
            approvals: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The budgets.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What the whole tree has spent so far.
    pub fn tally(&self) -> RunTally {
        *self.lock()
    }

    /// Adds one response's usage, priced when prices are known.
    pub fn add_usage(&self, usage: &Usage, price: Option<&Price>) {
        self.lock().add_usage(usage, price);
    }

    /// Checked before every model call of every agent: the first budget used
    /// up, if any.
    pub fn check(&self) -> Option<LimitHit> {
        let tally = self.tally();
        self.budget.check(&tally, self.elapsed())
    }

    /// Checked before a group of `wanted` tool calls runs: the spending budgets
    /// (tokens, cost, wall clock) must hold, then as many calls as the
    /// tool-call budget still allows are granted and counted.
    pub fn take_tool_calls(&self, wanted: u32) -> ToolCallGrant {
        let elapsed = self.elapsed();
        let mut tally = self.lock();
        let spending = RunTally {
            tool_calls: 0,
            ..*tally
        };
        if let Some(hit) = self.budget.check(&spending, elapsed) {
            return ToolCallGrant {
                granted: 0,
                hit: Some(hit),
            };
        }
        let remaining = self.budget.tool_calls.saturating_sub(tally.tool_calls);
        let granted = wanted.min(remaining);
        tally.tool_calls += granted;
        let hit = (granted < wanted).then_some(LimitHit::MaxToolCalls {
            limit: self.budget.tool_calls,
        });
        ToolCallGrant { granted, hit }
    }

    /// Stops the whole tree: records `cause` (the first cause wins) and
    /// cancels the root token. Returns true when this call set the cause.
    pub fn stop(&self, cause: StopCause) -> bool {
        let first = self.stop.set(cause).is_ok();
        self.root.cancel();
        first
    }

    /// Why the tree was stopped, if it was.
    pub fn stop_cause(&self) -> Option<&StopCause> {
        self.stop.get()
    }

    /// The run's root cancellation token (the main agent's token is a child).
    pub fn root(&self) -> &CancellationToken {
        &self.root
    }

    /// The run's sub-agent slots: a child holds one while it works.
    pub fn slots(&self) -> &Arc<Semaphore> {
        &self.slots
    }

    /// A run-unique number for the next approval request.
    pub fn next_approval_number(&self) -> u64 {
        self.approvals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunTally> {
        // A panic while holding this lock leaves plain numbers behind: still usable.
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sub-agent slot one agent holds, and the lending rule: an agent that
/// waits for its children does no work of its own, so it lends its slot to
/// the first child it starts and gets it back when that child ends. A chain
/// of nested children therefore always has a slot to go on with, however
/// many slots other agents hold.
#[derive(Debug, Default)]
pub struct SlotHolder {
    /// The permit held, and whether it was lent by the parent.
    held: Option<(OwnedSemaphorePermit, bool)>,
    /// While the held slot is lent to a child: whether it was lent to us.
    lent_out: Option<bool>,
}

impl SlotHolder {
    /// A holder of `permit` (none for the main agent); `lent` when the
    /// parent lent it.
    pub fn new(permit: Option<OwnedSemaphorePermit>, lent: bool) -> Self {
        Self {
            held: permit.map(|permit| (permit, lent)),
            lent_out: None,
        }
    }

    /// The held slot, lent to a child starting now (it comes back through
    /// [`SlotHolder::returned`]); `None` when there is none to lend.
    pub fn lend(&mut self) -> Option<OwnedSemaphorePermit> {
        let (permit, lent) = self.held.take()?;
        self.lent_out = Some(lent);
        Some(permit)
    }

    /// A child gave back the slot this agent lent it.
    pub fn returned(&mut self, permit: OwnedSemaphorePermit) {
        let lent = self.lent_out.take().unwrap_or(false);
        self.held = Some((permit, lent));
    }

    /// The agent ends: the slot to give back to its parent (one the parent
    /// lent); a slot of its own goes back to the run's pool when dropped here.
    pub fn release(&mut self) -> Option<OwnedSemaphorePermit> {
        match self.held.take() {
            Some((permit, true)) => Some(permit),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: u64, tool_calls: u32) -> Budget {
        Budget {
            tokens,
            usd: None,
            wall_clock: Duration::from_secs(3600),
            tool_calls,
        }
    }

    #[test]
    fn usage_of_every_agent_adds_up_and_trips_the_shared_budget() {
        let account = RunAccount::new(budget(100, 10), CancellationToken::new(), 8);
        let usage = Usage {
            input: 30,
            output: 10,
            cache_read: 0,
            cache_write: 0,
        };
        account.add_usage(&usage, None);
        assert!(account.check().is_none());
        // Two more agents of the same run.
        account.add_usage(&usage, None);
        account.add_usage(&usage, None);
        let hit = account.check().unwrap();
        assert_eq!(hit.stop_reason(), "budget_tokens");
        assert_eq!(account.tally().usage.total(), 120);
    }

    #[test]
    fn tool_calls_are_granted_up_to_the_budget_in_call_order() {
        let account = RunAccount::new(budget(1_000, 5), CancellationToken::new(), 8);
        assert_eq!(
            account.take_tool_calls(3),
            ToolCallGrant {
                granted: 3,
                hit: None
            }
        );
        let grant = account.take_tool_calls(4);
        assert_eq!(grant.granted, 2);
        assert_eq!(grant.hit, Some(LimitHit::MaxToolCalls { limit: 5 }));
        assert_eq!(account.take_tool_calls(1).granted, 0);
        assert_eq!(account.tally().tool_calls, 5);
        assert_eq!(account.check().unwrap().stop_reason(), "max_tool_calls");
    }

    #[test]
    fn spent_tokens_refuse_tool_calls_too() {
        let account = RunAccount::new(budget(10, 500), CancellationToken::new(), 8);
        account.add_usage(
            &Usage {
                input: 10,
                output: 0,
                cache_read: 0,
                cache_write: 0,
            },
            None,
        );
        let grant = account.take_tool_calls(2);
        assert_eq!(grant.granted, 0);
        assert_eq!(grant.hit.unwrap().stop_reason(), "budget_tokens");
        assert_eq!(account.tally().tool_calls, 0);
    }

    #[test]
    fn the_first_stop_cause_wins_and_cancels_the_root() {
        let root = CancellationToken::new();
        let child = root.child_token();
        let account = RunAccount::new(budget(10, 5), root, 8);
        assert!(account.stop_cause().is_none());
        assert!(account.stop(StopCause::Limit(LimitHit::MaxToolCalls { limit: 5 })));
        assert!(!account.stop(StopCause::Cancelled));
        assert!(child.is_cancelled());
        assert_eq!(
            account.stop_cause(),
            Some(&StopCause::Limit(LimitHit::MaxToolCalls { limit: 5 }))
        );
    }

    #[test]
    fn a_held_slot_is_lent_to_the_first_child_and_comes_back() {
        let pool = Arc::new(Semaphore::new(2));
        let own = pool.clone().try_acquire_owned().unwrap();
        let mut parent = SlotHolder::new(Some(own), false);
        let first = parent.lend().expect("the parent's slot");
        assert!(parent.lend().is_none(), "lent once");
        // The child that got it gives it back at its end…
        let mut child = SlotHolder::new(Some(first), true);
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
        let mut child = SlotHolder::new(Some(permit), true);
        let mut grandchild = SlotHolder::new(child.lend(), true);
        child.returned(grandchild.release().unwrap());
        assert!(child.release().is_some(), "still the parent's to get back");
        assert!(SlotHolder::default().lend().is_none());
        assert!(SlotHolder::default().release().is_none());
    }

    #[test]
    fn slots_and_approval_numbers() {
        let account = RunAccount::new(budget(10, 5), CancellationToken::new(), 0);
        assert_eq!(account.slots().available_permits(), 1);
        assert_eq!(account.next_approval_number(), 1);
        assert_eq!(account.next_approval_number(), 2);
    }
}
