//! `troupe sessions compact ID` end to end, against the scripted model
//! server: on a runtime of its own when no daemon runs, through
//! `POST /v1/sessions/{id}/compact` when one does; a session too short to
//! compact is refused with a usage error, and the next run continues from the
//! summary.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{
    COMMAND_LIMIT, Env, describe, is_summary, json_lines, not_summary, run, session_of,
    text as out_text, then_six_reads, write_read_files,
};
use serde_json::Value;
use troupe_process::process_is_alive;
use troupe_scripted::{Matcher, Script, ScriptedServer, Turn, text};

/// Six reads of ~20 KB, then "all read"; then one summary; then an answer
/// to a request that carries it.
fn script() -> Script {
    then_six_reads(Script::new())
        .when(
            Matcher::last_user_contains("<summary> tags"),
            text("<summary>1. CLI SUMMARY</summary>"),
        )
        .then(
            Turn::new(text("continued"))
                .when(not_summary().and(Matcher::any_user_contains("CLI SUMMARY"))),
        )
}

/// `troupe run --json PROMPT` (embedded or not, as `command` says); the
/// session id.
async fn first_run(mut command: std::process::Command, prompt: &str) -> String {
    command.args(["run", "--json", prompt]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    session_of(&json_lines(&output.stdout))
}

fn check_compacted(output: &std::process::Output, server: &ScriptedServer) {
    assert_eq!(output.status.code(), Some(0), "{}", describe(output));
    let said = out_text(&output.stdout);
    assert!(
        said.starts_with("Compacted the conversation: about "),
        "{said}"
    );
    let requests = server.requests();
    let summary = requests.iter().find(|r| is_summary(r)).expect("summary");
    assert!(summary.tool_names().is_empty());
    assert!(summary.any_user_text_contains("read them"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_compact_summarises_a_stored_session_and_the_next_run_continues_from_it() {
    let server = ScriptedServer::start(script()).await.unwrap();
    let env = Env::new();
    write_read_files(&env);
    let session = first_run(env.command(Some(&server)), "read them").await;
    let mut command = env.command(Some(&server));
    command.args(["sessions", "compact", &session[..12]]);
    let output = run(command).await;
    check_compacted(&output, &server);
    // The next run starts from the summary and the kept messages.
    let mut command = env.command(Some(&server));
    command.args(["resume", "--json", &session, "and now?"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    assert_eq!(events.last().unwrap()["final_text"], "continued");
    let last = server.requests().pop().unwrap();
    assert!(last.first_user_text().unwrap().contains("CLI SUMMARY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_compact_refuses_a_short_session_and_an_unknown_one() {
    let server = ScriptedServer::start(Script::new().then(text("hello")))
        .await
        .unwrap();
    let env = Env::new();
    let session = first_run(env.command(Some(&server)), "hi").await;
    let mut command = env.command(Some(&server));
    command.args(["sessions", "compact", &session]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).contains("too short to compact"),
        "{}",
        describe(&output)
    );
    assert_eq!(server.request_count(), 1, "no summary asked for");
    let mut command = env.command(Some(&server));
    command.args(["sessions", "compact", "no-such-session-0193"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

fn daemon_pid(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("daemon.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    Some(value["pid"].as_u64()? as u32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_compact_goes_through_the_daemon_when_one_runs() {
    let server = ScriptedServer::start(script()).await.unwrap();
    let env = Env::new();
    write_read_files(&env);
    let through_daemon = || {
        let mut command = env.command(Some(&server));
        command
            .env_remove("TROUPE_NO_DAEMON")
            .env("TROUPE_DAEMON_IDLE_SECS", "60");
        command
    };
    // The run starts a daemon, which keeps the store open.
    let session = first_run(through_daemon(), "read them").await;
    let pid = daemon_pid(&env.data_dir()).expect("a daemon runs");
    let mut command = through_daemon();
    command.args(["sessions", "compact", &session]);
    let output = run(command).await;
    check_compacted(&output, &server);
    assert!(process_is_alive(pid));
    // Too short: the daemon answers 422, the command exits with a usage error.
    let mut command = through_daemon();
    command.args(["sessions", "compact", "no-such-session-0193"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    // SAFETY: a plain signal to the process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + COMMAND_LIMIT;
    while process_is_alive(pid) {
        assert!(Instant::now() < deadline, "daemon {pid} stops");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_and_post_compact_hooks_run_on_the_manual_path() {
    let server = ScriptedServer::start(script()).await.unwrap();
    let env = Env::new();
    write_read_files(&env);
    let records = env.root().join("hook-records");
    std::fs::create_dir_all(&records).unwrap();
    let recorder = |name: &str| {
        format!(
            "command = '''{{ cat; echo; }} >> '{}' '''\n",
            records.join(name).display()
        )
    };
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        format!(
            "[[hooks.PreCompact]]\n{}[[hooks.PostCompact]]\nmatcher = \"manual\"\n{}",
            recorder("pre"),
            recorder("post")
        ),
    )
    .unwrap();
    env.trust();
    let session = first_run(env.command(Some(&server)), "read them").await;
    let mut command = env.command(Some(&server));
    command.args(["sessions", "compact", &session]);
    let output = run(command).await;
    check_compacted(&output, &server);
    let payload = |name: &str| -> Value {
        let text = std::fs::read_to_string(records.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{name}: {text}");
        serde_json::from_str(lines[0]).unwrap()
    };
    let pre = payload("pre");
    assert_eq!(pre["event"], "PreCompact");
    assert_eq!(pre["trigger"], "manual");
    assert_eq!(pre["session_id"], session.as_str());
    let post = payload("post");
    assert_eq!(post["event"], "PostCompact");
    assert_eq!(post["trigger"], "manual");
    assert!(
        post["tokens_after"].as_u64().unwrap() < post["tokens_before"].as_u64().unwrap(),
        "{post}"
    );
}
