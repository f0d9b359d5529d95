//! Normal behaviour of bash and the background-task tools through the registry.

use crate::tools_support;

use std::time::{Duration, Instant};

use serde_json::json;
use tools_support::{Harness, err_text, mkfifo, ok_text, read_fifo, text};
use troupe_process::process_is_alive;
use troupe_tools::background::TaskStatus;

const EVENT_LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn runs_in_project_root_with_combined_output() {
    let h = Harness::new();
    h.write("marker.txt", "m");
    let out = ok_text(
        &h.call(
            "bash",
            json!({"command": "pwd; ls; echo to-stderr >&2; echo after"}),
        )
        .await,
    );
    assert_eq!(
        out,
        format!(
            "{}\nmarker.txt\nto-stderr\nafter\n[exit code 0]",
            h.project.display()
        )
    );
}

#[tokio::test]
async fn non_zero_exit_is_an_error_and_empty_output_says_so() {
    let h = Harness::new();
    let out = err_text(&h.call("bash", json!({"command": "exit 7"})).await);
    assert_eq!(out, "(no output)\n[exit code 7]");
}

#[tokio::test]
async fn stdin_is_empty() {
    let h = Harness::new();
    let out = ok_text(&h.call("bash", json!({"command": "cat; echo done"})).await);
    assert_eq!(out, "done\n[exit code 0]");
}

#[tokio::test]
async fn environment_is_reduced_to_base_and_allowlist() {
    let allow = vec!["TROUPE_TEST_ALLOWED_NAME".to_string()];
    let mut h = Harness::with_env_allowlist(&allow);
    // The fixture reads the real environment; add an allowlisted value as the
    // session would have found it.
    let mut env = (*h.child_env).clone();
    env.push(("TROUPE_TEST_ALLOWED_NAME".into(), "visible".into()));
    h.child_env = std::sync::Arc::new(env);
    let out = ok_text(
        &h.call("bash", json!({"command": "env | cut -d= -f1 | sort"}))
            .await,
    );
    let names: Vec<&str> = out.lines().filter(|l| !l.starts_with('[')).collect();
    for name in &names {
        assert!(
            [
                "HOME",
                "PATH",
                "USER",
                "TERM",
                "LANG",
                "TROUPE_TEST_ALLOWED_NAME",
                "TROUPE_COMMAND",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "unexpected variable {name} in {out}"
        );
    }
    assert!(names.contains(&"TROUPE_TEST_ALLOWED_NAME"));
    // Every command carries the mark that tells the daemon it is one.
    assert!(names.contains(&"TROUPE_COMMAND"));
}

#[tokio::test]
async fn timeout_is_reported_and_clamped() {
    let h = Harness::new();
    let start = Instant::now();
    let out = err_text(
        &h.call(
            "bash",
            json!({"command": "echo begun; sleep 30", "timeout_secs": 1}),
        )
        .await,
    );
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert!(out.starts_with("begun\n"), "{out}");
    assert!(
        out.contains("[timed out after 1 s; the command and its child processes were stopped]"),
        "{out}"
    );
    let out = ok_text(
        &h.call("bash", json!({"command": "true", "timeout_secs": 5000}))
            .await,
    );
    assert!(
        out.contains("[timeout_secs 5000 is over the maximum; 600 s was used]"),
        "{out}"
    );
}

#[tokio::test]
async fn leftover_processes_are_stopped_after_exit() {
    let h = Harness::new();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    let call = h.call(
        "bash",
        json!({"command": "sleep 300 & echo $! > pid.fifo; echo main done"}),
    );
    let (out, pid) = tokio::join!(call, read_fifo(&fifo, EVENT_LIMIT));
    let out = ok_text(&out);
    assert!(out.contains("main done"), "{out}");
    assert!(
        out.contains("processes it left running were stopped"),
        "{out}"
    );
    assert!(
        !process_is_alive(pid.parse().unwrap()),
        "leftover {pid} survived"
    );
}

#[tokio::test]
async fn large_output_keeps_the_tail_and_spills() {
    let h = Harness::new();
    let out = ok_text(&h.call("bash", json!({"command": "seq 1 5000"})).await);
    let spill = h.spill.join("bash-call_1.log");
    assert!(
        out.starts_with(&format!(
            "[kept lines 3001-5000 of 5000; full output: {}]\n3001\n",
            spill.display()
        )),
        "{}",
        &out[..200]
    );
    assert!(out.ends_with("4999\n5000\n[exit code 0]"));
    let expected: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&spill).unwrap(), expected);
    // read_file can page through the spill file.
    let page = ok_text(
        &h.call(
            "read_file",
            json!({"path": spill.to_str().unwrap(), "offset": 1, "limit": 2}),
        )
        .await,
    );
    assert!(page.starts_with("1\t1\n2\t2\n"), "{page}");
}

