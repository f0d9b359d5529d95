//! Loading, validating and merging configuration files (SPEC §1.2).
//!
//! Reads the user file then the project file (each optional), checks each one
//! beyond what serde checks, and merges them: scalars project over user over
//! defaults, named entries (`providers`, `mcp_servers`) replaced whole by the
//! project, permission rules of both kept with their [`RuleSource`]. Every error
//! names the file, the key path and the 1-based line. This module reads files
//! only; it does not consult the environment (callers pass paths in through
//! [`ConfigSources`]) and does not resolve providers (see `resolve`).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::Protocol;
use super::error::ConfigError;
use super::file::{ConfigFile, McpServerFile, McpTransport, Price, ProviderFile, Thinking};
use super::mcp::is_valid_server_name;
use super::paths::{self, Env, ProcessEnv};
use super::trust::{LeftOut, TrustSplit, UntrustedServer};
use super::{
    Config, Limits, PermissionMode, PermissionSettings, RuleEntry, RuleSource, TelemetrySettings,
    ToolSettings,
};

/// Where configuration files are looked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSources {
    /// User config file path (`~/.config/troupe/config.toml`).
    pub user: Option<PathBuf>,
    /// Project root; its file is `<root>/.troupe/config.toml`.
    pub project_root: Option<PathBuf>,
    /// Home directory: `~` in `extra_roots` and relative `extra_roots` of the
    /// user file resolve against it.
    pub home: Option<PathBuf>,
}

impl ConfigSources {
    /// Sources for a working directory under the given environment: the user
    /// file from `XDG_CONFIG_HOME`/`HOME`, the project root discovered from
    /// `cwd` ([`paths::find_project_root`]), the home directory from `HOME`.
    pub fn from_env(env: &impl Env, cwd: &Path) -> Self {
        Self {
            user: paths::user_config_file(env).ok(),
            project_root: Some(paths::find_project_root(cwd)),
            home: paths::home_dir(env),
        }
    }

    /// [`ConfigSources::from_env`] with the real process environment.
    pub fn discover(cwd: &Path) -> Self {
        Self::from_env(&ProcessEnv, cwd)
    }

    /// The project file, `<root>/.troupe/config.toml`, when a root is set.
    pub fn project_file(&self) -> Option<PathBuf> {
        self.project_root.as_deref().map(paths::project_config_file)
    }
}

/// Loads the user file then the project file (each optional: a missing file is
/// skipped, an unreadable one is an error), validates both and merges them.
/// The project file applies in full: callers that have not checked the
/// project's trust use [`load_config_with_trust`].
pub fn load_config(sources: &ConfigSources) -> Result<Config, ConfigError> {
    load_config_with_trust(sources, true).map(|loaded| loaded.config)
}

/// A merged configuration and what an untrusted project file had to leave
/// out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedConfig {
    /// The merged configuration.
    pub config: Config,
    /// The project files' settings that were ignored because the project is
    /// not trusted (see `trust::split_widening`), each with its file; empty
    /// when trusted.
    pub ignored: Vec<LeftOut>,
    /// The MCP servers of the project's files that were left out because
    /// the project is not trusted; empty when trusted.
    pub untrusted_servers: Vec<UntrustedServer>,
}

/// [`load_config`] for a project that is trusted (`project_trusted`) or not:
/// an untrusted project file keeps only the settings that do not widen what
/// runs unasked or where data goes, and the others are named in
/// [`LoadedConfig::ignored`].
pub fn load_config_with_trust(
    sources: &ConfigSources,
    project_trusted: bool,
) -> Result<LoadedConfig, ConfigError> {
    let mut layers = Vec::new();
    let mut ignored = Vec::new();
    let mut untrusted_servers = Vec::new();
    if let Some(path) = &sources.user
        && let Some(text) = read_optional(path)?
    {
        let base = RootBase::Home(sources.home.as_deref());
        let (layer, _) = load_layer(path, &text, RuleSource::User, base, sources, true)?;
        layers.push(layer);
    }
    if let Some(path) = sources.project_file() {
        // The same file configured twice (XDG_CONFIG_HOME pointed into the
        // project) is read once, as the user file.
        let already_read = sources.user.as_deref() == Some(path.as_path());
        if !already_read && let Some(text) = read_optional(&path)? {
            let base = RootBase::ProjectRoot(sources.project_root.as_deref());
            let (layer, left_out) = load_layer(
                &path,
                &text,
                RuleSource::Project,
                base,
                sources,
                project_trusted,
            )?;
            layers.push(layer);
            ignored = left_out.ignored;
            untrusted_servers = left_out.servers;
        }
    }
    let mut config = merge(layers)?;
    // A project's `.mcp.json` adds the servers Troupe's files do not name.
    let (left_out, servers) = super::mcp::add_project_mcp_json(
        &mut config,
        sources.project_root.as_deref(),
        project_trusted,
    )?;
    ignored.extend(left_out);
    untrusted_servers.extend(servers);
    Ok(LoadedConfig {
        config,
        ignored,
        untrusted_servers,
    })
}

