//! Commands that do not outlive the process that started them, however it
//! ends (kill -9 included).
//!
//! [`start`] makes a reaper: the same executable started again with
//! [`REAPER_VAR`] naming its parent, its standard input the read end of a
//! pipe whose write end only the parent holds. The kernel closes that end
//! when the parent ends, whatever ends it; the reaper, which has waited on
//! its input, then kills every command tree the parent left: the cgroups
//! named after the parent (`troupe-PID-…`, [`crate::process_tree`]) through
//! `cgroup.kill`, and the processes tagged with such a name (subreaper
//! mode) with `SIGKILL`. An executable calls [`run_if_asked`] first thing in
//! `main`. Which names are the parent's is the pure [`owned_by`]. A reaper
//! named after a process that is not its parent exits at once (code 2) and
//! kills nothing.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::process_tree::{
    CGROUP_PREFIX, cgroup_owner, cgroup2_mount, environ_tags, own_cgroup, proc_entries,
};

/// The environment variable that makes the executable a reaper of the
/// process it names.
pub const REAPER_VAR: &str = "TROUPE_REAPER_FOR";

/// A running reaper; its pipe stays open while this value lives (keep it
/// for the life of the process).
#[derive(Debug)]
pub struct Reaper {
    _child: Child,
}

/// Starts the reaper of this process (the current executable again).
pub fn start() -> std::io::Result<Reaper> {
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .env(REAPER_VAR, std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // The write end of the pipe stays in `child.stdin` until the process
    // ends: nothing is ever written to it.
    Ok(Reaper { _child: child })
}

/// When this process was started as a reaper ([`REAPER_VAR`]): waits until
/// its parent ends, kills what the parent left, and answers the exit code
/// to end with. `None` for any other start.
pub fn run_if_asked() -> Option<u8> {
    let owner: u32 = std::env::var(REAPER_VAR).ok()?.parse().ok()?;
    // Only the process that started it: a reaper named after any other
    // process (the variable set by hand, or inherited) kills nothing.
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    if u32::try_from(parent).ok() != Some(owner) {
        return Some(2);
    }
    // Signals meant for the parent's terminal or group are not for the
    // reaper: it ends when its input does.
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: setting a signal to be ignored touches no memory.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut sink = [0u8; 64];
    let mut input = std::io::stdin();
    loop {
        match input.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kill_trees_of(owner);
    Some(0)
}

/// Whether a cgroup or tag `name` is one of process `owner`'s.
pub fn owned_by(name: &str, owner: u32) -> bool {
    name.starts_with(CGROUP_PREFIX) && cgroup_owner(name) == Some(owner)
}

/// Kills every command tree process `owner` (gone) left: its cgroups below
/// this process's own cgroup (the parent's, which the reaper shares), then
/// every process tagged with one of its names.
pub fn kill_trees_of(owner: u32) {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(parent) = cgroup2_mount(&mounts)
        .zip(own_cgroup(&own))
        .map(|(mount, own)| mount.join(own.trim_start_matches('/')))
    {
        kill_cgroups_of(&parent, owner);
    }
    kill_tagged_of(owner);
}

fn kill_cgroups_of(parent: &Path, owner: u32) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|name| owned_by(name, owner))
        {
            let _ = std::fs::write(entry.path().join("cgroup.kill"), "1");
        }
    }
}

fn kill_tagged_of(owner: u32) {
    let me = std::process::id();
    for (pid, dir) in proc_entries() {
        if pid.unsigned_abs() == me {
            continue;
        }
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        if tagged_by(&environ, owner) {
            // SAFETY: plain signal delivery.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Whether an `environ` block carries the tag of one of `owner`'s trees.
fn tagged_by(environ: &[u8], owner: u32) -> bool {
    environ_tags(environ).any(|tag| owned_by(tag, owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_of_the_owner_are_its_own() {
        assert!(owned_by("troupe-4242-1", 4242));
        assert!(owned_by("troupe-4242-probe-3", 4242));
        assert!(!owned_by("troupe-42420-1", 4242));
        assert!(!owned_by("troupe-424-1", 4242));
        assert!(!owned_by("other-4242-1", 4242));
        assert!(!owned_by("troupe-4242", 4242));
    }

    #[test]
    fn a_tagged_environment_is_the_owners_only_with_its_tag() {
        let env = b"PATH=/bin\0TROUPE_PROCESS_TAG=troupe-77-3\0HOME=/h\0";
        assert!(tagged_by(env, 77));
        assert!(!tagged_by(env, 7));
        assert!(!tagged_by(
            b"PATH=/bin\0XTROUPE_PROCESS_TAG=troupe-77-3\0",
            77
        ));
    }
}
