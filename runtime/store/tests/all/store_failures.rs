//! The session store under damage and hostile conditions: corrupt and
//! half-written records, a database locked by another process, an unwritable
//! data directory, invalid ids, a parent session whose metadata is damaged.
//! Each must end in a clear value, never a panic and never a lost readable
//! record.

use crate::store_support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use store_support::{
    Fixture, child_command, child_dir, child_lines, event, is_child, message, new_session, report,
    wait_line,
};
use troupe_protocol::model::Message;
use troupe_store::{CompactionMarker, Store, StoreError, layout};

/// A user id with no rights on root-owned files (`nobody`).
const UNPRIVILEGED_ID: u32 = 65_534;

mod store {
    use super::*;

    fn filled(f: &Fixture, id: &str, count: u64) {
        f.session(id);
        for i in 0..count {
            f.store().put_message(id, i, &message(i)).unwrap();
        }
        f.store().flush().unwrap();
    }

    #[test]
    fn a_corrupt_message_is_skipped_with_a_reason_and_the_rest_loads() {
        let mut f = Fixture::new();
        filled(&f, "s", 10);
        f.with_raw(|db| {
            let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
            tree.insert(
                layout::numbered_key("s", 4),
                &b"\xde\xad\xbe\xef not json"[..],
            )
            .unwrap();
            tree.insert(
                layout::numbered_key("s", 6),
                &br#"{"v":1,"data":{"role":"robot","content":[]}}"#[..],
            )
            .unwrap();
        });
        let history = f.store().load_history("s").unwrap();
        let expected: Vec<Message> = (0..10)
            .filter(|i| *i != 4 && *i != 6)
            .map(message)
            .collect();
        assert_eq!(history.messages, expected);
        let skipped: Vec<u64> = history.skipped.iter().map(|s| s.index).collect();
        assert_eq!(skipped, vec![4, 6]);
        assert!(
            history.skipped[0].reason.starts_with("undecodable"),
            "{:?}",
            history.skipped
        );
        assert!(
            history.skipped[1].reason.contains("robot"),
            "{:?}",
            history.skipped
        );
        assert_eq!(history.next_index, 10);
        // Export leaves the damaged records out and keeps the rest.
        assert_eq!(f.store().export_jsonl("s", &mut Vec::new()).unwrap(), 8);
    }

