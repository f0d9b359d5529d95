//! Benchmark: the real `troupe` binary (release build) against the scripted
//! model server (SPEC §14):
//!
//! - `troupe --version` ≤ 10 ms (spawn to exit);
//! - start to first model request ≤ 30 ms (embedded run ≤ 100 ms): from just
//!   before spawning `troupe run` to the server's admission of the request
//!   (stamped by the scripted server when it has received and checked the
//!   body: `bench::arrivals`);
//! - exit ≤ 10 ms after the final answer: from the admission of the last
//!   request (the server answers at once, so this includes sending and
//!   reading the final response) to the process's exit, as seen by `wait4`;
//! - peak memory of a single run ≤ 25 MB RSS: `ru_maxrss` of the child from
//!   `wait4` (the largest of the process and the children it waited for).
//!
//! Five kinds of run: `x` (one model call that answers text at once) in a
//! small project that is not a git repository; the same in a git repository
//! of `TROUPE_BENCH_GIT_FILES` committed files (default 10,000), because the
//! environment part of the system prompt runs `git status` before the first
//! request; the same as the first with OTLP export on
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` at a loopback collector in this process,
//! `bench::collector`), because `troupe` flushes its spans before it exits; the
//! same with the endpoint at a port nobody listens on (a collector that is
//! down: the flush at exit meets a refused connection); and a run with tools (`read_file`, `glob`, `grep`, `bash` in bypass mode, then
//! the answer) in the small project. Every run opens its session store (sled)
//! in `TROUPE_HOME`, writes the run durably and keeps its spans there (the
//! local span store is always on). Each run gets fresh, empty
//! `HOME`, XDG directories and `TROUPE_HOME` in a temporary directory; the
//! small project (with a `.troupe` directory) is fresh too, the git repository
//! is made once. The scripted server runs in this process on one tokio worker;
//! the binary is `TROUPE_BIN` or `troupe` beside this bench's directory
//! (`target/release/troupe`; `tests/benches/run-all.sh` builds it).
//!
//! Also printed, from the first request of each kind: the fixed request
//! prefix (SPEC §14: tool definitions + stable system prompt ≤ 10 KB); and,
//! from one more untimed run of each kind through a loopback relay that counts
//! connections (`bench::proxy`), how many connections the binary opened to
//! the model server (SPEC §14: one keep-alive connection per provider).
//!
//! To explain the start time, steps of the binary's setup are also timed in
//! this process: building the provider's HTTP client
//! (`llm::http::build_client`, first call in the process and later calls),
//! `git status` within its budget plus the system prompt
//! (`troupe_loader::read_git_status`, `troupe_loader::build_system_prompt`) in each project,
//! and building the telemetry pipeline without and with OTLP export
//! (`telemetry::Telemetry::builder(..).build()`).
//!
//! Environment: `TROUPE_BENCH_SAMPLES` (default 30), `TROUPE_BENCH_GIT_FILES`
//! (default 10000). Figures go to `docs/performance.md`, never into
//! assertions.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_llm::http::build_client;
use troupe_loader::{GIT_STATUS_BUDGET, build_system_prompt, read_git_status};
use troupe_scripted::{Script, ScriptedServer, ServerConfig, text, tool_call};
use troupe_telemetry::{MemorySpanSink, Telemetry, TelemetrySettings};
use troupe_tests::bench::arrivals::ArrivalStamps;
use troupe_tests::bench::collector::OtlpCollector;
use troupe_tests::bench::proxy::CountingProxy;
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::{kib_to_mib, machine_line};
use troupe_tests::bench::{count_from_env, invoked_as_benchmark};

/// Measured runs of each kind unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 30;
/// Runs of each kind before measuring (page cache, dynamic loader).
const WARMUP_RUNS: usize = 3;
/// Exit code of a finished run (SPEC §1.1).
const EXIT_FINISHED: i32 = 0;
/// Final answer of every scripted run.
const ANSWER: &str = "Done looking.";
/// Committed files of the git repository unless `TROUPE_BENCH_GIT_FILES` says
/// otherwise.
const DEFAULT_GIT_FILES: usize = 10_000;
/// Files per directory of the git repository.
const FILES_PER_DIR: usize = 100;
/// The standard variable naming the collector (SPEC §1.2).
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Timed calls of each in-process setup step.
const STEP_SAMPLES: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `troupe run x`: one model call answering text.
    Trivial,
    /// `troupe run x` in the git repository.
    TrivialInGitRepo,
    /// `troupe run x` with OTLP export to the loopback collector.
    TrivialWithExport,
    /// `troupe run x` with OTLP export to a port nobody listens on.
    TrivialWithRefusedExport,
    /// `troupe run --mode bypass …`: four tool turns, then the answer.
    WithTools,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Trivial => "troupe run x (one text answer; not a git repository)",
            Self::TrivialInGitRepo => "troupe run x (one text answer; in the git repository)",
            Self::TrivialWithExport => {
                "troupe run x (one text answer; OTLP export to a loopback collector)"
            }
            Self::TrivialWithRefusedExport => {
                "troupe run x (one text answer; OTLP export to a collector that is down)"
            }
            Self::WithTools => "troupe run --mode bypass (read_file, glob, grep, bash, answer)",
        }
    }

    fn script(self, stamps: &ArrivalStamps) -> Script {
        let responses = match self {
            Self::Trivial
            | Self::TrivialInGitRepo
            | Self::TrivialWithExport
            | Self::TrivialWithRefusedExport => vec![text(ANSWER)],
            Self::WithTools => vec![
                tool_call("read_file", json!({"path": "README.md"})),
                tool_call("glob", json!({"pattern": "**/*.rs"})),
                tool_call(
                    "grep",
                    json!({"pattern": "fn \\w+", "output_mode": "content"}),
                ),
                tool_call("bash", json!({"command": "echo checked && ls src"})),
                text(ANSWER),
            ],
        };
        responses
            .into_iter()
            .fold(Script::new(), |script, r| script.then(stamps.turn(r)))
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Self::Trivial
            | Self::TrivialInGitRepo
            | Self::TrivialWithExport
            | Self::TrivialWithRefusedExport => &["run", "x"],
            Self::WithTools => &["run", "--mode", "bypass", "Look around the project."],
        }
    }
}

fn write_file(root: &Path, path: &str, body: &str) -> Result<(), String> {
    let path = root.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    std::fs::write(path, body).map_err(|e| e.to_string())
}

/// A small crate with a `.troupe` directory in `root`.
fn small_project(root: &Path) -> Result<(), String> {
    std::fs::create_dir_all(root.join(".troupe")).map_err(|e| e.to_string())?;
    write_file(root, "README.md", "# sample\n\nA small crate to look at.\n")?;
    write_file(
        root,
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\npub fn twice(a: i32) -> i32 {\n    add(a, a)\n}\n",
    )?;
    write_file(
        root,
        "src/main.rs",
        "fn main() {\n    println!(\"{}\", sample::twice(2));\n}\n",
    )
}

fn git(root: &Path, args: &[&str]) -> Result<(), String> {
    let status = Command::new("git")
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("git {args:?} exited {status}"))
    }
}

/// The small project plus `files` generated files, committed to a new git
/// repository.
fn git_project(files: usize) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path();
    small_project(root)?;
    for i in 0..files {
        let path = format!("generated/d{:03}/f{i:05}.txt", i / FILES_PER_DIR);
        write_file(root, &path, &format!("generated file {i}\n"))?;
    }
    git(root, &["init", "-q"])?;
    git(root, &["add", "-A"])?;
    git(
        root,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "-m",
            "generated",
        ],
    )?;
    Ok(dir)
}

/// A throw-away home, and the project a run works in (fresh, or shared).
struct Sandbox {
    home: tempfile::TempDir,
    fresh_project: Option<tempfile::TempDir>,
    project: PathBuf,
}

impl Sandbox {
    /// A fresh home; the project is `shared`, or a fresh small project.
    fn new(shared: Option<&Path>) -> Result<Self, String> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (fresh_project, project) = match shared {
            Some(path) => (None, path.to_path_buf()),
            None => {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                small_project(dir.path())?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        Ok(Self {
            home,
            fresh_project,
            project,
        })
    }

    fn command(
        &self,
        bin: &Path,
        server: &ScriptedServer,
        args: &[&str],
    ) -> Result<Command, String> {
        let home = self.home.path();
        let mut command = Command::new(bin);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_DATA_HOME", home.join("share"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("TROUPE_HOME", home.join("troupe"))
            .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
            .env("ANTHROPIC_API_KEY", "bench-key")
            // Embedded runs: this bench times the process that runs them
            // (the daemon bench times runs through a daemon).
            .env("TROUPE_NO_DAEMON", "1")
            .args(args)
            .current_dir(&self.project)
            .stdin(Stdio::null())
            .stdout(File::create(home.join("stdout")).map_err(|e| e.to_string())?)
            .stderr(File::create(home.join("stderr")).map_err(|e| e.to_string())?);
        Ok(command)
    }

    fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.home.path().join(name)).unwrap_or_default()
    }
}

/// How a child ended, from `wait4`.
struct Exit {
    code: Option<i32>,
    at: Instant,
    max_rss_kib: u64,
}

/// Waits for the child `pid` with `wait4`, so its resource usage comes back
/// with its status.
fn wait4(pid: u32) -> Result<Exit, String> {
    let pid = libc::pid_t::try_from(pid).map_err(|e| e.to_string())?;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is a plain C struct for which all-zero bytes are valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live, writable locals of the right types.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4({pid}): {err}"));
        }
    }
    let at = Instant::now();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // Linux reports ru_maxrss in KiB.
    let max_rss_kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    Ok(Exit {
        code,
        at,
        max_rss_kib,
    })
}

/// One measured run of the binary.
struct RunSample {
    to_first_request: Duration,
    last_request_to_exit: Duration,
    total: Duration,
    max_rss_kib: u64,
    prefix: Prefix,
    /// Model requests of the run.
    requests: usize,
    /// Connections opened to the model server (relayed runs only).
    connections: Option<u64>,
}

/// Sizes of the first request's parts (SPEC §14: the fixed request prefix,
/// tool definitions + system prompt before project instructions, ≤ 10 KB).
/// The projects have no instruction files, so the stable system block is all
/// fixed prompt.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    /// JSON bytes of `tools`.
    tools: usize,
    /// JSON bytes of the first (stable, cached) `system` block.
    stable_system: usize,
    /// JSON bytes of the second `system` block (environment), if any.
    environment: usize,
    /// The whole body.
    body: usize,
    /// What the environment block says about git.
    git: GitLine,
}

/// What the environment part of the first request says about git (the
/// wording of `prompt::assemble_environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitLine {
    /// `git status` answered within its budget and is in the prompt.
    Collected,
    /// `git status` did not answer within its budget (15 ms).
    TooSlow,
    /// Not a git repository.
    NotRepository,
    /// None of those (the wording changed).
    Unknown,
}

