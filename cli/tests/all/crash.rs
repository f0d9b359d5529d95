//! `kill -9` at many points of a real `troupe run` (SPEC §9, §15): a scripted
//! multi-turn run with tools that leave visible effects is killed with SIGKILL
//! after a seeded-random number of `--json` lines, then continued with
//! `troupe run --session ID`. Nothing the model saw or the person was shown may
//! be lost, the resumed history must be valid, no finished call may run again,
//! and the repair must be written back once.
//!
//! Besides the random points, every phase of the run is killed in at least
//! once — before the first request, mid-stream, while a response is being made
//! durable, mid-call, mid-batch, between turns and at the end — and the test
//! asserts that each phase was reached. The first response carries a tool call
//! with a 512 KiB argument, so making it durable keeps the store's writer thread
//! busy for a while; kills right after its `usage` line land while the writer
//! holds that uncommitted message, and the test asserts (reading the store
//! before the continuation) that some of them did, and that nothing announced
//! as durable was lost.
//!
//! The seed comes from `TROUPE_CRASH_SEED` when set (to replay a failure), else
//! a fixed default; every failure names the seed and the kill point. The test
//! drives only the binary and reads the store after it exited; it changes no
//! product code or configuration.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use troupe_agent::resume::{INTERRUPTED_CLOSING, INTERRUPTED_RESULT};
use troupe_agent::validate_history;
use troupe_loader::open_session;
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{Message, Role};
use troupe_scripted::{Response, Script, ScriptedServer, Turn, text};
use troupe_store::{RunState, Store};

use crate::support::{
    Env, describe, export, fd_guard, json_lines, run, run_then_kill, session_of,
    wait_until_unlocked, wire_messages, wire_of,
};

/// Random kill points drawn per test run (the boundaries 1 and N-1 come on top).
const RANDOM_KILL_POINTS: usize = 50;
/// Seed used when `TROUPE_CRASH_SEED` is not set.
const DEFAULT_SEED: u64 = 0x7A0C_E5EE_D15C_0001;
/// Delay before each streamed SSE event, so a run spreads over a few hundred
/// milliseconds and kills land inside streams as well as between them.
const CHUNK_DELAY: Duration = Duration::from_millis(3);

/// How long the database may stay locked after the killed process is reaped
/// (a child it was starting holds the descriptor until it executes).
const UNLOCK_LIMIT: Duration = Duration::from_secs(2);

/// The task given to every run.
const PROMPT: &str = "Write the notes, record four steps and check the summary.";
/// What the model says at the end of the uninterrupted run.
const FINAL_ANSWER: &str = "All done: notes written, four steps recorded, summary checked.";
/// What the model says when the killed run is continued.
const RESUMED_ANSWER: &str = "Picked up where the run stopped; everything is in place.";
/// The prompt of the continuation.
const CONTINUE: &str = "continue";
/// Size of the file the first call writes: its response takes the writer a
/// while to make durable.
const DUMP_BYTES: usize = 512 * 1024;
/// Kills right after the first response's `usage` line (the writer holds it).
const WRITER_KILLS: usize = 4;
/// Tool calls of each model response of [`script`], in order.
const CALLS_PER_TURN: [usize; 8] = [1, 1, 1, 3, 2, 2, 1, 0];

/// The file every `bash` step appends its marker to.
const EFFECTS: &str = "effects.log";
/// A file present in the project before the run.
const DATA: &str = "data.txt";

/// A `bash` step: appends its marker to [`EFFECTS`] first (so a process
/// orphaned by the kill adds nothing later), then takes a moment.
fn step(marker: &str) -> Value {
    json!({
        "command": format!("echo {marker} >> {EFFECTS}; sleep 0.05; echo recorded {marker}")
    })
}

