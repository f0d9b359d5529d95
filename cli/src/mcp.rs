//! MCP servers at the front door: starting a run's configured servers (with
//! the warnings a person should see), and `troupe mcp list`, which starts the
//! servers configured for a directory, waits until each is ready or has
//! failed, prints them (state, tools, last error) and shuts them down. The
//! servers of a project that is not trusted are listed as `untrusted`, with
//! the file that names them and the command that trusts the project; they
//! are never started.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Subcommand;
use serde_json::json;
use troupe_actors::BaseEnv;
use troupe_actors::McpHub;
use troupe_config::Config;
use troupe_mcp::{
    CONNECT_TIMEOUT, McpServerSpec, McpState, ServerPhase, ServerStatus, resolve_servers,
};
use troupe_tools::Tool;

use troupe_config::UntrustedServer;

use crate::project::{Locations, RunOptions, configured_with_root};

/// The state `troupe mcp list` shows for a server an untrusted project names.
const UNTRUSTED: &str = "untrusted";
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// `troupe mcp` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Start the MCP servers configured for this directory and list them:
    /// state, tools, last error.
    List {
        /// One JSON object per server and line.
        #[arg(long)]
        json: bool,
        /// Directory whose configuration is used (default: the current one).
        #[arg(long)]
        cwd: Option<std::path::PathBuf>,
    },
}

/// Starts the servers `config` names for a run in `project_root`; `None`
/// when there are none. Returns the warnings to show (undefined variables,
/// unusable entries).
pub(crate) async fn start_servers(
    config: &Config,
    locations: &Locations,
    project_root: &Path,
) -> (Option<McpHub>, Vec<String>) {
    let (specs, mut warnings) = server_specs(config, locations, project_root);
    if specs.is_empty() {
        return (None, warnings);
    }
    match McpHub::start(specs, base_env(locations)).await {
        Ok(hub) => (Some(hub), warnings),
        Err(err) => {
            warnings.push(err);
            (None, warnings)
        }
    }
}

/// The servers `config` names for `project_root`, resolved with the
/// variables of `locations` (never a provider key variable of `config`), and
/// the warnings to show.
pub(crate) fn server_specs(
    config: &Config,
    locations: &Locations,
    project_root: &Path,
) -> (Vec<McpServerSpec>, Vec<String>) {
    let env = |name: &str| locations.var(name);
    let key_vars = troupe_config::keys::config_key_names(config);
    resolve_servers(&config.mcp_servers, &env, project_root, &key_vars)
}

