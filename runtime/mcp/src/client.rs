//! One live connection to an MCP server through `rmcp` (SPEC §8).
//!
//! A stdio server is started by `troupe-process` like every other process
//! Troupe starts (bash, background tasks, hooks): in a process group of its
//! own and, where the machine allows, a cgroup of its own, so nothing it
//! starts outlives it. It
//! inherits the environment it is given plus the entry's `env`, starts in the
//! entry's directory, speaks the protocol on stdin/stdout, and its stderr is
//! read line by line into the log (and the last lines kept for messages),
//! never into the protocol. An HTTP server is reached with Streamable HTTP and
//! the entry's headers, through [`McpHttpClient`] (whose errors never carry the
//! URL). Every message about a server, and every stderr line it wrote, passes
//! through its [`Redaction`] first, so no value of its URL, headers or
//! environment is shown. Connecting (the handshake and the first tool list) is
//! bounded by the caller; closing asks the session to end, waits at most the
//! budget it is given, then kills whatever is left of the process group, so no
//! grandchild of a launcher such as `npx` or `uvx` survives.
//!
//! The client declares form elicitation and roots: `roots/list` is answered
//! with the project root, progress and questions go to the call they belong
//! to (see [`super::calls`]).

// Roots are deprecated by a later protocol revision (SEP-2577) but are what
// the servers of the 2025 revisions ask for.
#![allow(deprecated)]

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, FormElicitationCapability, Implementation, ListRootsResult,
    ProgressNotificationParam, ProtocolVersion, Root, RootsCapabilities, Tool,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, Peer, QuitReason, RequestContext, RoleClient,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::calls::{CallScopes, NOTICE_MCP_ELICITATION, NOTICE_MCP_PROGRESS, progress_text};
use super::elicit::{ElicitDecision, answer_elicitation, default_elicitation, question_of};
use super::http::McpHttpClient;
use super::redact::Redaction;
use super::spec::{McpServerSpec, McpTransportSpec};
use troupe_tools::Question;

/// A tool as a server lists it (`rmcp`'s type).
pub use rmcp::model::Tool as RmcpTool;

/// Lines of a server's stderr kept for messages.
const STDERR_TAIL_LINES: usize = 20;

/// How long a failed handshake waits for the rest of the server's stderr.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// Characters of one stderr line kept.
const STDERR_LINE_CHARS: usize = 500;

/// Why a server could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConnectError(pub String);

/// The last lines a stdio server wrote to stderr (each already redacted).
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &str) {
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == STDERR_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
    }

    /// The kept lines, oldest first, joined by ` | ` (empty when none).
    pub(crate) fn joined(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lines.iter().cloned().collect::<Vec<_>>().join(" | ")
    }

    /// `reason`, followed by what the server last wrote to stderr.
    pub(crate) fn explain(&self, reason: &str) -> String {
        let tail = self.joined();
        if tail.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}; its stderr ended with: {tail}")
        }
    }
}

/// The client side of the protocol: names Troupe, tells the owner when the
/// server's tool list changed, offers the project root, passes progress to
/// the call it belongs to, and answers elicitations through the call that
/// asks (or with the schema's defaults when nobody can be asked).
struct TroupeClient {
    info: ClientConfig,
    server: String,
    tools_changed: Arc<Notify>,
    scopes: Arc<CallScopes>,
    roots: Vec<Root>,
}

