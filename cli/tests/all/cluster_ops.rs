//! Operating a cluster of nodes, end to end against real `nats-server`
//! processes on loopback and `troupe serve --cluster` daemons.
//!
//! Covered: a client's secrets reach no message of any stream, bucket or
//! subject (every message read raw from the server) while the run works
//! with the node's own key; a drained node takes none of the runs submitted
//! after the drain while its own run finishes, says so in `troupe cluster
//! status`, and takes runs again after `--undo`; on three NATS servers in
//! a JetStream cluster every stream and bucket has three replicas, and
//! with one server killed runs are still placed and finish; a run names a
//! repository and revision and works in a checkout of exactly that
//! revision, while a hostile URL is refused by the node asked and by the
//! node that takes a forged submission, with nothing cloned; a daemon
//! without a cluster checks out a run's repository too (and writes there),
//! and refuses `file://` unless its configuration allows it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::json;
use troupe_scripted::{Script, ScriptedServer, text};
use troupe_test_support::git::two_commit_repository;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::nats_cluster::NatsCluster;
use troupe_test_support::{Need, require};

use crate::cluster::{job, node_of, three_nodes, troupe};
use crate::daemon::Daemon;
use crate::support::{self, Env};

/// Every message published on the server while the returned guard lives,
/// as `(subject, payload)`.
async fn record_everything(
    url: &str,
) -> (
    Arc<Mutex<Vec<(String, Vec<u8>)>>>,
    tokio::task::JoinHandle<()>,
) {
    let client = async_nats::connect(url).await.unwrap();
    let mut all = client.subscribe(">").await.unwrap();
    client.flush().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let _client = client;
        while let Some(message) = all.next().await {
            let mut bytes = message.payload.to_vec();
            if let Some(headers) = &message.headers {
                for (name, values) in headers.iter() {
                    for value in values {
                        bytes.extend_from_slice(format!("{name}: {value}\n").as_bytes());
                    }
                }
            }
            sink.lock()
                .unwrap()
                .push((message.subject.to_string(), bytes));
        }
    });
    (seen, task)
}

