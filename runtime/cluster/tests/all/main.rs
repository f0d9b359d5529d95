//! The cluster connection against a real `nats-server` on loopback: joining
//! (and refusing to join with a wrong credential, no server or no
//! JetStream), the work queue with garbage in it, a run's events from any
//! sequence number, run and node records, and actions by request/reply.

use std::time::Duration;

use troupe_cluster::{Cluster, ClusterError, ClusterSettings};
use troupe_protocol::api::{RunState, RunSummary};
use troupe_protocol::cluster::{Action, RunAction, Submission, VERSION};
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::{Need, require};

mod replicas;
mod workspace;

fn settings(url: String, node: &str) -> ClusterSettings {
    ClusterSettings {
        url,
        credentials: None,
        node: node.into(),
        capacity: 2,
        lease: Duration::from_secs(3),
        replicas: 1,
    }
}

fn submission(run_id: &str) -> Submission {
    Submission {
        v: VERSION,
        run_id: run_id.into(),
        session_id: format!("{run_id}-session"),
        submitted_by: "node-a".into(),
        submitted_at: "2026-12-04T00:00:00Z".into(),
        request: serde_json::from_str(r#"{"prompt":"hi","cwd":"/tmp"}"#).unwrap(),
    }
}

fn event(run_id: &str, seq: u64, kind: EventKind) -> RunEvent {
    RunEvent {
        seq,
        run_id: run_id.into(),
        session_id: "s".into(),
        agent_path: "main".into(),
        ts: "2026-12-04T00:00:00Z".into(),
        kind,
    }
}

/// Takes until a submission comes (garbage before it is dropped), bounded.
async fn take_next(cluster: &Cluster) -> troupe_cluster::Taken {
    for _ in 0..20 {
        if let Some(taken) = cluster.take(Duration::from_millis(500)).await.unwrap() {
            return taken;
        }
    }
    panic!("no submission came");
}

#[tokio::test]
async fn a_wrong_credential_no_server_and_no_jetstream_are_refused_with_the_url_masked() {
    if !require(Need::NatsServer) {
        return;
    }
    let guarded = NatsServer::start(true, &["--user", "ann", "--pass", "right"]);
    let err = Cluster::connect(settings(guarded.url(Some("ann:wrong-secret")), "n1"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("nats://***@127.0.0.1:{}", guarded.port())),
        "{text}"
    );
    assert!(
        !text.contains("wrong-secret") && !text.contains("ann:"),
        "{text}"
    );
    Cluster::connect(settings(guarded.url(Some("ann:right")), "n1"))
        .await
        .unwrap();

    let port = guarded.port();
    drop(guarded);
    let err = Cluster::connect(settings(format!("nats://127.0.0.1:{port}"), "n1"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Connect { .. }), "{err}");

    let plain = NatsServer::start(false, &[]);
    let err = Cluster::connect(settings(plain.url(None), "n1"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::NoJetStream { .. }), "{err}");
}

#[tokio::test]
async fn submissions_are_taken_once_and_garbage_in_the_queue_is_dropped() {
    if !require(Need::NatsServer) {
        return;
    }
    let server = NatsServer::start(true, &[]);
    let a = Cluster::connect(settings(server.url(None), "node-a"))
        .await
        .unwrap();
    // A second node joins the same streams, consumer and buckets.
    let b = Cluster::connect(settings(server.url(None), "node-b"))
        .await
        .unwrap();
    let raw = async_nats::connect(server.url(None)).await.unwrap();
    let mut foreign = serde_json::to_value(submission("r0")).unwrap();
    foreign["v"] = 9.into();
    for garbage in [
        b"not json".to_vec(),
        serde_json::to_vec(&foreign).unwrap(),
        vec![b'x'; 1024 * 1024 - 1024],
    ] {
        let jetstream = async_nats::jetstream::new(raw.clone());
        jetstream
            .publish("troupe.submit", garbage.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    a.submit(
        &submission("r1"),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    )
    .await
    .unwrap();
    let taken = take_next(&b).await;
    assert_eq!(taken.submission, submission("r1"));
    assert_eq!(taken.deliveries, 1);
    assert_eq!(
        taken.traceparent.as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    taken.progress().await.unwrap();
    taken.ack().await.unwrap();
    // Nothing is left: the garbage was dropped, the run acknowledged.
    assert!(a.take(Duration::from_millis(300)).await.unwrap().is_none());
}

#[tokio::test]
async fn a_runs_events_are_read_from_any_sequence_number_and_garbage_on_its_subject_is_skipped() {
    if !require(Need::NatsServer) {
        return;
    }
    let server = NatsServer::start(true, &[]);
    let node = Cluster::connect(settings(server.url(None), "node-a"))
        .await
        .unwrap();
    node.publish_event(&event("r1", 1, EventKind::notice("one")))
        .await
        .unwrap();
    let raw = async_nats::connect(server.url(None)).await.unwrap();
    let jetstream = async_nats::jetstream::new(raw.clone());
    for garbage in [&b"{]"[..], br#"{"v":2}"#] {
        jetstream
            .publish("troupe.events.r1", garbage.to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // An event that names another run on this run's subject is not this run's.
    let mut stray = serde_json::to_value(troupe_protocol::cluster::ClusterEvent {
        v: VERSION,
        node: "node-x".into(),
        event: event("r2", 2, EventKind::notice("stray")),
    })
    .unwrap();
    stray["node"] = "node-x".into();
    jetstream
        .publish(
            "troupe.events.r1",
            serde_json::to_vec(&stray).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    node.publish_event(&event("r1", 2, EventKind::notice("two")))
        .await
        .unwrap();
    let mut all = node.events("r1", 1).await.unwrap();
    assert_eq!(all.next().await.unwrap().seq, 1);
    assert_eq!(all.next().await.unwrap().seq, 2);
    let mut later = node.events("r1", 2).await.unwrap();
    let second = later.next().await.unwrap();
    assert_eq!(second.seq, 2);
    // An event published after the reader started reaches it.
    node.publish_event(&event("r1", 3, EventKind::notice("three")))
        .await
        .unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), later.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.seq, 3);
}

#[tokio::test]
async fn run_and_node_records_are_shared_and_actions_reach_the_node_that_serves_them() {
    if !require(Need::NatsServer) {
        return;
    }
    let server = NatsServer::start(true, &[]);
    let a = Cluster::connect(settings(server.url(None), "node-a"))
        .await
        .unwrap();
    let b = Cluster::connect(settings(server.url(None), "node-b"))
        .await
        .unwrap();
    let summary = RunSummary {
        agents: None,
        ended: None,
        node: Some("node-b".into()),
        prompt: "p".into(),
        run_id: "r1".into(),
        session_id: "s1".into(),
        started: "2026-12-04T00:00:00Z".into(),
        status: RunState::Running,
        stop_reason: None,
    };
    b.put_run(&summary).await.unwrap();
    assert_eq!(a.run("r1").await.unwrap(), Some(summary.clone()));
    assert_eq!(a.run("r.*").await.unwrap(), None);
    // A record that does not read is left out of the list.
    let raw = async_nats::connect(server.url(None)).await.unwrap();
    let jetstream = async_nats::jetstream::new(raw.clone());
    let runs = jetstream.get_key_value("troupe_runs").await.unwrap();
    runs.put("r9", b"garbage".to_vec().into()).await.unwrap();
    assert_eq!(a.runs().await.unwrap(), vec![summary]);

    a.heartbeat(vec!["r1".into()], false, "127.0.0.1:1")
        .await
        .unwrap();
    b.heartbeat(Vec::new(), false, "127.0.0.1:2").await.unwrap();
    let nodes = a.nodes().await.unwrap();
    let mut names: Vec<_> = nodes
        .iter()
        .map(|(node, stale)| (node.node.clone(), *stale))
        .collect();
    names.sort();
    assert_eq!(names, [("node-a".into(), false), ("node-b".into(), false)]);

    // Nobody serves r1's actions yet: no answer.
    let cancel = RunAction {
        v: VERSION,
        run_id: "r1".into(),
        action: Action::Cancel,
    };
    assert_eq!(a.request_action(&cancel).await.unwrap(), None);
    let mut served = b.serve_actions("r1").await.unwrap();
    let answering = tokio::spawn(async move {
        let request = served.next().await.unwrap();
        assert_eq!(request.action.action, Action::Cancel);
        request
            .answer(200, serde_json::json!({"cancelling": true}))
            .await
            .unwrap();
    });
    // Garbage on the subject is not answered and does not stop the server.
    let garbage = raw.request("troupe.run.r1.action", "nope".into());
    let answered = tokio::time::timeout(Duration::from_millis(300), garbage).await;
    assert!(answered.is_err(), "{answered:?}");
    let reply = a.request_action(&cancel).await.unwrap().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["cancelling"], true);
    answering.await.unwrap();
}
