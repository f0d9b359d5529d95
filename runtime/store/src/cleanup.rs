//! Removing sessions: one session with its child sessions on request
//! (`troupe sessions rm`) and the background removal of sessions older than
//! 30 days (SPEC §9), which never removes a session in use.
//!
//! The choice of what to remove is the pure function [`sessions_to_remove`];
//! the store only carries it out. A session and its child sessions (a family,
//! see `store::family`) are kept or removed together, children first. Removal
//! deletes a session's metadata last, so a removal cut short by a crash leaves
//! a session that still lists and can be removed again, never records nobody
//! can reach. Which sessions are in use is the caller's knowledge (the runtime
//! passes its live sessions).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::family;
use super::layout::{self, check_id};
use super::records::SessionMeta;
use super::{Store, StoreError};

/// SPEC §9: sessions older than 30 days are removed in the background.
pub const SESSION_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// What the store keeps (`[store] keep_days`, `max_bytes`): sessions last
/// updated within `max_age`, and, with `max_bytes`, no more than that many
/// bytes of records (keys and values; sled's files take a multiple of it,
/// see `docs/storage.md`). Over the bound, the oldest finished families go
/// first until the records take at most [`SPACE_TARGET_PERCENT`] of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Sessions last updated longer ago than this are removed.
    pub max_age: Duration,
    /// The most bytes of records the store keeps; `None`: no bound.
    pub max_bytes: Option<u64>,
    /// Runs that ended longer ago than this have their deltas compacted
    /// (see [`Store::compact_run_events`]); until then a client that
    /// reconnects replays exactly what it missed.
    pub compact_after: Duration,
}

/// How long an ended run's events stay as they were emitted before the
/// retention pass compacts them.
pub const COMPACT_EVENTS_AFTER: Duration = Duration::from_secs(10 * 60);

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_age: SESSION_MAX_AGE,
            max_bytes: None,
            compact_after: COMPACT_EVENTS_AFTER,
        }
    }
}

/// Once over `max_bytes`, retention frees space down to this share of it,
/// so that a store at the bound is not trimmed again at every pass.
pub const SPACE_TARGET_PERCENT: u64 = 90;

/// How many bytes of records retention must free: none while `data_bytes`
/// is within `max_bytes`; above it, enough to come down to
/// [`SPACE_TARGET_PERCENT`] of `max_bytes`.
pub(crate) fn bytes_to_free(data_bytes: u64, max_bytes: u64) -> u64 {
    if data_bytes <= max_bytes {
        return 0;
    }
    let target =
        max_bytes / 100 * SPACE_TARGET_PERCENT + max_bytes % 100 * SPACE_TARGET_PERCENT / 100;
    data_bytes - target
}

/// Whether a family listed with `listed` (each member's id and update
/// time) may still go now that `current` (each member's update time now,
/// `None` when gone) and `running` (whether a member has a run marked
/// running now) are known: nobody wrote to it or started a run in it since.
pub(crate) fn family_unchanged(
    listed: &[(String, DateTime<Utc>)],
    current: &[Option<DateTime<Utc>>],
    running: &[bool],
) -> bool {
    listed.len() == current.len()
        && listed.len() == running.len()
        && listed
            .iter()
            .zip(current)
            .zip(running)
            .all(|(((_, was), now), busy)| !busy && now.is_none_or(|now| now == *was))
}

/// Which sessions the age-based cleanup removes. Sessions go by family: a
/// session together with its child sessions, their children and so on. A
/// family is removed only when every member was last updated strictly before
/// `cutoff`, is not in `in_use`, has no run in `running`, and names no parent
/// outside the listing that is in `in_use` or `running`; otherwise all of it
/// is kept. So a child whose parent is kept is never removed, and a removed
/// parent takes its children with it. A session whose parent is not listed
/// heads its own family.
///
/// Ids are returned family by family, the family with the oldest newest
/// update first; within a family the deepest sessions come first and the
/// family's head last, the order in which they are removed.
#[cfg(test)]
pub(super) fn sessions_to_remove(
    sessions: &[SessionMeta],
    cutoff: DateTime<Utc>,
    in_use: &HashSet<String>,
    running: &HashSet<String>,
) -> Vec<String> {
    removable_families(sessions, cutoff, in_use, running)
        .into_iter()
        .flatten()
        .map(|meta| meta.id.clone())
        .collect()
}

