//! The local span store's writer (SPEC §11): finished spans go to a thread of
//! their own, which keeps each run's spans until its root span ends and then
//! writes them together. The step that ends a span pays a channel send, and the
//! fsyncs that make a run's history durable before each model call never carry
//! span records. [`SpanWriter::sync`] writes everything received so far (before
//! `troupe trace` or the demo reads a run's spans); [`SpanWriter::close`] drains
//! the queue, writes the rest, stops the thread and flushes.

use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Store;
use troupe_telemetry::{SpanRecord, SpanSink};

/// How long [`SpanWriter::sync`] waits for the queue to drain.
pub(crate) const SPAN_SYNC_TIMEOUT: Duration = Duration::from_secs(5);
/// Spans kept waiting for their root at most; beyond this the oldest run's
/// spans are written at once (a run that never ends cannot grow memory).
pub(super) const MAX_BUFFERED_SPANS: usize = 4_096;

enum Job {
    Span(String, Box<SpanRecord>),
    Sync(mpsc::SyncSender<()>),
}

/// Writes spans to a [`Store`] in the background.
#[derive(Debug)]
pub struct SpanWriter {
    store: Store,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Span(run, _) => write!(f, "Span({run})"),
            Self::Sync(_) => f.write_str("Sync"),
        }
    }
}

impl SpanWriter {
    /// Starts the writer thread for `store`. When the thread cannot start,
    /// spans are written on the caller's thread instead.
    pub fn start(store: Store) -> Self {
        let (sender, receiver) = mpsc::channel::<Job>();
        let writer_store = store.clone();
        let thread = std::thread::Builder::new()
            .name("troupe-spans".into())
            .spawn(move || {
                let mut pending = PendingSpans::default();
                for job in receiver {
                    match job {
                        Job::Span(run_id, span) => {
                            for (run_id, span) in pending.add(run_id, *span) {
                                writer_store.record(&run_id, span);
                            }
                        }
                        Job::Sync(done) => {
                            for (run_id, span) in pending.take_all() {
                                writer_store.record(&run_id, span);
                            }
                            let _ = done.send(());
                        }
                    }
                }
                for (run_id, span) in pending.take_all() {
                    writer_store.record(&run_id, span);
                }
            });
        match thread {
            Ok(thread) => Self {
                store,
                sender: Mutex::new(Some(sender)),
                thread: Mutex::new(Some(thread)),
            },
            Err(err) => {
                tracing::warn!(%err, "span writer thread did not start; writing spans inline");
                Self {
                    store,
                    sender: Mutex::new(None),
                    thread: Mutex::new(None),
                }
            }
        }
    }

    /// Waits (at most `SPAN_SYNC_TIMEOUT`) until every span queued before
    /// this call is in the store.
    pub fn sync(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        let queued = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|sender| sender.send(Job::Sync(done)).is_ok());
        if queued && wait.recv_timeout(SPAN_SYNC_TIMEOUT).is_err() {
            tracing::warn!("span writer did not catch up in time");
        }
    }

    /// Drains the queue, stops the thread and flushes the store. Later spans
    /// are written inline.
    pub fn close(&self) {
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            && thread.join().is_err()
        {
            tracing::warn!("span writer thread panicked");
        }
        if let Err(err) = self.store.flush() {
            tracing::warn!(%err, "spans could not be flushed");
        }
    }
}

/// Spans waiting for their run's root span, in arrival order per run. Pure
/// bookkeeping: what to write when.
#[derive(Debug, Default)]
struct PendingSpans {
    runs: Vec<(String, Vec<SpanRecord>)>,
    count: usize,
}

impl PendingSpans {
    /// Adds a span; returns the spans to write now: the whole run when this is
    /// its root (a span without parent), the oldest run when too many wait.
    fn add(&mut self, run_id: String, span: SpanRecord) -> Vec<(String, SpanRecord)> {
        let root = span.parent_span_id.is_none();
        let position = match self.runs.iter().position(|(id, _)| *id == run_id) {
            Some(position) => position,
            None => {
                self.runs.push((run_id, Vec::new()));
                self.runs.len() - 1
            }
        };
        self.runs[position].1.push(span);
        self.count += 1;
        if root {
            return self.take_run(position);
        }
        if self.count > MAX_BUFFERED_SPANS {
            return self.take_run(0);
        }
        Vec::new()
    }

    fn take_run(&mut self, position: usize) -> Vec<(String, SpanRecord)> {
        let (run_id, spans) = self.runs.remove(position);
        self.count -= spans.len();
        spans
            .into_iter()
            .map(|span| (run_id.clone(), span))
            .collect()
    }

    /// Everything waiting, oldest run first.
    fn take_all(&mut self) -> Vec<(String, SpanRecord)> {
        self.count = 0;
        std::mem::take(&mut self.runs)
            .into_iter()
            .flat_map(|(run_id, spans)| spans.into_iter().map(move |span| (run_id.clone(), span)))
            .collect()
    }
}

impl SpanSink for SpanWriter {
    fn record(&self, run_id: &str, span: SpanRecord) {
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let job = Job::Span(run_id.to_string(), Box::new(span));
        let unsent = match sender.as_ref() {
            Some(sender) => sender.send(job).err().map(|mpsc::SendError(job)| job),
            None => Some(job),
        };
        drop(sender);
        if let Some(Job::Span(run_id, span)) = unsent {
            self.store.record(&run_id, *span);
        }
    }
}

impl Drop for SpanWriter {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;

    use super::*;
    use troupe_telemetry::SpanStatus;

    fn record(id: &str) -> SpanRecord {
        SpanRecord {
            trace_id: "0".repeat(32),
            span_id: id.into(),
            parent_span_id: None,
            name: format!("span {id}"),
            start: Utc::now(),
            end: Utc::now(),
            duration_ms: 0.0,
            status: SpanStatus::Unset,
            attributes: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    #[test]
    fn a_run_is_written_when_its_root_ends_and_memory_is_bounded() {
        let mut pending = PendingSpans::default();
        let mut child = record("0000000000000001");
        child.parent_span_id = Some("0000000000000002".into());
        assert!(pending.add("a".into(), child.clone()).is_empty());
        assert!(pending.add("b".into(), child.clone()).is_empty());
        let written = pending.add("a".into(), record("0000000000000002"));
        assert_eq!(written.len(), 2);
        assert!(written.iter().all(|(run, _)| run == "a"));
        assert_eq!(pending.count, 1);
        // A run that never ends: once too many spans wait, the oldest run goes.
        let mut flushed = Vec::new();
        for _ in 0..MAX_BUFFERED_SPANS {
            flushed.extend(pending.add("c".into(), child.clone()));
        }
        assert_eq!(flushed.len(), 1);
        assert_eq!(flushed[0].0, "b");
        assert_eq!(pending.count, MAX_BUFFERED_SPANS);
        assert_eq!(pending.take_all().len(), MAX_BUFFERED_SPANS);
        assert_eq!(pending.count, 0);
    }

    #[test]
    fn spans_are_written_in_the_background_and_sync_waits_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let writer = SpanWriter::start(store.clone());
        for n in 0..50 {
            writer.record("run", record(&format!("{n:016x}")));
        }
        writer.sync();
        assert_eq!(store.spans("run").unwrap().len(), 50);
        writer.close();
        // After close, spans are still kept (inline).
        writer.record("run", record(&format!("{:016x}", 99)));
        assert_eq!(store.spans("run").unwrap().len(), 51);
    }
}
