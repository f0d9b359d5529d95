//! The daemon's HTTP server: an accept loop over the listener and one task
//! per connection serving the API's router with hyper, as the policy of
//! [`connections`] says — a request head in time and within its size, no
//! connection idle for too long, a cap on connections that have not
//! authenticated. This module only sequences those decisions.
//!
//! A new connection's task reads it once before anything else, so a client
//! that sends its request with the token at once is authenticated before a
//! newer connection may close it; while as many connections as the cap wait
//! for that first read (or to be closed), the accept loop waits for their
//! tasks. A task that has been woken and has not run since (its client's
//! request arrived after the first read) is passed over when a newer
//! connection replaces one.
//!
//! Connections come from the TCP listener and, when there is one, the
//! daemon's Unix socket, under the same policy. Each request carries the
//! [`Peer`] at the other end of its connection (the peer's address, or the
//! process the kernel names on the socket), axum's [`ConnectInfo`] with the
//! peer's address on TCP, and the [`Connection`] it came on, which the API's
//! guard marks authenticated once the request passed the token check. A request
//! counts as in flight from its complete head until its response body has
//! been sent or dropped, so an event stream that waits for events and a slow
//! `POST` are never closed. A request read on a connection chosen a moment
//! before to make room is not started: a connection the daemon closes
//! without an answer never had its request started.
//!
//! Stopping: the listener closes, a connection with a request in flight
//! finishes that response (an event stream ends with its run) and closes,
//! any other closes at once; [`serve`] returns when all are closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use futures::future::BoxFuture;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::connections::{self, AcceptFailure, Closing, Limits, Registry, Verdict};
use super::peer::Peer;

/// What the accept loop and every connection task share.
struct State {
    /// The connections, each with the [`Signal`] of its task.
    registry: Mutex<Registry<Arc<Signal>>>,
    /// Signalled when a connection has been seen or closed or a request
    /// answered: the accept loop waits on it while
    /// [`Registry::may_accept`] says no.
    room: Notify,
}

type Shared = Arc<State>;

fn lock(state: &Shared) -> MutexGuard<'_, Registry<Arc<Signal>>> {
    // The registry is consistent after every call; a panic elsewhere while
    // it was held leaves nothing to repair.
    state
        .registry
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Listens on `addr` with a queue of [`connections::LISTEN_BACKLOG`]
/// connections (the usual 128 fills up in a burst).
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(connections::LISTEN_BACKLOG)
}

/// What the daemon listens on.
pub(crate) struct Listeners {
    /// The TCP listener.
    pub tcp: TcpListener,
    /// The Unix socket, when there is one.
    pub unix: Option<UnixListener>,
}

impl From<TcpListener> for Listeners {
    fn from(tcp: TcpListener) -> Self {
        Self { tcp, unix: None }
    }
}

impl Listeners {
    /// The next connection of either listener, with its peer.
    async fn accept(&self) -> std::io::Result<(Stream, Peer)> {
        let unix = async {
            match &self.unix {
                Some(unix) => unix.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = self.tcp.accept() => {
                let (stream, peer) = accepted?;
                // Events go out one small SSE frame at a time: without
                // TCP_NODELAY each frame after the first waits for the
                // client's delayed ACK (~40 ms).
                if let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(%err, "TCP_NODELAY not set on a connection");
                }
                let local = stream.local_addr()?;
                Ok((Stream::Tcp(stream), Peer::Tcp { peer, local }))
            }
            accepted = unix => {
                let (stream, _) = accepted?;
                let pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
                Ok((Stream::Unix(stream), Peer::Unix { pid }))
            }
        }
    }
}

/// Serves `router` on `listeners` with `limits` until `stop` is cancelled;
/// returns once every connection has closed.
pub(crate) async fn serve(
    listeners: impl Into<Listeners>,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let listener = listeners.into();
    let shared: Shared = Arc::new(State {
        registry: Mutex::new(Registry::new(limits)),
        room: Notify::new(),
    });
    let tasks = TaskTracker::new();
    'accepting: loop {
        // As many connections as the cap wait for their task to read them:
        // their tasks go first.
        while !lock(&shared).may_accept() {
            tokio::select! {
                () = stop.cancelled() => break 'accepting,
                () = shared.room.notified() => {}
            }
        }
        let accepted = tokio::select! {
            () = stop.cancelled() => break 'accepting,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                let pause = match connections::accept_failure(&err) {
                    AcceptFailure::Skip => continue,
                    AcceptFailure::Shed => {
                        let shed = lock(&shared).shed_oldest(Signal::unread);
                        tracing::warn!(%err, shed = shed.is_some(), "out of descriptors while accepting a connection");
                        if let Some(signal) = shed {
                            signal.wake.notify_one();
                        }
                        connections::SHED_PAUSE
                    }
                    AcceptFailure::Pause => {
                        tracing::warn!(%err, "accepting a connection failed");
                        connections::ACCEPT_PAUSE
                    }
                };
                tokio::select! {
                    () = stop.cancelled() => break 'accepting,
                    () = tokio::time::sleep(pause) => continue 'accepting,
                }
            }
        };
        let signal = Arc::new(Signal {
            wake: Notify::new(),
            // Not yet run: what the connection sent is unread.
            unread: AtomicBool::new(true),
        });
        let (id, evicted) = lock(&shared).admit(Instant::now(), signal.clone(), Signal::unread);
        if let Some(evicted) = evicted {
            evicted.wake.notify_one();
        }
        let tracker = Tracker {
            id,
            shared: shared.clone(),
            signal: signal.clone(),
        };
        tasks.spawn(Noting {
            task: Box::pin(connection(
                stream,
                peer,
                router.clone(),
                limits,
                tracker,
                stop.clone(),
            )),
            signal,
            wakers: None,
        });
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// One connection as hyper serves it.
type Served = http1::UpgradeableConnection<TokioIo<Watched>, Api>;