impl GitLine {
    fn of(environment: &str) -> Self {
        if environment.contains("Git status: not collected") {
            Self::TooSlow
        } else if environment.contains("Not a git repository.") {
            Self::NotRepository
        } else if environment.contains("\nGit status:\n") {
            Self::Collected
        } else {
            Self::Unknown
        }
    }
}

impl Prefix {
    fn of(body: &serde_json::Value, body_len: usize) -> Self {
        let bytes = |value: &serde_json::Value| {
            if value.is_null() {
                0
            } else {
                serde_json::to_vec(value).map_or(0, |v| v.len())
            }
        };
        Self {
            tools: bytes(&body["tools"]),
            stable_system: bytes(&body["system"][0]),
            environment: bytes(&body["system"][1]),
            body: body_len,
            git: GitLine::of(body["system"][1]["text"].as_str().unwrap_or_default()),
        }
    }

    fn fixed(&self) -> usize {
        self.tools + self.stable_system
    }
}

fn run_once(
    bin: &Path,
    tokio: &tokio::runtime::Runtime,
    kind: Kind,
    project: Option<&Path>,
    collector: &OtlpCollector,
    relayed: bool,
) -> Result<RunSample, String> {
    let stamps = ArrivalStamps::new();
    let server = tokio
        .block_on(ScriptedServer::start_with(
            kind.script(&stamps),
            // Violations are checked below and reported as the run's error.
            ServerConfig::non_strict(),
        ))
        .map_err(|e| format!("scripted server: {e}"))?;
    let sandbox = Sandbox::new(project)?;
    let mut command = sandbox.command(bin, &server, kind.args())?;
    let proxy = if relayed {
        let proxy = tokio
            .block_on(CountingProxy::start(server.addr()))
            .map_err(|e| format!("relay: {e}"))?;
        command.env("ANTHROPIC_BASE_URL", format!("http://{}", proxy.addr()));
        Some(proxy)
    } else {
        None
    };
    if kind == Kind::TrivialWithExport {
        command.env(ENDPOINT_VAR, collector.endpoint());
    }
    if kind == Kind::TrivialWithRefusedExport {
        // A port that was just closed: connections to it are refused.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = closed.local_addr().map_err(|e| e.to_string())?;
        drop(closed);
        command.env(ENDPOINT_VAR, format!("http://{addr}"));
    }
    let exports_before = collector.stats().requests;
    let spawned = Instant::now();
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let exit = wait4(child.id())?;
    drop(child);
    let stderr = sandbox.output("stderr");
    if exit.code != Some(EXIT_FINISHED) {
        return Err(format!("troupe exited {:?}; stderr:\n{stderr}", exit.code));
    }
    let stdout = sandbox.output("stdout");
    if stdout.trim() != ANSWER {
        return Err(format!("unexpected stdout {stdout:?}; stderr:\n{stderr}"));
    }
    let exports = collector.stats().requests - exports_before;
    match (kind == Kind::TrivialWithExport, exports) {
        (true, 0) => return Err("the run exported no span before it exited".into()),
        (false, n) if n > 0 => return Err(format!("a run without export sent {n} exports")),
        _ => {}
    }
    let stamps = stamps.times();
    let violations = server.take_violations();
    let (Some(first), Some(last)) = (stamps.first(), stamps.last()) else {
        return Err("no request reached the server".into());
    };
    if stamps.len() != server.request_count()
        || !violations.is_empty()
        || server.remaining_turns() != 0
    {
        return Err(format!(
            "{} stamps, {} requests, {} turns left, violations {violations:?}",
            stamps.len(),
            server.request_count(),
            server.remaining_turns()
        ));
    }
    let prefix = server
        .requests()
        .first()
        .map(|request| Prefix::of(&request.body, request.body_len))
        .ok_or("no request recorded")?;
    let sample = RunSample {
        prefix,
        requests: stamps.len(),
        connections: proxy.as_ref().map(CountingProxy::connections),
        to_first_request: *first - spawned,
        last_request_to_exit: exit.at - *last,
        total: exit.at - spawned,
        max_rss_kib: exit.max_rss_kib,
    };
    tokio.block_on(server.shutdown());
    drop(sandbox.fresh_project);
    Ok(sample)
}