impl ClientHandler for TroupeClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(self.roots.clone()))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some(scope) = self.scopes.by_progress(&params.progress_token) else {
            return;
        };
        let Some(reach) = scope.reach() else {
            return;
        };
        if scope.admit_progress(params.progress, params.total) {
            reach.notice(
                NOTICE_MCP_PROGRESS,
                progress_text(
                    &self.server,
                    params.progress,
                    params.total,
                    params.message.as_deref(),
                ),
            );
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let (message, schema) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                serde_json::to_value(&requested_schema).unwrap_or_default(),
            ),
            // Only form elicitation is declared.
            _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
        };
        let origin = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => None,
        };
        let scope = self.scopes.asking(origin.as_ref());
        let reach = scope.as_ref().and_then(|scope| scope.reach().cloned());
        let question = Question {
            tool: format!("mcp server {}", self.server),
            args: question_of(&message, &schema),
            reason: ELICITATION_HOW.to_string(),
        };
        let asked = reach.as_ref().and_then(|reach| reach.ask(question));
        let decision = match asked {
            Some(answer) => {
                let (outcome, given) = tokio::select! {
                    answer = answer => answer,
                    _ = context.ct.cancelled() => {
                        return Ok(ElicitResult::new(ElicitationAction::Cancel));
                    }
                };
                answer_elicitation(&schema, &outcome, given.as_deref())
            }
            None => default_elicitation(&schema),
        };
        Ok(match decision {
            ElicitDecision::Accept(content) => {
                tracing::info!(server = %self.server, "MCP elicitation accepted");
                ElicitResult::new(ElicitationAction::Accept)
                    .with_content(serde_json::Value::Object(content))
            }
            ElicitDecision::Decline(reason) => {
                tracing::info!(server = %self.server, %reason, "MCP elicitation declined");
                if let Some(reach) = &reach {
                    reach.notice(
                        NOTICE_MCP_ELICITATION,
                        format!(
                            "MCP server {}: its question was declined: {reason}",
                            self.server
                        ),
                    );
                }
                ElicitResult::new(ElicitationAction::Decline)
            }
            ElicitDecision::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

/// How a person answers a server's question (shown as the approval's reason).
const ELICITATION_HOW: &str = "the MCP server asks a question: allow to answer with the \
     defaults, or allow with a JSON object of field values as the reason \
     (e.g. {\"name\": \"Ann\"}); deny declines; cancel cancels the question";

/// The client's initialize parameters: form elicitation and roots.
pub(crate) fn client_config() -> ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::new().with_schema_validation(true)),
    );
    capabilities.roots = Some(RootsCapabilities::default());
    let mut info = ClientConfig::new(
        capabilities,
        Implementation::new("troupe", env!("CARGO_PKG_VERSION")),
    );
    info.protocol_version = ProtocolVersion::V_2025_11_25;
    info
}

/// `file://` URI of an absolute path (bytes outside the unreserved set and
/// `/` percent-encoded).
pub(crate) fn file_uri(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// The roots offered to a server: the project root.
fn roots_of(spec: &McpServerSpec) -> Vec<Root> {
    spec.project_root
        .iter()
        .map(|root| {
            let name = root
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| root.display().to_string());
            Root::new(file_uri(root)).with_name(name)
        })
        .collect()
}

/// A connected server.
pub struct Connection {
    name: String,
    redaction: Redaction,
    peer: Peer<RoleClient>,
    cancel: CancellationToken,
    ended: watch::Receiver<Option<String>>,
    /// A stdio server's processes: killed when the connection closes or is
    /// dropped.
    group: Option<Arc<troupe_process::ProcessGroup>>,
    tail: StderrTail,
    tools_changed: Arc<Notify>,
    server_info: String,
    scopes: Arc<CallScopes>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("name", &self.name)
            .field("pgid", &self.pgid())
            .field("server_info", &self.server_info)
            .finish()
    }
}

