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
            let mut child = child_command(NAME, ROLE, dir.path()).spawn().unwrap();
            let lines = child_lines(&mut child);
            let target = acknowledged.map_or(0, |a| a + 1) + kill_after;
            loop {
                let line = wait_line(&lines, "ACK ");
                let index: u64 = line["ACK ".len()..].parse().unwrap();
                acknowledged = Some(index);
                if index >= target {
                    break;
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();

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
}
