//! A configured MCP server, ready to start (SPEC §1.2, §8): the entry of the
//! configuration with `${VAR}` expanded, its working directory resolved and
//! its grace period decided. [`resolve_servers`] is pure: it reads variables
//! through an [`Env`] and returns the warnings to show (one per undefined
//! variable, one per provider key variable an entry names, one per entry
//! that cannot be used) instead of printing them. A provider key variable
//! expands to "" in every entry: no MCP server is given a provider key.
//!
//! A spec never shows what it holds: its `Debug` names headers and variables
//! without their values and shows the URL's origin only, and
//! [`McpServerSpec::target`] and [`McpServerSpec::redact`] are what listings
//! and messages use.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use troupe_config::{Env, McpServerFile, McpTransport, expand_mcp_server};
use troupe_process::secrets::is_key_name;

use super::DEFAULT_STARTUP_GRACE;
use super::redact::Redaction;
use troupe_config::endpoint::{check_endpoint, display_endpoint};

/// How to reach a server.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransportSpec {
    /// A child process speaking over stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: Vec<(String, String)>,
        /// Its working directory.
        cwd: PathBuf,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
    },
}

impl fmt::Debug for McpTransportSpec {
    // Names only: values may be credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(name, _)| name.clone()).collect()
        };
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", &args.len())
                .field("env", &names(env))
                .field("cwd", cwd)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("origin", &origin_of(url))
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

/// The origin of `url` (`scheme://host[:port]`), for `Debug`: what a spec
/// shows without knowing which parts of its path came from the environment.
fn origin_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|parsed| parsed.origin().ascii_serialization())
        .unwrap_or_else(|_| "(a URL that does not parse)".to_owned())
}

/// One server to start.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The entry's name (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransportSpec,
    /// How long a run's first request waits for it while it starts.
    pub startup_grace: Duration,
    /// The project root, offered to the server as its root (`roots/list`).
    pub project_root: Option<PathBuf>,
    /// What to hide in any text about it.
    pub redaction: Redaction,
}

impl fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("target", &self.target())
            .field("transport", &self.transport)
            .field("startup_grace", &self.startup_grace)
            .field("project_root", &self.project_root)
            .finish()
    }
}

impl McpServerSpec {
    /// `stdio` or `http`, for listings.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            McpTransportSpec::Stdio { .. } => "stdio",
            McpTransportSpec::Http { .. } => "http",
        }
    }

    /// What it runs or where it is, for listings and messages: the command
    /// line, or the endpoint as [`display_endpoint`] shows it; values that
    /// came from the environment masked, no header values, no environment.
    pub fn target(&self) -> String {
        match &self.transport {
            McpTransportSpec::Stdio { command, args, .. } => {
                let mut out = command.clone();
                for arg in args {
                    out.push(' ');
                    out.push_str(arg);
                }
                self.redaction.apply(&out)
            }
            McpTransportSpec::Http { url, .. } => self.redaction.apply(&display_endpoint(url)),
        }
    }

    /// `text` (a message about this server) with its secrets hidden.
    pub fn redact(&self, text: &str) -> String {
        self.redaction.apply(text)
    }
}

/// The servers to start for `servers` (enabled entries, by name), with the
/// warnings to show: an undefined variable once (it expands to ""), a
/// variable of `key_vars` once per entry (it expands to "", set or not,
/// whatever its case), an entry that is unusable after expansion (and is
/// left out).
pub fn resolve_servers(
    servers: &BTreeMap<String, McpServerFile>,
    env: &impl Env,
    project_root: &Path,
    key_vars: &BTreeSet<String>,
) -> (Vec<McpServerSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut warnings = Vec::new();
    let mut warned: Vec<String> = Vec::new();
    for (name, entry) in servers.iter().filter(|(_, entry)| entry.is_enabled()) {
        let (entry, met) = expand_mcp_server(entry, env, |var| is_key_name(key_vars, var));
        for var in met.refused {
            warnings.push(format!(
                "MCP server {name}: ${{{var}}} expands to \"\": {var} names a provider key \
                 variable, and no MCP server is given a provider key; give the server a \
                 variable of its own"
            ));
        }
        for var in met.undefined {
            if !warned.contains(&var) {
                warnings.push(format!(
                    "MCP server {name}: environment variable {var} is not set; ${{{var}}} \
                     expands to \"\""
                ));
                warned.push(var);
            }
        }
        match spec_of(name, &entry, project_root, &met.values) {
            Ok(spec) => specs.push(spec),
            Err(reason) => warnings.push(format!("MCP server {name} is not started: {reason}")),
        }
    }
    (specs, warnings)
}

