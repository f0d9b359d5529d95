//! Rewinding a session's conversation through the store's public API: the
//! cut keeps the messages up to run N's end byte for byte and the decisions
//! made before it, drops the markers, ledger entries, pending results and
//! task plan made after it, keeps the whole old history in a branch that
//! holds the undone runs, and a refused rewind changes nothing.

use crate::store_support;

use chrono::TimeDelta;
use store_support::{Fixture, ended, message, run};
use troupe_protocol::model::{Message, ToolResult};
use troupe_protocol::task_plan::{StepStatus, TaskPlan, TaskStep};
use troupe_store::{
    CompactionMarker, LedgerEntry, RewindRefusal, RewindRequest, RunRecord, RunState, Store,
    StoreError, layout,
};

/// Every key and value of every tree, to check that nothing changed.
fn snapshot(fixture: &mut Fixture) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    fixture.with_raw(|db| {
        let mut out = Vec::new();
        for name in db.tree_names() {
            let tree = db.open_tree(&name).unwrap();
            for item in tree.iter() {
                let (key, value) = item.unwrap();
                out.push((
                    String::from_utf8_lossy(&name).into_owned(),
                    key.to_vec(),
                    value.to_vec(),
                ));
            }
        }
        out
    })
}

/// The raw bytes of the session's message records `0..len`.
fn raw_messages(fixture: &mut Fixture, session: &str, len: u64) -> Vec<Vec<u8>> {
    let session = session.to_owned();
    fixture.with_raw(move |db| {
        let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
        (0..len)
            .map(|i| {
                tree.get(layout::numbered_key(&session, i))
                    .unwrap()
                    .unwrap()
                    .to_vec()
            })
            .collect()
    })
}

fn marker(first_kept: u64, text: &str) -> CompactionMarker {
    CompactionMarker {
        first_kept,
        summary: vec![Message::user_text(format!("summary: {text}"))],
        created: chrono::Utc::now(),
        before_tokens: 100,
        after_tokens: 10,
    }
}

fn ledger(call: &str) -> LedgerEntry {
    LedgerEntry {
        call_id: call.into(),
        replaced: true,
        spill_path: None,
        original_bytes: 9_000,
    }
}

fn plan(step: &str) -> TaskPlan {
    TaskPlan {
        explanation: None,
        plan: vec![TaskStep::new(step, StepStatus::InProgress)],
    }
}

/// Runs a run of `session` the way the run actor records it: the record
/// with its start, `work` (which writes the run's messages and decisions),
/// then the record's end.
fn recorded_run(fixture: &Fixture, run_id: &str, session: &str, work: impl FnOnce(&Store)) {
    let store = fixture.store();
    fixture.clock.advance(TimeDelta::seconds(10));
    let mut record = run(run_id, session, fixture.clock.now(), RunState::Running);
    record.history = Some(store.run_start_bounds(session).unwrap());
    store.put_run(&record).unwrap();
    work(store);
    let mut record = store.run(run_id).unwrap().unwrap();
    record.status = ended();
    record.history = Some(store.run_end_bounds(session, record.history).unwrap());
    store.put_run(&record).unwrap();
}

fn put_range(store: &Store, session: &str, range: std::ops::Range<u64>) {
    for i in range {
        store.put_message(session, i, &message(i)).unwrap();
    }
}

/// Session `s`: run 1 writes messages 0..4 (a marker from message 2, a
/// ledger entry for call-1, a task plan), run 2 writes 4..10 (a marker from
/// message 3 — a summary of run-1 messages made during run 2 — a ledger
/// entry for call-1 again and one for call-4, a pending result, a new task
/// plan).
fn two_runs(fixture: &Fixture) {
    fixture.session("s");
    recorded_run(fixture, "r1", "s", |store| {
        put_range(store, "s", 0..4);
        store.put_ledger_entry("s", &ledger("call-1")).unwrap();
        store.put_marker("s", &marker(2, "run one")).unwrap();
        store.put_task_plan("s", &plan("first plan")).unwrap();
        store.put_session_memory("s", "memory").unwrap();
    });
    recorded_run(fixture, "r2", "s", |store| {
        put_range(store, "s", 4..10);
        store.put_ledger_entry("s", &ledger("call-4")).unwrap();
        store
            .put_marker("s", &marker(3, "made during run two"))
            .unwrap();
        store
            .put_pending_result("s", &ToolResult::text("call-9", "late", false))
            .unwrap();
        store.put_task_plan("s", &plan("second plan")).unwrap();
    });
}

fn request(to_run: u64) -> RewindRequest {
    RewindRequest {
        session: "s".into(),
        to_run,
        branch_id: "s-branch".into(),
        note: "The conversation was rewound to the end of prompt 1.".into(),
        files_restored: false,
    }
}

fn refusal(error: StoreError) -> RewindRefusal {
    match error {
        StoreError::Rewind(refusal) => refusal,
        other => panic!("not a refusal: {other}"),
    }
}