/// Every message every stream on the server holds (the buckets are streams
/// too), read raw: `(stream, payload)`.
async fn every_stored_message(url: &str) -> Vec<(String, Vec<u8>)> {
    let client = async_nats::connect(url).await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    let names: Vec<String> = jetstream
        .stream_names()
        .map(|name| name.unwrap())
        .collect()
        .await;
    let mut stored = Vec::new();
    for name in names {
        let mut stream = jetstream.get_stream(&name).await.unwrap();
        let info = stream.info().await.unwrap();
        for seq in info.state.first_sequence..=info.state.last_sequence {
            if let Ok(message) = stream.get_raw_message(seq).await {
                stored.push((name.clone(), message.payload.to_vec()));
            }
        }
    }
    stored
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_secrets_reach_no_message_and_the_run_uses_the_nodes_own_key() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let server = ScriptedServer::start(Script::new().then(text("answered")))
        .await
        .unwrap();
    let (seen, recorder) = record_everything(&nats.url(None)).await;
    let nodes: Vec<(Env, Daemon)> = ["n1", "n2"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            let daemon = Daemon::start_with(
                &env,
                Some(&server),
                &["--cluster", &nats.url(None), "--node", name],
            );
            (env, daemon)
        })
        .collect();
    let (env_a, a) = &nodes[0];
    let client_home = tempfile::tempdir().unwrap();
    let secrets = [
        ("ANTHROPIC_API_KEY", "sk-ant-client-canary-1"),
        ("GITHUB_TOKEN", "ghp-client-canary-2"),
        ("DEPLOY_PASSWORD", "client-canary-3"),
        ("aws_secret_access_key", "client-canary-4"),
    ];
    let mut client_env: BTreeMap<String, String> = secrets
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    client_env.insert("HOME".into(), client_home.path().display().to_string());
    client_env.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
    client_env.insert("ANTHROPIC_BASE_URL".into(), server.anthropic_base_url());
    client_env.insert("VISIBLE_SETTING".into(), "plain-value".into());
    let (run_id, _) = a
        .submit(json!({"prompt": "keep my keys", "cwd": env_a.root(), "env": client_env}))
        .await;
    let events = a.events(&run_id, None, |_| false).await;
    let (_, last) = events.last().unwrap();
    assert_eq!(last["status"], "finished", "{events:?}");
    assert_eq!(last["final_text"], "answered", "{events:?}");
    // The model was called with the key of the node that ran the run.
    let requests = server.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        let key = request
            .headers
            .iter()
            .find(|(name, _)| name == "x-api-key")
            .map(|(_, value)| value.as_str());
        assert_eq!(key, Some("test-key"), "{:?}", request.headers);
    }
    // No secret in anything that went through the server or stays there.
    let stored = every_stored_message(&nats.url(None)).await;
    recorder.abort();
    let passed = seen.lock().unwrap().clone();
    assert!(
        passed
            .iter()
            .any(|(subject, body)| subject == "troupe.submit"
                && contains(body, "plain-value")
                && contains(body, "ANTHROPIC_API_KEY")),
        "the submission was seen, with its public environment and the names withheld"
    );
    assert!(
        stored.iter().any(|(stream, _)| stream == "TROUPE_EVENTS"),
        "the events were stored"
    );
    for (_, value) in secrets {
        for (place, body) in passed.iter().chain(stored.iter()) {
            assert!(!contains(body, value), "{value} in a message of {place}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_takes_no_new_run_and_finishes_its_own() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let after: Vec<String> = (0..4).map(|i| format!("after-drain-{i}")).collect();
    let script = after
        .iter()
        .fold(job(Script::new(), "long-job", "sleep 3"), |script, name| {
            job(script, name, "echo ok")
        });
    let server = ScriptedServer::start(script).await.unwrap();
    let mut nodes = three_nodes(&server, &nats.url(None));
    drop(nodes.pop());
    let (env_a, a) = &nodes[0];
    let (long, _) = a
        .submit(json!({"prompt": "long-job", "cwd": env_a.root(), "mode": "bypass"}))
        .await;
    let started = a
        .events(&long, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "tool_started")
        })
        .await;
    let runner = node_of(a, &long).await.unwrap();
    let other = if runner == "n1" { "n2" } else { "n1" };
    let via = &nodes[if runner == "n1" { 1 } else { 0 }].1;
    // Drained through the API of the other node.
    let drained = via
        .call("POST", &format!("/v1/cluster/nodes/{runner}/drain"), None)
        .await;
    assert_eq!(drained.status, 200, "{}", drained.text());
    let state = drained.json();
    assert_eq!(state["draining"], true, "{state}");
    assert_eq!(state["running"], json!([long]), "{state}");
    let status = troupe(env_a, &["cluster", "status"]).await;
    let stdout = support::text(&status.stdout);
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with(runner.as_str()) && line.contains(" draining ")),
        "{stdout}"
    );
    let mut later = Vec::new();
    for name in &after {
        let (run_id, _) = a
            .submit(json!({"prompt": name, "cwd": env_a.root(), "mode": "bypass"}))
            .await;
        later.push(run_id);
    }
    for run_id in &later {
        let events = a.events(run_id, None, |_| false).await;
        assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
        assert_eq!(node_of(a, run_id).await.as_deref(), Some(other));
    }
    let (seen, _) = started.last().unwrap();
    let rest = a.events(&long, Some(*seen), |_| false).await;
    assert_eq!(rest.last().unwrap().1["status"], "finished", "{rest:?}");
    assert_eq!(node_of(a, &long).await.as_deref(), Some(runner.as_str()));

    // Unknown and malformed names are refused.
    let unknown = a
        .call("POST", "/v1/cluster/nodes/no-such-node/drain", None)
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let bad = a.call("POST", "/v1/cluster/nodes/a.b/drain", None).await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    // `--undo` lets it take runs again.
    let undone = troupe(env_a, &["cluster", "drain", &runner, "--undo"]).await;
    assert!(undone.status.success(), "{}", support::describe(&undone));
    assert!(
        support::text(&undone.stdout).contains(&format!("node {runner} takes runs")),
        "{}",
        support::describe(&undone)
    );
    let status = a.call("GET", "/v1/cluster", None).await.json();
    let record = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["node"] == runner.as_str())
        .unwrap()
        .clone();
    assert_eq!(record["draining"], false, "{status}");
}