/// Parses and validates one file's text (no merging, no path resolution).
/// `path` is only used in error messages.
pub fn parse_config_file(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
    let doc = Document::parse(path, text)?;
    let file = doc.deserialize()?;
    doc.validate(&file)?;
    Ok(file)
}

/// Checks the syntax of one permission rule: `Name` or `Name(pattern)`, a
/// non-empty name without whitespace or parentheses, a non-empty pattern with
/// balanced parentheses. Matching semantics belong to the permission engine.
pub(crate) fn check_rule_syntax(rule: &str) -> Result<(), String> {
    const EXPECTED: &str = "expected `Name` or `Name(pattern)`, e.g. `Bash(git push*)`";
    let name_end = rule.find('(').unwrap_or(rule.len());
    let name = &rule[..name_end];
    if name.is_empty() {
        return Err(format!("rule {rule:?} has an empty tool name; {EXPECTED}"));
    }
    if let Some(bad) = name.chars().find(|c| c.is_whitespace() || *c == ')') {
        return Err(format!(
            "rule {rule:?}: tool name {name:?} contains {bad:?}; {EXPECTED}"
        ));
    }
    let Some(inner) = rule[name_end..]
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
    else {
        // No `(` at all means the whole rule is a name, checked above.
        return if name_end == rule.len() {
            Ok(())
        } else {
            Err(format!(
                "rule {rule:?} has unbalanced parentheses; {EXPECTED}"
            ))
        };
    };
    if inner.is_empty() {
        return Err(format!(
            "rule {rule:?} has an empty pattern; write `{name}` to match every call"
        ));
    }
    let mut depth: usize = 0;
    for c in inner.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    format!("rule {rule:?} has unbalanced parentheses; {EXPECTED}")
                })?;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!(
            "rule {rule:?} has unbalanced parentheses; {EXPECTED}"
        ));
    }
    Ok(())
}

/// Checks that `url` is an absolute `http://` or `https://` URL with a host.
pub(crate) fn check_http_url(url: &str) -> Result<(), String> {
    const EXPECTED: &str = "expected an http:// or https:// URL";
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("invalid URL {url:?} ({e}); {EXPECTED}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "unsupported URL scheme {:?} in {url:?}; {EXPECTED}",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("URL {url:?} has no host; {EXPECTED}"));
    }
    Ok(())
}

/// Reads a file; `Ok(None)` when it (or a directory above it) does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// What relative `extra_roots` of a file resolve against.
#[derive(Debug, Clone, Copy)]
enum RootBase<'a> {
    /// The user file: the home directory.
    Home(Option<&'a Path>),
    /// The project file: the project root.
    ProjectRoot(Option<&'a Path>),
}

/// One file, parsed, validated, with its paths resolved.
#[derive(Debug)]
struct Layer {
    path: PathBuf,
    source: RuleSource,
    file: ConfigFile,
    /// `tools.env_allowlist` is written in the file (even as `[]`).
    env_allowlist_set: bool,
    /// Line of `default_provider`, for the cross-file check.
    default_provider_line: usize,
    /// `permissions.extra_roots`, absolute.
    extra_roots: Vec<PathBuf>,
}

/// The first setting of `file` only the user's own config file may make,
/// with what it governs: a project's file that makes it is refused (a cloned
/// repository could otherwise shorten the user's history or open the user's
/// network to `web_fetch`).
fn user_only_setting(file: &ConfigFile) -> Option<(&'static [&'static str], &'static str)> {
    if file.store.is_some() {
        return Some((
            &["store"],
            "[store] says how much of the history under TROUPE_HOME is kept",
        ));
    }
    if file.cluster.is_some() {
        return Some((
            &["cluster"],
            "[cluster] says which cluster the daemon joins and with which credentials",
        ));
    }
    if file
        .checkpoints
        .as_ref()
        .is_some_and(|checkpoints| checkpoints.max_bytes.is_some())
    {
        return Some((
            &["checkpoints", "max_bytes"],
            "[checkpoints] max_bytes says how much of TROUPE_HOME checkpoints may take",
        ));
    }
    if file
        .web
        .as_ref()
        .is_some_and(|web| !web.allow_private.is_empty())
    {
        return Some((
            &["web", "allow_private"],
            "[web] allow_private opens private addresses of the user's network to web_fetch",
        ));
    }
    None
}

