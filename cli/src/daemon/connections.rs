//! Which connections the daemon keeps, and for how long: the policy the
//! accept loop of [`server`](super::server) follows, as plain data and pure
//! functions.
//!
//! A connection is in one of three phases: sending a request head
//! ([`Phase::Head`]), with requests in flight ([`Phase::Busy`]: from a
//! complete head until its response has been sent, however long that takes —
//! an event stream, a long `POST`), or idle between requests
//! ([`Phase::Idle`]). A head must be complete within [`Limits::head_timeout`]
//! of the connection's start or of the first byte after an idle spell; an
//! idle connection is closed after [`Limits::idle_timeout`]; a busy one is
//! never closed for time.
//!
//! A connection *authenticates* when one of its requests passes the token
//! check. Until then it counts against [`Limits::max_unauthenticated`]: a new
//! connection that arrives at the cap closes the oldest one that has not
//! authenticated, so connections that never send a token cannot fill the
//! daemon, and the newest one (the owner's client, about to send its token)
//! is the last to go.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::time::{Duration, Instant};

/// How long a connection may take to send a complete request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may stay open between requests. Longer than the
/// command line's own client keeps an idle connection
/// ([`client::POOL_IDLE`](crate::client::POOL_IDLE)), so the daemon never
/// closes one the client is about to reuse.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many connections may be open without having authenticated.
pub(crate) const MAX_UNAUTHENTICATED: usize = 256;

/// The largest request head (request line and headers) accepted; a larger
/// one is answered `431` and the connection closed.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The ceiling the soft open-files limit is raised to, whatever the hard
/// limit says.
const OPEN_FILES_CEILING: u64 = 1 << 20;

/// The limits one daemon applies to its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// See [`HEAD_TIMEOUT`].
    pub head_timeout: Duration,
    /// See [`IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`MAX_UNAUTHENTICATED`].
    pub max_unauthenticated: usize,
    /// See [`MAX_HEAD_BYTES`].
    pub max_head_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            head_timeout: HEAD_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_unauthenticated: MAX_UNAUTHENTICATED,
            max_head_bytes: MAX_HEAD_BYTES,
        }
    }
}

impl Limits {
    /// These limits with the unauthenticated cap kept within a quarter of
    /// the open-files limit (`None`: unknown), so that connections without a
    /// token can never take the descriptors the daemon's own work needs.
    pub(crate) fn within_open_files(self, open_files: Option<u64>) -> Self {
        let quarter = open_files.map_or(usize::MAX, |limit| {
            usize::try_from(limit / 4).unwrap_or(usize::MAX)
        });
        Self {
            max_unauthenticated: self.max_unauthenticated.min(quarter).max(1),
            ..self
        }
    }
}

/// The soft open-files limit to raise to, given the current soft and hard
/// limits: the hard limit (at most [`OPEN_FILES_CEILING`]) when it is
/// higher; `None` when there is nothing to raise.
pub(crate) fn raised_open_files(soft: u64, hard: u64) -> Option<u64> {
    let target = hard.min(OPEN_FILES_CEILING);
    (target > soft).then_some(target)
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Sending a request head since this instant (its start, or the first
    /// byte after an idle spell).
    Head {
        /// When the head began.
        since: Instant,
    },
    /// Requests whose responses are not yet sent.
    Busy {
        /// How many.
        requests: usize,
    },
    /// Between requests since this instant.
    Idle {
        /// When the last response was sent.
        since: Instant,
    },
}

/// Why a connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Its request head did not arrive in time.
    HeadTimeout,
    /// It was idle for too long.
    IdleTimeout,
    /// A newer unauthenticated connection took its place, or descriptors ran
    /// out.
    Evicted,
    /// The daemon is stopping and the connection had no request in flight.
    Stopping,
}

/// What a connection's task should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep serving it; look again at this instant (`None`: only when
    /// something changes).
    Keep(Option<Instant>),
    /// Close it.
    Close(Closing),
}

impl Phase {
    /// When this phase runs out, and why; `None` while busy.
    pub(crate) fn deadline(self, limits: &Limits) -> Option<(Instant, Closing)> {
        match self {
            Phase::Head { since } => Some((since + limits.head_timeout, Closing::HeadTimeout)),
            Phase::Idle { since } => Some((since + limits.idle_timeout, Closing::IdleTimeout)),
            Phase::Busy { .. } => None,
        }
    }

