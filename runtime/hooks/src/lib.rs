//! Hooks: commands the user configures to run at points of an agent's work
//! (`[[hooks.EVENT]]` in the user or project file). This module holds what a
//! hook is and which ones apply ([`HookSet::matching`]); `verdict` turns how
//! a hook ended into what happens next (pure); `runner` runs the commands.
//!
//! A hook gets a JSON payload on stdin ([`HookPayload`]). Exit 0 goes on
//! (stdout may carry a JSON object with `updated_input`, `note` or
//! `decision`), exit 2 blocks where the event can be blocked, with stderr as
//! the reason; any other exit, a timeout or a command that cannot start is a
//! warning and the work goes on. Hooks never hang a run: each has a timeout
//! after which its whole process group is killed.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub(crate) mod runner;
pub mod verdict;

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use troupe_protocol::permission::RuleSource;

pub use runner::{HookContext, fire};
pub use verdict::HookVerdict;
pub(crate) use verdict::{HookExit, HookOutcome};

/// Default time a hook may run before it is killed.
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a configured timeout may be (a hook that hangs still ends).
pub(crate) const MAX_HOOK_TIMEOUT: Duration = Duration::from_secs(3_600);

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    /// A run starts (`source`: `startup` for a new session, `resume`).
    SessionStart,
    /// A prompt is about to enter the history (may block).
    UserPromptSubmit,
    /// A tool call is about to be decided and run (may block or rewrite its
    /// arguments).
    PreToolUse,
    /// A tool call produced its result (may add a note for the model).
    PostToolUse,
    /// A compaction is about to start.
    PreCompact,
    /// A compaction ended.
    PostCompact,
    /// A sub-agent is about to report (may ask it to continue once).
    SubagentStop,
    /// The main agent is about to end its turn (may ask it to continue once).
    Stop,
    /// The agent waits for a person (an approval request).
    Notification,
}

impl HookEvent {
    /// Every event, in the order the documentation lists them.
    pub const ALL: [HookEvent; 9] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PreCompact,
        Self::PostCompact,
        Self::SubagentStop,
        Self::Stop,
        Self::Notification,
    ];

    /// The name used in configuration, payloads, events and spans.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PreCompact => "PreCompact",
            Self::PostCompact => "PostCompact",
            Self::SubagentStop => "SubagentStop",
            Self::Stop => "Stop",
            Self::Notification => "Notification",
        }
    }

    /// The event of this name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == name)
    }

    /// Whether exit code 2 stops what the event announces: a prompt, a tool
    /// call, or the end of a turn (which then goes on once). Other events
    /// only report.
    pub fn can_block(self) -> bool {
        matches!(
            self,
            Self::UserPromptSubmit | Self::PreToolUse | Self::Stop | Self::SubagentStop
        )
    }

    /// What a matcher is compared with for this event.
    pub fn matcher_subject(self) -> &'static str {
        match self {
            Self::PreToolUse | Self::PostToolUse => "the tool name",
            Self::PreCompact | Self::PostCompact => "the trigger (auto, manual, emergency, resume)",
            Self::SessionStart => "the source (startup, resume)",
            Self::SubagentStop => "the sub-agent's role",
            Self::UserPromptSubmit | Self::Stop | Self::Notification => "nothing (every run)",
        }
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One configured hook, validated.
#[derive(Debug, Clone)]
pub struct Hook {
    /// When it runs.
    pub event: HookEvent,
    /// The pattern as written (`bash|write_file`), if any.
    pub matcher_text: Option<String>,
    /// The pattern, anchored at both ends; `None` matches everything.
    pub matcher: Option<Regex>,
    /// The command, run with `bash -c` in the project root.
    pub command: String,
    /// How long it may run.
    pub timeout: Duration,
    /// Run only the first time it matches.
    pub once: bool,
    /// Which file configured it.
    pub source: RuleSource,
}

impl PartialEq for Hook {
    fn eq(&self, other: &Self) -> bool {
        self.event == other.event
            && self.matcher_text == other.matcher_text
            && self.command == other.command
            && self.timeout == other.timeout
            && self.once == other.once
            && self.source == other.source
    }
}

/// Why a hook entry cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookConfigError {
    /// The matcher is not a regular expression.
    #[error("matcher {matcher:?} is not a valid regular expression: {message}")]
    BadMatcher {
        /// The matcher as written.
        matcher: String,
        /// What the regex parser said.
        message: String,
    },
    /// The command is empty.
    #[error("command is empty")]
    EmptyCommand,
    /// The timeout is zero or too long.
    #[error("timeout_secs must be between 1 and {max}", max = MAX_HOOK_TIMEOUT.as_secs())]
    BadTimeout,
}

