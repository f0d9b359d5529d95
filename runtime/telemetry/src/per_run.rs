//! Export of chosen runs to endpoints of their own: a process that runs the
//! runs of several clients (the daemon) exports each run where its client
//! asked, when that is not where the process itself exports.
//!
//! [`RunExports`] is an SDK [`SpanProcessor`] added to the pipeline. A run is
//! given its own OTLP exporter with [`RunExports::export_run`]; from then on
//! every span of its trace goes to that exporter (a batch processor of its
//! own, with the queue bound and retry rules of the main one), and when the
//! run's root span ends the exporter is flushed and shut down on a thread of
//! its own. Which run a trace belongs to is read as the local span store
//! reads it: the `troupe.run_id` attribute of the trace's first span.
//!
//! A run's id is known only once it was submitted, and its first spans may
//! end before that. While a registration is announced
//! ([`RunExports::expect_run`]), spans of runs with no exporter yet are kept
//! (at most [`MAX_WAITING_SPANS`]) and handed over when the run is
//! registered; otherwise nothing is kept for runs exported the usual way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanProcessor,
};

use super::RUN_ID_ATTRIBUTE;
use super::export::{Closing, exporter};
use super::pipeline::{
    EXPORT_BATCH_SIZE, EXPORT_INTERVAL, EXPORT_QUEUE_SIZE, EXPORT_TIMEOUT, SHUTDOWN_TIMEOUT,
};
use super::settings::TelemetrySettings;
use super::stats::{Counters, TelemetryError};

/// Most spans kept for runs whose exporter is not registered yet.
pub const MAX_WAITING_SPANS: usize = 1024;

/// Runs exported to endpoints of their own; cheap to clone (shared state).
#[derive(Debug, Clone, Default)]
pub struct RunExports {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Registrations announced and not yet made.
    expected: AtomicUsize,
    /// Set when any run has an exporter or one is expected.
    busy: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The run of each trace seen while runs were exported here.
    traces: HashMap<TraceId, Arc<str>>,
    /// The exporter of each registered run.
    runs: HashMap<String, Arc<BatchSpanProcessor>>,
    /// Spans of runs not registered yet, while a registration is expected,
    /// each with whether it is its run's root.
    waiting: Vec<(Arc<str>, SpanData, bool)>,
}

impl RunExports {
    /// No run exported on its own.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn refresh_busy(&self, state: &State) {
        let busy = !state.runs.is_empty() || self.inner.expected.load(Ordering::SeqCst) > 0;
        self.inner.busy.store(busy, Ordering::SeqCst);
    }

    /// Announces a registration: spans of runs with no exporter are kept
    /// until [`RunExports::export_run`] or [`RunExports::expected_no_more`].
    pub fn expect_run(&self) {
        self.inner.expected.fetch_add(1, Ordering::SeqCst);
        self.inner.busy.store(true, Ordering::SeqCst);
    }

    /// An announced registration will not be made (the run was not
    /// submitted, or is exported the usual way).
    pub fn expected_no_more(&self) {
        let _ = self
            .inner
            .expected
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        let mut state = self.lock();
        if self.inner.expected.load(Ordering::SeqCst) == 0 {
            state.waiting.clear();
        }
        self.refresh_busy(&state);
    }

    /// Exports the spans of `run_id` as `settings` say (their OTLP endpoint
    /// and service name), from now until its root span ends, with the spans
    /// already kept for it. Ends one announced registration. Errors: the
    /// settings export nothing, or the exporter cannot be built.
    pub fn export_run(
        &self,
        run_id: &str,
        settings: &TelemetrySettings,
    ) -> Result<(), TelemetryError> {
        let built = self.build(settings);
        let mut state = self.lock();
        let _ = self
            .inner
            .expected
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        let result = built.map(|processor| {
            let processor = Arc::new(processor);
            let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut state.waiting)
                .into_iter()
                .partition(|(run, _, _)| &**run == run_id);
            state.waiting = others;
            let mut ended = false;
            for (_, span, root) in mine {
                processor.on_end(span);
                ended |= root;
            }
            if ended {
                // The whole run ended before it was registered.
                finish(processor);
            } else {
                state.runs.insert(run_id.to_string(), processor);
            }
        });
        if self.inner.expected.load(Ordering::SeqCst) == 0 {
            state.waiting.clear();
        }
        self.refresh_busy(&state);
        result
    }

    fn build(&self, settings: &TelemetrySettings) -> Result<BatchSpanProcessor, TelemetryError> {
        let Some(export) = &settings.export else {
            return Err(TelemetryError::Exporter {
                endpoint: String::new(),
                message: "no endpoint to export to".to_string(),
            });
        };
        let exporter = exporter(
            export,
            EXPORT_TIMEOUT,
            Arc::new(Counters::default()),
            Arc::new(Closing::default()),
            Arc::new(OnceLock::new()),
        )?;
        let config = BatchConfigBuilder::default()
            .with_max_queue_size(EXPORT_QUEUE_SIZE)
            .with_max_export_batch_size(EXPORT_BATCH_SIZE)
            .with_scheduled_delay(EXPORT_INTERVAL)
            .build();
        let mut processor = BatchSpanProcessor::new(exporter, config);
        let resource = Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        processor.set_resource(&resource);
        Ok(processor)
    }

    /// Runs with an exporter of their own now.
    pub fn runs(&self) -> usize {
        self.lock().runs.len()
    }
}

