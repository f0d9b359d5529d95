//! Hooks through the real `troupe` binary against the scripted model server:
//! every event a run goes through fires with its payload on stdin (a hook
//! that records what it reads); PreToolUse blocks and rewrites; a
//! UserPromptSubmit block keeps the prompt out of the history and out of
//! every request; a hook that hangs is killed at its timeout with what it
//! started; failing hooks warn and the run goes on; an untrusted project's
//! hooks do not run and the run says so.

use std::path::{Path, PathBuf};

use crate::support::{Env, describe, json_lines, run, session_of};
use serde_json::{Value, json};
use troupe_process::process_is_alive;
use troupe_scripted::{Script, ScriptedServer, text, tool_call, tool_calls};

/// A directory of the project where hooks leave what they saw (hooks run in
/// the OS sandbox: they write inside the project only).
struct Records {
    dir: PathBuf,
}

impl Records {
    fn new(env: &Env) -> Self {
        let dir = env.root().join("hook-records");
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A hook command that appends its payload (one line) to `name`.
    fn recorder(&self, name: &str) -> String {
        format!("{{ cat; echo; }} >> '{}'", self.path(name).display())
    }

    /// The payloads recorded in `name`, in order.
    fn payloads(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// Writes the project's configuration and trusts the project.
fn configure(env: &Env, config: &str) {
    std::fs::write(env.root().join(".troupe/config.toml"), config).unwrap();
    env.trust();
}

/// A `[[hooks.EVENT]]` entry.
fn entry(event: &str, matcher: Option<&str>, command: &str, timeout: Option<u64>) -> String {
    let mut out = format!("[[hooks.{event}]]\n");
    if let Some(matcher) = matcher {
        out.push_str(&format!("matcher = {}\n", toml_string(matcher)));
    }
    out.push_str(&format!("command = {}\n", toml_string(command)));
    if let Some(secs) = timeout {
        out.push_str(&format!("timeout_secs = {secs}\n"));
    }
    out
}

fn toml_string(text: &str) -> String {
    format!("'''{text}'''")
}

async fn json_run(env: &Env, server: &ScriptedServer, args: &[&str]) -> (Vec<Value>, String, i32) {
    let mut command = env.command(Some(server));
    command.arg("run").arg("--json").args(args);
    let output = run(command).await;
    (
        json_lines(&output.stdout),
        crate::support::text(&output.stderr),
        output.status.code().unwrap_or(-1),
    )
}

fn hook_events(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|event| event["type"] == "hook")
        .map(|event| {
            (
                event["event"].as_str().unwrap().to_owned(),
                event["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_hook_of_a_run_fires_with_its_payload_and_the_reduced_environment() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": "echo hi"})))
            .then(text("all done"))
            .then(text("again")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let records = Records::new(&env);
    let environment = records.path("env.txt");
    let config = [
        "[permissions]\nmode = \"bypass\"\n".to_owned(),
        entry(
            "SessionStart",
            None,
            &records.recorder("session_start"),
            None,
        ),
        entry("UserPromptSubmit", None, &records.recorder("prompt"), None),
        entry("PreToolUse", Some("bash"), &records.recorder("pre"), None),
        entry(
            "PreToolUse",
            Some("read_file"),
            &records.recorder("never"),
            None,
        ),
        entry(
            "PostToolUse",
            None,
            &format!(
                "{}; env > '{}'",
                records.recorder("post"),
                environment.display()
            ),
            None,
        ),
        entry("Stop", None, &records.recorder("stop"), None),
    ]
    .concat();
    configure(&env, &config);
    let (events, stderr, code) = json_run(&env, &server, &["check it"]).await;
    assert_eq!(code, 0, "{stderr}");
    let session = session_of(&events);
    let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
    let root = std::fs::canonicalize(env.root()).unwrap();

    let common = |payload: &Value, event: &str| {
        assert_eq!(payload["event"], event);
        assert_eq!(payload["session_id"], session.as_str());
        assert_eq!(payload["run_id"], run_id.as_str());
        assert_eq!(payload["agent_path"], "main");
        assert_eq!(payload["cwd"], root.display().to_string());
    };
    let start = records.payloads("session_start");
    assert_eq!(start.len(), 1);
    common(&start[0], "SessionStart");
    assert_eq!(start[0]["trigger"], "startup");
    let prompt = records.payloads("prompt");
    common(&prompt[0], "UserPromptSubmit");
    assert_eq!(prompt[0]["prompt"], "check it");
    let pre = records.payloads("pre");
    assert_eq!(pre.len(), 1);
    common(&pre[0], "PreToolUse");
    assert_eq!(pre[0]["tool_name"], "bash");
    assert_eq!(pre[0]["tool_input"], json!({"command": "echo hi"}));
    assert!(pre[0]["tool_call_id"].is_string());
    assert!(
        records.payloads("never").is_empty(),
        "a matcher for another tool fired"
    );
    let post = records.payloads("post");
    common(&post[0], "PostToolUse");
    assert!(post[0]["tool_result"].as_str().unwrap().contains("hi"));
    assert_eq!(post[0]["tool_is_error"], false);
    let stop = records.payloads("stop");
    common(&stop[0], "Stop");
    assert_eq!(stop[0]["last_message"], "all done");
    assert_eq!(stop[0]["stop_hook_active"], false);

    // Each run is a `hook` event, in the order the run met them.
    let fired: Vec<String> = hook_events(&events).into_iter().map(|(e, _)| e).collect();
    assert_eq!(
        fired,
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop"
        ]
    );
    // The reduced environment, with the project and a trace parent, no key.
    let environment = std::fs::read_to_string(environment).unwrap();
    assert!(environment.contains(&format!("TROUPE_PROJECT_DIR={}", root.display())));
    assert!(environment.contains("TROUPE_HOOK_EVENT=PostToolUse"));
    assert!(!environment.contains("ANTHROPIC_API_KEY"), "{environment}");
    assert!(!environment.contains("test-key"), "{environment}");

    // Another process continuing the session resumes it.
    let (_, stderr, code) = json_run(&env, &server, &["--session", &session, "again"]).await;
    assert_eq!(code, 0, "{stderr}");
    let start = records.payloads("session_start");
    assert_eq!(start.len(), 2);
    assert_eq!(start[1]["trigger"], "resume");
    assert_eq!(records.payloads("prompt").len(), 2);
}

#[tokio::test]
async fn pre_tool_use_hooks_block_with_a_reason_and_rewrite_arguments() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                // Commands with effects: one call per group, hooks in order.
                (
                    "bash",
                    json!({"command": "printf 'original\\n' | tee -a log"}),
                ),
                (
                    "bash",
                    json!({"command": "printf 'forbidden\\n' | tee -a log"}),
                ),
                (
                    "bash",
                    json!({"command": "printf 'untouched\\n' | tee -a log"}),
                ),
            ]))
            .then(text("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let guard = r#"p=$(cat)
case "$p" in
  *forbidden*) echo "forbidden words are not allowed" >&2; exit 2 ;;
  *original*) echo '{"updated_input": {"command": "printf rewritten | tee -a log"}}' ;;
