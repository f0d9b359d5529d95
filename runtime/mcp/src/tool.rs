//! An MCP server's tool as a [`Tool`] (SPEC §4, §8): indistinguishable from a
//! built-in above the registry.
//!
//! Its name is `mcp__<server>__<tool>`; its schema is the server's (an empty
//! one becomes `{"type":"object"}`); it is read-only only when the server
//! says `readOnlyHint: true` (then consecutive calls run concurrently and
//! never wait for a person), else it is an execute-category tool. A call
//! goes straight to the session (the server actor is not in the way); the
//! per-call timeout and cancellation come from the executor: when the call's
//! token is cancelled (or the call is dropped) `notifications/cancelled` is
//! sent for it.
//!
//! For its duration a call is in scope on its connection ([`CallScopes`]):
//! the server's progress notifications for it become notices of the run that
//! made it, and a question the server asks meanwhile goes to that run's
//! approval path. The call runs under a `tools/call {tool}` span, and its
//! `execute_tool` span carries the server's name.
//!
//! [`CallScopes`]: super::calls::CallScopes

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, JsonObject, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::client::CallLink;
use super::content::tool_output;
use super::names::qualified_tool_name;
use troupe_protocol::permission::ToolCategory;
use troupe_telemetry::genai;
use troupe_tools::registry::ArgumentSchema;
use troupe_tools::{Tool, ToolContext, ToolOutput};

/// Characters of a server's tool description kept.
const MAX_DESCRIPTION_CHARS: usize = 2_000;

/// One tool of one connected server.
pub struct McpTool {
    server: String,
    tool: String,
    name: String,
    description: String,
    schema: Value,
    /// `schema`, compiled once for every registry the tool joins.
    compiled: ArgumentSchema,
    read_only: bool,
    link: CallLink,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// The schema offered for a server's input schema: passed through, except
/// that one without a `type` (e.g. `{}`) is an object schema.
pub(crate) fn input_schema_of(schema: &JsonObject) -> Value {
    let mut schema = schema.clone();
    if !schema.contains_key("type") {
        schema.insert("type".into(), Value::String("object".into()));
    }
    Value::Object(schema)
}

/// Whether the server marked the tool read-only (`readOnlyHint: true`; any
/// other value or none is not).
pub(crate) fn is_read_only(tool: &rmcp::model::Tool) -> bool {
    tool.annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false)
}

impl McpTool {
    /// The tool `tool` of `server`, called through `link`, or why it is
    /// skipped (a name that is not valid once qualified, a schema that does
    /// not compile).
    pub fn new(server: &str, tool: &rmcp::model::Tool, link: CallLink) -> Result<Self, String> {
        let name = qualified_tool_name(server, &tool.name)?;
        let schema = input_schema_of(&tool.input_schema);
        let compiled = ArgumentSchema::compile(&name, &schema)
            .map_err(|err| format!("tool {name} is skipped: {err}"))?;
        let mut description: String = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("")
            .chars()
            .take(MAX_DESCRIPTION_CHARS)
            .collect();
        if description.trim().is_empty() {
            description = format!("Tool {} of MCP server {server}.", tool.name);
        }
        Ok(Self {
            server: server.to_string(),
            tool: tool.name.to_string(),
            name,
            description,
            schema,
            compiled,
            read_only: is_read_only(tool),
            link,
        })
    }

