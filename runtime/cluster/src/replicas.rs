//! How many copies the NATS servers keep of each stream and bucket the
//! cluster uses (`[cluster] replicas`). New streams and buckets are created
//! with that many; on start a node raises an existing one that has fewer
//! ([`replicas_to_set`]) and never lowers one that has more (another node
//! may be configured with more). A raise the servers refuse (fewer servers
//! than replicas) is logged as a warning and the node goes on with what is
//! there.

use async_nats::jetstream;

use crate::ClusterError;
use crate::names::{EVENTS_STREAM, NODES_BUCKET, RUNS_BUCKET, SESSIONS_STREAM, SUBMISSIONS_STREAM};

/// The replicas unless told otherwise.
pub const DEFAULT_REPLICAS: usize = 1;

/// The replicas to set on a stream that has `existing` when `wanted` are
/// configured: `Some(wanted)` to raise it, `None` to leave it.
pub fn replicas_to_set(existing: usize, wanted: usize) -> Option<usize> {
    (existing < wanted).then_some(wanted)
}

/// The streams the cluster uses, the buckets' own streams among them.
pub fn cluster_streams() -> [String; 5] {
    [
        SUBMISSIONS_STREAM.to_string(),
        EVENTS_STREAM.to_string(),
        SESSIONS_STREAM.to_string(),
        format!("KV_{NODES_BUCKET}"),
        format!("KV_{RUNS_BUCKET}"),
    ]
}

/// Raises every stream of the cluster that has fewer than `wanted`
/// replicas; a stream that cannot be read is an error, a raise the servers
/// refuse a warning.
pub(crate) async fn raise_all(
    jetstream: &jetstream::Context,
    wanted: usize,
) -> Result<(), ClusterError> {
    for name in cluster_streams() {
        let mut stream = jetstream
            .get_stream(&name)
            .await
            .map_err(|err| ClusterError::setup(format!("stream {name}"), err))?;
        let info = stream
            .info()
            .await
            .map_err(|err| ClusterError::setup(format!("stream {name}"), err))?;
        let existing = info.config.num_replicas;
        let Some(replicas) = replicas_to_set(existing, wanted) else {
            if existing > wanted {
                tracing::info!(stream = %name, existing, wanted, "the stream keeps its greater replicas");
            }
            continue;
        };
        let mut config = info.config.clone();
        config.num_replicas = replicas;
        match jetstream.update_stream(&config).await {
            Ok(_) => {
                tracing::info!(stream = %name, from = existing, to = replicas, "raised the stream's replicas");
            }
            Err(err) => tracing::warn!(
                stream = %name,
                existing,
                wanted,
                %err,
                "the stream's replicas could not be raised; it keeps fewer copies"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_with_fewer_replicas_is_raised_and_one_with_more_is_left() {
        assert_eq!(replicas_to_set(1, 3), Some(3));
        assert_eq!(replicas_to_set(3, 3), None);
        assert_eq!(replicas_to_set(5, 3), None);
        assert_eq!(replicas_to_set(0, 1), Some(1));
    }

    #[test]
    fn the_buckets_streams_are_among_the_clusters_streams() {
        let streams = cluster_streams();
        assert!(streams.contains(&"KV_troupe_runs".to_string()));
        assert!(streams.contains(&"TROUPE_SUBMISSIONS".to_string()));
        assert!(streams.contains(&"TROUPE_SESSIONS".to_string()));
    }
}
