//! Benchmark: MCP servers (release build of `troupe`), against the scripted
//! model server in this process and `tests/mcp/slow_server.py`, a
//! standard-library MCP server over stdio that sleeps
//! `SLOW_MCP_READY_SECS` (0.75 s here) before it serves and records the
//! moment it is ready (CLOCK_MONOTONIC).
//!
//! - start → first model request of `troupe run --json x`, timed from just
//!   before the spawn to the server's admission of the request
//!   (`bench::arrivals`), five kinds taken round by round in rotating order:
//!   embedded without MCP; embedded with the slow server (also: server ready
//!   → first request, the time the client needs on top of the server); on a
//!   daemon already up, without MCP; on that daemon with the slow server of a
//!   project whose earlier run connected it (shared); and the first run of a
//!   fresh project on that daemon (the server starts for it). For the same
//!   runs: the request's admission → the process has exited (`wait` returned),
//!   which with an MCP server includes closing it.
//! - a turn calling an MCP tool against a turn calling `read_file`: one
//!   embedded run of 20 turns each, the time between consecutive model
//!   requests (tool call, events, durable writes, next request).
//! - the client's overhead of one MCP tool call over the server's own time:
//!   `McpTool::execute` in this process on a live session (through
//!   `McpHub`, as the runtime calls it) against bare JSON-RPC lines written
//!   to the same server's pipe; each minus the time the server reports it
//!   spent in the call.
//!
//! The binary is `TROUPE_BIN` or `target/release/troupe` (build it first:
//! `cargo build --release -p troupe-cli`); `python3` must be on `PATH`.
//! `TROUPE_BENCH_SAMPLES` (default 10) sets the rounds of the start figures,
//! `TROUPE_BENCH_MCP_CALLS` (default 200) the calls of the overhead figure.
//! Nothing here asserts a timing; figures go to `docs/performance.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use troupe_actors::McpHub;
use troupe_config::TrustStore;
use troupe_mcp::{McpServerSpec, McpTransportSpec};
use troupe_protocol::model::ToolOutputPart;
use troupe_scripted::{Script, ScriptedServer, ServerConfig, text, tool_call};
use troupe_tests::bench::arrivals::ArrivalStamps;
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, round_order};
use troupe_tools::background::BackgroundTasks;
use troupe_tools::{Tool, ToolContext};

/// How long one command may take.
const WAIT: Duration = Duration::from_secs(120);

/// How long the slow server sleeps before it serves.
const READY_SECS: &str = "0.75";

/// Turns of the per-turn comparison.
const TURNS: usize = 20;

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = bench() {
        eprintln!("mcp: {err}");
        std::process::exit(1);
    }
}

fn bench() -> Result<(), String> {
    let rounds = count_from_env("TROUPE_BENCH_SAMPLES", 10)?;
    let calls = count_from_env("TROUPE_BENCH_MCP_CALLS", 200)?;
    let bin = binary()?;
    println!("{}", machine_line());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    tokio.block_on(async move {
        start_times(&bin, rounds).await?;
        turns(&bin).await?;
        call_overhead(calls).await
    })
}

/// The slow server's script.
fn slow_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/slow_server.py")
}

/// Seconds on CLOCK_MONOTONIC, the clock of Python's `time.monotonic()`
/// and of `Instant` on Linux.
fn monotonic_secs() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

/// Maps `Instant`s to CLOCK_MONOTONIC seconds.
struct Clock {
    at: Instant,
    secs: f64,
}

impl Clock {
    fn new() -> Self {
        Self {
            at: Instant::now(),
            secs: monotonic_secs(),
        }
    }

    fn secs(&self, instant: Instant) -> f64 {
        self.secs + instant.duration_since(self.at).as_secs_f64()
    }
}

