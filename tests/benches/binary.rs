//! Benchmark: the real `troupe` binary (release build) against the scripted
//! model server. Targets:
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
//! Kinds of run, each with a short name (the names `TROUPE_BENCH_KINDS`
//! takes):
//!
//! - `trivial`: `troupe run x` (one model call that answers text at once) in a
//!   small project that is not a git repository;
//! - `trivial_git`: the same in a git repository of `TROUPE_BENCH_GIT_FILES`
//!   committed files (default 10,000), because the environment part of the
//!   system prompt runs `git status` before the first request;
//! - `trivial_export`: the same as `trivial` with OTLP export on
//!   (`OTEL_EXPORTER_OTLP_ENDPOINT` at a loopback collector in this process,
//!   `bench::collector`), because `troupe` flushes its spans before it exits;
//! - `trivial_refused_export`: the same with the endpoint at a port nobody
//!   listens on (a collector that is down: the flush at exit meets a refused
//!   connection);
//! - `tools`: a run with tools (`read_file`, `glob`, `grep`, `bash` in bypass
//!   mode, then the answer) in the small project;
//! - `commands`: `troupe run --mode bypass` with the default OS sandbox
//!   (`workspace-write`), where the model asks for four `bash` calls one after
//!   another, each `sleep 0.3` (`TROUPE_BENCH_COMMAND_SLEEP`) between two
//!   time stamps, then answers. Its
//!   figure is the **gaps**: the time of the window from the admission of the
//!   first request (whose answer asks for the first command) to the admission
//!   of the last request, minus the four commands' own time. A command's own
//!   time is measured from inside it: the command is
//!   `echo "N start $EPOCHREALTIME" >> .bench-stamps; sleep 0.3;
//!   echo "N end $EPOCHREALTIME" >> .bench-stamps` in the project (writable
//!   in the sandbox). `$EPOCHREALTIME` is a bash variable with microsecond
//!   precision that costs no process, so the stamps are taken by the shell
//!   the tool started, right after it started and right before it exits; the
//!   window comes from this process's monotonic clock and each command's own
//!   time is a difference of two stamps of the same clock, so the total needs
//!   no conversion between clocks. That is more precise than the `ts` of the
//!   `--json` events (milliseconds) and than `duration_ms` (which includes
//!   starting the confined process, a part of what the gaps are meant to
//!   show). The gaps hold: reading each answer, deciding and starting the
//!   confined `bash` (up to its first stamp), and after its last stamp the
//!   shell's exit, collecting the result, storing it and sending the next
//!   request; plus the server's own answering of four requests (it answers at
//!   once: tens of microseconds each, the "server (bare HTTP)" figure of
//!   `agent_turn`). They are also split into the part before each command
//!   (the first command's part also alone: the run's first confined process)
//!   and the part after it, by placing the stamps on this process's clock
//!   (`CLOCK_REALTIME` read beside `Instant::now()` just before the spawn);
//!   that split is as good as the two clocks agree over a run (a clock step
//!   during the run would show as a negative part);
//! - `commands_no_checkpoints`: the same run with `[checkpoints] enabled =
//!   false` in the user configuration: the difference of the two kinds'
//!   gaps is what the checkpoints before the four commands cost (the small
//!   project is not a git repository; each command's turn is preceded by a
//!   snapshot, the run's end by one more);
//! - `true_unconfined` and `true_confined`: ten `bash` calls of `true`, one a
//!   turn, then the answer, with `[sandbox] mode = "off"` and
//!   `mode = "workspace-write"` (the default) in the user configuration
//!   (`$XDG_CONFIG_HOME/troupe/config.toml`). When both are selected their runs
//!   alternate (`bench::round_order`), and the ratio confined / unconfined of
//!   spawn → exit is reported per pair of runs. Also printed: the time per
//!   call, from the first request to the last divided by ten;
//! - `ten_read_file_turns`: ten turns of `read_file` of ten distinct small
//!   files, then the answer; the figure is the time per turn, from the
//!   admission of a request (the server answers at once) to the admission of
//!   the next, median over the ten turns of a run.
//!
//! Every kind of run reports the bytes sent to the model per run (the sum of
//! the request bodies). Every run opens its session store (sled) in
//! `TROUPE_HOME`, writes the run durably and keeps its spans there (the local
//! span store is always on). Each run gets fresh, empty `HOME`, XDG
//! directories and `TROUPE_HOME` in a temporary directory; the small project
//! (with a `.troupe` directory) is fresh too, the git repository is made once.
//! The scripted server runs in this process on one tokio worker; the binary is
//! `TROUPE_BIN` or `troupe` beside this bench's directory
//! (`target/release/troupe`; `tests/benches/run-all.sh` builds it).
//!
//! Also printed, from the first request of each kind: the fixed request
//! prefix (tool definitions + stable system prompt; target ≤ 10 KB); and,
//! from one more untimed run of each kind through a loopback relay that counts
//! connections (`bench::proxy`), how many connections the binary opened to
//! the model server (target: one keep-alive connection per provider).
//!
//! To explain the start time, steps of the binary's setup are also timed in
//! this process (kind `setup_steps`): building the provider's HTTP client
//! (`llm::http::build_client`, first call in the process and later calls),
//! `git status` within its budget plus the system prompt
//! (`troupe_loader::read_git_status`, `troupe_loader::build_system_prompt`) in
//! each project, and building the telemetry pipeline without and with OTLP
//! export (`telemetry::Telemetry::builder(..).build()`). `version` is
//! `troupe --version`.
//!
//! Environment: `TROUPE_BENCH_SAMPLES` (default 30), `TROUPE_BENCH_GIT_FILES`
//! (default 10000), `TROUPE_BENCH_KINDS` (comma-separated short names; default
//! all), `TROUPE_BENCH_COMMAND_SLEEP` (seconds each command of `commands`
//! sleeps, default 0.3), `TROUPE_BENCH_JSON` (a file to which one JSON object
//! a line is appended per kind: its name, label, binary, machine line and each
//! figure's median, p10, p90, min, max and raw samples;
//! `tests/benches/compare.sh` reads it). Figures go to `docs/performance.md`, never into assertions.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use troupe_llm::http::build_client;
use troupe_loader::{GIT_STATUS_BUDGET, build_system_prompt, read_git_status};
use troupe_scripted::{Response, Script, ScriptedServer, ServerConfig, text, tool_call};
use troupe_telemetry::{MemorySpanSink, Telemetry, TelemetrySettings};
use troupe_tests::bench::arrivals::ArrivalStamps;
use troupe_tests::bench::collector::OtlpCollector;
use troupe_tests::bench::proxy::CountingProxy;
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::{kib_to_mib, machine_line};
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, round_order};

