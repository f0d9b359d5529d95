//! The background-task tools (SPEC §4): `task_output {id}`, `task_list`,
//! `task_kill {id}`, over the session's [`BackgroundTasks`] table. All three
//! are system tools (exempt from role allowlists); `task_output` and
//! `task_list` are read-only.
//!
//! [`BackgroundTasks`]: super::background::BackgroundTasks

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::background::{BackgroundTasks, TaskInfo};
use super::{PermissionSubject, ToolContext, ToolOutput, plural};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// The arguments of `task_output` and `task_kill`; their schema is derived
/// from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdArgs {
    /// Id of a task bash started
    id: String,
}

/// The arguments of `task_list`: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

fn unknown_task(tasks: &BackgroundTasks, id: &str) -> ToolOutput {
    let ids = tasks.ids();
    if ids.is_empty() {
        ToolOutput::error(format!(
            "No background task `{id}`: none was started (use bash with run_in_background)."
        ))
    } else {
        ToolOutput::error(format!(
            "No background task `{id}`. Known tasks: {}.",
            ids.join(", ")
        ))
    }
}

fn describe(info: &TaskInfo) -> String {
    format!(
        "{}: {} after {} s: {}",
        info.id,
        info.status,
        info.elapsed.as_secs(),
        info.command
    )
}

/// The `task_output` tool.
#[derive(Debug)]
pub(crate) struct TaskOutput;

impl TaskOutput {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for TaskOutput {
    type Args = IdArgs;
    const NAME: &'static str = "task_output";
    const CLASS: ToolClass = ToolClass::READ.system();

    fn description(&self) -> &str {
        "Status and output so far of a background task (long output: its end here, the \
         whole in a file)."
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Some(snapshot) = ctx.background.snapshot(&args.id) else {
                return unknown_task(&ctx.background, &args.id);
            };
            let mut text = describe(&snapshot.info);
            text.push('\n');
            if snapshot.output_bytes == 0 {
                text.push_str("(no output yet)");
            } else {
                text.push_str(&snapshot.output.text);
            }
            ToolOutput::ok(text.trim_end_matches('\n'))
        })
    }
}

/// The `task_list` tool.
#[derive(Debug)]
pub(crate) struct TaskList;

impl TaskList {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for TaskList {
    type Args = NoArgs;
    const NAME: &'static str = "task_list";
    const CLASS: ToolClass = ToolClass::READ.system();

    fn description(&self) -> &str {
        "List background tasks: id, status, running time, command."
    }

    fn run<'a>(&'a self, _args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let tasks = ctx.background.list();
            if tasks.is_empty() {
                return ToolOutput::ok("No background tasks.");
            }
            let running = tasks.iter().filter(|t| t.status.is_running()).count() as u64;
            let mut text = format!(
                "{} ({} running):",
                plural(tasks.len() as u64, "task"),
                running
            );
            for info in &tasks {
                text.push('\n');
                text.push_str(&describe(info));
            }
            ToolOutput::ok(text)
        })
    }
}

/// The `task_kill` tool.
#[derive(Debug)]
pub(crate) struct TaskKill;

impl TaskKill {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for TaskKill {
    type Args = IdArgs;
    const NAME: &'static str = "task_kill";
    const CLASS: ToolClass = ToolClass::EXECUTE.system();

    fn description(&self) -> &str {
        "Stop a background task and every process it started."
    }

    fn target(&self, _args: &Value) -> PermissionSubject {
        PermissionSubject::None
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let was_running = ctx
                .background
                .snapshot(&args.id)
                .map(|s| s.info.status.is_running());
            match (was_running, ctx.background.kill(&args.id).await) {
                (Some(true), Some(status)) => ToolOutput::ok(format!("{}: {status}.", args.id)),
                (_, Some(status)) => {
                    ToolOutput::ok(format!("{} had already ended: {status}.", args.id))
                }
                (_, None) => unknown_task(&ctx.background, &args.id),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;
    use crate::testing::assert_schema_matches;

    #[test]
    fn the_schemas_are_derived_from_the_arguments() {
        assert_schema_matches::<IdArgs>(TaskOutput::new().input_schema());
        assert_schema_matches::<NoArgs>(TaskList::new().input_schema());
        assert_schema_matches::<IdArgs>(TaskKill::new().input_schema());
    }
}
