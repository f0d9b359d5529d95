//! Starting a daemon on demand: when a client command finds none for its data
//! directory, it starts `troupe serve --idle-exit SECS` detached (its own
//! session, no terminal, stderr to `daemon.log`) and waits until a daemon
//! answers — its own or, when several clients raced, the one that won (one
//! process can own a data directory; the others exit at once).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::home;

/// Whether `TROUPE_NO_DAEMON` turns daemons off for this process (read as
/// `--no-daemon` reads it: `1`, `true`, `yes`, `on`, any case).
pub(crate) fn daemons_off_by_env() -> bool {
    std::env::var("TROUPE_NO_DAEMON").is_ok_and(|value| {
        matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "t" | "yes" | "y" | "on"
        )
    })
}

/// File the detached daemon's stderr goes to, in the data directory.
pub(crate) const LOG_FILE: &str = "daemon.log";
/// Environment variable with the idle limit of daemons started on demand.
pub(crate) const IDLE_VAR: &str = "TROUPE_DAEMON_IDLE_SECS";
/// The idle limit of daemons started on demand (10 minutes).
pub(crate) const DEFAULT_IDLE_SECS: u64 = 600;
/// How long a client waits for a daemon it started to answer.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(10);

/// The idle limit for a daemon started on demand, from `IDLE_VAR`'s value.
pub(crate) fn idle_secs(value: Option<&str>) -> Result<u64, String> {
    match value.map(str::trim).filter(|value| !value.is_empty()) {
        None => Ok(DEFAULT_IDLE_SECS),
        Some(text) => match text.parse::<u64>() {
            Ok(secs) if secs > 0 => Ok(secs),
            _ => Err(format!(
                "{IDLE_VAR}={text:?}: expected a number of seconds above 0"
            )),
        },
    }
}

/// Checks that this user can write in `data_dir` (creating it): the daemon
/// log is opened for appending, as a daemon start opens it.
pub(crate) fn check_writable(data_dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data_dir.join(LOG_FILE))
        .map(drop)
}

/// Starts a detached daemon for `data_dir` that exits after `idle_secs`
/// with nothing to do. Returns its process id.
pub(crate) fn start_detached(data_dir: &Path, idle_secs: u64) -> std::io::Result<u32> {
    std::fs::create_dir_all(data_dir)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data_dir.join(LOG_FILE))?;
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .args(["serve", "--idle-exit", &idle_secs.to_string()])
        // Not the client's directory: the daemon must not keep a project
        // (or a mount) busy, and every run names its own directory.
        .current_dir(data_dir)
        // The data directory as this client resolved it (a relative
        // TROUPE_HOME would name another directory from there).
        .env("TROUPE_HOME", data_dir)
        // The provider keys this process read at start-up (no longer in its
        // environment), named so the daemon withholds them in turn.
        .envs(troupe_process::secrets::withhold_request(
            &troupe_process::secrets::withheld_names(),
            troupe_process::secrets::withheld,
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // Its own process group, away from the terminal's signals (Ctrl-C
        // in the shell that started it must not stop it).
        .process_group(0)
        .spawn()?;
    // Not waited for: it outlives this command; init reaps it.
    Ok(child.id())
}

/// Waits until the data directory's `daemon.json` names a live daemon, for at
/// most `limit`; `None` when none appeared.
pub(crate) fn wait_for_state(data_dir: &Path, limit: Duration) -> Option<home::DaemonState> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(state) = home::read_state(data_dir)
            && home::daemon_alive(&state)
        {
            return Some(state);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The last lines of the daemon log, for an error message.
pub(crate) fn log_tail(data_dir: &Path) -> String {
    let text = std::fs::read_to_string(data_dir.join(LOG_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_limit_defaults_to_ten_minutes_and_rejects_nonsense() {
        assert_eq!(idle_secs(None), Ok(600));
        assert_eq!(idle_secs(Some("")), Ok(600));
        assert_eq!(idle_secs(Some(" 30 ")), Ok(30));
        assert!(idle_secs(Some("0")).is_err());
        assert!(idle_secs(Some("ten")).unwrap_err().contains(IDLE_VAR));
    }
}
