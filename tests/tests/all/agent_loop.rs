//! The agent loop end to end: the real actor tree, the real providers over
//! loopback HTTP, the scripted model server checking every request.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_actors::Approver;
use troupe_agent::validate_history;
use troupe_config::Limits;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::{Message, Role};
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Fault, Response, Script, Usage, text, tool_call, tool_calls};
use troupe_tests::tools::{ActivityLog, PanicTool, RendezvousTool, StepTool};
use troupe_tests::{Harness, RunOptions, events_until, finished, outcome, run_events, types};

fn tool_results(event_list: &[RunEvent]) -> Vec<(String, bool, String)> {
    event_list
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::ToolFinished {
                name,
                is_error,
                output_preview,
                ..
            } => Some((name.clone(), *is_error, output_preview.clone())),
            _ => None,
        })
        .collect()
}

/// The history is valid and ends with an assistant message.
fn assert_closed(history: &[Message]) {
    validate_history(history).expect("valid history");
    let last = history.last().expect("non-empty history");
    assert_eq!(
        last.role,
        Role::Assistant,
        "history ends with assistant: {history:#?}"
    );
    assert!(last.tool_calls().next().is_none());
}

fn labels(calls: &[(&str, &str)]) -> Response {
    tool_calls(
        calls
            .iter()
            .map(|(name, label)| (name.to_string(), json!({ "label": label }))),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_batch_runs_concurrently_and_reports_in_order() {
    let script = Script::new()
        .then(labels(&[
            ("rendezvous", "a"),
            ("rendezvous", "b"),
            ("rendezvous", "c"),
        ]))
        .then(text("all met"));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(RendezvousTool::new(
        3,
        Duration::from_secs(10),
        log.clone(),
    ))]);
    let mut run = h.submit("meet", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;

    // Each call only completes when all three are running at once.
    let results = tool_results(&events);
    assert_eq!(
        results,
        vec![
            ("rendezvous".into(), false, "met a".into()),
            ("rendezvous".into(), false, "met b".into()),
            ("rendezvous".into(), false, "met c".into()),
        ]
    );
    let tool_events: Vec<&str> = types(&events)
        .into_iter()
        .filter(|t| t.starts_with("tool_"))
        .collect();
    assert_eq!(
        tool_events,
        vec![
            "tool_started",
            "tool_started",
            "tool_started",
            "tool_finished",
            "tool_finished",
            "tool_finished"
        ]
    );
    assert_eq!(
        finished(&events),
        (RunStatus::Finished, "end_turn".into(), "all met".into())
    );

    // The model got the results in call order, in one user message.
    let requests = h.server.requests();
    assert_eq!(requests.len(), 2);
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 3);
    let body = &requests[1].body;
    let last = body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    let texts: Vec<String> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| block["content"].to_string())
        .collect();
    assert!(texts[0].contains("met a") && texts[1].contains("met b") && texts[2].contains("met c"));
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_effect_calls_run_alone_and_in_order_between_batches() {
    let script = Script::new()
        .then(labels(&[
            ("look", "r1"),
            ("look", "r2"),
            ("change", "w1"),
            ("change", "w2"),
            ("look", "r3"),
        ]))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![
        Arc::new(StepTool::new("look", true, false, log.clone())),
        Arc::new(StepTool::new("change", false, false, log.clone())),
    ]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let lines = log.lines();
    let at = |line: &str| {
        lines
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line} missing from {lines:?}"))
    };
    // The writes start only after both reads of the first batch ended, one at a time.
    assert!(at("end look r1") < at("start change w1"));
    assert!(at("end look r2") < at("start change w1"));
    assert!(at("end change w1") < at("start change w2"));
    assert!(at("end change w2") < at("start look r3"));

    let order: Vec<String> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::ToolStarted { args_preview, .. } => Some(format!("s {args_preview}")),
            EventKind::ToolFinished { output_preview, .. } => Some(format!("f {output_preview}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        vec![
            r#"s {"label":"r1"}"#,
            r#"s {"label":"r2"}"#,
            "f look r1 done",
            "f look r2 done",
            r#"s {"label":"w1"}"#,
            "f change w1 done",
            r#"s {"label":"w2"}"#,
            "f change w2 done",
            r#"s {"label":"r3"}"#,
            "f look r3 done",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_fails_only_its_own_call() {
    let script = Script::new()
        .then(labels(&[("look", "a"), ("explode", "b"), ("look", "c")]))
        .then(labels(&[("explode", "alone")]))
        .then(text("survived"));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![
        Arc::new(StepTool::new("look", true, false, log.clone())),
        Arc::new(PanicTool::new(true)),
    ]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let results = tool_results(&events);
    assert_eq!(results[0], ("look".into(), false, "look a done".into()));
    assert_eq!(results[1].0, "explode");
    assert!(results[1].1);
    assert!(
        results[1].2.starts_with("tool panicked: boom b"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2], ("look".into(), false, "look c done".into()));
    assert!(results[3].2.starts_with("tool panicked: boom alone"));
    assert_eq!(finished(&events).0, RunStatus::Finished);
    // The model saw the panic as an error result.
    let request = &h.server.requests()[1];
    let panic_result = &request.body["messages"].as_array().unwrap().last().unwrap()["content"][1];
    assert_eq!(panic_result["is_error"], true);
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_three_turns_in_a_row_stop_the_run() {
    let script = Script::new()
        .then(tool_call("no_such_tool", json!({})))
        .then(tool_call("also_missing", json!({"x": 1})))
        .then(tool_call("still_missing", json!({})));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let (status, reason, text) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Stopped, "unknown_tools")
    );
    assert!(text.contains("still_missing"));
    assert_eq!(status.exit_code(), 3);
    // The first two unknown calls were answered with the list of real tools.
    let second = &h.server.requests()[1];
    assert!(
        second.tool_results()[0]
            .content
            .contains("Unknown tool \"no_such_tool\"")
    );
    assert!(second.tool_results()[0].content.contains("read_file"));
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_identical_calls_stop_the_run() {
    let same = || tool_call("read_file", json!({"path": "a.txt"}));
    let script = Script::new().then(same()).then(same()).then(same());
    let h = Harness::anthropic(script).await;
    std::fs::write(h.root().join("a.txt"), "hello\n").unwrap();
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Stopped, "repeated_calls")
    );
    assert_eq!(tool_results(&events).len(), 2, "the third call is not run");
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_limit_stops_the_run_with_a_notice() {
    let script = Script::new()
        .then(labels(&[("look", "1")]))
        .then(labels(&[("look", "2")]))
        .then(labels(&[("look", "3")]));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "look",
        true,
        false,
        ActivityLog::default(),
    ))]);
    let mut options = RunOptions::bypass(env);
    options.limits = Limits {
        max_turns: 2,
        ..Limits::default()
    };
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    let (status, reason, text) = finished(&events);
    assert_eq!((status, reason.as_str()), (RunStatus::Stopped, "max_turns"));
    assert!(text.contains("limit of 2 turns"));
    assert!(events.iter().any(
        |e| matches!(&e.kind, EventKind::Notice { text, .. } if text.contains("limit of 2 turns"))
    ));
    assert_eq!(h.server.request_count(), 2);
    assert_eq!(h.server.remaining_turns(), 1);
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_checked_before_every_model_call() {
    // Tokens.
    let script = Script::new()
        .then(labels(&[("look", "1")]).with_usage(Usage::new(900, 200)))
        .then(text("unreachable"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "look",
        true,
        false,
        ActivityLog::default(),
    ))]);
    let mut options = RunOptions::bypass(env);
    options.limits = Limits {
        budget_tokens: 1_000,
        ..Limits::default()
    };
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).1, "budget_tokens");
    assert_eq!(h.server.request_count(), 1);
    assert_closed(&h.history(&run.session_id).await);
    h.server.take_violations();

    // Tool calls.
    let script = Script::new()
        .then(labels(&[("look", "1"), ("look", "2")]))
        .then(text("unreachable"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "look",
        true,
        false,
        ActivityLog::default(),
    ))]);
    let mut options = RunOptions::bypass(env);
    options.limits = Limits {
        max_tool_calls: 2,
        ..Limits::default()
    };
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).1, "max_tool_calls");
    assert_eq!(finished(&events).0.exit_code(), 3);
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_clock_stops_a_run_in_the_middle_of_a_tool() {
    let script = Script::new().then(labels(&[("hold", "forever")]));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "hold",
        false,
        true,
        log.clone(),
    ))]);
    let mut options = RunOptions::bypass(env);
    options.limits = Limits {
        wall_clock: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Stopped, "wall_clock")
    );
    assert!(log.lines().contains(&"cancelled hold forever".to_string()));
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_ends_the_run_with_a_valid_history() {
    let script = Script::new().then(Fault::Unauthorized);
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let error = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Error { kind, .. } => Some(kind.clone()),
            _ => None,
        })
        .expect("error event");
    assert_eq!(error, "authentication");
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Error, "provider_error")
    );
    assert_eq!(status.exit_code(), 1);
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_broken_after_content_keeps_the_text_and_the_next_message_works() {
    let script = Script::new()
        .then(Fault::cut_after(
            4,
            text("partial answer that goes on and on"),
        ))
        .then(text("second answer"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("first", RunOptions::bypass(env.clone())).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Error);
    let history = h.history(&run.session_id).await;
    assert_closed(&history);
    assert!(history[1].text().starts_with("partial"));

    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("again", options).await;
    let events = run_events(&mut next).await;
    assert_eq!(
        finished(&events),
        (
            RunStatus::Finished,
            "end_turn".into(),
            "second answer".into()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_while_streaming_aborts_the_http_request() {
    let script = Script::new()
        .then(Fault::stall_after(
            6,
            text("a long answer that never finishes"),
        ))
        .then(text("after cancel"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env.clone())).await;
    let mut events =
        events_until(&mut run, |e| matches!(e.kind, EventKind::TextDelta { .. })).await;
    h.runtime.cancel(&run.run_id).await.unwrap();
    events.extend(run_events(&mut run).await);
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Cancelled, "cancelled")
    );
    assert_eq!(status.exit_code(), 130);
    h.server
        .wait_for_aborted_streams(1, Duration::from_secs(10))
        .await
        .expect("the HTTP stream was aborted");
    assert_closed(&h.history(&run.session_id).await);

    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("continue", options).await;
    assert_eq!(
        finished(&run_events(&mut next).await).0,
        RunStatus::Finished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_during_a_batch_stops_tools_and_fills_results() {
    let script = Script::new()
        .then(labels(&[
            ("look", "quick"),
            ("hold", "slow"),
            ("look", "never"),
        ]))
        .then(text("after cancel"));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![
        Arc::new(StepTool::new("look", true, false, log.clone())),
        Arc::new(StepTool::new("hold", true, true, log.clone())),
    ]);
    let mut run = h.submit("go", RunOptions::bypass(env.clone())).await;
    let mut events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    })
    .await;
    h.runtime.cancel(&run.run_id).await.unwrap();
    events.extend(run_events(&mut run).await);
    assert_eq!(finished(&events).0, RunStatus::Cancelled);
    assert!(log.lines().contains(&"cancelled hold slow".to_string()));
    let history = h.history(&run.session_id).await;
    assert_closed(&history);
    let results: Vec<_> = history[2].tool_results_iter().collect();
    assert_eq!(results.len(), 3);
    assert!(results[1].is_error);
    assert_eq!(results[1].joined_text(), "(cancelled)");

    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("continue", options).await;
    assert_eq!(
        finished(&run_events(&mut next).await).0,
        RunStatus::Finished
    );
}

fn approval_id(events: &[RunEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ApprovalRequested { approval_id, .. } => Some(approval_id.clone()),
            _ => None,
        })
        .expect("approval requested")
}

