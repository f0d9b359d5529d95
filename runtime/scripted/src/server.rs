//! The HTTP side: an axum server on 127.0.0.1 that records every request,
//! checks its invariants, picks the scripted turn and sends it in the wire
//! format of the endpoint (streamed or complete), with delays, faults and
//! client-disconnect detection.
//!
//! This module owns sockets, timing and the shared state (script slots,
//! recorded requests, violations, aborted streams). It asks `script` which turn
//! answers, `invariants` whether the request is valid and `render` for the
//! bytes; it must not decide any of those itself.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response as HttpResponse;
use axum::routing::post;
use axum::serve::ListenerExt;
use futures::Stream;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fault::Fault;
use crate::ids::IdGen;
use crate::invariants::{Rule, Violation, check_request};
use crate::render::{self, ErrorKind, ErrorReply, Plan, STATUS_INTERNAL, STATUS_OVERLOADED};
use crate::request::{Protocol, RecordedRequest};
use crate::response::{Block, Response, Usage};
use crate::script::{Action, Script, Selection, Turn, select_turn};

/// Default characters per streamed delta, so even short texts arrive as
/// several deltas.
pub const DEFAULT_CHUNK_CHARS: usize = 8;

/// Rough characters-per-token ratio for the usage estimate sent when a script
/// gives no usage (input from the request body size, output from the response).
pub const CHARS_PER_TOKEN_ESTIMATE: u64 = 4;

/// Largest request body accepted: 32 MB, Anthropic's documented limit
/// (fixtures/ERRORS.md A1, `request_too_large`).
pub const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;

/// Model name echoed when a request names none.
const FALLBACK_MODEL: &str = "scripted-model";

/// Seed of the id generator, so every server produces the same id sequence.
const ID_SEED: u64 = 0x5C21_7ED0;

/// How the server behaves beyond the script.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    strict: bool,
    chunk_chars: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            strict: true,
            chunk_chars: DEFAULT_CHUNK_CHARS,
        }
    }
}

impl ServerConfig {
    /// Strict mode, [`DEFAULT_CHUNK_CHARS`] per delta.
    pub fn new() -> Self {
        Self::default()
    }

    /// Non-strict mode: dropping the server with violations does not panic
    /// (violations are still answered with a 400 and recorded). For the demo.
    pub fn non_strict() -> Self {
        Self::default().strict(false)
    }

    /// Sets strict mode: when on (the default), dropping the server while
    /// violations are recorded panics, so a test that produced an invalid
    /// history fails even if it never looked.
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Sets the default characters per streamed delta (at least 1).
    #[must_use]
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = chars.max(1);
        self
    }

    /// Whether strict mode is on.
    pub fn is_strict(&self) -> bool {
        self.strict
    }
}

/// A streamed response the client abandoned before it was fully sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortedStream {
    /// Index of the request (see [`RecordedRequest::index`]).
    pub request_index: usize,
    /// Body pieces (SSE events, for streams) handed to the connection before
    /// the client went away.
    pub events_sent: usize,
}

/// Waiting for something the server records did not finish in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The timeout passed first.
    #[error("timed out after {timeout:?} waiting for {wanted} {what}; {seen} recorded so far")]
    Timeout {
        /// What was awaited ("requests", "aborted streams").
        what: &'static str,
        /// How many were awaited.
        wanted: usize,
        /// How many had been recorded at the deadline.
        seen: usize,
        /// The timeout.
        timeout: Duration,
    },
}

