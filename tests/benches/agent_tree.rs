//! Benchmarks of the agent tree (SPEC §14, SPEC §7): sub-agents and forks as
//! real child actors on the real runtime, the real Anthropic adapter and the
//! scripted model server over loopback, which routes each request to its
//! agent by content.
//!
//! Three parts, run in this order (name some to run only those:
//! `cargo bench -p troupe-tests --bench agent_tree -- fork`):
//!
//! - `memory`: memory per live sub-agent (target ≤ 200 KB beyond its
//!   history). The main agent starts `TROUPE_BENCH_SUBAGENTS` (default 200)
//!   `general` children in one response, with `max_parallel_subagents` raised
//!   to that number; each child's first response calls the bench-only `hold`
//!   tool, which waits until the bench releases it. The process is read
//!   before the fan-out (after a warm-up run of the same shape) and once every
//!   child's `hold` call has started (counted from `tool_started` events, no
//!   sleeps): `VmRSS`, the bytes live on the heap (a counting wrapper around
//!   the system allocator, exact whatever the allocator caches), live tokio
//!   tasks and open sockets. The fan-out runs twice: the first opens one model
//!   connection per child, the second finds them in the client's pool. Then
//!   the heap held by one role child's own tool catalogue is measured. The
//!   scripted server runs in a child process (this binary, started with
//!   `TROUPE_BENCH_SERVE_FANOUT`), so what it records does not count. Runs
//!   first, so nothing measured before it inflates the process.
//! - `parallel`: 8 parallel sub-agents of 3 turns each finish in ≤ 1.5× one
//!   sub-agent's time. Every model response is delayed 50 ms. Scenario A: the
//!   main agent makes one `agent` call (role `general`); the child calls
//!   `glob`, calls `glob` again, answers; the main agent answers. Scenario B:
//!   the same with 8 `agent` calls in one response. Wall time from submit to
//!   `run_finished`, A and B interleaved (`TROUPE_BENCH_SAMPLES` each, default
//!   15, after one warm-up each).
//! - `fork`: fork spawn latency for a 1,000-message parent (target ≤ 1 ms).
//!   A session of 1,000 realistic messages (1–2 KB each, tool calls and
//!   results) is written through `Store::put_message`, then continued with
//!   `SessionTarget::Continue`; the main agent's response makes one fork call.
//!   Measured: the main agent's `tool_started` of the `agent` call to the
//!   fork's `subagent_started`, its `iteration` (events stamped with
//!   `Instant::now()` on receipt) and its first request's arrival at the
//!   scripted server (stamped when the server picks the turn, after it has
//!   parsed the body). The same steps are then timed alone, outside the
//!   runtime, on the same store and history: the deep copy (`plan_child`),
//!   creating the child session, writing the copy with `put_message` and one
//!   flush, copying the history into a request and encoding it. Samples:
//!   `TROUPE_BENCH_FORK_SAMPLES` (default 10, after one warm-up).
//!
//! Figures go to `docs/performance.md`, never into assertions.

use std::collections::HashMap;
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::watch;
use troupe_actors::{AgentEnv, Approver, RunHandle, RunSubmission, Runtime, SessionTarget};
use troupe_agent::agent_tool::AgentCallArgs;
use troupe_agent::roles::{RoleSet, RoleTools};
use troupe_agent::subagent::plan_child;
use troupe_agent::{AgentSpec, ToolCatalogue};
use troupe_config::{Limits, PermissionSettings};
use troupe_llm::{ChatRequest, anthropic};
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
use troupe_protocol::permission::PermissionMode;
use troupe_protocol::permission::ToolCategory;
use troupe_scripted::{Matcher, Response, Script, Turn, Usage, text, tool_call};
use troupe_store::{NewSession, Store};
use troupe_tests::bench::server_child;
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::{Memory, kib_to_mib, machine_line};
use troupe_tests::bench::{
    agent_env, count_from_env, invoked_as_benchmark, round_order, run_on_tokio_workers,
    scripted_provider,
};
use troupe_tests::{Harness, RunOptions, WAIT};
use troupe_tools::{Tool, ToolContext, ToolOutput, builtin_registry};

/// The parts, in the order they run.
const PARTS: [&str; 3] = ["memory", "parallel", "fork"];

/// The system allocator, counting the bytes live on the heap while
/// [`HEAP_COUNTING`] is on (the memory part turns it on; the timed parts run
/// without it). Differences of [`heap_live`] between two moments are exact
/// whatever the allocator keeps cached, unlike `VmRSS`.
struct CountingAlloc;

static HEAP_COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static HEAP_LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn heap_count(delta: i64) {
    if HEAP_COUNTING.load(std::sync::atomic::Ordering::Relaxed) {
        HEAP_LIVE.fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Bytes allocated and not freed since counting began (may be negative when
/// memory allocated before is freed).
fn heap_live() -> i64 {
    HEAP_LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

// SAFETY: every call is passed on unchanged to the system allocator; the
// counter is only arithmetic on an atomic.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let ptr = unsafe { std::alloc::System.alloc(layout) };
        if !ptr.is_null() {
            heap_count(layout.size() as i64);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as above.
        let ptr = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            heap_count(layout.size() as i64);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        heap_count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let new = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            heap_count(new_size as i64 - layout.size() as i64);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

// ---------------------------------------------------------------------------
// Shared instruments

/// Request arrivals at the scripted server, by the label of the turn that
/// answered them.
#[derive(Clone, Default)]
struct Stamps(Arc<Mutex<Vec<(String, Instant)>>>);

impl Stamps {
    /// A turn answering requests accepted by `matcher` with `response`, that
    /// stamps the arrival under `label`. The server tries turns in order and
    /// takes the first that matches, so the stamp is taken once, when this
    /// turn is picked (after the body is parsed and checked).
    fn turn(&self, label: impl Into<String>, matcher: Matcher, response: Response) -> Turn {
        let stamps = self.0.clone();
        let label = label.into();
        Turn::new(response).when(
            matcher.and(Matcher::predicate("stamps its arrival", move |_| {
                stamps
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((label.clone(), Instant::now()));
                true
            })),
        )
    }

    fn get(&self, label: &str) -> Option<Instant> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, at)| *at)
    }

    fn matching(&self, pred: impl Fn(&str) -> bool) -> Vec<Instant> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(l, _)| pred(l))
            .map(|(_, at)| *at)
            .collect()
    }
}

