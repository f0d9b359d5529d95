//! What `troupe run` and `troupe resume` show a person at the terminal, through
//! the real binary against the scripted model server: the session and run ids
//! first and the command that continues at the end, ids given by a unique
//! prefix (`resume`, `run --session`, `trace`), retries as one short line each,
//! colour as `--color` and `NO_COLOR` say, finished tool lines that name their
//! target, the turn limit's wording, and a continued session whose directory
//! is gone.

use serde_json::json;
use troupe_scripted::{Fault, Response, Script, ScriptedServer, text, tool_call};

use crate::support::{
    Env, describe, json_lines, plant_sessions, run, session_of, text as out_text,
};

/// Runs `troupe ARGS` against `server` (or none) to its end.
async fn troupe(env: &Env, server: Option<&ScriptedServer>, args: &[&str]) -> std::process::Output {
    let mut command = env.command(server);
    command.args(args);
    run(command).await
}

/// The `session S  run R` line a plain run starts with: `(S, R)`.
fn ids_line(stderr: &str) -> (String, String) {
    // Start-up warnings (a project that is not a git repository) come first.
    let first = stderr
        .lines()
        .find(|line| line.starts_with("session "))
        .unwrap_or_default();
    let rest = first
        .strip_prefix("session ")
        .unwrap_or_else(|| panic!("the first line names the session: {stderr}"));
    let (session, run) = rest
        .split_once("  run ")
        .unwrap_or_else(|| panic!("the first line names the run: {stderr}"));
    (session.to_string(), run.to_string())
}

/// The short id progress lines show for `id`: its last 8 characters.
fn short(id: &str) -> &str {
    &id[id.len() - 8..]
}

