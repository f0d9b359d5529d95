//! The account of one run, shared by every agent of its tree (SPEC §3 budgets,
//! §7 "children share the run's budget").
//!
//! [`RunAccount`] is a plain value: the budgets, what the tree has spent, the
//! first stop cause and the approval counter, changed only through `&mut`
//! methods. Every agent adds the usage of its responses to it, asks it before
//! every model call ([`RunAccount::check`]) and takes its tool calls from it
//! before running them ([`RunAccount::take_tool_calls`]). The first agent
//! that finds a shared budget used up records why ([`RunAccount::stop`]) and
//! asks its interpreter to stop the tree (`Effect::StopTree`).
//!
//! The loop reaches the run's account through [`RunLedger`], which the
//! interpreter implements: agents of one run work side by side in their own
//! actors, so the interpreter decides how the one account is shared between
//! them (`troupe-actors` keeps it behind a mutex, with the run's cancellation
//! root beside it). Nothing here owns a lock, a token or a clock: every
//! question that depends on the wall clock is asked with the `now` of the
//! input being handled.

use std::time::Duration;

use chrono::{DateTime, Utc};

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

/// The run-wide account: budgets, what was spent, the stop cause and the
/// approval counter.
#[derive(Debug, Clone)]
pub struct RunAccount {
    budget: Budget,
    started: DateTime<Utc>,
    tally: RunTally,
    stop: Option<StopCause>,
    approvals: u64,
}

impl RunAccount {
    /// An account with `budget` for a run that started at `started`.
    pub fn new(budget: Budget, started: DateTime<Utc>) -> Self {
        Self {
            budget,
            started,
            tally: RunTally::default(),
            stop: None,
            approvals: 0,
        }
    }

    /// The budgets.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Time from the run's start to `now` (zero for a clock set back).
    pub fn elapsed(&self, now: DateTime<Utc>) -> Duration {
        (now - self.started).to_std().unwrap_or(Duration::ZERO)
    }

    /// What the whole tree has spent so far.
    pub fn tally(&self) -> RunTally {
        self.tally
    }

    /// Adds one response's usage, priced when prices are known.
    pub fn add_usage(&mut self, usage: &Usage, price: Option<&Price>) {
        self.tally.add_usage(usage, price);
    }

    /// Checked before every model call of every agent, at `now`: the first
    /// budget used up, if any.
    pub fn check(&self, now: DateTime<Utc>) -> Option<LimitHit> {
        self.budget.check(&self.tally, self.elapsed(now))
    }

    /// Checked before a group of `wanted` tool calls runs: the spending budgets
    /// (tokens, cost, wall clock at `now`) must hold, then as many calls as the
    /// tool-call budget still allows are granted and counted.
    pub fn take_tool_calls(&mut self, wanted: u32, now: DateTime<Utc>) -> ToolCallGrant {
        let spending = RunTally {
            tool_calls: 0,
            ..self.tally
        };
        if let Some(hit) = self.budget.check(&spending, self.elapsed(now)) {
            return ToolCallGrant {
                granted: 0,
                hit: Some(hit),
            };
        }
        let remaining = self.budget.tool_calls.saturating_sub(self.tally.tool_calls);
        let granted = wanted.min(remaining);
        self.tally.tool_calls += granted;
        let hit = (granted < wanted).then_some(LimitHit::MaxToolCalls {
            limit: self.budget.tool_calls,
        });
        ToolCallGrant { granted, hit }
    }

    /// Records why the tree stops (the first cause wins). Returns true when
    /// this call set the cause. Stopping the tree itself is the
    /// interpreter's (the run's cancellation root).
    pub fn stop(&mut self, cause: StopCause) -> bool {
        if self.stop.is_some() {
            return false;
        }
        self.stop = Some(cause);
        true
    }

    /// Why the tree was stopped, if it was.
    pub fn stop_cause(&self) -> Option<&StopCause> {
        self.stop.as_ref()
    }

    /// A run-unique number for the next approval request.
    pub fn next_approval_number(&mut self) -> u64 {
        self.approvals += 1;
        self.approvals
    }
}

/// How an agent's loop reaches its run's [`RunAccount`], which every agent of
/// the tree shares. Each call is one step on the account, done as a whole
/// (the interpreter's implementation makes it atomic against other agents).
pub trait RunLedger: Send + Sync + std::fmt::Debug {
    /// [`RunAccount::check`].
    fn check(&self, now: DateTime<Utc>) -> Option<LimitHit>;
    /// [`RunAccount::add_usage`].
    fn add_usage(&self, usage: &Usage, price: Option<&Price>);
    /// [`RunAccount::take_tool_calls`].
    fn take_tool_calls(&self, wanted: u32, now: DateTime<Utc>) -> ToolCallGrant;
    /// [`RunAccount::stop`]: records the cause; true when it was the first.
    fn stop(&self, cause: StopCause) -> bool;
    /// [`RunAccount::stop_cause`].
    fn stop_cause(&self) -> Option<StopCause>;
    /// [`RunAccount::next_approval_number`].
    fn next_approval_number(&self) -> u64;
}