/// The scripted run: six turns with tools (writes, single and sequential bash
/// steps, a concurrent batch of reads) with text before every call, then a
/// final answer. Every server starts its id sequence from the same seed, so
/// call ids are the same in every run of this script.
fn script() -> Script {
    let dump = "0123456789abcdef".repeat(DUMP_BYTES / 16);
    let turns: Vec<Response> = vec![
        text("Saving the data dump first.")
            .and_tool_call("write_file", json!({"path": "dump.txt", "content": dump}))
            .with_chunk_chars(DUMP_BYTES),
        text("I will write the notes file first.").and_tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}),
        ),
        text("Recording the first step.").and_tool_call("bash", step("step-1")),
        text("Reading the notes and the data together, and searching.")
            .and_tool_call("read_file", json!({"path": "notes.txt"}))
            .and_tool_call("read_file", json!({"path": DATA}))
            .and_tool_call("grep", json!({"pattern": "beta"})),
        text("Two more steps, one after the other.")
            .and_tool_call("bash", step("step-2"))
            .and_tool_call("bash", step("step-3")),
        text("Writing the summary and the last step.")
            .and_tool_call(
                "write_file",
                json!({"path": "summary.txt", "content": "four steps\n"}),
            )
            .and_tool_call("bash", step("step-4")),
        text("Checking the summary.").and_tool_call("read_file", json!({"path": "summary.txt"})),
        text(FINAL_ANSWER),
    ];
    turns
        .into_iter()
        .map(|response| Turn::new(response).with_chunk_delay(CHUNK_DELAY))
        .collect()
}

/// Puts the files the script reads into a fresh project. The dump is large
/// enough for a summary to be prepared ahead, which would take a scripted
/// answer of its own: this test is about kills, not compaction.
fn prepare_project(env: &Env) {
    std::fs::write(env.root().join(DATA), "one\ntwo\nthree\n").unwrap();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[compaction]\nwork_ahead = false\n",
    )
    .unwrap();
}

/// `troupe run --json --mode bypass` with extra arguments.
fn run_command(env: &Env, server: &ScriptedServer, args: &[&str]) -> std::process::Command {
    let mut command = env.command(Some(server));
    command
        .args(["run", "--json", "--mode", "bypass"])
        .args(args);
    command
}

/// The markers in the effects file, in order.
fn effects(root: &Path) -> Vec<String> {
    match std::fs::read_to_string(root.join(EFFECTS)) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => panic!("cannot read {EFFECTS}: {err}"),
    }
}

/// The marker a `bash` step's input carries, if it is one.
fn marker_of(input: &Value) -> Option<String> {
    let command = input.get("command")?.as_str()?;
    let rest = command.strip_prefix("echo ")?;
    Some(rest.split_whitespace().next()?.to_string())
}

/// A tool result as the model receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WireResult {
    content: String,
    is_error: bool,
}

/// The text of a wire content value (a string or text parts).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Every `tool_result` block of wire messages, by call id.
fn wire_results(messages: &[Value]) -> HashMap<String, WireResult> {
    blocks_of(messages, "tool_result")
        .map(|block| {
            (
                block["tool_use_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                WireResult {
                    content: content_text(&block["content"]),
                    is_error: block["is_error"].as_bool() == Some(true),
                },
            )
        })
        .collect()
}

/// Every `tool_use` block of wire messages: call id → (name, input).
fn wire_calls(messages: &[Value]) -> Vec<(String, String, Value)> {
    blocks_of(messages, "tool_use")
        .map(|block| {
            (
                block["id"].as_str().unwrap_or_default().to_string(),
                block["name"].as_str().unwrap_or_default().to_string(),
                block["input"].clone(),
            )
        })
        .collect()
}

fn blocks_of<'a>(messages: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    messages
        .iter()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .filter(move |block| block["type"] == kind)
}

/// Whether a wire block is the result given to a call interrupted by the kill.
fn is_interrupted_result(block: &Value) -> bool {
    block["type"] == "tool_result"
        && block["is_error"].as_bool() == Some(true)
        && content_text(&block["content"]) == INTERRUPTED_RESULT
}

/// What the uninterrupted run produced: the yardstick of every killed run.
struct Reference {
    /// Its `--json` events.
    events: Vec<Value>,
    /// Lines of `--json` output.
    lines: usize,
    /// The whole stored history, in wire form.
    history: Vec<Value>,
    /// Every call's result.
    results: HashMap<String, WireResult>,
    /// Every call's tool name.
    names: HashMap<String, String>,
}