/// The next event of a run and the moment this subscriber received it.
async fn next_event(handle: &mut RunHandle) -> Result<(Instant, RunEvent), String> {
    let event = tokio::time::timeout(WAIT, handle.events.recv())
        .await
        .map_err(|_| "no event in time".to_string())?
        .ok_or("event stream closed before run_finished")?;
    Ok((Instant::now(), event))
}

fn is_main_end(event: &RunEvent) -> Option<(RunStatus, String)> {
    match &event.kind {
        EventKind::RunFinished {
            status, final_text, ..
        } if event.agent_path == "main" => Some((*status, final_text.clone())),
        _ => None,
    }
}

/// Arguments of a role `agent` call.
fn role_call(description: &str, task: &str) -> Value {
    json!({"description": description, "prompt": task, "role": "general"})
}

fn show(name: &str, values: &[f64]) {
    let summary = Summary::of(values).map_or_else(|| "no samples".into(), |s| s.to_string());
    println!("  {name:<58} {summary}");
}

fn show_ms(name: &str, values: &[Duration]) {
    let millis: Vec<f64> = values.iter().map(|d| millis(*d)).collect();
    show(name, &millis);
}

fn median(values: &[f64]) -> f64 {
    Summary::of(values).map_or(f64::NAN, |s| s.median)
}

fn median_ms(values: &[Duration]) -> f64 {
    let millis: Vec<f64> = values.iter().map(|d| millis(*d)).collect();
    median(&millis)
}

fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

// ---------------------------------------------------------------------------
// Part 1: memory per live sub-agent

/// Live sub-agents unless `TROUPE_BENCH_SUBAGENTS` says otherwise.
const DEFAULT_SUBAGENTS: usize = 200;
/// Children of the warm-up run before the baseline.
const WARMUP_CHILDREN: usize = 8;
/// Variable that turns this binary into the scripted server child.
const SERVE_VAR: &str = "TROUPE_BENCH_SERVE_FANOUT";
/// The warm-up run's main prompt.
const WARMUP_MAIN: &str = "WARMUP-MAIN: hold a few";
/// The first measured run's main prompt.
const FANOUT_MAIN: &str = "FANOUT-MAIN: hold them all";
/// The second measured run's main prompt.
const AGAIN_MAIN: &str = "AGAIN-MAIN: hold them all once more";
/// Tool catalogues built to measure one's size.
const CATALOGUES: usize = 20;
/// Pause before the reading after the run, so its event log drains.
const SETTLE: Duration = Duration::from_millis(500);

/// The task of child `i` of the run whose tasks start with `prefix`
/// (delimited, so no task is a prefix of another).
fn hold_task(prefix: &str, i: usize) -> String {
    format!("{prefix} task #{i:05}#: wait for the signal, then report")
}

/// The turns of one fan-out run: `children` `agent` calls, each child calls
/// `hold` once and then answers, then the main agent answers.
fn push_fanout(script: &mut Script, main: &str, prefix: &str, children: usize) {
    let mut fan = Response::empty().and_text("Starting the workers.");
    for i in 0..children {
        fan = fan.and_tool_call(
            "agent",
            role_call(&format!("worker {i}"), &hold_task(prefix, i)),
        );
    }
    script.push(Turn::new(fan).when(Matcher::first_user_contains(main)));
    for i in 0..children {
        let task = hold_task(prefix, i);
        script.push(
            Turn::new(tool_call(
                "hold",
                json!({ "label": format!("{prefix}-{i}") }),
            ))
            .when(Matcher::first_user_contains(task.clone())),
        );
        script.push(
            Turn::new(text(format!("Worker {i} was released.")))
                .when(Matcher::first_user_contains(task)),
        );
    }
    script.push(
        Turn::new(text("Every worker was released.")).when(Matcher::first_user_contains(main)),
    );
}