/// A scripted model server on 127.0.0.1, speaking the Anthropic Messages
/// (`POST /v1/messages`) and OpenAI Chat Completions
/// (`POST /v1/chat/completions`) protocols. Shuts down when dropped; in strict
/// mode, dropping it while violations are recorded panics.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .field("strict", &self.shared.config.strict)
            .finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// Starts a strict server on `127.0.0.1:0` with `script`.
    pub async fn start(script: Script) -> io::Result<Self> {
        Self::start_with(script, ServerConfig::default()).await
    }

    /// Starts a server on `127.0.0.1:0` with `script` and `config`.
    pub async fn start_with(script: Script, config: ServerConfig) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            state: Mutex::new(ScriptState {
                turns: script.into_turns().into_iter().map(Some).collect(),
                requests: Vec::new(),
                violations: Vec::new(),
                aborted: Vec::new(),
                ids: IdGen::new(ID_SEED),
            }),
            requests_seen: watch::Sender::new(0),
            aborts_seen: watch::Sender::new(0),
            shutdown: shutdown.clone(),
            config,
        });
        let router = Router::new()
            .route(
                Protocol::Anthropic.path(),
                post(anthropic_endpoint).fallback(unknown_endpoint),
            )
            .route(
                Protocol::OpenAi.path(),
                post(openai_endpoint).fallback(unknown_endpoint),
            )
            .route(
                Protocol::OpenAiResponses.path(),
                post(openai_responses_endpoint).fallback(unknown_endpoint),
            )
            .fallback(unknown_endpoint)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // Every SSE event goes out at once, as a real API sends it: without
            // TCP_NODELAY, Nagle's algorithm and delayed ACKs hold small writes
            // back for tens of milliseconds on a kept-alive connection.
            let listener = listener.tap_io(|stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "TCP_NODELAY not set");
                }
            });
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
            if let Err(error) = served {
                tracing::error!(%error, "scripted model server stopped");
            }
        });
        tracing::debug!(%addr, "scripted model server listening");
        Ok(Self {
            addr,
            shared,
            task: Some(task),
        })
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for Anthropic clients: `http://127.0.0.1:PORT`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Base URL for OpenAI clients: `http://127.0.0.1:PORT/v1` (the OpenAI SDKs'
    /// base URL includes `/v1`).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Appends a turn to the running script.
    pub fn push_turn(&self, turn: impl Into<Turn>) {
        self.shared.lock().turns.push(Some(turn.into()));
    }

    /// Number of turns not consumed yet.
    pub fn remaining_turns(&self) -> usize {
        self.shared.lock().turns.iter().flatten().count()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Waits until at least `n` requests have arrived, then returns all of them.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, WaitError> {
        wait_for_count(&self.shared.requests_seen, n, timeout, "requests").await?;
        Ok(self.requests())
    }

    /// Every violation recorded so far (invariants, script exhaustion,
    /// unmatched requests, unknown endpoints).
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.lock().violations.clone()
    }

    /// Returns and clears the recorded violations: a test that provokes
    /// violations on purpose acknowledges them this way, so strict mode does
    /// not panic at drop.
    pub fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut self.shared.lock().violations)
    }

    /// Streamed responses whose client disconnected before the end.
    pub fn aborted_streams(&self) -> Vec<AbortedStream> {
        self.shared.lock().aborted.clone()
    }

    /// Waits until at least `n` streams were abandoned by their clients.
    pub async fn wait_for_aborted_streams(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<AbortedStream>, WaitError> {
        wait_for_count(&self.shared.aborts_seen, n, timeout, "aborted streams").await?;
        Ok(self.aborted_streams())
    }

    /// Stops accepting connections, ends stalled streams and pending delays,
    /// and waits for open connections to finish. Strict-mode checks still run
    /// when the server is dropped afterwards.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::error!(%error, "scripted model server task failed");
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if self.shared.config.strict && !std::thread::panicking() {
            let violations = self.violations();
            if !violations.is_empty() {
                let list: Vec<String> = violations.iter().map(|v| format!("  - {v}")).collect();
                // Deliberate: strict mode turns an unnoticed invalid history
                // into a test failure (see `ServerConfig::strict`).
                panic!(
                    "scripted model server dropped with {} protocol violation(s):\n{}",
                    violations.len(),
                    list.join("\n")
                );
            }
        }
    }
}

async fn wait_for_count(
    counter: &watch::Sender<usize>,
    wanted: usize,
    timeout: Duration,
    what: &'static str,
) -> Result<(), WaitError> {
    let mut receiver = counter.subscribe();
    match tokio::time::timeout(timeout, receiver.wait_for(|seen| *seen >= wanted)).await {
        Ok(Ok(_)) => Ok(()),
        // The sender lives in the server's shared state, which `self` keeps
        // alive, so a closed channel cannot happen; report it as a timeout.
        Ok(Err(_)) | Err(_) => Err(WaitError::Timeout {
            what,
            wanted,
            seen: *counter.borrow(),
            timeout,
        }),
    }
}

/// State shared by the server handle and the request handlers.
struct Shared {
    state: Mutex<ScriptState>,
    requests_seen: watch::Sender<usize>,
    aborts_seen: watch::Sender<usize>,
    shutdown: CancellationToken,
    config: ServerConfig,
}

