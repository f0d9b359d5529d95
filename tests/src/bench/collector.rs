//! A loopback OTLP/HTTP trace collector for the benchmarks that measure what
//! tracing costs a run with export on (SPEC §11, §14): it answers every
//! `POST /v1/traces` with 200 and an empty `ExportTraceServiceResponse` (an
//! empty protobuf message encodes to zero bytes) at once, and counts the
//! requests and body bytes it received so a benchmark can show that spans
//! really left the process. It does not decode the spans (the runtime's OTLP
//! wire tests do that); it stands in for a collector that is never the
//! bottleneck.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::post;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The path OTLP/HTTP exporters send traces to (OTLP specification).
pub const TRACES_ROUTE: &str = "/v1/traces";

/// Media type of OTLP/HTTP protobuf bodies.
pub const PROTOBUF: &str = "application/x-protobuf";

/// Longest [`OtlpCollector::shutdown`] waits for open connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// What the collector has received so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// `POST /v1/traces` requests answered.
    pub requests: u64,
    /// Their body bytes.
    pub bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// A running collector on 127.0.0.1.
#[derive(Debug)]
pub struct OtlpCollector {
    addr: SocketAddr,
    counters: Arc<Counters>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

async fn receive(
    State(counters): State<Arc<Counters>>,
    body: Bytes,
) -> impl axum::response::IntoResponse {
    counters.requests.fetch_add(1, Ordering::Relaxed);
    counters
        .bytes
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, PROTOBUF)],
        Bytes::new(),
    )
}

impl OtlpCollector {
    /// Starts a collector on a free loopback port, served on the current
    /// tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let counters = Arc::new(Counters::default());
        let app = Router::new()
            .route(TRACES_ROUTE, post(receive))
            .with_state(counters.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(err) = served {
                tracing::warn!(%err, "the bench OTLP collector stopped");
            }
        });
        Ok(Self {
            addr,
            counters,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (exporters append
    /// `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it has received so far.
    pub fn stats(&self) -> CollectorStats {
        CollectorStats {
            requests: self.counters.requests.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, lets open requests finish (for at most
    /// [`SHUTDOWN_GRACE`]: an exporter may keep an idle keep-alive connection
    /// open), and returns the totals.
    pub async fn shutdown(mut self) -> CollectorStats {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
        self.stats()
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::http::RawHttpClient;

    #[tokio::test]
    async fn answers_trace_exports_and_counts_them() {
        let collector = OtlpCollector::start().await.unwrap();
        assert!(collector.endpoint().starts_with("http://127.0.0.1:"));
        let mut client = RawHttpClient::connect(collector.addr()).await.unwrap();
        for body in [&b"abc"[..], &b"defgh"[..]] {
            let response = client.post_json(TRACES_ROUTE, body).await.unwrap();
            assert_eq!(response.status, 200);
            assert!(response.body.is_empty());
        }
        let elsewhere = client.post_json("/v1/metrics", b"x").await.unwrap();
        assert_eq!(elsewhere.status, 404);
        assert_eq!(
            collector.stats(),
            CollectorStats {
                requests: 2,
                bytes: 8
            }
        );
        drop(client);
        assert_eq!(collector.shutdown().await.requests, 2);
    }
}
