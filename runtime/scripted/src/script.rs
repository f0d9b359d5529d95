//! Scripts: an ordered list of turns, each a [`Matcher`] plus an [`Action`]
//! (a [`Response`] or a [`Fault`]) with optional timing.
//!
//! On each request the server picks the first unconsumed turn whose matcher
//! matches ([`select_turn`], a pure function), so tests with parallel
//! sub-agents can route by content. This module owns that rule; it must not
//! touch HTTP, rendering or invariant checks.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::fault::Fault;
use crate::request::{Protocol, RecordedRequest};
use crate::response::Response;

type Predicate = Arc<dyn Fn(&RecordedRequest) -> bool + Send + Sync>;

#[derive(Clone)]
enum MatcherKind {
    Any,
    LastUserContains(String),
    FirstUserContains(String),
    AnyUserContains(String),
    SystemContains(String),
    Protocol(Protocol),
    Predicate {
        description: String,
        predicate: Predicate,
    },
    All(Vec<Matcher>),
}

/// Decides whether a turn may answer a request.
#[derive(Clone)]
pub struct Matcher {
    kind: MatcherKind,
}

impl Matcher {
    /// Matches every request (the default).
    pub fn any() -> Self {
        Self {
            kind: MatcherKind::Any,
        }
    }

    /// The last user-role message's text contains `needle`
    /// (see [`RecordedRequest::last_user_text`]).
    pub fn last_user_contains(needle: impl Into<String>) -> Self {
        Self {
            kind: MatcherKind::LastUserContains(needle.into()),
        }
    }

    /// The first user-role message's text (the task) contains `needle`. Useful
    /// to route every turn of one sub-agent, whatever its last message is.
    pub fn first_user_contains(needle: impl Into<String>) -> Self {
        Self {
            kind: MatcherKind::FirstUserContains(needle.into()),
        }
    }

    /// Some user-role message's text contains `needle` (see
    /// [`RecordedRequest::any_user_text_contains`]). Routes every turn of a
    /// fork, whose first user message is its parent's.
    pub fn any_user_contains(needle: impl Into<String>) -> Self {
        Self {
            kind: MatcherKind::AnyUserContains(needle.into()),
        }
    }

    /// The system prompt contains `needle` (see [`RecordedRequest::system_text`]).
    pub fn system_contains(needle: impl Into<String>) -> Self {
        Self {
            kind: MatcherKind::SystemContains(needle.into()),
        }
    }

    /// The request arrived on this protocol's endpoint.
    pub fn protocol(protocol: Protocol) -> Self {
        Self {
            kind: MatcherKind::Protocol(protocol),
        }
    }

    /// A custom predicate over the recorded request; `description` appears in
    /// "no turn matched" messages.
    pub fn predicate(
        description: impl Into<String>,
        predicate: impl Fn(&RecordedRequest) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind: MatcherKind::Predicate {
                description: description.into(),
                predicate: Arc::new(predicate),
            },
        }
    }

    /// Both this matcher and `other` must match.
    #[must_use]
    pub fn and(self, other: Matcher) -> Self {
        let mut all = match self.kind {
            MatcherKind::All(all) => all,
            kind => vec![Self { kind }],
        };
        all.push(other);
        Self {
            kind: MatcherKind::All(all),
        }
    }

    /// Whether this matcher accepts the request.
    pub fn matches(&self, request: &RecordedRequest) -> bool {
        match &self.kind {
            MatcherKind::Any => true,
            MatcherKind::LastUserContains(needle) => request
                .last_user_text()
                .is_some_and(|text| text.contains(needle.as_str())),
            MatcherKind::FirstUserContains(needle) => request
                .first_user_text()
                .is_some_and(|text| text.contains(needle.as_str())),
            MatcherKind::AnyUserContains(needle) => request.any_user_text_contains(needle),
            MatcherKind::SystemContains(needle) => request.system_text().contains(needle.as_str()),
            MatcherKind::Protocol(protocol) => request.protocol == *protocol,
            MatcherKind::Predicate { predicate, .. } => predicate(request),
            MatcherKind::All(all) => all.iter().all(|m| m.matches(request)),
        }
    }
}

