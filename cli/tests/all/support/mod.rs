//! Shared helpers of the `troupe` binary's durability tests: a sandboxed
//! environment (home, config, data directory and project in temporary
//! directories), running the binary with a time limit, reading `--json` event
//! lines, the stored history of a session as `troupe sessions export` prints
//! it, and the Anthropic wire form of a history (what a model request carries),
//! so a stored history can be compared with the requests a scripted server saw.
//! It also keeps the test process from holding a session database's lock by
//! accident ([`fd_guard`], [`wait_until_unlocked`]).
//!
//! Nothing here decides what a test asserts; it only drives the binary and
//! reads what it left behind.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use troupe_config::ResolvedProvider;
use troupe_llm::{ChatRequest, anthropic};
use troupe_protocol::model::Message;
use troupe_protocol::model::Protocol;
use troupe_protocol::model::SystemPrompt;
use troupe_scripted::{RecordedRequest, ScriptedServer};

/// The binary under test.
pub(crate) const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");

/// How long one `troupe` invocation may take before the test gives up.
pub(crate) const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// A sandboxed environment: empty home, config and data directories, and a
/// project directory with an (empty) `.troupe` folder.
pub(crate) struct Env {
    /// `HOME`; holds `config/` (`XDG_CONFIG_HOME`) and `data/` (`TROUPE_HOME`).
    pub home: tempfile::TempDir,
    /// The project root and working directory.
    pub project: tempfile::TempDir,
    /// The protocol commands speak to a scripted server.
    pub protocol: Protocol,
}

impl Env {
    /// A fresh environment.
    pub(crate) fn new() -> Self {
        let env = Self {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
            protocol: Protocol::Anthropic,
        };
        std::fs::create_dir_all(env.project.path().join(".troupe")).unwrap();
        env
    }

    /// A fresh environment whose commands speak `protocol` to the scripted
    /// server. The Responses protocol is chosen by the user's configuration
    /// (an entry `scripted` with `protocol = "openai-responses"`), as no
    /// variable chooses it.
    pub(crate) fn with_protocol(protocol: Protocol) -> Self {
        let env = Self {
            protocol,
            ..Self::new()
        };
        if protocol == Protocol::OpenAiResponses {
            env.write_user_config(
                "default_provider = \"scripted\"\n\n[providers.scripted]\nprotocol = \"openai-responses\"\n",
            );
        }
        env
    }

    /// The data directory (`TROUPE_HOME`).
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    /// Trusts the project, as `troupe trust` does: its whole
    /// `.troupe/config.toml` applies.
    pub(crate) fn trust(&self) {
        troupe_config::TrustStore::new(&self.data_dir())
            .set(self.root(), true)
            .unwrap();
    }

    /// The user's Troupe configuration directory (`XDG_CONFIG_HOME/troupe`).
    pub(crate) fn user_config_dir(&self) -> PathBuf {
        self.home.path().join("config/troupe")
    }

    /// Writes the user's `config.toml` (making its directory); returns the
    /// directory.
    pub(crate) fn write_user_config(&self, text: &str) -> PathBuf {
        let dir = self.user_config_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
        dir
    }

    /// The project root (the working directory of every command).
    pub(crate) fn root(&self) -> &Path {
        self.project.path()
    }

    /// `troupe` with a cleared environment pointing at this sandbox and, when
    /// given, at `server` as the endpoint of [`Env::protocol`]. Runs are embedded
    /// (`TROUPE_NO_DAEMON=1`); remove that variable to go through a daemon.
    pub(crate) fn command(&self, server: Option<&ScriptedServer>) -> Command {
        self.command_with_home(server, &self.data_dir())
    }

    /// [`Env::command`] with another `TROUPE_HOME`.
    pub(crate) fn command_with_home(
        &self,
        server: Option<&ScriptedServer>,
        data_dir: &Path,
    ) -> Command {
        let mut command = Command::new(TROUPE);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("TROUPE_HOME", data_dir)
            .current_dir(self.project.path())
            // Embedded runs: these tests are about the process that runs them.
            .env("TROUPE_NO_DAEMON", "1")
            .stdin(Stdio::null());
        if let Some(server) = server {
            let base_url = match self.protocol {
                Protocol::Anthropic => server.anthropic_base_url(),
                Protocol::OpenAi | Protocol::OpenAiResponses => server.openai_base_url(),
            };
            command
                .env(self.protocol.base_url_env(), base_url)
                .env(self.protocol.default_api_key_env(), "test-key");
        }
        command
    }
}

