//! The daemon started on demand: `troupe run` with no daemon for its data
//! directory starts one (detached) and runs through it; later runs find it
//! warm; two clients racing start one daemon, not two; a `daemon.json` left by
//! a killed daemon is replaced; the daemon exits by itself after its idle
//! period. Every test ends with no daemon left behind.

use std::path::Path;
use std::time::{Duration, Instant};
use troupe_process::process_is_alive;

use crate::support::{COMMAND_LIMIT, Env};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

/// `troupe` as a client that may start a daemon, whose idle limit is `idle`.
fn client(env: &Env, server: &ScriptedServer, idle_secs: u64) -> tokio::process::Command {
    let mut command = env.command(Some(server));
    command
        .env_remove("TROUPE_NO_DAEMON")
        .env("TROUPE_DAEMON_IDLE_SECS", idle_secs.to_string());
    tokio::process::Command::from(command)
}

/// The daemon `daemon.json` names: `(pid, addr)`.
fn daemon_state(data_dir: &Path) -> Option<(u32, String)> {
    let text = std::fs::read_to_string(data_dir.join("daemon.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    Some((
        value["pid"].as_u64()? as u32,
        value["addr"].as_str()?.to_string(),
    ))
}

/// Waits (bounded) until process `pid` has exited.
fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while process_is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Stops the daemon of `data_dir` (if any) and waits until it is gone.
fn stop_daemon(data_dir: &Path) {
    if let Some((pid, _)) = daemon_state(data_dir) {
        // SAFETY: plain signal delivery; a stale pid at worst gets a signal
        // it ignores for a moment (the test's own temporary home).
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        assert!(wait_gone(pid, COMMAND_LIMIT), "daemon {pid} stops");
    }
}