/// Runs the script once to completion.
async fn reference_run() -> Reference {
    let env = Env::new();
    prepare_project(&env);
    let server = ScriptedServer::start(script()).await.unwrap();
    let output = run(run_command(&env, &server, &[PROMPT])).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["final_text"], FINAL_ANSWER);
    assert_eq!(
        effects(env.root()),
        ["step-1", "step-2", "step-3", "step-4"]
    );
    let stored = export(&env, &session_of(&events)).await;
    validate_history(&stored).unwrap();
    let history = wire_of(&stored);
    let results = wire_results(&history);
    assert_eq!(results.len(), 11, "every call of the script has a result");
    assert!(
        results.values().all(|result| !result.is_error),
        "{results:?}"
    );
    assert_eq!(server.requests().len(), CALLS_PER_TURN.len());
    let names = wire_calls(&history)
        .into_iter()
        .map(|(id, name, _)| (id, name))
        .collect();
    Reference {
        events: events.clone(),
        lines: events.len(),
        history,
        results,
        names,
    }
}

/// What a killed run showed before the kill.
struct Killed {
    /// Parsed output lines (at most the kill point).
    events: Vec<Value>,
}

impl Killed {
    /// `(call id, is_error)` of every `tool_finished` shown.
    fn finished_calls(&self) -> Vec<(String, bool)> {
        self.events
            .iter()
            .filter(|event| event["type"] == "tool_finished")
            .map(|event| {
                (
                    event["call_id"].as_str().unwrap_or_default().to_string(),
                    event["is_error"].as_bool() == Some(true),
                )
            })
            .collect()
    }
}

/// Starts the scripted run and SIGKILLs it right after its `k`-th output line.
async fn run_and_kill(env: &Env, server: &ScriptedServer, k: usize) -> Killed {
    let events = run_then_kill(
        run_command(env, server, &[PROMPT]),
        &env.home.path().join("killed.stderr"),
        |events| events.len() >= k,
    )
    .await;
    Killed { events }
}

/// Where in the run a kill landed, judged by what it had shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Phase {
    /// No model output yet.
    BeforeFirstRequest,
    /// A model response is streaming.
    MidStream,
    /// A response with calls ended (`usage`) and none of its calls started:
    /// the response is on its way to durable.
    ResponseSaving,
    /// The single call of a response is running or finishing.
    MidCall,
    /// Some calls of a multi-call response finished, not all.
    MidBatch,
    /// Every call of a response finished, or the next turn began without
    /// output yet.
    BetweenTurns,
    /// The final answer ended; `run_finished` was not shown.
    AtEnd,
}

/// Every phase a kill must reach at least once.
const PHASES: [Phase; 7] = [
    Phase::BeforeFirstRequest,
    Phase::MidStream,
    Phase::ResponseSaving,
    Phase::MidCall,
    Phase::MidBatch,
    Phase::BetweenTurns,
    Phase::AtEnd,
];

/// The phase of a run that showed `events` (in order) before it was killed.
fn phase_of(events: &[Value]) -> Phase {
    let kind = |event: &Value| event["type"].as_str().unwrap_or_default().to_string();
    let turn = events.iter().filter(|e| kind(e) == "iteration").count();
    let since: Vec<String> = events
        .iter()
        .rev()
        .take_while(|e| kind(e) != "iteration")
        .map(kind)
        .collect();
    let streamed = since.iter().any(|k| k == "text_delta" || k == "usage");
    if turn == 0 || (turn == 1 && !streamed) {
        return Phase::BeforeFirstRequest;
    }
    if !streamed {
        return Phase::BetweenTurns;
    }
    if !since.iter().any(|k| k == "usage") {
        return Phase::MidStream;
    }
    let calls = CALLS_PER_TURN.get(turn - 1).copied().unwrap_or(0);
    if calls == 0 {
        return Phase::AtEnd;
    }
    let started = since.iter().filter(|k| *k == "tool_started").count();
    let finished = since.iter().filter(|k| *k == "tool_finished").count();
    match (started, finished) {
        (0, _) => Phase::ResponseSaving,
        (_, f) if f >= calls => Phase::BetweenTurns,
        _ if calls >= 2 => Phase::MidBatch,
        _ => Phase::MidCall,
    }
}

/// For each phase, the first kill point (lines shown) of the reference run
/// that lands in it.
fn phase_points(reference: &[Value]) -> Vec<(Phase, usize)> {
    PHASES
        .iter()
        .filter_map(|phase| {
            (1..reference.len())
                .find(|&k| phase_of(&reference[..k]) == *phase)
                .map(|k| (*phase, k))
        })
        .collect()
}

