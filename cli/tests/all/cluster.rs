//! Daemons as nodes of a NATS JetStream cluster, end to end: real
//! `nats-server` processes on loopback (started and killed by each test),
//! three `troupe serve --cluster` processes with their own `TROUPE_HOME`,
//! the scripted model server.
//!
//! Covered: a node refuses to start (exit 2, the URL named with its secret
//! masked) on a wrong credential, an unreachable server or a server without
//! JetStream; six runs submitted to one node spread over the nodes and all
//! finish; a run's events read from a node that does not run it, and
//! replayed after `Last-Event-ID`; `troupe runs list` and `troupe cluster
//! status` name the nodes; an approval answered, and a message sent, on a
//! node that does not run the run; garbage on every subject and bucket the cluster uses stops no
//! node from taking runs.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use troupe_scripted::{Matcher, Script, ScriptedServer, Turn, text, tool_call};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::{Need, require};

use crate::daemon::Daemon;
use crate::support::{self, Env};

/// Three nodes of the cluster at `url`, each with its own home, capacity 2.
pub(crate) fn three_nodes(server: &ScriptedServer, url: &str) -> Vec<(Env, Daemon)> {
    ["n1", "n2", "n3"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            let daemon = Daemon::start_with(
                &env,
                Some(server),
                &["--cluster", url, "--node", name, "--capacity", "2"],
            );
            (env, daemon)
        })
        .collect()
}

/// A job whose model asks for `bash` with `command`, then answers `done
/// NAME`.
pub(crate) fn job(script: Script, name: &str, command: &str) -> Script {
    script
        .then(
            Turn::new(tool_call("bash", json!({"command": command})))
                .when(Matcher::first_user_contains(name)),
        )
        .then(Turn::new(text(format!("done {name}"))).when(Matcher::first_user_contains(name)))
}

/// The node that runs `run_id`, as `node` asks the cluster.
pub(crate) async fn node_of(node: &Daemon, run_id: &str) -> Option<String> {
    let shown = node.call("GET", &format!("/v1/runs/{run_id}"), None).await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    shown.json()["node"].as_str().map(str::to_string)
}