fn version_once(bin: &Path) -> Result<Duration, String> {
    let started = Instant::now();
    let status = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let elapsed = started.elapsed();
    if !status.success() {
        return Err(format!("troupe --version exited {status}"));
    }
    Ok(elapsed)
}

/// `TROUPE_BIN`, or `troupe` in the profile directory this bench runs from
/// (`target/release/deps/binary-…` → `target/release/troupe`).
fn binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("TROUPE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?;
    let bin = profile_dir.join("troupe");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: build it first with `cargo build --release -p troupe-cli` \
             (tests/benches/run-all.sh does)",
            bin.display()
        ))
    }
}

/// Times steps of the binary's setup in this process: the provider's HTTP
/// client, `git status` with its budget plus the system prompt in a plain
/// project and in the git repository, and building the telemetry pipeline
/// (not installed) without and with OTLP export to `collector`.
fn setup_steps(
    tokio: &tokio::runtime::Runtime,
    plain: &Path,
    repo: &Path,
    collector: &OtlpCollector,
) -> Result<(), String> {
    let time = |step: &dyn Fn() -> Result<(), String>| -> Result<f64, String> {
        let started = Instant::now();
        step()?;
        Ok(started.elapsed().as_secs_f64() * 1_000.0)
    };
    let endpoint =
        reqwest::Url::parse("https://api.anthropic.com/v1/messages").map_err(|e| e.to_string())?;
    let client = || {
        build_client("bench", &endpoint)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    println!("\n== setup steps, timed in this process ==");
    println!(
        "  {:<40} {:.3} ms",
        "llm::http::build_client, first call",
        time(&client)?
    );
    let later = (0..STEP_SAMPLES)
        .map(|_| time(&client))
        .collect::<Result<Vec<_>, _>>()?;
    line("llm::http::build_client, later (ms)", &later);
    for (name, dir) in [("plain project", plain), ("git repository", repo)] {
        let prompt = || {
            let git = tokio.block_on(read_git_status(dir, GIT_STATUS_BUDGET));
            build_system_prompt(None, dir, "scripted-model", git);
            Ok(())
        };
        time(&prompt)?;
        let values = (0..STEP_SAMPLES)
            .map(|_| time(&prompt))
            .collect::<Result<Vec<_>, _>>()?;
        line(&format!("git status + prompt, {name} (ms)"), &values);
    }
    let endpoint = collector.endpoint();
    for (name, export) in [
        ("telemetry build, no export", false),
        ("telemetry build, OTLP export", true),
    ] {
        let settings = TelemetrySettings::from_env(|var| {
            (export && var == ENDPOINT_VAR).then(|| endpoint.clone())
        })
        .map_err(|e| e.to_string())?;
        let mut values = Vec::with_capacity(STEP_SAMPLES + 1);
        for _ in 0..=STEP_SAMPLES {
            let started = Instant::now();
            let telemetry = Telemetry::builder(&settings)
                .local_sink(Arc::new(MemorySpanSink::new()))
                .log_writer(std::io::sink)
                .build()
                .map_err(|e| e.to_string())?;
            values.push(started.elapsed().as_secs_f64() * 1_000.0);
            // Shutting the exporter down is not part of start-up.
            drop(telemetry);
        }
        println!(
            "  {:<40} {:.3} ms",
            format!("{name}, first call"),
            values[0]
        );
        line(&format!("{name}, later (ms)"), &values[1..]);
    }
    Ok(())
}

fn line(name: &str, values: &[f64]) {
    let summary = Summary::of(values).map_or_else(|| "no samples".into(), |s| s.to_string());
    println!("  {name:<40} {summary}");
}

fn bench() -> Result<(), String> {
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    let bin = binary()?;
    let size = std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(0);
    println!(
        "binary: {} ({:.1} MiB), {samples} runs of each kind after {WARMUP_RUNS} warm-up runs",
        bin.display(),
        size as f64 / (1024.0 * 1024.0)
    );
    println!("{}", machine_line());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;

    for _ in 0..WARMUP_RUNS {
        version_once(&bin)?;
    }
    let mut version = Vec::with_capacity(samples);
    for _ in 0..samples {
        version.push(version_once(&bin)?.as_secs_f64() * 1_000.0);
    }
    println!("\n== troupe --version ==");
    line("spawn → exit (ms)", &version);

    let git_files = count_from_env("TROUPE_BENCH_GIT_FILES", DEFAULT_GIT_FILES)?;
    let made = Instant::now();
    let repo = git_project(git_files)?;
    println!(
        "\ngit repository: {git_files} committed files plus the small crate, made in {:.1} s",
        made.elapsed().as_secs_f64()
    );
    let plain = tempfile::tempdir().map_err(|e| e.to_string())?;
    small_project(plain.path())?;
    let collector = tokio
        .block_on(OtlpCollector::start())
        .map_err(|e| format!("collector: {e}"))?;
    setup_steps(&tokio, plain.path(), repo.path(), &collector)?;

    let exports_before_runs = collector.stats();
    for kind in [
        Kind::Trivial,
        Kind::TrivialInGitRepo,
        Kind::TrivialWithExport,
        Kind::TrivialWithRefusedExport,
        Kind::WithTools,
    ] {
        let project = (kind == Kind::TrivialInGitRepo).then(|| repo.path());
        for _ in 0..WARMUP_RUNS {
            run_once(&bin, &tokio, kind, project, &collector, false)?;
        }
        let mut runs = Vec::with_capacity(samples);
        for _ in 0..samples {
            runs.push(run_once(&bin, &tokio, kind, project, &collector, false)?);
        }
        let ms = |pick: &dyn Fn(&RunSample) -> Duration| -> Vec<f64> {
            runs.iter()
                .map(|r| pick(r).as_secs_f64() * 1_000.0)
                .collect()
        };
        println!("\n== {} ==", kind.label());
        line("spawn → first request (ms)", &ms(&|r| r.to_first_request));
        line("last request → exit (ms)", &ms(&|r| r.last_request_to_exit));
        line("spawn → exit (ms)", &ms(&|r| r.total));
        let rss: Vec<f64> = runs.iter().map(|r| kib_to_mib(r.max_rss_kib)).collect();
        line("peak RSS, ru_maxrss (MiB)", &rss);
        if let Some(first) = runs.first() {
            let p = first.prefix;
            println!(
                "  first request: fixed prefix {} bytes (tools {} + stable system {}), \
                 environment {} bytes, body {} bytes",
                p.fixed(),
                p.tools,
                p.stable_system,
                p.environment,
                p.body
            );
        }
        let git = |line: GitLine| runs.iter().filter(|r| r.prefix.git == line).count();
        println!(
            "  git in the first request's environment: status collected in {} runs, \
             not collected (too slow) in {}, not a repository in {}, unrecognised in {}",
            git(GitLine::Collected),
            git(GitLine::TooSlow),
            git(GitLine::NotRepository),
            git(GitLine::Unknown)
        );
        let relayed = run_once(&bin, &tokio, kind, project, &collector, true)?;
        println!(
            "  one more run through a counting relay (not timed): {} connections to the model \
             server for {} requests",
            relayed.connections.unwrap_or(0),
            relayed.requests
        );
    }
    let received = tokio.block_on(collector.shutdown());
    println!(
        "\nOTLP collector: {} export requests ({:.1} KiB) from the runs with export on",
        received.requests - exports_before_runs.requests,
        (received.bytes - exports_before_runs.bytes) as f64 / 1024.0
    );
    println!("\n{}", machine_line());
    Ok(())
}

fn main() {
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = bench() {
        eprintln!("binary: {err}");
        std::process::exit(1);
    }
}
