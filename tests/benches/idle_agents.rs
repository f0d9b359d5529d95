//! Benchmark: 1,000 idle sessions in one process use ≤ 300 MB RSS
//! (SPEC §14: "1,000 concurrent idle sessions in one daemon").
//!
//! Starts one `Runtime` and 1,000 sessions on it, each created by submitting
//! one short run (a one-turn text answer from the scripted model server) on
//! the real actor tree, then lets them go idle — between runs a session is
//! its history kept in memory by the runtime, its run and agent actors gone —
//! and reads this process's `VmRSS` from `/proc/self/status`. Every session gets its own permission
//! engine; the agent environment (provider, tool registry, sandbox, prompt) is
//! shared, as one daemon with one configuration would share it.
//!
//! The scripted server runs in a child process (this same binary, started with
//! `TROUPE_BENCH_SERVE_TURNS`), so the 1,000 requests it records do not count
//! against the runtime's memory. Memory is read at start, after a warm-up of
//! a few sessions (the baseline: tokio, the HTTP client and its connection,
//! the compiled tool schemas), and after every quarter of the sessions, with
//! the number of live tokio tasks.
//!
//! Environment: `TROUPE_BENCH_AGENTS` (default 1000). Figures go to
//! `docs/performance.md`, never into assertions.

use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use troupe_actors::{AgentEnv, Approver, RunSubmission, Runtime, SessionTarget};
use troupe_config::{Limits, PermissionSettings};
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::RunStatus;
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Script, text};
use troupe_store::Store;
use troupe_tests::WAIT;
use troupe_tests::bench::server_child;
use troupe_tests::bench::system::{Memory, kib_to_mib, machine_line};
use troupe_tests::bench::{
    agent_env, count_from_env, invoked_as_benchmark, run_on_tokio_workers, scripted_provider,
};
use troupe_tools::builtin_registry;

/// Sessions unless `TROUPE_BENCH_AGENTS` says otherwise (SPEC §14).
const DEFAULT_AGENTS: usize = 1_000;
/// Sessions run before the baseline is read.
const WARMUP_SESSIONS: usize = 8;
/// Runs in flight at once while the sessions are created.
const IN_FLIGHT: usize = 16;
/// Memory is read after every this many parts of the sessions.
const CHECKPOINTS: usize = 4;
/// Pause before a reading, so finished runs' event logs drain and stop.
const SETTLE: Duration = Duration::from_millis(500);
/// Variable that turns this binary into the scripted server child.
const SERVE_VAR: &str = "TROUPE_BENCH_SERVE_TURNS";

/// Child mode: serve `turns` text answers, print the address, and exit when
/// stdin closes.
fn serve(turns: &str) -> Result<(), String> {
    let turns: usize = turns
        .parse()
        .map_err(|_| format!("{SERVE_VAR} must be a number, got {turns:?}"))?;
    let script: Script = (0..turns)
        .map(|i| text(format!("Session answer {i}.")))
        .collect();
    server_child::serve("idle_agents", script)
}

/// The scripted server in a child process, and its base URL.
fn spawn_server(turns: usize) -> Result<(Child, String), String> {
    server_child::spawn(SERVE_VAR, &turns.to_string())
}

/// Runs one short task in a new session; returns the session id.
async fn one_session(runtime: &Runtime, env: &Arc<AgentEnv>) -> Result<String, String> {
    let permissions = PermissionEngine::new(&PermissionSettings::default(), env.sandbox().clone())
        .map_err(|e| e.to_string())?;
    let handle = runtime
        .submit(RunSubmission {
            prompt: "Say something short.".into(),
            session: SessionTarget::New(None),
            env: env.clone(),
            permissions,
            mode: PermissionMode::Default,
            limits: Limits::default(),
            approver: Approver::Absent,
        })
        .await
        .map_err(|e| e.to_string())?;
    let session_id = handle.session_id.clone();
    let outcome = tokio::time::timeout(WAIT, handle.outcome)
        .await
        .map_err(|_| "run did not finish in time".to_string())?
        .map_err(|_| "run outcome lost".to_string())?;
    if outcome.status != RunStatus::Finished {
        return Err(format!(
            "run ended {:?}: {}",
            outcome.status, outcome.final_text
        ));
    }
    Ok(session_id)
}

