//! Benchmark: nodes of a cluster (`troupe serve --cluster`) on one
//! `nats-server` on loopback, against the scripted model server in this
//! process.
//!
//! - throughput: 12 runs submitted at once to one node, each calling a slow
//!   tool (`sleep 1`), on three nodes of capacity 4 against one node of
//!   capacity 4: wall time until every run's event stream (read through the
//!   node they were submitted to) reached `run_finished`; the ratio is the
//!   figure.
//! - event latency across nodes: one run streaming 150 text deltas 5 ms
//!   apart on node A (node B drained, so A runs it), its event stream read
//!   at once from A (the runtime's own stream) and from B (from JetStream):
//!   per event, B's arrival minus A's.
//! - per-turn overhead: a 20-turn run (a `read_file` call each turn) on a
//!   node of a cluster against the same run on a standalone daemon,
//!   alternating, `TROUPE_BENCH_SAMPLES` (default 5) rounds: wall time per
//!   turn from submission to `run_finished`.
//!
//! - failover: two nodes with `[cluster] lease_secs` of 3 (`TROUPE_BENCH_SAMPLES`
//!   rounds) and of 15 (one round); a run placed on the first node (the
//!   second drained until the run's slow tool call started), then the first
//!   node killed with SIGKILL: time from the kill to the `run_moved` event
//!   and to `run_finished`, both as read from the second node's event
//!   stream. The lease is the most of it; the rest is the repair.
//!
//! The binary is `TROUPE_BIN` or `target/release/troupe`; `nats-server`
//! must be on the PATH. Arguments name the parts to run (`throughput`,
//! `latency`, `turns`, `failover`; default all):
//! `cargo bench -p troupe-tests --bench cluster -- latency`. Figures go to
//! `docs/performance.md`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_scripted::{Matcher, Script, ScriptedServer, Turn, text, tool_call};
use troupe_test_support::nats::NatsServer;
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::machine_line;

/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(120);

fn main() -> Result<(), String> {
    let samples: usize = std::env::var("TROUPE_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wanted = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let bin = std::env::var_os("TROUPE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/troupe"));
    if !bin.exists() {
        return Err(format!("no binary at {} (set TROUPE_BIN)", bin.display()));
    }
    troupe_llm::http::install_crypto_provider();
    println!("{}", machine_line());
    println!("binary: {}", bin.display());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        if wanted("throughput") {
            throughput(&bin, 12).await?;
        }
        if wanted("latency") {
            latency(&bin).await?;
        }
        if wanted("turns") {
            turns(&bin, samples, 20).await?;
        }
        if wanted("failover") {
            failover(&bin, 3, samples).await?;
            failover(&bin, 15, 1).await?;
        }
        Ok(())
    })
}

/// A `troupe serve` of the bench with its own home.
struct Node {
    child: Child,
    home: tempfile::TempDir,
    addr: String,
    token: String,
    http: reqwest::Client,
}

impl Node {
    /// Starts `troupe serve ARGS` in a fresh home and waits for its
    /// "listening on" line.
    fn start(bin: &Path, server: &ScriptedServer, args: &[&str]) -> Result<Self, String> {
        Self::start_configured(bin, server, args, None)
    }

