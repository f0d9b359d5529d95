//! Removing sessions: one session on request (`troupe sessions rm`) and the
//! background removal of sessions older than 30 days (SPEC §9), which never
//! removes a session in use.
//!
//! The choice of what to remove is the pure function [`sessions_to_remove`];
//! the store only carries it out. Removal deletes a session's metadata last,
//! so a removal cut short by a crash leaves a session that still lists and can
//! be removed again, never records nobody can reach. Which sessions are in use
//! is the caller's knowledge (the runtime passes its live sessions).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::layout::{self, check_id};
use super::records::SessionMeta;
use super::{Store, StoreError};

/// SPEC §9: sessions older than 30 days are removed in the background.
pub const SESSION_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Which sessions the age-based cleanup removes: those last updated strictly
/// before `cutoff`, except a session that is in use, has a run still marked
/// running, is a sub-agent session of a session in use, or is the parent of a
/// session in use. Ids are returned oldest first.
pub fn sessions_to_remove(
    sessions: &[SessionMeta],
    cutoff: DateTime<Utc>,
    in_use: &HashSet<String>,
    running: &HashSet<String>,
) -> Vec<String> {
    let parents_in_use: HashSet<&str> = sessions
        .iter()
        .filter(|meta| in_use.contains(&meta.id))
        .filter_map(|meta| meta.parent.as_deref())
        .collect();
    let mut old: Vec<&SessionMeta> = sessions
        .iter()
        .filter(|meta| meta.updated < cutoff)
        .filter(|meta| !in_use.contains(&meta.id) && !running.contains(&meta.id))
        .filter(|meta| {
            !meta
                .parent
                .as_ref()
                .is_some_and(|parent| in_use.contains(parent))
        })
        .filter(|meta| !parents_in_use.contains(meta.id.as_str()))
        .collect();
    old.sort_by(|a, b| a.updated.cmp(&b.updated).then_with(|| a.id.cmp(&b.id)));
    old.into_iter().map(|meta| meta.id.clone()).collect()
}

impl Store {
    /// Removes a session and every record of it: messages, pending results,
    /// markers, ledger, rules, and its runs with their events and spans.
    /// Nothing of another session is touched. Returns whether anything was
    /// removed. Flushed before returning.
    pub fn remove_session(&self, id: &str) -> Result<bool, StoreError> {
        check_id("session", id)?;
        let removed = self.remove_session_records(id)?;
        self.flush()?;
        Ok(removed)
    }

    /// Removes sessions last updated more than `age` before `now` (use
    /// [`SESSION_MAX_AGE`]), never one in `in_use` (see
    /// [`sessions_to_remove`] for every exception). Returns the removed ids.
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
        let sessions = self.list_sessions()?;
        let running: HashSet<String> = self
            .unfinished_runs()?
            .into_iter()
            .map(|run| run.session_id)
            .collect();
        let mut removed = Vec::new();
        for id in sessions_to_remove(&sessions, cutoff, in_use, &running) {
            // Written to since the listing: no longer old.
            let still_old = self
                .session_record(&id)?
                .is_some_and(|record| record.meta.updated < cutoff);
            if still_old && self.remove_session_records(&id)? {
                removed.push(id);
            }
        }
        if !removed.is_empty() {
            self.flush()?;
            tracing::info!(count = removed.len(), "old sessions removed");
        }
        Ok(removed)
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
            agent_path: None,
            run_id: None,
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
}
