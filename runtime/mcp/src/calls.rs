//! The calls in flight on one connection (SPEC §8), so that what a server
//! sends during a call reaches the run that made it: each [`McpTool`] call
//! enters a [`CallScope`] for its duration (its request id, its progress
//! token, and its run's [`CallReach`]); progress notifications find their
//! call by token, and an elicitation finds the call that asks.
//!
//! Which call an elicitation belongs to: over Streamable HTTP a request that
//! arrives on a call's own response stream names that call; otherwise
//! (stdio, or the standalone stream) the earliest call still in flight is
//! asked ([`CallScopes::asking`]). With no call in flight nobody is asked.
//!
//! Progress becomes notices at a bounded rate (`ProgressGate`): the first
//! notification of a call, the one that reaches its total, and otherwise at
//! most one per `PROGRESS_NOTICE_INTERVAL`, never more than
//! `MAX_PROGRESS_NOTICES` per call — a server flooding notifications cannot
//! swamp the event log.
//!
//! [`McpTool`]: super::tool::McpTool

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{ProgressToken, RequestId};

use troupe_tools::CallReach;

/// Progress notices of one call are at least this far apart (except its last).
pub(crate) const PROGRESS_NOTICE_INTERVAL: Duration = Duration::from_secs(1);

/// Progress notices one call shows at most.
pub(crate) const MAX_PROGRESS_NOTICES: u32 = 50;

/// Characters of a progress message kept.
const PROGRESS_MESSAGE_CHARS: usize = 200;

/// `notice.code` of an MCP server's progress.
pub const NOTICE_MCP_PROGRESS: &str = "mcp_progress";

/// `notice.code` of an MCP server's question and how it was answered.
pub(crate) const NOTICE_MCP_ELICITATION: &str = "mcp_elicitation";

/// Which progress notifications of one call become notices.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProgressGate {
    shown: u32,
    last: Option<Duration>,
    finished: bool,
}

impl ProgressGate {
    /// Whether the notification at `at` (time since the call started) with
    /// `progress` of `total` is shown; records it when it is.
    pub(crate) fn admit(&mut self, at: Duration, progress: f64, total: Option<f64>) -> bool {
        if self.shown >= MAX_PROGRESS_NOTICES {
            return false;
        }
        let reaches_total = total.is_some_and(|total| progress >= total);
        let due = match self.last {
            None => true,
            Some(last) => at.saturating_sub(last) >= PROGRESS_NOTICE_INTERVAL,
        };
        let show = due || (reaches_total && !self.finished);
        if show {
            self.shown += 1;
            self.last = Some(at);
            self.finished |= reaches_total;
        }
        show
    }
}

/// The notice for a progress notification of `server`.
pub(crate) fn progress_text(
    server: &str,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) -> String {
    let mut text = match total {
        Some(total) => format!("MCP server {server}: progress {progress}/{total}"),
        None => format!("MCP server {server}: progress {progress}"),
    };
    if let Some(message) = message.map(str::trim).filter(|m| !m.is_empty()) {
        text.push_str(" — ");
        text.extend(
            message.chars().take(PROGRESS_MESSAGE_CHARS).map(
                |c| {
                    if c.is_control() { ' ' } else { c }
                },
            ),
        );
    }
    text
}

/// One call in flight.
pub struct CallScope {
    id: u64,
    request: RequestId,
    progress: ProgressToken,
    reach: Option<Arc<dyn CallReach>>,
    started: Instant,
    gate: Mutex<ProgressGate>,
}

impl CallScope {
    /// The run the call belongs to.
    pub fn reach(&self) -> Option<&Arc<dyn CallReach>> {
        self.reach.as_ref()
    }

    /// Whether a progress notification received now is shown.
    pub fn admit_progress(&self, progress: f64, total: Option<f64>) -> bool {
        let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        gate.admit(self.started.elapsed(), progress, total)
    }
}

/// The calls in flight on one connection, oldest first.
#[derive(Default)]
pub struct CallScopes {
    next: Mutex<u64>,
    scopes: Mutex<Vec<Arc<CallScope>>>,
}

impl std::fmt::Debug for CallScopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("CallScopes")
            .field("in_flight", &count)
            .finish()
    }
}

