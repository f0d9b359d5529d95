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

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod front_matter;

mod de;
pub mod endpoint;
mod error;
pub(crate) mod expand;
pub(crate) mod file;
pub mod keys;
pub mod load;
pub(crate) mod mcp;
pub mod paths;
pub mod resolve;
pub mod trust;
pub(crate) mod warnings;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use troupe_protocol::model::Protocol;
use troupe_protocol::permission::{
    PermissionMode, RuleEntry, RuleSource, SandboxMode, SandboxSettings,
};

pub use error::ConfigError;
pub use expand::{Expansion, expand_mcp_server};
pub use file::{ClusterFile, ConfigFile, McpServerFile, ProviderFile, StoreFile};
pub use file::{McpTransport, Price, Thinking};
pub use load::{ConfigSources, load_config, load_config_with_trust, parse_config_file};
pub use paths::Env;
pub use resolve::resolve_provider;
pub use trust::{LeftOut, TrustStore, UntrustedServer, untrusted_notice};
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
pub const DEFAULT_MAX_RETRIES: u32 = 4;

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

/// Effective store settings (`[store]` of the user's file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// Sessions last updated longer ago are removed.
    pub keep: Duration,
    /// The most bytes of records kept; `None`: no bound.
    pub max_bytes: Option<u64>,
}

/// `[store] keep_days` when the file does not say.
pub const DEFAULT_KEEP_DAYS: u64 = 30;

/// Seconds in a day.
const DAY_SECS: u64 = 24 * 60 * 60;

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            keep: Duration::from_secs(DEFAULT_KEEP_DAYS * DAY_SECS),
            max_bytes: None,
        }
    }
}

impl StoreSettings {
    /// The settings a `[store]` table writes.
    pub fn from_file(file: &file::StoreFile) -> Self {
        let defaults = Self::default();
        Self {
            keep: file.keep_days.map_or(defaults.keep, |days| {
                Duration::from_secs(days.saturating_mul(DAY_SECS))
            }),
            max_bytes: file.max_bytes,
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

/// Effective `[web]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSettings {
    /// `web_fetch` is offered.
    pub enabled: bool,
    /// Addresses `web_fetch` may reach although they are private, loopback
    /// or otherwise refused (from the user's file only).
    pub allow_private: Vec<std::net::SocketAddr>,
}

impl Default for WebSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_private: Vec::new(),
        }
    }
}

/// Effective `[checkpoints]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Checkpoints are taken before turns that can change files.
    pub enabled: bool,
    /// The bound of the checkpoint stores of the data directory, in bytes.
    pub max_bytes: u64,
}

/// The default bound of the checkpoint stores: 2 GiB.
pub const CHECKPOINT_MAX_BYTES: u64 = 2 * 1024 * 1024 * 1024;

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: CHECKPOINT_MAX_BYTES,
        }
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
    pub hooks: Vec<troupe_hooks::Hook>,
    /// Compaction settings.
    pub compaction: CompactionSettings,
    /// Store settings (the user's file only).
    pub store: StoreSettings,
    /// `web_fetch` settings.
    pub web: WebSettings,
    /// Checkpoint settings.
    pub checkpoints: CheckpointSettings,
    /// The `[cluster]` table of the user's file, as written.
    pub cluster: ClusterFile,
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
    /// The provider keeps responses and requests are chained by
    /// `previous_response_id` (`openai-responses` only; false elsewhere).
    pub store: bool,
}
