//! Who may see the dashboard: one-time login codes, browser sessions held
//! in an `HttpOnly` cookie, the CSRF token of each session, and the headers
//! every dashboard answer carries.
//!
//! The daemon's token never reaches the browser. `troupe dashboard`, which
//! holds the token, asks the daemon for a login code (a fresh random value,
//! valid for [`CODE_LIFETIME`] and for one exchange only) and prints it in
//! the fragment of a URL, which browsers never send to a server. The login
//! script posts the code once to [`super::LOGIN_PATH`]; the daemon forgets
//! the code and answers with a session cookie (`HttpOnly; SameSite=Strict;
//! Path=/`) naming a session that lives in the daemon's memory only. A URL
//! copied from a browser's history is therefore worth nothing: its code was
//! spent on first use or expired. Every state-changing request must carry
//! the session's CSRF token in [`CSRF_HEADER`] and an `Origin` of the
//! daemon's own.
//!
//! Everything here except the store's lock is pure and tested below.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::daemon::guard::constant_time_eq;

/// How long a login code can be exchanged.
pub(crate) const CODE_LIFETIME: Duration = Duration::from_secs(120);

/// How long a browser session lasts without being used.
pub(crate) const SESSION_IDLE_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// The most login codes waiting at once: the oldest is dropped past it.
pub(crate) const MAX_CODES: usize = 16;

/// The most browser sessions at once: the least recently used is dropped
/// past it.
pub(crate) const MAX_SESSIONS: usize = 32;

/// The cookie naming a browser session.
pub(crate) const COOKIE_NAME: &str = "troupe_dashboard";

/// The request header carrying the CSRF token.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// The Content-Security-Policy of every dashboard answer: scripts, styles
/// and connections only from the daemon itself, no inline script or style,
/// no plugin, no framing, forms posting only back here.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
frame-ancestors 'none'";

/// The security headers every dashboard answer carries, with their values.
pub(crate) const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

/// A fresh random secret: 32 bytes as hex.
pub(crate) fn random_secret() -> String {
    (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// A login code waiting to be exchanged.
struct LoginCode {
    secret: String,
    expires: Instant,
}

/// A browser session.
struct BrowserSession {
    id: String,
    csrf: String,
    last_used: Instant,
}

/// What a request holding a live session cookie may use: the session's
/// CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionView {
    /// The token state-changing requests must carry.
    pub csrf: String,
}

/// A session just opened by a login: its cookie value and CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The cookie's value.
    pub session_id: String,
    /// The session's CSRF token.
    pub csrf: String,
}

/// The login codes and browser sessions of one daemon, in memory only: a
/// daemon that restarts forgets them, and its browsers log in again.
#[derive(Default)]
pub(crate) struct Access {
    inner: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    codes: Vec<LoginCode>,
    sessions: Vec<BrowserSession>,
}

impl Access {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a login code valid until `now + CODE_LIFETIME`.
    pub(crate) fn issue_code(&self, now: Instant) -> String {
        let secret = random_secret();
        let mut held = self.held();
        held.codes.retain(|code| code.expires > now);
        if held.codes.len() >= MAX_CODES {
            held.codes.remove(0);
        }
        held.codes.push(LoginCode {
            secret: secret.clone(),
            expires: now + CODE_LIFETIME,
        });
        secret
    }

    /// Exchanges `code` for a new session: `None` when it is unknown,
    /// spent or expired. The code is spent either way once it matched.
    pub(crate) fn redeem(&self, code: &str, now: Instant) -> Option<Grant> {
        let mut held = self.held();
        held.codes.retain(|waiting| waiting.expires > now);
        let found = held
            .codes
            .iter()
            .position(|waiting| constant_time_eq(waiting.secret.as_bytes(), code.as_bytes()))?;
        held.codes.remove(found);
        held.sessions.retain(|session| alive(session, now));
        if held.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = held
                .sessions
                .iter()
                .enumerate()
                .min_by_key(|(_, session)| session.last_used)
                .map(|(index, _)| index)
        {
            held.sessions.remove(oldest);
        }
        let grant = Grant {
            session_id: random_secret(),
            csrf: random_secret(),
        };
        held.sessions.push(BrowserSession {
            id: grant.session_id.clone(),
            csrf: grant.csrf.clone(),
            last_used: now,
        });
        Some(grant)
    }

