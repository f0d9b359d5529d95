//! `troupe rewind` end to end against the scripted model server: after
//! rewinding a session to its first run, the first request of the next
//! resume carries none of the second run's calls, results or text, its
//! messages up to the cut are run 1's last request's plus run 1's answer,
//! and the note comes once, after the cut; a summary made after run 1 is
//! gone with it; `--to 0`, `--to 99`, the last run and a rewind without
//! `--yes` off a terminal are refused and change nothing; the history from
//! before is a branch, listed and resumable.

use crate::support::{
    Env, describe, is_summary, json_lines, not_summary, run, session_of, text as out_text,
    then_six_reads, wire_messages, write_read_files,
};
use serde_json::{Value, json};
use troupe_scripted::{Matcher, RecordedRequest, Script, ScriptedServer, Turn, text, tool_call};

/// The note the resumed prompt carries after a conversation-only rewind to
/// run 1.
const NOTE: &str = "The conversation was rewound to the end of prompt 1.";

/// Run 1 reads a.txt and answers; run 2 reads b.txt and answers; then
/// whatever comes next (a resume) gets "continued".
fn two_runs_script() -> Script {
    Script::new()
        .then(tool_call("read_file", json!({"path": "a.txt"})))
        .then(text("FIRST-ANSWER"))
        .then(tool_call("read_file", json!({"path": "b.txt"})))
        .then(text("SECOND-ANSWER"))
        .then(text("continued"))
        .then(text("continued again"))
}

/// `troupe ARGS` in `env`; the output, checked for `code`.
async fn troupe(
    env: &Env,
    server: &ScriptedServer,
    args: &[&str],
    code: i32,
) -> std::process::Output {
    let mut command = env.command(Some(server));
    command.args(args);
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(code),
        "{args:?}: {}",
        describe(&output)
    );
    output
}

/// Runs "FIRST-TASK" and then "SECOND-TASK" in one session; its id.
async fn two_runs(env: &Env, server: &ScriptedServer) -> String {
    std::fs::write(env.root().join("a.txt"), "A-CONTENTS\n").unwrap();
    std::fs::write(env.root().join("b.txt"), "B-CONTENTS\n").unwrap();
    let first = troupe(env, server, &["run", "--json", "FIRST-TASK"], 0).await;
    let session = session_of(&json_lines(&first.stdout));
    troupe(
        env,
        server,
        &["resume", "--json", &session, "SECOND-TASK"],
        0,
    )
    .await;
    session
}