/// Starts a prepared command with stdout piped and stderr to `stderr_file`,
/// reads its `--json` lines until `stop` says so (or the output ends), then
/// SIGKILLs it and reaps it. Returns the lines read, parsed.
pub(crate) async fn run_then_kill(
    mut command: Command,
    stderr_file: &Path,
    mut stop: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let stderr = std::fs::File::create(stderr_file).unwrap();
    command.stdout(Stdio::piped()).stderr(stderr);
    let mut child = spawn(command);
    let pid = child.id().expect("the child has a pid") as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    while !stop(&events) {
        let line = tokio::time::timeout(COMMAND_LIMIT, lines.next_line())
            .await
            .expect("troupe writes its next line in time")
            .expect("stdout is readable");
        match line {
            Some(line) => events.push(serde_json::from_str(&line).unwrap()),
            None => break,
        }
    }
    // SAFETY: plain signal delivery to our own child, which is not reaped yet
    // (so its pid cannot have been reused).
    let sent = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(sent, 0, "SIGKILL delivered");
    tokio::time::timeout(COMMAND_LIMIT, child.wait())
        .await
        .expect("the killed process is reaped")
        .unwrap();
    events
}

/// Waits until no process holds the database lock of `data_dir` (sled takes
/// an exclusive `flock` on `db/db`), for at most `limit`. A process killed
/// while it was starting a child can leave that child holding the lock for
/// the moment until it executes its program (the descriptor is close-on-exec);
/// anything longer means a process kept the database open.
pub(crate) async fn wait_until_unlocked(data_dir: &Path, limit: Duration) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    /// How often the lock is tried while it is held.
    const RETRY: Duration = Duration::from_millis(5);
    let path = data_dir.join("db").join("db");
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let unlocked = {
            let _guard = fd_guard();
            let file = match std::fs::OpenOptions::new().read(true).open(&path) {
                Ok(file) => file,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(err) => return Err(format!("cannot open {}: {err}", path.display())),
            };
            // SAFETY: flock on a descriptor this block owns; the lock goes
            // with the descriptor when `file` is dropped at the block's end.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
        };
        if unlocked {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the database {} was still locked {limit:?} after its process was killed",
                path.display()
            ));
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Runs a prepared command to its end within [`COMMAND_LIMIT`].
pub(crate) async fn run(mut command: Command) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = spawn(command);
    tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .expect("troupe finishes in time")
        .expect("troupe runs")
}

/// Serialises, within this test process, starting a child process with
/// having a session database open.
///
/// A child inherits a copy of every descriptor of the test process from the
/// moment it is forked until it executes its program (the descriptors are
/// close-on-exec). sled's lock is a `flock` on `db/db`, which lives as long as
/// any copy of the descriptor: a store a test just closed could still be
/// locked by another test's child that is being started. Holding this guard
/// while spawning (which returns once the child has executed its program) and
/// while a store is open in the test process rules that out.
pub(crate) fn fd_guard() -> MutexGuard<'static, ()> {
    static GUARD: Mutex<()> = Mutex::new(());
    // A test that panicked while holding the guard leaves nothing to repair.
    GUARD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts `command` under [`fd_guard`].
pub(crate) fn spawn(command: Command) -> tokio::process::Child {
    let _guard = fd_guard();
    tokio::process::Command::from(command)
        .spawn()
        .expect("troupe starts")
}

/// The text of an output stream.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Both output streams, for assertion messages.
pub(crate) fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    )
}

