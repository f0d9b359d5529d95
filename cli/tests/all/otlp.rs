//! The real binary exports its run over OTLP/HTTP protobuf (SPEC §11): a
//! loopback collector decodes the `ExportTraceServiceRequest`s and finds one
//! trace with the run's tree; `troupe trace RUN` prints the same tree from the
//! local span store; a collector that is down costs the run nothing.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span as ProtoSpan;
use prost::Message as _;
use serde_json::{Value, json};
use troupe_scripted::{Response, Script, ScriptedServer, text};

const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");

pub(crate) type Received = Arc<Mutex<Vec<(BTreeMap<String, String>, ProtoSpan)>>>;

pub(crate) fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

pub(crate) async fn collector() -> (String, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("protobuf body");
                let mut spans = sink.lock().unwrap();
                for resource_spans in request.resource_spans {
                    let resource = resource_spans
                        .resource
                        .map(|r| attributes(&r.attributes))
                        .unwrap_or_default();
                    for scope in resource_spans.scope_spans {
                        for span in scope.spans {
                            spans.push((resource.clone(), span));
                        }
                    }
                }
                ExportTraceServiceResponse::default().encode_to_vec()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

fn troupe(home: &std::path::Path, project: &std::path::Path, server: &ScriptedServer) -> Command {
    let mut command = Command::new(TROUPE);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("TROUPE_HOME", home.join("data"))
        .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", "test-key")
        .current_dir(project)
        // Embedded runs: these tests are about the process that runs them.
        .env("TROUPE_NO_DAEMON", "1")
        .stdin(Stdio::null());
    command
}

async fn output(mut command: Command) -> std::process::Output {
    let mut command =
        tokio::process::Command::from(std::mem::replace(&mut command, Command::new("true")));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("troupe finishes")
        .expect("troupe runs")
}

fn script() -> Script {
    Script::new()
        .then(
            Response::empty()
                .and_tool_call("read_file", json!({"path": "a.txt"}))
                .and_tool_call("glob", json!({"pattern": "*.txt"})),
        )
        .then(text("All read."))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reaches_the_collector_as_one_trace_and_troupe_trace_prints_it() {
    let (endpoint, received) = collector().await;
    let server = ScriptedServer::start(script()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha\n").unwrap();
    let mut command = troupe(home.path(), project.path(), &server);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "troupe")
        .args(["run", "--json", "read it"]);
    let run = output(command).await;
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let first: Value =
        serde_json::from_slice(run.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let run_id = first["run_id"].as_str().unwrap().to_string();

    // The process flushed before exiting: every span is at the collector.
    let spans = received.lock().unwrap().clone();
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    assert_eq!(spans.len(), 5, "{names:?}");
    let root = spans
        .iter()
        .find(|(_, s)| s.name == "invoke_agent main")
        .expect("root span");
    assert!(root.1.parent_span_id.is_empty());
    for (resource, span) in &spans {
        assert_eq!(resource["service.name"], "troupe");
        assert_eq!(span.trace_id, root.1.trace_id, "one trace");
        if span.name != "invoke_agent main" {
            assert_eq!(span.parent_span_id, root.1.span_id, "{}", span.name);
        }
    }
    assert_eq!(names.iter().filter(|n| n.starts_with("chat ")).count(), 2);
    // Each chat span carries the id of the response it received.
    let mut ids: Vec<String> = spans
        .iter()
        .filter(|(_, s)| s.name.starts_with("chat "))
        .map(|(_, s)| attributes(&s.attributes)["gen_ai.response.id"].clone())
        .collect();
    let mut sent: Vec<String> = server
        .requests()
        .into_iter()
        .filter_map(|request| request.response_id)
        .collect();
    ids.sort();
    sent.sort();
    assert_eq!(sent.len(), 2);
    assert_eq!(ids, sent);
    let tools: Vec<String> = spans
        .iter()
        .filter(|(_, s)| s.name.starts_with("execute_tool"))
        .map(|(_, s)| attributes(&s.attributes)["gen_ai.tool.name"].clone())
        .collect();
    assert_eq!(tools.len(), 2);
    assert!(tools.contains(&"read_file".to_string()) && tools.contains(&"glob".to_string()));
    assert_eq!(attributes(&root.1.attributes)["troupe.run_id"], run_id);

    // The same tree from the local span store, no collector needed.
    let mut command = troupe(home.path(), project.path(), &server);
    command.args(["trace", &run_id]);
    let trace = output(command).await;
    assert_eq!(
        trace.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trace.stderr)
    );
    let tree = String::from_utf8_lossy(&trace.stdout);
    assert!(tree.starts_with("invoke_agent main"), "{tree}");
    assert_eq!(
        tree.matches("├─ chat ").count() + tree.matches("└─ chat ").count(),
        2,
        "{tree}"
    );
    assert!(
        tree.contains("execute_tool read_file") && tree.contains("execute_tool glob"),
        "{tree}"
    );

    let mut command = troupe(home.path(), project.path(), &server);
    command.args(["trace", "no-such-run"]);
    assert_eq!(output(command).await.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_does_not_fail_the_run() {
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let server = ScriptedServer::start(script()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha\n").unwrap();
    let mut command = troupe(home.path(), project.path(), &server);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        // Retries would show as debug lines of the pipeline.
        .env("TROUPE_LOG", "warn,troupe::telemetry=debug")
        .args(["run", "read it"]);
    let run = output(command).await;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "All read.\n");
    // The final flush says why it failed, once, and does not retry.
    assert_eq!(
        stderr
            .matches("span export failed: connection refused")
            .count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_telemetry_settings_are_warnings_and_troupe_trace_still_prints_the_tree() {
    const BAD: &str = "foo=[[[";
    let server = ScriptedServer::start(script()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha\n").unwrap();
    let mut command = troupe(home.path(), project.path(), &server);
    command
        .env("TROUPE_LOG", BAD)
        // An unusable protocol: export is off, with a warning.
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        // The SDK's own variables never thin out the local spans.
        .env("OTEL_TRACES_SAMPLER", "always_off")
        .env("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1")
        .args(["run", "--json", "read it"]);
    let run = output(command).await;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("invalid log filter").count(), 1, "{stderr}");
    assert!(stderr.contains(BAD), "{stderr}");
    assert_eq!(
        stderr
            .matches("telemetry export is off: OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\"")
            .count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("telemetry is off"), "{stderr}");
    let first: Value =
        serde_json::from_slice(run.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let run_id = first["run_id"].as_str().unwrap().to_string();

    // `troupe trace` has no telemetry pipeline: its own logging falls back too.
    let mut command = troupe(home.path(), project.path(), &server);
    command.env("TROUPE_LOG", BAD).args(["trace", &run_id]);
    let trace = output(command).await;
    let stderr = String::from_utf8_lossy(&trace.stderr);
    assert_eq!(trace.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("invalid log filter").count(), 1, "{stderr}");
    let tree = String::from_utf8_lossy(&trace.stdout);
    assert!(tree.starts_with("invoke_agent main"), "{tree}");
    assert!(
        tree.contains("execute_tool read_file") && tree.contains("execute_tool glob"),
        "{tree}"
    );
    // Every attribute is kept: the root's status is recorded last.
    assert!(
        tree.lines()
            .next()
            .unwrap_or_default()
            .contains("status=finished"),
        "{tree}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_a_warm_daemon_is_exported_where_its_client_asked() {
    let (endpoint, received) = collector().await;
    let script = Script::new()
        .then(text("warm"))
        .then(
            Response::empty()
                .and_tool_call("read_file", json!({"path": "a.txt"}))
                .and_tool_call("glob", json!({"pattern": "*.txt"})),
        )
        .then(text("All read."));
    let server = ScriptedServer::start(script).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha\n").unwrap();
    let through_daemon = || {
        let mut command = troupe(home.path(), project.path(), &server);
        command
            .env_remove("TROUPE_NO_DAEMON")
            .env("TROUPE_DAEMON_IDLE_SECS", "60");
        command
    };
    let run_id = |run: &std::process::Output| {
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let first: Value =
            serde_json::from_slice(run.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
        first["run_id"].as_str().unwrap().to_string()
    };

    // A daemon started by a client that exports nothing.
    let mut command = through_daemon();
    command.args(["run", "--json", "warm up"]);
    let warm = run_id(&output(command).await);
    assert!(
        home.path().join("data/daemon.json").exists(),
        "a warm daemon"
    );

    // The next client asks for an endpoint: its run is exported there.
    let mut command = through_daemon();
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "client-service")
        .args(["run", "--json", "read it"]);
    let run = output(command).await;
    let exported = run_id(&run);
    assert!(
        !String::from_utf8_lossy(&run.stderr).contains("telemetry"),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    // Its whole tree arrives (the run's exporter flushes when its root span
    // ends), and nothing of the run whose client asked for nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = received.lock().unwrap().clone();
        if spans.len() >= 5 {
            break spans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run's spans reached the collector: {} so far",
            spans.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    assert_eq!(spans.len(), 5, "{names:?}");
    let root = spans
        .iter()
        .find(|(_, s)| s.name == "invoke_agent main")
        .expect("root span");
    assert_eq!(attributes(&root.1.attributes)["troupe.run_id"], exported);
    assert_ne!(exported, warm);
    for (resource, span) in &spans {
        assert_eq!(resource["service.name"], "client-service");
        assert_eq!(span.trace_id, root.1.trace_id, "one trace");
    }
    crate::support::stop_daemon(&home.path().join("data"));
}