impl Default for Matcher {
    fn default() -> Self {
        Self::any()
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            MatcherKind::Any => f.write_str("any request"),
            MatcherKind::LastUserContains(needle) => {
                write!(f, "last user message contains {needle:?}")
            }
            MatcherKind::FirstUserContains(needle) => {
                write!(f, "first user message contains {needle:?}")
            }
            MatcherKind::AnyUserContains(needle) => {
                write!(f, "some user message contains {needle:?}")
            }
            MatcherKind::SystemContains(needle) => write!(f, "system prompt contains {needle:?}"),
            MatcherKind::Protocol(protocol) => write!(f, "{protocol} endpoint"),
            MatcherKind::Predicate { description, .. } => f.write_str(description),
            MatcherKind::All(all) => {
                let parts: Vec<String> = all.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join(" and "))
            }
        }
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Matcher({self})")
    }
}

/// What a turn answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A normal model response.
    Reply(Response),
    /// A failure.
    Fault(Fault),
}

impl From<Response> for Action {
    fn from(response: Response) -> Self {
        Self::Reply(response)
    }
}

impl From<Fault> for Action {
    fn from(fault: Fault) -> Self {
        Self::Fault(fault)
    }
}

/// One scripted turn: which requests it may answer, what it answers, and when.
#[derive(Debug, Clone)]
pub struct Turn {
    matcher: Matcher,
    action: Action,
    delay: Duration,
    chunk_delay: Duration,
}

impl Turn {
    /// A turn that answers any request with `action`, at once.
    pub fn new(action: impl Into<Action>) -> Self {
        Self {
            matcher: Matcher::any(),
            action: action.into(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
        }
    }

    /// Restricts the turn to requests accepted by `matcher`.
    #[must_use]
    pub fn when(mut self, matcher: Matcher) -> Self {
        self.matcher = matcher;
        self
    }

    /// Waits this long before sending the response (status line included).
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Waits this long before each streamed SSE event.
    #[must_use]
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// The matcher.
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// The action.
    pub fn action(&self) -> &Action {
        &self.action
    }

    /// Delay before the response.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Delay before each streamed event.
    pub fn chunk_delay(&self) -> Duration {
        self.chunk_delay
    }

    pub(crate) fn into_action(self) -> Action {
        self.action
    }
}

impl From<Response> for Turn {
    fn from(response: Response) -> Self {
        Self::new(response)
    }
}

impl From<Fault> for Turn {
    fn from(fault: Fault) -> Self {
        Self::new(fault)
    }
}

impl From<Action> for Turn {
    fn from(action: Action) -> Self {
        Self::new(action)
    }
}

/// An ordered list of turns.
///
/// ```
/// use troupe_scripted::{text, Fault, Matcher, Script, Turn};
///
/// let script = Script::new()
///     .then(Fault::rate_limited(1))
///     .then(text("hello"))
///     .then(Turn::new(text("beta done")).when(Matcher::first_user_contains("beta")));
/// assert_eq!(script.len(), 3);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Script {
    turns: Vec<Turn>,
}

impl Script {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a turn (a [`Response`], a [`Fault`] or a [`Turn`]).
    #[must_use]
    pub fn then(mut self, turn: impl Into<Turn>) -> Self {
        self.turns.push(turn.into());
        self
    }

    /// Appends a turn that only answers requests accepted by `matcher`.
    #[must_use]
    pub fn when(self, matcher: Matcher, action: impl Into<Action>) -> Self {
        self.then(Turn::new(action).when(matcher))
    }

    /// Appends a turn in place.
    pub fn push(&mut self, turn: impl Into<Turn>) {
        self.turns.push(turn.into());
    }

    /// Number of turns.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether the script has no turns.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The turns, in order.
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    pub(crate) fn into_turns(self) -> Vec<Turn> {
        self.turns
    }
}

impl<T: Into<Turn>> FromIterator<T> for Script {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self {
            turns: iter.into_iter().map(Into::into).collect(),
        }
    }
}

