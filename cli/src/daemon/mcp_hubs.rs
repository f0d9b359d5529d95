//! The daemon's MCP servers, shared by the runs of a project: the first run
//! of a project starts its configured servers, later runs of that project
//! take the same connections, so only the first run ever waits for them.
//!
//! A hub (one running set of servers) belongs to one project root and to the
//! exact servers that project's configuration resolved to ([`hub_key`]). The
//! servers of a run are chosen by [`choose_hub`]: the project's hub when its
//! key is the run's; a new hub when the project has none; a new hub replacing
//! the old one when the key differs (the configuration changed, or trusting
//! the project brought its own servers in). Runs of different projects never
//! share. A replaced hub is shut down as soon as no run holds it any longer.
//!
//! Runs hold a clone of their hub and never shut it down; the registry does.
//! Every [`SWEEP_PERIOD`] the daemon sweeps: replaced hubs no run holds are
//! shut down, and a project's hub that no run has held for [`HUB_IDLE_LIMIT`]
//! is evicted ([`evict`]); the project's next run starts its servers again.
//! When the daemon stops, every hub is shut down concurrently, each within
//! the MCP shutdown budget (sessions closed, process groups killed).
//!
//! What stays outside: the servers themselves and their supervision
//! (`troupe_actors::mcp`), and which servers a configuration names
//! (`crate::mcp`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use troupe_actors::BaseEnv;
use troupe_actors::McpHub;
use troupe_config::Config;
use troupe_mcp::{McpServerSpec, SHUTDOWN_BUDGET};

use crate::project::Locations;

/// A project's servers are closed once no run has held them this long.
pub(crate) const HUB_IDLE_LIMIT: Duration = Duration::from_secs(600);

/// How often the daemon looks for hubs to shut down.
pub(crate) const SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// Room beyond [`SHUTDOWN_BUDGET`] for the hubs' actors to answer before the
/// daemon stops waiting (dropping a hub still kills its process groups).
const SHUTDOWN_SLACK: Duration = Duration::from_millis(500);

/// What a hub serves: one project root and the servers its configuration
/// resolved to (commands, arguments, expanded variables, working
/// directories, URLs, headers, grace periods).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubKey {
    /// The project root.
    pub root: PathBuf,
    /// The resolved servers, by name.
    pub specs: Vec<McpServerSpec>,
}

/// The key of the servers `specs` for the project at `root`. `specs` come
/// sorted by name from the configuration; they are sorted here too, so the
/// key does not depend on the order they were listed in.
pub(crate) fn hub_key(root: &Path, specs: &[McpServerSpec]) -> HubKey {
    let mut specs = specs.to_vec();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    HubKey {
        root: root.to_path_buf(),
        specs,
    }
}

/// What to do with a project's hub for a run that wants `wanted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HubChoice {
    /// The project's hub serves exactly these servers: share it.
    Reuse,
    /// The project has no hub: start one.
    Start,
    /// The project's hub serves other servers: retire it, start a new one.
    Replace,
    /// The run wants no servers: retire the project's hub.
    Retire,
    /// The run wants no servers and the project has no hub.
    Nothing,
}

/// Chooses the servers of a run that wants `wanted`, given the key of the
/// project's current hub (`None`: it has none).
pub(crate) fn choose_hub(current: Option<&HubKey>, wanted: &HubKey) -> HubChoice {
    match current {
        _ if wanted.specs.is_empty() => match current {
            Some(_) => HubChoice::Retire,
            None => HubChoice::Nothing,
        },
        None => HubChoice::Start,
        Some(current) if current == wanted => HubChoice::Reuse,
        Some(_) => HubChoice::Replace,
    }
}

/// Whether a project's hub is evicted: no run holds it and none has for at
/// least `limit` (`unused_for` is the time since a run last held it).
pub(crate) fn evict(in_use: bool, unused_for: Duration, limit: Duration) -> bool {
    !in_use && unused_for >= limit
}

