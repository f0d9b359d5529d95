//! Tracing overhead on the caller's path: the cost of creating, filling and
//! ending the spans of one small run — `invoke_agent` → `chat` (usage, finish)
//! → `execute_tool` (permission event) → `chat` — with telemetry off, with the
//! local span store only, and with the local store plus OTLP export to a
//! loopback collector that answers every request at once. Export itself runs on
//! its own thread; what is measured is what a run pays. Results go to
//! `docs/performance.md` ("Tracing overhead"), never into assertions.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::Span;
use troupe_protocol::model::{StopReason, Usage};
use troupe_protocol::permission::Decision;
use troupe_telemetry::genai;
use troupe_telemetry::{SpanRecord, SpanSink, Telemetry, TelemetrySettings};

/// A sink that only counts, so the store's own cost is not measured.
#[derive(Default)]
struct CountingSink(AtomicU64);

impl SpanSink for CountingSink {
    fn record(&self, _run_id: &str, span: SpanRecord) {
        black_box(span);
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The spans of one run of one turn with one read-only tool call.
fn one_run(n: u64) {
    let run_id = format!("run-{n}");
    let agent = genai::agent_span(&Span::none(), &run_id, "main", "sess-bench");
    let usage = Usage {
        input: 120,
        output: 40,
        cache_read: 9000,
        cache_write: 300,
    };
    let chat = genai::chat_span(&agent, "anthropic", "claude-sonnet-4-5", "sess-bench");
    genai::record_response(&chat, "claude-sonnet-4-5-20250929", Some("msg_1"));
    genai::record_usage(&chat, &usage);
    genai::record_finish(&chat, &StopReason::ToolUse);
    drop(chat);
    let tool = genai::tool_span(&agent, "read_file", "call_1");
    genai::permission_event(
        &tool,
        &Decision::Allow {
            reason: "read-only tool".into(),
        },
    );
    drop(tool);
    let chat = genai::chat_span(&agent, "anthropic", "claude-sonnet-4-5", "sess-bench");
    genai::record_usage(&chat, &usage);
    genai::record_finish(&chat, &StopReason::EndTurn);
    drop(chat);
    drop(agent);
}

/// A loopback OTLP/HTTP endpoint that reads each request and answers 200 at once.
fn start_collector() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve(stream));
        }
    });
    format!("http://{addr}")
}

fn serve(stream: std::net::TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let response =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("tracing overhead (one run: 4 spans, 1 event)");
    let mut n = 0u64;

    group.bench_function("telemetry off", |b| {
        b.iter(|| {
            n += 1;
            one_run(n)
        })
    });

    let sink = Arc::new(CountingSink::default());
    let local = Telemetry::builder(&TelemetrySettings::default())
        .local_sink(sink.clone())
        .log_writer(std::io::sink)
        .build()
        .expect("pipeline");
    tracing::dispatcher::with_default(local.dispatch(), || {
        group.bench_function("local span store", |b| {
            b.iter(|| {
                n += 1;
                one_run(n)
            })
        });
    });

    let base = start_collector();
    let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", base)];
    let settings = TelemetrySettings::from_env(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    })
    .expect("settings");
    let (dispatch, mut guard) = Telemetry::builder(&settings)
        .local_sink(sink.clone())
        .log_writer(std::io::sink)
        .build()
        .expect("pipeline")
        .into_parts();
    tracing::dispatcher::with_default(&dispatch, || {
        group.bench_function("local span store + OTLP export", |b| {
            b.iter(|| {
                n += 1;
                one_run(n)
            })
        });
    });
    group.finish();
    let _ = guard.shutdown();
    let stats = guard.export_stats();
    eprintln!(
        "OTLP export: {} spans exported, {} failed, {} dropped (queue full); {} spans stored",
        stats.exported,
        stats.failed,
        stats.dropped,
        sink.0.load(Ordering::Relaxed)
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