struct ScriptState {
    /// Script slots; a consumed turn becomes `None`.
    turns: Vec<Option<Turn>>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    aborted: Vec<AbortedStream>,
    ids: IdGen,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        // A panic while holding the lock leaves plain data behind (no
        // invariant spans several fields), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record_abort(&self, request_index: usize, events_sent: usize) {
        tracing::debug!(
            request_index,
            events_sent,
            "client abandoned a streamed response"
        );
        let count = {
            let mut state = self.lock();
            state.aborted.push(AbortedStream {
                request_index,
                events_sent,
            });
            state.aborted.len()
        };
        self.aborts_seen.send_replace(count);
    }

    fn record_violation(&self, violation: Violation) {
        tracing::warn!(%violation, "scripted model server: request rejected");
        self.lock().violations.push(violation);
    }

    /// Records the request, checks it, and picks its turn, all under one lock
    /// so arrival order, turn order and id order agree.
    fn admit(&self, protocol: Protocol, headers: &HeaderMap, raw: &Bytes) -> Admission {
        let parsed = serde_json::from_slice::<Value>(raw);
        let (admission, count) = {
            let mut state = self.lock();
            let index = state.requests.len();
            let request_id = state.ids.request_id();
            let mut record = RecordedRequest {
                index,
                protocol,
                path: protocol.path().to_owned(),
                headers: header_pairs(headers),
                body: parsed.as_ref().map_or(Value::Null, Clone::clone),
                body_len: raw.len(),
                turn: None,
                response_id: None,
            };
            let violations = match &parsed {
                Ok(body) => check_request(protocol, body),
                Err(error) => vec![violation(
                    Rule::MalformedRequest,
                    format!("the request body is not JSON: {error}"),
                    protocol,
                )],
            };
            let (admission, violations) = if violations.is_empty() {
                match take_turn(&mut state, &mut record, &request_id, &self.config) {
                    Ok(prepared) => (Admission::Answer(Box::new(prepared)), Vec::new()),
                    Err(unscripted) => {
                        let reply = render::json_error(
                            protocol,
                            STATUS_INTERNAL,
                            ErrorKind::Server,
                            &format!("scripted model server: {}", unscripted.detail),
                            &request_id,
                        );
                        (Admission::Reject(reply), vec![unscripted])
                    }
                }
            } else {
                let reply = render::json_error(
                    protocol,
                    render::STATUS_BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    &violation_message(&violations),
                    &request_id,
                );
                (Admission::Reject(reply), violations)
            };
            for mut violation in violations {
                violation.request_index = Some(index);
                tracing::warn!(%violation, "scripted model server: request rejected");
                state.violations.push(violation);
            }
            tracing::debug!(index, %protocol, turn = ?record.turn, "scripted model server: request");
            state.requests.push(record);
            (admission, state.requests.len())
        };
        self.requests_seen.send_replace(count);
        admission
    }
}

fn violation(rule: Rule, detail: String, protocol: Protocol) -> Violation {
    Violation {
        rule,
        detail,
        request_index: None,
        protocol: Some(protocol),
    }
}

/// Consumes the turn that answers `record` and prepares it, or explains why no
/// turn can (script exhausted, no turn matched).
fn take_turn(
    state: &mut ScriptState,
    record: &mut RecordedRequest,
    request_id: &str,
    config: &ServerConfig,
) -> Result<Prepared, Violation> {
    let slot = match select_turn(&state.turns, record) {
        Selection::Turn(slot) => slot,
        Selection::Exhausted { total } => {
            return Err(violation(
                Rule::ScriptExhausted,
                format!("script exhausted: all {total} turn(s) were consumed before this request"),
                record.protocol,
            ));
        }
        Selection::NoMatch { pending } => {
            let pending: Vec<String> = pending
                .iter()
                .map(|(i, matcher)| format!("turn {i}: {matcher}"))
                .collect();
            return Err(violation(
                Rule::NoTurnMatched,
                format!("no turn matched; unconsumed turns: {}", pending.join("; ")),
                record.protocol,
            ));
        }
    };
    // `select_turn` only returns occupied slots and the lock is held, so the
    // slot is occupied; a `None` would be a bug in selection, reported as such.
    let turn = state.turns[slot].take().ok_or_else(|| {
        violation(
            Rule::NoTurnMatched,
            format!("internal error: turn {slot} was selected but already consumed"),
            record.protocol,
        )
    })?;
    record.turn = Some(slot);
    let prepared = prepare(
        turn,
        record,
        request_id.to_owned(),
        &mut state.ids,
        config.chunk_chars,
    );
    record.response_id = match &prepared.content {
        Content::Reply(plan) | Content::Broken { plan, .. } => Some(plan.message_id.clone()),
        Content::Error(_) => None,
    };
    Ok(prepared)
}

