//! Benchmark: the daemon (`troupe serve`, release build) against the
//! scripted model server in this process.
//!
//! - start → first model request of `troupe run "x"` three ways: through a
//!   daemon already up (warm), through a daemon the command starts on demand
//!   (cold: a fresh data directory each time, the daemon stopped after), and
//!   embedded (`--no-daemon`, a fresh data directory each time). Timed from
//!   just before the spawn to the server's admission of the request
//!   (`bench::arrivals`).
//! - event latency to a client: from the admission of the request to the
//!   first `text_delta` line on the command's stdout, through the daemon
//!   (SSE) and embedded; the difference is the daemon's hop.
//! - throughput: 50 concurrent `troupe run` clients through one daemon,
//!   against 50 concurrent embedded runs (`--no-daemon`, each its own data
//!   directory): wall time until all have exited.
//! - memory: the daemon's resident set after 1,000 runs (1,000 idle sessions
//!   it keeps), submitted 50 at a time through the API, read from
//!   `/proc/PID/status`; and its peak while a client that never reads holds a
//!   run's event stream over a 262,144-event run, against the peak of the same
//!   run without that client.
//! - the owner's requests under a flood: the latency of `GET /healthz` and of
//!   an authenticated `GET /v1/runs`, each on a new connection (sent again,
//!   as the `troupe` command does, when the connection closed before an
//!   answer), while 2,000 connections that sent half a request head are held
//!   against the daemon (each one the daemon closes is opened again at once,
//!   from a thread of its own), against the same requests without them; and
//!   the descriptors the daemon holds meanwhile.
//! - dashboards: the time per turn of a 20-turn run (a `read_file` call and
//!   its result each turn) with no dashboard open, against the same run
//!   watched by 10 logged-in dashboards, each holding the run page's live
//!   stream and the live runs list; alternating, `TROUPE_BENCH_SAMPLES`
//!   rounds; with a model that answers at once, and one that takes 50 ms.
//!
//! The binary is `TROUPE_BIN` or `target/release/troupe` (build it first:
//! `cargo build --release -p troupe-cli`). `TROUPE_BENCH_SAMPLES` (default 20)
//! sets the samples per start figure, `TROUPE_BENCH_FLOOD_SAMPLES` (default
//! 200) the requests per flood figure. Arguments name the parts to run
//! (`start`, `throughput`, `idle`, `stalled`, `flood`, `dashboards`; default all):
//! `cargo bench -p troupe-tests --bench daemon -- flood`. Figures go to
//! `docs/performance.md`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use troupe_process::process_is_alive;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use troupe_scripted::{Script, ScriptedServer, ServerConfig, text};
use troupe_tests::bench::arrivals::ArrivalStamps;
use troupe_tests::bench::stats::{Summary, millis};
use troupe_tests::bench::system::{machine_line, status_kib};

const WAIT: Duration = Duration::from_secs(120);

