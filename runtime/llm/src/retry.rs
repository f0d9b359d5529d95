//! The retry policy of model calls (SPEC §2 errors): which failures are retried,
//! how often, and how long to wait.
//!
//! Pure: it decides from a [`ProviderError`], the number of retries already made,
//! whether anything of the response was delivered, and the server's
//! `x-should-retry` hint; the caller (`http`) sleeps and resends. It never looks
//! at HTTP or SSE itself.
//!
//! Rules: only while nothing of the response (text, thinking, tool call) has been
//! delivered; at most [`RetryPolicy::max_retries`] retries; retryable are rate
//! limits (429, but not an out-of-quota 429, which is [`ProviderErrorKind::Quota`]),
//! overload (529 or a mid-stream `overloaded_error`), server errors 500/502/503
//! and a mid-stream `api_error`, connection failures, idle timeouts and broken
//! streams. A server's `x-should-retry: true|false` overrides the kind. The delay
//! is the server's (`retry-after-ms`, `retry-after`) when it is in
//! (0, `MAX_SERVER_DELAY`]; otherwise exponential backoff from
//! `DEFAULT_BASE_DELAY` doubling per retry, capped at `DEFAULT_MAX_DELAY`, with
//! up to `JITTER_FRACTION` of it taken off at random so clients that failed
//! together do not retry together.

use std::time::Duration;

use super::{ProviderError, ProviderErrorKind};
use troupe_config::DEFAULT_MAX_RETRIES;

/// First backoff delay (the official Anthropic and OpenAI SDKs use the same).
pub(crate) const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(500);
/// Longest backoff delay (as in the official SDKs).
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(8);
/// Longest server-requested delay that is honoured; a longer or zero
/// `retry-after` falls back to backoff (ERRORS.md A4: the SDKs' rule).
pub(crate) const MAX_SERVER_DELAY: Duration = Duration::from_secs(60);
/// Largest share of a backoff delay removed as jitter.
pub(crate) const JITTER_FRACTION: f64 = 0.25;
/// SPEC §2: HTTP statuses of server errors that are retried (529 is
/// [`ProviderErrorKind::Overloaded`], 429 [`ProviderErrorKind::RateLimited`]).
pub(crate) const RETRYABLE_SERVER_STATUSES: [u16; 3] = [500, 502, 503];

/// How a provider retries failed requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (SPEC §2: 4 by default).
    pub max_retries: u32,
    /// Backoff before the first retry; doubled for each further retry.
    pub base_delay: Duration,
    /// Upper bound of a backoff delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::with_max_retries(DEFAULT_MAX_RETRIES)
    }
}

impl RetryPolicy {
    /// The default delays with the given retry count.
    pub fn with_max_retries(max_retries: u32) -> Self {
        Self {
            max_retries,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
        }
    }

    /// Whether to retry after `error`, and after how long. `retries_done` counts
    /// the retries already made, `delivered` says whether any content reached the
    /// caller, `server_hint` is the response's `x-should-retry` header, and
    /// `jitter` is a random number in [0, 1).
    pub fn decide(
        &self,
        error: &ProviderError,
        retries_done: u32,
        delivered: bool,
        server_hint: Option<bool>,
        jitter: f64,
    ) -> Option<Duration> {
        if delivered || retries_done >= self.max_retries {
            return None;
        }
        let retry = server_hint.unwrap_or_else(|| is_retryable(error));
        if !retry {
            return None;
        }
        match error.retry_after {
            Some(delay) if !delay.is_zero() && delay <= MAX_SERVER_DELAY => Some(delay),
            _ => Some(self.backoff(retries_done, jitter)),
        }
    }

    /// The backoff before retry number `retries_done + 1`: `base * 2^retries_done`
    /// capped at `max_delay`, minus up to `JITTER_FRACTION` of it.
    pub fn backoff(&self, retries_done: u32, jitter: f64) -> Duration {
        let factor = 2u32.saturating_pow(retries_done);
        let delay = self
            .base_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay));
        delay.mul_f64(1.0 - JITTER_FRACTION * jitter.clamp(0.0, 1.0))
    }
}

/// A failed attempt about to be retried: what the stream of a model call
/// yields before it waits and sends the request again, so the person watching
/// learns of it (the caller shows [`Retrying::notice`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrying {
    /// Which retry comes next, from 1.
    pub retry: u32,
    /// The most retries the policy makes.
    pub max_retries: u32,
    /// What the failed attempt ended in.
    pub kind: ProviderErrorKind,
    /// Its HTTP status, when it was an HTTP response.
    pub status: Option<u16>,
    /// How long before the request is sent again.
    pub delay: Duration,
}

impl Retrying {
    /// One short line for people:
    /// `retrying model request (retry 1/4): 529 overloaded; next in 1.2 s`.
    pub fn notice(&self) -> String {
        let status = self
            .status
            .map(|status| format!("{status} "))
            .unwrap_or_default();
        format!(
            "retrying model request (retry {}/{}): {status}{}; next in {:.1} s",
            self.retry,
            self.max_retries,
            self.kind.as_str().replace('_', " "),
            self.delay.as_secs_f64()
        )
    }
}

