//! Shared fixture of the tool tests: a temporary project with a spill directory
//! and a directory outside the sandbox, the built-in registry, and a way to
//! call a tool the way the agent does (validate, then execute).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use troupe_paths::sandbox::{PathSandbox, resolve_path};
use troupe_process::child_environment;
use troupe_protocol::model::ToolOutputPart;
use troupe_tools::background::BackgroundTasks;
use troupe_tools::{ToolContext, ToolOutput, ToolRegistry, builtin_registry};

/// A temporary project and everything a tool call needs.
pub(crate) struct Harness {
    _dir: tempfile::TempDir,
    /// The project root (resolved).
    pub project: PathBuf,
    /// The session's spill directory (an allowed root).
    pub spill: PathBuf,
    /// A directory outside every allowed root.
    pub outside: PathBuf,
    /// The sandbox.
    pub sandbox: Arc<PathSandbox>,
    /// Background tasks of the "session".
    pub background: Arc<BackgroundTasks>,
    /// The built-in registry.
    pub registry: ToolRegistry,
    /// Environment given to commands.
    pub child_env: Arc<Vec<(String, String)>>,
}

impl Harness {
    /// A fresh project.
    pub(crate) fn new() -> Self {
        Self::with_env_allowlist(&[])
    }

    /// A fresh project whose commands also get the allowlisted variables.
    pub(crate) fn with_env_allowlist(allowlist: &[String]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = resolve_path(dir.path()).unwrap();
        let project = base.join("project");
        let spill = base.join("spill");
        let outside = base.join("outside");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let sandbox = Arc::new(
            PathSandbox::new(
                &project,
                std::slice::from_ref(&spill),
                Some(base.join("home")),
            )
            .unwrap(),
        );
        let child_env = Arc::new(child_environment(allowlist, |name| {
            std::env::var(name).ok()
        }));
        Self {
            _dir: dir,
            project,
            spill,
            outside,
            sandbox,
            background: Arc::new(BackgroundTasks::new()),
            registry: builtin_registry(),
            child_env,
        }
    }

    /// A context for call `call_id`.
    pub(crate) fn ctx(&self, call_id: &str) -> ToolContext {
        ToolContext {
            call_id: call_id.to_string(),
            os_sandbox: std::sync::Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
            sandbox: Arc::clone(&self.sandbox),
            spill_dir: self.spill.clone(),
            cancel: CancellationToken::new(),
            child_env: Arc::clone(&self.child_env),
            background: Arc::clone(&self.background),
            outside_read_approved: false,
            reach: None,
        }
    }

    /// Validates `raw` for `name` and executes the call with `ctx`; a
    /// validation error becomes an error result, as in the agent.
    pub(crate) async fn call_with(&self, ctx: &ToolContext, name: &str, raw: &str) -> ToolOutput {
        let args = match self.registry.validate(name, raw) {
            Ok(args) => args,
            Err(message) => return ToolOutput::error(message),
        };
        let tool = self.registry.get(name).unwrap();
        tool.execute(args, ctx).await
    }

    /// [`Harness::call_with`] with a fresh context for call `call_1`.
    pub(crate) async fn call(&self, name: &str, args: serde_json::Value) -> ToolOutput {
        self.call_with(&self.ctx("call_1"), name, &args.to_string())
            .await
    }

    /// Writes a file under the project.
    pub(crate) fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.project.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    /// Reads a file under the project.
    pub(crate) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.project.join(rel)).unwrap()
    }
}

/// The text of a result.
pub(crate) fn text(out: &ToolOutput) -> String {
    out.content
        .iter()
        .map(|part| match part {
            ToolOutputPart::Text { text } => text.clone(),
            ToolOutputPart::Image { .. } => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts a successful result and returns its text.
#[track_caller]
pub(crate) fn ok_text(out: &ToolOutput) -> String {
    assert!(!out.is_error, "expected success, got error: {}", text(out));
    text(out)
}

/// Asserts an error result and returns its text.
#[track_caller]
pub(crate) fn err_text(out: &ToolOutput) -> String {
    assert!(out.is_error, "expected an error, got: {}", text(out));
    text(out)
}

/// Creates a FIFO at `path`.
pub(crate) fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    assert_eq!(
        // SAFETY: valid C string.
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo failed"
    );
}

/// Reads one line from a FIFO without blocking the runtime, failing the test
/// after `limit`. Opening blocks until the command opens it for writing: an
/// event, not a sleep.
pub(crate) async fn read_fifo(path: &Path, limit: std::time::Duration) -> String {
    let path = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(path).unwrap());
    tokio::time::timeout(limit, read)
        .await
        .expect("the command never wrote to the FIFO")
        .unwrap()
        .trim()
        .to_string()
}
