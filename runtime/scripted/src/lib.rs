//! A scripted model server for tests and the offline demo: a real HTTP server on
//! 127.0.0.1 that speaks the Anthropic Messages (`POST /v1/messages`), OpenAI
//! Chat Completions (`POST /v1/chat/completions`) and OpenAI Responses
//! (`POST /v1/responses`) wire protocols from a script, so a client's real HTTP
//! and SSE code runs against it.
//!
//! - A [`Script`] is an ordered list of [`Turn`]s. Each request is answered by the
//!   first unconsumed turn whose [`Matcher`] accepts it (default: any), so
//!   parallel sub-agents can be routed by content. Turns can be added while the
//!   server runs ([`ScriptedServer::push_turn`]).
//! - A turn answers with a protocol-neutral [`Response`] (thinking with a
//!   signature, text, tool calls with arguments split over several deltas,
//!   usage with cache counts, stop reason), rendered in the wire format of the
//!   endpoint it was requested on, streamed (`"stream": true`) or complete; or
//!   with a [`Fault`]: 429 with `retry-after`, 529, 5xx, prompt too long, 401, a
//!   non-JSON body, a stream cut or stalled mid-way, a malformed SSE line, an
//!   error event mid-stream.
//! - Every request is recorded ([`ScriptedServer::requests`],
//!   [`ScriptedServer::wait_for_requests`]) and checked against the protocol
//!   invariants of [`invariants`] (every tool call answered exactly once in the
//!   next message(s), no orphan results, valid roles, no empty content, signed
//!   thinking, at most four cache breakpoints, valid unique tool names, …). A
//!   violating request gets an HTTP 400 naming the rule and is recorded; in
//!   strict mode (the default) dropping the server while violations exist
//!   panics, so a test that produced an invalid history fails even if it never
//!   looked. [`ServerConfig::non_strict`] turns that off (for the demo).
//! - A client that drops a streamed response early is recorded
//!   ([`ScriptedServer::aborted_streams`]), so a test can prove that cancelling a
//!   stream aborts the HTTP request.
//!
//! This crate is a protocol-level instrument: it must not depend on the runtime
//! it tests.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use serde_json::json;
//! use troupe_scripted::{Fault, Matcher, Script, ScriptedServer, Turn, text, tool_call};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let script = Script::new()
//!     // The first request is rate limited; the client is expected to retry.
//!     .then(Fault::rate_limited(1))
//!     // The retry reads a file (arguments streamed over several deltas)...
//!     .then(tool_call("read_file", json!({"path": "src/lib.rs"})))
//!     // ...and whichever request carries the file content gets the answer.
//!     .then(Turn::new(text("The crate exports one function.")).when(Matcher::last_user_contains("pub fn")));
//! let server = ScriptedServer::start(script).await?;
//!
//! // Point an Anthropic client at `server.anthropic_base_url()` or an OpenAI
//! // client at `server.openai_base_url()`; here, a bare HTTP request:
//! # let _ = rustls::crypto::ring::default_provider().install_default();
//! let client = reqwest::Client::new();
//! let reply = client
//!     .post(format!("{}/v1/messages", server.anthropic_base_url()))
//!     .json(&json!({
//!         "model": "claude-test",
//!         "max_tokens": 1024,
//!         "messages": [{"role": "user", "content": "What does the crate export?"}]
//!     }))
//!     .send()
//!     .await?;
//! assert_eq!(reply.status(), 429);
//! assert_eq!(reply.headers()["retry-after"], "1");
//!
//! let recorded = server.wait_for_requests(1, Duration::from_secs(5)).await?;
//! assert_eq!(recorded[0].last_user_text().as_deref(), Some("What does the crate export?"));
//! assert!(server.violations().is_empty());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod fault;
mod ids;
pub mod invariants;
mod render;
mod request;
mod response;
mod script;
mod server;

pub use fault::Fault;
pub use invariants::{Rule, Violation, check_request};
pub use request::{Protocol, RecordedRequest, ToolResultView};
pub use response::{
    Block, Response, StopReason, ToolCall, Usage, text, thinking, tool_call, tool_call_raw,
    tool_call_with_id, tool_calls,
};
pub use script::{Action, Matcher, Script, Turn};
pub use server::{
    AbortedStream, CHARS_PER_TOKEN_ESTIMATE, DEFAULT_CHUNK_CHARS, MAX_REQUEST_BYTES,
    ScriptedServer, ServerConfig, WaitError,
};