#[test]
fn runs_record_where_they_begin_and_end_in_the_history() {
    let fixture = Fixture::new();
    two_runs(&fixture);
    let runs = fixture.store().session_runs("s").unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["r1", "r2"]);
    let bounds: Vec<(u64, Option<u64>)> = runs
        .iter()
        .map(|r| {
            let b = r.history.unwrap();
            (b.start, b.end)
        })
        .collect();
    assert_eq!(bounds, [(0, Some(4)), (4, Some(10))]);
    assert!(runs[0].history.unwrap().end_order < runs[1].history.unwrap().end_order);
}

#[test]
fn the_cut_keeps_run_ones_messages_byte_for_byte_and_drops_what_came_after() {
    let mut fixture = Fixture::new();
    two_runs(&fixture);
    let before = raw_messages(&mut fixture, "s", 10);
    let old_history = fixture.store().load_history("s").unwrap();
    let old_markers = fixture.store().markers("s").unwrap();

    let done = fixture.store().rewind_conversation(&request(1)).unwrap();
    assert_eq!(done.cut_len, 4);
    assert_eq!(done.removed_messages, 6);
    assert_eq!(done.undone_runs, ["r2"]);
    assert_eq!(done.removed_markers, 1);
    assert_eq!(done.removed_ledger_entries, 1);
    assert_eq!(done.removed_pending_results, 1);
    assert!(done.removed_task_plan);

    let store = fixture.store();
    let meta = store.session("s").unwrap().unwrap();
    assert_eq!(meta.message_count, 4);
    assert_eq!(store.markers("s").unwrap(), vec![old_markers[0].clone()]);
    let ledger_calls: Vec<String> = store
        .ledger("s")
        .unwrap()
        .into_iter()
        .map(|e| e.call_id)
        .collect();
    assert_eq!(ledger_calls, ["call-1"]);
    assert!(store.pending_results("s").unwrap().is_empty());
    // The plan of the cut's run was replaced during run 2: it goes.
    assert_eq!(store.task_plan("s").unwrap(), None);
    let pending = store.pending_rewind("s").unwrap().unwrap();
    assert_eq!(pending.to_run, 1);
    assert_eq!(pending.branch, "s-branch");
    assert_eq!(pending.removed_messages, 6);
    // The session's runs are run 1 only; run 2 belongs to the branch.
    let runs: Vec<String> = store
        .session_runs("s")
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(runs, ["r1"]);

    // The branch holds the whole old history and its decisions.
    let branch = store.session("s-branch").unwrap().unwrap();
    let branch_of = branch.branch_of.clone().unwrap();
    assert_eq!((branch_of.session.as_str(), branch_of.cut_len), ("s", 4));
    assert_eq!(branch.message_count, 10);
    let branch_history = store.load_history("s-branch").unwrap();
    assert_eq!(branch_history.messages, old_history.messages);
    assert_eq!(store.markers("s-branch").unwrap(), old_markers);
    assert_eq!(store.ledger("s-branch").unwrap().len(), 2);
    assert_eq!(store.pending_results("s-branch").unwrap().len(), 1);
    assert_eq!(
        store.task_plan("s-branch").unwrap(),
        Some(plan("second plan"))
    );
    assert_eq!(
        store.session_memory("s-branch").unwrap().as_deref(),
        Some("memory")
    );
    assert_eq!(store.pending_rewind("s-branch").unwrap(), None);
    let branch_runs: Vec<String> = store
        .session_runs("s-branch")
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(branch_runs, ["r2"]);

    // Byte for byte: the records up to the cut were never rewritten.
    fixture.reopen();
    assert_eq!(raw_messages(&mut fixture, "s", 4), before[..4].to_vec());
    assert_eq!(raw_messages(&mut fixture, "s-branch", 10), before);
    let resumed = fixture.store().load_history("s").unwrap();
    assert_eq!(resumed.next_index, 4);
    assert_eq!(resumed.first_index, 2, "run one's own compaction stays");
}

#[test]
fn a_plan_set_before_the_cut_stays_and_the_note_is_told_once() {
    let fixture = Fixture::new();
    fixture.session("s");
    recorded_run(&fixture, "r1", "s", |store| {
        put_range(store, "s", 0..2);
        store.put_task_plan("s", &plan("kept plan")).unwrap();
    });
    recorded_run(&fixture, "r2", "s", |store| put_range(store, "s", 2..4));
    let done = fixture.store().rewind_conversation(&request(1)).unwrap();
    assert!(!done.removed_task_plan);
    let store = fixture.store();
    assert_eq!(store.task_plan("s").unwrap(), Some(plan("kept plan")));
    // A plain write (a repair) keeps the note; the prompt that tells it
    // clears it in the same write.
    store.put_message("s", 1, &message(1)).unwrap();
    assert!(store.pending_rewind("s").unwrap().is_some());
    let prompt = Message::user_text("go on");
    store
        .put_messages_telling_rewind("s", [(2, &prompt)])
        .unwrap();
    assert_eq!(store.pending_rewind("s").unwrap(), None);
    assert_eq!(store.session("s").unwrap().unwrap().message_count, 3);
}