/// Serves one connection until it ends or the policy closes it.
async fn connection(
    stream: Stream,
    peer: Peer,
    router: Router,
    limits: Limits,
    tracker: Tracker,
    stop: CancellationToken,
) {
    let io = TokioIo::new(Watched {
        stream,
        tracker: tracker.clone(),
    });
    let service = Api {
        router,
        tracker: tracker.clone(),
        peer,
    };
    let served = http1::Builder::new()
        // The head's deadline is the registry's: hyper's own would also
        // close a connection idle between requests after that short time.
        .header_read_timeout(None)
        .max_header_size(limits.max_head_bytes)
        .serve_connection(io, service)
        .with_upgrades();
    let mut served = std::pin::pin!(served);
    // Read what the connection sent before anything else — a client of the
    // owner has sent its whole head with the token, which authenticates it
    // here — and only then let a newer connection close it.
    let first = futures::poll!(served.as_mut());
    lock(&tracker.shared).seen(tracker.id);
    tracker.shared.room.notify_one();
    let closed = match first {
        Poll::Ready(ended) => {
            log_end(peer, ended);
            None
        }
        Poll::Pending => follow(served, peer, &tracker, stop).await,
    };
    let mut registry = lock(&tracker.shared);
    if let Some(why) = closed {
        tracing::debug!(
            ?peer,
            reason = ?why,
            authenticated = registry.is_authenticated(tracker.id),
            open = registry.len(),
            unauthenticated = registry.unauthenticated(),
            "closing a connection"
        );
    }
    registry.remove(tracker.id);
    drop(registry);
    tracker.shared.room.notify_one();
}