/// Submits a run to `node`, again while the cluster answers 503 (a stream
/// electing a new leader), for at most 30 s.
async fn submit_while_electing(node: &Daemon, body: serde_json::Value) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let response = node.call("POST", "/v1/runs", Some(&body)).await;
        if response.status == 201 {
            return response.json()["run_id"].as_str().unwrap().to_string();
        }
        assert_eq!(response.status, 503, "{}", response.text());
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cluster never took the run: {}",
            response.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A run's events from `node` once it finished, asked again while the
/// cluster answers 503 (a replicated stream's leader busy or being elected),
/// for at most 30 s.
async fn finished_events(node: &Daemon, run_id: &str) -> Vec<(u64, serde_json::Value)> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // The whole stream: it ends after the run's `run_finished`.
        let whole = node
            .call("GET", &format!("/v1/runs/{run_id}/events"), None)
            .await;
        if whole.status == 200 {
            let mut events = Vec::new();
            let mut id = 0;
            for line in whole.text().lines() {
                if let Some(rest) = line.strip_prefix("id:") {
                    id = rest.trim().parse().unwrap();
                } else if let Some(rest) = line.strip_prefix("data:") {
                    events.push((id, serde_json::from_str(rest.trim()).unwrap()));
                }
            }
            return events;
        }
        assert_eq!(whole.status, 503, "{}", whole.text());
        assert!(
            tokio::time::Instant::now() < deadline,
            "the events never came: {}",
            whole.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_placed_and_finish_with_one_of_three_nats_servers_killed() {
    if !require(Need::NatsServer) {
        return;
    }
    let mut servers = NatsCluster::start(3);
    let names: Vec<String> = (0..4).map(|i| format!("replicated-{i}")).collect();
    let script = names
        .iter()
        .fold(Script::new(), |script, name| job(script, name, "echo ok"));
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes: Vec<(Env, Daemon)> = [("n1", 0), ("n2", 1)]
        .into_iter()
        .map(|(name, index)| {
            let env = Env::new();
            env.write_user_config("[cluster]\nreplicas = 3\n");
            let daemon = Daemon::start_with(
                &env,
                Some(&server),
                &["--cluster", &servers.url(index), "--node", name],
            );
            (env, daemon)
        })
        .collect();
    let (env_a, a) = &nodes[0];
    let body = |name: &str| json!({"prompt": name, "cwd": env_a.root(), "mode": "bypass"});
    let first = submit_while_electing(a, body(&names[0])).await;
    let events = finished_events(a, &first).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    // Every stream and bucket has three copies.
    let client = async_nats::connect(servers.url(0)).await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    for name in troupe_cluster::replicas::cluster_streams() {
        let info = jetstream
            .get_stream(&name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert_eq!(info.config.num_replicas, 3, "{name}");
        assert_eq!(
            info.cluster.unwrap().replicas.len(),
            2,
            "{name}: two followers"
        );
    }
    // The third server goes away: the other two keep the cluster working
    // once every stream has a leader among them.
    servers.kill(2);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    for name in troupe_cluster::replicas::cluster_streams() {
        loop {
            let leader = match jetstream.get_stream(&name).await {
                Ok(mut stream) => stream
                    .info()
                    .await
                    .ok()
                    .and_then(|info| info.cluster.clone())
                    .and_then(|cluster| cluster.leader),
                Err(_) => None,
            };
            if leader.is_some_and(|leader| leader != "s3") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} has no leader"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let mut later = Vec::new();
    for name in &names[1..] {
        later.push(submit_while_electing(a, body(name)).await);
    }
    let mut ran_on = std::collections::BTreeSet::new();
    for run_id in &later {
        let events = finished_events(&nodes[1].1, run_id).await;
        assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
        ran_on.insert(node_of(a, run_id).await.unwrap());
    }
    assert!(!ran_on.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_a_revision_works_in_that_revisions_files_and_hostile_urls_are_refused() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let repositories = tempfile::tempdir().unwrap();
    let (url, first) = two_commit_repository(repositories.path());
    let script = job(
        Script::new(),
        "read-notes",
        "cat notes.txt && git log --oneline | wc -l",
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes: Vec<(Env, Daemon)> = ["n1", "n2"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            env.write_user_config("[cluster]\nfile_repositories = true\n");
            let daemon = Daemon::start_with(
                &env,
                Some(&server),
                &["--cluster", &nats.url(None), "--node", name],
            );
            (env, daemon)
        })
        .collect();
    let (env_a, _) = &nodes[0];
    // `troupe run --repository --revision` through a node: the run works in
    // a checkout of the first commit.
    let mut command = env_a.command(Some(&server));
    command.env_remove("TROUPE_NO_DAEMON").args([
        "run",
        "--mode",
        "bypass",
        "--json",
        "--repository",
        &url,
        "--revision",
        &first,
        "read-notes",
    ]);
    let run = support::run(command).await;
    assert!(run.status.success(), "{}", support::describe(&run));
    let events = support::json_lines(&run.stdout);
    let finished = events
        .iter()
        .find(|event| event["type"] == "tool_finished")
        .unwrap_or_else(|| panic!("{events:?}"));
    let output = finished["output_preview"].as_str().unwrap();
    assert!(output.starts_with("first"), "{finished}");
    assert!(!output.contains("second"), "{finished}");
    let run_id = events[0]["run_id"].as_str().unwrap().to_string();
    let runner = node_of(&nodes[0].1, &run_id).await.unwrap();
    let runner_env = &nodes[if runner == "n1" { 0 } else { 1 }].0;
    let checkout = runner_env.data_dir().join("workspaces/runs").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(checkout.join("notes.txt")).unwrap(),
        "first\n"
    );

    // A hostile URL is refused by the node the client asked.
    let marker = repositories.path().join("pwned");
    let hostile = format!("ext::sh -c touch% {}", marker.display());
    let refused = nodes[0]
        .1
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"prompt": "x", "cwd": env_a.root(), "repository": hostile, "revision": "main"})),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("is refused"), "{}", refused.text());
    // …and by the node that takes it, when another peer publishes it.
    let client = async_nats::connect(nats.url(None)).await.unwrap();
    let mut published = client.subscribe("troupe.events.forged-run").await.unwrap();
    client.flush().await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    let forged = json!({
        "v": 1,
        "run_id": "forged-run",
        "session_id": "forged-session",
        "submitted_by": "elsewhere",
        "submitted_at": "2026-12-04T00:00:00Z",
        "request": {"prompt": "x", "cwd": env_a.root(), "repository": hostile, "revision": "main"},
    });
    // A peer writes the run's record first, as a node that accepts a run
    // does (a submission with no record is dropped unread).
    let record = json!({
        "v": 1,
        "summary": {
            "prompt": "x",
            "run_id": "forged-run",
            "session_id": "forged-session",
            "started": "2026-12-04T00:00:00Z",
            "status": "running",
        },
    });
    jetstream
        .get_key_value("troupe_runs")
        .await
        .unwrap()
        .put("forged-run", record.to_string().into())
        .await
        .unwrap();
    jetstream
        .publish("troupe.submit", forged.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        let message = tokio::time::timeout(std::time::Duration::from_secs(30), published.next())
            .await
            .expect("the forged run's events in time")
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        events.push(value["event"].clone());
    }
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["error", "run_finished"], "{events:?}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .contains("is refused"),
        "{events:?}"
    );
    assert!(!marker.exists(), "the hostile command ran");
    for (env, _) in &nodes {
        let runs = env.data_dir().join("workspaces/runs");
        let checkouts: Vec<_> = std::fs::read_dir(&runs).map_or(Vec::new(), |dir| {
            dir.flatten().map(|entry| entry.file_name()).collect()
        });
        assert!(
            checkouts.iter().all(|name| *name == *run_id.as_str()),
            "{checkouts:?}"
        );
    }
}

