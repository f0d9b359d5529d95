//! The serde shape of one configuration file (SPEC §1.2). Every key is optional;
//! unknown keys are rejected so a typo is an error that names file, key and line.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{PermissionMode, Protocol, SandboxMode};

/// One `config.toml` file as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Provider used when none is named on the command line.
    pub default_provider: Option<String>,
    /// `[providers.NAME]` entries.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderFile>,
    /// `[mcp_servers.NAME]` entries.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerFile>,
    /// `[permissions]`.
    pub permissions: Option<PermissionsFile>,
    /// `[limits]`.
    pub limits: Option<LimitsFile>,
    /// `[tools]`.
    pub tools: Option<ToolsFile>,
    /// `[telemetry]`.
    pub telemetry: Option<TelemetryFile>,
    /// `[sandbox]`.
    pub sandbox: Option<SandboxFile>,
    /// `[[hooks.EVENT]]` entries by event name (checked when validated).
    #[serde(default)]
    pub hooks: BTreeMap<String, Vec<HookFile>>,
    /// `[compaction]`.
    pub compaction: Option<CompactionFile>,
    /// `[store]` (the user's file only).
    pub store: Option<StoreFile>,
    /// `[web]`: the `web_fetch` tool.
    pub web: Option<WebFile>,
    /// `[checkpoints]`: snapshots of the project's files before turns.
    pub checkpoints: Option<CheckpointsFile>,
    /// `[cluster]` (the user's file only): the NATS cluster `troupe serve`
    /// joins.
    pub cluster: Option<ClusterFile>,
}

/// `[cluster]`: the NATS JetStream cluster `troupe serve` joins (the user's
/// file only; `troupe serve --cluster` and `TROUPE_CLUSTER` take
/// precedence over `url`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// `nats://[TOKEN@|USER:PASSWORD@]HOST:PORT`.
    pub url: Option<String>,
    /// A NATS `.creds` file.
    pub credentials: Option<std::path::PathBuf>,
    /// How long a run's lease lasts without renewal, in seconds (default
    /// 15).
    pub lease_secs: Option<u64>,
    /// How many copies the NATS servers keep of each stream and bucket
    /// Troupe creates (default 1; 3 for a three-server NATS cluster; at
    /// most 5).
    pub replicas: Option<usize>,
    /// Whether runs may name a `file://` repository to check out (default
    /// false: only `https://` and `ssh://`).
    pub file_repositories: Option<bool>,
}

/// `[checkpoints]`: snapshots of the project's files before each turn that
/// can change them, for `troupe undo` and `troupe rewind`. `max_bytes` is
/// the user's file's only: it bounds storage under `TROUPE_HOME`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsFile {
    /// Take checkpoints (default true); `false` in either file turns them
    /// off.
    pub enabled: Option<bool>,
    /// The most bytes the checkpoint stores of the data directory may take
    /// together (default 2 GiB); the oldest sessions' checkpoints go first.
    pub max_bytes: Option<u64>,
}

/// `[web]`: the `web_fetch` tool. `allow_private` is the user's file's only:
/// a project must not open the user's own network to what it fetches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebFile {
    /// Offer `web_fetch` (default true); `false` in either file removes it.
    pub enabled: Option<bool>,
    /// Private, loopback or otherwise refused addresses `web_fetch` may
    /// reach anyway, as `IP:PORT` (`127.0.0.1:8080`, `[::1]:3000`).
    #[serde(default)]
    pub allow_private: Vec<String>,
}

/// `[store]`: what the session store under `TROUPE_HOME` keeps. Only the
/// user's file may set it: a project must not decide how much of the user's
/// history is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFile {
    /// Sessions last updated more than this many days ago are removed
    /// (default 30).
    pub keep_days: Option<u64>,
    /// The most bytes of records kept; the oldest finished sessions go
    /// first beyond it (default: no bound).
    pub max_bytes: Option<u64>,
}

/// `[compaction]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionFile {
    /// Prepare summaries ahead, from 70% of the threshold (default true).
    pub work_ahead: Option<bool>,
}

/// `[providers.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    /// Wire protocol; defaults from the entry name (`openai*` → openai, else anthropic).
    pub protocol: Option<Protocol>,
    /// Model id.
    pub model: Option<String>,
    /// Base URL; if absent, `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`, then the public default.
    pub base_url: Option<String>,
    /// Variable holding the API key.
    pub api_key_env: Option<String>,
    /// Context window in tokens.
    pub context_window: Option<u64>,
    /// `max_tokens` per response.
    pub max_tokens: Option<u32>,
    /// `false`, `true` (16,000-token budget) or a budget in tokens.
    pub thinking: Option<Thinking>,
    /// USD per million tokens.
    pub price: Option<Price>,
    /// Seconds without data after which a stream counts as broken (default 300).
    pub idle_timeout_secs: Option<u64>,
    /// Retries of a failed request (default 4).
    pub max_retries: Option<u32>,
    /// `openai-responses` only: let the provider keep responses and chain
    /// requests with `previous_response_id` (default false).
    pub store: Option<bool>,
}

/// `thinking = false | true | 16000`.
///
/// Deserialised by hand rather than as an untagged enum so a wrong value gets
/// a message that says what is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Thinking {
    /// On with the default budget, or off.
    Enabled(bool),
    /// On with this budget in tokens.
    Budget(u32),
}

impl<'de> Deserialize<'de> for Thinking {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ThinkingVisitor)
    }
}