fn violation_message(violations: &[Violation]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .map(|v| format!("[{}] {}", v.rule, v.detail))
        .collect();
    format!(
        "scripted model server: request violates protocol invariants: {}",
        parts.join("; ")
    )
}

fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// What to do with an admitted request.
enum Admission {
    /// Answer with an error at once.
    Reject(ErrorReply),
    /// Answer from a turn.
    Answer(Box<Prepared>),
}

/// A turn ready to send: ids resolved, usage decided.
struct Prepared {
    protocol: Protocol,
    request_index: usize,
    request_id: String,
    streaming: bool,
    delay: Duration,
    chunk_delay: Duration,
    content: Content,
}

/// What an admitted turn sends.
enum Content {
    /// A normal response.
    Reply(Plan),
    /// A fault answered with an HTTP error before any response byte.
    Error(Fault),
    /// A stream fault: part of `plan`, then the break `fault` describes.
    Broken { fault: Fault, plan: Plan },
}

fn prepare(
    turn: Turn,
    record: &RecordedRequest,
    request_id: String,
    ids: &mut IdGen,
    default_chunk_chars: usize,
) -> Prepared {
    let delay = turn.delay();
    let chunk_delay = turn.chunk_delay();
    let context = PlanContext {
        protocol: record.protocol,
        model: record.model().unwrap_or(FALLBACK_MODEL).to_owned(),
        include_usage: record
            .body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true),
        body_len: record.body_len,
        chunk_chars: default_chunk_chars,
    };
    let content = match turn.into_action() {
        Action::Reply(mut response) => Content::Reply(plan(&mut response, &context, ids)),
        Action::Fault(mut fault) => match fault.stream_response_mut() {
            Some(response) => {
                let plan = plan(response, &context, ids);
                Content::Broken { fault, plan }
            }
            None => Content::Error(fault),
        },
    };
    Prepared {
        protocol: record.protocol,
        request_index: record.index,
        request_id,
        streaming: record.is_streaming(),
        delay,
        chunk_delay,
        content,
    }
}

/// Facts about the request a plan depends on.
struct PlanContext {
    protocol: Protocol,
    model: String,
    include_usage: bool,
    body_len: usize,
    chunk_chars: usize,
}

/// Fills generated tool ids into `response` and decides usage and chunk size.
fn plan(response: &mut Response, context: &PlanContext, ids: &mut IdGen) -> Plan {
    for block in response.blocks_mut() {
        if let Block::ToolCall(call) = block
            && call.id.is_none()
        {
            call.id = Some(match context.protocol {
                Protocol::Anthropic => ids.anthropic_tool_id(),
                Protocol::OpenAi | Protocol::OpenAiResponses => ids.openai_call_id(),
            });
        }
    }
    let usage = response
        .usage()
        .unwrap_or_else(|| estimate_usage(context.body_len, response.output_chars()));
    let message_id = match context.protocol {
        Protocol::Anthropic => ids.anthropic_message_id(),
        Protocol::OpenAi => ids.openai_completion_id(),
        Protocol::OpenAiResponses => ids.openai_response_id(),
    };
    Plan {
        blocks: response.blocks().to_vec(),
        usage,
        stop_reason: response.effective_stop_reason(),
        chunk_chars: response.chunk_chars().unwrap_or(context.chunk_chars).max(1),
        model: context.model.clone(),
        message_id,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        include_usage: context.include_usage,
    }
}

/// Usage when the script gives none: tokens ≈ characters / 4, at least one
/// output token.
fn estimate_usage(request_bytes: usize, output_chars: usize) -> Usage {
    let tokens = |chars: usize| (chars as u64).div_ceil(CHARS_PER_TOKEN_ESTIMATE);
    Usage::new(tokens(request_bytes), tokens(output_chars).max(1))
}

async fn anthropic_endpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    serve_request(shared, Protocol::Anthropic, headers, body).await
}

