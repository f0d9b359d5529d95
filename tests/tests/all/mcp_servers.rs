//! MCP servers under their supervisor, against the real FastMCP fixture
//! (`tests/mcp/fixture_server.py`, installed by `tests/mcp/install.sh`): a
//! server that becomes ready late joins the agents' catalogue snapshot (the
//! same snapshot until the tools change), a server killed from outside is
//! withdrawn, restarted by its supervisor and its tools come back, and
//! shutdown leaves none of its processes; a call the agent cancels reaches
//! the server as `notifications/cancelled`.
//!
//! The server is started behind a FIFO (`sh -c 'read go < FIFO; exec python
//! …'`), so the test decides when it may start; every wait is on a status
//! change, with a time limit. When the fixture is not installed the test
//! says so loudly and passes, unless `TROUPE_REQUIRE_MCP_SERVERS=1`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use troupe_actors::McpHub;
use troupe_mcp::{McpServerSpec, McpState, McpTransportSpec, ServerPhase};
use troupe_scripted::Script;
use troupe_tests::Harness;
use troupe_tests::mcp_fixture_python as fixture_python;

/// Longest wait for one status change.
const LIMIT: Duration = Duration::from_secs(60);

/// Waits until `server` is in `phase` (with at least `restarts` restarts).
async fn wait_for(state: &McpState, server: &str, phase: ServerPhase, restarts: u32) {
    let mut changes = state.subscribe();
    tokio::time::timeout(LIMIT, async {
        loop {
            if let Some(status) = state.status(server)
                && status.phase == phase
                && status.restarts >= restarts
            {
                return;
            }
            changes.changed().await.expect("the state lives");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{server} reached {phase:?} in time: {:?}",
            state.status(server)
        )
    });
}

/// Lets the server waiting on `fifo` start.
async fn release(fifo: &Path) {
    let fifo = fifo.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
        .await
        .unwrap()
        .unwrap();
}

/// The pids the fixture wrote: its own and its grandchild's.
fn pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect()
}

