//! The run's account as the actors share it: one [`RunAccount`] (a plain
//! value of `troupe-agent`) behind a mutex, with the run's cancellation root
//! beside it. Every agent of the run asks it through [`RunLedger`]; each ask
//! is one step under the lock, so two agents never take the same tool-call
//! budget. Stopping the tree is the interpreters' act: the loop records a
//! cause and says `StopTree`, the run machine says `RunEffect::StopTree`,
//! and both end here in [`SharedAccount::stop_tree`] or
//! [`SharedAccount::cancel_tree`].

use std::sync::{Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use troupe_agent::{LimitHit, RunAccount, RunLedger, StopCause, ToolCallGrant};
use troupe_config::Price;
use troupe_protocol::model::Usage;

/// One run's account and cancellation root, shared by its tree.
#[derive(Debug)]
pub(crate) struct SharedAccount {
    account: Mutex<RunAccount>,
    root: CancellationToken,
}

impl SharedAccount {
    /// The account of a run whose tree hangs below `root`.
    pub(crate) fn new(account: RunAccount, root: CancellationToken) -> Self {
        Self {
            account: Mutex::new(account),
            root,
        }
    }

    /// The run's cancellation root (the main agent's token is a child).
    pub(crate) fn root(&self) -> &CancellationToken {
        &self.root
    }

    /// Records `cause` (the first wins) and cancels the whole tree.
    pub(crate) fn stop_tree(&self, cause: StopCause) {
        self.lock().stop(cause);
        self.root.cancel();
    }

    /// Cancels the whole tree (the cause, if any, was recorded before).
    pub(crate) fn cancel_tree(&self) {
        self.root.cancel();
    }

    /// What the whole tree has spent so far.
    pub(crate) fn usage(&self) -> Usage {
        self.lock().tally().usage
    }

    fn lock(&self) -> MutexGuard<'_, RunAccount> {
        // A panic while holding this lock leaves plain numbers behind: still usable.
        self.account.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RunLedger for SharedAccount {
    fn check(&self, now: DateTime<Utc>) -> Option<LimitHit> {
        self.lock().check(now)
    }

    fn add_usage(&self, usage: &Usage, price: Option<&Price>) {
        self.lock().add_usage(usage, price);
    }

    fn take_tool_calls(&self, wanted: u32, now: DateTime<Utc>) -> ToolCallGrant {
        self.lock().take_tool_calls(wanted, now)
    }

    fn stop(&self, cause: StopCause) -> bool {
        self.lock().stop(cause)
    }

    fn stop_cause(&self) -> Option<StopCause> {
        self.lock().stop_cause().cloned()
    }

    fn next_approval_number(&self) -> u64 {
        self.lock().next_approval_number()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use troupe_agent::Budget;

    fn account() -> SharedAccount {
        let budget = Budget {
            tokens: 100,
            usd: None,
            wall_clock: Duration::from_secs(60),
            tool_calls: 3,
        };
        SharedAccount::new(
            RunAccount::new(budget, Utc::now()),
            CancellationToken::new(),
        )
    }

    #[test]
    fn a_stop_records_the_first_cause_and_cancels_every_agent_below_the_root() {
        let shared = account();
        let main = shared.root().child_token();
        let child = main.child_token();
        assert!(shared.stop(StopCause::Limit(LimitHit::MaxToolCalls { limit: 3 })));
        assert!(!child.is_cancelled(), "recording a cause stops nothing");
        shared.stop_tree(StopCause::Cancelled);
        assert!(child.is_cancelled());
        assert_eq!(
            shared.stop_cause(),
            Some(StopCause::Limit(LimitHit::MaxToolCalls { limit: 3 }))
        );
    }

    #[test]
    fn agents_asking_side_by_side_never_take_the_same_tool_calls() {
        let shared = std::sync::Arc::new(account());
        let now = Utc::now();
        let granted: u32 = std::thread::scope(|scope| {
            let asks: Vec<_> = (0..4)
                .map(|_| {
                    let shared = shared.clone();
                    scope.spawn(move || shared.take_tool_calls(1, now).granted)
                })
                .collect();
            asks.into_iter().map(|ask| ask.join().unwrap()).sum()
        });
        assert_eq!(granted, 3);
        assert_eq!(shared.next_approval_number(), 1);
        assert_eq!(shared.next_approval_number(), 2);
    }
}
