//! Durability of the session store across processes (SPEC §9, §15): what a
//! process flushed is there for the next process, whether the writer exited
//! without closing the store or was killed with SIGKILL in the middle of
//! writing.

use crate::store_support;

use std::process::Stdio;

use store_support::{
    Fixture, child_command, child_dir, child_lines, is_child, message, new_session, report,
    wait_line,
};
use troupe_store::Store;

/// Messages the writer child adds in each round before it is killed.
const KILL_POINTS: [u64; 3] = [3, 17, 41];

/// Starts the writer child of test `name` in role `role` on `dir`, reads its
/// `ACK N` lines until N reaches `target`, kills it with SIGKILL and returns
/// the last N it acknowledged.
fn kill_once_acknowledged(name: &str, role: &str, dir: &std::path::Path, target: u64) -> u64 {
    let mut child = child_command(name, role, dir).spawn().unwrap();
    let lines = child_lines(&mut child);
    let acknowledged = loop {
        let line = wait_line(&lines, "ACK ");
        let index: u64 = line["ACK ".len()..].parse().unwrap();
        if index >= target {
            break index;
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    acknowledged
}

mod store {
    use super::*;

    #[test]
    fn reopening_after_drop_keeps_everything() {
        let mut f = Fixture::new();
        f.session("s");
        for i in 0..50 {
            f.store().put_message("s", i, &message(i)).unwrap();
        }
        f.store().flush().unwrap();
        let before = f.store().session("s").unwrap();
        f.reopen();
        assert_eq!(f.store().session("s").unwrap(), before);
        let history = f.store().load_history("s").unwrap();
        assert_eq!(history.messages, (0..50).map(message).collect::<Vec<_>>());
    }

    #[test]
    fn a_child_that_flushed_and_exited_without_closing_leaves_everything() {
        const NAME: &str = "store_durability::store::a_child_that_flushed_and_exited_without_closing_leaves_everything";
        const ROLE: &str = "write-and-exit";
        if is_child(ROLE) {
            let store = Store::open(&child_dir()).unwrap();
            store.create_session(&new_session("child", None)).unwrap();
            for i in 0..25 {
                store.put_message("child", i, &message(i)).unwrap();
            }
            store.flush().unwrap();
            // Leave without running any destructor, as a crash after the flush would.
            std::process::exit(0);
        }
        let dir = tempfile::tempdir().unwrap();
        let status = child_command(NAME, ROLE, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
        let store = Store::open(dir.path()).unwrap();
        let meta = store.session("child").unwrap().unwrap();
        assert_eq!(meta.message_count, 25);
        assert_eq!(meta.title, "user message 0");
        let history = store.load_history("child").unwrap();
        assert_eq!(history.messages, (0..25).map(message).collect::<Vec<_>>());
        assert!(history.skipped.is_empty());
    }

    #[test]
    fn sigkill_mid_write_loses_no_acknowledged_message() {
        const NAME: &str =
            "store_durability::store::sigkill_mid_write_loses_no_acknowledged_message";
        const ROLE: &str = "write-until-killed";
        if is_child(ROLE) {
            let store = Store::open(&child_dir()).unwrap();
            if store.session("k").unwrap().is_none() {
                store.create_session(&new_session("k", None)).unwrap();
            }
            let mut next = store.load_history("k").unwrap().next_index;
            loop {
                store.put_message("k", next, &message(next)).unwrap();
                store.flush().unwrap();
                report(&format!("ACK {next}"));
                next += 1;
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut acknowledged: Option<u64> = None;
        for kill_after in KILL_POINTS {
            let target = acknowledged.map_or(0, |a| a + 1) + kill_after;
            acknowledged = Some(kill_once_acknowledged(NAME, ROLE, dir.path(), target));

            let store = Store::open(dir.path()).unwrap();
            let history = store.load_history("k").unwrap();
            assert!(history.skipped.is_empty(), "{:?}", history.skipped);
            let acked = acknowledged.unwrap();
            assert!(
                history.next_index > acked,
                "{} <= {acked}",
                history.next_index
            );
            let expected: Vec<_> = (0..history.next_index).map(message).collect();
            assert_eq!(history.messages, expected);
            // What the next round continues from is what was acknowledged (or
            // one message further, written before the kill landed).
            acknowledged = Some(history.next_index - 1);
        }
    }

    #[test]
    fn sigkill_between_unflushed_batches_keeps_whole_batches_only() {
        const NAME: &str =
            "store_durability::store::sigkill_between_unflushed_batches_keeps_whole_batches_only";
        const ROLE: &str = "write-batches-until-killed";
        const BATCH: u64 = 5;
        if is_child(ROLE) {
            let store = Store::open(&child_dir()).unwrap();
            if store.session("b").unwrap().is_none() {
                store.create_session(&new_session("b", None)).unwrap();
            }
            let mut next = store.load_history("b").unwrap().next_index;
            for round in 0u64.. {
                let batch: Vec<_> = (next..next + BATCH).map(|i| (i, message(i))).collect();
                store
                    .put_messages("b", batch.iter().map(|(i, m)| (*i, m)))
                    .unwrap();
                next += BATCH;
                // Most batches are left to sled's background flush: a kill
                // lands between, or in the middle of, unflushed batches.
                if round % 4 == 3 {
                    store.flush().unwrap();
                    report(&format!("ACK {}", next - 1));
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut acknowledged: Option<u64> = None;
        for kill_after in KILL_POINTS {
            let target = acknowledged.map_or(0, |a| a + 1) + kill_after * BATCH;
            acknowledged = Some(kill_once_acknowledged(NAME, ROLE, dir.path(), target));

            let store = Store::open(dir.path()).unwrap();
            let history = store.load_history("b").unwrap();
            let meta = store.session("b").unwrap().unwrap();
            assert!(history.skipped.is_empty(), "{:?}", history.skipped);
            assert_eq!(
                history.next_index % BATCH,
                0,
                "a batch is there whole or not at all"
            );
            assert_eq!(
                meta.message_count, history.next_index,
                "the head was written with its messages"
            );
            let acked = acknowledged.unwrap();
            assert!(
                history.next_index > acked,
                "{} <= {acked}",
                history.next_index
            );
            let expected: Vec<_> = (0..history.next_index).map(message).collect();
            assert_eq!(history.messages, expected);
            acknowledged = Some(history.next_index - 1);
        }
    }
}
