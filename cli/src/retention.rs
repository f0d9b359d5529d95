//! What the store keeps: the retention pass an embedded run starts in the
//! background and the daemon repeats as it runs (`[store] keep_days`,
//! `max_bytes` of the user's config file). The store decides which sessions
//! go; this module reads the settings, hands over the sessions in use and
//! removes the spill directories of the removed sessions. The checkpoint
//! stores follow: [`sweep_checkpoints`] drops the checkpoints of sessions
//! that are gone and keeps the stores within `[checkpoints] max_bytes`.

use std::collections::HashSet;
use std::time::Duration;

use troupe_config::StoreSettings;
use troupe_store::{Retention, Store};

use crate::project::Locations;

/// How often the daemon applies the retention policy.
pub(crate) const DAEMON_RETENTION_PERIOD: Duration = Duration::from_secs(10 * 60);

/// The store's policy for `settings`.
pub(crate) fn policy(settings: &StoreSettings) -> Retention {
    Retention {
        max_age: settings.keep,
        max_bytes: settings.max_bytes,
        ..Retention::default()
    }
}

/// One retention pass over `store` (blocking: run it on a blocking thread),
/// never touching the sessions in `in_use` or a session with a run in
/// progress. Removed sessions lose their spilled tool output too. Failures
/// are logged: retention must never stop a run.
pub(crate) fn apply(store: &Store, locations: &Locations, in_use: &HashSet<String>) {
    if let Err(err) = apply_now(store, locations, in_use) {
        tracing::warn!(%err, "the retention policy could not be applied");
    }
}

/// [`apply`], answering the sessions removed (their spilled output goes
/// with them) or why the policy could not be applied.
pub(crate) fn apply_now(
    store: &Store,
    locations: &Locations,
    in_use: &HashSet<String>,
) -> Result<Vec<String>, troupe_store::StoreError> {
    let settings = locations.store_settings();
    let removed = store.retain(&policy(&settings), chrono::Utc::now(), in_use)?;
    if !removed.is_empty() {
        troupe_tools::output::remove_spill_dirs(&locations.data_dir, &removed);
        tracing::info!(
            count = removed.len(),
            "sessions removed by the retention policy"
        );
    }
    Ok(removed)
}

/// What `troupe sessions clean` did, as the daemon answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Cleaned {
    /// Sessions the retention policy removed.
    pub removed_sessions: Vec<String>,
    /// The checkpoint sweep (orphans dropped, sessions pruned, bytes).
    pub checkpoints: troupe_checkpoint::HomeSweep,
}

impl Cleaned {
    /// What was done, for people.
    pub(crate) fn text(&self) -> String {
        let sweep = &self.checkpoints;
        format!(
            "removed {} session(s) by the retention policy; dropped the checkpoints of {} session(s) that are gone and of {} to stay within [checkpoints] max_bytes; the checkpoint stores take {} bytes (were {})",
            self.removed_sessions.len(),
            sweep.orphans.len(),
            sweep.pruned.len(),
            sweep.bytes_after,
            sweep.bytes_before
        )
    }
}

/// `troupe sessions clean` in the process holding `store`: the retention
/// policy, then the checkpoint sweep, now.
pub(crate) async fn clean_now(
    store: &Store,
    locations: &Locations,
) -> Result<Cleaned, (u8, String)> {
    let removed_sessions = {
        let (store, locations) = (store.clone(), locations.clone());
        tokio::task::spawn_blocking(move || apply_now(&store, &locations, &HashSet::new()))
            .await
            .map_err(|err| (crate::EXIT_RUNTIME, err.to_string()))?
            .map_err(|err| (crate::EXIT_RUNTIME, err.to_string()))?
    };
    let checkpoints = sweep_checkpoints_now(store, locations, &HashSet::new())
        .await
        .map_err(|err| (crate::EXIT_RUNTIME, err))?;
    Ok(Cleaned {
        removed_sessions,
        checkpoints,
    })
}

