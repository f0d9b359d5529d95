//! What MCP servers ask of the client, through the real `troupe` binary and
//! `@modelcontextprotocol/server-everything` (installed by
//! `tests/mcp/install.sh`): roots (the project root), progress notifications
//! shown as notices, elicitation answered with the schema's defaults or
//! declined when nobody can be asked, answered by a person on the terminal
//! or, on the daemon, with `troupe approve` otherwise, and the server over
//! Streamable HTTP.
//!
//! When the server is not installed a test says so loudly and passes, unless
//! `TROUPE_REQUIRE_MCP_SERVERS=1` (CI sets it), where it fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{EVERYTHING, Env, describe, json_lines, mcp_fixture, run, run_on_terminal};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text as say, tool_call, tool_calls};

/// server-everything's entry point, or `None` (skip) when not installed.
fn everything() -> Option<PathBuf> {
    mcp_fixture(EVERYTHING, "@modelcontextprotocol/server-everything")
}

/// A TOML string literal.
fn lit(value: &str) -> String {
    Value::String(value.to_string()).to_string()
}

/// The project's configuration: server-everything over stdio, its tools
/// allowed without asking.
fn configure_stdio(env: &Env, script: &Path) {
    env.trust();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n\
             startup_grace_secs = 60\n\n[permissions]\nallow = [\"mcp__everything__*\"]\n",
            lit(&script.display().to_string())
        ),
    )
    .unwrap();
}

/// The text of the tool results the model got in request `index`.
fn results(server: &ScriptedServer, index: usize) -> Vec<String> {
    server.requests()[index]
        .tool_results()
        .into_iter()
        .map(|result| {
            assert!(!result.is_error, "{result:?}");
            result.content
        })
        .collect()
}

#[tokio::test]
async fn server_everything_sees_the_project_root_and_its_progress_becomes_notices() {
    let Some(script) = everything() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                ("mcp__everything__get-roots-list", json!({})),
                (
                    "mcp__everything__trigger-long-running-operation",
                    json!({"duration": 2, "steps": 4}),
                ),
            ]))
            .then(say("seen")),
    )
    .await
    .unwrap();
    let env = Env::new();
    configure_stdio(&env, &script);
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "roots and progress"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));

    // Roots: the server asked for them and got the project root as a file URI.
    let results = results(&server, 1);
    let root = std::fs::canonicalize(env.root()).unwrap();
    let uri = format!("file://{}", root.display());
    assert!(results[0].contains(&uri), "{uri} in {results:?}");

    // Progress: notices of the call's run, the first one at once.
    let events = json_lines(&output.stdout);
    let progress: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "notice" && e["code"] == "mcp_progress")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(!progress.is_empty(), "{}", describe(&output));
    assert_eq!(
        progress[0], "MCP server everything: progress 1/4",
        "{progress:?}"
    );
    assert!(progress.len() <= 4, "{progress:?}");
    assert!(
        results[1].contains("Long running operation completed"),
        "{results:?}"
    );
}

#[tokio::test]
async fn with_nobody_to_ask_a_question_with_a_required_field_and_no_default_is_declined() {
    let Some(script) = everything() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "mcp__everything__trigger-elicitation-request",
                json!({}),
            ))
            .then(say("declined")),
    )
    .await
    .unwrap();
    let env = Env::new();
    configure_stdio(&env, &script);
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "ask me"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let results = results(&server, 1);
    assert!(results[0].contains("declined"), "{results:?}");
    let events = json_lines(&output.stdout);
    assert!(
        events
            .iter()
            .any(|e| e["code"] == "mcp_elicitation"
                && e["text"].as_str().unwrap().contains("\"name\"")),
        "{}",
        describe(&output)
    );
    assert!(
        !events.iter().any(|e| e["type"] == "approval_requested"),
        "{}",
        describe(&output)
    );
}

#[tokio::test]
async fn a_person_answers_a_servers_question_on_the_terminal_and_the_answer_is_checked() {
    let Some(script) = everything() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "mcp__everything__trigger-elicitation-request",
                json!({}),
            ))
            .then(tool_call(
                "mcp__everything__trigger-elicitation-request",
                json!({}),
            ))
            .then(say("answered")),
    )
    .await
    .unwrap();
    let env = Env::new();
    configure_stdio(&env, &script);
    let mut command = env.command(Some(&server));
    command.args(["run", "answer the server"]);
    // The first answer breaks the schema (an integer out of range): declined.
    // The second fills the required field; the defaults fill the rest.
    let (code, terminal) = run_on_terminal(
        command,
        "y {\"name\": \"Ann Example\", \"integer\": 500}\n\
         y {\"name\": \"Ann Example\", \"email\": \"ann@example.com\"}\n",
    )
    .await;
    assert_eq!(code, Some(0), "{terminal}");
    assert!(
        terminal.contains("mcp server everything asks: Please provide inputs"),
        "{terminal}"
    );
    assert!(terminal.contains("name (string, required)"), "{terminal}");
    let first = results(&server, 1);
    let first = first.last().unwrap();
    assert!(first.contains("declined"), "{first}");
    assert!(terminal.contains("more than 100"), "{terminal}");
    let second = results(&server, 2);
    let second = second.last().unwrap();
    assert!(second.contains("- Name: Ann Example"), "{second}");
    assert!(second.contains("- Email: ann@example.com"), "{second}");
    assert!(second.contains("- Favorite Integer: 42"), "{second}");
}