/// Measured runs of each kind unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 30;
/// Runs of each kind before measuring (page cache, dynamic loader).
const WARMUP_RUNS: usize = 3;
/// Exit code of a run that finished.
const EXIT_FINISHED: i32 = 0;
/// Final answer of every scripted run.
const ANSWER: &str = "Done looking.";
/// Committed files of the git repository unless `TROUPE_BENCH_GIT_FILES` says
/// otherwise.
const DEFAULT_GIT_FILES: usize = 10_000;
/// Files per directory of the git repository.
const FILES_PER_DIR: usize = 100;
/// The standard variable naming the collector.
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Timed calls of each in-process setup step.
const STEP_SAMPLES: usize = 20;
/// Commands of a `commands` run.
const TIMED_COMMANDS: usize = 4;
/// What each command of a `commands` run sleeps, in seconds, unless
/// `TROUPE_BENCH_COMMAND_SLEEP` says otherwise.
const DEFAULT_COMMAND_SLEEP: &str = "0.3";
/// The variable setting what each command of a `commands` run sleeps.
const COMMAND_SLEEP_VAR: &str = "TROUPE_BENCH_COMMAND_SLEEP";
/// File in the project where the commands of a `commands` run stamp their
/// start and end.
const STAMPS_FILE: &str = ".bench-stamps";
/// `bash` calls of `true` in a `true_unconfined` or `true_confined` run.
const TRUE_CALLS: usize = 10;
/// `read_file` turns of a `ten_read_file_turns` run.
const READ_FILE_TURNS: usize = 10;
/// Lines of each file a `ten_read_file_turns` run reads.
const READ_FILE_LINES: usize = 10;
/// The variable naming the file that receives the JSON results.
const JSON_VAR: &str = "TROUPE_BENCH_JSON";
/// The variable selecting kinds by name.
const KINDS_VAR: &str = "TROUPE_BENCH_KINDS";
/// Name of the `troupe --version` measurement in `TROUPE_BENCH_KINDS`.
const VERSION: &str = "version";
/// Name of the in-process setup steps in `TROUPE_BENCH_KINDS`.
const SETUP_STEPS: &str = "setup_steps";

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
    /// Four `bash` calls of `sleep 0.3` with stamps, default OS sandbox.
    Commands,
    /// The same with `[checkpoints] enabled = false`.
    CommandsWithoutCheckpoints,
    /// Ten `bash` calls of `true`, OS sandbox off.
    TrueUnconfined,
    /// Ten `bash` calls of `true`, default OS sandbox.
    TrueConfined,
    /// Ten `read_file` turns, then the answer.
    TenReadFileTurns,
}

