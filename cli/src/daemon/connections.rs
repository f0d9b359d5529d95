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
//! connection that arrives at the cap closes an older one that has not
//! authenticated, so connections that never send a token cannot fill the
//! daemon ([`Registry::admit`]). Only a connection that has been *seen* —
//! whose task has read what it sent first — is closed for a newer one, so a
//! client that sends its request with the token at once authenticates the
//! first time its connection is read, however many connections arrived
//! since; and the one closed is the oldest *waiting*: no request in flight,
//! and nothing its task has not read yet.
//!
//! No connection with a request in flight is ever closed — not for time, not
//! for a newer one, not when the daemon stops — so a client whose
//! connection closes before an answer may send its request again: it was
//! never started. When only connections being read or answered could make
//! room, the cap is exceeded for that time, up to twice the cap; there, and
//! while as many connections as the cap wait to be seen or to be closed, the
//! daemon accepts no more ([`Registry::may_accept`]). Connections that have
//! not authenticated never hold more than three times the cap of
//! descriptors.

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

/// How many connections the kernel queues until the daemon accepts them
/// (within `net.core.somaxconn`). A connection that finds the queue full
/// waits for its client to retry, a second or more, so the queue is made long
/// enough for a burst of connections to fit.
pub(crate) const LISTEN_BACKLOG: u32 = 4096;

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

/// What a connection seen without authenticating is doing, least first:
/// the order in which such connections make room for newer ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Doing {
    /// Everything it sent has been read, without a complete request (part
    /// of a head, nothing yet, or nothing since its last answer).
    Waiting,
    /// Bytes have arrived that its task has not read yet.
    Unread,
    /// A request of it is being answered: never closed for a newer one.
    Answered,
}