/// Parses, validates and resolves one file; an untrusted file (`trusted`
/// false) keeps only what `trust::split_widening` lets through, and what it
/// left out is returned with the layer.
fn load_layer(
    path: &Path,
    text: &str,
    source: RuleSource,
    base: RootBase<'_>,
    sources: &ConfigSources,
    trusted: bool,
) -> Result<(Layer, TrustSplit), ConfigError> {
    let doc = Document::parse(path, text)?;
    let file = doc.deserialize()?;
    doc.validate(&file)?;
    if source == RuleSource::Project
        && let Some((keys, what)) = user_only_setting(&file)
    {
        let at: Vec<Seg> = keys.iter().map(|key| Seg::Key((*key).into())).collect();
        return Err(doc.invalid(
            &at,
            format!(
                "{what}; only the user's config file may set it (move it to \
                 ~/.config/troupe/config.toml)"
            ),
        ));
    }
    let (file, left_out) = if trusted {
        (file, TrustSplit::default())
    } else {
        let mut split = super::trust::split_widening(&file);
        let applied = std::mem::take(&mut split.applied);
        (applied, split)
    };
    let env_allowlist_ignored = left_out
        .ignored
        .iter()
        .any(|left| left.item == "tools.env_allowlist");
    let raw_roots = file
        .permissions
        .as_ref()
        .map(|p| p.extra_roots.as_slice())
        .unwrap_or_default();
    let mut extra_roots = Vec::with_capacity(raw_roots.len());
    for (i, raw) in raw_roots.iter().enumerate() {
        let root = resolve_extra_root(raw, base, sources.home.as_deref()).map_err(|message| {
            doc.invalid(
                &[
                    Seg::Key("permissions".into()),
                    Seg::Key("extra_roots".into()),
                    Seg::Index(i),
                ],
                message,
            )
        })?;
        extra_roots.push(root);
    }
    let layer = Layer {
        path: path.to_path_buf(),
        source,
        env_allowlist_set: doc.has(&["tools", "env_allowlist"]) && !env_allowlist_ignored,
        default_provider_line: doc.line_of(&[Seg::Key("default_provider".into())]),
        file,
        extra_roots,
    };
    Ok((layer, left_out))
}

/// Makes one `extra_roots` entry absolute: `~` and `~/…` expand to the home
/// directory; other relative paths resolve against the home directory (user
/// file) or the project root (project file).
fn resolve_extra_root(
    raw: &str,
    base: RootBase<'_>,
    home: Option<&Path>,
) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("empty path; expected a directory path".into());
    }
    let tilde_rest = if raw == "~" {
        Some("")
    } else {
        raw.strip_prefix("~/")
    };
    let joined = if let Some(rest) = tilde_rest {
        let home = home.ok_or_else(|| {
            format!("{raw:?} starts with `~` but HOME is not set; write an absolute path")
        })?;
        home.join(rest)
    } else if Path::new(raw).is_absolute() {
        PathBuf::from(raw)
    } else {
        match base {
            RootBase::Home(Some(dir)) | RootBase::ProjectRoot(Some(dir)) => dir.join(raw),
            RootBase::Home(None) => {
                return Err(format!(
                    "relative path {raw:?} in the user file resolves against HOME, which is not set; write an absolute path"
                ));
            }
            RootBase::ProjectRoot(None) => {
                return Err(format!(
                    "relative path {raw:?} needs a project root; write an absolute path"
                ));
            }
        }
    };
    std::path::absolute(&joined)
        .map_err(|e| format!("cannot make {raw:?} absolute ({e}); write an absolute path"))
}

/// A hook from its file entry.
fn build_hook(
    event: troupe_hooks::HookEvent,
    entry: &super::file::HookFile,
    source: RuleSource,
) -> Result<troupe_hooks::Hook, troupe_hooks::HookConfigError> {
    troupe_hooks::Hook::new(
        event,
        entry.matcher.as_deref(),
        &entry.command,
        entry.timeout_secs,
        entry.once,
        source,
    )
}

