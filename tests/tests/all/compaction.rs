//! Context compaction through the actors and the real HTTP path, against the
//! scripted model server with a small context window: large results are
//! offloaded once (identical request prefixes turn after turn, decisions kept
//! with the session), a long run crosses the threshold and continues on a
//! summary plus the verbatim tail, and a prompt-too-long answer compacts once
//! and retries.

use serde_json::json;
use troupe_agent::validate_history;
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_protocol::model::{Protocol, Role};
use troupe_scripted::{Fault, Matcher, RecordedRequest, Script, Turn, text, tool_call, tool_calls};
use troupe_tests::{Harness, RunOptions, WAIT, finished, run_events};

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

fn compactions(events: &[troupe_protocol::events::RunEvent]) -> Vec<(String, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction {
                phase,
                before_tokens,
                after_tokens,
                ..
            } => Some((phase.clone(), *before_tokens, *after_tokens)),
            _ => None,
        })
        .collect()
}

/// The `compaction` events as `phase:trigger`.
fn triggers(events: &[troupe_protocol::events::RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction { phase, trigger, .. } => Some(format!("{phase}:{trigger}")),
            _ => None,
        })
        .collect()
}

fn is_summary(request: &RecordedRequest) -> bool {
    request
        .last_user_text()
        .unwrap_or_default()
        .contains("<summary> tags")
}

