//! Benchmark: runtime overhead per agent turn with one read-only tool call
//! (SPEC §14: median ≤ 3 ms; durable write included once the store exists).
//!
//! A scripted run of `TURNS` model calls (default 50) against the in-tree
//! scripted model server with zero latency: every response but the last asks
//! for one tool call, the last answers text. It runs on the real `Runtime`
//! actor tree with the real Anthropic adapter over loopback, in bypass mode, and
//! a subscriber consumes every event as a front door would. Two tools are
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
//! - `loop`     = gross − model (agent actor, executors, tools, event log)
//!
//! Also printed: the median duration of a turn near the start and near the end
//! of the run (from one request's arrival at the server to the next's), to
//! show whether a turn gets
//! dearer as the history grows, and what building the last model request costs
//! the agent: copying the history into the request (`ChatRequest.messages`),
//! the tool definitions, and encoding the body (`anthropic::request_body`).
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 50), `TROUPE_BENCH_SAMPLES`
//! (default 30). Figures go to `docs/performance.md`, never into assertions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_runtime::config::Limits;
use troupe_runtime::events::{EventKind, RunStatus};
use troupe_runtime::llm::{ChatRequest, anthropic};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};
use troupe_tests::bench::arrivals::ArrivalStamps;
use troupe_tests::bench::replay::{replay_provider, replay_raw};
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::tools::NoopTool;
use troupe_tests::bench::{
    count_from_env, invoked_as_benchmark, run_on_tokio_workers, scripted_provider,
};
use troupe_tests::{Harness, RunOptions, WAIT};

/// Model calls per run unless `TROUPE_BENCH_TURNS` says otherwise.
const DEFAULT_TURNS: usize = 50;
/// Measured runs per tool unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 30;
/// Runs per tool before measuring (connection pools, lazy statics, caches).
const WARMUP_RUNS: usize = 3;
/// Lines of each file `read_file` reads.
const FILE_LINES: usize = 10;
/// Turns at each end of a run whose durations are compared.
const EDGE_TURNS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolKind {
    ReadFile,
    Noop,
}

impl ToolKind {
    fn label(self) -> &'static str {
        match self {
            Self::ReadFile => "read_file (10-line file)",
            Self::Noop => "noop (bench tool)",
        }
    }
}

/// `turns` model calls: `turns − 1` asking for one call of `kind` each (with
/// distinct arguments, so the repeated-call guard never stops the run), then
/// a text answer. Every request's arrival is stamped in `stamps`.
fn script(kind: ToolKind, turns: usize, stamps: &ArrivalStamps) -> Script {
    let mut script = Script::new();
    for i in 0..turns.saturating_sub(1) {
        let response = match kind {
            ToolKind::ReadFile => tool_call("read_file", json!({ "path": file_name(i) })),
            ToolKind::Noop => tool_call("noop", json!({ "n": i })),
        };
        script = script.then(stamps.turn(response));
    }
    script.then(stamps.turn(text("All files read; nothing else to do.")))
}

fn file_name(i: usize) -> String {
    format!("src/file_{i:03}.txt")
}

/// Limits that only the script ends: turns, tokens and tool calls are not the
/// subject here.
fn generous_limits(turns: usize) -> Limits {
    let turns = u32::try_from(turns).unwrap_or(u32::MAX);
    Limits {
        max_turns: turns.saturating_add(1),
        budget_tokens: u64::MAX,
        max_tool_calls: turns.saturating_add(1),
        ..Limits::default()
    }
}

/// One measured run, in totals.
struct Sample {
    turns: usize,
    wall: Duration,
    server: Duration,
    model: Duration,
    turn_times: Vec<Duration>,
    last_request: RequestCost,
}

/// What building the last model request of a run costs.
struct RequestCost {
    messages: usize,
    clone_history: Duration,
    definitions: Duration,
    body: Duration,
    body_bytes: usize,
}