impl Hook {
    /// A hook from its written fields. `matcher` absent, empty or `*` matches
    /// everything; otherwise it must match the whole subject (`bash` does not
    /// match `bash_output`).
    pub fn new(
        event: HookEvent,
        matcher: Option<&str>,
        command: &str,
        timeout_secs: Option<u64>,
        once: bool,
        source: RuleSource,
    ) -> Result<Self, HookConfigError> {
        if command.trim().is_empty() {
            return Err(HookConfigError::EmptyCommand);
        }
        let timeout = match timeout_secs {
            None => DEFAULT_HOOK_TIMEOUT,
            Some(0) => return Err(HookConfigError::BadTimeout),
            Some(secs) if secs > MAX_HOOK_TIMEOUT.as_secs() => {
                return Err(HookConfigError::BadTimeout);
            }
            Some(secs) => Duration::from_secs(secs),
        };
        let matcher_text = matcher.map(str::to_owned);
        let compiled = match matcher.map(str::trim) {
            None | Some("") | Some("*") => None,
            Some(pattern) => Some(Regex::new(&format!("^(?:{pattern})$")).map_err(|err| {
                HookConfigError::BadMatcher {
                    matcher: pattern.to_owned(),
                    message: err.to_string(),
                }
            })?),
        };
        Ok(Self {
            event,
            matcher_text,
            matcher: compiled,
            command: command.to_owned(),
            timeout,
            once,
            source,
        })
    }

    /// Whether it applies to `subject` (see [`HookEvent::matcher_subject`]).
    pub fn matches(&self, subject: Option<&str>) -> bool {
        match (&self.matcher, subject) {
            (None, _) => true,
            (Some(pattern), Some(subject)) => pattern.is_match(subject),
            (Some(_), None) => false,
        }
    }
}

/// The hooks of a run: user entries first, then the project's, in file order;
/// remembers which `once` hooks have run.
#[derive(Debug, Default)]
pub struct HookSet {
    hooks: Vec<Hook>,
    fired_once: Mutex<HashSet<usize>>,
}

impl Clone for HookSet {
    fn clone(&self) -> Self {
        Self::new(self.hooks.clone())
    }
}

impl PartialEq for HookSet {
    fn eq(&self, other: &Self) -> bool {
        self.hooks == other.hooks
    }
}

impl HookSet {
    /// A set of hooks, in the order they run.
    pub fn new(hooks: Vec<Hook>) -> Self {
        Self {
            hooks,
            fired_once: Mutex::new(HashSet::new()),
        }
    }

    /// Every hook.
    pub fn hooks(&self) -> &[Hook] {
        &self.hooks
    }

    /// True when no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Whether any hook would run for `event` on `subject` (without marking
    /// `once` hooks): lets callers skip building a payload.
    pub fn any_for(&self, event: HookEvent, subject: Option<&str>) -> bool {
        let fired = self
            .fired_once
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.hooks.iter().enumerate().any(|(index, hook)| {
            hook.event == event && hook.matches(subject) && !(hook.once && fired.contains(&index))
        })
    }

    /// The hooks to run now for `event` on `subject`, in order; a `once` hook
    /// is handed out the first time only.
    pub fn matching(&self, event: HookEvent, subject: Option<&str>) -> Vec<Hook> {
        let mut fired = self
            .fired_once
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for (index, hook) in self.hooks.iter().enumerate() {
            if hook.event != event || !hook.matches(subject) {
                continue;
            }
            if hook.once && !fired.insert(index) {
                continue;
            }
            out.push(hook.clone());
        }
        out
    }
}

/// What a hook reads on stdin: always the event and where it happens, plus
/// the fields of that event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HookPayload {
    /// The event name.
    pub event: String,
    /// The session.
    pub session_id: String,
    /// The run.
    pub run_id: String,
    /// The agent (`main`, `main/explorer-1`).
    pub agent_path: String,
    /// The project root, where the hook runs.
    pub cwd: PathBuf,
    /// Tool events: the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool events: the call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool events: the arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    /// PostToolUse: the result text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<String>,
    /// PostToolUse: whether the result is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_is_error: Option<bool>,
    /// UserPromptSubmit: the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// SessionStart: `startup` or `resume`; compaction: the trigger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Stop and SubagentStop: the agent's last text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    /// Stop and SubagentStop: a Stop hook already made this turn go on once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_hook_active: Option<bool>,
    /// Notification: what the agent waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// PostCompact: estimated tokens before and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<u64>,
    /// PostCompact: estimated tokens after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
}