/// Writes `count` files `f{i}.txt` of `lines` lines (~16 bytes a line).
fn write_files(h: &Harness, count: usize, lines: usize) {
    for i in 0..count {
        let body: String = (0..lines).map(|n| format!("file {i} line {n}\n")).collect();
        std::fs::write(h.root().join(format!("f{i}.txt")), body).unwrap();
    }
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
    long_run_crosses_the_threshold_and_continues_on_a_summary(Protocol::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_a_long_run_crosses_the_threshold_and_continues_on_a_summary() {
    long_run_crosses_the_threshold_and_continues_on_a_summary(Protocol::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_a_long_run_crosses_the_threshold_and_continues_on_a_summary() {
    long_run_crosses_the_threshold_and_continues_on_a_summary(Protocol::OpenAiResponses).await;
}

async fn long_run_crosses_the_threshold_and_continues_on_a_summary(protocol: Protocol) {
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
    let mut h = Harness::start(script, protocol).await;
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
    // Twelve reads: the summary covers the first ones (the tail keeps the
    // last 10,000 tokens), enough to shrink the history by a tenth.
    let mut script = Script::new();
    for i in 0..12 {
        script = script.then(read(&format!("f{i}.txt")));
    }
    let script = script
        .then(Turn::new(Fault::prompt_too_long(250_000, 200_000)).when(not_summary()))
        .when(
            summary_request(),
            text("<summary>1. Twelve files read.</summary>"),
        )
        .then(Turn::new(text("after the emergency")).when(not_summary()));
    let mut h = Harness::anthropic(script).await;
    // A large window: only the provider's refusal triggers compaction.
    h.context_window = 1_000_000;
    for i in 0..12 {
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
            .contains("1. Twelve files read.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_prepared_ahead_is_swapped_in_with_no_summary_request_on_the_agents_path() {
    // Window 150,000: summaries from 117,000 tokens, prepared from 81,900;
    // each read adds about 5,500.
    let not_swapped = || {
        not_summary().and(Matcher::predicate(
            "not compacted",
            |r: &RecordedRequest| !r.any_user_text_contains("PREPARED AHEAD"),
        ))
    };
    let mut script = Script::new();
    for i in 0..20 {
        script = script.then(
            Turn::new(tool_call(
                "read_file",
                json!({ "path": format!("f{i}.txt") }),
            ))
            .when(not_swapped()),
        );
    }
    // One summary answer only: a second summary request would find none.
    let script = script
        .when(
            summary_request(),
            text("<summary>1. PREPARED AHEAD</summary>"),
        )
        .then(
            Turn::new(text("all read"))
                .when(not_summary().and(Matcher::any_user_contains("PREPARED AHEAD"))),
        );
    let mut h = Harness::anthropic(script).await;
    h.context_window = 150_000;
    h.work_ahead = true;
    write_files(&h, 40, 1_200);
    let env = h.env_with(vec![]);
    let mut run = h.submit("read them all", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let requests = h.server.requests();
    let shape: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}",
                is_summary(r),
                r.messages().len(),
                r.any_user_text_contains("PREPARED AHEAD")
            )
        })
        .collect();
    assert_eq!(
        finished(&events).0,
        RunStatus::Finished,
        "{:?} {shape:?}",
        troupe_tests::types(&events)
    );
    assert_eq!(finished(&events).2, "all read");
    assert_eq!(triggers(&events), ["started:auto", "finished:auto"]);
    let requests = h.server.requests();
    let summaries: Vec<usize> = (0..requests.len())
        .filter(|&i| is_summary(&requests[i]))
        .collect();
    assert_eq!(summaries.len(), 1, "exactly one summary request");
    let swapped = requests
        .iter()
        .position(|r| r.any_user_text_contains("PREPARED AHEAD"))
        .expect("a request carries the summary");
    // The summary was asked for turns before the threshold was crossed, and
    // the agent's requests went on meanwhile: none was on the agent's path.
    assert!(summaries[0] + 2 < swapped, "{summaries:?} {swapped}");
    assert!(!is_summary(&requests[swapped - 1]));
    assert!(requests[summaries[0]].tool_names().is_empty());
    assert!(
        h.server.violations().is_empty(),
        "{:?}",
        h.server.violations()
    );
    let stored = h.store.load_history(&run.session_id).unwrap();
    assert!(stored.messages[0].text().contains("PREPARED AHEAD"));
    validate_history(&stored.messages).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_prepared_for_a_prefix_another_compaction_replaced_is_never_swapped_in() {
    const READS: usize = 13;
    // Window 150,000: the summary is prepared from 81,900 tokens (about the
    // fifteenth read); the provider then refuses a request as too long, well
    // before the threshold: the emergency summary replaces the prefix the
    // prepared one was made for.
    let fresh = || {
        not_summary().and(Matcher::predicate(
            "not compacted",
            |r: &RecordedRequest| !r.any_user_text_contains("EMERGENCY"),
        ))
    };
    let mut script = Script::new();
    for i in 0..READS {
        script = script.then(
            Turn::new(tool_call(
                "read_file",
                json!({ "path": format!("f{i}.txt") }),
            ))
            .when(fresh()),
        );
    }
    let script = script
        .when(
            summary_request(),
            text("<summary>1. PREPARED AHEAD</summary>"),
        )
        .then(Turn::new(Fault::prompt_too_long(170_000, 150_000)).when(fresh()))
        .when(summary_request(), text("<summary>1. EMERGENCY</summary>"))
        .then(
            Turn::new(text("done"))
                .when(not_summary().and(Matcher::any_user_contains("EMERGENCY"))),
        );
    let mut h = Harness::anthropic(script).await;
    h.context_window = 150_000;
    h.work_ahead = true;
    write_files(&h, READS, 1_200);
    let env = h.env_with(vec![]);
    let mut run = h.submit("read them all", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    let shape: Vec<String> = h
        .server
        .requests()
        .iter()
        .map(|r| format!("{}:{}", is_summary(r), r.messages().len()))
        .collect();
    assert_eq!(
        finished(&events).0,
        RunStatus::Finished,
        "{shape:?} {events:#?}"
    );
    assert_eq!(finished(&events).2, "done");
    assert_eq!(
        triggers(&events),
        ["started:emergency", "finished:emergency"]
    );
    let requests = h.server.requests();
    let summaries: Vec<usize> = (0..requests.len())
        .filter(|&i| is_summary(&requests[i]))
        .collect();
    // The prepared one, then the emergency one after the refused request.
    assert_eq!(summaries.len(), 2, "{summaries:?}");
    assert!(summaries[0] + 1 < summaries[1], "{summaries:?}");
    assert!(!is_summary(&requests[summaries[1] - 1]));
    assert!(
        requests
            .iter()
            .filter(|r| !is_summary(r))
            .all(|r| !r.any_user_text_contains("PREPARED AHEAD")),
        "the stale summary never reaches the agent's requests"
    );
    assert!(requests.last().unwrap().any_user_text_contains("EMERGENCY"));
}

/// A first run that reads `files` files of ~9.6 KB with no compaction (window
/// 0); returns the session id.
async fn stored_session(h: &mut Harness, files: usize) -> String {
    let window = std::mem::replace(&mut h.context_window, 0);
    let env = h.env_with(vec![]);
    let mut run = h.submit("read them all", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).0, RunStatus::Finished, "{events:#?}");
    assert!(triggers(&events).is_empty());
    h.context_window = window;
    assert_eq!(h.server.request_count(), files + 1);
    run.session_id
}

fn reads_then(files: usize, last: &str) -> Script {
    let mut script = Script::new();
    for i in 0..files {
        script = script.then(read(&format!("f{i}.txt")));
    }
    script.then(Turn::new(text(last)).when(not_summary()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_compaction_summarises_a_stored_session_and_the_next_run_continues_from_it() {
    let script = reads_then(6, "all read")
        .when(
            summary_request(),
            text("<summary>1. MANUAL SUMMARY</summary>"),
        )
        .then(Turn::new(text("continued")).when(Matcher::any_user_contains("MANUAL SUMMARY")));
    let mut h = Harness::anthropic(script).await;
    h.context_window = 200_000;
    write_files(&h, 6, 600);
    let session = stored_session(&mut h, 6).await;
    let before = h.history(&session).await.len();
    let mut run = h
        .compact(&session, h.env_with(vec![]))
        .await
        .expect("compaction starts");
    assert_eq!(run.session_id, session);
    let events = run_events(&mut run).await;
    let (status, reason, text) = finished(&events);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Finished, "compacted"),
        "{events:#?}"
    );
    assert!(text.starts_with("Compacted the conversation"), "{text}");
    assert_eq!(triggers(&events), ["started:manual", "finished:manual"]);
    let (_, before_tokens, after_tokens) = compactions(&events)[1];
    assert!(
        after_tokens < before_tokens,
        "{before_tokens} → {after_tokens}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Iteration { .. })),
        "no model turn"
    );
    let requests = h.server.requests();
    assert_eq!(requests.len(), 8);
    assert!(is_summary(&requests[7]) && requests[7].tool_names().is_empty());
    // Kept with the session: the next run starts from the summary.
    let history = h.history(&session).await;
    assert!(history.len() < before);
    assert!(history[0].text().contains("MANUAL SUMMARY"));
    let stored = h.store.load_history(&session).unwrap();
    assert_eq!(stored.messages, history);
    let mut options = RunOptions::bypass(h.env_with(vec![]));
    options.session_id = Some(session.clone());
    let mut next = h.submit("and now?", options).await;
    let events = run_events(&mut next).await;
    assert_eq!(finished(&events).2, "continued");
    let last = h.server.requests().pop().unwrap();
    assert!(last.first_user_text().unwrap().contains("MANUAL SUMMARY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_compaction_is_refused_for_a_busy_or_short_session() {
    let script = Script::new()
        .then(text("short answer"))
        .then(Turn::new(text("slow")).with_delay(std::time::Duration::from_secs(60)));
    let mut h = Harness::anthropic(script).await;
    h.context_window = 200_000;
    let env = h.env_with(vec![]);
    let mut run = h.submit("hi", RunOptions::bypass(env.clone())).await;
    run_events(&mut run).await;
    let session = run.session_id.clone();
    let refused = h
        .compact(&session, env.clone())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(refused, troupe_actors::RuntimeError::NothingToCompact(_)),
        "{refused}"
    );
    assert!(refused.to_string().contains("too short to compact"));
    // The session is untouched and can go on; while it runs, it is busy.
    let mut options = RunOptions::bypass(env.clone());
    options.session_id = Some(session.clone());
    let busy_run = h.submit("again", options).await;
    h.server.wait_for_requests(2, WAIT).await.unwrap();
    let refused = h.compact(&session, env).await.err().expect("refused");
    assert!(
        matches!(refused, troupe_actors::RuntimeError::SessionBusy(_)),
        "{refused}"
    );
    h.runtime.cancel(&busy_run.run_id).await.unwrap();
    let mut busy_run = busy_run;
    assert_eq!(
        finished(&run_events(&mut busy_run).await).0,
        RunStatus::Cancelled
    );
    assert_eq!(h.server.request_count(), 2, "no summary was asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_continued_near_the_window_is_compacted_before_its_first_request() {
    // ~11 reads of ~9.6 KB: about 33,000 tokens, above 40,000 − 8,000.
    let script = reads_then(11, "all read")
        .when(
            summary_request(),
            text("<summary>1. RESUME SUMMARY</summary>"),
        )
        .then(Turn::new(text("continued")).when(Matcher::any_user_contains("RESUME SUMMARY")));
    let mut h = Harness::anthropic(script).await;
    h.context_window = 40_000;
    write_files(&h, 11, 600);
    let session = stored_session(&mut h, 11).await;
    let mut options = RunOptions::bypass(h.env_with(vec![]));
    options.session_id = Some(session.clone());
    let mut run = h.submit("go on", options).await;
    let events = run_events(&mut run).await;
    assert_eq!(finished(&events).2, "continued", "{events:#?}");
    assert_eq!(triggers(&events), ["started:resume", "finished:resume"]);
    // The summary came before the run's first iteration and first request.
    let kinds = troupe_tests::types(&events);
    let finished_at = kinds.iter().position(|k| *k == "compaction").unwrap() + 1;
    let first_iteration = kinds.iter().position(|k| *k == "iteration").unwrap();
    assert!(finished_at < first_iteration, "{kinds:?}");
    let requests = h.server.requests();
    assert!(is_summary(&requests[12]), "the new run's first request");
    assert!(
        requests[13]
            .first_user_text()
            .unwrap()
            .contains("RESUME SUMMARY")
    );
    assert!(requests[13].any_user_text_contains("go on"));
    assert_eq!(requests.len(), 14);
}

/// Answers through the scripted provider, but panics when asked for a
/// summary (a request without tools): a bug in provider code.
struct PanicsOnSummary(std::sync::Arc<dyn troupe_llm::Provider>);

impl troupe_llm::Provider for PanicsOnSummary {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn system(&self) -> &'static str {
        self.0.system()
    }
    fn model(&self) -> &str {
        self.0.model()
    }
    fn stream(&self, request: &troupe_llm::ChatRequest) -> troupe_llm::EventStream {
        assert!(
            !request.tools.is_empty(),
            "a provider bug while summarising"
        );
        self.0.stream(request)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_that_panics_is_a_failed_compaction_and_the_agent_goes_on() {
    const FILES: usize = 10;
    let mut script = Script::new();
    for i in 0..FILES {
        script = script.then(read(&format!("f{i}.txt")));
    }
    let script = script.then(Turn::new(text("all read")).when(not_summary()));
    let mut h = Harness::anthropic(script).await;
    // Window 60,000: summaries from 27,000 tokens.
    h.context_window = 60_000;
    write_files(&h, FILES, 600);
    let env = h.env_with_provider(std::sync::Arc::new(PanicsOnSummary(h.provider())));
    let mut run = h.submit("read them all", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    // The panic stayed in the session's compactor: the agent lived, counted
    // a failed compaction and finished its work.
    assert_eq!(finished(&events).0, RunStatus::Finished, "{events:#?}");
    assert_eq!(finished(&events).2, "all read");
    let phases: Vec<String> = compactions(&events).into_iter().map(|c| c.0).collect();
    assert!(phases.contains(&"failed".to_string()), "{phases:?}");
    assert!(h.server.requests().iter().all(|r| !is_summary(r)));
    validate_history(&h.history(&run.session_id).await).unwrap();
}
