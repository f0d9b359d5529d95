//! The strict shell reading through the real `troupe` binary against the
//! scripted model server: read-only commands run without approval and
//! concurrently with each other (proven by two commands that can only finish
//! together), a command with side effects splits their batch, a redirection or
//! an unknown flag makes a command need approval, and an allow rule with `*`
//! no longer covers a substitution or a redirection outside the allowed roots.
//! Each case checks the decision, the reason the model sees, and that nothing
//! happened that the decision forbids.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};

use crate::support::{Env, describe, json_lines, run};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text, tool_calls};

/// The `(type, call_id)` of every tool event, in order.
fn tool_events(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_started" || e["type"] == "tool_finished")
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["call_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn bash(command: &str) -> (&'static str, Value) {
    ("bash", json!({ "command": command }))
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn git_init(dir: &Path) {
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git init");
}

/// Writes `line` into each FIFO, but only once every FIFO has a reader at the
/// same time: each writer's `open` blocks until a reader opens its FIFO, and
/// no writer writes before all are open. Readers that ran one after the other
/// would wait for each other forever (the first never gets its data), so the
/// run finishing at all proves they ran together.
fn feed_together(
    fifos: Vec<std::path::PathBuf>,
    line: &'static str,
) -> Vec<std::thread::JoinHandle<()>> {
    let barrier = Arc::new(Barrier::new(fifos.len()));
    fifos
        .into_iter()
        .map(|fifo| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                barrier.wait();
                writer.write_all(line.as_bytes()).unwrap();
            })
        })
        .collect()
}

#[tokio::test]
async fn read_only_commands_run_concurrently_without_approval() {
    let env = Env::new();
    git_init(env.root());
    mkfifo(&env.root().join("a.fifo"));
    mkfifo(&env.root().join("b.fifo"));
    std::fs::write(env.root().join("notes.txt"), "notes\n").unwrap();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                bash("cat a.fifo"),
                bash("wc -c b.fifo"),
                bash("ls"),
                bash("git status --short"),
            ]))
            .then(text("read")),
    )
    .await
    .unwrap();
    let feeders = feed_together(
        vec![env.root().join("a.fifo"), env.root().join("b.fifo")],
        "together\n",
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "default", "look around"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    for feeder in feeders {
        feeder.join().unwrap();
    }
    let events = json_lines(&output.stdout);
    assert!(
        !events.iter().any(|e| e["type"] == "approval_requested"),
        "{}",
        describe(&output)
    );
    let order = tool_events(&events);
    let kinds: Vec<&str> = order.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "tool_started",
            "tool_started",
            "tool_started",
            "tool_started",
            "tool_finished",
            "tool_finished",
            "tool_finished",
            "tool_finished"
        ],
        "one concurrent batch: {order:?}"
    );
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 4);
    for result in &results {
        assert!(!result.is_error, "{result:?}");
    }
    assert!(results[0].content.contains("together"), "{:?}", results[0]);
    assert!(results[1].content.contains("9 b.fifo"), "{:?}", results[1]);
    assert!(results[2].content.contains("notes.txt"), "{:?}", results[2]);
    assert!(
        results[3].content.contains("?? notes.txt"),
        "{:?}",
        results[3]
    );
}

#[tokio::test]
async fn a_command_with_side_effects_splits_the_read_only_batch() {
    let env = Env::new();
    std::fs::write(env.root().join("one.txt"), "one\n").unwrap();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[permissions]\nallow = [\"Bash(touch *)\"]\n",
    )
    .unwrap();
    env.trust();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                bash("cat one.txt"),
                bash("ls"),
                bash("touch made.txt"),
                bash("wc -c one.txt"),
            ]))
            .then(text("done")),
    )
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "go"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    let order = tool_events(&events);
    let ids: Vec<String> = order
        .iter()
        .filter(|(kind, _)| kind == "tool_started")
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(ids.len(), 4, "{order:?}");
    let expected: Vec<(String, String)> = [
        ("tool_started", &ids[0]),
        ("tool_started", &ids[1]),
        ("tool_finished", &ids[0]),
        ("tool_finished", &ids[1]),
        ("tool_started", &ids[2]),
        ("tool_finished", &ids[2]),
        ("tool_started", &ids[3]),
        ("tool_finished", &ids[3]),
    ]
    .into_iter()
    .map(|(kind, id)| (kind.to_owned(), id.clone()))
    .collect();
    assert_eq!(order, expected);
    let results = server.requests()[1].tool_results();
    assert!(results.iter().all(|r| !r.is_error), "{results:?}");
    assert!(env.root().join("made.txt").exists());
}

#[tokio::test]
async fn a_redirection_or_an_unknown_flag_needs_approval() {
    let env = Env::new();
    std::fs::write(env.root().join("one.txt"), "one\n").unwrap();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                bash("cat one.txt > copy.txt"),
                bash("ls --no-such-flag > listing.txt; touch listed.txt"),
                bash("find . -name one.txt -delete"),
                bash("cat one.txt"),
            ]))
            .then(text("done")),
    )
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "default", "go"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 4);
    for result in &results[..3] {
        assert!(result.is_error, "{result:?}");
        assert!(
            result.content.contains(
                "this call needs approval (default mode asks before running commands or tools with side effects) and nobody can answer in this run"
            ),
            "{}",
            result.content
        );
    }
    assert!(!results[3].is_error, "{:?}", results[3]);
    assert!(results[3].content.starts_with("one\n"), "{:?}", results[3]);
    assert!(!env.root().join("copy.txt").exists());
    assert!(!env.root().join("listing.txt").exists());
    assert!(!env.root().join("listed.txt").exists());
    assert!(env.root().join("one.txt").exists());
}

#[tokio::test]
async fn an_allow_pattern_never_covers_a_substitution_or_a_write_outside_the_roots() {
    let env = Env::new();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[permissions]\nallow = [\"Bash(echo *)\"]\n",
    )
    .unwrap();
    env.trust();
    let bashrc = env.home.path().join(".bashrc");
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                bash("echo owned > ~/.bashrc"),
                bash("echo owned >> $HOME/.bashrc"),
                bash("echo $(echo pwned > pwned.txt)"),
                bash("echo `echo pwned > ticked.txt`"),
                bash("echo fine > inside.txt"),
            ]))
            .then(text("done")),
    )
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "go"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 5);
    let reasons = [
        format!(
            "it redirects output to `{}`, outside the allowed roots",
            bashrc.display()
        ),
        "it redirects output to a file named only when it runs".to_owned(),
        "it contains a command substitution (`$(…)` or backticks)".to_owned(),
        "it contains a command substitution (`$(…)` or backticks)".to_owned(),
    ];
    for (result, why) in results.iter().zip(&reasons) {
        assert!(result.is_error, "{result:?}");
        assert!(
            result.content.contains(
                "the allow rule \"Bash(echo *)\" from project config would cover this command, but a pattern allows a command only when every part of it can be checked"
            ),
            "{}",
            result.content
        );
        assert!(result.content.contains(why.as_str()), "{}", result.content);
        assert!(
            result.content.contains("allow this exact command"),
            "{}",
            result.content
        );
    }
    assert!(!results[4].is_error, "{:?}", results[4]);
    assert!(!bashrc.exists());
    assert!(!env.root().join("pwned.txt").exists());
    assert!(!env.root().join("ticked.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.root().join("inside.txt")).unwrap(),
        "fine\n"
    );
}