/// The outcome of looking for a turn to answer a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// This turn (index into the script) answers.
    Turn(usize),
    /// Every turn has been consumed.
    Exhausted {
        /// Turns in the script.
        total: usize,
    },
    /// Unconsumed turns exist but none matches.
    NoMatch {
        /// Descriptions of the unconsumed turns' matchers, with their index.
        pending: Vec<(usize, String)>,
    },
}

/// The first unconsumed turn whose matcher accepts the request. A consumed turn
/// is a `None` slot, so indices stay those of the script.
pub(crate) fn select_turn(turns: &[Option<Turn>], request: &RecordedRequest) -> Selection {
    let mut pending = Vec::new();
    for (index, turn) in turns.iter().enumerate() {
        let Some(turn) = turn else { continue };
        if turn.matcher.matches(request) {
            return Selection::Turn(index);
        }
        pending.push((index, turn.matcher.to_string()));
    }
    if pending.is_empty() {
        Selection::Exhausted { total: turns.len() }
    } else {
        Selection::NoMatch { pending }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::text;
    use serde_json::json;

    fn request(first: &str, last: &str, system: &str) -> RecordedRequest {
        RecordedRequest {
            index: 0,
            protocol: Protocol::Anthropic,
            path: "/v1/messages".into(),
            headers: Vec::new(),
            body: json!({
                "system": system,
                "messages": [
                    {"role": "user", "content": first},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": last}
                ]
            }),
            body_len: 0,
            turn: None,
            response_id: None,
        }
    }

    fn slots(turns: Vec<Turn>) -> Vec<Option<Turn>> {
        turns.into_iter().map(Some).collect()
    }

    #[test]
    fn picks_first_unconsumed_matching_turn() {
        let mut turns = slots(vec![
            Turn::new(text("a")).when(Matcher::first_user_contains("alpha")),
            Turn::new(text("b")).when(Matcher::first_user_contains("beta")),
            Turn::new(text("any")),
        ]);
        let beta = request("task beta", "x", "");
        assert_eq!(select_turn(&turns, &beta), Selection::Turn(1));
        turns[1] = None;
        assert_eq!(select_turn(&turns, &beta), Selection::Turn(2));
        turns[2] = None;
        match select_turn(&turns, &beta) {
            Selection::NoMatch { pending } => {
                assert_eq!(
                    pending,
                    [(0, "first user message contains \"alpha\"".to_owned())]
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        turns[0] = None;
        assert_eq!(
            select_turn(&turns, &beta),
            Selection::Exhausted { total: 3 }
        );
    }

    #[test]
    fn matcher_kinds() {
        let req = request("task", "please review gamma", "You are the reviewer");
        assert!(Matcher::any().matches(&req));
        assert!(Matcher::last_user_contains("gamma").matches(&req));
        assert!(!Matcher::last_user_contains("task").matches(&req));
        assert!(Matcher::first_user_contains("task").matches(&req));
        assert!(Matcher::system_contains("reviewer").matches(&req));
        assert!(!Matcher::system_contains("planner").matches(&req));
        assert!(Matcher::protocol(Protocol::Anthropic).matches(&req));
        assert!(!Matcher::protocol(Protocol::OpenAi).matches(&req));
        let custom = Matcher::predicate("three messages", |r| r.messages().len() == 3);
        assert!(custom.matches(&req));
        assert_eq!(custom.to_string(), "three messages");
        let both = Matcher::system_contains("reviewer").and(Matcher::last_user_contains("beta"));
        assert!(!both.matches(&req));
        assert_eq!(
            both.to_string(),
            "system prompt contains \"reviewer\" and last user message contains \"beta\""
        );
    }

    #[test]
    fn script_builders() {
        let script: Script = vec![text("a"), text("b")].into_iter().collect();
        assert_eq!(script.len(), 2);
        let script = Script::new()
            .when(Matcher::last_user_contains("x"), text("c"))
            .then(Fault::Overloaded);
        assert_eq!(
            script.turns()[0].matcher().to_string(),
            "last user message contains \"x\""
        );
        assert!(matches!(
            script.turns()[1].action(),
            Action::Fault(Fault::Overloaded)
        ));
    }
}