/// Whether an error of this kind (and status) is worth retrying when nothing was
/// delivered yet.
pub(crate) fn is_retryable(error: &ProviderError) -> bool {
    match error.kind {
        ProviderErrorKind::RateLimited
        | ProviderErrorKind::Overloaded
        | ProviderErrorKind::Connection
        | ProviderErrorKind::IdleTimeout
        | ProviderErrorKind::StreamBroken => true,
        // No status: a mid-stream `api_error`.
        ProviderErrorKind::Server => error
            .status
            .is_none_or(|status| RETRYABLE_SERVER_STATUSES.contains(&status)),
        ProviderErrorKind::PromptTooLong
        | ProviderErrorKind::Authentication
        | ProviderErrorKind::Quota
        | ProviderErrorKind::InvalidRequest
        | ProviderErrorKind::MalformedResponse
        | ProviderErrorKind::Configuration => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: ProviderErrorKind, status: Option<u16>) -> ProviderError {
        let mut e = ProviderError::new("p", kind, "m");
        e.status = status;
        e
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1_000),
        }
    }

    #[test]
    fn retryable_kinds_and_statuses() {
        use ProviderErrorKind::*;
        for (kind, status, expected) in [
            (RateLimited, Some(429), true),
            (Quota, Some(429), false),
            (Overloaded, Some(529), true),
            (Overloaded, None, true),
            (Server, Some(500), true),
            (Server, Some(502), true),
            (Server, Some(503), true),
            (Server, Some(501), false),
            (Server, Some(504), false),
            (Server, None, true),
            (Connection, None, true),
            (IdleTimeout, None, true),
            (StreamBroken, None, true),
            (PromptTooLong, Some(400), false),
            (Authentication, Some(401), false),
            (InvalidRequest, Some(400), false),
            (MalformedResponse, None, false),
            (Configuration, None, false),
        ] {
            assert_eq!(
                is_retryable(&err(kind, status)),
                expected,
                "{kind:?} {status:?}"
            );
        }
    }

    #[test]
    fn a_retry_is_one_short_line() {
        let retrying = Retrying {
            retry: 1,
            max_retries: 4,
            kind: ProviderErrorKind::Overloaded,
            status: Some(529),
            delay: Duration::from_millis(1_234),
        };
        assert_eq!(
            retrying.notice(),
            "retrying model request (retry 1/4): 529 overloaded; next in 1.2 s"
        );
        let retrying = Retrying {
            retry: 3,
            kind: ProviderErrorKind::IdleTimeout,
            status: None,
            delay: Duration::from_millis(40),
            ..retrying
        };
        assert_eq!(
            retrying.notice(),
            "retrying model request (retry 3/4): idle timeout; next in 0.0 s"
        );
    }

    #[test]
    fn never_after_delivery_and_at_most_max_retries() {
        let policy = fast();
        let e = err(ProviderErrorKind::Overloaded, None);
        assert!(policy.decide(&e, 0, true, None, 0.0).is_none());
        assert!(policy.decide(&e, 0, true, Some(true), 0.0).is_none());
        for done in 0..4 {
            assert!(policy.decide(&e, done, false, None, 0.0).is_some());
        }
        assert!(policy.decide(&e, 4, false, None, 0.0).is_none());
        let none = RetryPolicy {
            max_retries: 0,
            ..fast()
        };
        assert!(none.decide(&e, 0, false, None, 0.0).is_none());
    }

    #[test]
    fn server_hint_overrides_the_kind() {
        let policy = fast();
        let quota = err(ProviderErrorKind::Quota, Some(429));
        assert!(policy.decide(&quota, 0, false, Some(true), 0.0).is_some());
        let busy = err(ProviderErrorKind::Overloaded, Some(529));
        assert!(policy.decide(&busy, 0, false, Some(false), 0.0).is_none());
    }

    #[test]
    fn backoff_doubles_caps_and_jitters_down() {
        let policy = fast();
        assert_eq!(policy.backoff(0, 0.0), Duration::from_millis(100));
        assert_eq!(policy.backoff(1, 0.0), Duration::from_millis(200));
        assert_eq!(policy.backoff(2, 0.0), Duration::from_millis(400));
        assert_eq!(policy.backoff(3, 0.0), Duration::from_millis(800));
        assert_eq!(policy.backoff(4, 0.0), Duration::from_millis(1_000));
        assert_eq!(policy.backoff(40, 0.0), Duration::from_millis(1_000));
        assert_eq!(policy.backoff(0, 1.0), Duration::from_millis(75));
        let jittered = policy.backoff(1, 0.5);
        assert!(jittered < Duration::from_millis(200) && jittered >= Duration::from_millis(150));
        let defaults = RetryPolicy::default();
        assert_eq!(defaults.max_retries, DEFAULT_MAX_RETRIES);
        assert_eq!(defaults.backoff(0, 0.0), DEFAULT_BASE_DELAY);
        assert_eq!(defaults.backoff(10, 0.0), DEFAULT_MAX_DELAY);
    }

    #[test]
    fn server_delay_is_honoured_only_within_bounds() {
        let policy = fast();
        let with = |delay: Duration| {
            err(ProviderErrorKind::RateLimited, Some(429)).with_retry_after(Some(delay))
        };
        assert_eq!(
            policy.decide(&with(Duration::from_secs(3)), 0, false, None, 0.9),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            policy.decide(&with(MAX_SERVER_DELAY), 0, false, None, 0.0),
            Some(MAX_SERVER_DELAY)
        );
        assert_eq!(
            policy.decide(&with(Duration::from_secs(61)), 0, false, None, 0.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            policy.decide(&with(Duration::ZERO), 1, false, None, 0.0),
            Some(Duration::from_millis(200))
        );
    }
}
