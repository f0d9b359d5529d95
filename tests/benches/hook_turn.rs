//! Benchmark: what hooks add to an agent turn. A scripted run of `TURNS`
//! model calls (default 30), each but the last asking for the bench-only
//! `noop` tool, on the real runtime and adapter over loopback in bypass mode
//! (OS sandbox off), measured interleaved sample by sample:
//!
//! - `none`: no hook configured;
//! - `hooks`: one PreToolUse and one PostToolUse hook, each `true` (a hook
//!   that does nothing: its cost is the process it is);
//! - `process`: the hook process alone, as cheaply as the operating system
//!   starts it — `/bin/bash -c true` started with `posix_spawn`, piped stdin,
//!   stdout and stderr, in its own process group, and waited for — timed
//!   directly `2 × (TURNS − 1)` times;
//! - `runner`: one no-op hook run through the hook runner (`hooks::fire`:
//!   payload, environment, its own cgroup, stdin, output, verdict), timed the
//!   same way.
//!
//! Per turn: `added = hooks − none`; `overhead = added − 2 × process`, what
//! Troupe adds to the two processes (target: at most 1 ms); of it, `runner
//! part = 2 × (runner − process)` and `loop part = added − 2 × runner` (the
//! extra steps of the agent's loop).
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 30), `TROUPE_BENCH_SAMPLES`
//! (default 15); `TROUPE_BENCH_DIAGNOSE=1` shows instead where a turn's time
//! goes (see `diagnose`). Figures go to `docs/performance.md`, never into
//! assertions.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_runtime::config::RuleSource;
use troupe_runtime::events::{EventKind, RunStatus};
use troupe_runtime::hooks::{self, Hook, HookContext, HookEvent, HookPayload, HookPlace, HookSet};
use troupe_runtime::os_sandbox::CommandSandbox;
use troupe_runtime::telemetry::testing::CapturedSpans;
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
/// Model calls of the runs `TROUPE_BENCH_DIAGNOSE` shows.
const DIAGNOSED_TURNS: usize = 20;

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

/// `bash -c true` started by name, so with a fork (the standard library
/// looks the name up in the child's `PATH`), in ms.
async fn one_spawn() -> Result<f64, String> {
    spawn_bash("bash").await
}

/// The shell at an absolute path: started with `posix_spawn`.
const POSIX_SPAWNED_BASH: &str = "/bin/bash";

/// [`one_spawn`] with `program` as the shell: the standard library starts
/// `bash` by forking (it looks the name up in the child's `PATH`), and an
/// absolute path with `posix_spawn`, which shares the parent's memory until
/// the `exec` instead of copying its page tables.
async fn spawn_bash(program: &str) -> Result<f64, String> {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(program)
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

/// One no-op PreToolUse hook run through the runner (`hooks::fire`: payload,
/// environment, contained spawn, stdin, output, verdict), in ms.
async fn one_fire(hooks: &HookSet, ctx: &HookContext) -> Result<f64, String> {
    let mut payload = HookPayload::new(HookEvent::PreToolUse, &ctx.place);
    payload.tool_name = Some("noop".into());
    payload.tool_input = Some(json!({ "n": 1 }));
    let started = Instant::now();
    let verdict = hooks::fire(hooks, HookEvent::PreToolUse, Some("noop"), payload, ctx).await;
    let elapsed = millis(started.elapsed());
    match verdict.reports.first().map(|report| report.outcome) {
        Some("continue") => Ok(elapsed),
        other => Err(format!("the hook ended {other:?}")),
    }
}

/// `bash -c true` started in a cgroup joined between fork and `exec`, as
/// Troupe starts every command the OS sandbox confines, in ms.
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
    let (mut none, mut hooks, mut process, mut fired) = (vec![], vec![], vec![], vec![]);
    let (mut overhead, mut runner_part, mut loop_part) = (vec![], vec![], vec![]);
    let project = tempfile::tempdir().map_err(|err| err.to_string())?;
    let runner_hooks = HookSet::new(noop_hooks());
    let ctx = HookContext {
        place: HookPlace {
            session_id: "bench".into(),
            run_id: "bench".into(),
            agent_path: "main".into(),
            cwd: project.path().to_path_buf(),
        },
        child_env: Arc::new(vec![("PATH".into(), "/usr/bin:/bin".into())]),
        parent_span: tracing::Span::none(),
        cancel: CancellationToken::new(),
        sandbox: Arc::new(CommandSandbox::off()),
    };
    for round in 0..samples {
        let (a, b) = if round % 2 == 0 {
            let a = one_run(turns, false).await?;
            (a, one_run(turns, true).await?)
        } else {
            let b = one_run(turns, true).await?;
            (one_run(turns, false).await?, b)
        };
        let (mut processes, mut fires) = (0.0, 0.0);
        for _ in 0..2 * (turns - 1) {
            processes += spawn_bash(POSIX_SPAWNED_BASH).await?;
            fires += one_fire(&runner_hooks, &ctx).await?;
        }
        // Per turn: the hooks of a turn (two per tool call).
        let (processes, fires) = (processes / turns as f64, fires / turns as f64);
        none.push(a);
        hooks.push(b);
        process.push(processes / 2.0);
        fired.push(fires / 2.0);
        overhead.push(b - a - processes);
        runner_part.push(fires - processes);
        loop_part.push(b - a - fires);
    }
    println!("  ms:");
    println!("    turn, no hook                 {}", summary(&none));
    println!("    turn, two no-op hooks         {}", summary(&hooks));
    println!("    one hook process, posix_spawn {}", summary(&process));
    println!("    one hook through the runner   {}", summary(&fired));
    println!("    overhead per turn             {}", summary(&overhead));
    println!(
        "      runner part                 {}",
        summary(&runner_part)
    );
    println!("      loop part                   {}", summary(&loop_part));
    println!("\n{}", machine_line());
    Ok(())
}

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage only fills the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_minflt
    }
}

