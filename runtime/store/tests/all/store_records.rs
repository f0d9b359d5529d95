//! The session store's records through its public API: round trips of every
//! record type, message order across key-byte boundaries, titles, listing,
//! removal (ids that prefix each other), markers, pending results, runs,
//! events, export, truncation, the age-based cleanup, and child sessions
//! (finding them, removing them with their parent, keeping them with it).

use crate::store_support;

use std::collections::HashSet;
use std::path::PathBuf;

use chrono::TimeDelta;
use serde_json::json;
use store_support::{
    Fixture, all_keys, ended, event, message, new_child_session, new_session, run,
};
use troupe_protocol::events::EventKind;
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{ContentBlock, Message, Role, ToolOutputPart, ToolResult};
use troupe_protocol::permission::{RuleEntry, RuleSource};
use troupe_store::{
    CompactionMarker, LedgerEntry, Retention, RunState, SESSION_MAX_AGE, SPACE_TARGET_PERCENT,
    Store, StoreError, TITLE_MAX_CHARS, layout,
};

mod store {
    use super::*;

    fn marker(first_kept: u64, text: &str, fixture: &Fixture) -> CompactionMarker {
        CompactionMarker {
            first_kept,
            summary: vec![
                Message::user_text(format!("summary: {text}")),
                Message::assistant_text("understood"),
            ],
            created: fixture.clock.now(),
            before_tokens: 150_000,
            after_tokens: 20_000,
        }
    }

    fn fill(fixture: &Fixture, session: &str, count: u64) {
        for i in 0..count {
            fixture
                .store()
                .put_message(session, i, &message(i))
                .unwrap();
        }
    }

    #[test]
    fn every_record_type_round_trips_and_survives_reopen() {
        let mut f = Fixture::new();
        let meta = f
            .store()
            .create_session(&new_session("s1", Some("parent")))
            .unwrap();
        assert_eq!(meta.id, "s1");
        assert_eq!(meta.parent.as_deref(), Some("parent"));
        assert_eq!(meta.message_count, 0);
        assert_eq!(meta.title, "");
        assert_eq!(meta.created, f.clock.now());

        let image = Message {
            role: Role::User,
            content: vec![
                ContentBlock::Text {
                    text: "look at this".into(),
                },
                ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            ],
        };
        let redacted = Message {
            role: Role::Assistant,
            content: vec![ContentBlock::RedactedThinking {
                data: "opaque".into(),
            }],
        };
        let messages = vec![image, message(1), message(2), redacted];
        for (i, m) in messages.iter().enumerate() {
            f.store().put_message("s1", i as u64, m).unwrap();
        }

        let pending = ToolResult {
            call_id: "call-9".into(),
            content: vec![
                ToolOutputPart::Text { text: "out".into() },
                ToolOutputPart::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            ],
            is_error: true,
        };
        f.store().put_pending_result("s1", &pending).unwrap();
        let mark = marker(2, "old part", &f);
        f.store().put_marker("s1", &mark).unwrap();
        let entry = LedgerEntry {
            call_id: "call-1".into(),
            replaced: true,
            spill_path: Some(PathBuf::from("/data/spill/call-1")),
            original_bytes: 80_000,
        };
        f.store().put_ledger_entry("s1", &entry).unwrap();
        let rules = vec![RuleEntry {
            rule: "Bash(cargo test*)".into(),
            source: RuleSource::Session,
        }];
        f.store().put_session_rules("s1", &rules).unwrap();
        assert_eq!(f.store().session_memory("s1").unwrap(), None);
        f.store().put_session_memory("s1", "- use pnpm\n").unwrap();
        assert_eq!(f.store().task_plan("s1").unwrap(), None);
        let plan = troupe_protocol::task_plan::TaskPlan::from_arguments(
            r#"{"explanation":"why","plan":[{"step":"a","status":"in_progress"}]}"#,
        )
        .unwrap();
        f.store().put_task_plan("s1", &plan).unwrap();
        assert!(f.store().put_task_plan("nope", &plan).is_err());
        let started = f.clock.now();
        let record = run("r1", "s1", started, RunState::Running);
        f.store().put_run(&record).unwrap();
        let events: Vec<_> = (1..=3).map(|seq| event("r1", "s1", seq)).collect();
        for e in &events {
            f.store().append_event(e).unwrap();
        }
        let span = json!({"name": "chat claude", "attributes": {"gen_ai.usage.input_tokens": 12}});
        f.store().put_span("r1", "span-a", &span).unwrap();
        f.store().flush().unwrap();

        f.reopen();
        let s = f.store();
        let meta = s.session("s1").unwrap().unwrap();
        assert_eq!(meta.message_count, 4);
        assert_eq!(meta.title, "look at this");
        assert_eq!(s.export_jsonl("s1", &mut Vec::new()).unwrap(), 4);
        let mut out = Vec::new();
        s.export_jsonl("s1", &mut out).unwrap();
        let exported: Vec<Message> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(exported, messages);
        assert_eq!(s.pending_results("s1").unwrap(), vec![pending]);
        assert_eq!(s.markers("s1").unwrap(), vec![mark]);
        assert_eq!(s.ledger("s1").unwrap(), vec![entry]);
        assert_eq!(s.session_rules("s1").unwrap(), rules);
        assert_eq!(
            s.session_memory("s1").unwrap().as_deref(),
            Some("- use pnpm\n")
        );
        assert_eq!(s.task_plan("s1").unwrap(), Some(plan));
        assert_eq!(s.run("r1").unwrap(), Some(record));
        assert_eq!(s.events("r1", 0).unwrap(), events);
        assert_eq!(s.spans("r1").unwrap(), vec![span]);
    }

