//! Finding a session or a run by a prefix of its id or of its short id, the
//! way `git` accepts a prefix of a commit hash: a prefix that is an id
//! itself, or that starts exactly one id (or one short id), names that id;
//! one that starts several is ambiguous.
//!
//! Ids are UUIDv7: their first characters are the creation time, so every id
//! made in the same minute starts alike. The [`short_id`] of a UUID is its
//! last 8 hex characters instead: the `uuid` crate fills them from the random
//! number generator (the bits before them hold the timestamp and a counter),
//! so two ids made in the same millisecond still differ there, and
//! 8 characters tell ids apart in practice. The short id is computed, never
//! stored, so every id already in a store has one. Ids that are not UUIDs
//! (planted by tests, or written by hand) are their own short id.
//!
//! When two ids of a listing do share their last 8 characters, the listing
//! shows a longer end of each, as git lengthens an abbreviated hash (the
//! command line's `ids::unique_short_ids`). Such a lengthened short id (more
//! than 8 characters, the whole end of an id) names its id as the short id
//! does.
//!
//! The store side is a scan over the keys of the `sessions` or `runs` tree:
//! a range scan for a prefix of the full id (their keys are the bare ids, so
//! sled's byte order puts every id that starts with a prefix in one
//! contiguous range), plus, when the text could start a short id (at most 8
//! hex digits) or be a lengthened one (hex digits and hyphens, shorter than
//! an id), one pass over every key comparing short ids. Only keys are
//! read, never a record, so a session whose metadata is damaged can still be
//! named by a prefix. [`decide`] turns the ids found into an [`IdMatch`]; it
//! is pure.

use super::layout::{self, check_id};
use super::{Store, StoreError};

/// How many of the ids an ambiguous prefix matches are kept to be shown.
pub(crate) const MAX_LISTED_MATCHES: usize = 10;

/// What a prefix of an id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdMatch {
    /// One id: the prefix is an id itself, or starts exactly one id.
    Unique(String),
    /// Several ids start with the prefix and none equals it.
    Ambiguous {
        /// The first matching ids in key order, at most `MAX_LISTED_MATCHES`.
        ids: Vec<String>,
        /// How many ids match in all.
        total: usize,
    },
    /// No id starts with the prefix.
    NoMatch,
}

/// How many hex characters a [`short_id`] of a UUID has.
pub const SHORT_ID_LEN: usize = 8;

/// The short form of `id` shown to people: the last [`SHORT_ID_LEN`]
/// characters of a UUID (its random bits), or the whole id when it is not a
/// UUID.
pub fn short_id(id: &str) -> &str {
    if is_uuid(id) {
        id.get(id.len() - SHORT_ID_LEN..).unwrap_or(id)
    } else {
        id
    }
}

