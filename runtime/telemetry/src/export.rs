//! The OTLP exporter behind the batch processor: the HTTP client that tells
//! apart why an export failed, the retry decision, and the wrapper that counts,
//! logs and retries. Owns nothing of the queue or the subscriber (that is
//! `pipeline`).
//!
//! Why Troupe retries itself instead of the OTLP crate: the crate reports every
//! transport failure as the same "network error" and retries it three times
//! with backoff (about 0.8 s in all), so a collector that is not running slowed
//! every exit by that much. Here the client records what went wrong, and
//! [`retry_delay`] decides: a refused connection (nothing listens) is never
//! retried, a timed-out request has used its whole budget, and once shutdown
//! has begun nothing is retried at all, so the final flush costs one attempt
//! per batch. Transient failures during a run (a reset connection, 429, 502,
//! 503, 504) are retried with a short backoff on the export thread only.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::dispatcher::WeakDispatch;

use super::settings::{OtlpExport, OtlpProtocol};
use super::stats::{Counters, EXPORT_FAILURE_LOG_EVERY, LOG_TARGET, TelemetryError, should_log};

/// Most retries of one batch during a run.
pub(crate) const MAX_EXPORT_RETRIES: u32 = 3;

/// Wait before the first retry; it doubles for each further one.
pub(crate) const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Why one export attempt failed, as far as the transport could tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExportFailure {
    /// Nothing listens at the endpoint: the connection was refused.
    Refused,
    /// The collector did not answer within the export timeout.
    TimedOut,
    /// Another transport failure (reset connection, DNS, TLS …), described.
    Network(String),
    /// The collector answered with this non-success HTTP status.
    Status(u16),
    /// Not known (gRPC export, or a failure before anything was sent).
    Unknown,
}

impl fmt::Display for ExportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused => f.write_str("connection refused (is the collector running?)"),
            Self::TimedOut => f.write_str("the collector did not answer in time"),
            Self::Network(detail) => write!(f, "network error: {detail}"),
            Self::Status(status) => write!(f, "the collector answered HTTP {status}"),
            Self::Unknown => f.write_str("export failed"),
        }
    }
}

/// The wait before retrying a batch whose attempt failed with `failure`, or
/// `None` to give up: after `retries` retries so far, `elapsed` since the first
/// attempt, within `budget` (the export timeout), `closing` once shutdown began.
pub(super) fn retry_delay(
    failure: &ExportFailure,
    retries: u32,
    elapsed: Duration,
    budget: Duration,
    closing: bool,
) -> Option<Duration> {
    let transient = match failure {
        ExportFailure::Network(_) => true,
        ExportFailure::Status(status) => matches!(status, 429 | 502 | 503 | 504),
        ExportFailure::Refused | ExportFailure::TimedOut | ExportFailure::Unknown => false,
    };
    if closing || !transient || retries >= MAX_EXPORT_RETRIES {
        return None;
    }
    let delay = FIRST_RETRY_DELAY.saturating_mul(1 << retries.min(16));
    (elapsed.saturating_add(delay) < budget).then_some(delay)
}

/// What a transport error was: refused, timed out, or something else.
pub(super) fn classify_error(error: &(dyn StdError + 'static)) -> ExportFailure {
    let mut timed_out = false;
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = source {
        source = err.source();
        if let Some(io) = err.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::ConnectionRefused => return ExportFailure::Refused,
                io::ErrorKind::TimedOut => timed_out = true,
                _ => {}
            }
            // `io::Error::source` skips the error it wraps; look at it too.
            if let Some(inner) = io.get_ref() {
                source = Some(inner);
            }
        }
        if let Some(http) = err.downcast_ref::<reqwest::Error>()
            && http.is_timeout()
        {
            timed_out = true;
        }
    }
    if timed_out {
        return ExportFailure::TimedOut;
    }
    ExportFailure::Network(error_chain(error))
}

/// `error: cause: cause …`, each distinct message once.
fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = source {
        let text = err.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = err.source();
    }
    parts.join(": ")
}

/// The failure of the last attempt, written by the client and read by the
/// exporter on the same export thread (the batch processor sends one batch at
/// a time).
#[derive(Debug, Default)]
pub(super) struct LastFailure(Mutex<Option<ExportFailure>>);