impl Doing {
    /// What a connection in `phase` is doing, with bytes `unread` or not.
    pub(crate) fn of(phase: Phase, unread: bool) -> Self {
        match (phase, unread) {
            (Phase::Busy { .. }, _) => Doing::Answered,
            (_, true) => Doing::Unread,
            (_, false) => Doing::Waiting,
        }
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
    /// Ids of the connections not yet seen (none has authenticated); ids
    /// grow with every connection accepted, so the first is the oldest.
    unseen: BTreeSet<u64>,
    /// Ids of the connections seen that have not authenticated: the ones a
    /// newer connection may close, oldest first.
    evictable: BTreeSet<u64>,
    /// Ids of the connections closed for a newer one whose tasks have not
    /// closed them yet.
    closing: BTreeSet<u64>,
}

impl<H> Registry<H> {
    /// An empty registry applying `limits`.
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            next_id: 0,
            connections: HashMap::new(),
            unseen: BTreeSet::new(),
            evictable: BTreeSet::new(),
            closing: BTreeSet::new(),
        }
    }

    /// True when the daemon may accept the next connection: fewer than the
    /// cap wait to be seen or to be closed, and below twice the cap of
    /// unauthenticated connections, or one there that is not being answered
    /// can make room.
    pub(crate) fn may_accept(&self) -> bool {
        let cap = self.limits.max_unauthenticated;
        self.unseen.len() + self.closing.len() < cap
            && (self.unauthenticated() < cap.saturating_mul(2)
                || self.evictable.iter().any(|id| !self.busy(*id)))
    }

    /// Registers a connection accepted at `now`: its id, and the handle of
    /// the connection it replaces when it reaches the cap (removed from the
    /// registry; its task must close it).
    ///
    /// That is the oldest connection seen without authenticating that is
    /// waiting ([`Doing::Waiting`]): no request in flight (a `GET /healthz`
    /// needs no token) and nothing its task has not read (`unread` says
    /// which have bytes waiting: a client's head that arrived after its
    /// first read). When none is waiting, none is replaced and the cap is
    /// exceeded while they are read or answered, up to twice the cap, where
    /// the oldest one not being answered goes all the same.
    pub(crate) fn admit(
        &mut self,
        now: Instant,
        handle: H,
        unread: impl Fn(&H) -> bool,
    ) -> (u64, Option<H>) {
        let cap = self.limits.max_unauthenticated;
        let unauthenticated = self.unauthenticated();
        let victim = if unauthenticated < cap {
            None
        } else if unauthenticated < cap.saturating_mul(2) {
            self.doing_least(&unread, Doing::Waiting)
        } else {
            self.doing_least(&unread, Doing::Unread)
        };
        let evicted = victim.and_then(|victim| self.evict(victim));
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
        self.unseen.insert(id);
        (id, evicted)
    }

    /// Removes an unauthenticated connection not being answered when
    /// descriptors ran out: the one seen doing least, else the oldest not
    /// yet seen; its handle, for its task to close it (`None`: there is
    /// none).
    pub(crate) fn shed_oldest(&mut self, unread: impl Fn(&H) -> bool) -> Option<H> {
        let victim = self
            .doing_least(&unread, Doing::Unread)
            .or_else(|| self.unseen.first().copied())?;
        self.evict(victim)
    }

    /// The oldest of the connections seen without authenticating that do
    /// least, if that is no more than `most`.
    fn doing_least(&self, unread: &impl Fn(&H) -> bool, most: Doing) -> Option<u64> {
        let mut least: Option<(Doing, u64)> = None;
        for &id in &self.evictable {
            let Some(entry) = self.connections.get(&id) else {
                continue;
            };
            let doing = Doing::of(entry.phase, unread(&entry.handle));
            if doing <= most && least.is_none_or(|(fewest, _)| doing < fewest) {
                least = Some((doing, id));
                if doing == Doing::Waiting {
                    break;
                }
            }
        }
        least.map(|(_, id)| id)
    }

    /// Takes connection `id` out, to be closed by its task; its handle.
    fn evict(&mut self, id: u64) -> Option<H> {
        let entry = self.connections.remove(&id)?;
        self.unseen.remove(&id);
        self.evictable.remove(&id);
        self.closing.insert(id);
        Some(entry.handle)
    }

    /// Connection `id` has been read for the first time (what it had sent
    /// by then was read, and a complete request in it served): from now on
    /// a newer connection may close it if it has not authenticated.
    pub(crate) fn seen(&mut self, id: u64) {
        if self.unseen.remove(&id)
            && self
                .connections
                .get(&id)
                .is_some_and(|entry| !entry.authenticated)
        {
            self.evictable.insert(id);
        }
    }

    /// Connection `id` sent a request that passed the token check.
    pub(crate) fn authenticated(&mut self, id: u64) {
        if let Some(entry) = self.connections.get_mut(&id) {
            entry.authenticated = true;
            self.unseen.remove(&id);
            self.evictable.remove(&id);
        }
    }

    /// Bytes arrived on connection `id` at `now`. True when its deadline
    /// changed (its task must look again).
    pub(crate) fn bytes_arrived(&mut self, id: u64, now: Instant) -> bool {
        self.change(id, |phase| phase.after_bytes(now))
    }

    /// A complete request head arrived on connection `id`: whether its
    /// deadline changed, or `None` when the connection is being closed (for
    /// a newer one), and the request must not start.
    pub(crate) fn request_started(&mut self, id: u64) -> Option<bool> {
        self.connections
            .contains_key(&id)
            .then(|| self.change(id, Phase::after_request_started))
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
        self.unseen.remove(&id);
        self.evictable.remove(&id);
        self.closing.remove(&id);
    }

    /// Open connections.
    pub(crate) fn len(&self) -> usize {
        self.connections.len()
    }

    /// Open connections that have not authenticated.
    pub(crate) fn unauthenticated(&self) -> usize {
        self.unseen.len() + self.evictable.len()
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

    fn none_unread<H>(_: &H) -> bool {
        false
    }

    /// Connections named `names` accepted at `now` and read once.
    fn seen_all(registry: &mut Registry<&'static str>, now: Instant, names: &[&'static str]) {
        for name in names {
            let (id, evicted) = registry.admit(now, name, none_unread);
            assert_eq!(evicted, None, "{name}");
            registry.seen(id);
        }
    }

    #[test]
    fn at_the_cap_the_oldest_unauthenticated_connection_seen_goes() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(3));
        seen_all(&mut registry, start, &["a", "b", "c"]);
        assert_eq!(registry.unauthenticated(), 3);
        let (d, evicted) = registry.admit(start, "d", none_unread);
        assert_eq!(evicted, Some("a"));
        assert_eq!(registry.verdict(0, start), Verdict::Close(Closing::Evicted));
        // A request read on it meanwhile is not started.
        assert_eq!(registry.request_started(0), None);
        registry.seen(d);
        let (e, evicted) = registry.admit(start, "e", none_unread);
        assert_eq!(evicted, Some("b"));
        registry.seen(e);
        assert_eq!(registry.unauthenticated(), 3);
        assert_eq!(registry.len(), 3);
        // An authenticated connection (`c`, id 2) neither counts nor goes.
        registry.authenticated(2);
        assert!(registry.is_authenticated(2));
        assert_eq!(registry.unauthenticated(), 2);
        let (f, evicted) = registry.admit(start, "f", none_unread);
        assert_eq!(evicted, None);
        registry.seen(f);
        let (_, evicted) = registry.admit(start, "g", none_unread);
        assert_eq!(evicted, Some("d"));
        assert!(registry.is_authenticated(2));
        assert!(!registry.is_authenticated(d));
        // Removing closes nothing else and frees a place.
        registry.remove(2);
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.unauthenticated(), 3);
    }

    #[test]
    fn a_connection_not_yet_seen_is_never_closed_for_a_newer_one() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(2));
        let (owner, _) = registry.admit(start, "owner", none_unread);
        let (a, _) = registry.admit(start, "a", none_unread);
        // Two wait to be read: no more are accepted meanwhile.
        assert!(!registry.may_accept());
        registry.seen(a);
        assert!(registry.may_accept());
        // At the cap, the owner's connection (not yet read) stays; the one
        // seen goes although it is newer.
        let (b, evicted) = registry.admit(start, "b", none_unread);
        assert_eq!(evicted, Some("a"));
        // Read for the first time, the owner's request had the token.
        registry.authenticated(owner);
        registry.seen(owner);
        assert_eq!(registry.unauthenticated(), 1);
        // `a` is not closed yet and `b` not read: no more are accepted.
        assert!(!registry.may_accept());
        registry.remove(a);
        registry.seen(b);
        assert!(registry.may_accept());
        let (_, evicted) = registry.admit(start, "c", none_unread);
        assert_eq!(evicted, None);
        let (_, evicted) = registry.admit(start, "d", none_unread);
        assert_eq!(evicted, Some("b"));
        assert!(registry.is_authenticated(owner));
    }

    #[test]
    fn a_connection_with_bytes_not_yet_read_is_passed_over_up_to_twice_the_cap() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(3));
        seen_all(&mut registry, start, &["a", "b", "c"]);
        // `a`'s request arrived after its first read and waits for its task.
        let (_, evicted) = registry.admit(start, "d", |name: &&str| *name == "a");
        assert_eq!(evicted, Some("b"));
        // When every one seen has bytes waiting, none goes and the cap is
        // exceeded, up to twice the cap; there the oldest goes all the same.
        let mut registry = Registry::new(limits(3));
        seen_all(&mut registry, start, &["a", "b", "c"]);
        for name in ["d", "e", "f"] {
            let (id, evicted) = registry.admit(start, name, |_: &&str| true);
            assert_eq!(evicted, None);
            registry.seen(id);
        }
        assert_eq!(registry.unauthenticated(), 6);
        assert!(registry.may_accept());
        let (_, evicted) = registry.admit(start, "g", |_: &&str| true);
        assert_eq!(evicted, Some("a"));
        assert_eq!(registry.unauthenticated(), 6);
    }

    #[test]
    fn a_connection_with_a_request_in_flight_is_never_closed_for_a_newer_one() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(2));
        seen_all(&mut registry, start, &["a", "b"]);
        // `a` (id 0) is being answered (`GET /healthz` needs no token).
        registry.request_started(0);
        let (c, evicted) = registry.admit(start, "c", none_unread);
        assert_eq!(evicted, Some("b"));
        registry.seen(c);
        registry.request_started(c);
        // Every one seen is being answered: none goes, up to twice the cap.
        registry.remove(1);
        for name in ["d", "e"] {
            let (id, evicted) = registry.admit(start, name, none_unread);
            assert_eq!(evicted, None);
            registry.seen(id);
            registry.request_started(id);
        }
        assert_eq!(registry.unauthenticated(), 4);
        // There, no more are accepted until one has been answered.
        assert!(!registry.may_accept());
        registry.request_finished(0, start);
        assert!(registry.may_accept());
        let (_, evicted) = registry.admit(start, "f", none_unread);
        assert_eq!(evicted, Some("a"));
        // Out of descriptors, none being answered goes either.
        assert_eq!(registry.shed_oldest(none_unread), Some("f"));
        assert_eq!(registry.shed_oldest(none_unread), None);
    }

    #[test]
    fn what_a_connection_is_doing_orders_which_makes_room_first() {
        let start = Instant::now();
        let head = Phase::Head { since: start };
        let idle = Phase::Idle { since: start };
        let busy = Phase::Busy { requests: 1 };
        assert_eq!(Doing::of(head, false), Doing::Waiting);
        assert_eq!(Doing::of(idle, false), Doing::Waiting);
        assert_eq!(Doing::of(idle, true), Doing::Unread);
        assert_eq!(Doing::of(busy, true), Doing::Answered);
        assert!(Doing::Waiting < Doing::Unread && Doing::Unread < Doing::Answered);
    }

    #[test]
    fn shedding_prefers_a_connection_seen_and_stops_when_all_have_authenticated() {
        let start = Instant::now();
        let mut registry = Registry::new(limits(10));
        let (a, _) = registry.admit(start, "a", none_unread);
        let (_, _) = registry.admit(start, "b", none_unread);
        let (c, _) = registry.admit(start, "c", none_unread);
        registry.authenticated(a);
        registry.seen(c);
        assert_eq!(registry.shed_oldest(none_unread), Some("c"));
        assert_eq!(registry.shed_oldest(none_unread), Some("b"));
        assert_eq!(registry.shed_oldest(none_unread), None);
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn connections_without_the_token_never_hold_more_than_three_times_the_cap() {
        let start = Instant::now();
        let cap = 8;
        // Connections keep arriving; each is read at once, and the tasks of
        // the ones closed for newer ones only run when the daemon may accept
        // no more. Either each is left waiting, or each has a request in
        // flight that is answered only when nothing else can be accepted.
        for answered in [false, true] {
            let mut registry = Registry::new(limits(cap));
            let mut open = std::collections::BTreeSet::new();
            let mut closing = Vec::new();
            for n in 0..100u64 {
                if !registry.may_accept() {
                    for id in closing.drain(..) {
                        registry.remove(id);
                        open.remove(&id);
                    }
                }
                if !registry.may_accept() {
                    let oldest = *open.first().unwrap();
                    registry.request_finished(oldest, start);
                }
                assert!(registry.may_accept());
                // The handle is the connection's number, which is also its id.
                let (id, evicted) = registry.admit(start, n, none_unread);
                assert_eq!(id, n);
                open.insert(id);
                closing.extend(evicted);
                registry.seen(id);
                if answered {
                    registry.request_started(id);
                }
                let (most, most_open) = if answered { (2, 3) } else { (1, 2) };
                assert!(registry.unauthenticated() <= most * cap);
                assert!(open.len() <= most_open * cap, "{} open", open.len());
            }
        }
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
        let (id, _) = registry.admit(start, (), none_unread);
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
        assert_eq!(registry.request_started(id), Some(true));
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
        let (id, _) = registry.admit(start, (), none_unread);
        registry.request_started(id);
        // A request sent ahead while the first is answered.
        assert_eq!(registry.request_started(id), Some(false));
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
        assert_eq!(registry.request_started(7), None);
        assert!(!registry.request_finished(7, start));
        registry.authenticated(7);
        registry.seen(7);
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