fn write_call(path: &str) -> Response {
    tool_call("write_file", json!({"path": path, "content": "x\n"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_allow_deny_and_allow_always() {
    let script = Script::new()
        .then(write_call("one.txt"))
        .then(write_call("two.txt"))
        .then(tool_call("bash", json!({"command": "printf hi"})))
        .then(tool_call("bash", json!({"command": "printf hi"})))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit("go", options).await;

    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    h.runtime
        .approve(
            &run.run_id,
            &approval_id(&events),
            ApprovalOutcome::Allow,
            None,
        )
        .await
        .unwrap();
    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    h.runtime
        .approve(
            &run.run_id,
            &approval_id(&events),
            ApprovalOutcome::Deny,
            Some("not that file".into()),
        )
        .await
        .unwrap();
    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    h.runtime
        .approve(
            &run.run_id,
            &approval_id(&events),
            ApprovalOutcome::AllowAlways,
            None,
        )
        .await
        .unwrap();
    // The identical bash call is not asked again.
    let rest = run_events(&mut run).await;
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e.kind, EventKind::ApprovalRequested { .. }))
    );
    assert_eq!(finished(&rest).0, RunStatus::Finished);

    assert!(h.root().join("one.txt").exists());
    assert!(!h.root().join("two.txt").exists());
    let denied = h.server.requests()[2]
        .tool_results()
        .last()
        .cloned()
        .expect("result");
    assert!(denied.is_error);
    assert!(denied.content.contains("not that file"));
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nobody_to_ask_a_call_is_denied_with_a_reason() {
    let script = Script::new().then(write_call("x.txt")).then(text("ok"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Absent;
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ApprovalRequested { .. }))
    );
    assert_eq!(finished(&events).0, RunStatus::Finished);
    let result = &h.server.requests()[1].tool_results()[0];
    assert!(result.is_error);
    assert!(
        result.content.contains("nobody can answer"),
        "{}",
        result.content
    );
    assert!(!h.root().join("x.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_during_an_approval_wait() {
    let script = Script::new().then(write_call("x.txt")).then(text("after"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env.clone());
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit("go", options).await;
    let mut events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    h.runtime.cancel(&run.run_id).await.unwrap();
    events.extend(run_events(&mut run).await);
    assert_eq!(finished(&events).0, RunStatus::Cancelled);
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        EventKind::ApprovalResolved {
            outcome: ApprovalOutcome::Cancel,
            ..
        }
    )));
    assert!(!h.root().join("x.txt").exists());
    let history = h.history(&run.session_id).await;
    assert_closed(&history);

    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("continue", options).await;
    assert_eq!(
        finished(&run_events(&mut next).await).0,
        RunStatus::Finished
    );
}

/// The request prefix is stable: each request extends the previous one.
fn assert_prefix_extends(previous: &Value, next: &Value) {
    assert_eq!(previous["system"], next["system"]);
    assert_eq!(previous["tools"], next["tools"]);
    let strip = |message: &Value| {
        let mut message = message.clone();
        if let Some(blocks) = message["content"].as_array_mut() {
            for block in blocks {
                if let Some(object) = block.as_object_mut() {
                    object.remove("cache_control");
                }
            }
        }
        message
    };
    let before = previous["messages"].as_array().unwrap();
    let after = next["messages"].as_array().unwrap();
    assert!(after.len() > before.len());
    for (a, b) in before.iter().zip(after) {
        assert_eq!(strip(a), strip(b));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_request_bodies_across_a_multi_turn_run() {
    let script = Script::new()
        .then(
            Response::empty()
                .and_text("Reading.")
                .and_tool_call("read_file", json!({"path": "a.txt"}))
                .and_tool_call("glob", json!({"pattern": "*.txt"})),
        )
        .then(tool_call(
            "write_file",
            json!({"path": "b.txt", "content": "B"}),
        ))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    std::fs::write(h.root().join("a.txt"), "alpha\n").unwrap();
    let env = h.env_with(vec![]);
    // The main agent's catalogue: every registered tool, then `agent`.
    let definitions: Vec<String> = env
        .main_catalogue()
        .unwrap()
        .names()
        .map(str::to_string)
        .collect();
    assert_eq!(definitions.last().map(String::as_str), Some("agent"));
    let mut run = h.submit("do it", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished);
    let requests = h.server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        let body = &request.body;
        // Stable part with a breakpoint, environment without.
        assert_eq!(body["system"][0]["text"], troupe_tests::TEST_STABLE_PROMPT);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["system"][1]["text"], troupe_tests::TEST_ENVIRONMENT);
        assert!(body["system"][1].get("cache_control").is_none());
        // Tools in registry order.
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, definitions);
        // A rolling breakpoint on the last block of the newest message.
        let last = body["messages"].as_array().unwrap().last().unwrap();
        let last_block = last["content"].as_array().unwrap().last().unwrap();
        assert_eq!(last_block["cache_control"]["type"], "ephemeral");
    }
    let second = &requests[1].body["messages"];
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["content"][0]["text"], "Reading.");
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
    assert_eq!(second[2]["role"], "user");
    assert_eq!(second[2]["content"].as_array().unwrap().len(), 2);
    assert!(
        second[2]["content"][0]["content"]
            .to_string()
            .contains("alpha")
    );
    assert_prefix_extends(&requests[0].body, &requests[1].body);
    assert_prefix_extends(&requests[1].body, &requests[2].body);
    assert_eq!(
        std::fs::read_to_string(h.root().join("b.txt")).unwrap(),
        "B"
    );
}

