//! The `update_plan` tool: the model replaces its task plan, the short list
//! of steps people watch. The tool only checks the plan
//! ([`TaskPlan::validated`]) and confirms it; the agent loop keeps the plan
//! of a call that succeeded, announces it and stores it with the session.
//!
//! A system tool (sub-agents keep plans of their own) that reads nothing and
//! writes nothing: offered in every mode, never asked about, batched with
//! the reads.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use troupe_protocol::task_plan::{StepStatus, TaskPlan, TaskStep};

use super::{ToolContext, ToolOutput};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// Name of the tool.
pub const UPDATE_PLAN_TOOL_NAME: &str = "update_plan";

/// The `update_plan` tool.
#[derive(Debug)]
pub struct UpdatePlan;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Why the plan changed
    explanation: Option<String>,
    /// All steps
    plan: Vec<StepArgs>,
}

// One step of the arguments (a plain comment: a doc comment would be
// offered as the item schema's description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StepArgs {
    // The step, imperative (no doc comments here: each would be offered).
    step: String,
    status: Status,
    /// e.g. "Running tests"
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    active_form: Option<String>,
}

// A step's status as the arguments spell it.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Status {
    Pending,
    InProgress,
    Completed,
}

impl From<Status> for StepStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Pending => Self::Pending,
            Status::InProgress => Self::InProgress,
            Status::Completed => Self::Completed,
        }
    }
}

impl From<Args> for TaskPlan {
    fn from(args: Args) -> Self {
        Self {
            explanation: args.explanation,
            plan: args
                .plan
                .into_iter()
                .map(|step| TaskStep {
                    step: step.step,
                    status: step.status.into(),
                    active_form: step.active_form,
                })
                .collect(),
        }
    }
}

impl UpdatePlan {
    /// The tool, with the schema of its arguments.
    pub fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

/// The one-line answer to a call: the confirmation of a kept plan, or why
/// it was refused (the plan stays as it was).
pub fn plan_answer(plan: TaskPlan) -> ToolOutput {
    match plan.validated() {
        Ok(plan) if plan.plan.is_empty() => ToolOutput::ok("Plan cleared."),
        Ok(plan) => ToolOutput::ok(format!(
            "Plan updated: {} of {} steps completed.",
            plan.completed(),
            plan.plan.len()
        )),
        Err(err) => ToolOutput::error(format!("Plan not updated: {err}. The plan is unchanged.")),
    }
}

impl BuiltinTool for UpdatePlan {
    type Args = Args;
    const NAME: &'static str = UPDATE_PLAN_TOOL_NAME;
    const CLASS: ToolClass = ToolClass::READ.system();

    fn description(&self) -> &str {
        "Replace your task plan (the user sees it). One step in_progress at a time."
    }

    fn run<'a>(&'a self, args: Self::Args, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(std::future::ready(plan_answer(args.into())))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Tool;
    use crate::testing::assert_schema_matches;
    use troupe_protocol::permission::{PermissionSubject, ToolCategory};

    fn text(out: &ToolOutput) -> &str {
        let crate::ToolOutputPart::Text { text } = &out.content[0] else {
            panic!("a text result: {out:?}");
        };
        text
    }

    #[test]
    fn the_schema_is_derived_and_the_class_is_a_system_read() {
        let tool = UpdatePlan::new();
        assert_schema_matches::<Args>(tool.input_schema());
        assert_eq!(
            tool.input_schema()["properties"]["plan"]["items"]["properties"]["status"]["enum"],
            json!(["pending", "in_progress", "completed"])
        );
        assert!(tool.read_only());
        assert!(tool.is_system());
        assert_eq!(tool.category(), ToolCategory::Read);
        assert_eq!(
            tool.permission_subject(&json!({"plan": []})),
            PermissionSubject::None
        );
    }

    fn answer(args: serde_json::Value) -> ToolOutput {
        plan_answer(serde_json::from_value::<Args>(args).unwrap().into())
    }

    #[test]
    fn a_valid_plan_is_confirmed_in_one_line_and_a_broken_one_refused() {
        let out = answer(json!({"plan": [
            {"step": "Read", "status": "completed"},
            {"step": "Fix", "status": "in_progress", "active_form": "Fixing"}
        ]}));
        assert!(!out.is_error, "{out:?}");
        assert_eq!(text(&out), "Plan updated: 1 of 2 steps completed.");
        let out = answer(json!({"plan": [
            {"step": "Read", "status": "in_progress"},
            {"step": "Fix", "status": "in_progress"}
        ]}));
        assert!(out.is_error);
        assert!(
            text(&out).contains("at most one step may be in_progress"),
            "{}",
            text(&out)
        );
        assert!(!text(&out).contains('\n'));
        assert_eq!(text(&answer(json!({"plan": []}))), "Plan cleared.");
        // Unknown fields and statuses are refused by the schema.
        assert!(serde_json::from_value::<Args>(json!({"plan": [], "x": 1})).is_err());
        assert!(
            serde_json::from_value::<Args>(json!({"plan": [{"step": "a", "status": "done"}]}))
                .is_err()
        );
    }
}