impl Kind {
    /// Every kind of run, in the order they are measured.
    const ALL: [Self; 10] = [
        Self::Trivial,
        Self::TrivialInGitRepo,
        Self::TrivialWithExport,
        Self::TrivialWithRefusedExport,
        Self::WithTools,
        Self::Commands,
        Self::CommandsWithoutCheckpoints,
        Self::TenReadFileTurns,
        Self::TrueUnconfined,
        Self::TrueConfined,
    ];

    /// The short name `TROUPE_BENCH_KINDS` and the JSON results use.
    fn name(self) -> &'static str {
        match self {
            Self::Trivial => "trivial",
            Self::TrivialInGitRepo => "trivial_git",
            Self::TrivialWithExport => "trivial_export",
            Self::TrivialWithRefusedExport => "trivial_refused_export",
            Self::WithTools => "tools",
            Self::Commands => "commands",
            Self::CommandsWithoutCheckpoints => "commands_no_checkpoints",
            Self::TrueUnconfined => "true_unconfined",
            Self::TrueConfined => "true_confined",
            Self::TenReadFileTurns => "ten_read_file_turns",
        }
    }

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
            Self::Commands => {
                "troupe run --mode bypass (four stamped bash calls of sleep, default OS sandbox)"
            }
            Self::CommandsWithoutCheckpoints => {
                "troupe run --mode bypass (the same four commands, checkpoints off)"
            }
            Self::TrueUnconfined => {
                "troupe run --mode bypass (ten bash calls of true, sandbox off)"
            }
            Self::TrueConfined => {
                "troupe run --mode bypass (ten bash calls of true, default OS sandbox)"
            }
            Self::TenReadFileTurns => "troupe run --mode bypass (ten read_file turns, answer)",
        }
    }

    fn script(self, stamps: &ArrivalStamps, command_sleep: &str) -> Script {
        let mut responses: Vec<Response> = match self {
            Self::Trivial
            | Self::TrivialInGitRepo
            | Self::TrivialWithExport
            | Self::TrivialWithRefusedExport => Vec::new(),
            Self::WithTools => vec![
                tool_call("read_file", json!({"path": "README.md"})),
                tool_call("glob", json!({"pattern": "**/*.rs"})),
                tool_call(
                    "grep",
                    json!({"pattern": "fn \\w+", "output_mode": "content"}),
                ),
                tool_call("bash", json!({"command": "echo checked && ls src"})),
            ],
            Self::Commands | Self::CommandsWithoutCheckpoints => (1..=TIMED_COMMANDS)
                .map(|n| tool_call("bash", json!({"command": stamped_sleep(n, command_sleep)})))
                .collect(),
            // Distinct arguments, so the repeated-call guard never stops the
            // run.
            Self::TrueUnconfined | Self::TrueConfined => (1..=TRUE_CALLS)
                .map(|n| tool_call("bash", json!({"command": format!("true {n}")})))
                .collect(),
            Self::TenReadFileTurns => (0..READ_FILE_TURNS)
                .map(|n| tool_call("read_file", json!({"path": note_path(n)})))
                .collect(),
        };
        responses.push(text(ANSWER));
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
            Self::Commands
            | Self::CommandsWithoutCheckpoints
            | Self::TrueUnconfined
            | Self::TrueConfined => &["run", "--mode", "bypass", "Run the commands."],
            Self::TenReadFileTurns => &["run", "--mode", "bypass", "Read the notes."],
        }
    }

    /// The user configuration file of the run, if it has one. Both `true`
    /// kinds have one, so they differ in the sandbox mode alone.
    fn user_config(self) -> Option<&'static str> {
        match self {
            Self::TrueUnconfined => Some("[sandbox]\nmode = \"off\"\n"),
            Self::TrueConfined => Some("[sandbox]\nmode = \"workspace-write\"\n"),
            Self::CommandsWithoutCheckpoints => Some("[checkpoints]\nenabled = false\n"),
            _ => None,
        }
    }
}