async fn sessions(
    runtime: &Runtime,
    env: &Arc<AgentEnv>,
    count: usize,
) -> Result<Vec<String>, String> {
    futures::stream::iter(0..count)
        .map(|_| one_session(runtime, env))
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

struct Reading {
    sessions: usize,
    memory: Memory,
    tasks: usize,
}

async fn reading(sessions: usize) -> Result<Reading, String> {
    tokio::time::sleep(SETTLE).await;
    Ok(Reading {
        sessions,
        memory: Memory::now().map_err(|e| e.to_string())?,
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
    })
}

async fn bench(agents: usize, start: Memory) -> Result<(), String> {
    let (mut server, url) = spawn_server(agents + WARMUP_SESSIONS)?;
    let project = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = Store::open(data.path()).map_err(|e| e.to_string())?;
    let runtime = Runtime::start(store.clone())
        .await
        .map_err(|e| e.to_string())?;
    let env = agent_env(
        scripted_provider(&url)?,
        builtin_registry(),
        project.path(),
        data.path(),
        store,
    )?;

    let mut ids = sessions(&runtime, &env, WARMUP_SESSIONS).await?;
    let baseline = reading(ids.len()).await?;
    let mut readings = Vec::new();
    let started = Instant::now();
    let step = agents.div_ceil(CHECKPOINTS);
    while ids.len() - WARMUP_SESSIONS < agents {
        let wanted = step.min(agents - (ids.len() - WARMUP_SESSIONS));
        ids.extend(sessions(&runtime, &env, wanted).await?);
        readings.push(reading(ids.len() - WARMUP_SESSIONS).await?);
    }
    let creation = started.elapsed();

    let mut idle = 0usize;
    for id in &ids {
        let history = tokio::time::timeout(WAIT, runtime.history(id))
            .await
            .map_err(|_| format!("history of {id}: no answer in time"))?
            .map_err(|e| format!("history of {id}: {e}"))?;
        // Kept in memory between runs: the prompt and the answer.
        if history.len() >= 2 {
            idle += 1;
        }
    }

    println!(
        "  at start (before tokio):              VmRSS {:.1} MiB",
        start.rss_mib()
    );
    println!(
        "  baseline ({} warm-up sessions):        VmRSS {:.1} MiB, {} tokio tasks",
        WARMUP_SESSIONS,
        baseline.memory.rss_mib(),
        baseline.tasks
    );
    println!("  sessions | VmRSS MiB | +MiB over baseline | KiB per agent | tokio tasks");
    for r in &readings {
        let grown = r.memory.rss_kib.saturating_sub(baseline.memory.rss_kib);
        println!(
            "  {:>8} | {:>9.1} | {:>18.1} | {:>13.1} | {:>11}",
            r.sessions,
            r.memory.rss_mib(),
            kib_to_mib(grown),
            grown as f64 / r.sessions.max(1) as f64,
            r.tasks
        );
    }
    if let Some(last) = readings.last() {
        println!(
            "  peak VmHWM {:.1} MiB; {} of {} agents alive and idle; sessions created in {:.2} s",
            kib_to_mib(last.memory.peak_kib),
            idle,
            ids.len(),
            creation.as_secs_f64()
        );
    }

    runtime.shutdown().await;
    drop(server.stdin.take());
    let _ = server.wait();
    Ok(())
}

fn main() {
    if let Ok(turns) = std::env::var(SERVE_VAR) {
        if let Err(err) = serve(&turns) {
            eprintln!("idle_agents server: {err}");
            std::process::exit(1);
        }
        return;
    }
    if !invoked_as_benchmark() {
        return;
    }
    let start = match Memory::now() {
        Ok(memory) => memory,
        Err(err) => {
            eprintln!("idle_agents: {err}");
            std::process::exit(1);
        }
    };
    let agents = match count_from_env("TROUPE_BENCH_AGENTS", DEFAULT_AGENTS) {
        Ok(agents) => agents,
        Err(err) => {
            eprintln!("idle_agents: {err}");
            std::process::exit(1);
        }
    };
    println!("idle_agents: {agents} sessions, each one short run, then idle");
    println!("{}", machine_line());
    if let Err(err) = run_on_tokio_workers(bench(agents, start)) {
        eprintln!("idle_agents: {err}");
        std::process::exit(1);
    }
}
