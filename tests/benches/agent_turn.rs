//! Benchmark: runtime overhead per agent turn with one read-only tool call
//! (SPEC §14: median ≤ 3 ms, durable write included).
//!
//! A scripted run of `TURNS` model calls (default 50) against the in-tree
//! scripted model server with zero latency: every response but the last asks
//! for one tool call, the last answers text. It runs on the real `Runtime`
//! actor tree with the real Anthropic adapter over loopback, in bypass mode, and
//! a subscriber consumes every event as a front door would. Each run has its
//! own sled store in a temporary data directory: the agent writes the prompt,
//! the run record, every message and the pending tool results, and fsyncs
//! before each model call and before each `tool_finished` event, as the
//! product does. No telemetry is installed here (no `tracing` subscriber);
//! `tracing_turn` measures the same run with spans on and exported. Two tools are
//! measured, interleaved sample by sample: `read_file` of a small file (10
//! lines) and the bench-only `noop` tool, which separates the tool's own cost
//! from the runtime's.
//!
//! Per sample, the run's wall time (submit to `run_finished`) is split with two
//! replays of the same model calls against fresh servers with the same script:
//! the recorded request bodies over one bare HTTP connection (the server and
//! the loopback alone), and the same conversation prefixes through the real
//! adapter (plus request building, HTTP client, SSE decoding). Per turn:
//!
//! - `gross`    = wall / turns
//! - `server`   = bare-HTTP replay / turns (what the server spends; ~0 wanted)
//! - `overhead` = gross − server (the figure compared with the target)
//! - `model`    = adapter replay / turns (server + the product's HTTP and SSE)
//! - `loop`     = gross − model (agent actor, executors, tools, event log,
//!   store writes and fsyncs)
//! - `process CPU` = CPU time of every thread of the process during the run /
//!   turns (runtime, in-process scripted server, sled's threads)
//!
//! Also printed: the median duration of a turn near the start and near the end
//! of the run (from one request's arrival at the server to the next's), to
//! show whether a turn gets dearer as the history grows, and what building the last model request costs
//! the agent: copying the history into the request (`ChatRequest.messages`),
//! the tool definitions, and encoding the body (`anthropic::request_body`).
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 50), `TROUPE_BENCH_SAMPLES`
//! (default 30). Figures go to `docs/performance.md`, never into assertions.

use std::time::Duration;

use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::turns::{Sample, ToolKind, one_run};
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};

/// Model calls per run unless `TROUPE_BENCH_TURNS` says otherwise.
const DEFAULT_TURNS: usize = 50;
/// Measured runs per tool unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 30;
/// Runs per tool before measuring (connection pools, lazy statics, caches).
const WARMUP_RUNS: usize = 3;
/// Turns at each end of a run whose durations are compared.
const EDGE_TURNS: usize = 10;

fn report(kind: ToolKind, samples: &[Sample]) {
    let column = |f: &dyn Fn(&Sample) -> f64| -> String {
        let values: Vec<f64> = samples.iter().map(f).collect();
        Summary::of(&values).map_or_else(|| "no samples".into(), |s| s.to_string())
    };
    println!("\n== {} ==", kind.label());
    println!("  run wall time (ms)       {}", column(&|s| millis(s.wall)));
    println!("  per turn, ms:");
    println!("    gross                  {}", column(&Sample::gross_ms));
    println!("    server (bare HTTP)     {}", column(&Sample::server_ms));
    println!(
        "    overhead = gross−server {}",
        column(&Sample::overhead_ms)
    );
    println!("    model call (adapter)   {}", column(&Sample::model_ms));
    println!("    loop = gross−model     {}", column(&Sample::loop_ms));
    println!("    process CPU            {}", column(&Sample::cpu_ms));
    let edge = |range: &dyn Fn(&Sample) -> &[Duration]| -> String {
        let values: Vec<Duration> = samples.iter().flat_map(|s| range(s).to_vec()).collect();
        Summary::of_millis(&values).map_or_else(|| "no samples".into(), |s| s.to_string())
    };
    println!(
        "  turn (request → next request at the server), first {EDGE_TURNS} (ms) {}",
        edge(&|s| &s.turn_times[..EDGE_TURNS.min(s.turn_times.len())])
    );
    println!(
        "  turn (request → next request at the server), last {EDGE_TURNS} (ms)  {}",
        edge(&|s| &s.turn_times[s.turn_times.len().saturating_sub(EDGE_TURNS)..])
    );
    if let Some(first) = samples.first() {
        println!(
            "  last request: {} messages, {} bytes; building it, µs:",
            first.last_request.messages, first.last_request.body_bytes
        );
        let micros = |d: Duration| millis(d) * 1_000.0;
        println!(
            "    copy of the history    {}",
            column(&|s| micros(s.last_request.clone_history))
        );
        println!(
            "    tool definitions       {}",
            column(&|s| micros(s.last_request.definitions))
        );
        println!(
            "    request_body (encode)  {}",
            column(&|s| micros(s.last_request.body))
        );
    }
}

async fn bench() -> Result<(), String> {
    let turns = count_from_env("TROUPE_BENCH_TURNS", DEFAULT_TURNS)?;
    let sample_count = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    println!(
        "agent_turn: {turns} model calls per run, {sample_count} runs per tool, {WARMUP_RUNS} warm-up runs each"
    );
    println!("{}", machine_line());
    let kinds = [ToolKind::ReadFile, ToolKind::Noop];
    for _ in 0..WARMUP_RUNS {
        for kind in kinds {
            one_run(kind, turns, None).await?;
        }
    }
    let mut read_file = Vec::with_capacity(sample_count);
    let mut noop = Vec::with_capacity(sample_count);
    for _ in 0..sample_count {
        read_file.push(one_run(ToolKind::ReadFile, turns, None).await?);
        noop.push(one_run(ToolKind::Noop, turns, None).await?);
    }
    report(ToolKind::ReadFile, &read_file);
    report(ToolKind::Noop, &noop);
    println!("\n{}", machine_line());
    Ok(())
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = run_on_tokio_workers(bench()) {
        eprintln!("agent_turn: {err}");
        std::process::exit(1);
    }
}