    #[test]
    fn messages_stay_in_order_past_255_and_65535() {
        let f = Fixture::new();
        f.session("s");
        fill(&f, "s", 300);
        let high: Vec<u64> = (65_530..65_542).chain([1 << 32, (1 << 32) + 1]).collect();
        // Written out of order on purpose.
        for &i in high.iter().rev() {
            f.store().put_message("s", i, &message(i)).unwrap();
        }

        let mut out = Vec::new();
        let lines = f.store().export_jsonl("s", &mut out).unwrap();
        assert_eq!(lines, 300 + high.len() as u64);
        let exported: Vec<Message> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let expected: Vec<Message> = (0..300).chain(high.iter().copied()).map(message).collect();
        assert_eq!(exported, expected);

        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.messages, expected);
        assert_eq!(history.next_index, (1 << 32) + 2);
        let gaps: Vec<u64> = history.skipped.iter().map(|s| s.index).collect();
        assert_eq!(gaps, vec![300, 65_542], "{:?}", history.skipped);

        // From a marker inside the high range: no gap, exact order.
        f.store()
            .put_marker("s", &marker(65_530, "all before", &f))
            .unwrap();
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.first_index, 65_530);
        assert_eq!(history.summary_len, 2);
        let kept: Vec<Message> = high.iter().copied().map(message).collect();
        assert_eq!(history.messages[2..], kept[..]);
        assert_eq!(history.skipped.len(), 1, "only the gap before 1<<32");
    }

    #[test]
    fn title_is_the_first_user_message_cut_on_characters() {
        let f = Fixture::new();
        f.session("emoji");
        let text = format!("  {}\n\n{}", "🚀é".repeat(20), "漢字".repeat(20));
        f.store()
            .put_message("emoji", 0, &Message::user_text(&text))
            .unwrap();
        f.store()
            .put_message("emoji", 2, &Message::user_text("later"))
            .unwrap();
        let title = f.store().session("emoji").unwrap().unwrap().title;
        assert_eq!(title.chars().count(), TITLE_MAX_CHARS);
        let expected: String = format!("{} {}", "🚀é".repeat(20), "漢字".repeat(20))
            .chars()
            .take(TITLE_MAX_CHARS)
            .collect();
        assert_eq!(title, expected);

        f.session("short");
        f.store()
            .put_message("short", 0, &Message::assistant_text("hello"))
            .unwrap();
        f.store()
            .put_message("short", 1, &Message::user_text("fix\tthe   bug"))
            .unwrap();
        let listed = f.store().list_sessions().unwrap();
        let short = listed.iter().find(|m| m.id == "short").unwrap();
        assert_eq!(short.title, "fix the bug");
    }

    #[test]
    fn listing_is_newest_first_and_reads_no_histories() {
        let mut f = Fixture::new();
        for id in ["a", "b", "c"] {
            f.session(id);
            f.clock.advance(TimeDelta::minutes(1));
        }
        f.store()
            .put_message("a", 0, &Message::user_text("a first"))
            .unwrap();
        let a_updated = f.clock.now();
        f.clock.advance(TimeDelta::minutes(1));
        fill(&f, "b", 3);
        let ids: Vec<String> = f
            .store()
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, vec!["b", "a", "c"]);

        // Wreck every message of b: listing is unchanged, loading reports it.
        f.with_raw(|db| {
            let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
            for i in 0..3 {
                tree.insert(layout::numbered_key("b", i), &b"\x00\x01garbage"[..])
                    .unwrap();
            }
        });
        let listed = f.store().list_sessions().unwrap();
        let ids: Vec<&str> = listed.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, vec!["b", "a", "c"]);
        let b = &listed[0];
        assert_eq!(b.message_count, 3);
        assert_eq!(b.title, "user message 0");
        assert_eq!(listed[1].updated, a_updated);
        let history = f.store().load_history("b").unwrap();
        assert!(history.messages.is_empty());
        assert_eq!(history.skipped.len(), 3);
    }

    #[test]
    fn remove_session_takes_everything_of_it_and_nothing_else() {
        let mut f = Fixture::new();
        let ids = ["s", "s1", "s10", "s1x"];
        for (n, id) in ids.iter().enumerate() {
            f.session(id);
            fill(&f, id, 4);
            f.store()
                .put_pending_result(id, &ToolResult::text("c", "r", false))
                .unwrap();
            f.store().put_marker(id, &marker(2, id, &f)).unwrap();
            f.store()
                .put_ledger_entry(
                    id,
                    &LedgerEntry {
                        call_id: "c".into(),
                        replaced: false,
                        spill_path: None,
                        original_bytes: 10,
                    },
                )
                .unwrap();
            f.store()
                .put_session_rules(
                    id,
                    &[RuleEntry {
                        rule: "Read(*)".into(),
                        source: RuleSource::Session,
                    }],
                )
                .unwrap();
            f.store().put_session_memory(id, "- fact\n").unwrap();
            f.store()
                .put_task_plan(id, &troupe_protocol::task_plan::TaskPlan::default())
                .unwrap();
            // Run ids that prefix each other too: r, r1, r10, r1x.
            let run_id = format!("r{}", &id[1..]);
            f.store()
                .put_run(&run(&run_id, id, f.clock.now(), ended()))
                .unwrap();
            for seq in 1..=3 {
                f.store().append_event(&event(&run_id, id, seq)).unwrap();
            }
            f.store().put_span(&run_id, "sp", &json!({"n": n})).unwrap();
        }
        f.store().flush().unwrap();
        let before = f.with_raw(|db| all_keys(db).len());

        assert_eq!(f.store().remove_session("s1").unwrap(), ["s1"]);
        assert!(
            f.store().remove_session("s1").unwrap().is_empty(),
            "nothing left the second time"
        );
        assert!(f.store().session("s1").unwrap().is_none());
        assert!(matches!(
            f.store().load_history("s1"),
            Err(StoreError::NotFound { .. })
        ));
        assert!(f.store().run("r1").unwrap().is_none());
        assert!(f.store().events("r1", 0).unwrap().is_empty());
        assert!(f.store().spans("r1").unwrap().is_empty());
        assert!(f.store().list_runs(Some("s1")).unwrap().is_empty());

        for id in ["s", "s10", "s1x"] {
            let run_id = format!("r{}", &id[1..]);
            let history = f.store().load_history(id).unwrap();
            assert_eq!(history.messages.len(), 2 + 2, "{id}: summary + 2 kept");
            assert_eq!(f.store().pending_results(id).unwrap().len(), 1);
            assert_eq!(f.store().ledger(id).unwrap().len(), 1);
            assert_eq!(f.store().session_rules(id).unwrap().len(), 1);
            assert!(f.store().session_memory(id).unwrap().is_some());
            assert!(f.store().task_plan(id).unwrap().is_some());
            assert_eq!(f.store().events(&run_id, 0).unwrap().len(), 3);
            assert_eq!(f.store().spans(&run_id).unwrap().len(), 1);
            assert_eq!(f.store().list_runs(Some(id)).unwrap().len(), 1);
        }

        // Exactly the removed session's records are gone from the raw trees:
        // meta, head, 4 messages, pending, marker, ledger, rules, memory,
        // run, run index, 3 events, span.
        let keys = f.with_raw(all_keys);
        assert_eq!(
            before - keys.len(),
            1 + 1 + 4 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 3 + 1
        );
        for (tree, key) in &keys {
            let owned_by_s1 = key.as_slice() == b"s1" || key.starts_with(b"s1\0");
            let owned_by_r1 = key.as_slice() == b"r1" || key.starts_with(b"r1\0");
            assert!(!owned_by_s1 && !owned_by_r1, "{tree}: {key:?} survived");
        }
    }

    #[test]
    fn load_history_starts_at_the_last_marker() {
        let f = Fixture::new();
        f.session("s");
        fill(&f, "s", 20);
        f.store().put_marker("s", &marker(5, "first", &f)).unwrap();
        f.clock.advance(TimeDelta::seconds(1));
        f.store()
            .put_marker("s", &marker(12, "second", &f))
            .unwrap();

        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.summary_len, 2);
        assert_eq!(history.messages[0].text(), "summary: second");
        assert_eq!(history.first_index, 12);
        assert_eq!(history.messages.len(), 2 + 8);
        assert_eq!(history.messages[2], message(12));
        assert_eq!(history.messages[9], message(19));
        assert_eq!(history.next_index, 20);
        assert!(history.skipped.is_empty());
        assert!(history.skipped_markers.is_empty());
        assert_eq!(
            history.last_updated,
            Some(f.store().session("s").unwrap().unwrap().updated)
        );

        let markers = f.store().markers("s").unwrap();
        let kept: Vec<u64> = markers.iter().map(|m| m.first_kept).collect();
        assert_eq!(kept, vec![5, 12]);
        // Export still has every message, compacted ones included.
        assert_eq!(f.store().export_jsonl("s", &mut Vec::new()).unwrap(), 20);
    }

    #[test]
    fn pending_results_keep_arrival_order_and_clear_per_session() {
        let f = Fixture::new();
        f.session("s");
        f.session("s2");
        for call in ["zeta", "alpha", "mid"] {
            f.store()
                .put_pending_result("s", &ToolResult::text(call, format!("{call} out"), false))
                .unwrap();
        }
        f.store()
            .put_pending_result("s2", &ToolResult::text("other", "x", false))
            .unwrap();
        // The same call id again replaces the first result.
        f.store()
            .put_pending_result("s", &ToolResult::text("alpha", "alpha again", true))
            .unwrap();
        let pending = f.store().pending_results("s").unwrap();
        let calls: Vec<&str> = pending.iter().map(|r| r.call_id.as_str()).collect();
        assert_eq!(calls, vec!["zeta", "mid", "alpha"]);
        assert_eq!(pending[2].joined_text(), "alpha again");
        assert!(pending[2].is_error);

        f.store().clear_pending_results("s").unwrap();
        assert!(f.store().pending_results("s").unwrap().is_empty());
        assert_eq!(f.store().pending_results("s2").unwrap().len(), 1);
    }

    #[test]
    fn runs_list_newest_first_and_unfinished_ones_are_found() {
        let f = Fixture::new();
        f.session("s");
        f.session("t");
        let t0 = f.clock.now();
        f.store().put_run(&run("r-old", "s", t0, ended())).unwrap();
        f.store()
            .put_run(&run(
                "r-mid",
                "t",
                t0 + TimeDelta::seconds(1),
                RunState::Running,
            ))
            .unwrap();
        f.store()
            .put_run(&run(
                "r-new",
                "s",
                t0 + TimeDelta::seconds(2),
                RunState::Running,
            ))
            .unwrap();

        let all: Vec<String> = f
            .store()
            .list_runs(None)
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(all, vec!["r-new", "r-mid", "r-old"]);
        let of_s: Vec<String> = f
            .store()
            .list_runs(Some("s"))
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(of_s, vec!["r-new", "r-old"]);
        let unfinished: Vec<String> = f
            .store()
            .unfinished_runs()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(unfinished, vec!["r-new", "r-mid"]);

        // Marking one interrupted (what a restart does) takes it off the list.
        let mut interrupted = f.store().run("r-mid").unwrap().unwrap();
        interrupted.status = RunState::Ended(RunStatus::Interrupted);
        interrupted.ended = Some(f.clock.now());
        f.store().put_run(&interrupted).unwrap();
        let unfinished: Vec<String> = f
            .store()
            .unfinished_runs()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(unfinished, vec!["r-new"]);
        assert_eq!(f.store().run("r-mid").unwrap(), Some(interrupted));

        // A run moved to another session is indexed there only.
        let mut moved = f.store().run("r-old").unwrap().unwrap();
        moved.session_id = "t".into();
        f.store().put_run(&moved).unwrap();
        assert_eq!(f.store().list_runs(Some("s")).unwrap().len(), 1);
        assert_eq!(f.store().list_runs(Some("t")).unwrap().len(), 2);

        let orphan = run("r-x", "missing", t0, ended());
        assert!(matches!(
            f.store().put_run(&orphan),
            Err(StoreError::NotFound { .. })
        ));
        assert!(f.store().run("nope").unwrap().is_none());
    }

    #[test]
    fn events_are_read_from_a_sequence_number_in_order() {
        let f = Fixture::new();
        // Written out of order, with a neighbour run whose id extends this one.
        for seq in (1..=300).rev() {
            f.store().append_event(&event("run", "s", seq)).unwrap();
        }
        f.store().append_event(&event("run2", "s", 1)).unwrap();
        let all = f.store().events("run", 0).unwrap();
        assert_eq!(all.len(), 300);
        assert!(all.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
        let tail = f.store().events("run", 257).unwrap();
        let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (257..=300).collect::<Vec<_>>());
        assert!(f.store().events("run", 301).unwrap().is_empty());
        assert_eq!(f.store().events("run2", 1).unwrap().len(), 1);
        assert_eq!(tail[0], event("run", "s", 257));
        // Pages stop at their limit and never cross into the neighbour run.
        let page = f.store().events_page("run", 255, 4).unwrap();
        let seqs: Vec<u64> = page.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![255, 256, 257, 258]);
        assert_eq!(f.store().events_page("run", 299, 10).unwrap().len(), 2);
        assert!(f.store().events_page("run", 1, 0).unwrap().is_empty());
    }

    #[test]
    fn spans_are_kept_per_run() {
        let f = Fixture::new();
        f.store().put_span("r", "b", &json!({"id": "b"})).unwrap();
        f.store().put_span("r", "a", &json!({"id": "a"})).unwrap();
        f.store()
            .put_span("r", "a", &json!({"id": "a", "v": 2}))
            .unwrap();
        f.store()
            .put_span("rr", "a", &json!({"other": true}))
            .unwrap();
        assert_eq!(
            f.store().spans("r").unwrap(),
            vec![json!({"id": "a", "v": 2}), json!({"id": "b"})]
        );
    }

    #[test]
    fn truncate_history_drops_a_tail_and_lowers_the_count() {
        let f = Fixture::new();
        f.session("s");
        fill(&f, "s", 6);
        assert_eq!(f.store().truncate_history("s", 4).unwrap(), 2);
        let meta = f.store().session("s").unwrap().unwrap();
        assert_eq!(meta.message_count, 4);
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.messages, (0..4).map(message).collect::<Vec<_>>());
        assert_eq!(history.next_index, 4);
        assert!(history.skipped.is_empty());
        assert_eq!(f.store().truncate_history("s", 10).unwrap(), 0);
        assert!(matches!(
            f.store().truncate_history("x", 0),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn cleanup_removes_old_sessions_and_keeps_in_use_recent_and_running_ones() {
        let f = Fixture::new();
        for id in ["old", "old-in-use", "old-running", "old-child"] {
            f.store()
                .create_session(&new_session(
                    id,
                    (id == "old-child").then_some("old-in-use"),
                ))
                .unwrap();
            fill(&f, id, 2);
        }
        f.store()
            .put_run(&run("r", "old-running", f.clock.now(), RunState::Running))
            .unwrap();
        f.store()
            .put_run(&run("r-old", "old", f.clock.now(), ended()))
            .unwrap();
        f.store().append_event(&event("r-old", "old", 1)).unwrap();
        f.clock.advance(TimeDelta::days(20));
        f.session("recent");
        let now = f.clock.now() + TimeDelta::days(15);

        let in_use: HashSet<String> = ["old-in-use".to_owned()].into();
        let removed = f
            .store()
            .remove_sessions_older_than(SESSION_MAX_AGE, now, &in_use)
            .unwrap();
        assert_eq!(removed, vec!["old"]);
        let left = listed_ids(f.store());
        let expected: HashSet<String> = ["old-in-use", "old-running", "old-child", "recent"]
            .map(String::from)
            .into();
        assert_eq!(left, expected);
        assert!(f.store().run("r-old").unwrap().is_none());
        assert!(f.store().events("r-old", 0).unwrap().is_empty());

        // Once nothing holds them, the old ones go too; a huge age removes nothing.
        let removed = f
            .store()
            .remove_sessions_older_than(std::time::Duration::MAX, now, &HashSet::new())
            .unwrap();
        assert!(removed.is_empty());
        let removed = f
            .store()
            .remove_sessions_older_than(SESSION_MAX_AGE, now, &HashSet::new())
            .unwrap();
        assert_eq!(removed, vec!["old-child", "old-in-use"]);
    }

    #[test]
    fn missing_and_duplicate_sessions_are_clear_errors() {
        let f = Fixture::new();
        f.session("s");
        let err = f
            .store()
            .create_session(&new_session("s", None))
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
        assert!(err.to_string().contains("\"s\""), "{err}");
        let err = f.store().put_message("nope", 0, &message(0)).unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
        assert!(f.store().session("nope").unwrap().is_none());
        for result in [
            f.store().pending_results("nope").map(|_| ()),
            f.store().markers("nope").map(|_| ()),
            f.store().ledger("nope").map(|_| ()),
            f.store().session_rules("nope").map(|_| ()),
            f.store().export_jsonl("nope", &mut Vec::new()).map(|_| ()),
        ] {
            assert!(matches!(result, Err(StoreError::NotFound { .. })));
        }
        assert!(f.store().session_rules("s").unwrap().is_empty());
        assert!(f.store().remove_session("nope").unwrap().is_empty());
    }

    #[test]
    fn clones_share_one_database() {
        let f = Fixture::new();
        let clone: Store = f.store().clone();
        clone
            .create_session(&new_session("via-clone", None))
            .unwrap();
        assert!(f.store().session("via-clone").unwrap().is_some());
        assert_eq!(clone.path(), f.data_dir().join(layout::DB_DIR_NAME));
    }

    fn ids(sessions: &[troupe_store::SessionMeta]) -> Vec<&str> {
        sessions.iter().map(|meta| meta.id.as_str()).collect()
    }

    /// `top` (run `r`) with children `c1`, `c2`, a grandchild `g` under
    /// `c1` and a great-grandchild `gg`; `other` with its own child `oc`.
    fn family(f: &Fixture) {
        f.session("top");
        f.session("other");
        f.child("c1", "top", "r");
        f.child("oc", "other", "r-other");
        f.child("g", "c1", "r");
        f.child("c2", "top", "r");
        f.child("gg", "g", "r");
        for id in ["top", "other", "c1", "oc", "g", "c2", "gg"] {
            fill(f, id, 3);
        }
    }

    #[test]
    fn child_sessions_keep_their_links_and_are_found_without_histories() {
        let mut f = Fixture::new();
        family(&f);
        let c1 = f.store().session("c1").unwrap().unwrap();
        assert_eq!(c1.parent.as_deref(), Some("top"));
        assert_eq!(c1.agent_path.as_deref(), Some("main/c1"));
        assert_eq!(c1.run_id.as_deref(), Some("r"));
        assert!(c1.is_child());
        let top = f.store().session("top").unwrap().unwrap();
        assert_eq!((top.parent, top.agent_path, top.run_id), (None, None, None));

        // Direct children only, oldest first; nothing below a leaf.
        assert_eq!(ids(&f.store().child_sessions("top").unwrap()), ["c1", "c2"]);
        assert_eq!(ids(&f.store().child_sessions("c1").unwrap()), ["g"]);
        assert!(f.store().child_sessions("gg").unwrap().is_empty());
        assert!(f.store().child_sessions("no-such").unwrap().is_empty());
        // Descendants: children before grandchildren.
        assert_eq!(
            ids(&f.store().descendant_sessions("top").unwrap()),
            ["c1", "c2", "g", "gg"]
        );
        assert_eq!(
            ids(&f.store().descendant_sessions("other").unwrap()),
            ["oc"]
        );
        // Child sessions are listed like every session.
        assert_eq!(f.store().list_sessions().unwrap().len(), 7);

        // Finding children reads metadata only: it works with every message
        // record damaged.
        f.with_raw(|db| {
            let messages = db.open_tree(layout::MESSAGES_TREE).unwrap();
            for key in messages.iter().keys() {
                messages.insert(key.unwrap(), &b"garbage"[..]).unwrap();
            }
        });
        assert_eq!(
            ids(&f.store().descendant_sessions("top").unwrap()),
            ["c1", "c2", "g", "gg"]
        );
        // The links survive a reopen.
        f.reopen();
        assert_eq!(ids(&f.store().child_sessions("top").unwrap()), ["c1", "c2"]);
    }

    #[test]
    fn descendants_end_at_damaged_cycles() {
        let f = Fixture::new();
        // Parents need not exist yet, so records can name each other.
        f.store()
            .create_session(&new_child_session("a", "b", "main/a", "r"))
            .unwrap();
        f.store()
            .create_session(&new_child_session("b", "a", "main/b", "r"))
            .unwrap();
        f.store()
            .create_session(&new_child_session("c", "b", "main/c", "r"))
            .unwrap();
        let mut below_a = ids(&f.store().descendant_sessions("a").unwrap())
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        below_a.sort();
        assert_eq!(below_a, ["b", "c"]);
        let mut removed = f.store().remove_session("a").unwrap();
        assert_eq!(removed.last().map(String::as_str), Some("a"));
        removed.sort();
        assert_eq!(removed, ["a", "b", "c"]);
        assert!(f.store().list_sessions().unwrap().is_empty());
    }

    #[test]
    fn a_session_cannot_be_its_own_parent_nor_name_a_bad_run() {
        let f = Fixture::new();
        let err = f
            .store()
            .create_session(&new_child_session("s", "s", "main/s", "r"))
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidId { .. }), "{err}");
        assert!(err.to_string().contains("own parent"), "{err}");
        let err = f
            .store()
            .create_session(&new_child_session("s", "p", "main/s", "r\0x"))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidId { what: "run", .. }),
            "{err}"
        );
        assert!(f.store().session("s").unwrap().is_none());
    }

    #[test]
    fn remove_session_takes_its_descendants_and_nothing_else() {
        let mut f = Fixture::new();
        family(&f);
        // A child session with runs, events and spans of its own.
        f.store()
            .put_run(&run("r-g", "g", f.clock.now(), ended()))
            .unwrap();
        f.store().append_event(&event("r-g", "g", 1)).unwrap();
        f.store().put_span("r-g", "sp", &json!({})).unwrap();
        f.store()
            .put_pending_result("gg", &ToolResult::text("c", "r", false))
            .unwrap();
        f.store().flush().unwrap();

        let removed = f.store().remove_session("top").unwrap();
        assert_eq!(removed, ["gg", "g", "c2", "c1", "top"], "deepest first");
        assert_eq!(ids(&f.store().list_sessions().unwrap()), ["other", "oc"]);
        assert!(f.store().run("r-g").unwrap().is_none());
        assert_eq!(f.store().load_history("oc").unwrap().messages.len(), 3);
        let keys = f.with_raw(all_keys);
        for (tree, key) in &keys {
            for gone in ["top", "c1", "c2", "g", "gg", "r-g"] {
                let owned = key.as_slice() == gone.as_bytes()
                    || key.starts_with(format!("{gone}\0").as_bytes());
                assert!(!owned, "{tree}: {key:?} of {gone} survived");
            }
        }

        // Removing a child removes its subtree only.
        f.child("oc2", "oc", "r-other");
        assert_eq!(f.store().remove_session("oc").unwrap(), ["oc2", "oc"]);
        assert_eq!(ids(&f.store().list_sessions().unwrap()), ["other"]);
    }

    #[test]
    fn cleanup_keeps_or_removes_a_family_whole() {
        let f = Fixture::new();
        // Old, all of it: goes, children first.
        f.session("old");
        f.child("old-child", "old", "r-old");
        f.child("old-grandchild", "old-child", "r-old");
        // Old parent, one child written recently: all kept.
        f.session("old-parent");
        f.child("stale-child", "old-parent", "r-2");
        f.child("fresh-child", "old-parent", "r-2");
        // Old child sessions of a run still marked running: kept, and their
        // parent too.
        f.session("busy");
        f.child("busy-child", "busy", "r-busy");
        f.store()
            .put_run(&run("r-busy", "busy", f.clock.now(), RunState::Running))
            .unwrap();
        // A child session of a running run under an unrelated old parent.
        f.session("stray-parent");
        f.child("stray", "stray-parent", "r-busy");
        // An old child of a parent in use.
        f.session("in-use");
        f.child("in-use-child", "in-use", "r-3");
        for id in [
            "old",
            "old-child",
            "old-grandchild",
            "old-parent",
            "stale-child",
            "busy",
            "busy-child",
            "stray-parent",
            "stray",
            "in-use",
            "in-use-child",
        ] {
            fill(&f, id, 2);
        }
        f.clock.advance(TimeDelta::days(35));
        fill(&f, "fresh-child", 2);
        let now = f.clock.now();

        let in_use: HashSet<String> = ["in-use".to_owned()].into();
        let removed = f
            .store()
            .remove_sessions_older_than(SESSION_MAX_AGE, now, &in_use)
            .unwrap();
        assert_eq!(removed, ["old-grandchild", "old-child", "old"]);
        let mut left: Vec<String> = f
            .store()
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|meta| meta.id)
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "busy",
                "busy-child",
                "fresh-child",
                "in-use",
                "in-use-child",
                "old-parent",
                "stale-child",
                "stray",
                "stray-parent"
            ]
        );
    }
}