/// True for the 36-character hyphenated form of a UUID (8-4-4-4-12 hex
/// digits).
fn is_uuid(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(at, byte)| match at {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

/// True when `given` could start a short id: 1 to [`SHORT_ID_LEN`] hex
/// digits.
fn may_start_short_id(given: &str) -> bool {
    !given.is_empty()
        && given.len() <= SHORT_ID_LEN
        && given.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// True when `given` could be a lengthened short id: more than
/// [`SHORT_ID_LEN`] and fewer than 36 characters, hex digits and hyphens.
fn may_be_long_short_id(given: &str) -> bool {
    given.len() > SHORT_ID_LEN
        && given.len() < 36
        && given
            .bytes()
            .all(|byte| byte.is_ascii_hexdigit() || byte == b'-')
}

/// True when `given` names `id`: `id` starts with it, the short id of a
/// UUID `id` starts with it, or a UUID `id` ends with it and it is longer
/// than a short id (a lengthened short id). Hex digits compare in any case.
pub(super) fn names(given: &str, id: &str) -> bool {
    if id.starts_with(given) {
        return true;
    }
    if !is_uuid(id) {
        return false;
    }
    let starts_short_id = may_start_short_id(given)
        && short_id(id)
            .get(..given.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(given));
    let ends_id = may_be_long_short_id(given)
        && id
            .get(id.len() - given.len()..)
            .is_some_and(|end| end.eq_ignore_ascii_case(given));
    starts_short_id || ends_id
}

/// Decides what `prefix` names among `ids` (candidates in any order; those
/// it does not name, see [`names`], are ignored). An id equal to the prefix
/// wins over longer ids that extend it, so a full id always names its own
/// session or run.
pub(super) fn decide(prefix: &str, ids: impl IntoIterator<Item = String>) -> IdMatch {
    let mut listed = Vec::new();
    let mut total = 0usize;
    for id in ids {
        if !names(prefix, &id) {
            continue;
        }
        if id == prefix {
            return IdMatch::Unique(id);
        }
        total += 1;
        if listed.len() < MAX_LISTED_MATCHES {
            listed.push(id);
        }
    }
    match total {
        0 => IdMatch::NoMatch,
        // One match is listed (the cap is above one).
        1 => listed.pop().map_or(IdMatch::NoMatch, IdMatch::Unique),
        _ => {
            listed.sort();
            IdMatch::Ambiguous { ids: listed, total }
        }
    }
}

impl Store {
    /// The session named by `prefix` (a full id or a prefix of one). Child
    /// sessions are found like any other. Fails with
    /// [`StoreError::InvalidId`] for a prefix that cannot start a key (empty,
    /// too long, containing NUL).
    pub fn find_session(&self, prefix: &str) -> Result<IdMatch, StoreError> {
        check_id("session", prefix)?;
        self.find_by_prefix(&self.inner.sessions, layout::SESSIONS_TREE, prefix)
    }

    /// The run named by `prefix` (a full id or a prefix of one). Fails like
    /// [`Store::find_session`].
    pub fn find_run(&self, prefix: &str) -> Result<IdMatch, StoreError> {
        check_id("run", prefix)?;
        self.find_by_prefix(&self.inner.runs, layout::RUNS_TREE, prefix)
    }

    /// Scans the keys of `tree` that start with `prefix`, or all of them
    /// when `prefix` could start a short id.
    fn find_by_prefix(
        &self,
        tree: &sled::Tree,
        name: &'static str,
        prefix: &str,
    ) -> Result<IdMatch, StoreError> {
        let scan = if may_start_short_id(prefix) || may_be_long_short_id(prefix) {
            tree.iter()
        } else {
            tree.scan_prefix(prefix.as_bytes())
        };
        let mut ids = Vec::new();
        for key in scan.keys() {
            let key = key.map_err(self.sled_err("look up an id"))?;
            match std::str::from_utf8(&key) {
                Ok(id) => ids.push(id.to_owned()),
                Err(_) => tracing::warn!(
                    tree = name,
                    key = %String::from_utf8_lossy(&key),
                    "skipping a key of the session store that is not UTF-8"
                ),
            }
        }
        Ok(decide(prefix, ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewSession, RunRecord, RunState};
    use troupe_protocol::events::RunStatus;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn one_match_is_unique_and_none_is_no_match() {
        assert_eq!(
            decide("01a", ids(&["01ab-1"])),
            IdMatch::Unique("01ab-1".into())
        );
        assert_eq!(decide("01a", ids(&[])), IdMatch::NoMatch);
        // Ids that do not start with the prefix are not counted.
        assert_eq!(decide("01a", ids(&["01b", "x01a"])), IdMatch::NoMatch);
    }

    #[test]
    fn an_exact_id_wins_over_ids_that_extend_it() {
        assert_eq!(
            decide("ab", ids(&["ab", "abc", "abd"])),
            IdMatch::Unique("ab".into())
        );
        assert_eq!(
            decide("ab", ids(&["abc", "abd", "ab"])),
            IdMatch::Unique("ab".into())
        );
    }

    #[test]
    fn several_matches_are_ambiguous_and_listed_sorted_up_to_the_cap() {
        assert_eq!(
            decide("a", ids(&["ac", "ab"])),
            IdMatch::Ambiguous {
                ids: ids(&["ab", "ac"]),
                total: 2
            }
        );
        let many: Vec<String> = (0..25).map(|n| format!("a{n:02}")).collect();
        let IdMatch::Ambiguous { ids: listed, total } = decide("a", many) else {
            panic!("ambiguous expected");
        };
        assert_eq!(total, 25);
        assert_eq!(listed.len(), MAX_LISTED_MATCHES);
        assert_eq!(listed.first().map(String::as_str), Some("a00"));
    }

    #[test]
    fn a_lengthened_short_id_names_its_id() {
        let a = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
        let b = "0193a1f2-0c4d-7e01-8a2b-3c3d5e6f7a8b";
        assert_eq!(
            decide("4d5e6f7a8b", ids(&[a, b])),
            IdMatch::Unique(a.into())
        );
        assert_eq!(
            decide("3d5e6f7a8b", ids(&[a, b])),
            IdMatch::Unique(b.into())
        );
        assert_eq!(
            decide("B-3C4D5E6F7A8B", ids(&[a])),
            IdMatch::Unique(a.into())
        );
        // The 8-character short id of either is ambiguous.
        assert!(matches!(
            decide("5e6f7a8b", ids(&[a, b])),
            IdMatch::Ambiguous { total: 2, .. }
        ));
        // A longer text is an end of the id, not anything inside it.
        assert_eq!(decide("4d5e6f7a8", ids(&[a])), IdMatch::NoMatch);
    }

    const EARLY: &str = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
    const SAME_MS: &str = "0193a1f2-0c4d-7e01-8a2b-3c4d91b2c3d4";

    #[test]
    fn the_short_id_of_a_uuid_is_its_last_eight_hex_digits() {
        assert_eq!(short_id(EARLY), "5e6f7a8b");
        assert_eq!(short_id(SAME_MS), "91b2c3d4");
        // Not a UUID: the id is its own short id.
        assert_eq!(short_id("feed-0001"), "feed-0001");
        assert_eq!(
            short_id("0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8"),
            "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8"
        );
        assert_eq!(
            short_id("0193a1f2x0c4d-7e01-8a2b-3c4d5e6f7a8b"),
            "0193a1f2x0c4d-7e01-8a2b-3c4d5e6f7a8b"
        );
        assert_eq!(short_id(""), "");
    }

    #[test]
    fn a_prefix_of_the_short_id_names_a_uuid() {
        assert!(names("5e6f7a8b", EARLY));
        assert!(names("5e6f", EARLY));
        assert!(names("5E6F7A8B", EARLY));
        assert!(names("0193a1f2", EARLY));
        assert!(!names("5e6f7a8b", SAME_MS));
        // Longer than a short id: the id's end (a lengthened short id, as
        // lists show one when two ids share their short id) or its start.
        assert!(names("3c4d5e6f7a8b", EARLY));
        assert!(names("b-3c4d5e6f7a8b", EARLY));
        assert!(!names("3c4d5e6f7a8", EARLY));
        assert!(!names("3c4d5e6f7a8b", SAME_MS));
        // Not hex: only the full id's start counts.
        assert!(!names("7a8b-", EARLY));
        // Ids that are not UUIDs match by their start only.
        assert!(!names("0001", "feed-0001"));
    }

    #[test]
    fn ids_of_the_same_millisecond_are_told_apart_by_their_short_ids() {
        let both = || ids(&[EARLY, SAME_MS]);
        assert_eq!(decide("5e6f7a8b", both()), IdMatch::Unique(EARLY.into()));
        assert_eq!(decide("91b2c3d4", both()), IdMatch::Unique(SAME_MS.into()));
        assert_eq!(
            decide("0193a1f2", both()),
            IdMatch::Ambiguous {
                ids: both(),
                total: 2
            }
        );
        assert_eq!(decide("ffff", both()), IdMatch::NoMatch);
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn session(store: &Store, id: &str) {
        store
            .create_session(&NewSession {
                id: id.into(),
                cwd: "/repo".into(),
                provider: "p".into(),
                model: "m".into(),
                parent: None,
                agent_path: None,
                run_id: None,
                fork_of: None,
            })
            .unwrap();
    }

    fn run(store: &Store, id: &str, session: &str) {
        store
            .put_run(&RunRecord {
                run_id: id.into(),
                session_id: session.into(),
                prompt: "p".into(),
                status: RunState::Ended(RunStatus::Finished),
                stop_reason: Some("end_turn".into()),
                started: chrono::Utc::now(),
                ended: None,
                pid: 1,
                history: None,
            })
            .unwrap();
    }

    #[test]
    fn sessions_are_found_by_a_prefix_of_their_id() {
        let (_dir, store) = store();
        session(&store, "0193a1-aaaa");
        session(&store, "0193a1-bbbb");
        session(&store, "0194ff");
        session(&store, "01");
        assert_eq!(
            store.find_session("0194").unwrap(),
            IdMatch::Unique("0194ff".into())
        );
        assert_eq!(
            store.find_session("0193a1-b").unwrap(),
            IdMatch::Unique("0193a1-bbbb".into())
        );
        assert_eq!(
            store.find_session("0193").unwrap(),
            IdMatch::Ambiguous {
                ids: ids(&["0193a1-aaaa", "0193a1-bbbb"]),
                total: 2
            }
        );
        assert_eq!(
            store.find_session("01").unwrap(),
            IdMatch::Unique("01".into())
        );
        assert_eq!(store.find_session("02").unwrap(), IdMatch::NoMatch);
        // A run id is not a session id.
        run(&store, "0195-run", "01");
        assert_eq!(store.find_session("0195").unwrap(), IdMatch::NoMatch);
        assert!(matches!(
            store.find_session(""),
            Err(StoreError::InvalidId { .. })
        ));
    }

    #[test]
    fn runs_are_found_by_a_prefix_of_their_id() {
        let (_dir, store) = store();
        session(&store, "s1");
        run(&store, "r-0001", "s1");
        run(&store, "r-0002", "s1");
        assert_eq!(
            store.find_run("r-0002").unwrap(),
            IdMatch::Unique("r-0002".into())
        );
        assert_eq!(
            store.find_run("r-00").unwrap(),
            IdMatch::Ambiguous {
                ids: ids(&["r-0001", "r-0002"]),
                total: 2
            }
        );
        assert_eq!(store.find_run("s1").unwrap(), IdMatch::NoMatch);
    }

    #[test]
    fn sessions_and_runs_are_found_by_a_prefix_of_their_short_id() {
        let (_dir, store) = store();
        session(&store, EARLY);
        session(&store, SAME_MS);
        assert_eq!(
            store.find_session("5e6f7a8b").unwrap(),
            IdMatch::Unique(EARLY.into())
        );
        assert_eq!(
            store.find_session("91b2").unwrap(),
            IdMatch::Unique(SAME_MS.into())
        );
        assert!(matches!(
            store.find_session("0193a1f2").unwrap(),
            IdMatch::Ambiguous { total: 2, .. }
        ));
        run(&store, "0193a1f2-0c4d-7e01-8a2b-3c4dbeef0000", EARLY);
        assert_eq!(
            store.find_run("beef").unwrap(),
            IdMatch::Unique("0193a1f2-0c4d-7e01-8a2b-3c4dbeef0000".into())
        );
        assert_eq!(store.find_session("beef").unwrap(), IdMatch::NoMatch);
    }
}