/// Flushes and shuts `processor` down on a thread of its own (the batch
/// processor's shutdown blocks).
fn finish(processor: Arc<BatchSpanProcessor>) {
    let spawned = std::thread::Builder::new()
        .name("troupe-run-export".into())
        .spawn(move || {
            let _ = processor.force_flush();
            let _ = processor.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        });
    if let Err(err) = spawned {
        tracing::warn!(%err, "a run's exporter could not be flushed");
    }
}

fn run_attribute(attributes: &[KeyValue]) -> Option<Arc<str>> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == RUN_ID_ATTRIBUTE)
        .map(|kv| match &kv.value {
            Value::String(text) => Arc::from(text.as_str()),
            other => Arc::from(other.to_string().as_str()),
        })
}

impl SpanProcessor for RunExports {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        use opentelemetry::trace::Span as _;
        if !self.inner.busy.load(Ordering::SeqCst) {
            return;
        }
        let trace = span.span_context().trace_id();
        if self.lock().traces.contains_key(&trace) {
            return;
        }
        let Some(data) = span.exported_data() else {
            return;
        };
        if let Some(run_id) = run_attribute(&data.attributes) {
            let mut state = self.lock();
            state.traces.insert(trace, run_id);
        }
    }

    fn on_end(&self, span: SpanData) {
        if !self.inner.busy.load(Ordering::SeqCst) {
            return;
        }
        let trace = span.span_context.trace_id();
        let local_root = span.parent_span_id == SpanId::INVALID || span.parent_span_is_remote;
        let mut state = self.lock();
        let run_id = match state.traces.get(&trace) {
            Some(run_id) => run_id.clone(),
            None => match run_attribute(&span.attributes) {
                Some(run_id) => run_id,
                None => return,
            },
        };
        if local_root {
            state.traces.remove(&trace);
        }
        match state.runs.get(&*run_id).cloned() {
            Some(processor) => {
                if local_root {
                    state.runs.remove(&*run_id);
                    self.refresh_busy(&state);
                }
                drop(state);
                processor.on_end(span);
                if local_root {
                    finish(processor);
                }
            }
            None => {
                if self.inner.expected.load(Ordering::SeqCst) > 0
                    && state.waiting.len() < MAX_WAITING_SPANS
                {
                    state.waiting.push((run_id, span, local_root));
                }
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let runs: Vec<_> = self.lock().runs.values().cloned().collect();
        for processor in runs {
            let _ = processor.force_flush();
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let runs: Vec<_> = {
            let mut state = self.lock();
            state.traces.clear();
            state.waiting.clear();
            state.runs.drain().map(|(_, processor)| processor).collect()
        };
        for processor in runs {
            let _ = processor.force_flush();
            let _ = processor.shutdown_with_timeout(timeout);
        }
        Ok(())
    }
}