/// One expanded entry as a spec, or why it cannot be used; `expanded` are
/// the values its variables put in.
fn spec_of(
    name: &str,
    entry: &McpServerFile,
    project_root: &Path,
    expanded: &[String],
) -> Result<McpServerSpec, String> {
    let transport = match entry.effective_transport() {
        Some(McpTransport::Stdio) => {
            let command = entry
                .command
                .clone()
                .filter(|c| !c.trim().is_empty())
                .ok_or("it has no `command`")?;
            let cwd = match entry.cwd.as_deref() {
                None => project_root.to_path_buf(),
                Some(dir) => project_root.join(dir),
            };
            McpTransportSpec::Stdio {
                command,
                args: entry.args.clone(),
                env: entry.env.clone().into_iter().collect(),
                cwd,
            }
        }
        Some(McpTransport::Http) => {
            let url = entry.url.clone().ok_or("it has no `url`")?;
            check_endpoint(&url).map_err(|reason| {
                Redaction::new(expanded.iter().map(String::as_str), [url.as_str()]).apply(&reason)
            })?;
            McpTransportSpec::Http {
                url,
                headers: entry.headers.clone().into_iter().collect(),
            }
        }
        None => return Err("it has neither `command` nor `url`".into()),
    };
    let redaction = redaction_of(&transport, expanded);
    Ok(McpServerSpec {
        name: name.to_string(),
        transport,
        startup_grace: entry
            .startup_grace_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_STARTUP_GRACE),
        project_root: Some(project_root.to_path_buf()),
        redaction,
    })
}

