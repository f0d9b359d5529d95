//! Troupe's domain layer: the protocol-neutral conversation model, LLM providers,
//! configuration, tools, permissions, the path sandbox, prompts. No actors, no
//! HTTP server, no terminal: `troupe-actors` sequences what this crate decides and
//! `troupe-cli` is the front door.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod agent;
pub mod compact;
pub mod config;
pub mod events;
pub mod file_io;
pub(crate) mod front_matter;
pub mod git_command;
pub mod hooks;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod model;
pub mod os_sandbox;
pub mod permission;
pub mod permissions;
pub mod places;
pub mod prompt;
pub mod sandbox;
pub mod secrets;
pub mod session;
pub mod skills;
pub mod store;
pub mod telemetry;
pub mod tools;
pub(crate) mod untrusted;