#[tokio::test]
async fn plain_runs_name_their_ids_first_and_the_next_command_last() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text("Done now.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let output = troupe(&env, Some(&server), &["run", "--max-turns", "1", "look"]).await;
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let (session, run_id) = ids_line(&stderr);
    assert_eq!(session.len(), 8, "a short session id: {stderr}");
    assert_eq!(run_id.len(), 8, "a short run id: {stderr}");
    assert!(
        stderr.contains("reached the limit of 1 turn for this message"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().last(),
        Some(format!("(stopped: turn limit) continue with: troupe resume {session}").as_str()),
        "{stderr}"
    );

    // The suggested command works, and its run says how to follow up.
    let output = troupe(&env, Some(&server), &["resume", &session]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let (same_session, next_run) = ids_line(&stderr);
    assert_eq!(same_session, session);
    assert_ne!(next_run, run_id);
    assert_eq!(
        stderr.lines().last(),
        Some(
            format!(
                "(finished) follow up with: troupe resume {session} \"…\"; trace: troupe trace {next_run}"
            )
            .as_str()
        ),
        "{stderr}"
    );
    assert_eq!(out_text(&output.stdout), "Done now.\n");
}

#[tokio::test]
async fn a_failed_run_points_at_its_trace_and_at_resume() {
    let server = ScriptedServer::start(Script::new().then(Fault::Unauthorized))
        .await
        .unwrap();
    let env = Env::new();
    let output = troupe(&env, Some(&server), &["run", "x"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let (session, run_id) = ids_line(&stderr);
    assert_eq!(
        stderr.lines().last(),
        Some(
            format!(
                "(error: provider error) see: troupe trace {run_id}; try again with: troupe resume {session}"
            )
            .as_str()
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn json_mode_prints_no_ids_or_next_steps_on_stderr() {
    let server = ScriptedServer::start(Script::new().then(text("Hi.")))
        .await
        .unwrap();
    let env = Env::new();
    let output = troupe(&env, Some(&server), &["run", "--json", "hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(!stderr.contains("troupe resume"), "{stderr}");
    assert!(!stderr.contains("session "), "{stderr}");
}

#[tokio::test]
async fn resume_run_session_and_trace_take_unique_id_prefixes() {
    let server = ScriptedServer::start(
        Script::new()
            .then(text("First."))
            .then(text("Second."))
            .then(text("Third.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let output = troupe(&env, Some(&server), &["run", "--json", "one"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    let session = session_of(&events);
    let run_id = events[0]["run_id"].as_str().unwrap().to_string();
    // Planted ids that share a prefix with nothing real.
    plant_sessions(&env, &["feed-0001", "feed-0002"], &["feed-r1", "feed-r2"]).await;

    // The session's own prefix: no other session starts with 12 of its characters
    // (the planted ones start with "feed").
    let prefix = &session[..12];
    let output = troupe(&env, Some(&server), &["resume", prefix, "again"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(ids_line(&out_text(&output.stderr)).0, short(&session));
    let output = troupe(&env, Some(&server), &["run", "--session", prefix, "more"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(ids_line(&out_text(&output.stderr)).0, short(&session));
    // Three runs' worth of messages went to the one session.
    assert_eq!(crate::support::export(&env, &session).await.len(), 6);

    let output = troupe(&env, None, &["trace", &run_id[..13]]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        out_text(&output.stdout).contains("invoke_agent"),
        "{}",
        describe(&output)
    );

    // Ambiguous prefixes list their matches; unknown ones say so. Both exit 2.
    for (args, expected) in [
        (
            vec!["resume", "feed-"],
            "session id prefix feed- is ambiguous; it starts 2 session ids:\n  feed-0001\n  feed-0002\n",
        ),
        (
            vec!["run", "--session", "feed-0", "x"],
            "session id prefix feed-0 is ambiguous",
        ),
        (
            vec!["trace", "feed-r"],
            "run id prefix feed-r is ambiguous; it starts 2 run ids:\n  feed-r1\n  feed-r2\n",
        ),
        (
            vec!["resume", "zzz"],
            "no session zzz: no session id or short id starts with it",
        ),
        (
            vec!["trace", "zzz"],
            "no run zzz: no run id or short id starts with it",
        ),
    ] {
        let output = troupe(&env, Some(&server), &args).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            describe(&output)
        );
        let stderr = out_text(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A full id still names its session even when it prefixes nothing else.
    let output = troupe(&env, None, &["trace", "feed-r1"]).await;
    assert_ne!(
        output.status.code(),
        Some(2),
        "a full run id is not a usage error: {}",
        describe(&output)
    );
    assert_eq!(server.remaining_turns(), 0);
}

#[tokio::test]
async fn a_retried_request_is_one_short_line_not_a_log_line() {
    let server = ScriptedServer::start(
        Script::new()
            .then(Fault::RateLimited {
                retry_after_secs: None,
                retry_after_ms: Some(10),
            })
            .then(text("Answered after a retry.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let output = troupe(&env, Some(&server), &["run", "hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let retries: Vec<&str> = stderr.lines().filter(|l| l.contains("retry")).collect();
    assert_eq!(
        retries,
        ["retrying model request (retry 1/4): 429 rate limited; next in 0.0 s"],
        "{stderr}"
    );
    assert_eq!(out_text(&output.stdout), "Answered after a retry.\n");

    // In JSON mode the retry is a coded notice.
    let server = ScriptedServer::start(
        Script::new()
            .then(Fault::Overloaded)
            .then(text("Answered after a retry.")),
    )
    .await
    .unwrap();
    let output = troupe(&env, Some(&server), &["run", "--json", "hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let notices: Vec<_> = json_lines(&output.stdout)
        .into_iter()
        .filter(|event| event["type"] == "notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["code"], "model_retry");
    let text = notices[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("retrying model request (retry 1/4): 529 overloaded; next in "),
        "{text}"
    );
    assert!(
        !out_text(&output.stderr).contains("retrying"),
        "{}",
        describe(&output)
    );
}

#[tokio::test]
async fn colour_follows_the_flag_and_no_color() {
    let env = Env::new();
    let dim = "\x1b[2m";
    for (args, no_color, coloured) in [
        (vec!["run", "hi"], None, false),
        (vec!["--color", "never", "run", "hi"], None, false),
        (vec!["--color", "always", "run", "hi"], None, true),
        (vec!["run", "--color", "always", "hi"], Some("1"), true),
        (vec!["--color", "auto", "run", "hi"], Some("1"), false),
    ] {
        let server = ScriptedServer::start(Script::new().then(text("Hello.")))
            .await
            .unwrap();
        let mut command = env.command(Some(&server));
        command.args(&args);
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = run(command).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            describe(&output)
        );
        let stderr = out_text(&output.stderr);
        assert_eq!(
            stderr.contains(dim),
            coloured,
            "{args:?} {no_color:?}: {stderr:?}"
        );
        // The answer on stdout is never coloured.
        assert_eq!(out_text(&output.stdout), "Hello.\n");
    }
    let output = troupe(&env, None, &["--color", "sometimes", "sessions", "list"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

#[tokio::test]
async fn finished_tool_lines_name_their_target() {
    let server = ScriptedServer::start(
        Script::new()
            .then(
                Response::empty()
                    .and_tool_call("read_file", json!({"path": "a.txt"}))
                    .and_tool_call("read_file", json!({"path": "b.txt"})),
            )
            .then(text("Both read.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(env.root().join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(
        env.root().join("b.txt"),
        "alpha\nbeta\ngamma\ndelta\nepsilon\n",
    )
    .unwrap();
    let output = troupe(&env, Some(&server), &["run", "read both"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let finished: Vec<&str> = stderr.lines().filter(|l| l.starts_with("✓ ")).collect();
    assert_eq!(finished.len(), 2, "{stderr}");
    assert!(finished[0].starts_with("✓ read_file a.txt ("), "{stderr}");
    assert!(finished[1].starts_with("✓ read_file b.txt ("), "{stderr}");
    for line in &finished {
        assert!(
            line.ends_with(" lines)"),
            "a line count, not the content: {line}"
        );
        assert!(!line.contains("alpha") && !line.contains("one"), "{line}");
    }
}

#[tokio::test]
async fn resuming_a_session_whose_directory_is_gone_says_so() {
    let server = ScriptedServer::start(Script::new().then(text("First.")).then(text("Second.")))
        .await
        .unwrap();
    let env = Env::new();
    // A project of its own (the session keeps its project root), removed
    // after the first run.
    let project = tempfile::tempdir().unwrap();
    let work = project.path().join("work");
    std::fs::create_dir_all(work.join(".troupe")).unwrap();
    let mut command = env.command(Some(&server));
    command.current_dir(&work).args(["run", "--json", "one"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let session = session_of(&json_lines(&output.stdout));
    std::fs::remove_dir_all(&work).unwrap();

    let output = troupe(&env, Some(&server), &["resume", &session]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "troupe: the session's directory {} no longer exists; working in {} instead",
            work.display(),
            env.root().display()
        )),
        "{stderr}"
    );
}

/// Whether `line` starts like a detailed log line: an RFC 3339 timestamp.
fn starts_with_timestamp(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 20
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[10] == b'T'
}

#[tokio::test]
async fn warnings_are_one_line_in_troupes_style_unless_logs_are_asked_for() {
    let server = ScriptedServer::start(Script::new().then(text("Hi.")).then(text("Hi.")))
        .await
        .unwrap();
    let env = Env::new();
    // An instruction file that cannot be read is a warning.
    std::fs::create_dir(env.root().join("AGENTS.md")).unwrap();
    let output = troupe(&env, Some(&server), &["run", "hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("cannot read instruction file"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with("troupe: warning: cannot read instruction file (path: "),
        "{stderr}"
    );
    assert!(
        !stderr.lines().any(starts_with_timestamp),
        "no log line with a timestamp: {stderr}"
    );
    assert_eq!(out_text(&output.stdout), "Hi.\n");

    // Asked for, logs are detailed.
    let mut command = env.command(Some(&server));
    command.env("TROUPE_LOG", "warn").args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = out_text(&output.stderr);
    assert!(
        stderr.lines().any(|line| starts_with_timestamp(line)
            && line.contains("WARN")
            && line.contains("cannot read instruction file")),
        "{stderr}"
    );
}

/// `troupe ARGS` on a terminal (stdout and stderr both), typing `answers`.
async fn on_terminal(
    env: &Env,
    server: &ScriptedServer,
    args: &[&str],
    answers: &str,
) -> (Option<i32>, String) {
    let mut command = env.command(Some(server));
    command.args(args);
    crate::support::run_on_terminal(command, answers).await
}

#[tokio::test]
async fn on_a_terminal_the_answer_streams_as_markdown_before_the_closing_line() {
    let answer = "# Plan\n\nSee [the guide](https://guide.example/x).\n\n- one\n- two\n";
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text(answer)),
    )
    .await
    .unwrap();
    let env = Env::new();
    let (code, terminal) = on_terminal(&env, &server, &["run", "plan it"], "").await;
    assert_eq!(code, Some(0), "{terminal}");
    let position = |needle: &str| {
        terminal
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} on the terminal:\n{terminal}"))
    };
    // Rendered, not raw: the heading at the left margin, the link's target shown.
    assert!(!terminal.contains("# Plan"), "{terminal}");
    assert!(
        terminal
            .lines()
            .any(|line| strip_ansi(line).trim_end() == "Plan"
                || strip_ansi(line).starts_with("Plan")),
        "{terminal}"
    );
    assert!(
        strip_ansi(&terminal).contains("the guide (https://guide.example/x)"),
        "{terminal}"
    );
    // Shown once, with the tool line before it and the closing lines after.
    assert_eq!(
        strip_ansi(&terminal).matches("the guide (").count(),
        1,
        "{terminal}"
    );
    assert!(position("glob") < position("the guide"), "{terminal}");
    assert!(
        position("the guide") < position("(done · 2 steps"),
        "{terminal}"
    );
    assert!(
        position("(done · 2 steps") < position("(finished) follow up with: troupe resume"),
        "{terminal}"
    );
    // The ids still come first.
    assert!(position("session ") < position("glob"), "{terminal}");
}

#[tokio::test]
async fn on_a_terminal_an_edit_is_approved_from_its_coloured_diff() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "edit_file",
                json!({"path": "notes.txt", "old_string": "two\n", "new_string": "TWO\n"}),
            ))
            .then(text("Edited.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(
        env.root().join("notes.txt"),
        "zero\none\ntwo\nthree\nfour\nfive\nsix\n",
    )
    .unwrap();
    let (code, terminal) = on_terminal(&env, &server, &["run", "edit it"], "a\n").await;
    assert_eq!(code, Some(0), "{terminal}");
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "zero\none\nTWO\nthree\nfour\nfive\nsix\n"
    );
    let plain = strip_ansi(&terminal);
    assert!(
        plain.contains("edit_file wants to change notes.txt:"),
        "{plain}"
    );
    // A unified diff with three lines of context, coloured on a terminal.
    assert!(
        plain.contains(
            "@@ -1,6 +1,6 @@\r\n zero\r\n one\r\n-two\r\n+TWO\r\n three\r\n four\r\n five"
        ),
        "{plain:?}"
    );
    assert!(terminal.contains("\x1b[31m-two\x1b[0m"), "{terminal:?}");
    assert!(terminal.contains("\x1b[32m+TWO\x1b[0m"), "{terminal:?}");
    // Not the JSON arguments; the reason once; the rule "always" keeps.
    let prompt = &plain[plain.find("wants to change").unwrap()..];
    assert!(!prompt.contains("old_string"), "{plain}");
    assert_eq!(
        plain
            .matches("default mode asks before changing files")
            .count(),
        1,
        "{plain}"
    );
    assert!(
        plain.contains(
            "[a]lways keeps the allow rule `Write(notes.txt)` for the rest of this session (stored with the session, not written to any config file)"
        ),
        "{plain}"
    );
}

/// `text` without ANSI escape sequences (CSI and OSC).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            Some(']') => {
                for c in chars.by_ref() {
                    if c == '\x07' {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}