    #[test]
    fn a_half_written_last_record_is_skipped() {
        let mut f = Fixture::new();
        filled(&f, "s", 5);
        f.with_raw(|db| {
            let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
            let key = layout::numbered_key("s", 4);
            let whole = tree.get(&key).unwrap().unwrap();
            tree.insert(&key, &whole[..whole.len() / 2]).unwrap();
        });
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.messages, (0..4).map(message).collect::<Vec<_>>());
        assert_eq!(history.skipped.len(), 1);
        assert_eq!(history.skipped[0].index, 4);
        assert!(
            history.skipped[0].reason.starts_with("truncated"),
            "{:?}",
            history.skipped
        );
        // The session can go on: the next write lands after the damaged one.
        f.store()
            .put_message("s", history.next_index, &message(5))
            .unwrap();
        assert_eq!(f.store().load_history("s").unwrap().messages.len(), 5);
    }

    #[test]
    fn a_torn_database_file_tail_recovers_to_a_consistent_prefix() {
        // What a crash in the middle of sled's own write leaves: garbage after
        // the last complete write, or a write cut short.
        const MESSAGES: u64 = 200;
        const GARBAGE_BYTES: usize = 3_000;
        const CUT_BYTES: u64 = 100;
        for cut in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            {
                let store = Store::open(dir.path()).unwrap();
                store.create_session(&new_session("s", None)).unwrap();
                for i in 0..MESSAGES {
                    store.put_message("s", i, &message(i)).unwrap();
                    store.flush().unwrap();
                }
            }
            let file = dir.path().join(layout::DB_DIR_NAME).join("db");
            let mut handle = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap();
            if cut {
                let len = handle.metadata().unwrap().len();
                handle.set_len(len - CUT_BYTES).unwrap();
            } else {
                handle.write_all(&[0xAB; GARBAGE_BYTES]).unwrap();
            }
            drop(handle);

            // sled's flusher thread lets go of the lock a moment after the
            // last handle is dropped.
            let store = store_support::until_unlocked(|| Store::open(dir.path()));
            let history = store.load_history("s").unwrap();
            let meta = store.session("s").unwrap().unwrap();
            let loaded = history.messages.len() as u64;
            assert!(history.skipped.is_empty(), "{:?}", history.skipped);
            assert_eq!(
                meta.message_count, loaded,
                "metadata agrees with the messages"
            );
            assert_eq!(
                history.messages,
                (0..loaded).map(message).collect::<Vec<_>>()
            );
            if cut {
                assert!(
                    loaded >= MESSAGES - 1,
                    "only the cut write may be lost: {loaded}"
                );
            } else {
                assert_eq!(loaded, MESSAGES, "garbage after the end loses nothing");
            }
            // And the store is writable again at the recovered position.
            store.put_message("s", loaded, &message(loaded)).unwrap();
            store.flush().unwrap();
        }
    }

    #[test]
    fn a_record_of_a_newer_format_is_skipped_not_misread() {
        let mut f = Fixture::new();
        filled(&f, "s", 2);
        f.with_raw(|db| {
            let tree = db.open_tree(layout::MESSAGES_TREE).unwrap();
            tree.insert(
                layout::numbered_key("s", 1),
                &br#"{"v":2,"data":{"role":"user","content":[]}}"#[..],
            )
            .unwrap();
        });
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.messages.len(), 1);
        assert!(
            history.skipped[0].reason.contains("version 2"),
            "{:?}",
            history.skipped
        );
    }

    #[test]
    fn a_corrupt_last_marker_falls_back_to_the_previous_one() {
        let mut f = Fixture::new();
        filled(&f, "s", 10);
        let marker = |first_kept| CompactionMarker {
            first_kept,
            summary: vec![Message::user_text(format!("summary up to {first_kept}"))],
            created: f.clock.now(),
            before_tokens: 1,
            after_tokens: 1,
        };
        f.store().put_marker("s", &marker(3)).unwrap();
        f.store().put_marker("s", &marker(7)).unwrap();
        f.with_raw(|db| {
            let tree = db.open_tree(layout::MARKERS_TREE).unwrap();
            let (key, value) = tree.last().unwrap().unwrap();
            tree.insert(key, &value[..value.len() - 10]).unwrap();
        });
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.first_index, 3);
        assert_eq!(history.messages[0].text(), "summary up to 3");
        assert_eq!(history.messages.len(), 1 + 7);
        assert_eq!(history.skipped_markers.len(), 1);
        assert!(history.skipped.is_empty());
        assert_eq!(f.store().markers("s").unwrap().len(), 1);
    }

    #[test]
    fn corrupt_metadata_is_an_error_for_that_session_and_skipped_in_listing() {
        let mut f = Fixture::new();
        filled(&f, "good", 1);
        filled(&f, "bad", 1);
        f.store()
            .put_run(&store_support::run(
                "r",
                "good",
                f.clock.now(),
                store_support::ended(),
            ))
            .unwrap();
        f.store().append_event(&event("r", "good", 1)).unwrap();
        f.store().append_event(&event("r", "good", 2)).unwrap();
        f.with_raw(|db| {
            db.open_tree(layout::SESSIONS_TREE)
                .unwrap()
                .insert("bad", &b"{\"v\":1,"[..])
                .unwrap();
            db.open_tree(layout::EVENTS_TREE)
                .unwrap()
                .insert(layout::numbered_key("r", 1), &b"garbage"[..])
                .unwrap();
        });
        let err = f.store().session("bad").unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("session \"bad\""), "{err}");
        let err = f.store().put_message("bad", 1, &message(1)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        let listed: Vec<String> = f
            .store()
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(listed, vec!["good"]);
        let events = f.store().events("r", 0).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].seq, 2);
        // The damaged session can still be removed.
        assert_eq!(f.store().remove_session("bad").unwrap(), ["bad"]);
    }

    #[test]
    fn children_of_a_parent_with_damaged_metadata_are_kept_by_the_cleanup_and_removed_with_it() {
        let mut f = Fixture::new();
        filled(&f, "parent", 2);
        f.child("child", "parent", "r");
        f.child("grandchild", "child", "r");
        for id in ["child", "grandchild"] {
            for i in 0..2 {
                f.store().put_message(id, i, &message(i)).unwrap();
            }
        }
        f.store().flush().unwrap();
        f.with_raw(|db| {
            db.open_tree(layout::SESSIONS_TREE)
                .unwrap()
                .insert("parent", &b"{\"v\":1,\"data\":{\"id\":"[..])
                .unwrap();
        });
        // The damaged parent is not listed; its children still are, and
        // they are still its children.
        let listed: Vec<String> = f
            .store()
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|meta| meta.id)
            .collect();
        assert_eq!(listed, ["grandchild", "child"]);
        let below: Vec<String> = f
            .store()
            .descendant_sessions("parent")
            .unwrap()
            .into_iter()
            .map(|meta| meta.id)
            .collect();
        assert_eq!(below, ["child", "grandchild"]);

        // Old as they are, the cleanup keeps them: their parent is kept.
        f.clock.advance(chrono::TimeDelta::days(60));
        let removed = f
            .store()
            .remove_sessions_older_than(
                troupe_store::SESSION_MAX_AGE,
                f.clock.now(),
                &std::collections::HashSet::new(),
            )
            .unwrap();
        assert!(removed.is_empty(), "{removed:?}");

        // Removing the damaged parent takes them along.
        assert_eq!(
            f.store().remove_session("parent").unwrap(),
            ["grandchild", "child", "parent"]
        );
        assert!(f.store().list_sessions().unwrap().is_empty());
        let keys = f.with_raw(store_support::all_keys);
        assert!(keys.is_empty(), "{keys:?}");
    }

    #[test]
    fn a_database_held_by_another_process_is_locked_with_a_clear_message() {
        const NAME: &str = "store_failures::store::a_database_held_by_another_process_is_locked_with_a_clear_message";
        const ROLE: &str = "hold-lock";
        if is_child(ROLE) {
            let store = Store::open(&child_dir()).unwrap();
            report("READY");
            // Hold the database until the parent closes our stdin.
            let mut sink = String::new();
            let _ = std::io::stdin().read_line(&mut sink);
            drop(store);
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = child_command(NAME, ROLE, dir.path()).spawn().unwrap();
        let lines = child_lines(&mut child);
        wait_line(&lines, "READY");

        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&dir.path().join("db").display().to_string()),
            "{text}"
        );
        assert!(text.contains("another troupe process"), "{text}");
        assert!(text.contains("troupe serve"), "{text}");

        drop(child.stdin.take());
        let status = child.wait().unwrap();
        assert!(status.success(), "{status}");
        // Released with the other process: opening works again.
        let store = Store::open(dir.path()).unwrap();
        store.flush().unwrap();
    }

    #[test]
    fn a_second_open_in_the_same_process_is_locked_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(dir.path()).unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        drop(first);
        // The lock goes once sled's threads let go of the database.
        store_support::until_unlocked(|| Store::open(dir.path()));
    }

    #[test]
    fn a_data_directory_under_a_regular_file_is_unwritable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "not a directory").unwrap();
        let err = Store::open(&file.join("troupe")).unwrap_err();
        assert!(matches!(err, StoreError::Unwritable { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("TROUPE_HOME"), "{text}");
        assert!(text.contains("plain-file"), "{text}");

        // The data directory itself a regular file.
        let err = Store::open(&file).unwrap_err();
        assert!(matches!(err, StoreError::Unwritable { .. }), "{err:?}");
    }

    #[test]
    fn a_read_only_data_directory_is_unwritable() {
        const NAME: &str = "store_failures::store::a_read_only_data_directory_is_unwritable";
        const ROLE: &str = "open-read-only";
        if is_child(ROLE) {
            let outcome = match Store::open(&child_dir()) {
                Ok(_) => "OPENED".to_owned(),
                Err(StoreError::Unwritable { .. }) => "UNWRITABLE".to_owned(),
                Err(other) => format!("OTHER {other}"),
            };
            report(&format!("OUTCOME {outcome}"));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o500)).unwrap();

        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            // Root ignores permission bits: try as an unprivileged user.
            let mut command = child_command(NAME, ROLE, &data);
            command.uid(UNPRIVILEGED_ID).gid(UNPRIVILEGED_ID);
            let mut child = command.spawn().unwrap();
            let lines = child_lines(&mut child);
            let outcome = wait_line(&lines, "OUTCOME ");
            assert_eq!(outcome, "OUTCOME UNWRITABLE");
            assert!(child.wait().unwrap().success());
        } else {
            let err = Store::open(&data).unwrap_err();
            assert!(matches!(err, StoreError::Unwritable { .. }), "{err:?}");
        }
        assert!(!data.join(layout::DB_DIR_NAME).exists());
    }

    #[test]
    fn created_directories_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b/troupe");
        Store::open(&data).unwrap();
        for path in [
            dir.path().join("a"),
            data.clone(),
            data.join(layout::DB_DIR_NAME),
        ] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", path.display());
        }
    }

    #[test]
    fn invalid_ids_are_refused_with_a_reason() {
        let f = Fixture::new();
        for id in ["", "a\0b"] {
            let err = f
                .store()
                .create_session(&new_session(id, None))
                .unwrap_err();
            assert!(matches!(err, StoreError::InvalidId { .. }), "{err:?}");
        }
        let long = "x".repeat(layout::MAX_ID_BYTES + 1);
        assert!(matches!(
            f.store().session(&long),
            Err(StoreError::InvalidId { .. })
        ));
        assert!(matches!(
            f.store().events("r\0", 0),
            Err(StoreError::InvalidId { .. })
        ));
        f.session("s");
        let err = f
            .store()
            .put_pending_result(
                "s",
                &troupe_protocol::model::ToolResult::text("", "x", false),
            )
            .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidId { what: "call", .. }),
            "{err:?}"
        );
    }
}