/// Parses `--json` output: one event object per line.
pub(crate) fn json_lines(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// The session id carried by a run's events.
pub(crate) fn session_of(events: &[Value]) -> String {
    events
        .first()
        .and_then(|event| event["session_id"].as_str())
        .expect("events carry a session id")
        .to_string()
}

/// Parses `troupe sessions export` output: one message per line, each a
/// `Message` of the conversation model.
pub(crate) fn parse_export(stdout: &[u8]) -> Vec<Message> {
    text(stdout)
        .lines()
        .map(|line| {
            serde_json::from_str::<Message>(line)
                .unwrap_or_else(|e| panic!("an exported line is not a message: {e}: {line}"))
        })
        .collect()
}

/// `troupe sessions export ID`, which must succeed, parsed.
pub(crate) async fn export(env: &Env, id: &str) -> Vec<Message> {
    let mut command = env.command(None);
    command.args(["sessions", "export", id]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    parse_export(&output.stdout)
}

/// Removes every `cache_control` field: the rolling cache breakpoint moves to
/// the newest message, so it is not part of what a message says.
pub(crate) fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

/// The messages of a recorded request, without `cache_control`.
pub(crate) fn wire_messages(request: &RecordedRequest) -> Vec<Value> {
    let mut messages = request.messages().to_vec();
    messages.iter_mut().for_each(strip_cache_control);
    messages
}

/// The Anthropic wire messages the runtime sends for `history`, without
/// `cache_control` (built by the runtime's own request encoder).
pub(crate) fn wire_of(history: &[Message]) -> Vec<Value> {
    let provider = ResolvedProvider {
        name: "claude".into(),
        protocol: Protocol::Anthropic,
        model: "scripted-model".into(),
        base_url: "http://127.0.0.1:9".into(),
        api_key: None,
        api_key_env: "ANTHROPIC_API_KEY".into(),
        context_window: 200_000,
        max_tokens: 8_192,
        thinking_budget: None,
        price: None,
        idle_timeout: Duration::from_secs(60),
        max_retries: 0,
        store: false,
    };
    let request = ChatRequest {
        system: SystemPrompt::default(),
        messages: history.to_vec(),
        tools: Vec::new(),
        session_id: None,
    };
    let body = anthropic::request_body(&provider, &request).expect("a history encodes");
    let mut body: Value = serde_json::from_slice(&body).expect("the encoder writes JSON");
    let mut messages = body["messages"].take();
    strip_cache_control(&mut messages);
    match messages {
        Value::Array(messages) => messages,
        other => panic!("messages is not an array: {other}"),
    }
}

/// Runs `troupe` on a pseudo-terminal (through `script`), typing `answers`.
/// Returns the exit code and everything the terminal showed.
pub(crate) async fn run_on_terminal(command: Command, answers: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let program = command.get_program().to_string_lossy().into_owned();
    let args: Vec<String> = command
        .get_args()
        .map(|arg| format!("'{}'", arg.to_string_lossy().replace('\'', "'\\''")))
        .collect();
    let line = format!("{program} {}", args.join(" "));
    let mut script = Command::new("script");
    script.args(["-qefc", &line, "/dev/null"]);
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => script.env(key, value),
            None => script.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        script.current_dir(dir);
    }
    let mut child = {
        let _guard = fd_guard();
        script
            .env_remove("TERM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script(1) is installed")
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    // Keep stdin open until the run ends so the terminal is not hung up early.
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || {
            let output = child.wait_with_output();
            drop(stdin);
            output
        }),
    )
    .await
    .expect("troupe on a terminal finishes")
    .unwrap()
    .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// How often `/proc` is scanned while waiting for a process to appear or go.
const POLL: Duration = Duration::from_millis(20);

/// Pids of the processes whose command line contains `needle` (arguments
/// joined by spaces).
pub(crate) fn processes_running(needle: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then_some(pid)
        })
        .collect()
}

/// Waits until `done` holds for the processes matching `needle`, for at most
/// `limit`; returns the last scan.
pub(crate) async fn wait_for_processes(
    needle: &str,
    limit: Duration,
    done: impl Fn(&[i32]) -> bool,
) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let pids = processes_running(needle);
        if done(&pids) || tokio::time::Instant::now() >= deadline {
            return pids;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// server-everything's entry point below the MCP fixtures directory.
pub(crate) const EVERYTHING: &str =
    "node/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

pub(crate) use troupe_test_support::mcp_fixture;

/// Every file under `dir` whose bytes contain `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if kind.is_file()
            && let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|window| window == needle)
        {
            found.push(path.display().to_string());
        }
    }
    found
}