async fn openai_endpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    serve_request(shared, Protocol::OpenAi, headers, body).await
}

async fn openai_responses_endpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    serve_request(shared, Protocol::OpenAiResponses, headers, body).await
}

async fn unknown_endpoint(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
) -> HttpResponse {
    let detail = format!(
        "{method} {uri} is not served; use POST {}, POST {} or POST {}",
        Protocol::Anthropic.path(),
        Protocol::OpenAi.path(),
        Protocol::OpenAiResponses.path()
    );
    shared.record_violation(Violation {
        rule: Rule::UnknownEndpoint,
        detail: detail.clone(),
        request_index: None,
        protocol: None,
    });
    let body = json!({"type": "error", "error": {"type": "not_found_error", "message": detail}});
    http_response(
        StatusCode::NOT_FOUND,
        "application/json",
        Body::from(body.to_string()),
    )
}

async fn serve_request(
    shared: Arc<Shared>,
    protocol: Protocol,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let prepared = match shared.admit(protocol, &headers, &body) {
        Admission::Reject(reply) => return error_response(protocol, &reply, None),
        Admission::Answer(prepared) => *prepared,
    };
    if !prepared.delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(prepared.delay) => {}
            () = shared.shutdown.cancelled() => {
                let reply = render::json_error(
                    protocol,
                    render::STATUS_UNAVAILABLE,
                    ErrorKind::Server,
                    "scripted model server is shutting down",
                    &prepared.request_id,
                );
                return error_response(protocol, &reply, Some(&prepared.request_id));
            }
        }
    }
    respond(&shared, prepared)
}

/// What goes on the wire for an admitted turn.
#[derive(Debug, PartialEq, Eq)]
enum Outgoing {
    /// A 200 with this whole body.
    Whole {
        content_type: &'static str,
        body: String,
    },
    /// An HTTP error.
    Error(ErrorReply),
    /// A 200 whose body is sent piece by piece (paced by the chunk delay) and
    /// ends as `ending`.
    Paced {
        kind: BodyKind,
        pieces: Vec<Bytes>,
        ending: Ending,
    },
}

/// The kind of a paced body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// `text/event-stream`.
    EventStream,
    /// `application/json` declaring this `Content-Length` (a fault may send
    /// less).
    Json { content_length: usize },
}

/// Decides the bytes for a turn: streamed or complete, normal or faulty.
fn outgoing(protocol: Protocol, streaming: bool, content: Content, request_id: &str) -> Outgoing {
    let events = |frames: Vec<render::SseFrame>| -> Vec<Bytes> {
        frames.iter().map(render::SseFrame::to_bytes).collect()
    };
    match content {
        Content::Reply(plan) if streaming => Outgoing::Paced {
            kind: BodyKind::EventStream,
            pieces: events(render::stream_frames(protocol, &plan)),
            ending: Ending::Complete,
        },
        Content::Reply(plan) => Outgoing::Whole {
            content_type: "application/json",
            body: render::complete_body(protocol, &plan).to_string(),
        },
        Content::Error(fault) => match render::fault_reply(protocol, &fault, request_id) {
            Some(reply) => Outgoing::Error(reply),
            // `prepare` puts only up-front faults here; a stream fault that
            // lands here anyway is answered as the overloaded error it breaks
            // with.
            None => Outgoing::Error(overloaded(protocol, request_id)),
        },
        Content::Broken { fault, plan } if streaming => {
            let frames = render::stream_frames(protocol, &plan);
            let (frames, ending) = stream_fault_frames(protocol, &fault, &plan, frames, request_id);
            Outgoing::Paced {
                kind: BodyKind::EventStream,
                pieces: events(frames),
                ending,
            }
        }
        Content::Broken { fault, plan } => non_streaming_fault(protocol, &fault, &plan, request_id),
    }
}

fn overloaded(protocol: Protocol, request_id: &str) -> ErrorReply {
    render::json_error(
        protocol,
        STATUS_OVERLOADED,
        ErrorKind::Overloaded,
        "Overloaded",
        request_id,
    )
}