/// A home (HOME, config, data directory) with projects in it.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Result<Self, String> {
        Ok(Self {
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn ready_file(&self) -> PathBuf {
        self.dir.path().join("ready")
    }

    /// A project `name`, with the slow server configured when `mcp` (and the
    /// project trusted, as its server runs a command).
    fn project(&self, name: &str, mcp: bool, ready_secs: &str) -> Result<PathBuf, String> {
        let root = self.dir.path().join(name);
        std::fs::create_dir_all(root.join(".troupe")).map_err(|e| e.to_string())?;
        for turn in 0..TURNS {
            std::fs::write(root.join(format!("note-{turn}.txt")), "a small file\n")
                .map_err(|e| e.to_string())?;
        }
        if mcp {
            let lit = |s: &Path| Value::String(s.display().to_string()).to_string();
            let config = format!(
                "[mcp_servers.slow]\ncommand = \"python3\"\nargs = [{}]\n\
                 env = {{ SLOW_MCP_READY_SECS = \"{ready_secs}\", SLOW_MCP_READY_FILE = {} }}\n",
                lit(&slow_server()),
                lit(&self.ready_file())
            );
            std::fs::write(root.join(".troupe/config.toml"), config).map_err(|e| e.to_string())?;
            TrustStore::new(&self.data())
                .set(&root, true)
                .map_err(|e| e.to_string())?;
        }
        Ok(root)
    }

    /// The last moment the slow server was ready, CLOCK_MONOTONIC seconds.
    fn last_ready(&self) -> Option<f64> {
        std::fs::read_to_string(self.ready_file())
            .ok()?
            .lines()
            .last()?
            .trim()
            .parse()
            .ok()
    }

    /// `troupe ARGS` in `project` of this home, speaking to `server`.
    fn command(
        &self,
        bin: &Path,
        server: &ScriptedServer,
        project: &Path,
        args: &[&str],
    ) -> Command {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("TROUPE_HOME", self.data())
            .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
            .env("ANTHROPIC_API_KEY", "bench-key")
            .current_dir(project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }
}

/// When a run was spawned and when its process had exited.
struct Timed {
    spawned: Instant,
    exited: Instant,
}

/// Spawns `command` and waits for it.
async fn timed_run(command: Command) -> Result<Timed, String> {
    let mut command = tokio::process::Command::from(command);
    let spawned = Instant::now();
    let status = tokio::time::timeout(WAIT, command.status())
        .await
        .map_err(|_| "troupe run did not end in time")?
        .map_err(|e| e.to_string())?;
    let exited = Instant::now();
    if !status.success() {
        return Err(format!("troupe run exited {status}"));
    }
    Ok(Timed { spawned, exited })
}

/// `troupe serve` in `home`, stopped on drop.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain signal delivery to the daemon this bench started.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn serve(home: &Home, bin: &Path, server: &ScriptedServer) -> Result<Daemon, String> {
    let child = home
        .command(bin, server, home.dir.path(), &["serve"])
        .spawn()
        .map_err(|e| e.to_string())?;
    let daemon = Daemon(child);
    let deadline = Instant::now() + WAIT;
    while !home.data().join("daemon.json").exists() {
        if Instant::now() > deadline {
            return Err("the daemon did not start".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(daemon)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    EmbeddedPlain,
    EmbeddedMcp,
    DaemonPlain,
    DaemonShared,
    DaemonNewProject,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::EmbeddedPlain => "embedded, no MCP server",
            Kind::EmbeddedMcp => "embedded, slow MCP server",
            Kind::DaemonPlain => "daemon up, no MCP server",
            Kind::DaemonShared => "daemon up, slow MCP server already connected",
            Kind::DaemonNewProject => "daemon up, first run of a project (server starts)",
        }
    }
}

async fn start_times(bin: &Path, rounds: usize) -> Result<(), String> {
    let kinds = [
        Kind::EmbeddedPlain,
        Kind::EmbeddedMcp,
        Kind::DaemonPlain,
        Kind::DaemonShared,
        Kind::DaemonNewProject,
    ];
    let stamps = ArrivalStamps::new();
    let mut script = Script::new();
    for _ in 0..(rounds * kinds.len() + 1) {
        script = script.then(stamps.turn(text("ok")));
    }
    let server = ScriptedServer::start_with(script, ServerConfig::non_strict())
        .await
        .map_err(|e| e.to_string())?;
    let clock = Clock::new();

    let embedded = Home::new()?;
    let embedded_plain = embedded.project("plain", false, READY_SECS)?;
    let embedded_mcp = embedded.project("mcp", true, READY_SECS)?;
    let shared = Home::new()?;
    let daemon_plain = shared.project("plain", false, READY_SECS)?;
    let daemon_mcp = shared.project("mcp", true, READY_SECS)?;
    let _daemon = serve(&shared, bin, &server)?;
    // The project's first run on the daemon connects its server.
    let first = timed_run(shared.command(bin, &server, &daemon_mcp, &["run", "--json", "x"]));
    first.await?;

    let mut to_request: Vec<(Kind, Vec<Duration>)> =
        kinds.iter().map(|kind| (*kind, Vec::new())).collect();
    let mut to_exit: Vec<(Kind, Vec<Duration>)> =
        kinds.iter().map(|kind| (*kind, Vec::new())).collect();
    let mut ready_to_request = Vec::new();
    let mut spawn_to_ready = Vec::new();
    let mut daemon_ready_to_request = Vec::new();
    for round in 0..rounds {
        for kind in round_order(&kinds, round) {
            let fresh;
            let (home, project, args): (&Home, &Path, &[&str]) = match kind {
                Kind::EmbeddedPlain => (&embedded, &embedded_plain, &["run", "--no-daemon", "x"]),
                Kind::EmbeddedMcp => (&embedded, &embedded_mcp, &["run", "--no-daemon", "x"]),
                Kind::DaemonPlain => (&shared, &daemon_plain, &["run", "x"]),
                Kind::DaemonShared => (&shared, &daemon_mcp, &["run", "x"]),
                Kind::DaemonNewProject => {
                    fresh = shared.project(&format!("new-{round}"), true, READY_SECS)?;
                    (&shared, &fresh, &["run", "x"])
                }
            };
            let before = stamps.times().len();
            let Timed { spawned, exited } =
                timed_run(home.command(bin, &server, project, args)).await?;
            let admitted = *stamps
                .times()
                .get(before)
                .ok_or("the run sent no model request")?;
            let took = admitted.duration_since(spawned);
            if let Some((_, samples)) = to_request.iter_mut().find(|(k, _)| *k == kind) {
                samples.push(took);
            }
            if let Some((_, samples)) = to_exit.iter_mut().find(|(k, _)| *k == kind) {
                samples.push(exited.duration_since(admitted));
            }
            let ready = || home.last_ready().ok_or("the slow server never got ready");
            let after_ready =
                |ready: f64| Duration::from_secs_f64((clock.secs(admitted) - ready).max(0.0));
            match kind {
                Kind::EmbeddedMcp => {
                    let ready = ready()?;
                    ready_to_request.push(after_ready(ready));
                    spawn_to_ready.push(Duration::from_secs_f64(
                        (ready - clock.secs(spawned)).max(0.0),
                    ));
                }
                Kind::DaemonNewProject => daemon_ready_to_request.push(after_ready(ready()?)),
                _ => {}
            }
        }
    }
    println!("\nstart → first model request, ms ({rounds} rounds)");
    for (kind, samples) in &to_request {
        print(kind.label(), samples);
    }
    print(
        "embedded, slow MCP server: spawn → server ready",
        &spawn_to_ready,
    );
    print(
        "embedded, slow MCP server: server ready → first request",
        &ready_to_request,
    );
    print(
        "daemon up, first run of a project: server ready → first request",
        &daemon_ready_to_request,
    );
    println!("\nthe run's only request → its process has exited, ms ({rounds} rounds)");
    for (kind, samples) in &to_exit {
        print(kind.label(), samples);
    }
    Ok(())
}

/// One embedded run of [`TURNS`] turns calling `tool` with `args(turn)`,
/// then an answer; the gaps between consecutive model requests.
async fn turn_gaps(
    bin: &Path,
    home: &Home,
    project: &Path,
    tool: &str,
    args: impl Fn(usize) -> Value,
) -> Result<Vec<Duration>, String> {
    let stamps = ArrivalStamps::new();
    let mut script = Script::new();
    for turn in 0..TURNS {
        // Arguments differ from turn to turn: repeating a call is a limit.
        script = script.then(stamps.turn(tool_call(tool, args(turn))));
    }
    script = script.then(stamps.turn(text("done")));
    let server = ScriptedServer::start_with(script, ServerConfig::non_strict())
        .await
        .map_err(|e| e.to_string())?;
    timed_run(home.command(
        bin,
        &server,
        project,
        &["run", "--no-daemon", "--mode", "bypass", "x"],
    ))
    .await?;
    let times = stamps.times();
    if times.len() != TURNS + 1 {
        return Err(format!(
            "{tool}: {} requests, not {}",
            times.len(),
            TURNS + 1
        ));
    }
    // The first gap includes the catalogue's first build; leave it out.
    Ok(times
        .windows(2)
        .skip(1)
        .map(|w| w[1].duration_since(w[0]))
        .collect())
}

async fn turns(bin: &Path) -> Result<(), String> {
    let home = Home::new()?;
    let project = home.project("mcp", true, "0")?;
    println!("\nper turn, one embedded run of {TURNS} turns each, ms between model requests");
    let mut mcp = Vec::new();
    let mut builtin = Vec::new();
    for round in 0..2 {
        for tool in round_order(&["mcp", "read_file"], round) {
            if tool == "mcp" {
                let args = |turn: usize| json!({"ms": 0, "tag": format!("t{turn}")});
                mcp.extend(turn_gaps(bin, &home, &project, "mcp__slow__work", args).await?);
            } else {
                builtin.extend(
                    turn_gaps(
                        bin,
                        &home,
                        &project,
                        "read_file",
                        |turn: usize| json!({"path": format!("note-{turn}.txt")}),
                    )
                    .await?,
                );
            }
        }
    }
    print("turn with mcp__slow__work {ms: 0} (read-only)", &mcp);
    print("turn with read_file of a one-line file", &builtin);
    Ok(())
}

/// The server's own time in a `work` answer (`… in US us`).
fn server_time(answer: &str) -> Option<Duration> {
    let (_, rest) = answer.rsplit_once(" in ")?;
    let us: u64 = rest.split(' ').next()?.parse().ok()?;
    Some(Duration::from_micros(us))
}

fn slow_spec(dir: &Path) -> McpServerSpec {
    McpServerSpec {
        name: "slow".into(),
        transport: McpTransportSpec::Stdio {
            command: "python3".into(),
            args: vec![slow_server().display().to_string()],
            env: vec![("SLOW_MCP_READY_SECS".into(), "0".into())],
            cwd: dir.to_path_buf(),
        },
        startup_grace: Duration::from_secs(3),
        project_root: Some(dir.to_path_buf()),
        redaction: Default::default(),
    }
}

async fn call_overhead(calls: usize) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let hub = McpHub::start(vec![slow_spec(dir.path())], None).await?;
    hub.state().wait_settled(Duration::from_secs(30)).await;
    let (_, tools) = hub.state().tools();
    let tool = tools
        .into_iter()
        .find(|t| t.name() == "mcp__slow__work")
        .ok_or("the slow server offered no work tool")?;
    let ctx = ToolContext {
        call_id: "bench".into(),
        sandbox: Arc::new(
            troupe_paths::sandbox::PathSandbox::new(dir.path(), &[], None)
                .map_err(|e| e.to_string())?,
        ),
        os_sandbox: Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
        spill_dir: dir.path().join("spill"),
        cancel: CancellationToken::new(),
        child_env: Arc::new(Vec::new()),
        background: Arc::new(BackgroundTasks::new()),
        outside_read_approved: false,
        reach: None,
    };
    let mut raw = RawServer::start(dir.path()).await?;
    println!("\nMCP tool call, {calls} calls each after 20 warm-up calls, ms");
    for ms in [0u64, 10] {
        let mut product = Vec::new();
        let mut bare = Vec::new();
        let mut own = Vec::new();
        for i in 0..(calls + 20) {
            // Alternate which client goes first.
            for product_first in [i % 2 == 0, i % 2 == 1] {
                let (wall, spent) = if product_first {
                    product_call(tool.as_ref(), &ctx, ms).await?
                } else {
                    raw.call(ms).await?
                };
                if i < 20 {
                    continue;
                }
                let overhead = wall.saturating_sub(spent);
                if product_first {
                    product.push(overhead);
                    own.push(spent);
                } else {
                    bare.push(overhead);
                }
            }
        }
        print(&format!("work {{ms: {ms}}}: server's own time"), &own);
        print(
            &format!("work {{ms: {ms}}}: McpTool::execute over the server's time"),
            &product,
        );
        print(
            &format!("work {{ms: {ms}}}: bare JSON-RPC line over the server's time"),
            &bare,
        );
    }
    raw.stop().await;
    hub.shutdown().await;
    Ok(())
}

/// One `work` call through the product's tool: wall time, server's own time.
async fn product_call(
    tool: &dyn Tool,
    ctx: &ToolContext,
    ms: u64,
) -> Result<(Duration, Duration), String> {
    let started = Instant::now();
    let output = tool.execute(json!({"ms": ms}), ctx).await;
    let wall = started.elapsed();
    let text: String = output
        .content
        .iter()
        .filter_map(|part| match part {
            ToolOutputPart::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if output.is_error {
        return Err(format!("the call failed: {text}"));
    }
    let spent = server_time(&text).ok_or_else(|| format!("no time in {text}"))?;
    Ok((wall, spent))
}

/// The slow server spoken to directly: JSON-RPC lines on its pipes.
struct RawServer {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl RawServer {
    async fn start(dir: &Path) -> Result<Self, String> {
        let mut child = tokio::process::Command::new("python3")
            .arg(slow_server())
            .env("SLOW_MCP_READY_SECS", "0")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut server = Self {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
            next_id: 0,
        };
        server
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}),
            )
            .await?;
        server
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(server)
    }

    async fn send(&mut self, message: &Value) -> Result<(), String> {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        let line = self
            .lines
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the server closed its output")?;
        serde_json::from_str(&line).map_err(|e| e.to_string())
    }

    /// One `tools/call` of `work`: wall time, server's own time.
    async fn call(&mut self, ms: u64) -> Result<(Duration, Duration), String> {
        let started = Instant::now();
        let answer = self
            .request(
                "tools/call",
                json!({"name": "work", "arguments": {"ms": ms}}),
            )
            .await?;
        let wall = started.elapsed();
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .ok_or_else(|| format!("no text in {answer}"))?;
        let spent = server_time(text).ok_or_else(|| format!("no time in {text}"))?;
        Ok((wall, spent))
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}

fn print(label: &str, samples: &[Duration]) {
    match Summary::of_millis(samples) {
        Some(summary) => println!("  {label}: {summary}"),
        None => println!("  {label}: no samples"),
    }
}

fn binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("TROUPE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?
        .join("troupe");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: build it first with `cargo build --release -p troupe-cli`",
            bin.display()
        ))
    }
}
