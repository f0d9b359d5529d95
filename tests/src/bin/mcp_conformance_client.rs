//! The MCP client of the product, driven by the conformance suite of
//! `@modelcontextprotocol/conformance` (client mode): the suite starts a test
//! server for a scenario and runs this program with the server's URL as the
//! last argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`.
//!
//! It connects with the product's [`Connection`] (Streamable HTTP), lists the
//! tools, and calls them through the product's `McpTool` with nobody to ask
//! (no run reaches the call), exactly as a `--json` run would:
//!
//! - `initialize`: connect and list;
//! - `tools_call`: call `add_numbers` with two numbers;
//! - `elicitation-sep1034-client-defaults`: call the tool that asks a
//!   question; the answer is the schema's defaults;
//! - `sse-retry`: call the tool whose response stream closes early; the
//!   transport reconnects after the `retry` the server gave.
//!
//! Any other scenario connects and lists. Exits 0 when every step worked,
//! 1 otherwise (with the reason on stderr).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_mcp::tool::tools_of;
use troupe_mcp::{Connection, McpServerSpec, McpTransportSpec};
use troupe_paths::sandbox::PathSandbox;
use troupe_tools::background::BackgroundTasks;
use troupe_tools::{Tool, ToolContext};

/// The suite gives a client 30 s; stay well inside it.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// The server's name as tools are qualified with it.
const SERVER: &str = "conformance";

#[tokio::main]
async fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: mcp_conformance_client URL (scenario in MCP_CONFORMANCE_SCENARIO)");
        std::process::exit(2);
    };
    match tokio::time::timeout(STEP_TIMEOUT, run(&scenario, &url)).await {
        Ok(Ok(summary)) => {
            println!("{scenario}: {summary}");
        }
        Ok(Err(reason)) => {
            eprintln!("{scenario}: {reason}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("{scenario}: no result within {} s", STEP_TIMEOUT.as_secs());
            std::process::exit(1);
        }
    }
}

/// Runs one scenario; a summary of what happened, or why it failed.
async fn run(scenario: &str, url: &str) -> Result<String, String> {
    let root = std::env::current_dir().map_err(|err| format!("no working directory: {err}"))?;
    let spec = McpServerSpec {
        name: SERVER.into(),
        transport: McpTransportSpec::Http {
            url: url.to_string(),
            headers: Vec::new(),
        },
        startup_grace: Duration::ZERO,
        project_root: Some(root.clone()),
        redaction: Default::default(),
    };
    let connection = Connection::connect(&spec, None)
        .await
        .map_err(|err| err.0)?;
    let listed = connection.list_tools().await.map_err(|err| err.0)?;
    let (tools, skipped) = tools_of(SERVER, &listed, &connection.link());
    for reason in skipped {
        eprintln!("skipped: {reason}");
    }
    let call = match scenario {
        "tools_call" => Some(("add_numbers", json!({"a": 2, "b": 3}))),
        "elicitation-sep1034-client-defaults" => {
            Some(("test_client_elicitation_defaults", json!({})))
        }
        "sse-retry" => Some(("test_reconnection", json!({}))),
        _ => None,
    };
    let summary = match call {
        None => format!(
            "connected to {}, {} tools",
            connection.server_info(),
            tools.len()
        ),
        Some((name, args)) => {
            let qualified = format!("mcp__{SERVER}__{name}");
            let tool = tools
                .iter()
                .find(|tool| tool.name() == qualified)
                .ok_or_else(|| format!("the server lists no tool {name}"))?;
            let scratch = tempdir(&root)?;
            let output = tool.execute(args, &context(scratch.path())?).await;
            let text = serde_json::to_string(&output.content).unwrap_or_default();
            if output.is_error {
                return Err(format!("{name} failed: {text}"));
            }
            format!("{name} returned {text}")
        }
    };
    connection.close(Duration::from_secs(2)).await;
    Ok(summary)
}

/// A scratch directory for the call's context (nothing is written to it).
fn tempdir(root: &Path) -> Result<tempfile::TempDir, String> {
    tempfile::tempdir()
        .or_else(|_| tempfile::tempdir_in(root))
        .map_err(|err| format!("no scratch directory: {err}"))
}

/// The context of a call no run reaches: nobody to ask, no notices.
fn context(dir: &Path) -> Result<ToolContext, String> {
    Ok(ToolContext {
        call_id: "conformance-1".into(),
        sandbox: Arc::new(PathSandbox::new(dir, &[], None).map_err(|err| err.to_string())?),
        os_sandbox: Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
        spill_dir: dir.join("spill"),
        cancel: tokio_util::sync::CancellationToken::new(),
        child_env: Arc::new(Vec::<(String, String)>::new()),
        background: Arc::new(BackgroundTasks::new()),
        outside_read_approved: false,
        reach: None,
    })
}
