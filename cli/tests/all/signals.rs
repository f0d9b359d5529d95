//! SIGTERM and SIGHUP cancel a run the way Ctrl-C does: the real `troupe`
//! binary, running a `bash` tool call against the scripted model server, gets
//! the signal while the command runs; the command's process group is killed,
//! the run ends with `run_finished` (cancelled), the stored history pairs the
//! call with its result, and the process exits with 128 + the signal's number.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{COMMAND_LIMIT, Env, export, session_of, spawn, wait_for_processes};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use troupe_protocol::model::{ContentBlock, Role};
use troupe_scripted::{Script, ScriptedServer, ServerConfig, text, tool_call};

/// Runs a `bash` call of `sleep SECONDS` under `troupe run --mode bypass
/// --json`, sends `signal` once the command runs, and checks the clean end.
async fn signal_cancels_the_run(signal: i32, expected_exit: i32, seconds: &str) {
    // A duration unique to this test process, so the command is found in
    // /proc and nothing else matches it.
    let seconds = format!("{seconds}{:07}", std::process::id());
    let command_line = format!("sleep {seconds}");
    let server = ScriptedServer::start_with(
        Script::new()
            .then(tool_call("bash", json!({ "command": command_line })))
            .then(text("not reached")),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command
        .args(["run", "--mode", "bypass", "--json", "sleep for a while"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(command);
    let pid = child.id().expect("the child has a pid") as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events: Vec<Value> = Vec::new();
    // Until the tool started.
    while !events
        .iter()
        .any(|e| e["type"] == "tool_started" && e["name"] == "bash")
    {
        let line = tokio::time::timeout(COMMAND_LIMIT, lines.next_line())
            .await
            .expect("troupe writes its next line in time")
            .unwrap()
            .expect("the run goes on until the tool starts");
        events.push(serde_json::from_str(&line).unwrap());
    }
    let running = wait_for_processes(&command_line, COMMAND_LIMIT, |pids| !pids.is_empty()).await;
    assert!(!running.is_empty(), "`{command_line}` never started");

    // SAFETY: plain signal delivery to our own child, which is not reaped yet
    // (so its pid cannot have been reused).
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signal delivered");
    while let Some(line) = tokio::time::timeout(COMMAND_LIMIT, lines.next_line())
        .await
        .expect("troupe ends its output in time")
        .unwrap()
    {
        events.push(serde_json::from_str(&line).unwrap());
    }
    let status = tokio::time::timeout(COMMAND_LIMIT, child.wait())
        .await
        .expect("troupe exits in time")
        .unwrap();

    // Whatever the outcome, nothing this test started outlives it.
    let left = wait_for_processes(&command_line, Duration::from_secs(10), <[i32]>::is_empty).await;
    for orphan in &left {
        // SAFETY: plain signal delivery; the pid was just read from /proc and
        // runs this test's unique command line.
        unsafe { libc::kill(*orphan, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "`{command_line}` outlived troupe: pids {left:?}"
    );
    assert_eq!(status.code(), Some(expected_exit), "exit status {status:?}");
    let last = events.last().expect("events were written");
    assert_eq!(last["type"], "run_finished", "{last}");
    assert_eq!(last["status"], "cancelled", "{last}");

    // The stored history pairs the call with its result.
    let history = export(&env, &session_of(&events)).await;
    let call = history
        .iter()
        .flat_map(|message| message.tool_calls())
        .find(|call| call.name == "bash")
        .expect("the bash call is stored");
    let result = history
        .iter()
        .filter(|message| message.role == Role::Tool)
        .flat_map(|message| &message.content)
        .find_map(|block| match block {
            ContentBlock::ToolResult(result) if result.call_id == call.id => Some(result),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for the bash call in {history:?}"));
    assert!(result.is_error, "{result:?}");
}

#[tokio::test]
async fn sigterm_cancels_the_run_kills_its_processes_and_exits_143() {
    signal_cancels_the_run(libc::SIGTERM, 143, "302.5").await;
}

#[tokio::test]
async fn sighup_cancels_the_run_kills_its_processes_and_exits_129() {
    signal_cancels_the_run(libc::SIGHUP, 129, "302.6").await;
}