/// Merges validated layers in order (user, then project).
fn merge(layers: Vec<Layer>) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    let mut default_from: Option<(PathBuf, usize)> = None;
    let mut mode: Option<PermissionMode> = None;
    let mut permissions = PermissionSettings::default();
    let mut limits = Limits::default();
    let mut tools = ToolSettings::default();
    let mut telemetry = TelemetrySettings::default();
    let mut hooks = Vec::new();

    for layer in layers {
        let Layer {
            path,
            source,
            file,
            env_allowlist_set,
            default_provider_line,
            extra_roots,
        } = layer;
        if let Some(name) = file.default_provider {
            config.default_provider = Some(name);
            default_from = Some((path.clone(), default_provider_line));
        }
        // Named entries are replaced whole: no field of the earlier entry
        // survives.
        config.providers.extend(file.providers);
        config.mcp_servers.extend(file.mcp_servers);
        // Hooks add up: a later file never replaces an earlier one's.
        // In the order the events are documented, each in file order.
        for event in troupe_hooks::HookEvent::ALL {
            for entry in file.hooks.get(event.as_str()).into_iter().flatten() {
                if let Ok(hook) = build_hook(event, entry, source) {
                    hooks.push(hook);
                }
            }
        }
        if let Some(p) = file.permissions {
            mode = p.mode.or(mode);
            let tag = |rules: Vec<String>| {
                rules
                    .into_iter()
                    .map(move |rule| RuleEntry { rule, source })
            };
            permissions.allow.extend(tag(p.allow));
            permissions.ask.extend(tag(p.ask));
            permissions.deny.extend(tag(p.deny));
        }
        permissions.extra_roots.extend(extra_roots);
        if let Some(l) = file.limits {
            config.budget_usd_written |= l.budget_usd.is_some();
            merge_limits(&mut limits, &l);
        }
        if let Some(t) = file.tools {
            if env_allowlist_set {
                tools.env_allowlist = t.env_allowlist;
            }
            if let Some(secs) = t.timeout_secs {
                tools.timeout = Duration::from_secs(secs);
            }
        }
        if let Some(t) = file.telemetry
            && let Some(capture) = t.capture_content
        {
            telemetry.capture_content = capture;
        }
        if let Some(s) = file.sandbox {
            config.sandbox.mode = s.mode.unwrap_or(config.sandbox.mode);
            config.sandbox.network = s.network.unwrap_or(config.sandbox.network);
        }
        if let Some(work_ahead) = file.compaction.and_then(|c| c.work_ahead) {
            config.compaction.work_ahead = work_ahead;
        }
        // A file may turn web_fetch off, never back on; only the user's file
        // gets here with `allow_private` (see load_layer).
        if let Some(web) = &file.web {
            config.web.enabled &= web.enabled.unwrap_or(true);
            config.web.allow_private.extend(
                web.allow_private
                    .iter()
                    .filter_map(|a| a.parse::<std::net::SocketAddr>().ok()),
            );
        }
        // Either file may turn checkpoints off, never back on; only the
        // user's file gets here with `max_bytes` (see load_layer).
        if let Some(checkpoints) = &file.checkpoints {
            config.checkpoints.enabled &= checkpoints.enabled.unwrap_or(true);
            if let Some(max_bytes) = checkpoints.max_bytes {
                config.checkpoints.max_bytes = max_bytes;
            }
        }
        // Only the user's file gets here with `[store]` (see load_layer).
        if let Some(store) = &file.store {
            config.store = crate::StoreSettings::from_file(store);
        }
        // And with `[cluster]`.
        if let Some(cluster) = &file.cluster {
            config.cluster = cluster.clone();
        }
        config.sources.push(path);
    }

    permissions.mode = mode.unwrap_or_default();
    config.permissions = permissions;
    config.limits = limits;
    config.tools = tools;
    config.telemetry = telemetry;
    config.hooks = hooks;

    if let (Some(name), Some((path, line))) = (&config.default_provider, default_from)
        && !config.providers.is_empty()
        && !config.providers.contains_key(name)
    {
        let known: Vec<&str> = config.providers.keys().map(String::as_str).collect();
        return Err(ConfigError::Invalid {
            path,
            line,
            key: "default_provider".into(),
            message: format!(
                "no provider named {name:?} (expected one of: {})",
                known.join(", ")
            ),
        });
    }
    Ok(config)
}

/// Applies the keys a file sets over `limits`.
fn merge_limits(limits: &mut Limits, file: &super::file::LimitsFile) {
    if let Some(v) = file.max_turns {
        limits.max_turns = v;
    }
    if let Some(v) = file.budget_tokens {
        limits.budget_tokens = v;
    }
    if let Some(v) = file.budget_usd {
        limits.budget_usd = v;
    }
    if let Some(v) = file.wall_clock_secs {
        limits.wall_clock = Duration::from_secs(v);
    }
    if let Some(v) = file.max_tool_calls {
        limits.max_tool_calls = v;
    }
    if let Some(v) = file.max_parallel_subagents {
        limits.max_parallel_subagents = v;
    }
}

/// One segment of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// Renders a key path as `a.b[2].c`.
fn render_key(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// 1-based line of a byte offset (also used for role files' front matter).
pub(crate) fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// A parsed file: its text and spanned tree, for locating keys.
struct Document<'t> {
    path: &'t Path,
    text: &'t str,
    tree: Spanned<DeTable<'t>>,
}