    /// [`Node::start`] with `config` as the user's configuration file.
    fn start_configured(
        bin: &Path,
        server: &ScriptedServer,
        args: &[&str],
        config: Option<&str>,
    ) -> Result<Self, String> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        if let Some(config) = config {
            let dir = home.path().join("config/troupe");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("config.toml"), config).map_err(|e| e.to_string())?;
        }
        let data = home.path().join("data");
        let project = home.path().join("project");
        std::fs::create_dir_all(&project).map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .arg("serve")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("TROUPE_HOME", &data)
            .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
            .env("ANTHROPIC_API_KEY", "bench-key")
            .current_dir(&project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines
                .next()
                .ok_or("the node exited before listening")?
                .map_err(|e| e.to_string())?;
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
        };
        // The rest of its stderr is drained so it never blocks.
        std::thread::spawn(move || for _ in lines {});
        let token = std::fs::read_to_string(data.join("daemon.token"))
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        Ok(Self {
            child,
            home,
            addr,
            token,
            http: reqwest::Client::new(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let response = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let value: Value = response.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{path}: {status} {value}"));
        }
        Ok(value)
    }

    /// Submits a run in the node's project; its id.
    async fn submit(&self, prompt: &str) -> Result<String, String> {
        let body =
            json!({"prompt": prompt, "cwd": self.home.path().join("project"), "mode": "bypass"});
        let created = self.post("/v1/runs", &body).await?;
        created["run_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| created.to_string())
    }

    /// Reads a run's event stream to the main agent's `run_finished`: each
    /// event's `seq` with when its line arrived.
    async fn follow(&self, run_id: &str) -> Result<Vec<(u64, Instant)>, String> {
        let seen = self.follow_until(run_id, |_| false).await?;
        Ok(seen
            .into_iter()
            .map(|(event, at)| (event["seq"].as_u64().unwrap_or(0), at))
            .collect())
    }

    /// Reads a run's event stream until an event `stop` says is the last
    /// one, or the main agent's `run_finished`: each event with when its
    /// line arrived.
    async fn follow_until(
        &self,
        run_id: &str,
        stop: impl Fn(&Value) -> bool,
    ) -> Result<Vec<(Value, Instant)>, String> {
        let response = self
            .http
            .get(self.url(&format!("/v1/runs/{run_id}/events")))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("events of {run_id}: {}", response.status()));
        }
        let mut body = response.bytes_stream();
        let mut pending = String::new();
        let mut seen = Vec::new();
        while let Some(chunk) = tokio::time::timeout(WAIT, body.next())
            .await
            .map_err(|_| format!("no event of {run_id} in {WAIT:?}"))?
        {
            let chunk = chunk.map_err(|e| e.to_string())?;
            let now = Instant::now();
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let event: Value = serde_json::from_str(data.trim()).map_err(|e| e.to_string())?;
                let last = stop(&event)
                    || (event["type"] == "run_finished" && event["agent_path"] == "main");
                seen.push((event, now));
                if last {
                    return Ok(seen);
                }
            }
        }
        Err(format!("the stream of {run_id} ended before run_finished"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A node the bench killed and reaped is not signalled again: its
        // process id may be another process's by now.
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // SAFETY: plain signal delivery to a node this bench started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// `count` nodes of the cluster at `nats`, each of capacity `capacity`.
fn nodes(
    bin: &Path,
    server: &ScriptedServer,
    nats: &NatsServer,
    count: usize,
    capacity: u32,
) -> Result<Vec<Node>, String> {
    (1..=count)
        .map(|i| {
            let name = format!("n{i}");
            let capacity = capacity.to_string();
            let url = nats.url(None);
            Node::start(
                bin,
                server,
                &["--cluster", &url, "--node", &name, "--capacity", &capacity],
            )
        })
        .collect()
}

/// A script in which the run prompted `name` calls `bash` with `command`,
/// then answers.
fn job(script: Script, name: &str, command: &str) -> Script {
    script
        .then(
            Turn::new(tool_call("bash", json!({"command": command})))
                .when(Matcher::first_user_contains(name)),
        )
        .then(Turn::new(text(format!("done {name}"))).when(Matcher::first_user_contains(name)))
}

/// Submits `runs` slow runs to the first of `count` nodes and waits for all.
async fn placed_wall_time(bin: &Path, count: usize, runs: usize) -> Result<Duration, String> {
    let names: Vec<String> = (0..runs).map(|i| format!("slow-{i:02}-run")).collect();
    let script = names
        .iter()
        .fold(Script::new(), |script, name| job(script, name, "sleep 1"));
    let server = ScriptedServer::start(script)
        .await
        .map_err(|e| e.to_string())?;
    let nats = NatsServer::start(true, &[]);
    let nodes = nodes(bin, &server, &nats, count, 4)?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for name in &names {
        ids.push(nodes[0].submit(name).await?);
    }
    let follows = ids.iter().map(|id| nodes[0].follow(id));
    for followed in futures::future::join_all(follows).await {
        followed?;
    }
    Ok(started.elapsed())
}

async fn throughput(bin: &Path, runs: usize) -> Result<(), String> {
    let mut one = Vec::new();
    let mut three = Vec::new();
    for _ in 0..2 {
        one.push(placed_wall_time(bin, 1, runs).await?);
        three.push(placed_wall_time(bin, 3, runs).await?);
    }
    let show = |label: &str, times: &[Duration]| {
        let shown: Vec<String> = times
            .iter()
            .map(|t| format!("{:.0} ms", millis(*t)))
            .collect();
        println!(
            "throughput: {runs} runs with `sleep 1`, {label}: {}",
            shown.join(", ")
        );
    };
    show("one node of capacity 4", &one);
    show("three nodes of capacity 4", &three);
    let ratios: Vec<String> = one
        .iter()
        .zip(&three)
        .map(|(one, three)| format!("{:.2}x", one.as_secs_f64() / three.as_secs_f64()))
        .collect();
    println!("throughput: three nodes against one: {}", ratios.join(", "));
    Ok(())
}

async fn latency(bin: &Path) -> Result<(), String> {
    let long: String = (0..600)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let script = Script::new().then(
        Turn::new(text(long).with_chunk_chars(4))
            .with_delay(Duration::from_millis(1500))
            .with_chunk_delay(Duration::from_millis(5)),
    );
    let server = ScriptedServer::start(script)
        .await
        .map_err(|e| e.to_string())?;
    let nats = NatsServer::start(true, &[]);
    let nodes = nodes(bin, &server, &nats, 2, 4)?;
    nodes[0]
        .post("/v1/cluster/nodes/n2/drain", &json!(null))
        .await?;
    let run_id = nodes[0].submit("stream to two nodes").await?;
    let (local, remote) = tokio::join!(nodes[0].follow(&run_id), nodes[1].follow(&run_id));
    let local: BTreeMap<u64, Instant> = local?.into_iter().collect();
    // Signed: an event may reach the other node's client first.
    let extra: Vec<f64> = remote?
        .into_iter()
        .filter_map(|(seq, at)| {
            local.get(&seq).map(|there| {
                if at >= *there {
                    millis(at - *there)
                } else {
                    -millis(*there - at)
                }
            })
        })
        .collect();
    let summary = Summary::of(&extra).ok_or("no events")?;
    println!(
        "latency: {} events, SSE on the other node minus SSE on the running node: median {:.3} ms, p10 {:.3} ms, p90 {:.3} ms, max {:.3} ms",
        summary.count, summary.median, summary.p10, summary.p90, summary.max
    );
    Ok(())
}

/// A run of `turns` turns, each reading a file, then an answer.
fn turns_script(turns: usize) -> Script {
    (0..turns)
        .fold(Script::new(), |script, _| {
            script.then(tool_call("read_file", json!({"path": "notes.txt"})))
        })
        .then(text("read"))
}

/// Time per turn of one `turns`-turn run on `node`.
async fn per_turn(node: &Node, turns: usize) -> Result<Duration, String> {
    std::fs::write(node.home.path().join("project/notes.txt"), "notes\n")
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let run_id = node.submit("read the notes").await?;
    node.follow(&run_id).await?;
    Ok(started.elapsed() / u32::try_from(turns + 1).unwrap_or(1))
}

async fn turns(bin: &Path, samples: usize, count: usize) -> Result<(), String> {
    let nats = NatsServer::start(true, &[]);
    let mut standalone = Vec::new();
    let mut clustered = Vec::new();
    for _ in 0..samples {
        let server = ScriptedServer::start(turns_script(count))
            .await
            .map_err(|e| e.to_string())?;
        let node = Node::start(bin, &server, &[])?;
        standalone.push(per_turn(&node, count).await?);
        drop(node);
        let server = ScriptedServer::start(turns_script(count))
            .await
            .map_err(|e| e.to_string())?;
        let node = Node::start(
            bin,
            &server,
            &["--cluster", &nats.url(None), "--node", "solo"],
        )?;
        clustered.push(per_turn(&node, count).await?);
    }
    let alone = Summary::of_millis(&standalone).ok_or("no samples")?;
    let joined = Summary::of_millis(&clustered).ok_or("no samples")?;
    println!(
        "turns: {count}-turn run, time per turn: standalone median {:.2} ms (p90 {:.2}), clustered median {:.2} ms (p90 {:.2}): {:.2}x",
        alone.median,
        alone.p90,
        joined.median,
        joined.p90,
        joined.median / alone.median
    );
    Ok(())
}

/// One failover with `lease_secs`: from the SIGKILL of the node running a
/// run in its slow tool call to `run_moved` and to `run_finished`, read
/// from the surviving node.
async fn failover_once(bin: &Path, lease_secs: u64) -> Result<(Duration, Duration), String> {
    let script = job(Script::new(), "moving-run", "sleep 60");
    let server = ScriptedServer::start(script)
        .await
        .map_err(|e| e.to_string())?;
    let nats = NatsServer::start(true, &[]);
    let config = format!("[cluster]\nlease_secs = {lease_secs}\n");
    let url = nats.url(None);
    let mut doomed = Node::start_configured(
        bin,
        &server,
        &["--cluster", &url, "--node", "n1"],
        Some(&config),
    )?;
    let survivor = Node::start_configured(
        bin,
        &server,
        &["--cluster", &url, "--node", "n2"],
        Some(&config),
    )?;
    // The first node takes the run: the second is drained until the run's
    // tool call started.
    survivor
        .post("/v1/cluster/nodes/n2/drain", &json!(null))
        .await?;
    let run_id = doomed.submit("moving-run").await?;
    doomed
        .follow_until(&run_id, |event| event["type"] == "tool_started")
        .await?;
    survivor
        .post("/v1/cluster/nodes/n2/resume", &json!(null))
        .await?;
    let killed = Instant::now();
    doomed.child.kill().map_err(|e| e.to_string())?;
    let events = survivor.follow_until(&run_id, |_| false).await?;
    let at = |kind: &str| {
        events
            .iter()
            .find(|(event, _)| event["type"] == kind && event["agent_path"] == "main")
            .map(|(event, at)| (event.clone(), *at - killed))
            .ok_or_else(|| format!("no {kind} event"))
    };
    let (moved, to_moved) = at("run_moved")?;
    let (finished, to_finished) = at("run_finished")?;
    if moved["from_node"] != "n1" || moved["to_node"] != "n2" || finished["status"] != "finished" {
        return Err(format!(
            "the run did not move as expected: {moved} {finished}"
        ));
    }
    let _ = doomed.child.wait();
    Ok((to_moved, to_finished))
}

async fn failover(bin: &Path, lease_secs: u64, rounds: usize) -> Result<(), String> {
    let mut moved = Vec::new();
    let mut finished = Vec::new();
    for _ in 0..rounds {
        let (to_moved, to_finished) = failover_once(bin, lease_secs).await?;
        moved.push(to_moved);
        finished.push(to_finished);
    }
    let moved = Summary::of_millis(&moved).ok_or("no rounds")?;
    let finished = Summary::of_millis(&finished).ok_or("no rounds")?;
    println!(
        "failover: lease_secs = {lease_secs}, {rounds} rounds, SIGKILL to run_moved: median {:.0} ms (min {:.0}, max {:.0}); to run_finished: median {:.0} ms (min {:.0}, max {:.0})",
        moved.median, moved.min, moved.max, finished.median, finished.min, finished.max
    );
    Ok(())
}
