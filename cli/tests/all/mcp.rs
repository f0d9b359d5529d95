//! MCP servers through the real `troupe` binary against real servers from the
//! registries (installed by `tests/mcp/install.sh`, which `.ci/run` calls):
//! a FastMCP server of the Python `mcp` package (`tests/mcp/fixture_server.py`)
//! and `@modelcontextprotocol/server-everything`.
//!
//! Where the servers are: `$TROUPE_MCP_FIXTURES`, default
//! `$HOME/.cache/troupe/mcp-fixtures` (`venv/` and `node/`). When they are not
//! installed a test says so loudly and passes, unless
//! `TROUPE_REQUIRE_MCP_SERVERS=1` (CI sets it), where it fails.

use std::path::{Path, PathBuf};

use crate::support::{EVERYTHING, Env, describe, json_lines, mcp_fixture, run, text};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text as say, tool_call, tool_calls};

/// The Python of the venv with the `mcp` package.
fn python() -> Option<PathBuf> {
    mcp_fixture("venv/bin/python", "the Python `mcp` package (venv)")
}

/// server-everything's entry point.
fn everything() -> Option<PathBuf> {
    mcp_fixture(EVERYTHING, "@modelcontextprotocol/server-everything")
}

/// The FastMCP fixture script.
fn fixture_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp/fixture_server.py")
        .display()
        .to_string()
}

/// A TOML string literal.
fn lit(value: &str) -> String {
    Value::String(value.to_string()).to_string()
}

/// A stdio server entry running the fixture (with `--hostile` when asked).
fn fixture_entry(name: &str, python: &Path, hostile: bool, pids_file: Option<&Path>) -> String {
    let mut args = vec![lit(&fixture_script())];
    if hostile {
        args.push(lit("--hostile"));
    }
    let mut entry = format!(
        "[mcp_servers.{name}]\ncommand = {}\nargs = [{}]\nstartup_grace_secs = 60\n",
        lit(&python.display().to_string()),
        args.join(", ")
    );
    if let Some(file) = pids_file {
        entry.push_str(&format!(
            "env = {{ FIXTURE_PIDS_FILE = {} }}\n",
            lit(&file.display().to_string())
        ));
    }
    entry
}