impl HookPayload {
    /// A payload of `event` for an agent, with no event fields yet.
    pub fn new(event: HookEvent, place: &HookPlace) -> Self {
        Self {
            event: event.as_str().to_owned(),
            session_id: place.session_id.clone(),
            run_id: place.run_id.clone(),
            agent_path: place.agent_path.clone(),
            cwd: place.cwd.clone(),
            ..Self::default()
        }
    }
}

/// Where hooks fire: the agent, its run and session, the project root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookPlace {
    /// The session.
    pub session_id: String,
    /// The run.
    pub run_id: String,
    /// The agent path.
    pub agent_path: String,
    /// The project root.
    pub cwd: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: HookEvent, matcher: Option<&str>, once: bool) -> Hook {
        Hook::new(event, matcher, "true", None, once, RuleSource::User).unwrap()
    }

    #[test]
    fn a_matcher_matches_whole_tool_names_only() {
        let h = hook(HookEvent::PreToolUse, Some("bash|write_file"), false);
        assert!(h.matches(Some("bash")));
        assert!(h.matches(Some("write_file")));
        assert!(!h.matches(Some("bash_output")));
        assert!(!h.matches(Some("xbash")));
        assert!(!h.matches(None));
        let h = hook(HookEvent::PreToolUse, Some("mcp__.*"), false);
        assert!(h.matches(Some("mcp__fs__read")));
        assert!(!h.matches(Some("read_file")));
        for every in [None, Some(""), Some("*")] {
            let h = hook(HookEvent::PreToolUse, every, false);
            assert!(h.matches(Some("anything")) && h.matches(None));
        }
    }

    #[test]
    fn bad_entries_say_why() {
        let bad = Hook::new(
            HookEvent::Stop,
            Some("("),
            "x",
            None,
            false,
            RuleSource::User,
        );
        assert!(matches!(bad, Err(HookConfigError::BadMatcher { .. })));
        let empty = Hook::new(HookEvent::Stop, None, "  ", None, false, RuleSource::User);
        assert_eq!(empty.unwrap_err(), HookConfigError::EmptyCommand);
        for secs in [0, 3_601] {
            let err = Hook::new(
                HookEvent::Stop,
                None,
                "x",
                Some(secs),
                false,
                RuleSource::User,
            );
            assert_eq!(err.unwrap_err(), HookConfigError::BadTimeout);
        }
        let ok = Hook::new(HookEvent::Stop, None, "x", Some(5), false, RuleSource::User).unwrap();
        assert_eq!(ok.timeout, Duration::from_secs(5));
        let default = Hook::new(HookEvent::Stop, None, "x", None, false, RuleSource::User);
        assert_eq!(default.unwrap().timeout, DEFAULT_HOOK_TIMEOUT);
    }

    #[test]
    fn matching_keeps_order_and_hands_out_once_hooks_once() {
        let set = HookSet::new(vec![
            hook(HookEvent::PreToolUse, Some("bash"), false),
            hook(HookEvent::PostToolUse, None, false),
            hook(HookEvent::PreToolUse, None, true),
        ]);
        assert!(set.any_for(HookEvent::PreToolUse, Some("bash")));
        let first = set.matching(HookEvent::PreToolUse, Some("bash"));
        assert_eq!(first.len(), 2);
        assert!(!first[0].once && first[1].once);
        let second = set.matching(HookEvent::PreToolUse, Some("bash"));
        assert_eq!(second.len(), 1);
        assert!(!second[0].once);
        assert!(!set.any_for(HookEvent::PreToolUse, Some("grep")));
        assert!(set.matching(HookEvent::Stop, None).is_empty());
    }

    #[test]
    fn event_names_round_trip() {
        for event in HookEvent::ALL {
            assert_eq!(HookEvent::from_name(event.as_str()), Some(event));
        }
        assert_eq!(HookEvent::from_name("PreTooluse"), None);
        assert!(HookEvent::PreToolUse.can_block());
        assert!(!HookEvent::PostToolUse.can_block());
    }

    #[test]
    fn payloads_carry_only_their_fields() {
        let place = HookPlace {
            session_id: "s".into(),
            run_id: "r".into(),
            agent_path: "main".into(),
            cwd: PathBuf::from("/p"),
        };
        let mut payload = HookPayload::new(HookEvent::PreToolUse, &place);
        payload.tool_name = Some("bash".into());
        payload.tool_input = Some(serde_json::json!({"command": "ls"}));
        let value = serde_json::to_value(&payload).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "event": "PreToolUse", "session_id": "s", "run_id": "r",
                "agent_path": "main", "cwd": "/p", "tool_name": "bash",
                "tool_input": {"command": "ls"}
            })
        );
    }
}
