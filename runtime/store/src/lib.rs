//! The durable session store (SPEC §9): sessions, their messages, compaction
//! markers, the layer-1 replacement ledger, "allow always" rules, runs, run
//! events and span records, and rewinding a conversation to a run's end, kept in one sled database under the data directory
//! (`<data_dir>/db`).
//!
//! The store owns the database, the key layout (`layout`, documented in
//! `docs/storage.md`) and the rules that keep metadata in step with messages.
//! It decides nothing about conversations: repairing a history, compacting,
//! numbering events and choosing what is in use belong to the callers. Writes
//! reach the disk at [`Store::flush`], or on the store's writer thread with
//! [`Store::commit`], which answers when they are durable without blocking the
//! caller; callers wait for durability before anything depends on a write
//! (DESIGN principle 6, "durable before visible").
//!
//! Reads never fail because one record is damaged: list operations skip an
//! undecodable record with a warning, and [`Store::load_history`] reports it in
//! `LoadedHistory::skipped`. Every write failure is returned as a
//! [`StoreError`] whose message says what to do.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod cleanup;
mod error;
mod family;
mod history;
pub mod layout;
mod lookup;
mod records;
mod rewind;
mod runs;
mod session_data;
mod sessions;
mod span_writer;
mod tee;
mod writer;

use std::fmt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;

use chrono::{DateTime, Utc};

pub use cleanup::{COMPACT_EVENTS_AFTER, Retention, SESSION_MAX_AGE, SPACE_TARGET_PERCENT};
pub use error::StoreError;
pub use lookup::{IdMatch, SHORT_ID_LEN, short_id};
pub use records::SkippedRecord;
pub use records::{
    Branch, CompactionMarker, ForkBase, LedgerEntry, NewSession, PendingRewind, RunBounds,
    RunRecord, RunState, SessionMeta, TITLE_MAX_CHARS,
};
pub use rewind::{
    ConversationRewind, RewindPlan, RewindRefusal, RewindRequest, in_start_order, plan_cut,
};
pub use span_writer::SpanWriter;
pub use tee::{TeedWrite, WriteTee};
pub use writer::WriterStall;

/// How long a step that must end — a cancelled agent's last save, the
/// record and the last event of an ending run — waits for the disk to
/// confirm a write before it goes on without the confirmation (and says so):
/// a disk that never answers must not make a run endless.
pub const CONFIRM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The error of a write the disk did not confirm within [`CONFIRM_DEADLINE`]
/// (`what`: "the end of the run").
pub fn unconfirmed(what: &str) -> StoreError {
    StoreError::Database {
        detail: format!(
            "the disk did not confirm {what} within {} s",
            CONFIRM_DEADLINE.as_secs()
        ),
    }
}

/// Where the store's current time comes from (replaceable in tests).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Unix mode of the directories the store creates: only the owner may enter
/// (the database holds prompts, file contents and tool output).
const PRIVATE_DIR_MODE: u32 = 0o700;

/// Capacity of sled's page cache. sled's default (1 GiB) would let one
/// process grow far past SPEC §14's 25 MB single-run target; 32 MiB holds a
/// 10,000-message history of 2 KB messages with room to spare.
const CACHE_CAPACITY_BYTES: u64 = 32 * 1024 * 1024;

/// How often sled's background thread flushes on its own. Durability never
/// depends on it ([`Store::flush`] is explicit); it bounds what a crash loses
/// of writes nobody flushed (events between model calls).
const BACKGROUND_FLUSH_MS: u64 = 500;