async fn one_run(kind: ToolKind, turns: usize) -> Result<Sample, String> {
    let stamps = ArrivalStamps::new();
    let h = Harness::anthropic(script(kind, turns, &stamps)).await;
    std::fs::create_dir_all(h.root().join("src")).map_err(|e| e.to_string())?;
    for i in 0..turns {
        let body: String = (0..FILE_LINES)
            .map(|line| format!("line {line} of file {i}: some ordinary text\n"))
            .collect();
        std::fs::write(h.root().join(file_name(i)), body).map_err(|e| e.to_string())?;
    }
    let env = h.env_with(vec![Arc::new(NoopTool::new())]);
    let mut options = RunOptions::bypass(env.clone());
    options.limits = generous_limits(turns);

    let started = Instant::now();
    let mut handle = h.submit("Read the files one by one.", options).await;
    let status = loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .map_err(|_| "no event in time".to_string())?
            .ok_or("event stream closed before run_finished")?;
        if let EventKind::RunFinished { status, .. } = event.kind
            && event.agent_path == "main"
        {
            break status;
        }
    };
    let wall = started.elapsed();
    if status != RunStatus::Finished {
        return Err(format!("run ended {status:?}"));
    }
    let requests = h.server.requests();
    if requests.len() != turns || !h.server.violations().is_empty() {
        return Err(format!(
            "{} requests for {turns} turns; violations: {:?}",
            requests.len(),
            h.server.violations()
        ));
    }
    let turn_times = stamps.times().windows(2).map(|w| w[1] - w[0]).collect();
    let history = h.history(&handle.session_id).await;

    let prefix = &history[..history.len().saturating_sub(1)];
    let clock = Instant::now();
    let messages = prefix.to_vec();
    let clone_history = clock.elapsed();
    let clock = Instant::now();
    let tools = env.registry.definitions();
    let definitions = clock.elapsed();
    let request = ChatRequest {
        system: env.system.clone(),
        messages,
        tools,
    };
    let clock = Instant::now();
    let encoded =
        anthropic::request_body(&h.resolved_provider(), &request).map_err(|e| e.to_string())?;
    let last_request = RequestCost {
        messages: request.messages.len(),
        clone_history,
        definitions,
        body: clock.elapsed(),
        body_bytes: encoded.len(),
    };

    let raw_server = ScriptedServer::start(script(kind, turns, &ArrivalStamps::new()))
        .await
        .map_err(|e| e.to_string())?;
    let server: Duration = replay_raw(raw_server.addr(), &requests)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .sum();

    let adapter_server = ScriptedServer::start(script(kind, turns, &ArrivalStamps::new()))
        .await
        .map_err(|e| e.to_string())?;
    let provider = scripted_provider(&adapter_server.anthropic_base_url())?;
    let model: Duration = replay_provider(
        provider.as_ref(),
        &env.system,
        &env.registry.definitions(),
        &history,
    )
    .await
    .map_err(|e| e.to_string())?
    .into_iter()
    .sum();

    h.runtime.clone().shutdown().await;
    Ok(Sample {
        turns,
        wall,
        server,
        model,
        turn_times,
        last_request,
    })
}

fn per_turn(total: Duration, turns: usize) -> f64 {
    millis(total) / turns as f64
}

fn report(kind: ToolKind, samples: &[Sample]) {
    let column = |f: &dyn Fn(&Sample) -> f64| -> String {
        let values: Vec<f64> = samples.iter().map(f).collect();
        Summary::of(&values).map_or_else(|| "no samples".into(), |s| s.to_string())
    };
    let gross = |s: &Sample| per_turn(s.wall, s.turns);
    let server = |s: &Sample| per_turn(s.server, s.turns);
    let model = |s: &Sample| per_turn(s.model, s.turns);
    println!("\n== {} ==", kind.label());
    println!("  run wall time (ms)       {}", column(&|s| millis(s.wall)));
    println!("  per turn, ms:");
    println!("    gross                  {}", column(&gross));
    println!("    server (bare HTTP)     {}", column(&server));
    println!(
        "    overhead = gross−server {}",
        column(&|s| gross(s) - server(s))
    );
    println!("    model call (adapter)   {}", column(&model));
    println!(
        "    loop = gross−model     {}",
        column(&|s| gross(s) - model(s))
    );
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
            one_run(kind, turns).await?;
        }
    }
    let mut read_file = Vec::with_capacity(sample_count);
    let mut noop = Vec::with_capacity(sample_count);
    for _ in 0..sample_count {
        read_file.push(one_run(ToolKind::ReadFile, turns).await?);
        noop.push(one_run(ToolKind::Noop, turns).await?);
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