/// Mean time and minor faults of this process per spawn of `spawn`, over
/// `count` spawns.
async fn spawn_cost<F, Fut>(count: u32, spawn: F) -> Result<String, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<f64, String>>,
{
    let faults = minor_faults();
    let started = Instant::now();
    for _ in 0..count {
        spawn().await?;
    }
    Ok(format!(
        "{:.2} ms, {} faults",
        millis(started.elapsed()) / f64::from(count),
        (minor_faults() - faults) / i64::from(count)
    ))
}

/// The spans of turns 10 to 12 of one run, start and end in µs from the
/// first, and the run's minor page faults.
async fn timeline(captured: &CapturedSpans, with_hooks: bool) -> Result<(), String> {
    let seen = captured.len();
    let faults = minor_faults();
    one_run(DIAGNOSED_TURNS, with_hooks).await?;
    let faults = minor_faults() - faults;
    let mut spans = captured.spans().split_off(seen);
    spans.sort_by_key(|span| span.start_time);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    let (Some(from), Some(to)) = (chats.get(10), chats.get(13)) else {
        return Err("too few turns".into());
    };
    let origin = from.start_time;
    let micros = |t: std::time::SystemTime| {
        t.duration_since(origin)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let label = if with_hooks {
        "two no-op hooks"
    } else {
        "no hook"
    };
    println!("  {label}: {faults} minor faults in the run; turns 10-12 (µs):");
    for span in spans
        .iter()
        .filter(|s| s.start_time >= from.start_time && s.start_time < to.start_time)
    {
        println!(
            "    {:>8.0} {:>8.0}  {}",
            micros(span.start_time),
            micros(span.end_time),
            span.name
        );
    }
    Ok(())
}

/// The cost of `bash -c true` forked by name, forked into a cgroup and
/// started with `posix_spawn`, in this process as it is (`state`).
async fn spawn_costs(state: &str) -> Result<(), String> {
    println!("spawn, mean of 40, {state}:");
    println!(
        "  forked                {}",
        spawn_cost(40, one_spawn).await?
    );
    let contained = spawn_cost(40, one_contained_spawn).await?;
    println!("  forked into a cgroup  {contained}");
    let posix_spawn = spawn_cost(40, || spawn_bash(POSIX_SPAWNED_BASH)).await?;
    println!("  posix_spawn           {posix_spawn}");
    Ok(())
}

/// Where the time of a turn goes (`TROUPE_BENCH_DIAGNOSE=1`): the cost of
/// a spawn in a small process and with 256 MiB of touched memory (a fork
/// copies the page tables, and the parent then takes a fault on each page it
/// writes), then the spans of a few turns with and without hooks.
fn diagnose() -> Result<(), String> {
    let (telemetry, captured) = troupe_runtime::telemetry::testing::capture(&Default::default())
        .map_err(|e| e.to_string())?;
    tracing::dispatcher::set_global_default(telemetry.dispatch().clone())
        .map_err(|e| e.to_string())?;
    run_on_tokio_workers(async move {
        spawn_costs("a small process").await?;
        let ballast: Vec<u8> = std::hint::black_box(vec![1; 256 << 20]);
        spawn_costs("256 MiB more touched").await?;
        drop(ballast);
        timeline(&captured, false).await?;
        timeline(&captured, true).await
    })
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if std::env::var_os("TROUPE_BENCH_DIAGNOSE").is_some() {
        if let Err(err) = diagnose() {
            eprintln!("hook_turn: {err}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(err) = run_on_tokio_workers(bench()) {
        eprintln!("hook_turn: {err}");
        std::process::exit(1);
    }
}