/// Waits until none of `pids` is alive, for at most [`LIMIT`] (a killed
/// process takes a moment to go); returns those still alive.
async fn wait_gone(pids: &[i32]) -> Vec<i32> {
    /// How often the processes are looked at.
    const POLL: Duration = Duration::from_millis(20);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn mcp_names(env: &troupe_actors::AgentEnv) -> Vec<String> {
    env.main_catalogue()
        .unwrap()
        .names()
        .filter(|name| name.starts_with("mcp__"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_late_server_joins_the_catalogue_and_a_killed_one_comes_back_after_restart() {
    let Some(python) = fixture_python() else {
        return;
    };
    let harness = Harness::anthropic(Script::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("go");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let pids_file = dir.path().join("pids");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/fixture_server.py");
    let spec = McpServerSpec {
        name: "late".into(),
        transport: McpTransportSpec::Stdio {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "read go < \"$1\"; rm -f \"$2\"; exec \"$3\" \"$4\"".into(),
                "sh".into(),
                fifo.display().to_string(),
                pids_file.display().to_string(),
                python.display().to_string(),
                script.display().to_string(),
            ],
            env: vec![("FIXTURE_PIDS_FILE".into(), pids_file.display().to_string())],
            cwd: harness.root().to_path_buf(),
        },
        startup_grace: Duration::from_secs(1),
        project_root: Some(harness.root().to_path_buf()),
        redaction: Default::default(),
    };
    let hub = McpHub::start(vec![spec], None).await.unwrap();
    let state: Arc<McpState> = hub.state().clone();
    let env = harness.env_with_mcp(hub.clone());

    // Still starting: the catalogue has the built-in tools only.
    assert_eq!(state.status("late").unwrap().phase, ServerPhase::Starting);
    let before = env.main_catalogue().unwrap();
    assert!(mcp_names(&env).is_empty());

    // Ready: its tools join, sorted, and the snapshot is stable.
    release(&fifo).await;
    wait_for(&state, "late", ServerPhase::Ready, 0).await;
    let joined = env.main_catalogue().unwrap();
    assert!(!Arc::ptr_eq(&before, &joined));
    assert_eq!(
        mcp_names(&env),
        [
            "mcp__late__barrier_read",
            "mcp__late__die",
            "mcp__late__hold",
            "mcp__late__record"
        ]
    );
    assert!(Arc::ptr_eq(&joined, &env.main_catalogue().unwrap()));
    assert!(
        joined.names().position(|n| n == "read_file")
            < joined.names().position(|n| n.starts_with("mcp__"))
    );

    // Killed from outside: withdrawn, restarted, and back once it starts.
    let first = pids(&pids_file);
    // SAFETY: a plain signal to the fixture process this test started.
    unsafe {
        libc::kill(first[0], libc::SIGKILL);
    }
    wait_for(&state, "late", ServerPhase::Restarting, 0).await;
    assert!(mcp_names(&env).is_empty());
    release(&fifo).await;
    wait_for(&state, "late", ServerPhase::Ready, 1).await;
    assert_eq!(mcp_names(&env).len(), 4);
    assert_eq!(
        wait_gone(&first).await,
        [0; 0],
        "the killed server's group was left"
    );

    // Shutdown leaves no process of the server.
    let second = pids(&pids_file);
    hub.shutdown().await;
    assert_eq!(state.status("late").unwrap().phase, ServerPhase::Stopped);
    assert_eq!(
        wait_gone(&second).await,
        [0; 0],
        "MCP processes survived the shutdown"
    );
}

/// Waits, bounded, until `path` exists.
async fn wait_exists(path: &Path) {
    tokio::time::timeout(LIMIT, async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} never appeared", path.display()));
}

#[tokio::test]
async fn a_cancelled_call_is_cancelled_on_the_server_too() {
    let Some(python) = fixture_python() else {
        return;
    };
    let harness = Harness::anthropic(Script::new()).await;
    let marks = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/fixture_server.py");
    let spec = McpServerSpec {
        name: "fixture".into(),
        transport: McpTransportSpec::Stdio {
            command: python.display().to_string(),
            args: vec![script.display().to_string()],
            env: vec![(
                "FIXTURE_MARK_DIR".into(),
                marks.path().display().to_string(),
            )],
            cwd: harness.root().to_path_buf(),
        },
        startup_grace: Duration::from_secs(60),
        project_root: Some(harness.root().to_path_buf()),
        redaction: Default::default(),
    };
    let hub = McpHub::start(vec![spec], None).await.unwrap();
    wait_for(hub.state(), "fixture", ServerPhase::Ready, 0).await;
    let (_, tools) = hub.state().tools();
    let hold = tools
        .into_iter()
        .find(|tool| tool.name() == "mcp__fixture__hold")
        .expect("the fixture offers hold");
    let cancel = tokio_util::sync::CancellationToken::new();
    let ctx = troupe_tools::ToolContext {
        call_id: "c1".into(),
        sandbox: Arc::new(
            troupe_paths::sandbox::PathSandbox::new(harness.root(), &[], None).unwrap(),
        ),
        os_sandbox: Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
        spill_dir: harness.root().join("spill"),
        cancel: cancel.clone(),
        child_env: Arc::new(Vec::new()),
        background: Arc::new(troupe_tools::background::BackgroundTasks::new()),
        outside_read_approved: false,
        reach: None,
    };
    let call = hold.execute(serde_json::json!({"id": "h1"}), &ctx);
    let cancel_once_started = async {
        wait_exists(&marks.path().join("h1.started")).await;
        cancel.cancel();
    };
    let (output, ()) = tokio::join!(call, cancel_once_started);
    assert!(output.is_error, "{output:?}");
    // The server learns of it (its handler is cancelled), not only the client.
    wait_exists(&marks.path().join("h1.cancelled")).await;
    hub.shutdown().await;
}