/// A fork's session shares the beginning of its parent's instead of copying it.
#[test]
fn a_fork_reads_its_shared_beginning_from_its_parent() {
    use troupe_store::ForkBase;
    let f = Fixture::new();
    let store = f.store();
    store.create_session(&new_session("parent", None)).unwrap();
    for i in 0..5 {
        store.put_message("parent", i, &message(i)).unwrap();
    }
    let fork = |id: &str, base: &str, len: u64| troupe_store::NewSession {
        fork_of: Some(ForkBase {
            session: base.into(),
            len,
        }),
        ..new_child_session(id, base, "main/fork-1", "r")
    };
    store.create_session(&fork("fork", "parent", 3)).unwrap();
    // The fork's own records start where the shared part ends.
    store.put_message("fork", 3, &message(103)).unwrap();
    store.put_message("fork", 4, &message(104)).unwrap();
    store.flush().unwrap();

    let loaded = store.load_history("fork").unwrap();
    let expected: Vec<Message> = [0, 1, 2, 103, 104].into_iter().map(message).collect();
    assert_eq!(loaded.messages, expected);
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(loaded.next_index, 5);
    let meta = store.session("fork").unwrap().unwrap();
    assert_eq!(meta.message_count, 5);
    assert_eq!(meta.fork_of.as_ref().map(|b| b.len), Some(3));
    let mut exported = Vec::new();
    assert_eq!(store.export_jsonl("fork", &mut exported).unwrap(), 5);

    // Copies of the shared part in the fork's own records (a repair writes
    // the whole history back) are passed over, not read twice.
    store.put_message("fork", 0, &message(0)).unwrap();
    assert_eq!(store.load_history("fork").unwrap().messages, expected);

    // A base that is gone is a reported gap, and a loop of bases ends.
    store.create_session(&fork("orphan", "missing", 2)).unwrap();
    store.put_message("orphan", 2, &message(7)).unwrap();
    let loaded = store.load_history("orphan").unwrap();
    assert_eq!(loaded.messages, vec![message(7)]);
    assert_eq!(loaded.skipped[0].index, 0);
    store.create_session(&fork("a", "b", 2)).unwrap();
    store.create_session(&fork("b", "a", 2)).unwrap();
    assert!(store.load_history("a").unwrap().messages.is_empty());

    // A session cannot begin with itself.
    assert!(matches!(
        store.create_session(&fork("self", "self", 1)),
        Err(StoreError::InvalidId { .. })
    ));
}

