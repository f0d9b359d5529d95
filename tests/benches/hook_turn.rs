//! Benchmark: what hooks add to an agent turn. A scripted run of `TURNS`
//! model calls (default 30), each but the last asking for the bench-only
//! `noop` tool, on the real runtime and adapter over loopback in bypass mode,
//! measured three ways, interleaved sample by sample:
//!
//! - `none`: no hook configured;
//! - `hooks`: one PreToolUse and one PostToolUse hook, each `true` (a hook
//!   that does nothing: its cost is the process it is);
//! - `spawn`: the hook process alone, as the operating system costs it —
//!   `bash -c true` started with piped stdin, stdout and stderr, in its own
//!   process group, and waited for — timed directly `2 × (TURNS − 1)` times;
//! - `contained`: the same process started the way every command of Troupe
//!   is (`process::spawn_in_group`: its own cgroup, or the subreaper, and
//!   the kill of its whole tree when it ends), timed the same way.
//!
//! Per turn: `added = hooks − none`, `runtime overhead = added − 2 × spawn`
//! (everything Troupe adds around the two bare processes), and `loop overhead
//! = added − 2 × contained` (what the hook machinery adds beyond starting the
//! processes the way every command is started: payload, matching, the span,
//! the event, the extra loop steps). Target: the hook processes' own cost
//! plus at most 1 ms.
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 30), `TROUPE_BENCH_SAMPLES`
//! (default 15). Figures go to `docs/performance.md`, never into assertions.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use troupe_runtime::config::RuleSource;
use troupe_runtime::events::{EventKind, RunStatus};
use troupe_runtime::hooks::{Hook, HookEvent};
use troupe_scripted::{Script, text, tool_call};
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::tools::NoopTool;
use troupe_tests::bench::turns::generous_limits;
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};
use troupe_tests::{Harness, RunOptions, WAIT};

const DEFAULT_TURNS: usize = 30;
const DEFAULT_SAMPLES: usize = 15;
const WARMUP_RUNS: usize = 2;

fn script(turns: usize) -> Script {
    let mut script = Script::new();
    for i in 0..turns.saturating_sub(1) {
        script = script.then(tool_call("noop", json!({ "n": i })));
    }
    script.then(text("done"))
}

fn noop_hooks() -> Vec<Hook> {
    [HookEvent::PreToolUse, HookEvent::PostToolUse]
        .into_iter()
        .map(|event| {
            Hook::new(event, None, "true", None, false, RuleSource::User)
                .map_err(|err| err.to_string())
        })
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}

/// Wall time per turn of one run, in ms.
async fn one_run(turns: usize, with_hooks: bool) -> Result<f64, String> {
    let h = Harness::anthropic(script(turns)).await;
    let hooks = if with_hooks { noop_hooks() } else { Vec::new() };
    let env = h.env_with_hooks(vec![Arc::new(NoopTool::new())], hooks);
    let mut options = RunOptions::bypass(env);
    options.limits = generous_limits(turns);
    let started = Instant::now();
    let mut handle = h.submit("Call noop until told otherwise.", options).await;
    let mut hook_events = 0usize;
    let status = loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .map_err(|_| "no event in time".to_string())?
            .ok_or("event stream closed before run_finished")?;
        match event.kind {
            EventKind::Hook { outcome, .. } => {
                if outcome != "continue" {
                    return Err(format!("a hook ended {outcome}"));
                }
                hook_events += 1;
            }
            EventKind::RunFinished { status, .. } if event.agent_path == "main" => break status,
            _ => {}
        }
    };
    let wall = started.elapsed();
    h.runtime.clone().shutdown().await;
    if status != RunStatus::Finished {
        return Err(format!("run ended {status:?}"));
    }
    let expected = if with_hooks { 2 * (turns - 1) } else { 0 };
    if hook_events != expected {
        return Err(format!("{hook_events} hook runs, expected {expected}"));
    }
    Ok(millis(wall) / turns as f64)
}

/// One hook process as the system costs it, in ms.
async fn one_spawn() -> Result<f64, String> {
    let started = Instant::now();
    let mut child = tokio::process::Command::new("bash")
        .args(["-c", "true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| err.to_string())?;
    drop(child.stdin.take());
    child.wait().await.map_err(|err| err.to_string())?;
    Ok(millis(started.elapsed()))
}

/// One hook process started as Troupe starts every command, in ms.
async fn one_contained_spawn() -> Result<f64, String> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new("bash");
    command
        .args(["-c", "true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, group) =
        troupe_runtime::tools::process::spawn_in_group(&mut command).map_err(|e| e.to_string())?;
    drop(child.stdin.take());
    child.wait().await.map_err(|err| err.to_string())?;
    group.kill_now();
    Ok(millis(started.elapsed()))
}

fn summary(values: &[f64]) -> String {
    Summary::of(values).map_or_else(|| "no samples".into(), |s| s.to_string())
}

async fn bench() -> Result<(), String> {
    let turns = count_from_env("TROUPE_BENCH_TURNS", DEFAULT_TURNS)?.max(2);
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    println!("hook_turn: {turns} model calls per run, {samples} runs per configuration");
    println!("{}", machine_line());
    for _ in 0..WARMUP_RUNS {
        one_run(turns, false).await?;
        one_run(turns, true).await?;
    }
    let (mut none, mut hooks, mut spawn, mut overhead) = (vec![], vec![], vec![], vec![]);
    let (mut contained, mut loop_overhead) = (vec![], vec![]);
    for round in 0..samples {
        let (a, b) = if round % 2 == 0 {
            let a = one_run(turns, false).await?;
            (a, one_run(turns, true).await?)
        } else {
            let b = one_run(turns, true).await?;
            (one_run(turns, false).await?, b)
        };
        let mut spawns = Vec::with_capacity(2 * (turns - 1));
        for _ in 0..2 * (turns - 1) {
            spawns.push(one_spawn().await?);
        }
        let mut contained_spawns = Vec::with_capacity(2 * (turns - 1));
        for _ in 0..2 * (turns - 1) {
            contained_spawns.push(one_contained_spawn().await?);
        }
        // Per turn: the hook processes of a turn (two per tool call).
        let per_turn_spawn = spawns.iter().sum::<f64>() / turns as f64;
        let per_turn_contained = contained_spawns.iter().sum::<f64>() / turns as f64;
        none.push(a);
        hooks.push(b);
        spawn.push(per_turn_spawn / 2.0);
        contained.push(per_turn_contained / 2.0);
        overhead.push(b - a - per_turn_spawn);
        loop_overhead.push(b - a - per_turn_contained);
    }
    println!("  per turn, ms:");
    println!("    none                    {}", summary(&none));
    println!("    hooks (2 no-op hooks)   {}", summary(&hooks));
    println!("    one hook process alone  {}", summary(&spawn));
    println!("    one contained process   {}", summary(&contained));
    println!("    runtime overhead        {}", summary(&overhead));
    println!("    loop overhead           {}", summary(&loop_overhead));
    println!("\n{}", machine_line());
    Ok(())
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = run_on_tokio_workers(bench()) {
        eprintln!("hook_turn: {err}");
        std::process::exit(1);
    }
}
