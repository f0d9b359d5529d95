//! The tasks an actor starts outside its mailbox (a model stream, hooks, a
//! wait for a slot, a status query) belong to it: [`OwnedTasks`] sits in the
//! actor's state, so when the actor stops — or panics, and its state is
//! dropped without `post_stop` — every task it still has is aborted. No task
//! of an actor outlives it.

use std::future::Future;

use tokio::task::JoinSet;

/// The tasks of one actor, aborted when dropped.
#[derive(Debug, Default)]
pub(crate) struct OwnedTasks {
    set: JoinSet<()>,
}

impl OwnedTasks {
    /// Starts `task`, owned by this set. Tasks that finished are let go of
    /// first, so the set holds only what still runs.
    pub(crate) fn spawn<F>(&mut self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.reap();
        self.set.spawn(task);
    }

    /// How many tasks still run.
    #[cfg(test)]
    pub(crate) fn len(&mut self) -> usize {
        self.reap();
        self.set.len()
    }

    fn reap(&mut self) {
        while let Some(done) = self.set.try_join_next() {
            if let Err(err) = done
                && err.is_panic()
            {
                tracing::error!(%err, "a task of an actor panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn dropping_the_set_aborts_what_still_runs() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut tasks = OwnedTasks::default();
        tasks.spawn(async move {
            // Held until the task ends: a dropped sender is the abort.
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        assert_eq!(tasks.len(), 1);
        drop(tasks);
        let ended = tokio::time::timeout(Duration::from_secs(10), rx).await;
        assert!(matches!(ended, Ok(Err(_))), "the task was aborted");
    }

    #[tokio::test]
    async fn finished_tasks_are_let_go_of() {
        let mut tasks = OwnedTasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tasks.spawn(async move {
            let _ = tx.send(());
        });
        tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .unwrap()
            .unwrap();
        // The task sent before it returned: wait for it to be joinable.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let running = tasks.len();
            if running == 0 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the task ended");
            tokio::task::yield_now().await;
        }
        tasks.spawn(async {});
        assert!(tasks.len() <= 1);
    }
}
