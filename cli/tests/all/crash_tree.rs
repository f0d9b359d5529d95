//! `kill -9` during a run with sub-agents (SPEC §7, §9): a real `troupe run`
//! whose main agent forks two workers, each running a `bash` step with a
//! visible effect, is killed with SIGKILL after every line of its `--json`
//! output in turn, then continued with `troupe run --session ID`. The parent's
//! history and every child session's history must be valid afterwards, no
//! step may run twice, and the parent's answered calls keep their results.
//!
//! The test drives only the binary and reads the store after it exited.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_agent::validate_history;
use troupe_protocol::model::{Message, Role};
use troupe_scripted::{Matcher, Response, Script, ScriptedServer, Turn, text};
use troupe_store::Store;

use crate::support::{
    Env, describe, fd_guard, json_lines, run, run_then_kill, session_of, wait_until_unlocked,
};

/// The main agent's task.
const PROMPT: &str = "TREE-PROMPT: check both parts in parallel.";
/// The workers' tasks (they route each fork's requests).
const TASKS: [&str; 2] = ["PART-ONE", "PART-TWO"];
/// The file every worker's step appends its marker to.
const EFFECTS: &str = "effects.log";
/// The main agent's answer when the run is not killed.
const FINAL_ANSWER: &str = "Both parts are checked.";
/// The answer to the continuation.
const RESUMED_ANSWER: &str = "Continued after the interruption.";
/// Delay before each streamed SSE event, so kills land inside streams too.
const CHUNK_DELAY: Duration = Duration::from_millis(3);
/// How long the database may stay locked after the killed process is reaped.
const UNLOCK_LIMIT: Duration = Duration::from_secs(2);

fn step(marker: &str) -> Value {
    json!({ "command": format!("echo {marker} >> {EFFECTS}; sleep 0.05; echo recorded {marker}") })
}

fn script() -> Script {
    let main = |response: Response| {
        Turn::new(response)
            .when(Matcher::first_user_contains(PROMPT))
            .with_chunk_delay(CHUNK_DELAY)
    };
    let fork = |task: &str, response: Response| {
        Turn::new(response)
            .when(Matcher::any_user_contains(task))
            .with_chunk_delay(CHUNK_DELAY)
    };
    let mut split = text("Forking two workers.");
    for task in TASKS {
        split = split.and_tool_call(
            "agent",
            json!({"description": "check a part", "prompt": task, "fork": true}),
        );
    }
    let mut script = Script::new().then(main(split));
    for task in TASKS {
        script = script
            .then(fork(
                task,
                text("Recording my step.").and_tool_call("bash", step(task)),
            ))
            .then(fork(task, text(format!("Scope: {task}. Recorded."))));
    }
    script.then(main(text(FINAL_ANSWER)))
}

fn effects(env: &Env) -> Vec<String> {
    std::fs::read_to_string(env.root().join(EFFECTS))
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Every session of the store: `(id, parent, messages)`.
fn stored_sessions(env: &Env) -> Vec<(String, Option<String>, Vec<Message>)> {
    let _guard = fd_guard();
    let store = Store::open(&env.data_dir()).expect("the store opens after the runs");
    store
        .list_sessions()
        .unwrap()
        .into_iter()
        .map(|meta| {
            let history = store.load_history(&meta.id).unwrap().messages;
            (meta.id, meta.parent, history)
        })
        .collect()
}

/// Runs the script uninterrupted: how many output lines a full run writes.
async fn reference_lines() -> usize {
    let env = Env::new();
    let server = ScriptedServer::start(script()).await.unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "--mode", "bypass", PROMPT]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(effects(&env).len(), 2);
    json_lines(&output.stdout).len()
}

/// Kills the run after `k` lines, continues it, checks every promise.
async fn kill_and_continue(k: usize) -> Result<(), String> {
    let env = Env::new();
    let first = ScriptedServer::start(script()).await.unwrap();
    let mut command = env.command(Some(&first));
    command.args(["run", "--json", "--mode", "bypass", PROMPT]);
    let killed = run_then_kill(command, &env.home.path().join("killed.stderr"), |events| {
        events.len() >= k
    })
    .await;
    wait_until_unlocked(&env.data_dir(), UNLOCK_LIMIT).await?;
    let session = session_of(&killed);

    let second = ScriptedServer::start(
        Script::new()
            .then(Turn::new(text(RESUMED_ANSWER)).when(Matcher::last_user_contains("continue"))),
    )
    .await
    .unwrap();
    let mut command = env.command(Some(&second));
    command.args([
        "run",
        "--json",
        "--mode",
        "bypass",
        "--session",
        &session,
        "continue",
    ]);
    let output = run(command).await;
    if output.status.code() != Some(0) {
        return Err(format!("the continuation failed: {}", describe(&output)));
    }
    // Nothing ran again: the workers are not resumed, so each step happened
    // at most once (a step the kill orphaned may still have finished).
    let ran = effects(&env);
    for task in TASKS {
        if ran.iter().filter(|line| *line == task).count() > 1 {
            return Err(format!("{task} ran twice: {ran:?}"));
        }
    }
    // The parent and every child have valid histories; children are linked.
    let sessions = stored_sessions(&env);
    let parent = sessions
        .iter()
        .find(|(id, _, _)| *id == session)
        .ok_or("the parent session is gone")?;
    validate_history(&parent.2).map_err(|err| format!("parent: {err}"))?;
    if parent.2.last().map(|m| m.role) != Some(Role::Assistant) {
        return Err("the parent's history does not end with the answer".into());
    }
    if !parent.2.last().unwrap().text().contains(RESUMED_ANSWER) {
        return Err("the continuation's answer is not stored".into());
    }
    for (id, parent_id, history) in &sessions {
        if id == &session {
            continue;
        }
        if parent_id.as_deref() != Some(session.as_str()) {
            return Err(format!("session {id} is not a child of the run's session"));
        }
        validate_history(history).map_err(|err| format!("child {id}: {err}"))?;
        if history.last().map(|m| m.role) != Some(Role::Assistant) {
            return Err(format!("child {id} is not closed: {history:?}"));
        }
    }
    // A step that happened was asked for by a child whose history has the call.
    for marker in &ran {
        let asked = sessions.iter().any(|(id, _, history)| {
            id != &session
                && history
                    .iter()
                    .flat_map(|m| m.tool_calls())
                    .any(|call| call.name == "bash" && call.input.contains(marker.as_str()))
        });
        if !asked {
            return Err(format!("{marker} ran but no child history holds its call"));
        }
    }
    // What the killed run showed as finished kept its result.
    for event in &killed {
        if event["type"] == "tool_finished" && event["agent_path"] == "main" {
            let call_id = event["call_id"].as_str().unwrap_or_default();
            let kept = parent
                .2
                .iter()
                .flat_map(|m| m.tool_results_iter())
                .any(|result| {
                    result.call_id == call_id
                        && result.joined_text().contains(
                            event["output_preview"]
                                .as_str()
                                .unwrap_or_default()
                                .trim_end_matches('…'),
                        )
                });
            if !kept {
                return Err(format!("the shown result of {call_id} was lost"));
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_tree_run_leaves_valid_histories_and_runs_nothing_twice() {
    let lines = reference_lines().await;
    let mut failures = Vec::new();
    for k in 1..lines {
        if let Err(err) = kill_and_continue(k).await {
            failures.push(format!("killed after line {k} of {lines}: {err}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
