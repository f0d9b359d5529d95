//! Checkpoints: snapshots of a project's working tree, kept as git objects
//! in a bare repository of Troupe's own under the data directory, so that
//! the files of an earlier moment can be looked at, compared and brought
//! back.
//!
//! [`CheckpointStore`] is the whole API: [`CheckpointStore::snapshot`]
//! stages the work tree into the store's own index and commits it under
//! `refs/troupe/SESSION/N`, [`CheckpointStore::diff`] compares two
//! checkpoints (or one with the work tree), [`CheckpointStore::restore`]
//! makes the work tree equal to a checkpoint again (after taking a snapshot
//! of what it replaces), [`CheckpointStore::file_patches`] reads the
//! unified patches of the files two trees differ in (bounded), [`CheckpointStore::changed_since`] says which files
//! changed outside, and [`CheckpointStore::size`],
//! [`CheckpointStore::prune`] and [`CheckpointStore::remove_session`] bound
//! the store.
//!
//! Git runs through `troupe_process::git_command` (nothing a repository
//! names runs, writes confined to the store and, while restoring, the work
//! tree), with `GIT_DIR`, `GIT_WORK_TREE` and `GIT_INDEX_FILE` naming the
//! store: the user's own `.git` is only ever read (its lists of tracked and
//! untracked files), never written. Beside this root: `record` (what a checkpoint
//! says and how it is kept in its commit), `skip` (what a snapshot leaves
//! out), `diff` (reading git's diff output), `git` (running the store's
//! git), `store` (the store itself), `home` (the stores of a data
//! directory together: orphans and the bound) and `undo` (which checkpoint an undo or
//! a redo restores, read from the records).

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod diff;
pub(crate) mod git;
pub mod home;
pub mod record;
pub mod skip;
pub mod store;
pub mod undo;

pub use diff::{
    ChangeKind, CheckpointDiff, DiffTarget, FileChange, FilePatch, FilePatches, PatchBody,
    PatchLimits,
};
pub use home::{HomeSweep, sweep_home};
pub use record::{Checkpoint, CheckpointKind, CheckpointRecord, SnapshotMeta};
pub use skip::{SkipReason, Skipped};
pub use store::{CheckpointStore, PruneReport, Restored, StagedSnapshot};
pub use undo::{
    AgentUndoPlan, AgentUndoRefusal, UndoHistory, UndoPlan, UndoRefusal, plan_agent_undo,
    plan_redo, plan_rewind_files, plan_undo, undo_history,
};

/// Why a checkpoint operation failed. Nothing in the work tree or the store
/// is lost by a failure: git writes objects before refs, and a restore
/// starts only after its own snapshot succeeded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The project directory cannot be resolved.
    #[error("cannot resolve the project directory {path}: {source}")]
    Project {
        /// The directory given.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file or directory of the store cannot be read or written.
    #[error("checkpoint store {path}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Git could not be started.
    #[error("cannot start git: {0}")]
    Spawn(std::io::Error),
    /// Git ran and failed.
    #[error("git {command} failed ({status}): {stderr}")]
    Git {
        /// The git subcommand.
        command: String,
        /// How it ended.
        status: String,
        /// What it said (its end, at most a few lines).
        stderr: String,
    },
    /// Git answered something this crate cannot read.
    #[error("unexpected output from git {command}: {detail}")]
    Output {
        /// The git subcommand.
        command: String,
        /// What was wrong.
        detail: String,
    },
    /// A session id that cannot name a ref.
    #[error(
        "invalid session id {0:?}: use 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'"
    )]
    InvalidSession(String),
    /// A checkpoint's record cannot be read.
    #[error("checkpoint {commit} has no readable record: {detail}")]
    Record {
        /// The commit.
        commit: String,
        /// What was wrong.
        detail: String,
    },
}