/// The requests and the session id of a run whose model reads twice in one
/// response, then answers "done" (checked).
async fn two_reads_then_done(
    protocol: Protocol,
) -> (Vec<troupe_scripted::RecordedRequest>, String) {
    let script = Script::new()
        .then(tool_calls([
            ("read_file", json!({"path": "a.txt"})),
            ("grep", json!({"pattern": "alpha"})),
        ]))
        .then(text("done"));
    let h = Harness::start(script, protocol).await;
    std::fs::write(h.root().join("a.txt"), "alpha\n").unwrap();
    let env = h.env_with(vec![]);
    let mut run = h.submit("do it", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(
        finished(&events),
        (RunStatus::Finished, "end_turn".into(), "done".into())
    );
    (h.server.requests(), run.session_id.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_request_bodies_across_a_multi_turn_run() {
    let (requests, _) = two_reads_then_done(Protocol::OpenAi).await;
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[0]["content"],
        format!(
            "{}\n\n{}",
            troupe_tests::TEST_STABLE_PROMPT,
            troupe_tests::TEST_ENVIRONMENT
        )
    );
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[4]["role"], "tool");
    assert_eq!(
        messages[3]["tool_call_id"],
        messages[2]["tool_calls"][0]["id"]
    );
    assert_eq!(requests[1].body["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_request_bodies_across_a_multi_turn_run() {
    let (requests, session_id) = two_reads_then_done(Protocol::OpenAiResponses).await;
    let body = &requests[1].body;
    assert_eq!(
        body["instructions"],
        format!(
            "{}\n\n{}",
            troupe_tests::TEST_STABLE_PROMPT,
            troupe_tests::TEST_ENVIRONMENT
        )
    );
    assert_eq!(body["store"], false);
    assert_eq!(body["prompt_cache_key"], session_id.as_str());
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[1]["type"], "function_call");
    assert_eq!(input[2]["type"], "function_call");
    assert_eq!(input[3]["type"], "function_call_output");
    assert_eq!(input[4]["type"], "function_call_output");
    assert_eq!(input[3]["call_id"], input[1]["call_id"]);
    assert_eq!(input[4]["call_id"], input[2]["call_id"]);
    assert_prefix_extends_items(&requests[0].body, body);
}

/// The second request's `input` starts with the first's, item for item.
fn assert_prefix_extends_items(first: &Value, second: &Value) {
    let first = first["input"].as_array().unwrap();
    let second = second["input"].as_array().unwrap();
    assert!(second.len() > first.len());
    assert_eq!(&second[..first.len()], first.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_answered_at_once_while_tools_run_and_approvals_wait() {
    let script = Script::new()
        .then(write_call("y.txt"))
        .then(labels(&[("hold", "h")]))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "hold",
        true,
        true,
        ActivityLog::default(),
    ))]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit("go", options).await;

    // The write waits for an answer: the agent says so, with the request's id.
    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    let id = approval_id(&events);
    let statuses = h.runtime.agents(&run.run_id).await.unwrap();
    assert_eq!(statuses.len(), 1);
    let status = &statuses[0];
    assert_eq!(status.path, "main");
    assert_eq!(status.phase, "awaiting_approval");
    assert_eq!(status.pending_approvals, vec![id.clone()]);
    assert_eq!(status.turns, 1);
    h.runtime
        .approve(&run.run_id, &id, ApprovalOutcome::Allow, None)
        .await
        .unwrap();

    // The next turn's tool runs until cancelled: the agent is executing.
    events_until(
        &mut run,
        |e| matches!(&e.kind, EventKind::ToolStarted { name, .. } if name == "hold"),
    )
    .await;
    let status = &h.runtime.agents(&run.run_id).await.unwrap()[0];
    assert_eq!(status.phase, "executing");
    assert!(status.pending_approvals.is_empty());
    assert_eq!(status.turns, 2);
    h.runtime.cancel(&run.run_id).await.unwrap();
    assert_eq!(
        finished(&run_events(&mut run).await).0,
        RunStatus::Cancelled
    );
    assert!(h.root().join("y.txt").exists());
}

/// Holds the store's writer thread until the returned sender sends (or 30 s
/// pass): every durable write queued meanwhile waits behind it.
fn hold_the_writer(h: &Harness) -> std::sync::mpsc::Sender<()> {
    let (release, gate) = std::sync::mpsc::channel::<()>();
    h.store.commit(
        move |_| {
            let _ = gate.recv_timeout(Duration::from_secs(30));
            Ok(())
        },
        |_| {},
    );
    release
}

/// One async worker only: a run that waited for the disk on it would stall
/// every actor, the scripted server and this test.
#[tokio::test(flavor = "current_thread")]
async fn a_run_starts_once_its_record_is_durable_without_holding_a_worker() {
    let h = Harness::anthropic(Script::new().then(text("done"))).await;
    let release = hold_the_writer(&h);
    let submit = h.submit("go", RunOptions::bypass(h.env_with(vec![])));
    let watch = async {
        // This task goes on while the run waits: the worker is free. The run
        // is not started (no handle, no model call) until the write is durable.
        for _ in 0..200 {
            tokio::task::yield_now().await;
            assert!(h.server.requests().is_empty());
        }
        release.send(()).unwrap();
    };
    let (mut run, ()) = tokio::join!(submit, watch);
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished);
    assert_eq!(h.server.requests().len(), 1);
    let record = h.store.run(&run.run_id).unwrap().unwrap();
    assert!(record.ended.is_some());
}

