//! The integration tests of troupe-cli, gathered in one test binary.

mod support;

mod chat;
mod cli;
mod compact_cli;
mod crash;
mod crash_tree;
mod daemon;
mod daemon_log;
mod disk_full;
mod doc_claims;
mod hooks;
mod invocation;
mod mcp;
mod mcp_daemon;
mod mcp_protocol;
mod memory;
mod ondemand;
mod os_sandbox;
mod otlp;
mod output;
mod permissions_cli;
mod plan;
mod project_trust;
mod responses;
mod robust;
mod safe_defaults;
mod security;
mod sessions;
mod shell_parse;
mod short_ids;
mod signals;
mod skills;
mod startup_cli;
mod task_plan;
mod web_fetch;