#[test]
fn a_store_written_before_heads_existed_reads_and_writes_on() {
    let mut f = Fixture::new();
    f.session("old");
    for i in 0..3 {
        f.store().put_message("old", i, &message(i)).unwrap();
    }
    f.store().flush().unwrap();
    // The layout of before: the counts live in the `sessions` record and
    // there is no head beside the messages.
    let record = f.with_raw(|db| {
        let messages = db.open_tree(layout::MESSAGES_TREE).unwrap();
        let head = messages.remove(b"old\0").unwrap().unwrap();
        let sessions = db.open_tree(layout::SESSIONS_TREE).unwrap();
        let raw = sessions.get(b"old").unwrap().unwrap();
        let mut record: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
        for field in ["message_count", "updated", "title"] {
            record["data"]["meta"][field] = head["data"][field].clone();
        }
        record["data"]["title_index"] = head["data"]["title_index"].clone();
        sessions
            .insert(b"old", serde_json::to_vec(&record).unwrap())
            .unwrap();
        record
    });
    assert_eq!(record["data"]["meta"]["message_count"], 3);
    let meta = f.store().session("old").unwrap().unwrap();
    assert_eq!(
        (meta.message_count, meta.title.as_str()),
        (3, "user message 0")
    );
    assert_eq!(f.store().list_sessions().unwrap()[0].message_count, 3);
    assert_eq!(f.store().load_history("old").unwrap().messages.len(), 3);
    // The next write continues from the old record's figures.
    f.store().put_message("old", 3, &message(3)).unwrap();
    let meta = f.store().session("old").unwrap().unwrap();
    assert_eq!(
        (meta.message_count, meta.title.as_str()),
        (4, "user message 0")
    );
}

