//! Hooks on the real runtime (actor tree, scripted model over loopback):
//! text written during a run passes UserPromptSubmit hooks — a blocked text
//! is refused and never reaches the model; a waiting approval runs the
//! Notification hooks; SessionStart fires when a session is created and not
//! again when the runtime continues the session it kept in memory; a slow
//! hook at one run's door holds up no other run, and a cancel kills it.

use serde_json::{Value, json};
use troupe_actors::{Approver, RuntimeError};
use troupe_hooks::{Hook, HookEvent};
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_protocol::permission::{PermissionMode, RuleSource};
use troupe_scripted::{Script, text, tool_call};
use troupe_tests::{Harness, RunOptions, events_until, finished, run_events};

fn hook(event: HookEvent, command: &str) -> Hook {
    Hook::new(event, None, command, Some(30), false, RuleSource::User).unwrap()
}

fn recorder(path: &std::path::Path) -> String {
    format!("{{ cat; echo; }} >> '{}'", path.display())
}

fn payloads(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_text_passes_prompt_hooks_and_approvals_notify() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "x.txt", "content": "x\n"}),
        ))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let records = tempfile::tempdir().unwrap();
    let notified = records.path().join("notification.jsonl");
    let gate = "if grep -q password; then echo 'no passwords in prompts' >&2; exit 2; fi";
    let env = h.env_with_hooks(
        vec![],
        vec![
            hook(HookEvent::UserPromptSubmit, gate),
            hook(HookEvent::Notification, &recorder(&notified)),
        ],
    );
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Present;
    let mut run = h.submit("go", options).await;
    let events = events_until(&mut run, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    let refused = h
        .runtime
        .send_message(&run.run_id, "the password is hunter2")
        .await;
    match refused {
        Err(RuntimeError::HookBlocked(reason)) => {
            assert_eq!(reason, "no passwords in prompts")
        }
        other => panic!("expected a hook block, got {other:?}"),
    }
    h.runtime
        .send_message(&run.run_id, "use tabs")
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
    let second = serde_json::to_string(&h.server.requests()[1].messages()).unwrap();
    assert!(second.contains("use tabs"), "{second}");
    assert!(!second.contains("hunter2"), "{second}");
    let history = serde_json::to_string(&h.history(&run.session_id).await).unwrap();
    assert!(!history.contains("hunter2"));

    let notes = payloads(&notified);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["event"], "Notification");
    assert_eq!(notes[0]["tool_name"], "write_file");
    assert!(
        notes[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Troupe needs your approval for write_file"),
        "{notes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_fires_for_a_new_session_not_for_one_kept_in_memory() {
    let h = Harness::anthropic(Script::new().then(text("one")).then(text("two"))).await;
    let records = tempfile::tempdir().unwrap();
    let started = records.path().join("start.jsonl");
    let env = h.env_with_hooks(
        vec![],
        vec![hook(HookEvent::SessionStart, &recorder(&started))],
    );
    let mut first = h.submit("hello", RunOptions::bypass(env.clone())).await;
    assert_eq!(
        finished(&run_events(&mut first).await).0,
        RunStatus::Finished
    );
    let mut options = RunOptions::bypass(env);
    options.session_id = Some(first.session_id.clone());
    let mut second = h.submit("again", options).await;
    assert_eq!(
        finished(&run_events(&mut second).await).0,
        RunStatus::Finished
    );
    let starts = payloads(&started);
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0]["trigger"], "startup");
    assert_eq!(starts[0]["run_id"], first.run_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_hook_at_one_runs_door_holds_up_no_other_run() {
    // The hook-less run is served first; the gated one after its hook ends.
    let h = Harness::anthropic(Script::new().then(text("quick")).then(text("gated"))).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let waiting = format!(
        "while [ ! -e '{go}' ]; do sleep 0.01; done; echo 'checked' >&2",
        go = go.display()
    );
    let gated_env = h.env_with_hooks(vec![], vec![hook(HookEvent::UserPromptSubmit, &waiting)]);
    let secret = "the launch code is 0000";
    let mut gated = tokio::time::timeout(
        troupe_tests::WAIT,
        h.submit(secret, RunOptions::bypass(gated_env)),
    )
    .await
    .expect("the submission does not wait for its hook");
    // Known while its hook runs, without a word of the prompt.
    let record = h
        .store
        .run(&gated.run_id)
        .unwrap()
        .expect("recorded at once");
    assert!(!record.prompt.contains("launch code"), "{}", record.prompt);
    let mut quick = h
        .submit(
            "hello",
            RunOptions::bypass(h.env_with_hooks(vec![], vec![])),
        )
        .await;
    let (status, _, text) = finished(&run_events(&mut quick).await);
    assert_eq!((status, text.as_str()), (RunStatus::Finished, "quick"));
    // The gated run has not started: its hook still waits.
    assert!(
        h.store
            .load_history(&gated.session_id)
            .unwrap()
            .messages
            .is_empty(),
        "the prompt entered the history before its hook passed it"
    );
    std::fs::write(&go, "").unwrap();
    let events = run_events(&mut gated).await;
    let (status, _, text) = finished(&events);
    assert_eq!((status, text.as_str()), (RunStatus::Finished, "gated"));
    assert_eq!(h.store.run(&gated.run_id).unwrap().unwrap().prompt, secret);
    let started = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::RunStarted { .. }))
        .unwrap();
    assert!(
        events[started..].iter().any(
            |e| matches!(&e.kind, EventKind::Hook { event, .. } if event == "UserPromptSubmit")
        ),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_kills_a_hook_at_the_door_and_ends_the_run() {
    let h = Harness::anthropic(Script::new().then(text("never asked"))).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("waiting");
    // Says it runs, then waits for a file nobody writes.
    let waiting = format!(
        "touch '{marker}'; while :; do sleep 0.01; done",
        marker = marker.display()
    );
    let env = h.env_with_hooks(vec![], vec![hook(HookEvent::SessionStart, &waiting)]);
    let mut run = h.submit("hello", RunOptions::bypass(env)).await;
    let deadline = std::time::Instant::now() + troupe_tests::WAIT;
    while !marker.exists() {
        assert!(std::time::Instant::now() < deadline, "the hook never ran");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    h.runtime.cancel(&run.run_id).await.unwrap();
    // Within WAIT, where the hook would wait for its 30 s timeout.
    let events = run_events(&mut run).await;
    let (status, _, _) = finished(&events);
    assert_eq!(status, RunStatus::Cancelled, "{events:?}");
    assert!(h.server.requests().is_empty(), "the model was asked");
}