/// Child mode: serve the warm-up and the measured fan-out, print the address,
/// exit when stdin closes.
fn serve(spec: &str) -> Result<(), String> {
    let (warmup, children) = spec
        .split_once(',')
        .and_then(|(w, n)| Some((w.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .ok_or_else(|| format!("{SERVE_VAR} must be WARMUP,CHILDREN, got {spec:?}"))?;
    let mut script = Script::new();
    push_fanout(&mut script, WARMUP_MAIN, "WARM", warmup);
    push_fanout(&mut script, FANOUT_MAIN, "LIVE", children);
    push_fanout(&mut script, AGAIN_MAIN, "AGAIN", children);
    server_child::serve("agent_tree", script)
}

/// The scripted server in a child process, and its base URL.
fn spawn_server(warmup: usize, children: usize) -> Result<(Child, String), String> {
    server_child::spawn(SERVE_VAR, &format!("{warmup},{children}"))
}

/// Read-only: waits until the bench releases it (or the call is cancelled).
struct HoldTool {
    release: watch::Receiver<bool>,
    schema: Value,
}

impl HoldTool {
    fn new(release: watch::Receiver<bool>) -> Self {
        Self {
            release,
            schema: json!({
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"],
                "additionalProperties": false
            }),
        }
    }
}

impl Tool for HoldTool {
    fn name(&self) -> &str {
        "hold"
    }
    fn description(&self) -> &str {
        "Waits until the work may go on."
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    fn read_only(&self) -> bool {
        true
    }
    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let label = args["label"].as_str().unwrap_or_default().to_string();
            let mut release = self.release.clone();
            tokio::select! {
                released = release.wait_for(|go| *go) => match released {
                    Ok(_) => ToolOutput::ok(format!("released {label}")),
                    Err(_) => ToolOutput::error(format!("{label}: the bench went away")),
                },
                _ = ctx.cancel.cancelled() => ToolOutput::error(format!("{label} cancelled")),
            }
        })
    }
}

/// Sockets this process has open (`/proc/self/fd`).
fn open_sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|entry| std::fs::read_link(entry.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

/// What the process holds at one moment.
struct Reading {
    memory: Memory,
    heap: i64,
    tasks: usize,
    sockets: usize,
}

impl Reading {
    fn now() -> Result<Self, String> {
        Ok(Self {
            memory: Memory::now().map_err(|e| e.to_string())?,
            heap: heap_live(),
            tasks: tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            sockets: open_sockets(),
        })
    }
}

/// What one fan-out run showed.
struct FanOut {
    /// Read once every child's `hold` call had started.
    loaded: Reading,
    /// Submit to the last child's `tool_started`.
    spread: Duration,
    /// The run's main session.
    session_id: String,
}

/// Submits a fan-out of `children` children, reads the process when all of
/// them wait in `hold`, releases them and waits for the end of the run.
async fn fan_out(
    runtime: &Runtime,
    env: Arc<AgentEnv>,
    release: watch::Sender<bool>,
    prompt: &str,
    children: usize,
) -> Result<FanOut, String> {
    let permissions = PermissionEngine::new(&PermissionSettings::default(), env.sandbox().clone())
        .map_err(|e| e.to_string())?;
    let limits = Limits {
        max_parallel_subagents: u32::try_from(children).unwrap_or(u32::MAX),
        max_tool_calls: u32::try_from(2 * children + 10).unwrap_or(u32::MAX),
        budget_tokens: u64::MAX,
        ..Limits::default()
    };
    let started = Instant::now();
    let mut handle = runtime
        .submit(RunSubmission {
            prompt: prompt.into(),
            session: SessionTarget::New(None),
            env,
            permissions,
            mode: PermissionMode::Bypass,
            limits,
            approver: Approver::Absent,
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut holding = 0usize;
    let loaded = loop {
        let (at, event) = next_event(&mut handle).await?;
        if let EventKind::ToolStarted { name, .. } = &event.kind
            && name == "hold"
            && event.agent_path != "main"
        {
            holding += 1;
            if holding == children {
                break (Reading::now()?, since(at, started));
            }
        }
        if let Some((status, text)) = is_main_end(&event) {
            return Err(format!(
                "the run ended ({status:?}: {text}) with {holding} of {children} children holding"
            ));
        }
    };
    release.send_replace(true);
    let mut finished_children = 0usize;
    loop {
        let (_, event) = next_event(&mut handle).await?;
        if let EventKind::SubagentFinished { status } = &event.kind {
            if *status != RunStatus::Finished {
                return Err(format!("{} ended {status:?}", event.agent_path));
            }
            finished_children += 1;
        }
        if let Some((status, text)) = is_main_end(&event) {
            if status != RunStatus::Finished || finished_children != children {
                return Err(format!(
                    "the run ended {status:?} ({text}) with {finished_children} of {children} \
                     children finished"
                ));
            }
            break;
        }
    }
    Ok(FanOut {
        loaded: loaded.0,
        spread: loaded.1,
        session_id: handle.session_id,
    })
}

/// An environment with the built-in tools and a `hold` tool released by the
/// returned sender.
fn hold_env(
    provider: &Arc<dyn troupe_llm::Provider>,
    project: &std::path::Path,
    data: &std::path::Path,
    store: &Store,
) -> Result<(Arc<AgentEnv>, watch::Sender<bool>), String> {
    let (release, released) = watch::channel(false);
    let mut registry = builtin_registry();
    registry
        .register(Arc::new(HoldTool::new(released)))
        .map_err(|e| e.to_string())?;
    let env = agent_env(provider.clone(), registry, project, data, store.clone())?;
    Ok((env, release))
}

/// Heap bytes held by one value built by `build`, measured over
/// [`CATALOGUES`] values kept alive at once.
fn heap_per<T>(build: impl Fn() -> Result<T, String>) -> Result<f64, String> {
    let before = heap_live();
    let mut kept = Vec::with_capacity(CATALOGUES);
    for _ in 0..CATALOGUES {
        kept.push(build()?);
    }
    let grown = heap_live() - before;
    drop(kept);
    Ok(grown as f64 / CATALOGUES as f64)
}

/// What one role child's own tool catalogue holds (built as a child's is:
/// every tool of the registry and `agent`), and its parts, in heap bytes:
/// `[catalogue, registry clone, definitions, agent definition]`.
fn catalogue_bytes(env: &AgentEnv) -> Result<[f64; 4], String> {
    Ok([
        heap_per(|| {
            ToolCatalogue::for_role(env.registry(), &RoleTools::All, Some(env.agent_tool()))
                .map_err(|e| e.to_string())
        })?,
        heap_per(|| Ok(env.registry().as_ref().clone()))?,
        heap_per(|| Ok(env.registry().definitions()))?,
        heap_per(|| Ok(env.agent_tool()))?,
    ])
}

fn print_reading(name: &str, r: &Reading) {
    println!(
        "  {name:<44} {:>9.1} {:>9.1} {:>7} {:>7}",
        r.memory.rss_mib(),
        r.heap as f64 / 1024.0 / 1024.0,
        r.tasks,
        r.sockets
    );
}

fn print_growth(name: &str, from: &Reading, to: &Reading, children: usize) {
    let rss = to.memory.rss_kib as f64 - from.memory.rss_kib as f64;
    let heap = (to.heap - from.heap) as f64 / 1024.0;
    println!(
        "  {name:<52} VmRSS {:>7.1} KiB, heap {:>7.1} KiB, {:.2} tasks, {:.2} sockets",
        rss / children as f64,
        heap / children as f64,
        (to.tasks as f64 - from.tasks as f64) / children as f64,
        (to.sockets as f64 - from.sockets as f64) / children as f64
    );
}

async fn memory_part(children: usize, start: Memory) -> Result<(), String> {
    println!(
        "\n== memory: {children} live sub-agents at once (role general, each waiting in a \
         read-only `hold` call), twice; warm-up run of {WARMUP_CHILDREN}"
    );
    println!("{}", machine_line());
    HEAP_COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut server, url) = spawn_server(WARMUP_CHILDREN, children)?;
    let project = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = Store::open(data.path()).map_err(|e| e.to_string())?;
    let runtime = Runtime::start(store.clone())
        .await
        .map_err(|e| e.to_string())?;
    let provider = scripted_provider(&url)?;

    let (env, release) = hold_env(&provider, project.path(), data.path(), &store)?;
    let warm = fan_out(&runtime, env, release, WARMUP_MAIN, WARMUP_CHILDREN).await?;
    tokio::time::sleep(SETTLE).await;
    let baseline = Reading::now()?;

    let (env, release) = hold_env(&provider, project.path(), data.path(), &store)?;
    let first = fan_out(&runtime, env, release, FANOUT_MAIN, children).await?;
    tokio::time::sleep(SETTLE).await;
    let after_first = Reading::now()?;

    let (env, release) = hold_env(&provider, project.path(), data.path(), &store)?;
    let second = fan_out(&runtime, env.clone(), release, AGAIN_MAIN, children).await?;
    tokio::time::sleep(SETTLE).await;
    let after_second = Reading::now()?;
    let catalogue = catalogue_bytes(&env)?;
    HEAP_COUNTING.store(false, std::sync::atomic::Ordering::Relaxed);

    // The history each child held while it waited: its task and its first
    // response (the `hold` call).
    let child_sessions = store
        .child_sessions(&first.session_id)
        .map_err(|e| e.to_string())?;
    let mut history_bytes = Vec::new();
    for meta in child_sessions.iter().take(3) {
        let history = store.load_history(&meta.id).map_err(|e| e.to_string())?;
        let bytes: usize = history
            .messages
            .iter()
            .take(2)
            .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
            .sum();
        history_bytes.push(bytes);
    }

    println!(
        "  at start (before tokio): VmRSS {:.1} MiB",
        start.rss_mib()
    );
    println!(
        "  {:<44} {:>9} {:>9} {:>7} {:>7}",
        "", "VmRSS MiB", "heap MiB", "tasks", "sockets"
    );
    print_reading("baseline (after the warm-up run)", &baseline);
    print_reading(
        &format!("run 1: {children} children waiting"),
        &first.loaded,
    );
    print_reading(
        &format!("after run 1 (+{} ms)", SETTLE.as_millis()),
        &after_first,
    );
    print_reading(
        &format!("run 2: {children} children waiting"),
        &second.loaded,
    );
    print_reading(
        &format!("after run 2 (+{} ms)", SETTLE.as_millis()),
        &after_second,
    );
    println!("  (heap: bytes live on the heap since counting began, before the runtime started)");
    println!("per live sub-agent:");
    print_growth(
        "run 1 (new connections), over the baseline",
        &baseline,
        &first.loaded,
        children,
    );
    print_growth(
        "run 2 (pooled connections), over after run 1",
        &after_first,
        &second.loaded,
        children,
    );
    print_growth(
        "kept after run 1 (idle pooled connections, store)",
        &baseline,
        &after_first,
        children,
    );
    println!(
        "  one role child's tool catalogue: {:.1} KiB of heap (registry clone {:.1}, tool \
         definitions {:.1} per copy, agent definition {:.1}; a catalogue holds the definitions \
         twice, all and read-only, and compiles the agent schema)",
        catalogue[0] / 1024.0,
        catalogue[1] / 1024.0,
        catalogue[2] / 1024.0,
        catalogue[3] / 1024.0
    );
    println!(
        "  peak VmHWM {:.1} MiB; each child's history while it waits: 2 messages (task, `hold` \
         call), {:?} bytes of JSON",
        kib_to_mib(after_second.memory.peak_kib),
        history_bytes
    );
    println!(
        "  submit → last child in `hold`: run 1 {:.1} ms, run 2 {:.1} ms ({children} children); \
         warm-up {:.1} ms ({WARMUP_CHILDREN})",
        millis(first.spread),
        millis(second.spread),
        millis(warm.spread)
    );
    println!("{}", machine_line());

    runtime.shutdown().await;
    drop(server.stdin.take());
    let _ = server.wait();
    Ok(())
}

// ---------------------------------------------------------------------------
// Part 2: parallel sub-agents

/// Measured runs per scenario unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_PARALLEL_SAMPLES: usize = 15;
/// Delay of every model response.
const RESPONSE_DELAY: Duration = Duration::from_millis(50);
/// Children of scenario B (SPEC §14; the default `max_parallel_subagents`).
const FAN: usize = 8;
/// Model responses on the critical path: main 2 + child 3.
const IDEAL_RESPONSES: u32 = 5;
/// The main agent's prompt in the parallel scenarios.
const SURVEY_MAIN: &str = "SURVEY-MAIN: delegate the survey";

fn survey_task(i: usize) -> String {
    format!("survey task #{i:03}#: list the sources and the notes")
}

/// The script of a run with `children` children of 3 turns, every response
/// delayed.
fn survey_script(children: usize, stamps: &Stamps) -> Script {
    let delayed = |label: String, matcher: Matcher, response: Response| {
        stamps
            .turn(label, matcher, response)
            .with_delay(RESPONSE_DELAY)
    };
    let mut fan = Response::empty().and_text("Delegating the survey.");
    for i in 0..children {
        fan = fan.and_tool_call("agent", role_call(&format!("survey {i}"), &survey_task(i)));
    }
    let main = || Matcher::first_user_contains(SURVEY_MAIN);
    let mut script = Script::new().then(delayed("main-1".into(), main(), fan));
    for i in 0..children {
        let child = || Matcher::first_user_contains(survey_task(i));
        script = script
            .then(delayed(
                format!("child-{i}-1"),
                child(),
                tool_call("glob", json!({"pattern": "**/*.rs"})),
            ))
            .then(delayed(
                format!("child-{i}-2"),
                child(),
                tool_call("glob", json!({"pattern": "**/*.md"})),
            ))
            .then(delayed(
                format!("child-{i}-3"),
                child(),
                text(format!("Survey {i}: 3 sources, 2 notes.")),
            ));
    }
    script.then(delayed(
        "main-2".into(),
        main(),
        text("The survey is done."),
    ))
}

struct ParallelSample {
    /// Submit to `run_finished`.
    wall: Duration,
    /// First `subagent_started` to last `subagent_finished`.
    children: Duration,
    /// The slowest child, `subagent_started` to `subagent_finished`.
    slowest: Duration,
    /// The main agent's first request to the last child's first request, at
    /// the server.
    fan_out: Duration,
}

async fn survey_run(children: usize) -> Result<ParallelSample, String> {
    let stamps = Stamps::default();
    let h = Harness::anthropic(survey_script(children, &stamps)).await;
    for (path, body) in [
        ("src/lib.rs", "pub mod parse;\n"),
        ("src/parse.rs", "pub fn parse() {}\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("README.md", "# Survey\n"),
        ("docs/notes.md", "Notes.\n"),
    ] {
        let file = h.root().join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(file, body).map_err(|e| e.to_string())?;
    }
    let env = h.env_with(vec![]);
    let started = Instant::now();
    let mut handle = h.submit(SURVEY_MAIN, RunOptions::bypass(env)).await;
    let mut child_started: HashMap<String, Instant> = HashMap::new();
    let mut child_finished: HashMap<String, Instant> = HashMap::new();
    let ended = loop {
        let (at, event) = next_event(&mut handle).await?;
        match &event.kind {
            EventKind::SubagentStarted { .. } => {
                child_started.insert(event.agent_path.clone(), at);
            }
            EventKind::SubagentFinished { status } => {
                if *status != RunStatus::Finished {
                    return Err(format!("{} ended {status:?}", event.agent_path));
                }
                child_finished.insert(event.agent_path.clone(), at);
            }
            EventKind::ToolFinished {
                name,
                is_error: true,
                output_preview,
                ..
            } => {
                return Err(format!(
                    "{} call of {} failed: {output_preview}",
                    name, event.agent_path
                ));
            }
            _ => {}
        }
        if let Some((status, final_text)) = is_main_end(&event) {
            if status != RunStatus::Finished {
                return Err(format!("run ended {status:?}: {final_text}"));
            }
            break at;
        }
    };
    let violations = h.server.take_violations();
    if !violations.is_empty() {
        return Err(format!("scripted server: {violations:?}"));
    }
    if child_started.len() != children || child_finished.len() != children {
        return Err(format!(
            "{} children started, {} finished, {children} expected",
            child_started.len(),
            child_finished.len()
        ));
    }
    let first_start = child_started.values().min().copied().unwrap_or(started);
    let last_end = child_finished.values().max().copied().unwrap_or(started);
    let slowest = child_started
        .iter()
        .filter_map(|(path, begin)| Some(since(*child_finished.get(path)?, *begin)))
        .max()
        .unwrap_or_default();
    let main_first = stamps.get("main-1").ok_or("no main request stamped")?;
    let last_child_first = stamps
        .matching(|label| label.starts_with("child-") && label.ends_with("-1"))
        .into_iter()
        .max()
        .ok_or("no child request stamped")?;
    h.runtime.clone().shutdown().await;
    Ok(ParallelSample {
        wall: since(ended, started),
        children: since(last_end, first_start),
        slowest,
        fan_out: since(last_child_first, main_first),
    })
}

async fn parallel_part(samples: usize) -> Result<(), String> {
    let ideal = RESPONSE_DELAY * IDEAL_RESPONSES;
    println!(
        "\n== parallel: every model response delayed {} ms; A = 1 child, B = {FAN} children in \
         one response, each child 3 turns (glob, glob, answer); {samples} runs each after 1 \
         warm-up, interleaved",
        RESPONSE_DELAY.as_millis()
    );
    println!(
        "   ideal run (main 2 + child 3 responses × {} ms): {} ms",
        RESPONSE_DELAY.as_millis(),
        ideal.as_millis()
    );
    println!("{}", machine_line());
    survey_run(1).await?;
    survey_run(FAN).await?;
    let mut a = Vec::with_capacity(samples);
    let mut b = Vec::with_capacity(samples);
    for round in 0..samples {
        for children in round_order(&[1, FAN], round) {
            let sample = survey_run(children).await?;
            if children == 1 {
                a.push(sample);
            } else {
                b.push(sample);
            }
        }
    }
    println!("times in ms:");
    for (name, set) in [("A (1 child)", &a), ("B (8 children)", &b)] {
        let pick = |f: &dyn Fn(&ParallelSample) -> Duration| -> Vec<Duration> {
            set.iter().map(f).collect()
        };
        show_ms(
            &format!("{name}: run (submit → run_finished)"),
            &pick(&|s| s.wall),
        );
        show_ms(
            &format!("{name}: children (first started → last finished)"),
            &pick(&|s| s.children),
        );
        show_ms(&format!("{name}: slowest child"), &pick(&|s| s.slowest));
        show_ms(
            &format!("{name}: main request 1 → last child's request 1"),
            &pick(&|s| s.fan_out),
        );
    }
    let wall_a: Vec<Duration> = a.iter().map(|s| s.wall).collect();
    let wall_b: Vec<Duration> = b.iter().map(|s| s.wall).collect();
    let (ma, mb) = (median_ms(&wall_a), median_ms(&wall_b));
    let paired: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| millis(b.wall) / millis(a.wall))
        .collect();
    let ideal_ms = millis(ideal);
    println!(
        "  ratio B / A of the medians: {:.3} (target ≤ 1.5); per round: {}",
        mb / ma,
        Summary::of(&paired).map_or_else(|| "no samples".into(), |s| s.to_string())
    );
    println!(
        "  against the ideal {ideal_ms:.0} ms: A {:.3}× (+{:.1} ms), B {:.3}× (+{:.1} ms)",
        ma / ideal_ms,
        ma - ideal_ms,
        mb / ideal_ms,
        mb - ideal_ms
    );
    println!("{}", machine_line());
    Ok(())
}

// ---------------------------------------------------------------------------
// Part 3: fork spawn latency

/// Measured forks unless `TROUPE_BENCH_FORK_SAMPLES` says otherwise.
const DEFAULT_FORK_SAMPLES: usize = 10;
/// Messages of the parent's stored history.
const PARENT_MESSAGES: usize = 1_000;
/// The prompt that continues the parent session.
const FORK_PROMPT: &str = "FORK-PROMPT: now check the parser in a fork";
/// The fork's task.
const FORK_TASK: &str = "FORK-TASK: check the parser module";
/// Text that looks like source code and prose.
const FILLER: &str = "fn handle(&mut self, msg: Message) -> Result<(), Error> {\n    \
    // \"quoted\" text, unicode café 東京 and a backslash \\ for escapes\n    \
    self.state.apply(msg)?;\n}\n";

fn filler(chars: usize, seed: usize) -> String {
    let mut out = format!("[{seed}] ");
    out.extend(FILLER.chars().cycle().take(chars));
    out
}

/// Message `i` of a conversation of `len` messages of 1–2 KB: a user task,
/// then assistant text with a `read_file` call and its result in turns, and a
/// final assistant answer.
fn history_message(i: usize, len: usize) -> Message {
    if i == 0 {
        return Message::user_text(filler(1_200, i));
    }
    if i == len - 1 {
        return Message::assistant_text(filler(1_000, i));
    }
    if i % 2 == 1 {
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: filler(900, i),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: format!("toolu_hist_{i:06}"),
                    name: "read_file".into(),
                    input: format!(r#"{{"path":"src/module_{i}.rs"}}"#),
                }),
            ],
        }
    } else {
        Message::tool_results(vec![ToolResult::text(
            format!("toolu_hist_{:06}", i - 1),
            filler(1_700, i),
            false,
        )])
    }
}

