//! Shared helpers of the session-store tests: a store in a temporary data
//! directory with a settable clock, sample records, raw access to the sled
//! database (to plant damaged records), and child processes of the test binary
//! (for locking and durability across processes).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use tempfile::TempDir;
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
use troupe_store::{Clock, NewSession, RunRecord, RunState, SessionMeta, Store, layout};

/// Environment variable that turns a test of this binary into a child role.
pub(crate) const ROLE_VAR: &str = "TROUPE_STORE_TEST_ROLE";
/// Environment variable carrying the data directory to a child.
pub(crate) const DIR_VAR: &str = "TROUPE_STORE_TEST_DIR";
/// How long a parent waits for a line from a child.
pub(crate) const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// A clock the test moves by hand.
#[derive(Clone)]
pub(crate) struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock starting at 2026-11-01T00:00:00Z.
    pub(crate) fn new() -> Self {
        let start = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).single().unwrap();
        Self(Arc::new(Mutex::new(start)))
    }

    /// The current time.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }

    /// Moves the clock forward.
    pub(crate) fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap();
        *now += by;
    }

    /// The clock as the store wants it.
    pub(crate) fn clock(&self) -> Clock {
        let inner = self.0.clone();
        Arc::new(move || *inner.lock().unwrap())
    }
}

/// A store in a fresh temporary data directory.
pub(crate) struct Fixture {
    pub dir: TempDir,
    pub clock: ManualClock,
    store: Option<Store>,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new();
        let store = Store::open_with_clock(dir.path(), clock.clock()).unwrap();
        Self {
            dir,
            clock,
            store: Some(store),
        }
    }

    /// The open store.
    pub(crate) fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    /// Closes the store and opens it again (as a new process would).
    pub(crate) fn reopen(&mut self) {
        self.store = None;
        let clock = self.clock.clock();
        let dir = self.data_dir().to_path_buf();
        self.store = Some(until_unlocked(|| {
            Store::open_with_clock(&dir, clock.clone())
        }));
    }

    /// The data directory.
    pub(crate) fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Creates a session with defaults.
    pub(crate) fn session(&self, id: &str) -> SessionMeta {
        self.store().create_session(&new_session(id, None)).unwrap()
    }

    /// Creates a child session of `parent` (agent `main/ID`, run `run_id`)
    /// one second after the previous clock time, so creation order is
    /// visible.
    pub(crate) fn child(&self, id: &str, parent: &str, run_id: &str) -> SessionMeta {
        self.clock.advance(TimeDelta::seconds(1));
        self.store()
            .create_session(&new_child_session(
                id,
                parent,
                &format!("main/{id}"),
                run_id,
            ))
            .unwrap()
    }

    /// Drops the store, runs `f` on the raw sled database, and reopens.
    pub(crate) fn with_raw<T>(&mut self, f: impl FnOnce(&sled::Db) -> T) -> T {
        self.store = None;
        let out = {
            let path = self.data_dir().join(layout::DB_DIR_NAME);
            let db = until_unlocked(|| sled::open(&path));
            let out = f(&db);
            db.flush().unwrap();
            out
        };
        self.reopen();
        out
    }
}

/// A new-session request.
pub(crate) fn new_session(id: &str, parent: Option<&str>) -> NewSession {
    NewSession {
        id: id.into(),
        cwd: PathBuf::from("/work/repo"),
        provider: "claude".into(),
        model: "claude-sonnet-4-5".into(),
        parent: parent.map(Into::into),
        agent_path: None,
        run_id: None,
        fork_of: None,
    }
}

/// A new-session request for a child session of `parent`, created by run
/// `run_id` for the agent at `agent_path`.
pub(crate) fn new_child_session(
    id: &str,
    parent: &str,
    agent_path: &str,
    run_id: &str,
) -> NewSession {
    NewSession {
        parent: Some(parent.into()),
        agent_path: Some(agent_path.into()),
        run_id: Some(run_id.into()),
        fork_of: None,
        ..new_session(id, None)
    }
}

/// A distinct message for position `i` of a conversation, cycling through
/// user, assistant-with-call and tool messages.
pub(crate) fn message(i: u64) -> Message {
    match i % 3 {
        0 => Message::user_text(format!("user message {i}")),
        1 => Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: format!("thinking {i}"),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text {
                    text: format!("reply {i}"),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: format!("call-{i}"),
                    name: "read_file".into(),
                    input: format!(r#"{{"path":"src/{i}.rs","big":9007199254740993}}"#),
                }),
            ],
        },
        _ => Message::tool_results(vec![ToolResult::text(
            format!("call-{}", i - 1),
            format!("contents of file {}", i - 1),
            false,
        )]),
    }
}

