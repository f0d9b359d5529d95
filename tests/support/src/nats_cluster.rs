//! Three `nats-server` processes of a test's own forming one JetStream
//! cluster on loopback: a configuration file per server (its
//! `server_name`, client port, storage, cluster port and routes to the
//! others), all started at once and ready once each has said so and named
//! the cluster's metadata leader. Each is killed when the guard is dropped,
//! or earlier by [`NatsCluster::kill`].

use crate::nats::{NatsServer, free_port};

/// A running three-server JetStream cluster.
pub struct NatsCluster {
    servers: Vec<Option<NatsServer>>,
    ports: Vec<u16>,
}

impl NatsCluster {
    /// Starts `count` servers named `s1`, `s2`… in a cluster and waits
    /// until JetStream has a metadata leader on every one of them.
    pub fn start(count: usize) -> Self {
        let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
        let routes: Vec<u16> = (0..count).map(|_| free_port()).collect();
        let starting: Vec<_> = (0..count)
            .map(|index| {
                let store = tempfile::tempdir().expect("a storage directory");
                let config = store.path().join("server.conf");
                std::fs::write(&config, server_config(index, &ports, &routes, store.path()))
                    .expect("the server's configuration is written");
                NatsServer::spawn(
                    vec!["-c".into(), config.display().to_string()],
                    ports[index],
                    store,
                    &["Server is ready", "metadata leader"],
                )
            })
            .collect();
        let servers = starting
            .into_iter()
            .map(|starting| Some(starting.wait_ready()))
            .collect();
        Self { servers, ports }
    }

    /// `nats://127.0.0.1:PORT` of server `index`.
    pub fn url(&self, index: usize) -> String {
        format!("nats://127.0.0.1:{}", self.ports[index])
    }

    /// Kills server `index` (and reaps it).
    pub fn kill(&mut self, index: usize) {
        drop(self.servers[index].take());
    }
}

/// The configuration of server `index` of a cluster whose client ports are
/// `ports` and cluster ports `routes`, storing under `store`.
fn server_config(index: usize, ports: &[u16], routes: &[u16], store: &std::path::Path) -> String {
    let others: Vec<String> = routes
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .map(|(_, port)| format!("\"nats-route://127.0.0.1:{port}\""))
        .collect();
    format!(
        "server_name: \"s{name}\"\nlisten: \"127.0.0.1:{port}\"\n\
         jetstream {{ store_dir: \"{store}\" }}\n\
         cluster {{\n  name: \"troupe-test\"\n  listen: \"127.0.0.1:{route}\"\n  routes: [{others}]\n}}\n",
        name = index + 1,
        port = ports[index],
        store = store.join("jetstream").display(),
        route = routes[index],
        others = others.join(", "),
    )
}