#[test]
fn refusals_change_nothing() {
    let mut fixture = Fixture::new();
    two_runs(&fixture);
    let before = snapshot(&mut fixture);
    let store = fixture.store();
    let refused = |to| refusal(store.rewind_conversation(&request(to)).unwrap_err());
    assert!(matches!(
        refused(0),
        RewindRefusal::OutOfRange { runs: 2, .. }
    ));
    assert!(matches!(
        refused(99),
        RewindRefusal::OutOfRange { to: 99, .. }
    ));
    assert!(matches!(
        refused(2),
        RewindRefusal::NothingToCut { to: 2, .. }
    ));
    let message = refused(99).to_string();
    assert!(message.contains("runs 1 to 2"), "{message}");
    // A third run in progress: refused, naming it.
    let running = run("r3", "s", fixture.clock.now(), RunState::Running);
    fixture.store().put_run(&running).unwrap();
    let with_running = snapshot(&mut fixture);
    let store = fixture.store();
    let refused = refusal(store.rewind_conversation(&request(1)).unwrap_err());
    assert_eq!(
        refused,
        RewindRefusal::RunInProgress {
            session: "s".into(),
            run_id: "r3".into()
        }
    );
    assert!(refused.to_string().contains("in progress"), "{refused}");
    assert_eq!(snapshot(&mut fixture), with_running);
    // The refusals before it changed nothing either.
    let mut without = with_running.clone();
    without.retain(|(tree, key, _)| !(key.ends_with(b"r3") && tree.contains("run")));
    assert_eq!(without, before);
}

#[test]
fn a_run_of_a_child_session_in_progress_refuses_too() {
    let fixture = Fixture::new();
    two_runs(&fixture);
    fixture.child("sub", "s", "r2");
    let child_run: RunRecord = run("r-sub", "sub", fixture.clock.now(), RunState::Running);
    fixture.store().put_run(&child_run).unwrap();
    let refused = refusal(
        fixture
            .store()
            .rewind_conversation(&request(1))
            .unwrap_err(),
    );
    assert!(
        matches!(&refused, RewindRefusal::RunInProgress { session, run_id } if session == "sub" && run_id == "r-sub"),
        "{refused:?}"
    );
}

#[test]
fn runs_from_before_boundaries_cannot_be_rewound_to_and_old_plans_count_as_later() {
    let mut fixture = Fixture::new();
    fixture.session("s");
    // Run 1 recorded before boundaries were kept.
    let store = fixture.store();
    put_range(store, "s", 0..2);
    store
        .put_run(&run("old", "s", fixture.clock.now(), ended()))
        .unwrap();
    recorded_run(&fixture, "r2", "s", |store| put_range(store, "s", 2..4));
    recorded_run(&fixture, "r3", "s", |store| put_range(store, "s", 4..6));
    let refused = refusal(
        fixture
            .store()
            .rewind_conversation(&request(1))
            .unwrap_err(),
    );
    assert!(matches!(refused, RewindRefusal::NoBoundary { to: 1, .. }));
    // A plan written before plans were stamped reads back, and is judged
    // made after any cut.
    let bare = layout::encode(&plan("unstamped")).unwrap();
    fixture.with_raw(move |db| {
        db.open_tree(layout::TASK_PLANS_TREE)
            .unwrap()
            .insert("s", bare)
            .unwrap();
    });
    assert_eq!(
        fixture.store().task_plan("s").unwrap(),
        Some(plan("unstamped"))
    );
    let done = fixture.store().rewind_conversation(&request(2)).unwrap();
    assert!(done.removed_task_plan);
    assert_eq!(done.cut_len, 4);
}

#[test]
fn the_undone_runs_child_sessions_move_to_the_branch_and_a_fork_reads_its_beginning_there() {
    let fixture = Fixture::new();
    two_runs(&fixture);
    let store = fixture.store();
    // A fork made during run 2 shares the first 6 messages of `s`.
    let mut fork = store_support::new_child_session("fork", "s", "main/fork-1", "r2");
    fork.fork_of = Some(troupe_store::ForkBase {
        session: "s".into(),
        len: 6,
    });
    store.create_session(&fork).unwrap();
    store
        .put_message("fork", 6, &Message::user_text("fork task"))
        .unwrap();
    // A sub-agent of run 1 stays.
    fixture.child("early", "s", "r1");
    let before = store.load_history("fork").unwrap();
    assert!(before.skipped.is_empty());

    let done = fixture.store().rewind_conversation(&request(1)).unwrap();
    assert_eq!(done.moved_children, 1);
    let store = fixture.store();
    let fork = store.session("fork").unwrap().unwrap();
    assert_eq!(fork.parent.as_deref(), Some("s-branch"));
    assert_eq!(fork.fork_of.unwrap().session, "s-branch");
    let after = store.load_history("fork").unwrap();
    assert!(after.skipped.is_empty(), "{:?}", after.skipped);
    assert_eq!(after.messages, before.messages);
    let early = store.session("early").unwrap().unwrap();
    assert_eq!(early.parent.as_deref(), Some("s"));
}