/// A message of about `bytes` bytes of JSON.
pub(crate) fn sized_message(i: u64, bytes: usize) -> Message {
    let filler: String = "lorem ipsum dolor sit amet, "
        .chars()
        .cycle()
        .take(bytes)
        .collect();
    Message::tool_results(vec![ToolResult::text(format!("call-{i}"), filler, false)])
}

/// A run record.
pub(crate) fn run(
    run_id: &str,
    session: &str,
    started: DateTime<Utc>,
    status: RunState,
) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        session_id: session.into(),
        prompt: format!("prompt of {run_id}"),
        status,
        stop_reason: match status {
            RunState::Running => None,
            RunState::Ended(_) => Some("end_turn".into()),
        },
        started,
        ended: match status {
            RunState::Running => None,
            RunState::Ended(_) => Some(started + TimeDelta::seconds(5)),
        },
        pid: 4242,
        history: None,
    }
}

/// An event of a run.
pub(crate) fn event(run_id: &str, session: &str, seq: u64) -> RunEvent {
    RunEvent {
        seq,
        run_id: run_id.into(),
        session_id: session.into(),
        agent_path: "main".into(),
        ts: "2026-11-30T00:00:00Z".into(),
        kind: if seq == 1 {
            EventKind::RunStarted { prompt: "p".into() }
        } else {
            EventKind::TextDelta {
                text: format!("piece {seq}"),
            }
        },
    }
}

/// A finished status.
pub(crate) fn ended() -> RunState {
    RunState::Ended(RunStatus::Finished)
}

/// Every key of every store tree, for checking what a removal left.
pub(crate) fn all_keys(db: &sled::Db) -> Vec<(String, Vec<u8>)> {
    let trees = [
        layout::SESSIONS_TREE,
        layout::MESSAGES_TREE,
        layout::PENDING_TREE,
        layout::MARKERS_TREE,
        layout::LEDGER_TREE,
        layout::RULES_TREE,
        layout::MEMORY_TREE,
        layout::RUNS_TREE,
        layout::SESSION_RUNS_TREE,
        layout::EVENTS_TREE,
        layout::SPANS_TREE,
    ];
    let mut keys = Vec::new();
    for name in trees {
        let tree = db.open_tree(name).unwrap();
        for key in tree.iter().keys() {
            keys.push((name.to_owned(), key.unwrap().to_vec()));
        }
    }
    keys
}

/// Whether this process is the child playing `role`.
pub(crate) fn is_child(role: &str) -> bool {
    std::env::var(ROLE_VAR).is_ok_and(|value| value == role)
}

/// The data directory given to a child.
pub(crate) fn child_dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_VAR).unwrap())
}

/// A command that re-runs exactly the test `test_name` of this binary as the
/// child `role` on `data_dir`, with stdin and stdout piped.
pub(crate) fn child_command(test_name: &str, role: &str, data_dir: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE_VAR, role)
        .env(DIR_VAR, data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// Lines a child writes to stdout, delivered over a channel.
pub(crate) fn child_lines(child: &mut Child) -> Receiver<String> {
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line containing `prefix` and returns it from `prefix` on,
/// skipping the test harness's own output (which may precede a report on the
/// same line); panics after [`CHILD_LIMIT`] or when the child closes stdout.
pub(crate) fn wait_line(lines: &Receiver<String>, prefix: &str) -> String {
    loop {
        match lines.recv_timeout(CHILD_LIMIT) {
            Ok(line) => {
                if let Some(at) = line.find(prefix) {
                    return line[at..].to_owned();
                }
            }
            Err(error) => panic!("no line {prefix:?} from the child: {error}"),
        }
    }
}

/// Writes one line to stdout and flushes it (the child's report to its parent).
pub(crate) fn report(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Opens with `open`, waiting (at most 10 s) while the previous handle of the
/// same database, just dropped, still holds its lock: sled releases the lock
/// when its background threads let go of the database, a moment after the drop.
pub(crate) fn until_unlocked<T, E: std::fmt::Display>(open: impl Fn() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Ok(opened) => return opened,
            Err(err) if std::time::Instant::now() < deadline && is_lock_error(&err.to_string()) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(err) => panic!("cannot open the database: {err}"),
        }
    }
}

fn is_lock_error(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("lock") || message.contains("in use")
}
