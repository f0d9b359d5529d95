//! A configured MCP server, ready to start (SPEC §1.2, §8): the entry of the
//! configuration with `${VAR}` expanded, its working directory resolved and
//! its grace period decided. [`resolve_servers`] is pure: it reads variables
//! through an [`Env`] and returns the warnings to show (one per undefined
//! variable, one per entry that cannot be used) instead of printing them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::load::check_http_url;
use crate::config::{Env, McpServerFile, McpTransport, expand_mcp_server};

use super::DEFAULT_STARTUP_GRACE;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// One server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The entry's name (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransportSpec,
    /// How long a run's first request waits for it while it starts.
    pub startup_grace: Duration,
    /// The project root, offered to the server as its root (`roots/list`).
    pub project_root: Option<PathBuf>,
}

impl McpServerSpec {
    /// `stdio` or `http`, for listings.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            McpTransportSpec::Stdio { .. } => "stdio",
            McpTransportSpec::Http { .. } => "http",
        }
    }

    /// What it runs or where it is, for listings (no header values, no env).
    pub fn target(&self) -> String {
        match &self.transport {
            McpTransportSpec::Stdio { command, args, .. } => {
                let mut out = command.clone();
                for arg in args {
                    out.push(' ');
                    out.push_str(arg);
                }
                out
            }
            McpTransportSpec::Http { url, .. } => url.clone(),
        }
    }
}

/// The servers to start for `servers` (enabled entries, by name), with the
/// warnings to show: an undefined variable once (it expands to ""), an entry
/// that is unusable after expansion (and is left out).
pub fn resolve_servers(
    servers: &BTreeMap<String, McpServerFile>,
    env: &impl Env,
    project_root: &Path,
) -> (Vec<McpServerSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut warnings = Vec::new();
    let mut warned: Vec<String> = Vec::new();
    for (name, entry) in servers.iter().filter(|(_, entry)| entry.is_enabled()) {
        let (entry, undefined) = expand_mcp_server(entry, env);
        for var in undefined {
            if !warned.contains(&var) {
                warnings.push(format!(
                    "MCP server {name}: environment variable {var} is not set; ${{{var}}} \
                     expands to \"\""
                ));
                warned.push(var);
            }
        }
        match spec_of(name, &entry, project_root) {
            Ok(spec) => specs.push(spec),
            Err(reason) => warnings.push(format!("MCP server {name} is not started: {reason}")),
        }
    }
    (specs, warnings)
}

/// One expanded entry as a spec, or why it cannot be used.
fn spec_of(
    name: &str,
    entry: &McpServerFile,
    project_root: &Path,
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
            check_http_url(&url)?;
            McpTransportSpec::Http {
                url,
                headers: entry.headers.clone().into_iter().collect(),
            }
        }
        None => return Err("it has neither `command` nor `url`".into()),
    };
    Ok(McpServerSpec {
        name: name.to_string(),
        transport,
        startup_grace: entry
            .startup_grace_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_STARTUP_GRACE),
        project_root: Some(project_root.to_path_buf()),
    })
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
        let (specs, warnings) = resolve_servers(&servers, &env, Path::new("/p"));
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
        assert_eq!(specs[0].target(), "python3 /srv/server.py ");
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
        let (specs, warnings) = resolve_servers(&servers, &Vars(vec![]), Path::new("/p"));
        assert!(specs.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].starts_with("MCP server h is not started:"),
            "{warnings:?}"
        );
    }
}
