//! A run's log filter with a warm daemon, through the real `troupe` binary:
//! the daemon writes one log for every run at its own filter, so a client
//! whose `TROUPE_LOG` (or `RUST_LOG`) differs is told, in one line, that it
//! does not apply to its run and what to do; a client that sets the daemon's
//! filter, or none, is told nothing.

use crate::support::{Env, describe, run, stop_daemon, text};
use troupe_scripted::{Script, ScriptedServer, text as say};

/// `troupe run hello` through the data directory's daemon (started on
/// demand by the first), with `vars` set.
async fn daemon_run(env: &Env, server: &ScriptedServer, vars: &[(&str, &str)]) -> String {
    let mut command = env.command(Some(server));
    command
        .env_remove("TROUPE_NO_DAEMON")
        .env("TROUPE_DAEMON_IDLE_SECS", "60")
        .args(["run", "hello"]);
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    text(&output.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_log_filter_the_daemon_does_not_follow_is_one_warning() {
    let server = ScriptedServer::start(
        Script::new()
            .then(say("one"))
            .then(say("two"))
            .then(say("three"))
            .then(say("four")),
    )
    .await
    .unwrap();
    let env = Env::new();
    // The daemon this run starts keeps the default filter, warn.
    let stderr = daemon_run(&env, &server, &[]).await;
    assert!(!stderr.contains("does not apply to this run"), "{stderr}");

    let stderr = daemon_run(&env, &server, &[("TROUPE_LOG", "debug")]).await;
    let notices: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("does not apply to this run"))
        .collect();
    assert_eq!(notices.len(), 1, "{stderr}");
    assert!(
        notices[0].starts_with(
            "troupe: TROUPE_LOG=debug does not apply to this run: it runs in the daemon, whose \
             log (filter \"warn\")"
        ),
        "{stderr}"
    );
    assert!(notices[0].contains("--no-daemon"), "{stderr}");

    let stderr = daemon_run(&env, &server, &[("RUST_LOG", "info")]).await;
    assert!(
        stderr.contains("troupe: RUST_LOG=info does not apply to this run"),
        "{stderr}"
    );
    // The daemon's own filter is no news.
    let stderr = daemon_run(&env, &server, &[("TROUPE_LOG", "warn")]).await;
    assert!(!stderr.contains("does not apply to this run"), "{stderr}");
    stop_daemon(&env.data_dir());
}
