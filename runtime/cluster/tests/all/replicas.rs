//! Replicas of the cluster's streams and buckets on a three-server NATS
//! JetStream cluster: created with the configured replicas, an existing
//! stream with fewer raised; a single server refuses more than one replica
//! with a clear error.

use troupe_cluster::replicas::cluster_streams;
use troupe_cluster::{Cluster, ClusterError};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::nats_cluster::NatsCluster;
use troupe_test_support::{Need, require};

use crate::settings;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_buckets_get_three_replicas_and_fewer_are_raised() {
    if !require(Need::NatsServer) {
        return;
    }
    let servers = NatsCluster::start(3);
    // A stream created before, with one replica.
    let client = async_nats::connect(servers.url(1)).await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "TROUPE_EVENTS".into(),
            subjects: vec!["troupe.events.>".into()],
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut wanted = settings(servers.url(0), "node-a");
    wanted.replicas = 3;
    Cluster::connect(wanted).await.unwrap();
    for name in cluster_streams() {
        let mut stream = jetstream.get_stream(&name).await.unwrap();
        let info = stream.info().await.unwrap();
        assert_eq!(info.config.num_replicas, 3, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_refuses_three_replicas_with_a_clear_error() {
    if !require(Need::NatsServer) {
        return;
    }
    let server = NatsServer::start(true, &[]);
    let mut wanted = settings(server.url(None), "node-a");
    wanted.replicas = 3;
    let err = Cluster::connect(wanted).await.unwrap_err();
    assert!(matches!(err, ClusterError::Setup { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("TROUPE_SUBMISSIONS") && text.contains("replicas"),
        "{text}"
    );
}
