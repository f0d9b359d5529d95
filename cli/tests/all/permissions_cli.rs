//! Permissions through the real `troupe` binary against the scripted model
//! server: an allow rule naming a path outside the project lets a read there
//! run, an "always" answer typed at a terminal for an outside read is
//! remembered for the identical read, and a denial with nobody to ask tells
//! the user what to change for the mode the run is in.

use crate::support::{Env, describe, json_lines, run, run_on_terminal};
use serde_json::json;
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

/// A directory outside the project (and outside the home directory the run
/// sees) with two files in it; resolved, so rules and results name it as the
/// runtime does.
fn outside_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(path.join("hostname"), "outside-host\n").unwrap();
    std::fs::write(path.join("notes.txt"), "outside-notes\n").unwrap();
    (dir, path)
}

/// Writes the project's configuration and trusts the project, so all of it
/// applies.
fn write_project_config(env: &Env, body: &str) {
    std::fs::write(env.root().join(".troupe/config.toml"), body).unwrap();
    env.trust();
}

#[tokio::test]
async fn an_allow_rule_naming_an_outside_path_lets_the_read_run_without_asking() {
    let (_keep, outside) = outside_dir();
    let hostname = outside.join("hostname").display().to_string();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("read_file", json!({ "path": hostname })))
            .then(text("read it")),
    )
    .await
    .unwrap();
    let env = Env::new();
    write_project_config(
        &env,
        &format!(
            "[permissions]\nallow = [\"Read({}/host*)\"]\n",
            outside.display()
        ),
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "read the host name"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    assert!(
        !events.iter().any(|e| e["type"] == "approval_requested"),
        "{}",
        describe(&output)
    );
    let result = server.requests()[1].tool_results().last().cloned().unwrap();
    assert!(
        !result.is_error && result.content.contains("outside-host"),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_always_answer_for_an_outside_read_is_remembered_for_the_identical_read() {
    let (_keep, outside) = outside_dir();
    let notes = outside.join("notes.txt").display().to_string();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("read_file", json!({ "path": notes })))
            .then(tool_call("read_file", json!({ "path": notes })))
            .then(text("read it twice")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "read the notes twice"]);
    // One answer only: a second question would find no answer to read.
    let (code, terminal) = run_on_terminal(command, "a\n").await;
    assert_eq!(code, Some(0), "{terminal}");
    assert_eq!(terminal.matches("Allow? [y]es").count(), 1, "{terminal}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{terminal}");
    for request in &requests[1..] {
        let result = request.tool_results().last().cloned().unwrap();
        assert!(
            !result.is_error && result.content.contains("outside-notes"),
            "{result:?}\n{terminal}"
        );
    }
}

#[tokio::test]
async fn a_denial_with_nobody_to_ask_gives_the_rule_line_and_no_useless_mode() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({ "command": "cargo test --all" })))
            .then(text("could not run it")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    // stdin is not a terminal: nobody can answer approvals.
    command.args(["run", "--json", "--mode", "accept-edits", "run the tests"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let result = server.requests()[1].tool_results().last().cloned().unwrap();
    assert!(result.is_error, "{result:?}");
    let root = std::fs::canonicalize(env.root()).unwrap();
    let expected = format!(
        "`allow = [\"Bash(cargo test --all)\"]` under `[permissions]` in `{}` (this project, once trusted with `troupe trust`) or `~/.config/troupe/config.toml` (every project)",
        root.join(".troupe/config.toml").display()
    );
    assert!(result.content.contains(&expected), "{}", result.content);
    assert!(
        result.content.contains("`--mode bypass`"),
        "{}",
        result.content
    );
    assert!(
        !result.content.contains("--mode accept-edits"),
        "accept-edits asks for commands too: {}",
        result.content
    );
}
