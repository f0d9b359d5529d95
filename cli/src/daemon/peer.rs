//! Who is at the other end of a connection, for the requests that could
//! widen what runs unasked: starting a run and answering an approval.
//!
//! A command the model runs may read the daemon's token where the OS
//! sandbox cannot hide it, and with the network on it reaches the daemon on
//! loopback. Were it let in, it could start a run in bypass mode in another
//! directory, or approve its own run's calls. So those two requests are
//! refused when they come from a command of any Troupe run (see
//! `troupe_process::lineage`), and from a local peer the daemon
//! cannot identify:
//!
//! - on the daemon's Unix socket (`$TROUPE_HOME/daemon.sock`, which the
//!   command line uses), the kernel names the peer's process
//!   (`SO_PEERCRED`);
//! - on TCP, a peer on this machine (its address is a loopback address or
//!   one of this machine's own) is found through the process holding its
//!   end of the connection (`/proc/net/tcp`, then the processes'
//!   descriptors); a process whose descriptors cannot be read (it is not
//!   dumpable, or another user's), or one that closed its end before it was
//!   found, cannot be identified and is refused these requests, with a
//!   pointer to the socket; a peer on another machine cannot be a command
//!   of this one and is judged by its token alone.
//!
//! The address parsing and matching is pure; reading `/proc` happens in
//! [`origin`], which blocks and is run off the async threads.

use std::net::{IpAddr, SocketAddr};

use troupe_process::lineage::{self, Lineage};

/// The transport end of one connection, kept with each of its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The daemon's Unix socket; the peer's process id when the kernel
    /// gave one.
    Unix {
        /// `SO_PEERCRED`'s process id.
        pid: Option<i32>,
    },
    /// TCP: the peer's address and the daemon's own end.
    Tcp {
        /// The peer's address.
        peer: SocketAddr,
        /// The daemon's address on this connection.
        local: SocketAddr,
    },
}

/// What the peer of a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Not a command of any Troupe run, as far as the kernel tells.
    Owner,
    /// A command of a Troupe run (or a process one started); why.
    Command(String),
    /// A local peer whose process cannot be found; why.
    Unidentified(String),
}

/// How a TCP address appears in `/proc/net/tcp` (IPv4) or `tcp6`: each
/// 32-bit word of the address in the machine's byte order as hex, a colon,
/// the port as hex.
pub(crate) fn proc_net_address(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        IpAddr::V4(ip) => vec![ip.octets()],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|chunk| [chunk[0], chunk[1], chunk[2], chunk[3]])
            .collect(),
    };
    let mut out: String = words
        .iter()
        .map(|word| format!("{:08X}", u32::from_ne_bytes(*word)))
        .collect();
    out.push_str(&format!(":{:04X}", addr.port()));
    out
}

/// The inode of the socket whose local end is `local` and remote end is
/// `remote` in a `/proc/net/tcp` or `tcp6` text; `None` when no such
/// socket is listed (or only one being torn down, whose inode is 0).
pub(crate) fn socket_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let local = proc_net_address(local);
    let remote = proc_net_address(remote);
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let (Some(l), Some(r), Some(inode)) = (fields.get(1), fields.get(2), fields.get(9)) else {
            return None;
        };
        (l.eq_ignore_ascii_case(&local) && r.eq_ignore_ascii_case(&remote))
            .then(|| inode.parse().ok())
            .flatten()
            .filter(|inode| *inode != 0)
    })
}

/// Whether `ip` is an address of this machine: a loopback address, or one
/// a socket can be bound to here.
fn is_this_machine(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.to_canonical().is_loopback()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The processes holding socket `inode`, and whether some process's
/// descriptors could not be read.
fn socket_holders(inode: u64) -> (Vec<i32>, bool) {
    let wanted = format!("socket:[{inode}]");
    let mut holders = Vec::new();
    let mut unreadable = false;
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return (holders, true);
    };
    for process in processes.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            unreadable = true;
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str())
        });
        if holds {
            holders.push(pid);
        }
    }
    (holders, unreadable)
}

/// Where to point a refused local peer.
const USE_THE_SOCKET: &str =
    "the troupe command line reaches a local daemon through $TROUPE_HOME/daemon.sock";

