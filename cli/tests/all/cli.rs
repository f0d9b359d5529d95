//! The real `troupe` binary end to end against the scripted model server:
//! output streams, `--json`, exit codes of SPEC §1.1, approvals with nobody to
//! ask, cancellation by SIGINT, and the offline demo.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::run_on_terminal;
use serde_json::{Value, json};
use troupe_scripted::{Fault, Script, ScriptedServer, ServerConfig, text, tool_call};

const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");

/// A sandboxed environment: empty home, config and data directories.
struct Env {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let env = Self {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(env.project.path().join(".troupe")).unwrap();
        env
    }

    fn command(&self, server: Option<&ScriptedServer>) -> Command {
        let mut command = Command::new(TROUPE);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("TROUPE_HOME", self.home.path().join("data"))
            .current_dir(self.project.path())
            // Embedded runs: these tests are about the process that runs them.
            .env("TROUPE_NO_DAEMON", "1")
            .stdin(Stdio::null());
        if let Some(server) = server {
            command
                .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
                .env("ANTHROPIC_API_KEY", "test-key");
        }
        command
    }

    fn root(&self) -> &Path {
        self.project.path()
    }
}

async fn run(command: &mut Command) -> Output {
    let mut command =
        tokio::process::Command::from(std::mem::replace(command, Command::new("true")));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("troupe finishes in time")
        .expect("troupe runs")
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

#[tokio::test]
async fn version_prints_and_exits_zero() {
    let output = run(Command::new(TROUPE).arg("--version")).await;
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("troupe {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test]
async fn run_streams_progress_to_stderr_and_the_answer_to_stdout() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("read_file", json!({"path": "notes.txt"})))
            .then(text("The notes say hello.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(env.root().join("notes.txt"), "hello\n").unwrap();
    let output = run(env
        .command(Some(&server))
        .args(["run", "What do the notes say?"]))
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "The notes say hello.\n"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("→ read_file"), "{stderr}");
    assert!(stderr.contains("finished (end_turn)"), "{stderr}");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn json_mode_writes_only_events_one_per_line() {
    let server = ScriptedServer::start(Script::new().then(text("Hi there, all good.")))
        .await
        .unwrap();
    let env = Env::new();
    let output = run(env.command(Some(&server)).args(["run", "--json", "hello"])).await;
    assert_eq!(output.status.code(), Some(0));
    let events = json_lines(&output.stdout);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"run_started"));
    assert_eq!(types.last(), Some(&"run_finished"));
    assert!(
        types.contains(&"iteration") && types.contains(&"text_delta") && types.contains(&"usage")
    );
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], index as u64 + 1);
        assert_eq!(event["agent_path"], "main");
        assert!(
            event["run_id"].is_string()
                && event["session_id"].is_string()
                && event["ts"].is_string()
        );
    }
    let last = events.last().unwrap();
    assert_eq!(last["status"], "finished");
    assert_eq!(last["final_text"], "Hi there, all good.");
    assert!(last["usage_total"]["input"].as_u64().unwrap() > 0);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hi there, all good.");
}

#[tokio::test]
async fn usage_and_configuration_errors_exit_two() {
    let env = Env::new();
    let output = run(env.command(None).args(["run", "--mode", "yolo", "x"])).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown mode"));

    let output = run(env
        .command(None)
        .args(["run", "--cwd", "/no/such/dir", "x"]))
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/no/such/dir"));

    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[providers.claude]\nprotocol = \"anthropic\"\nmodle = \"x\"\n",
    )
    .unwrap();
    let output = run(env.command(None).args(["run", "x"])).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("config.toml:3"), "{stderr}");
    assert!(stderr.contains("providers.claude.modle"), "{stderr}");

    std::fs::remove_file(env.root().join(".troupe/config.toml")).unwrap();
    let output = run(env.command(None).args(["run", "x"])).await;
    assert_eq!(output.status.code(), Some(2), "no provider configured");
}

#[tokio::test]
async fn provider_errors_exit_one_and_limits_exit_three() {
    let server = ScriptedServer::start(Script::new().then(Fault::Unauthorized))
        .await
        .unwrap();
    let env = Env::new();
    let output = run(env.command(Some(&server)).args(["run", "x"])).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("authentication"));

    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(tool_call("glob", json!({"pattern": "*.rs"}))),
    )
    .await
    .unwrap();
    let output = run(env
        .command(Some(&server))
        .args(["run", "--max-turns", "1", "x"]))
    .await;
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("limit of 1 turn for"));
    assert_eq!(server.remaining_turns(), 1);
}