esac"#;
    configure(
        &env,
        &format!(
            "[permissions]\nmode = \"bypass\"\n{}",
            entry("PreToolUse", Some("bash"), guard, None)
        ),
    );
    let (events, stderr, code) = json_run(&env, &server, &["go"]).await;
    assert_eq!(code, 0, "{stderr}");
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 3);
    assert!(
        !results[0].is_error && results[0].content.contains("rewritten"),
        "{:?}",
        results[0]
    );
    assert!(!results[0].content.contains("original"));
    assert!(results[1].is_error);
    assert_eq!(
        results[1].content,
        "Blocked by a PreToolUse hook: forbidden words are not allowed"
    );
    assert!(results[2].content.contains("untouched"), "{:?}", results[2]);
    let outcomes: Vec<String> = hook_events(&events).into_iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes, ["continue", "block", "continue"]);
}

#[tokio::test]
async fn a_blocked_prompt_never_enters_the_history_nor_any_request() {
    let server = ScriptedServer::start(Script::new().then(text("hello")))
        .await
        .unwrap();
    let env = Env::new();
    let gate = r#"if grep -q 'SECRET'; then echo "prompts must not carry secrets" >&2; exit 2; fi"#;
    configure(&env, &entry("UserPromptSubmit", None, gate, None));
    let (events, stderr, code) = json_run(&env, &server, &["deploy with SECRET=hunter2"]).await;
    assert_ne!(code, 0, "a blocked prompt is not a finished run");
    assert!(server.requests().is_empty(), "the model was asked");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["stop_reason"], "hook_blocked");
    assert!(
        last["final_text"]
            .as_str()
            .unwrap()
            .contains("prompts must not carry secrets"),
        "{last}"
    );
    let session = session_of(&events);
    let dump = serde_json::to_string(&events).unwrap();
    assert!(
        !dump.contains("hunter2"),
        "the prompt is in the events: {dump}"
    );
    assert!(!stderr.contains("hunter2"));

    // The session goes on without it.
    let (_, stderr, code) = json_run(&env, &server, &["--session", &session, "say hello"]).await;
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = serde_json::to_string(&crate::support::wire_messages(&requests[0])).unwrap();
    assert!(!body.contains("hunter2"), "{body}");
    assert!(body.contains("say hello"));
    let mut export = env.command(None);
    export.args(["sessions", "export", &session]);
    let exported = run(export).await;
    assert!(!crate::support::text(&exported.stdout).contains("hunter2"));
}