fn parent_history() -> Vec<Message> {
    (0..PARENT_MESSAGES)
        .map(|i| history_message(i, PARENT_MESSAGES))
        .collect()
}

fn fork_args() -> Value {
    json!({"description": "check the parser", "prompt": FORK_TASK, "fork": true})
}

fn new_session(id: &str, parent: Option<&str>) -> NewSession {
    NewSession {
        id: id.into(),
        cwd: "/work/project".into(),
        provider: "scripted".into(),
        model: "scripted-model".into(),
        parent: parent.map(str::to_string),
        agent_path: parent.map(|_| "main/fork-1".to_string()),
        run_id: parent.map(|_| "bench-run".to_string()),
        fork_of: None,
    }
}

/// What a thread polling the store every [`WATCH_EVERY`] saw: when the
/// parent's message holding the fork call was written, when the fork's session
/// appeared, got its first message and held its whole copy.
#[derive(Default)]
struct StoreMarks {
    call_written: Option<Instant>,
    created: Option<Instant>,
    first_message: Option<Instant>,
    copy_written: Option<Instant>,
}

/// Polling period of the store watcher.
const WATCH_EVERY: Duration = Duration::from_micros(200);

/// Watches session `parent` until it holds `call_at` messages and its child
/// session `copy_len`, or until `stop` is set.
fn watch_store(
    store: Store,
    parent: String,
    call_at: u64,
    copy_len: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<StoreMarks> {
    std::thread::spawn(move || {
        let mut marks = StoreMarks::default();
        // Each mark is taken after the read that saw it (a read can wait
        // behind a write), so a mark is never earlier than what it marks.
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if marks.call_written.is_none()
                && let Ok(Some(meta)) = store.session(&parent)
                && meta.message_count >= call_at
            {
                marks.call_written = Some(Instant::now());
            }
            let child = store
                .child_sessions(&parent)
                .ok()
                .and_then(|children| children.into_iter().next());
            let now = Instant::now();
            if let Some(child) = child {
                marks.created.get_or_insert(now);
                if child.message_count > 0 {
                    marks.first_message.get_or_insert(now);
                }
                if child.message_count >= copy_len {
                    marks.copy_written = Some(now);
                    break;
                }
            }
            std::thread::sleep(WATCH_EVERY);
        }
        marks
    })
}