/// The daemon's running hubs.
pub(crate) struct McpHubs {
    idle_limit: Duration,
    hubs: Mutex<Hubs>,
}

impl std::fmt::Debug for McpHubs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHubs")
            .field("idle_limit", &self.idle_limit)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Hubs {
    /// The current hub of each project.
    by_root: HashMap<PathBuf, Shared>,
    /// Replaced hubs some run still holds.
    retiring: Vec<McpHub>,
    /// Shutdowns in progress.
    closing: Vec<JoinHandle<()>>,
    /// The daemon is stopping: no hub starts any more.
    stopped: bool,
}

struct Shared {
    key: HubKey,
    hub: McpHub,
    /// When a run last held it (or it was started).
    last_used: Instant,
}

impl Default for McpHubs {
    fn default() -> Self {
        Self::new(HUB_IDLE_LIMIT)
    }
}

impl McpHubs {
    /// No hubs yet; a project's hub is evicted after `idle_limit` unused.
    pub(crate) fn new(idle_limit: Duration) -> Self {
        Self {
            idle_limit,
            hubs: Mutex::new(Hubs::default()),
        }
    }

    /// The servers of a run in `project_root` configured by `config`, with
    /// the warnings to show (undefined variables, unusable entries, a hub
    /// that could not start). `None` when the project has no servers.
    pub(crate) async fn servers_for(
        &self,
        config: &Config,
        locations: &Locations,
        project_root: &Path,
    ) -> (Option<McpHub>, Vec<String>) {
        let (specs, mut warnings) = crate::mcp::server_specs(config, locations, project_root);
        let key = hub_key(project_root, &specs);
        match self
            .acquire(key, crate::mcp::base_env(locations), Instant::now())
            .await
        {
            Ok(hub) => (hub, warnings),
            Err(err) => {
                warnings.push(err);
                (None, warnings)
            }
        }
    }

    /// The hub for `key`, shared, started (from `base_env`) when the project
    /// has none or has one for other servers; `None` when `key` names no
    /// servers. `now` is when the run takes it.
    pub(crate) async fn acquire(
        &self,
        key: HubKey,
        base_env: BaseEnv,
        now: Instant,
    ) -> Result<Option<McpHub>, String> {
        let mut hubs = self.hubs.lock().await;
        if hubs.stopped {
            return Err("the daemon is stopping; MCP servers are not started".into());
        }
        let current = hubs.by_root.get(&key.root).map(|shared| &shared.key);
        match choose_hub(current, &key) {
            HubChoice::Nothing => Ok(None),
            HubChoice::Retire => {
                if let Some(old) = hubs.by_root.remove(&key.root) {
                    tracing::info!(root = %key.root.display(), "MCP servers no longer configured; closing them");
                    hubs.retire(old.hub);
                }
                Ok(None)
            }
            HubChoice::Reuse => {
                let shared = hubs
                    .by_root
                    .get_mut(&key.root)
                    .ok_or("the project's MCP servers went away")?;
                shared.last_used = now;
                Ok(Some(shared.hub.clone()))
            }
            HubChoice::Start | HubChoice::Replace => {
                if let Some(old) = hubs.by_root.remove(&key.root) {
                    tracing::info!(root = %key.root.display(), "MCP configuration changed; replacing the servers");
                    hubs.retire(old.hub);
                }
                tracing::info!(
                    root = %key.root.display(),
                    servers = key.specs.len(),
                    "starting the project's MCP servers"
                );
                let hub = McpHub::start(key.specs.clone(), base_env).await?;
                let root = key.root.clone();
                hubs.by_root.insert(
                    root,
                    Shared {
                        key,
                        hub: hub.clone(),
                        last_used: now,
                    },
                );
                Ok(Some(hub))
            }
        }
    }