/// [`sessions_to_remove`], family by family.
fn removable_families<'a>(
    sessions: &'a [SessionMeta],
    cutoff: DateTime<Utc>,
    in_use: &HashSet<String>,
    running: &HashSet<String>,
) -> Vec<Vec<&'a SessionMeta>> {
    let busy = |id: &String| in_use.contains(id) || running.contains(id);
    let removable = |meta: &SessionMeta| {
        meta.updated < cutoff && !busy(&meta.id) && !meta.parent.as_ref().is_some_and(busy)
    };
    let mut chosen: Vec<Vec<&SessionMeta>> = family::families(sessions)
        .into_iter()
        .filter(|members| members.iter().all(|meta| removable(meta)))
        .collect();
    chosen.sort_by_cached_key(|members| {
        let newest = members.iter().map(|meta| meta.updated).max();
        let head = members.last().map(|meta| meta.id.clone());
        (newest, head)
    });
    chosen
}

/// The sessions whose work is still marked running: the session of each
/// `(run id, session id)` in `run_sessions` (runs marked running) and every
/// child session one of those runs created.
fn running_sessions(
    sessions: &[SessionMeta],
    run_sessions: impl IntoIterator<Item = (String, String)>,
) -> HashSet<String> {
    let mut running_runs = HashSet::new();
    let mut running = HashSet::new();
    for (run_id, session_id) in run_sessions {
        running_runs.insert(run_id);
        running.insert(session_id);
    }
    running.extend(
        sessions
            .iter()
            .filter(|meta| {
                meta.run_id
                    .as_ref()
                    .is_some_and(|run| running_runs.contains(run))
            })
            .map(|meta| meta.id.clone()),
    );
    running
}

impl Store {
    /// Removes a session, every session below it (its child sessions, their
    /// children, …) and every record of each: messages, pending results,
    /// markers, ledger, rules, memory, task plan, and runs with their events and spans. Nothing
    /// of another session is touched. The deepest sessions go first and `id`
    /// last, so a removal cut short leaves `id` listed, to be removed again.
    ///
    /// Returns the ids of the sessions of which something was removed, in
    /// that order (`id` last); empty when nothing was stored. Removes a
    /// session with damaged metadata too. Flushed before returning.
    pub fn remove_session(&self, id: &str) -> Result<Vec<String>, StoreError> {
        check_id("session", id)?;
        let descendants = self.descendant_sessions(id)?;
        let mut removed = Vec::new();
        for meta in descendants.iter().rev() {
            if self.remove_session_records(&meta.id)? {
                removed.push(meta.id.clone());
            }
        }
        if self.remove_session_records(id)? {
            removed.push(id.to_owned());
        }
        self.flush()?;
        Ok(removed)
    }

    /// Removes sessions last updated more than `age` before `now` (use
    /// [`SESSION_MAX_AGE`]), never one in `in_use` (see
    /// `sessions_to_remove` for every exception: a family goes whole or not
    /// at all). Sessions with a run still marked running, and the child
    /// sessions such a run created, count as running. Returns the removed ids.
    /// Meant to run in the background; it holds no lock between sessions.
    pub fn remove_sessions_older_than(
        &self,
        age: Duration,
        now: DateTime<Utc>,
        in_use: &HashSet<String>,
    ) -> Result<Vec<String>, StoreError> {
        let Some(cutoff) = TimeDelta::from_std(age)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
        else {
            return Ok(Vec::new());
        };
        let (sessions, running) = self.sessions_and_running()?;
        let listed: HashSet<&str> = sessions.iter().map(|meta| meta.id.as_str()).collect();
        let mut removed = Vec::new();
        for members in removable_families(&sessions, cutoff, in_use, &running) {
            if !self.family_still_removable(&members, &listed, cutoff)? {
                continue;
            }
            let ids = members.iter().map(|meta| meta.id.clone()).collect();
            removed.extend(self.remove_through_writer(ids)?);
        }
        if !removed.is_empty() {
            tracing::info!(count = removed.len(), "old sessions removed");
        }
        Ok(removed)
    }