/// Stops the daemon `data_dir`'s `daemon.json` names (SIGTERM) and waits
/// until it is gone; nothing when none runs.
pub(crate) fn stop_daemon(data_dir: &Path) {
    let Ok(text) = std::fs::read_to_string(data_dir.join("daemon.json")) else {
        return;
    };
    let state: Value = serde_json::from_str(&text).unwrap();
    let pid = state["pid"].as_u64().unwrap() as u32;
    // SAFETY: plain signal delivery to the test's own daemon.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + COMMAND_LIMIT;
    while troupe_process::process_is_alive(pid) {
        assert!(std::time::Instant::now() < deadline, "daemon {pid} stops");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the database may stay locked after a `troupe` process exited.
const PLANT_UNLOCK_LIMIT: Duration = Duration::from_secs(5);

/// Creates the planted session `id` (no messages) in `store`.
pub(crate) fn create_planted_session(store: &troupe_store::Store, env: &Env, id: &str) {
    store
        .create_session(&troupe_store::NewSession {
            id: id.into(),
            cwd: env.root().to_path_buf(),
            provider: "claude".into(),
            model: "scripted-model".into(),
            parent: None,
            agent_path: None,
            run_id: None,
            fork_of: None,
        })
        .unwrap();
}

/// Plants sessions (and runs of the first one) with chosen ids while no
/// `troupe` process holds the store.
pub(crate) async fn plant_sessions(env: &Env, sessions: &[&str], runs: &[&str]) {
    {
        let _guard = fd_guard();
        let store = troupe_store::Store::open(&env.data_dir()).unwrap();
        for id in sessions {
            create_planted_session(&store, env, id);
        }
        for id in runs {
            store
                .put_run(&troupe_store::RunRecord {
                    run_id: (*id).into(),
                    session_id: sessions[0].into(),
                    prompt: "p".into(),
                    status: troupe_store::RunState::Ended(
                        troupe_protocol::events::RunStatus::Finished,
                    ),
                    stop_reason: Some("end_turn".into()),
                    started: chrono::Utc::now(),
                    ended: None,
                    pid: 1,
                    history: None,
                })
                .unwrap();
        }
        store.flush().unwrap();
    }
    wait_until_unlocked(&env.data_dir(), PLANT_UNLOCK_LIMIT)
        .await
        .unwrap();
}

/// What a measured run left.
pub(crate) struct Measured {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// Peak resident set of the `troupe` process (`VmHWM`), KiB.
    pub(crate) peak_kib: u64,
}

/// `VmHWM` (peak resident set since the program started) of process `pid`.
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// Runs `command` until `server` has received `requests` requests (the last
/// one is stalled by the script, so the process is alive and idle), reads
/// the process's peak resident set, then interrupts it (Ctrl-C) and collects
/// what it wrote.
pub(crate) async fn run_measured(
    mut command: Command,
    server: &ScriptedServer,
    requests: usize,
) -> Measured {
    use tokio::io::AsyncReadExt;
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = spawn(command);
    let pid = child.id().expect("the child has a pid");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = tokio::spawn(async move {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).await.unwrap();
        bytes
    });
    let err = tokio::spawn(async move {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).await.unwrap();
        bytes
    });
    server
        .wait_for_requests(requests, COMMAND_LIMIT)
        .await
        .expect("the run reaches its last model request");
    let peak_kib = peak_rss_kib(pid);
    // SAFETY: plain signal delivery to our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(COMMAND_LIMIT, child.wait())
        .await
        .expect("troupe stops on Ctrl-C")
        .unwrap();
    Measured {
        status,
        stdout: out.await.unwrap(),
        stderr: err.await.unwrap(),
        peak_kib,
    }
}

/// Whether `request` is a compaction's summary request.
pub(crate) fn is_summary(request: &troupe_scripted::RecordedRequest) -> bool {
    request
        .last_user_text()
        .unwrap_or_default()
        .contains("<summary> tags")
}

/// `script` followed by six reads of `f0.txt` … `f5.txt` and the answer
/// "all read", none of them answering a summary request: enough history
/// for a compaction to summarise (with [`write_read_files`]).
pub(crate) fn then_six_reads(mut script: troupe_scripted::Script) -> troupe_scripted::Script {
    use troupe_scripted::{Turn, text, tool_call};
    for i in 0..6 {
        script = script.then(
            Turn::new(tool_call(
                "read_file",
                serde_json::json!({ "path": format!("f{i}.txt") }),
            ))
            .when(not_summary()),
        );
    }
    script.then(Turn::new(text("all read")).when(not_summary()))
}

/// Writes the six files of [`then_six_reads`] in `env`'s project, about
/// 20 KB each.
pub(crate) fn write_read_files(env: &Env) {
    for i in 0..6 {
        let body: String = (0..1_200).map(|n| format!("file {i} line {n}\n")).collect();
        std::fs::write(env.root().join(format!("f{i}.txt")), body).unwrap();
    }
}

/// Matches every request but a compaction's summary request.
pub(crate) fn not_summary() -> troupe_scripted::Matcher {
    troupe_scripted::Matcher::predicate(
        "not a summary request",
        |r: &troupe_scripted::RecordedRequest| !is_summary(r),
    )
}