/// `troupe ARGS` as a client of the daemon of `env`.
pub(crate) async fn troupe(env: &Env, args: &[&str]) -> std::process::Output {
    let mut command = env.command(None);
    command.env_remove("TROUPE_NO_DAEMON").args(args);
    support::run(command).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_to_start_on_a_wrong_credential_no_server_or_no_jetstream() {
    if !require(Need::NatsServer) {
        return;
    }
    let env = Env::new();
    let serve = |url: String| {
        let mut command = env.command(None);
        command.args(["serve", "--cluster", &url]);
        support::run(command)
    };
    let guarded = NatsServer::start(true, &["--user", "ann", "--pass", "right-pass"]);
    let refused = serve(guarded.url(Some("ann:wrong-secret"))).await;
    let stderr = support::text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("nats://***@127.0.0.1:{}", guarded.port()))
            && stderr.contains("authorization violation"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wrong-secret") && !stderr.contains("ann:"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    // A token in the URL is masked the same way.
    let tokened = NatsServer::start(true, &["--auth", "s3cret-token"]);
    let refused = serve(tokened.url(Some("not-the-token"))).await;
    let stderr = support::text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("not-the-token"), "{stderr}");
    assert!(stderr.contains("nats://***@127.0.0.1:"), "{stderr}");

    let port = tokened.port();
    drop(tokened);
    let unreachable = serve(format!("nats://127.0.0.1:{port}")).await;
    let stderr = support::text(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot connect to the cluster at nats://127.0.0.1:{port}"
        )),
        "{stderr}"
    );

    let plain = NatsServer::start(false, &[]);
    let no_jetstream = serve(plain.url(None)).await;
    let stderr = support::text(&no_jetstream.stderr);
    assert_eq!(no_jetstream.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has no JetStream"), "{stderr}");
    // No daemon was left behind.
    assert!(!env.data_dir().join("daemon.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_runs_spread_over_the_nodes_and_each_is_followed_from_any_node() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let names: Vec<String> = (0..6).map(|i| format!("job-{i}")).collect();
    let script = names
        .iter()
        .fold(Script::new(), |script, name| job(script, name, "sleep 2"));
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = three_nodes(&server, &nats.url(None));
    let (env_a, a) = &nodes[0];
    let mut runs = Vec::new();
    for name in &names {
        let (run_id, _) = a
            .submit(json!({"prompt": name, "cwd": env_a.root(), "mode": "bypass"}))
            .await;
        runs.push(run_id);
    }
    // Every run is followed to its end through the node that accepted it.
    for run_id in &runs {
        let events = a.events(run_id, None, |_| false).await;
        let (_, last) = events.last().unwrap();
        assert_eq!(last["type"], "run_finished", "{events:?}");
        assert_eq!(last["status"], "finished", "{events:?}");
    }
    // Every node lists every run with the node that ran it.
    let mut ran_on = BTreeSet::new();
    for (_, node) in &nodes {
        let listed = node.call("GET", "/v1/runs", None).await.json();
        let listed = listed["runs"].as_array().unwrap().clone();
        for run_id in &runs {
            let run = listed
                .iter()
                .find(|run| run["run_id"] == run_id.as_str())
                .unwrap_or_else(|| panic!("{run_id} not listed: {listed:?}"));
            assert_eq!(run["status"], "finished", "{run}");
            ran_on.insert(run["node"].as_str().unwrap().to_string());
        }
    }
    assert!(ran_on.len() >= 2, "the runs did not spread: {ran_on:?}");

    // A run's events from a node that did not run it, then only the later
    // ones after Last-Event-ID.
    let run_id = &runs[0];
    let runner = node_of(a, run_id).await.unwrap();
    let (_, reader) = nodes
        .iter()
        .zip(["n1", "n2", "n3"])
        .find(|(_, name)| *name != runner)
        .map(|(node, _)| node)
        .unwrap();
    let all = reader.events(run_id, None, |_| false).await;
    let ids: Vec<u64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().unwrap().1["type"], "run_finished");
    assert!(
        all.iter().any(|(_, e)| e["type"] == "tool_finished"),
        "{all:?}"
    );
    let middle = ids[ids.len() / 2];
    let replayed = reader.events(run_id, Some(middle), |_| false).await;
    assert_eq!(
        replayed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ids[ids.len() / 2 + 1..].to_vec()
    );
    assert_eq!(replayed, all[ids.len() / 2 + 1..].to_vec());

    // `troupe runs list` and `troupe cluster status` through a node.
    let listed = troupe(env_a, &["runs", "list"]).await;
    let stdout = support::text(&listed.stdout);
    assert!(listed.status.success(), "{}", support::describe(&listed));
    assert!(stdout.lines().next().unwrap().contains("NODE"), "{stdout}");
    for node in &ran_on {
        assert!(stdout.contains(node.as_str()), "{stdout}");
    }
    let status = troupe(env_a, &["cluster", "status"]).await;
    let stdout = support::text(&status.stdout);
    assert!(status.status.success(), "{}", support::describe(&status));
    for name in ["n1", "n2", "n3"] {
        assert!(
            stdout
                .lines()
                .any(|line| line.starts_with(name) && line.contains(" up ")),
            "{stdout}"
        );
    }
    let as_json = troupe(env_a, &["cluster", "status", "--json"]).await;
    let value: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(value["nodes"].as_array().unwrap().len(), 3, "{value}");
    assert!(value["runs"].as_array().unwrap().len() >= 6, "{value}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_on_a_node_that_does_not_run_the_run_lets_it_go_on() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let script = Script::new()
        .then(
            Turn::new(tool_call(
                "write_file",
                json!({"path": "approved.txt", "content": "yes\n"}),
            ))
            .when(Matcher::first_user_contains("approve-me")),
        )
        .then(Turn::new(text("written")).when(Matcher::first_user_contains("approve-me")));
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = three_nodes(&server, &nats.url(None));
    let (env_a, a) = &nodes[0];
    let (run_id, _) = a
        .submit(json!({"prompt": "approve-me", "cwd": env_a.root(), "interactive": true}))
        .await;
    let asked = a
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let (seen, request) = asked.last().unwrap();
    let approval_id = request["approval_id"].as_str().unwrap();
    let runner = node_of(a, &run_id).await.unwrap();
    let other = nodes
        .iter()
        .zip(["n1", "n2", "n3"])
        .rfind(|(_, name)| *name != runner)
        .map(|((_, node), _)| node)
        .unwrap();
    // The node that does not run it routes the answers: the same codes as
    // the running node's own API.
    let unknown = other
        .call(
            "POST",
            &format!("/v1/runs/{run_id}/approvals/not-{approval_id}"),
            Some(&json!({"outcome": "allow"})),
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let answered = other
        .call(
            "POST",
            &format!("/v1/runs/{run_id}/approvals/{approval_id}"),
            Some(&json!({"outcome": "allow"})),
        )
        .await;
    assert_eq!(answered.status, 200, "{}", answered.text());
    assert_eq!(answered.json()["outcome"], "allow");
    let rest = other.events(&run_id, Some(*seen), |_| false).await;
    assert!(
        rest.iter()
            .any(|(_, e)| e["type"] == "approval_resolved" && e["outcome"] == "allow"),
        "{rest:?}"
    );
    assert_eq!(rest.last().unwrap().1["status"], "finished");
    assert_eq!(
        std::fs::read_to_string(env_a.root().join("approved.txt")).unwrap(),
        "yes\n"
    );
    // The run has ended: a routed cancel is refused as the local one is.
    let late = other
        .call("POST", &format!("/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(late.status, 409, "{}", late.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_every_subject_and_bucket_stops_no_node_from_taking_runs() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let script = job(
        job(Script::new(), "first-job", "echo ok"),
        "second-job",
        "echo ok",
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = three_nodes(&server, &nats.url(None));
    let (env_a, a) = &nodes[0];
    let client = async_nats::connect(nats.url(None)).await.unwrap();
    let jetstream = async_nats::jetstream::new(client.clone());
    let foreign = json!({"v": 99, "run_id": "r", "session_id": "s"}).to_string();
    let garbage: Vec<Vec<u8>> = vec![
        b"not json at all".to_vec(),
        foreign.into_bytes(),
        vec![b'{'; 1024 * 1024 - 4096],
    ];
    let (run_seen, session_seen) = a
        .submit(json!({"prompt": "first-job", "cwd": env_a.root(), "mode": "bypass"}))
        .await;
    for body in &garbage {
        for subject in [
            "troupe.submit".to_string(),
            format!("troupe.events.{run_seen}"),
            format!("troupe.session.{session_seen}"),
            "$KV.troupe_runs.garbage-run".to_string(),
            "$KV.troupe_nodes.garbage-node".to_string(),
        ] {
            jetstream
                .publish(subject, body.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        // Actions on the run, answered by nobody or dropped by its node.
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            client.request(format!("troupe.run.{run_seen}.action"), body.clone().into()),
        )
        .await;
    }
    // The first run finished, its events read past the garbage.
    let events = a.events(&run_seen, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    // A run submitted after the garbage is taken and finishes.
    let (later, _) = a
        .submit(json!({"prompt": "second-job", "cwd": env_a.root(), "mode": "bypass"}))
        .await;
    let events = nodes[1].1.events(&later, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    // Every node still answers and lists the runs (the garbage records
    // left out); `cluster status` lists the three nodes only.
    for (_, node) in &nodes {
        let listed = node.call("GET", "/v1/runs", None).await;
        assert_eq!(listed.status, 200, "{}", listed.text());
        let runs = listed.json()["runs"].as_array().unwrap().clone();
        assert!(
            runs.iter().all(|run| run["run_id"] != "garbage-run"),
            "{runs:?}"
        );
        assert_eq!(runs.len(), 2, "{runs:?}");
        let status = node.call("GET", "/v1/cluster", None).await.json();
        assert_eq!(status["nodes"].as_array().unwrap().len(), 3, "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_start_ends_with_an_error_and_a_stopping_node_leaves_the_cluster() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    let mut nodes = three_nodes(&server, &nats.url(None));
    let (env_a, a) = &nodes[0];
    // The request is accepted at once; the node that takes it cannot
    // prepare it (no such provider) and ends it with an error.
    let (run_id, _) = a
        .submit(json!({"prompt": "x", "cwd": env_a.root(), "provider": "no-such-provider"}))
        .await;
    let events = a.events(&run_id, None, |_| false).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["error", "run_finished"], "{events:?}");
    assert!(
        events[0].1["message"]
            .as_str()
            .unwrap()
            .contains("no-such-provider"),
        "{events:?}"
    );
    assert_eq!(events[1].1["status"], "error");
    let shown = a
        .call("GET", &format!("/v1/runs/{run_id}"), None)
        .await
        .json();
    assert_eq!(shown["status"], "error", "{shown}");
    assert!(shown["node"].is_string(), "{shown}");

    let (_, stopped) = nodes.pop().unwrap();
    let (code, stderr) = stopped.stop(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr}");
    let status = nodes[0].1.call("GET", "/v1/cluster", None).await.json();
    let names: Vec<&str> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["node"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["n1", "n2"], "{status}");
    // A daemon that is not a node says so.
    let env = Env::new();
    let single = Daemon::start(&env, &server);
    let answer = single.call("GET", "/v1/cluster", None).await;
    assert_eq!(answer.status, 404, "{}", answer.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placed_run_joins_the_trace_of_the_node_that_accepted_it() {
    if !require(Need::NatsServer) {
        return;
    }
    let (endpoint, received) = crate::otlp::collector().await;
    let nats = NatsServer::start(true, &[]);
    let server = ScriptedServer::start(Script::new().then(text("traced")))
        .await
        .unwrap();
    let nodes: Vec<(Env, Daemon)> = ["n1", "n2"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            let mut command = env.command(Some(&server));
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint).args([
                "serve",
                "--cluster",
                &nats.url(None),
                "--node",
                name,
            ]);
            let daemon = Daemon::start_command(&env, command);
            (env, daemon)
        })
        .collect();
    let (env_a, a) = &nodes[0];
    let (run_id, _) = a
        .submit(json!({"prompt": "trace me", "cwd": env_a.root(), "mode": "bypass"}))
        .await;
    let events = a.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished");
    // Stopped nodes have flushed their spans.
    for (_, node) in nodes {
        let (code, stderr) = node.stop(libc::SIGTERM);
        assert_eq!(code, 0, "{stderr}");
    }
    let spans = received.lock().unwrap().clone();
    let attributes = |span: &opentelemetry_proto::tonic::trace::v1::Span| {
        crate::otlp::attributes(&span.attributes)
    };
    let placement = |side: &str| {
        spans
            .iter()
            .map(|(_, span)| span)
            .find(|span| {
                span.name == "placement"
                    && attributes(span)
                        .get("troupe.placement.side")
                        .map(String::as_str)
                        == Some(side)
                    && attributes(span).get("troupe.placement.run_id") == Some(&run_id)
            })
            .unwrap_or_else(|| {
                let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
                panic!("no {side} placement span among {names:?}")
            })
    };
    let (submitted, taken) = (placement("submit"), placement("take"));
    let root = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| {
            span.name == "invoke_agent main"
                && attributes(span).get("troupe.run_id") == Some(&run_id)
        })
        .expect("the run's root span");
    assert_eq!(taken.trace_id, submitted.trace_id, "one trace");
    assert_eq!(taken.parent_span_id, submitted.span_id);
    assert_eq!(root.trace_id, submitted.trace_id, "one trace");
    assert_eq!(root.parent_span_id, taken.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_to_a_node_that_does_not_run_the_run_reaches_its_model() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = NatsServer::start(true, &[]);
    // The run waits in its tool call until the test lets it go on.
    let script = job(
        Script::new(),
        "message-me",
        "while [ ! -e let-go ]; do sleep 0.05; done",
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let nodes = three_nodes(&server, &nats.url(None));
    let (env_a, a) = &nodes[0];
    let (run_id, _) = a
        .submit(json!({"prompt": "message-me", "cwd": env_a.root(), "mode": "bypass"}))
        .await;
    let started = a
        .events(&run_id, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "tool_started")
        })
        .await;
    let (seen, _) = started.last().unwrap();
    let runner = node_of(a, &run_id).await.unwrap();
    let other = nodes
        .iter()
        .zip(["n1", "n2", "n3"])
        .rfind(|(_, name)| *name != runner)
        .map(|((_, node), _)| node)
        .unwrap();
    let messages = format!("/v1/runs/{run_id}/messages");
    // The running node's own answers, through the other node.
    let empty = other
        .call("POST", &messages, Some(&json!({"text": "  "})))
        .await;
    assert_eq!(empty.status, 400, "{}", empty.text());
    let written = other
        .call(
            "POST",
            &messages,
            Some(&json!({"text": "sent through another node"})),
        )
        .await;
    assert_eq!(written.status, 202, "{}", written.text());
    std::fs::write(env_a.root().join("let-go"), "").unwrap();
    let rest = other.events(&run_id, Some(*seen), |_| false).await;
    assert!(
        rest.iter()
            .any(|(_, e)| e["type"] == "user_message" && e["text"] == "sent through another node"),
        "{rest:?}"
    );
    assert_eq!(rest.last().unwrap().1["status"], "finished", "{rest:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "two model calls");
    assert!(!requests[0].any_user_text_contains("sent through another node"));
    assert!(requests[1].any_user_text_contains("sent through another node"));
    // Once the run has ended, a routed message is refused as a local one.
    let late = other
        .call("POST", &messages, Some(&json!({"text": "too late"})))
        .await;
    assert_eq!(late.status, 409, "{}", late.text());
}

/// A node proves who it is with a `.creds` file (`[cluster] credentials`)
/// to a server in operator mode: with the account's user it starts and
/// runs a run; with a user of an account the server does not know it exits
/// 2, naming the URL and the cause, never the file's secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_connects_with_a_creds_file_and_one_the_server_does_not_know_is_refused() {
    if !require(Need::NatsServer) {
        return;
    }
    let nats = troupe_test_support::nats_operator::OperatorServer::start();
    let url = nats.server.url(None);

    let env = Env::new();
    env.write_user_config(&format!(
        "[cluster]\ncredentials = \"{}\"\n",
        nats.foreign_creds.display()
    ));
    let mut command = env.command(None);
    command.args(["serve", "--cluster", &url]);
    let refused = support::run(command).await;
    let stderr = support::text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot connect to the cluster at {url}"))
            && stderr.contains("authorization violation"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    let seed = std::fs::read_to_string(&nats.foreign_creds).unwrap();
    let seed = seed
        .lines()
        .find(|line| line.starts_with("SU"))
        .unwrap()
        .to_string();
    assert!(!stderr.contains(&seed), "{stderr}");
    assert!(!env.data_dir().join("daemon.json").exists());

    let script = job(Script::new(), "with-creds", "echo creds");
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    env.write_user_config(&format!(
        "[cluster]\ncredentials = \"{}\"\n",
        nats.creds.display()
    ));
    let node = Daemon::start_with(&env, Some(&server), &["--cluster", &url, "--node", "n1"]);
    let (run_id, _) = node
        .submit(json!({"prompt": "with-creds", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = node.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    assert_eq!(node_of(&node, &run_id).await.as_deref(), Some("n1"));
}
