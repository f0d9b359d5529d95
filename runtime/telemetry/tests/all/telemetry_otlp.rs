//! OTLP export on the wire: a loopback receiver decodes the real
//! `ExportTraceServiceRequest`s and finds the run's tree; a collector that is
//! down or hangs never blocks or crashes the run, shutdown stays bounded, and
//! spans that do not fit the queue are counted.

use crate::telemetry_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse as _;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span as ProtoSpan, span::SpanKind, status};
use prost::Message as _;
use telemetry_support::{CONVERSATION, MODEL, RESPONSE_MODEL, SPANS_PER_RUN, TOOLS, mimic_run};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use troupe_telemetry::genai::ContentCapture;
use troupe_telemetry::{ExportStats, Telemetry, TelemetryError, TelemetryGuard, TelemetrySettings};

/// Generous bound for waiting on something that should happen quickly; a
/// failure here means a hang, not slowness.
const WAIT: Duration = Duration::from_secs(30);

/// A received span with its resource's attributes.
type ReceivedSpan = (BTreeMap<String, String>, ProtoSpan);

#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    bad_requests: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| text(&Some(v.clone())))
            .collect::<Vec<_>>()
            .join(","),
        other => format!("{other:?}"),
    }
}

fn map(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

async fn receive(
    axum::extract::State(received): axum::extract::State<Received>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let protobuf = [(header::CONTENT_TYPE, "application/x-protobuf")];
    if content_type != "application/x-protobuf" {
        received
            .bad_requests
            .lock()
            .unwrap()
            .push(format!("content-type {content_type:?}"));
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, protobuf, Vec::new());
    }
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            let mut spans = received.spans.lock().unwrap();
            for resource_spans in request.resource_spans {
                let resource = resource_spans
                    .resource
                    .map(|r| map(&r.attributes))
                    .unwrap_or_default();
                for scope_spans in resource_spans.scope_spans {
                    for span in scope_spans.spans {
                        spans.push((resource.clone(), span));
                    }
                }
            }
            drop(spans);
            received.arrived.notify_waiters();
            let body = ExportTraceServiceResponse::default().encode_to_vec();
            (StatusCode::OK, protobuf, body)
        }
        Err(err) => {
            received.bad_requests.lock().unwrap().push(err.to_string());
            (StatusCode::BAD_REQUEST, protobuf, Vec::new())
        }
    }
}

async fn start_receiver() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(received.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), received)
}

fn settings_for(base: &str) -> TelemetrySettings {
    let vars = BTreeMap::from([("OTEL_EXPORTER_OTLP_ENDPOINT", base.to_string())]);
    TelemetrySettings::from_env(|name| vars.get(name).cloned()).unwrap()
}

