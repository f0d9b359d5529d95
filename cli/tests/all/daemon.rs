//! `troupe serve` end to end: the real daemon binary against the scripted
//! model server, spoken to over raw HTTP/1.0 on loopback (so every header,
//! including a forged `Host`, is exactly what the test writes).
//!
//! Covered: authentication (401), DNS-rebinding defence (403), the body
//! limit (413), malformed JSON (400), unknown runs and endpoints (404), an
//! ended run (409), the JSON error shape; a run's events as SSE with `id:` =
//! `seq`, replay after `Last-Event-ID` of exactly the missed events; twenty
//! concurrent runs from separate connections with separate, complete
//! streams; a second daemon on the same home refusing; SIGTERM with a run in
//! flight leaving a valid, resumable session and no `daemon.json`. And the
//! connections: the owner answered while a thousand connections hang
//! half-sent, a head late or too large refused, the oldest unauthenticated
//! connection closed at the cap, an event stream and a slow `POST` kept past
//! the idle limit, the open-files limit raised.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};

use crate::support::{COMMAND_LIMIT, Env};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

/// A running `troupe serve`.
pub(crate) struct Daemon {
    child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) token: String,
    stderr: Option<BufReader<std::process::ChildStderr>>,
}

impl Daemon {
    /// Starts the daemon in `env` and waits for its "listening on" line.
    pub(crate) fn start(env: &Env, server: &ScriptedServer) -> Daemon {
        Self::start_with(env, Some(server), &[])
    }

    /// [`Daemon::start`] with further `troupe serve` arguments; without a
    /// server the daemon's environment names no provider at all.
    pub(crate) fn start_with(env: &Env, server: Option<&ScriptedServer>, args: &[&str]) -> Daemon {
        let mut command = env.command(server);
        command.arg("serve").args(args);
        Self::start_command(env, command)
    }

    /// [`Daemon::start_with`] with the daemon's open-files limit set to
    /// `soft` and `hard` before it starts.
    fn start_with_open_files(
        env: &Env,
        server: Option<&ScriptedServer>,
        args: &[&str],
        soft: u64,
        hard: u64,
    ) -> Daemon {
        use std::os::unix::process::CommandExt;
        let mut command = env.command(server);
        command.arg("serve").args(args);
        // SAFETY: the closure runs in the child between fork and exec and
        // only calls setrlimit, which is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Self::start_command(env, command)
    }

    /// Starts a prepared `troupe serve` command.
    pub(crate) fn start_command(env: &Env, mut command: std::process::Command) -> Daemon {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("troupe serve starts");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            // Blocking read: the daemon writes this line first (or exits).
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "the daemon exited before listening"
            );
            if let Some(rest) = line
                .trim()
                .strip_prefix("troupe serve: listening on http://")
            {
                let addr = rest.split_whitespace().next().unwrap();
                break addr.parse().unwrap();
            }
        };
        let token = std::fs::read_to_string(env.data_dir().join("daemon.token"))
            .unwrap()
            .trim()
            .to_string();
        Daemon {
            child,
            addr,
            token,
            stderr: Some(stderr),
        }
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// An authorised request with a JSON body (or none).
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        request(
            self.addr,
            method,
            path,
            &[
                ("Host", &self.addr.to_string()),
                ("Authorization", &self.bearer()),
            ],
            body.as_bytes(),
        )
        .await
    }

    /// Submits a run; returns `(run_id, session_id)`.
    pub(crate) async fn submit(&self, body: Value) -> (String, String) {
        let response = self.call("POST", "/v1/runs", Some(&body)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let value = response.json();
        (
            value["run_id"].as_str().unwrap().to_string(),
            value["session_id"].as_str().unwrap().to_string(),
        )
    }

    /// Reads a run's SSE stream until `run_finished` (or until `stop`
    /// accepts the events so far): `(id, event)` pairs.
    pub(crate) async fn events(
        &self,
        run_id: &str,
        last_event_id: Option<u64>,
        stop: impl Fn(&[(u64, Value)]) -> bool,
    ) -> Vec<(u64, Value)> {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut head = format!(
            "GET /v1/runs/{run_id}/events HTTP/1.0\r\nHost: {}\r\nAuthorization: {}\r\n",
            self.addr,
            self.bearer()
        );
        if let Some(id) = last_event_id {
            head.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let status = next_line(&mut lines).await.unwrap();
        assert!(status.contains(" 200 "), "{status}");
        while !next_line(&mut lines).await.unwrap().is_empty() {}
        let mut events = Vec::new();
        let mut id = None;
        while let Some(line) = next_line(&mut lines).await {
            if let Some(rest) = line.strip_prefix("id:") {
                id = Some(rest.trim().parse::<u64>().unwrap());
            } else if let Some(rest) = line.strip_prefix("data:") {
                let event: Value = serde_json::from_str(rest.trim()).unwrap();
                let finished = event["type"] == "run_finished" && event["agent_path"] == "main";
                events.push((id.take().expect("every event has an id"), event));
                if finished || stop(&events) {
                    break;
                }
            }
        }
        events
    }

    /// The daemon's process id.
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Sends `signal` and waits for the exit code.
    pub(crate) fn stop(mut self, signal: i32) -> (i32, String) {
        // SAFETY: plain signal delivery to our own child, not reaped yet.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
        self.wait_exit()
    }

    /// Waits (bounded) until the daemon exits: its exit code and the rest of
    /// its stderr.
    fn wait_exit(&mut self) -> (i32, String) {
        let mut stderr = self.stderr.take().expect("stderr not yet read");
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
            let _ = done_tx.send(rest);
        });
        // stderr ends when the daemon exits.
        let rest = done_rx
            .recv_timeout(COMMAND_LIMIT)
            .expect("the daemon exits in time");
        let status = self.child.wait().unwrap();
        (status.code().unwrap_or(-1), rest)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn next_line(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>,
) -> Option<String> {
    tokio::time::timeout(COMMAND_LIMIT, lines.next_line())
        .await
        .expect("the daemon answers in time")
        .unwrap()
}

/// One HTTP response.
pub(crate) struct Response {
    pub(crate) status: u16,
    /// The status line and headers.
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("JSON body ({err}): {}", self.text()))
    }

    /// The `{error:{code,message}}` body, checked for shape.
    fn error_code(&self) -> String {
        let value = self.json();
        assert!(
            value["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{value}"
        );
        value["error"]["code"].as_str().unwrap().to_string()
    }
}

/// A raw HTTP/1.0 request: exactly the given headers, the body, and the
/// whole response read to the connection's end.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.0\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    // The daemon may answer (413) and close before the whole body is sent.
    let _ = stream.write_all(body).await;
    read_to_end(&mut stream).await
}

/// The response the daemon sends on `stream`, read to the connection's end.
async fn read_to_end(stream: &mut tokio::net::TcpStream) -> Response {
    let mut raw = Vec::new();
    tokio::time::timeout(COMMAND_LIMIT, stream.read_to_end(&mut raw))
        .await
        .expect("the daemon answers in time")
        .unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Response {
        status,
        head,
        body: raw[split + 4..].to_vec(),
    }
}