/// The command of the `n`th call of a `commands` run: it stamps its start,
/// sleeps `seconds` and stamps its end, in [`STAMPS_FILE`] of the project.
fn stamped_sleep(n: usize, seconds: &str) -> String {
    format!(
        "echo \"{n} start $EPOCHREALTIME\" >> {STAMPS_FILE}; sleep {seconds}; \
         echo \"{n} end $EPOCHREALTIME\" >> {STAMPS_FILE}"
    )
}

/// What each command of a `commands` run sleeps, in seconds:
/// `TROUPE_BENCH_COMMAND_SLEEP` (a number ≥ 0), or [`DEFAULT_COMMAND_SLEEP`].
fn command_sleep_from_env() -> Result<String, String> {
    let Ok(text) = std::env::var(COMMAND_SLEEP_VAR) else {
        return Ok(DEFAULT_COMMAND_SLEEP.to_string());
    };
    match text.trim().parse::<f64>() {
        // Written back by Rust, so the command gets a plain decimal number.
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => Ok(format!("{seconds}")),
        _ => Err(format!(
            "{COMMAND_SLEEP_VAR} must be a number of seconds ≥ 0, got {text:?}"
        )),
    }
}

/// The `n`th file a `ten_read_file_turns` run reads.
fn note_path(n: usize) -> String {
    format!("notes/note_{n:02}.txt")
}

/// The kinds and other measurements `TROUPE_BENCH_KINDS` selects.
struct Selection(Option<BTreeSet<String>>);

