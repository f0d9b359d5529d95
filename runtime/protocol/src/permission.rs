//! The permission vocabulary every layer shares: what a call touches
//! ([`Access`], [`PermissionSubject`], [`ToolCategory`]), the modes and rule
//! entries a user configures ([`PermissionMode`], [`RuleEntry`],
//! [`RuleSource`]), and the answer for one call ([`Decision`]).

use serde::{Deserialize, Serialize};

/// Permission category of a tool (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolCategory {
    /// Reads only (read_file, glob, grep, task_output, task_list).
    Read,
    /// Writes files (write_file, edit_file).
    Write,
    /// Executes commands or has effects outside (bash, task_kill, MCP tools not read-only).
    Execute,
    /// Starts sub-agents.
    Agent,
}

/// Whether a path is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read.
    Read,
    /// Write (create, modify).
    Write,
}

/// What one call touches, as the permission engine needs to see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionSubject {
    /// Nothing beyond the tool itself.
    None,
    /// A path, as the model wrote it.
    Path {
        /// The raw path argument.
        path: String,
        /// Read or write.
        access: Access,
    },
    /// A shell command.
    Command {
        /// The command line.
        command: String,
    },
    /// A host reached over the network (`web_fetch`), lower-case, without
    /// port or trailing dot.
    Host {
        /// The host name or IP literal.
        host: String,
    },
}

/// The answer for one call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Allow {
        /// Why (the rule and its source, or the mode).
        reason: String,
    },
    /// Ask a person first.
    Ask {
        /// Why approval is needed.
        reason: String,
    },
    /// Refuse it; the reason goes back to the model as an error result.
    Deny {
        /// Why it was refused.
        reason: String,
    },
}

impl Decision {
    /// The sentence explaining the decision.
    pub fn reason(&self) -> &str {
        match self {
            Self::Allow { reason } | Self::Ask { reason } | Self::Deny { reason } => reason,
        }
    }

    /// True for [`Decision::Allow`].
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow { .. })
    }

    /// True for [`Decision::Ask`].
    pub fn is_ask(&self) -> bool {
        matches!(self, Self::Ask { .. })
    }

    /// True for [`Decision::Deny`].
    pub fn is_deny(&self) -> bool {
        matches!(self, Self::Deny { .. })
    }
}

/// Permission modes (SPEC §5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Ask for writes and execution.
    #[default]
    Default,
    /// Writes inside the project allowed; execution asks.
    AcceptEdits,
    /// Only read-only tools are offered and allowed.
    Plan,
    /// Everything allowed that no deny rule or hard block forbids.
    Bypass,
}

impl PermissionMode {
    /// The name used on the command line and in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "accept-edits",
            Self::Plan => "plan",
            Self::Bypass => "bypass",
        }
    }

    /// Parses a mode name as written on the command line or in config.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "accept-edits" => Some(Self::AcceptEdits),
            "plan" => Some(Self::Plan),
            "bypass" => Some(Self::Bypass),
            _ => None,
        }
    }
}

/// Where a permission rule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleSource {
    /// `~/.config/troupe/config.toml`.
    User,
    /// `<root>/.troupe/config.toml`.
    Project,
    /// A command-line flag.
    Cli,
    /// An "allow always" answer, kept with the session.
    Session,
}

/// One permission rule as written (`Bash(git push*)`), with its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleEntry {
    /// The rule text.
    pub rule: String,
    /// Where it came from.
    pub source: RuleSource,
}

/// `[sandbox] mode`: what the operating system lets commands write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Writes only inside the allowed roots, the spill directory and the
    /// session's temporary directory; Troupe's own files stay read-only.
    #[default]
    WorkspaceWrite,
    /// No writes at all (besides `/dev/null` and the terminal devices).
    ReadOnly,
    /// Commands run unconfined.
    Off,
}

impl SandboxMode {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkspaceWrite => "workspace-write",
            Self::ReadOnly => "read-only",
            Self::Off => "off",
        }
    }
}

/// Effective `[sandbox]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxSettings {
    /// What commands may write.
    pub mode: SandboxMode,
    /// Whether commands may use the network.
    pub network: bool,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            mode: SandboxMode::WorkspaceWrite,
            network: true,
        }
    }
}