impl CallScopes {
    /// Enters the scope of a call; it lasts until the guard is dropped.
    pub fn enter(
        self: &Arc<Self>,
        request: RequestId,
        progress: ProgressToken,
        reach: Option<Arc<dyn CallReach>>,
    ) -> ScopeGuard {
        let id = {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            *next += 1;
            *next
        };
        let scope = Arc::new(CallScope {
            id,
            request,
            progress,
            reach,
            started: Instant::now(),
            gate: Mutex::new(ProgressGate::default()),
        });
        self.scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(scope);
        ScopeGuard {
            scopes: self.clone(),
            id,
        }
    }

    /// The call a server's request belongs to: the one whose response
    /// stream carried it (`origin`), else the earliest in flight.
    pub fn asking(&self, origin: Option<&RequestId>) -> Option<Arc<CallScope>> {
        let scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        origin
            .and_then(|origin| scopes.iter().find(|s| &s.request == origin))
            .or_else(|| scopes.first())
            .cloned()
    }

    /// The call a progress token was sent with.
    pub fn by_progress(&self, token: &ProgressToken) -> Option<Arc<CallScope>> {
        let scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        scopes.iter().find(|s| &s.progress == token).cloned()
    }
}

/// Leaves a call's scope when dropped.
pub struct ScopeGuard {
    scopes: Arc<CallScopes>,
    id: u64,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        self.scopes
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|scope| scope.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn the_first_and_the_last_are_shown_and_the_rest_at_most_once_a_second() {
        let mut gate = ProgressGate::default();
        assert!(gate.admit(ms(500), 1.0, Some(4.0)));
        assert!(!gate.admit(ms(1000), 2.0, Some(4.0)));
        assert!(gate.admit(ms(1500), 3.0, Some(4.0)));
        assert!(gate.admit(ms(1600), 4.0, Some(4.0)));
        // A repeated "done" is rate limited like any other.
        assert!(!gate.admit(ms(1700), 4.0, Some(4.0)));
    }

    #[test]
    fn a_flood_shows_a_bounded_number_of_notices() {
        let mut gate = ProgressGate::default();
        let shown = (0..100_000u64)
            .filter(|i| gate.admit(ms(*i), *i as f64, None))
            .count();
        assert_eq!(shown as u32, MAX_PROGRESS_NOTICES);
        let mut gate = ProgressGate::default();
        let shown = (0..10_000u64)
            .filter(|i| gate.admit(ms(*i / 10), *i as f64, None))
            .count();
        // 1 s of notifications: the first, then one per second.
        assert_eq!(shown, 1);
    }

    #[test]
    fn progress_text_names_the_server_and_shortens_the_message() {
        assert_eq!(
            progress_text("ev", 2.0, Some(4.0), Some("half\nway")),
            "MCP server ev: progress 2/4 — half way"
        );
        assert_eq!(
            progress_text("ev", 0.5, None, None),
            "MCP server ev: progress 0.5"
        );
        let long = progress_text("ev", 1.0, None, Some(&"x".repeat(1000)));
        assert!(long.chars().count() < 260);
    }

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    #[test]
    fn a_request_goes_to_its_own_call_else_to_the_earliest_in_flight() {
        let scopes = Arc::new(CallScopes::default());
        assert!(scopes.asking(None).is_none());
        let first = scopes.enter(id(1), token(1), None);
        let second = scopes.enter(id(2), token(2), None);
        assert_eq!(scopes.asking(None).map(|s| s.request.clone()), Some(id(1)));
        assert_eq!(
            scopes.asking(Some(&id(2))).map(|s| s.request.clone()),
            Some(id(2))
        );
        assert_eq!(
            scopes.asking(Some(&id(9))).map(|s| s.request.clone()),
            Some(id(1))
        );
        assert_eq!(
            scopes.by_progress(&token(2)).map(|s| s.request.clone()),
            Some(id(2))
        );
        drop(first);
        assert_eq!(scopes.asking(None).map(|s| s.request.clone()), Some(id(2)));
        drop(second);
        assert!(scopes.asking(None).is_none());
        assert!(scopes.by_progress(&token(2)).is_none());
    }
}
