//! The agent tree end to end: sub-agents and forks as real child actors on the
//! real runtime, the real providers over loopback HTTP, and the scripted model
//! server telling the agents' conversations apart by content.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_actors::Approver;
use troupe_agent::subagent::FORK_CANNOT_START_AGENTS;
use troupe_agent::validate_history;
use troupe_config::Limits;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Protocol;
use troupe_protocol::model::Role;
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Matcher, RecordedRequest, Response, Script, Turn, Usage, text};
use troupe_tests::tools::{ActivityLog, PANIC_MODEL, RendezvousTool, StepTool};
use troupe_tests::{Harness, RunOptions, events_until, finished, run_events};

/// The main agent's prompt; its turns are routed by it.
const MAIN: &str = "MAIN-PROMPT: split the work";

fn main_turn(response: Response) -> Turn {
    Turn::new(response).when(Matcher::first_user_contains(MAIN))
}

/// A turn of the role child whose task contains `task`.
fn child_turn(task: &str, response: Response) -> Turn {
    Turn::new(response).when(Matcher::first_user_contains(task))
}

/// A turn of the fork whose task contains `task` (a fork's first user
/// message is its parent's; its task comes after the copy).
fn fork_turn(task: &str, response: Response) -> Turn {
    Turn::new(response).when(Matcher::any_user_contains(task))
}

fn agent_call(response: Response, args: Value) -> Response {
    response.and_tool_call("agent", args)
}

fn fork_args(task: &str) -> Value {
    json!({"description": "part of the work", "prompt": task, "fork": true})
}

fn role_args(role: &str, task: &str) -> Value {
    json!({"description": "delegated", "prompt": task, "role": role})
}

/// `(agent_path, status)` of every `subagent_finished`, in order.
fn children_finished(events: &[RunEvent]) -> Vec<(String, RunStatus)> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::SubagentFinished { status } => Some((event.agent_path.clone(), *status)),
            _ => None,
        })
        .collect()
}

/// Results the main agent got for its calls: `(is_error, preview)`.
fn main_results(events: &[RunEvent]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter(|event| event.agent_path == "main")
        .filter_map(|event| match &event.kind {
            EventKind::ToolFinished {
                is_error,
                output_preview,
                ..
            } => Some((*is_error, output_preview.clone())),
            _ => None,
        })
        .collect()
}

fn seq_of(events: &[RunEvent], path: &str, type_name: &str) -> u64 {
    events
        .iter()
        .find(|event| event.agent_path == path && event.kind.type_name() == type_name)
        .unwrap_or_else(|| panic!("no {type_name} of {path}"))
        .seq
}

/// Requests of the role child whose task contains `task` (its first user
/// message), in arrival order.
fn requests_of_child(h: &Harness, task: &str) -> Vec<RecordedRequest> {
    h.server
        .requests()
        .into_iter()
        .filter(|request| request.first_user_text().is_some_and(|t| t.contains(task)))
        .collect()
}

/// Requests whose user messages contain `needle`, in arrival order.
fn requests_with(h: &Harness, needle: &str) -> Vec<RecordedRequest> {
    h.server
        .requests()
        .into_iter()
        .filter(|request| request.any_user_text_contains(needle))
        .collect()
}

/// A JSON value without `cache_control` markers (they move with the newest
/// message and are allowed to differ).
fn without_cache_markers(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| key.as_str() != "cache_control")
                .map(|(key, value)| (key.clone(), without_cache_markers(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_cache_markers).collect()),
        other => other.clone(),
    }
}