#[test]
fn a_repair_is_written_back_in_one_batch_with_its_head() {
    let f = Fixture::new();
    f.session("r");
    for i in 0..6 {
        f.store().put_message("r", i, &message(i)).unwrap();
    }
    let repaired = [message(10), message(11)];
    assert_eq!(f.store().replace_history("r", 2, &repaired).unwrap(), 2);
    let history = f.store().load_history("r").unwrap();
    assert_eq!(
        history.messages,
        vec![message(0), message(1), message(10), message(11)]
    );
    assert_eq!(f.store().session("r").unwrap().unwrap().message_count, 4);
    assert_eq!(f.store().truncate_history("r", 1).unwrap(), 3);
    assert_eq!(f.store().session("r").unwrap().unwrap().message_count, 1);
    assert!(matches!(
        f.store().put_messages("missing", [(0, &message(0))]),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn no_write_path_uses_a_transaction_over_trees() {
    // sled 0.34 can hang inside multi-tree transactions under sustained
    // writes (docs/performance.md); every write is one batch into one
    // tree or one single-record operation.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for banned in [".transaction(", "Transactional", "sled::transaction"] {
            assert!(!text.contains(banned), "{} uses {banned}", path.display());
        }
    }
}

#[test]
fn an_ended_runs_deltas_are_compacted_once_and_replay_whole() {
    let f = Fixture::new();
    f.session("s");
    f.store()
        .put_run(&run("r", "s", f.clock.now(), RunState::Running))
        .unwrap();
    for seq in 1..=6 {
        f.store().append_event(&event("r", "s", seq)).unwrap();
    }
    // A running run is left alone by the retention pass.
    let later = f.clock.now() + TimeDelta::hours(1);
    assert_eq!(f.store().compact_ended_runs(later).unwrap(), 0);
    assert_eq!(f.store().events("r", 0).unwrap().len(), 6);
    f.store()
        .put_run(&run("r", "s", f.clock.now(), ended()))
        .unwrap();
    // Within the grace a reconnecting client replays exactly what it missed.
    let ended_at = f.store().run("r").unwrap().unwrap().ended.unwrap();
    assert_eq!(f.store().compact_ended_runs(ended_at).unwrap(), 0);
    assert_eq!(f.store().events("r", 0).unwrap().len(), 6);
    assert_eq!(f.store().compact_ended_runs(later).unwrap(), 1);
    let events = f.store().events("r", 0).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 6], "run_started, then one text event");
    assert_eq!(
        events[1].kind,
        EventKind::TextDelta {
            text: "piece 2piece 3piece 4piece 5piece 6".into()
        }
    );
    // A reader resuming inside the streak gets the whole text, not less.
    assert_eq!(f.store().events("r", 4).unwrap(), events[1..].to_vec());
    // Marked: the next pass does not look at it again, and a later record
    // of the run does not undo the mark.
    f.store()
        .put_run(&run("r", "s", f.clock.now(), ended()))
        .unwrap();
    assert_eq!(f.store().compact_ended_runs(later).unwrap(), 0);
    assert_eq!(f.store().compact_run_events("r").unwrap(), 0);
}

