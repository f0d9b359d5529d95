//! A `nats-server` of a test's own: started on a free loopback port with a
//! storage directory of its own, ready once it says so on stderr, and
//! killed (and reaped) when its guard is dropped, so no server outlives its
//! test.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server may take to say it is ready.
const READY_LIMIT: Duration = Duration::from_secs(20);

/// A running `nats-server`; killed when dropped.
pub struct NatsServer {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `nats-server -a 127.0.0.1 -p PORT -sd DIR` with JetStream
    /// (`-js`) when `jetstream`, and `extra` arguments (`--user`, `--pass`,
    /// `--auth`), and waits for its "Server is ready" line. Panics when it
    /// exits or stays silent past the limit.
    pub fn start(jetstream: bool, extra: &[&str]) -> Self {
        let store = tempfile::tempdir().expect("a storage directory");
        let port = free_port();
        let mut command = Command::new("nats-server");
        command
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path());
        if jetstream {
            command.arg("-js");
        }
        command.args(extra);
        Self::spawn(command, port, store, &["Server is ready"]).wait_ready()
    }

    /// Starts `command` (a `nats-server` listening on `port`, storing in
    /// `store`) without waiting: [`Starting::wait_ready`] waits until its
    /// stderr said each of `ready_lines`.
    pub(crate) fn spawn(
        mut command: Command,
        port: u16,
        store: tempfile::TempDir,
        ready_lines: &[&str],
    ) -> Starting {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nats-server starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut waiting: Vec<String> = ready_lines.iter().map(|line| line.to_string()).collect();
        std::thread::spawn(move || {
            let mut said = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let before = waiting.len();
                waiting.retain(|wanted| !line.contains(wanted.as_str()));
                if waiting.is_empty() && before > 0 {
                    let _ = ready_tx.send(Ok(()));
                } else if said.len() < 10_000 {
                    said.push_str(&line);
                    said.push('\n');
                }
            }
            // The server's stderr is drained until it exits.
            let _ = ready_tx.send(Err(said));
        });
        Starting {
            server: Self {
                child,
                port,
                _store: store,
            },
            ready: ready_rx,
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:PORT`, with `userinfo@` when given.
    pub fn url(&self, userinfo: Option<&str>) -> String {
        match userinfo {
            Some(userinfo) => format!("nats://{userinfo}@127.0.0.1:{}", self.port),
            None => format!("nats://127.0.0.1:{}", self.port),
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `nats-server` started by [`NatsServer::spawn`], not yet ready.
pub(crate) struct Starting {
    server: NatsServer,
    ready: mpsc::Receiver<Result<(), String>>,
}

impl Starting {
    /// Waits until the server said it is ready; panics when it exits or
    /// stays silent past the limit.
    pub(crate) fn wait_ready(self) -> NatsServer {
        let Self { mut server, ready } = self;
        match ready.recv_timeout(READY_LIMIT) {
            Ok(Ok(())) => server,
            Ok(Err(said)) => {
                server.kill();
                panic!("nats-server exited before it was ready:\n{said}");
            }
            Err(_) => {
                server.kill();
                panic!("nats-server was not ready within {READY_LIMIT:?}");
            }
        }
    }
}

/// A free port on loopback now; the server takes it at once.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
