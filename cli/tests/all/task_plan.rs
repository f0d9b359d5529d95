//! The `update_plan` tool through the real binary against the scripted
//! model server: a call announces the whole plan as a `plan_updated` event
//! under the agent's path; a call with two steps in progress is refused as
//! an error result and changes nothing; the plan outlives a compaction (the
//! summary carries it) and
//! a resume (the first request after them carries it); the plain renderer
//! shows it.

use crate::support::{
    Env, describe, is_summary, json_lines, not_summary, run, session_of, then_six_reads,
    write_read_files,
};
use serde_json::{Value, json};
use troupe_scripted::{Matcher, Script, ScriptedServer, Turn, text, tool_call};

fn plan(steps: &[(&str, &str)]) -> Value {
    let steps: Vec<Value> = steps
        .iter()
        .map(|(step, status)| json!({"step": step, "status": status}))
        .collect();
    json!({ "plan": steps })
}

fn plan_events(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| event["type"] == "plan_updated")
        .collect()
}

async fn run_json(env: &Env, server: &ScriptedServer, args: &[&str]) -> Vec<Value> {
    let mut command = env.command(Some(server));
    command.arg("run").arg("--json").args(args);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    json_lines(&output.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_plan_announces_the_whole_plan_and_a_refused_call_changes_nothing() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "update_plan",
                plan(&[
                    ("Read the code", "completed"),
                    ("Fix the bug", "in_progress"),
                ]),
            ))
            .then(tool_call(
                "update_plan",
                plan(&[
                    ("Read the code", "in_progress"),
                    ("Fix the bug", "in_progress"),
                ]),
            ))
            .then(text("Planned."))
            .then(tool_call(
                "update_plan",
                plan(&[("Read the code", "completed"), ("Fix the bug", "completed")]),
            ))
            .then(text("Done.")),
    )
    .await
    .unwrap();
    let env = Env::new();
    // Default mode, no terminal: a call that needed approval would be refused.
    let events = run_json(&env, &server, &["fix the bug"]).await;
    let plans = plan_events(&events);
    assert_eq!(plans.len(), 1, "{plans:?}");
    assert_eq!(plans[0]["agent_path"], "main");
    assert_eq!(
        plans[0]["plan"],
        json!([
            {"step": "Read the code", "status": "completed"},
            {"step": "Fix the bug", "status": "in_progress"}
        ])
    );
    let requests = server.requests();
    assert!(requests[0].tool_names().contains(&"update_plan".to_owned()));
    let first = requests[1].tool_results().pop().unwrap();
    assert!(!first.is_error, "{}", first.content);
    assert_eq!(first.content, "Plan updated: 1 of 2 steps completed.");
    let refused = requests[2].tool_results().pop().unwrap();
    assert!(refused.is_error, "{}", refused.content);
    assert!(
        refused
            .content
            .contains("at most one step may be in_progress"),
        "{}",
        refused.content
    );
    let finished: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "tool_finished")
        .collect();
    assert_eq!(finished[1]["is_error"], true);

    // The plain renderer, continuing the session: the plan the refused call
    // left alone is the one restored; the change shows as whole (this
    // process shows it first) with the heading counting both steps done.
    let session = session_of(&events);
    let mut command = env.command(Some(&server));
    command.args(["run", "--session", &session, "finish"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("plan (2/2 done)"), "{stderr}");
    assert!(stderr.contains("  ✔ Fix the bug"), "{stderr}");
}

const REMINDER: &str =
    "# Your current plan (update_plan)\nreads first\n✔ Plan\n◼ Read every file\n◻ Report";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_plan_survives_compaction_and_resume_in_the_first_request_after_them() {
    let script = Script::new().then(
        Turn::new(tool_call(
            "update_plan",
            json!({
                "explanation": "reads first",
                "plan": [
                    {"step": "Plan", "status": "completed"},
                    {"step": "Read every file", "status": "in_progress"},
                    {"step": "Report", "status": "pending"}
                ]
            }),
        ))
        .when(not_summary()),
    );
    let script = then_six_reads(script)
        .when(
            Matcher::last_user_contains("<summary> tags"),
            text("<summary>1. PLAN SUMMARY</summary>"),
        )
        .then(Turn::new(text("resumed")).when(not_summary()));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    write_read_files(&env);
    let events = run_json(&env, &server, &["read them"]).await;
    let session = session_of(&events);
    assert_eq!(plan_events(&events).len(), 1);
    // While the call is in the history, the request shows it, not a reminder.
    let before = server.requests();
    assert!(!before.last().unwrap().system_text().contains(REMINDER));

    let mut command = env.command(Some(&server));
    command.args(["sessions", "compact", &session]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(server.requests().iter().any(is_summary));

    let mut command = env.command(Some(&server));
    command.args(["resume", "--json", &session, "and now?"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    assert_eq!(events.last().unwrap()["final_text"], "resumed");
    let first_after = server.requests().pop().unwrap();
    assert!(
        first_after
            .first_user_text()
            .unwrap()
            .contains("PLAN SUMMARY")
    );
    // The call itself was summarised: the name is left in the tool
    // definitions only.
    assert_eq!(
        first_after
            .body
            .to_string()
            .matches("\"update_plan\"")
            .count(),
        1
    );
    // The plan travels with the summary, not in the system prompt: the
    // prefix stays as it was, and a later update_plan call changes nothing
    // before it.
    let summary_message: String = first_after.body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert!(summary_message.contains(REMINDER), "{summary_message}");
    let system = first_after.system_text();
    assert!(!system.contains(REMINDER), "{system}");
}
