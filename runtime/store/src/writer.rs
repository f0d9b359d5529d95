//! The store writer: one thread per open store that performs durable writes
//! away from the async workers (DESIGN.md principle 6, "durable is a state one
//! waits for").
//!
//! A caller hands [`Store::commit`] a write (a closure over the store) and a
//! completion; the writer runs the write on its own thread and makes it durable
//! with a flush, then calls the completion with the outcome. Writes that queue
//! up while a flush is under way are committed together: the writer takes every
//! queued write (up to [`MAX_GROUP`]), performs them in order, flushes once and
//! answers each — a group commit, so parallel agents and a batch of tool calls
//! share one `fsync`.
//!
//! Guarantees: writes run in the order they were handed over; a completion is
//! called only after its write and a flush that followed it returned; the
//! completions of one group are called in submission order, after the writer
//! let go of the store. The completion runs on the writer thread and must be
//! quick (send a message, fill a channel). The module owns the thread and its
//! queue; it knows nothing of what the writes contain.
//!
//! A write that never returns (sled 0.34 can hang under sustained writes,
//! see `docs/performance.md`) stops every later write. [`Store::watch_writer`]
//! starts a watchdog thread that is told when each group starts and ends,
//! and calls its `on_stall` once a group has run longer than the deadline:
//! the owner (the daemon) decides what to do. The watchdog waits on those
//! beats, never on a timer, while the writer is idle.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{Inner, Store, StoreError, error};

/// At most this many queued writes are committed by one flush, so a flood of
/// writes still gets answers in bounded batches.
pub(crate) const MAX_GROUP: usize = 256;

/// Name of the writer thread (seen in `/proc/PID/task/*/comm` and debuggers).
pub(crate) const WRITER_THREAD_NAME: &str = "troupe-store";

/// Name of the writer's watchdog thread.
pub(crate) const WATCHDOG_THREAD_NAME: &str = "troupe-store-watch";

/// A write handed to the writer.
type Write = Box<dyn FnOnce(&Store) -> Result<(), StoreError> + Send>;

/// What is told once a write is durable (or failed).
type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A write and the completion that waits for it.
pub(super) struct Job {
    write: Write,
    done: Done,
}

/// The sending side of the writer's queue, held by the store.
pub(super) type Queue = Sender<Job>;

/// A new queue: the store keeps the sender, [`start`] gets the receiver.
pub(super) fn queue() -> (Queue, Receiver<Job>) {
    channel()
}

/// Starts the writer thread of the store behind `inner`, taking writes from
/// `jobs`. The thread ends when the store is dropped (the queue closes with it).
pub(super) fn start(inner: Weak<Inner>, jobs: Receiver<Job>) -> Result<(), std::io::Error> {
    std::thread::Builder::new()
        .name(WRITER_THREAD_NAME.into())
        .spawn(move || run(&inner, &jobs))
        .map(|_| ())
}

/// What the writer tells its watchdog.
#[derive(Debug, Clone, Copy)]
pub(super) enum Beat {
    /// A group of `writes` writes started at `at`.
    Started {
        /// When.
        at: Instant,
        /// How many writes the group holds.
        writes: usize,
    },
    /// The group that started last has been written and flushed.
    Ended,
}

/// A write group that ran past the watchdog's deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterStall {
    /// When the group started.
    pub started: DateTime<Utc>,
    /// How long it had run when the watchdog gave up on it.
    pub waited: Duration,
    /// How many writes the group held.
    pub writes: usize,
}