/// What to hide in texts about a server reached by `transport`: the values
/// its variables put in (`expanded`), its header and environment values,
/// and its URL.
fn redaction_of(transport: &McpTransportSpec, expanded: &[String]) -> Redaction {
    let expanded = expanded.iter().map(String::as_str);
    match transport {
        McpTransportSpec::Stdio { env, .. } => Redaction::new(
            expanded.chain(env.iter().map(|(_, value)| value.as_str())),
            [],
        ),
        McpTransportSpec::Http { url, headers } => Redaction::new(
            expanded.chain(headers.iter().map(|(_, value)| value.as_str())),
            [url.as_str()],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, &'static str)>);

    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn keys() -> BTreeSet<String> {
        troupe_process::secrets::key_names(["MY_LLM_KEY"])
    }

    #[test]
    fn entries_expand_resolve_and_warn_once_per_variable() {
        let mut servers = BTreeMap::new();
        servers.insert(
            "a".to_string(),
            McpServerFile {
                command: Some("python3".into()),
                args: vec!["${DIR}/server.py".into(), "${MISSING}".into()],
                env: BTreeMap::from([("TOKEN".to_string(), "${MISSING}-${TOKEN}".to_string())]),
                cwd: Some("tools".into()),
                startup_grace_secs: Some(7),
                ..McpServerFile::default()
            },
        );
        servers.insert(
            "b".to_string(),
            McpServerFile {
                url: Some("http://127.0.0.1:${PORT}/mcp".into()),
                headers: BTreeMap::from([(
                    "Authorization".to_string(),
                    "Bearer ${MISSING}".to_string(),
                )]),
                ..McpServerFile::default()
            },
        );
        servers.insert(
            "off".to_string(),
            McpServerFile {
                command: Some("x".into()),
                enabled: Some(false),
                ..McpServerFile::default()
            },
        );
        let env = Vars(vec![("DIR", "/srv"), ("TOKEN", "t"), ("PORT", "8931")]);
        let (specs, warnings) = resolve_servers(&servers, &env, Path::new("/p"), &keys());
        assert_eq!(specs.len(), 2);
        assert_eq!(
            specs[0].transport,
            McpTransportSpec::Stdio {
                command: "python3".into(),
                args: vec!["/srv/server.py".into(), "".into()],
                env: vec![("TOKEN".into(), "-t".into())],
                cwd: "/p/tools".into(),
            }
        );
        assert_eq!(specs[0].startup_grace, Duration::from_secs(7));
        // Values from the environment are not shown.
        assert_eq!(specs[0].target(), "python3 ***/server.py ");
        assert_eq!(
            specs[1].transport,
            McpTransportSpec::Http {
                url: "http://127.0.0.1:8931/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer ".into())],
            }
        );
        assert_eq!(specs[1].startup_grace, DEFAULT_STARTUP_GRACE);
        assert_eq!(
            warnings,
            ["MCP server a: environment variable MISSING is not set; ${MISSING} expands to \"\""]
        );
    }

    #[test]
    fn an_entry_unusable_after_expansion_is_left_out_with_a_warning() {
        let servers = BTreeMap::from([(
            "h".to_string(),
            McpServerFile {
                url: Some("${URL}".into()),
                ..McpServerFile::default()
            },
        )]);
        let (specs, warnings) = resolve_servers(&servers, &Vars(vec![]), Path::new("/p"), &keys());
        assert!(specs.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].starts_with("MCP server h is not started:"),
            "{warnings:?}"
        );
    }

    #[test]
    fn provider_key_variables_never_expand_and_each_entry_says_so() {
        let servers = BTreeMap::from([
            (
                "h".to_string(),
                McpServerFile {
                    url: Some(
                        "http://127.0.0.1:9/mcp?k=${ANTHROPIC_API_KEY}&l=${my_llm_key}&g=${GITHUB_TOKEN}"
                            .into(),
                    ),
                    headers: BTreeMap::from([
                        ("X-Key".to_string(), "${OPENAI_API_KEY}".to_string()),
                        ("Authorization".to_string(), "Bearer ${GITHUB_TOKEN}".to_string()),
                    ]),
                    ..McpServerFile::default()
                },
            ),
            (
                "s".to_string(),
                McpServerFile {
                    command: Some("server".into()),
                    args: vec!["--key=${ANTHROPIC_AUTH_TOKEN}".into()],
                    env: BTreeMap::from([("K".to_string(), "${ANTHROPIC_API_KEY}".to_string())]),
                    ..McpServerFile::default()
                },
            ),
        ]);
        let env = Vars(vec![
            ("ANTHROPIC_API_KEY", "sk-ant-1"),
            ("ANTHROPIC_AUTH_TOKEN", "sk-ant-2"),
            ("OPENAI_API_KEY", "sk-oai"),
            ("my_llm_key", "sk-mine"),
            ("GITHUB_TOKEN", "ghp_own"),
        ]);
        let (specs, warnings) = resolve_servers(&servers, &env, Path::new("/p"), &keys());
        assert_eq!(
            specs[0].transport,
            McpTransportSpec::Http {
                url: "http://127.0.0.1:9/mcp?k=&l=&g=ghp_own".into(),
                headers: vec![
                    ("Authorization".into(), "Bearer ghp_own".into()),
                    ("X-Key".into(), "".into())
                ],
            }
        );
        assert_eq!(
            specs[1].transport,
            McpTransportSpec::Stdio {
                command: "server".into(),
                args: vec!["--key=".into()],
                env: vec![("K".into(), "".into())],
                cwd: "/p".into(),
            }
        );
        let named: Vec<&str> = warnings
            .iter()
            .map(|w| w.split(':').take(2).collect::<Vec<_>>()[1].trim())
            .collect();
        assert_eq!(
            named,
            [
                "${ANTHROPIC_API_KEY} expands to \"\"",
                "${my_llm_key} expands to \"\"",
                "${OPENAI_API_KEY} expands to \"\"",
                "${ANTHROPIC_AUTH_TOKEN} expands to \"\"",
                "${ANTHROPIC_API_KEY} expands to \"\"",
            ]
        );
        assert!(warnings[0].starts_with("MCP server h: "), "{warnings:?}");
        assert!(warnings[4].starts_with("MCP server s: "), "{warnings:?}");
        assert!(
            warnings
                .iter()
                .all(|w| w.contains("provider key") && !w.contains("sk-")),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_spec_shows_no_value_of_its_url_headers_or_environment() {
        let servers = BTreeMap::from([
            (
                "h".to_string(),
                McpServerFile {
                    url: Some(
                        "http://u:${PASS}@127.0.0.1:9/mcp/${TOKEN}?k=${TOKEN}&plain=literal1"
                            .into(),
                    ),
                    headers: BTreeMap::from([("X-Key".to_string(), "literal-header".to_string())]),
                    ..McpServerFile::default()
                },
            ),
            (
                "s".to_string(),
                McpServerFile {
                    command: Some("server".into()),
                    args: vec!["--token".into(), "${TOKEN}".into()],
                    env: BTreeMap::from([("K".to_string(), "literal-env".to_string())]),
                    ..McpServerFile::default()
                },
            ),
        ]);
        let env = Vars(vec![("TOKEN", "ghp_token"), ("PASS", "pw-secret")]);
        let (specs, warnings) = resolve_servers(&servers, &env, Path::new("/p"), &keys());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            specs[0].target(),
            "http://***@127.0.0.1:9/mcp/***?k=***&plain=***"
        );
        assert_eq!(specs[1].target(), "server --token ***");
        let shown = format!("{specs:?}");
        for secret in [
            "ghp_token",
            "pw-secret",
            "literal1",
            "literal-header",
            "literal-env",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("X-Key") && shown.contains("\"K\""),
            "{shown}"
        );
        let error = "error sending request for url \
                     (http://127.0.0.1:9/mcp/ghp_token?k=ghp_token&plain=literal1): \
                     header literal-header";
        assert_eq!(
            specs[0].redact(error),
            "error sending request for url (http://127.0.0.1:9/mcp/***?k=***&plain=***): \
             header ***"
        );
        assert_eq!(
            specs[1].redact("stderr: literal-env ghp_token"),
            "stderr: *** ***"
        );
    }

    #[test]
    fn an_unusable_url_is_refused_without_quoting_it() {
        let servers = BTreeMap::from([(
            "h".to_string(),
            McpServerFile {
                url: Some("ftp://${TOKEN}@h/x".into()),
                ..McpServerFile::default()
            },
        )]);
        let env = Vars(vec![("TOKEN", "ghp_token")]);
        let (specs, warnings) = resolve_servers(&servers, &env, Path::new("/p"), &keys());
        assert!(specs.is_empty());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("MCP server h is not started: unsupported URL scheme"));
        assert!(!warnings[0].contains("ghp_token"), "{warnings:?}");
    }
}
