//! The telemetry pipeline: the `tracing` subscriber (stderr log layer with trace
//! ids + `tracing-opentelemetry` layer), the SDK tracer provider, the OTLP batch
//! exporter behind a bounded queue, and the guard that flushes it at exit.
//! Owns process-wide installation (`init`) and the export counters; knows
//! nothing of runs or actors.
//!
//! Export never blocks or crashes a run (SPEC §11, §15): a finished span is
//! offered to a queue of at most [`EXPORT_QUEUE_SIZE`] spans; when the queue is
//! full the span is dropped and counted (logged at the first drop and every
//! `DROP_LOG_EVERY` drops). A dedicated thread (the SDK's batch processor)
//! sends batches of [`EXPORT_BATCH_SIZE`] every [`EXPORT_INTERVAL`] with a
//! blocking HTTP client and an [`EXPORT_TIMEOUT`]; failures are counted and
//! logged (first failure, then every `EXPORT_FAILURE_LOG_EVERY`), and only
//! transient ones are retried (`export`: never a refused connection, never
//! once shutdown began). Nothing on that thread touches the application's
//! tokio runtime.
//!
//! Why the blocking client: the SDK's stable batch processor runs on its own OS
//! thread and needs a blocking exporter. The async reqwest client would need the
//! SDK's experimental tokio batch processor, which runs exports on the
//! application's runtime (competing with the actors on a 2-core machine) and
//! cannot flush once that runtime is shutting down.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanLimits,
    SpanProcessor, TracerProviderBuilder,
};
use tracing::{Dispatch, Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{DefaultFields, Format, Full, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

use super::TRACE_TARGET;
use super::brief::{BriefFormat, LogStyle};
use super::export::{Closing, exporter};
use super::local::{LocalSpanProcessor, SpanSink};
use super::settings::{DEFAULT_LOG_FILTER, TelemetrySettings};
use super::stats::{Counters, ExportStats, LOG_TARGET, TelemetryError};

/// Most finished spans waiting for export. A span is 1–2 KB in memory, so a
/// full queue holds a few MB; a run makes a handful of spans per turn, so it
/// fills only when the collector has been unreachable for a long time.
pub(crate) const EXPORT_QUEUE_SIZE: usize = 2048;

/// Most spans sent in one OTLP request.
pub(crate) const EXPORT_BATCH_SIZE: usize = 512;

/// How often queued spans are sent (a full batch is sent at once).
pub(crate) const EXPORT_INTERVAL: Duration = Duration::from_millis(500);

/// Longest one export may take, retries included; a slow or hanging collector
/// costs at most this per batch, on the export thread only.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest [`TelemetryGuard::shutdown`] waits for the final flush.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// Instrumentation scope of Troupe's spans.
const SCOPE_NAME: &str = "troupe";

/// Admission in front of the SDK batch processor: at most `capacity` spans are
/// in its queue or its current batch; beyond that spans are dropped and counted
/// here (the SDK counts its own drops but does not expose them).
#[derive(Debug)]
struct QueueGate {
    inner: BatchSpanProcessor,
    counters: Arc<Counters>,
    capacity: usize,
    closed: AtomicBool,
    closing: Arc<Closing>,
}

impl SpanProcessor for QueueGate {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.closed.load(Ordering::Acquire) {
            self.counters.count_drop(self.capacity);
            return;
        }
        let before = self.counters.queued.fetch_add(1, Ordering::AcqRel);
        if before >= self.capacity {
            self.counters.dequeue(1);
            self.counters.count_drop(self.capacity);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.closed.store(true, Ordering::Release);
        // The final flush makes one attempt per batch; a retry wait ends now.
        self.closing.close();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The log filter of `text` (env-filter syntax). A filter that does not parse
/// never turns anything off: the default `DEFAULT_LOG_FILTER` is used instead,
/// with the warning to log once (naming the text and what is wrong with it).
pub fn log_filter(text: &str) -> (EnvFilter, Option<String>) {
    match EnvFilter::try_new(text) {
        Ok(filter) => (filter, None),
        Err(err) => (
            EnvFilter::new(DEFAULT_LOG_FILTER),
            Some(format!(
                "invalid log filter {text:?} in TROUPE_LOG / RUST_LOG ({err}); using {DEFAULT_LOG_FILTER:?}"
            )),
        ),
    }
}

/// Log lines: `timestamp LEVEL trace_id=… spans: message fields`. The trace id
/// is the one of the OpenTelemetry span current on this thread (entered spans
/// activate their context), absent outside traced work.
struct TraceIdFormat {
    inner: Format<Full, ()>,
}

impl TraceIdFormat {
    fn new() -> Self {
        Self {
            inner: Format::default()
                .without_time()
                .with_level(false)
                .with_target(false)
                .with_ansi(false),
        }
    }
}

impl<S, N> FormatEvent<S, N> for TraceIdFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ");
        write!(writer, "{now} {:>5} ", event.metadata().level())?;
        let cx = Context::current();
        let span = cx.span();
        let span_context = span.span_context();
        if span_context.is_valid() {
            write!(writer, "trace_id={} ", span_context.trace_id())?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// Builds the telemetry of a process (or of a test): settings, an optional
/// local sink, extra span processors, and knobs for the export queue.
pub struct TelemetryBuilder {
    settings: TelemetrySettings,
    local_sink: Option<Arc<dyn SpanSink>>,
    provider: TracerProviderBuilder,
    extra_processors: usize,
    queue_size: usize,
    export_interval: Duration,
    export_timeout: Duration,
    shutdown_timeout: Duration,
    log_writer: Option<BoxMakeWriter>,
    log_style: LogStyle,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("settings", &self.settings)
            .field("local_sink", &self.local_sink.is_some())
            .field("extra_processors", &self.extra_processors)
            .field("queue_size", &self.queue_size)
            .field("export_interval", &self.export_interval)
            .field("export_timeout", &self.export_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl TelemetryBuilder {
    /// Keeps every run's spans through `sink` (the local span store).
    pub fn local_sink(mut self, sink: Arc<dyn SpanSink>) -> Self {
        self.local_sink = Some(sink);
        self
    }

    /// Adds a span processor (tests: `telemetry::testing::CapturedSpans`, behind
    /// the `testing` feature).
    pub fn span_processor<P: SpanProcessor + 'static>(mut self, processor: P) -> Self {
        self.provider = self.provider.with_span_processor(processor);
        self.extra_processors += 1;
        self
    }

    /// Export queue bound (default [`EXPORT_QUEUE_SIZE`]; at least 1).
    pub fn queue_size(mut self, spans: usize) -> Self {
        self.queue_size = spans.max(1);
        self
    }

    /// Export interval (default [`EXPORT_INTERVAL`]).
    pub fn export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }

    /// Export timeout (default [`EXPORT_TIMEOUT`]).
    pub fn export_timeout(mut self, timeout: Duration) -> Self {
        self.export_timeout = timeout;
        self
    }

    /// Shutdown bound (default [`SHUTDOWN_TIMEOUT`]).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Where log lines go (default: stderr).
    pub fn log_writer<W>(mut self, writer: W) -> Self
    where
        W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    {
        self.log_writer = Some(BoxMakeWriter::new(writer));
        self
    }

    /// How log lines look (default: detailed).
    pub fn log_style(mut self, style: LogStyle) -> Self {
        self.log_style = style;
        self
    }

    /// Builds the subscriber and the provider without installing anything.
    pub fn build(self) -> Result<Telemetry, TelemetryError> {
        let Self {
            settings,
            local_sink,
            mut provider,
            extra_processors,
            queue_size,
            export_interval,
            export_timeout,
            shutdown_timeout,
            log_writer,
            log_style,
        } = self;

        let (log_filter, filter_warning) = log_filter(&settings.log_filter);

        let counters = Arc::new(Counters::default());
        let export_logs = Arc::new(OnceLock::new());
        let exporting = settings.export.is_some();
        let mut processors = extra_processors;
        if let Some(sink) = local_sink {
            provider = provider.with_span_processor(LocalSpanProcessor::new(sink));
            processors += 1;
        }
        if let Some(export) = &settings.export {
            let closing = Arc::new(Closing::default());
            let exporter = exporter(
                export,
                export_timeout,
                counters.clone(),
                closing.clone(),
                export_logs.clone(),
            )?;
            let config = BatchConfigBuilder::default()
                .with_max_queue_size(queue_size)
                .with_max_export_batch_size(EXPORT_BATCH_SIZE.min(queue_size))
                .with_scheduled_delay(export_interval)
                .build();
            provider = provider.with_span_processor(QueueGate {
                inner: BatchSpanProcessor::new(exporter, config),
                counters: counters.clone(),
                capacity: queue_size,
                closed: AtomicBool::new(false),
                closing,
            });
            processors += 1;
        }

        let resource = Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = provider.with_resource(resource).build();

        // No processor means nobody would see the spans: leave the layer out.
        let otel_layer = (processors > 0).then(|| {
            let scope = InstrumentationScope::builder(SCOPE_NAME)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build();
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer_with_scope(scope))
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_level(false)
                .with_tracked_inactivity(false)
                .with_filter(Targets::new().with_target(TRACE_TARGET, Level::TRACE))
        });
        let writer = log_writer.unwrap_or_else(|| BoxMakeWriter::new(io::stderr));
        let log_layer = match log_style {
            LogStyle::Detailed => tracing_subscriber::fmt::layer()
                .fmt_fields(DefaultFields::new())
                .event_format(TraceIdFormat::new())
                .with_writer(writer)
                .with_filter(log_filter)
                .boxed(),
            LogStyle::Brief => tracing_subscriber::fmt::layer()
                .event_format(BriefFormat)
                .with_writer(writer)
                .with_filter(log_filter)
                .boxed(),
        };
        let subscriber = tracing_subscriber::registry()
            .with(log_layer)
            .with(otel_layer);
        let dispatch = Dispatch::new(subscriber);
        // Weak: the dispatcher owns the provider, which owns the exporter.
        let _ = export_logs.set(dispatch.downgrade());
        if let Some(warning) = filter_warning {
            // Through this pipeline's own log layer, installed or not.
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::warn!(target: LOG_TARGET, "{warning}");
            });
        }

        Ok(Telemetry {
            dispatch,
            guard: TelemetryGuard {
                provider: Some(provider),
                counters,
                exporting,
                shutdown_timeout,
            },
        })
    }
}

/// A built pipeline: the `tracing` dispatcher and the guard of its provider.
#[derive(Debug)]
pub struct Telemetry {
    dispatch: Dispatch,
    guard: TelemetryGuard,
}

impl Telemetry {
    /// A builder from settings (no local sink, default queue and timeouts, logs on stderr).
    pub fn builder(settings: &TelemetrySettings) -> TelemetryBuilder {
        TelemetryBuilder {
            settings: settings.clone(),
            local_sink: None,
            // Pinned, so the SDK's own `OTEL_TRACES_SAMPLER` and
            // `OTEL_SPAN_*_COUNT_LIMIT` never thin out a run's spans (the local
            // span store needs every one): the SDK defaults, always.
            provider: SdkTracerProvider::builder()
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
                .with_span_limits(SpanLimits::default()),
            extra_processors: 0,
            queue_size: EXPORT_QUEUE_SIZE,
            export_interval: EXPORT_INTERVAL,
            export_timeout: EXPORT_TIMEOUT,
            shutdown_timeout: SHUTDOWN_TIMEOUT,
            log_writer: None,
            log_style: LogStyle::Detailed,
        }
    }

    /// The dispatcher, for `tracing::dispatcher::with_default` /
    /// `set_default` or `WithSubscriber::with_subscriber` in tests.
    pub fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    /// The guard, for counters while the dispatcher is in use.
    pub fn guard(&self) -> &TelemetryGuard {
        &self.guard
    }

    /// The dispatcher and the guard, separately.
    pub fn into_parts(self) -> (Dispatch, TelemetryGuard) {
        (self.dispatch, self.guard)
    }

    /// Installs the dispatcher as the process's global default.
    pub fn install(self) -> Result<TelemetryGuard, TelemetryError> {
        tracing::dispatcher::set_global_default(self.dispatch)
            .map_err(|_| TelemetryError::AlreadyInstalled)?;
        Ok(self.guard)
    }
}

/// Sets up the process's telemetry (SPEC §11): logs on stderr with trace ids,
/// OTLP export when the settings say so, and the local span store through
/// `local_sink`. Keep the guard until exit and call
/// [`TelemetryGuard::shutdown`] to flush.
pub fn init(
    settings: &TelemetrySettings,
    local_sink: Option<Arc<dyn SpanSink>>,
) -> Result<TelemetryGuard, TelemetryError> {
    let mut builder = Telemetry::builder(settings);
    if let Some(sink) = local_sink {
        builder = builder.local_sink(sink);
    }
    builder.build()?.install()
}

/// Owns the tracer provider: flushes and stops export on
/// [`TelemetryGuard::shutdown`] (or on drop), within its bound.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    counters: Arc<Counters>,
    exporting: bool,
    shutdown_timeout: Duration,
}

impl fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("exporting", &self.exporting)
            .field("stats", &self.export_stats())
            .finish_non_exhaustive()
    }
}