fn main() -> Result<(), String> {
    let samples: usize = std::env::var("TROUPE_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let flood_samples: usize = std::env::var("TROUPE_BENCH_FLOOD_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Cargo passes `--bench`; the other arguments name parts to run.
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wanted = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let bin = binary()?;
    println!("{}", machine_line());
    tokio.block_on(async move {
        if wanted("start") {
            start_times(&bin, samples).await?;
        }
        if wanted("throughput") {
            throughput(&bin, 50).await?;
        }
        if wanted("idle") {
            idle_sessions(&bin, 1000).await?;
        }
        if wanted("stalled") {
            stalled_client(&bin).await?;
        }
        if wanted("flood") {
            flood(&bin, 2000, flood_samples).await?;
        }
        if wanted("dashboards") {
            dashboards(&bin, samples, 10, Duration::ZERO).await?;
            dashboards(&bin, samples, 10, Duration::from_millis(50)).await?;
        }
        Ok(())
    })
}

/// A fresh home: HOME, config, data directory and a project.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir.path().join("project/.troupe")).map_err(|e| e.to_string())?;
        Ok(Self { dir })
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// `troupe ARGS` in this home, speaking to `server`.
    fn command(&self, bin: &Path, server: &ScriptedServer, args: &[&str]) -> Command {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("TROUPE_HOME", self.data())
            .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
            .env("ANTHROPIC_API_KEY", "bench-key")
            .env("TROUPE_DAEMON_IDLE_SECS", "60")
            .current_dir(self.project())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// Starts `troupe serve` here and waits until it listens.
    fn serve(&self, bin: &Path, server: &ScriptedServer) -> Result<Daemon, String> {
        let child = self
            .command(bin, server, &["serve"])
            .spawn()
            .map_err(|e| e.to_string())?;
        let state = wait_for_state(&self.data()).ok_or("the daemon did not start")?;
        Ok(Daemon {
            child: Some(child),
            pid: state.0,
            addr: state.1,
            token: std::fs::read_to_string(self.data().join("daemon.token"))
                .map_err(|e| e.to_string())?
                .trim()
                .to_string(),
        })
    }
}

/// A daemon the bench started (or found in a data directory).
struct Daemon {
    child: Option<Child>,
    pid: u32,
    addr: String,
    token: String,
}

impl Daemon {
    fn stop(mut self) {
        // SAFETY: plain signal delivery to a daemon this bench started.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        match self.child.take() {
            Some(mut child) => {
                let _ = child.wait();
            }
            None => wait_gone(self.pid),
        }
    }

    fn rss_kib(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|status| status_kib(&status, field))
            .unwrap_or(0)
    }

    /// `POST /v1/runs` over raw HTTP/1.0; the run id.
    async fn submit(&self, body: &Value) -> Result<String, String> {
        let answer = self.request("POST", "/v1/runs", &body.to_string()).await?;
        let value: Value = serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
        value["run_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| answer.clone())
    }

    async fn request(&self, method: &str, path: &str, body: &str) -> Result<String, String> {
        let raw = self.exchange(method, path, body, true).await?;
        Ok(raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    }

    /// One request on a new connection (with the token or without), the
    /// whole response read to the connection's end.
    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: &str,
        with_token: bool,
    ) -> Result<String, String> {
        let mut stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let authorization = if with_token {
            format!("Authorization: Bearer {}\r\n", self.token)
        } else {
            String::new()
        };
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\n{authorization}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = String::new();
        stream
            .read_to_string(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        Ok(raw)
    }

    /// A dashboard session: a login code from `POST /login/codes`,
    /// exchanged at `POST /login` as the login page does; the cookie.
    async fn dashboard_cookie(&self) -> Result<String, String> {
        let answer = self.request("POST", "/login/codes", "").await?;
        let code: Value = serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
        let body = json!({ "code": code["code"] }).to_string();
        let mut stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let head = format!(
            "POST /login HTTP/1.0\r\nHost: {0}\r\nOrigin: http://{0}\r\nContent-Length: {1}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = String::new();
        stream
            .read_to_string(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        raw.lines()
            .find_map(|line| line.strip_prefix("set-cookie: "))
            .and_then(|value| value.split(';').next())
            .map(str::to_string)
            .ok_or_else(|| format!("no session cookie: {raw}"))
    }

    /// Holds a dashboard page's live stream open, reading everything it
    /// sends, until aborted or the daemon ends it.
    fn hold_page(&self, path: String, cookie: String) -> impl Future<Output = ()> + use<> {
        let addr = self.addr.clone();
        async move {
            let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await else {
                return;
            };
            let head = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nCookie: {cookie}\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut sink = vec![0u8; 64 * 1024];
            while let Ok(read) = stream.read(&mut sink).await {
                if read == 0 {
                    return;
                }
            }
        }
    }

    /// Opens the run's event stream and reads it to `run_finished`.
    async fn follow(&self, run_id: &str) -> Result<(), String> {
        let mut stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let head = format!(
            "GET /v1/runs/{run_id}/events HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.addr, self.token
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut lines = tokio::io::BufReader::new(stream).lines();
        while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
            if line.contains("\"run_finished\"") {
                return Ok(());
            }
        }
        Err("the stream ended before run_finished".into())
    }
}

/// `(pid, addr)` once `daemon.json` names a live process.
fn wait_for_state(data: &Path) -> Option<(u32, String)> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Some(state) = read_state(data)
            && process_is_alive(state.0)
        {
            return Some(state);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn read_state(data: &Path) -> Option<(u32, String)> {
    let text = std::fs::read_to_string(data.join("daemon.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    Some((
        value["pid"].as_u64()? as u32,
        value["addr"].as_str()?.to_string(),
    ))
}

fn wait_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while process_is_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A server that answers every request with `answer` and stamps admissions.
async fn server(
    stamps: &ArrivalStamps,
    answers: usize,
    answer: &str,
) -> Result<ScriptedServer, String> {
    let mut script = Script::new();
    for _ in 0..answers {
        script = script.then(stamps.turn(text(answer)));
    }
    ScriptedServer::start_with(script, ServerConfig::non_strict())
        .await
        .map_err(|e| e.to_string())
}

/// Spawns `command` with stdout piped; returns (spawn time, first
/// `text_delta` line time, exit time).
async fn timed_run(command: Command) -> Result<(Instant, Option<Instant>, Instant), String> {
    let mut command = tokio::process::Command::from(command);
    command.stdout(Stdio::piped());
    let spawned = Instant::now();
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut first_delta = None;
    while let Some(line) = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .map_err(|_| "no output in time")?
        .map_err(|e| e.to_string())?
    {
        if first_delta.is_none() && line.contains("\"text_delta\"") {
            first_delta = Some(Instant::now());
        }
    }
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("troupe run exited {status}"));
    }
    Ok((spawned, first_delta, Instant::now()))
}

fn print(label: &str, samples: &[Duration]) {
    match Summary::of_millis(samples) {
        Some(summary) => println!("{label}: {summary}"),
        None => println!("{label}: no samples"),
    }
}

fn p99(samples: &[Duration]) -> f64 {
    let mut sorted: Vec<f64> = samples.iter().map(|d| millis(*d)).collect();
    sorted.sort_by(f64::total_cmp);
    let index = ((sorted.len() as f64) * 0.99).ceil() as usize;
    sorted[index.saturating_sub(1).min(sorted.len() - 1)]
}

async fn start_times(bin: &Path, samples: usize) -> Result<(), String> {
    for mode in ["warm", "cold", "embedded"] {
        let stamps = ArrivalStamps::new();
        let server = server(&stamps, samples + 1, "ok").await?;
        let shared = Home::new()?;
        let daemon = match mode {
            "warm" => {
                let daemon = shared.serve(bin, &server)?;
                // One run first so the daemon's first-run costs are paid.
                let warmup = shared.command(bin, &server, &["run", "--json", "x"]);
                timed_run(warmup).await?;
                Some(daemon)
            }
            _ => None,
        };
        let mut to_request = Vec::new();
        let mut to_delta = Vec::new();
        for _ in 0..samples {
            let fresh = Home::new()?;
            let home = if mode == "warm" { &shared } else { &fresh };
            let mut args = vec!["run", "--json", "x"];
            if mode == "embedded" {
                args.insert(1, "--no-daemon");
            }
            let before = stamps.times().len();
            let (spawned, delta, _) = timed_run(home.command(bin, &server, &args)).await?;
            let admitted = stamps.times()[before];
            to_request.push(admitted.duration_since(spawned));
            if let Some(delta) = delta {
                to_delta.push(delta.duration_since(admitted));
            }
            if mode == "cold"
                && let Some((pid, _)) = read_state(&home.data())
            {
                // SAFETY: plain signal delivery to the daemon this run started.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                wait_gone(pid);
            }
        }
        print(&format!("start → first request, {mode}"), &to_request);
        print(
            &format!("request admitted → first text_delta on stdout, {mode}"),
            &to_delta,
        );
        println!(
            "  p99 admitted → text_delta, {mode}: {:.2} ms",
            p99(&to_delta)
        );
        if let Some(daemon) = daemon {
            daemon.stop();
        }
    }
    Ok(())
}

async fn throughput(bin: &Path, runs: usize) -> Result<(), String> {
    for mode in ["daemon", "embedded"] {
        let stamps = ArrivalStamps::new();
        let server = server(&stamps, runs + 1, "ok").await?;
        let shared = Home::new()?;
        let daemon = if mode == "daemon" {
            Some(shared.serve(bin, &server)?)
        } else {
            None
        };
        let homes: Vec<Home> = (0..runs).map(|_| Home::new()).collect::<Result<_, _>>()?;
        let started = Instant::now();
        let mut waits = Vec::new();
        for home in &homes {
            let (home, args): (&Home, Vec<&str>) = match mode {
                "daemon" => (&shared, vec!["run", "--json", "x"]),
                _ => (home, vec!["run", "--no-daemon", "--json", "x"]),
            };
            waits.push(timed_run(home.command(bin, &server, &args)));
        }
        for result in futures::future::join_all(waits).await {
            result?;
        }
        let elapsed = started.elapsed();
        println!(
            "{runs} concurrent runs, {mode}: {:.1} ms wall ({:.1} runs/s)",
            millis(elapsed),
            runs as f64 / elapsed.as_secs_f64()
        );
        if let Some(daemon) = daemon {
            daemon.stop();
        }
    }
    Ok(())
}

async fn idle_sessions(bin: &Path, sessions: usize) -> Result<(), String> {
    let stamps = ArrivalStamps::new();
    let server = server(&stamps, sessions, "ok").await?;
    let home = Home::new()?;
    let daemon = home.serve(bin, &server)?;
    let before = daemon.rss_kib("VmRSS");
    let body = json!({"prompt": "x", "cwd": home.project()});
    for batch in 0..sessions.div_ceil(50) {
        let count = 50.min(sessions - batch * 50);
        let mut runs = Vec::new();
        for _ in 0..count {
            runs.push(daemon.submit(&body).await?);
        }
        let follows = runs.iter().map(|run| daemon.follow(run));
        for result in futures::future::join_all(follows).await {
            result?;
        }
    }
    let after = daemon.rss_kib("VmRSS");
    println!(
        "daemon RSS: {:.1} MiB at start, {:.1} MiB with {sessions} idle sessions ({:.1} KiB per session)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / sessions as f64
    );
    daemon.stop();
    Ok(())
}

/// Turns of each run the dashboards bench times.
const DASHBOARD_TURNS: usize = 20;

/// The time per turn of a run with no dashboard open and with `open`
/// dashboards following it live, the model answering after `latency`.
async fn dashboards(
    bin: &Path,
    rounds: usize,
    open: usize,
    latency: Duration,
) -> Result<(), String> {
    let mut script = Script::new();
    for _ in 0..rounds * 2 {
        // A different file each turn: the same call again and again would
        // stop the run as a loop.
        for turn in 0..DASHBOARD_TURNS {
            let path = format!("notes-{turn}.txt");
            let call = troupe_scripted::tool_call("read_file", json!({ "path": path }));
            script = script.then(troupe_scripted::Turn::new(call).with_delay(latency));
        }
        script = script.then(text("done"));
    }
    let server = ScriptedServer::start(script)
        .await
        .map_err(|e| e.to_string())?;
    let home = Home::new()?;
    for turn in 0..DASHBOARD_TURNS {
        std::fs::write(
            home.project().join(format!("notes-{turn}.txt")),
            "notes\n".repeat(50),
        )
        .map_err(|e| e.to_string())?;
    }
    let daemon = home.serve(bin, &server)?;
    let body = json!({"prompt": "read", "cwd": home.project(), "mode": "bypass"});
    let mut per_turn: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for watchers in troupe_tests::bench::round_order(&[0, open], round) {
            let mut cookies = Vec::new();
            for _ in 0..watchers {
                cookies.push(daemon.dashboard_cookie().await?);
            }
            let started = Instant::now();
            let run = daemon.submit(&body).await?;
            let streams: Vec<_> = cookies
                .iter()
                .flat_map(|cookie| {
                    [
                        format!("/runs/{run}/live?from=1"),
                        "/live/runs?page=0".to_string(),
                    ]
                    .map(|path| tokio::spawn(daemon.hold_page(path, cookie.clone())))
                })
                .collect();
            daemon.follow(&run).await?;
            let elapsed = started.elapsed();
            for stream in streams {
                stream.abort();
            }
            per_turn[usize::from(watchers > 0)].push(millis(elapsed) / DASHBOARD_TURNS as f64);
        }
    }
    let requests = server.requests().len();
    if requests != rounds * 2 * (DASHBOARD_TURNS + 1) {
        return Err(format!(
            "the runs made {requests} model requests, not {} each",
            DASHBOARD_TURNS + 1
        ));
    }
    let none = Summary::of(&per_turn[0]).ok_or("no samples")?;
    let watched = Summary::of(&per_turn[1]).ok_or("no samples")?;
    let model = millis(latency);
    println!("model latency {model} ms; per turn, no dashboard: {none}");
    println!("model latency {model} ms; per turn, {open} dashboards: {watched}");
    println!(
        "model latency {model} ms; overhead of {open} dashboards: {:.3}× (median)",
        watched.median / none.median
    );
    daemon.stop();
    Ok(())
}

async fn stalled_client(bin: &Path) -> Result<(), String> {
    const TEXT_BYTES: usize = 4 * 1024 * 1024;
    let long = || text("x".repeat(TEXT_BYTES)).with_chunk_chars(16);
    let script = Script::new()
        .then(long())
        .then(long())
        .then(long())
        .then(long());
    let server = ScriptedServer::start_with(script, ServerConfig::non_strict())
        .await
        .map_err(|e| e.to_string())?;
    let home = Home::new()?;
    let daemon = home.serve(bin, &server)?;
    let body = json!({"prompt": "x", "cwd": home.project()});
    // Two runs read in full bring the store's cache and the allocator to
    // their working size; the peak after them is the baseline.
    for _ in 0..2 {
        let run = daemon.submit(&body).await?;
        daemon.follow(&run).await?;
    }
    let baseline = daemon.rss_kib("VmHWM");
    // The same run once more, read in full: what a run adds to the peak by
    // itself (its session is kept, the allocator's high-water mark moves).
    let control = daemon.submit(&body).await?;
    daemon.follow(&control).await?;
    let after_control = daemon.rss_kib("VmHWM");
    println!(
        "the same run read in full: daemon peak RSS {:.1} MiB → {:.1} MiB (+{:.1} MiB)",
        baseline as f64 / 1024.0,
        after_control as f64 / 1024.0,
        (after_control.saturating_sub(baseline)) as f64 / 1024.0,
    );
    let baseline = after_control;
    let run = daemon.submit(&body).await?;
    let mut stalled = tokio::net::TcpStream::connect(&daemon.addr)
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "GET /v1/runs/{run}/events HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        daemon.addr, daemon.token
    );
    stalled
        .write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    daemon.follow(&run).await?;
    let with_stalled = daemon.rss_kib("VmHWM");
    println!(
        "a client that never reads a 262,144-event run: daemon peak RSS {:.1} MiB → {:.1} MiB (+{:.1} MiB); the run took {:.0} ms",
        baseline as f64 / 1024.0,
        with_stalled as f64 / 1024.0,
        (with_stalled.saturating_sub(baseline)) as f64 / 1024.0,
        millis(started.elapsed())
    );
    drop(stalled);
    daemon.stop();
    Ok(())
}

