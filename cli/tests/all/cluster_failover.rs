//! Failover between nodes of a cluster, end to end: real `nats-server`
//! processes on loopback, real `troupe serve --cluster` daemons with a
//! three-second lease, the scripted model server with a slow `bash` call.
//!
//! Covered: kill -9 of the node running a run in the middle of its slow
//! tool call (the run finishes on the other node in time, a `run_moved`
//! event names both nodes, the session exported there pairs every call
//! with a result, the interrupted one saying node failure, and no process
//! of the dead node's run survives); SIGSTOP of a node past its lease, then
//! SIGCONT (the run has moved, the stopped node's copy stops and its late
//! writes leave no trace in the cluster's copy of the session); a NATS
//! server restart in the middle of a run (the node reconnects and the run
//! finishes, its record shared); the NATS server down (a submission is
//! refused with 503, the nodes answer from their own stores) and back on
//! its port (a new submission is placed and finishes); a session continued
//! on one node, then the other, then the first again (each run's model
//! request holds every earlier exchange).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_cluster::{Cluster, ClusterSettings};
use troupe_scripted::{Script, ScriptedServer};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::{Need, require};

use crate::cluster::{job, node_of, troupe};
use crate::daemon::Daemon;
use crate::support::{self, Env};

/// The lease every node of these tests holds its runs by.
const LEASE_SECS: u64 = 3;

/// Two nodes, `n1` and `n2`, of the cluster at `url`, with a short lease.
fn two_nodes(server: &ScriptedServer, url: &str) -> Vec<(Env, Option<Daemon>)> {
    two_traced_nodes(server, url, None)
}

/// [`two_nodes`], exporting their spans to `otlp` when given.
fn two_traced_nodes(
    server: &ScriptedServer,
    url: &str,
    otlp: Option<&str>,
) -> Vec<(Env, Option<Daemon>)> {
    ["n1", "n2"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            env.write_user_config(&format!("[cluster]\nlease_secs = {LEASE_SECS}\n"));
            let mut command = env.command(Some(server));
            if let Some(endpoint) = otlp {
                command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
            }
            command.args(["serve", "--cluster", url, "--node", name]);
            let daemon = Daemon::start_command(&env, command);
            (env, Some(daemon))
        })
        .collect()
}

/// The key in the environment a client sends with its runs: the nodes
/// leave it out of the cluster and call the model with their own.
const CLIENT_KEY: &str = "client-key-canary";

/// Submits `prompt` to the first node, with a client's environment as
/// `troupe run` sends one (its own provider key among it), and waits until
/// the run's slow tool call started: the run id, the session id, the last
/// event seen, and the index of the node that runs it.
async fn started_run(
    nodes: &[(Env, Option<Daemon>)],
    server: &ScriptedServer,
    prompt: &str,
) -> (String, String, u64, usize) {
    let (env, first) = &nodes[0];
    let first = first.as_ref().unwrap();
    let client_env = json!({
        "HOME": env.root(),
        "PATH": std::env::var("PATH").unwrap_or_default(),
        "ANTHROPIC_BASE_URL": server.anthropic_base_url(),
        "ANTHROPIC_API_KEY": CLIENT_KEY,
    });
    let (run_id, session_id) = first
        .submit(json!({"prompt": prompt, "cwd": env.root(), "mode": "bypass", "env": client_env}))
        .await;
    let started = first
        .events(&run_id, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "tool_started")
        })
        .await;
    let runner = node_of(first, &run_id).await.unwrap();
    let index = if runner == "n1" { 0 } else { 1 };
    (run_id, session_id, started.last().unwrap().0, index)
}

/// A client of the cluster of its own, to read what the nodes wrote.
async fn observer(url: &str) -> Cluster {
    Cluster::connect(ClusterSettings {
        url: url.to_string(),
        credentials: None,
        node: "observer".into(),
        capacity: 1,
        lease: Duration::from_secs(LEASE_SECS),
        replicas: 1,
    })
    .await
    .unwrap()
}