/// The tests' ledger: one account behind a mutex, as an interpreter shares it.
#[cfg(test)]
impl RunLedger for std::sync::Mutex<RunAccount> {
    fn check(&self, now: DateTime<Utc>) -> Option<LimitHit> {
        self.lock().unwrap().check(now)
    }
    fn add_usage(&self, usage: &Usage, price: Option<&Price>) {
        self.lock().unwrap().add_usage(usage, price);
    }
    fn take_tool_calls(&self, wanted: u32, now: DateTime<Utc>) -> ToolCallGrant {
        self.lock().unwrap().take_tool_calls(wanted, now)
    }
    fn stop(&self, cause: StopCause) -> bool {
        self.lock().unwrap().stop(cause)
    }
    fn stop_cause(&self) -> Option<StopCause> {
        self.lock().unwrap().stop_cause().cloned()
    }
    fn next_approval_number(&self) -> u64 {
        self.lock().unwrap().next_approval_number()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

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
        let mut account = RunAccount::new(budget(100, 10), start());
        let usage = Usage {
            input: 30,
            output: 10,
            cache_read: 0,
            cache_write: 0,
        };
        account.add_usage(&usage, None);
        assert!(account.check(start()).is_none());
        // Two more agents of the same run.
        account.add_usage(&usage, None);
        account.add_usage(&usage, None);
        let hit = account.check(start()).unwrap();
        assert_eq!(hit.stop_reason(), "budget_tokens");
        assert_eq!(account.tally().usage.total(), 120);
    }

    #[test]
    fn tool_calls_are_granted_up_to_the_budget_in_call_order() {
        let mut account = RunAccount::new(budget(1_000, 5), start());
        assert_eq!(
            account.take_tool_calls(3, start()),
            ToolCallGrant {
                granted: 3,
                hit: None
            }
        );
        let grant = account.take_tool_calls(4, start());
        assert_eq!(grant.granted, 2);
        assert_eq!(grant.hit, Some(LimitHit::MaxToolCalls { limit: 5 }));
        assert_eq!(account.take_tool_calls(1, start()).granted, 0);
        assert_eq!(account.tally().tool_calls, 5);
        assert_eq!(
            account.check(start()).unwrap().stop_reason(),
            "max_tool_calls"
        );
    }

    #[test]
    fn spent_tokens_refuse_tool_calls_too() {
        let mut account = RunAccount::new(budget(10, 500), start());
        account.add_usage(
            &Usage {
                input: 10,
                output: 0,
                cache_read: 0,
                cache_write: 0,
            },
            None,
        );
        let grant = account.take_tool_calls(2, start());
        assert_eq!(grant.granted, 0);
        assert_eq!(grant.hit.unwrap().stop_reason(), "budget_tokens");
        assert_eq!(account.tally().tool_calls, 0);
    }

    #[test]
    fn the_first_stop_cause_wins() {
        let mut account = RunAccount::new(budget(10, 5), start());
        assert!(account.stop_cause().is_none());
        assert!(account.stop(StopCause::Limit(LimitHit::MaxToolCalls { limit: 5 })));
        assert!(!account.stop(StopCause::Cancelled));
        assert_eq!(
            account.stop_cause(),
            Some(&StopCause::Limit(LimitHit::MaxToolCalls { limit: 5 }))
        );
    }

    #[test]
    fn approval_numbers_count_up() {
        let mut account = RunAccount::new(budget(10, 5), start());
        assert_eq!(account.next_approval_number(), 1);
        assert_eq!(account.next_approval_number(), 2);
    }

    #[test]
    fn the_wall_clock_is_measured_to_the_now_asked_with() {
        let mut account = RunAccount::new(budget(1_000, 5), start());
        let hour = chrono::Duration::hours(1);
        assert!(
            account
                .check(start() + hour - chrono::Duration::seconds(1))
                .is_none()
        );
        let hit = account.check(start() + hour).unwrap();
        assert_eq!(hit.stop_reason(), "wall_clock");
        let grant = account.take_tool_calls(2, start() + hour);
        assert_eq!(grant.granted, 0);
        assert_eq!(account.elapsed(start() - hour), Duration::ZERO);
    }
}
