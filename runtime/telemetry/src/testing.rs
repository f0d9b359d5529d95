//! In-memory span capture for tests: a span processor that keeps every
//! finished span the moment it ends (no batching, no thread), and a helper
//! that builds a pipeline around it without installing a global subscriber.
//! Owns nothing the product uses at run time.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

use super::pipeline::Telemetry;
use super::settings::TelemetrySettings;
use super::stats::TelemetryError;

/// Finished spans kept in memory; clones share the same list.
#[derive(Clone, Default)]
pub struct CapturedSpans {
    spans: Arc<Mutex<Vec<SpanData>>>,
}

impl fmt::Debug for CapturedSpans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedSpans")
            .field("len", &self.len())
            .finish()
    }
}

impl CapturedSpans {
    /// An empty capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// The spans finished so far, in the order they ended.
    pub fn spans(&self) -> Vec<SpanData> {
        self.lock().clone()
    }

    /// How many spans finished so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no span finished yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SpanData>> {
        // Pushing a span cannot leave the list inconsistent; a poisoned lock is usable.
        self.spans.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SpanProcessor for CapturedSpans {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.lock().push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A pipeline from `settings` that also captures every span in memory; nothing
/// is installed globally (use [`Telemetry::dispatch`]). Logs go to the test
/// harness's captured output.
pub fn capture(settings: &TelemetrySettings) -> Result<(Telemetry, CapturedSpans), TelemetryError> {
    let captured = CapturedSpans::new();
    let telemetry = Telemetry::builder(settings)
        .span_processor(captured.clone())
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()?;
    Ok((telemetry, captured))
}
