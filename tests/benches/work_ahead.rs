//! Benchmark: what preparing summaries ahead saves on a long run. A scripted
//! run of `TURNS` model calls (default 200), each but the last reading a
//! ~5,500-token file, with a 150,000-token window, so the run crosses the
//! compaction threshold again and again; on the real runtime and adapter over
//! loopback in bypass mode. Model latency is simulated by the scripted
//! server: every agent turn answers after `TURN_MS` (default 20 ms), every
//! summary request after `SUMMARY_MS` (default 400 ms; real summaries take
//! far longer than a turn, since they write thousands of tokens).
//!
//! Two configurations, interleaved sample by sample:
//!
//! - `work_ahead = false`: at the threshold the agent asks for the summary
//!   and waits for it;
//! - `work_ahead = true` (the default): from 70% of the threshold the summary
//!   is prepared in the background and swapped in at the threshold.
//!
//! Reported per run: wall time, compactions, and summary requests (a
//! discarded stale summary costs one more request but no wait).
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 200), `TROUPE_BENCH_SAMPLES`
//! (default 5), `TROUPE_BENCH_TURN_MS`, `TROUPE_BENCH_SUMMARY_MS`. Figures go
//! to `docs/performance.md`, never into assertions.

use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_scripted::{Matcher, RecordedRequest, Script, Turn, text, tool_call};
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::turns::generous_limits;
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};
use troupe_tests::{Harness, RunOptions, WAIT};

const DEFAULT_TURNS: usize = 200;
const DEFAULT_SAMPLES: usize = 5;
const DEFAULT_TURN_MS: usize = 20;
const DEFAULT_SUMMARY_MS: usize = 400;
const FILES: usize = 40;
const WINDOW: u64 = 150_000;

fn is_summary(request: &RecordedRequest) -> bool {
    request
        .last_user_text()
        .unwrap_or_default()
        .contains("<summary> tags")
}

fn not_summary() -> Matcher {
    Matcher::predicate("not a summary request", |r: &RecordedRequest| {
        !is_summary(r)
    })
}

/// `turns` agent turns and enough summary answers for every compaction a
/// run can make (each answers only a summary request, first unused first).
fn script(turns: usize, turn: Duration, summary: Duration) -> Script {
    let mut script = Script::new();
    for i in 0..turns.saturating_sub(1) {
        let call = tool_call(
            "read_file",
            json!({ "path": format!("f{}.txt", i % FILES) }),
        );
        script = script.then(Turn::new(call).when(not_summary()).with_delay(turn));
    }
    script = script.then(
        Turn::new(text("all read"))
            .when(not_summary())
            .with_delay(turn),
    );
    for n in 0..turns {
        script = script.then(
            Turn::new(text(format!(
                "<summary>1. Summary {n}: files were read.</summary>"
            )))
            .when(Matcher::predicate("a summary request", is_summary))
            .with_delay(summary),
        );
    }
    script
}

struct Sample {
    wall_ms: f64,
    compactions: usize,
    summaries: usize,
}

async fn one_run(
    turns: usize,
    work_ahead: bool,
    turn: Duration,
    summary: Duration,
) -> Result<Sample, String> {
    let mut h = Harness::anthropic(script(turns, turn, summary)).await;
    h.context_window = WINDOW;
    h.work_ahead = work_ahead;
    for i in 0..FILES {
        let body: String = (0..1_200).map(|n| format!("file {i} line {n}\n")).collect();
        std::fs::write(h.root().join(format!("f{i}.txt")), body).map_err(|e| e.to_string())?;
    }
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.limits = generous_limits(turns);
    let started = Instant::now();
    let mut handle = h.submit("Read every file, again and again.", options).await;
    let mut compactions = 0usize;
    let status = loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .map_err(|_| "no event in time".to_string())?
            .ok_or("event stream closed before run_finished")?;
        match event.kind {
            EventKind::Compaction { phase, .. } if phase == "finished" => compactions += 1,
            EventKind::RunFinished { status, .. } if event.agent_path == "main" => break status,
            _ => {}
        }
    };
    let wall = started.elapsed();
    let summaries = h.server.requests().iter().filter(|r| is_summary(r)).count();
    h.runtime.clone().shutdown().await;
    if status != RunStatus::Finished {
        return Err(format!("run ended {status:?}"));
    }
    Ok(Sample {
        wall_ms: millis(wall),
        compactions,
        summaries,
    })
}

fn summary(values: &[f64]) -> String {
    Summary::of(values).map_or_else(|| "no samples".into(), |s| s.to_string())
}

async fn bench() -> Result<(), String> {
    let turns = count_from_env("TROUPE_BENCH_TURNS", DEFAULT_TURNS)?.max(2);
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    let turn_ms = count_from_env("TROUPE_BENCH_TURN_MS", DEFAULT_TURN_MS)?;
    let summary_ms = count_from_env("TROUPE_BENCH_SUMMARY_MS", DEFAULT_SUMMARY_MS)?;
    let (turn, summary_delay) = (
        Duration::from_millis(turn_ms as u64),
        Duration::from_millis(summary_ms as u64),
    );
    println!(
        "work_ahead: {turns} model calls per run, {samples} runs per configuration, \
         turn {turn_ms} ms, summary {summary_ms} ms, window {WINDOW}"
    );
    println!("{}", machine_line());
    one_run(turns, false, turn, summary_delay).await?;
    one_run(turns, true, turn, summary_delay).await?;
    let (mut off, mut on, mut ratio) = (vec![], vec![], vec![]);
    let (mut off_counts, mut on_counts) = (vec![], vec![]);
    for round in 0..samples {
        let (a, b) = if round % 2 == 0 {
            let a = one_run(turns, false, turn, summary_delay).await?;
            (a, one_run(turns, true, turn, summary_delay).await?)
        } else {
            let b = one_run(turns, true, turn, summary_delay).await?;
            (one_run(turns, false, turn, summary_delay).await?, b)
        };
        ratio.push(b.wall_ms / a.wall_ms);
        off.push(a.wall_ms);
        on.push(b.wall_ms);
        off_counts.push((a.compactions, a.summaries));
        on_counts.push((b.compactions, b.summaries));
    }
    println!("  wall time per run, ms:");
    println!("    work_ahead = false   {}", summary(&off));
    println!("    work_ahead = true    {}", summary(&on));
    println!("    ratio true / false   {}", summary(&ratio));
    println!("  (compactions, summary requests) per run:");
    println!("    work_ahead = false   {off_counts:?}");
    println!("    work_ahead = true    {on_counts:?}");
    println!("\n{}", machine_line());
    Ok(())
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = run_on_tokio_workers(bench()) {
        eprintln!("work_ahead: {err}");
        std::process::exit(1);
    }
}