#[test]
fn the_cluster_deployment_names_three_nats_servers_three_nodes_and_jaeger() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cluster");
    let text = std::fs::read_to_string(dir.join("compose.yaml")).unwrap();
    let mut compose: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    compose.apply_merge().unwrap();
    let services = compose["services"].as_mapping().unwrap();
    let names: Vec<&str> = services.keys().map(|key| key.as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "jaeger", "nats-1", "nats-2", "nats-3", "troupe-1", "troupe-2", "troupe-3"
        ]
    );
    for i in 1..=3 {
        let nats = &services[format!("nats-{i}").as_str()];
        assert_eq!(nats["command"][1], "/etc/nats/nats.conf", "{nats:?}");
        let mount = format!("./nats-{i}.conf:/etc/nats/nats.conf:ro");
        assert!(
            nats["volumes"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|v| v == mount.as_str()),
            "{nats:?}"
        );
        let node = &services[format!("troupe-{i}").as_str()];
        let environment = &node["environment"];
        assert_eq!(
            environment["TROUPE_CLUSTER"],
            format!("nats://troupe:${{NATS_PASSWORD}}@nats-{i}:4222").as_str()
        );
        assert_eq!(
            environment["OTEL_EXPORTER_OTLP_ENDPOINT"],
            "http://jaeger:4318"
        );
        let command: Vec<&str> = node["command"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|part| part.as_str().unwrap())
            .collect();
        assert!(
            command
                .windows(2)
                .any(|w| w == ["--node", &format!("troupe-{i}")]),
            "{command:?}"
        );
    }
    // The nodes' configuration asks for three replicas and reads as one.
    let config_path = dir.join("troupe.toml");
    let config = troupe_config::parse_config_file(
        &config_path,
        &std::fs::read_to_string(&config_path).unwrap(),
    )
    .unwrap();
    assert_eq!(config.cluster.unwrap().replicas, Some(3));
    // Each NATS configuration is one nats-server accepts, with routes to
    // the other two.
    if !require(Need::NatsServer) {
        return;
    }
    for i in 1..=3 {
        let conf = dir.join(format!("nats-{i}.conf"));
        let text = std::fs::read_to_string(&conf).unwrap();
        for j in (1..=3).filter(|j| *j != i) {
            assert!(
                text.contains(&format!("nats-route://nats-{j}:6222")),
                "{text}"
            );
        }
        let checked = std::process::Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .arg("-t")
            .env("NATS_PASSWORD", "checked")
            .output()
            .unwrap();
        assert!(checked.status.success(), "{checked:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_without_a_cluster_checks_out_a_runs_repository_too() {
    let repositories = tempfile::tempdir().unwrap();
    let (url, _) = two_commit_repository(repositories.path());
    let script = job(
        Script::new(),
        "write-notes",
        "echo third >> notes.txt && cat notes.txt",
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    env.write_user_config("[cluster]\nfile_repositories = true\n");
    let daemon = Daemon::start(&env, &server);
    let (run_id, _) = daemon
        .submit(
            json!({"prompt": "write-notes", "cwd": env.root(), "mode": "bypass",
                       "repository": url, "revision": "v1"}),
        )
        .await;
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    let finished = events
        .iter()
        .find(|(_, e)| e["type"] == "tool_finished")
        .unwrap();
    assert_eq!(finished.1["is_error"], false, "{finished:?}");
    // The run wrote in its own checkout, inside the data directory; the
    // cache and the origin are untouched.
    let checkouts = env.data_dir().join("workspaces/runs");
    let checkout = std::fs::read_dir(&checkouts)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_to_string(checkout.join("notes.txt")).unwrap(),
        "first\nthird\n"
    );
    // Without `file_repositories`, a daemon refuses a file:// repository.
    let strict = Env::new();
    let refusing = Daemon::start(&strict, &server);
    let refused = refusing
        .call(
            "POST",
            "/v1/runs",
            Some(
                &json!({"prompt": "x", "cwd": strict.root(), "repository": url, "revision": "v1"}),
            ),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(refused.text().contains("file://"), "{}", refused.text());
    assert!(!strict.data_dir().join("workspaces").exists());
}
