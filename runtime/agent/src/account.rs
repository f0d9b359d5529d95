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
//! It owns no I/O, reads no clock (every question that depends on the wall
//! clock is asked with the `now` of the input being handled) and knows nothing
//! of actors; the run's sub-agent slots are the actors' (`troupe-actors`).

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
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

/// The run-wide account: budgets, what was spent, the stop cause and the root
/// cancellation token.
#[derive(Debug)]
pub struct RunAccount {
    budget: Budget,
    started: DateTime<Utc>,
    tally: Mutex<RunTally>,
    stop: OnceLock<StopCause>,
    root: CancellationToken,
    approvals: std::sync::atomic::AtomicU64,
}

impl RunAccount {
    /// An account with `budget` for a run that started at `started`, whose
    /// tree hangs below `root`.
    pub fn new(budget: Budget, root: CancellationToken, started: DateTime<Utc>) -> Self {
        Self {
            budget,
            started,
            tally: Mutex::new(RunTally::default()),
            stop: OnceLock::new(),
            root,
            approvals: std::sync::atomic::AtomicU64::new(0),
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
        *self.lock()
    }

    /// Adds one response's usage, priced when prices are known.
    pub fn add_usage(&self, usage: &Usage, price: Option<&Price>) {
        self.lock().add_usage(usage, price);
    }

    /// Checked before every model call of every agent, at `now`: the first
    /// budget used up, if any.
    pub fn check(&self, now: DateTime<Utc>) -> Option<LimitHit> {
        let tally = self.tally();
        self.budget.check(&tally, self.elapsed(now))
    }

    /// Checked before a group of `wanted` tool calls runs: the spending budgets
    /// (tokens, cost, wall clock at `now`) must hold, then as many calls as the
    /// tool-call budget still allows are granted and counted.
    pub fn take_tool_calls(&self, wanted: u32, now: DateTime<Utc>) -> ToolCallGrant {
        let elapsed = self.elapsed(now);
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
        let account = RunAccount::new(budget(100, 10), CancellationToken::new(), start());
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
        let account = RunAccount::new(budget(1_000, 5), CancellationToken::new(), start());
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
        let account = RunAccount::new(budget(10, 500), CancellationToken::new(), start());
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
    fn the_first_stop_cause_wins_and_cancels_the_root() {
        let root = CancellationToken::new();
        let child = root.child_token();
        let account = RunAccount::new(budget(10, 5), root, start());
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
    fn approval_numbers_count_up() {
        let account = RunAccount::new(budget(10, 5), CancellationToken::new(), start());
        assert_eq!(account.next_approval_number(), 1);
        assert_eq!(account.next_approval_number(), 2);
    }

    #[test]
    fn the_wall_clock_is_measured_to_the_now_asked_with() {
        let account = RunAccount::new(budget(1_000, 5), CancellationToken::new(), start());
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