async fn forks_repeat_the_parents_request_prefix(protocol: Protocol) {
    let tasks = ["FORK-TASK-A", "FORK-TASK-B", "FORK-TASK-C"];
    let mut split = Response::empty().and_text("Splitting the review in three.");
    for task in tasks {
        split = agent_call(split, fork_args(task));
    }
    let mut script = Script::new().then(main_turn(split));
    for (i, task) in tasks.iter().enumerate() {
        script = script.then(fork_turn(task, text(format!("Scope: part {i}. All good."))));
    }
    let script = script.then(main_turn(text("The three parts are fine.")));
    let h = Harness::start(script, protocol).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished);

    let requests = h.server.requests();
    let parent = &requests[0];
    let parent_messages = parent.messages().len();
    for (i, task) in tasks.iter().enumerate() {
        let forked = requests_with(&h, task);
        assert_eq!(forked.len(), 1, "one request of fork {i}");
        let fork = &forked[0];
        // Everything but the messages is the parent's, byte for byte: the
        // tools (`agent` included), the system prompt, the model, the limits.
        let strip = |body: &Value| {
            let mut body = without_cache_markers(body);
            // The conversation: `messages`, or the Responses `input` items.
            body.as_object_mut().unwrap().remove("messages");
            body.as_object_mut().unwrap().remove("input");
            serde_json::to_string(&body).unwrap()
        };
        assert_eq!(strip(&fork.body), strip(&parent.body), "fork {i}");
        assert!(fork.tool_names().contains(&"agent".to_string()));
        // The parent's messages are the fork's first messages, byte for byte.
        for (k, message) in parent.messages().iter().enumerate() {
            assert_eq!(
                serde_json::to_string(&without_cache_markers(&fork.messages()[k])).unwrap(),
                serde_json::to_string(&without_cache_markers(message)).unwrap(),
                "fork {i}, message {k}"
            );
        }
        assert!(fork.messages().len() > parent_messages);
    }
    // Results in call order, each fork's report.
    let results = main_results(&events);
    assert_eq!(results.len(), 3);
    for (i, (is_error, preview)) in results.iter().enumerate() {
        assert!(!is_error);
        assert!(preview.contains(&format!("part {i}")), "{preview}");
    }
    // Events are labelled by agent path; each fork's own events are ordered.
    for n in 1..=3 {
        let path = format!("main/fork-{n}");
        assert!(seq_of(&events, &path, "subagent_started") < seq_of(&events, &path, "iteration"));
        assert!(seq_of(&events, &path, "iteration") < seq_of(&events, &path, "subagent_finished"));
    }
    assert!(
        children_finished(&events)
            .iter()
            .all(|(_, status)| *status == RunStatus::Finished)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_forks_repeat_the_parents_request_prefix() {
    forks_repeat_the_parents_request_prefix(Protocol::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_forks_repeat_the_parents_request_prefix() {
    forks_repeat_the_parents_request_prefix(Protocol::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_forks_repeat_the_parents_request_prefix() {
    forks_repeat_the_parents_request_prefix(Protocol::OpenAiResponses).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_children_run_at_once_and_a_ninth_waits_for_a_slot() {
    let tasks: Vec<String> = (0..9).map(|i| format!("CHILD-TASK-{i}")).collect();
    let mut fan = Response::empty();
    for task in &tasks {
        fan = agent_call(fan, role_args("general", task));
    }
    let mut script = Script::new().then(main_turn(fan));
    for (i, task) in tasks.iter().enumerate().take(8) {
        script = script
            .then(child_turn(
                task,
                Response::empty().and_tool_call("rendezvous", json!({"label": i.to_string()})),
            ))
            .then(child_turn(task, text(format!("child {i} met the others"))));
    }
    let script = script
        .then(child_turn(&tasks[8], text("child 8 had to wait")))
        .then(main_turn(text("all nine reported")));
    let h = Harness::anthropic(script).await;
    // Each of the eight calls completes only when all eight run at once.
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(RendezvousTool::new(
        8,
        Duration::from_secs(15),
        log,
    ))]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).2, "all nine reported");
    let results = main_results(&events);
    assert_eq!(results.len(), 9);
    for (i, (is_error, preview)) in results.iter().enumerate().take(8) {
        assert!(!is_error, "{preview}");
        assert!(preview.contains(&format!("child {i} met")), "{preview}");
    }
    for event in &events {
        if let EventKind::ToolFinished {
            name,
            is_error,
            output_preview,
            ..
        } = &event.kind
            && name == "rendezvous"
        {
            assert!(!is_error, "{}: {output_preview}", event.agent_path);
        }
    }
    // The ninth started only after one of the eight finished (default limit 8).
    let first_done = events
        .iter()
        .find(|event| matches!(event.kind, EventKind::SubagentFinished { .. }))
        .unwrap()
        .seq;
    assert!(seq_of(&events, "main/general-9", "subagent_started") > first_done);
    assert_eq!(Limits::default().max_parallel_subagents, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explorer_is_offered_read_only_tools_and_a_write_counts_as_unknown() {
    let write = json!({"path": "out.txt", "content": "x"});
    let script = Script::new()
        .then(main_turn(agent_call(
            Response::empty(),
            role_args("explorer", "EXPLORE-TASK"),
        )))
        .then(child_turn(
            "EXPLORE-TASK",
            Response::empty().and_tool_call("write_file", write.clone()),
        ))
        .then(child_turn(
            "EXPLORE-TASK",
            Response::empty().and_tool_call("write_file", write),
        ))
        .then(main_turn(text("the explorer could not write")));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env.clone())).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished);
    assert!(!h.root().join("out.txt").exists());
    let explorer = requests_of_child(&h, "EXPLORE-TASK");
    assert_eq!(explorer.len(), 2, "stopped after two unknown-tool turns");
    for name in explorer[0].tool_names() {
        assert!(
            env.registry().is_read_only(&name),
            "{name} offered to the explorer"
        );
    }
    assert!(
        explorer[1].tool_results()[0]
            .content
            .starts_with("Unknown tool \"write_file\"")
    );
    assert_eq!(
        children_finished(&events),
        vec![("main/explorer-1".to_string(), RunStatus::Stopped)]
    );
    let (is_error, preview) = &main_results(&events)[0];
    assert!(*is_error && preview.contains("unknown_tools"), "{preview}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_may_not_fork_and_nesting_stops_at_two_levels() {
    let script = Script::new()
        .then(main_turn(
            agent_call(Response::empty(), fork_args("FORK-TASK-NEST"))
                .and_tool_call("agent", role_args("general", "LEVEL-ONE-TASK")),
        ))
        // The fork tries to fork again and is refused; it reports instead.
        .then(fork_turn(
            "FORK-TASK-NEST",
            agent_call(Response::empty(), fork_args("FORK-OF-FORK")),
        ))
        .then(fork_turn(
            "FORK-TASK-NEST",
            text("Scope: nest. Did it myself."),
        ))
        // A general child may start one more level; that one may not.
        .then(child_turn(
            "LEVEL-ONE-TASK",
            agent_call(Response::empty(), role_args("general", "LEVEL-TWO-TASK")),
        ))
        .then(child_turn(
            "LEVEL-TWO-TASK",
            agent_call(Response::empty(), role_args("general", "LEVEL-THREE-TASK")),
        ))
        .then(child_turn(
            "LEVEL-TWO-TASK",
            text("level two did it itself"),
        ))
        .then(child_turn("LEVEL-ONE-TASK", text("level one done")))
        .then(main_turn(text("nesting checked")));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).2, "nesting checked");
    let fork_second = requests_with(&h, FORK_CANNOT_START_AGENTS)
        .into_iter()
        .next()
        .expect("the fork saw the refusal");
    assert!(
        fork_second
            .tool_results()
            .iter()
            .any(|r| r.is_error && r.content == FORK_CANNOT_START_AGENTS)
    );
    let level_two = requests_of_child(&h, "LEVEL-TWO-TASK");
    assert_eq!(level_two.len(), 2);
    // At the deepest level `agent` is no longer offered; a call to it is
    // refused as unknown (and counts toward the unknown-tool limit).
    assert!(!level_two[0].tool_names().contains(&"agent".to_string()));
    let level_one = requests_of_child(&h, "LEVEL-ONE-TASK").remove(0);
    assert!(level_one.tool_names().contains(&"agent".to_string()));
    let refusal = &level_two[1].tool_results()[0];
    assert!(
        refusal.is_error && refusal.content.starts_with("Unknown tool \"agent\""),
        "{}",
        refusal.content
    );
    let mut paths: Vec<String> = children_finished(&events)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["main/fork-1", "main/general-2", "main/general-2/general-1"]
    );
    assert!(requests_with(&h, "LEVEL-THREE-TASK").iter().all(|request| {
        !request
            .first_user_text()
            .is_some_and(|t| t.contains("LEVEL-THREE"))
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_child_is_an_error_result_and_the_parent_goes_on() {
    let script = Script::new()
        .then(main_turn(
            agent_call(Response::empty(), role_args("crasher", "CRASH-TASK"))
                .and_tool_call("agent", role_args("general", "STEADY-TASK")),
        ))
        .then(child_turn("STEADY-TASK", text("steady child done")))
        .then(main_turn(text("one child failed, one did not")));
    let h = Harness::anthropic(script).await;
    let agents = h.root().join(".troupe/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("crasher.md"),
        format!("---\ndescription: crashes\nmodel: {PANIC_MODEL}\n---\nYou crash.\n"),
    )
    .unwrap();
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(
        finished(&events),
        (
            RunStatus::Finished,
            "end_turn".into(),
            "one child failed, one did not".into()
        )
    );
    let results = main_results(&events);
    assert!(
        results[0].0 && results[0].1.contains("panicked"),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1], (false, "steady child done".to_string()));
    let finished_children = children_finished(&events);
    assert!(finished_children.contains(&("main/crasher-1".to_string(), RunStatus::Error)));
    let history = h.history(&run.session_id).await;
    validate_history(&history).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_exhausting_the_shared_budget_stop_the_whole_tree() {
    let heavy = |label: &str| {
        Response::empty()
            .and_tool_call("hold", json!({ "label": label }))
            .with_usage(Usage::new(600, 10))
    };
    let script = Script::new()
        .then(main_turn(
            agent_call(Response::empty(), fork_args("BUDGET-A"))
                .and_tool_call("agent", fork_args("BUDGET-B"))
                .with_usage(Usage::new(10, 10)),
        ))
        .then(fork_turn("BUDGET-A", heavy("a")))
        .then(fork_turn("BUDGET-B", heavy("b")));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(StepTool::new("hold", true, true, log))]);
    let mut options = RunOptions::bypass(env);
    options.limits.budget_tokens = 1_000;
    let mut run = h.submit(MAIN, options).await;
    let events = run_events(&mut run).await;
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Stopped, "budget_tokens")
    );
    assert_eq!(status.exit_code(), 3);
    let children = children_finished(&events);
    assert_eq!(children.len(), 2);
    assert!(
        children
            .iter()
            .all(|(_, status)| *status == RunStatus::Stopped),
        "{children:?}"
    );
    let usage = match &events.last().unwrap().kind {
        EventKind::RunFinished { usage_total, .. } => *usage_total,
        _ => unreachable!(),
    };
    assert!(usage.total() >= 1_000, "the whole tree's usage: {usage:?}");
    validate_history(&h.history(&run.session_id).await).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_run_kills_every_childs_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let fifos: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let fifo = dir.path().join(name);
            assert!(
                std::process::Command::new("mkfifo")
                    .arg(&fifo)
                    .status()
                    .unwrap()
                    .success()
            );
            fifo
        })
        .collect();
    let command = |fifo: &std::path::Path| json!({ "command": format!("sleep 300 & echo $$ $! > {}; wait", fifo.display()) });
    let script = Script::new()
        .then(main_turn(
            agent_call(Response::empty(), fork_args("SLEEP-A"))
                .and_tool_call("agent", fork_args("SLEEP-B")),
        ))
        .then(fork_turn(
            "SLEEP-A",
            Response::empty().and_tool_call("bash", command(&fifos[0])),
        ))
        .then(fork_turn(
            "SLEEP-B",
            Response::empty().and_tool_call("bash", command(&fifos[1])),
        ));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let mut pids = Vec::new();
    for fifo in &fifos {
        let reader = fifo.clone();
        let written = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::task::spawn_blocking(move || std::fs::read_to_string(reader).unwrap()),
        )
        .await
        .expect("the child's command started")
        .unwrap();
        pids.extend(
            written
                .split_whitespace()
                .map(|p| p.parse::<i32>().unwrap()),
        );
    }
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|pid| troupe_tests::process_alive(*pid)));
    h.runtime.cancel(&run.run_id).await.unwrap();
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Cancelled);
    for pid in pids {
        assert!(!troupe_tests::process_alive(pid), "process {pid} survived");
    }
    assert!(
        children_finished(&events)
            .iter()
            .all(|(_, status)| *status == RunStatus::Cancelled)
    );
    validate_history(&h.history(&run.session_id).await).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_one_child_by_path_leaves_the_others_running() {
    let script = Script::new()
        .then(main_turn(
            agent_call(Response::empty(), fork_args("HOLD-A"))
                .and_tool_call("agent", fork_args("HOLD-B")),
        ))
        .then(fork_turn(
            "HOLD-A",
            Response::empty().and_tool_call("hold", json!({"label": "a"})),
        ))
        .then(fork_turn(
            "HOLD-B",
            Response::empty().and_tool_call("hold", json!({"label": "b"})),
        ))
        .then(main_turn(text("one cancelled, one released")));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(StepTool::new(
        "hold",
        true,
        true,
        log.clone(),
    ))]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    // Both children hold their tool.
    let mut events = Vec::new();
    for _ in 0..2 {
        events.extend(
            events_until(&mut run, |e| {
                e.agent_path != "main" && matches!(e.kind, EventKind::ToolStarted { .. })
            })
            .await,
        );
    }
    h.runtime
        .cancel_agent(&run.run_id, "main/fork-1")
        .await
        .unwrap();
    events.extend(
        events_until(&mut run, |e| {
            e.agent_path == "main/fork-1" && matches!(e.kind, EventKind::SubagentFinished { .. })
        })
        .await,
    );
    let statuses = h.runtime.agents(&run.run_id).await.unwrap();
    let alive: Vec<&str> = statuses.iter().map(|s| s.path.as_str()).collect();
    assert!(
        alive.contains(&"main") && alive.contains(&"main/fork-2"),
        "{alive:?}"
    );
    assert!(!alive.contains(&"main/fork-1"));
    // An unknown path is an error, not a silent no-op.
    assert!(
        h.runtime
            .cancel_agent(&run.run_id, "main/fork-9")
            .await
            .is_err()
    );
    h.runtime
        .cancel_agent(&run.run_id, "main/fork-2/nothing")
        .await
        .unwrap_err();
    // Release the second child's tool by cancelling that one call's child: the
    // simplest handle on it is the child itself, so cancel it too and check
    // the parent still finishes normally with both error results.
    h.runtime
        .cancel_agent(&run.run_id, "main/fork-2")
        .await
        .unwrap();
    events.extend(run_events(&mut run).await);
    let (status, _, text) = finished(&events);
    assert_eq!(status, RunStatus::Finished);
    assert_eq!(text, "one cancelled, one released");
    let results = main_results(&events);
    assert!(
        results
            .iter()
            .all(|(is_error, preview)| *is_error && preview.contains("was cancelled")),
        "{results:?}"
    );
    assert!(log.lines().contains(&"cancelled hold a".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_approval_reaches_the_front_door_with_its_path() {
    let script = Script::new()
        .then(main_turn(agent_call(
            Response::empty(),
            role_args("general", "WRITE-TASK"),
        )))
        .then(child_turn(
            "WRITE-TASK",
            Response::empty().and_tool_call(
                "write_file",
                json!({"path": "child.txt", "content": "from the child"}),
            ),
        ))
        .then(child_turn("WRITE-TASK", text("wrote child.txt")))
        .then(main_turn(text("the child wrote it")));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit(MAIN, options).await;
    let mut events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    let request = events.last().unwrap();
    assert_eq!(request.agent_path, "main/general-1");
    let EventKind::ApprovalRequested {
        approval_id, tool, ..
    } = &request.kind
    else {
        unreachable!()
    };
    assert_eq!(tool, "write_file");
    // An id that waits nowhere is refused.
    assert!(
        h.runtime
            .approve(
                &run.run_id,
                "no-such-approval",
                ApprovalOutcome::Allow,
                None
            )
            .await
            .is_err()
    );
    h.runtime
        .approve(&run.run_id, approval_id, ApprovalOutcome::Allow, None)
        .await
        .unwrap();
    events.extend(run_events(&mut run).await);
    assert_eq!(finished(&events).2, "the child wrote it");
    assert_eq!(
        std::fs::read_to_string(h.root().join("child.txt")).unwrap(),
        "from the child"
    );
    let resolved = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::ApprovalResolved { .. }))
        .unwrap();
    assert_eq!(resolved.agent_path, "main/general-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_child_has_a_durable_session_linked_to_its_parent() {
    let script = Script::new()
        .then(main_turn(
            Response::empty()
                .and_text("Looking.")
                .and_tool_call("agent", fork_args("LINK-FORK"))
                .and_tool_call("agent", role_args("explorer", "LINK-EXPLORE")),
        ))
        .then(fork_turn("LINK-FORK", text("Scope: link. Done.")))
        .then(child_turn("LINK-EXPLORE", text("explored")))
        .then(main_turn(text("both linked")));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    run_events(&mut run).await;
    let children: Vec<_> = h
        .store
        .list_sessions()
        .unwrap()
        .into_iter()
        .filter(|meta| meta.parent.as_deref() == Some(run.session_id.as_str()))
        .collect();
    assert_eq!(children.len(), 2);
    let mut paths: Vec<String> = children
        .iter()
        .map(|meta| meta.agent_path.clone().unwrap())
        .collect();
    paths.sort();
    assert_eq!(paths, vec!["main/explorer-2", "main/fork-1"]);
    for child in &children {
        assert_eq!(child.run_id.as_deref(), Some(run.run_id.as_str()));
        let history = h.store.load_history(&child.id).unwrap().messages;
        validate_history(&history).unwrap();
        assert_eq!(history.last().unwrap().role, Role::Assistant);
        if child.agent_path.as_deref() == Some("main/fork-1") {
            // The fork shares the parent's stored history up to the message
            // holding its call, instead of copying it.
            let base = child.fork_of.as_ref().expect("a fork names its base");
            assert_eq!(base.session, run.session_id);
            assert_eq!(base.len, 2);
            // The fork's transcript starts with the parent's.
            assert!(history[0].text().contains(MAIN));
            assert!(history.last().unwrap().text().contains("Scope: link"));
        } else {
            assert!(child.fork_of.is_none());
            assert_eq!(history[0].text(), "LINK-EXPLORE");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_main_agent_stops_its_subtree_and_the_session_goes_on() {
    let script = Script::new()
        .then(main_turn(
            Response::empty()
                .and_tool_call("hold", json!({"label": "running"}))
                .and_tool_call("agent_bomb", json!({"label": "x"})),
        ))
        .then(Turn::new(text("fresh start")).when(Matcher::last_user_contains("again")));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![
        Arc::new(StepTool::new("hold", true, true, log.clone())),
        Arc::new(troupe_tests::tools::AgentBombTool::new(
            log.clone(),
            "start hold running",
        )),
    ]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env.clone())).await;
    let events = run_events(&mut run).await;
    let (status, reason, _) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Error, "agent_failed")
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Error { kind, .. } if kind == "agent_failed"))
    );
    // The call already running when the agent failed was stopped.
    assert!(
        log.wait_for("released hold running", Duration::from_secs(10))
            .await,
        "{:?}",
        log.lines()
    );
    // The session is reopened from the store, repaired, and continues.
    let mut options = RunOptions::bypass(env);
    options.session_id = Some(run.session_id.clone());
    let mut next = h.submit("again", options).await;
    let events = run_events(&mut next).await;
    assert_eq!(finished(&events).2, "fresh start");
    let history = h.history(&run.session_id).await;
    validate_history(&history).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_child_stops_its_own_calls_and_the_parent_goes_on() {
    let script = Script::new()
        .then(main_turn(agent_call(
            Response::empty(),
            fork_args("BOMB-TASK"),
        )))
        .then(fork_turn(
            "BOMB-TASK",
            Response::empty()
                .and_tool_call("hold", json!({"label": "in-child"}))
                .and_tool_call("agent_bomb", json!({"label": "x"})),
        ))
        .then(main_turn(text("the fork failed; carrying on")));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![
        Arc::new(StepTool::new("hold", true, true, log.clone())),
        Arc::new(troupe_tests::tools::AgentBombTool::new(
            log.clone(),
            "start hold in-child",
        )),
    ]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).2, "the fork failed; carrying on");
    let (is_error, preview) = &main_results(&events)[0];
    assert!(*is_error && preview.contains("panicked"), "{preview}");
    assert!(
        log.wait_for("released hold in-child", Duration::from_secs(10))
            .await,
        "{:?}",
        log.lines()
    );
    assert_eq!(
        children_finished(&events),
        vec![("main/fork-1".to_string(), RunStatus::Error)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_runs_one_run_at_a_time() {
    let script = Script::new()
        .then(main_turn(
            Response::empty().and_tool_call("hold", json!({"label": "busy"})),
        ))
        .then(main_turn(text("released")));
    let h = Harness::anthropic(script).await;
    let log = ActivityLog::default();
    let env = h.env_with(vec![Arc::new(StepTool::new("hold", true, true, log))]);
    let mut run = h.submit(MAIN, RunOptions::bypass(env.clone())).await;
    events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    })
    .await;
    let second = h
        .runtime
        .submit(troupe_actors::RunSubmission {
            prompt: "a second message".into(),
            session: troupe_actors::SessionTarget::Continue(run.session_id.clone()),
            env,
            permissions: h.permissions(PermissionMode::Bypass),
            mode: PermissionMode::Bypass,
            limits: Limits::default(),
            approver: Approver::Absent,
        })
        .await;
    assert!(
        matches!(second, Err(troupe_actors::RuntimeError::SessionBusy(ref id)) if *id == run.session_id),
        "a busy session refuses a second run"
    );
    h.runtime.cancel(&run.run_id).await.unwrap();
    assert_eq!(
        finished(&run_events(&mut run).await).0,
        RunStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_catalogue_is_built_once_and_shared() {
    use troupe_agent::roles::RoleTools;
    let h = Harness::anthropic(Script::new()).await;
    let env = h.env_with(vec![]);
    let first = env
        .catalogue("explorer", &RoleTools::ReadOnly, false)
        .unwrap();
    let again = env
        .catalogue("explorer", &RoleTools::ReadOnly, false)
        .unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let with_agent = env.catalogue("general", &RoleTools::All, true).unwrap();
    let without = env.catalogue("general", &RoleTools::All, false).unwrap();
    assert!(with_agent.has_agent_tool() && !without.has_agent_tool());
    let main = env.main_catalogue().unwrap();
    assert!(Arc::ptr_eq(&main, &env.main_catalogue().unwrap()));
    assert!(main.has_agent_tool());
}
