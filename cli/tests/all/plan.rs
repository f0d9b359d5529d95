//! Plan mode through the real binary against the scripted model server:
//! `troupe run --mode plan` offers only read-only tools on every request, and
//! each request's environment block carries the plan-mode reminder of its
//! iteration (the full one on the first and every fourth after it, the short
//! one between), while the cached stable block stays byte-identical.

use crate::support::{Env, describe, run};
use serde_json::json;
use troupe_agent::prompt::{PLAN_REMINDER_FULL, PLAN_REMINDER_SHORT};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

#[tokio::test]
async fn plan_mode_requests_offer_only_read_only_tools_and_carry_the_reminder() {
    let mut script = Script::new();
    for i in 0..5 {
        script = script.then(tool_call("glob", json!({ "pattern": format!("*{i}") })));
    }
    let server = ScriptedServer::start(script.then(text("The plan: 1. …")))
        .await
        .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "--mode", "plan", "plan the refactor"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));

    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    // web_fetch changes nothing in the project; its host still needs a rule
    // or a person in plan mode.
    let read_only = [
        "read_file",
        "glob",
        "grep",
        "task_output",
        "task_list",
        "web_fetch",
        "update_plan",
    ];
    let first_stable = requests[0].body["system"][0]["text"].as_str().unwrap();
    for (i, request) in requests.iter().enumerate() {
        let system = request.body["system"].as_array().unwrap();
        assert_eq!(system.len(), 2, "{system:?}");
        assert_eq!(system[0]["text"].as_str().unwrap(), first_stable);
        assert!(!first_stable.contains("Plan mode"));
        let environment = system[1]["text"].as_str().unwrap();
        let expected = if i % 4 == 0 {
            PLAN_REMINDER_FULL
        } else {
            PLAN_REMINDER_SHORT
        };
        assert!(
            environment.ends_with(&format!("\n\n{expected}")),
            "request {}: {environment}",
            i + 1
        );
        let tools = request.tool_names();
        assert!(!tools.is_empty());
        // Planning is no side effect: the plan tool is offered here too.
        assert!(tools.contains(&"update_plan".to_owned()), "{tools:?}");
        for tool in &tools {
            assert!(
                read_only.contains(&tool.as_str()),
                "{tool} offered in plan mode"
            );
        }
    }
}

#[tokio::test]
async fn outside_plan_mode_there_is_no_reminder() {
    let server = ScriptedServer::start(Script::new().then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "--mode", "bypass", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let request = &server.requests()[0];
    assert!(!request.system_text().contains("# Plan mode"));
    assert!(request.tool_names().contains(&"bash".to_owned()));
}
