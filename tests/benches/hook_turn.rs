//! Benchmark: what hooks add to an agent turn. A scripted run of `TURNS`
//! model calls (default 30), each but the last asking for the bench-only
//! `noop` tool, on the real runtime and adapter over loopback in bypass mode
//! (OS sandbox off), measured interleaved sample by sample (each setup goes
//! first, second and third in turn):
//!
//! - `bare`: no hook configured;
//! - `hooks`: one PreToolUse and one PostToolUse hook, each `true` (a hook
//!   that does nothing: its cost is the process it is);
//! - `inline`: no hook, and the tool itself starts the same two processes as
//!   cheaply as the operating system can — `/bin/bash -c true` with
//!   `posix_spawn`, piped stdin, stdout and stderr, in its own process group,
//!   waited for — so the turn pays everything the two processes cost it
//!   (the kernel starting and ending them, the caches they take over) and
//!   nothing of the hook machinery.
//!
//! Per turn: `overhead = hooks − inline`, what Troupe adds to the two hook
//! processes' own cost (target: at most 1 ms). To say where it goes, the
//! same rounds time, outside any run, the process alone (`process`) and one
//! no-op hook through the hook runner (`runner`: `troupe_hooks::fire`, so payload,
//! environment, its own cgroup, stdin, output, verdict), each `2 × (TURNS −
//! 1)` times: `runner part = 2 × (runner − process)`, and the rest is the
//! agent loop's own steps for the hooks (asking for them, their verdicts,
//! their events).
//!
//! Environment: `TROUPE_BENCH_TURNS` (default 30), `TROUPE_BENCH_SAMPLES`
//! (default 15); `TROUPE_BENCH_DIAGNOSE=1` shows instead where a turn's time
//! goes (see `diagnose`). The runs' stores live in `TMPDIR`: set it to a
//! memory file system to take the disk's flush times out of the spread.
//! Figures go to `docs/performance.md`, never into assertions.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_hooks::{Hook, HookContext, HookEvent, HookPayload, HookPlace, HookSet};
use troupe_process::os_sandbox::CommandSandbox;
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_protocol::permission::RuleSource;
use troupe_protocol::permission::ToolCategory;
use troupe_scripted::{Script, text, tool_call};
use troupe_telemetry::testing::CapturedSpans;
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::tools::NoopTool;
use troupe_tests::bench::turns::generous_limits;
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};
use troupe_tests::{Harness, RunOptions, WAIT};
use troupe_tools::{Tool, ToolContext, ToolOutput};

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

/// What a run of the bench has besides the `noop` tool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Nothing.
    Bare,
    /// The two no-op hooks.
    Hooks,
    /// No hook; the tool itself starts the two hook processes as cheaply as
    /// the system can (see [`InlineProcesses`]).
    Inline,
}

/// The bench's `noop` tool, starting `/bin/bash -c true` twice with
/// `posix_spawn` (as [`spawn_bash`] does) before it answers: the two hook
/// processes of a turn, with everything they cost the turn (the kernel
/// starting and ending them, the caches they take over), and nothing of the
/// hook machinery.
struct InlineProcesses(NoopTool);

impl Tool for InlineProcesses {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn description(&self) -> &str {
        self.0.description()
    }
    fn input_schema(&self) -> &serde_json::Value {
        self.0.input_schema()
    }
    fn read_only(&self) -> bool {
        true
    }
    fn category(&self) -> ToolCategory {
        self.0.category()
    }
    fn execute<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            for _ in 0..2 {
                if let Err(err) = spawn_bash(POSIX_SPAWNED_BASH).await {
                    return ToolOutput::error(err);
                }
            }
            self.0.execute(args, ctx).await
        })
    }
}

