//! MCP servers on the daemon, through the real `troupe` binary and the real
//! FastMCP fixture server (`tests/mcp/fixture_server.py`, installed by
//! `tests/mcp/install.sh`): runs of one project share one server process; a
//! changed configuration, or trusting the project, starts new servers and
//! ends the old ones' process groups; `troupe mcp list` works beside the
//! daemon; stopping the daemon leaves no server process alive.
//!
//! The fixture appends `PID GRANDCHILD_PID` to `FIXTURE_STARTS_FILE` each
//! time it starts, which is how these tests count server starts.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{COMMAND_LIMIT, Env, describe, json_lines, run};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text as say, tool_call};

/// A TOML string literal.
fn lit(value: &str) -> String {
    Value::String(value.to_string()).to_string()
}

/// A stdio entry running the fixture, recording its starts in `starts` and
/// carrying `FIXTURE_GENERATION = generation` (changing it changes the
/// configuration, nothing else).
fn entry(name: &str, python: &Path, starts: &Path, generation: u32) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/fixture_server.py");
    format!(
        "[mcp_servers.{name}]\ncommand = {}\nargs = [{}]\nstartup_grace_secs = 60\n\
         env = {{ FIXTURE_STARTS_FILE = {}, FIXTURE_GENERATION = \"{generation}\" }}\n",
        lit(&python.display().to_string()),
        lit(&script.display().to_string()),
        lit(&starts.display().to_string()),
    )
}

/// Each start recorded in `file`: `(server pid, grandchild pid)`.
fn starts(file: &Path) -> Vec<(i32, i32)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (a, b) = line.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits (bounded) until none of `pids` is alive; the ones still alive.
async fn wait_gone(pids: &[i32]) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `troupe serve` for the environment, stopped (and waited for) on drop.
struct Daemon {
    child: Child,
}

impl Daemon {
    /// Starts the daemon and waits until it has written `daemon.json`.
    async fn start(env: &Env, server: &ScriptedServer) -> Daemon {
        let log = std::fs::File::create(env.home.path().join("serve.log")).unwrap();
        let child = env
            .command(Some(server))
            .arg("serve")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("troupe serve starts");
        let state = env.data_dir().join("daemon.json");
        let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
        while !state.exists() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the daemon did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Daemon { child }
    }

