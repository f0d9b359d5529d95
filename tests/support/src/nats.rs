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
    /// The arguments it was started with (to start it again).
    args: Vec<String>,
    /// The lines its stderr says once it is ready.
    ready_lines: Vec<String>,
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
        let mut args: Vec<String> = vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-sd".into(),
            store.path().display().to_string(),
        ];
        if jetstream {
            args.push("-js".into());
        }
        args.extend(extra.iter().map(|arg| arg.to_string()));
        Self::spawn(args, port, store, &["Server is ready"]).wait_ready()
    }

    /// Starts `nats-server ARGS` (listening on `port`, storing in `store`)
    /// without waiting: [`Starting::wait_ready`] waits until its stderr said
    /// each of `ready_lines`.
    pub(crate) fn spawn(
        args: Vec<String>,
        port: u16,
        store: tempfile::TempDir,
        ready_lines: &[&str],
    ) -> Starting {
        let ready_lines: Vec<String> = ready_lines.iter().map(|line| line.to_string()).collect();
        let (child, ready) = spawn_child(&args, &ready_lines);
        Starting {
            server: Self {
                child,
                port,
                args,
                ready_lines,
                _store: store,
            },
            ready,
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

    /// Stops the server (SIGKILL) and starts it again on the same port
    /// with the same storage directory and arguments; waits until it is
    /// ready.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stops the server (SIGKILL) and reaps it: its port is free until
    /// [`NatsServer::start_again`].
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts a stopped server again on the same port with the same
    /// storage directory and arguments; waits until it is ready.
    pub fn start_again(&mut self) {
        let (child, ready) = spawn_child(&self.args, &self.ready_lines);
        self.child = child;
        if let Err(said) = wait(&ready) {
            self.kill();
            panic!("nats-server did not come back: {said}");
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `nats-server ARGS`: the child, and a channel that says once its
/// stderr said each of `ready_lines` (or what it said before it exited).
fn spawn_child(
    args: &[String],
    ready_lines: &[String],
) -> (Child, mpsc::Receiver<Result<(), String>>) {
    let mut child = Command::new("nats-server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nats-server starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut waiting = ready_lines.to_vec();
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
    (child, ready_rx)
}

/// Waits for a server's readiness: why it is not ready when it is not.
fn wait(ready: &mpsc::Receiver<Result<(), String>>) -> Result<(), String> {
    match ready.recv_timeout(READY_LIMIT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(said)) => Err(format!("nats-server exited before it was ready:\n{said}")),
        Err(_) => Err(format!("nats-server was not ready within {READY_LIMIT:?}")),
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
        if let Err(said) = wait(&ready) {
            server.kill();
            panic!("{said}");
        }
        server
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