#[tokio::test]
async fn without_a_terminal_an_edit_is_denied_not_hung() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "write_file",
                json!({"path": "out.txt", "content": "x"}),
            ))
            .then(text("Could not write.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let output = run(env.command(Some(&server)).args(["run", "write it"])).await;
    assert_eq!(output.status.code(), Some(0));
    assert!(!env.root().join("out.txt").exists());
    let result = &server.requests()[1].tool_results()[0];
    assert!(result.is_error && result.content.contains("nobody can answer"));

    // With a permissive mode the same call runs.
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "write_file",
                json!({"path": "out.txt", "content": "x"}),
            ))
            .then(text("Written.")),
    )
    .await
    .unwrap();
    let output =
        run(env
            .command(Some(&server))
            .args(["run", "--mode", "accept-edits", "write it"]))
        .await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(env.root().join("out.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn sigint_cancels_the_run_and_exits_130() {
    let server = ScriptedServer::start_with(
        Script::new().then(Fault::stall_after(6, text("a long answer that never ends"))),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut child = env
        .command(Some(&server))
        .args(["run", "--json", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let pid = child.id() as i32;
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if !sent && line.contains("\"text_delta\"") {
                // SAFETY: plain signal delivery to our own child process.
                unsafe { libc::kill(pid, libc::SIGINT) };
                sent = true;
            }
            lines.push(line);
        }
        lines
    });
    let lines = tokio::time::timeout(Duration::from_secs(30), lines)
        .await
        .expect("output ends")
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["status"], "cancelled");
    server
        .wait_for_aborted_streams(1, Duration::from_secs(10))
        .await
        .expect("the model stream was aborted");
}

#[tokio::test]
async fn demo_runs_offline_and_says_the_model_is_scripted() {
    let env = Env::new();
    let output = run(env.command(None).arg("demo")).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("SCRIPTED model"), "{stderr}");
    assert!(stderr.contains("stats.py is fixed"), "{stderr}");
    assert!(
        stderr.contains("approving edit_file automatically"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("Fixed the bug"));
    // The fork step: three labelled workers, and their spans in the tree.
    for n in 1..=3 {
        assert!(
            stderr.contains(&format!("[main/fork-{n}] started (fork)")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("invoke_agent main/fork-{n}")),
            "{stderr}"
        );
    }

    let output = run(env.command(None).args(["demo", "--json"])).await;
    assert_eq!(output.status.code(), Some(0));
    let events = json_lines(&output.stdout);
    let started_by_main = events
        .iter()
        .filter(|e| e["type"] == "tool_started" && e["agent_path"] == "main")
        .count();
    // glob, grep, read_file, edit_file, then three `agent` calls.
    assert_eq!(started_by_main, 7);
    let forks: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "subagent_started")
        .map(|e| e["agent_path"].as_str().unwrap())
        .collect();
    assert_eq!(forks.len(), 3);
    for n in 1..=3 {
        assert!(forks.contains(&format!("main/fork-{n}").as_str()));
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "subagent_finished" && e["status"] == "finished")
            .count(),
        3
    );
    assert_eq!(events.last().unwrap()["type"], "run_finished");
    assert_eq!(events.last().unwrap()["status"], "finished");
}