impl Connection {
    /// Starts or reaches the server of `spec` and completes the handshake.
    /// `base_env`: the environment a stdio server starts from (`None`: this
    /// process's). Not bounded in time: the caller applies the connect timeout
    /// (dropping this future kills a child already started).
    pub async fn connect(
        spec: &McpServerSpec,
        base_env: Option<&[(String, String)]>,
    ) -> Result<Self, ConnectError> {
        let cancel = CancellationToken::new();
        let tools_changed = Arc::new(Notify::new());
        let scopes = Arc::new(CallScopes::default());
        let client = TroupeClient {
            info: client_config(),
            server: spec.name.clone(),
            tools_changed: tools_changed.clone(),
            scopes: scopes.clone(),
            roots: roots_of(spec),
        };
        let tail = StderrTail::default();
        let redaction = spec.redaction.clone();
        let (running, process) = match &spec.transport {
            McpTransportSpec::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .current_dir(cwd)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some(base) = base_env {
                    // A client's environment holds its provider keys (for the
                    // daemon's providers); servers never get them.
                    let mut withheld = troupe_process::secrets::key_names(std::iter::empty());
                    withheld.extend(troupe_process::secrets::withheld_names());
                    cmd.env_clear();
                    cmd.envs(
                        base.iter()
                            .filter(|(name, _)| !withheld.contains(name.as_str()))
                            .map(|(k, v)| (k, v)),
                    );
                }
                cmd.envs(env.iter().map(|(k, v)| (k, v)));
                // Dropping the group (a connect given up half-way) kills
                // every process of the server.
                let (mut child, group) =
                    troupe_process::spawn_in_group(&mut cmd).map_err(|err| {
                        let reason = match err {
                            troupe_process::ProcessError::Spawn { source, .. } => {
                                source.to_string()
                            }
                            other => other.to_string(),
                        };
                        ConnectError(format!(
                            "cannot start `{command}` in {}: {reason}",
                            cwd.display()
                        ))
                    })?;
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(ConnectError(format!(
                        "cannot talk to `{command}`: its standard input and output are not pipes"
                    )));
                };
                let mut stderr_read = child.stderr.take().map(|stderr| {
                    forward_stderr(spec.name.clone(), stderr, tail.clone(), redaction.clone())
                });
                let running = match client.serve_with_ct((stdout, stdin), cancel.clone()).await {
                    Ok(running) => running,
                    Err(err) => {
                        // A server that failed at once has usually said why:
                        // let its stderr reach the tail (it ends with the
                        // process group, killed first; bounded all the same).
                        group.kill_now();
                        if let Some(reader) = stderr_read.as_mut() {
                            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
                        }
                        return Err(ConnectError(tail.explain(
                            &redaction.apply(&format!("the MCP handshake failed: {err}")),
                        )));
                    }
                };
                (running, Some((child, group)))
            }
            McpTransportSpec::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let header =
                        reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                            ConnectError(format!("{name:?} is not a valid header name"))
                        })?;
                    let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                        ConnectError(format!("the value of header {name} is not valid"))
                    })?;
                    custom.insert(header, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let http = McpHttpClient::new(super::CONNECT_TIMEOUT)
                    .map_err(|err| ConnectError(format!("cannot build the HTTP client: {err}")))?;
                let transport = StreamableHttpClientTransport::with_client(http, config);
                let running = client
                    .serve_with_ct(transport, cancel.clone())
                    .await
                    .map_err(|err| {
                        ConnectError(format!(
                            "cannot connect to {}: {}",
                            spec.target(),
                            redaction.apply(&err.to_string())
                        ))
                    })?;
                (running, None)
            }
        };
        let peer = running.peer().clone();
        let server_info = peer
            .peer_info()
            .and_then(|info| {
                info.server_info
                    .as_ref()
                    .map(|i| format!("{} {}", i.name, i.version))
            })
            .unwrap_or_default();
        let (ended_tx, ended) = watch::channel(None);
        let ended_tx = Arc::new(ended_tx);
        let watch_tail = tail.clone();
        let session_end = ended_tx.clone();
        let watch_redaction = redaction.clone();
        tokio::spawn(async move {
            let reason = match running.waiting().await {
                Ok(QuitReason::Closed) => watch_tail.explain("the server closed the connection"),
                Ok(QuitReason::Cancelled) => "the connection was closed".to_string(),
                Ok(_) => "the connection ended".to_string(),
                Err(err) => watch_redaction.apply(&format!("the connection task failed: {err}")),
            };
            set_ended(&session_end, reason);
        });
        // A stdio server's exit ends the connection even when a grandchild
        // still holds its stdout open (no end of file then).
        let group = process.map(|(mut child, group)| {
            let exit_tail = tail.clone();
            let process_end = ended_tx.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    exited = child.wait() => {
                        if exited.is_ok() {
                            set_ended(&process_end, exit_tail.explain("the server process exited"));
                        }
                    }
                }
            });
            group
        });
        Ok(Self {
            name: spec.name.clone(),
            redaction,
            peer,
            cancel,
            ended,
            group,
            tail,
            tools_changed,
            server_info,
            scopes,
        })
    }

    /// What a tool needs to call through this connection.
    pub fn link(&self) -> CallLink {
        CallLink {
            peer: self.peer.clone(),
            scopes: self.scopes.clone(),
            redaction: self.redaction.clone(),
        }
    }

    /// The session, for calls (cheap to clone).
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// The server's name and version as it announced them.
    pub fn server_info(&self) -> &str {
        &self.server_info
    }

    /// The process group of a stdio server.
    pub fn pgid(&self) -> Option<u32> {
        self.group.as_ref().map(|group| group.id())
    }

    /// Every tool the server lists (all pages).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ConnectError> {
        self.peer.list_all_tools().await.map_err(|err| {
            ConnectError(
                self.tail
                    .explain(&self.redaction.apply(&format!("tools/list failed: {err}"))),
            )
        })
    }

    /// Resolves when the server says its tool list changed.
    pub async fn tools_changed(&self) {
        self.tools_changed.notified().await;
    }

    /// Resolves when the connection has ended, with why.
    pub async fn ended(&self) -> String {
        let mut ended = self.ended.clone();
        match ended.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the connection ended".to_string(),
        }
    }

    /// Ends the session: asks it to close, waits at most `budget`, then kills
    /// what is left of a stdio server's process group.
    pub async fn close(&self, budget: Duration) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(budget, self.ended()).await;
        if let Some(group) = &self.group {
            group.kill_now();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The process group, dropped with the connection, kills what is left.
        self.cancel.cancel();
    }
}