fn pid_in(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn hooks_that_hang_crash_or_fail_warn_and_the_run_goes_on() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": "echo ran"})))
            .then(text("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let records = Records::new(&env);
    let pid_file = records.path("child.pid");
    let hang = format!("sleep 600 & echo $! > '{}'; wait", pid_file.display());
    configure(
        &env,
        &format!(
            "[permissions]\nmode = \"bypass\"\n{}{}{}",
            entry("PreToolUse", None, &hang, Some(1)),
            entry("PreToolUse", None, "kill -SEGV $$", None),
            entry("PostToolUse", None, "echo 'lint failed' >&2; exit 1", None),
        ),
    );
    let (events, stderr, code) = json_run(&env, &server, &["go"]).await;
    assert_eq!(code, 0, "{stderr}");
    let results = server.requests()[1].tool_results();
    assert!(results[0].content.contains("ran"), "{:?}", results[0]);
    assert_eq!(
        hook_events(&events),
        [
            ("PreToolUse".to_owned(), "timeout".to_owned()),
            ("PreToolUse".to_owned(), "error".to_owned()),
            ("PostToolUse".to_owned(), "error".to_owned()),
        ]
    );
    let messages: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "hook")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(messages[0].contains("1 s timeout"), "{messages:?}");
    assert!(
        messages[2].contains("exited with 1: lint failed"),
        "{messages:?}"
    );
    // What the hung hook started was killed with it.
    let child = pid_in(&pid_file);
    assert!(
        !process_is_alive(child),
        "the hook's child {child} survived"
    );
}

#[tokio::test]
async fn an_untrusted_projects_hooks_do_not_run_until_it_is_trusted() {
    let server = ScriptedServer::start(Script::new().then(text("one")).then(text("two")))
        .await
        .unwrap();
    let env = Env::new();
    let records = Records::new(&env);
    let marker = records.path("ran");
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        entry(
            "UserPromptSubmit",
            None,
            &format!("touch '{}'", marker.display()),
            None,
        ),
    )
    .unwrap();
    let (events, stderr, code) = json_run(&env, &server, &["hello"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!marker.exists(), "an untrusted project's hook ran");
    let _ = events;
    // Said on stderr, also with --json (stdout is the event stream).
    let notice = stderr
        .lines()
        .find(|line| line.contains("is not trusted"))
        .unwrap_or_else(|| panic!("no notice: {stderr}"));
    assert!(
        notice.contains(&format!(
            ".troupe/config.toml: hooks.UserPromptSubmit (runs `touch '{}'`)",
            marker.display()
        )),
        "{notice}"
    );

    env.trust();
    let (_, stderr, code) = json_run(&env, &server, &["hello"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(marker.exists(), "the trusted project's hook did not run");
    let _ = describe;
}

#[tokio::test]
async fn hooks_run_in_the_os_sandbox_like_commands() {
    let server = ScriptedServer::start(Script::new().then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    let records = Records::new(&env);
    let outside = tempfile::tempdir().unwrap();
    let escaped = outside.path().join("escaped");
    let inside = records.path("inside");
    let command = format!(
        "touch '{}' 2>/dev/null; touch '{}'",
        escaped.display(),
        inside.display()
    );
    configure(&env, &entry("UserPromptSubmit", None, &command, None));
    let (_, stderr, code) = json_run(&env, &server, &["hello"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(inside.exists(), "the hook did not run");
    assert!(!escaped.exists(), "a hook wrote outside the allowed roots");
}

#[tokio::test]
async fn a_blocked_call_is_shown_before_the_hook_that_blocked_it() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": "printf forbidden"})))
            .then(text("done"))
            .then(tool_call("bash", json!({"command": "printf forbidden"})))
            .then(text("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let guard = r#"echo "forbidden words are not allowed" >&2; exit 2"#;
    configure(
        &env,
        &format!(
            "[permissions]\nmode = \"bypass\"\n{}",
            entry("PreToolUse", Some("bash"), guard, None)
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "go"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = crate::support::text(&output.stderr);
    let position = |needle: &str| {
        stderr
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{stderr}"))
    };
    assert!(
        position("→ bash") < position("blocked: forbidden words are not allowed"),
        "{stderr}"
    );
    assert!(
        position("blocked: forbidden words are not allowed") < position("✗ bash"),
        "{stderr}"
    );

    let (events, stderr, code) = json_run(&env, &server, &["go"]).await;
    assert_eq!(code, 0, "{stderr}");
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|event| event["type"].as_str())
        .filter(|kind| kind.starts_with("tool_") || *kind == "hook")
        .collect();
    assert_eq!(
        kinds,
        ["tool_started", "hook", "tool_finished"],
        "{events:?}"
    );
}