#[tokio::test]
async fn on_a_terminal_approvals_are_asked_and_answered() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "write_file",
                json!({"path": "yes.txt", "content": "y"}),
            ))
            .then(tool_call(
                "write_file",
                json!({"path": "no.txt", "content": "n"}),
            ))
            .then(text("One written, one refused.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "write two files"]);
    let (code, terminal) = run_on_terminal(command, "y\nn wrong file\n").await;
    assert_eq!(code, Some(0), "{terminal}");
    assert!(terminal.contains("Allow? [y]es"), "{terminal}");
    assert!(env.root().join("yes.txt").exists());
    assert!(!env.root().join("no.txt").exists());
    let refused = server.requests()[2].tool_results().last().cloned().unwrap();
    assert!(
        refused.is_error && refused.content.contains("wrong file"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn budget_and_timeout_flags_stop_the_run_with_exit_three() {
    let env = Env::new();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text("unreachable")),
    )
    .await
    .unwrap();
    let output =
        run(env
            .command(Some(&server))
            .args(["run", "--json", "--budget-tokens", "1", "x"]))
        .await;
    assert_eq!(output.status.code(), Some(3));
    let events = json_lines(&output.stdout);
    assert_eq!(events.last().unwrap()["stop_reason"], "budget_tokens");
    assert_eq!(server.request_count(), 1);
    server.take_violations();

    let server = ScriptedServer::start_with(
        Script::new().then(Fault::stall_after(6, text("a long answer that never ends"))),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let output = run(env
        .command(Some(&server))
        .args(["run", "--json", "--timeout", "1", "x"]))
    .await;
    assert_eq!(output.status.code(), Some(3));
    let events = json_lines(&output.stdout);
    assert_eq!(events.last().unwrap()["stop_reason"], "wall_clock");
    assert!(events.iter().any(|e| e["type"] == "notice"));
}

#[tokio::test]
async fn a_sub_agents_approval_is_asked_on_the_terminal_with_its_path() {
    use troupe_scripted::{Matcher, Turn};
    let main = |response| Turn::new(response).when(Matcher::first_user_contains("delegate"));
    let child = |response| Turn::new(response).when(Matcher::first_user_contains("CHILD-WRITE"));
    let server = ScriptedServer::start(
        Script::new()
            .then(main(tool_call(
                "agent",
                json!({"description": "write a file", "prompt": "CHILD-WRITE: create child.txt", "role": "general"}),
            )))
            .then(child(tool_call(
                "write_file",
                json!({"path": "child.txt", "content": "c"}),
            )))
            .then(child(text("child.txt written")))
            .then(main(text("The sub-agent wrote it."))),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "delegate the write"]);
    let (code, terminal) = run_on_terminal(command, "y\n").await;
    assert_eq!(code, Some(0), "{terminal}");
    assert!(
        terminal.contains("[main/general-1] write_file wants to change child.txt:"),
        "{terminal}"
    );
    assert!(env.root().join("child.txt").exists());
}

#[tokio::test]
async fn sub_agents_using_up_the_runs_budget_stop_the_run_with_exit_three() {
    use troupe_scripted::{Matcher, Response, Turn, Usage};
    let fork = |task: &str| json!({"description": "part", "prompt": task, "fork": true});
    let heavy = |task: &str| {
        Turn::new(
            Response::empty()
                .and_tool_call("glob", json!({"pattern": "*"}))
                .with_usage(Usage::new(700, 10)),
        )
        .when(Matcher::any_user_contains(task))
    };
    let server = ScriptedServer::start_with(
        Script::new()
            .then(
                Response::empty()
                    .and_tool_call("agent", fork("HEAVY-A"))
                    .and_tool_call("agent", fork("HEAVY-B"))
                    .with_usage(Usage::new(10, 10)),
            )
            .then(heavy("HEAVY-A"))
            .then(heavy("HEAVY-B")),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let env = Env::new();
    let output = run(env.command(Some(&server)).args([
        "run",
        "--json",
        "--budget-tokens",
        "1000",
        "split it",
    ]))
    .await;
    assert_eq!(output.status.code(), Some(3));
    let events = json_lines(&output.stdout);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["stop_reason"], "budget_tokens");
    assert!(last["usage_total"]["input"].as_u64().unwrap() >= 1_400);
    assert!(
        events.iter().any(|e| e["type"] == "notice"
            && e["agent_path"].as_str().unwrap().starts_with("main/fork-"))
    );
}

/// The argument schemas in a request, by tool name, whichever the protocol.
fn offered_schemas(request: &troupe_scripted::RecordedRequest) -> Vec<(String, Value)> {
    request.body["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {}", request.body))
        .iter()
        .map(|tool| {
            let (name, schema) = match tool.get("function") {
                Some(function) => (&function["name"], &function["parameters"]),
                None => (&tool["name"], &tool["input_schema"]),
            };
            (name.as_str().unwrap().to_owned(), schema.clone())
        })
        .collect()
}

#[tokio::test]
async fn both_protocols_are_offered_the_schemas_derived_from_the_argument_types() {
    for openai in [false, true] {
        let server = ScriptedServer::start(Script::new().then(text("Nothing to do.")))
            .await
            .unwrap();
        let env = Env::new();
        let mut command = env.command(None);
        if openai {
            command
                .env("OPENAI_BASE_URL", server.openai_base_url())
                .env("OPENAI_API_KEY", "test-key");
        } else {
            command
                .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
                .env("ANTHROPIC_API_KEY", "test-key");
        }
        let output = run(command.args(["run", "Look around."])).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let requests = server.requests();
        let schemas = offered_schemas(&requests[0]);
        let names: Vec<&str> = schemas.iter().map(|(name, _)| name.as_str()).collect();
        for expected in [
            "read_file",
            "grep",
            "bash",
            "task_list",
            "remember",
            "agent",
        ] {
            assert!(names.contains(&expected), "openai={openai}: {names:?}");
        }
        for (name, schema) in &schemas {
            let text = schema.to_string();
            for absent in ["$schema", "$ref", "$defs", "\"title\"", "null", "uint64"] {
                assert!(!text.contains(absent), "{name}: {absent} in {text}");
            }
            assert_eq!(schema["type"], "object", "{name}: {text}");
            // Offered without `"additionalProperties": false`: the model
            // sends what it is offered, and a call is still checked against
            // the whole schema (`troupe_tools::schema::offered`).
            assert_eq!(schema.get("additionalProperties"), None, "{name}: {text}");
            assert!(!text.contains(r#""default":false"#), "{name}: {text}");
            let properties = schema["properties"].as_object().unwrap();
            for required in schema["required"].as_array().into_iter().flatten() {
                assert!(
                    properties.contains_key(required.as_str().unwrap()),
                    "{name}"
                );
            }
        }
        let schema = |tool: &str| &schemas.iter().find(|(name, _)| name == tool).unwrap().1;
        let read_file = schema("read_file");
        assert_eq!(read_file["required"], json!(["path"]));
        assert_eq!(
            read_file["properties"]["offset"],
            json!({
                "type": "integer",
                "minimum": 1,
                "description": "First line, 1-based (default 1)"
            })
        );
        assert_eq!(
            schema("grep")["properties"]["output_mode"]["enum"],
            json!(["files_with_matches", "content", "count"])
        );
        assert_eq!(schema("bash")["properties"]["timeout_secs"]["minimum"], 1);
        assert_eq!(schema("task_list")["properties"], json!({}));
        assert_eq!(
            schema("agent")["required"],
            json!(["description", "prompt"])
        );
    }
}

/// The fixed request prefix (tool definitions + the stable system prompt)
/// with every built-in tool offered, in bytes: at most 8 KB, with room left
/// for tools still to come.
const FIXED_PREFIX_MAX_BYTES: usize = 8 * 1024;
/// Every request body of ten one-`read_file` turns and the answer, in bytes
/// (its JSON as sent), with the working directory's path counted as
/// [`REFERENCE_DIRECTORY`] (each request names it once, and temporary
/// directories differ in length between machines). A ratchet: lower it when a
/// change sends less, never raise it without knowing what each request
/// carries more. (Raised from 114,000 for `web_fetch`'s definition, about
/// 510 bytes in each of the eleven requests: 119,240 bytes; then from
/// 119,500 by `update_plan`'s definition, 568 bytes in each of the eleven
/// requests: 125,488 bytes.)
const TEN_READ_FILE_TURNS_MAX_BYTES: usize = 125_748;
/// A temporary directory's path as the bytes above count it.
const REFERENCE_DIRECTORY: &str = "/tmp/.tmpAbC123";

#[tokio::test]
async fn the_fixed_prefix_fits_8_kb_and_ten_read_file_turns_stay_within_their_bytes() {
    let mut script = Script::new();
    for n in 0..10 {
        script = script.then(tool_call(
            "read_file",
            json!({"path": format!("notes/note_{n:02}.txt")}),
        ));
    }
    let server = ScriptedServer::start(script.then(text("Read them all.")))
        .await
        .unwrap();
    let env = Env::new();
    std::fs::create_dir_all(env.root().join("notes")).unwrap();
    for n in 0..10 {
        let body: String = (1..=10)
            .map(|line| format!("note {n}, line {line}: something worth reading\n"))
            .collect();
        std::fs::write(env.root().join(format!("notes/note_{n:02}.txt")), body).unwrap();
    }
    let output =
        run(env
            .command(Some(&server))
            .args(["run", "--mode", "bypass", "Read the notes."]))
        .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 11);
    let first = &requests[0].body;
    let tools = serde_json::to_string(&first["tools"]).unwrap().len();
    let stable = first["system"][0]["text"].as_str().unwrap().len();
    assert!(
        tools + stable <= FIXED_PREFIX_MAX_BYTES,
        "fixed prefix {} bytes (tools {tools} + stable system {stable})",
        tools + stable
    );
    // Results are sent in their shortest form: a lone text as a string,
    // lines numbered without padding.
    let last = requests[10].body.to_string();
    assert!(
        last.contains(r#""content":"1\tnote 9, line 1: something"#),
        "{last}"
    );
    let directory = env.root().display().to_string();
    let sent: usize = requests
        .iter()
        .map(|r| {
            let body = r.body.to_string();
            assert_eq!(body.matches(&directory).count(), 1, "{body}");
            body.len() - directory.len() + REFERENCE_DIRECTORY.len()
        })
        .sum();
    assert!(
        sent <= TEN_READ_FILE_TURNS_MAX_BYTES,
        "ten read_file turns sent {sent} bytes"
    );
}
