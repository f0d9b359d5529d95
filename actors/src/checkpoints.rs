//! The checkpoints of one run: the project's checkpoint store, opened (and
//! created, the first time) in the background at the run's first model
//! request, so that the first turn that changes files does not wait for
//! it, the snapshots the agents' loops ask for
//! ([`troupe_agent::Effect::Checkpoint`]), and the one a run that took any
//! makes when it ends (the files as the run left them, so that later
//! changes made outside Troupe can be told apart from the run's own).
//!
//! The store is shared by every agent of the run; each operation holds the
//! store's lock file, so other runs and processes on the same project wait
//! for it rather than fail.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::OnceCell;
use troupe_agent::CheckpointTaken;
use troupe_checkpoint::{Checkpoint, CheckpointKind, CheckpointStore, SnapshotMeta};

/// The checkpoints of one run (see the module documentation).
#[derive(Debug)]
pub(crate) struct RunCheckpoints {
    home: PathBuf,
    project: PathBuf,
    store: OnceCell<Arc<CheckpointStore>>,
    /// A snapshot of this run succeeded.
    taken: AtomicBool,
    /// The store's opening was started ahead of the first snapshot.
    prepared: AtomicBool,
}

impl RunCheckpoints {
    /// The checkpoints of a run in `project`, kept under the data directory
    /// `home`; nothing is opened until [`Self::prepare`] or the first
    /// snapshot.
    pub(crate) fn new(home: PathBuf, project: PathBuf) -> Self {
        Self {
            home,
            project,
            store: OnceCell::new(),
            taken: AtomicBool::new(false),
            prepared: AtomicBool::new(false),
        }
    }

    /// Opens the store (creating it the first time) in the background, once
    /// per run, so that the first snapshot finds it ready: called at the
    /// run's model requests. A failure is left for the snapshot to meet
    /// and report.
    pub(crate) fn prepare(self: &Arc<Self>) {
        if self.prepared.swap(true, Ordering::SeqCst) {
            return;
        }
        let checkpoints = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(err) = checkpoints.store().await {
                tracing::debug!(%err, "the checkpoint store could not be opened ahead");
            }
        });
    }

    async fn store(&self) -> Result<&Arc<CheckpointStore>, troupe_checkpoint::CheckpointError> {
        self.store
            .get_or_try_init(|| async {
                CheckpointStore::open(&self.home, &self.project)
                    .await
                    .map(Arc::new)
            })
            .await
    }

    /// Takes the snapshot a loop asked for: answers once the files are
    /// captured (the calls may start), with the task that ends once the
    /// checkpoint is recorded; or why nothing was captured (the turn goes
    /// on without it).
    pub(crate) async fn snapshot(
        self: &Arc<Self>,
        meta: SnapshotMeta,
    ) -> Result<impl Future<Output = Result<CheckpointTaken, String>> + use<>, String> {
        let store = self.store().await.map_err(|err| err.to_string())?;
        let staged = store
            .snapshot_staged(meta)
            .await
            .map_err(|err| err.to_string())?;
        self.taken.store(true, Ordering::SeqCst);
        Ok(async move {
            match staged.recorded.await {
                Ok(Ok(checkpoint)) => Ok(taken(&checkpoint)),
                Ok(Err(err)) => Err(err.to_string()),
                Err(err) => Err(format!("the checkpoint's record stopped: {err}")),
            }
        })
    }

    /// Whether the run's end takes a snapshot: only a run that took one
    /// before a turn (a run that changed nothing adds nothing).
    pub(crate) fn needs_run_end(&self) -> bool {
        self.taken.load(Ordering::SeqCst)
    }

    /// The snapshot of the files as run `run` of `session` left them, when
    /// the run took any checkpoint; a failure is logged (undo then cannot
    /// tell the run's last changes from later ones made outside).
    pub(crate) async fn run_end(&self, session: String, run: String) {
        if !self.needs_run_end() {
            return;
        }
        let meta = SnapshotMeta {
            session,
            run,
            agent_path: "main".to_owned(),
            kind: CheckpointKind::RunEnd,
            ..SnapshotMeta::default()
        };
        let taken = match self.store().await {
            Ok(store) => store.snapshot(meta).await.map(|_| ()),
            Err(err) => Err(err),
        };
        if let Err(err) = taken {
            tracing::warn!(%err, "the files as the run left them could not be captured");
        }
    }
}

/// What a recorded checkpoint tells its loop.
fn taken(checkpoint: &Checkpoint) -> CheckpointTaken {
    CheckpointTaken {
        number: checkpoint.number,
        commit: checkpoint.commit.clone(),
        unchanged: checkpoint.record.unchanged,
        skipped: checkpoint.record.skipped.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_store_is_made_ahead_once_and_the_first_snapshot_finds_it() {
        let base = tempfile::tempdir().unwrap();
        let (home, project) = (base.path().join("home"), base.path().join("project"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("a.txt"), "a\n").unwrap();
        let checkpoints = Arc::new(RunCheckpoints::new(home.clone(), project.clone()));
        checkpoints.prepare();
        checkpoints.prepare();
        // The opening started ahead is the one every later use waits for.
        let store = checkpoints.store().await.unwrap();
        assert!(CheckpointStore::exists(&home, &project));
        assert!(
            store.checkpoints("s1").await.unwrap().is_empty(),
            "opening takes no checkpoint"
        );
        assert!(
            !checkpoints.needs_run_end(),
            "a run that took no snapshot records no end"
        );
        let meta = SnapshotMeta {
            session: "s1".into(),
            run: "r1".into(),
            turn: 1,
            agent_path: "main".into(),
            ..SnapshotMeta::default()
        };
        let recorded = checkpoints.snapshot(meta).await.unwrap().await.unwrap();
        assert_eq!(recorded.number, 1);
        assert!(checkpoints.needs_run_end());
    }
}