    /// Shuts down the replaced hubs no run holds any more and evicts the
    /// hubs no run has held for the idle limit, as of `now`.
    pub(crate) async fn sweep(&self, now: Instant) {
        let mut hubs = self.hubs.lock().await;
        hubs.closing.retain(|task| !task.is_finished());
        let retiring = std::mem::take(&mut hubs.retiring);
        for hub in retiring {
            hubs.retire(hub);
        }
        let mut evicted = Vec::new();
        for (root, shared) in &mut hubs.by_root {
            let in_use = shared.hub.handles() > 1;
            if in_use {
                shared.last_used = now;
            }
            let unused_for = now.saturating_duration_since(shared.last_used);
            if evict(in_use, unused_for, self.idle_limit) {
                evicted.push(root.clone());
            }
        }
        for root in evicted {
            if let Some(shared) = hubs.by_root.remove(&root) {
                tracing::info!(root = %root.display(), "no run used the project's MCP servers for a while; closing them");
                hubs.retire(shared.hub);
            }
        }
    }

    /// Shuts every hub down concurrently (each closes its sessions within
    /// the MCP shutdown budget and kills its process groups) and starts no
    /// more.
    pub(crate) async fn shutdown(&self) {
        let (hubs, closing) = {
            let mut hubs = self.hubs.lock().await;
            hubs.stopped = true;
            let mut all: Vec<McpHub> = hubs.by_root.drain().map(|(_, s)| s.hub).collect();
            all.append(&mut hubs.retiring);
            (all, std::mem::take(&mut hubs.closing))
        };
        let shutdowns = hubs.iter().map(McpHub::shutdown);
        let everything = async {
            futures::future::join_all(shutdowns).await;
            futures::future::join_all(closing).await;
        };
        if tokio::time::timeout(SHUTDOWN_BUDGET + SHUTDOWN_SLACK, everything)
            .await
            .is_err()
        {
            tracing::warn!("MCP servers still closing after the shutdown budget; killing them");
        }
        // Dropping the last handles stops what is left and kills the groups.
        drop(hubs);
    }

    /// How many hubs run: the projects' current ones and the replaced ones
    /// still held or closing.
    #[cfg(test)]
    pub(crate) async fn running(&self) -> usize {
        let hubs = self.hubs.lock().await;
        hubs.by_root.len()
            + hubs.retiring.len()
            + hubs.closing.iter().filter(|t| !t.is_finished()).count()
    }
}

