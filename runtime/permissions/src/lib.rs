//! Permissions (SPEC §5): whether a tool call may run, must be approved by a
//! person, or is refused — and why, in a sentence for the model and the person.
//!
//! [`PermissionEngine::decide`] applies, in order: hard blocks (destructive
//! commands, writes into `.git` internals or Troupe's own configuration, git
//! configuration that names programs) and the path sandbox's write limit,
//! which hold in every mode; deny rules; plan mode; reads outside the allowed
//! roots (ask); ask rules; allow rules; the mode's fallback. Rules look like
//! `Bash(git push*)`, `Read(.env)`, `Write(src/**)`, `mcp__github__*`.
//!
//! The crate is pure and synchronous: it decides, it never waits for an
//! approval, emits events or runs anything (the agent actor does), and its only
//! contact with the file system is path resolution through the sandbox. Its
//! parts: `rules` (rule syntax and matching), `engine` (the decision order),
//! `advice` (what a user could change when a call cannot run). Reading a
//! command line — the one tree-sitter-bash reading, the read-only
//! classification, the hard blocks, `git config` changes — is `troupe-shell`'s;
//! the places no tool writes are `troupe-paths`'. It must not touch the tool
//! implementations, the configuration loader or the providers.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod advice;
mod engine;
mod rules;

use troupe_protocol::permission::Decision;

use troupe_protocol::permission::{PermissionMode, RuleEntry, RuleSource};
use troupe_protocol::permission::{PermissionSubject, ToolCategory};

pub use advice::{AdviceFacts, advice};
pub use engine::PermissionEngine;
pub(crate) use rules::RuleParseError;

/// The step of the decision order that decided a call (see the module docs),
/// for advice on what a user could change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// A hard block: a destructive command or a write into `.git` internals.
    HardBlock,
    /// The path could not be resolved (empty, a NUL byte, a symlink loop).
    UnusablePath,
    /// A write to a path outside the allowed roots.
    OutsideWrite,
    /// A deny rule matched.
    DenyRule,
    /// Plan mode refuses calls that are not read-only.
    PlanMode,
    /// A read of a path outside the allowed roots that no allow rule names.
    OutsideRead,
    /// An ask rule matched.
    AskRule,
    /// An allow rule (configured, or an "always" answer) matched.
    AllowRule,
    /// An allow rule with a pattern matched a command that cannot be checked
    /// with confidence (a substitution, a redirection outside the allowed
    /// roots, a syntax error, unknown syntax), so it was asked instead.
    UncertainCommand,
    /// No rule decided: the mode's fallback did.
    Mode,
}

/// One call as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRequest {
    /// The tool's registered name (`bash`, `write_file`, `mcp__github__create_issue`).
    pub tool_name: String,
    /// The tool's category.
    pub category: ToolCategory,
    /// The tool's `read_only` flag.
    pub read_only: bool,
    /// What the call touches.
    pub subject: PermissionSubject,
}

/// Why the engine could not be built or a rule not added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionError {
    /// A rule does not parse.
    #[error("invalid permission rule \"{rule}\" from {}: {error}", rules::source_name(*.origin))]
    InvalidRule {
        /// The rule text.
        rule: String,
        /// Where it came from.
        origin: RuleSource,
        /// What is wrong with it.
        #[source]
        error: RuleParseError,
    },
}

/// Whether a tool is offered to the model in `mode`: plan mode offers only
/// read-only tools (SPEC §5, §12); every other mode offers every tool.
pub fn offered_in_mode(mode: PermissionMode, read_only: bool) -> bool {
    mode != PermissionMode::Plan || read_only
}

/// Checks a rule's syntax without a project (for configuration validation and
/// the command line). Path patterns are compiled against `/`, with `~` allowed.
pub fn check_rule_syntax(rule: &str) -> Result<(), RuleParseError> {
    let ctx = rules::PatternContext {
        project_root: std::path::Path::new("/"),
        home: Some(std::path::Path::new("/")),
    };
    let entry = RuleEntry {
        rule: rule.to_owned(),
        source: RuleSource::Cli,
    };
    rules::Rule::parse(&entry, &ctx).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_mode_offers_only_read_only_tools() {
        assert!(offered_in_mode(PermissionMode::Plan, true));
        assert!(!offered_in_mode(PermissionMode::Plan, false));
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Bypass,
        ] {
            assert!(offered_in_mode(mode, true));
            assert!(offered_in_mode(mode, false));
        }
    }

    #[test]
    fn decision_accessors_and_serialisation() {
        let decision = Decision::Ask {
            reason: "why".into(),
        };
        assert!(decision.is_ask() && !decision.is_allow() && !decision.is_deny());
        assert_eq!(decision.reason(), "why");
        let json = serde_json::to_value(&decision).expect("serialises");
        assert_eq!(
            json,
            serde_json::json!({"decision": "ask", "reason": "why"})
        );
    }

    #[test]
    fn syntax_check_and_error_text() {
        assert!(check_rule_syntax("Bash(git push*)").is_ok());
        assert!(check_rule_syntax("Read(~/.ssh/**)").is_ok());
        assert_eq!(
            check_rule_syntax("Write(src/**"),
            Err(RuleParseError::UnclosedParenthesis)
        );
        let err = PermissionError::InvalidRule {
            rule: "Bash(".into(),
            origin: RuleSource::Project,
            error: RuleParseError::UnclosedParenthesis,
        };
        assert_eq!(
            err.to_string(),
            "invalid permission rule \"Bash(\" from project config: the pattern must end with `)`"
        );
    }
}