/// The environment stdio servers started for `locations` inherit: the
/// client's when it sent one, else this process's.
pub(crate) fn base_env(locations: &Locations) -> BaseEnv {
    locations
        .vars
        .as_ref()
        .map(|vars| Arc::new(vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
}

/// What a person is told about servers after a run's start-up wait: those
/// that failed, and those still starting (their tools join later).
pub(crate) fn startup_notices(state: &McpState) -> Vec<String> {
    state
        .statuses()
        .iter()
        .filter_map(|status| match status.phase {
            ServerPhase::Failed => Some(format!(
                "MCP server {} could not start: {}",
                status.name,
                status.last_error.as_deref().unwrap_or("no reason given")
            )),
            ServerPhase::Starting => Some(format!(
                "MCP server {} is still starting; its tools are offered once it is ready",
                status.name
            )),
            _ => None,
        })
        .collect()
}

/// `troupe mcp …`.
pub(crate) async fn mcp(command: McpCommand) -> u8 {
    match command {
        McpCommand::List { json, cwd } => list(json, cwd).await,
    }
}

async fn list(json: bool, cwd: Option<std::path::PathBuf>) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let options = RunOptions {
        cwd,
        ..RunOptions::default()
    };
    let project = match configured_with_root(&locations, &options) {
        Ok(project) => project,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    if let Some(notice) = project.notice() {
        eprintln!("troupe: {}", crate::sanitize::for_terminal(&notice));
    }
    let (config, project_root, untrusted) =
        (project.config, project.root, project.untrusted_servers);
    let (hub, warnings) = start_servers(&config, &locations, &project_root).await;
    for warning in &warnings {
        eprintln!("troupe: {}", crate::sanitize::for_terminal(warning));
    }
    if hub.is_none() && config.mcp_servers.is_empty() && untrusted.is_empty() {
        eprintln!(
            "troupe: no MCP servers are configured for {} (add [mcp_servers.NAME] to \
             .troupe/config.toml or a .mcp.json)",
            project_root.display()
        );
        return EXIT_USAGE;
    }
    let started = hub.is_some();
    if let Some(hub) = hub {
        hub.state()
            .wait_settled(CONNECT_TIMEOUT + Duration::from_secs(1))
            .await;
        for status in &hub.state().statuses() {
            if json {
                println!("{}", status_json(status));
            } else {
                print!("{}", status_text(status));
            }
        }
        hub.shutdown_within(troupe_mcp::EXIT_BUDGET).await;
        crate::await_killed_processes().await;
    }
    for server in &untrusted {
        if json {
            println!("{}", untrusted_json(server, &project_root));
        } else {
            print!(
                "{}",
                crate::sanitize::for_terminal(&untrusted_text(server, &project_root))
            );
        }
    }
    if !started && !config.mcp_servers.is_empty() && !warnings.is_empty() {
        EXIT_RUNTIME
    } else {
        0
    }
}

/// A server of an untrusted project as a JSON line: state `untrusted`, the
/// file that names it and the command that trusts the project.
fn untrusted_json(server: &UntrustedServer, project_root: &Path) -> serde_json::Value {
    json!({
        "name": server.name,
        "state": UNTRUSTED,
        "transport": server.transport(),
        "target": server.target(),
        "file": server.file,
        "tools": [],
        "skipped": [],
        "last_error": null,
        "trust_command": format!(
            "troupe trust {}",
            troupe_config::trust::shell_word(&project_root.display().to_string())
        ),
    })
}

/// A server of an untrusted project as text: a line like a started
/// server's, then why it did not start and how to trust the project.
fn untrusted_text(server: &UntrustedServer, project_root: &Path) -> String {
    format!(
        "{}  {UNTRUSTED}  {}  {}  ({})\n    not started: the project is not trusted; review {} \
         and run {} to start it\n",
        server.name,
        server.transport(),
        server.target(),
        server.file,
        server.file,
        troupe_config::trust::trust_command(project_root)
    )
}

/// One server as a JSON line.
fn status_json(status: &ServerStatus) -> serde_json::Value {
    let tools: Vec<serde_json::Value> = status
        .tools
        .iter()
        .map(|tool| json!({"name": tool.name(), "read_only": tool.read_only()}))
        .collect();
    json!({
        "name": status.name,
        "state": status.phase.as_str(),
        "transport": status.transport,
        "target": status.target,
        "server": status.server_info,
        "tools": tools,
        "skipped": status.skipped,
        "last_error": status.last_error,
    })
}

/// One server as text: a line, then its tools and skipped tools indented.
fn status_text(status: &ServerStatus) -> String {
    let mut out = format!(
        "{}  {}  {}  {}",
        status.name,
        status.phase.as_str(),
        status.transport,
        status.target
    );
    if status.phase == ServerPhase::Ready {
        let n = status.tools.len();
        out.push_str(&format!("  ({n} tool{})", if n == 1 { "" } else { "s" }));
    }
    out.push('\n');
    for tool in &status.tools {
        let flag = if tool.read_only() {
            "  (read-only)"
        } else {
            ""
        };
        out.push_str(&format!("    {}{flag}\n", tool.name()));
    }
    for skipped in &status.skipped {
        out.push_str(&format!("    skipped: {skipped}\n"));
    }
    if let Some(error) = &status.last_error {
        out.push_str(&format!("    last error: {error}\n"));
    }
    out
}

/// What `troupe mcp list` prints, as text, for the servers configured for
/// `options`' directory: each started, waited for until ready or failed,
/// shown (state, tools, last error) and shut down. The chat's `/mcp`.
pub(crate) async fn servers_text(locations: &Locations, options: &RunOptions) -> String {
    let project = match configured_with_root(locations, options) {
        Ok(project) => project,
        Err(err) => return err.message,
    };
    let notice = project.notice();
    let (config, project_root, untrusted) =
        (project.config, project.root, project.untrusted_servers);
    let (hub, warnings) = start_servers(&config, locations, &project_root).await;
    let mut text: String = notice
        .iter()
        .chain(&warnings)
        .map(|warning| format!("troupe: {warning}\n"))
        .collect();
    match hub {
        None if config.mcp_servers.is_empty() && untrusted.is_empty() => text.push_str(&format!(
            "No MCP servers are configured for {} (add [mcp_servers.NAME] to \
             .troupe/config.toml or a .mcp.json).",
            project_root.display()
        )),
        None => {}
        Some(hub) => {
            hub.state()
                .wait_settled(CONNECT_TIMEOUT + Duration::from_secs(1))
                .await;
            for status in hub.state().statuses() {
                text.push_str(&status_text(&status));
            }
            hub.shutdown_within(troupe_mcp::EXIT_BUDGET).await;
            crate::await_killed_processes().await;
        }
    }
    for server in &untrusted {
        text.push_str(&untrusted_text(server, &project_root));
    }
    text.trim_end().to_string()
}
