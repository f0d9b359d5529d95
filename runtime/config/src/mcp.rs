//! A project's `.mcp.json` (SPEC §1.2, §8): the MCP server list in the
//! format other MCP clients share, `{"mcpServers": {NAME: {...}}}`, read so an
//! existing project works unchanged.
//!
//! An entry is `{"command", "args", "env", "cwd"}` (stdio; `"type": "stdio"`
//! optional) or `{"type": "http", "url", "headers"}` (Streamable HTTP). Each
//! becomes an [`McpServerFile`] and is added to the configuration only under a
//! name that Troupe's own files do not define: Troupe's configuration wins on
//! a clash. Keys this reader does not use are ignored with a warning (other
//! clients add their own); wrong types, bad names, missing keys and oversized
//! files are errors that name the file, the key and the line. This module
//! reads one file and builds values; it does not start anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::Config;
use super::error::ConfigError;
use super::file::{McpServerFile, McpTransport};
use super::trust::{LeftOut, UntrustedServer};

/// The file name, at the project root.
pub(crate) const MCP_JSON_FILE: &str = ".mcp.json";

/// A `.mcp.json` larger than this is refused (a server list is a few KB).
pub(crate) const MAX_MCP_JSON_BYTES: u64 = 1024 * 1024;

/// The servers of a `.mcp.json`, by name, and what was ignored in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct McpJson {
    /// Server entries by name.
    pub servers: BTreeMap<String, McpServerFile>,
    /// Keys that were ignored (`mcpServers.x.description`), for a warning.
    pub ignored: Vec<String>,
}

/// Reads `<root>/.mcp.json`: `Ok(None)` when there is none.
pub(crate) fn read_mcp_json(root: &Path) -> Result<Option<McpJson>, ConfigError> {
    let path = root.join(MCP_JSON_FILE);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    if meta.len() > MAX_MCP_JSON_BYTES {
        return Err(invalid(
            &path,
            1,
            "mcpServers",
            format!(
                "the file is {} bytes, more than the {MAX_MCP_JSON_BYTES} bytes a server list may take",
                meta.len()
            ),
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    parse_mcp_json(&path, &text).map(Some)
}

/// Parses the text of a `.mcp.json`; `path` is only used in messages.
pub(crate) fn parse_mcp_json(path: &Path, text: &str) -> Result<McpJson, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|err| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: err.line().max(1),
        message: format!("JSON syntax error: {err}"),
    })?;
    let file = JsonFile { path, text };
    let Value::Object(root) = root else {
        return Err(file.invalid(
            "",
            "",
            "expected a JSON object such as {\"mcpServers\": {}}",
        ));
    };
    let mut out = McpJson::default();
    for key in root.keys().filter(|key| *key != "mcpServers") {
        out.ignored.push(key.clone());
    }
    let servers = match root.get("mcpServers") {
        None => return Ok(out),
        Some(Value::Object(servers)) => servers,
        Some(other) => {
            return Err(file.invalid(
                "mcpServers",
                "\"mcpServers\"",
                format!(
                    "expected an object of servers by name, found {}",
                    kind(other)
                ),
            ));
        }
    };
    for (name, entry) in servers {
        let at = format!("mcpServers.{name}");
        let needle = format!("{:?}", name);
        if !is_valid_server_name(name) {
            return Err(file.invalid(
                &at,
                &needle,
                format!("invalid server name {name:?}; expected letters, digits, `_` and `-` only"),
            ));
        }
        let Value::Object(entry) = entry else {
            return Err(file.invalid(
                &at,
                &needle,
                format!("expected an object, found {}", kind(entry)),
            ));
        };
        let server = file.server(name, entry, &mut out.ignored)?;
        out.servers.insert(name.clone(), server);
    }
    Ok(out)
}

/// Adds the servers of the project's `.mcp.json` to `config` under the names
/// its files do not define. Returns the names taken from `.mcp.json` and the
/// keys that were ignored.
pub(crate) fn merge_mcp_json(config: &mut Config, json: McpJson) -> (Vec<String>, Vec<String>) {
    let mut added = Vec::new();
    for (name, server) in json.servers {
        if !config.mcp_servers.contains_key(&name) {
            config.mcp_servers.insert(name.clone(), server);
            added.push(name);
        }
    }
    (added, json.ignored)
}

