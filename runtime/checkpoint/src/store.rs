//! The store: a bare repository of Troupe's own at
//! `HOME/checkpoints/KEY.git` (`HOME` the data directory, `KEY` a hash of
//! the project root's canonical path, see [`store_key`]), with the project
//! as its work tree and its own index (`index` inside the store). Snapshots
//! are commits under `refs/troupe/SESSION/N`, numbered from 1 in each
//! session, each the child of the session's previous one.
//!
//! Every operation runs alone: one [`CheckpointStore`] value holds a lock
//! around its cached state, and every process holds the store's lock file
//! (`troupe.lock`, an advisory `flock`) for the whole operation, so two
//! processes on one store wait for each other instead of failing on git's
//! `index.lock`. Each write bumps the store's generation (`troupe-generation`);
//! a value that finds another process wrote since its last operation
//! forgets what it cached (the sessions' last checkpoints, what the last
//! staging skipped).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, MutexGuard};

use crate::CheckpointError;
use crate::diff::{
    CheckpointDiff, DiffTarget, FileChange, FilePatch, FilePatches, PatchBody, PatchLimits,
    RawChange, is_binary_patch, parse_changes, parse_raw, split_patches,
};
use crate::git::{Index, StoreGit, Writes, one_line, user_tracked, user_untracked};
use crate::record::{
    Checkpoint, CheckpointKind, CheckpointRecord, SnapshotMeta, check_session_id, decode_message,
    encode_message, ref_number, session_prefix, session_ref,
};
use crate::skip::{
    Skipped, SkippedPath, add_pathspecs, build_folder_excludes, build_folder_of, literal_pathspecs,
    measure_entry, skipped_entries,
};

/// Pathspecs are read from standard input, NUL-separated (no length limit,
/// any byte a name may hold).
const PATHSPECS_FROM_STDIN: [&str; 2] = ["--pathspec-from-file=-", "--pathspec-file-nul"];

/// The directory of the data directory holding the stores.
pub const STORES_DIR: &str = "checkpoints";

/// Settings written into a new store: no reflogs (refs are the record), no
/// automatic gc (pruning is explicit), content stored as it is.
const STORE_CONFIG: &str = "[core]\n\tlogAllRefUpdates = false\n\tautocrlf = false\n\
                            \tsafecrlf = false\n[gc]\n\tauto = 0\n";

/// The store's lock file, held (advisory `flock`) for each operation.
const LOCK_FILE: &str = "troupe.lock";

/// The store's write counter, bumped by every operation that writes.
const GENERATION_FILE: &str = "troupe-generation";

/// The last checkpoint of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    number: u64,
    commit: String,
    tree: String,
    kind: CheckpointKind,
    agent: String,
}

/// A snapshot whose files are staged into the store
/// ([`CheckpointStore::snapshot_staged`]); its record is being written.
#[derive(Debug)]
pub struct StagedSnapshot {
    /// Ends with the checkpoint once its tree, commit and ref are written
    /// (dropping it leaves the task to finish).
    pub recorded: tokio::task::JoinHandle<Result<Checkpoint, CheckpointError>>,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The snapshot of the work tree taken just before (restore it to undo
    /// the restore).
    pub before: Checkpoint,
    /// What the restore changed (from `before`'s tree to the restored one).
    pub changes: CheckpointDiff,
}

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// The store's size before.
    pub bytes_before: u64,
    /// Its size after.
    pub bytes_after: u64,
    /// The sessions whose checkpoints were dropped, oldest first.
    pub removed_sessions: Vec<String>,
}

/// The checkpoint store of one project.
#[derive(Debug)]
pub struct CheckpointStore {
    git: StoreGit,
    /// Each session's last checkpoint, as far as known; the lock every
    /// operation holds.
    heads: Mutex<HashMap<String, Option<Head>>>,
    /// What the last staging skipped (none of it is in the store's index),
    /// `None` when unknown (a new store value, or after a restore rewrote
    /// the index).
    last_skipped: std::sync::Mutex<Option<Vec<SkippedPath>>>,
    /// The store's generation this value last saw (its own writes
    /// included).
    seen_generation: std::sync::atomic::AtomicU64,
    /// git found the project in no repository of the user's: its listings
    /// are not asked for again by this value.
    not_in_repository: std::sync::atomic::AtomicBool,
}

/// One operation on the store: the value's cache and the store's lock file,
/// held until it is dropped; an operation that wrote bumps the generation
/// then.
struct Operation<'a> {
    store: &'a CheckpointStore,
    heads: MutexGuard<'a, HashMap<String, Option<Head>>>,
    wrote: bool,
    /// The locked file (the lock goes with it).
    _lock: std::fs::File,
}

impl Operation<'_> {
    fn heads(&mut self) -> &mut HashMap<String, Option<Head>> {
        &mut self.heads
    }
}

impl Drop for Operation<'_> {
    fn drop(&mut self) {
        if !self.wrote {
            return;
        }
        use std::sync::atomic::Ordering;
        let dir = &self.store.git.git_dir;
        let next = read_generation(dir).wrapping_add(1);
        if let Err(err) = std::fs::write(dir.join(GENERATION_FILE), next.to_string()) {
            // Other processes then keep their cache: the worst outcome is a
            // snapshot numbered like one of theirs, which `update-ref`
            // refuses rather than overwrites.
            tracing::warn!(%err, "cannot record the checkpoint store's generation");
        }
        self.store.seen_generation.store(next, Ordering::SeqCst);
    }
}

/// The generation recorded in the store `dir` (0 when none is).
fn read_generation(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(GENERATION_FILE))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// The store's name for a project root: the 64-bit FNV-1a hash of its
/// canonical path's bytes, as 16 hex digits. Stable across versions and
/// machines. Pure.
pub fn store_key(canonical_project: &Path) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let hash = canonical_project
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(OFFSET, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        });
    format!("{hash:016x}")
}

/// The key a store's directory is named by (`KEY.git`). Pure.
fn key_of(git_dir: &Path) -> String {
    git_dir
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_suffix(".git"))
        .unwrap_or_default()
        .to_owned()
}