/// Identifies the peer of a connection; blocking (reads `/proc`).
pub(crate) fn origin(peer: Peer) -> Origin {
    let daemon = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let judged = |pid: i32| match lineage::lineage_of(pid, daemon) {
        Some(Lineage::Command(why)) => Some(Origin::Command(why)),
        Some(Lineage::Unrelated) => None,
        None => Some(Origin::Unidentified(format!(
            "the peer's process {pid} is gone"
        ))),
    };
    match peer {
        Peer::Unix { pid: Some(pid) } => judged(pid).unwrap_or(Origin::Owner),
        Peer::Unix { pid: None } => {
            Origin::Unidentified("the kernel did not name the peer's process".to_owned())
        }
        Peer::Tcp { peer, local } => {
            if !is_this_machine(peer.ip()) {
                // A client on another machine: its token decides.
                return Origin::Owner;
            }
            let table = match peer {
                SocketAddr::V4(_) => "/proc/net/tcp",
                SocketAddr::V6(_) => "/proc/net/tcp6",
            };
            let inode = std::fs::read_to_string(table)
                .ok()
                .and_then(|text| socket_inode(&text, peer, local));
            let Some(inode) = inode else {
                return Origin::Unidentified(format!(
                    "the other end of this connection is closed or cannot be found; {USE_THE_SOCKET}"
                ));
            };
            let (holders, unreadable) = socket_holders(inode);
            if let Some(verdict) = holders.iter().find_map(|pid| judged(*pid)) {
                return verdict;
            }
            if holders.is_empty() {
                let why = if unreadable {
                    "the process at the other end of this connection cannot be identified"
                } else {
                    "no process holds the other end of this connection"
                };
                return Origin::Unidentified(format!("{why}; {USE_THE_SOCKET}"));
            }
            Origin::Owner
        }
    }
}

/// What a request would do that only the owner may (start a run, answer an
/// approval, write to a running run, remove or rewind a session), in a few words;
/// `None` for every other request. Pure.
pub(crate) fn owner_only(method: &axum::http::Method, path: &str) -> Option<&'static str> {
    use axum::http::Method;
    let versioned = path
        .trim_end_matches('/')
        .strip_prefix(troupe_protocol::api::PATH_PREFIX)?;
    let parts: Vec<&str> = versioned.split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::POST, ["", "runs"]) => Some("start runs"),
        (&Method::POST, ["", "runs", _, "approvals", _]) => Some("answer approvals"),
        (&Method::POST, ["", "runs", _, "messages"]) => Some("write to a run"),
        (&Method::DELETE, ["", "sessions", _]) => Some("remove sessions"),
        (&Method::POST, ["", "sessions", _, "rewind"]) => Some("rewind sessions"),
        (&Method::POST, ["", "cluster", "nodes", _, _]) => Some("drain nodes"),
        _ => None,
    }
}