/// Raises this process's soft open-files limit to its hard limit.
fn raise_open_files() -> Result<u64, String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a stack value for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(limit.rlim_cur)
}

/// Connections held half-sent against a daemon from a thread of their own:
/// each one the daemon closes is opened again at once.
struct Flood {
    stop: tokio_util::sync::CancellationToken,
    opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(addr: &str, connections: usize) -> Result<Self, String> {
        let stop = tokio_util::sync::CancellationToken::new();
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let (addr, task_stop, task_opened) = (addr.to_string(), stop.clone(), opened.clone());
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..connections {
                    tasks.spawn(hold_half_sent(
                        addr.clone(),
                        task_stop.clone(),
                        task_opened.clone(),
                    ));
                }
                while tasks.join_next().await.is_some() {}
            });
        });
        Ok(Self {
            stop,
            opened,
            thread: Some(thread),
        })
    }

    /// Connections opened so far.
    fn opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stop(self) {
        drop(self);
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Keeps one connection open with half a request head sent, opening a new
/// one whenever the daemon closes it, until `stop`.
async fn hold_half_sent(
    addr: String,
    stop: tokio_util::sync::CancellationToken,
    opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let head = format!("GET /v1/runs HTTP/1.1\r\nHost: {addr}\r\n");
    while !stop.is_cancelled() {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            connected = tokio::net::TcpStream::connect(&addr) => connected,
        };
        let Ok(mut stream) = connected else {
            continue;
        };
        opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if stream.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let mut buffer = [0u8; 512];
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                read = stream.read(&mut buffer) => {
                    if matches!(read, Ok(0) | Err(_)) {
                        break;
                    }
                }
            }
        }
    }
}