#[tokio::test]
async fn background_task_lifecycle_through_the_tools() {
    let h = Harness::new();
    let fifo = h.project.join("ready.fifo");
    mkfifo(&fifo);
    let out = ok_text(
        &h.call(
            "bash",
            json!({"command": "echo first line; echo ready > ready.fifo; sleep 300", "run_in_background": true}),
        )
        .await,
    );
    assert!(out.starts_with("Started background task task_1."), "{out}");
    assert_eq!(read_fifo(&fifo, EVENT_LIMIT).await, "ready");

    // The task's output is read from its pipe concurrently: wait (bounded)
    // until the reader has caught up with what the command wrote first.
    let deadline = std::time::Instant::now() + EVENT_LIMIT;
    let out = loop {
        let out = ok_text(&h.call("task_output", json!({"id": "task_1"})).await);
        if out.ends_with("first line") || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert!(out.starts_with("task_1: running after "), "{out}");
    assert!(out.ends_with("first line"), "{out}");

    let out = ok_text(&h.call("task_list", json!({})).await);
    assert!(
        out.starts_with("1 task (1 running):\ntask_1: running"),
        "{out}"
    );

    let out = ok_text(&h.call("task_kill", json!({"id": "task_1"})).await);
    assert_eq!(out, "task_1: killed.");
    let out = ok_text(&h.call("task_output", json!({"id": "task_1"})).await);
    assert!(out.starts_with("task_1: killed after "), "{out}");
    let out = ok_text(&h.call("task_kill", json!({"id": "task_1"})).await);
    assert_eq!(out, "task_1 had already ended: killed.");

    let err = err_text(&h.call("task_output", json!({"id": "task_7"})).await);
    assert_eq!(err, "No background task `task_7`. Known tasks: task_1.");
}

#[tokio::test]
async fn background_task_exit_and_output_limits() {
    let h = Harness::new();
    let out = ok_text(
        &h.call(
            "bash",
            json!({"command": "seq 1 3000; exit 3", "run_in_background": true}),
        )
        .await,
    );
    assert!(out.contains("task_1"), "{out}");
    assert_eq!(
        h.background.wait("task_1").await,
        Some(TaskStatus::Exited(3))
    );
    let out = ok_text(&h.call("task_output", json!({"id": "task_1"})).await);
    assert!(out.starts_with("task_1: exited 3 after "), "{out}");
    assert!(
        out.contains("\n[kept lines 1001-3000 of 3000; full output: "),
        "{out}"
    );
    assert!(
        out.ends_with("\n3000"),
        "{}",
        text(&h.call("task_list", json!({})).await)
    );
    let empty = ok_text(&h.call("task_list", json!({})).await);
    assert!(empty.contains("task_1: exited 3"), "{empty}");
}

#[tokio::test]
async fn shutdown_stops_every_running_task() {
    let h = Harness::new();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    ok_text(
        &h.call(
            "bash",
            json!({"command": "sleep 300 & echo $! > pid.fifo; sleep 300", "run_in_background": true}),
        )
        .await,
    );
    let pid: u32 = read_fifo(&fifo, EVENT_LIMIT).await.parse().unwrap();
    assert!(process_is_alive(pid));
    h.background.shutdown().await;
    assert!(!process_is_alive(pid));
    assert_eq!(
        h.background.wait("task_1").await,
        Some(TaskStatus::Killed { forced: false })
    );
}

#[tokio::test]
async fn dropping_the_task_table_kills_running_groups() {
    let h = Harness::new();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    ok_text(
        &h.call(
            "bash",
            json!({"command": "echo $$ > pid.fifo; exec sleep 300", "run_in_background": true}),
        )
        .await,
    );
    let pid: u32 = read_fifo(&fifo, EVENT_LIMIT).await.parse().unwrap();
    let Harness { background, .. } = h;
    let weak = std::sync::Arc::downgrade(&background);
    drop(background);
    assert!(weak.upgrade().is_none());
    // SIGKILL is delivered synchronously on drop; the kernel reaps at once,
    // but the zombie state shows only after the signal is processed: wait for
    // that event through /proc with a bound.
    let deadline = Instant::now() + EVENT_LIMIT;
    while process_is_alive(pid) {
        assert!(Instant::now() < deadline, "task {pid} survived the drop");
        tokio::task::yield_now().await;
    }
}