fn respond(shared: &Arc<Shared>, prepared: Prepared) -> HttpResponse {
    let Prepared {
        protocol,
        request_index,
        request_id,
        streaming,
        chunk_delay,
        content,
        ..
    } = prepared;
    match outgoing(protocol, streaming, content, &request_id) {
        Outgoing::Whole { content_type, body } => {
            success_response(protocol, &request_id, content_type, Body::from(body))
        }
        Outgoing::Error(reply) => error_response(protocol, &reply, Some(&request_id)),
        Outgoing::Paced {
            kind,
            pieces,
            ending,
        } => {
            let feed = Feed {
                chunks: pieces.into(),
                delay: chunk_delay,
                ending,
                shutdown: shared.shutdown.clone(),
                finished: false,
            };
            let body = Body::from_stream(Tracked {
                feed: Box::pin(feed.into_stream()),
                finished: false,
                events_sent: 0,
                shared: Arc::clone(shared),
                request_index,
            });
            match kind {
                BodyKind::EventStream => {
                    let mut response =
                        success_response(protocol, &request_id, "text/event-stream", body);
                    response
                        .headers_mut()
                        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                    response
                }
                BodyKind::Json { content_length } => {
                    let mut response =
                        success_response(protocol, &request_id, "application/json", body);
                    response
                        .headers_mut()
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(content_length));
                    response
                }
            }
        }
    }
}

/// The events a stream fault sends, and how the stream ends.
fn stream_fault_frames(
    protocol: Protocol,
    fault: &Fault,
    plan: &Plan,
    mut frames: Vec<render::SseFrame>,
    request_id: &str,
) -> (Vec<render::SseFrame>, Ending) {
    // Cut, stall and error keep at least the final event back, so the stream
    // is never complete.
    let before_end = |after: usize, len: usize| after.min(len.saturating_sub(1));
    match fault {
        Fault::CutStream { after_events, .. } => {
            frames.truncate(before_end(*after_events, frames.len()));
            (frames, Ending::Cut)
        }
        Fault::StallStream { after_events, .. } => {
            frames.truncate(before_end(*after_events, frames.len()));
            (frames, Ending::Stall)
        }
        Fault::MalformedSse { after_events, .. } => {
            let at = (*after_events).min(frames.len());
            frames.insert(at, render::malformed_frame(protocol));
            (frames, Ending::Complete)
        }
        Fault::ErrorMidStream { after_events, .. } => {
            frames.truncate(before_end(*after_events, frames.len()));
            frames.push(render::midstream_error(protocol, request_id, plan));
            (frames, Ending::Complete)
        }
        _ => (frames, Ending::Complete),
    }
}

/// Stream faults on a non-streaming request: cut and stall send half of the
/// JSON body; malformed sends a body that is not JSON; an error mid-stream
/// becomes the equivalent HTTP 529.
fn non_streaming_fault(
    protocol: Protocol,
    fault: &Fault,
    plan: &Plan,
    request_id: &str,
) -> Outgoing {
    let body = render::complete_body(protocol, plan).to_string();
    let half = || vec![Bytes::from(body.as_bytes()[..body.len() / 2].to_vec())];
    let kind = BodyKind::Json {
        content_length: body.len(),
    };
    match fault {
        Fault::CutStream { .. } => Outgoing::Paced {
            kind,
            pieces: half(),
            ending: Ending::Cut,
        },
        Fault::StallStream { .. } => Outgoing::Paced {
            kind,
            pieces: half(),
            ending: Ending::Stall,
        },
        Fault::MalformedSse { .. } => Outgoing::Whole {
            content_type: "application/json",
            body: render::MALFORMED_DATA.to_owned(),
        },
        _ => Outgoing::Error(overloaded(protocol, request_id)),
    }
}

fn request_id_header(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Anthropic => "request-id",
        Protocol::OpenAi | Protocol::OpenAiResponses => "x-request-id",
    }
}

