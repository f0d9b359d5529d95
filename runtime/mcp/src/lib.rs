//! The MCP client side of the runtime (SPEC §8): what a configured server is
//! (`spec`), what of it may be shown (`redact`), how its tools are named and
//! offered (`names`, [`tool`]), how its results reach the model (`content`),
//! one live connection through the `rmcp` crate (`client`, over `http` for a
//! Streamable HTTP server), the calls in flight on it, which progress and
//! questions reach ([`calls`]), how a question is answered (`elicit`), and
//! the state every server's supervisor shares with the runs that use it
//! ([`state`]).
//!
//! Nothing here supervises or restarts: the actors crate owns one actor per
//! server and sequences these pieces. The decisions (names, read-only flags,
//! schemas, result conversion, restart delays, how long a run waits for
//! servers still starting) are pure functions with unit tests.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

use std::time::Duration;

pub mod calls;
pub(crate) mod client;
pub(crate) mod content;
pub(crate) mod elicit;
pub(crate) mod http;
pub(crate) mod names;
pub(crate) mod redact;
pub(crate) mod spec;
pub mod state;
pub mod tool;

pub use client::{Connection, RmcpTool};
pub use redact::Redaction;
pub use spec::{McpServerSpec, McpTransportSpec, resolve_servers};
pub use state::{McpState, ServerPhase, ServerStatus, restart_delay};

/// SPEC §8: each server gets this long to connect and list its tools.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// SPEC §8: shutdown closes every session within this budget, then kills
/// what is left of each stdio server's process group.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// When the process that started the servers is about to exit (an embedded
/// `troupe run`, `troupe mcp list`): each session is closed (a stdio
/// server's input ends) and the server gets this long to exit by itself
/// before its process group is killed. A server exits on the end of its input
/// in 15–30 ms (Python and Node); the user's exit does not wait for that.
pub const EXIT_BUDGET: Duration = Duration::from_millis(10);

/// SPEC §8: how long a run's first model request waits for a server still
/// starting, unless its entry sets `startup_grace_secs`.
pub(crate) const DEFAULT_STARTUP_GRACE: Duration = Duration::from_secs(3);