/// The writer's loop: wait for a write, take what else is queued, commit the
/// group, answer.
fn run(inner: &Weak<Inner>, jobs: &Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let group = take_group(first, jobs, MAX_GROUP);
        let Some(inner) = inner.upgrade() else {
            // The store is gone: nobody can read what would be written.
            for job in group {
                (job.done)(Err(closed()));
            }
            continue;
        };
        let watchdog = inner.watchdog.get().cloned();
        if let Some(watchdog) = &watchdog {
            let _ = watchdog.send(Beat::Started {
                at: Instant::now(),
                writes: group.len(),
            });
        }
        #[cfg(feature = "fault-injection")]
        fault::block_while_asked();
        let answers = commit(&Store { inner }, group);
        if let Some(watchdog) = &watchdog {
            let _ = watchdog.send(Beat::Ended);
        }
        // The store was dropped above: whoever is told "durable" may close it.
        for (done, outcome) in answers {
            done(outcome);
        }
    }
    tracing::debug!("store writer stopped");
}

/// The watchdog's loop: after each group's start, wait at most `deadline`
/// for its end; call `on_stall` (once) for a group that ran longer, then
/// stop. Ends with the store (its beats' sender goes with it).
fn watch(beats: &Receiver<Beat>, deadline: Duration, on_stall: impl FnOnce(WriterStall)) {
    let mut started = None;
    loop {
        let beat = match started {
            None => beats.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some((at, _)) => beats.recv_timeout(deadline.saturating_sub(Instant::elapsed(&at))),
        };
        match beat {
            Ok(Beat::Started { at, writes }) => started = Some((at, writes)),
            Ok(Beat::Ended) => started = None,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let Some((at, writes)) = started else {
                    continue;
                };
                let waited = at.elapsed();
                let started = Utc::now()
                    - chrono::TimeDelta::from_std(waited).unwrap_or(chrono::TimeDelta::zero());
                tracing::error!(
                    writes,
                    waited_ms = waited.as_millis() as u64,
                    "a store write has not returned"
                );
                on_stall(WriterStall {
                    started,
                    waited,
                    writes,
                });
                return;
            }
        }
    }
}

/// A hook of test builds (feature `fault-injection`): while the file named
/// by `TROUPE_FAULT_STORE_BLOCK` exists, each write group waits before it
/// writes, as a hung sled write would. Never compiled into a release build.
#[cfg(feature = "fault-injection")]
mod fault {
    use std::time::Duration;

    /// The environment variable naming the file.
    pub(super) const BLOCK_FILE_VAR: &str = "TROUPE_FAULT_STORE_BLOCK";