    /// The live session the cookie value `id` names, marked used at `now`.
    pub(crate) fn session(&self, id: &str, now: Instant) -> Option<SessionView> {
        let mut held = self.held();
        held.sessions.retain(|session| alive(session, now));
        let session = held
            .sessions
            .iter_mut()
            .find(|session| constant_time_eq(session.id.as_bytes(), id.as_bytes()))?;
        session.last_used = now;
        Some(SessionView {
            csrf: session.csrf.clone(),
        })
    }
}

fn alive(session: &BrowserSession, now: Instant) -> bool {
    now.saturating_duration_since(session.last_used) < SESSION_IDLE_LIFETIME
}

/// The value of cookie `name` in a `Cookie` header, if it is there.
pub(crate) fn cookie_value<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
}

/// The `Set-Cookie` value that holds session `id`: not readable by scripts,
/// never sent by another site's requests, for the whole daemon.
pub(crate) fn session_cookie(id: &str) -> String {
    format!("{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/")
}

/// Whether a state-changing request may go on: it names an `Origin` (which
/// [`crate::daemon::guard::check_origin`] has already found to be the
/// daemon's) and carries the session's CSRF token.
pub(crate) fn state_change_allowed(
    origin: Option<&str>,
    csrf_given: Option<&str>,
    session: &SessionView,
) -> Result<(), &'static str> {
    if origin.is_none() {
        return Err("a state-changing request must name its Origin");
    }
    match csrf_given {
        Some(given) if constant_time_eq(given.as_bytes(), session.csrf.as_bytes()) => Ok(()),
        Some(_) => Err("the CSRF token does not match this session"),
        None => Err("the request carries no CSRF token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_opens_one_session_once_and_only_before_it_expires() {
        let access = Access::default();
        let now = Instant::now();
        let code = access.issue_code(now);
        assert_eq!(code.len(), 64);
        assert!(access.redeem("wrong", now).is_none());
        let grant = access.redeem(&code, now).expect("the code is good once");
        assert!(access.redeem(&code, now).is_none(), "spent");
        assert_ne!(grant.session_id, grant.csrf);
        let view = access.session(&grant.session_id, now).unwrap();
        assert_eq!(view.csrf, grant.csrf);
        assert!(access.session(&grant.csrf, now).is_none());
        assert!(access.session("", now).is_none());

        let late = access.issue_code(now);
        assert!(access.redeem(&late, now + CODE_LIFETIME).is_none());
    }

    #[test]
    fn sessions_expire_unused_and_the_least_recently_used_makes_room() {
        let access = Access::default();
        let now = Instant::now();
        let first = access.redeem(&access.issue_code(now), now).unwrap();
        assert!(
            access
                .session(&first.session_id, now + SESSION_IDLE_LIFETIME)
                .is_none()
        );
        let mut grants = Vec::new();
        for n in 0..MAX_SESSIONS + 1 {
            let at = now + Duration::from_secs(n as u64);
            grants.push(access.redeem(&access.issue_code(at), at).unwrap());
        }
        let later = now + Duration::from_secs(100);
        assert!(access.session(&grants[0].session_id, later).is_none());
        assert!(access.session(&grants[1].session_id, later).is_some());
        // Codes are bounded too: the oldest goes.
        let codes: Vec<String> = (0..MAX_CODES + 1).map(|_| access.issue_code(now)).collect();
        assert!(access.redeem(&codes[0], now).is_none());
        assert!(access.redeem(&codes[MAX_CODES], now).is_some());
    }

    #[test]
    fn the_cookie_is_found_by_its_exact_name() {
        let header = "other=1; troupe_dashboard_x=no; troupe_dashboard=abc ; z=2";
        assert_eq!(cookie_value(header, COOKIE_NAME), Some("abc"));
        assert_eq!(cookie_value("troupe_dashboardx=1", COOKIE_NAME), None);
        assert_eq!(cookie_value("", COOKIE_NAME), None);
        let set = session_cookie("abc");
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(set.split("; ").any(|part| part == attribute), "{set}");
        }
    }

    #[test]
    fn a_state_change_needs_an_origin_and_the_sessions_csrf_token() {
        let session = SessionView {
            csrf: "c".repeat(64),
        };
        let token = session.csrf.clone();
        let origin = Some("http://127.0.0.1:1");
        assert!(state_change_allowed(origin, Some(&token), &session).is_ok());
        assert!(state_change_allowed(None, Some(&token), &session).is_err());
        assert!(state_change_allowed(origin, None, &session).is_err());
        assert!(state_change_allowed(origin, Some("c"), &session).is_err());
    }

    #[test]
    fn the_policy_forbids_inline_script_and_framing() {
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self'"));
    }
}