/// The owner's requests of one kind: how long each took, and how many were
/// sent again.
#[derive(Default)]
struct OwnerRequests {
    latencies: Vec<Duration>,
    resent: usize,
}

/// `samples` requests of the owner, one after the other, each on a new
/// connection: `GET /healthz` and an authenticated `GET /v1/runs`. As the
/// `troupe` command's client does, a request whose connection closed before
/// an answer is sent again (at most 3 times; the daemon closes a connection
/// without answering only when no request of it was started); its latency is
/// the time until the answer.
async fn owner_requests(
    daemon: &Daemon,
    samples: usize,
) -> Result<(OwnerRequests, OwnerRequests), String> {
    let mut health = OwnerRequests::default();
    let mut runs = OwnerRequests::default();
    for _ in 0..samples {
        for (path, with_token, into) in [
            ("/healthz", false, &mut health),
            ("/v1/runs", true, &mut runs),
        ] {
            let started = Instant::now();
            let mut resends = 0;
            let answer = loop {
                let sent = tokio::time::timeout(WAIT, daemon.exchange("GET", path, "", with_token))
                    .await
                    .map_err(|_| format!("GET {path} was not answered in {WAIT:?}"))?;
                match sent {
                    Ok(answer) if !answer.is_empty() => break answer,
                    _ if resends < 3 => resends += 1,
                    Ok(_) => return Err(format!("GET {path}: closed without an answer")),
                    Err(err) => return Err(format!("GET {path}: {err}")),
                }
            };
            into.latencies.push(started.elapsed());
            into.resent += usize::from(resends > 0);
            if !answer.starts_with("HTTP/1.0 200") {
                return Err(format!("GET {path}: {answer}"));
            }
        }
    }
    Ok((health, runs))
}

