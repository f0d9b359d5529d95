//! Benchmark: a batch of 4 read-only tools that each take 1 s completes in
//! ≤ 1.2 s (SPEC §14; SPEC §3: consecutive read-only calls run concurrently).
//!
//! One scripted response asks for four calls of the bench-only `sleep` tool
//! (read-only, 1,000 ms each), the next answers text. The run goes through
//! the real `Runtime`, the real Anthropic adapter and the scripted model
//! server over loopback, in the default permission mode (read-only calls
//! never wait for a person). Measured from the subscriber's side of the event
//! stream:
//!
//! - `batch`: the first `tool_started` to the last `tool_finished`, as
//!   received by the subscriber, and by the events' own `ts` (stamped by the
//!   event log, millisecond resolution);
//! - `turn`:  `iteration 1` to `iteration 2` (model call, the batch, results);
//! - `run`:   submit to `run_finished` (two model calls and the batch).
//!
//! Environment: `TROUPE_BENCH_SAMPLES` (default 10). Figures go to
//! `docs/performance.md`, never into assertions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Script, text, tool_calls};
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::tools::SleepTool;
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};
use troupe_tests::{Harness, RunOptions, WAIT};

/// Measured runs unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 10;
/// Runs before measuring.
const WARMUP_RUNS: usize = 1;
/// Calls in the batch (SPEC §14).
const BATCH_CALLS: usize = 4;
/// How long each call takes (SPEC §14).
const CALL_MILLIS: u64 = 1_000;

struct Sample {
    batch: Duration,
    batch_by_ts: Duration,
    turn: Duration,
    run: Duration,
    tool_durations_ms: Vec<u64>,
}

fn script() -> Script {
    let calls = (0..BATCH_CALLS).map(|i| {
        (
            "sleep",
            json!({ "millis": CALL_MILLIS, "label": format!("call-{i}") }),
        )
    });
    Script::new()
        .then(tool_calls(calls))
        .then(text("All four waits are over."))
}

async fn one_run() -> Result<Sample, String> {
    let h = Harness::anthropic(script()).await;
    let env = h.env_with(vec![Arc::new(SleepTool::new())]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;

    let started = Instant::now();
    let mut handle = h.submit("Wait four times.", options).await;
    let mut first_started = None;
    let mut last_finished = None;
    let mut first_started_ts = None;
    let mut last_finished_ts = None;
    let mut iterations = Vec::new();
    let mut tool_durations_ms = Vec::new();
    let status = loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .map_err(|_| "no event in time".to_string())?
            .ok_or("event stream closed before run_finished")?;
        let now = Instant::now();
        let ts = chrono::DateTime::parse_from_rfc3339(&event.ts)
            .map_err(|e| format!("event ts {:?}: {e}", event.ts))?;
        match event.kind {
            EventKind::Iteration { .. } => iterations.push(now),
            EventKind::ToolStarted { .. } => {
                first_started.get_or_insert(now);
                first_started_ts.get_or_insert(ts);
            }
            EventKind::ToolFinished {
                is_error,
                duration_ms,
                output_preview,
                ..
            } => {
                if is_error {
                    return Err(format!("a sleep call failed: {output_preview}"));
                }
                tool_durations_ms.push(duration_ms);
                last_finished = Some(now);
                last_finished_ts = Some(ts);
            }
            EventKind::RunFinished { status, .. } if event.agent_path == "main" => break status,
            _ => {}
        }
    };
    let run = started.elapsed();
    if status != RunStatus::Finished {
        return Err(format!("run ended {status:?}"));
    }
    let (Some(first), Some(last), Some(first_ts), Some(last_ts), [one, two]) = (
        first_started,
        last_finished,
        first_started_ts,
        last_finished_ts,
        iterations.as_slice(),
    ) else {
        return Err(format!(
            "unexpected event shape: {} iterations, {} tool results",
            iterations.len(),
            tool_durations_ms.len()
        ));
    };
    if tool_durations_ms.len() != BATCH_CALLS {
        return Err(format!("{} tool results", tool_durations_ms.len()));
    }
    let sample = Sample {
        batch: last - first,
        batch_by_ts: (last_ts - first_ts)
            .to_std()
            .map_err(|e| format!("tool_finished before tool_started: {e}"))?,
        turn: *two - *one,
        run,
        tool_durations_ms,
    };
    h.runtime.clone().shutdown().await;
    Ok(sample)
}

async fn bench() -> Result<(), String> {
    let sample_count = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    println!(
        "read_only_batch: {BATCH_CALLS} read-only calls of {CALL_MILLIS} ms each, \
         {sample_count} runs after {WARMUP_RUNS} warm-up"
    );
    println!("{}", machine_line());
    for _ in 0..WARMUP_RUNS {
        one_run().await?;
    }
    let mut samples = Vec::with_capacity(sample_count);
    for _ in 0..sample_count {
        samples.push(one_run().await?);
    }
    let show = |name: &str, pick: &dyn Fn(&Sample) -> Duration| {
        let values: Vec<Duration> = samples.iter().map(pick).collect();
        let summary =
            Summary::of_millis(&values).map_or_else(|| "no samples".into(), |s| s.to_string());
        println!("  {name:<48} {summary}");
    };
    println!("times in ms:");
    show("batch (first tool_started → last tool_finished)", &|s| {
        s.batch
    });
    show("batch, by the events' ts (1 ms resolution)", &|s| {
        s.batch_by_ts
    });
    show("turn (iteration 1 → iteration 2)", &|s| s.turn);
    show("run (submit → run_finished)", &|s| s.run);
    let durations: Vec<f64> = samples
        .iter()
        .flat_map(|s| s.tool_durations_ms.iter().map(|ms| *ms as f64))
        .collect();
    if let Some(summary) = Summary::of(&durations) {
        println!(
            "  {:<48} {summary}",
            "each call's duration_ms (tool_finished)"
        );
    }
    println!("{}", machine_line());
    Ok(())
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = run_on_tokio_workers(bench()) {
        eprintln!("read_only_batch: {err}");
        std::process::exit(1);
    }
}
