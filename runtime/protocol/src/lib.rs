//! Troupe's vocabulary, which every other crate speaks: the protocol-neutral
//! conversation model (messages, content blocks, tool definitions, usage),
//! the run events every observer sees, the permission terms (modes, rules,
//! decisions, what a call touches), the frame around untrusted text and the
//! bodies of the daemon's HTTP API and the messages cluster nodes exchange.
//! Plain data with serde; nothing here does I/O.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod api;
pub mod cluster;
pub mod cluster_control;
pub mod events;
pub mod model;
pub mod permission;
pub mod task_plan;
pub mod untrusted;