/// The session and the calls in flight on it: what each tool of a server
/// calls through (cheap to clone).
#[derive(Clone)]
pub struct CallLink {
    /// The session.
    pub peer: Peer<RoleClient>,
    /// The calls in flight.
    pub scopes: Arc<CallScopes>,
    /// What to hide in messages about the server.
    pub redaction: Redaction,
}

/// Records why the connection ended, once (the first reason stays).
fn set_ended(ended: &watch::Sender<Option<String>>, reason: String) {
    ended.send_if_modified(|slot| {
        if slot.is_none() {
            *slot = Some(reason);
            true
        } else {
            false
        }
    });
}

/// Reads a server's stderr into the log, keeping the last lines; each line
/// redacted first.
fn forward_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: StderrTail,
    redaction: Redaction,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = redaction.apply(&line);
            tracing::info!(target: "troupe::mcp::stderr", server = %server, "{line}");
            tail.push(&line);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_percent_encode_what_is_not_plain() {
        assert_eq!(
            file_uri(std::path::Path::new("/home/a b/proj-1_x.y~")),
            "file:///home/a%20b/proj-1_x.y~"
        );
        assert_eq!(
            file_uri(std::path::Path::new("/p/é#?")),
            "file:///p/%C3%A9%23%3F"
        );
    }

    #[test]
    fn the_client_declares_form_elicitation_and_roots() {
        let info = serde_json::to_value(client_config()).unwrap();
        assert_eq!(
            info["capabilities"]["elicitation"]["form"],
            serde_json::json!({"schemaValidation": true})
        );
        assert_eq!(info["capabilities"]["roots"], serde_json::json!({}));
        assert_eq!(info["protocolVersion"], "2025-11-25");
    }
}