/// Counts of what the kills ran into, printed at the end.
#[derive(Default, Debug)]
struct Coverage {
    /// Kills by the phase they landed in.
    phases: std::collections::BTreeMap<Phase, usize>,
    /// Kills after a response's `usage` line that found the response not yet
    /// in the store: the writer held it, uncommitted.
    writer_held: usize,
    before_first_request: usize,
    interrupted_calls: usize,
    real_results_not_shown: usize,
    closed_histories: usize,
    already_finished: usize,
}

/// One kill point: kill, resume, check. `Err` describes the first broken
/// promise.
async fn kill_and_resume(
    reference: &Reference,
    k: usize,
    coverage: &mut Coverage,
) -> Result<(), String> {
    let env = Env::new();
    prepare_project(&env);
    let first = ScriptedServer::start(script()).await.unwrap();
    let killed = run_and_kill(&env, &first, k).await;
    wait_until_unlocked(&env.data_dir(), UNLOCK_LIMIT).await?;
    let Some(first_event) = killed.events.first() else {
        return Err("no output line before the kill".into());
    };
    if first_event["type"] != "run_started" {
        return Err(format!("the first line is not run_started: {first_event}"));
    }
    let id = session_of(&killed.events);
    let finished = killed.finished_calls();
    let phase = phase_of(&killed.events);
    *coverage.phases.entry(phase).or_default() += 1;
    if phase == Phase::ResponseSaving {
        // The response of turn `t` is message 2t-1 (after the prompt and the
        // earlier turns' pairs): absent means the writer had not committed it.
        let turn = killed
            .events
            .iter()
            .filter(|e| e["type"] == "iteration")
            .count();
        let guard = fd_guard();
        let store = Store::open(&env.data_dir()).map_err(|err| err.to_string())?;
        let stored = store
            .load_history(&id)
            .map_err(|err| err.to_string())?
            .messages
            .len();
        drop(store);
        drop(guard);
        if stored < 2 * turn {
            coverage.writer_held += 1;
        }
    }

    // Continue the session.
    let second = ScriptedServer::start(Script::new().then(text(RESUMED_ANSWER)))
        .await
        .unwrap();
    let output = run(run_command(&env, &second, &["--session", &id, CONTINUE])).await;
    if output.status.code() != Some(0) {
        return Err(format!("the resumed run failed: {}", describe(&output)));
    }
    let events = json_lines(&output.stdout);
    let last = events.last().cloned().unwrap_or(Value::Null);
    if last["type"] != "run_finished" || last["status"] != "finished" {
        return Err(format!("the resumed run did not finish: {last}"));
    }
    if session_of(&events) != id {
        return Err("the resumed run used another session".into());
    }
    let violations = second.take_violations();
    if !violations.is_empty() {
        return Err(format!("the resumed request is invalid: {violations:?}"));
    }
    let seen_by_second = second.requests();
    if seen_by_second.len() != 1 {
        return Err(format!(
            "the continuation made {} requests, expected 1",
            seen_by_second.len()
        ));
    }
    let resumed = wire_messages(&seen_by_second[0]);
    let resumed_results = wire_results(&resumed);

    // Nothing the model saw is lost: the last request before the kill is an
    // in-order prefix of the first request after it. (A request recorded
    // after the kill was sent before it, so what it carries was durable.)
    let seen_by_first = first.requests();
    match seen_by_first.last() {
        Some(before) => {
            let before = wire_messages(before);
            if resumed.len() < before.len() || resumed[..before.len()] != before[..] {
                return Err(format!(
                    "the resumed request does not start with the {} messages the model saw \
                     before the kill\nbefore: {before:#?}\nafter: {resumed:#?}",
                    before.len()
                ));
            }
        }
        None => coverage.before_first_request += 1,
    }

    // The prompt was durable before `run_started`.
    if resumed.first().map(|m| content_text(&m["content"])) != Some(PROMPT.to_string()) {
        return Err(format!("the prompt is not the first message: {resumed:#?}"));
    }

    // Nothing shown is lost: every finished call has its real result.
    for (call_id, is_error) in &finished {
        let Some(expected) = reference.results.get(call_id) else {
            return Err(format!("call {call_id} is not a call of the script"));
        };
        match resumed_results.get(call_id) {
            Some(result) if result == expected && result.is_error == *is_error => {}
            other => {
                return Err(format!(
                    "call {call_id} was shown finished but the model now sees {other:?} \
                     instead of {expected:?}"
                ));
            }
        }
    }

    // The stored history is the reference history cut at the kill, with the
    // kill's repairs only: unfinished calls answered "interrupted", a closing
    // message, then the continuation prompt.
    let Some((prompt, body)) = resumed.split_last() else {
        return Err("the resumed request has no messages".into());
    };
    if prompt["role"] != "user" || content_text(&prompt["content"]) != CONTINUE {
        return Err(format!(
            "the last message is not the continuation: {prompt}"
        ));
    }
    let mut body = body.to_vec();
    let closing =
        json!({"role": "assistant", "content": [{"type": "text", "text": INTERRUPTED_CLOSING}]});
    if body.last() == Some(&closing) {
        body.pop();
        coverage.closed_histories += 1;
    }
    if body.len() > reference.history.len() {
        return Err(format!(
            "the resumed history has {} messages, more than the whole run's {}",
            body.len(),
            reference.history.len()
        ));
    }
    if body.len() == reference.history.len() {
        coverage.already_finished += 1;
    }
    let finished_ids: HashSet<&str> = finished.iter().map(|(id, _)| id.as_str()).collect();
    for (index, (got, want)) in body.iter().zip(&reference.history).enumerate() {
        if got == want {
            continue;
        }
        // Only results may differ, and only by being "interrupted".
        let (Some(got_blocks), Some(want_blocks)) =
            (got["content"].as_array(), want["content"].as_array())
        else {
            return Err(format!("message {index} differs: {got} vs {want}"));
        };
        let same_shape = got["role"] == want["role"] && got_blocks.len() == want_blocks.len();
        if !same_shape {
            return Err(format!("message {index} differs: {got} vs {want}"));
        }
        for (got_block, want_block) in got_blocks.iter().zip(want_blocks) {
            if got_block == want_block {
                if want_block["type"] == "tool_result" {
                    coverage.real_results_not_shown += usize::from(
                        !finished_ids.contains(want_block["tool_use_id"].as_str().unwrap_or("")),
                    );
                }
                continue;
            }
            let call_id = want_block["tool_use_id"].as_str().unwrap_or_default();
            if !(is_interrupted_result(got_block) && got_block["tool_use_id"] == call_id) {
                return Err(format!(
                    "message {index}: {got_block} should be {want_block} or the interrupted result"
                ));
            }
            if finished_ids.contains(call_id) {
                return Err(format!(
                    "call {call_id} was shown finished but is answered as interrupted"
                ));
            }
            coverage.interrupted_calls += 1;
        }
    }

    // Effects: each step at most once, only steps the model asked for, every
    // step with a real result did happen.
    let markers = effects(env.root());
    let unique: HashSet<&String> = markers.iter().collect();
    if unique.len() != markers.len() {
        return Err(format!("a step ran twice: {markers:?}"));
    }
    let mut asked = HashSet::new();
    for (call_id, name, input) in wire_calls(&body) {
        if name != "bash" {
            continue;
        }
        let Some(marker) = marker_of(&input) else {
            return Err(format!("unexpected bash call {input}"));
        };
        let real = resumed_results
            .get(&call_id)
            .is_some_and(|result| result.content != INTERRUPTED_RESULT);
        if real && !markers.contains(&marker) {
            return Err(format!(
                "{marker} has a real result but left no effect: {markers:?}"
            ));
        }
        asked.insert(marker);
    }
    if let Some(stray) = markers.iter().find(|marker| !asked.contains(*marker)) {
        return Err(format!(
            "{stray} ran although its call is not in the history: {markers:?}"
        ));
    }
    let succeeded_steps = finished
        .iter()
        .filter(|(call_id, is_error)| {
            !is_error
                && reference
                    .names
                    .get(call_id)
                    .is_some_and(|name| name == "bash")
        })
        .count();
    if markers.len() < succeeded_steps {
        return Err(format!(
            "{succeeded_steps} steps were shown finished but only {markers:?} happened"
        ));
    }

    // The stored session is what the model saw, plus its answer; it is valid.
    let stored = export(&env, &id).await;
    validate_history(&stored).map_err(|err| format!("exported history invalid: {err}"))?;
    let Some((answer, earlier)) = stored.split_last() else {
        return Err("the export is empty".into());
    };
    if *answer != Message::assistant_text(RESUMED_ANSWER) {
        return Err(format!(
            "the stored history does not end with the answer: {answer:?}"
        ));
    }
    if wire_of(earlier) != resumed {
        return Err(format!(
            "the stored history differs from what the model saw\nstored: {:#?}\nseen: {resumed:#?}",
            wire_of(earlier)
        ));
    }

    // The repair was written back once: opening again needs none, and both
    // runs are recorded as ended.
    let guard = fd_guard();
    let store = Store::open(&env.data_dir()).map_err(|err| err.to_string())?;
    let opened = open_session(&store, &id)
        .map_err(|err| err.to_string())?
        .ok_or("the session is gone")?;
    if !opened.report.is_clean() || !opened.skipped.is_empty() {
        return Err(format!(
            "opening the session again repaired it again: {:?} {:?}",
            opened.report, opened.skipped
        ));
    }
    if opened.history != stored {
        return Err("opening the session gives another history than the export".into());
    }
    let runs = store.list_runs(Some(&id)).map_err(|err| err.to_string())?;
    let states: Vec<RunState> = runs.iter().map(|run| run.status).collect();
    let killed_ok = [
        RunState::Ended(RunStatus::Interrupted),
        RunState::Ended(RunStatus::Finished),
    ];
    let resumed_ok = RunState::Ended(RunStatus::Finished);
    let valid = states.len() == 2
        && states.iter().filter(|s| **s == resumed_ok).count() >= 1
        && states.iter().all(|s| killed_ok.contains(s));
    if !valid {
        return Err(format!("unexpected run states: {states:?}"));
    }
    let message_count = store
        .session(&id)
        .map_err(|err| err.to_string())?
        .map(|meta| meta.message_count);
    if message_count != Some(stored.len() as u64) {
        return Err(format!(
            "metadata counts {message_count:?} messages, the export has {}",
            stored.len()
        ));
    }
    if stored
        .iter()
        .any(|m| m.role == Role::Tool && m.content.is_empty())
    {
        return Err("an empty tool message was stored".into());
    }
    drop(store);
    drop(guard);
    if !first.take_violations().is_empty() {
        return Err("the killed run sent an invalid request".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_nothing_and_resumes() {
    let seed = std::env::var("TROUPE_CRASH_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("crash test seed: {seed} (set TROUPE_CRASH_SEED to replay)");
    let reference = reference_run().await;
    let n = reference.lines;
    assert!(n > 40, "the run is long enough to kill inside: {n} lines");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut points = vec![1, n - 1];
    let phase_points = phase_points(&reference.events);
    assert_eq!(
        phase_points.len(),
        PHASES.len(),
        "the reference run passes every phase: {phase_points:?}"
    );
    points.extend(phase_points.iter().map(|(_, k)| *k));
    // The first response's `usage` line: its 512 KiB call is being made durable.
    let first_saving = phase_points
        .iter()
        .find(|(phase, _)| *phase == Phase::ResponseSaving)
        .map_or(1, |(_, k)| *k);
    points.extend(std::iter::repeat_n(first_saving, WRITER_KILLS));
    points.extend((0..RANDOM_KILL_POINTS).map(|_| rng.random_range(1..n)));
    let mut coverage = Coverage::default();
    let mut failures = Vec::new();
    for &k in &points {
        if let Err(err) = kill_and_resume(&reference, k, &mut coverage).await {
            failures.push(format!("seed {seed}, kill after line {k} of {n}: {err}"));
        }
    }
    eprintln!("kill points {points:?}; {coverage:?}");
    assert!(
        failures.is_empty(),
        "{} of {} kill points failed:\n{}",
        failures.len(),
        points.len(),
        failures.join("\n\n")
    );
    // Coverage: every phase was killed in at least once, and some kills found
    // the store's writer holding the first response uncommitted.
    for phase in PHASES {
        assert!(
            coverage.phases.get(&phase).copied().unwrap_or(0) >= 1,
            "no kill landed in phase {phase:?}: {coverage:?}"
        );
    }
    assert!(
        coverage.writer_held >= 1,
        "no kill landed while the writer held a response uncommitted: {coverage:?}"
    );
}