/// Shuts down off the runtime's threads and fails (instead of hanging) if
/// shutdown does not return; gives the guard back for its counters.
async fn shutdown(mut guard: TelemetryGuard) -> (TelemetryGuard, Result<(), TelemetryError>) {
    tokio::time::timeout(
        WAIT,
        tokio::task::spawn_blocking(move || {
            let result = guard.shutdown();
            (guard, result)
        }),
    )
    .await
    .expect("telemetry shutdown hung")
    .expect("shutdown panicked")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_spans_reach_a_collector_over_otlp_http_protobuf() {
    let (base, received) = start_receiver().await;
    let settings = settings_for(&base);
    assert_eq!(
        settings.export.as_ref().unwrap().endpoint,
        format!("{base}/v1/traces")
    );
    let (dispatch, guard) = Telemetry::builder(&settings)
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap()
        .into_parts();
    assert!(guard.is_exporting());
    {
        let _default = tracing::dispatcher::set_default(&dispatch);
        mimic_run("run-wire", ContentCapture::default()).await;
    }

    // Shutdown flushes whatever the interval has not sent yet.
    let (_guard, result) = shutdown(guard).await;
    result.unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            let arrived = received.arrived.notified();
            if received.spans.lock().unwrap().len() >= SPANS_PER_RUN {
                break;
            }
            arrived.await;
        }
    })
    .await
    .expect("the collector never received the run's spans");
    assert!(received.bad_requests.lock().unwrap().is_empty());

    let spans = received.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), SPANS_PER_RUN);
    for (resource, _) in &spans {
        assert_eq!(resource["service.name"], "troupe");
    }
    let by_name = |name: &str| -> Vec<&ProtoSpan> {
        spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.name == name)
            .collect()
    };
    let agent = by_name("invoke_agent main")[0];
    assert!(agent.parent_span_id.is_empty());
    assert_eq!(agent.trace_id.len(), 16);
    let agent_attrs = map(&agent.attributes);
    assert_eq!(agent_attrs["troupe.run_id"], "run-wire");
    assert_eq!(agent_attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(agent_attrs["gen_ai.conversation.id"], CONVERSATION);
    for (_, span) in &spans {
        assert_eq!(span.trace_id, agent.trace_id, "{}", span.name);
        if span.name != "invoke_agent main" {
            assert_eq!(span.parent_span_id, agent.span_id, "{}", span.name);
        }
    }

    let chats = by_name("chat claude-sonnet-4-5");
    assert_eq!(chats.len(), 2);
    let first = chats
        .iter()
        .find(|s| map(&s.attributes)["gen_ai.response.id"] == "msg_1")
        .unwrap();
    assert_eq!(first.kind, SpanKind::Client as i32);
    let attrs = map(&first.attributes);
    let expected: BTreeMap<String, String> = [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "anthropic"),
        ("gen_ai.request.model", MODEL),
        ("gen_ai.response.model", RESPONSE_MODEL),
        ("gen_ai.response.id", "msg_1"),
        ("gen_ai.conversation.id", CONVERSATION),
        ("gen_ai.usage.input_tokens", "1300"),
        ("gen_ai.usage.output_tokens", "40"),
        ("gen_ai.usage.cache_read.input_tokens", "1000"),
        ("gen_ai.usage.cache_creation.input_tokens", "200"),
        ("gen_ai.response.finish_reasons", "tool_use"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(attrs, expected);
    // Token counts are integers on the wire, finish reasons a string array.
    let typed = |key: &str| {
        first
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    assert_eq!(
        typed("gen_ai.usage.input_tokens"),
        Some(any_value::Value::IntValue(1300))
    );
    assert!(matches!(
        typed("gen_ai.response.finish_reasons"),
        Some(any_value::Value::ArrayValue(_))
    ));

    for (tool, call_id) in TOOLS {
        let span = by_name(&format!("execute_tool {tool}"))[0];
        let attrs = map(&span.attributes);
        assert_eq!(attrs["gen_ai.tool.name"], tool);
        assert_eq!(attrs["gen_ai.tool.call.id"], call_id);
        assert_eq!(span.events.len(), 1);
        assert_eq!(span.events[0].name, "permission");
        assert_eq!(
            map(&span.events[0].attributes)["troupe.permission.decision"],
            "allow"
        );
        let status = span.status.clone().unwrap_or_default();
        if tool == "bash" {
            assert_eq!(attrs["error.type"], "timeout");
            assert_eq!(status.code, status::StatusCode::Error as i32);
            assert_eq!(status.message, "timeout");
        } else {
            assert_eq!(status.code, status::StatusCode::Unset as i32);
        }
    }
    assert_eq!(hex(&agent.trace_id).len(), 32);
}

/// The pipeline's log lines, kept for assertions.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Runs `runs` mimicked runs against `settings` with a small queue, then shuts
/// down; returns the counters after shutdown and the shutdown result.
async fn run_against(
    settings: &TelemetrySettings,
    runs: usize,
    export_timeout: Duration,
    shutdown_timeout: Duration,
) -> (ExportStats, Result<(), TelemetryError>) {
    let (stats, result, _) = run_logged(settings, runs, export_timeout, shutdown_timeout, 16).await;
    (stats, result)
}

/// [`run_against`] with a queue of `queue` spans, also returning the log lines.
async fn run_logged(
    settings: &TelemetrySettings,
    runs: usize,
    export_timeout: Duration,
    shutdown_timeout: Duration,
    queue: usize,
) -> (ExportStats, Result<(), TelemetryError>, String) {
    let logs = Logs::default();
    let writer = logs.clone();
    let (dispatch, guard) = Telemetry::builder(settings)
        .queue_size(queue)
        .export_interval(Duration::from_millis(50))
        .export_timeout(export_timeout)
        .shutdown_timeout(shutdown_timeout)
        .log_writer(move || writer.clone())
        .build()
        .unwrap()
        .into_parts();
    tokio::time::timeout(WAIT, async {
        let _default = tracing::dispatcher::set_default(&dispatch);
        for i in 0..runs {
            mimic_run(&format!("run-{i}"), ContentCapture::default()).await;
        }
    })
    .await
    .expect("the workload was blocked by export");
    let (guard, result) = shutdown(guard).await;
    (guard.export_stats(), result, logs.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_a_collector_that_is_down_costs_the_run_nothing() {
    // A port that was just closed: connections are refused.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let settings = settings_for(&format!("http://127.0.0.1:{port}"));
    let runs = 40;
    let (stats, result, logs) = run_logged(
        &settings,
        runs,
        Duration::from_millis(300),
        Duration::from_secs(5),
        16,
    )
    .await;
    result.expect("shutdown completes: every export fails fast");
    assert_eq!(stats.exported, 0);
    assert_eq!(stats.queued, 0);
    assert!(stats.failed > 0, "{stats:?}");
    // Nothing listens: the export says so and is never tried again.
    assert_eq!(stats.retries, 0, "{stats:?}");
    assert!(
        logs.contains("span export failed: connection refused"),
        "{logs}"
    );
    // Every span is accounted for: failed on the wire or dropped at the queue.
    assert_eq!(
        stats.failed + stats.dropped,
        (runs * SPANS_PER_RUN) as u64,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_the_final_flush_to_a_refused_collector_is_one_attempt() {
    // A short run whose spans all wait for the final flush (the interval
    // never comes), as in a CLI run: one batch, one attempt, no retry.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let settings = settings_for(&format!("http://127.0.0.1:{port}"));
    let (dispatch, guard) = Telemetry::builder(&settings)
        .export_interval(Duration::from_secs(3600))
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap()
        .into_parts();
    {
        let _default = tracing::dispatcher::set_default(&dispatch);
        mimic_run("run-refused", ContentCapture::default()).await;
    }
    let (guard, result) = shutdown(guard).await;
    result.expect("the flush ends at the refused connection");
    let stats = guard.export_stats();
    assert_eq!(
        stats,
        ExportStats {
            queued: 0,
            exported: 0,
            failed: SPANS_PER_RUN as u64,
            retries: 0,
            dropped: 0,
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_a_transient_collector_error_is_retried_during_a_run() {
    // Answers 503 to the first export, then accepts.
    let received = Received::default();
    let answered = Arc::new(Mutex::new(false));
    let flaky = Router::new().route(
        "/v1/traces",
        post({
            let received = received.clone();
            move |headers: HeaderMap, body: Bytes| {
                let received = received.clone();
                let first = !std::mem::replace(&mut *answered.lock().unwrap(), true);
                async move {
                    if first {
                        return StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    receive(axum::extract::State(received), headers, body)
                        .await
                        .into_response()
                }
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, flaky).await.unwrap() });
    let settings = settings_for(&format!("http://{addr}"));
    let (dispatch, guard) = Telemetry::builder(&settings)
        .export_interval(Duration::from_millis(20))
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap()
        .into_parts();
    {
        let _default = tracing::dispatcher::set_default(&dispatch);
        mimic_run("run-flaky", ContentCapture::default()).await;
    }
    // The interval's export meets the 503 and its retry gets through, all
    // before shutdown (which would not retry).
    tokio::time::timeout(WAIT, async {
        loop {
            let arrived = received.arrived.notified();
            if received.spans.lock().unwrap().len() >= SPANS_PER_RUN {
                break;
            }
            arrived.await;
        }
    })
    .await
    .expect("the retried export never arrived");
    let (guard, result) = shutdown(guard).await;
    result.unwrap();
    let stats = guard.export_stats();
    assert_eq!(stats.retries, 1, "{stats:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(stats.exported, SPANS_PER_RUN as u64, "{stats:?}");
    assert_eq!(received.spans.lock().unwrap().len(), SPANS_PER_RUN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_a_hanging_collector_never_blocks_the_run_and_drops_are_counted() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let settings = settings_for(&format!("http://{addr}"));
    let runs = 40;
    // The export thread is stuck in its first request for the whole workload.
    let (stats, result) = run_against(
        &settings,
        runs,
        Duration::from_secs(20),
        Duration::from_millis(300),
    )
    .await;
    assert!(
        matches!(result, Err(TelemetryError::Shutdown(_))),
        "the final flush cannot complete: {result:?}"
    );
    assert_eq!(stats.exported, 0);
    assert!(stats.dropped > 0, "{stats:?}");
    // At most the queue and the batch in flight were taken; the rest was dropped.
    assert!(
        stats.dropped >= (runs * SPANS_PER_RUN - 2 * 16) as u64,
        "{stats:?}"
    );
}

#[cfg(feature = "grpc")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_grpc_export_to_a_collector_that_is_down_is_bounded() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let vars = BTreeMap::from([
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_string()),
    ]);
    let settings = TelemetrySettings::from_env(|name| vars.get(name).cloned()).unwrap();
    let runs = 5;
    let (stats, result) = run_against(
        &settings,
        runs,
        Duration::from_millis(300),
        Duration::from_secs(5),
    )
    .await;
    result.expect("shutdown completes: every export fails fast");
    assert_eq!(stats.exported, 0, "{stats:?}");
    assert!(stats.failed > 0, "{stats:?}");
    assert_eq!(
        stats.failed + stats.dropped,
        (runs * SPANS_PER_RUN) as u64,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_a_run_given_its_own_exporter_reaches_its_endpoint_alone() {
    let (base, received) = start_receiver().await;
    let runs = troupe_telemetry::RunExports::new();
    // The process itself exports nowhere; one run goes where its client asked.
    let (dispatch, _guard) = Telemetry::builder(&TelemetrySettings::default())
        .span_processor(runs.clone())
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap()
        .into_parts();
    let mut own = settings_for(&base);
    own.service_name = "client-service".to_string();
    {
        let _default = tracing::dispatcher::set_default(&dispatch);
        mimic_run("run-plain", ContentCapture::default()).await;
        // Announced before it starts, registered only once it ended (its id
        // is known after submission): its spans were kept meanwhile.
        runs.expect_run();
        mimic_run("run-own", ContentCapture::default()).await;
        runs.export_run("run-own", &own).unwrap();
    }
    tokio::time::timeout(WAIT, async {
        loop {
            let arrived = received.arrived.notified();
            if received.spans.lock().unwrap().len() >= SPANS_PER_RUN {
                break;
            }
            arrived.await;
        }
    })
    .await
    .expect("the run's spans reached its endpoint");
    let spans = received.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), SPANS_PER_RUN);
    let root = spans
        .iter()
        .find(|(_, s)| s.name == "invoke_agent main")
        .expect("the root span");
    assert_eq!(map(&root.1.attributes)["troupe.run_id"], "run-own");
    for (resource, span) in &spans {
        assert_eq!(resource["service.name"], "client-service");
        assert_eq!(span.trace_id, root.1.trace_id, "only the run's own trace");
    }
    // Its exporter was let go when the run's root span had ended.
    assert_eq!(runs.runs(), 0);
}
