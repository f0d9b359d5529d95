//! The tool layer (SPEC §4): the [`Tool`] trait every tool implements (built-in,
//! MCP, `agent`), the context a call runs in, and what a call returns.
//!
//! A tool never returns a Rust error and never panics by design: every failure is
//! a [`ToolOutput`] with `is_error` set, written so the model can act on it.
//! Permission decisions are not made here (see `permissions`); a tool only says
//! what it touches ([`PermissionSubject`]) and re-checks paths against the
//! sandbox at the moment of use.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::{ToolOutputPart, ToolResult};
use crate::sandbox::PathSandbox;

/// Permission category of a tool (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolCategory {
    /// Reads only (read_file, glob, grep, task_output, task_list).
    Read,
    /// Writes files (write_file, edit_file).
    Write,
    /// Executes commands or has effects outside (bash, task_kill, MCP tools not read-only).
    Execute,
    /// Starts sub-agents.
    Agent,
}

/// Whether a path is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read.
    Read,
    /// Write (create, modify).
    Write,
}

/// What one call touches, as the permission engine needs to see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionSubject {
    /// Nothing beyond the tool itself.
    None,
    /// A path, as the model wrote it.
    Path {
        /// The raw path argument.
        path: String,
        /// Read or write.
        access: Access,
    },
    /// A shell command.
    Command {
        /// The command line.
        command: String,
    },
}

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Content parts, in order.
    pub content: Vec<ToolOutputPart>,
    /// True when the call failed.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            content: vec![ToolOutputPart::Text { text: text.into() }],
            is_error: false,
        }
    }

    /// A failed call, explained for the model.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![ToolOutputPart::Text { text: text.into() }],
            is_error: true,
        }
    }

    /// Attaches the call id, making the result that goes into history.
    pub fn into_result(self, call_id: impl Into<String>) -> ToolResult {
        ToolResult {
            call_id: call_id.into(),
            content: self.content,
            is_error: self.is_error,
        }
    }
}

/// Everything a call may use. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    /// Id of the call being executed.
    pub call_id: String,
    /// The sandbox; its project root is the working directory of commands.
    pub sandbox: Arc<PathSandbox>,
    /// Directory for spilled outputs of this session.
    pub spill_dir: PathBuf,
    /// Cancelled when the call, its turn or its run is cancelled.
    pub cancel: CancellationToken,
    /// Environment passed to child processes: the reduced base set plus the
    /// configured allowlist, plus extra variables such as `TRACEPARENT`.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Shell tasks started with `run_in_background`, shared by one session.
    pub background: Arc<background::BackgroundTasks>,
    /// True when a person approved this very call, which lets a read-only tool
    /// read a path outside the allowed roots. Writes outside are refused always.
    pub outside_read_approved: bool,
}

/// One tool.
pub trait Tool: Send + Sync {
    /// Name offered to the model, `^[A-Za-z0-9_-]{1,64}$`.
    fn name(&self) -> &str;
    /// Description written for the model: what it can and cannot do, defaults.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments (an object schema with `required`).
    fn input_schema(&self) -> &Value;
    /// True when the tool has no side effects; consecutive read-only calls run
    /// concurrently and never wait for a person.
    fn read_only(&self) -> bool;
    /// Permission category.
    fn category(&self) -> ToolCategory;
    /// System tools (e.g. `load_skill`, background-task tools) are exempt from
    /// role allowlists.
    fn is_system(&self) -> bool {
        false
    }
    /// What the call touches, from its validated arguments.
    fn permission_subject(&self, _args: &Value) -> PermissionSubject {
        PermissionSubject::None
    }
    /// A timeout that replaces the default per-call timeout (bash uses its
    /// `timeout_secs` argument).
    fn timeout(&self, _args: &Value) -> Option<Duration> {
        None
    }
    /// Runs the call with validated arguments. Must honour `ctx.cancel`.
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
}

pub mod background;
pub mod files;
pub mod output;
pub mod process;
pub mod registry;

pub use registry::{RegistryError, ToolRegistry};