    /// Applies `policy` at `now`: removes sessions older than its age,
    /// compacts the events of runs that ended more than `compact_after` ago
    /// (see [`Store::compact_run_events`]), then,
    /// with a byte bound the records exceed, the oldest families that are
    /// not in use and have no run in progress (never one in `in_use`; see
    /// `sessions_to_remove`) until the records are back under
    /// [`SPACE_TARGET_PERCENT`] of the bound. Returns the removed ids.
    /// Meant for a background thread: measuring reads every record once.
    pub fn retain(
        &self,
        policy: &Retention,
        now: DateTime<Utc>,
        in_use: &HashSet<String>,
    ) -> Result<Vec<String>, StoreError> {
        let mut removed = self.remove_sessions_older_than(policy.max_age, now, in_use)?;
        let ended_before = TimeDelta::from_std(policy.compact_after)
            .ok()
            .and_then(|after| now.checked_sub_signed(after))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let compacted = self.compact_ended_runs(ended_before)?;
        if compacted > 0 {
            tracing::debug!(runs = compacted, "events of ended runs compacted");
        }
        let Some(max_bytes) = policy.max_bytes else {
            return Ok(removed);
        };
        let needed = bytes_to_free(self.usage()?.data_bytes(), max_bytes);
        if needed == 0 {
            return Ok(removed);
        }
        let (sessions, running) = self.sessions_and_running()?;
        // Every family that may go, whatever its age: the cut-off is later
        // than any update.
        let families = removable_families(&sessions, DateTime::<Utc>::MAX_UTC, in_use, &running);
        let mut freed = 0u64;
        let mut from_space = Vec::new();
        for members in families {
            if freed >= needed {
                break;
            }
            let size = members
                .iter()
                .map(|meta| self.session_bytes(&meta.id))
                .sum::<Result<u64, StoreError>>()?;
            let listed = members
                .iter()
                .map(|meta| (meta.id.clone(), meta.updated))
                .collect();
            let gone = self.remove_family_if_unchanged(listed)?;
            if !gone.is_empty() {
                freed += size;
            }
            from_space.extend(gone);
        }
        if !from_space.is_empty() {
            tracing::info!(
                count = from_space.len(),
                freed,
                max_bytes,
                "sessions removed to keep the store within its size"
            );
        }
        removed.extend(from_space);
        Ok(removed)
    }

    /// [`Store::remove_through_writer`] of a family listed with `listed`
    /// (ids deepest first, with their update times), checked again on the
    /// writer thread, in order with every save and run record: a family
    /// written to, or with a run started in it, since it was listed is kept
    /// (nothing is removed, and the answer is empty).
    fn remove_family_if_unchanged(
        &self,
        listed: Vec<(String, DateTime<Utc>)>,
    ) -> Result<Vec<String>, StoreError> {
        self.through_writer(move |store| {
            let mut current = Vec::with_capacity(listed.len());
            let mut running = Vec::with_capacity(listed.len());
            for (id, _) in &listed {
                current.push(store.session_record(id)?.map(|record| record.meta.updated));
                let runs = store.list_runs(Some(id))?;
                running.push(runs.iter().any(|run| run.status.is_running()));
            }
            if !family_unchanged(&listed, &current, &running) {
                return Ok(Vec::new());
            }
            let mut removed = Vec::new();
            for (id, _) in listed {
                if store.remove_session_records(&id)? {
                    removed.push(id);
                }
            }
            Ok(removed)
        })
    }

    /// Removes the sessions `ids` (a family, deepest first) on the writer
    /// thread and waits until the removal is durable: agents' saves queue
    /// between one family and the next instead of behind a whole pass.
    /// Never call it from a write handed to the writer (it would wait for
    /// itself).
    fn remove_through_writer(&self, ids: Vec<String>) -> Result<Vec<String>, StoreError> {
        self.through_writer(move |store| {
            let mut removed = Vec::new();
            for id in ids {
                if store.remove_session_records(&id)? {
                    removed.push(id);
                }
            }
            Ok(removed)
        })
    }