/// server-everything over Streamable HTTP on a free port, once it says it
/// listens (its stderr is drained afterwards).
struct HttpEverything {
    child: Child,
    url: String,
}

impl HttpEverything {
    fn start(script: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new("node")
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
        let stderr = child.stderr.take().unwrap();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut said = String::new();
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                said.push_str(&line);
                said.push('\n');
                if line.contains("listening")
                    && let Some(tx) = ready_tx.take()
                {
                    let _ = tx.send(Ok(()));
                }
            }
            if let Some(tx) = ready_tx {
                let _ = tx.send(Err(said));
            }
        });
        match ready.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(())) => {}
            Ok(Err(said)) => panic!("server-everything exited before listening: {said}"),
            Err(_) => panic!("server-everything did not listen within 60 s"),
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn server_everything_over_streamable_http_lists_its_tools_and_returns_text_and_images() {
    let Some(script) = everything() else { return };
    let everything = HttpEverything::start(&script);
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                ("mcp__web__echo", json!({"message": "over http"})),
                ("mcp__web__get-tiny-image", json!({})),
            ]))
            .then(say("seen")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        format!(
            "[mcp_servers.web]\ntype = \"http\"\nurl = {}\nstartup_grace_secs = 60\n",
            lit(&everything.url)
        ),
    )
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "echo and show an image over http"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let requests = server.requests();
    let tools = requests[0].tool_names();
    for name in [
        "mcp__web__echo",
        "mcp__web__get-sum",
        "mcp__web__get-roots-list",
    ] {
        assert!(tools.contains(&name.to_string()), "{name} in {tools:?}");
    }
    let results = results(&server, 1);
    assert!(results[0].contains("Echo: over http"), "{results:?}");
    let body = requests[1].body.to_string();
    assert!(body.contains("\"media_type\":\"image/png\""), "{body}");
}

/// A `troupe serve` of the test's home, stopped with SIGTERM when dropped.
struct Daemon {
    child: Child,
    addr: String,
    token: String,
}

impl Daemon {
    fn start(env: &Env, server: &ScriptedServer) -> Self {
        let mut child = env
            .command(Some(server))
            .arg("serve")
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
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in stderr.lines() {});
        let token = std::fs::read_to_string(env.data_dir().join("daemon.token"))
            .unwrap()
            .trim()
            .to_string();
        Self { child, addr, token }
    }

    /// Sends an authorised HTTP/1.0 request; the open stream, the head sent.
    async fn send(&self, method: &str, path: &str, body: &str) -> tokio::net::TcpStream {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain signal delivery to our own child, not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn on_the_daemon_a_servers_question_is_answered_with_troupe_approve() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let Some(script) = everything() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "mcp__everything__trigger-elicitation-request",
                json!({}),
            ))
            .then(say("answered")),
    )
    .await
    .unwrap();
    let env = Env::new();
    configure_stdio(&env, &script);
    let daemon = Daemon::start(&env, &server);
    let body = json!({"prompt": "ask me", "cwd": env.root(), "interactive": true}).to_string();
    let mut created = String::new();
    daemon
        .send("POST", "/v1/runs", &body)
        .await
        .read_to_string(&mut created)
        .await
        .unwrap();
    let created: Value = serde_json::from_str(created.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let run_id = created["run_id"].as_str().unwrap().to_string();

    let stream = daemon
        .send("GET", &format!("/v1/runs/{run_id}/events"), "")
        .await;
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let mut events = Vec::new();
    let mut answered = false;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the daemon sends events in time")
            .unwrap()
            .expect("the stream lasts until run_finished");
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let event: Value = serde_json::from_str(data.trim()).unwrap();
        events.push(event.clone());
        if event["type"] == "approval_requested" && !answered {
            assert_eq!(event["tool"], "mcp server everything", "{event}");
            assert!(
                event["args"]
                    .as_str()
                    .unwrap()
                    .contains("name (string, required)"),
                "{event}"
            );
            let approval_id = event["approval_id"].as_str().unwrap().to_string();
            let mut command = env.command(None);
            command.args([
                "approve",
                &run_id,
                &approval_id,
                "allow",
                "--reason",
                "{\"name\": \"Bo Daemon\"}",
            ]);
            let output = run(command).await;
            assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
            answered = true;
        }
        if event["type"] == "run_finished" && event["agent_path"] == "main" {
            break;
        }
    }
    assert!(answered, "{events:#?}");
    assert_eq!(events.last().unwrap()["status"], "finished", "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "approval_resolved" && e["outcome"] == "allow"),
        "{events:#?}"
    );
    let result = results(&server, 1);
    let result = result.last().unwrap();
    assert!(result.contains("- Name: Bo Daemon"), "{result}");
    assert!(result.contains("- Favorite Integer: 42"), "{result}");
}