/// Refuses `what` ("start runs", "answer approvals") unless the peer is the
/// owner; the error names why.
pub(crate) async fn require_owner(
    peer: Option<Peer>,
    what: &str,
) -> Result<(), super::error::ApiError> {
    let origin = match peer {
        Some(peer) => tokio::task::spawn_blocking(move || origin(peer))
            .await
            .unwrap_or_else(|err| Origin::Unidentified(format!("the check failed: {err}"))),
        None => Origin::Unidentified("the request came on no known connection".to_owned()),
    };
    match origin {
        Origin::Owner => Ok(()),
        Origin::Command(why) => {
            tracing::warn!(%why, what, "a command of a run was refused");
            Err(super::error::ApiError::forbidden(format!(
                "commands of a Troupe run may not {what} ({why})"
            )))
        }
        Origin::Unidentified(why) => {
            tracing::warn!(%why, what, "an unidentified local peer was refused");
            Err(super::error::ApiError::forbidden(format!(
                "only an identified local process may {what}: {why}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_runs_answering_approvals_writing_to_runs_and_removing_sessions_are_the_owners() {
        use axum::http::Method;
        let cases = [
            (Method::POST, "/v1/runs", Some("start runs")),
            (Method::POST, "/v1/runs/", Some("start runs")),
            (
                Method::POST,
                "/v1/runs/r1/approvals/a1",
                Some("answer approvals"),
            ),
            (Method::POST, "/v1/runs/r1/messages", Some("write to a run")),
            (Method::DELETE, "/v1/sessions/s1", Some("remove sessions")),
            (
                Method::POST,
                "/v1/sessions/s1/rewind",
                Some("rewind sessions"),
            ),
            (
                Method::POST,
                "/v1/cluster/nodes/n1/drain",
                Some("drain nodes"),
            ),
            (Method::GET, "/v1/cluster", None),
            (Method::GET, "/v1/runs", None),
            (Method::GET, "/v1/runs/r1/events", None),
            (Method::POST, "/v1/runs/r1/cancel", None),
            (Method::POST, "/v1/sessions/s1/compact", None),
            (Method::GET, "/v1/sessions/s1", None),
            (Method::GET, "/healthz", None),
        ];
        for (method, path, expected) in cases {
            assert_eq!(owner_only(&method, path), expected, "{method} {path}");
        }
    }

    #[test]
    fn addresses_are_written_as_proc_net_tcp_writes_them() {
        let v4: SocketAddr = "127.0.0.1:35691".parse().unwrap();
        let expected = if cfg!(target_endian = "little") {
            "0100007F:8B6B"
        } else {
            "7F000001:8B6B"
        };
        assert_eq!(proc_net_address(v4), expected);
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        let words = if cfg!(target_endian = "little") {
            "00000000000000000000000001000000"
        } else {
            "00000000000000000000000000000001"
        };
        assert_eq!(proc_net_address(v6), format!("{words}:0050"));
    }

    #[test]
    fn the_socket_of_a_connection_is_found_by_both_ends() {
        if !cfg!(target_endian = "little") {
            return;
        }
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 624 1 0\n\
   1: 0100007F:CC58 0100007F:8B6B 01 00000000:00000000 00:00000000 00000000  1000        0 98765 1 0\n\
   2: 0100007F:8B6B 0100007F:CC58 01 00000000:00000000 00:00000000 00000000  1000        0 98766 1 0\n\
   3: 0100007F:CC5E 0100007F:8B6B 06 00000000:00000000 03:000014E2 00000000     0        0 0 3 0\n";
        let daemon: SocketAddr = "127.0.0.1:35691".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:52312".parse().unwrap();
        assert_eq!(socket_inode(table, client, daemon), Some(98765));
        assert_eq!(socket_inode(table, daemon, client), Some(98766));
        let gone: SocketAddr = "127.0.0.1:52318".parse().unwrap();
        assert_eq!(socket_inode(table, gone, daemon), None);
        let elsewhere: SocketAddr = "10.0.0.2:52312".parse().unwrap();
        assert_eq!(socket_inode(table, elsewhere, daemon), None);
    }

    #[test]
    fn a_loopback_connection_of_this_process_is_traced_to_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // This test process is nobody's command (unless the suite itself
        // runs inside a Troupe command, where it is one).
        let me = i32::try_from(std::process::id()).unwrap();
        let expected = match lineage::lineage_of(me, me) {
            Some(Lineage::Unrelated) => Origin::Owner,
            other => panic!("this test runs inside a command: {other:?}"),
        };
        assert_eq!(origin(Peer::Tcp { peer, local }), expected);
        drop(client);
        // A remote peer is never looked for.
        let remote: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        assert_eq!(
            super::origin(Peer::Tcp {
                peer: remote,
                local
            }),
            Origin::Owner
        );
        // A local peer whose end is gone (it sent its request and closed)
        // cannot be told from a command: refused.
        let gone: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(matches!(
            super::origin(Peer::Tcp { peer: gone, local }),
            Origin::Unidentified(_)
        ));
    }

    #[test]
    fn a_command_holding_the_connection_is_refused_whatever_it_clears() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        // A marked shell whose child clears its environment and connects.
        let mut command = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "env -i bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}; read -t 10 <&3'",
                local.port()
            ))
            .env(lineage::COMMAND_VAR, "1")
            .spawn()
            .unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let judged = origin(Peer::Tcp { peer, local });
        command.kill().unwrap();
        command.wait().unwrap();
        assert!(matches!(judged, Origin::Command(_)), "{judged:?}");
    }

    #[tokio::test]
    async fn on_the_socket_the_kernel_names_the_process_and_a_command_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // The owner: this process.
        let _client = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let pid = accepted.peer_cred().unwrap().pid();
        assert_eq!(pid, Some(i32::try_from(std::process::id()).unwrap()));
        assert_eq!(origin(Peer::Unix { pid }), Origin::Owner);
        // A command's child that cleared its environment.
        let Ok(mut command) = std::process::Command::new("bash")
            .arg("-c")
            .arg(
                "env -i python3 -c 'import socket, sys, time; s = socket.socket(socket.AF_UNIX); \
                 s.connect(sys.argv[1]); time.sleep(10)' \"$0\"",
            )
            .arg(&path)
            .env(lineage::COMMAND_VAR, "1")
            .spawn()
        else {
            return;
        };
        let accepted =
            tokio::time::timeout(std::time::Duration::from_secs(10), listener.accept()).await;
        let judged = accepted.ok().and_then(Result::ok).map(|(stream, _)| {
            origin(Peer::Unix {
                pid: stream.peer_cred().unwrap().pid(),
            })
        });
        command.kill().unwrap();
        command.wait().unwrap();
        match judged {
            Some(judged) => assert!(matches!(judged, Origin::Command(_)), "{judged:?}"),
            // No python3 on this machine: nothing connected.
            None => assert!(which_python().is_none()),
        }
        assert_eq!(
            origin(Peer::Unix { pid: None }),
            Origin::Unidentified("the kernel did not name the peer's process".to_owned())
        );
    }

    fn which_python() -> Option<std::path::PathBuf> {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|dir| std::path::Path::new(dir).join("python3"))
            .find(|path| path.exists())
    }
}
