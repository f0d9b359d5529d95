//! When a daemon started for a while has nothing left to do: no run in
//! progress, no event stream open, and no request for the idle period. The
//! decision is pure; the daemon checks it periodically.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What the daemon is doing, as the idle check sees it.
#[derive(Debug)]
pub(crate) struct Activity {
    last_request: Mutex<Instant>,
    open_streams: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            last_request: Mutex::new(Instant::now()),
            open_streams: AtomicUsize::new(0),
        }
    }
}

impl Activity {
    /// A request arrived.
    pub(crate) fn touch(&self) {
        let mut last = self.last_request.lock().unwrap_or_else(|p| p.into_inner());
        *last = Instant::now();
    }

    /// When the last request arrived.
    pub(crate) fn last_request(&self) -> Instant {
        *self.last_request.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An event stream opened; it counts until the guard is dropped.
    pub(crate) fn stream_opened(self: &std::sync::Arc<Self>) -> StreamGuard {
        self.open_streams.fetch_add(1, Ordering::SeqCst);
        StreamGuard(self.clone())
    }

    /// Event streams open now.
    pub(crate) fn open_streams(&self) -> usize {
        self.open_streams.load(Ordering::SeqCst)
    }
}

/// Counts one open event stream while it lives.
#[derive(Debug)]
pub(crate) struct StreamGuard(std::sync::Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// True when a daemon with idle limit `idle` should exit at `now`: nothing
/// runs, nobody follows a stream, and the last request is `idle` old.
pub(crate) fn idle_for_too_long(
    now: Instant,
    last_request: Instant,
    idle: Duration,
    runs_in_progress: usize,
    open_streams: usize,
) -> bool {
    runs_in_progress == 0
        && open_streams == 0
        && now.saturating_duration_since(last_request) >= idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_daemon_with_nothing_to_do_for_the_whole_period_is_idle() {
        let start = Instant::now();
        let idle = Duration::from_secs(600);
        let later = start + Duration::from_secs(601);
        assert!(idle_for_too_long(later, start, idle, 0, 0));
        assert!(!idle_for_too_long(
            start + Duration::from_secs(599),
            start,
            idle,
            0,
            0
        ));
        assert!(!idle_for_too_long(later, start, idle, 1, 0));
        assert!(!idle_for_too_long(later, start, idle, 0, 1));
        // A clock that reads earlier than the last request is not idle.
        assert!(!idle_for_too_long(start, later, idle, 0, 0));
    }

    #[test]
    fn streams_count_while_open_and_touch_when_closed() {
        let activity = std::sync::Arc::new(Activity::default());
        let before = activity.last_request();
        let guard = activity.stream_opened();
        assert_eq!(activity.open_streams(), 1);
        drop(guard);
        assert_eq!(activity.open_streams(), 0);
        assert!(activity.last_request() >= before);
    }
}