/// A handle on the session store. Cheap to clone; every clone uses the same
/// database. Only one process may hold a data directory's database at a time.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The database and its trees.
struct Inner {
    db: sled::Db,
    dir: PathBuf,
    clock: Clock,
    sessions: sled::Tree,
    messages: sled::Tree,
    pending: sled::Tree,
    markers: sled::Tree,
    ledger: sled::Tree,
    rules: sled::Tree,
    memory: sled::Tree,
    task_plans: sled::Tree,
    runs: sled::Tree,
    session_runs: sled::Tree,
    events: sled::Tree,
    spans: sled::Tree,
    /// The queue of the writer thread ([`Store::commit`]).
    writer: writer::Queue,
    /// Flushes made by the writer thread.
    commits: AtomicU64,
    /// Where the writer tells its watchdog of each group, once one watches.
    watchdog: std::sync::OnceLock<Sender<writer::Beat>>,
    /// The observer of session writes, once one is set ([`Store::set_tee`]).
    tee: std::sync::OnceLock<Arc<dyn tee::WriteTee>>,
}

// A store is shared between actors and blocking tasks.
const _: fn() = || {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Store>();
};

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating when missing) the database in `<data_dir>/db`. Missing
    /// directories are created with mode 0700.
    ///
    /// Errors: [`StoreError::Locked`] when another process holds the database,
    /// [`StoreError::Unwritable`] when a directory or file cannot be created or
    /// written, [`StoreError::Corrupt`] when the database file is damaged.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        Self::open_with_clock(data_dir, Arc::new(Utc::now))
    }

    /// [`Store::open`] with the clock used for `created`/`updated` times.
    pub fn open_with_clock(data_dir: &Path, clock: Clock) -> Result<Store, StoreError> {
        create_private_dir(data_dir)?;
        let dir = data_dir.join(layout::DB_DIR_NAME);
        create_private_dir(&dir)?;
        let db = sled::Config::new()
            .path(&dir)
            .cache_capacity(CACHE_CAPACITY_BYTES)
            .flush_every_ms(Some(BACKGROUND_FLUSH_MS))
            .open()
            .map_err(|e| error::open_error(&dir, e))?;
        let tree = |name: &str| {
            db.open_tree(name)
                .map_err(|e| error::sled_error("open a tree", &dir, e))
        };
        let (queue, jobs) = writer::queue();
        let inner = Inner {
            sessions: tree(layout::SESSIONS_TREE)?,
            messages: tree(layout::MESSAGES_TREE)?,
            pending: tree(layout::PENDING_TREE)?,
            markers: tree(layout::MARKERS_TREE)?,
            ledger: tree(layout::LEDGER_TREE)?,
            rules: tree(layout::RULES_TREE)?,
            memory: tree(layout::MEMORY_TREE)?,
            task_plans: tree(layout::TASK_PLANS_TREE)?,
            runs: tree(layout::RUNS_TREE)?,
            session_runs: tree(layout::SESSION_RUNS_TREE)?,
            events: tree(layout::EVENTS_TREE)?,
            spans: tree(layout::SPANS_TREE)?,
            writer: queue,
            commits: AtomicU64::new(0),
            watchdog: std::sync::OnceLock::new(),
            tee: std::sync::OnceLock::new(),
            db,
            dir,
            clock,
        };
        tracing::debug!(dir = %inner.dir.display(), "session store opened");
        let inner = Arc::new(inner);
        writer::start(Arc::downgrade(&inner), jobs).map_err(|source| StoreError::Io {
            op: "start the store writer thread".into(),
            path: inner.dir.clone(),
            source,
        })?;
        Ok(Store { inner })
    }

    /// The database directory (`<data_dir>/db`).
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Writes everything stored so far to disk and waits for the fsync. After
    /// it returns `Ok`, a killed process or a power loss keeps every earlier
    /// write. It blocks the calling thread for the disk: async code hands its
    /// writes to [`Store::commit`] instead.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner
            .db
            .flush()
            .map(|_| ())
            .map_err(self.sled_err("flush the database"))
    }

    /// The current time of the store's clock.
    fn now(&self) -> DateTime<Utc> {
        (self.inner.clock)()
    }

    /// Maps a sled error of operation `op`.
    fn sled_err(&self, op: &'static str) -> impl Fn(sled::Error) -> StoreError + '_ {
        move |e| error::sled_error(op, &self.inner.dir, e)
    }

    /// A database-wide increasing id (order of pending results, ledger
    /// entries and markers).
    fn next_id(&self) -> Result<u64, StoreError> {
        self.inner
            .db
            .generate_id()
            .map_err(self.sled_err("generate an id"))
    }
}