fn finished(output: &std::process::Output) -> Value {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_starts_a_daemon_later_runs_find_it_and_it_exits_when_idle() {
    let server = ScriptedServer::start(Script::new().then(text("first")).then(text("second")))
        .await
        .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    assert!(daemon_state(&data).is_none());
    let first = client(&env, &server, 3)
        .args(["run", "--json", "one"])
        .output()
        .await
        .unwrap();
    assert_eq!(finished(&first)["final_text"], "first");
    let (pid, _) = daemon_state(&data).expect("a daemon was started");
    assert!(process_is_alive(pid));
    let second = client(&env, &server, 3)
        .args(["run", "--json", "two"])
        .output()
        .await
        .unwrap();
    assert_eq!(finished(&second)["final_text"], "second");
    assert_eq!(
        daemon_state(&data).unwrap().0,
        pid,
        "the same daemon served both"
    );
    // With nothing more to do it exits by itself, cleanly.
    assert!(wait_gone(pid, COMMAND_LIMIT), "the idle daemon exits");
    assert!(daemon_state(&data).is_none(), "daemon.json is removed");
    let log = std::fs::read_to_string(data.join("daemon.log")).unwrap();
    assert!(log.contains("nothing to do for 3 s"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_clients_start_one_daemon() {
    let server = ScriptedServer::start(Script::new().then(text("done")).then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    let mut first = client(&env, &server, 30);
    first.args(["run", "--json", "a"]);
    let mut second = client(&env, &server, 30);
    second.args(["run", "--json", "b"]);
    let (first, second) = tokio::join!(first.output(), second.output());
    let (first, second) = (first.unwrap(), second.unwrap());
    let _ = (finished(&first), finished(&second));
    let log = std::fs::read_to_string(data.join("daemon.log")).unwrap_or_default();
    assert_eq!(log.matches("listening on").count(), 1, "{log}");
    stop_daemon(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_state_file_of_a_killed_daemon_is_replaced() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text("done")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    std::fs::create_dir_all(&data).unwrap();
    // A daemon that was SIGKILLed left this behind (a pid that is not a
    // daemon: this test's own process is alive but is no `troupe serve`).
    let stale = json!({"addr": "127.0.0.1:9", "pid": std::process::id()});
    std::fs::write(data.join("daemon.json"), stale.to_string()).unwrap();
    let output = client(&env, &server, 30)
        .args(["run", "--json", "go"])
        .output()
        .await
        .unwrap();
    assert_eq!(finished(&output)["status"], "finished");
    let (pid, addr) = daemon_state(&data).unwrap();
    assert_ne!(pid, std::process::id());
    assert_ne!(addr, "127.0.0.1:9");
    stop_daemon(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_prints_its_id_and_is_followed_later() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("glob", json!({"pattern": "*"})))
            .then(text("done in the background")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    let detached = client(&env, &server, 30)
        .args(["run", "--detach", "work"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        detached.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&detached.stderr)
    );
    let run_id = String::from_utf8_lossy(&detached.stdout).trim().to_string();
    assert_eq!(run_id.len(), 36, "{run_id}");
    let attached = client(&env, &server, 30)
        .args(["runs", "attach", &run_id, "--json"])
        .output()
        .await
        .unwrap();
    let last = finished(&attached);
    assert_eq!(last["final_text"], "done in the background");
    assert_eq!(last["run_id"], run_id.as_str());
    // --detach needs the daemon.
    let refused = client(&env, &server, 30)
        .args(["run", "--detach", "--no-daemon", "x"])
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    stop_daemon(&data);
}

/// Runs `troupe daemon ARGS` as a client of `env`'s data directory.
async fn daemon_command(
    env: &Env,
    server: &ScriptedServer,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let output = client(env, server, 60)
        .arg("daemon")
        .args(args)
        .output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_status_shows_the_daemon_and_daemon_stop_cancels_its_runs_and_waits() {
    let gate = "while [ ! -e go ]; do sleep 0.02; done";
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": gate})))
            .then(text("never reached")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let data = env.data_dir();

    // No daemon: said plainly, with its own exit code.
    let (code, stdout, _) = daemon_command(&env, &server, &["status"]).await;
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("no daemon runs for"), "{stdout}");
    let (code, stdout, _) = daemon_command(&env, &server, &["status", "--json"]).await;
    assert_eq!(code, Some(3));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap(),
        json!({"running": false})
    );

    // A run in progress in a daemon started on demand.
    let detached = client(&env, &server, 60)
        .args(["run", "--detach", "--mode", "bypass", "wait for it"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        detached.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&detached.stderr)
    );
    let run_id = String::from_utf8_lossy(&detached.stdout).trim().to_string();
    let (pid, addr) = daemon_state(&data).expect("a daemon");
    let deadline = Instant::now() + COMMAND_LIMIT;
    let status = loop {
        let (code, stdout, stderr) = daemon_command(&env, &server, &["status", "--json"]).await;
        assert_eq!(code, Some(0), "{stderr}");
        let status: Value = serde_json::from_str(&stdout).unwrap();
        if status["runs_in_progress"] == 1 && !server.requests().is_empty() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the run shows as in progress: {status}"
        );
    };
    assert_eq!(status["running"], true);
    assert_eq!(status["pid"], pid);
    assert_eq!(status["addr"], addr.as_str());
    assert_eq!(status["idle_exit_secs"], 60);
    assert_eq!(status["otlp_endpoint"], Value::Null);
    assert!(status["uptime_secs"].is_u64(), "{status}");
    assert_eq!(status["data_dir"], data.display().to_string().as_str());
    let (code, text, _) = daemon_command(&env, &server, &["status"]).await;
    assert_eq!(code, Some(0));
    assert!(text.contains(&format!("(pid {pid})")), "{text}");
    assert!(text.contains(&format!("http://{addr}")), "{text}");
    assert!(text.contains("runs in progress  1"), "{text}");
    assert!(text.contains("after 60 s with nothing to do"), "{text}");

    // Stop: the run is cancelled cleanly and the command returns once the
    // daemon is gone.
    let (code, stdout, stderr) = daemon_command(&env, &server, &["stop"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(&format!("stopped the daemon (pid {pid})")),
        "{stdout}"
    );
    assert!(!process_is_alive(pid));
    assert!(daemon_state(&data).is_none(), "daemon.json is removed");
    let shown = env
        .command(Some(&server))
        .args(["runs", "show", &run_id])
        .output()
        .unwrap();
    let shown_err = String::from_utf8_lossy(&shown.stderr).into_owned();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("cancelled"), "{shown}{shown_err}");
    let (code, _, _) = daemon_command(&env, &server, &["status"]).await;
    assert_eq!(code, Some(3));
    let (code, stdout, _) = daemon_command(&env, &server, &["stop"]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to stop"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_data_directory_is_named_in_the_first_message() {
    let server = ScriptedServer::start(Script::new().then(text("never")))
        .await
        .unwrap();
    let env = Env::new();
    // A file in the way: no write gets through, not even as root.
    let blocker = env.home.path().join("not-a-directory");
    std::fs::write(&blocker, "a regular file").unwrap();
    let data_dir = blocker.join("data");
    let output = client(&env, &server, 60)
        .env("TROUPE_HOME", &data_dir)
        .args(["run", "hello"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("cannot write the troupe data directory"),
        "{stderr}"
    );
    assert!(first.contains(&data_dir.display().to_string()), "{stderr}");
    assert!(first.contains("TROUPE_HOME"), "{stderr}");
    assert!(!stderr.contains("--no-daemon"), "{stderr}");
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_daemon_on_a_store_the_daemon_holds_advises_what_works() {
    let server = ScriptedServer::start(Script::new().then(text("warm")).then(text("embedded")))
        .await
        .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    let warm = client(&env, &server, 60)
        .args(["run", "--json", "warm up"])
        .output()
        .await
        .unwrap();
    assert_eq!(finished(&warm)["final_text"], "warm");
    let (pid, _) = daemon_state(&data).expect("a daemon");

    let refused = client(&env, &server, 60)
        .args(["run", "--no-daemon", "--json", "here"])
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    assert!(stderr.contains("troupe daemon stop"), "{stderr}");

    // The advice works.
    let stopped = client(&env, &server, 60)
        .args(["daemon", "stop"])
        .output()
        .await
        .unwrap();
    assert_eq!(stopped.status.code(), Some(0));
    let embedded = client(&env, &server, 60)
        .args(["run", "--no-daemon", "--json", "here"])
        .output()
        .await
        .unwrap();
    assert_eq!(finished(&embedded)["final_text"], "embedded");
    assert!(daemon_state(&data).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_attach_follows_its_run_onto_a_new_daemon_when_its_daemon_is_killed() {
    let gate = "while [ ! -e go ]; do sleep 0.02; done";
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": gate})))
            .then(text("never reached")),
    )
    .await
    .unwrap();
    let env = Env::new();
    let data = env.data_dir();
    let detached = client(&env, &server, 60)
        .args(["run", "--detach", "--mode", "bypass", "wait for it"])
        .output()
        .await
        .unwrap();
    assert_eq!(detached.status.code(), Some(0));
    let run_id = String::from_utf8_lossy(&detached.stdout).trim().to_string();
    let (first, _) = daemon_state(&data).expect("a daemon");
    let attach = client(&env, &server, 60)
        .args(["runs", "attach", &run_id, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the attach follows the run (an open client of the daemon) and the
    // run waits in its command, the daemon is killed outright.
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        let status = client(&env, &server, 60)
            .args(["daemon", "status", "--json"])
            .output()
            .await
            .unwrap();
        let status: Value = serde_json::from_slice(&status.stdout).unwrap();
        if status["open_clients"].as_u64() >= Some(1) && !server.requests().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the attach follows: {status}");
    }
    // SAFETY: plain signal delivery to the test's own daemon.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    assert!(wait_gone(first, COMMAND_LIMIT));

    let output = tokio::time::timeout(COMMAND_LIMIT, attach.wait_with_output())
        .await
        .expect("the attach ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(
        last["status"],
        "interrupted",
        "{last}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(last["run_id"], run_id.as_str());
    let (second, _) = daemon_state(&data).expect("a daemon again");
    assert_ne!(second, first);
    stop_daemon(&data);
}