/// Wall time per turn of one run, in ms.
async fn one_run(turns: usize, setup: Setup) -> Result<f64, String> {
    let with_hooks = setup == Setup::Hooks;
    let h = Harness::anthropic(script(turns)).await;
    let hooks = if with_hooks { noop_hooks() } else { Vec::new() };
    let tool: Arc<dyn Tool> = match setup {
        Setup::Inline => Arc::new(InlineProcesses(NoopTool::new())),
        Setup::Bare | Setup::Hooks => Arc::new(NoopTool::new()),
    };
    let env = h.env_with_hooks(vec![tool], hooks);
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

/// One no-op PreToolUse hook run through the runner (`troupe_hooks::fire`: payload,
/// environment, contained spawn, stdin, output, verdict), in ms.
async fn one_fire(hooks: &HookSet, ctx: &HookContext) -> Result<f64, String> {
    let mut payload = HookPayload::new(HookEvent::PreToolUse, &ctx.place);
    payload.tool_name = Some("noop".into());
    payload.tool_input = Some(json!({ "n": 1 }));
    let started = Instant::now();
    let verdict =
        troupe_hooks::fire(hooks, HookEvent::PreToolUse, Some("noop"), payload, ctx).await;
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
        troupe_process::spawn_in_group(&mut command).map_err(|e| e.to_string())?;
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
    const SETUPS: [Setup; 3] = [Setup::Bare, Setup::Hooks, Setup::Inline];
    for _ in 0..WARMUP_RUNS {
        for setup in SETUPS {
            one_run(turns, setup).await?;
        }
    }
    let (mut bare, mut hooks, mut inline) = (vec![], vec![], vec![]);
    let (mut process, mut fired) = (vec![], vec![]);
    let (mut in_turn, mut overhead, mut runner_part, mut rest) = (vec![], vec![], vec![], vec![]);
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
        // Each setup goes first, second and third in turn.
        let mut per_turn = [0.0; 3];
        for k in 0..SETUPS.len() {
            let index = (round + k) % SETUPS.len();
            per_turn[index] = one_run(turns, SETUPS[index]).await?;
        }
        let [a, b, c] = per_turn;
        let (mut processes, mut fires) = (0.0, 0.0);
        for _ in 0..2 * (turns - 1) {
            processes += spawn_bash(POSIX_SPAWNED_BASH).await?;
            fires += one_fire(&runner_hooks, &ctx).await?;
        }
        // Per turn: the hooks of a turn (two per tool call).
        let (processes, fires) = (processes / turns as f64, fires / turns as f64);
        bare.push(a);
        hooks.push(b);
        inline.push(c);
        process.push(processes / 2.0);
        fired.push(fires / 2.0);
        in_turn.push(c - a);
        overhead.push(b - c);
        runner_part.push(fires - processes);
        rest.push(b - c - (fires - processes));
    }
    println!("  ms:");
    println!("    turn, no hook                       {}", summary(&bare));
    println!(
        "    turn, two no-op hooks               {}",
        summary(&hooks)
    );
    println!(
        "    turn, the tool starts two processes {}",
        summary(&inline)
    );
    println!(
        "    the two processes in a turn         {}",
        summary(&in_turn)
    );
    println!(
        "    one hook process alone, posix_spawn {}",
        summary(&process)
    );
    println!(
        "    one hook through the runner alone   {}",
        summary(&fired)
    );
    println!(
        "    overhead per turn                   {}",
        summary(&overhead)
    );
    println!(
        "      runner part                       {}",
        summary(&runner_part)
    );
    println!("      rest                              {}", summary(&rest));
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
async fn timeline(captured: &CapturedSpans, setup: Setup) -> Result<(), String> {
    let seen = captured.len();
    let faults = minor_faults();
    one_run(DIAGNOSED_TURNS, setup).await?;
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
    let label = match setup {
        Setup::Bare => "no hook",
        Setup::Hooks => "two no-op hooks",
        Setup::Inline => "no hook, the tool starts two processes",
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

/// The gaps around a turn's steps, in µs, over all turns of one run: from
/// the end of a model call to the start of the first step after it (the
/// answer stored, hooks or tool asked for), and from the end of the last step
/// to the next model call (the result stored, the request sent).
async fn turn_gaps(captured: &CapturedSpans, setup: Setup) -> Result<(Vec<f64>, Vec<f64>), String> {
    let seen = captured.len();
    one_run(DIAGNOSED_TURNS, setup).await?;
    let mut spans = captured.spans().split_off(seen);
    spans.sort_by_key(|span| span.start_time);
    let micros = |from: std::time::SystemTime, to: std::time::SystemTime| {
        to.duration_since(from)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let is_chat = |name: &str| name.starts_with("chat");
    let is_step = |name: &str| name.starts_with("hook") || name.starts_with("execute_tool");
    let chats: Vec<_> = spans.iter().filter(|s| is_chat(&s.name)).collect();
    let (mut before, mut after) = (vec![], vec![]);
    // The first turns warm up.
    for pair in chats.windows(2).skip(2) {
        let steps: Vec<_> = spans
            .iter()
            .filter(|s| is_step(&s.name))
            .filter(|s| s.start_time >= pair[0].end_time && s.end_time <= pair[1].start_time)
            .collect();
        let (Some(first), Some(last)) = (steps.first(), steps.iter().max_by_key(|s| s.end_time))
        else {
            continue;
        };
        before.push(micros(pair[0].end_time, first.start_time));
        after.push(micros(last.end_time, pair[1].start_time));
    }
    Ok((before, after))
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
/// writes); the spans of a few turns without hooks, with the tool starting
/// two processes and with the two hooks; then, over 12 runs of each, the
/// gaps around a turn's steps (where the turn waits for the store and the
/// model rather than for a step).
fn diagnose() -> Result<(), String> {
    let (telemetry, captured) =
        troupe_telemetry::testing::capture(&Default::default()).map_err(|e| e.to_string())?;
    tracing::dispatcher::set_global_default(telemetry.dispatch().clone())
        .map_err(|e| e.to_string())?;
    run_on_tokio_workers(async move {
        spawn_costs("a small process").await?;
        let ballast: Vec<u8> = std::hint::black_box(vec![1; 256 << 20]);
        spawn_costs("256 MiB more touched").await?;
        drop(ballast);
        for setup in [Setup::Bare, Setup::Inline] {
            timeline(&captured, setup).await?;
        }
        timeline(&captured, Setup::Hooks).await?;
        let mut gaps = [(vec![], vec![]), (vec![], vec![]), (vec![], vec![])];
        for _ in 0..12 {
            for (index, setup) in [Setup::Bare, Setup::Inline, Setup::Hooks]
                .into_iter()
                .enumerate()
            {
                let (before, after) = turn_gaps(&captured, setup).await?;
                gaps[index].0.extend(before);
                gaps[index].1.extend(after);
            }
        }
        println!("gaps around a turn's steps, µs, 12 runs each:");
        for (label, (before, after)) in [
            "no hook",
            "the tool starts two processes",
            "two no-op hooks",
        ]
        .iter()
        .zip(&gaps)
        {
            println!("  {label}:");
            println!("    model call end → first step   {}", summary(before));
            println!("    last step end → model call    {}", summary(after));
        }
        Ok(())
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