/// Serves a connection already read once until it ends (`None`) or the
/// policy closes it (why).
async fn follow(
    mut served: Pin<&mut Served>,
    peer: Peer,
    tracker: &Tracker,
    stop: CancellationToken,
) -> Option<Closing> {
    let mut stopping = false;
    loop {
        let verdict = lock(&tracker.shared).verdict(tracker.id, Instant::now());
        let until = match verdict {
            Verdict::Close(why) => return Some(why),
            Verdict::Keep(until) => until,
        };
        tokio::select! {
            // Whatever the connection has to do comes first: bytes that
            // arrived while this task waited to run are read before the
            // deadline is looked at again.
            biased;
            ended = served.as_mut() => {
                log_end(peer, ended);
                return None;
            }
            () = tracker.signal.wake.notified() => {}
            () = sleep_until(until) => {}
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                if !lock(&tracker.shared).busy(tracker.id) {
                    return Some(Closing::Stopping);
                }
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

fn log_end(peer: Peer, ended: hyper::Result<()>) {
    if let Err(err) = ended {
        tracing::debug!(?peer, %err, "connection ended with an error");
    }
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// How the accept loop and the registry reach a connection's task.
struct Signal {
    /// Tells the task to look at the registry again: its deadline moved, or
    /// it was closed for a newer connection.
    wake: Notify,
    /// The task has been woken and has not run since: bytes arrived that it
    /// has not read (or a timer or [`Signal::wake`] fired).
    unread: AtomicBool,
}

impl Signal {
    fn unread(signal: &Arc<Signal>) -> bool {
        signal.unread.load(Ordering::SeqCst)
    }
}

/// A connection's task, noting in its [`Signal`] when it is woken and when
/// it runs.
struct Noting<F> {
    task: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// The waker the runtime gave, and the one passed on in its place.
    wakers: Option<(Waker, Waker)>,
}

impl<F: Future> Future for Noting<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.signal.unread.store(false, Ordering::SeqCst);
        let waker = match &this.wakers {
            Some((given, noting)) if given.will_wake(cx.waker()) => noting.clone(),
            _ => {
                let noting = futures::task::waker(Arc::new(NotingWaker {
                    signal: this.signal.clone(),
                    given: cx.waker().clone(),
                }));
                this.wakers = Some((cx.waker().clone(), noting.clone()));
                noting
            }
        };
        this.task.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

/// Wakes a connection's task, noting first that it has something unread.
struct NotingWaker {
    signal: Arc<Signal>,
    given: Waker,
}

impl futures::task::ArcWake for NotingWaker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.signal.unread.store(true, Ordering::SeqCst);
        arc_self.given.wake_by_ref();
    }
}

/// One connection's place in the registry, and the task that serves it.
#[derive(Clone)]
struct Tracker {
    id: u64,
    shared: Shared,
    signal: Arc<Signal>,
}

impl Tracker {
    /// Tells the connection's task to look at its deadline again when
    /// `changed`.
    fn wake_if(&self, changed: bool) {
        if changed {
            self.signal.wake.notify_one();
        }
    }

    fn bytes_arrived(&self) {
        let changed = lock(&self.shared).bytes_arrived(self.id, Instant::now());
        self.wake_if(changed);
    }

    /// A complete head arrived: the request is in flight while the guard
    /// lives; `None` when the connection is being closed for a newer one.
    fn request_started(&self) -> Option<InFlight> {
        let changed = lock(&self.shared).request_started(self.id)?;
        self.wake_if(changed);
        Some(InFlight(self.clone()))
    }
}

/// A request in flight on a connection: from its complete head until its
/// response body has been sent or dropped.
struct InFlight(Tracker);

impl Drop for InFlight {
    fn drop(&mut self) {
        let changed = lock(&self.0.shared).request_finished(self.0.id, Instant::now());
        self.0.wake_if(changed);
        // The accept loop may be waiting for a request to be answered.
        self.0.shared.room.notify_one();
    }
}

/// The connection a request came on (a request extension): the API's guard
/// marks it authenticated once the request passed the token check.
#[derive(Clone)]
pub(crate) struct Connection(Tracker);

impl Connection {
    /// The connection's request passed the token check: it no longer counts
    /// against the cap on unauthenticated connections.
    pub(crate) fn authenticated(&self) {
        lock(&self.0.shared).authenticated(self.0.id);
    }
}

/// A connection of either listener.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// `$call` on the stream inside a pinned [`Stream`].
macro_rules! on_stream {
    ($stream:expr, $inner:ident => $call:expr) => {
        match $stream {
            Stream::Tcp($inner) => $call,
            Stream::Unix($inner) => $call,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        on_stream!(self.get_mut(), stream => Pin::new(stream).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self.get_mut(), stream => Pin::new(stream).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self.get_mut(), stream => Pin::new(stream).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        on_stream!(self, stream => stream.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self.get_mut(), stream => Pin::new(stream).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self.get_mut(), stream => Pin::new(stream).poll_shutdown(cx))
    }
}

/// The stream, telling the registry when bytes arrive (the start of a
/// request head after an idle spell).
struct Watched {
    stream: Stream,
    tracker: Tracker,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.tracker.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service.
#[derive(Clone)]
struct Api {
    router: Router,
    tracker: Tracker,
    peer: Peer,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Api {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let Some(in_flight) = self.tracker.request_started() else {
            // Chosen a moment ago to make room for a newer connection: its
            // task closes it without starting the request.
            return Box::pin(std::future::pending());
        };
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.peer);
        if let Peer::Tcp { peer, .. } = self.peer {
            request.extensions_mut().insert(ConnectInfo(peer));
        }
        request
            .extensions_mut()
            .insert(Connection(self.tracker.clone()));
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request).await?;
            Ok(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A response body that keeps its request in flight until it is dropped.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Raises this process's soft open-files limit to its hard limit (see
/// [`connections::raised_open_files`]); the soft limit in force after,
/// `None` when it cannot be read.
pub(crate) fn raise_open_files() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a stack value for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let Some(target) = connections::raised_open_files(limit.rlim_cur, limit.rlim_max) else {
        return Some(limit.rlim_cur);
    };
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        tracing::debug!(
            from = limit.rlim_cur,
            to = target,
            "raised the open-files limit"
        );
        Some(target)
    } else {
        let err = std::io::Error::last_os_error();
        tracing::debug!(%err, "the open-files limit could not be raised");
        Some(limit.rlim_cur)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(30);

    /// Sends `head` on a new connection and reads the answer to its end.
    async fn exchange(addr: SocketAddr, head: &str) -> (SocketAddr, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let local = stream.local_addr().unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(LIMIT, stream.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        (local, answer)
    }

    #[tokio::test]
    async fn handlers_see_the_peer_and_a_stopped_server_closes_what_is_idle() {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        );
        let stop = CancellationToken::new();
        let served = tokio::spawn(serve(listener, router, Limits::default(), stop.clone()));
        let (local, answer) = exchange(addr, "GET /peer HTTP/1.0\r\nHost: x\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
        assert!(answer.ends_with(&local.to_string()), "{answer}");
        // A connection that sent half a head is closed when the server stops,
        // and the server returns.
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /peer HTTP/1.1\r\n").await.unwrap();
        stop.cancel();
        tokio::time::timeout(LIMIT, served).await.unwrap().unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(LIMIT, half.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");
    }
}
