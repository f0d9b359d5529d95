//! What a person at the terminal sees of stored sessions (SPEC §1.1, §9):
//! `troupe sessions list|show|export|rm`, child sessions (listed with their
//! parent, shown under it, removed and repaired with it), continuing with
//! `troupe run --session` and `troupe resume`, the background removal of old
//! sessions, and the store under damage — damaged records, a database held by another process, an
//! unwritable data directory, a run whose process was killed. Records are
//! planted or damaged through the store API and raw sled only while no
//! `troupe` process holds the database.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, TimeDelta, Utc};
use serde_json::{Value, json};
use troupe_agent::resume::{INTERRUPTED_CLOSING, INTERRUPTED_RESULT, pause_note, user_message};
use troupe_agent::validate_history;
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{ContentBlock, Message, Protocol, Role, ToolCall};
use troupe_scripted::{Script, ScriptedServer, Turn, text, tool_call};
use troupe_store::{NewSession, RunRecord, RunState, Store, TITLE_MAX_CHARS, layout};

use crate::support::{
    Env, create_planted_session, describe, export, fd_guard, json_lines, parse_export, run,
    run_then_kill, session_of, text as out_text, wait_until_unlocked, wire_messages, wire_of,
};

/// What `troupe resume ID` says without a prompt (`cli/src/run.rs`,
/// `CONTINUE_PROMPT`).
const CONTINUE_PROMPT: &str = "Continue where you left off. If the task is done, say so briefly.";
/// How long the command of a killed run keeps running after the kill.
const ORPHAN_SECS: u64 = 5;
/// How long the database may stay locked after a killed process is reaped;
/// shorter than [`ORPHAN_SECS`], so a command holding it would be noticed.
const UNLOCK_LIMIT: Duration = Duration::from_secs(1);
/// Question/answer pairs of the long planted history.
const LONG_EXCHANGES: usize = 500;
/// An id no session has.
const UNKNOWN_ID: &str = "no-such-session-0193";
/// Age past which the background cleanup removes a session (SPEC §9: 30 days),
/// plus margin.
const OLD_AGE: TimeDelta = TimeDelta::days(40);
/// An age well inside the 30 days.
const RECENT_AGE: TimeDelta = TimeDelta::days(20);

/// Runs `troupe ARGS` (no model server) to its end.
async fn troupe(env: &Env, args: &[&str]) -> std::process::Output {
    let mut command = env.command(None);
    command.args(args);
    run(command).await
}

/// Runs `troupe run --json ARGS` against `server`; it must finish. Returns
/// its events.
async fn json_run(env: &Env, server: &ScriptedServer, args: &[&str]) -> Vec<Value> {
    let mut command = env.command(Some(server));
    command.args(["run", "--json"]).args(args);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    assert_eq!(events.last().unwrap()["status"], "finished");
    events
}

/// The short id lists and progress lines show for the UUID `id`.
fn short(id: &str) -> &str {
    &id[id.len() - 8..]
}