impl Selection {
    fn from_env() -> Result<Self, String> {
        let Ok(value) = std::env::var(KINDS_VAR) else {
            return Ok(Self(None));
        };
        let known: Vec<&str> = [VERSION, SETUP_STEPS]
            .into_iter()
            .chain(Kind::ALL.iter().map(|kind| kind.name()))
            .collect();
        let mut names = BTreeSet::new();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !known.contains(&name) {
                return Err(format!(
                    "{KINDS_VAR}: unknown kind {name:?}; known: {}",
                    known.join(", ")
                ));
            }
            names.insert(name.to_string());
        }
        if names.is_empty() {
            return Err(format!("{KINDS_VAR} is set but names no kind"));
        }
        Ok(Self(Some(names)))
    }

    fn has(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|names| names.contains(name))
    }

    fn has_kind(&self, kind: Kind) -> bool {
        self.has(kind.name())
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

/// The files a `ten_read_file_turns` run reads, in the project at `root`.
fn notes(root: &Path) -> Result<(), String> {
    for n in 0..READ_FILE_TURNS {
        let body: String = (1..=READ_FILE_LINES)
            .map(|line| format!("note {n}, line {line}: something worth reading\n"))
            .collect();
        write_file(root, &note_path(n), &body)?;
    }
    Ok(())
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
    /// A fresh home with the user configuration of `kind`; the project is
    /// `shared`, or a fresh small project with the files `kind` needs.
    fn new(kind: Kind, shared: Option<&Path>) -> Result<Self, String> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        if let Some(config) = kind.user_config() {
            write_file(home.path(), "config/troupe/config.toml", config)?;
        }
        let (fresh_project, project) = match shared {
            Some(path) => (None, path.to_path_buf()),
            None => {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                small_project(dir.path())?;
                if kind == Kind::TenReadFileTurns {
                    notes(dir.path())?;
                }
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
    /// Bytes of all the run's request bodies.
    request_bytes: usize,
    /// Admission of each request by the server, in ms after the spawn.
    arrivals_ms: Vec<f64>,
    /// The commands of a `commands` run, as they stamped themselves.
    commands: Vec<CommandSpan>,
    /// Connections opened to the model server (relayed runs only).
    connections: Option<u64>,
}

impl RunSample {
    /// From the admission of the first request to that of the last, in ms.
    fn request_window_ms(&self) -> f64 {
        match (self.arrivals_ms.first(), self.arrivals_ms.last()) {
            (Some(first), Some(last)) => last - first,
            _ => 0.0,
        }
    }

    /// Time between the admission of each request and that of the next, in
    /// ms.
    fn turns_ms(&self) -> Vec<f64> {
        self.arrivals_ms.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The window of the commands minus their own time (see the module doc).
    fn command_gaps_ms(&self) -> f64 {
        self.request_window_ms() - self.commands.iter().map(CommandSpan::own_ms).sum::<f64>()
    }

    /// The part of the gaps from each request's admission to the start of the
    /// command its answer asked for.
    fn gaps_before_commands_ms(&self) -> f64 {
        self.commands
            .iter()
            .zip(&self.arrivals_ms)
            .map(|(command, arrival)| command.start_ms - arrival)
            .sum()
    }

    /// The part of the gaps from the admission of the first request to the
    /// start of the first command (the first confined process of the run).
    fn gap_before_first_command_ms(&self) -> f64 {
        match (self.commands.first(), self.arrivals_ms.first()) {
            (Some(command), Some(arrival)) => command.start_ms - arrival,
            _ => f64::NAN,
        }
    }

    /// The part of the gaps from the end of each command to the admission of
    /// the request that carries its result.
    fn gaps_after_commands_ms(&self) -> f64 {
        self.commands
            .iter()
            .zip(self.arrivals_ms.iter().skip(1))
            .map(|(command, arrival)| arrival - command.end_ms)
            .sum()
    }
}

/// A command's own start and end, stamped by its shell (`$EPOCHREALTIME`),
/// in ms after the spawn of `troupe` (placed with the wall clock read just
/// before the spawn).
#[derive(Debug, Clone, Copy, PartialEq)]
struct CommandSpan {
    start_ms: f64,
    end_ms: f64,
}

impl CommandSpan {
    /// The command's own time: a difference of two stamps of one clock.
    fn own_ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }
}

/// The commands' stamps in `text` (lines `N start SECONDS` and
/// `N end SECONDS`, seconds since the Unix epoch), for commands 1 to `count`,
/// placed on a clock that starts at `spawned_unix` (seconds since the epoch).
fn command_spans(text: &str, count: usize, spawned_unix: f64) -> Result<Vec<CommandSpan>, String> {
    let stamp = |n: usize, what: &str| -> Result<f64, String> {
        let prefix = format!("{n} {what} ");
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .ok_or_else(|| format!("command {n} left no {what} stamp in {text:?}"))?;
        // `$EPOCHREALTIME` uses the locale's decimal point.
        let seconds: f64 = line
            .trim()
            .replace(',', ".")
            .parse()
            .map_err(|e| format!("command {n}: {what} stamp {line:?}: {e}"))?;
        Ok((seconds - spawned_unix) * 1_000.0)
    };
    (1..=count)
        .map(|n| {
            Ok(CommandSpan {
                start_ms: stamp(n, "start")?,
                end_ms: stamp(n, "end")?,
            })
        })
        .collect()
}

/// Sizes of the first request's parts (the fixed request prefix is the tool
/// definitions + the system prompt before project instructions, target
/// ≤ 10 KB). The projects have no instruction files, so the stable system
/// block is all fixed prompt.
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

/// Seconds since the Unix epoch now, on the wall clock.
fn unix_now() -> Result<f64, String> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .map_err(|e| format!("the wall clock is before 1970: {e}"))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// What every run of the binary shares: the binary, the tokio runtime the
/// scripted servers run on, the OTLP collector, and what each command of a
/// `commands` run sleeps.
struct Runner<'a> {
    bin: &'a Path,
    tokio: &'a tokio::runtime::Runtime,
    collector: &'a OtlpCollector,
    command_sleep: String,
}

impl Runner<'_> {
    fn run_once(
        &self,
        kind: Kind,
        project: Option<&Path>,
        relayed: bool,
    ) -> Result<RunSample, String> {
        let (bin, tokio, collector) = (self.bin, self.tokio, self.collector);
        let stamps = ArrivalStamps::new();
        let server = tokio
            .block_on(ScriptedServer::start_with(
                kind.script(&stamps, &self.command_sleep),
                // Violations are checked below and reported as the run's error.
                ServerConfig::non_strict(),
            ))
            .map_err(|e| format!("scripted server: {e}"))?;
        let sandbox = Sandbox::new(kind, project)?;
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
        let spawned_unix = unix_now()?;
        let spawned = Instant::now();
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let exit = wait4(child.id())?;
        drop(child);
        let stderr = sandbox.output("stderr");
        if exit.code != Some(EXIT_FINISHED) {
            return Err(format!(
                "{}: troupe exited {:?}; stderr:\n{stderr}",
                kind.name(),
                exit.code
            ));
        }
        let stdout = sandbox.output("stdout");
        if stdout.trim() != ANSWER {
            return Err(format!(
                "{}: unexpected stdout {stdout:?}; stderr:\n{stderr}",
                kind.name()
            ));
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
                "{}: {} stamps, {} requests, {} turns left, violations {violations:?}",
                kind.name(),
                stamps.len(),
                server.request_count(),
                server.remaining_turns()
            ));
        }
        let requests = server.requests();
        let prefix = requests
            .first()
            .map(|request| Prefix::of(&request.body, request.body_len))
            .ok_or("no request recorded")?;
        let commands = if matches!(kind, Kind::Commands | Kind::CommandsWithoutCheckpoints) {
            let path = sandbox.project.join(STAMPS_FILE);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("commands: cannot read {}: {e}", path.display()))?;
            command_spans(&text, TIMED_COMMANDS, spawned_unix)?
        } else {
            Vec::new()
        };
        let sample = RunSample {
            prefix,
            requests: stamps.len(),
            request_bytes: requests.iter().map(|request| request.body_len).sum(),
            arrivals_ms: stamps.iter().map(|at| ms(*at - spawned)).collect(),
            commands,
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

    /// Runs `kinds` in alternation (the order of each round from `round_order`):
    /// [`WARMUP_RUNS`] rounds, then `samples` measured rounds. Returns the
    /// measured runs of each kind, in the order of `kinds`. Only the git kind
    /// works in `repo`; the others get fresh projects.
    fn measure(
        &self,
        kinds: &[Kind],
        repo: Option<&Path>,
        samples: usize,
    ) -> Result<Vec<Vec<RunSample>>, String> {
        let mut runs: Vec<Vec<RunSample>> =
            kinds.iter().map(|_| Vec::with_capacity(samples)).collect();
        for round in 0..WARMUP_RUNS + samples {
            for kind in round_order(kinds, round) {
                let project = if kind == Kind::TrivialInGitRepo {
                    Some(repo.ok_or("the git repository was not made")?)
                } else {
                    None
                };
                let sample = self.run_once(kind, project, false)?;
                if round >= WARMUP_RUNS
                    && let Some(slot) = kinds.iter().position(|k| *k == kind)
                {
                    runs[slot].push(sample);
                }
            }
        }
        Ok(runs)
    }
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
    println!("  {name:<44} {summary}");
}