/// Whether git's untracked list is the project root alone (`./`): the
/// project lies in a repository that tracks nothing of it. Pure.
pub(crate) fn lists_only_the_root(listing: &[u8]) -> bool {
    listing == b"./\0"
}

/// The paths of `listing` (git's `ls-files -z`) inside build folders.
/// Pure.
pub(crate) fn tracked_in_build_folders(listing: &[u8]) -> Vec<Vec<u8>> {
    listing
        .split(|&b| b == 0)
        .filter(|path| !path.is_empty() && build_folder_of(path).is_some())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Those of `paths` (relative to `project`) that exist (a name matching
/// nothing is an error to `git add`).
fn existing<'a>(
    project: &'a Path,
    paths: impl Iterator<Item = &'a Vec<u8>> + 'a,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    paths.map(Vec::as_slice).filter(move |raw| {
        project
            .join(OsStr::from_bytes(raw))
            .symlink_metadata()
            .is_ok()
    })
}

/// How the skipped paths changed from `previous` to `now`: those newly
/// skipped and those no longer skipped. Pure.
pub(crate) fn skip_changes(
    previous: &[SkippedPath],
    now: &[SkippedPath],
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let absent = |from: &[SkippedPath], of: &[SkippedPath]| -> Vec<Vec<u8>> {
        from.iter()
            .filter(|path| !of.iter().any(|other| other.raw == path.raw))
            .map(|path| path.raw.clone())
            .collect()
    };
    (absent(now, previous), absent(previous, now))
}

/// The order sessions are dropped in by [`CheckpointStore::prune`]: by the
/// time of their newest checkpoint, oldest first, never one in `keep`. Pure.
pub fn prune_order(mut sessions: Vec<(String, i64)>, keep: &[String]) -> Vec<String> {
    sessions.retain(|(session, _)| !keep.contains(session));
    sessions.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    sessions.into_iter().map(|(session, _)| session).collect()
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl CheckpointStore {
    /// The store of `project` under the data directory `home`, created on
    /// first use.
    pub async fn open(home: &Path, project: &Path) -> Result<Self, CheckpointError> {
        let canonical =
            std::fs::canonicalize(project).map_err(|source| CheckpointError::Project {
                path: project.to_path_buf(),
                source,
            })?;
        let git_dir = home
            .join(STORES_DIR)
            .join(format!("{}.git", store_key(&canonical)));
        let git = StoreGit {
            index: git_dir.join("index"),
            project: canonical,
            git_dir,
        };
        let store = Self {
            git,
            heads: Mutex::new(HashMap::new()),
            last_skipped: std::sync::Mutex::new(None),
            seen_generation: std::sync::atomic::AtomicU64::new(u64::MAX),
            not_in_repository: std::sync::atomic::AtomicBool::new(false),
        };
        if !store.git.git_dir.join("HEAD").is_file() {
            store.create().await?;
        }
        store.write_exclusions()?;
        Ok(store)
    }

    /// Creates the store whole or not at all: it is made in a directory
    /// beside it (`KEY.git.creating-PID`) and renamed into place, so a
    /// process stopped halfway (a run ending while the store is made ahead
    /// of its first snapshot) leaves no store without its settings. A
    /// directory left so by a process that is gone is removed first; when
    /// another process put the store in place meanwhile, that one is used.
    async fn create(&self) -> Result<(), CheckpointError> {
        let dir = &self.git.git_dir;
        let parent = dir.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        let name = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        remove_abandoned_creations(parent, &name);
        let staging = parent.join(format!("{name}{CREATING}{}", std::process::id()));
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io_error(&staging))?;
        }
        std::fs::create_dir_all(&staging).map_err(io_error(&staging))?;
        let made = StoreGit {
            project: self.git.project.clone(),
            index: staging.join("index"),
            git_dir: staging.clone(),
        };
        made.init().await?;
        let config = staging.join("config");
        let mut text = std::fs::read_to_string(&config).map_err(io_error(&config))?;
        text.push_str(STORE_CONFIG);
        std::fs::write(&config, text).map_err(io_error(&config))?;
        let description = staging.join("description");
        let about = format!(
            "Troupe checkpoints of {}\n",
            self.git.project.to_string_lossy()
        );
        std::fs::write(&description, about).map_err(io_error(&description))?;
        if let Err(err) = std::fs::rename(&staging, dir) {
            let _ = std::fs::remove_dir_all(&staging);
            if !dir.join("HEAD").is_file() {
                return Err(CheckpointError::Io {
                    path: dir.clone(),
                    source: err,
                });
            }
        }
        tracing::debug!(store = %dir.display(), "checkpoint store created");
        Ok(())
    }

    /// Writes the store's `info/exclude`: the build folders
    /// ([`crate::skip::BUILD_FOLDERS`]), which staging never reads (unless
    /// the user tracks files in them). Written when it differs.
    fn write_exclusions(&self) -> Result<(), CheckpointError> {
        let info = self.git.git_dir.join("info");
        let path = info.join("exclude");
        let wanted = build_folder_excludes();
        if std::fs::read_to_string(&path).ok().as_deref() == Some(wanted.as_str()) {
            return Ok(());
        }
        std::fs::create_dir_all(&info).map_err(io_error(&info))?;
        std::fs::write(&path, wanted).map_err(io_error(&path))
    }

    /// The store in the directory `git_dir` (one of
    /// `HOME/checkpoints/*.git`), for its refs and its size: the project is
    /// the one its `description` names when that directory still exists,
    /// else the store itself stands in for it (restores and snapshots then
    /// have nothing to work on). `None` when `git_dir` is no store.
    pub fn open_existing(git_dir: &Path) -> Option<Self> {
        if !git_dir.join("HEAD").is_file() {
            return None;
        }
        let described = std::fs::read_to_string(git_dir.join("description"))
            .ok()
            .and_then(|text| {
                text.strip_prefix("Troupe checkpoints of ")
                    .map(|rest| PathBuf::from(rest.trim_end_matches('\n')))
            })
            .filter(|project| project.is_dir() && store_key(project) == key_of(git_dir));
        let project = described.unwrap_or_else(|| git_dir.to_path_buf());
        Some(Self {
            git: StoreGit {
                index: git_dir.join("index"),
                project,
                git_dir: git_dir.to_path_buf(),
            },
            heads: Mutex::new(HashMap::new()),
            last_skipped: std::sync::Mutex::new(None),
            seen_generation: std::sync::atomic::AtomicU64::new(u64::MAX),
            not_in_repository: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether `project` has a checkpoint store under `home` (opening one
    /// creates it).
    pub fn exists(home: &Path, project: &Path) -> bool {
        std::fs::canonicalize(project).is_ok_and(|canonical| {
            home.join(STORES_DIR)
                .join(format!("{}.git", store_key(&canonical)))
                .join("HEAD")
                .is_file()
        })
    }

    /// Starts an operation: this value's lock, then the store's lock file
    /// (waiting for another process's operation to end); the cache is
    /// dropped when another process wrote since.
    async fn begin(&self) -> Result<Operation<'_>, CheckpointError> {
        use std::sync::atomic::Ordering;
        let mut heads = self.heads.lock().await;
        let path = self.git.git_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        let file = match file.try_lock() {
            Ok(()) => file,
            Err(std::fs::TryLockError::WouldBlock) => {
                tokio::task::spawn_blocking(move || file.lock().map(|()| file))
                    .await
                    .map_err(|err| CheckpointError::Io {
                        path: path.clone(),
                        source: std::io::Error::other(err),
                    })?
                    .map_err(io_error(&path))?
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(CheckpointError::Io { path, source });
            }
        };
        let generation = read_generation(&self.git.git_dir);
        if self.seen_generation.swap(generation, Ordering::SeqCst) != generation {
            heads.clear();
            self.take_last_skipped();
        }
        Ok(Operation {
            store: self,
            heads,
            wrote: false,
            _lock: file,
        })
    }

    /// The store's git directory.
    pub fn git_dir(&self) -> &Path {
        &self.git.git_dir
    }

    /// The project root (canonical) whose work tree is recorded.
    pub fn project(&self) -> &Path {
        &self.git.project
    }

    /// Takes a snapshot of the work tree for `meta`'s session. A work tree
    /// equal to the session's last checkpoint makes no commit: the answer is
    /// that checkpoint, with this record marked `unchanged`.
    pub async fn snapshot(&self, meta: SnapshotMeta) -> Result<Checkpoint, CheckpointError> {
        check_session_id(&meta.session)?;
        let mut op = self.begin().await?;
        self.snapshot_locked(&mut op, meta).await
    }

    /// Takes a snapshot in two steps: the answer comes once the work tree's
    /// files are staged into the store's index (later changes to the work
    /// tree no longer reach it), while the tree, the commit and the ref are
    /// written by a task that holds the store until it is done:
    /// [`StagedSnapshot::recorded`] ends with the checkpoint. A caller that
    /// only needs the files safe before changing them waits for the first
    /// step alone.
    pub async fn snapshot_staged(
        self: &std::sync::Arc<Self>,
        meta: SnapshotMeta,
    ) -> Result<StagedSnapshot, CheckpointError> {
        check_session_id(&meta.session)?;
        let (staged_tx, staged_rx) = tokio::sync::oneshot::channel::<()>();
        let store = std::sync::Arc::clone(self);
        let recorded = tokio::spawn(async move {
            let mut op = store.begin().await?;
            let skipped = store.stage_index().await?;
            // The caller may go on: what the files held is in the index.
            let _ = staged_tx.send(());
            store.record_snapshot(&mut op, meta, skipped).await
        });
        if staged_rx.await.is_ok() {
            return Ok(StagedSnapshot { recorded });
        }
        // The task ended before staging: its error says why.
        match recorded.await {
            Ok(Err(err)) => Err(err),
            Ok(Ok(_)) => Err(CheckpointError::Output {
                command: "add".to_owned(),
                detail: "the snapshot ended without staging".to_owned(),
            }),
            Err(joined) => Err(CheckpointError::Io {
                path: self.git.git_dir.clone(),
                source: std::io::Error::other(joined),
            }),
        }
    }

    async fn snapshot_locked(
        &self,
        op: &mut Operation<'_>,
        meta: SnapshotMeta,
    ) -> Result<Checkpoint, CheckpointError> {
        let skipped = self.stage_index().await?;
        self.record_snapshot(op, meta, skipped).await
    }

    /// Writes the staged index's tree and, unless it equals the session's
    /// last checkpoint, its commit and ref.
    async fn record_snapshot(
        &self,
        op: &mut Operation<'_>,
        meta: SnapshotMeta,
        skipped: Vec<SkippedPath>,
    ) -> Result<Checkpoint, CheckpointError> {
        let tree = self.write_tree().await?;
        let head = self.head(op.heads(), &meta.session).await?;
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let skipped: Vec<Skipped> = skipped.into_iter().map(|path| path.skipped).collect();
        let kind = meta.kind;
        if let Some(head) = head.as_ref().filter(|head| {
            head.tree == tree && kind.same_as(&meta.agent_path, head.kind, &head.agent)
        }) {
            return Ok(Checkpoint {
                commit: head.commit.clone(),
                number: head.number,
                record: CheckpointRecord {
                    meta,
                    time,
                    tree,
                    parent: Some(head.commit.clone()),
                    skipped,
                    unchanged: true,
                },
            });
        }
        let number = head.as_ref().map_or(1, |head| head.number + 1);
        let parent = head.map(|head| head.commit);
        let record = CheckpointRecord {
            meta,
            time,
            tree: tree.clone(),
            parent: parent.clone(),
            skipped,
            unchanged: false,
        };
        let message = encode_message(&record, number);
        let mut args = vec!["commit-tree", tree.as_str(), "-F", "-"];
        if let Some(parent) = &parent {
            args.extend(["-p", parent.as_str()]);
        }
        let out = self
            .git
            .run(&args, Some(message.as_bytes()), Writes::Store, Index::Own)
            .await?;
        let commit = one_line("commit-tree", &out)?;
        let session = record.meta.session.clone();
        let ref_name = session_ref(&session, number);
        self.create_ref(&ref_name, &commit)?;
        op.wrote = true;
        op.heads().insert(
            session,
            Some(Head {
                number,
                commit: commit.clone(),
                tree,
                kind,
                agent: record.meta.agent_path.clone(),
            }),
        );
        Ok(Checkpoint {
            commit,
            number,
            record,
        })
    }

    /// Creates the loose ref `name` (`refs/troupe/SESSION/N`, its parts
    /// checked) pointing at `commit`, only if absent, as `git update-ref
    /// NAME COMMIT ""` does without starting git: the file is written aside
    /// and linked into place, so it appears whole or not at all, and a ref
    /// of that name already there (another process numbering the same
    /// session) fails instead of being lost. The store lock is held, and
    /// numbers come from every ref, loose or packed, so a packed ref never
    /// has the name.
    fn create_ref(&self, name: &str, commit: &str) -> Result<(), CheckpointError> {
        if !is_object_id(commit) {
            return Err(CheckpointError::Output {
                command: "commit-tree".to_owned(),
                detail: format!("expected an object id, got {commit:?}"),
            });
        }
        let path = self.git.git_dir.join(name);
        let dir = path.parent().unwrap_or(&self.git.git_dir);
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let aside = dir.join(format!(".troupe-new-ref-{}", std::process::id()));
        std::fs::write(&aside, format!("{commit}\n")).map_err(io_error(&aside))?;
        let linked = std::fs::hard_link(&aside, &path);
        let _ = std::fs::remove_file(&aside);
        linked.map_err(io_error(&path))
    }

    /// Stages the work tree into the store's index as a snapshot does; the
    /// tree written and what was skipped.
    ///
    /// The list of untracked entries and `git add` each walk the work tree:
    /// once the store knows what the last staging skipped, both run at once,
    /// the add leaving out what was skipped last time, and only a change in
    /// what is skipped costs one more git command.
    async fn stage(&self) -> Result<(String, Vec<SkippedPath>), CheckpointError> {
        let skipped = self.stage_index().await?;
        Ok((self.write_tree().await?, skipped))
    }

    /// The tree of the store's index, written.
    async fn write_tree(&self) -> Result<String, CheckpointError> {
        let out = self
            .git
            .run(&["write-tree"], None, Writes::Store, Index::Own)
            .await?;
        one_line("write-tree", &out)
    }

    /// Stages the work tree into the store's index (see [`Self::stage`]):
    /// from here on the files as they are now are in the store, whatever
    /// changes in the work tree; what was skipped.
    async fn stage_index(&self) -> Result<Vec<SkippedPath>, CheckpointError> {
        let project = &self.git.project;
        let previous = self.take_last_skipped();
        let (skipped, user_tracked) = match previous {
            None => {
                let (skipped, user_tracked) =
                    tokio::join!(self.untracked_skips(), self.user_tracked());
                let skipped = skipped?;
                self.unstage(skipped.iter().map(|path| path.raw.as_slice()))
                    .await?;
                self.add(&add_pathspecs(&skipped), false).await?;
                (skipped, user_tracked)
            }
            Some(previous) => {
                let pathspecs = add_pathspecs(&previous);
                let (skipped, user_tracked, added) = tokio::join!(
                    self.untracked_skips(),
                    self.user_tracked(),
                    self.add(&pathspecs, false)
                );
                let skipped = skipped?;
                added?;
                let (newly, freed) = skip_changes(&previous, &skipped);
                // A path captured before and skipped now leaves the index,
                // so a restore leaves it alone.
                self.unstage(newly.iter().map(|raw| raw.as_slice())).await?;
                // Those no longer skipped are added (but a build folder
                // stays ignored by the store).
                let freed: Vec<Vec<u8>> = freed
                    .into_iter()
                    .filter(|raw| build_folder_of(raw).is_none())
                    .collect();
                let freed = literal_pathspecs(existing(project, freed.iter()));
                if !freed.is_empty() {
                    self.add(&freed, false).await?;
                }
                (skipped, user_tracked)
            }
        };
        // The store ignores build folders (its `info/exclude`), but not the
        // files in them the user tracks.
        let tracked_in_build_folders = user_tracked
            .as_deref()
            .map(tracked_in_build_folders)
            .unwrap_or_default();
        let forced = literal_pathspecs(existing(project, tracked_in_build_folders.iter()));
        if !forced.is_empty() {
            self.add(&forced, true).await?;
        }
        *self.lock_last_skipped() = Some(skipped.clone());
        Ok(skipped)
    }

    /// What the last staging skipped, forgotten until a staging succeeds
    /// again (a failed one leaves the index unknown).
    fn take_last_skipped(&self) -> Option<Vec<SkippedPath>> {
        self.lock_last_skipped().take()
    }

    fn lock_last_skipped(&self) -> std::sync::MutexGuard<'_, Option<Vec<SkippedPath>>> {
        self.last_skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The user's untracked entries (see [`user_untracked`]); `None`, and
    /// no git started, once git found the project in no repository.
    async fn user_untracked(&self) -> Option<Vec<u8>> {
        self.in_user_repository(user_untracked(&self.git.project))
            .await
    }

    /// The user's tracked files (see [`user_tracked`]), as
    /// [`Self::user_untracked`].
    async fn user_tracked(&self) -> Option<Vec<u8>> {
        self.in_user_repository(user_tracked(&self.git.project))
            .await
    }

    /// `listing`'s answer, unless the project is known to be in no
    /// repository (a project becomes one rarely: a new store value, as each
    /// run opens, looks again).
    async fn in_user_repository(
        &self,
        listing: impl std::future::Future<Output = Option<Vec<u8>>>,
    ) -> Option<Vec<u8>> {
        use std::sync::atomic::Ordering;
        if self.not_in_repository.load(Ordering::Relaxed) {
            return None;
        }
        let answer = listing.await;
        if answer.is_none() {
            self.not_in_repository.store(true, Ordering::Relaxed);
        }
        answer
    }

    /// The untracked entries of the work tree a snapshot skips.
    async fn untracked_skips(&self) -> Result<Vec<SkippedPath>, CheckpointError> {
        let listing = match self.user_untracked().await {
            // A project inside a repository that tracks none of it is a
            // plain directory to these rules.
            Some(listing) if !lists_only_the_root(&listing) => listing,
            _ => {
                // The project's `.gitignore` files, not the store's own
                // exclusions: build folders are listed, to be recorded.
                let args = [
                    "ls-files",
                    "-z",
                    "--others",
                    "--directory",
                    "--exclude-per-directory=.gitignore",
                ];
                self.git
                    .run(&args, None, Writes::Store, Index::Empty)
                    .await?
            }
        };
        let project = &self.git.project;
        Ok(skipped_entries(&listing, |path, is_dir| {
            measure_entry(project, path, is_dir)
        }))
    }

    /// `git add -A` of the NUL-separated `pathspecs`; `force` adds them even
    /// where the store ignores them.
    async fn add(&self, pathspecs: &[u8], force: bool) -> Result<(), CheckpointError> {
        let mut args = vec!["add", "-A"];
        if force {
            args.push("--force");
        }
        args.extend(PATHSPECS_FROM_STDIN);
        self.git
            .run(&args, Some(pathspecs), Writes::Store, Index::Own)
            .await?;
        Ok(())
    }

    /// Takes `paths` out of the store's index (their files stay as they
    /// are).
    async fn unstage<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), CheckpointError> {
        let specs = literal_pathspecs(paths);
        if specs.is_empty() {
            return Ok(());
        }
        let mut args = vec!["rm", "--cached", "-r", "-q", "-f", "--ignore-unmatch"];
        args.extend(PATHSPECS_FROM_STDIN);
        self.git
            .run(&args, Some(&specs), Writes::Store, Index::Own)
            .await?;
        Ok(())
    }

    /// The last checkpoint of `session`, read from the refs once.
    async fn head(
        &self,
        heads: &mut HashMap<String, Option<Head>>,
        session: &str,
    ) -> Result<Option<Head>, CheckpointError> {
        if let Some(known) = heads.get(session) {
            return Ok(known.clone());
        }
        let prefix = session_prefix(session);
        let out = self
            .git
            .run(
                &[
                    "for-each-ref",
                    "--format=%(refname)%00%(objectname)%00%(tree)%00%(contents)%00",
                    &prefix,
                ],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        let fields: Vec<&str> = text.split('\0').collect();
        let head = fields
            .chunks(4)
            .filter_map(|entry| {
                let [ref_name, commit, tree, message] = entry else {
                    return None;
                };
                let number = ref_number(session, ref_name.trim())?;
                let commit = commit.trim();
                // A record that cannot be read counts as a turn of no
                // agent's.
                let meta = decode_message(commit, message)
                    .map(|record| record.meta)
                    .unwrap_or_default();
                Some(Head {
                    number,
                    commit: commit.to_owned(),
                    tree: tree.trim().to_owned(),
                    kind: meta.kind,
                    agent: meta.agent_path,
                })
            })
            .max_by_key(|head| head.number);
        heads.insert(session.to_owned(), head.clone());
        Ok(head)
    }

    /// Every checkpoint of `session`, in order.
    pub async fn checkpoints(&self, session: &str) -> Result<Vec<Checkpoint>, CheckpointError> {
        check_session_id(session)?;
        let _op = self.begin().await?;
        let prefix = session_prefix(session);
        let out = self
            .git
            .run(
                &[
                    "for-each-ref",
                    "--format=%(objectname)%00%(refname)%00%(contents)%00",
                    &prefix,
                ],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        let fields: Vec<&str> = text.split('\0').collect();
        let mut found = Vec::new();
        for entry in fields.chunks(3) {
            let [commit, ref_name, message] = entry else {
                continue;
            };
            let commit = commit.trim();
            let Some(number) = ref_number(session, ref_name) else {
                continue;
            };
            let record = decode_message(commit, message)?;
            found.push(Checkpoint {
                commit: commit.to_owned(),
                number,
                record,
            });
        }
        found.sort_by_key(|checkpoint| checkpoint.number);
        Ok(found)
    }

    /// What changed from `from` to `to`.
    pub async fn diff(
        &self,
        from: &Checkpoint,
        to: DiffTarget<'_>,
    ) -> Result<CheckpointDiff, CheckpointError> {
        let _op = self.begin().await?;
        let to_tree = match to {
            DiffTarget::Checkpoint(checkpoint) => checkpoint.tree().to_owned(),
            DiffTarget::WorkTree => self.stage().await?.0,
        };
        self.diff_trees(from.tree(), &to_tree).await
    }

    async fn diff_trees(&self, from: &str, to: &str) -> Result<CheckpointDiff, CheckpointError> {
        let run = |format: &'static str| {
            let args = ["diff-tree", "-r", "-z", "--no-renames", format, from, to];
            async move { self.git.run(&args, None, Writes::Store, Index::Own).await }
        };
        let (name_status, numstat) = tokio::join!(run("--name-status"), run("--numstat"));
        Ok(CheckpointDiff {
            from_tree: from.to_owned(),
            to_tree: to.to_owned(),
            files: parse_changes(&name_status?, &numstat?)?,
        })
    }

    /// The tree the work tree would be captured as now (staged as a
    /// snapshot stages it; no checkpoint is made).
    pub async fn work_tree_id(&self) -> Result<String, CheckpointError> {
        let _op = self.begin().await?;
        Ok(self.stage().await?.0)
    }

    /// What changed from the tree `from` to the tree `to` (ids of this
    /// store's trees, as [`Checkpoint::tree`] and [`Self::work_tree_id`]
    /// give them).
    pub async fn diff_tree_ids(
        &self,
        from: &str,
        to: &str,
    ) -> Result<CheckpointDiff, CheckpointError> {
        check_tree_ids(from, to)?;
        let _op = self.begin().await?;
        self.diff_trees(from, to).await
    }

    /// The unified patch of each file that changed from the tree `from` to
    /// the tree `to` (ids of this store's trees), or only of `paths` when
    /// some are given, sorted by path. Bounded: at most
    /// `limits.max_files` files (the others counted), and no file larger
    /// than `limits.max_file_bytes` before or after is read (it is
    /// [`PatchBody::TooLarge`]); a binary file is [`PatchBody::Binary`].
    /// Reads only: no checkpoint, nothing written.
    pub async fn file_patches(
        &self,
        from: &str,
        to: &str,
        paths: &[PathBuf],
        limits: PatchLimits,
    ) -> Result<FilePatches, CheckpointError> {
        check_tree_ids(from, to)?;
        let _op = self.begin().await?;
        let path_args: Vec<&OsStr> = paths.iter().map(|path| path.as_os_str()).collect();
        let raw = self
            .git
            .run_on_paths(
                &[
                    "diff-tree",
                    "-r",
                    "-z",
                    "--raw",
                    "--no-abbrev",
                    "--no-renames",
                    from,
                    to,
                ],
                &path_args,
            )
            .await?;
        let mut changes = parse_raw(&raw)?;
        let omitted = changes.len().saturating_sub(limits.max_files);
        changes.truncate(limits.max_files);
        let sizes = self.blob_sizes(&changes).await?;
        let mut readable = Vec::new();
        let mut files = Vec::with_capacity(changes.len());
        for (change, size) in changes.iter().zip(sizes) {
            let body = if size > limits.max_file_bytes {
                PatchBody::TooLarge { bytes: size }
            } else {
                readable.push(OsStr::from_bytes(&change.path));
                PatchBody::Text {
                    patch: String::new(),
                }
            };
            files.push(FilePatch {
                path: PathBuf::from(OsStr::from_bytes(&change.path)),
                kind: change.kind,
                body,
            });
        }
        if !readable.is_empty() {
            let patch = self
                .git
                .run_on_paths(
                    &[
                        "diff-tree",
                        "-r",
                        "-p",
                        "--no-renames",
                        "--no-color",
                        "--no-ext-diff",
                        "--no-textconv",
                        from,
                        to,
                    ],
                    &readable,
                )
                .await?;
            // git writes the patches in the order of its raw listing, which
            // `files` keeps until they are all read.
            let patches = split_patches(&patch);
            if patches.len() != readable.len() {
                return Err(CheckpointError::Output {
                    command: "diff-tree".to_owned(),
                    detail: format!(
                        "{} patches for {} changed files",
                        patches.len(),
                        readable.len()
                    ),
                });
            }
            let texts = files
                .iter_mut()
                .filter(|file| matches!(file.body, PatchBody::Text { .. }));
            for (file, text) in texts.zip(patches) {
                file.body = if is_binary_patch(&text) {
                    PatchBody::Binary
                } else {
                    PatchBody::Text { patch: text }
                };
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(FilePatches { files, omitted })
    }

    /// The larger size of each change's objects before and after (0 for a
    /// gitlink, whose commit the store does not hold).
    async fn blob_sizes(&self, changes: &[RawChange]) -> Result<Vec<u64>, CheckpointError> {
        let mut asked = Vec::new();
        for change in changes.iter().filter(|change| !change.is_gitlink()) {
            for (_, id) in [&change.old, &change.new].into_iter().flatten() {
                asked.extend_from_slice(id.as_bytes());
                asked.push(b'\n');
            }
        }
        let answer = if asked.is_empty() {
            Vec::new()
        } else {
            self.git
                .run(
                    &["cat-file", "--batch-check=%(objectsize)"],
                    Some(&asked),
                    Writes::Store,
                    Index::Own,
                )
                .await?
        };
        let text = String::from_utf8_lossy(&answer);
        let mut answered = text.lines();
        let mut sizes = Vec::with_capacity(changes.len());
        for change in changes {
            let mut size = 0;
            if !change.is_gitlink() {
                for _ in [&change.old, &change.new].into_iter().flatten() {
                    let line = answered.next().unwrap_or_default();
                    let bytes =
                        line.trim()
                            .parse::<u64>()
                            .map_err(|_| CheckpointError::Output {
                                command: "cat-file".to_owned(),
                                detail: format!("expected a size, got {line:?}"),
                            })?;
                    size = size.max(bytes);
                }
            }
            sizes.push(size);
        }
        Ok(sizes)
    }

    /// The bytes on disk of the objects `checkpoint` added to the store
    /// (those its parent did not already hold): what it costs.
    pub async fn added_bytes(&self, checkpoint: &Checkpoint) -> Result<u64, CheckpointError> {
        if !is_object_id(&checkpoint.commit) {
            return Err(CheckpointError::Record {
                commit: checkpoint.commit.clone(),
                detail: "not a commit id".to_owned(),
            });
        }
        let _op = self.begin().await?;
        let mut args = vec![
            "rev-list",
            "--objects",
            "--no-object-names",
            checkpoint.commit.as_str(),
        ];
        let exclude = checkpoint
            .record
            .parent
            .as_ref()
            .map(|parent| format!("^{parent}"));
        if let Some(exclude) = &exclude {
            args.push(exclude.as_str());
        }
        let objects = self.git.run(&args, None, Writes::Store, Index::Own).await?;
        let sizes = self
            .git
            .run(
                &["cat-file", "--batch-check=%(objectsize:disk)"],
                Some(&objects),
                Writes::Store,
                Index::Own,
            )
            .await?;
        Ok(String::from_utf8_lossy(&sizes)
            .lines()
            .filter_map(|line| line.trim().parse::<u64>().ok())
            .sum())
    }

    /// The files that changed since `after` (the checkpoint taken after a
    /// turn): empty when the work tree is still as that turn left it.
    pub async fn changed_since(
        &self,
        after: &Checkpoint,
    ) -> Result<Vec<FileChange>, CheckpointError> {
        Ok(self.diff(after, DiffTarget::WorkTree).await?.files)
    }

    /// Makes the work tree equal to `checkpoint` for every path the store
    /// tracks: changed files are rewritten, files added since are removed,
    /// removed ones come back; skipped and ignored paths are left alone.
    /// First takes a snapshot of the work tree as `meta` says, and returns
    /// it: restoring it undoes the restore.
    pub async fn restore(
        &self,
        checkpoint: &Checkpoint,
        meta: SnapshotMeta,
    ) -> Result<Restored, CheckpointError> {
        check_session_id(&meta.session)?;
        let mut op = self.begin().await?;
        // The target must be a tree of this store before anything moves.
        let target = checkpoint.tree();
        if !is_object_id(target) {
            return Err(CheckpointError::Record {
                commit: checkpoint.commit.clone(),
                detail: format!("{target:?} is not a tree id"),
            });
        }
        self.git
            .run(
                &["cat-file", "-e", &format!("{target}^{{tree}}")],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        let before = self.snapshot_locked(&mut op, meta).await?;
        op.wrote = true;
        // What the target skipped is not the store's: out of the index, the
        // read below neither rewrites nor removes it.
        self.unstage(
            checkpoint
                .record
                .skipped
                .iter()
                .map(|skipped| skipped.path.as_bytes()),
        )
        .await?;
        // The read rewrites the index: what was skipped must be looked for
        // again at the next staging.
        self.take_last_skipped();
        // The index holds `before`'s tree with the stat data of the files on
        // disk: `--reset -u` rewrites only what differs and removes the
        // index's paths the target lacks, as `reset --hard` does.
        self.git
            .run(
                &["read-tree", "--reset", "-u", target],
                None,
                Writes::StoreAndWorkTree,
                Index::Own,
            )
            .await?;
        let changes = self.diff_trees(before.tree(), target).await?;
        tracing::debug!(
            tree = target,
            files = changes.files.len(),
            "work tree restored"
        );
        Ok(Restored { before, changes })
    }

    /// Makes only `paths` (relative to the project) as they were in
    /// `checkpoint`: a path it held is written back, a path it lacked is
    /// removed; every other file stays as it is. First takes a snapshot of
    /// the work tree as `meta` says, and returns it (restoring it undoes
    /// this).
    pub async fn restore_paths(
        &self,
        checkpoint: &Checkpoint,
        paths: &[PathBuf],
        meta: SnapshotMeta,
    ) -> Result<Restored, CheckpointError> {
        check_session_id(&meta.session)?;
        let target = checkpoint.tree();
        if !is_object_id(target) {
            return Err(CheckpointError::Record {
                commit: checkpoint.commit.clone(),
                detail: format!("{target:?} is not a tree id"),
            });
        }
        let mut op = self.begin().await?;
        let before = self.snapshot_locked(&mut op, meta).await?;
        op.wrote = true;
        if !paths.is_empty() {
            // Which of the paths the target holds.
            let held = self
                .git
                .run(
                    &["ls-tree", "-r", "-z", "--name-only", target],
                    None,
                    Writes::Store,
                    Index::Own,
                )
                .await?;
            let held: std::collections::HashSet<&[u8]> = held
                .split(|&b| b == 0)
                .filter(|name| !name.is_empty())
                .collect();
            let (back, gone): (Vec<&PathBuf>, Vec<&PathBuf>) = paths
                .iter()
                .partition(|path| held.contains(path.as_os_str().as_bytes()));
            if !back.is_empty() {
                let specs = literal_pathspecs(back.iter().map(|path| path.as_os_str().as_bytes()));
                let mut args = vec!["checkout", target];
                args.extend(PATHSPECS_FROM_STDIN);
                self.git
                    .run(&args, Some(&specs), Writes::StoreAndWorkTree, Index::Own)
                    .await?;
            }
            if !gone.is_empty() {
                let specs = literal_pathspecs(gone.iter().map(|path| path.as_os_str().as_bytes()));
                let mut args = vec!["rm", "-q", "-f", "--ignore-unmatch"];
                args.extend(PATHSPECS_FROM_STDIN);
                self.git
                    .run(&args, Some(&specs), Writes::StoreAndWorkTree, Index::Own)
                    .await?;
            }
        }
        self.take_last_skipped();
        let now = self.write_tree().await?;
        let changes = self.diff_trees(before.tree(), &now).await?;
        Ok(Restored { before, changes })
    }

    /// The bytes the store takes on disk (every file below it).
    pub async fn size(&self) -> Result<u64, CheckpointError> {
        let dir = self.git.git_dir.clone();
        tokio::task::spawn_blocking(move || directory_size(&dir))
            .await
            .map_err(|err| CheckpointError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other(err),
            })?
    }

    /// Brings the store under `max_bytes` if it is over: collects the
    /// garbage (packing loose objects), then drops the checkpoints of whole
    /// sessions, those whose newest checkpoint is oldest first, never a
    /// session in `keep`, collecting the garbage after each, until the size
    /// is under the bound or only kept sessions are left.
    pub async fn prune(
        &self,
        max_bytes: u64,
        keep: &[String],
    ) -> Result<PruneReport, CheckpointError> {
        let mut op = self.begin().await?;
        let bytes_before = self.size().await?;
        let mut report = PruneReport {
            bytes_before,
            bytes_after: bytes_before,
            removed_sessions: Vec::new(),
        };
        if bytes_before <= max_bytes {
            return Ok(report);
        }
        // Packing what is loose may be enough.
        op.wrote = true;
        self.collect_garbage().await?;
        report.bytes_after = self.size().await?;
        if report.bytes_after <= max_bytes {
            return Ok(report);
        }
        let newest = self.session_times_locked().await?;
        for session in prune_order(newest, keep) {
            self.remove_session_locked(&mut op, &session).await?;
            self.collect_garbage().await?;
            report.removed_sessions.push(session);
            report.bytes_after = self.size().await?;
            if report.bytes_after <= max_bytes {
                break;
            }
        }
        Ok(report)
    }

    /// Every session with checkpoints here, with the time (Unix seconds)
    /// of its newest one.
    pub async fn session_times(&self) -> Result<Vec<(String, i64)>, CheckpointError> {
        let _op = self.begin().await?;
        self.session_times_locked().await
    }

    async fn session_times_locked(&self) -> Result<Vec<(String, i64)>, CheckpointError> {
        let out = self
            .git
            .run(
                &[
                    "for-each-ref",
                    "--format=%(refname)%00%(committerdate:unix)",
                    "refs/troupe/",
                ],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        let mut newest: HashMap<String, i64> = HashMap::new();
        for line in String::from_utf8_lossy(&out).lines() {
            let Some((name, time)) = line.split_once('\0') else {
                continue;
            };
            let Some(session) = name
                .strip_prefix("refs/troupe/")
                .and_then(|rest| rest.split_once('/'))
                .map(|(session, _)| session)
            else {
                continue;
            };
            let time: i64 = time.parse().unwrap_or(0);
            let entry = newest.entry(session.to_owned()).or_insert(time);
            *entry = (*entry).max(time);
        }
        Ok(newest.into_iter().collect())
    }

    /// Packs the store and drops the objects no checkpoint holds any more
    /// (`git gc --prune=now`).
    pub async fn pack(&self) -> Result<(), CheckpointError> {
        let mut op = self.begin().await?;
        op.wrote = true;
        self.collect_garbage().await
    }

    async fn collect_garbage(&self) -> Result<(), CheckpointError> {
        self.git
            .run(
                &["gc", "--prune=now", "--quiet"],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        Ok(())
    }

    /// Drops every checkpoint of `session` (its refs; the objects go at the
    /// next prune); the number dropped.
    pub async fn remove_session(&self, session: &str) -> Result<usize, CheckpointError> {
        check_session_id(session)?;
        let mut op = self.begin().await?;
        self.remove_session_locked(&mut op, session).await
    }

    async fn remove_session_locked(
        &self,
        op: &mut Operation<'_>,
        session: &str,
    ) -> Result<usize, CheckpointError> {
        let prefix = session_prefix(session);
        let out = self
            .git
            .run(
                &["for-each-ref", "--format=%(refname)", &prefix],
                None,
                Writes::Store,
                Index::Own,
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        let refs: Vec<&str> = text.lines().filter(|line| !line.is_empty()).collect();
        if !refs.is_empty() {
            let commands: String = refs.iter().map(|name| format!("delete {name}\n")).collect();
            self.git
                .run(
                    &["update-ref", "--stdin"],
                    Some(commands.as_bytes()),
                    Writes::Store,
                    Index::Own,
                )
                .await?;
        }
        op.wrote = true;
        op.heads().remove(session);
        Ok(refs.len())
    }
}

/// What follows a store's directory name in the directory it is created
/// in, before the creating process's id.
const CREATING: &str = ".creating-";

/// Removes the directories in `parent` where a process that is gone was
/// creating the store `name` (`NAME.creating-PID`).
fn remove_abandoned_creations(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let prefix = format!("{name}{CREATING}");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|file_name| file_name.strip_prefix(&prefix))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        if let Err(err) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(%err, "an abandoned checkpoint store could not be removed");
        }
    }
}

/// Refuses `from` or `to` when it is not a full object id (before any git
/// reads it as something else).
fn check_tree_ids(from: &str, to: &str) -> Result<(), CheckpointError> {
    match [from, to].into_iter().find(|tree| !is_object_id(tree)) {
        Some(tree) => Err(CheckpointError::Output {
            command: "diff-tree".to_owned(),
            detail: format!("{tree:?} is not a tree id"),
        }),
        None => Ok(()),
    }
}

/// Whether `text` is a full object id (SHA-1 or SHA-256, hex). Pure.
pub fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The bytes of every file below `dir`.
fn directory_size(dir: &Path) -> Result<u64, CheckpointError> {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next).map_err(io_error(&next))?;
        for entry in entries {
            let entry = entry.map_err(io_error(&next))?;
            let Ok(meta) = entry.metadata() else {
                // Removed while counting (a gc running elsewhere).
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_key_is_a_stable_hash_of_the_path_bytes() {
        assert_eq!(store_key(Path::new("")), "cbf29ce484222325");
        assert_eq!(store_key(Path::new("a")), "af63dc4c8601ec8c");
        assert_ne!(
            store_key(Path::new("/p/one")),
            store_key(Path::new("/p/two"))
        );
        assert_eq!(store_key(Path::new("/x y\n")).len(), 16);
    }

    #[test]
    fn sessions_are_pruned_oldest_first_and_kept_ones_never() {
        let sessions = vec![
            ("new".to_owned(), 30),
            ("old".to_owned(), 10),
            ("kept".to_owned(), 5),
            ("mid".to_owned(), 20),
        ];
        assert_eq!(
            prune_order(sessions, &["kept".to_owned()]),
            ["old", "mid", "new"]
        );
        assert_eq!(prune_order(Vec::new(), &[]), Vec::<String>::new());
        let tied = vec![("b".to_owned(), 1), ("a".to_owned(), 1)];
        assert_eq!(prune_order(tied, &[]), ["a", "b"]);
    }

    #[test]
    fn a_root_untracked_as_a_whole_is_recognised() {
        assert!(lists_only_the_root(b"./\0"));
        assert!(!lists_only_the_root(b"./a\0"));
        assert!(!lists_only_the_root(b""));
    }

    #[test]
    fn tracked_files_in_build_folders_are_picked_out() {
        let listing = b"src/a.rs\0build/run.sh\0x/node_modules/y\0\0";
        assert_eq!(
            tracked_in_build_folders(listing),
            [b"build/run.sh".to_vec(), b"x/node_modules/y".to_vec()]
        );
        assert!(tracked_in_build_folders(b"").is_empty());
    }

    #[test]
    fn changes_in_what_is_skipped_are_found_both_ways() {
        let skipped = |paths: &[&str]| -> Vec<SkippedPath> {
            paths
                .iter()
                .map(|path| SkippedPath {
                    raw: path.as_bytes().to_vec(),
                    skipped: Skipped {
                        path: (*path).to_owned(),
                        reason: crate::skip::SkipReason::BuildFolder,
                    },
                })
                .collect()
        };
        let (newly, freed) = skip_changes(&skipped(&["a", "b"]), &skipped(&["b", "c"]));
        assert_eq!(newly, [b"c".to_vec()]);
        assert_eq!(freed, [b"a".to_vec()]);
        let (newly, freed) = skip_changes(&skipped(&["a"]), &skipped(&["a"]));
        assert!(newly.is_empty() && freed.is_empty());
    }

    #[test]
    fn only_full_hex_ids_are_object_ids() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0".repeat(64)));
        for bad in ["", "HEAD", "--help", &"g".repeat(40), &"a".repeat(41)] {
            assert!(!is_object_id(bad), "{bad}");
        }
    }
}