    /// SIGTERM, then waits for the daemon's exit (bounded).
    async fn stop(&mut self) {
        // SAFETY: plain signal delivery to the daemon this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the daemon did not stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `troupe run --json PROMPT` as a client of the environment's daemon; the
/// `run_finished` event.
async fn run_on_daemon(env: &Env, server: &ScriptedServer, prompt: &str) -> Value {
    let mut command = env.command(Some(server));
    command
        .env_remove("TROUPE_NO_DAEMON")
        .args(["run", "--json", prompt]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    let last = events.last().cloned().unwrap();
    assert_eq!(last["type"], "run_finished", "{}", describe(&output));
    last
}

/// A script of one run per tool of `calls`: the run calls it once, then answers.
fn script(calls: &[&str]) -> Script {
    let mut script = Script::new();
    for (i, tool) in calls.iter().enumerate() {
        script = script
            .then(tool_call(*tool, json!({"id": format!("c{i}")})))
            .then(say(format!("answer {i}")));
    }
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_project_share_one_server_until_its_configuration_changes() {
    let Some(python) = troupe_test_support::mcp_fixture_python() else {
        return;
    };
    let server = ScriptedServer::start(script(&[
        "mcp__fixture__record",
        "mcp__fixture__record",
        "mcp__fixture__record",
    ]))
    .await
    .unwrap();
    let env = Env::new();
    env.trust();
    let starts_file = env.home.path().join("starts");
    let config = |generation| {
        format!(
            "{}\n[permissions]\nallow = [\"mcp__fixture__*\"]\n",
            entry("fixture", &python, &starts_file, generation)
        )
    };
    std::fs::write(env.root().join(".troupe/config.toml"), config(1)).unwrap();
    let mut daemon = Daemon::start(&env, &server).await;

    // Two runs of the project: one server process, started by the first.
    run_on_daemon(&env, &server, "first").await;
    run_on_daemon(&env, &server, "second").await;
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for (i, request) in [&requests[0], &requests[2]].into_iter().enumerate() {
        assert!(
            request
                .tool_names()
                .contains(&"mcp__fixture__record".to_string()),
            "run {i}: {:?}",
            request.tool_names()
        );
    }
    for request in [&requests[1], &requests[3]] {
        let result = request.tool_results().last().cloned().unwrap();
        assert!(!result.is_error, "{result:?}");
    }
    let started = starts(&starts_file);
    assert_eq!(started.len(), 1, "one server for both runs: {started:?}");
    let (first_pid, first_grandchild) = started[0];
    assert!(alive(first_pid), "the shared server outlives the runs");

    // `troupe mcp list` starts and lists the servers on its own, beside the
    // daemon's, and leaves the daemon's alone.
    let mut command = env.command(None);
    command
        .env_remove("TROUPE_NO_DAEMON")
        .args(["mcp", "list", "--json"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let listed = json_lines(&output.stdout);
    assert_eq!(listed.len(), 1, "{}", describe(&output));
    assert_eq!(listed[0]["name"], "fixture");
    assert_eq!(listed[0]["state"], "ready");
    let started = starts(&starts_file);
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(alive(first_pid), "the daemon's server is still up");
    assert!(
        wait_gone(&[started[1].0, started[1].1]).await.is_empty(),
        "the listing's own server ended with it"
    );

    // A changed configuration: a new server, and the old one's whole process
    // group ends.
    std::fs::write(env.root().join(".troupe/config.toml"), config(2)).unwrap();
    run_on_daemon(&env, &server, "third").await;
    let requests = server.requests();
    assert!(
        requests[4]
            .tool_names()
            .contains(&"mcp__fixture__record".to_string())
    );
    assert!(!requests[5].tool_results().last().unwrap().is_error);
    let started = starts(&starts_file);
    assert_eq!(started.len(), 3, "{started:?}");
    let (new_pid, new_grandchild) = started[2];
    assert_eq!(
        wait_gone(&[first_pid, first_grandchild]).await,
        Vec::<i32>::new(),
        "the replaced server's group survived"
    );
    assert!(alive(new_pid));

    // Stopping the daemon ends every server it started, grandchildren too.
    daemon.stop().await;
    let left: Vec<i32> = [new_pid, new_grandchild]
        .into_iter()
        .filter(|pid| alive(*pid))
        .collect();
    assert!(
        left.is_empty(),
        "MCP processes survived the daemon: {left:?}"
    );
    let log = std::fs::read_to_string(env.home.path().join("serve.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_the_project_replaces_the_servers_started_before() {
    let Some(python) = troupe_test_support::mcp_fixture_python() else {
        return;
    };
    let server = ScriptedServer::start(script(&["mcp__user__record", "mcp__project__record"]))
        .await
        .unwrap();
    let env = Env::new();
    let user_starts = env.home.path().join("user-starts");
    let project_starts = env.home.path().join("project-starts");
    let user_config = env.home.path().join("config/troupe");
    std::fs::create_dir_all(&user_config).unwrap();
    std::fs::write(
        user_config.join("config.toml"),
        format!(
            "{}\n[permissions]\nallow = [\"mcp__user__*\", \"mcp__project__*\"]\n",
            entry("user", &python, &user_starts, 1)
        ),
    )
    .unwrap();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        entry("project", &python, &project_starts, 1),
    )
    .unwrap();
    let mut daemon = Daemon::start(&env, &server).await;

    // Untrusted: only the user's server runs.
    run_on_daemon(&env, &server, "before trust").await;
    let tools = server.requests()[0].tool_names();
    assert!(
        tools.contains(&"mcp__user__record".to_string()),
        "{tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t.starts_with("mcp__project")),
        "{tools:?}"
    );
    assert!(starts(&project_starts).is_empty());
    let before = starts(&user_starts);
    assert_eq!(before.len(), 1);

    // Trusted: the project's servers differ, so the hub started before trust
    // is not reused; a new one runs both servers and the old one ends.
    env.trust();
    run_on_daemon(&env, &server, "after trust").await;
    let tools = server.requests()[2].tool_names();
    for name in ["mcp__user__record", "mcp__project__record"] {
        assert!(tools.contains(&name.to_string()), "{tools:?}");
    }
    assert_eq!(starts(&project_starts).len(), 1);
    let after = starts(&user_starts);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        wait_gone(&[before[0].0, before[0].1]).await,
        Vec::<i32>::new()
    );

    daemon.stop().await;
    let mut pids = vec![after[1].0, after[1].1];
    pids.extend(starts(&project_starts).iter().flat_map(|(a, b)| [*a, *b]));
    // Killed as the daemon ends; a SIGKILLed process may take a moment to
    // be gone.
    let left = wait_gone(&pids).await;
    assert!(
        left.is_empty(),
        "MCP processes survived the daemon: {left:?}"
    );
}
