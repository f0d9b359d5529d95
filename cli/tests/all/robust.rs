//! Robustness of one run against hostile input, through the real binary and
//! the scripted model server: tools pointed at huge or sparse files keep the
//! process's peak memory bounded and answer with a clear text, nothing of the
//! session is lost, a response with more tool calls than the run's budget
//! runs only what the budget allows and stops with exit 3, and a session's
//! spill files go with it.
//!
//! Peak memory is the `VmHWM` of the `troupe` process (`/proc/PID/status`),
//! read while the scripted server holds its last model request open, compared
//! with a run that makes the same calls on small files.

use std::io::Write;

use serde_json::json;
use troupe_protocol::model::{ContentBlock, Message, Role};
use troupe_scripted::{
    Fault, Response, Script, ScriptedServer, text, tool_call_with_id, tool_calls,
};

use crate::support::{Env, Measured, export, json_lines, run_measured, session_of};

/// SPEC §15 via issue 14: one tool call adds at most this much to the peak
/// resident set of the process, whatever it is pointed at.
const TOOL_MEMORY_BOUND_KIB: u64 = 64 * 1024;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// Creates `path` with `text` at its start, then extends it to `size` bytes
/// without writing them (a sparse file: zeros on read, no disk used).
fn sparse_file(path: &std::path::Path, text: &[u8], size: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(text).unwrap();
    file.set_len(size).unwrap();
}

/// Every tool result of a history, by call id, as text.
fn results(history: &[Message]) -> std::collections::HashMap<String, (String, bool)> {
    let mut out = std::collections::HashMap::new();
    for message in history.iter().filter(|m| m.role == Role::Tool) {
        for block in &message.content {
            if let ContentBlock::ToolResult(result) = block {
                out.insert(
                    result.call_id.clone(),
                    (result.joined_text(), result.is_error),
                );
            }
        }
    }
    out
}

/// The ids of the tool calls of a history, in order.
fn call_ids(history: &[Message]) -> Vec<String> {
    history
        .iter()
        .flat_map(|m| m.tool_calls())
        .map(|call| call.id.clone())
        .collect()
}

/// The script of the memory test: one response reading, searching and
/// editing the given files, then an answer.
fn hostile_script(files: &Files) -> Script {
    Script::new()
        .then(tool_calls([
            ("read_file", json!({"path": files.long_2g})),
            ("read_file", json!({"path": files.long_64g})),
            ("grep", json!({"pattern": "needle", "output_mode": "content"})),
            (
                "edit_file",
                json!({"path": files.edit, "old_string": "e", "new_string": "x".repeat(5_000), "replace_all": true}),
            ),
        ]))
        // Held open: the process waits, alive, while its peak is read.
        .then(Fault::stall_after(0, text("Done looking.")))
}

/// File names of the memory test.
struct Files {
    long_2g: &'static str,
    long_64g: &'static str,
    edit: &'static str,
}

const FILES: Files = Files {
    long_2g: "long-2g.txt",
    long_64g: "long-64g.txt",
    edit: "many-e.txt",
};

