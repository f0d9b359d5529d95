//! A loopback TCP relay that counts the connections a client opens to a
//! server (SPEC §14: one keep-alive connection per provider). It accepts on
//! its own port, opens one connection to the target per accepted connection
//! and copies bytes both ways until either side closes. It only counts; it does
//! not look at what passes through. The relay adds a hop, so benches use it in
//! runs that check connections, never in runs they time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running relay on 127.0.0.1.
#[derive(Debug)]
pub struct CountingProxy {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Starts relaying a free loopback port to `target`, on the current tokio
    /// runtime.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    // Either side closing ends the relay; errors mean the same.
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Ok(Self {
            addr,
            accepted,
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use troupe_scripted::{Script, ScriptedServer, text};

    use super::*;
    use crate::bench::http::RawHttpClient;

    #[tokio::test]
    async fn relays_requests_and_counts_connections() {
        let server = ScriptedServer::start(
            Script::new()
                .then(text("one"))
                .then(text("two"))
                .then(text("three")),
        )
        .await
        .unwrap();
        let proxy = CountingProxy::start(server.addr()).await.unwrap();
        let body = br#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut kept = RawHttpClient::connect(proxy.addr()).await.unwrap();
        for _ in 0..2 {
            let response = kept.post_json("/v1/messages", body).await.unwrap();
            assert_eq!(response.status, 200);
        }
        assert_eq!(proxy.connections(), 1, "keep-alive reuses the connection");
        let mut other = RawHttpClient::connect(proxy.addr()).await.unwrap();
        let response = other.post_json("/v1/messages", body).await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(proxy.connections(), 2);
        assert_eq!(server.request_count(), 3);
    }
}