/// Reads `<root>/.mcp.json` into `config` ([`merge_mcp_json`]); the hook the
/// loader calls after merging Troupe's own files. In a project that is not
/// trusted, every server of it (a stdio one runs a command, an HTTP one
/// sends its URL and headers to a host) is left out, named in the returned
/// list (with the command it would run or the endpoint it would reach) and
/// returned whole as an [`UntrustedServer`].
pub(crate) fn add_project_mcp_json(
    config: &mut Config,
    project_root: Option<&Path>,
    trusted: bool,
) -> Result<(Vec<LeftOut>, Vec<UntrustedServer>), ConfigError> {
    let Some(root) = project_root else {
        return Ok(Default::default());
    };
    let Some(mut json) = read_mcp_json(root)? else {
        return Ok(Default::default());
    };
    let mut left_out = Vec::new();
    let mut servers = Vec::new();
    if !trusted {
        for (name, server) in std::mem::take(&mut json.servers) {
            left_out.push(LeftOut::new(
                MCP_JSON_FILE,
                format!("server {name} ({})", super::trust::mcp_left_out(&server)),
            ));
            servers.push(UntrustedServer {
                name,
                file: MCP_JSON_FILE.to_owned(),
                server,
            });
        }
    }
    let path = root.join(MCP_JSON_FILE);
    let (added, ignored) = merge_mcp_json(config, json);
    if !ignored.is_empty() {
        tracing::warn!(
            file = %path.display(),
            keys = %ignored.join(", "),
            "keys of .mcp.json that Troupe does not use were ignored"
        );
    }
    if !added.is_empty() {
        config.sources.push(path);
    }
    Ok((left_out, servers))
}

/// One file being read, for messages.
struct JsonFile<'a> {
    path: &'a Path,
    text: &'a str,
}

impl JsonFile<'_> {
    /// An error about `key`, at the line where `needle` first appears.
    fn invalid(&self, key: &str, needle: &str, message: impl Into<String>) -> ConfigError {
        invalid(self.path, line_of(self.text, needle), key, message)
    }

    /// One server entry.
    fn server(
        &self,
        name: &str,
        entry: &Map<String, Value>,
        ignored: &mut Vec<String>,
    ) -> Result<McpServerFile, ConfigError> {
        let at = |k: &str| format!("mcpServers.{name}.{k}");
        let needle = |k: &str| format!("\"{k}\"");
        let string = |k: &str| -> Result<Option<String>, ConfigError> {
            match entry.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(self.invalid(
                    &at(k),
                    &needle(k),
                    format!("expected a string, found {}", kind(other)),
                )),
            }
        };
        let strings = |k: &str| -> Result<Vec<String>, ConfigError> {
            match entry.get(k) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(self.invalid(
                            &at(k),
                            &needle(k),
                            format!("expected an array of strings, found {}", kind(other)),
                        )),
                    })
                    .collect(),
                Some(other) => Err(self.invalid(
                    &at(k),
                    &needle(k),
                    format!("expected an array of strings, found {}", kind(other)),
                )),
            }
        };
        let table = |k: &str| -> Result<BTreeMap<String, String>, ConfigError> {
            match entry.get(k) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(map)) => map
                    .iter()
                    .map(|(key, value)| match value {
                        Value::String(s) => Ok((key.clone(), s.clone())),
                        other => Err(self.invalid(
                            &format!("{}.{key}", at(k)),
                            &format!("{key:?}"),
                            format!("expected a string value, found {}", kind(other)),
                        )),
                    })
                    .collect(),
                Some(other) => Err(self.invalid(
                    &at(k),
                    &needle(k),
                    format!("expected an object of strings, found {}", kind(other)),
                )),
            }
        };
        let transport = match string("type")?.as_deref() {
            None => None,
            Some("stdio") => Some(McpTransport::Stdio),
            Some("http" | "streamable-http" | "streamableHttp") => Some(McpTransport::Http),
            Some("sse") => {
                return Err(self.invalid(
                    &at("type"),
                    &needle("type"),
                    "the legacy SSE transport is not supported; use a Streamable HTTP URL (\"type\": \"http\")",
                ));
            }
            Some(other) => {
                return Err(self.invalid(
                    &at("type"),
                    &needle("type"),
                    format!("unknown transport {other:?}; expected \"stdio\" or \"http\""),
                ));
            }
        };
        let server = McpServerFile {
            transport,
            command: string("command")?,
            args: strings("args")?,
            env: table("env")?,
            cwd: string("cwd")?,
            url: string("url")?,
            headers: table("headers")?,
            startup_grace_secs: None,
            enabled: None,
        };
        for key in entry.keys() {
            if !matches!(
                key.as_str(),
                "type" | "command" | "args" | "env" | "cwd" | "url" | "headers"
            ) {
                ignored.push(at(key));
            }
        }
        let entry_at = format!("mcpServers.{name}");
        let entry_needle = format!("{name:?}");
        match server.effective_transport() {
            None if server.command.is_some() => Err(self.invalid(
                &entry_at,
                &entry_needle,
                "both \"command\" and \"url\" are set; add \"type\": \"stdio\" or \"type\": \"http\"",
            )),
            None => Err(self.invalid(
                &entry_at,
                &entry_needle,
                "neither \"command\" (stdio) nor \"url\" (http) is set; expected one of them",
            )),
            Some(McpTransport::Stdio) => match &server.command {
                Some(command) if !command.trim().is_empty() => Ok(server),
                _ => Err(self.invalid(
                    &entry_at,
                    &entry_needle,
                    "a stdio server needs a non-empty \"command\"",
                )),
            },
            Some(McpTransport::Http) => match &server.url {
                Some(url) => {
                    if !url.contains("${") {
                        crate::endpoint::check_endpoint(url)
                            .map_err(|m| self.invalid(&at("url"), &needle("url"), m))?;
                    }
                    Ok(server)
                }
                None => Err(self.invalid(
                    &entry_at,
                    &entry_needle,
                    "an http server needs \"url\"",
                )),
            },
        }
    }
}