struct ForkSample {
    /// Main agent's `tool_started` of the `agent` call → fork's `subagent_started`.
    to_started: Duration,
    /// → fork's `iteration`.
    to_iteration: Duration,
    /// → fork's request at the server.
    to_request: Duration,
    /// The watcher's marks, from the parent's call message written: to the
    /// fork's session created, its first message, its whole copy, and to the
    /// fork's request at the server.
    from_call_written: Option<[Duration; 4]>,
    /// Main agent's request at the server → fork's request at the server.
    request_to_request: Duration,
    /// Body size of the fork's request.
    fork_body_bytes: usize,
    /// Messages in the fork's request.
    fork_messages: usize,
    /// Steps timed alone.
    steps: ForkSteps,
}

/// The fork's steps timed alone, on the same store and history.
struct ForkSteps {
    plan_child: Duration,
    create_session: Duration,
    encode_only: Duration,
    save_copy: Duration,
    flush: Duration,
    own_messages: Duration,
    clone_for_request: Duration,
    request_body: Duration,
    server_parse: Duration,
    copy_messages: usize,
    copy_json_bytes: usize,
}

async fn fork_run(history: &[Message], n: usize) -> Result<ForkSample, String> {
    let stamps = Stamps::default();
    let usage = Usage::new(100, 20);
    let script = Script::new()
        .then(
            stamps.turn(
                "main-1",
                Matcher::last_user_contains(FORK_PROMPT),
                Response::empty()
                    .and_text("Forking a worker for the parser.")
                    .and_tool_call("agent", fork_args())
                    .with_usage(usage),
            ),
        )
        .then(stamps.turn(
            "fork-1",
            Matcher::any_user_contains(FORK_TASK),
            text("Scope: the parser. It is fine.").with_usage(usage),
        ))
        .then(stamps.turn(
            "main-2",
            Matcher::any(),
            text("The fork checked the parser.").with_usage(usage),
        ));
    let h = Harness::anthropic(script).await;
    let session_id = format!("bench-parent-{n:03}");
    h.store
        .create_session(&new_session(&session_id, None))
        .map_err(|e| e.to_string())?;
    for (i, message) in history.iter().enumerate() {
        h.store
            .put_message(&session_id, i as u64, message)
            .map_err(|e| e.to_string())?;
    }
    h.store.flush().map_err(|e| e.to_string())?;

    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env.clone());
    options.session_id = Some(session_id.clone());
    options.limits.budget_tokens = u64::MAX;
    let stop_watch = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The fork's copy: the history, the prompt, the call, placeholders, task.
    let copy_len = history.len() as u64 + 4;
    let watcher = watch_store(
        h.store.clone(),
        session_id.clone(),
        history.len() as u64 + 2,
        copy_len,
        stop_watch.clone(),
    );
    let mut handle = h.submit(FORK_PROMPT, options).await;
    let mut call_started = None;
    let mut fork_started = None;
    let mut fork_iteration = None;
    loop {
        let (at, event) = next_event(&mut handle).await?;
        match &event.kind {
            EventKind::ToolStarted { name, .. }
                if name == "agent" && event.agent_path == "main" =>
            {
                call_started.get_or_insert(at);
            }
            EventKind::SubagentStarted { .. } if event.agent_path == "main/fork-1" => {
                fork_started.get_or_insert(at);
            }
            EventKind::Iteration { .. } if event.agent_path == "main/fork-1" => {
                fork_iteration.get_or_insert(at);
            }
            EventKind::SubagentFinished { status } if *status != RunStatus::Finished => {
                return Err(format!("{} ended {status:?}", event.agent_path));
            }
            _ => {}
        }
        if let Some((status, final_text)) = is_main_end(&event) {
            if status != RunStatus::Finished {
                return Err(format!("run ended {status:?}: {final_text}"));
            }
            break;
        }
    }
    stop_watch.store(true, std::sync::atomic::Ordering::Relaxed);
    let marks = watcher
        .join()
        .map_err(|_| "the store watcher panicked".to_string())?;
    let violations = h.server.take_violations();
    if !violations.is_empty() {
        return Err(format!("scripted server: {violations:?}"));
    }
    let (Some(call), Some(started), Some(iteration)) = (call_started, fork_started, fork_iteration)
    else {
        return Err("missing tool_started, subagent_started or iteration".into());
    };
    let main_request = stamps.get("main-1").ok_or("main request not stamped")?;
    let fork_request = stamps.get("fork-1").ok_or("fork request not stamped")?;
    let recorded = h
        .server
        .requests()
        .into_iter()
        .nth(1)
        .ok_or("no second request")?;
    let fork_body_bytes = recorded.body_len;
    let fork_messages = recorded.messages().len();

    // The parent's history when it called `agent`: the stored messages, the
    // prompt and the response with the call.
    let parent = h.history(&handle.session_id).await;
    let at_call = &parent[..history.len() + 2];
    let steps = fork_steps(&h, &env, at_call, n)?;
    h.runtime.clone().shutdown().await;
    Ok(ForkSample {
        to_started: since(started, call),
        to_iteration: since(iteration, call),
        to_request: since(fork_request, call),
        from_call_written: match marks {
            StoreMarks {
                call_written: Some(written),
                created: Some(created),
                first_message: Some(first),
                copy_written: Some(copied),
            } => Some([
                since(created, written),
                since(first, written),
                since(copied, written),
                since(fork_request, written),
            ]),
            _ => None,
        },
        request_to_request: since(fork_request, main_request),
        fork_body_bytes,
        fork_messages,
        steps,
    })
}