impl TelemetryGuard {
    /// True when spans are exported over OTLP.
    pub fn is_exporting(&self) -> bool {
        self.exporting
    }

    /// The export counters.
    pub fn export_stats(&self) -> ExportStats {
        self.counters.snapshot()
    }

    /// Spans dropped so far because the export queue was full.
    pub fn dropped_spans(&self) -> u64 {
        self.counters.dropped.load(Ordering::Acquire)
    }

    /// Flushes queued spans and stops export, waiting at most the shutdown
    /// bound even when the collector hangs; later calls do nothing. Counters
    /// stay readable afterwards. Blocks the calling thread: call it at the end
    /// of `main` or from `spawn_blocking`. Dropping the guard does the same.
    pub fn shutdown(&mut self) -> Result<(), TelemetryError> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        let result = provider.shutdown_with_timeout(self.shutdown_timeout);
        let stats = self.export_stats();
        if stats.dropped > 0 {
            tracing::warn!(
                target: LOG_TARGET,
                dropped = stats.dropped,
                exported = stats.exported,
                failed = stats.failed,
                "spans were dropped because the export queue was full"
            );
        }
        match result {
            Ok(()) | Err(OTelSdkError::AlreadyShutdown) => Ok(()),
            Err(err) => Err(TelemetryError::Shutdown(err.to_string())),
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(err) = self.shutdown() {
            tracing::warn!(target: LOG_TARGET, "{err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::should_log;

    #[test]
    fn logging_cadence() {
        let logged: Vec<u64> = (1..=45).filter(|n| should_log(*n, 20)).collect();
        assert_eq!(logged, [1, 21, 41]);
        assert!((1..5).all(|n| should_log(n, 1)));
    }

    #[test]
    fn counters_never_wrap() {
        let counters = Counters::default();
        counters.queued.store(2, Ordering::Release);
        counters.dequeue(5);
        assert_eq!(counters.snapshot().queued, 0);
    }

    #[test]
    fn a_bad_log_filter_falls_back_to_the_default() {
        let (filter, warning) = log_filter("info,troupe=debug");
        assert_eq!(warning, None);
        assert_eq!(filter.to_string(), "troupe=debug,info");
        for bad in ["foo=[[[", "=[bad", "troupe=loud"] {
            let (filter, warning) = log_filter(bad);
            assert_eq!(filter.to_string(), DEFAULT_LOG_FILTER, "{bad}");
            let warning = warning.expect(bad);
            assert!(
                warning.contains(bad) && warning.contains("TROUPE_LOG"),
                "{warning}"
            );
        }
    }

    /// A log sink for tests.
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    #[test]
    fn a_bad_log_filter_is_one_warning_and_spans_still_flow() {
        let settings = TelemetrySettings {
            log_filter: "foo=[[[".into(),
            ..TelemetrySettings::default()
        };
        let lines = Lines::default();
        let writer = lines.clone();
        let sink = Arc::new(super::super::local::MemorySpanSink::default());
        let telemetry = Telemetry::builder(&settings)
            .local_sink(sink.clone())
            .log_writer(move || writer.clone())
            .build()
            .expect("a bad filter never stops telemetry");
        let text = lines.text();
        assert_eq!(text.matches("invalid log filter").count(), 1, "{text}");
        assert!(text.contains("foo=[[["), "{text}");
        tracing::dispatcher::with_default(telemetry.dispatch(), || {
            // The default filter applies: warnings pass, debug lines do not.
            tracing::debug!("hidden");
            tracing::warn!("shown");
            let agent =
                super::super::genai::agent_span(&tracing::Span::none(), "run-1", "main", "s");
            drop(agent);
        });
        let text = lines.text();
        assert!(text.contains("shown") && !text.contains("hidden"), "{text}");
        assert_eq!(text.matches("invalid log filter").count(), 1, "{text}");
        drop(telemetry);
        assert!(
            !sink.spans("run-1").is_empty(),
            "the local span store still gets the run"
        );
    }

    #[test]
    fn without_processors_there_is_no_trace_layer() {
        let telemetry = Telemetry::builder(&TelemetrySettings::default())
            .build()
            .unwrap();
        tracing::dispatcher::with_default(telemetry.dispatch(), || {
            let span = super::super::genai::tool_span(&tracing::Span::none(), "bash", "c1");
            assert_eq!(super::super::propagation::traceparent_of(&span), None);
        });
        assert!(!telemetry.guard().is_exporting());
    }
}
