//! The integration tests of troupe-tests, gathered in one test binary.

mod agent_loop;
mod agent_tree;
mod compaction;
mod docs_stand_alone;
mod hooks_runtime;
mod mcp_conformance;
mod mcp_servers;
mod mcp_spans;
mod telemetry;