/// The fork's steps, timed one by one outside the runtime.
fn fork_steps(
    h: &Harness,
    env: &AgentEnv,
    at_call: &[Message],
    n: usize,
) -> Result<ForkSteps, String> {
    let call_id = at_call
        .last()
        .and_then(|m| m.tool_calls().next())
        .map(|c| c.id.clone())
        .ok_or("the parent's last message has no call")?;
    let args = AgentCallArgs {
        description: "check the parser".into(),
        prompt: FORK_TASK.into(),
        role: None,
        fork: true,
    };
    let clock = Instant::now();
    let plan = plan_child(
        &AgentSpec::main(25),
        &RoleSet::builtin(),
        &args,
        &call_id,
        at_call,
    )?;
    let plan_time = clock.elapsed();
    let copy = plan.history;

    let child_id = format!("bench-fork-copy-{n:03}");
    let clock = Instant::now();
    h.store
        .create_session(&new_session(&child_id, Some("bench-parent-000")))
        .map_err(|e| e.to_string())?;
    let create_session = clock.elapsed();

    let clock = Instant::now();
    let mut copy_json_bytes = 0;
    for message in &copy {
        copy_json_bytes += serde_json::to_vec(message)
            .map_err(|e| e.to_string())?
            .len();
    }
    let encode_only = clock.elapsed();

    let clock = Instant::now();
    for (i, message) in copy.iter().enumerate() {
        h.store
            .put_message(&child_id, i as u64, message)
            .map_err(|e| e.to_string())?;
    }
    let save_copy = clock.elapsed();
    let clock = Instant::now();
    h.store.flush().map_err(|e| e.to_string())?;
    let flush = clock.elapsed();

    // What the fork would write if its session referred to the parent's
    // stored messages instead of copying them: the placeholders and the task.
    let own_id = format!("bench-fork-own-{n:03}");
    h.store
        .create_session(&new_session(&own_id, Some("bench-parent-000")))
        .map_err(|e| e.to_string())?;
    let clock = Instant::now();
    for (i, message) in copy[at_call.len()..].iter().enumerate() {
        h.store
            .put_message(&own_id, (at_call.len() + i) as u64, message)
            .map_err(|e| e.to_string())?;
    }
    h.store.flush().map_err(|e| e.to_string())?;
    let own_messages = clock.elapsed();

    let clock = Instant::now();
    let messages = copy.to_vec();
    let clone_for_request = clock.elapsed();
    let mut tools = env.registry().definitions();
    tools.push(env.agent_tool());
    let request = ChatRequest {
        system: env.system().clone(),
        messages,
        tools,
        session_id: None,
    };
    let clock = Instant::now();
    let body =
        anthropic::request_body(&h.resolved_provider(), &request).map_err(|e| e.to_string())?;
    let request_body = clock.elapsed();
    let clock = Instant::now();
    let parsed: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let server_parse = clock.elapsed();
    std::hint::black_box(parsed);
    Ok(ForkSteps {
        plan_child: plan_time,
        create_session,
        encode_only,
        save_copy,
        flush,
        own_messages,
        clone_for_request,
        request_body,
        server_parse,
        copy_messages: copy.len(),
        copy_json_bytes,
    })
}