/// A tool that answers once the test lets it.
struct GateTool {
    open: Arc<tokio::sync::Notify>,
    schema: Value,
}

impl troupe_tools::Tool for GateTool {
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "Answers once opened."
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    fn read_only(&self) -> bool {
        true
    }
    fn category(&self) -> troupe_protocol::permission::ToolCategory {
        troupe_protocol::permission::ToolCategory::Read
    }
    fn execute<'a>(
        &'a self,
        _args: Value,
        _ctx: &'a troupe_tools::ToolContext,
    ) -> futures::future::BoxFuture<'a, troupe_tools::ToolOutput> {
        Box::pin(async move {
            self.open.notified().await;
            troupe_tools::ToolOutput::ok("opened")
        })
    }
}

/// Starts a run whose first call is to the `gate` tool and returns once that
/// call started, with what opens the gate.
async fn run_to_the_gate(h: &Harness) -> (troupe_actors::RunHandle, Arc<tokio::sync::Notify>) {
    let open = Arc::new(tokio::sync::Notify::new());
    let gate = GateTool {
        open: open.clone(),
        schema: json!({ "type": "object", "properties": {} }),
    };
    let mut run = h
        .submit("go", RunOptions::bypass(h.env_with(vec![Arc::new(gate)])))
        .await;
    events_until(
        &mut run,
        |e| matches!(&e.kind, EventKind::ToolStarted { name, .. } if name == "gate"),
    )
    .await;
    (run, open)
}

