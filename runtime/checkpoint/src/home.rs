//! The checkpoint stores of a data directory taken together
//! (`HOME/checkpoints/*.git`, one per project): checkpoints follow their
//! session, so a session the session store no longer holds loses its
//! checkpoints, and the stores together stay within a bound, the sessions
//! whose newest checkpoint is oldest going first, never a session in use.
//! [`sweep_home`] does both; [`sweep_order`] decides the order, pure.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::CheckpointError;
use crate::store::{CheckpointStore, STORES_DIR};

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeSweep {
    /// The stores' bytes together before.
    pub bytes_before: u64,
    /// And after.
    pub bytes_after: u64,
    /// Sessions whose checkpoints were dropped because the session is gone.
    pub orphans: Vec<String>,
    /// Sessions whose checkpoints were dropped to meet the bound, oldest
    /// first.
    pub pruned: Vec<String>,
}

/// One session's checkpoints in one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// Which store (an index into the stores swept).
    pub store: usize,
    /// The session.
    pub session: String,
    /// The time (Unix seconds) of its newest checkpoint.
    pub newest: i64,
}

/// The order sessions are dropped in to meet the bound: oldest newest
/// checkpoint first (then by name), never one `in_use` says is in use.
/// Pure.
pub fn sweep_order(
    mut sessions: Vec<StoredSession>,
    in_use: &(dyn Fn(&str) -> bool + Sync),
) -> Vec<StoredSession> {
    sessions.retain(|stored| !in_use(&stored.session));
    sessions.sort_by(|a, b| {
        a.newest
            .cmp(&b.newest)
            .then_with(|| a.session.cmp(&b.session))
    });
    sessions
}

/// The store directories under `home`.
fn store_dirs(home: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(home.join(STORES_DIR)) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "git"))
        .collect();
    dirs.sort();
    dirs
}

/// Drops the checkpoints of every session `exists` says is gone, then,
/// while the stores of `home` take more than `max_bytes` together, packs
/// them and drops whole sessions in [`sweep_order`] (never one `in_use`
/// names), packing each store that lost one.
pub async fn sweep_home(
    home: &Path,
    exists: &(dyn Fn(&str) -> bool + Sync),
    in_use: &(dyn Fn(&str) -> bool + Sync),
    max_bytes: u64,
) -> Result<HomeSweep, CheckpointError> {
    let stores: Vec<CheckpointStore> = store_dirs(home)
        .iter()
        .filter_map(|dir| CheckpointStore::open_existing(dir))
        .collect();
    let mut sweep = HomeSweep::default();
    let mut sizes = Vec::with_capacity(stores.len());
    let mut remaining = Vec::new();
    for (index, store) in stores.iter().enumerate() {
        sizes.push(store.size().await?);
        let mut dropped = false;
        for (session, newest) in store.session_times().await? {
            if exists(&session) {
                remaining.push(StoredSession {
                    store: index,
                    session,
                    newest,
                });
            } else {
                store.remove_session(&session).await?;
                sweep.orphans.push(session);
                dropped = true;
            }
        }
        if dropped {
            store.pack().await?;
        }
    }
    sweep.bytes_before = sizes.iter().sum();
    for (index, store) in stores.iter().enumerate() {
        sizes[index] = store.size().await?;
    }
    if sizes.iter().sum::<u64>() > max_bytes {
        for (index, store) in stores.iter().enumerate() {
            store.pack().await?;
            sizes[index] = store.size().await?;
        }
    }
    for stored in sweep_order(remaining, in_use) {
        if sizes.iter().sum::<u64>() <= max_bytes {
            break;
        }
        let store = &stores[stored.store];
        store.remove_session(&stored.session).await?;
        store.pack().await?;
        sizes[stored.store] = store.size().await?;
        sweep.pruned.push(stored.session);
    }
    sweep.bytes_after = sizes.iter().sum();
    Ok(sweep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(store: usize, session: &str, newest: i64) -> StoredSession {
        StoredSession {
            store,
            session: session.to_owned(),
            newest,
        }
    }

    #[test]
    fn the_oldest_sessions_go_first_across_stores_never_one_in_use() {
        let order = sweep_order(
            vec![
                stored(0, "b", 30),
                stored(1, "a", 10),
                stored(0, "busy", 1),
                stored(1, "c", 30),
            ],
            &|session| session == "busy",
        );
        let names: Vec<&str> = order.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(order[0].store, 1);
    }
}