#[test]
fn retention_by_size_removes_the_oldest_families_that_are_not_busy() {
    let f = Fixture::new();
    let big = |id: &str| {
        f.session(id);
        for i in 0..20 {
            f.store()
                .put_message(id, i, &store_support::sized_message(i, 2_000))
                .unwrap();
        }
        f.clock.advance(TimeDelta::minutes(1));
    };
    for id in ["oldest", "older-running", "old-in-use", "old", "new"] {
        big(id);
    }
    f.store()
        .put_run(&run(
            "busy",
            "older-running",
            f.clock.now(),
            RunState::Running,
        ))
        .unwrap();
    let total = f.store().usage().unwrap().data_bytes();
    let per_session = total / 5;
    let in_use: HashSet<String> = ["old-in-use".to_owned()].into();
    let now = f.clock.now();
    // Under the bound: nothing goes.
    let roomy = Retention {
        max_bytes: Some(total),
        ..Retention::default()
    };
    assert!(f.store().retain(&roomy, now, &in_use).unwrap().is_empty());
    // Room for about three sessions: the two oldest that may go, go.
    let tight = Retention {
        max_bytes: Some(per_session * 3 + per_session / 2),
        ..Retention::default()
    };
    let removed = f.store().retain(&tight, now, &in_use).unwrap();
    assert_eq!(removed, vec!["oldest", "old"]);
    let after = f.store().usage().unwrap().data_bytes();
    assert!(
        after <= (per_session * 3 + per_session / 2) / 100 * SPACE_TARGET_PERCENT + per_session,
        "{after}"
    );
    // Busy sessions stay even when nothing else is left to remove.
    let tiny = Retention {
        max_bytes: Some(1),
        ..Retention::default()
    };
    let removed = f.store().retain(&tiny, now, &in_use).unwrap();
    assert_eq!(removed, vec!["new"]);
    let left = listed_ids(f.store());
    assert_eq!(
        left,
        ["older-running", "old-in-use"].map(String::from).into()
    );
}

/// The ids of every listed session.
fn listed_ids(store: &Store) -> HashSet<String> {
    store
        .list_sessions()
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect()
}
