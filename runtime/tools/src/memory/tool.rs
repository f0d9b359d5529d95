//! The `remember` tool: appends one note to the project memory
//! (`.troupe/memory.md`). It takes no path, so it can write nothing else; it
//! is a write for the permission engine (asked in default mode, not offered
//! in plan mode), and the note applies from the next session on.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{NOTE_MAX_CHARS, append_note};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};
use crate::{ToolContext, ToolOutput};

/// Name of the tool.
pub(crate) const REMEMBER_TOOL_NAME: &str = "remember";

/// The `remember` tool.
#[derive(Debug)]
pub struct Remember;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    #[schemars(description = format!(
        "One durable fact, one sentence (at most {NOTE_MAX_CHARS} characters)"
    ))]
    note: String,
}

impl Remember {
    /// The tool, with the schema of its arguments.
    pub fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for Remember {
    type Args = Args;
    const NAME: &'static str = REMEMBER_TOOL_NAME;
    const CLASS: ToolClass = ToolClass::WRITE;

    fn description(&self) -> &str {
        "Keep a fact about this project (convention, command, decision) for later sessions \
         when the user asks you to remember it. Never secrets."
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let root = ctx.sandbox.project_root().to_path_buf();
            let written = tokio::task::spawn_blocking(move || append_note(&root, &args.note)).await;
            match written {
                Ok(Ok(_)) => ToolOutput::ok(
                    "Remembered in .troupe/memory.md; it is part of the prompt from the next session on.",
                ),
                Ok(Err(err)) => ToolOutput::error(format!("Not remembered: {err}.")),
                Err(err) => ToolOutput::error(format!("Not remembered: {err}.")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::testing::assert_schema_matches;
    use crate::{Tool, ToolRegistry};
    use troupe_paths::sandbox::PathSandbox;
    use troupe_protocol::permission::ToolCategory;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        let tool = Remember::new();
        assert_schema_matches::<Args>(tool.input_schema());
        assert_eq!(
            tool.input_schema()["properties"]["note"]["description"],
            format!("One durable fact, one sentence (at most {NOTE_MAX_CHARS} characters)")
        );
    }

    fn context(root: &std::path::Path) -> ToolContext {
        let sandbox = Arc::new(PathSandbox::new(root, &[], None).unwrap());
        ToolContext {
            call_id: "c1".into(),
            os_sandbox: Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
            sandbox,
            spill_dir: root.join("spill"),
            cancel: tokio_util::sync::CancellationToken::new(),
            child_env: Arc::new(Vec::new()),
            background: Arc::new(crate::background::BackgroundTasks::new()),
            outside_read_approved: false,
            reach: None,
        }
    }

    #[tokio::test]
    async fn remember_appends_to_the_memory_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let tool = Remember::new();
        let ctx = context(dir.path());
        let out = tool
            .execute(json!({"note": "deploys go through `make ship`"}), &ctx)
            .await;
        assert!(!out.is_error, "{out:?}");
        let out = tool.execute(json!({"note": "  "}), &ctx).await;
        assert!(out.is_error);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".troupe/memory.md")).unwrap(),
            "- deploys go through `make ship`\n"
        );
        // A write, offered outside plan mode only, validated by its schema.
        assert!(!tool.read_only());
        assert_eq!(tool.category(), ToolCategory::Write);
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(Remember::new())).unwrap();
        assert!(
            registry
                .validate(REMEMBER_TOOL_NAME, r#"{"note":"x","path":"/etc/passwd"}"#)
                .is_err()
        );
    }
}