/// `troupe sessions list --json`, parsed.
async fn list_json(env: &Env) -> Vec<Value> {
    let output = troupe(env, &["sessions", "list", "--json", "--all", "--tree"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    json_lines(&output.stdout)
}

/// Ids of `troupe sessions list --json`, newest first.
async fn listed_ids(env: &Env) -> Vec<String> {
    list_json(env)
        .await
        .iter()
        .map(|meta| meta["id"].as_str().unwrap().to_string())
        .collect()
}

/// The conversation of a planted session: `exchanges` question/answer pairs.
fn planted_history(id: &str, exchanges: usize) -> Vec<Message> {
    (0..exchanges)
        .flat_map(|n| {
            [
                Message::user_text(format!("task {n} of {id}")),
                Message::assistant_text(format!("answer {n} of {id}")),
            ]
        })
        .collect()
}

/// Writes a session through the store API with a store clock `age` in the
/// past (so its `created` and `updated` times are that old).
async fn plant_session(env: &Env, id: &str, age: TimeDelta, exchanges: usize) {
    {
        let _guard = fd_guard();
        let clock = Arc::new(move || Utc::now() - age);
        let store = Store::open_with_clock(&env.data_dir(), clock).unwrap();
        write_planted(&store, env, id, exchanges);
    }
    released(env).await;
}

/// Opens the store of `env` in this process, runs `write` on it, closes it and
/// waits until it is released (no `troupe` process may hold it meanwhile).
async fn with_store(env: &Env, write: impl FnOnce(&Store)) {
    {
        let _guard = fd_guard();
        let store = Store::open(&env.data_dir()).unwrap();
        write(&store);
        store.flush().unwrap();
    }
    released(env).await;
}

/// Writes a child session of `parent` created by run `run_id` for the agent
/// at `agent_path`, with `exchanges` question/answer pairs.
fn write_child(
    store: &Store,
    env: &Env,
    id: &str,
    parent: &str,
    agent_path: &str,
    run_id: &str,
    exchanges: usize,
) {
    store
        .create_session(&NewSession {
            id: id.into(),
            cwd: env.root().to_path_buf(),
            provider: "claude".into(),
            model: "scripted-model".into(),
            parent: Some(parent.into()),
            agent_path: Some(agent_path.into()),
            run_id: Some(run_id.into()),
            fork_of: None,
        })
        .unwrap();
    for (index, message) in planted_history(id, exchanges).iter().enumerate() {
        store.put_message(id, index as u64, message).unwrap();
    }
}

/// Waits until a database closed by this process is unlocked: sled finishes
/// closing its files on background threads after the handle is dropped.
async fn released(env: &Env) {
    wait_until_unlocked(&env.data_dir(), UNLOCK_LIMIT)
        .await
        .unwrap();
}

/// Writes the planted session `id` into `store`.
fn write_planted(store: &Store, env: &Env, id: &str, exchanges: usize) {
    create_planted_session(store, env, id);
    for (index, message) in planted_history(id, exchanges).iter().enumerate() {
        store.put_message(id, index as u64, message).unwrap();
    }
    store.flush().unwrap();
}

/// A time field of listed session metadata.
fn time(meta: &Value, field: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(meta[field].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn list_is_newest_first_with_titles_cut_on_character_boundaries() {
    // Multi-byte characters up to the cut: 50 bytes would end inside a
    // character; 50 characters end right after an emoji.
    let emoji = "🦀 Résumé 🎉 naïve café — 日本語のテキスト über straße 🦀🎉🦀🎉🦀🎉 façade and more words after that";
    assert!(!emoji.is_char_boundary(TITLE_MAX_CHARS));
    let expected_title: String = emoji.chars().take(TITLE_MAX_CHARS).collect();
    assert!(expected_title.ends_with('🦀'));

    let server = ScriptedServer::start(
        Script::new()
            .then(text("First done."))
            .then(text("Second done."))
            .then(text("Third done.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut ids = Vec::new();
    for prompt in ["first task", emoji, "third   task\n\twith  spaces"] {
        ids.push(session_of(&json_run(&env, &server, &[prompt]).await));
    }

    let output = troupe(&env, &["sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = out_text(&output.stdout);
    let mut lines: Vec<&str> = stdout.lines().collect();
    let header = lines.remove(0);
    assert!(
        header.starts_with("ID ") && header.ends_with("TITLE"),
        "{stdout}"
    );
    assert_eq!(lines.len(), 3, "{stdout}");
    let newest_first: Vec<&String> = ids.iter().rev().collect();
    for (line, id) in lines.iter().zip(&newest_first) {
        assert!(line.starts_with(&id[id.len() - 8..]), "{line}");
        assert!(line.contains("    2  "), "message count column: {line}");
    }
    assert!(lines[1].ends_with(&expected_title), "{}", lines[1]);
    assert!(lines[0].ends_with("third task with spaces"), "{}", lines[0]);
    assert!(lines[2].ends_with("first task"), "{}", lines[2]);

    let metas = list_json(&env).await;
    let listed: Vec<&str> = metas.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(listed, newest_first);
    let titles: Vec<&str> = metas.iter().map(|m| m["title"].as_str().unwrap()).collect();
    assert_eq!(
        titles,
        [
            "third task with spaces",
            expected_title.as_str(),
            "first task"
        ]
    );
    assert_eq!(expected_title.chars().count(), TITLE_MAX_CHARS);
    for meta in &metas {
        assert_eq!(meta["message_count"], 2, "{meta}");
        assert_eq!(meta["cwd"], json!(env.root()), "{meta}");
        assert!(meta["model"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(meta["parent"].is_null());
        assert!(time(meta, "created") <= time(meta, "updated"), "{meta}");
    }
    let updated: Vec<_> = metas.iter().map(|m| time(m, "updated")).collect();
    assert!(updated.windows(2).all(|w| w[0] >= w[1]), "{updated:?}");
}

#[tokio::test]
async fn show_export_and_rm() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("read_file", json!({"path": "notes.txt"})))
            .then(text("The notes say hello.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(env.root().join("notes.txt"), "hello\n").unwrap();
    let events = json_run(&env, &server, &["Read the notes"]).await;
    let id = session_of(&events);
    let run_id = events[0]["run_id"].as_str().unwrap().to_string();

    let output = troupe(&env, &["sessions", "show", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    for expected in [
        format!("session   {id}\n"),
        "title     Read the notes\n".to_string(),
        format!("cwd       {}\n", env.root().display()),
        "messages  4\n".to_string(),
        format!("run       {}  finished (end_turn)\n", short(&run_id)),
        "[user] Read the notes\n".to_string(),
        "→ read_file {\"path\":\"notes.txt\"}\n".to_string(),
        "[tool] ← ".to_string(),
        "[assistant] The notes say hello.\n".to_string(),
    ] {
        assert!(
            shown.contains(&expected),
            "{expected:?} missing in:\n{shown}"
        );
    }

    let output = troupe(&env, &["sessions", "export", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let exported = parse_export(&output.stdout);
    let roles: Vec<Role> = exported.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    validate_history(&exported).unwrap();
    let listed = list_json(&env).await;
    assert_eq!(listed[0]["message_count"], exported.len() as u64);
    // What the model saw on its second call is what was stored.
    assert_eq!(
        wire_of(&exported[..3]),
        wire_messages(&server.requests()[1])
    );

    let output = troupe(&env, &["sessions", "rm", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), format!("removed session {id}\n"));
    for command in ["show", "export", "rm"] {
        let output = troupe(&env, &["sessions", command, &id]).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command}: {}",
            describe(&output)
        );
        assert!(
            out_text(&output.stderr).contains(&id),
            "{}",
            describe(&output)
        );
    }
    assert!(listed_ids(&env).await.is_empty());
}

#[tokio::test]
async fn an_empty_store_lists_no_sessions_yet_and_json_lists_nothing() {
    let env = Env::new();
    let output = troupe(&env, &["sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), "no sessions yet\n");
    let output = troupe(&env, &["sessions", "list", "--json"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), "");
}

#[tokio::test]
async fn sessions_commands_take_a_unique_id_prefix() {
    let env = Env::new();
    for id in ["feed-0001", "feed-0002", "cafe-0001"] {
        plant_session(&env, id, RECENT_AGE, 1).await;
    }
    let output = troupe(&env, &["sessions", "show", "feed-0002"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let output = troupe(&env, &["sessions", "show", "caf"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        out_text(&output.stdout).starts_with("session   cafe-0001\n"),
        "{}",
        describe(&output)
    );
    let output = troupe(&env, &["sessions", "export", "feed-0001"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(parse_export(&output.stdout).len(), 2);
    assert_eq!(export(&env, "c").await.len(), 2);

    for command in ["show", "export", "rm"] {
        let output = troupe(&env, &["sessions", command, "feed"]).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command}: {}",
            describe(&output)
        );
        assert_eq!(
            out_text(&output.stderr),
            "troupe: session id prefix feed is ambiguous; it starts 2 session ids:\n  feed-0001\n  feed-0002\ngive more characters of the id\n",
            "{command}"
        );
        let output = troupe(&env, &["sessions", command, "fee-"]).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command}: {}",
            describe(&output)
        );
        assert!(
            out_text(&output.stderr)
                .contains("no session fee-: no session id or short id starts with it"),
            "{command}: {}",
            describe(&output)
        );
    }

    let output = troupe(&env, &["sessions", "rm", "feed-1"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let output = troupe(&env, &["sessions", "rm", "feed-0001"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), "removed session feed-0001\n");
    // With one left, the shorter prefix is no longer ambiguous.
    let output = troupe(&env, &["sessions", "rm", "feed"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), "removed session feed-0002\n");
    assert_eq!(listed_ids(&env).await, ["cafe-0001"]);
}

#[tokio::test]
async fn unknown_session_ids_exit_two_naming_the_id() {
    let env = Env::new();
    let commands: [&[&str]; 5] = [
        &["sessions", "show", UNKNOWN_ID],
        &["sessions", "export", UNKNOWN_ID],
        &["sessions", "rm", UNKNOWN_ID],
        &["run", "--session", UNKNOWN_ID, "hello"],
        &["resume", UNKNOWN_ID],
    ];
    for args in commands {
        let output = troupe(&env, args).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            describe(&output)
        );
        let stderr = out_text(&output.stderr);
        assert!(
            stderr.contains(&format!("no session {UNKNOWN_ID}")),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}: {}", describe(&output));
    }
}

#[tokio::test]
async fn run_with_a_session_and_resume_continue_the_conversation() {
    let server = ScriptedServer::start(
        Script::new()
            .then(text("Noted: 42."))
            .then(text("The number was 42."))
            .then(text("Nothing is left to do.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let id = session_of(&json_run(&env, &server, &["Remember the number 42."]).await);

    let events = json_run(&env, &server, &["--session", &id, "Which number was it?"]).await;
    assert_eq!(session_of(&events), id);
    assert_eq!(events.last().unwrap()["final_text"], "The number was 42.");
    let conversation = vec![
        Message::user_text("Remember the number 42."),
        Message::assistant_text("Noted: 42."),
        Message::user_text("Which number was it?"),
    ];
    let requests = server.requests();
    assert_eq!(wire_messages(&requests[1]), wire_of(&conversation));

    let mut command = env.command(Some(&server));
    command.args(["resume", &id, "--json"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(session_of(&json_lines(&output.stdout)), id);
    let mut conversation = conversation;
    conversation.push(Message::assistant_text("The number was 42."));
    conversation.push(Message::user_text(CONTINUE_PROMPT));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(wire_messages(&requests[2]), wire_of(&conversation));

    conversation.push(Message::assistant_text("Nothing is left to do."));
    assert_eq!(export(&env, &id).await, conversation);
    assert_eq!(listed_ids(&env).await, [id]);
}

#[tokio::test]
async fn a_later_run_removes_old_sessions_and_keeps_recent_ones() {
    let env = Env::new();
    plant_session(&env, "old-session", OLD_AGE, 1).await;
    plant_session(&env, "recent-session", RECENT_AGE, 1).await;
    assert_eq!(listed_ids(&env).await, ["recent-session", "old-session"]);

    // The cleanup runs in the background of the run; the answer is held back
    // long enough for a removal of one small session to finish first.
    let server = ScriptedServer::start(
        Script::new().then(Turn::new(text("Hello.")).with_delay(Duration::from_millis(300))),
    )
    .await
    .unwrap();
    let id = session_of(&json_run(&env, &server, &["hello"]).await);
    assert_eq!(listed_ids(&env).await, [id, "recent-session".to_string()]);
    let output = troupe(&env, &["sessions", "show", "old-session"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

/// SPEC §9: "a session in use is never removed". Continuing a session older
/// than 30 days makes it the session in use; the background cleanup started
/// by the same `troupe run` must not remove it under the run.
#[tokio::test]
async fn continuing_a_session_older_than_thirty_days_keeps_it() {
    let env = Env::new();
    // A long history: loading it keeps the run busy while the cleanup looks.
    plant_session(&env, "old-session", OLD_AGE, LONG_EXCHANGES).await;
    let server = ScriptedServer::start(Script::new().then(text("Still here.")))
        .await
        .unwrap();
    let mut command = env.command(Some(&server));
    command.args([
        "run",
        "--json",
        "--session",
        "old-session",
        "Are you there?",
    ]);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "the session being continued was removed under its run: {}",
        describe(&output)
    );
    // After 40 days idle the new message carries the pause note (SPEC §9).
    let paused = OLD_AGE.to_std().unwrap();
    let mut expected = planted_history("old-session", LONG_EXCHANGES);
    expected.push(user_message("Are you there?", pause_note(paused)));
    assert_eq!(wire_messages(&server.requests()[0]), wire_of(&expected));
    expected.push(Message::assistant_text("Still here."));
    assert_eq!(export(&env, "old-session").await, expected);
    assert_eq!(listed_ids(&env).await, ["old-session"]);
}

#[tokio::test]
async fn a_database_held_by_another_process_is_a_clear_error_and_loses_nothing() {
    let server = ScriptedServer::start(Script::new().then(text("Recorded.")))
        .await
        .unwrap();
    let env = Env::new();
    let held = {
        let _guard = fd_guard();
        Store::open(&env.data_dir()).unwrap()
    };

    let output = troupe(&env, &["sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.contains("is in use by another troupe process"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&env.data_dir().display().to_string()),
        "{stderr}"
    );

    let mut command = env.command(Some(&server));
    command.args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).contains("is in use by another troupe process"),
        "{}",
        describe(&output)
    );
    assert_eq!(server.request_count(), 0, "nothing ran without its store");

    {
        // Let no child being started keep a copy of the descriptor.
        let _guard = fd_guard();
        drop(held);
    }
    released(&env).await;
    let id = session_of(&json_run(&env, &server, &["hello"]).await);
    assert_eq!(listed_ids(&env).await, [id.as_str()]);
    assert_eq!(export(&env, &id).await.len(), 2);
}

#[tokio::test]
async fn an_unwritable_data_directory_is_a_clear_error() {
    let server = ScriptedServer::start(Script::new().then(text("Recorded.")))
        .await
        .unwrap();
    let env = Env::new();
    let blocker = env.home.path().join("not-a-directory");
    std::fs::write(&blocker, "a regular file").unwrap();
    let data_dir = blocker.join("data");

    let mut command = env.command_with_home(None, &data_dir);
    command.args(["sessions", "list"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.contains("cannot write the troupe data directory"),
        "{stderr}"
    );
    assert!(stderr.contains(&blocker.display().to_string()), "{stderr}");
    assert!(stderr.contains("TROUPE_HOME"), "{stderr}");

    let mut command = env.command_with_home(Some(&server), &data_dir);
    command.args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).contains("cannot write the troupe data directory"),
        "{}",
        describe(&output)
    );
    assert_eq!(server.request_count(), 0, "nothing ran without its store");

    // With a writable data directory, the same run records and lists.
    let id = session_of(&json_run(&env, &server, &["hello"]).await);
    assert_eq!(listed_ids(&env).await, [id]);
}

/// Kills a run while its `bash` call runs; returns (session id, run id).
async fn killed_during_a_call(env: &Env) -> (String, String) {
    let server = ScriptedServer::start(Script::new().then(tool_call(
        "bash",
        json!({"command": format!("echo started >> started.log; sleep {ORPHAN_SECS}")}),
    )))
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "bypass", "Run the long step."]);
    let events = run_then_kill(command, &env.home.path().join("killed.stderr"), |events| {
        events.last().is_some_and(|e| e["type"] == "tool_started")
    })
    .await;
    assert_eq!(events.last().unwrap()["type"], "tool_started");
    // The killed process's command outlives it; it must not keep the store.
    wait_until_unlocked(&env.data_dir(), UNLOCK_LIMIT)
        .await
        .unwrap();
    (
        session_of(&events),
        events[0]["run_id"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn the_next_run_reports_an_interrupted_run_and_it_can_be_continued() {
    next_run_reports_an_interrupted_run_and_it_can_be_continued(Protocol::Anthropic).await;
}

#[tokio::test]
async fn openai_the_next_run_reports_an_interrupted_run_and_it_can_be_continued() {
    next_run_reports_an_interrupted_run_and_it_can_be_continued(Protocol::OpenAi).await;
}

#[tokio::test]
async fn openai_responses_the_next_run_reports_an_interrupted_run_and_it_can_be_continued() {
    next_run_reports_an_interrupted_run_and_it_can_be_continued(Protocol::OpenAiResponses).await;
}

/// A run killed during a tool call is reported by the next run and continued
/// by `troupe resume` with the call answered as interrupted, on `protocol`.
async fn next_run_reports_an_interrupted_run_and_it_can_be_continued(protocol: Protocol) {
    let env = Env::with_protocol(protocol);
    let (id, run_id) = killed_during_a_call(&env).await;

    let server = ScriptedServer::start(Script::new().then(text("Unrelated work done.")).then(
        text("The long step was interrupted; I will check before rerunning."),
    ))
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "Something else."]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.contains(&format!("run {} was interrupted", short(&run_id))),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("continue it with: troupe resume {}\n", short(&id))),
        "{stderr}"
    );

    let output = troupe(&env, &["sessions", "show", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    assert!(
        shown.contains(&format!("run       {}  interrupted\n", short(&run_id))),
        "{shown}"
    );
    assert!(shown.contains(INTERRUPTED_CLOSING), "{shown}");

    // Reported once: the next run has nothing more to recover.
    let mut command = env.command(Some(&server));
    command.args(["resume", &id]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        !out_text(&output.stderr).contains("was interrupted"),
        "{}",
        describe(&output)
    );
    let request = &server.requests()[1];
    let results = request.tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].content, INTERRUPTED_RESULT);
    // Only Anthropic's wire has an error flag on a result.
    assert_eq!(results[0].is_error, protocol == Protocol::Anthropic);
    assert_eq!(server.requests()[1].protocol.to_string(), protocol.as_str());
    // The call was not run again.
    let started = std::fs::read_to_string(env.root().join("started.log")).unwrap_or_default();
    assert!(started.lines().count() <= 1, "{started}");
    let stored = export(&env, &id).await;
    validate_history(&stored).unwrap();
    assert_eq!(
        stored.last().unwrap().text(),
        "The long step was interrupted; I will check before rerunning."
    );
}

/// SPEC §9: a run whose process died is marked interrupted when the store is
/// next opened. `troupe sessions` holds the store alone, so a run still marked
/// running is certainly dead; showing it as "running" tells the person a
/// killed run is still going.
#[tokio::test]
async fn sessions_show_after_a_kill_reports_the_run_as_interrupted() {
    let env = Env::new();
    let (id, run_id) = killed_during_a_call(&env).await;
    let output = troupe(&env, &["sessions", "show", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    assert!(
        shown.contains(&format!("run       {}  interrupted\n", short(&run_id))),
        "a run whose process was killed is shown as:\n{shown}"
    );
}

/// Replaces records of the stored messages of `id` with raw bytes (the store
/// must not be open elsewhere).
async fn damage_messages(
    env: &Env,
    id: &str,
    damage: impl FnOnce(&sled::Tree, &dyn Fn(u64) -> Vec<u8>),
) {
    {
        let _guard = fd_guard();
        let db = sled::open(env.data_dir().join(layout::DB_DIR_NAME)).unwrap();
        let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
        let owner = id.to_string();
        damage(&tree, &move |index| layout::numbered_key(&owner, index));
        db.flush().unwrap();
    }
    released(env).await;
}

#[tokio::test]
async fn damaged_records_are_skipped_and_the_session_goes_on() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("read_file", json!({"path": "notes.txt"})))
            .then(text("The notes say hello."))
            .then(text("Carrying on without the lost records.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(env.root().join("notes.txt"), "hello\n").unwrap();
    let id = session_of(&json_run(&env, &server, &["Read the notes"]).await);
    let before = export(&env, &id).await;
    assert_eq!(before.len(), 4);

    // The tool message becomes garbage; the last record is cut in half.
    damage_messages(&env, &id, |tree, key| {
        tree.insert(key(2), &b"\xde\xad\xbe\xef not json"[..])
            .unwrap();
        let whole = tree.get(key(3)).unwrap().unwrap();
        tree.insert(key(3), &whole[..whole.len() / 2]).unwrap();
    })
    .await;

    let output = troupe(&env, &["sessions", "show", &id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    assert!(
        shown.contains("(record 2 unreadable: undecodable"),
        "{shown}"
    );
    assert!(shown.contains("(record 3 unreadable: truncated"), "{shown}");
    assert!(shown.contains("[user] Read the notes"), "{shown}");
    assert_eq!(export(&env, &id).await, before[..2]);
    let listed = list_json(&env).await;
    assert_eq!(listed[0]["title"], "Read the notes");

    // Continuing repairs the history once and tells the person.
    let mut command = env.command(Some(&server));
    command.args(["run", "--session", &id, "go on"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "2 unreadable record(s) of session {id} were skipped"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 call(s) answered as interrupted"),
        "{stderr}"
    );
    let request = &server.requests()[2];
    let results = request.tool_results();
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error && results[0].content == INTERRUPTED_RESULT);

    let after = export(&env, &id).await;
    validate_history(&after).unwrap();
    assert_eq!(after[..2], before[..2]);
    assert_eq!(after.len(), 6, "{after:#?}");
    assert_eq!(wire_of(&after[..5]), wire_messages(request));
    let output = troupe(&env, &["sessions", "show", &id]).await;
    assert!(
        !out_text(&output.stdout).contains("unreadable"),
        "{}",
        describe(&output)
    );
}

/// Plants a session whose metadata record is damaged, beside a sound one.
async fn damaged_metadata(env: &Env) {
    plant_session(env, "sound-session", RECENT_AGE, 1).await;
    plant_session(env, "damaged-session", RECENT_AGE, 1).await;
    {
        let _guard = fd_guard();
        let db = sled::open(env.data_dir().join(layout::DB_DIR_NAME)).unwrap();
        let tree = db.open_tree(layout::SESSIONS_TREE).unwrap();
        tree.insert("damaged-session", &b"{\"v\":1,\"data\":{\"id\":"[..])
            .unwrap();
        db.flush().unwrap();
    }
    released(env).await;
}

#[tokio::test]
async fn damaged_metadata_is_skipped_in_the_list_and_named_when_shown() {
    let env = Env::new();
    damaged_metadata(&env).await;
    assert_eq!(listed_ids(&env).await, ["sound-session"]);
    let output = troupe(&env, &["sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let output = troupe(&env, &["sessions", "show", "damaged-session"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(stderr.contains("damaged"), "{stderr}");
    assert!(stderr.contains("damaged-session"), "{stderr}");
}

/// docs/storage.md: "`remove_session` still removes a damaged session". A
/// session whose metadata is damaged cannot be listed, shown or continued;
/// `troupe sessions rm` is the one way to get rid of it short of discarding
/// the whole database, and the age cleanup never sees it (listing skips it).
#[tokio::test]
async fn sessions_rm_removes_a_session_whose_metadata_is_damaged() {
    let env = Env::new();
    damaged_metadata(&env).await;
    let output = troupe(&env, &["sessions", "rm", "damaged-session"]).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "a damaged session cannot be removed: {}",
        describe(&output)
    );
    let output = troupe(&env, &["sessions", "export", "damaged-session"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert_eq!(listed_ids(&env).await, ["sound-session"]);
    assert_eq!(export(&env, "sound-session").await.len(), 2);
}

/// A top-level session `top` with child sessions `child-one` (which has a
/// child `grand-one`) and `child-two`, all written by run `run-1`, and an
/// unrelated session `bystander`.
async fn plant_family(env: &Env) {
    plant_session(env, "bystander", RECENT_AGE, 1).await;
    with_store(env, |store| {
        write_planted(store, env, "top", 1);
        write_child(store, env, "child-one", "top", "main/fork-1", "run-1", 1);
        write_child(
            store,
            env,
            "child-two",
            "top",
            "main/explorer-2",
            "run-1",
            2,
        );
        write_child(
            store,
            env,
            "grand-one",
            "child-one",
            "main/fork-1/explorer-1",
            "run-1",
            1,
        );
    })
    .await;
}

#[tokio::test]
async fn child_sessions_are_listed_with_their_parent_and_shown_under_it() {
    let env = Env::new();
    plant_family(&env).await;

    // Without --tree only the top-level sessions are listed.
    let output = troupe(&env, &["sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        out_text(&output.stdout).lines().count(),
        3,
        "{}",
        describe(&output)
    );

    let output = troupe(&env, &["sessions", "list", "--tree"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = out_text(&output.stdout);
    let line_of = |id: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("{id} is not listed:\n{stdout}"))
            .to_string()
    };
    // A header line, then one line per session.
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    assert!(stdout.starts_with("ID "), "{stdout}");
    // Top-level lines keep their format: they end with the title.
    assert!(line_of("top").ends_with("    2  scripted-model            task 0 of top"));
    assert!(line_of("bystander").ends_with("task 0 of bystander"));
    assert!(
        line_of("child-one").ends_with("task 0 of child-one  ↳ top main/fork-1"),
        "{stdout}"
    );
    assert!(line_of("child-two").contains("    4  "), "{stdout}");
    assert!(
        line_of("child-two").ends_with("task 0 of child-two  ↳ top main/explorer-2"),
        "{stdout}"
    );
    assert!(
        line_of("grand-one").ends_with("  ↳ child-one main/fork-1/explorer-1"),
        "{stdout}"
    );

    let metas = list_json(&env).await;
    let meta_of = |id: &str| {
        metas
            .iter()
            .find(|meta| meta["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {metas:?}"))
    };
    assert_eq!(meta_of("child-one")["parent"], "top");
    assert_eq!(meta_of("child-one")["agent_path"], "main/fork-1");
    assert_eq!(meta_of("child-one")["run_id"], "run-1");
    assert_eq!(meta_of("grand-one")["parent"], "child-one");
    for top in ["top", "bystander"] {
        let meta = meta_of(top);
        assert!(meta["parent"].is_null(), "{meta}");
        assert!(meta["agent_path"].is_null(), "{meta}");
        assert!(meta["run_id"].is_null(), "{meta}");
    }

    // The parent lists its direct children, oldest first, after its metadata.
    let output = troupe(&env, &["sessions", "show", "top"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    let expected_children = "child     child-one  main/fork-1  2 messages  task 0 of child-one\n\
         child     child-two  main/explorer-2  4 messages  task 0 of child-two\n";
    assert!(shown.contains(expected_children), "{shown}");
    assert!(!shown.contains("grand-one"), "{shown}");
    assert!(!shown.contains("parent    "), "{shown}");
    let conversation = shown.find("[user] task 0 of top").unwrap();
    assert!(
        shown.find("child     child-one").unwrap() < conversation,
        "{shown}"
    );

    // A child shows where it belongs, and its own children.
    let output = troupe(&env, &["sessions", "show", "child-one"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    for expected in [
        "session   child-one\n",
        "parent    top\n",
        "agent     main/fork-1\n",
        "from run  run-1\n",
        "child     grand-one  main/fork-1/explorer-1  2 messages  task 0 of grand-one\n",
        "[user] task 0 of child-one\n",
    ] {
        assert!(
            shown.contains(expected),
            "{expected:?} missing in:\n{shown}"
        );
    }
}

#[tokio::test]
async fn sessions_rm_removes_the_child_sessions_too() {
    let env = Env::new();
    plant_family(&env).await;

    // A leaf goes alone.
    let output = troupe(&env, &["sessions", "rm", "child-two"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(out_text(&output.stdout), "removed session child-two\n");
    let output = troupe(&env, &["sessions", "show", "top"]).await;
    assert!(
        !out_text(&output.stdout).contains("child-two"),
        "{}",
        describe(&output)
    );

    // A child takes its own child.
    with_store(&env, |store| {
        write_child(store, &env, "child-three", "top", "main/fork-3", "run-2", 1);
        write_child(
            store,
            &env,
            "grand-three",
            "child-three",
            "main/fork-3/a",
            "run-2",
            1,
        );
    })
    .await;
    let output = troupe(&env, &["sessions", "rm", "child-three"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        out_text(&output.stdout),
        "removed session child-three and its 1 child session\n"
    );

    // The parent takes every descendant.
    let output = troupe(&env, &["sessions", "rm", "top"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        out_text(&output.stdout),
        "removed session top and its 2 child sessions\n"
    );
    assert_eq!(listed_ids(&env).await, ["bystander"]);
    for id in [
        "top",
        "child-one",
        "grand-one",
        "child-three",
        "grand-three",
    ] {
        let output = troupe(&env, &["sessions", "export", id]).await;
        assert_eq!(output.status.code(), Some(2), "{id}: {}", describe(&output));
    }
    assert_eq!(export(&env, "bystander").await.len(), 2);
}

/// An assistant message calling `bash` once with call id `call_id`.
fn bash_call(call_id: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolCall(ToolCall {
            id: call_id.into(),
            name: "bash".into(),
            input: r#"{"command":"make"}"#.into(),
        })],
    }
}

/// A run killed while its agent, a sub-agent and the sub-agent's own
/// sub-agent each waited for a tool call leaves three histories ending in an
/// unanswered call. The next command that opens the store repairs all of
/// them, and leaves the child session of another run alone.
#[tokio::test]
async fn the_next_command_repairs_the_child_sessions_of_an_interrupted_run() {
    let env = Env::new();
    let unanswered = |store: &Store, id: &str| {
        store
            .put_message(id, 0, &Message::user_text(format!("task of {id}")))
            .unwrap();
        store
            .put_message(id, 1, &bash_call(&format!("call-{id}")))
            .unwrap();
    };
    let run = |run_id: &str, status: RunState| RunRecord {
        run_id: run_id.into(),
        session_id: "top".into(),
        prompt: "go".into(),
        status,
        stop_reason: None,
        started: Utc::now(),
        ended: None,
        pid: 1,
        history: None,
    };
    with_store(&env, |store| {
        write_planted(store, &env, "top", 0);
        unanswered(store, "top");
        store
            .put_run(&run("killed-run", RunState::Running))
            .unwrap();
        store
            .put_run(&run("earlier-run", RunState::Ended(RunStatus::Finished)))
            .unwrap();
        for (id, parent, agent_path, run_id) in [
            ("child", "top", "main/fork-1", "killed-run"),
            (
                "grandchild",
                "child",
                "main/fork-1/explorer-1",
                "killed-run",
            ),
            ("earlier-child", "top", "main/fork-1", "earlier-run"),
        ] {
            write_child(store, &env, id, parent, agent_path, run_id, 0);
            unanswered(store, id);
        }
    })
    .await;
    let broken = export(&env, "earlier-child").await;
    assert!(validate_history(&broken).is_err());

    let output = troupe(&env, &["sessions", "show", "top"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let shown = out_text(&output.stdout);
    assert!(
        shown.contains("run       killed-run  interrupted\n"),
        "{shown}"
    );

    for id in ["top", "child", "grandchild"] {
        let stored = export(&env, id).await;
        validate_history(&stored).unwrap_or_else(|e| panic!("{id}: {e}: {stored:#?}"));
        let results: Vec<_> = stored[2].tool_results_iter().collect();
        assert_eq!(results.len(), 1, "{id}");
        assert_eq!(results[0].call_id, format!("call-{id}"));
        assert_eq!(results[0].joined_text(), INTERRUPTED_RESULT);
        assert_eq!(stored.last().unwrap().text(), INTERRUPTED_CLOSING, "{id}");
    }
    assert_eq!(export(&env, "earlier-child").await, broken);
}

/// The short ids `troupe sessions list` prints, newest first (the first
/// column of every line after the header).
async fn listed_short_ids(env: &Env, args: &[&str]) -> Vec<String> {
    let mut list = vec!["sessions", "list"];
    list.extend_from_slice(args);
    let output = troupe(env, &list).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    out_text(&output.stdout)
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Asserts that `troupe sessions show SHORT` shows session `full`.
async fn shown_by(env: &Env, short: &str, full: &str) {
    let output = troupe(env, &["sessions", "show", short]).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{short}: {}",
        describe(&output)
    );
    assert!(
        out_text(&output.stdout).starts_with(&format!("session   {full}\n")),
        "{short}: {}",
        describe(&output)
    );
}

#[tokio::test]
async fn sessions_of_the_same_second_are_each_shown_by_the_eight_characters_listed() {
    // Two ids of the same millisecond share their first 13 characters (the
    // time); the second takes the first's time and its own random rest, so a
    // clock that ticks between the two calls cannot part them.
    let first = uuid::Uuid::now_v7().to_string();
    let second = format!(
        "{}{}",
        &first[..13],
        &uuid::Uuid::now_v7().to_string()[13..]
    );
    assert_ne!(first, second);
    assert!(uuid::Uuid::parse_str(&second).is_ok_and(|id| id.get_version_num() == 7));
    let env = Env::new();
    with_store(&env, |store| {
        write_planted(store, &env, &first, 1);
        write_planted(store, &env, &second, 1);
    })
    .await;

    let listed = listed_short_ids(&env, &[]).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_ne!(listed[0], listed[1]);
    for short in &listed {
        assert_eq!(short.len(), 8, "{short}");
        let full = [&first, &second]
            .into_iter()
            .find(|full| full.ends_with(short.as_str()))
            .unwrap_or_else(|| panic!("{short} is the end of an id"));
        shown_by(&env, short, full).await;
        // A shorter prefix of the short id will do while it is unique.
        shown_by(&env, &short[..6], full).await;
    }
    // The full id and its time prefix still work as before.
    shown_by(&env, &first, &first).await;
    let output = troupe(&env, &["sessions", "show", &first[..8]]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).contains("is ambiguous; it starts 2 session ids"),
        "{}",
        describe(&output)
    );
}

#[tokio::test]
async fn runs_started_back_to_back_print_short_ids_that_name_their_sessions() {
    let server = ScriptedServer::start(
        Script::new()
            .then(text("First done."))
            .then(text("Second done."))
            .then(text("Resumed.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut started = Vec::new();
    for prompt in ["first task", "second task"] {
        let mut command = env.command(Some(&server));
        command.args(["run", prompt]);
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        // The progress line names the session and the run by short id.
        let stderr = out_text(&output.stderr);
        // Start-up warnings (a project that is not a git repository) come
        // first.
        let first_line = stderr
            .lines()
            .find(|line| line.starts_with("session "))
            .unwrap_or_default()
            .to_string();
        let rest = first_line.strip_prefix("session ").unwrap();
        let (session, run_id) = rest.split_once("  run ").unwrap();
        assert_eq!((session.len(), run_id.len()), (8, 8), "{first_line}");
        assert!(
            stderr.contains(&format!("troupe resume {session} ")),
            "{stderr}"
        );
        started.push(session.to_string());
    }
    let full = listed_ids(&env).await;
    let listed = listed_short_ids(&env, &[]).await;
    assert_eq!(listed, [started[1].clone(), started[0].clone()]);
    for (short, full) in listed.iter().zip(&full) {
        assert!(full.ends_with(short.as_str()), "{short} {full}");
        shown_by(&env, short, full).await;
    }
    // `resume --last` continues the newest session of this project.
    let mut command = env.command(Some(&server));
    command.args(["resume", "--last", "go on"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).starts_with(&format!("session {}  run ", started[1])),
        "{}",
        describe(&output)
    );
    assert_eq!(listed_ids(&env).await.len(), 2);
}

#[tokio::test]
async fn the_list_shows_this_projects_sessions_unless_all_and_children_only_with_tree() {
    let env = Env::new();
    let elsewhere = tempfile::tempdir().unwrap();
    with_store(&env, |store| {
        write_planted(store, &env, "here-0001", 1);
        write_planted(store, &env, "here-0002", 1);
        store
            .create_session(&NewSession {
                id: "away-0001".into(),
                cwd: elsewhere.path().to_path_buf(),
                provider: "claude".into(),
                model: "scripted-model".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            })
            .unwrap();
        store
            .create_session(&NewSession {
                id: "kid-0001".into(),
                cwd: env.root().to_path_buf(),
                provider: "claude".into(),
                model: "scripted-model".into(),
                parent: Some("here-0001".into()),
                agent_path: Some("main/explorer-1".into()),
                run_id: None,
                fork_of: None,
            })
            .unwrap();
    })
    .await;
    let mut here = listed_short_ids(&env, &[]).await;
    here.sort();
    assert_eq!(here, ["here-0001", "here-0002"]);
    let mut tree = listed_short_ids(&env, &["--tree"]).await;
    tree.sort();
    assert_eq!(tree, ["here-0001", "here-0002", "kid-0001"]);
    let mut all = listed_short_ids(&env, &["--all"]).await;
    all.sort();
    assert_eq!(all, ["away-0001", "here-0001", "here-0002"]);
    assert_eq!(
        listed_short_ids(&env, &["--all", "--limit", "1"])
            .await
            .len(),
        1
    );

    // Another project with no session of its own says where the others are.
    let mut command = env.command(None);
    command
        .current_dir(elsewhere.path())
        .args(["sessions", "list", "--tree"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        out_text(&output.stdout).contains("\naway-0001 "),
        "{}",
        describe(&output)
    );
    let empty = tempfile::tempdir().unwrap();
    let mut command = env.command(None);
    command.current_dir(empty.path()).args(["sessions", "list"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        out_text(&output.stdout).contains("`troupe sessions list --all` lists every project's"),
        "{}",
        describe(&output)
    );
    let mut command = env.command(None);
    command.current_dir(empty.path()).args(["resume", "--last"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        out_text(&output.stderr).contains("no session in the project"),
        "{}",
        describe(&output)
    );
}