/// One figure of a measurement: a key for the JSON results, a title for the
/// printout and one value per run.
struct Figure {
    key: &'static str,
    title: &'static str,
    values: Vec<f64>,
}

impl Figure {
    fn of(
        key: &'static str,
        title: &'static str,
        runs: &[RunSample],
        pick: impl Fn(&RunSample) -> f64,
    ) -> Self {
        Self {
            key,
            title,
            values: runs.iter().map(pick).collect(),
        }
    }
}

/// The figures of `kind` from its measured runs.
fn figures(kind: Kind, runs: &[RunSample]) -> Vec<Figure> {
    let mut figures = vec![
        Figure::of(
            "to_first_request_ms",
            "spawn → first request (ms)",
            runs,
            |r| ms(r.to_first_request),
        ),
        Figure::of(
            "last_request_to_exit_ms",
            "last request → exit (ms)",
            runs,
            |r| ms(r.last_request_to_exit),
        ),
        Figure::of("spawn_to_exit_ms", "spawn → exit (ms)", runs, |r| {
            ms(r.total)
        }),
        Figure::of("peak_rss_mib", "peak RSS, ru_maxrss (MiB)", runs, |r| {
            kib_to_mib(r.max_rss_kib)
        }),
        Figure::of(
            "request_bytes",
            "bytes sent to the model per run",
            runs,
            |r| r.request_bytes as f64,
        ),
    ];
    match kind {
        Kind::Commands | Kind::CommandsWithoutCheckpoints => figures.extend([
            Figure::of(
                "gaps_ms",
                "gaps: window − commands' own time (ms)",
                runs,
                RunSample::command_gaps_ms,
            ),
            Figure::of(
                "gaps_before_commands_ms",
                "  of which before the commands (ms)",
                runs,
                RunSample::gaps_before_commands_ms,
            ),
            Figure::of(
                "gap_before_first_command_ms",
                "    of which before the first command (ms)",
                runs,
                RunSample::gap_before_first_command_ms,
            ),
            Figure::of(
                "gaps_after_commands_ms",
                "  of which after the commands (ms)",
                runs,
                RunSample::gaps_after_commands_ms,
            ),
            Figure::of(
                "command_own_ms",
                "a command's own time, mean of four (ms)",
                runs,
                |r| r.commands.iter().map(CommandSpan::own_ms).sum::<f64>() / TIMED_COMMANDS as f64,
            ),
        ]),
        Kind::TrueUnconfined | Kind::TrueConfined => figures.push(Figure::of(
            "per_call_ms",
            "per call: first → last request / 10 (ms)",
            runs,
            |r| r.request_window_ms() / TRUE_CALLS as f64,
        )),
        Kind::TenReadFileTurns => figures.push(Figure::of(
            "turn_ms",
            "turn: request → next, run's median (ms)",
            runs,
            |r| Summary::of(&r.turns_ms()).map_or(f64::NAN, |s| s.median),
        )),
        Kind::Trivial
        | Kind::TrivialInGitRepo
        | Kind::TrivialWithExport
        | Kind::TrivialWithRefusedExport
        | Kind::WithTools => {}
    }
    figures
}