/// Creates `dir` and its missing parents with mode 0700.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(|e| error::dir_error(dir, e))
}

/// `what` for a session in messages: `session "id"`.
fn session_what(id: &str) -> String {
    format!("session {id:?}")
}

/// `what` for a run in messages: `run "id"`.
fn run_what(id: &str) -> String {
    format!("run {id:?}")
}

/// Decodes a single record that a caller asked for by key; damage is an error.
fn decode_one<T: serde::de::DeserializeOwned>(what: String, bytes: &[u8]) -> Result<T, StoreError> {
    layout::decode(bytes).map_err(|detail| StoreError::Corrupt { what, detail })
}

/// Decodes a record met while listing; damage is logged and the record skipped.
fn decode_listed<T: serde::de::DeserializeOwned>(
    tree: &str,
    key: &[u8],
    bytes: &[u8],
) -> Option<T> {
    match layout::decode(bytes) {
        Ok(value) => Some(value),
        Err(reason) => {
            tracing::warn!(
                tree,
                key = %String::from_utf8_lossy(key),
                %reason,
                "skipping an unreadable record of the session store"
            );
            None
        }
    }
}

/// What one tree of the store holds: its records and their bytes (keys and
/// values as stored, before sled's own overhead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeUsage {
    /// The tree's name (see [`layout`]).
    pub tree: &'static str,
    /// Number of records.
    pub records: u64,
    /// Bytes of keys and values.
    pub bytes: u64,
}

/// What the store holds, tree by tree, and what it takes on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUsage {
    /// Each tree's records and bytes.
    pub trees: Vec<TreeUsage>,
    /// The database's size on disk in bytes (sled's own figure: its log
    /// and snapshot files).
    pub on_disk: u64,
}

impl StoreUsage {
    /// Bytes of keys and values in every tree.
    pub fn data_bytes(&self) -> u64 {
        self.trees.iter().map(|tree| tree.bytes).sum()
    }
}

impl Store {
    /// What the store holds and takes on disk. Reads every record once: a
    /// measurement for benchmarks and the retention policy, not for a
    /// request path.
    pub fn usage(&self) -> Result<StoreUsage, StoreError> {
        let inner = &self.inner;
        let trees = [
            (layout::SESSIONS_TREE, &inner.sessions),
            (layout::MESSAGES_TREE, &inner.messages),
            (layout::PENDING_TREE, &inner.pending),
            (layout::MARKERS_TREE, &inner.markers),
            (layout::LEDGER_TREE, &inner.ledger),
            (layout::RULES_TREE, &inner.rules),
            (layout::MEMORY_TREE, &inner.memory),
            (layout::TASK_PLANS_TREE, &inner.task_plans),
            (layout::RUNS_TREE, &inner.runs),
            (layout::SESSION_RUNS_TREE, &inner.session_runs),
            (layout::EVENTS_TREE, &inner.events),
            (layout::SPANS_TREE, &inner.spans),
        ];
        let mut usage = Vec::with_capacity(trees.len());
        for (name, tree) in trees {
            let mut records = 0u64;
            let mut bytes = 0u64;
            for item in tree.iter() {
                let (key, value) = item.map_err(self.sled_err("measure the store"))?;
                records += 1;
                bytes += (key.len() + value.len()) as u64;
            }
            usage.push(TreeUsage {
                tree: name,
                records,
                bytes,
            });
        }
        let on_disk = inner
            .db
            .size_on_disk()
            .map_err(self.sled_err("measure the store"))?;
        Ok(StoreUsage {
            trees: usage,
            on_disk,
        })
    }
}