/// Runs the memory test's script on files made by `make`; returns the run.
async fn hostile_run(make: impl FnOnce(&std::path::Path)) -> (Env, Measured) {
    let server = ScriptedServer::start(hostile_script(&FILES)).await.unwrap();
    let env = Env::new();
    make(env.root());
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "accept-edits", "look around"]);
    let measured = run_measured(command, &server, 2).await;
    assert_eq!(
        measured.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&measured.stderr)
    );
    (env, measured)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pointed_at_huge_files_keep_memory_bounded_and_say_what_they_did() {
    // The same calls on small files: the process's ordinary peak.
    let (_small_env, baseline) = hostile_run(|root| {
        std::fs::write(root.join(FILES.long_2g), "a\n").unwrap();
        std::fs::write(root.join(FILES.long_64g), "b\n").unwrap();
        std::fs::write(root.join("line.txt"), "needle\n").unwrap();
        std::fs::write(root.join(FILES.edit), "e\n").unwrap();
    })
    .await;
    // The inputs: a 2 GB and a 64 GB sparse file whose first line
    // never ends, a 1 GB file and a 200 MB single line for grep, and an edit
    // of a 2 MB file that would grow it to 10 GB.
    let (env, measured) = hostile_run(|root| {
        let start = vec![b'a'; 64 * 1024];
        sparse_file(&root.join(FILES.long_2g), &start, 2 * GIB);
        sparse_file(&root.join(FILES.long_64g), &start, 64 * GIB);
        sparse_file(&root.join("huge.log"), b"needle in a huge file\n", GIB);
        let mut line = b"needle at the start\n".to_vec();
        line.resize(200 * MIB as usize, b'x');
        std::fs::write(root.join("one-line.txt"), line).unwrap();
        std::fs::write(root.join(FILES.edit), vec![b'e'; 2 * MIB as usize]).unwrap();
    })
    .await;
    let added = measured.peak_kib.saturating_sub(baseline.peak_kib);
    eprintln!(
        "peak RSS: {} KiB on huge files, {} KiB on small files",
        measured.peak_kib, baseline.peak_kib
    );
    assert!(
        added < TOOL_MEMORY_BOUND_KIB,
        "peak RSS {} KiB, {added} KiB over the run on small files ({} KiB)",
        measured.peak_kib,
        baseline.peak_kib
    );
    let events = json_lines(&measured.stdout);
    let history = export(&env, &session_of(&events)).await;
    let ids = call_ids(&history);
    assert_eq!(ids.len(), 4, "{history:?}");
    let results = results(&history);
    let result = |i: usize| results[&ids[i]].clone();
    for i in 0..2 {
        let (text, is_error) = result(i);
        assert!(!is_error, "{text}");
        assert!(
            text.contains("[…line 1 cut at byte 16384 of more than 1073741824: continue it with offset=1 byte_offset=16384]"),
            "{}",
            &text[text.len().saturating_sub(600)..]
        );
        assert!(
            text.contains("read_file stopped reading after 1 GiB"),
            "{}",
            &text[text.len() - 300..]
        );
        assert!(text.len() < 20 * 1024);
    }
    let (text, is_error) = result(2);
    assert!(!is_error, "{text}");
    assert!(
        text.contains("one-line.txt:1:needle at the start"),
        "{text}"
    );
    assert!(
        text.contains(
            "(3 files larger than 256 MiB not searched (use bash for them): huge.log, \
             long-2g.txt, long-64g.txt)"
        ),
        "{text}"
    );
    assert!(
        text.contains("(1 file searched only up to a line longer than 4 MiB: one-line.txt)"),
        "{text}"
    );
    let (text, is_error) = result(3);
    assert!(is_error, "{text}");
    assert!(
        text.contains("would make the file 10485760000 bytes")
            && text.contains("Nothing was changed"),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(env.root().join(FILES.edit))
            .unwrap()
            .len(),
        2 * MIB,
        "the file is untouched"
    );
    // Nothing lost: every result was stored before the next request, and
    // the interrupted history is closed.
    assert_eq!(history.last().unwrap().role, Role::Assistant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_with_more_calls_than_the_budget_runs_only_the_budget_and_exits_3() {
    const CALLS: usize = 1_000;
    const BUDGET: usize = 500;
    let calls: Vec<(&str, serde_json::Value)> = (0..CALLS)
        .map(|i| ("bash", json!({"command": format!("echo {i} >> ran.txt")})))
        .collect();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls(calls))
            .then(text("never asked for")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let config = env.home.path().join("config/troupe");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!("[limits]\nmax_tool_calls = {BUDGET}\n"),
    )
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "bypass", "run them all"]);
    let measured = crate::support::run(command).await;
    assert_eq!(
        measured.status.code(),
        Some(3),
        "{}",
        crate::support::describe(&measured)
    );
    let ran = std::fs::read_to_string(env.root().join("ran.txt")).unwrap();
    let ran: Vec<&str> = ran.lines().collect();
    assert_eq!(ran.len(), BUDGET, "exactly the budget ran");
    assert_eq!(ran.last(), Some(&"499"), "the first calls, in order");
    let events = json_lines(&measured.stdout);
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["stop_reason"], "max_tool_calls");
    assert_eq!(
        server.request_count(),
        1,
        "the run stopped instead of asking again"
    );
    let history = export(&env, &session_of(&events)).await;
    let ids = call_ids(&history);
    assert_eq!(ids.len(), CALLS);
    let results = results(&history);
    assert_eq!(results.len(), CALLS, "every call is answered");
    for id in &ids[BUDGET..] {
        let (text, is_error) = &results[id];
        assert!(is_error);
        assert!(
            text.starts_with("Not run. (Stopped: the budget of 500 tool calls is used up"),
            "{text}"
        );
    }
    assert_eq!(history.last().unwrap().role, Role::Assistant);
}

