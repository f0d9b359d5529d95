//! A store write that fails in the middle of a run (here: the disk is full) is
//! reported as an `error` event and a clear message and ends the run with an
//! error; it is never swallowed (SPEC §9, §15). The data directory is a small
//! tmpfs mounted in a private mount namespace of the child (`unshare`), so the
//! test needs no cleanup and leaves the machine's mounts alone.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");

#[tokio::test]
async fn a_full_disk_mid_run_is_an_error_event_and_a_clear_message() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Fill the disk, then print a result too large to fit in what is left.
    // Commands write in the data directory only through their temporary
    // directory (`TMPDIR`, in the session's spill directory); a script the
    // analysis does not read stands for a process that fills the disk.
    std::fs::write(
        project.path().join("fill.sh"),
        "dd if=/dev/zero of=\"$TMPDIR/fill\" bs=1M count=64 2>/dev/null\n",
    )
    .unwrap();
    let fill = "bash fill.sh; head -c 40000 /dev/zero | tr '\\0' x";
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({ "command": fill })))
            .then(text("unreachable")),
    )
    .await
    .unwrap();
    let mut command = tokio::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=4m tmpfs "$1" || exit 99; shift; exec "$@""#)
        .arg("sh")
        .arg(&data)
        .args([TROUPE, "run", "--json", "--mode", "bypass", "fill the disk"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("TROUPE_HOME", &data)
        .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", "test-key")
        .current_dir(project.path())
        // Embedded runs: these tests are about the process that runs them.
        .env("TROUPE_NO_DAEMON", "1")
        .stdin(Stdio::null());
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("troupe finishes")
        .expect("unshare runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(
        output.status.code(),
        Some(99),
        "a private tmpfs could not be mounted (needs root or user namespaces): {stderr}"
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let error = events
        .iter()
        .find(|e| e["type"] == "error" && e["kind"] == "store")
        .unwrap_or_else(|| panic!("no store error event in {events:#?}"));
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("could not be saved") && message.to_lowercase().contains("space"),
        "{message}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["status"], "error");
    assert_eq!(last["stop_reason"], "store_error");
    // The model never saw the result that could not be saved.
    assert_eq!(server.request_count(), 1);
}
