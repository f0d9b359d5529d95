//! `troupe daemon status` and `troupe daemon stop`: what the daemon of the
//! data directory is doing and with which settings, and stopping it the way
//! SIGTERM does (runs in progress cancelled cleanly, the store flushed),
//! waiting until it is gone.
//!
//! `status` exits 0 when a daemon runs, [`EXIT_NO_DAEMON`] when none does
//! (so scripts can tell), 1 when one is named but does not answer.

use std::time::{Duration, Instant};

use clap::Subcommand;
use troupe_protocol::api::DaemonStatus;

use super::home;
use crate::client::DaemonClient;
use crate::project::Locations;
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// Exit code of `troupe daemon status` when no daemon runs.
pub(crate) const EXIT_NO_DAEMON: u8 = 3;

/// How long `troupe daemon stop` waits for the daemon to be gone: its
/// runs' grace period and its connections' with a margin.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// `troupe daemon` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DaemonCommand {
    /// Show the daemon of this data directory: pid, address, uptime, runs in
    /// progress, open clients and the settings it runs with. Exits 3 when no
    /// daemon runs.
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Stop the daemon of this data directory as SIGTERM does (runs in
    /// progress are cancelled cleanly) and wait until it is gone.
    Stop,
}

/// Runs a `troupe daemon` subcommand; returns the exit code.
pub(crate) async fn daemon(command: DaemonCommand) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {}", err.message);
            return err.code;
        }
    };
    match command {
        DaemonCommand::Status { json } => status(&locations, json).await,
        DaemonCommand::Stop => stop(&locations).await,
    }
}

async fn status(locations: &Locations, json: bool) -> u8 {
    let client = match DaemonClient::locate(locations) {
        Ok(Some(client)) => client,
        Ok(None) => {
            if json {
                println!("{}", serde_json::json!({ "running": false }));
            } else {
                println!(
                    "no daemon runs for {} (one starts with the next run)",
                    locations.data_dir.display()
                );
            }
            return EXIT_NO_DAEMON;
        }
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let status = match client.status().await {
        Ok(status) => status,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    if json {
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("running".into(), true.into());
        }
        println!("{value}");
    } else {
        print!("{}", describe(&status));
    }
    0
}

/// `troupe daemon status` as text.
fn describe(status: &DaemonStatus) -> String {
    let or = |value: Option<String>, none: &str| value.unwrap_or_else(|| none.to_string());
    let mut text = format!("daemon {} running (pid {})\n", status.version, status.pid);
    let mut line = |name: &str, value: String| text.push_str(&format!("  {name:<18}{value}\n"));
    line("address", format!("http://{}", status.addr));
    line("socket", or(status.socket.clone(), "none"));
    line("data directory", status.data_dir.clone());
    line(
        "up",
        format!("{} (since {})", uptime(status.uptime_secs), status.started),
    );
    line(
        "runs in progress",
        or(status.runs_in_progress.map(|n| n.to_string()), "unknown"),
    );
    line("open clients", status.open_clients.to_string());
    line(
        "idle exit",
        or(
            status
                .idle_exit_secs
                .map(|secs| format!("after {secs} s with nothing to do")),
            "never",
        ),
    );
    line(
        "OTLP export",
        or(status.otlp_endpoint.clone(), "off (local span store only)"),
    );
    line("log filter", status.log_filter.clone());
    if !status.allowed_hosts.is_empty() {
        line("allowed hosts", status.allowed_hosts.join(", "));
    }
    if let Some(stall) = &status.previous_stall {
        line("previous daemon", stall.clone());
    }
    text
}

/// `secs` as `1h 2m 3s`.
fn uptime(secs: u64) -> String {
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m {seconds}s"),
        _ => format!("{hours}h {minutes}m {seconds}s"),
    }
}

async fn stop(locations: &Locations) -> u8 {
    let Some(state) = home::read_state(&locations.data_dir).filter(home::daemon_alive) else {
        println!(
            "no daemon runs for {}; nothing to stop",
            locations.data_dir.display()
        );
        return 0;
    };
    let Ok(pid) = libc::pid_t::try_from(state.pid) else {
        eprintln!(
            "troupe: daemon.json names pid {}, which is not a process id",
            state.pid
        );
        return EXIT_USAGE;
    };
    // SAFETY: plain signal delivery to the process daemon.json names, which
    // was just checked to be a live daemon.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        eprintln!(
            "troupe: cannot stop the daemon (pid {}): {}",
            state.pid,
            std::io::Error::last_os_error()
        );
        return EXIT_RUNTIME;
    }
    eprintln!("troupe: stopping the daemon (pid {}) …", state.pid);
    let gone = tokio::task::spawn_blocking(move || wait_gone(state.pid, STOP_LIMIT))
        .await
        .unwrap_or(false);
    if gone {
        println!("stopped the daemon (pid {})", state.pid);
        0
    } else {
        eprintln!(
            "troupe: the daemon (pid {}) is still stopping after {} s",
            state.pid,
            STOP_LIMIT.as_secs()
        );
        EXIT_RUNTIME
    }
}

/// Waits (bounded) until process `pid` has exited.
fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(5);
    while troupe_process::process_is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_in_hours_minutes_and_seconds() {
        assert_eq!(uptime(5), "5s");
        assert_eq!(uptime(65), "1m 5s");
        assert_eq!(uptime(3725), "1h 2m 5s");
    }
}
