//! The daemon's files in the data directory: `daemon.token` (the bearer
//! token, created once with mode 0600), `daemon.json` (`{addr, pid,
//! socket}` while a daemon runs, removed when it exits) and `daemon.sock`,
//! the Unix socket local clients use (see [`socket_address`] for paths too
//! long for a socket address).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use troupe_process::process_is_alive;

/// File name of the token.
pub(crate) const TOKEN_FILE: &str = "daemon.token";
/// File name of the running daemon's state.
pub(crate) const STATE_FILE: &str = "daemon.json";
/// File name of the daemon's Unix socket.
pub(crate) const SOCKET_FILE: &str = "daemon.sock";
/// File name of the record a daemon leaves when it ends on a hung store
/// write; the next daemon reads it and removes it.
pub(crate) const STALL_FILE: &str = "daemon-stall.json";

/// What a running daemon writes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DaemonState {
    /// Where it listens (`127.0.0.1:PORT`).
    pub addr: String,
    /// Its process id.
    pub pid: u32,
    /// Its Unix socket, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

/// Longest socket path used as it is; a longer one (a socket address holds
/// 107 bytes) is reached through the directory's descriptor.
const MAX_SOCKET_PATH: usize = 100;

/// An address for the Unix socket at `path`: the path itself, or, when it is
/// too long for a socket address, `/proc/self/fd/N/NAME` through a
/// descriptor of its directory, which the caller keeps open as long as it
/// binds or connects.
pub(crate) fn socket_address(
    path: &Path,
) -> std::io::Result<(PathBuf, Option<std::os::fd::OwnedFd>)> {
    if path.as_os_str().len() <= MAX_SOCKET_PATH {
        return Ok((path.to_path_buf(), None));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a socket path needs a directory and a name",
        ));
    };
    let dir = std::fs::File::open(dir)?;
    let fd = std::os::fd::OwnedFd::from(dir);
    let address = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .join(name);
    Ok((address, Some(fd)))
}

/// The token of the daemon of `data_dir`: read, or generated (32 random
/// bytes, hex) into a new file only the owner can read.
pub(crate) fn load_or_create_token(data_dir: &Path) -> std::io::Result<String> {
    let path = data_dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_string()),
        Ok(_) => std::fs::remove_file(&path)?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let token: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    std::fs::create_dir_all(data_dir)?;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    match created {
        Ok(mut file) => {
            file.write_all(token.as_bytes())?;
            file.sync_all()?;
            Ok(token)
        }
        // Another process created it first: use theirs.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(&path)?.trim().to_string())
        }
        Err(err) => Err(err),
    }
}

/// The token, if a daemon created one.
pub(crate) fn read_token(data_dir: &Path) -> Option<String> {
    std::fs::read_to_string(data_dir.join(TOKEN_FILE))
        .ok()
        .map(|token| token.trim().to_string())
        .filter(|token| !token.is_empty())
}

/// The state file's path.
pub(crate) fn state_path(data_dir: &Path) -> PathBuf {
    data_dir.join(STATE_FILE)
}