impl Hubs {
    /// Shuts `hub` down now when no run holds it, else keeps it until the
    /// sweep after its last run.
    fn retire(&mut self, hub: McpHub) {
        if hub.handles() > 1 {
            self.retiring.push(hub);
        } else {
            self.closing
                .push(tokio::spawn(async move { hub.shutdown().await }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use troupe_mcp::McpTransportSpec;

    fn spec(name: &str, url: &str) -> McpServerSpec {
        McpServerSpec {
            name: name.into(),
            transport: McpTransportSpec::Http {
                url: url.into(),
                headers: vec![],
            },
            startup_grace: Duration::from_secs(3),
            project_root: None,
            redaction: Default::default(),
        }
    }

    /// A server nobody listens for: its hub exists, the server fails.
    fn unreachable(name: &str) -> McpServerSpec {
        spec(name, "http://127.0.0.1:9/mcp")
    }

    #[test]
    fn keys_cover_the_root_and_every_resolved_server() {
        let a = hub_key(
            Path::new("/p"),
            &[spec("a", "http://h/1"), spec("b", "http://h/2")],
        );
        let same = hub_key(
            Path::new("/p"),
            &[spec("b", "http://h/2"), spec("a", "http://h/1")],
        );
        assert_eq!(a, same, "the order of the entries does not matter");
        assert_ne!(
            a,
            hub_key(
                Path::new("/q"),
                &[spec("a", "http://h/1"), spec("b", "http://h/2")]
            ),
            "another project"
        );
        assert_ne!(
            a,
            hub_key(
                Path::new("/p"),
                &[spec("a", "http://h/1"), spec("b", "http://h/3")]
            ),
            "a changed server"
        );
        assert_ne!(
            a,
            hub_key(Path::new("/p"), &[spec("a", "http://h/1")]),
            "a server less (as before the project was trusted)"
        );
        let mut slower = spec("a", "http://h/1");
        slower.startup_grace = Duration::from_secs(9);
        assert_ne!(
            hub_key(Path::new("/p"), &[spec("a", "http://h/1")]),
            hub_key(Path::new("/p"), &[slower]),
        );
    }

    #[test]
    fn runs_share_the_hub_of_their_exact_servers_and_replace_a_stale_one() {
        let key = hub_key(Path::new("/p"), &[spec("a", "http://h/1")]);
        let changed = hub_key(Path::new("/p"), &[spec("a", "http://h/2")]);
        let none = hub_key(Path::new("/p"), &[]);
        assert_eq!(choose_hub(None, &key), HubChoice::Start);
        assert_eq!(choose_hub(Some(&key), &key), HubChoice::Reuse);
        assert_eq!(choose_hub(Some(&key), &changed), HubChoice::Replace);
        assert_eq!(choose_hub(Some(&key), &none), HubChoice::Retire);
        assert_eq!(choose_hub(None, &none), HubChoice::Nothing);
    }

    #[test]
    fn a_hub_is_evicted_only_when_unused_for_the_limit() {
        let limit = Duration::from_secs(600);
        assert!(!evict(true, Duration::from_secs(10_000), limit));
        assert!(!evict(false, Duration::from_secs(599), limit));
        assert!(evict(false, limit, limit));
        assert!(evict(false, Duration::from_secs(601), limit));
    }

    #[tokio::test]
    async fn the_registry_shares_replaces_evicts_and_shuts_down() {
        let hubs = McpHubs::new(Duration::from_secs(60));
        let start = Instant::now();
        let key = hub_key(Path::new("/p"), &[unreachable("a")]);
        let first = hubs
            .acquire(key.clone(), None, start)
            .await
            .unwrap()
            .unwrap();
        let second = hubs
            .acquire(key.clone(), None, start)
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(first.state(), second.state()), "one hub shared");
        assert_eq!(first.handles(), 3, "the registry's and two runs'");
        let other = hubs
            .acquire(hub_key(Path::new("/q"), &[unreachable("a")]), None, start)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !Arc::ptr_eq(first.state(), other.state()),
            "projects never share"
        );
        drop(other);
        assert_eq!(hubs.running().await, 2);

        // A changed configuration replaces the hub; the old one waits for
        // its runs, then closes at the next sweep.
        let changed = hub_key(Path::new("/p"), &[unreachable("b")]);
        let third = hubs
            .acquire(changed.clone(), None, start)
            .await
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(first.state(), third.state()));
        assert_eq!(hubs.running().await, 3, "the old hub is still held");
        drop((first, second));
        hubs.sweep(start).await;
        assert_eq!(hubs.hubs.lock().await.retiring.len(), 0);

        // Held hubs are not evicted; unused ones are, after the limit.
        hubs.sweep(start + Duration::from_secs(120)).await;
        {
            let hubs = hubs.hubs.lock().await;
            assert_eq!(hubs.by_root.len(), 1, "/q evicted, /p held");
            assert!(hubs.by_root.contains_key(Path::new("/p")));
        }
        drop(third);
        hubs.sweep(start + Duration::from_secs(150)).await;
        assert_eq!(
            hubs.hubs.lock().await.by_root.len(),
            1,
            "unused for 30 s only"
        );
        hubs.sweep(start + Duration::from_secs(181)).await;
        assert_eq!(hubs.hubs.lock().await.by_root.len(), 0, "unused for 61 s");

        // No servers configured any more: nothing is started.
        assert!(
            hubs.acquire(hub_key(Path::new("/p"), &[]), None, start)
                .await
                .unwrap()
                .is_none()
        );
        let last = hubs.acquire(changed, None, start).await.unwrap();
        assert!(last.is_some());
        hubs.shutdown().await;
        assert_eq!(hubs.running().await, 0);
        assert!(
            hubs.acquire(key, None, start).await.is_err(),
            "a stopping daemon starts no servers"
        );
    }
}
