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
    _store: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `nats-server -a 127.0.0.1 -p PORT -sd DIR` with JetStream
    /// (`-js`) when `jetstream`, and `extra` arguments (`--user`, `--pass`,
    /// `--auth`), and waits for its "Server is ready" line. Panics when it
    /// exits or stays silent past the limit.
    pub fn start(jetstream: bool, extra: &[&str]) -> Self {
        let store = tempfile::tempdir().expect("a storage directory");
        // A port free now; the server takes it at once.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
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
        let (child, ready) = spawn_ready(&args);
        let mut server = Self {
            child,
            port,
            args,
            _store: store,
        };
        if let Err(said) = ready {
            server.kill();
            panic!("{said}");
        }
        server
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
        self.kill();
        let (child, said) = spawn_ready(&self.args);
        self.child = child;
        if let Err(said) = said {
            self.kill();
            panic!("nats-server did not come back: {said}");
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `nats-server ARGS` and waits for its "Server is ready" line: the
/// child, and why it is not ready when it is not.
fn spawn_ready(args: &[String]) -> (Child, Result<(), String>) {
    let mut child = Command::new("nats-server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nats-server starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut said = String::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("Server is ready") {
                let _ = ready_tx.send(Ok(()));
            } else if said.len() < 10_000 {
                said.push_str(&line);
                said.push('\n');
            }
        }
        // The server's stderr is drained until it exits.
        let _ = ready_tx.send(Err(said));
    });
    let ready = match ready_rx.recv_timeout(READY_LIMIT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(said)) => Err(format!("nats-server exited before it was ready:\n{said}")),
        Err(_) => Err(format!("nats-server was not ready within {READY_LIMIT:?}")),
    };
    (child, ready)
}
