//! The local span store's writer (SPEC §11): finished spans are written to the
//! store on a thread of their own, so the step that ends a span pays a channel
//! send, not a sled insert. [`SpanWriter::sync`] waits until everything queued
//! so far is written (before `troupe trace` or the demo reads a run's spans);
//! [`SpanWriter::close`] drains the queue, stops the thread and flushes.

use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Store;
use crate::telemetry::{SpanRecord, SpanSink};

/// How long [`SpanWriter::sync`] waits for the queue to drain.
pub const SPAN_SYNC_TIMEOUT: Duration = Duration::from_secs(5);

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
                for job in receiver {
                    match job {
                        Job::Span(run_id, span) => writer_store.record(&run_id, *span),
                        Job::Sync(done) => {
                            let _ = done.send(());
                        }
                    }
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

    /// Waits (at most [`SPAN_SYNC_TIMEOUT`]) until every span queued before
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
    use crate::telemetry::SpanStatus;

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