fn http_response(status: StatusCode, content_type: &'static str, body: Body) -> HttpResponse {
    let mut response = HttpResponse::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn success_response(
    protocol: Protocol,
    request_id: &str,
    content_type: &'static str,
    body: Body,
) -> HttpResponse {
    let mut response = http_response(StatusCode::OK, content_type, body);
    insert_header(&mut response, request_id_header(protocol), request_id);
    response
}

fn error_response(
    protocol: Protocol,
    reply: &ErrorReply,
    request_id: Option<&str>,
) -> HttpResponse {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = http_response(status, reply.content_type, Body::from(reply.body.clone()));
    for (name, value) in &reply.headers {
        insert_header(&mut response, name, value);
    }
    let request_id = request_id.map(str::to_owned).or_else(|| {
        serde_json::from_str::<Value>(&reply.body)
            .ok()
            .and_then(|body| {
                body.get("request_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    });
    if let Some(request_id) = request_id {
        insert_header(&mut response, request_id_header(protocol), &request_id);
    }
    response
}

fn insert_header(response: &mut HttpResponse, name: &str, value: &str) {
    match (
        header::HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        (Ok(name), Ok(value)) => {
            response.headers_mut().append(name, value);
        }
        _ => tracing::warn!(
            name,
            value,
            "scripted model server: skipped an invalid header"
        ),
    }
}

/// How a transmitted body ends after its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Normally.
    Complete,
    /// By closing the connection (the body fails, so no terminating chunk is
    /// written).
    Cut,
    /// Not at all: silence until the client leaves or the server shuts down.
    Stall,
}

/// The body error that makes the connection close mid-response.
#[derive(Debug, thiserror::Error)]
#[error("stream closed by the script")]
struct StreamClosed;

/// Body chunks with their pacing and ending.
struct Feed {
    chunks: VecDeque<Bytes>,
    delay: Duration,
    ending: Ending,
    shutdown: CancellationToken,
    finished: bool,
}

impl Feed {
    fn into_stream(self) -> impl Stream<Item = Result<Bytes, StreamClosed>> + Send {
        futures::stream::unfold(self, |mut feed| async move {
            if feed.finished {
                return None;
            }
            if let Some(chunk) = feed.chunks.pop_front() {
                if !feed.delay.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(feed.delay) => {}
                        () = feed.shutdown.cancelled() => {
                            feed.finished = true;
                            return Some((Err(StreamClosed), feed));
                        }
                    }
                }
                return Some((Ok(chunk), feed));
            }
            feed.finished = true;
            match feed.ending {
                Ending::Complete => None,
                Ending::Cut => {
                    // Let the connection flush what was sent before failing the
                    // body: a body error closes the connection at once and
                    // would drop bytes still buffered.
                    tokio::task::yield_now().await;
                    Some((Err(StreamClosed), feed))
                }
                Ending::Stall => {
                    feed.shutdown.cancelled().await;
                    Some((Err(StreamClosed), feed))
                }
            }
        })
    }
}

/// Wraps a response body and records an abort if the connection drops it
/// before it ended (the client went away).
struct Tracked<S> {
    feed: Pin<Box<S>>,
    finished: bool,
    events_sent: usize,
    shared: Arc<Shared>,
    request_index: usize,
}

impl<S> Stream for Tracked<S>
where
    S: Stream<Item = Result<Bytes, StreamClosed>>,
{
    type Item = Result<Bytes, StreamClosed>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.feed.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => self.events_sent += 1,
            Poll::Ready(Some(Err(_)) | None) => self.finished = true,
            Poll::Pending => {}
        }
        polled
    }
}

impl<S> Drop for Tracked<S> {
    fn drop(&mut self) {
        if !self.finished {
            self.shared
                .record_abort(self.request_index, self.events_sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::text;

    fn test_plan(response: &mut Response, protocol: Protocol) -> Plan {
        let context = PlanContext {
            protocol,
            model: "m".into(),
            include_usage: false,
            body_len: 40,
            chunk_chars: 3,
        };
        plan(response, &context, &mut IdGen::new(1))
    }

    #[test]
    fn plan_fills_generated_ids_and_estimates_usage() {
        let mut response = crate::response::tool_call("ls", serde_json::json!({}))
            .and_tool_call_with_id("mine", "ls", serde_json::json!({}));
        let plan = test_plan(&mut response, Protocol::OpenAi);
        let ids: Vec<Option<String>> = response.tool_calls().map(|c| c.id.clone()).collect();
        assert!(ids[0].as_deref().is_some_and(|id| id.starts_with("call_")));
        assert_eq!(ids[1].as_deref(), Some("mine"));
        assert_eq!(plan.usage.input_tokens, 10);
        assert_eq!(plan.chunk_chars, 3);
        assert!(plan.message_id.starts_with("chatcmpl-"));
    }

    #[test]
    fn outgoing_decisions() {
        let mut response = text("hello");
        let reply = test_plan(&mut response, Protocol::Anthropic);
        match outgoing(
            Protocol::Anthropic,
            false,
            Content::Reply(reply.clone()),
            "r",
        ) {
            Outgoing::Whole { content_type, body } => {
                assert_eq!(content_type, "application/json");
                assert!(body.contains("\"type\":\"message\""));
            }
            other => panic!("unexpected {other:?}"),
        }
        match outgoing(
            Protocol::Anthropic,
            true,
            Content::Reply(reply.clone()),
            "r",
        ) {
            Outgoing::Paced {
                kind,
                ending,
                pieces,
            } => {
                assert_eq!(kind, BodyKind::EventStream);
                assert_eq!(ending, Ending::Complete);
                assert!(pieces.len() > 3);
            }
            other => panic!("unexpected {other:?}"),
        }
        match outgoing(
            Protocol::OpenAi,
            true,
            Content::Error(Fault::Unauthorized),
            "r",
        ) {
            Outgoing::Error(error) => assert_eq!(error.status, 401),
            other => panic!("unexpected {other:?}"),
        }
        let broken = |fault: Fault| Content::Broken {
            fault,
            plan: reply.clone(),
        };
        match outgoing(
            Protocol::Anthropic,
            false,
            broken(Fault::cut_after(1, text("x"))),
            "r",
        ) {
            Outgoing::Paced {
                kind: BodyKind::Json { content_length },
                pieces,
                ending,
            } => {
                assert_eq!(ending, Ending::Cut);
                assert_eq!(pieces.len(), 1);
                assert_eq!(pieces[0].len(), content_length / 2);
            }
            other => panic!("unexpected {other:?}"),
        }
        match outgoing(
            Protocol::Anthropic,
            false,
            broken(Fault::stall_after(1, text("x"))),
            "r",
        ) {
            Outgoing::Paced { ending, .. } => assert_eq!(ending, Ending::Stall),
            other => panic!("unexpected {other:?}"),
        }
        match outgoing(
            Protocol::Anthropic,
            false,
            broken(Fault::malformed_after(1, text("x"))),
            "r",
        ) {
            Outgoing::Whole { body, .. } => assert!(serde_json::from_str::<Value>(&body).is_err()),
            other => panic!("unexpected {other:?}"),
        }
        match outgoing(
            Protocol::Anthropic,
            false,
            broken(Fault::error_after(1, text("x"))),
            "r",
        ) {
            Outgoing::Error(error) => assert_eq!(error.status, STATUS_OVERLOADED),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn usage_estimate_rounds_up() {
        assert_eq!(estimate_usage(10, 0), Usage::new(3, 1));
        assert_eq!(estimate_usage(8, 9), Usage::new(2, 3));
    }

    #[test]
    fn stream_faults_withhold_the_final_event() {
        let frames = || {
            vec![
                render::SseFrame::data("a"),
                render::SseFrame::data("b"),
                render::SseFrame::data("c"),
            ]
        };
        let mut response = text("x");
        let plan = test_plan(&mut response, Protocol::OpenAiResponses);
        let (sent, ending) = stream_fault_frames(
            Protocol::OpenAi,
            &Fault::cut_after(10, response.clone()),
            &plan,
            frames(),
            "r",
        );
        assert_eq!(sent.len(), 2);
        assert_eq!(ending, Ending::Cut);
        let (sent, ending) = stream_fault_frames(
            Protocol::OpenAi,
            &Fault::stall_after(1, response.clone()),
            &plan,
            frames(),
            "r",
        );
        assert_eq!(sent.len(), 1);
        assert_eq!(ending, Ending::Stall);
        let (sent, ending) = stream_fault_frames(
            Protocol::Anthropic,
            &Fault::error_after(2, response.clone()),
            &plan,
            frames(),
            "req_1",
        );
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[2].event.as_deref(), Some("error"));
        assert_eq!(ending, Ending::Complete);
        let (sent, _) = stream_fault_frames(
            Protocol::OpenAi,
            &Fault::malformed_after(1, response),
            &plan,
            frames(),
            "r",
        );
        assert_eq!(sent.len(), 4);
        assert_eq!(sent[1].data, render::MALFORMED_DATA);
        assert_eq!(sent[2].data, "b");
        let (sent, _) = stream_fault_frames(
            Protocol::OpenAiResponses,
            &Fault::error_after(1, text("x")),
            &plan,
            frames(),
            "r",
        );
        assert_eq!(sent[1].event.as_deref(), Some("response.failed"));
        assert!(sent[1].data.contains("server_error"), "{}", sent[1].data);
    }
}