impl<'t> Document<'t> {
    /// Parses the TOML syntax.
    fn parse(path: &'t Path, text: &'t str) -> Result<Self, ConfigError> {
        let tree = DeTable::parse(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            line: e.span().map_or(1, |span| line_at(text, span.start)),
            message: e.message().to_owned(),
        })?;
        Ok(Self { path, text, tree })
    }

    /// Deserialises into the file shape, reporting key path and line from
    /// the structured problem (never from the wording of an error message).
    fn deserialize(&self) -> Result<ConfigFile, ConfigError> {
        super::de::from_tree(&self.tree).map_err(|e| {
            let key = e.path().to_string();
            let key = if key == "." {
                "(top level)".to_owned()
            } else {
                key
            };
            let problem = e.into_inner();
            ConfigError::Invalid {
                path: self.path.to_path_buf(),
                line: problem
                    .span
                    .as_ref()
                    .map_or(1, |span| line_at(self.text, span.start)),
                key,
                message: super::de::describe(&problem.kind),
            }
        })
    }

    /// An error about `key`, located at that key's line.
    fn invalid(&self, key: &[Seg], message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line: self.line_of(key),
            key: render_key(key),
            message: message.into(),
        }
    }

    /// The line of `key` (the key itself for table keys, the element for array
    /// indexes), or of its nearest written ancestor; line 1 when nothing of it
    /// is written.
    fn line_of(&self, key: &[Seg]) -> usize {
        let mut offset: Option<usize> = None;
        let mut current: Option<&DeValue<'t>> = None;
        for (depth, seg) in key.iter().enumerate() {
            let next = match (seg, depth) {
                (Seg::Key(k), 0) => self
                    .tree
                    .get_ref()
                    .get_key_value(k.as_str())
                    .map(|(k, v)| (k.span().start, v)),
                (Seg::Key(k), _) => current
                    .and_then(DeValue::as_table)
                    .and_then(|t| t.get_key_value(k.as_str()))
                    .map(|(k, v)| (k.span().start, v)),
                (Seg::Index(i), _) => current
                    .and_then(DeValue::as_array)
                    .and_then(|a| a.get(*i))
                    .map(|v| (v.span().start, v)),
            };
            let Some((start, value)) = next else {
                break;
            };
            offset = Some(start);
            current = Some(value.get_ref());
        }
        offset.map_or(1, |o| line_at(self.text, o))
    }

    /// Whether the key path (table keys only) is written in the file.
    fn has(&self, key: &[&str]) -> bool {
        let Some((first, rest)) = key.split_first() else {
            return true;
        };
        let mut current = self.tree.get_ref().get(*first).map(Spanned::get_ref);
        for k in rest {
            current = current
                .and_then(DeValue::as_table)
                .and_then(|t| t.get(*k))
                .map(Spanned::get_ref);
        }
        current.is_some()
    }

    /// Checks what serde cannot: ranges, URLs, MCP entries, rule syntax.
    fn validate(&self, file: &ConfigFile) -> Result<(), ConfigError> {
        for (name, provider) in &file.providers {
            self.validate_provider(name, provider)?;
        }
        for (name, server) in &file.mcp_servers {
            self.validate_mcp_server(name, server)?;
        }
        if let Some(p) = &file.permissions {
            for (list, rules) in [("allow", &p.allow), ("ask", &p.ask), ("deny", &p.deny)] {
                for (i, rule) in rules.iter().enumerate() {
                    check_rule_syntax(rule).map_err(|m| {
                        self.invalid(&[key("permissions"), key(list), Seg::Index(i)], m)
                    })?;
                }
            }
        }
        if let Some(l) = &file.limits {
            let at = |k: &str| [key("limits"), key(k)];
            self.positive(&at("max_turns"), l.max_turns)?;
            self.positive(&at("budget_tokens"), l.budget_tokens)?;
            self.positive_f64(&at("budget_usd"), l.budget_usd)?;
            self.positive(&at("wall_clock_secs"), l.wall_clock_secs)?;
            self.positive(&at("max_tool_calls"), l.max_tool_calls)?;
            self.positive(&at("max_parallel_subagents"), l.max_parallel_subagents)?;
        }
        for (name, entries) in &file.hooks {
            let Some(event) = troupe_hooks::HookEvent::from_name(name) else {
                let known: Vec<&str> = troupe_hooks::HookEvent::ALL
                    .iter()
                    .map(|event| event.as_str())
                    .collect();
                return Err(self.invalid(
                    &[key("hooks"), key(name)],
                    format!(
                        "unknown hook event {name:?}; expected one of: {}",
                        known.join(", ")
                    ),
                ));
            };
            for (i, entry) in entries.iter().enumerate() {
                // Validated with the same constructor the merge uses.
                build_hook(event, entry, RuleSource::User).map_err(|err| {
                    let field = match err {
                        troupe_hooks::HookConfigError::BadMatcher { .. } => "matcher",
                        troupe_hooks::HookConfigError::EmptyCommand => "command",
                        troupe_hooks::HookConfigError::BadTimeout => "timeout_secs",
                    };
                    self.invalid(
                        &[key("hooks"), key(name), Seg::Index(i), key(field)],
                        err.to_string(),
                    )
                })?;
            }
        }
        if let Some(c) = &file.cluster {
            self.positive(&[key("cluster"), key("lease_secs")], c.lease_secs)?;
            self.positive(&[key("cluster"), key("replicas")], c.replicas)?;
            if let Some(replicas) = c.replicas
                && replicas > MAX_REPLICAS
            {
                return Err(self.invalid(
                    &[key("cluster"), key("replicas")],
                    format!("invalid value: {replicas}, expected at most {MAX_REPLICAS}"),
                ));
            }
        }
        if let Some(s) = &file.store {
            self.positive(&[key("store"), key("keep_days")], s.keep_days)?;
            self.positive(&[key("store"), key("max_bytes")], s.max_bytes)?;
        }
        if let Some(web) = &file.web {
            for (i, entry) in web.allow_private.iter().enumerate() {
                if entry.parse::<std::net::SocketAddr>().is_err() {
                    return Err(self.invalid(
                        &[key("web"), key("allow_private"), Seg::Index(i)],
                        format!(
                            "{entry:?} is not an address and port; expected e.g. \
                             \"127.0.0.1:8080\" or \"[::1]:3000\""
                        ),
                    ));
                }
            }
        }
        if let Some(t) = &file.tools {
            self.positive(&[key("tools"), key("timeout_secs")], t.timeout_secs)?;
            for (i, name) in t.env_allowlist.iter().enumerate() {
                if name.is_empty() || name.contains('=') {
                    return Err(self.invalid(
                        &[key("tools"), key("env_allowlist"), Seg::Index(i)],
                        format!(
                            "{name:?} is not a variable name; expected a name like \"CARGO_HOME\""
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_provider(&self, name: &str, p: &ProviderFile) -> Result<(), ConfigError> {
        let at = |k: &str| [key("providers"), key(name), key(k)];
        if let Some(model) = &p.model
            && model.trim().is_empty()
        {
            return Err(self.invalid(&at("model"), "empty model id; expected a model name"));
        }
        if let Some(url) = &p.base_url {
            check_http_url(url).map_err(|m| self.invalid(&at("base_url"), m))?;
        }
        if let Some(var) = &p.api_key_env
            && (var.is_empty() || var.contains('='))
        {
            return Err(self.invalid(
                &at("api_key_env"),
                format!(
                    "{var:?} is not a variable name; expected a name like \"ANTHROPIC_API_KEY\""
                ),
            ));
        }
        self.positive(&at("context_window"), p.context_window)?;
        self.positive(&at("max_tokens"), p.max_tokens)?;
        if p.thinking == Some(Thinking::Budget(0)) {
            return Err(self.invalid(
                &at("thinking"),
                "a budget of 0 tokens; expected a positive budget, or false to turn thinking off",
            ));
        }
        if let Some(price) = &p.price {
            self.validate_price(name, price)?;
        }
        self.positive(&at("idle_timeout_secs"), p.idle_timeout_secs)?;
        let protocol = p
            .protocol
            .unwrap_or_else(|| super::resolve::infer_protocol(name));
        if p.store.is_some() && protocol != Protocol::OpenAiResponses {
            return Err(self.invalid(
                &at("store"),
                format!(
                    "`store` applies to protocol \"openai-responses\" only, and this entry speaks \"{}\"; remove it or set protocol = \"openai-responses\"",
                    protocol.as_str()
                ),
            ));
        }
        Ok(())
    }

    fn validate_price(&self, name: &str, price: &Price) -> Result<(), ConfigError> {
        let fields = [
            ("input", price.input),
            ("output", price.output),
            ("cache_read", price.cache_read),
            ("cache_write", price.cache_write),
        ];
        for (field, value) in fields {
            if !(value.is_finite() && value >= 0.0) {
                return Err(self.invalid(
                    &[key("providers"), key(name), key("price"), key(field)],
                    format!(
                        "{value} is not a price; expected a number >= 0 (USD per million tokens)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_mcp_server(&self, name: &str, s: &McpServerFile) -> Result<(), ConfigError> {
        let entry = [key("mcp_servers"), key(name)];
        let at = |k: &str| [key("mcp_servers"), key(name), key(k)];
        if !is_valid_server_name(name) {
            return Err(self.invalid(
                &entry,
                format!("invalid server name {name:?}; expected letters, digits, `_` and `-` only"),
            ));
        }
        let Some(transport) = s.effective_transport() else {
            let message = if s.command.is_some() {
                "both `command` and `url` are set; add `type = \"stdio\"` or `type = \"http\"`"
            } else {
                "neither `command` (stdio) nor `url` (http) is set; expected one of them"
            };
            return Err(self.invalid(&entry, message));
        };
        match transport {
            McpTransport::Stdio => {
                match &s.command {
                    None => {
                        return Err(self.invalid(
                            &entry,
                            "a stdio server needs `command`; expected e.g. command = \"npx\"",
                        ));
                    }
                    Some(c) if c.trim().is_empty() => {
                        return Err(self
                            .invalid(&at("command"), "empty command; expected a program to run"));
                    }
                    Some(_) => {}
                }
                if s.cwd.as_deref().is_some_and(|cwd| cwd.trim().is_empty()) {
                    return Err(self.invalid(
                        &at("cwd"),
                        "empty directory; remove `cwd` to start the server in the project root",
                    ));
                }
                for (field, set) in [("url", s.url.is_some()), ("headers", !s.headers.is_empty())] {
                    if set {
                        return Err(self.invalid(
                            &at(field),
                            format!("`{field}` is for http servers; this entry is stdio (remove it or set type = \"http\")"),
                        ));
                    }
                }
            }
            McpTransport::Http => {
                let Some(url) = &s.url else {
                    return Err(self.invalid(
                        &entry,
                        "an http server needs `url`; expected e.g. url = \"http://127.0.0.1:8080/mcp\"",
                    ));
                };
                // A URL with `${VAR}` in it is checked after expansion. The
                // message does not quote it: it may hold a credential.
                if !url.contains("${") {
                    crate::endpoint::check_endpoint(url)
                        .map_err(|m| self.invalid(&at("url"), m))?;
                }
                for (field, set) in [
                    ("command", s.command.is_some()),
                    ("args", !s.args.is_empty()),
                    ("env", !s.env.is_empty()),
                    ("cwd", s.cwd.is_some()),
                ] {
                    if set {
                        return Err(self.invalid(
                            &at(field),
                            format!("`{field}` is for stdio servers; this entry is http (remove it or set type = \"stdio\")"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A set integer must be greater than zero.
    fn positive<T>(&self, key: &[Seg], value: Option<T>) -> Result<(), ConfigError>
    where
        T: PartialOrd + Default + std::fmt::Display,
    {
        match value {
            Some(v) if v <= T::default() => Err(self.invalid(
                key,
                format!("invalid value: {v}, expected a number greater than 0"),
            )),
            _ => Ok(()),
        }
    }

    /// A set float must be finite and greater than zero.
    fn positive_f64(&self, key: &[Seg], value: Option<f64>) -> Result<(), ConfigError> {
        match value {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(self.invalid(
                key,
                format!("invalid value: {v}, expected a finite number greater than 0"),
            )),
            _ => Ok(()),
        }
    }
}

/// The most copies of a stream JetStream keeps.
const MAX_REPLICAS: usize = 5;

/// Shorthand for a table-key segment.
fn key(k: &str) -> Seg {
    Seg::Key(k.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        parse_config_file(Path::new("/cfg/config.toml"), text)
    }

    fn err(text: &str) -> (usize, String, String) {
        match parse(text) {
            Err(ConfigError::Invalid {
                line, key, message, ..
            }) => (line, key, message),
            other => panic!("expected an invalid-key error, got {other:?}"),
        }
    }

    #[test]
    fn rule_syntax_accepts_names_and_patterns() {
        for rule in [
            "Bash",
            "Bash(git push*)",
            "Read(.env)",
            "Write(src/**)",
            "mcp__github__*",
            "Bash(echo (a) (b))",
        ] {
            assert_eq!(check_rule_syntax(rule), Ok(()), "{rule}");
        }
    }

    #[test]
    fn rule_syntax_rejects_malformed_rules() {
        for rule in [
            "", "(x)", "Bash(", "Bash)", "Bash(x", "Bash(x))", "Bash((x)", "Bash()", "Bash (x)",
            " Bash", "Bash(x)y",
        ] {
            assert!(check_rule_syntax(rule).is_err(), "{rule:?} accepted");
        }
    }

    #[test]
    fn urls_must_be_http() {
        assert_eq!(check_http_url("http://127.0.0.1:8080/v1"), Ok(()));
        assert_eq!(check_http_url("https://api.anthropic.com"), Ok(()));
        for bad in [
            "ftp://x",
            "not a url",
            "localhost:8080",
            "http://",
            "file:///tmp",
        ] {
            let e = check_http_url(bad).unwrap_err();
            assert!(
                e.contains("expected an http:// or https:// URL"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn server_names() {
        assert!(is_valid_server_name("git-hub_2"));
        assert!(!is_valid_server_name(""));
        assert!(!is_valid_server_name("a.b"));
        assert!(!is_valid_server_name("a b"));
    }

    #[test]
    fn line_at_counts_from_one() {
        assert_eq!(line_at("a\nb\nc", 0), 1);
        assert_eq!(line_at("a\nb\nc", 2), 2);
        assert_eq!(line_at("a\nb\nc", 4), 3);
        assert_eq!(line_at("a\n", 99), 2);
    }

    #[test]
    fn render_key_formats_indexes() {
        assert_eq!(
            render_key(&[key("permissions"), key("allow"), Seg::Index(2)]),
            "permissions.allow[2]"
        );
    }

    #[test]
    fn line_of_finds_keys_and_falls_back_to_ancestors() {
        let text = "default_provider = 'a'\n\n[providers.a]\nmodel = 'm'\n[permissions]\nallow = [\n  'X',\n  'Y',\n]\n";
        let path = Path::new("/f");
        let doc = Document::parse(path, text).unwrap();
        assert_eq!(doc.line_of(&[key("default_provider")]), 1);
        assert_eq!(doc.line_of(&[key("providers"), key("a"), key("model")]), 4);
        assert_eq!(
            doc.line_of(&[key("providers"), key("a"), key("base_url")]),
            3
        );
        assert_eq!(
            doc.line_of(&[key("permissions"), key("allow"), Seg::Index(1)]),
            8
        );
        assert_eq!(doc.line_of(&[key("limits")]), 1);
        assert!(doc.has(&["providers", "a", "model"]));
        assert!(!doc.has(&["providers", "b"]));
    }

    #[test]
    fn store_is_for_the_responses_protocol_only() {
        let f = parse("[providers.a]\nprotocol = 'openai-responses'\nstore = true\n").unwrap();
        assert_eq!(f.providers["a"].store, Some(true));
        assert_eq!(f.providers["a"].protocol, Some(Protocol::OpenAiResponses));
        let (line, key, message) = err("[providers.a]\nprotocol = 'openai'\nstore = false\n");
        assert_eq!((line, key.as_str()), (3, "providers.a.store"));
        assert!(message.contains("\"openai-responses\" only"), "{message}");
        assert!(message.contains("speaks \"openai\""), "{message}");
        // The protocol inferred from the name counts too.
        let (_, key, message) = err("[providers.claude]\nstore = true\n");
        assert_eq!(key, "providers.claude.store");
        assert!(message.contains("speaks \"anthropic\""), "{message}");
        let (_, key, _) = err("[providers.a]\nprotocol = 'openai-responses'\nstore = 'yes'\n");
        assert_eq!(key, "providers.a.store");
    }

    #[test]
    fn thinking_accepts_bool_and_budget_only() {
        let f = parse("[providers.a]\nthinking = true\n").unwrap();
        assert_eq!(f.providers["a"].thinking, Some(Thinking::Enabled(true)));
        let f = parse("[providers.a]\nthinking = 12000\n").unwrap();
        assert_eq!(f.providers["a"].thinking, Some(Thinking::Budget(12_000)));
        let (line, key, message) = err("[providers.a]\n\nthinking = 'yes'\n");
        assert_eq!((line, key.as_str()), (3, "providers.a.thinking"));
        assert!(
            message.contains("expected true, false or a thinking budget in tokens"),
            "{message}"
        );
        let (_, _, message) = err("[providers.a]\nthinking = -5\n");
        assert!(message.contains("-5"), "{message}");
        let (_, _, message) = err("[providers.a]\nthinking = 0\n");
        assert!(message.contains("false to turn thinking off"), "{message}");
    }

    #[test]
    fn validation_errors_point_at_key_and_line() {
        let (line, key, message) = err("[limits]\nmax_turns = 0\n");
        assert_eq!((line, key.as_str()), (2, "limits.max_turns"));
        assert!(message.contains("greater than 0"), "{message}");

        let (line, key, _) = err("[limits]\nbudget_usd = nan\n");
        assert_eq!((line, key.as_str()), (2, "limits.budget_usd"));

        let (line, key, _) = err("[tools]\ntimeout_secs = 0\n");
        assert_eq!((line, key.as_str()), (2, "tools.timeout_secs"));

        let (line, key, _) =
            err("[providers.p]\nmodel = 'm'\nprice = { input = -1.0, output = 1.0 }\n");
        assert_eq!((line, key.as_str()), (3, "providers.p.price.input"));

        let (line, key, _) = err("[providers.p]\ncontext_window = 0\n");
        assert_eq!((line, key.as_str()), (2, "providers.p.context_window"));
    }

    #[test]
    fn mcp_entries_need_their_transport_keys() {
        let (line, key, message) = err("[mcp_servers.x]\ntype = 'stdio'\nargs = ['a']\n");
        assert_eq!((line, key.as_str()), (1, "mcp_servers.x"));
        assert!(message.contains("needs `command`"), "{message}");

        let (line, key, message) = err("\n[mcp_servers.x]\ntype = 'http'\n");
        assert_eq!((line, key.as_str()), (2, "mcp_servers.x"));
        assert!(message.contains("needs `url`"), "{message}");

        let (_, key, message) = err("[mcp_servers.x]\n");
        assert_eq!(key, "mcp_servers.x");
        assert!(message.contains("neither"), "{message}");

        let (line, key, _) = err("[mcp_servers.x]\ntype = 'http'\nurl = 'ftp://h/mcp'\n");
        assert_eq!((line, key.as_str()), (3, "mcp_servers.x.url"));

        let (line, key, message) =
            err("[mcp_servers.x]\ntype = 'http'\nurl = 'http://h/mcp'\ncommand = 'npx'\n");
        assert_eq!((line, key.as_str()), (4, "mcp_servers.x.command"));
        assert!(message.contains("stdio servers"), "{message}");

        let (line, key, message) = err("[mcp_servers.'bad.name']\ncommand = 'x'\n");
        assert_eq!((line, key.as_str()), (1, "mcp_servers.bad.name"));
        assert!(message.contains("invalid server name"), "{message}");

        // Inferred transports and URLs with variables are accepted.
        let f = parse(
            "[mcp_servers.a]\ncommand = 'npx'\n[mcp_servers.b]\nurl = 'http://${HOST}/mcp'\n",
        )
        .unwrap();
        assert_eq!(
            f.mcp_servers["a"].effective_transport(),
            Some(McpTransport::Stdio)
        );
        assert_eq!(
            f.mcp_servers["b"].effective_transport(),
            Some(McpTransport::Http)
        );
    }

    #[test]
    fn extra_roots_resolution() {
        let home = Path::new("/home/u");
        let root = Path::new("/repo");
        assert_eq!(
            resolve_extra_root("notes", RootBase::Home(Some(home)), Some(home)),
            Ok(PathBuf::from("/home/u/notes"))
        );
        assert_eq!(
            resolve_extra_root("../shared", RootBase::ProjectRoot(Some(root)), Some(home)),
            Ok(PathBuf::from("/repo/../shared"))
        );
        assert_eq!(
            resolve_extra_root("~/x", RootBase::ProjectRoot(Some(root)), Some(home)),
            Ok(PathBuf::from("/home/u/x"))
        );
        assert_eq!(
            resolve_extra_root("~", RootBase::ProjectRoot(Some(root)), Some(home)),
            Ok(PathBuf::from("/home/u"))
        );
        assert_eq!(
            resolve_extra_root("/abs", RootBase::Home(None), None),
            Ok(PathBuf::from("/abs"))
        );
        assert!(resolve_extra_root("~/x", RootBase::Home(Some(home)), None).is_err());
        assert!(resolve_extra_root("rel", RootBase::Home(None), None).is_err());
        assert!(resolve_extra_root("", RootBase::Home(Some(home)), Some(home)).is_err());
    }
}