fn print_owner(label: &str, requests: &OwnerRequests) {
    print(label, &requests.latencies);
    if requests.resent > 0 {
        println!(
            "  {} of {} sent again after their connection closed before an answer",
            requests.resent,
            requests.latencies.len()
        );
    }
}

async fn flood(bin: &Path, connections: usize, samples: usize) -> Result<(), String> {
    let open_files = raise_open_files()?;
    if open_files < connections as u64 + 256 {
        return Err(format!(
            "the open-files limit {open_files} is too low for {connections} connections"
        ));
    }
    let stamps = ArrivalStamps::new();
    let server = server(&stamps, 1, "ok").await?;
    let home = Home::new()?;
    let daemon = home.serve(bin, &server)?;
    // The daemon is stopped whatever the measurement comes to.
    let measured = flood_against(&daemon, connections, samples).await;
    daemon.stop();
    measured
}

/// [`flood`] against a daemon already up.
async fn flood_against(daemon: &Daemon, connections: usize, samples: usize) -> Result<(), String> {
    // Warm: the first requests pay for the store's first reads.
    owner_requests(daemon, 10).await?;
    let pid = daemon.pid;
    let fds = move || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count());
    let quiet_fds = fds();
    let (health, runs) = owner_requests(daemon, samples).await?;
    print_owner("GET /healthz, no flood", &health);
    print_owner("authenticated GET /v1/runs, no flood", &runs);
    let flood = Flood::start(&daemon.addr, connections)?;
    let deadline = Instant::now() + WAIT;
    while flood.opened() < connections {
        if Instant::now() > deadline {
            return Err(format!("only {} connections opened", flood.opened()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The daemon's descriptors, every 10 ms while the requests are made.
    let sampling = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn({
        let sampling = sampling.clone();
        async move {
            let mut most = 0;
            while !sampling.is_cancelled() {
                most = most.max(fds());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            most
        }
    });
    let opened_before = flood.opened();
    let started = Instant::now();
    let measured = owner_requests(daemon, samples).await;
    let elapsed = started.elapsed();
    let reopened = flood.opened() - opened_before;
    sampling.cancel();
    let most_fds = sampler.await.map_err(|e| e.to_string())?;
    flood.stop();
    let (health, runs) = measured?;
    print_owner(
        &format!("GET /healthz, {connections} connections held half-sent"),
        &health,
    );
    print_owner(
        &format!("authenticated GET /v1/runs, {connections} connections held half-sent"),
        &runs,
    );
    println!(
        "  meanwhile the daemon closed and the flood reopened {reopened} connections ({:.0}/s); \
         the daemon held at most {most_fds} descriptors ({quiet_fds} without the flood)",
        reopened as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// `TROUPE_BIN`, or `troupe` in the profile directory this bench runs from.
fn binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("TROUPE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?
        .join("troupe");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: build it first with `cargo build --release -p troupe-cli`",
            bin.display()
        ))
    }
}