fn invalid(path: &Path, line: usize, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        path: PathBuf::from(path),
        line,
        key: key.to_string(),
        message: message.into(),
    }
}

/// The 1-based line of the first occurrence of `needle` (1 when absent).
fn line_of(text: &str, needle: &str) -> usize {
    if needle.is_empty() {
        return 1;
    }
    text.find(needle)
        .map(|at| text[..at].matches('\n').count() + 1)
        .unwrap_or(1)
}

/// A JSON value's kind, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether `name` is a valid MCP server name (`^[A-Za-z0-9_-]+$`).
pub(crate) fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpJson, ConfigError> {
        parse_mcp_json(Path::new("/p/.mcp.json"), text)
    }

    fn err(text: &str) -> (usize, String, String) {
        match parse(text).unwrap_err() {
            ConfigError::Invalid {
                line, key, message, ..
            } => (line, key, message),
            ConfigError::Syntax { line, message, .. } => (line, String::new(), message),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn stdio_and_http_entries_in_the_shared_format() {
        let json = parse(
            r#"{
  "mcpServers": {
    "files": {"command": "npx", "args": ["-y", "server"], "env": {"TOKEN": "${T}"}},
    "search": {"type": "http", "url": "http://127.0.0.1:8080/mcp", "headers": {"Authorization": "Bearer x"}},
    "local": {"type": "stdio", "command": "python3", "cwd": "tools", "description": "kept out"}
  }
}"#,
        )
        .unwrap();
        let files = &json.servers["files"];
        assert_eq!(files.effective_transport(), Some(McpTransport::Stdio));
        assert_eq!(files.args, ["-y", "server"]);
        assert_eq!(files.env["TOKEN"], "${T}");
        let search = &json.servers["search"];
        assert_eq!(search.effective_transport(), Some(McpTransport::Http));
        assert_eq!(search.headers["Authorization"], "Bearer x");
        assert_eq!(json.servers["local"].cwd.as_deref(), Some("tools"));
        assert_eq!(json.ignored, ["mcpServers.local.description"]);
    }

    #[test]
    fn an_empty_or_serverless_file_is_no_servers() {
        assert!(parse("{}").unwrap().servers.is_empty());
        assert!(parse(r#"{"mcpServers": {}}"#).unwrap().servers.is_empty());
        assert_eq!(parse(r#"{"other": 1}"#).unwrap().ignored, ["other"]);
    }

    #[test]
    fn wrong_types_and_odd_names_are_errors_with_key_and_line() {
        let (line, key, message) = err("{\n\"mcpServers\": {\n\"a\": {\"command\": 5}}}");
        assert_eq!((line, key.as_str()), (3, "mcpServers.a.command"));
        assert!(
            message.contains("expected a string, found a number"),
            "{message}"
        );

        let (_, key, message) = err(r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#);
        assert_eq!(key, "mcpServers.a.args");
        assert!(message.contains("array of strings"), "{message}");

        let (_, key, message) = err(r#"{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}"#);
        assert_eq!(key, "mcpServers.a.env.K");
        assert!(message.contains("string value"), "{message}");

        let (line, key, message) =
            err("{\"mcpServers\": {\n\n\"bad name/..\": {\"command\": \"x\"}}}");
        assert_eq!((line, key.as_str()), (3, "mcpServers.bad name/.."));
        assert!(message.contains("invalid server name"), "{message}");

        let (_, key, _) = err(r#"{"mcpServers": []}"#);
        assert_eq!(key, "mcpServers");
        let (_, key, _) = err(r#"{"mcpServers": {"a": "npx"}}"#);
        assert_eq!(key, "mcpServers.a");
        let (_, _, message) = err("[1, 2]");
        assert!(message.contains("JSON object"), "{message}");
    }

    #[test]
    fn missing_or_conflicting_transport_keys_are_errors() {
        let (_, key, message) = err(r#"{"mcpServers": {"a": {}}}"#);
        assert_eq!(key, "mcpServers.a");
        assert!(message.contains("neither"), "{message}");
        let (_, _, message) = err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://h/"}}}"#);
        assert!(message.contains("both"), "{message}");
        let (_, key, message) =
            err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h/"}}}"#);
        assert_eq!(key, "mcpServers.a.type");
        assert!(message.contains("not supported"), "{message}");
        let (_, key, _) = err(r#"{"mcpServers": {"a": {"type": "http", "url": "ftp://h/"}}}"#);
        assert_eq!(key, "mcpServers.a.url");
        let (_, _, message) = err(r#"{"mcpServers": {"a": {"type": "stdio", "command": " "}}}"#);
        assert!(message.contains("non-empty"), "{message}");
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let (line, _, message) = err("{\n\"mcpServers\": {\n,}}");
        assert_eq!(line, 3);
        assert!(message.contains("JSON syntax error"), "{message}");
    }

    #[test]
    fn troupe_config_wins_on_a_name_clash() {
        let mut config = Config::default();
        config.mcp_servers.insert(
            "files".into(),
            McpServerFile {
                command: Some("mine".into()),
                ..McpServerFile::default()
            },
        );
        let json =
            parse(r#"{"mcpServers": {"files": {"command": "theirs"}, "extra": {"command": "x"}}}"#)
                .unwrap();
        let (added, _) = merge_mcp_json(&mut config, json);
        assert_eq!(added, ["extra"]);
        assert_eq!(config.mcp_servers["files"].command.as_deref(), Some("mine"));
        assert_eq!(config.mcp_servers["extra"].command.as_deref(), Some("x"));
    }

    #[test]
    fn an_untrusted_projects_servers_all_wait_for_trust() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MCP_JSON_FILE),
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"type": "http", "url": "http://h/mcp?k=${ANTHROPIC_API_KEY}"}}}"#,
        )
        .unwrap();
        let mut config = Config::default();
        let (left_out, servers) =
            add_project_mcp_json(&mut config, Some(dir.path()), false).unwrap();
        assert_eq!(
            left_out,
            [
                LeftOut::new(".mcp.json", "server a (runs `x`)"),
                LeftOut::new(".mcp.json", "server b (connects to http://h/mcp?k=***)"),
            ]
        );
        let names: Vec<(&str, &str)> = servers
            .iter()
            .map(|server| (server.name.as_str(), server.file.as_str()))
            .collect();
        assert_eq!(names, [("a", ".mcp.json"), ("b", ".mcp.json")]);
        assert!(config.mcp_servers.is_empty());
        assert!(config.sources.is_empty());
        let (left_out, servers) =
            add_project_mcp_json(&mut config, Some(dir.path()), true).unwrap();
        assert!(left_out.is_empty() && servers.is_empty());
        assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn files_are_read_from_the_root_and_huge_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_mcp_json(dir.path()).unwrap(), None);
        std::fs::write(
            dir.path().join(MCP_JSON_FILE),
            r#"{"mcpServers": {"a": {"command": "x"}}}"#,
        )
        .unwrap();
        let json = read_mcp_json(dir.path()).unwrap().unwrap();
        assert!(json.servers.contains_key("a"));
        let huge = format!(
            "{{\"mcpServers\": {{}}, \"pad\": \"{}\"}}",
            "x".repeat(MAX_MCP_JSON_BYTES as usize)
        );
        std::fs::write(dir.path().join(MCP_JSON_FILE), huge).unwrap();
        match read_mcp_json(dir.path()).unwrap_err() {
            ConfigError::Invalid { message, .. } => {
                assert!(message.contains("more than"), "{message}")
            }
            other => panic!("{other}"),
        }
    }
}