/// `troupe` as a client of the daemon (the test environment runs embedded
/// unless told otherwise).
pub(crate) fn client(env: &Env, server: Option<&ScriptedServer>) -> std::process::Command {
    let mut command = env.command(server);
    command.env_remove("TROUPE_NO_DAEMON");
    command
}

fn run_body(env: &Env, prompt: &str) -> Value {
    json!({"prompt": prompt, "cwd": env.root()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_what_it_must_with_json_errors() {
    let server = ScriptedServer::start(Script::new().then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let host = daemon.addr.to_string();
    let addr = daemon.addr;

    // Health needs no token; everything else does.
    let health = request(addr, "GET", "/healthz", &[("Host", &host)], b"").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(health.json()["runs_in_progress"], 0);
    let missing = request(addr, "GET", "/v1/runs", &[("Host", &host)], b"").await;
    assert_eq!(
        (missing.status, missing.error_code().as_str()),
        (401, "unauthorized")
    );
    let wrong = request(
        addr,
        "GET",
        "/v1/runs",
        &[("Host", &host), ("Authorization", "Bearer not-the-token")],
        b"",
    )
    .await;
    assert_eq!(wrong.status, 401);

    // A foreign Host or Origin is refused even with the right token.
    let bearer = daemon.bearer();
    let rebound = request(
        addr,
        "GET",
        "/v1/runs",
        &[("Host", "evil.example"), ("Authorization", &bearer)],
        b"",
    )
    .await;
    assert_eq!(
        (rebound.status, rebound.error_code().as_str()),
        (403, "forbidden")
    );
    let cross_site = request(
        addr,
        "GET",
        "/v1/runs",
        &[
            ("Host", &host),
            ("Origin", "http://evil.example"),
            ("Authorization", &bearer),
        ],
        b"",
    )
    .await;
    assert_eq!(cross_site.status, 403);
    let no_host = request(addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(no_host.status, 403);

    // Bodies: over 1 MiB, malformed, unknown fields, empty prompt.
    let huge = vec![b' '; 1024 * 1024 + 1];
    let too_large = request(
        addr,
        "POST",
        "/v1/runs",
        &[("Host", &host), ("Authorization", &bearer)],
        &huge,
    )
    .await;
    assert_eq!(
        (too_large.status, too_large.error_code().as_str()),
        (413, "payload_too_large")
    );
    let malformed = request(
        addr,
        "POST",
        "/v1/runs",
        &[("Host", &host), ("Authorization", &bearer)],
        b"{\"prompt\": ",
    )
    .await;
    assert_eq!(malformed.status, 400);
    assert!(
        malformed.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed JSON")
    );
    let unknown_field = daemon
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "x", "cwd": "/", "sudo": true})),
        )
        .await;
    assert_eq!(unknown_field.status, 400);
    let empty = daemon
        .call("POST", "/v1/runs", Some(&run_body(&env, "  ")))
        .await;
    assert_eq!(empty.status, 400);
    let relative = daemon
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "x", "cwd": "rel"})),
        )
        .await;
    assert_eq!(relative.status, 400);
    let bad_mode = daemon
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "x", "cwd": env.root(), "mode": "yolo"})),
        )
        .await;
    assert_eq!(bad_mode.status, 400);

    // Unknown things are 404; an ended run cannot be cancelled (409).
    for (method, path) in [
        ("GET", "/v1/runs/nope"),
        ("GET", "/v1/runs/nope/events"),
        ("POST", "/v1/runs/nope/cancel"),
        ("GET", "/v1/sessions/nope"),
        ("GET", "/v1/nothing-here"),
    ] {
        let response = daemon.call(method, path, None).await;
        assert_eq!(
            (response.status, response.error_code().as_str()),
            (404, "not_found"),
            "{method} {path}"
        );
    }
    let (run_id, session_id) = daemon.submit(run_body(&env, "hello")).await;
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished");
    let ended = daemon
        .call("POST", &format!("/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(
        (ended.status, ended.error_code().as_str()),
        (409, "conflict")
    );
    // The state in words, as the API names it elsewhere: no Rust names.
    assert_eq!(
        ended.json()["error"]["message"],
        format!("run {run_id} is not in progress (it ended: finished)")
    );
    let approval = daemon
        .call(
            "POST",
            &format!("/v1/runs/{run_id}/approvals/x"),
            Some(&json!({"outcome": "maybe"})),
        )
        .await;
    assert_eq!(approval.status, 400);

    // What was run is listed and shown.
    let runs = daemon.call("GET", "/v1/runs", None).await.json();
    assert_eq!(runs["runs"][0]["run_id"], run_id.as_str());
    let run = daemon
        .call("GET", &format!("/v1/runs/{run_id}"), None)
        .await
        .json();
    assert_eq!(run["status"], "finished");
    let session = daemon
        .call("GET", &format!("/v1/sessions/{session_id}"), None)
        .await
        .json();
    assert_eq!(session["messages"].as_array().unwrap().len(), 2);
    let sessions = daemon.call("GET", "/v1/sessions", None).await.json();
    assert_eq!(sessions["sessions"][0]["id"], session_id.as_str());

    // A second daemon on the same home refuses, naming the first.
    let second = env.command(Some(&server)).arg("serve").output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(message.contains("a daemon already runs"), "{message}");
    assert!(
        message.contains(&daemon.child.id().to_string()),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_their_seq_and_replay_exactly_what_was_missed() {
    let script = Script::new()
        .then(tool_call("glob", json!({"pattern": "*"})))
        .then(text("all files listed"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, _) = daemon.submit(run_body(&env, "list")).await;
    // A client that drops after the third event, then reconnects.
    let first = daemon
        .events(&run_id, None, |events| events.len() == 3)
        .await;
    assert_eq!(first.len(), 3);
    let rest = daemon.events(&run_id, Some(3), |_| false).await;
    let all = daemon.events(&run_id, None, |_| false).await;
    let mut joined = first.clone();
    joined.extend(rest.clone());
    assert_eq!(joined, all);
    for (id, event) in &all {
        assert_eq!(event["seq"].as_u64(), Some(*id));
        assert_eq!(event["run_id"], run_id.as_str());
    }
    assert_eq!(
        all.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (1..=all.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(all.last().unwrap().1["type"], "run_finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_runs_each_get_their_own_complete_stream() {
    const RUNS: usize = 20;
    let mut script = Script::new();
    for _ in 0..RUNS {
        script = script.then(text("done"));
    }
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = std::sync::Arc::new(Daemon::start(&env, &server));
    let mut clients = Vec::new();
    for n in 0..RUNS {
        let daemon = daemon.clone();
        let body = run_body(&env, &format!("task {n}"));
        clients.push(tokio::spawn(async move {
            let (run_id, session_id) = daemon.submit(body).await;
            let events = daemon.events(&run_id, None, |_| false).await;
            (run_id, session_id, events)
        }));
    }
    let mut run_ids = std::collections::HashSet::new();
    for client in clients {
        let (run_id, session_id, events) = client.await.unwrap();
        assert!(run_ids.insert(run_id.clone()));
        assert_eq!(events.first().unwrap().1["type"], "run_started");
        assert_eq!(events.last().unwrap().1["status"], "finished");
        for (n, (id, event)) in events.iter().enumerate() {
            assert_eq!(*id, n as u64 + 1);
            assert_eq!(event["run_id"], run_id.as_str());
            assert_eq!(event["session_id"], session_id.as_str());
        }
    }
    assert_eq!(run_ids.len(), RUNS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_runs_in_flight_and_leaves_a_resumable_session() {
    let script = Script::new()
        .then(tool_call("bash", json!({"command": "sleep 307.5"})))
        .then(text("resumed and done"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, session_id) = daemon
        .submit(json!({"prompt": "sleep", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let started = daemon
        .events(&run_id, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "tool_started")
        })
        .await;
    assert!(started.iter().any(|(_, e)| e["type"] == "tool_started"));
    let data_dir = env.data_dir();
    let (code, stderr) = daemon.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    assert!(!data_dir.join("daemon.json").exists());
    // No process of the run survives.
    assert_eq!(crate::support::processes_running("307.5").len(), 0);
    // The run ended cancelled, its events complete in the store.
    let shown = env
        .command(None)
        .args(["sessions", "show", &session_id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("cancelled"), "{shown}");
    // The session continues where it stopped.
    let resumed = env
        .command(Some(&server))
        .args(["run", "--session", &session_id, "--json", "go on"])
        .output()
        .unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("resumed and done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_answered_through_the_api() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ))
        .then(text("written"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let (seen, request) = asked.last().unwrap();
    assert_eq!(request["tool"], "write_file");
    let approval_id = request["approval_id"].as_str().unwrap();
    let unknown = daemon
        .call(
            "POST",
            &format!("/v1/runs/{run_id}/approvals/not-{approval_id}"),
            Some(&json!({"outcome": "allow"})),
        )
        .await;
    assert_eq!(unknown.status, 404);
    // Text written while the run waits goes with the next model call.
    let messages = format!("/v1/runs/{run_id}/messages");
    let empty = daemon
        .call("POST", &messages, Some(&json!({"text": "  "})))
        .await;
    assert_eq!(empty.status, 400, "{}", empty.text());
    let written = daemon
        .call("POST", &messages, Some(&json!({"text": "keep it short"})))
        .await;
    assert_eq!(written.status, 202, "{}", written.text());
    let answered = daemon
        .call(
            "POST",
            &format!("/v1/runs/{run_id}/approvals/{approval_id}"),
            Some(&json!({"outcome": "allow"})),
        )
        .await;
    assert_eq!(answered.status, 200, "{}", answered.text());
    let rest = daemon.events(&run_id, Some(*seen), |_| false).await;
    assert!(
        rest.iter()
            .any(|(_, e)| e["type"] == "approval_resolved" && e["outcome"] == "allow")
    );
    assert_eq!(rest.last().unwrap().1["status"], "finished");
    assert!(
        rest.iter()
            .any(|(_, e)| e["type"] == "user_message" && e["text"] == "keep it short")
    );
    assert!(server.requests()[1].any_user_text_contains("keep it short"));
    let late = daemon
        .call("POST", &messages, Some(&json!({"text": "too late"})))
        .await;
    assert_eq!(late.status, 409, "{}", late.text());
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "approved\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_limit_waits_for_runs_then_exits_cleanly() {
    let script = Script::new()
        .then(tool_call("bash", json!({"command": "sleep 1.5"})))
        .then(text("slept"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let mut daemon = Daemon::start_with(&env, Some(&server), &["--idle-exit", "1"]);
    let (run_id, _) = daemon
        .submit(json!({"prompt": "sleep", "cwd": env.root(), "mode": "bypass"}))
        .await;
    // The run outlasts the idle limit and still finishes: a run in progress
    // and an open stream keep the daemon up.
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished");
    // Then, with nothing to do, it exits by itself, cleanly.
    let (code, rest) = daemon.wait_exit();
    assert_eq!(code, 0, "{rest}");
    assert!(rest.contains("nothing to do for 1 s"), "{rest}");
    assert!(!env.data_dir().join("daemon.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_prepared_with_the_environment_the_client_sends() {
    let server = ScriptedServer::start(Script::new().then(text("configured by the client")))
        .await
        .unwrap();
    let env = Env::new();
    // The daemon's own environment has no provider key or endpoint.
    let daemon = Daemon::start_with(&env, None, &[]);
    let without = daemon
        .call("POST", "/v1/runs", Some(&run_body(&env, "hi")))
        .await;
    assert_eq!(without.status, 422, "{}", without.text());
    assert!(
        without.text().contains("ANTHROPIC_API_KEY"),
        "{}",
        without.text()
    );
    // The client's shell has them, and sends them.
    let client_env = json!({
        "HOME": env.home.path(),
        "XDG_CONFIG_HOME": env.home.path().join("config"),
        "PATH": std::env::var("PATH").unwrap_or_default(),
        "ANTHROPIC_BASE_URL": server.anthropic_base_url(),
        "ANTHROPIC_API_KEY": "test-key",
    });
    let (run_id, _) = daemon
        .submit(json!({"prompt": "hi", "cwd": env.root(), "env": client_env}))
        .await;
    let events = daemon.events(&run_id, None, |_| false).await;
    let last = &events.last().unwrap().1;
    assert_eq!(last["status"], "finished", "{last}");
    assert_eq!(last["final_text"], "configured by the client");
    let request = server.requests().into_iter().next().unwrap();
    assert_eq!(request.header("x-api-key"), Some("test-key"));
}

/// The `--json` lines of a run with what differs between two runs of the
/// same script taken out (ids, times, durations, and the place of a
/// `checkpoint_created` event, which comes when its record is written,
/// among the calls' events: they are compared without it, renumbered, and
/// the checkpoints apart, first).
fn comparable(stdout: &[u8]) -> Vec<Value> {
    /// Takes out of `event` what differs between two runs of one script.
    fn steady(mut event: Value, volatile: &[&str]) -> Value {
        let object = event.as_object_mut().unwrap();
        for name in volatile {
            object.remove(*name);
        }
        event
    }
    let text = String::from_utf8_lossy(stdout);
    let (checkpoints, events): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|line| line.contains("\"type\":\"checkpoint_created\""));
    let checkpoints = checkpoints.into_iter().map(|line| {
        let event = serde_json::from_str(line).unwrap();
        steady(
            event,
            &[
                "run_id",
                "session_id",
                "ts",
                "seq",
                "commit",
                "tool_call_ids",
            ],
        )
    });
    let events = events.into_iter().zip(1u64..).map(|(line, seq)| {
        let mut event: Value = serde_json::from_str(line).unwrap();
        event["seq"] = Value::from(seq);
        steady(
            event,
            &[
                "run_id",
                "session_id",
                "ts",
                "duration_ms",
                "approval_id",
                "call_id",
            ],
        )
    });
    checkpoints.chain(events).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_run_through_the_daemon_prints_what_an_embedded_run_prints() {
    let script = || {
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(tool_call(
                "write_file",
                json!({"path": "notes.txt", "content": "x\n"}),
            ))
            .then(text("listed, and the write was refused"))
    };
    let env = Env::new();
    std::fs::write(env.root().join("a.txt"), "a\n").unwrap();

    // Embedded, with no daemon around.
    let embedded_server = ScriptedServer::start(script()).await.unwrap();
    let embedded = env
        .command(Some(&embedded_server))
        .args(["run", "--json", "list and write"])
        .output()
        .unwrap();
    assert_eq!(embedded.status.code(), Some(0));

    // The same through a daemon started without any provider settings: the
    // client's environment carries them.
    let server = ScriptedServer::start(script()).await.unwrap();
    let daemon = Daemon::start_with(&env, None, &[]);
    let through = client(&env, Some(&server))
        .args(["run", "--json", "list and write"])
        .output()
        .unwrap();
    assert_eq!(
        through.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&through.stderr)
    );
    assert_eq!(comparable(&through.stdout), comparable(&embedded.stdout));
    // It really ran in the daemon: the daemon lists it.
    let runs = daemon.call("GET", "/v1/runs", None).await.json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);

    // Usage errors keep their exit code through the daemon.
    let bad = client(&env, Some(&server))
        .args(["run", "--session", "no-such-session", "hi"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-session"));

    // --no-daemon runs in this process, which cannot open the daemon's store.
    let embedded_again = env
        .command(Some(&server))
        .args(["run", "--no-daemon", "hi"])
        .output()
        .unwrap();
    assert_eq!(embedded_again.status.code(), Some(1));
    let message = String::from_utf8_lossy(&embedded_again.stderr);
    assert!(
        message.contains("in use by another troupe process"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_on_one_home_both_finish_through_the_daemon() {
    let script = Script::new()
        .then(tool_call("bash", json!({"command": "sleep 0.5"})))
        .then(tool_call("bash", json!({"command": "sleep 0.5"})))
        .then(text("done"))
        .then(text("done"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let _daemon = Daemon::start_with(&env, None, &[]);
    let mut first = client(&env, Some(&server));
    first.args(["run", "--mode", "bypass", "--json", "one"]);
    let mut second = client(&env, Some(&server));
    second.args(["run", "--mode", "bypass", "--json", "two"]);
    let (first, second) = tokio::join!(
        tokio::process::Command::from(first).output(),
        tokio::process::Command::from(second).output()
    );
    for output in [first.unwrap(), second.unwrap()] {
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let events = comparable(&output.stdout);
        assert_eq!(events.last().unwrap()["status"], "finished");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_rm_goes_through_the_daemon_and_spares_a_session_in_use() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "x.txt", "content": "x\n"}),
        ))
        .then(text("unused"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let session = asked[0].1["session_id"].as_str().unwrap().to_string();
    let rm = |given: &str| {
        env.command(None)
            .args(["sessions", "rm", given])
            .output()
            .unwrap()
    };
    // In use: refused, nothing removed.
    let busy = rm(&session[..13]);
    assert_eq!(busy.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(stderr.contains("run in progress"), "{stderr}");
    let cancel = daemon
        .call("POST", &format!("/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(cancel.status, 200);
    daemon.events(&run_id, None, |_| false).await;
    // Idle: removed by the daemon, from its memory and the store.
    let removed = rm(&session[..13]);
    assert_eq!(
        removed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&removed.stdout).trim(),
        format!("removed session {session}")
    );
    let gone = daemon
        .call("GET", &format!("/v1/sessions/{session}"), None)
        .await;
    assert_eq!(gone.status, 404);
    let again = rm(&session);
    assert_eq!(again.status.code(), Some(2));
    // A run cannot continue it.
    let continued = daemon
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "more", "cwd": env.root(), "session_id": session})),
        )
        .await;
    assert_eq!(continued.status, 404, "{}", continued.text());
    let (code, stderr) = daemon.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_answer_while_the_daemon_holds_the_store() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text("looked")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let daemon = Daemon::start_with(&env, None, &[]);
    let run = client(&env, Some(&server))
        .args(["run", "--json", "look"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&run.stdout).lines().next().unwrap()).unwrap();
    let (session, run_id) = (
        first["session_id"].as_str().unwrap().to_string(),
        first["run_id"].as_str().unwrap().to_string(),
    );
    let views: Vec<Vec<String>> = vec![
        vec!["sessions".into(), "list".into()],
        vec!["sessions".into(), "list".into(), "--json".into()],
        vec!["sessions".into(), "show".into(), session[..13].to_string()],
        vec!["sessions".into(), "export".into(), session.clone()],
        vec!["trace".into(), run_id.clone()],
        vec!["trace".into(), "no-such-run".into()],
    ];
    let outputs = |env: &Env| {
        views
            .iter()
            .map(|args| {
                let output = env.command(None).args(args).output().unwrap();
                (
                    output.status.code(),
                    String::from_utf8_lossy(&output.stdout).into_owned(),
                    String::from_utf8_lossy(&output.stderr).into_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let while_up = outputs(&env);
    for ((code, stdout, stderr), args) in while_up.iter().zip(&views).take(5) {
        assert_eq!(*code, Some(0), "{args:?}: {stderr}");
        assert!(!stdout.is_empty(), "{args:?}");
    }
    assert_eq!(while_up[5].0, Some(2));
    assert!(while_up[4].1.contains("invoke_agent"), "{}", while_up[4].1);
    // Once the daemon is gone, the same commands read the store themselves
    // and print the same.
    let (code, stderr) = daemon.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(outputs(&env), while_up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_can_be_listed_attached_approved_and_cancelled_from_another_terminal() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ))
        .then(text("written"))
        .then(tool_call("bash", json!({"command": "sleep 309.5"})));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let approval_id = asked.last().unwrap().1["approval_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Another terminal lists it and attaches to it by a prefix of its id.
    let short = &run_id[run_id.len() - 8..];
    let list = env.command(None).args(["runs", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(listed.contains(&format!("{short}  running")), "{listed}");
    // Showing it lists the approval it waits for, by its number in the run.
    let number = approval_id
        .strip_prefix(&format!("{run_id}-"))
        .unwrap()
        .to_string();
    let show = env
        .command(None)
        .args(["runs", "show", short])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        shown.contains(&format!("\napproval {number}  write_file wants to run: "))
            && shown.contains(&format!(
                "(answer: troupe approve {short} {number} allow|deny)"
            )),
        "{shown}"
    );
    let mut attach = tokio::process::Command::from({
        let mut command = env.command(None);
        command.args(["runs", "attach", &run_id[..20], "--json"]);
        command
    })
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut attached = tokio::io::BufReader::new(attach.stdout.take().unwrap()).lines();
    // It replays from the first event up to the waiting approval.
    loop {
        let line = tokio::time::timeout(COMMAND_LIMIT, attached.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("attach prints the events so far");
        if line.contains("approval_requested") {
            break;
        }
    }
    // A third one answers the approval by the run's short id and the
    // approval's number.
    let approve = env
        .command(None)
        .args(["approve", short, &number, "allow"])
        .output()
        .unwrap();
    assert_eq!(
        approve.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let status = tokio::time::timeout(COMMAND_LIMIT, attach.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let mut rest = Vec::new();
    while let Some(line) = attached.next_line().await.unwrap() {
        rest.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(rest.last().unwrap()["type"], "run_finished");
    assert!(rest.iter().any(|e| e["type"] == "approval_resolved"));

    // A run in progress is cancelled from another terminal.
    let (sleeper, _) = daemon
        .submit(json!({"prompt": "sleep", "cwd": env.root(), "mode": "bypass"}))
        .await;
    daemon
        .events(&sleeper, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "tool_started")
        })
        .await;
    let cancel = env
        .command(None)
        .args(["runs", "cancel", &sleeper])
        .output()
        .unwrap();
    assert_eq!(cancel.status.code(), Some(0));
    let ended = daemon.events(&sleeper, None, |_| false).await;
    assert_eq!(ended.last().unwrap().1["status"], "cancelled");
    let unknown = env
        .command(None)
        .args(["approve", &sleeper, "nope", "allow"])
        .output()
        .unwrap();
    assert_eq!(
        unknown.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );

    // Without the daemon: attach reads an ended run from the store, from
    // any event; cancel says what it needs.
    let (code, stderr) = daemon.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    let replay = env
        .command(None)
        .args(["runs", "attach", &run_id, "--from", "3", "--json"])
        .output()
        .unwrap();
    assert_eq!(replay.status.code(), Some(0));
    let replayed: Vec<Value> = String::from_utf8_lossy(&replay.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(replayed[0]["seq"], 3);
    assert_eq!(replayed.last().unwrap()["type"], "run_finished");
    let show = env
        .command(None)
        .args(["runs", "show", &run_id])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains("finished"));
    let cancel = env
        .command(None)
        .args(["runs", "cancel", &run_id])
        .output()
        .unwrap();
    assert_eq!(cancel.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&cancel.stderr).contains("no daemon is running"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_outright_takes_its_run_with_it() {
    let script = Script::new()
        .then(tool_call("bash", json!({"command": "sleep 313.5"})))
        .then(text("never"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start_with(&env, None, &[]);
    let mut command = tokio::process::Command::from({
        let mut command = client(&env, Some(&server));
        command.args(["run", "--mode", "bypass", "--json", "sleep"]);
        command
    });
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut run_id = String::new();
    loop {
        let line = tokio::time::timeout(COMMAND_LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("the client prints events");
        let event: Value = serde_json::from_str(&line).unwrap();
        run_id = event["run_id"].as_str().unwrap_or(&run_id).to_string();
        if event["type"] == "tool_started" {
            break;
        }
    }
    // Someone else only watches; a watcher going away changes nothing.
    let watched = daemon
        .events(&run_id, None, |events| !events.is_empty())
        .await;
    assert_eq!(watched[0].1["type"], "run_started");
    // The terminal that started it dies without a word.
    child.kill().await.unwrap();
    let ended = daemon.events(&run_id, None, |_| false).await;
    let last = &ended.last().unwrap().1;
    assert_eq!(last["status"], "cancelled", "{last}");
    assert_eq!(crate::support::processes_running("313.5").len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_the_daemon_asks_its_approvals_on_the_terminal() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "from the terminal\n"}),
        ))
        .then(text("written after approval"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start_with(&env, None, &[]);
    let mut command = client(&env, Some(&server));
    command.args(["run", "write it"]);
    let (code, screen) = crate::support::run_on_terminal(command, "y\n").await;
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("write_file"), "{screen}");
    assert!(screen.contains("written after approval"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "from the terminal\n"
    );
    // It was the daemon's run.
    let runs = daemon.call("GET", "/v1/runs", None).await.json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
}

/// How long a request of the daemon's owner may take while other
/// connections hold the daemon: generous for a loaded machine, and still
/// finite, where a starved request waits for ever.
const FLOODED_ANSWER: std::time::Duration = std::time::Duration::from_secs(10);

/// Raises this test process's soft open-files limit to at least `wanted`.
fn raise_open_files(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a stack value for the call's duration.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(read, 0);
    if limit.rlim_cur >= wanted {
        return;
    }
    assert!(
        limit.rlim_max >= wanted,
        "the hard open-files limit {} is below {wanted}",
        limit.rlim_max
    );
    limit.rlim_cur = wanted;
    // SAFETY: as above.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0);
}

/// The soft and hard open-files limits of process `pid`, from /proc.
fn open_files_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// How many descriptors process `pid` has open.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A connection that sent the start of a request head for `path` and
/// nothing more.
async fn half_sent(addr: SocketAddr, path: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::time::timeout(COMMAND_LIMIT, tokio::net::TcpStream::connect(addr))
        .await
        .expect("connected in time")
        .unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Waits until the daemon closes `stream` (its end, or a reset), discarding
/// what it sends before.
async fn closed_by_daemon(stream: &mut tokio::net::TcpStream) {
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(COMMAND_LIMIT, stream.read(&mut buffer))
            .await
            .expect("the daemon closes the connection in time");
        if matches!(read, Ok(0) | Err(_)) {
            return;
        }
    }
}

/// Reads one response with a `Content-Length` body from a connection that
/// stays open.
async fn read_response(stream: &mut tokio::io::BufReader<tokio::net::TcpStream>) -> Response {
    let mut line = String::new();
    let mut read_line = async |line: &mut String| {
        line.clear();
        tokio::time::timeout(COMMAND_LIMIT, stream.read_line(line))
            .await
            .expect("the daemon answers in time")
            .unwrap();
    };
    read_line(&mut line).await;
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut head = line.trim_end().to_string();
    let mut length = 0;
    loop {
        read_line(&mut line).await;
        if line.trim().is_empty() {
            break;
        }
        head.push_str("\r\n");
        head.push_str(line.trim_end());
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    tokio::time::timeout(COMMAND_LIMIT, stream.read_exact(&mut body))
        .await
        .expect("the daemon sends the body in time")
        .unwrap();
    Response { status, head, body }
}

/// Sends an HTTP/1.1 request that keeps the connection open.
async fn send_kept_open(
    stream: &mut tokio::io::BufReader<tokio::net::TcpStream>,
    path: &str,
    host: &str,
    authorization: Option<&str>,
) {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    if let Some(value) = authorization {
        head.push_str(&format!("Authorization: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.get_mut().write_all(head.as_bytes()).await.unwrap();
}

/// Reads a run's event stream until `stop` accepts an event; returns the
/// events read.
async fn events_until(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>,
    stop: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(line) = next_line(lines).await {
        if let Some(rest) = line.strip_prefix("data:") {
            let event: Value = serde_json::from_str(rest.trim()).unwrap();
            let done = stop(&event);
            events.push(event);
            if done {
                return events;
            }
        }
    }
    panic!("the event stream ended early: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_is_answered_while_a_thousand_connections_hang_half_sent() {
    const FLOOD: usize = 1000;
    raise_open_files(4096);
    let server = ScriptedServer::start(Script::new().then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    // As many descriptors as there are connections, and no raising the
    // limit: the connections alone could take every one. (No head timeout
    // to speak of: the cap alone keeps them out.)
    let daemon = Daemon::start_with_open_files(
        &env,
        Some(&server),
        &["--header-timeout-ms", "600000"],
        1000,
        1000,
    );
    let pid = daemon.child.id();
    let before = open_descriptors(pid);
    let mut held = Vec::new();
    for _ in 0..FLOOD {
        held.push(half_sent(daemon.addr, "/v1/runs").await);
    }
    let host = daemon.addr.to_string();
    let health = tokio::time::timeout(
        FLOODED_ANSWER,
        request(daemon.addr, "GET", "/healthz", &[("Host", &host)], b""),
    )
    .await
    .expect("GET /healthz is answered while 1,000 connections hang");
    assert_eq!(health.status, 200, "{}", health.text());
    let runs = tokio::time::timeout(FLOODED_ANSWER, daemon.call("GET", "/v1/runs", None))
        .await
        .expect("GET /v1/runs is answered while 1,000 connections hang");
    assert_eq!(runs.status, 200, "{}", runs.text());
    // A run is started and followed to its end meanwhile.
    let (run_id, _) = tokio::time::timeout(FLOODED_ANSWER, daemon.submit(run_body(&env, "hi")))
        .await
        .expect("POST /v1/runs is answered while 1,000 connections hang");
    let events = tokio::time::timeout(FLOODED_ANSWER, daemon.events(&run_id, None, |_| false))
        .await
        .expect("the run's events arrive while 1,000 connections hang");
    assert_eq!(events.last().unwrap().1["status"], "finished");
    // The daemon keeps at most 250 of them (a quarter of its limit), or
    // twice that while all of those are being read.
    let bound = before + 2 * 250 + 16;
    let deadline = std::time::Instant::now() + COMMAND_LIMIT;
    while open_descriptors(pid) > bound {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon holds {} descriptors, more than {bound}",
            open_descriptors(pid)
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_raises_its_open_files_limit_to_the_hard_limit() {
    raise_open_files(4096);
    let env = Env::new();
    let daemon = Daemon::start_with_open_files(&env, None, &[], 1024, 4096);
    assert_eq!(open_files_limits(daemon.child.id()), (4096, 4096));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_finish_its_request_head_in_time_is_closed() {
    let env = Env::new();
    let daemon = Daemon::start_with(&env, None, &["--header-timeout-ms", "1000"]);
    let started = std::time::Instant::now();
    let mut half = half_sent(daemon.addr, "/healthz").await;
    let mut silent = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
    closed_by_daemon(&mut half).await;
    closed_by_daemon(&mut silent).await;
    // Never before its time.
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    // A request sent whole is answered, on the same daemon.
    let host = daemon.addr.to_string();
    let health = request(daemon.addr, "GET", "/healthz", &[("Host", &host)], b"").await;
    assert_eq!(health.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_size_limit_is_refused() {
    let env = Env::new();
    let daemon = Daemon::start_with(&env, None, &[]);
    let host = daemon.addr.to_string();
    let padding = "x".repeat(20 * 1024);
    let refused = request(
        daemon.addr,
        "GET",
        "/healthz",
        &[("Host", &host), ("X-Padding", &padding)],
        b"",
    )
    .await;
    assert_eq!(refused.status, 431);
    let fits = "x".repeat(8 * 1024);
    let answered = request(
        daemon.addr,
        "GET",
        "/healthz",
        &[("Host", &host), ("X-Padding", &fits)],
        b"",
    )
    .await;
    assert_eq!(answered.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_oldest_unauthenticated_connection_is_closed_first() {
    let env = Env::new();
    let daemon = Daemon::start_with(
        &env,
        None,
        &["--max-unauthenticated", "4", "--header-timeout-ms", "60000"],
    );
    let host = daemon.addr.to_string();
    let bearer = daemon.bearer();
    // The owner's connection, kept open, authenticated by its first request.
    let owner = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
    let mut owner = tokio::io::BufReader::new(owner);
    send_kept_open(&mut owner, "/v1/runs", &host, Some(&bearer)).await;
    assert_eq!(read_response(&mut owner).await.status, 200);
    // Four connections without the token fill the cap, each answered once
    // (so the daemon has read it) and then holding half a head; a fifth
    // arrives.
    let mut strangers = Vec::new();
    for _ in 0..5 {
        let stream = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
        let mut stream = tokio::io::BufReader::new(stream);
        send_kept_open(&mut stream, "/healthz", &host, None).await;
        assert_eq!(read_response(&mut stream).await.status, 200);
        let mut stream = stream.into_inner();
        let head = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        strangers.push(stream);
    }
    closed_by_daemon(&mut strangers[0]).await;
    // The four newer ones are still open: each finishes its request and is
    // answered.
    for stranger in &mut strangers[1..] {
        stranger
            .write_all(b"Connection: close\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_to_end(stranger).await.status, 200);
    }
    // The owner's connection was never counted among them.
    send_kept_open(&mut owner, "/v1/runs", &host, Some(&bearer)).await;
    assert_eq!(read_response(&mut owner).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_and_a_slow_post_outlive_the_idle_limit() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ))
        .then(text("written"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start_with(
        &env,
        Some(&server),
        &["--header-timeout-ms", "1000", "--idle-timeout-ms", "2000"],
    );
    let host = daemon.addr.to_string();
    let bearer = daemon.bearer();
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    // The run waits for an approval: its stream has nothing to send.
    let mut stream = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
    let head = format!(
        "GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: {bearer}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let asked = events_until(&mut lines, |event| event["type"] == "approval_requested").await;
    let approval_id = asked.last().unwrap()["approval_id"].as_str().unwrap();
    // The answer is posted slowly: its head and half its body now.
    let body = json!({"outcome": "allow"}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut post = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
    let head = format!(
        "POST /v1/runs/{run_id}/approvals/{approval_id} HTTP/1.0\r\nHost: {host}\r\n\
         Authorization: {bearer}\r\nContent-Length: {}\r\n\r\n{first}",
        body.len()
    );
    post.write_all(head.as_bytes()).await.unwrap();
    // A connection that is idle after a request is closed by the idle limit:
    // once it is, the stream and the post have been silent longer than that.
    let probe = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
    let mut probe = tokio::io::BufReader::new(probe);
    send_kept_open(&mut probe, "/healthz", &host, None).await;
    assert_eq!(read_response(&mut probe).await.status, 200);
    closed_by_daemon(probe.get_mut()).await;
    // Both are still open: the post is answered, the stream goes on to the end.
    post.write_all(rest.as_bytes()).await.unwrap();
    let answered = read_to_end(&mut post).await;
    assert_eq!(answered.status, 200, "{}", answered.text());
    let rest = events_until(&mut lines, |event| {
        event["type"] == "run_finished" && event["agent_path"] == "main"
    })
    .await;
    assert_eq!(rest.last().unwrap()["status"], "finished");
}

/// Printed by the last step of a command, so a test sees that it ran.
const COMMAND_RAN: &str = "command-ran";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_commands_cannot_read_the_token_start_runs_or_answer_approvals() {
    let env = Env::new();
    // The daemon's address and token are only known once it runs: the
    // script's command reads them from files the test writes first.
    let exchange = env.home.path().join("exchange");
    std::fs::create_dir_all(&exchange).unwrap();
    let data = env.data_dir();
    // The command reads the token itself (where nothing hides it), and is
    // also handed it, as a leaked token would be: with the token in hand, it
    // asks over TCP for a bypass run in the home directory, answers an
    // approval, writes to its own run and removes a session, asks for a run
    // again and closes at once (so its end may be gone when the daemon
    // looks), and tries the daemon's Unix socket.
    let attack = format!(
        r#"cat '{data}/daemon.token' 2>&1 | head -c 200; echo; \
t=$(cat '{x}/token'); a=$(cat '{x}/addr'); p=${{a##*:}}; r=$(cat '{x}/run'); \
send() {{ exec 3<>/dev/tcp/127.0.0.1/$p; \
printf "%s %s HTTP/1.0\r\nHost: $a\r\nAuthorization: Bearer $t\r\nContent-Type: application/json\r\nContent-Length: ${{#3}}\r\n\r\n%s" "$1" "$2" "$3" >&3; \
cat <&3 | tr -d '\r' | sed -n '1p;$p'; echo; exec 3<&-; }}; \
send POST /v1/runs '{{"prompt":"escape","cwd":"/","mode":"bypass"}}'; \
send POST /v1/runs/$r/approvals/a1 '{{"outcome":"allow"}}'; \
send POST /v1/runs/$r/messages '{{"text":"do it"}}'; \
send DELETE /v1/sessions/nothing ''; \
exec 4<>/dev/tcp/127.0.0.1/$p; b='{{"prompt":"escape","cwd":"/","mode":"bypass"}}'; \
printf "POST /v1/runs HTTP/1.0\r\nHost: $a\r\nAuthorization: Bearer $t\r\nContent-Length: ${{#b}}\r\n\r\n%s" "$b" >&4; exec 4<&-; \
python3 - '{data}/daemon.sock' "$t" "$a" <<'PY' 2>&1 | tail -n 1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = b'{{"prompt":"escape","cwd":"/","mode":"bypass"}}'
s.sendall(b"POST /v1/runs HTTP/1.0\r\nHost: " + sys.argv[3].encode() + b"\r\nAuthorization: Bearer " + sys.argv[2].encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
print("socket:", s.recv(100).split(b"\r\n")[0].decode())
PY
echo {COMMAND_RAN}"#,
        data = data.display(),
        x = exchange.display(),
    );
    let script = Script::new()
        .then(tool_call("bash", json!({ "command": attack })))
        .then(text("done"));
    let server = ScriptedServer::start(script).await.unwrap();
    let daemon = Daemon::start(&env, &server);
    std::fs::write(exchange.join("token"), &daemon.token).unwrap();
    std::fs::write(exchange.join("addr"), daemon.addr.to_string()).unwrap();
    // The run's id is known once it is submitted; the command waits for it.
    let body = json!({"prompt": "go", "cwd": env.root(), "mode": "bypass"});
    let response = daemon.call("POST", "/v1/runs", Some(&body)).await;
    assert_eq!(response.status, 201, "{}", response.text());
    let run_id = response.json()["run_id"].as_str().unwrap().to_string();
    std::fs::write(exchange.join("run"), &run_id).unwrap();
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished");

    let requests = server.requests();
    let seen = &requests[1].tool_results()[0].content;
    assert!(seen.contains(COMMAND_RAN), "the command ran: {seen}");
    let statuses: Vec<&str> = seen
        .lines()
        .filter(|line| line.starts_with("HTTP/"))
        .collect();
    assert_eq!(statuses.len(), 4, "{seen}");
    for status in &statuses {
        assert!(status.contains(" 403 "), "refused: {seen}");
    }
    assert!(seen.contains("commands of a Troupe run may not"), "{seen}");
    // The socket is hidden where mounts can be made; otherwise it answers,
    // and refuses.
    let socket_line = seen
        .lines()
        .find(|line| line.starts_with("socket:") || line.contains("Error"))
        .unwrap_or_default();
    assert!(
        socket_line.contains(" 403 ") || socket_line.contains("Error"),
        "{seen}"
    );
    if troupe_process::os_sandbox::KernelSupport::probe()
        .namespaces
        .is_some()
    {
        assert!(
            !seen
                .lines()
                .next()
                .unwrap_or_default()
                .contains(&daemon.token)
        );
        assert!(
            socket_line.contains("Error"),
            "the socket is hidden: {seen}"
        );
    }
    // Nothing was started: the one run is the test's.
    let runs = daemon.call("GET", "/v1/runs", None).await.json();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    // The owner still answers, starts and writes: through the CLI's socket
    // and over TCP alike (the test is nobody's command).
    let owner = daemon
        .call(
            "POST",
            "/v1/runs/nope/approvals/a1",
            Some(&json!({"outcome": "allow"})),
        )
        .await;
    assert_eq!(owner.status, 404, "{}", owner.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_write_that_hangs_ends_the_daemon_and_the_next_client_carries_on() {
    // The run's only tool call creates the file that makes every later
    // store write hang (a test build's fault hook), as a hung sled write
    // would: the run record and the call are durable, its result never is.
    let script = Script::new()
        .then(tool_call(
            "bash",
            json!({"command": "touch hang-the-store"}),
        ))
        .then(text("a fresh daemon answers"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let block = env.root().join("hang-the-store");
    let mut command = env.command(Some(&server));
    command.arg("serve").env("TROUPE_FAULT_STORE_BLOCK", &block);
    let mut daemon = Daemon::start_command(&env, command);
    let (run_id, _session) = daemon
        .submit(json!({"prompt": "hang", "cwd": env.root(), "mode": "bypass"}))
        .await;
    // The watchdog gives up after 30 s; the wait is bounded by COMMAND_LIMIT.
    let (code, stderr) = daemon.wait_exit();
    assert!(block.exists(), "the tool ran");
    assert_eq!(code, 75, "the distinct exit code of a hung store: {stderr}");
    assert!(
        stderr.contains("a store write has not returned"),
        "{stderr}"
    );
    assert!(!env.data_dir().join("daemon.json").exists());
    let stall: Value = serde_json::from_str(
        &std::fs::read_to_string(env.data_dir().join("daemon-stall.json")).unwrap(),
    )
    .unwrap();
    assert!(stall["waited_ms"].as_u64().unwrap() >= 30_000, "{stall}");
    // Nothing was sent on that was not durable: the call's result never
    // reached the model.
    assert_eq!(server.request_count(), 1);
    std::fs::remove_file(&block).unwrap();

    // The next client starts a fresh daemon, which finds the stuck run
    // interrupted.
    let listed = env
        .command(None)
        .env_remove("TROUPE_NO_DAEMON")
        .env("TROUPE_DAEMON_IDLE_SECS", "60")
        .args(["runs", "list"])
        .output()
        .unwrap();
    assert!(
        env.data_dir().join("daemon.json").exists(),
        "a fresh daemon"
    );
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = listed
        .lines()
        .find(|line| line.contains(troupe_store::short_id(&run_id)))
        .unwrap_or_else(|| panic!("the run is listed: {listed}"));
    assert!(line.contains("interrupted"), "{listed}");

    // Runs go on through it, and it says why the one before it ended.
    let mut client = env.command(Some(&server));
    client
        .env_remove("TROUPE_NO_DAEMON")
        .env("TROUPE_DAEMON_IDLE_SECS", "60")
        .args(["run", "--json", "again"]);
    let output = client.output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answered = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(answered.contains("a fresh daemon answers"), "{answered}");
    let status = env
        .command(None)
        .env_remove("TROUPE_NO_DAEMON")
        .args(["daemon", "status"])
        .output()
        .unwrap();
    let status_text = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status_text.contains("previous daemon") && status_text.contains("did not return"),
        "{status_text}"
    );
    assert!(!env.data_dir().join("daemon-stall.json").exists());
    let stopped = env
        .command(None)
        .env_remove("TROUPE_NO_DAEMON")
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    assert_eq!(
        stopped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_endpoint_answers_each_agents_plan_by_path() {
    let step = |text: &str, status: &str| json!({"step": text, "status": status});
    let script = Script::new()
        .then(tool_call(
            "update_plan",
            json!({"plan": [step("Split the work", "in_progress"), step("Merge", "pending")]}),
        ))
        .then(tool_call(
            "agent",
            json!({"description": "part", "prompt": "CHILD-TASK", "fork": true}),
        ))
        .then(tool_call(
            "update_plan",
            json!({"explanation": "my part", "plan": [step("Look", "in_progress")]}),
        ))
        .then(tool_call(
            "update_plan",
            json!({"plan": [step("Look", "in_progress"), step("Again", "in_progress")]}),
        ))
        .then(text("child report"))
        .then(text("merged"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let mut body = run_body(&env, "split it");
    body["mode"] = json!("bypass");
    let (run_id, session_id) = daemon.submit(body).await;
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished");
    let announced: Vec<&Value> = events
        .iter()
        .map(|(_, event)| event)
        .filter(|event| event["type"] == "plan_updated")
        .collect();
    assert_eq!(announced.len(), 2, "{announced:?}");

    let answer = daemon
        .call("GET", &format!("/v1/sessions/{session_id}/plan"), None)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer = answer.json();
    assert_eq!(answer["session_id"], session_id.as_str());
    let plans = answer["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 2, "{answer}");
    assert_eq!(plans[0]["agent_path"], "main");
    assert_eq!(plans[0]["session_id"], session_id.as_str());
    assert_eq!(
        plans[0]["plan"],
        json!([
            step("Split the work", "in_progress"),
            step("Merge", "pending")
        ])
    );
    // The child's own plan, under its path; its refused call changed nothing.
    let child_path = plans[1]["agent_path"].as_str().unwrap();
    assert!(child_path.starts_with("main/"), "{child_path}");
    assert_eq!(announced[1]["agent_path"], child_path);
    assert_eq!(plans[1]["explanation"], "my part");
    assert_eq!(plans[1]["plan"], json!([step("Look", "in_progress")]));

    // Unknown sessions are 404; the token is needed as everywhere.
    let unknown = daemon.call("GET", "/v1/sessions/nope/plan", None).await;
    assert_eq!(
        (unknown.status, unknown.error_code().as_str()),
        (404, "not_found")
    );
    let host = daemon.addr.to_string();
    let path = format!("/v1/sessions/{session_id}/plan");
    let anonymous = request(daemon.addr, "GET", &path, &[("Host", &host)], b"").await;
    assert_eq!(anonymous.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_is_refused_with_409_while_the_session_runs_and_cuts_it_once_idle() {
    let script = Script::new()
        .then(text("FIRST-ANSWER"))
        .then(text("SECOND-ANSWER"))
        .then(tool_call(
            "write_file",
            json!({"path": "x.txt", "content": "x\n"}),
        ))
        .then(text("continued"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (first, session) = daemon.submit(run_body(&env, "FIRST-TASK")).await;
    daemon.events(&first, None, |_| false).await;
    let next = |prompt: &str| json!({"prompt": prompt, "cwd": env.root(), "session_id": session, "interactive": true});
    let (second, _) = daemon.submit(next("SECOND-TASK")).await;
    daemon.events(&second, None, |_| false).await;
    // A third run waits for an approval: in progress.
    let (third, _) = daemon.submit(next("write it")).await;
    daemon
        .events(&third, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let rewind_path = format!("/v1/sessions/{session}/rewind");
    let conversation = |to: u64| json!({"to": to, "conversation": true, "code": false});
    let show_path = format!("/v1/sessions/{session}");
    let before = daemon.call("GET", &show_path, None).await.json();
    let busy = daemon
        .call("POST", &rewind_path, Some(&conversation(1)))
        .await;
    assert_eq!(busy.status, 409, "{}", busy.text());
    assert!(busy.text().contains(&third), "{}", busy.text());
    // The command goes through the daemon and is refused the same way.
    let command = env
        .command(None)
        .args(["rewind", &session, "--to", "1", "--conversation", "--yes"])
        .output()
        .unwrap();
    assert_eq!(command.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&command.stderr);
    assert!(stderr.contains("in progress"), "{stderr}");
    assert_eq!(
        daemon.call("GET", &show_path, None).await.json(),
        before,
        "a refused rewind changes nothing"
    );

    let cancel = daemon
        .call("POST", &format!("/v1/runs/{third}/cancel"), None)
        .await;
    assert_eq!(cancel.status, 200);
    daemon.events(&third, None, |_| false).await;
    for (body, status) in [
        (conversation(0), 422),
        (conversation(99), 422),
        (json!({"to": 1, "conversation": false, "code": false}), 400),
        // Hostile bodies: a negative or huge number, a string, an unknown
        // field.
        (json!({"to": -1, "conversation": true, "code": false}), 400),
        (
            json!({"to": u64::MAX, "conversation": true, "code": false}),
            422,
        ),
        (json!({"to": "1; rm -rf /", "conversation": true}), 400),
        (
            json!({"to": 1, "conversation": true, "code": false, "as": "x"}),
            400,
        ),
    ] {
        let refused = daemon.call("POST", &rewind_path, Some(&body)).await;
        assert_eq!(refused.status, status, "{body}: {}", refused.text());
    }
    let unknown = daemon
        .call("POST", "/v1/sessions/nope/rewind", Some(&conversation(1)))
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());

    let done = daemon
        .call("POST", &rewind_path, Some(&conversation(1)))
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    let done = done.json();
    assert_eq!(done["session_id"], session.as_str());
    assert_eq!(done["to_run"], 1);
    assert_eq!(done["undone_runs"], json!([second, third]));
    assert!(
        done["branch"].as_str().is_some_and(|b| !b.is_empty()),
        "{done}"
    );
    // The session left the daemon's memory: its next run reads the cut
    // history and tells the rewind.
    let (fourth, _) = daemon.submit(next("go on")).await;
    let events = daemon.events(&fourth, None, |_| false).await;
    let types: Vec<&str> = events
        .iter()
        .filter_map(|(_, e)| e["type"].as_str())
        .collect();
    assert_eq!(&types[..2], ["run_started", "rewound"], "{types:?}");
    let request = server.requests().pop().unwrap();
    let sent = serde_json::to_string(request.messages()).unwrap();
    assert!(sent.contains("FIRST-ANSWER"), "{sent}");
    for trace in ["SECOND-TASK", "SECOND-ANSWER", "write it", "x.txt"] {
        assert!(!sent.contains(trace), "{trace} in {sent}");
    }
    let (code, stderr) = daemon.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
}