/// How often an embedded run sweeps the checkpoint stores (the daemon does
/// at each retention pass): a marker file's age says when it last did.
pub(crate) const EMBEDDED_SWEEP_PERIOD: Duration = Duration::from_secs(24 * 60 * 60);

/// The marker file of the last sweep, in the checkpoint stores' directory.
const SWEEP_MARKER: &str = "last-sweep";

/// Whether the sweep marker under `data_dir` is older than `period` (or
/// absent) while checkpoint stores exist: an embedded run's sweep is due.
pub(crate) fn sweep_due(data_dir: &std::path::Path, period: Duration) -> bool {
    let dir = data_dir.join(troupe_checkpoint::store::STORES_DIR);
    if !dir.is_dir() {
        return false;
    }
    std::fs::metadata(dir.join(SWEEP_MARKER))
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok())
        .is_none_or(|age| age >= period)
}

/// Records that a sweep of the stores under `data_dir` finished now.
fn mark_swept(data_dir: &std::path::Path) {
    let marker = data_dir
        .join(troupe_checkpoint::store::STORES_DIR)
        .join(SWEEP_MARKER);
    if let Err(err) = std::fs::write(&marker, b"") {
        tracing::warn!(%err, "the checkpoint sweep's marker could not be written");
    }
}

/// Drops the checkpoints of sessions `store` no longer holds and keeps the
/// checkpoint stores within the user's `[checkpoints] max_bytes`, never
/// touching a session in `in_use` or with a run in progress. Failures are
/// logged.
pub(crate) async fn sweep_checkpoints(
    store: &Store,
    locations: &Locations,
    in_use: &HashSet<String>,
) {
    if let Err(err) = sweep_checkpoints_now(store, locations, in_use).await {
        tracing::warn!(%err, "the checkpoint stores could not be swept");
    }
}

/// [`sweep_checkpoints`], answering what the sweep did or why it failed.
pub(crate) async fn sweep_checkpoints_now(
    store: &Store,
    locations: &Locations,
    in_use: &HashSet<String>,
) -> Result<troupe_checkpoint::HomeSweep, String> {
    let max_bytes = locations.checkpoint_settings().max_bytes;
    let running: HashSet<String> = store
        .list_runs(None)
        .map_err(|err| format!("the checkpoint sweep cannot tell which sessions run: {err}"))?
        .into_iter()
        .filter(|run| run.status.is_running())
        .map(|run| run.session_id)
        .collect();
    let exists = |session: &str| !matches!(store.session(session), Ok(None));
    let busy = |session: &str| in_use.contains(session) || running.contains(session);
    let sweep = troupe_checkpoint::sweep_home(&locations.data_dir, &exists, &busy, max_bytes)
        .await
        .map_err(|err| err.to_string())?;
    mark_swept(&locations.data_dir);
    if !sweep.orphans.is_empty() || !sweep.pruned.is_empty() {
        tracing::info!(
            orphans = sweep.orphans.len(),
            pruned = sweep.pruned.len(),
            bytes_before = sweep.bytes_before,
            bytes_after = sweep.bytes_after,
            "checkpoints swept"
        );
    }
    Ok(sweep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_embedded_sweep_is_due_once_a_period_and_only_where_stores_exist() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!sweep_due(dir.path(), Duration::ZERO));
        std::fs::create_dir_all(dir.path().join("checkpoints")).unwrap();
        assert!(sweep_due(dir.path(), Duration::from_secs(3600)));
        mark_swept(dir.path());
        assert!(!sweep_due(dir.path(), Duration::from_secs(3600)));
        assert!(sweep_due(dir.path(), Duration::ZERO));
    }

    #[test]
    fn the_policy_is_the_settings() {
        let settings = StoreSettings {
            keep: Duration::from_secs(86_400),
            max_bytes: Some(5_000_000),
        };
        assert_eq!(
            policy(&settings),
            Retention {
                max_age: Duration::from_secs(86_400),
                max_bytes: Some(5_000_000),
                compact_after: troupe_store::COMPACT_EVENTS_AFTER,
            }
        );
        assert_eq!(policy(&StoreSettings::default()), Retention::default());
    }
}