    /// Runs `write` on the writer thread and waits until it is durable.
    /// Never call it from a write handed to the writer (it would wait for
    /// itself).
    pub(crate) fn through_writer<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (done, removed) = std::sync::mpsc::channel();
        self.commit_with(write, move |outcome| {
            let _ = done.send(outcome);
        });
        removed.recv().unwrap_or_else(|_| {
            Err(StoreError::Database {
                detail: "the store writer stopped before a write was made durable".into(),
            })
        })
    }

    /// Bytes of every record of one session: its metadata and head,
    /// messages, pending results, markers, ledger, rules, memory, task plan, and its
    /// runs with their events and spans.
    fn session_bytes(&self, id: &str) -> Result<u64, StoreError> {
        let prefix = layout::owner_prefix(id);
        let inner = &self.inner;
        let mut bytes = 0u64;
        let prefixed = |tree: &sled::Tree, prefix: &[u8]| -> Result<u64, StoreError> {
            let mut bytes = 0u64;
            for item in tree.scan_prefix(prefix) {
                let (key, value) = item.map_err(self.sled_err("measure a session"))?;
                bytes += (key.len() + value.len()) as u64;
            }
            Ok(bytes)
        };
        for tree in [
            &inner.messages,
            &inner.pending,
            &inner.markers,
            &inner.ledger,
            &inner.session_runs,
        ] {
            bytes += prefixed(tree, &prefix)?;
        }
        for key in inner.session_runs.scan_prefix(&prefix).keys() {
            let key = key.map_err(self.sled_err("measure a session"))?;
            let Some(run_id) = layout::parse_child_key(id, &key) else {
                continue;
            };
            let run_prefix = layout::owner_prefix(run_id);
            bytes += prefixed(&inner.events, &run_prefix)?;
            bytes += prefixed(&inner.spans, &run_prefix)?;
            if let Some(run) = inner
                .runs
                .get(run_id.as_bytes())
                .map_err(self.sled_err("measure a session"))?
            {
                bytes += (run_id.len() + run.len()) as u64;
            }
        }
        for tree in [
            &inner.sessions,
            &inner.rules,
            &inner.memory,
            &inner.task_plans,
        ] {
            if let Some(value) = tree
                .get(id.as_bytes())
                .map_err(self.sled_err("measure a session"))?
            {
                bytes += (id.len() + value.len()) as u64;
            }
        }
        Ok(bytes)
    }

    /// Every readable session's metadata, and the sessions whose work is
    /// still marked running (see `running_sessions`).
    fn sessions_and_running(&self) -> Result<(Vec<SessionMeta>, HashSet<String>), StoreError> {
        let sessions = self.read_sessions()?;
        let running = running_sessions(
            &sessions,
            self.unfinished_runs()?
                .into_iter()
                .map(|run| (run.run_id, run.session_id)),
        );
        Ok((sessions, running))
    }

    /// Whether a family chosen from the listing may still go: no member was
    /// written to since the listing, and its head's parent is not a session
    /// whose metadata is damaged (listing skips it, but it is kept, so its
    /// children are too).
    fn family_still_removable(
        &self,
        members: &[&SessionMeta],
        listed: &HashSet<&str>,
        cutoff: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        if let Some(parent) = members.last().and_then(|head| head.parent.as_deref())
            && !listed.contains(parent)
            && check_id("session", parent).is_ok()
            && self
                .inner
                .sessions
                .contains_key(parent.as_bytes())
                .map_err(self.sled_err("read a session"))?
        {
            return Ok(false);
        }
        for meta in members {
            let still_old = self
                .session_record(&meta.id)?
                .is_some_and(|record| record.meta.updated < cutoff);
            if !still_old {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes every record of a session, metadata last. Not flushed.
    fn remove_session_records(&self, id: &str) -> Result<bool, StoreError> {
        let prefix = layout::owner_prefix(id);
        let mut removed = 0usize;
        for key in self.inner.session_runs.scan_prefix(&prefix).keys() {
            let key = key.map_err(self.sled_err("list a session's runs"))?;
            let Some(run_id) = layout::parse_child_key(id, &key) else {
                continue;
            };
            let run_prefix = layout::owner_prefix(run_id);
            removed += self.remove_prefix(&self.inner.events, &run_prefix, "remove events")?;
            removed += self.remove_prefix(&self.inner.spans, &run_prefix, "remove spans")?;
            let run = self
                .inner
                .runs
                .remove(run_id.as_bytes())
                .map_err(self.sled_err("remove a run"))?;
            removed += usize::from(run.is_some());
        }
        removed += self.remove_prefix(&self.inner.session_runs, &prefix, "remove runs")?;
        removed += self.remove_prefix(&self.inner.messages, &prefix, "remove messages")?;
        removed += self.remove_prefix(&self.inner.pending, &prefix, "remove tool results")?;
        removed += self.remove_prefix(&self.inner.markers, &prefix, "remove markers")?;
        removed += self.remove_prefix(&self.inner.ledger, &prefix, "remove the ledger")?;
        let rules = self
            .inner
            .rules
            .remove(id.as_bytes())
            .map_err(self.sled_err("remove rules"))?;
        removed += usize::from(rules.is_some());
        let memory = self
            .inner
            .memory
            .remove(id.as_bytes())
            .map_err(self.sled_err("remove the session's memory"))?;
        removed += usize::from(memory.is_some());
        let task_plan = self
            .inner
            .task_plans
            .remove(id.as_bytes())
            .map_err(self.sled_err("remove the task plan"))?;
        removed += usize::from(task_plan.is_some());
        let meta = self
            .inner
            .sessions
            .remove(id.as_bytes())
            .map_err(self.sled_err("remove a session"))?;
        removed += usize::from(meta.is_some());
        if removed > 0 {
            tracing::debug!(session = id, records = removed, "session removed");
        }
        Ok(removed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(days: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(days * 86_400, 0).single().unwrap()
    }

    #[test]
    fn space_is_freed_down_to_ninety_percent_of_the_bound_only_when_over_it() {
        assert_eq!(bytes_to_free(1_000, 1_000), 0);
        assert_eq!(bytes_to_free(0, 1_000), 0);
        assert_eq!(bytes_to_free(1_001, 1_000), 101);
        assert_eq!(bytes_to_free(5_000, 1_000), 4_100);
        // No overflow at the top of the range.
        assert_eq!(
            bytes_to_free(u64::MAX, u64::MAX - 1),
            u64::MAX - (u64::MAX - 1) / 100 * 90 - (u64::MAX - 1) % 100 * 90 / 100
        );
    }

    #[test]
    fn a_family_written_to_or_running_since_it_was_listed_stays() {
        let listed = vec![("child".to_string(), at(1)), ("head".to_string(), at(2))];
        assert!(family_unchanged(
            &listed,
            &[Some(at(1)), Some(at(2))],
            &[false, false]
        ));
        // A member already gone is no reason to keep the rest.
        assert!(family_unchanged(
            &listed,
            &[None, Some(at(2))],
            &[false, false]
        ));
        assert!(!family_unchanged(
            &listed,
            &[Some(at(1)), Some(at(3))],
            &[false, false]
        ));
        assert!(!family_unchanged(
            &listed,
            &[Some(at(1)), Some(at(2))],
            &[false, true]
        ));
        assert!(!family_unchanged(&listed, &[Some(at(1))], &[false]));
    }

    fn meta(id: &str, updated_day: i64, parent: Option<&str>) -> SessionMeta {
        SessionMeta {
            id: id.into(),
            title: String::new(),
            cwd: "/".into(),
            provider: "p".into(),
            model: "m".into(),
            created: at(0),
            updated: at(updated_day),
            message_count: 0,
            parent: parent.map(Into::into),
            agent_path: parent.map(|_| format!("main/{id}")),
            run_id: None,
            fork_of: None,
            branch_of: None,
        }
    }

    fn child_of_run(id: &str, updated_day: i64, parent: &str, run: &str) -> SessionMeta {
        SessionMeta {
            run_id: Some(run.into()),
            fork_of: None,
            ..meta(id, updated_day, Some(parent))
        }
    }

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn old_sessions_go_recent_ones_stay() {
        let sessions = [
            meta("old", 1, None),
            meta("older", 0, None),
            meta("new", 40, None),
            meta("edge", 10, None),
        ];
        let chosen = sessions_to_remove(&sessions, at(10), &set(&[]), &set(&[]));
        assert_eq!(chosen, vec!["older", "old"]);
    }

    #[test]
    fn sessions_in_use_or_running_are_never_chosen() {
        let sessions = [meta("a", 1, None), meta("b", 1, None), meta("c", 1, None)];
        let chosen = sessions_to_remove(&sessions, at(10), &set(&["a"]), &set(&["b"]));
        assert_eq!(chosen, vec!["c"]);
    }

    #[test]
    fn family_of_a_session_in_use_is_kept() {
        let sessions = [
            meta("parent", 1, None),
            meta("child", 1, Some("parent")),
            meta("busy-child", 1, Some("grand")),
            meta("grand", 1, None),
            meta("loner", 1, Some("gone")),
        ];
        let chosen = sessions_to_remove(
            &sessions,
            at(10),
            &set(&["parent", "busy-child"]),
            &set(&[]),
        );
        assert_eq!(chosen, vec!["loner"]);
    }

    #[test]
    fn a_child_of_a_kept_parent_is_never_removed() {
        // Old children of a recent parent, of a parent in use, of a parent
        // with a running run: all kept, grandchildren too.
        let sessions = [
            meta("recent", 40, None),
            meta("old-child", 1, Some("recent")),
            meta("old-grandchild", 1, Some("old-child")),
            meta("busy", 1, None),
            meta("busy-child", 1, Some("busy")),
            meta("running", 1, None),
            meta("running-child", 1, Some("running")),
        ];
        let chosen = sessions_to_remove(&sessions, at(10), &set(&["busy"]), &set(&["running"]));
        assert!(chosen.is_empty(), "{chosen:?}");
        // A parent that is not listed but in use keeps its children as well.
        let orphans = [
            meta("child", 1, Some("live")),
            meta("grand", 1, Some("child")),
        ];
        let chosen = sessions_to_remove(&orphans, at(10), &set(&["live"]), &set(&[]));
        assert!(chosen.is_empty(), "{chosen:?}");
    }

    #[test]
    fn an_old_parent_with_a_recent_or_busy_child_is_kept_with_its_family() {
        let sessions = [
            meta("parent", 1, None),
            meta("old-child", 1, Some("parent")),
            meta("recent-grandchild", 40, Some("old-child")),
            meta("other", 1, None),
            meta("other-child", 1, Some("other")),
        ];
        let chosen = sessions_to_remove(&sessions, at(10), &set(&[]), &set(&[]));
        assert_eq!(chosen, vec!["other-child", "other"]);
        let chosen = sessions_to_remove(&sessions, at(10), &set(&["other-child"]), &set(&[]));
        assert!(chosen.is_empty(), "{chosen:?}");
    }

    #[test]
    fn a_removed_parent_takes_its_family_children_first() {
        let sessions = [
            meta("parent", 3, None),
            meta("child-b", 2, Some("parent")),
            meta("child-a", 1, Some("parent")),
            meta("grandchild", 2, Some("child-a")),
            meta("older-loner", 0, None),
            meta("orphan", 5, Some("gone")),
            meta("orphan-child", 1, Some("orphan")),
        ];
        let chosen = sessions_to_remove(&sessions, at(10), &set(&[]), &set(&[]));
        assert_eq!(
            chosen,
            vec![
                "older-loner",
                "grandchild",
                "child-a",
                "child-b",
                "parent",
                "orphan-child",
                "orphan",
            ]
        );
        // A damaged cycle goes whole when all of it is old.
        let cycle = [meta("a", 1, Some("b")), meta("b", 1, Some("a"))];
        let mut chosen = sessions_to_remove(&cycle, at(10), &set(&[]), &set(&[]));
        chosen.sort();
        assert_eq!(chosen, vec!["a", "b"]);
    }

    #[test]
    fn child_sessions_of_a_running_run_count_as_running() {
        let sessions = [
            meta("top", 1, None),
            child_of_run("child", 1, "top", "live-run"),
            child_of_run("stray", 1, "elsewhere", "live-run"),
            child_of_run("done", 1, "finished-top", "old-run"),
        ];
        let running = running_sessions(&sessions, [("live-run".into(), "top".into())]);
        assert_eq!(running, set(&["top", "child", "stray"]));
        let chosen = sessions_to_remove(&sessions, at(10), &set(&[]), &running);
        assert_eq!(chosen, vec!["done"]);
    }
}
