//! Configuration (SPEC §1.2): the TOML file shape, the merged effective
//! configuration, and provider resolution against the standard environment
//! variables.
//!
//! `file` holds the serde shape of one TOML file (every key optional, unknown keys
//! rejected); `paths` locates the data directory, the user and project files and
//! the project root; `load` reads the user and project files, reports errors with
//! file, key and line, and merges them (a named entry at project level replaces
//! the user entry of the same name whole); `expand` applies `${VAR}` expansion to
//! MCP entries; `mcp` reads a project's `.mcp.json`; `resolve` picks the
//! provider to use; `trust` decides which settings of an untrusted project
//! apply and keeps the trusted projects; `warnings` names settings that are
//! accepted but have no effect in a run. This module reads files and the
//! environment, writes only the trust list, and never touches the network.

mod de;
pub(crate) mod expand;
pub(crate) mod file;
pub mod load;
pub(crate) mod mcp;
pub mod paths;
pub mod resolve;
pub mod trust;
pub(crate) mod warnings;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use expand::{Expansion, expand_mcp_server};
pub(crate) use file::{ConfigFile, McpServerFile, ProviderFile};
pub use file::{McpTransport, Price, Thinking};
pub use load::{
    ConfigError, ConfigSources, load_config, load_config_with_trust, parse_config_file,
};
pub(crate) use paths::Env;
pub use resolve::resolve_provider;
pub use trust::{TrustStore, untrusted_notice};
pub use warnings::{NOT_SUPPORTED, startup_warnings};

/// SPEC §1.2: default context window when a provider entry names none.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;
/// SPEC §2: default `max_tokens` per response.
pub const DEFAULT_MAX_TOKENS: u32 = 8_192;
/// SPEC §2: default extended-thinking budget when `thinking = true`.
pub(crate) const DEFAULT_THINKING_BUDGET: u32 = 16_000;
/// SPEC §2: a stream that delivers nothing this long is broken.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// SPEC §2: at most this many retries of a failed request.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 4;

/// Wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// Anthropic Messages API.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// OpenAI Chat Completions API (and compatible servers).
    #[serde(rename = "openai")]
    OpenAi,
}

impl Protocol {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
        }
    }

    /// The environment variable holding this protocol's API key by default.
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::OpenAi => "OPENAI_API_KEY",
        }
    }

    /// The environment variable holding this protocol's base URL.
    pub fn base_url_env(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_BASE_URL",
            Self::OpenAi => "OPENAI_BASE_URL",
        }
    }

    /// The public endpoint. OpenAI's includes the version path, Anthropic's does
    /// not, as in the official SDKs.
    pub fn public_base_url(self) -> &'static str {
        match self {
            Self::Anthropic => "https://api.anthropic.com",
            Self::OpenAi => "https://api.openai.com/v1",
        }
    }

    /// The model used when a provider entry names none.
    pub fn default_model(self) -> &'static str {
        match self {
            Self::Anthropic => "claude-sonnet-4-5",
            Self::OpenAi => "gpt-5",
        }
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

/// Effective permission settings: rules of every source, in source order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermissionSettings {
    /// Mode (project over user; the CLI overrides both).
    pub mode: PermissionMode,
    /// Allow rules.
    pub allow: Vec<RuleEntry>,
    /// Ask rules.
    pub ask: Vec<RuleEntry>,
    /// Deny rules.
    pub deny: Vec<RuleEntry>,
    /// Extra directories the path sandbox allows, absolute after loading.
    pub extra_roots: Vec<PathBuf>,
}

/// Effective limits (SPEC §1.2 `[limits]`, §3 stop conditions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Model turns per user message.
    pub max_turns: u32,
    /// Tokens per run (input + output + cache, summed over responses).
    pub budget_tokens: u64,
    /// Estimated cost per run in USD.
    pub budget_usd: f64,
    /// Wall-clock time per run.
    pub wall_clock: Duration,
    /// Tool calls per run.
    pub max_tool_calls: u32,
    /// Sub-agents running at once per run.
    pub max_parallel_subagents: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_turns: 25,
            budget_tokens: 2_000_000,
            budget_usd: 5.0,
            wall_clock: Duration::from_secs(3_600),
            max_tool_calls: 500,
            max_parallel_subagents: 8,
        }
    }
}

/// Effective tool-layer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSettings {
    /// Environment variables passed to bash beyond HOME, PATH, USER, TERM, LANG.
    pub env_allowlist: Vec<String>,
    /// Default per-call timeout (SPEC §3: 30 s).
    pub timeout: Duration,
}

impl Default for ToolSettings {
    fn default() -> Self {
        Self {
            env_allowlist: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }
}

/// Effective telemetry settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// Record prompt and completion content on spans.
    pub capture_content: bool,
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

/// Effective compaction settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Summaries are prepared ahead, from 70% of the threshold, while the
    /// agent goes on.
    pub work_ahead: bool,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self { work_ahead: true }
    }
}

/// The merged configuration of user and project files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// Provider used when none is named on the command line.
    pub default_provider: Option<String>,
    /// Provider entries by name (project entries replace user entries whole).
    pub providers: BTreeMap<String, ProviderFile>,
    /// MCP server entries by name (project entries replace user entries whole).
    pub mcp_servers: BTreeMap<String, McpServerFile>,
    /// Permission settings.
    pub permissions: PermissionSettings,
    /// Limits.
    pub limits: Limits,
    /// `limits.budget_usd` is written in a file (the default applies
    /// otherwise); it only acts with a provider that has a `price`.
    pub budget_usd_written: bool,
    /// Tool settings.
    pub tools: ToolSettings,
    /// Telemetry settings.
    pub telemetry: TelemetrySettings,
    /// The OS sandbox of commands.
    pub sandbox: SandboxSettings,
    /// Hooks: the user file's, then the project's, each in file order.
    pub hooks: Vec<crate::hooks::Hook>,
    /// Compaction settings.
    pub compaction: CompactionSettings,
    /// The files that were read, in merge order (for messages and `troupe config`).
    pub sources: Vec<PathBuf>,
}

/// A provider ready to build: every value decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedProvider {
    /// Entry name (`claude`).
    pub name: String,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Model id.
    pub model: String,
    /// Base URL without a trailing slash (OpenAI's includes `/v1`).
    pub base_url: String,
    /// API key, when the key variable is set. Loopback servers may need none.
    pub api_key: Option<String>,
    /// Name of the variable the key was read from (for error messages).
    pub api_key_env: String,
    /// Context window in tokens.
    pub context_window: u64,
    /// `max_tokens` per response, sent as is. With Anthropic thinking on it
    /// already holds the thinking budget (it is above it); nothing adds the
    /// budget again.
    pub max_tokens: u32,
    /// Extended-thinking budget, when enabled (Anthropic).
    pub thinking_budget: Option<u32>,
    /// Prices for cost budgets.
    pub price: Option<Price>,
    /// Idle timeout of a stream.
    pub idle_timeout: Duration,
    /// Retries of a failed request.
    pub max_retries: u32,
}