    /// The server it belongs to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The tool's own name on its server.
    pub fn tool_name(&self) -> &str {
        &self.tool
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return ToolOutput::error(format!(
                    "Arguments for {} must be a JSON object, not {other}.",
                    self.name
                ));
            }
        };
        let mut params = CallToolRequestParams::new(self.tool.clone());
        params.arguments = arguments;
        let execute = tracing::Span::current();
        execute.set_attribute(genai::MCP_SERVER, self.server.clone());
        let span = genai::mcp_call_span(&execute, &self.server, &self.tool, &ctx.call_id);
        let output = self.send(params, ctx).instrument(span.clone()).await;
        if output.is_error {
            genai::record_error(&span, "tool_error");
        }
        output
    }

    /// Sends the call and waits for its result, in scope on the connection.
    async fn send(&self, params: CallToolRequestParams, ctx: &ToolContext) -> ToolOutput {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                return ToolOutput::error(troupe_tools::CANCELLED_RESULT);
            }
            sent = self
                .link
                .peer
                .send_cancellable_request(request, PeerRequestOptions::no_options()) => sent,
        };
        let handle = match sent {
            Ok(handle) => handle,
            Err(err) => return self.failed(err),
        };
        let _scope = self.link.scopes.enter(
            handle.id.clone(),
            handle.progress_token.clone(),
            ctx.reach.clone(),
        );
        // Cancelling the call or dropping it sends notifications/cancelled.
        let mut abandoned = CancelOnDrop {
            peer: self.link.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let result = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                return ToolOutput::error(troupe_tools::CANCELLED_RESULT);
            }
            result = handle.await_response() => result,
        };
        abandoned.id = None;
        match result {
            Ok(ServerResult::CallToolResult(result)) => {
                tool_output(&self.server, &self.tool, result)
            }
            Ok(_) => ToolOutput::error(format!(
                "MCP server {} answered the call with something other than a tool result.",
                self.server
            )),
            Err(err) => self.failed(err),
        }
    }

    /// The result of a call that failed, worded without any secret of the
    /// server's settings.
    fn failed(&self, err: ServiceError) -> ToolOutput {
        let message = match err {
            ServiceError::TransportClosed => format!(
                "MCP server {} is not connected (it exited or was restarted during the call); \
                 the call did not complete.",
                self.server
            ),
            ServiceError::McpError(err) => format!(
                "MCP server {} answered with an error: {}",
                self.server, err.message
            ),
            err => format!("The call to MCP server {} failed: {err}", self.server),
        };
        ToolOutput::error(self.link.redaction.apply(&message))
    }
}

/// Sends `notifications/cancelled` for a request given up on (unless disarmed
/// by taking `id`).
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let notification = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some("the call was cancelled".into()),
            ));
            let _ = peer.send_notification(notification.into()).await;
        });
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn compiled_schema(&self) -> Option<&ArgumentSchema> {
        Some(&self.compiled)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn category(&self) -> ToolCategory {
        if self.read_only {
            ToolCategory::Read
        } else {
            ToolCategory::Execute
        }
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.call(args, ctx))
    }
}

/// The tools of a server as shared handles, sorted by name, and why the
/// others were skipped.
pub fn tools_of(
    server: &str,
    tools: &[rmcp::model::Tool],
    link: &CallLink,
) -> (Vec<Arc<McpTool>>, Vec<String>) {
    let mut kept: Vec<Arc<McpTool>> = Vec::new();
    let mut skipped = Vec::new();
    for tool in tools {
        match McpTool::new(server, tool, link.clone()) {
            Ok(tool) if kept.iter().any(|k| k.name == tool.name) => {
                skipped.push(format!(
                    "tool {} is listed twice; the first is kept",
                    tool.name
                ));
            }
            Ok(tool) => kept.push(Arc::new(tool)),
            Err(reason) => skipped.push(reason),
        }
    }
    kept.sort_by(|a, b| a.name.cmp(&b.name));
    (kept, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use serde_json::json;

    fn tool(name: &str, schema: Value, read_only: Option<bool>) -> rmcp::model::Tool {
        let Value::Object(schema) = schema else {
            panic!("object schema")
        };
        let mut tool = rmcp::model::Tool::new(name.to_string(), "does things", Arc::new(schema));
        if let Some(read_only) = read_only {
            let mut annotations = ToolAnnotations::new();
            annotations.read_only_hint = Some(read_only);
            tool.annotations = Some(annotations);
        }
        tool
    }

    #[test]
    fn empty_schemas_become_object_schemas_and_others_pass_through() {
        let empty = JsonObject::new();
        assert_eq!(input_schema_of(&empty), json!({"type": "object"}));
        let Value::Object(given) =
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
        else {
            unreachable!()
        };
        assert_eq!(input_schema_of(&given), Value::Object(given.clone()));
    }

    #[test]
    fn only_a_true_read_only_hint_makes_a_read_only_tool() {
        assert!(is_read_only(&tool("a", json!({}), Some(true))));
        assert!(!is_read_only(&tool("a", json!({}), Some(false))));
        assert!(!is_read_only(&tool("a", json!({}), None)));
    }
}
