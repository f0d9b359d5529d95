//! Context compaction through the actors and the real HTTP path, against the
//! scripted model server with a small context window: large results are
//! offloaded once (identical request prefixes turn after turn, decisions kept
//! with the session), a long run crosses the threshold and continues on a
//! summary plus the verbatim tail, and a prompt-too-long answer compacts once
//! and retries.

use serde_json::json;
use troupe_runtime::agent::validate_history;
use troupe_runtime::events::{EventKind, RunStatus};
use troupe_runtime::model::Role;
use troupe_scripted::{Fault, Matcher, RecordedRequest, Script, Turn, text, tool_call, tool_calls};
use troupe_tests::{Harness, RunOptions, finished, run_events};

/// Requests that are not a summary request.
fn not_summary() -> Matcher {
    Matcher::predicate("not a summary request", |request: &RecordedRequest| {
        !request
            .last_user_text()
            .unwrap_or_default()
            .contains("<summary> tags")
    })
}

fn summary_request() -> Matcher {
    Matcher::last_user_contains("<summary> tags")
}

fn read(path: &str) -> Turn {
    Turn::new(tool_call("read_file", json!({ "path": path }))).when(not_summary())
}

fn compactions(events: &[troupe_runtime::events::RunEvent]) -> Vec<(String, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction {
                phase,
                before_tokens,
                after_tokens,
            } => Some((phase.clone(), *before_tokens, *after_tokens)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_tool_message_is_offloaded_once_and_later_requests_keep_the_same_prefix() {
    // Five reads of ~46 KB in one response: one tool message over 200 KB.
    let reads: Vec<(&str, serde_json::Value)> = (0..5)
        .map(|i| ("read_file", json!({ "path": format!("big{i}.txt") })))
        .collect();
    let script = Script::new()
        .then(tool_calls(reads))
        .then(read("small.txt"))
        .then(text("done"));
    let mut h = Harness::anthropic(script).await;
    h.context_window = 200_000;
    for i in 0..5 {
        let body: String = (0..600 + i * 10)
            .map(|n| format!("{n:>6} {}\n", "x".repeat(62)))
            .collect();
        std::fs::write(h.root().join(format!("big{i}.txt")), body).unwrap();
    }
    std::fs::write(h.root().join("small.txt"), "tiny\n").unwrap();
    let env = h.env_with(vec![]);
    let mut run = h.submit("read", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished, "{events:#?}");
    let requests = h.server.requests();
    assert_eq!(requests.len(), 3);
    // The largest result went out as a preview naming its spill file.
    let results = requests[1].tool_results();
    let previews: Vec<&str> = results
        .iter()
        .map(|r| r.content.as_str())
        .filter(|c| c.starts_with("[content offloaded] original size:"))
        .collect();
    assert_eq!(previews.len(), 1, "{results:#?}");
    let spill = previews[0]
        .lines()
        .find_map(|line| line.strip_prefix("[saved to] "))
        .unwrap();
    let spilled = std::fs::read_to_string(spill).unwrap();
    assert!(spilled.contains("xxxxxxxxxx"));
    assert!(spilled.len() > 40_000);
    // The next request carries exactly the same messages before its new ones.
    let before = requests[1].messages();
    assert_eq!(
        &requests[2].messages()[..before.len() - 1],
        &before[..before.len() - 1]
    );
    // The stored history keeps every result whole; the decisions are kept.
    let history = h.history(&run.session_id).await;
    assert!(
        history
            .iter()
            .flat_map(|m| m.tool_results_iter())
            .all(|r| !r.joined_text().contains("[content offloaded]"))
    );
    let ledger = h.store.ledger(&run.session_id).unwrap();
    assert_eq!(ledger.iter().filter(|e| e.replaced).count(), 1);
    assert_eq!(
        ledger.len(),
        6,
        "the kept results' decisions are kept as well"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_crosses_the_threshold_and_continues_on_a_summary() {
    const FILES: usize = 10;
    let mut script = Script::new();
    for i in 0..FILES {
        script = script.then(read(&format!("f{i}.txt")));
    }
    let script = script
        .when(
            summary_request(),
            text("<analysis>draft</analysis><summary>1. Read eight files.</summary>"),
        )
        // The window is small: the run compacts a second time before it ends.
        .when(
            summary_request(),
            text("<summary>1. Read all ten files.</summary>"),
        )
        .then(Turn::new(text("all read")).when(not_summary()));
    let mut h = Harness::anthropic(script).await;
    // Window 60,000: summaries from 27,000 tokens.
    h.context_window = 60_000;
    for i in 0..FILES {
        let body: String = (0..600).map(|n| format!("file {i} line {n}\n")).collect();
        std::fs::write(h.root().join(format!("f{i}.txt")), body).unwrap();
    }
    let env = h.env_with(vec![]);
    let mut run = h.submit("read them all", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished, "{events:#?}");
    let phases: Vec<String> = compactions(&events).into_iter().map(|c| c.0).collect();
    assert!(
        phases.starts_with(&["started".to_string(), "finished".to_string()]),
        "{phases:?}"
    );
    let requests = h.server.requests();
    let summary_at = requests
        .iter()
        .position(|r| {
            r.last_user_text()
                .unwrap_or_default()
                .contains("<summary> tags")
        })
        .expect("a summary request");
    let summary = &requests[summary_at];
    assert!(
        summary.tool_names().is_empty(),
        "no tools in a summary request"
    );
    assert!(summary.any_user_text_contains("read them all"));
    // The request after it starts from the summary and the recovery attachment.
    let next = &requests[summary_at + 1];
    let first = next.first_user_text().unwrap();
    assert!(first.contains("1. Read eight files."), "{first}");
    assert!(next.any_user_text_contains("## Tools available now"));
    assert!(next.any_user_text_contains("### f"), "the files read last");
    assert!(!next.tool_names().is_empty());
    // Stored: the marker and the kept messages load back as the live history.
    let stored = h.store.load_history(&run.session_id).unwrap();
    assert!(stored.summary_len > 0);
    validate_history(&stored.messages).unwrap();
    assert_eq!(stored.messages[0].role, Role::User);
    assert_eq!(stored.messages, h.history(&run.session_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_too_long_compacts_once_and_the_call_is_retried() {
    let mut script = Script::new();
    for i in 0..6 {
        script = script.then(read(&format!("f{i}.txt")));
    }
    let script = script
        .then(Turn::new(Fault::prompt_too_long(250_000, 200_000)).when(not_summary()))
        .when(
            summary_request(),
            text("<summary>1. Six files read.</summary>"),
        )
        .then(Turn::new(text("after the emergency")).when(not_summary()));
    let mut h = Harness::anthropic(script).await;
    // A large window: only the provider's refusal triggers compaction.
    h.context_window = 1_000_000;
    for i in 0..6 {
        let body: String = (0..300).map(|n| format!("file {i} line {n}\n")).collect();
        std::fs::write(h.root().join(format!("f{i}.txt")), body).unwrap();
    }
    let env = h.env_with(vec![]);
    let mut run = h.submit("read", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished, "{events:#?}");
    assert_eq!(finished(&events).2, "after the emergency");
    let phases: Vec<String> = compactions(&events).into_iter().map(|c| c.0).collect();
    assert_eq!(phases, ["started", "finished"]);
    let requests = h.server.requests();
    let last = requests.last().unwrap();
    assert!(
        last.first_user_text()
            .unwrap()
            .contains("1. Six files read.")
    );
}