impl LastFailure {
    fn set(&self, failure: Option<ExportFailure>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    fn take(&self) -> Option<ExportFailure> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Set once shutdown begins: retries stop, and a retry wait in progress ends
/// at once.
#[derive(Debug, Default)]
pub(super) struct Closing {
    closed: Mutex<bool>,
    changed: Condvar,
}

impl Closing {
    /// Marks shutdown as begun and wakes a waiting retry.
    pub(super) fn close(&self) {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    fn is_closed(&self) -> bool {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits `delay` unless shutdown begins first; true when it did.
    fn wait(&self, delay: Duration) -> bool {
        let closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
        let (closed, _) = self
            .changed
            .wait_timeout_while(closed, delay, |closed| !*closed)
            .unwrap_or_else(PoisonError::into_inner);
        *closed
    }
}

/// The blocking reqwest client, recording why each request failed.
#[derive(Debug)]
struct ClassifyingClient {
    inner: reqwest::blocking::Client,
    last: Arc<LastFailure>,
}

#[async_trait::async_trait]
impl HttpClient for ClassifyingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let result = self.inner.send_bytes(request).await;
        self.last.set(match &result {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(ExportFailure::Status(response.status().as_u16())),
            Err(err) => Some(classify_error(err.as_ref())),
        });
        result
    }
}

/// Builds the blocking client on a thread of its own: reqwest's blocking
/// client starts (and refuses to start inside) an async runtime.
fn blocking_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    install_crypto_provider();
    std::thread::Builder::new()
        .name("troupe-otlp-client".into())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .build()
                .map_err(|err| err.to_string())
        })
        .map_err(|err| format!("cannot start a thread: {err}"))?
        .join()
        .map_err(|_| "building the HTTP client panicked".to_string())?
}

/// Installs ring as the process's rustls provider (reqwest is built without
/// one); an already installed provider is kept.
fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err means another provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The OTLP exporter for `export`, wrapped to count, log and retry. Its log
/// lines go to `logs` once set (the pipeline's own dispatcher, which the export
/// thread does not otherwise see unless it is installed globally).
pub(super) fn exporter(
    export: &OtlpExport,
    timeout: Duration,
    counters: Arc<Counters>,
    closing: Arc<Closing>,
    logs: Arc<OnceLock<WeakDispatch>>,
) -> Result<CountingExporter<opentelemetry_otlp::SpanExporter>, TelemetryError> {
    use opentelemetry_otlp::WithExportConfig as _;
    let failed = |message: String| TelemetryError::Exporter {
        endpoint: export.endpoint.clone(),
        message,
    };
    let last = Arc::new(LastFailure::default());
    let inner = match export.protocol {
        OtlpProtocol::HttpProtobuf => {
            use opentelemetry_otlp::WithHttpConfig as _;
            let client = ClassifyingClient {
                inner: blocking_client(timeout).map_err(failed)?,
                last: last.clone(),
            };
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(export.endpoint.clone())
                .with_timeout(timeout)
                .with_http_client(client)
                // One attempt per call: `CountingExporter` decides on retries.
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .build()
                .map_err(|err| failed(err.to_string()))?
        }
        #[cfg(feature = "grpc")]
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_protocol(opentelemetry_otlp::Protocol::Grpc)
            .with_endpoint(export.endpoint.clone())
            .with_timeout(timeout)
            .build()
            .map_err(|err| failed(err.to_string()))?,
        #[cfg(not(feature = "grpc"))]
        OtlpProtocol::Grpc => {
            return Err(super::settings::SettingsError::GrpcNotBuiltIn.into());
        }
    };
    Ok(CountingExporter {
        inner,
        counters,
        endpoint: export.endpoint.clone(),
        last,
        closing,
        budget: timeout,
        logs,
    })
}

/// Counts what the wrapped exporter sends, retries transient failures (see
/// [`retry_delay`]) and logs failures (the SDK's own error logs need its
/// `internal-logs` feature, which is off).
#[derive(Debug)]
pub(super) struct CountingExporter<E> {
    inner: E,
    counters: Arc<Counters>,
    endpoint: String,
    last: Arc<LastFailure>,
    closing: Arc<Closing>,
    budget: Duration,
    logs: Arc<OnceLock<WeakDispatch>>,
}

impl<E: SpanExporter> CountingExporter<E> {
    /// Runs `log` with the pipeline's dispatcher as the default.
    fn logging(&self, log: impl FnOnce()) {
        match self.logs.get().and_then(WeakDispatch::upgrade) {
            Some(dispatch) => tracing::dispatcher::with_default(&dispatch, log),
            None => log(),
        }
    }

