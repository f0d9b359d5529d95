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
use super::{PermissionSubject, Tool, ToolCategory, ToolContext, ToolOutput, parse_args, plural};

/// The arguments of `task_output` and `task_kill`; their schema is derived
/// from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    /// Task id from bash run_in_background
    id: String,
}

/// The arguments of `task_list`: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

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
pub(crate) struct TaskOutput {
    schema: Value,
}

impl TaskOutput {
    /// The tool with its schema.
    pub(crate) fn new() -> Self {
        Self {
            schema: super::schema::of::<IdArgs>(),
        }
    }
}

impl Default for TaskOutput {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for TaskOutput {
    fn name(&self) -> &str {
        "task_output"
    }

    fn description(&self) -> &str {
        "Status (running, exited N, killed) and output so far of a background task. Long output \
         keeps the end; the full log is in a file for read_file."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        true
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    fn is_system(&self) -> bool {
        true
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args: IdArgs = match parse_args(self.name(), args) {
                Ok(args) => args,
                Err(out) => return out,
            };
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
pub(crate) struct TaskList {
    schema: Value,
}

impl TaskList {
    /// The tool with its schema.
    pub(crate) fn new() -> Self {
        Self {
            schema: super::schema::of::<NoArgs>(),
        }
    }
}

impl Default for TaskList {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for TaskList {
    fn name(&self) -> &str {
        "task_list"
    }

    fn description(&self) -> &str {
        "List background tasks: id, status, running time, command."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        true
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    fn is_system(&self) -> bool {
        true
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if let Err(out) = parse_args::<NoArgs>(self.name(), args) {
                return out;
            }
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
pub(crate) struct TaskKill {
    schema: Value,
}

impl TaskKill {
    /// The tool with its schema.
    pub(crate) fn new() -> Self {
        Self {
            schema: super::schema::of::<IdArgs>(),
        }
    }
}

impl Default for TaskKill {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for TaskKill {
    fn name(&self) -> &str {
        "task_kill"
    }

    fn description(&self) -> &str {
        "Stop a background task and every process it started (SIGTERM, then SIGKILL after 2 s)."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        false
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Execute
    }

    fn is_system(&self) -> bool {
        true
    }

    fn permission_subject(&self, _args: &Value) -> PermissionSubject {
        PermissionSubject::None
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args: IdArgs = match parse_args(self.name(), args) {
                Ok(args) => args,
                Err(out) => return out,
            };
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
    use crate::testing::assert_schema_matches;

    #[test]
    fn the_schemas_are_derived_from_the_arguments() {
        assert_schema_matches::<IdArgs>(TaskOutput::new().input_schema());
        assert_schema_matches::<NoArgs>(TaskList::new().input_schema());
        assert_schema_matches::<IdArgs>(TaskKill::new().input_schema());
    }
}