/// One async worker only: an agent that waited for the disk on it would stall
/// every actor, the scripted server and this test.
#[tokio::test(flavor = "current_thread")]
async fn durable_is_a_state_the_agent_waits_in_without_holding_a_worker() {
    let script = Script::new()
        .then(tool_call("gate", json!({})))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let (mut run, open) = run_to_the_gate(&h).await;
    // Everything so far is durable (the model was called); hold the writer,
    // then let the tool answer: the agent's save of the result queues behind.
    let release = hold_the_writer(&h);
    open.notify_one();
    for _ in 0..200 {
        // This task goes on (the worker is free) and the agent answers (its
        // mailbox is free), but nothing depends on the unsaved result: no
        // second model call.
        tokio::task::yield_now().await;
        let statuses = h.runtime.agents(&run.run_id).await.unwrap();
        assert_eq!(statuses[0].path, "main");
        assert_eq!(h.server.requests().len(), 1);
    }
    release.send(()).unwrap();
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished);
    assert_eq!(h.server.requests().len(), 2);
    assert_closed(&h.history(&run.session_id).await);
}

/// A disk that never confirms a write must not make a run uncancellable:
/// once cancelled, the agent waits for its save, the run for its record and
/// the event log for the last event each at most the confirmation deadline,
/// and the run ends, saying what was not confirmed.
/// The clock is paused once no request is in flight, so the deadlines pass at
/// once.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_run_ends_even_when_the_disk_never_confirms_its_writes() {
    let script = Script::new()
        .then(tool_call("gate", json!({})))
        .then(text("never sent"));
    let h = Harness::anthropic(script).await;
    let (mut run, open) = run_to_the_gate(&h).await;
    let release = hold_the_writer(&h);
    tokio::time::pause();
    open.notify_one();
    h.runtime.cancel(&run.run_id).await.unwrap();
    let mut unconfirmed = 0;
    let finished_as = loop {
        let Ok(event) = tokio::time::timeout(Duration::from_secs(600), run.events.recv()).await
        else {
            panic!(
                "the run did not end: {:?}",
                h.runtime.agents(&run.run_id).await
            );
        };
        let event = event.expect("events until run_finished");
        match event.kind {
            EventKind::Error { kind, message } if kind == "store" => {
                assert!(message.contains("did not confirm"), "{message}");
                unconfirmed += 1;
            }
            EventKind::RunFinished {
                status,
                stop_reason,
                ..
            } if event.agent_path == "main" => break (status, stop_reason),
            _ => {}
        }
    };
    // Cancelled as asked; each write nobody confirmed is said out loud (the
    // agent's last save, the run's record, its last event).
    assert_eq!(finished_as, (RunStatus::Cancelled, "cancelled".to_string()));
    assert_eq!(unconfirmed, 3);
    assert_eq!(h.server.requests().len(), 1);
    drop(release);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_its_timeout_is_stopped_with_an_error_result() {
    let script = Script::new()
        .then(labels(&[("hold", "slow")]))
        .then(text("moved on"));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with_timeout(
        vec![Arc::new(StepTool::new("hold", true, true, log.clone()))],
        Duration::from_millis(200),
    );
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let results = tool_results(&events);
    assert!(results[0].1);
    assert!(results[0].2.contains("timed out"), "{:?}", results[0]);
    assert!(log.lines().contains(&"cancelled hold slow".to_string()));
    assert_eq!(finished(&events).2, "moved on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_kills_the_whole_process_group_of_a_running_command() {
    let h_dir = tempfile::tempdir().unwrap();
    let fifo = h_dir.path().join("pids");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let command = format!("sleep 300 & echo $$ $! > {}; wait", fifo.display());
    let script = Script::new()
        .then(tool_call("bash", json!({ "command": command })))
        .then(text("after"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    // Reading the FIFO blocks until the command has written both pids.
    let reader = fifo.clone();
    let pids = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || std::fs::read_to_string(reader).unwrap()),
    )
    .await
    .expect("command started")
    .unwrap();
    let pids: Vec<i32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|pid| troupe_tests::process_alive(*pid)));
    h.runtime.cancel(&run.run_id).await.unwrap();
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Cancelled);
    // The run finishes only after its tools stopped their processes.
    for pid in pids {
        assert!(!troupe_tests::process_alive(pid), "process {pid} survived");
    }
    assert_closed(&h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_response_is_recorded_as_a_placeholder() {
    let script = Script::new().then(Response::empty()).then(text("second"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("first", RunOptions::bypass(env.clone())).await;
    let events = run_events(&mut run).await;
    // The session is free again once the runtime has the run's outcome
    // (`run_finished` may reach the subscriber a moment before).
    let _ = tokio::time::timeout(troupe_tests::WAIT, &mut run.outcome).await;
    assert_eq!(
        finished(&events),
        (
            RunStatus::Finished,
            "end_turn".into(),
            "(no response)".into()
        )
    );
    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("again", options).await;
    run_events(&mut next).await;
    let second = &h.server.requests()[1].body["messages"];
    assert_eq!(second[1]["content"][0]["text"], "(no response)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_refused_calls_finish_without_exhausting_the_stack() {
    // Every call of the response is refused at once (plan mode refuses a
    // command that is not read-only), so every group settles as soon as it
    // starts: the loop walks them iteratively, on the actor's ordinary stack.
    let calls = (0..5_000).map(|i| {
        (
            "bash".to_string(),
            json!({ "command": format!("printf {i}") }),
        )
    });
    let script = Script::new()
        .then(tool_calls(calls))
        .then(text("all refused"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Plan;
    options.limits.max_tool_calls = 10_000;
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).2, "all refused");
    let results = tool_results(&events);
    assert_eq!(results.len(), 5_000);
    assert!(results.iter().all(|(_, is_error, _)| *is_error));
    let history = h.history(&run.session_id).await;
    assert_eq!(history[2].tool_results_iter().count(), 5_000);
    assert_closed(&history);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_be_followed_from_any_event_during_and_after_it() {
    let script = Script::new().then(labels(&[("hold", "x")]));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(StepTool::new("hold", true, true, log))]);
    let mut run = h.submit("hold on", RunOptions::bypass(env)).await;
    let mut seen = events_until(&mut run, |event| {
        matches!(event.kind, EventKind::ToolStarted { .. })
    })
    .await;
    // Mid-run: a second reader from the start, a third from the third event.
    let from_start = h.runtime.subscribe(&run.run_id, 1).await.unwrap();
    let from_third = h.runtime.subscribe(&run.run_id, 3).await.unwrap();
    h.runtime.cancel(&run.run_id).await.unwrap();
    seen.extend(run_events(&mut run).await);
    assert_eq!(
        finished(&seen).0,
        RunStatus::Cancelled,
        "{:?}",
        types(&seen)
    );
    let read = |mut subscription: troupe_actors::EventSubscription| async move {
        let mut events = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(20), subscription.recv())
            .await
            .expect("next event in time")
        {
            events.push(event);
        }
        events
    };
    assert_eq!(read(from_start).await, seen);
    assert_eq!(read(from_third).await, seen[2..].to_vec());
    // After the run: from the store alone, from any sequence number.
    let after = h.runtime.subscribe(&run.run_id, 5).await.unwrap();
    assert_eq!(read(after).await, seen[4..].to_vec());
    assert!(matches!(
        h.runtime.subscribe("no-such-run", 1).await,
        Err(troupe_actors::RuntimeError::UnknownRun(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_leave_memory_and_are_reopened_from_the_store() {
    let script = Script::new()
        .then(text("first answer"))
        .then(text("another session"))
        .then(text("continued"));
    let h = Harness::anthropic(script).await;
    // A runtime that keeps no idle session in memory.
    let runtime =
        troupe_actors::Runtime::start_keeping_idle_sessions(h.store.clone(), Duration::ZERO)
            .await
            .unwrap();
    let submit =
        |prompt: &str, session: troupe_actors::SessionTarget| troupe_actors::RunSubmission {
            prompt: prompt.into(),
            session,
            env: h.env_with(vec![]),
            permissions: h.permissions(PermissionMode::Bypass),
            mode: PermissionMode::Bypass,
            limits: Limits::default(),
            approver: Approver::Absent,
        };
    let mut first = runtime
        .submit(submit("one", troupe_actors::SessionTarget::New(None)))
        .await
        .unwrap();
    let session = first.session_id.clone();
    run_events(&mut first).await;
    // The outcome is handed out once the runtime has taken the run's end in.
    outcome(first).await;
    let mut second = runtime
        .submit(submit("two", troupe_actors::SessionTarget::New(None)))
        .await
        .unwrap();
    run_events(&mut second).await;
    outcome(second).await;
    // The first session's history left memory when the second run ended.
    let stats = runtime.stats().await.unwrap();
    assert_eq!(stats.runs_in_progress, 0);
    assert_eq!(stats.sessions_in_memory, 1);
    // Continuing it reads it back from the store: the model sees it whole.
    let mut third = runtime
        .submit(submit(
            "three",
            troupe_actors::SessionTarget::Continue(session),
        ))
        .await
        .unwrap();
    let events = run_events(&mut third).await;
    assert_eq!(finished(&events).2, "continued");
    let request = h.server.requests().into_iter().last().unwrap();
    assert!(request.any_user_text_contains("one"));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_written_during_a_run_reaches_the_next_model_call() {
    let script = Script::new().then(write_call("x.txt")).then(text("done"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit("go", options).await;
    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    // Written while the run waits for the person: it goes with the results.
    h.runtime
        .send_message(&run.run_id, "use tabs, not spaces")
        .await
        .unwrap();
    h.runtime
        .approve(
            &run.run_id,
            &approval_id(&events),
            ApprovalOutcome::Allow,
            None,
        )
        .await
        .unwrap();
    let rest = run_events(&mut run).await;
    assert_eq!(finished(&rest).0, RunStatus::Finished);
    let announced: Vec<&str> = rest
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::UserMessage { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(announced, ["use tabs, not spaces"]);
    let second = &h.server.requests()[1];
    // One user message on the wire: the result first, then the text.
    let last = second.messages().last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][1]["text"], "use tabs, not spaces");
    assert_eq!(second.tool_results().len(), 1);
    // Durable with the session, and the ended run takes no more.
    let history = h.history(&run.session_id).await;
    assert_closed(&history);
    assert!(history.iter().any(|m| m.text() == "use tabs, not spaces"));
    assert!(
        h.runtime
            .send_message(&run.run_id, "too late")
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_submitted_under_a_given_id_keeps_it_and_the_id_is_not_taken_twice() {
    let script = Script::new().then(text("first")).then(text("second"));
    let h = Harness::anthropic(script).await;
    let submission = |session: &str| troupe_actors::RunSubmission {
        prompt: "go".into(),
        session: troupe_actors::SessionTarget::New(Some(session.into())),
        env: h.env_with(Vec::new()),
        permissions: h.permissions(PermissionMode::Bypass),
        mode: PermissionMode::Bypass,
        limits: Limits::default(),
        approver: Approver::Absent,
    };
    let mut run = h
        .runtime
        .submit_as(
            submission("s-given"),
            "r-given".into(),
            tracing::Span::none(),
        )
        .await
        .unwrap();
    assert_eq!(
        (run.run_id.as_str(), run.session_id.as_str()),
        ("r-given", "s-given")
    );
    let events = run_events(&mut run).await;
    assert!(events.iter().all(|event| event.run_id == "r-given"));
    assert_eq!(finished(&events).0, RunStatus::Finished);
    assert!(h.store.run("r-given").unwrap().is_some());
    // The id is the recorded run's: a second run cannot take it.
    let again = h
        .runtime
        .submit_as(
            submission("s-other"),
            "r-given".into(),
            tracing::Span::none(),
        )
        .await;
    assert!(
        matches!(again, Err(troupe_actors::RuntimeError::Store(_))),
        "{:?}",
        again.err()
    );
}
