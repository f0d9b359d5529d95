//! What the store keeps: the retention pass an embedded run starts in the
//! background and the daemon repeats as it runs (`[store] keep_days`,
//! `max_bytes` of the user's config file). The store decides which sessions
//! go; this module reads the settings, hands over the sessions in use and
//! removes the spill directories of the removed sessions.

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
    let settings = locations.store_settings();
    match store.retain(&policy(&settings), chrono::Utc::now(), in_use) {
        Ok(removed) if !removed.is_empty() => {
            troupe_tools::output::remove_spill_dirs(&locations.data_dir, &removed);
            tracing::info!(
                count = removed.len(),
                "sessions removed by the retention policy"
            );
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "the retention policy could not be applied"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