/// Everything a request says: its messages and system prompt, as text.
fn said(request: &RecordedRequest) -> String {
    format!(
        "{}\n{}",
        request.system_text(),
        serde_json::to_string(request.messages()).unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rewind_to_run_one_the_next_request_is_run_ones_plus_the_note_and_nothing_of_run_two()
 {
    let server = ScriptedServer::start(two_runs_script()).await.unwrap();
    let env = Env::new();
    let session = two_runs(&env, &server).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let run1_last = wire_messages(&requests[1]);
    assert!(said(&requests[3]).contains("B-CONTENTS"));

    let rewound = troupe(
        &env,
        &server,
        &["rewind", &session[..8], "--to", "1", "--both", "--yes"],
        0,
    )
    .await;
    let printed = out_text(&rewound.stdout);
    assert!(printed.contains("4 of 8 message(s) removed"), "{printed}");
    // The runs only read: no checkpoint, so no file is restored, and the
    // note does not say any was.
    assert!(
        printed.contains("not restored: the session has no checkpoints"),
        "{printed}"
    );
    let done_line = printed
        .lines()
        .find(|line| line.starts_with("Rewound session"))
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(done_line.contains("1 run(s) undone"), "{done_line}");

    let resumed = troupe(&env, &server, &["resume", "--json", &session, "go on"], 0).await;
    let events = json_lines(&resumed.stdout);
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(&types[..2], ["run_started", "rewound"], "{types:?}");
    let rewound_event = &events[1];
    assert_eq!(rewound_event["to_run"], 1);
    assert_eq!(rewound_event["files_restored"], false);
    let branch = rewound_event["branch"].as_str().unwrap().to_string();
    assert!(done_line.contains(&branch), "{done_line}");

    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let first_of_resume = &requests[4];
    let messages = wire_messages(first_of_resume);
    // Up to the cut: run 1's last request, byte for byte (the rolling cache
    // mark aside), then run 1's answer; then the new prompt, with the note.
    assert_eq!(messages.len(), run1_last.len() + 2);
    assert_eq!(messages[..run1_last.len()], run1_last[..]);
    assert_eq!(messages[run1_last.len()]["role"], "assistant");
    assert!(
        messages[run1_last.len()]
            .to_string()
            .contains("FIRST-ANSWER")
    );
    let prompt = messages.last().unwrap().to_string();
    assert!(
        prompt.contains(NOTE) && prompt.contains("go on"),
        "{prompt}"
    );
    assert_eq!(first_of_resume.system_text(), requests[1].system_text());
    assert_eq!(first_of_resume.tool_names(), requests[1].tool_names());
    // No trace of run 2, and the note once.
    let everything = said(first_of_resume);
    for trace in ["SECOND-TASK", "SECOND-ANSWER", "B-CONTENTS", "b.txt"] {
        assert!(!everything.contains(trace), "{trace} in {everything}");
    }
    assert_eq!(
        everything.matches("rewound to the end").count(),
        1,
        "{everything}"
    );
    // Run 1's one call, not run 2's.
    assert_eq!(
        everything.matches("\"tool_use\"").count(),
        1,
        "{everything}"
    );

    // The note is told once: the run after carries none.
    troupe(
        &env,
        &server,
        &["resume", "--json", &session, "and more"],
        0,
    )
    .await;
    let later = server.requests().pop().unwrap();
    assert_eq!(said(&later).matches("rewound to the end").count(), 1);
    assert!(
        !wire_messages(&later)
            .last()
            .unwrap()
            .to_string()
            .contains(NOTE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_branch_is_listed_and_resumes_with_the_history_from_before() {
    let server = ScriptedServer::start(two_runs_script()).await.unwrap();
    let env = Env::new();
    let session = two_runs(&env, &server).await;
    let listed = troupe(&env, &server, &["rewind", &session], 0).await;
    let listing = out_text(&listed.stdout);
    let numbered: Vec<&str> = listing
        .lines()
        .filter(|line| line.trim_start().starts_with(['1', '2']) && line.contains("finished"))
        .collect();
    assert_eq!(numbered.len(), 2, "{listing}");
    assert!(
        numbered[0].contains("FIRST-TASK") && numbered[1].contains("SECOND-TASK"),
        "{listing}"
    );

    troupe(
        &env,
        &server,
        &["rewind", &session, "--to", "1", "--conversation", "--yes"],
        0,
    )
    .await;
    let listed = out_text(&troupe(&env, &server, &["rewind", &session], 0).await.stdout);
    assert!(
        listed.contains("FIRST-TASK") && !listed.contains("SECOND-TASK"),
        "{listed}"
    );
    let branch_line = listed
        .lines()
        .find(|line| line.starts_with("branch "))
        .unwrap_or_else(|| panic!("{listed}"));
    let branch = branch_line.split_whitespace().nth(1).unwrap().to_string();

    let sessions = out_text(&troupe(&env, &server, &["sessions", "list"], 0).await.stdout);
    let marked = sessions
        .lines()
        .find(|line| line.contains("(branch of"))
        .unwrap_or_else(|| panic!("{sessions}"));
    assert!(
        marked.starts_with(troupe_store::short_id(&branch)),
        "{sessions}"
    );
    // The branch has run 2 and resumes with it.
    let branch_runs = out_text(&troupe(&env, &server, &["rewind", &branch], 0).await.stdout);
    assert!(branch_runs.contains("SECOND-TASK"), "{branch_runs}");
    troupe(
        &env,
        &server,
        &["resume", "--json", &branch, "on the branch"],
        0,
    )
    .await;
    let request = server.requests().pop().unwrap();
    let everything = said(&request);
    assert!(everything.contains("SECOND-ANSWER") && everything.contains("B-CONTENTS"));
    assert!(!everything.contains("rewound to the end"), "{everything}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_rewinds_change_nothing() {
    let server = ScriptedServer::start(two_runs_script()).await.unwrap();
    let env = Env::new();
    let session = two_runs(&env, &server).await;
    let export = |env: &Env| {
        let mut command = env.command(None);
        command.args(["sessions", "export", &session]);
        command
    };
    let before = run(export(&env)).await.stdout;
    for (to, says) in [
        ("0", "there is no run 0"),
        ("99", "there is no run 99"),
        ("2", "nothing to rewind"),
    ] {
        let output = troupe(
            &env,
            &server,
            &["rewind", &session, "--to", to, "--conversation", "--yes"],
            2,
        )
        .await;
        let stderr = out_text(&output.stderr);
        assert!(stderr.contains(says), "{to}: {stderr}");
    }
    // No terminal to ask on, and no --yes.
    let output = troupe(
        &env,
        &server,
        &["rewind", &session, "--to", "1", "--conversation"],
        2,
    )
    .await;
    assert!(
        out_text(&output.stderr).contains("--yes"),
        "{}",
        describe(&output)
    );
    assert!(out_text(&output.stdout).contains("message(s) removed"));
    assert_eq!(run(export(&env)).await.stdout, before);
    let sessions = out_text(&troupe(&env, &server, &["sessions", "list"], 0).await.stdout);
    assert!(!sessions.contains("(branch of"), "{sessions}");
}

/// Six reads of ~20 KB then "all read" (run 1); "MORE-ANSWER" (run 2);
/// one summary; then answers to whatever follows.
fn compaction_script() -> Script {
    then_six_reads(Script::new())
        .then(Turn::new(text("MORE-ANSWER")).when(not_summary()))
        .when(
            Matcher::last_user_contains("<summary> tags"),
            text("<summary>1. CLI SUMMARY</summary>"),
        )
        .then(Turn::new(text("continued")).when(not_summary()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_made_after_the_run_rewound_to_is_gone_with_it() {
    let server = ScriptedServer::start(compaction_script()).await.unwrap();
    let env = Env::new();
    write_read_files(&env);
    let first = troupe(&env, &server, &["run", "--json", "read them"], 0).await;
    let session = session_of(&json_lines(&first.stdout));
    let run1_requests = server.requests().len();
    let run1_last = wire_messages(&server.requests()[run1_requests - 1]);
    troupe(
        &env,
        &server,
        &["resume", "--json", &session, "MORE-TASK"],
        0,
    )
    .await;
    troupe(&env, &server, &["sessions", "compact", &session], 0).await;
    assert!(server.requests().iter().any(is_summary));
    // The compaction was a run of its own: three runs, rewound to the first.
    let listed = out_text(&troupe(&env, &server, &["rewind", &session], 0).await.stdout);
    assert!(listed.contains("(compact the conversation)"), "{listed}");
    let rewound = troupe(
        &env,
        &server,
        &["rewind", &session, "--to", "1", "--conversation", "--yes"],
        0,
    )
    .await;
    assert!(
        out_text(&rewound.stdout).contains("2 run(s) undone"),
        "{}",
        describe(&rewound)
    );
    troupe(&env, &server, &["resume", "--json", &session, "go on"], 0).await;
    let request = server.requests().pop().unwrap();
    assert!(!is_summary(&request));
    let everything = said(&request);
    for trace in ["CLI SUMMARY", "MORE-TASK", "MORE-ANSWER"] {
        assert!(
            !everything.contains(trace),
            "{trace} in the request after the rewind"
        );
    }
    let messages: Vec<Value> = wire_messages(&request);
    assert_eq!(messages[..run1_last.len()], run1_last[..]);
    assert!(request.first_user_text().unwrap().contains("read them"));
}