async fn fork_part(samples: usize) -> Result<(), String> {
    let history = parent_history();
    let json_bytes: usize = history
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
        .sum();
    println!(
        "\n== fork: a stored session of {PARENT_MESSAGES} messages ({:.2} MB of JSON, {:.0} bytes \
         per message) continued; its response makes one fork call; {samples} runs after 1 warm-up",
        json_bytes as f64 / 1e6,
        json_bytes as f64 / PARENT_MESSAGES as f64
    );
    println!("{}", machine_line());
    fork_run(&history, 0).await?;
    let mut runs = Vec::with_capacity(samples);
    for n in 1..=samples {
        runs.push(fork_run(&history, n).await?);
    }
    let pick =
        |f: &dyn Fn(&ForkSample) -> Duration| -> Vec<Duration> { runs.iter().map(f).collect() };
    println!("end to end, ms (events stamped on receipt; requests stamped by the server):");
    show_ms(
        "main tool_started(agent) → fork subagent_started",
        &pick(&|s| s.to_started),
    );
    show_ms(
        "main tool_started(agent) → fork iteration 1",
        &pick(&|s| s.to_iteration),
    );
    show_ms(
        "main tool_started(agent) → fork request at the server",
        &pick(&|s| s.to_request),
    );
    show_ms(
        "main request at the server → fork request at the server",
        &pick(&|s| s.request_to_request),
    );
    let marks: Vec<[Duration; 4]> = runs.iter().filter_map(|s| s.from_call_written).collect();
    println!(
        "from the store, polled every {} µs by another thread ({} of {} runs complete):",
        WATCH_EVERY.as_micros(),
        marks.len(),
        runs.len()
    );
    for (k, name) in [
        "parent's call message written → fork session created",
        "parent's call message written → fork's first message written",
        "parent's call message written → fork's whole copy written",
        "parent's call message written → fork request at the server",
    ]
    .into_iter()
    .enumerate()
    {
        show_ms(name, &marks.iter().map(|m| m[k]).collect::<Vec<_>>());
    }
    let steps = |f: &dyn Fn(&ForkSteps) -> Duration| -> Vec<Duration> {
        runs.iter().map(|s| f(&s.steps)).collect()
    };
    if let Some(first) = runs.first() {
        println!(
            "fork request: {} messages, {:.2} MB; fork's copy: {} messages, {:.2} MB of JSON",
            first.fork_messages,
            first.fork_body_bytes as f64 / 1e6,
            first.steps.copy_messages,
            first.steps.copy_json_bytes as f64 / 1e6
        );
    }
    println!("the same steps timed alone, ms:");
    show_ms(
        "plan_child (deep copy + placeholders), before tool_started",
        &steps(&|s| s.plan_child),
    );
    show_ms("create_session of the child", &steps(&|s| s.create_session));
    show_ms(
        "encode the copy to JSON only (part of the next line)",
        &steps(&|s| s.encode_only),
    );
    show_ms("put_message × copy (no flush)", &steps(&|s| s.save_copy));
    show_ms("flush (fsync) after the copy", &steps(&|s| s.flush));
    show_ms(
        "put_message × 2 (placeholders, task) + flush, new session",
        &steps(&|s| s.own_messages),
    );
    show_ms(
        "copy the history into the request (to_vec)",
        &steps(&|s| s.clone_for_request),
    );
    show_ms(
        "encode the request body (anthropic::request_body)",
        &steps(&|s| s.request_body),
    );
    show_ms(
        "parse the body as JSON (what the server does first)",
        &steps(&|s| s.server_parse),
    );
    println!("{}", machine_line());
    Ok(())
}