/// The state a daemon wrote, if the file is there and readable.
pub(crate) fn read_state(data_dir: &Path) -> Option<DaemonState> {
    let text = std::fs::read_to_string(state_path(data_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the state file atomically (a temporary file renamed over it).
pub(crate) fn write_state(data_dir: &Path, state: &DaemonState) -> std::io::Result<()> {
    let path = state_path(data_dir);
    let temporary = data_dir.join(format!("{STATE_FILE}.{}", std::process::id()));
    let text = serde_json::to_string(state).map_err(std::io::Error::other)?;
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, &path)
}

/// Removes the state file if it still describes this process.
pub(crate) fn remove_state(data_dir: &Path) {
    if read_state(data_dir).is_some_and(|state| state.pid == std::process::id()) {
        let _ = std::fs::remove_file(state_path(data_dir));
    }
}

/// What a daemon that ended on a hung store write leaves behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StallRecord {
    /// The process that ended.
    pub pid: u32,
    /// When the hung group of writes started (RFC 3339).
    pub started: String,
    /// How long it had waited when the daemon gave up, in milliseconds.
    pub waited_ms: u64,
    /// How many writes the group held.
    pub writes: usize,
}

impl StallRecord {
    /// The record as a sentence for `troupe daemon status` and the log.
    pub(crate) fn sentence(&self) -> String {
        format!(
            "pid {} ended at {} + {} s: a store write did not return \
             ({} write(s) waiting); the runs it left were marked interrupted",
            self.pid,
            self.started,
            self.waited_ms / 1000,
            self.writes
        )
    }
}

/// Writes the stall record (best effort: the daemon is about to exit).
pub(crate) fn write_stall(data_dir: &Path, record: &StallRecord) {
    if let Ok(text) = serde_json::to_string(record) {
        let _ = std::fs::write(data_dir.join(STALL_FILE), text);
    }
}

/// Whether a daemon that ended on a hung store write left its record (no
/// daemon has started since).
pub(crate) fn stall_recorded(data_dir: &Path) -> bool {
    data_dir.join(STALL_FILE).exists()
}

/// The stall record a previous daemon left, removed as it is read.
pub(crate) fn take_stall(data_dir: &Path) -> Option<StallRecord> {
    let path = data_dir.join(STALL_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    serde_json::from_str(&text).ok()
}

/// True when the process a state file names is alive and is a daemon (its
/// command line has `serve`): a pid reused by another program after a
/// daemon was killed does not count.
pub(crate) fn daemon_alive(state: &DaemonState) -> bool {
    process_is_alive(state.pid)
        && std::fs::read(format!("/proc/{}/cmdline", state.pid))
            .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"serve"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_token_is_created_once_private_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let token = load_or_create_token(dir.path()).unwrap();
        assert_eq!(token.len(), 64);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
        let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create_token(dir.path()).unwrap(), token);
        assert_eq!(read_token(dir.path()), Some(token));
    }

    #[test]
    fn the_state_file_is_written_read_and_removed_only_by_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_state(dir.path()), None);
        let mine = DaemonState {
            addr: "127.0.0.1:1".into(),
            pid: std::process::id(),
            socket: Some(dir.path().join(SOCKET_FILE)),
        };
        write_state(dir.path(), &mine).unwrap();
        assert_eq!(read_state(dir.path()), Some(mine));
        remove_state(dir.path());
        assert_eq!(read_state(dir.path()), None);
        let other = DaemonState {
            addr: "127.0.0.1:2".into(),
            pid: u32::MAX - 1,
            socket: None,
        };
        write_state(dir.path(), &other).unwrap();
        remove_state(dir.path());
        assert_eq!(read_state(dir.path()), Some(other.clone()));
        assert!(!daemon_alive(&other));
        // A live process that is no daemon (a pid reused after a daemon was
        // killed) does not count.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let reused = DaemonState {
            addr: "127.0.0.1:3".into(),
            pid: sleeper.id(),
            socket: None,
        };
        assert!(process_is_alive(reused.pid));
        assert!(!daemon_alive(&reused));
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[tokio::test]
    async fn a_socket_path_too_long_for_an_address_is_reached_through_its_directory() {
        let base = tempfile::tempdir().unwrap();
        let deep = base.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let path = deep.join(SOCKET_FILE);
        let (address, dir) = socket_address(&path).unwrap();
        assert!(dir.is_some());
        assert!(address.as_os_str().len() < 100, "{}", address.display());
        let listener = tokio::net::UnixListener::bind(&address).unwrap();
        assert!(path.exists());
        let (client_address, _client_dir) = socket_address(&path).unwrap();
        let connect = tokio::net::UnixStream::connect(&client_address);
        let (accepted, connected) = tokio::join!(listener.accept(), connect);
        accepted.unwrap();
        connected.unwrap();
        let short = base.path().join(SOCKET_FILE);
        assert_eq!(socket_address(&short).unwrap().0, short);
    }
}