#[tokio::test]
async fn removing_a_session_removes_its_spill_files() {
    // Output over 50 KB is spilled to the session's spill directory.
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([("bash", json!({"command": "seq 1 30000"}))]))
            .then(text("Counted.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "bypass", "count"]);
    let output = crate::support::run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::support::describe(&output)
    );
    let session = session_of(&json_lines(&output.stdout));
    let spill = env.data_dir().join("spill").join(&session);
    // Files only: the directory also holds the commands' temporary directory.
    let spilled: Vec<_> = std::fs::read_dir(&spill)
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .collect();
    assert_eq!(spilled.len(), 1, "one spill file");
    let mut command = env.command(None);
    command.args(["sessions", "rm", &session]);
    let output = crate::support::run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::support::describe(&output)
    );
    assert!(!spill.exists(), "the spill directory went with the session");
}

#[tokio::test]
async fn repeated_call_ids_are_repaired_before_anything_runs() {
    // A response whose three calls share one id, then one reusing it again.
    let server = ScriptedServer::start(
        Script::new()
            .then(
                Response::empty()
                    .and_tool_call_with_id("dup", "read_file", json!({"path": "a.txt"}))
                    .and_tool_call_with_id("dup", "read_file", json!({"path": "b.txt"}))
                    .and_tool_call_with_id("dup", "read_file", json!({"path": "c.txt"})),
            )
            .then(tool_call_with_id(
                "dup",
                "read_file",
                json!({"path": "a.txt"}),
            ))
            .then(text("Read them.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    for name in ["a", "b", "c"] {
        std::fs::write(
            env.root().join(format!("{name}.txt")),
            format!("file {name}\n"),
        )
        .unwrap();
    }
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "read them"]);
    let output = crate::support::run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::support::describe(&output)
    );
    // The server checks every request's protocol invariants (no id twice,
    // every call answered once): none was violated.
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let answered: Vec<(String, String)> = requests[1]
        .tool_results()
        .into_iter()
        .map(|r| (r.call_id, r.content))
        .collect();
    assert_eq!(
        answered,
        [
            ("dup".to_string(), "1\tfile a".to_string()),
            ("dup_2".to_string(), "1\tfile b".to_string()),
            ("dup_3".to_string(), "1\tfile c".to_string()),
        ]
    );
    // The next request carries the same ids, and the id reused in a later
    // response gets a fresh one too.
    let later: Vec<String> = requests[2]
        .tool_results()
        .into_iter()
        .map(|r| r.call_id)
        .collect();
    assert_eq!(later, ["dup", "dup_2", "dup_3", "dup_4"]);
    let events = json_lines(&output.stdout);
    let started: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_started")
        .map(|e| e["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["dup", "dup_2", "dup_3", "dup_4"]);
}

#[tokio::test]
async fn the_plain_renderer_strips_terminal_sequences_and_json_keeps_them() {
    const HOSTILE: &str = "\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[2J\x1b[HLooking\r$ ";
    let script = || {
        Script::new()
            .then(Response::empty().and_text(HOSTILE).and_tool_call(
                "bash",
                json!({"command": "printf '\\033]52;c;aGk=\\007out\\033[1A\\n'"}),
            ))
            .then(text("Done\x1b]0;title\x07."))
    };
    let env = Env::new();
    let server = ScriptedServer::start(script()).await.unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--mode", "bypass", "look"]);
    let output = crate::support::run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::support::describe(&output)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!stderr.contains('\x07'), "{stderr:?}");
    assert!(stderr.contains("Looking^M$"), "{stderr:?}");
    assert!(stderr.contains("✓ bash"), "{stderr:?}");
    assert!(stderr.contains("out"), "{stderr:?}");
    // --json stays byte-faithful: the events carry the text as sent.
    let server = ScriptedServer::start(script()).await.unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "bypass", "look"]);
    let output = crate::support::run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::support::describe(&output)
    );
    let streamed: String = json_lines(&output.stdout)
        .iter()
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert!(streamed.starts_with(HOSTILE), "{streamed:?}");
}