// ---------------------------------------------------------------------------

fn wanted_parts() -> Result<Vec<&'static str>, String> {
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    if named.is_empty() {
        return Ok(PARTS.to_vec());
    }
    for name in &named {
        if !PARTS.contains(&name.as_str()) {
            return Err(format!(
                "unknown part {name:?}; parts: {}",
                PARTS.join(", ")
            ));
        }
    }
    Ok(PARTS
        .iter()
        .copied()
        .filter(|part| named.iter().any(|n| n == part))
        .collect())
}

async fn bench(parts: Vec<&'static str>, start: Memory) -> Result<(), String> {
    let subagents = count_from_env("TROUPE_BENCH_SUBAGENTS", DEFAULT_SUBAGENTS)?;
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_PARALLEL_SAMPLES)?;
    let fork_samples = count_from_env("TROUPE_BENCH_FORK_SAMPLES", DEFAULT_FORK_SAMPLES)?;
    for part in parts {
        match part {
            "memory" => memory_part(subagents, start).await?,
            "parallel" => parallel_part(samples).await?,
            _ => fork_part(fork_samples).await?,
        }
    }
    Ok(())
}

fn main() {
    if let Ok(spec) = std::env::var(SERVE_VAR) {
        if let Err(err) = serve(&spec) {
            eprintln!("agent_tree server: {err}");
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
            eprintln!("agent_tree: {err}");
            std::process::exit(1);
        }
    };
    let parts = match wanted_parts() {
        Ok(parts) => parts,
        Err(err) => {
            eprintln!("agent_tree: {err}");
            std::process::exit(1);
        }
    };
    println!("agent_tree: {}", parts.join(", "));
    println!("{}", machine_line());
    if let Err(err) = run_on_tokio_workers(bench(parts, start)) {
        eprintln!("agent_tree: {err}");
        std::process::exit(1);
    }
}