/// Where `TROUPE_BENCH_JSON` asks for the results, if it does: one JSON
/// object a line, appended.
struct JsonResults {
    path: Option<PathBuf>,
    binary: String,
}

impl JsonResults {
    fn from_env(bin: &Path) -> Self {
        Self {
            path: std::env::var_os(JSON_VAR).map(PathBuf::from),
            binary: bin.display().to_string(),
        }
    }

    /// Appends the figures of the measurement `name`.
    fn append(&self, name: &str, label: &str, figures: &[Figure]) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut by_key = serde_json::Map::new();
        for figure in figures {
            let Some(summary) = Summary::of(&figure.values) else {
                continue;
            };
            by_key.insert(
                figure.key.to_string(),
                json!({
                    "title": figure.title.trim(),
                    "median": summary.median,
                    "p10": summary.p10,
                    "p90": summary.p90,
                    "min": summary.min,
                    "max": summary.max,
                    "count": summary.count,
                    "samples": figure.values,
                }),
            );
        }
        let record = json!({
            "kind": name,
            "label": label,
            "binary": self.binary,
            "machine": machine_line(),
            "figures": by_key,
        });
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{JSON_VAR}: cannot open {}: {e}", path.display()))?;
        writeln!(file, "{record}")
            .map_err(|e| format!("{JSON_VAR}: cannot write {}: {e}", path.display()))
    }
}