    /// Waits while the file exists.
    pub(super) fn block_while_asked() {
        let Some(path) = std::env::var_os(BLOCK_FILE_VAR) else {
            return;
        };
        let path = std::path::PathBuf::from(path);
        while path.exists() {
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
}

/// `first` and the writes queued behind it, at most `max` in all, in order.
fn take_group(first: Job, jobs: &Receiver<Job>, max: usize) -> Vec<Job> {
    let mut group = vec![first];
    while group.len() < max {
        match jobs.try_recv() {
            Ok(job) => group.push(job),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
        }
    }
    group
}

/// A completion and the outcome it is to be given.
type Answer = (Done, Result<(), StoreError>);

/// Performs the group's writes in order, then one flush when any write
/// succeeded; returns each completion with its outcome.
fn commit(store: &Store, group: Vec<Job>) -> Vec<Answer> {
    let size = group.len();
    let written: Vec<_> = group
        .into_iter()
        .map(|job| {
            let write = job.write;
            let outcome =
                catch_unwind(AssertUnwindSafe(|| write(store))).unwrap_or_else(|_| Err(panicked()));
            (job.done, outcome)
        })
        .collect();
    let flushed = if written.iter().any(|(_, outcome)| outcome.is_ok()) {
        store.inner.commits.fetch_add(1, Ordering::Relaxed);
        Some(store.inner.db.flush().map(|_| ()))
    } else {
        None
    };
    tracing::trace!(writes = size, "store writer committed a group");
    written
        .into_iter()
        .map(|(done, outcome)| {
            let outcome = outcome.and_then(|()| match &flushed {
                Some(Err(err)) => Err(error::sled_error(
                    "flush the database",
                    &store.inner.dir,
                    err.clone(),
                )),
                _ => Ok(()),
            });
            (done, outcome)
        })
        .collect()
}

/// The answer to a write handed over after the store closed.
fn closed() -> StoreError {
    StoreError::Database {
        detail: "the store was closed before the write was made durable".into(),
    }
}

/// The answer to a write that panicked (its completion still gets one).
fn panicked() -> StoreError {
    StoreError::Database {
        detail: "a store write panicked; nothing of it may be durable".into(),
    }
}

impl Store {
    /// Hands `write` to the store's writer thread, which performs it, makes it
    /// durable together with whatever else is queued (one flush), then calls
    /// `done` with the outcome — on the writer thread, so `done` only passes
    /// the news on (a message, a channel). Never blocks the caller: an async
    /// worker hands over and goes on; "durable" arrives later. Writes are
    /// performed in the order they are handed over.
    pub fn commit<W, D>(&self, write: W, done: D)
    where
        W: FnOnce(&Store) -> Result<(), StoreError> + Send + 'static,
        D: FnOnce(Result<(), StoreError>) + Send + 'static,
    {
        let job = Job {
            write: Box::new(write),
            done: Box::new(done),
        };
        if let Err(refused) = self.inner.writer.send(job) {
            // The writer thread is gone (it only ends with the store).
            (refused.0.done)(Err(closed()));
        }
    }

    /// [`Store::commit`] awaited: resolves once `write` is durable.
    pub async fn commit_and_wait<W>(&self, write: W) -> Result<(), StoreError>
    where
        W: FnOnce(&Store) -> Result<(), StoreError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commit(write, move |outcome| {
            let _ = tx.send(outcome);
        });
        rx.await.unwrap_or_else(|_| Err(closed()))
    }

    /// [`Store::commit`] of a write that produces a value (a read with its
    /// repairs, a removal's list): `done` gets the value once the write is
    /// durable, or the error of the write or of its flush.
    pub fn commit_with<T, W, D>(&self, write: W, done: D)
    where
        T: Send + 'static,
        W: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
        D: FnOnce(Result<T, StoreError>) + Send + 'static,
    {
        let slot = Arc::new(std::sync::Mutex::new(None));
        let filled = slot.clone();
        self.commit(
            move |store| {
                let value = write(store)?;
                *filled
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
                Ok(())
            },
            move |outcome| {
                let value = slot
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                done(match (outcome, value) {
                    (Ok(()), Some(value)) => Ok(value),
                    (Err(err), _) => Err(err),
                    (Ok(()), None) => Err(panicked()),
                });
            },
        );
    }

    /// Starts the writer's watchdog: `on_stall` is called once, on the
    /// watchdog's own thread, when a group of writes has not returned within
    /// `deadline` (the writer itself cannot be stopped: it is inside sled).
    /// At most one watchdog per store; a second call is refused.
    pub fn watch_writer<F>(&self, deadline: Duration, on_stall: F) -> Result<(), StoreError>
    where
        F: FnOnce(WriterStall) + Send + 'static,
    {
        let (beats, heard) = channel();
        if self.inner.watchdog.set(beats).is_err() {
            return Err(StoreError::Database {
                detail: "the store writer already has a watchdog".into(),
            });
        }
        std::thread::Builder::new()
            .name(WATCHDOG_THREAD_NAME.into())
            .spawn(move || watch(&heard, deadline, on_stall))
            .map(|_| ())
            .map_err(|source| StoreError::Io {
                op: "start the store writer's watchdog".into(),
                path: self.inner.dir.clone(),
                source,
            })
    }

    /// How many flushes the writer thread has made so far (each commits a
    /// group of writes).
    pub fn group_commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }
}

