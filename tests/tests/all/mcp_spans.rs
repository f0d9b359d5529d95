//! The spans of MCP servers (SPEC §11): connecting to a server is an
//! `initialize {server}` span (server, transport, outcome; an error when it
//! failed), and a call of an MCP tool is an `execute_tool` span carrying the
//! server's name, with a `tools/call {tool}` span below it. Against the real
//! FastMCP fixture (`tests/mcp/fixture_server.py`, installed by
//! `tests/mcp/install.sh`); spans are captured in memory as the product's
//! pipeline produces them. When the fixture is not installed the test says so
//! loudly and passes, unless `TROUPE_REQUIRE_MCP_SERVERS=1`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use troupe_actors::McpHub;
use troupe_mcp::{McpServerSpec, McpTransportSpec, ServerPhase};
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_scripted::{Script, text, tool_call};
use troupe_telemetry::{TelemetrySettings, testing};
use troupe_tests::mcp_fixture_python as fixture_python;
use troupe_tests::{Harness, RunOptions, run_events};

/// Longest wait for the servers to settle.
const LIMIT: Duration = Duration::from_secs(60);

fn attributes(span: &SpanData) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

fn stdio(name: &str, command: &str, args: &[String], root: &Path) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        transport: McpTransportSpec::Stdio {
            command: command.into(),
            args: args.to_vec(),
            env: Vec::new(),
            cwd: root.to_path_buf(),
        },
        startup_grace: Duration::from_secs(60),
        project_root: Some(root.to_path_buf()),
        redaction: Default::default(),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn connecting_and_calling_are_spans_that_name_the_server() {
    let Some(python) = fixture_python() else {
        return;
    };
    let (telemetry, captured) = testing::capture(&TelemetrySettings::default()).unwrap();
    // Everything (actors, connections, executors) runs on this thread.
    let _default = tracing::dispatcher::set_default(telemetry.dispatch());

    let h = Harness::anthropic(
        Script::new()
            .then(tool_call("mcp__fixture__record", json!({"id": "x"})))
            .then(text("done")),
    )
    .await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/fixture_server.py");
    let specs = vec![
        stdio(
            "fixture",
            &python.display().to_string(),
            &[script.display().to_string()],
            h.root(),
        ),
        stdio("broken", "sh", &["-c".into(), "exit 3".into()], h.root()),
    ];
    let hub = McpHub::start(specs, None).await.unwrap();
    let state = hub.state().clone();
    let mut changes = state.subscribe();
    tokio::time::timeout(LIMIT, async {
        loop {
            let ready = state
                .status("fixture")
                .is_some_and(|s| s.phase == ServerPhase::Ready);
            let failed = state
                .status("broken")
                .is_some_and(|s| s.last_error.is_some());
            if ready && failed {
                return;
            }
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("the servers settle");

    let env = h.env_with_mcp(hub.clone());
    let mut run = h.submit("record", RunOptions::bypass(env)).await;
    let events = run_events(&mut run).await;
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::RunFinished {
            status: RunStatus::Finished,
            ..
        }
    ));
    hub.shutdown().await;
    let spans = captured.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();

    let connect = spans
        .iter()
        .find(|s| s.name == "initialize fixture")
        .unwrap_or_else(|| panic!("{names:?}"));
    let attrs = attributes(connect);
    assert_eq!(attrs["mcp.method.name"], "initialize");
    assert_eq!(attrs["troupe.mcp.server"], "fixture");
    assert_eq!(attrs["network.transport"], "pipe");
    assert_eq!(attrs["troupe.mcp.outcome"], "connected");
    assert_eq!(connect.status, Status::Unset);

    let broken = spans
        .iter()
        .find(|s| s.name == "initialize broken")
        .unwrap_or_else(|| panic!("{names:?}"));
    let attrs = attributes(broken);
    assert_eq!(attrs["troupe.mcp.outcome"], "failed");
    assert_eq!(attrs["error.type"], "failed");
    assert!(matches!(broken.status, Status::Error { .. }));

    let execute = spans
        .iter()
        .find(|s| s.name == "execute_tool mcp__fixture__record")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(attributes(execute)["troupe.mcp.server"], "fixture");
    let call = spans
        .iter()
        .find(|s| s.name == "tools/call record")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(call.parent_span_id, execute.span_context.span_id());
    let attrs = attributes(call);
    assert_eq!(attrs["mcp.method.name"], "tools/call");
    assert_eq!(attrs["troupe.mcp.server"], "fixture");
    assert_eq!(attrs["gen_ai.tool.name"], "record");
    assert_eq!(
        call.span_context.trace_id(),
        execute.span_context.trace_id()
    );
}