/// The events after `seen`, read from `node` until `run_finished`; checks
/// that they continue the run's sequence and that a `run_moved` names
/// `from` and `to`.
async fn moved_events(node: &Daemon, run_id: &str, seen: u64, from: &str, to: &str) -> Vec<Value> {
    let rest = node.events(run_id, Some(seen), |_| false).await;
    let ids: Vec<u64> = rest.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (seen + 1..seen + 1 + ids.len() as u64).collect::<Vec<_>>(),
        "the run's sequence goes on without a gap: {rest:?}"
    );
    let moved: Vec<&Value> = rest
        .iter()
        .map(|(_, e)| e)
        .filter(|e| e["type"] == "run_moved")
        .collect();
    assert_eq!(moved.len(), 1, "{rest:?}");
    assert_eq!(moved[0]["from_node"], from);
    assert_eq!(moved[0]["to_node"], to);
    let (_, last) = rest.last().unwrap();
    assert_eq!(last["type"], "run_finished", "{rest:?}");
    assert_eq!(last["status"], "finished", "{rest:?}");
    rest.into_iter().map(|(_, e)| e).collect()
}

/// The session as `troupe sessions export` prints it through the daemon
/// of `env`: every call id and the result of each.
async fn exported_calls(env: &Env, session_id: &str) -> (Vec<String>, Vec<(String, String)>) {
    let exported = troupe(env, &["sessions", "export", session_id]).await;
    assert!(
        exported.status.success(),
        "{}",
        support::describe(&exported)
    );
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for line in support::text(&exported.stdout).lines() {
        let message: Value = serde_json::from_str(line).unwrap();
        for block in message["content"].as_array().unwrap() {
            match block["type"].as_str() {
                Some("tool_call") => calls.push(block["id"].as_str().unwrap().to_string()),
                Some("tool_result") => results.push((
                    block["call_id"].as_str().unwrap().to_string(),
                    block.to_string(),
                )),
                _ => {}
            }
        }
    }
    (calls, results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_node_is_killed_mid_tool_call_finishes_on_another_node() {
    if !require(Need::NatsServer) {
        return;
    }
    let (endpoint, received) = crate::otlp::collector().await;
    let nats = NatsServer::start(true, &[]);
    let script = job(Script::new(), "moving-job", "sleep 41.7");
    let server = ScriptedServer::start(script).await.unwrap();
    let mut nodes = two_traced_nodes(&server, &nats.url(None), Some(&endpoint));
    let (run_id, session_id, seen, dead) = started_run(&nodes, &server, "moving-job").await;
    let alive = 1 - dead;
    let (dead_name, alive_name) = (["n1", "n2"][dead], ["n1", "n2"][alive]);
    // tool_started comes as the command is being started.
    let running = support::wait_for_processes("sleep 41.7", Duration::from_secs(10), |pids| {
        pids.len() == 1
    })
    .await;
    assert_eq!(running.len(), 1, "{running:?}");
    nodes[dead].1.take().unwrap().stop(libc::SIGKILL);
    let killed = Instant::now();

    let survivor = nodes[alive].1.as_ref().unwrap();
    moved_events(survivor, &run_id, seen, dead_name, alive_name).await;
    assert!(
        killed.elapsed() <= Duration::from_secs(LEASE_SECS + 10),
        "the run went on after {:?}",
        killed.elapsed()
    );
    let shown = survivor
        .call("GET", &format!("/v1/runs/{run_id}"), None)
        .await
        .json();
    assert_eq!(shown["status"], "finished", "{shown}");
    assert_eq!(shown["node"], alive_name, "{shown}");
    // Before and after the move, the model was called with the key of the
    // node that ran the run, never the client's (which no node was given).
    let requests = server.requests();
    assert!(requests.len() >= 2, "{}", requests.len());
    for request in &requests {
        assert_eq!(
            request.header("x-api-key"),
            Some("test-key"),
            "{:?}",
            request.headers
        );
    }
    // The survivor's own store holds the whole run, numbered as the
    // cluster numbers it.
    let whole = survivor.events(&run_id, None, |_| false).await;
    let ids: Vec<u64> = whole.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "{whole:?}");
    let types: Vec<&str> = whole
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    let moved_at = types.iter().position(|t| *t == "run_moved").unwrap();
    assert!(types[..moved_at].contains(&"tool_started"), "{types:?}");
    assert_eq!(types[0], "run_started", "{types:?}");

    // The session, loaded into the survivor's store, pairs every call with
    // a result; the one that was running says the node failed.
    let (calls, results) = exported_calls(&nodes[alive].0, &session_id).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    let answered: Vec<&String> = results.iter().map(|(id, _)| id).collect();
    assert_eq!(answered, calls.iter().collect::<Vec<_>>());
    assert!(results[0].1.contains("node failure"), "{results:?}");

    // The dead node's command did not outlive it.
    let left = support::wait_for_processes("sleep 41.7", Duration::from_secs(10), |pids| {
        pids.is_empty()
    })
    .await;
    assert!(
        left.is_empty(),
        "the dead node's tool process survived: {left:?}"
    );

    // The run's trace goes on below a run_moved span on the new node (its
    // spans flushed as it stops).
    let (code, stderr) = nodes[alive].1.take().unwrap().stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    let spans = received.lock().unwrap().clone();
    let attributes = |span: &opentelemetry_proto::tonic::trace::v1::Span| {
        crate::otlp::attributes(&span.attributes)
    };
    let moved = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| span.name == "run_moved")
        .unwrap_or_else(|| {
            let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
            panic!("no run_moved span among {names:?}")
        });
    let moved_attributes = attributes(moved);
    assert_eq!(
        moved_attributes.get("troupe.placement.run_id"),
        Some(&run_id)
    );
    assert_eq!(
        moved_attributes
            .get("troupe.moved.from_node")
            .map(String::as_str),
        Some(dead_name)
    );
    assert_eq!(
        moved_attributes
            .get("troupe.moved.to_node")
            .map(String::as_str),
        Some(alive_name)
    );
    assert!(
        !moved.parent_span_id.is_empty(),
        "the run's trace is its parent"
    );
    let continued = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| span.name == "invoke_agent main" && span.parent_span_id == moved.span_id)
        .expect("the continued run's root span below run_moved");
    assert_eq!(continued.trace_id, moved.trace_id, "one trace");
    assert_eq!(attributes(continued).get("troupe.run_id"), Some(&run_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_past_its_lease_loses_its_run_and_its_late_writes_are_refused() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let script = job(Script::new(), "stopped-job", "sleep 41.3");
    let server = ScriptedServer::start(script).await.unwrap();
    let mut nodes = two_nodes(&server, &nats.url(None));
    let (run_id, session_id, seen, stopped) = started_run(&nodes, &server, "stopped-job").await;
    let alive = 1 - stopped;
    let (stopped_name, alive_name) = (["n1", "n2"][stopped], ["n1", "n2"][alive]);
    let running = support::wait_for_processes("sleep 41.3", Duration::from_secs(10), |pids| {
        pids.len() == 1
    })
    .await;
    assert_eq!(running.len(), 1, "{running:?}");
    let stopped_pid = nodes[stopped].1.as_ref().unwrap().pid();
    // SAFETY: plain signal delivery to a daemon this test started.
    assert_eq!(unsafe { libc::kill(stopped_pid, libc::SIGSTOP) }, 0);

    let survivor = nodes[alive].1.as_ref().unwrap();
    moved_events(survivor, &run_id, seen, stopped_name, alive_name).await;
    let cluster = observer(&nats.url(None)).await;
    let before = cluster.stored_session(&session_id).await.unwrap();
    assert!(
        before.records.iter().any(|r| r.node == alive_name),
        "the new node writes the session"
    );

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(stopped_pid, libc::SIGCONT) }, 0);
    // Its next renewal is refused: it cancels its copy, whose command ends.
    let left = support::wait_for_processes("sleep 41.3", Duration::from_secs(20), |pids| {
        pids.is_empty()
    })
    .await;
    assert!(left.is_empty(), "the stopped node's copy goes on: {left:?}");
    // Its own store says so; the cluster's copy of the session and the
    // run's events are as the new node left them.
    let stopped_node = nodes[stopped].1.as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let own = loop {
        let own = stopped_node
            .call("GET", &format!("/v1/runs/{run_id}"), None)
            .await
            .json();
        if own["status"] != "running" || Instant::now() >= deadline {
            break own;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(own["status"], "running", "{own}");
    let after = cluster.stored_session(&session_id).await.unwrap();
    assert_eq!(
        after.last_seq, before.last_seq,
        "a late write reached the session"
    );
    assert_eq!(after.records, before.records);
    let (last_writer, _) = cluster.last_event_writer(&run_id).await.unwrap().unwrap();
    assert_eq!(last_writer.as_deref(), Some(alive_name));
    let record = cluster.run_entry(&run_id).await.unwrap().unwrap().0;
    assert_eq!(record.node.as_deref(), Some(alive_name));
    assert_eq!(
        serde_json::to_value(record.status).unwrap(),
        "finished",
        "{record:?}"
    );
    // The stopped node says why it stopped its copy.
    let (code, stderr) = nodes[stopped].1.take().unwrap().stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("another node holds the run now"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_goes_on_across_a_restart_of_the_nats_server() {
    if !require(Need::NatsServer) {
        return;
    }
    let mut nats = NatsServer::start(true, &[]);
    let script = job(Script::new(), "restart-job", "sleep 4");
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = two_nodes(&server, &nats.url(None));
    let (run_id, _, _, runner) = started_run(&nodes, &server, "restart-job").await;
    nats.restart();
    let node = nodes[runner].1.as_ref().unwrap();
    let events = node.events(&run_id, None, |_| false).await;
    let (_, last) = events.last().unwrap();
    assert_eq!(last["status"], "finished", "{events:?}");
    assert!(events.iter().all(|(_, e)| e["type"] != "run_moved"));
    // The other node sees the run's end once the runner shared it again.
    let other = nodes[1 - runner].1.as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let shown = other.call("GET", &format!("/v1/runs/{run_id}"), None).await;
        if (shown.status == 200 && shown.json()["status"] == "finished")
            || Instant::now() >= deadline
        {
            break shown;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(shown.json()["status"], "finished", "{}", shown.text());
    let finished = other.events(&run_id, None, |_| false).await;
    assert_eq!(finished.last().unwrap().1["type"], "run_finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_on_one_node_is_continued_on_another() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let script = job(Script::new(), "first-part", "echo part one").then(
        troupe_scripted::Turn::new(troupe_scripted::text("second part done"))
            .when(troupe_scripted::Matcher::last_user_contains("second-part")),
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = two_nodes(&server, &nats.url(None));
    let (env, first) = &nodes[0];
    let first = first.as_ref().unwrap();
    let (run_id, session_id) = first
        .submit(json!({"prompt": "first-part", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = first.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    let ran_on = node_of(first, &run_id).await.unwrap();
    let other = if ran_on == "n1" { 1 } else { 0 };
    let (other_env, other_node) = &nodes[other];
    let other_node = other_node.as_ref().unwrap();
    // The node that did not run it loads the session from the cluster.
    let (next, same) = other_node
        .submit(json!({
            "prompt": "second-part",
            "cwd": other_env.root(),
            "mode": "bypass",
            "session_id": session_id,
        }))
        .await;
    assert_eq!(same, session_id);
    let events = other_node.events(&next, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    let (calls, results) = exported_calls(other_env, &session_id).await;
    assert_eq!(calls.len(), 1, "the first run's call is in the session");
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("part one"), "{results:?}");
    // A session id that is not one is refused, never looked up as a subject.
    let refused = other_node
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "x", "cwd": other_env.root(), "session_id": "a.>"})),
        )
        .await;
    assert_eq!(refused.status, 404, "{}", refused.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_nats_server_is_down_a_submission_is_refused_and_placed_once_it_is_back() {
    if !require(Need::NatsServer) {
        return;
    }
    let mut nats = NatsServer::start(true, &[]);
    let script = job(
        job(Script::new(), "before-outage", "echo before"),
        "after-outage",
        "echo after",
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = two_nodes(&server, &nats.url(None));
    let (env, node) = &nodes[0];
    let node = node.as_ref().unwrap();
    let (before, _) = node
        .submit(json!({"prompt": "before-outage", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = node.events(&before, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    let ran_on = node_of(node, &before).await.unwrap();
    let runner = nodes
        .iter()
        .zip(["n1", "n2"])
        .find(|(_, name)| *name == ran_on)
        .and_then(|((_, node), _)| node.as_ref())
        .unwrap();
    nats.stop();
    // The node's status says it lost the server once its client noticed.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = node.call("GET", "/v1/daemon", None).await.json();
        assert_eq!(status["cluster"]["node"], "n1", "{status}");
        if status["cluster"]["connected"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = node
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "during-outage", "cwd": env.root(), "mode": "bypass"})),
        )
        .await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.starts_with("the cluster did not take the run: "),
        "{}",
        refused.text()
    );
    // The nodes still answer their own API: the run a node ran, its
    // events, from its own store.
    let health = node.call("GET", "/healthz", None).await;
    assert_eq!(health.status, 200, "{}", health.text());
    let shown = runner
        .call("GET", &format!("/v1/runs/{before}"), None)
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    assert_eq!(shown.json()["status"], "finished", "{}", shown.text());
    let replayed = runner.events(&before, None, |_| false).await;
    assert_eq!(replayed, events);
    nats.start_again();
    // Once the server is back (the node reconnects by itself), a new
    // submission is placed and finishes.
    let deadline = Instant::now() + Duration::from_secs(30);
    let placed = loop {
        let answer = node
            .call(
                "POST",
                "/v1/runs",
                Some(&json!({"prompt": "after-outage", "cwd": env.root(), "mode": "bypass"})),
            )
            .await;
        if answer.status != 503 || Instant::now() >= deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(placed.status, 201, "{}", placed.text());
    let status = node.call("GET", "/v1/daemon", None).await.json();
    assert_eq!(status["cluster"]["connected"], true, "{status}");
    let after = placed.json()["run_id"].as_str().unwrap().to_string();
    let events = node.events(&after, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    assert!(node_of(node, &after).await.is_some());
    // The refused request left nothing behind: no record, no run.
    let listed = node.call("GET", "/v1/runs", None).await.json();
    let prompts: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["after-outage", "before-outage"], "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_back_and_forth_between_nodes_and_each_run_sees_every_earlier_one() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let parts = ["second-part", "third-part", "fourth-part"];
    let script = parts.iter().fold(
        job(Script::new(), "first-part", "echo part one"),
        |script, part| {
            script.then(
                troupe_scripted::Turn::new(troupe_scripted::text(format!("answer to {part}")))
                    .when(troupe_scripted::Matcher::last_user_contains(*part)),
            )
        },
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = two_nodes(&server, &nats.url(None));
    let node = |index: usize| (&nodes[index].0, nodes[index].1.as_ref().unwrap());
    let (env, first) = node(0);
    let (run_id, session_id) = first
        .submit(json!({"prompt": "first-part", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = first.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    let ran_on = node_of(first, &run_id).await.unwrap();
    // The other node, then the first run's node (holding a copy older than
    // the cluster's), then the other again (likewise).
    let ran_first = if ran_on == "n1" { 0 } else { 1 };
    let order = [1 - ran_first, ran_first, 1 - ran_first];
    for (part, index) in parts.iter().zip(order) {
        let (env, continuing) = node(index);
        let (next, same) = continuing
            .submit(json!({
                "prompt": part,
                "cwd": env.root(),
                "mode": "bypass",
                "session_id": session_id,
            }))
            .await;
        assert_eq!(same, session_id);
        let events = continuing.events(&next, None, |_| false).await;
        assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    }
    // Each run's request to the model held every earlier exchange.
    let requests = server.requests();
    let sent_for = |part: &str| {
        let request = requests
            .iter()
            .find(|request| {
                request
                    .last_user_text()
                    .is_some_and(|text| text.contains(part))
            })
            .unwrap_or_else(|| panic!("no request for {part}"));
        serde_json::to_string(request.messages()).unwrap()
    };
    let mut earlier = vec![
        "first-part".to_string(),
        "part one".into(),
        "done first-part".into(),
    ];
    for part in parts {
        let sent = sent_for(part);
        for said in &earlier {
            assert!(
                sent.contains(said.as_str()),
                "{part}: {said} missing from {sent}"
            );
        }
        earlier.push(part.to_string());
        earlier.push(format!("answer to {part}"));
    }
    // The cluster's copy of the session ends with the last run's writes,
    // made by the node that ran it.
    let (writer, _) = observer(&nats.url(None))
        .await
        .last_session_writer(&session_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(writer.as_deref(), Some(["n1", "n2"][order[2]]));
}
