//! What the export pipeline counts (spans queued, exported, failed, retried,
//! dropped), how often it says so in the log, and how the pipeline fails.
//! Shared by the pipeline, which admits spans, and the exporter, which sends
//! them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::settings::SettingsError;

/// Dropped spans are logged at the first drop and then once per this many.
pub(crate) const DROP_LOG_EVERY: u64 = 1000;

/// Failed exports are logged at the first failure and then once per this many.
pub(crate) const EXPORT_FAILURE_LOG_EVERY: u64 = 20;

/// `tracing` target of the pipeline's own log lines.
pub(super) const LOG_TARGET: &str = "troupe::telemetry";

/// Why telemetry could not be set up or shut down.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A telemetry variable has an unusable value.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The OTLP exporter could not be built.
    #[error("cannot set up OTLP export to {endpoint}: {message}")]
    Exporter {
        /// Where export was going.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// A global `tracing` subscriber is already installed.
    #[error("a tracing subscriber is already installed in this process")]
    AlreadyInstalled,
    /// The final flush did not complete (spans still queued are lost).
    #[error("telemetry shutdown did not complete: {0}")]
    Shutdown(String),
}

/// Export counters.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) queued: AtomicUsize,
    pub(super) exported: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) failed_batches: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) dropped: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> ExportStats {
        ExportStats {
            queued: self.queued.load(Ordering::Acquire),
            exported: self.exported.load(Ordering::Acquire),
            failed: self.failed.load(Ordering::Acquire),
            retries: self.retries.load(Ordering::Acquire),
            dropped: self.dropped.load(Ordering::Acquire),
        }
    }

    pub(super) fn dequeue(&self, n: usize) {
        // Saturating: spans admitted before a counter reset never exist, but a
        // wrap-around would report an absurd queue length.
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(n))
            });
    }

    pub(super) fn count_drop(&self, capacity: usize) {
        let n = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
        if should_log(n, DROP_LOG_EVERY) {
            tracing::warn!(
                target: LOG_TARGET,
                dropped_total = n,
                queue_size = capacity,
                "span export queue is full (collector slow or down): spans are being dropped"
            );
        }
    }
}

/// True for the 1st, (every+1)th, (2·every+1)th … occurrence.
pub(super) fn should_log(count: u64, every: u64) -> bool {
    every <= 1 || count % every == 1
}

/// What the exporter has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Spans waiting in the queue (or in the batch being sent).
    pub queued: usize,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans in exports that failed (collector down, refused, timed out).
    pub failed: u64,
    /// Export attempts repeated after a transient failure (never for a
    /// refused connection, never once shutdown began).
    pub retries: u64,
    /// Spans dropped because the queue was full or export had shut down.
    pub dropped: u64,
}