fn write_config(env: &Env, body: &str) {
    std::fs::write(env.root().join(".troupe/config.toml"), body).unwrap();
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn read_only_calls_run_together_others_one_at_a_time_and_no_server_process_survives() {
    let Some(python) = python() else { return };
    let pids = tempfile::tempdir().unwrap();
    let pids_file = pids.path().join("pids");
    let reads = (0..4).map(|i| {
        (
            "mcp__fixture__barrier_read",
            json!({ "id": format!("r{i}") }),
        )
    });
    let records = (0..3).map(|i| ("mcp__fixture__record", json!({ "id": format!("w{i}") })));
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls(reads))
            .then(tool_calls(records))
            .then(say("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    write_config(
        &env,
        &format!(
            "{}\n[permissions]\nallow = [\"mcp__fixture__*\"]\n",
            fixture_entry("fixture", &python, false, Some(&pids_file))
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "use the fixture"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{}", describe(&output));
    let tools = requests[0].tool_names();
    for name in [
        "mcp__fixture__barrier_read",
        "mcp__fixture__die",
        "mcp__fixture__record",
    ] {
        assert!(tools.contains(&name.to_string()), "{tools:?}");
    }
    // Built-ins first in their fixed order, then MCP tools sorted by name.
    let mcp_tools: Vec<&String> = tools.iter().filter(|t| t.starts_with("mcp__")).collect();
    let mut sorted = mcp_tools.clone();
    sorted.sort();
    assert_eq!(mcp_tools, sorted);
    assert_eq!(tools[0], "read_file");

    // The four read-only calls were in progress together: each met the others.
    let reads = requests[1].tool_results();
    assert_eq!(reads.len(), 4, "{reads:?}");
    for result in &reads {
        assert!(!result.is_error, "{result:?}");
        assert!(result.content.contains("met all 4 calls"), "{result:?}");
        assert!(
            result
                .content
                .contains("<untrusted-data source=\"mcp server fixture, tool barrier_read\">"),
            "{result:?}"
        );
    }
    // The non-annotated calls ran one at a time.
    let records = requests[2].tool_results();
    let last = records.last().unwrap();
    assert!(
        last.content.contains("w2: at most 1 in progress at once"),
        "{records:?}"
    );

    // The server and its grandchild are gone once troupe has exited.
    let pids: Vec<i32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(!alive(pid), "MCP process {pid} survived troupe");
    }
}

#[tokio::test]
async fn server_everything_over_stdio_offers_its_tools_and_returns_text_and_images() {
    let Some(script) = everything() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                ("mcp__everything__echo", json!({"message": "hello there"})),
                ("mcp__everything__get-tiny-image", json!({})),
            ]))
            .then(say("seen")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    write_config(
        &env,
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\nstartup_grace_secs = 60\n",
            lit(&script.display().to_string())
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "echo and show an image"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let requests = server.requests();
    let tools = requests[0].tool_names();
    assert!(
        tools.contains(&"mcp__everything__echo".to_string()),
        "{tools:?}"
    );
    assert!(
        tools.contains(&"mcp__everything__get-sum".to_string()),
        "{tools:?}"
    );
    let results = requests[1].tool_results();
    assert!(
        results[0].content.contains("Echo: hello there"),
        "{results:?}"
    );
    assert!(!results[0].is_error);
    // The image reaches the model as an image block of the tool result.
    let body = requests[1].body.to_string();
    assert!(body.contains("\"media_type\":\"image/png\""), "{body}");

    // `troupe mcp list` names the server, its state and its tools.
    let mut command = env.command(None);
    command.args(["mcp", "list", "--json"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let listed = json_lines(&output.stdout);
    assert_eq!(listed.len(), 1, "{}", describe(&output));
    assert_eq!(listed[0]["name"], "everything");
    assert_eq!(listed[0]["state"], "ready");
    let echo = listed[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .cloned()
        .unwrap();
    assert_eq!(echo["read_only"], true, "{echo}");
}

#[tokio::test]
async fn a_failing_server_and_a_hostile_tool_name_leave_the_good_servers_working() {
    let Some(python) = python() else { return };
    let pids = tempfile::tempdir().unwrap();
    let hang_pid = pids.path().join("hangs.pid");
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("mcp__good__record", json!({"id": "x"})))
            .then(say("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    write_config(
        &env,
        &format!(
            "[mcp_servers.quits]\ncommand = \"sh\"\nargs = [\"-c\", \"echo cannot start >&2; exit 3\"]\n\n\
             [mcp_servers.hangs]\ncommand = \"sh\"\nargs = [\"-c\", \"echo $$ > {}; exec sleep 1000\"]\n\
             startup_grace_secs = 1\n\n{}\n{}\n[permissions]\nallow = [\"mcp__good__*\"]\n",
            hang_pid.display(),
            fixture_entry("hostile", &python, true, None),
            fixture_entry("good", &python, false, None),
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "use the good server"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("troupe: MCP server quits could not start:")
            && stderr.contains("cannot start"),
        "{stderr}"
    );
    let requests = server.requests();
    let tools = requests[0].tool_names();
    assert!(
        tools.contains(&"mcp__good__record".to_string()),
        "{tools:?}"
    );
    assert!(
        tools.contains(&"mcp__hostile__record".to_string()),
        "{tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t.contains("bad")
            || t.starts_with("mcp__quits")
            || t.starts_with("mcp__hangs")),
        "{tools:?}"
    );
    // The server that never answers did not hold the run up: the first
    // request went out while it was still starting (after its 1 s grace, not
    // its 30 s connect limit), and nothing of it survived the run.
    assert!(
        stderr.contains("MCP server hangs is still starting"),
        "{stderr}"
    );
    let pid: i32 = std::fs::read_to_string(&hang_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the hanging server {pid} survived troupe");
    let result = requests[1].tool_results().last().cloned().unwrap();
    assert!(
        !result.is_error && result.content.contains("x: at most 1"),
        "{result:?}"
    );

    // `troupe mcp list` waits for every server to settle: without the one
    // that never answers (it would take its whole connect limit).
    let config = std::fs::read_to_string(env.root().join(".troupe/config.toml")).unwrap();
    let (before, after) = config.split_once("[mcp_servers.hangs]").unwrap();
    let (_, rest) = after.split_once("startup_grace_secs = 1\n").unwrap();
    write_config(&env, &format!("{before}{rest}"));
    let mut command = env.command(None);
    command.args(["mcp", "list", "--json"]);
    let output = run(command).await;
    let listed = json_lines(&output.stdout);
    let by_name = |name: &str| listed.iter().find(|s| s["name"] == name).cloned().unwrap();
    assert_eq!(by_name("quits")["state"], "failed", "{listed:?}");
    assert!(
        by_name("quits")["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot start"),
        "{listed:?}"
    );
    assert_eq!(by_name("good")["state"], "ready");
    let skipped = by_name("hostile")["skipped"].to_string();
    assert!(skipped.contains("bad name!"), "{skipped}");
}

#[tokio::test]
async fn a_server_that_dies_during_a_call_gives_an_error_result() {
    let Some(python) = python() else { return };
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("mcp__fixture__die", json!({})))
            .then(say("it died")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    write_config(
        &env,
        &format!(
            "{}\n[permissions]\nallow = [\"mcp__fixture__die\"]\n",
            fixture_entry("fixture", &python, false, None)
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "call die"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let result = server.requests()[1].tool_results().last().cloned().unwrap();
    assert!(result.is_error, "{result:?}");
    assert!(result.content.contains("MCP server fixture"), "{result:?}");
}

#[tokio::test]
async fn a_project_mcp_json_works_without_troupe_configuration() {
    let Some(python) = python() else { return };
    let env = Env::new();
    let mcp_json = json!({
        "mcpServers": {
            "fromjson": {"command": python.display().to_string(), "args": [fixture_script()]}
        }
    });
    std::fs::write(env.root().join(".mcp.json"), mcp_json.to_string()).unwrap();
    // A cloned repository's servers run code: nothing starts until it is trusted.
    let mut command = env.command(None);
    command.args(["mcp", "list"]);
    let untrusted = run(command).await;
    assert_eq!(untrusted.status.code(), Some(0), "{}", describe(&untrusted));
    let root = env.root().display().to_string();
    assert_eq!(
        text(&untrusted.stdout),
        format!(
            "fromjson  untrusted  stdio  {} {}  (.mcp.json)\n    not started: the project is \
             not trusted; review .mcp.json and run `troupe trust {root}` to start it\n",
            python.display(),
            fixture_script()
        ),
        "{}",
        describe(&untrusted)
    );
    let stderr = text(&untrusted.stderr);
    assert!(
        stderr.contains(&format!(
            "ignored: .mcp.json: server fromjson (runs `{} {}`)",
            python.display(),
            fixture_script()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("config.toml"), "{stderr}");
    let mut command = env.command(None);
    command.args(["mcp", "list", "--json"]);
    let listed = run(command).await;
    assert_eq!(listed.status.code(), Some(0), "{}", describe(&listed));
    let server: Value = serde_json::from_str(text(&listed.stdout).trim()).unwrap();
    assert_eq!(server["state"], "untrusted");
    assert_eq!(server["file"], ".mcp.json");
    assert_eq!(server["trust_command"], format!("troupe trust {root}"));
    // Trusting names the files the project has, and no other.
    let mut command = env.command(None);
    command.arg("trust");
    let trusted = run(command).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", describe(&trusted));
    assert_eq!(
        text(&trusted.stdout),
        format!("{root} is trusted; these now apply in full: .mcp.json\n")
    );
    let mut command = env.command(None);
    command.args(["mcp", "list"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("fromjson  ready  stdio"), "{stdout}");
    assert!(
        stdout.contains("mcp__fromjson__barrier_read  (read-only)"),
        "{stdout}"
    );
}

/// The standard-library server of the MCP benchmarks.
fn slow_server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp/slow_server.py")
        .display()
        .to_string()
}

#[tokio::test]
async fn an_exiting_run_does_not_wait_for_a_server_that_outlives_its_input() {
    let server = ScriptedServer::start(Script::new().then(say("done")))
        .await
        .unwrap();
    let env = Env::new();
    env.trust();
    let marks = tempfile::tempdir().unwrap();
    let pid_file = marks.path().join("pid");
    write_config(
        &env,
        &format!(
            "[mcp_servers.slow]\ncommand = \"python3\"\nargs = [{}]\nstartup_grace_secs = 60\n\
             env = {{ SLOW_MCP_READY_SECS = \"0\", SLOW_MCP_LINGER_SECS = \"60\", \
             SLOW_MCP_PID_FILE = {} }}\n",
            lit(&slow_server_script()),
            lit(&pid_file.display().to_string())
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--no-daemon", "x"]);
    let started = std::time::Instant::now();
    let output = run(command).await;
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    // The server would linger a minute after its input ended; a shutdown
    // that waited for it would take the daemon's 5 s budget. The run's exit
    // gives it 10 ms, then kills its process group.
    assert!(
        took < std::time::Duration::from_secs(4),
        "the run took {took:?}: {}",
        describe(&output)
    );
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the MCP server {pid} survived troupe");
}