    /// The phase after bytes arrived at `now`: an idle connection starts a
    /// head; otherwise nothing changes (bytes of a head in progress, or of a
    /// body, or of a request sent ahead while one is in flight).
    fn after_bytes(self, now: Instant) -> Self {
        match self {
            Phase::Idle { .. } => Phase::Head { since: now },
            other => other,
        }
    }

    /// The phase after a complete request head arrived.
    fn after_request_started(self) -> Self {
        match self {
            Phase::Busy { requests } => Phase::Busy {
                requests: requests + 1,
            },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
        }
    }

    /// The phase after a response was sent (or abandoned) at `now`.
    fn after_request_finished(self, now: Instant) -> Self {
        match self {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Idle { since: now },
        }
    }
}

/// What to do when accepting a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcceptFailure {
    /// That one connection failed (the peer went away first): accept the
    /// next one at once.
    Skip,
    /// Descriptors (or kernel memory) ran out: close the oldest
    /// unauthenticated connection, then try again after [`SHED_PAUSE`].
    Shed,
    /// Something else: try again after [`ACCEPT_PAUSE`].
    Pause,
}

/// The pause after shedding a connection for want of descriptors, so its
/// task has closed it before the next attempt.
pub(crate) const SHED_PAUSE: Duration = Duration::from_millis(10);

/// The pause after any other failure to accept.
pub(crate) const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What a failed `accept` calls for.
pub(crate) fn accept_failure(err: &io::Error) -> AcceptFailure {
    match err.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => AcceptFailure::Shed,
        _ => match err.kind() {
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted => AcceptFailure::Skip,
            _ => AcceptFailure::Pause,
        },
    }
}

/// One connection as the registry sees it.
#[derive(Debug)]
struct Entry<H> {
    handle: H,
    phase: Phase,
    authenticated: bool,
}

/// The open connections, each with a handle `H` its task is reached by, in
/// the order they were accepted.
#[derive(Debug)]
pub(crate) struct Registry<H> {
    limits: Limits,
    next_id: u64,
    connections: HashMap<u64, Entry<H>>,
    /// Ids of the connections that have not authenticated; ids grow with
    /// every connection accepted, so the first is the oldest.
    unauthenticated: BTreeSet<u64>,
}