    /// Exports `batch`, retrying while [`retry_delay`] allows.
    async fn export_with_retries(&self, batch: Vec<SpanData>) -> Result<(), ExportFailure> {
        let started = Instant::now();
        let mut retries = 0;
        let mut batch = Some(batch);
        loop {
            // The batch is copied only when another attempt may follow.
            let may_retry = retries < MAX_EXPORT_RETRIES && !self.closing.is_closed();
            let attempt = if may_retry {
                batch.clone()
            } else {
                batch.take()
            };
            self.last.take();
            let Err(err) = self.inner.export(attempt.unwrap_or_default()).await else {
                return Ok(());
            };
            let failure = self.last.take().unwrap_or(match err {
                OTelSdkError::Timeout(_) => ExportFailure::TimedOut,
                _ => ExportFailure::Unknown,
            });
            if !may_retry {
                return Err(failure);
            }
            let closing = self.closing.is_closed();
            let Some(delay) =
                retry_delay(&failure, retries, started.elapsed(), self.budget, closing)
            else {
                return Err(failure);
            };
            if self.closing.wait(delay) {
                return Err(failure);
            }
            retries += 1;
            self.counters.retries.fetch_add(1, Ordering::AcqRel);
            self.logging(|| {
                tracing::debug!(
                    target: LOG_TARGET,
                    endpoint = %self.endpoint,
                    retry = retries,
                    "retrying span export after: {failure}"
                );
            });
        }
    }
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.counters.dequeue(n);
        match self.export_with_retries(batch).await {
            Ok(()) => {
                self.counters.exported.fetch_add(n as u64, Ordering::AcqRel);
                Ok(())
            }
            Err(failure) => {
                self.counters.failed.fetch_add(n as u64, Ordering::AcqRel);
                let failures = self.counters.failed_batches.fetch_add(1, Ordering::AcqRel) + 1;
                if should_log(failures, EXPORT_FAILURE_LOG_EVERY) {
                    self.logging(|| {
                        tracing::warn!(
                            target: LOG_TARGET,
                            endpoint = %self.endpoint,
                            failed_exports = failures,
                            spans = n,
                            "span export failed: {failure}"
                        );
                    });
                }
                Err(OTelSdkError::InternalFailure(failure.to_string()))
            }
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_secs(3);

    fn delay(failure: ExportFailure, retries: u32, closing: bool) -> Option<Duration> {
        retry_delay(&failure, retries, Duration::ZERO, BUDGET, closing)
    }

    #[test]
    fn a_refused_connection_is_never_retried() {
        assert_eq!(delay(ExportFailure::Refused, 0, false), None);
        assert_eq!(delay(ExportFailure::Refused, 0, true), None);
    }

    #[test]
    fn transient_failures_back_off_during_a_run() {
        for failure in [
            ExportFailure::Network("connection reset".into()),
            ExportFailure::Status(429),
            ExportFailure::Status(502),
            ExportFailure::Status(503),
            ExportFailure::Status(504),
        ] {
            let delays: Vec<Option<Duration>> = (0..=MAX_EXPORT_RETRIES)
                .map(|n| delay(failure.clone(), n, false))
                .collect();
            assert_eq!(
                delays,
                [
                    Some(Duration::from_millis(100)),
                    Some(Duration::from_millis(200)),
                    Some(Duration::from_millis(400)),
                    None
                ],
                "{failure:?}"
            );
        }
    }

    #[test]
    fn nothing_is_retried_once_shutdown_began() {
        assert_eq!(delay(ExportFailure::Status(503), 0, true), None);
        assert_eq!(delay(ExportFailure::Network("reset".into()), 0, true), None);
    }

    #[test]
    fn timeouts_final_statuses_and_unknown_failures_are_not_retried() {
        for failure in [
            ExportFailure::TimedOut,
            ExportFailure::Status(400),
            ExportFailure::Status(401),
            ExportFailure::Status(500),
            ExportFailure::Unknown,
        ] {
            assert_eq!(delay(failure.clone(), 0, false), None, "{failure:?}");
        }
    }

    #[test]
    fn a_retry_never_outlasts_the_export_budget() {
        let failure = ExportFailure::Status(503);
        let near_end = BUDGET - Duration::from_millis(150);
        assert_eq!(retry_delay(&failure, 1, near_end, BUDGET, false), None);
        assert_eq!(
            retry_delay(&failure, 0, near_end, BUDGET, false),
            Some(Duration::from_millis(100))
        );
    }

    #[test]
    fn transport_errors_are_classified() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(classify_error(&refused), ExportFailure::Refused);
        let timed_out = io::Error::new(io::ErrorKind::TimedOut, "slow");
        assert_eq!(classify_error(&timed_out), ExportFailure::TimedOut);
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer");
        assert_eq!(
            classify_error(&reset),
            ExportFailure::Network("reset by peer".into())
        );
        // The cause is found below the outer error.
        let wrapped = io::Error::other(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        assert_eq!(classify_error(&wrapped), ExportFailure::Refused);
    }

    #[test]
    fn a_real_refused_connection_is_classified_as_refused() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let client = blocking_client(Duration::from_secs(5)).unwrap();
        let err = client
            .post(format!("http://127.0.0.1:{port}/v1/traces"))
            .send()
            .unwrap_err();
        assert_eq!(classify_error(&err), ExportFailure::Refused);
        // Dropped off any async runtime, like the export thread does.
        drop(client);
    }

    #[test]
    fn a_retry_wait_ends_when_shutdown_begins() {
        let closing = Arc::new(Closing::default());
        assert!(!closing.wait(Duration::from_millis(1)));
        let waiter = {
            let closing = closing.clone();
            std::thread::spawn(move || closing.wait(Duration::from_secs(600)))
        };
        closing.close();
        assert!(waiter.join().unwrap(), "woken by close, not by the timeout");
        assert!(closing.wait(Duration::from_secs(600)));
    }

    #[test]
    fn failures_read_as_causes() {
        assert!(
            ExportFailure::Refused
                .to_string()
                .contains("connection refused")
        );
        assert_eq!(
            ExportFailure::Status(503).to_string(),
            "the collector answered HTTP 503"
        );
    }
}