/// Accepts a boolean or a token budget that fits a `u32`.
struct ThinkingVisitor;

impl serde::de::Visitor<'_> for ThinkingVisitor {
    type Value = Thinking;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("true, false or a thinking budget in tokens")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Thinking, E> {
        Ok(Thinking::Enabled(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Thinking, E> {
        u32::try_from(v)
            .map(Thinking::Budget)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Thinking, E> {
        u32::try_from(v)
            .map(Thinking::Budget)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
    }
}

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Cache reads.
    #[serde(default)]
    pub cache_read: f64,
    /// Cache writes.
    #[serde(default)]
    pub cache_write: f64,
}

impl Price {
    /// Estimated cost in USD of the given usage.
    pub fn cost_usd(&self, usage: &troupe_protocol::model::Usage) -> f64 {
        const PER: f64 = 1_000_000.0;
        (usage.input as f64 * self.input
            + usage.output as f64 * self.output
            + usage.cache_read as f64 * self.cache_read
            + usage.cache_write as f64 * self.cache_write)
            / PER
    }
}

/// `[mcp_servers.NAME]`. Its `Debug` shows no value that may be a
/// credential: the URL as `display_endpoint` shows it, header and
/// environment names only, the number of arguments.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerFile {
    /// `stdio` or `http`.
    #[serde(rename = "type")]
    pub transport: Option<McpTransport>,
    /// Command (stdio).
    pub command: Option<String>,
    /// Arguments (stdio); `${VAR}` expanded.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment (stdio); `${VAR}` expanded.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (stdio); relative to the project root. Default: the
    /// project root.
    pub cwd: Option<String>,
    /// URL (http); `${VAR}` expanded.
    pub url: Option<String>,
    /// Headers (http); `${VAR}` expanded.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long a run's first request waits for this server (default 3 s).
    pub startup_grace_secs: Option<u64>,
    /// Set false to keep the entry but not start the server.
    pub enabled: Option<bool>,
}

impl std::fmt::Debug for McpServerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerFile")
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field(
                "url",
                &self.url.as_deref().map(crate::endpoint::display_endpoint),
            )
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("startup_grace_secs", &self.startup_grace_secs)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl McpServerFile {
    /// The transport: `type` when written, else inferred from the keys present
    /// (`command` → stdio, `url` → http). `None` when `type` is absent and the
    /// entry has both or neither of `command` and `url`.
    pub fn effective_transport(&self) -> Option<McpTransport> {
        match (self.transport, &self.command, &self.url) {
            (Some(transport), _, _) => Some(transport),
            (None, Some(_), None) => Some(McpTransport::Stdio),
            (None, None, Some(_)) => Some(McpTransport::Http),
            (None, _, _) => None,
        }
    }

    /// Whether the server should be started (`enabled` defaults to true).
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// MCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// A child process speaking over stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// `[permissions]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsFile {
    /// Permission mode.
    pub mode: Option<PermissionMode>,
    /// Allow rules.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Ask rules.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Deny rules.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Extra allowed roots. `~` and `~/…` expand to the home directory; other
    /// relative paths are relative to the project root (project file) or the
    /// home directory (user file).
    #[serde(default)]
    pub extra_roots: Vec<String>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Model turns per user message.
    pub max_turns: Option<u32>,
    /// Tokens per run.
    pub budget_tokens: Option<u64>,
    /// Estimated USD per run.
    pub budget_usd: Option<f64>,
    /// Seconds per run.
    pub wall_clock_secs: Option<u64>,
    /// Tool calls per run.
    pub max_tool_calls: Option<u32>,
    /// Sub-agents at once per run.
    pub max_parallel_subagents: Option<u32>,
}

/// `[tools]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsFile {
    /// Extra environment variables passed to bash.
    #[serde(default)]
    pub env_allowlist: Vec<String>,
    /// Default per-call timeout in seconds.
    pub timeout_secs: Option<u64>,
}

/// One `[[hooks.EVENT]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookFile {
    /// Regular expression on the event's subject (the tool name for tool
    /// events); absent: every one.
    pub matcher: Option<String>,
    /// The command, run with `bash -c` in the project root.
    pub command: String,
    /// Seconds before it is killed (default 60).
    pub timeout_secs: Option<u64>,
    /// Run only the first time it matches in a run.
    #[serde(default)]
    pub once: bool,
}

/// `[telemetry]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryFile {
    /// Record prompt and completion content on spans.
    pub capture_content: Option<bool>,
}

/// `[sandbox]`: how the operating system confines commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFile {
    /// `workspace-write` (default), `read-only` or `off`.
    pub mode: Option<SandboxMode>,
    /// Whether commands may use the network (default true).
    pub network: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_entry_shows_no_value_that_may_be_a_credential() {
        let entry = McpServerFile {
            command: Some("server".into()),
            args: vec!["--token=literal-arg".into()],
            env: [("TOKEN".to_owned(), "literal-env".to_owned())].into(),
            url: Some("http://u:pw@h/mcp?k=literal-query".into()),
            headers: [("X-Key".to_owned(), "literal-header".to_owned())].into(),
            ..McpServerFile::default()
        };
        let shown = format!("{entry:?}");
        for secret in [
            "literal-arg",
            "literal-env",
            "literal-query",
            "literal-header",
            "pw",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        for name in ["TOKEN", "X-Key", "http://***@h/mcp?k=***", "server"] {
            assert!(shown.contains(name), "{name} not in {shown}");
        }
    }
}