impl<H> Registry<H> {
    /// An empty registry applying `limits`.
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            next_id: 0,
            connections: HashMap::new(),
            unauthenticated: BTreeSet::new(),
        }
    }

    /// Registers a connection accepted at `now`: its id, and the handle of
    /// the oldest unauthenticated connection when the new one reaches the
    /// cap (removed from the registry; its task must close it).
    pub(crate) fn admit(&mut self, now: Instant, handle: H) -> (u64, Option<H>) {
        let evicted = if self.unauthenticated.len() >= self.limits.max_unauthenticated {
            self.shed_oldest()
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        self.connections.insert(
            id,
            Entry {
                handle,
                phase: Phase::Head { since: now },
                authenticated: false,
            },
        );
        self.unauthenticated.insert(id);
        (id, evicted)
    }

    /// Removes the oldest unauthenticated connection; its handle, for its
    /// task to close it (`None`: every connection has authenticated).
    pub(crate) fn shed_oldest(&mut self) -> Option<H> {
        let oldest = self.unauthenticated.pop_first()?;
        self.connections.remove(&oldest).map(|entry| entry.handle)
    }

    /// Connection `id` sent a request that passed the token check.
    pub(crate) fn authenticated(&mut self, id: u64) {
        if let Some(entry) = self.connections.get_mut(&id) {
            entry.authenticated = true;
            self.unauthenticated.remove(&id);
        }
    }

    /// Bytes arrived on connection `id` at `now`. True when its deadline
    /// changed (its task must look again).
    pub(crate) fn bytes_arrived(&mut self, id: u64, now: Instant) -> bool {
        self.change(id, |phase| phase.after_bytes(now))
    }

    /// A complete request head arrived on connection `id`. True when its
    /// deadline changed.
    pub(crate) fn request_started(&mut self, id: u64) -> bool {
        self.change(id, Phase::after_request_started)
    }

    /// A response on connection `id` was sent or abandoned at `now`. True
    /// when its deadline changed.
    pub(crate) fn request_finished(&mut self, id: u64, now: Instant) -> bool {
        self.change(id, |phase| phase.after_request_finished(now))
    }

    fn change(&mut self, id: u64, step: impl FnOnce(Phase) -> Phase) -> bool {
        let Some(entry) = self.connections.get_mut(&id) else {
            return false;
        };
        let before = entry.phase;
        entry.phase = step(before);
        entry.phase.deadline(&self.limits) != before.deadline(&self.limits)
    }

    /// What connection `id`'s task should do at `now`.
    pub(crate) fn verdict(&self, id: u64, now: Instant) -> Verdict {
        let Some(entry) = self.connections.get(&id) else {
            return Verdict::Close(Closing::Evicted);
        };
        match entry.phase.deadline(&self.limits) {
            Some((deadline, why)) if deadline <= now => Verdict::Close(why),
            Some((deadline, _)) => Verdict::Keep(Some(deadline)),
            None => Verdict::Keep(None),
        }
    }

    /// True while connection `id` has a request in flight: when the daemon
    /// stops, such a connection finishes its response, any other is closed
    /// at once.
    pub(crate) fn busy(&self, id: u64) -> bool {
        self.connections
            .get(&id)
            .is_some_and(|entry| matches!(entry.phase, Phase::Busy { .. }))
    }

    /// True when connection `id` has authenticated.
    pub(crate) fn is_authenticated(&self, id: u64) -> bool {
        self.connections
            .get(&id)
            .is_some_and(|entry| entry.authenticated)
    }

    /// Connection `id` is closed.
    pub(crate) fn remove(&mut self, id: u64) {
        self.connections.remove(&id);
        self.unauthenticated.remove(&id);
    }

    /// Open connections.
    pub(crate) fn len(&self) -> usize {
        self.connections.len()
    }

    /// Open connections that have not authenticated.
    pub(crate) fn unauthenticated(&self) -> usize {
        self.unauthenticated.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_unauthenticated: usize) -> Limits {
        Limits {
            max_unauthenticated,
            ..Limits::default()
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn at_the_cap_the_oldest_unauthenticated_connection_goes() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(3));
        let ids: Vec<u64> = ["a", "b", "c"]
            .into_iter()
            .map(|name| {
                let (id, evicted) = registry.admit(start, name);
                assert_eq!(evicted, None);
                id
            })
            .collect();
        assert_eq!(registry.unauthenticated(), 3);
        let (d, evicted) = registry.admit(start, "d");
        assert_eq!(evicted, Some("a"));
        assert_eq!(registry.verdict(ids[0], start), {
            Verdict::Close(Closing::Evicted)
        });
        let (_, evicted) = registry.admit(start, "e");
        assert_eq!(evicted, Some("b"));
        assert_eq!(registry.unauthenticated(), 3);
        assert_eq!(registry.len(), 3);
        // An authenticated connection neither counts nor goes.
        registry.authenticated(ids[2]);
        assert!(registry.is_authenticated(ids[2]));
        assert_eq!(registry.unauthenticated(), 2);
        let (_, evicted) = registry.admit(start, "f");
        assert_eq!(evicted, None);
        let (_, evicted) = registry.admit(start, "g");
        assert_eq!(evicted, Some("d"));
        assert!(registry.is_authenticated(ids[2]));
        assert!(!registry.is_authenticated(d));
        // Removing closes nothing else and frees a place.
        registry.remove(ids[2]);
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.unauthenticated(), 3);
    }

    #[test]
    fn shedding_takes_the_oldest_and_stops_when_all_have_authenticated() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(10));
        let (a, _) = registry.admit(start, "a");
        let (_, _) = registry.admit(start, "b");
        registry.authenticated(a);
        assert_eq!(registry.shed_oldest(), Some("b"));
        assert_eq!(registry.shed_oldest(), None);
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn a_head_must_be_complete_in_time_from_the_start_or_after_an_idle_spell() {
        let start = Instant::now();
        let limits = Limits {
            head_timeout: secs(5),
            idle_timeout: secs(120),
            ..Limits::default()
        };
        let mut registry = Registry::new(limits);
        let (id, _) = registry.admit(start, ());
        assert_eq!(
            registry.verdict(id, start),
            Verdict::Keep(Some(start + secs(5)))
        );
        // Bytes of the head do not extend it.
        assert!(!registry.bytes_arrived(id, start + secs(4)));
        assert_eq!(
            registry.verdict(id, start + secs(5)),
            Verdict::Close(Closing::HeadTimeout)
        );
        // A complete head in time: no deadline while the request is served.
        assert!(registry.request_started(id));
        assert_eq!(
            registry.verdict(id, start + secs(3600)),
            Verdict::Keep(None)
        );
        // Body bytes change nothing.
        assert!(!registry.bytes_arrived(id, start + secs(3600)));
        // Idle after the response; the next head starts with its first byte.
        let done = start + secs(4000);
        assert!(registry.request_finished(id, done));
        assert_eq!(
            registry.verdict(id, done),
            Verdict::Keep(Some(done + secs(120)))
        );
        assert_eq!(
            registry.verdict(id, done + secs(120)),
            Verdict::Close(Closing::IdleTimeout)
        );
        assert!(registry.bytes_arrived(id, done + secs(60)));
        assert_eq!(
            registry.verdict(id, done + secs(64)),
            Verdict::Keep(Some(done + secs(65)))
        );
        assert_eq!(
            registry.verdict(id, done + secs(65)),
            Verdict::Close(Closing::HeadTimeout)
        );
    }

    #[test]
    fn a_connection_with_a_request_in_flight_is_never_closed_for_time() {
        let start = Instant::now();
        let mut registry = Registry::new(Limits::default());
        let (id, _) = registry.admit(start, ());
        registry.request_started(id);
        // A request sent ahead while the first is answered.
        assert!(!registry.request_started(id));
        assert!(registry.busy(id));
        assert!(!registry.request_finished(id, start + secs(1)));
        assert_eq!(
            registry.verdict(id, start + secs(86_400)),
            Verdict::Keep(None)
        );
        assert!(registry.request_finished(id, start + secs(86_400)));
        assert!(!registry.busy(id));
    }

    #[test]
    fn unknown_connections_change_nothing() {
        let start = Instant::now();
        let mut registry: Registry<()> = Registry::new(Limits::default());
        assert!(!registry.bytes_arrived(7, start));
        assert!(!registry.request_started(7));
        assert!(!registry.request_finished(7, start));
        registry.authenticated(7);
        registry.remove(7);
        assert!(!registry.busy(7));
        assert_eq!(registry.verdict(7, start), Verdict::Close(Closing::Evicted));
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn the_cap_stays_within_a_quarter_of_the_open_files_limit() {
        let limits = Limits::default();
        assert_eq!(limits.within_open_files(None).max_unauthenticated, 256);
        assert_eq!(
            limits.within_open_files(Some(1 << 20)).max_unauthenticated,
            256
        );
        assert_eq!(
            limits.within_open_files(Some(1000)).max_unauthenticated,
            250
        );
        assert_eq!(limits.within_open_files(Some(3)).max_unauthenticated, 1);
        let small = Limits {
            max_unauthenticated: 4,
            ..limits
        };
        assert_eq!(small.within_open_files(Some(1000)).max_unauthenticated, 4);
    }

    #[test]
    fn the_command_lines_client_lets_an_idle_connection_go_before_the_daemon_does() {
        assert!(crate::client::POOL_IDLE < IDLE_TIMEOUT);
    }

    #[test]
    fn the_soft_open_files_limit_is_raised_to_the_hard_one() {
        assert_eq!(raised_open_files(1024, 4096), Some(4096));
        assert_eq!(raised_open_files(4096, 4096), None);
        assert_eq!(raised_open_files(8192, 4096), None);
        assert_eq!(raised_open_files(1024, u64::MAX), Some(1 << 20));
    }

    #[test]
    fn running_out_of_descriptors_sheds_a_connection_and_a_lost_peer_is_skipped() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(accept_failure(&os(libc::EMFILE)), AcceptFailure::Shed);
        assert_eq!(accept_failure(&os(libc::ENFILE)), AcceptFailure::Shed);
        assert_eq!(accept_failure(&os(libc::ENOBUFS)), AcceptFailure::Shed);
        assert_eq!(accept_failure(&os(libc::ECONNABORTED)), AcceptFailure::Skip);
        assert_eq!(accept_failure(&os(libc::EINTR)), AcceptFailure::Skip);
        assert_eq!(accept_failure(&os(libc::EINVAL)), AcceptFailure::Pause);
    }
}