/// Prints the figures of `kind` (its own and `extra`) and what its first
/// request held, and appends them to the JSON results.
fn report(
    kind: Kind,
    runs: &[RunSample],
    extra: Vec<Figure>,
    results: &JsonResults,
) -> Result<(), String> {
    let mut figures = figures(kind, runs);
    figures.extend(extra);
    println!("\n== {} [{}] ==", kind.label(), kind.name());
    for figure in &figures {
        line(figure.title, &figure.values);
    }
    if let Some(first) = runs.first() {
        let p = first.prefix;
        println!(
            "  first request: fixed prefix {} bytes (tools {} + stable system {}), \
             environment {} bytes, body {} bytes; {} requests a run",
            p.fixed(),
            p.tools,
            p.stable_system,
            p.environment,
            p.body,
            first.requests
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
    results.append(kind.name(), kind.label(), &figures)
}

/// Confined / unconfined spawn → exit for each pair of runs measured side by
/// side, when `kinds` holds both `true` kinds.
fn confined_over_unconfined(kinds: &[Kind], runs: &[Vec<RunSample>]) -> Option<Figure> {
    let of = |wanted: Kind| {
        kinds
            .iter()
            .position(|k| *k == wanted)
            .and_then(|slot| runs.get(slot))
    };
    let (unconfined, confined) = (of(Kind::TrueUnconfined)?, of(Kind::TrueConfined)?);
    Some(Figure {
        key: "confined_over_unconfined",
        title: "confined / unconfined spawn → exit, a pair",
        values: confined
            .iter()
            .zip(unconfined)
            .map(|(c, u)| ms(c.total) / ms(u.total))
            .collect(),
    })
}

fn bench() -> Result<(), String> {
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    let selection = Selection::from_env()?;
    let command_sleep = command_sleep_from_env()?;
    let bin = binary()?;
    let results = JsonResults::from_env(&bin);
    let size = std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(0);
    println!(
        "binary: {} ({:.1} MiB), {samples} runs of each kind after {WARMUP_RUNS} warm-up runs; \
         each command of `commands` sleeps {command_sleep} s",
        bin.display(),
        size as f64 / (1024.0 * 1024.0)
    );
    println!("{}", machine_line());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;

    if selection.has(VERSION) {
        for _ in 0..WARMUP_RUNS {
            version_once(&bin)?;
        }
        let mut version = Vec::with_capacity(samples);
        for _ in 0..samples {
            version.push(ms(version_once(&bin)?));
        }
        println!("\n== troupe --version [{VERSION}] ==");
        line("spawn → exit (ms)", &version);
        results.append(
            VERSION,
            "troupe --version",
            &[Figure {
                key: "spawn_to_exit_ms",
                title: "spawn → exit (ms)",
                values: version,
            }],
        )?;
    }

    let repo = if selection.has_kind(Kind::TrivialInGitRepo) || selection.has(SETUP_STEPS) {
        let git_files = count_from_env("TROUPE_BENCH_GIT_FILES", DEFAULT_GIT_FILES)?;
        let made = Instant::now();
        let repo = git_project(git_files)?;
        println!(
            "\ngit repository: {git_files} committed files plus the small crate, made in {:.1} s",
            made.elapsed().as_secs_f64()
        );
        Some(repo)
    } else {
        None
    };
    let repo_path = repo.as_ref().map(tempfile::TempDir::path);
    let collector = tokio
        .block_on(OtlpCollector::start())
        .map_err(|e| format!("collector: {e}"))?;
    if selection.has(SETUP_STEPS)
        && let Some(repo_path) = repo_path
    {
        let plain = tempfile::tempdir().map_err(|e| e.to_string())?;
        small_project(plain.path())?;
        setup_steps(&tokio, plain.path(), repo_path, &collector)?;
    }

    let runner = Runner {
        bin: &bin,
        tokio: &tokio,
        collector: &collector,
        command_sleep,
    };
    let exports_before_runs = collector.stats();
    // The two `true` kinds are measured side by side; every other kind alone.
    let (sandbox_pair, singles): (Vec<Kind>, Vec<Kind>) = Kind::ALL
        .into_iter()
        .filter(|kind| selection.has_kind(*kind))
        .partition(|kind| matches!(kind, Kind::TrueUnconfined | Kind::TrueConfined));
    let mut groups: Vec<Vec<Kind>> = singles.into_iter().map(|kind| vec![kind]).collect();
    if !sandbox_pair.is_empty() {
        groups.push(sandbox_pair);
    }
    for group in groups {
        let runs = runner.measure(&group, repo_path, samples)?;
        let mut ratio = confined_over_unconfined(&group, &runs);
        for (kind, kind_runs) in group.iter().zip(&runs) {
            let extra = if *kind == Kind::TrueConfined {
                ratio.take().into_iter().collect()
            } else {
                Vec::new()
            };
            report(*kind, kind_runs, extra, &results)?;
            let project = (*kind == Kind::TrivialInGitRepo)
                .then_some(repo_path)
                .flatten();
            let relayed = runner.run_once(*kind, project, true)?;
            println!(
                "  one more run through a counting relay (not timed): {} connections to the \
                 model server for {} requests",
                relayed.connections.unwrap_or(0),
                relayed.requests
            );
        }
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