/// Keeps the writer's queue usable from every thread.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Queue>();
    shareable::<Arc<Inner>>();
};

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::NewSession;
    use troupe_protocol::model::Message;

    const WAIT: Duration = Duration::from_secs(10);

    fn session(store: &Store, id: &str) {
        store
            .create_session(&NewSession {
                id: id.into(),
                cwd: "/tmp".into(),
                provider: "p".into(),
                model: "m".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            })
            .unwrap();
    }

    #[test]
    fn a_write_is_answered_once_durable_and_readable() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        let (tx, rx) = mpsc::channel();
        store.commit(
            |store| store.put_message("s1", 0, &Message::user_text("hello")),
            move |outcome| tx.send(outcome.is_ok()).unwrap(),
        );
        assert!(rx.recv_timeout(WAIT).unwrap());
        assert!(store.group_commits() >= 1);
        drop(store);
        let store = reopen(dir.path());
        let history = store.load_history("s1").unwrap();
        assert_eq!(history.messages, vec![Message::user_text("hello")]);
    }

    #[test]
    fn queued_writes_share_one_flush_and_are_answered_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        // The first write holds the writer until the others are queued.
        let gate = Arc::new(Barrier::new(2));
        let (tx, rx) = mpsc::channel();
        let held = gate.clone();
        let first_tx = tx.clone();
        store.commit(
            move |_| {
                held.wait();
                held.wait();
                Ok(())
            },
            move |outcome| first_tx.send((0, outcome.is_ok())).unwrap(),
        );
        gate.wait();
        let before = store.group_commits();
        for n in 1..=20u64 {
            let tx = tx.clone();
            store.commit(
                move |store| store.put_message("s1", n - 1, &Message::user_text(format!("m{n}"))),
                move |outcome| tx.send((n, outcome.is_ok())).unwrap(),
            );
        }
        gate.wait();
        let answers: Vec<_> = (0..=20).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
        assert_eq!(answers, (0..=20).map(|n| (n, true)).collect::<Vec<_>>());
        // The held write's own flush, and one for the twenty queued behind it.
        assert_eq!(
            store.group_commits() - before,
            2,
            "one flush for twenty writes"
        );
        assert_eq!(store.load_history("s1").unwrap().messages.len(), 20);
    }

    #[test]
    fn a_failed_write_is_answered_with_its_error_and_the_others_still_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        let (tx, rx) = mpsc::channel();
        let bad = tx.clone();
        store.commit(
            |store| store.put_message("missing", 0, &Message::user_text("x")),
            move |outcome| bad.send(outcome.map_err(|e| e.to_string())).unwrap(),
        );
        let panicking = tx.clone();
        store.commit(
            |_| panic!("a write that panics"),
            move |outcome| panicking.send(outcome.map_err(|e| e.to_string())).unwrap(),
        );
        store.commit(
            |store| store.put_message("s1", 0, &Message::user_text("kept")),
            move |outcome| tx.send(outcome.map_err(|e| e.to_string())).unwrap(),
        );
        let first = rx.recv_timeout(WAIT).unwrap();
        assert!(first.unwrap_err().contains("not found"));
        let second = rx.recv_timeout(WAIT).unwrap();
        assert!(second.unwrap_err().contains("panicked"));
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), Ok(()));
        assert_eq!(store.load_history("s1").unwrap().messages.len(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waiting_for_durability_never_blocks_the_async_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        // The write blocks the writer until a task on this very (only) async
        // thread opens the gate: a synchronous flush here would deadlock.
        let (open, opened) = mpsc::channel::<()>();
        let waiting = store.commit_and_wait(move |store| {
            opened.recv_timeout(WAIT).map_err(|_| closed())?;
            store.put_message("s1", 0, &Message::user_text("late"))
        });
        let opener = tokio::spawn(async move { open.send(()).unwrap() });
        waiting.await.unwrap();
        opener.await.unwrap();
        assert_eq!(store.load_history("s1").unwrap().messages.len(), 1);
    }

    /// Opens the store, waiting (at most [`WAIT`]) for a lock a dropped
    /// store still holds: sled's own flusher thread lets go of the database
    /// a moment after the last handle is dropped.
    fn reopen(dir: &std::path::Path) -> Store {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match Store::open(dir) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other.unwrap(),
            }
        }
    }

    #[test]
    fn the_writer_ends_with_the_store_and_lets_it_reopen() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..3u64 {
            let store = reopen(dir.path());
            if n == 0 {
                session(&store, "s1");
            }
            let (tx, rx) = mpsc::channel();
            store.commit(
                move |store| store.put_message("s1", n, &Message::user_text(format!("m{n}"))),
                move |outcome| tx.send(outcome.is_ok()).unwrap(),
            );
            assert!(rx.recv_timeout(WAIT).unwrap());
            // Dropped right after "durable": the writer holds nothing, so the
            // next open gets the database once sled lets go of it.
        }
        let store = reopen(dir.path());
        assert_eq!(store.load_history("s1").unwrap().messages.len(), 3);
    }

    #[test]
    fn the_watchdog_reports_a_write_that_does_not_return_and_only_that() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        let (stalled, stalls) = mpsc::channel();
        store
            .watch_writer(Duration::from_millis(200), move |stall| {
                stalled.send(stall).unwrap();
            })
            .unwrap();
        assert!(
            store.watch_writer(Duration::from_secs(1), |_| {}).is_err(),
            "one watchdog per store"
        );
        // Quick writes: no stall.
        for n in 0..20u64 {
            let (tx, rx) = mpsc::channel();
            store.commit(
                move |store| store.put_message("s1", n, &Message::user_text("x")),
                move |outcome| tx.send(outcome.is_ok()).unwrap(),
            );
            assert!(rx.recv_timeout(WAIT).unwrap());
        }
        assert!(stalls.try_recv().is_err());
        // A write that hangs until released.
        let (release, released) = mpsc::channel::<()>();
        store.commit(
            move |_| {
                released.recv_timeout(WAIT).map_err(|_| closed())?;
                Ok(())
            },
            |_| {},
        );
        let stall = stalls.recv_timeout(WAIT).unwrap();
        assert_eq!(stall.writes, 1);
        assert!(stall.waited >= Duration::from_millis(200));
        assert!(stall.started <= chrono::Utc::now());
        release.send(()).unwrap();
        // Reported once: the watchdog has stopped.
        drop(store);
        assert!(stalls.recv_timeout(WAIT).is_err());
    }

    #[test]
    fn groups_are_bounded() {
        let (tx, rx) = channel::<Job>();
        let job = || Job {
            write: Box::new(|_| Ok(())),
            done: Box::new(|_| {}),
        };
        for _ in 0..10 {
            tx.send(job()).unwrap();
        }
        assert_eq!(take_group(job(), &rx, 4).len(), 4);
        assert_eq!(take_group(job(), &rx, 100).len(), 8);
        assert_eq!(take_group(job(), &rx, 100).len(), 1);
    }

    #[test]
    fn a_write_with_a_value_hands_it_over_once_durable_and_an_error_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        session(&store, "s1");
        let (tx, rx) = mpsc::channel();
        let sent = tx.clone();
        store.commit_with(
            |store| {
                store.put_message("s1", 0, &Message::user_text("hi"))?;
                Ok(store.load_history("s1")?.messages.len())
            },
            move |outcome| sent.send(outcome.map_err(|e| e.to_string())).unwrap(),
        );
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), Ok(1));
        store.commit_with(
            |_store| {
                Err(StoreError::Database {
                    detail: "refused".into(),
                })
            },
            move |outcome| tx.send(outcome.map_err(|e| e.to_string())).unwrap(),
        );
        assert!(
            rx.recv_timeout(WAIT)
                .unwrap()
                .unwrap_err()
                .contains("refused")
        );
    }
}
