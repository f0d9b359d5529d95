//! The `agent` tool as the model sees it: its name, argument schema and
//! description (which lists the roles of a [`RoleSet`]), and the parsing of a
//! call's arguments.
//!
//! The tool is offered like any other but carried out by the runtime, which
//! starts a child agent; this module neither starts agents nor checks that a
//! named role exists or that nesting is allowed. The description is part of
//! every request, so it is short and a pure function of the role set.

use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::roles::RoleSet;
use troupe_protocol::model::ToolDefinition;

/// Name of the tool that starts a sub-agent.
pub(crate) const AGENT_TOOL_NAME: &str = "agent";

/// The expected arguments, quoted in errors for the model.
const SIGNATURE: &str = "{description: string, prompt: string, role?: string, fork?: boolean}";

/// What the description says before the role list.
const DESCRIPTION_HEAD: &str = "\
Start a sub-agent on a task; only its final report comes back. It sees only \
`prompt`, not this conversation: make it self-contained (goal, paths, what to \
report). `agent` calls in one response run in parallel. `fork: true` starts it \
from a copy of this conversation instead; a fork's report starts with \
\"Scope:\". Forks cannot start agents; nesting is limited. Use sub-agents for \
broad searches and work that would fill your context, not quick lookups.

Roles (`role`, default general):";

/// A call of the `agent` tool; the tool's schema is derived from it (the
/// `schemars` descriptions are what the model reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentCallArgs {
    /// Short label shown to people (3–6 words), trimmed.
    #[schemars(description = "Short label for people, 3-6 words")]
    pub description: String,
    /// The full task for the child.
    #[schemars(description = "The complete task and what to report")]
    pub prompt: String,
    /// Role name; `None` = the default role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = "Role name")]
    pub role: Option<String>,
    /// Start the child from a copy of the caller's conversation.
    #[serde(default)]
    #[schemars(description = "Start from a copy of this conversation")]
    pub fork: bool,
}

/// The schema, derived once.
static AGENT_TOOL_SCHEMA: LazyLock<Value> =
    LazyLock::new(troupe_tools::schema::of::<AgentCallArgs>);

/// The JSON Schema of the tool's arguments, derived from [`AgentCallArgs`].
pub(crate) fn agent_tool_schema() -> Value {
    AGENT_TOOL_SCHEMA.clone()
}

/// The tool description for the model: what a sub-agent is, parallel calls,
/// forks, limits, then one `- name: description` line per role in the set's
/// stable order. The same set always gives the same bytes.
pub(crate) fn agent_tool_description(roles: &RoleSet) -> String {
    let mut text = String::from(DESCRIPTION_HEAD);
    for role in roles {
        text.push_str("\n- ");
        text.push_str(&role.name);
        text.push_str(": ");
        text.push_str(&role.description);
    }
    text
}

/// The tool definition offered to the model.
pub fn agent_tool_definition(roles: &RoleSet) -> ToolDefinition {
    ToolDefinition {
        name: AGENT_TOOL_NAME.to_owned(),
        description: agent_tool_description(roles),
        input_schema: agent_tool_schema(),
    }
}

/// Reads a call's arguments. `description` and `role` are trimmed (an empty
/// role counts as none). The error is written for the model.
pub(crate) fn parse_agent_call(args: &Value) -> Result<AgentCallArgs, String> {
    if !args.is_object() {
        return Err(format!(
            "Arguments for {AGENT_TOOL_NAME} must be a JSON object: {SIGNATURE}"
        ));
    }
    let mut call = AgentCallArgs::deserialize(args).map_err(|e| {
        format!("Invalid arguments for {AGENT_TOOL_NAME}: {e}. Expected: {SIGNATURE}")
    })?;
    if call.prompt.trim().is_empty() {
        return Err(format!(
            "The `prompt` of {AGENT_TOOL_NAME} is empty. Write the complete task for the \
             sub-agent: the goal, the relevant paths and what its report must contain."
        ));
    }
    call.description = call.description.trim().to_owned();
    if call.description.is_empty() {
        return Err(format!(
            "The `description` of {AGENT_TOOL_NAME} is empty. Give a short label of 3-6 \
             words, e.g. \"Find config loading\"."
        ));
    }
    call.role = call
        .role
        .map(|role| role.trim().to_owned())
        .filter(|role| !role.is_empty());
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::{Role, RoleSource, RoleTools, parse_role};
    use serde_json::json;
    use troupe_tools::registry::valid_tool_name;

    /// The description's budget with the built-in roles (it is in every request).
    const DESCRIPTION_BUDGET: usize = 1200;

    #[test]
    fn definition_uses_the_name_schema_and_description() {
        let roles = RoleSet::builtin();
        let def = agent_tool_definition(&roles);
        assert_eq!(def.name, "agent");
        assert!(valid_tool_name(&def.name));
        assert_eq!(def.input_schema, agent_tool_schema());
        assert_eq!(def.description, agent_tool_description(&roles));
    }

    #[test]
    fn schema_is_derived_from_the_arguments() {
        troupe_tools::testing::assert_schema_matches::<AgentCallArgs>(&agent_tool_schema());
        troupe_tools::testing::assert_provider_shape(AGENT_TOOL_NAME, &agent_tool_schema());
    }

    #[test]
    fn schema_shape() {
        let schema = agent_tool_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["description", "prompt"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["role"]["type"], "string");
        assert_eq!(schema["properties"]["fork"]["type"], "boolean");
        assert_eq!(schema["properties"]["prompt"]["type"], "string");
        assert_eq!(schema["properties"]["description"]["type"], "string");
    }

    #[test]
    fn description_is_short_and_lists_the_roles_in_order() {
        let text = agent_tool_description(&RoleSet::builtin());
        assert!(text.len() < DESCRIPTION_BUDGET, "{} bytes", text.len());
        for needle in [
            "parallel",
            "fork: true",
            "Scope:",
            "cannot start agents",
            "nesting",
        ] {
            assert!(text.contains(needle), "{needle}");
        }
        let general = text.find("\n- general: ").unwrap();
        let explorer = text.find("\n- explorer: ").unwrap();
        assert!(general < explorer);
        assert!(text.ends_with(&RoleSet::builtin().get("explorer").unwrap().description));
    }

    #[test]
    fn description_is_deterministic() {
        let file_roles = || {
            let roles = ["zed", "alpha", "mid"].map(|name| {
                let text = format!("---\ndescription: the {name} role\n---\nP");
                let path = format!("/p/.troupe/agents/{name}.md");
                let role = parse_role(&text, name, RoleSource::Project(path.into())).unwrap();
                (role.name.clone(), role)
            });
            RoleSet::with_file_roles(roles.into_iter().collect())
        };
        let (first, second) = (file_roles(), file_roles());
        let text = agent_tool_description(&first);
        assert_eq!(text, agent_tool_description(&second));
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("- general: "));
        assert!(lines[1].starts_with("- explorer: "));
        assert_eq!(
            &lines[2..],
            [
                "- alpha: the alpha role",
                "- mid: the mid role",
                "- zed: the zed role"
            ]
        );
    }

    #[test]
    fn file_role_lines_stay_on_one_line() {
        let text = "---\ndescription: |\n  first line\n  second line\n---\nP";
        let source = RoleSource::Project("/p/.troupe/agents/multi.md".into());
        let role = parse_role(text, "multi", source).unwrap();
        let roles = RoleSet::with_file_roles([(role.name.clone(), role)].into_iter().collect());
        let text = agent_tool_description(&roles);
        assert!(
            text.ends_with("\n- multi: first line second line"),
            "{text}"
        );
        let role: &Role = roles.get("multi").unwrap();
        assert_eq!(role.tools, RoleTools::All);
        assert!(matches!(role.source, RoleSource::Project(_)));
    }

    #[test]
    fn parses_a_full_call() {
        let call = parse_agent_call(&json!({
            "description": "  Find config loading ",
            "prompt": "Find where configuration is loaded.",
            "role": "explorer",
            "fork": true
        }))
        .unwrap();
        assert_eq!(
            call,
            AgentCallArgs {
                description: "Find config loading".into(),
                prompt: "Find where configuration is loaded.".into(),
                role: Some("explorer".into()),
                fork: true,
            }
        );
    }

    #[test]
    fn role_and_fork_are_optional() {
        let call = parse_agent_call(&json!({"description": "d", "prompt": "p"})).unwrap();
        assert_eq!(call.role, None);
        assert!(!call.fork);
        let call =
            parse_agent_call(&json!({"description": "d", "prompt": "p", "role": "  ", "role2": 1}));
        assert!(call.is_err());
        let call =
            parse_agent_call(&json!({"description": "d", "prompt": "p", "role": "  "})).unwrap();
        assert_eq!(call.role, None);
        let call =
            parse_agent_call(&json!({"description": "d", "prompt": "p", "role": null})).unwrap();
        assert_eq!(call.role, None);
    }

    #[test]
    fn bad_calls_are_errors_for_the_model() {
        let cases = [
            (json!(null), "must be a JSON object"),
            (json!("text"), "must be a JSON object"),
            (json!([1]), "must be a JSON object"),
            (json!({}), "missing field `description`"),
            (json!({"description": "d"}), "missing field `prompt`"),
            (json!({"description": "d", "prompt": 3}), "invalid type"),
            (
                json!({"description": "d", "prompt": "p", "fork": "yes"}),
                "invalid type",
            ),
            (
                json!({"description": "d", "prompt": "p", "extra": 1}),
                "unknown field `extra`",
            ),
            (
                json!({"description": "d", "prompt": " \n\t"}),
                "`prompt` of agent is empty",
            ),
            (
                json!({"description": "  ", "prompt": "p"}),
                "`description` of agent is empty",
            ),
        ];
        for (args, expected) in cases {
            let err = parse_agent_call(&args).unwrap_err();
            assert!(err.contains(expected), "{args}: {err}");
        }
        let err = parse_agent_call(&json!({})).unwrap_err();
        assert!(err.contains(SIGNATURE), "{err}");
    }

    #[test]
    fn args_round_trip_through_serde() {
        let call = AgentCallArgs {
            description: "d".into(),
            prompt: "p".into(),
            role: None,
            fork: false,
        };
        let value = serde_json::to_value(&call).unwrap();
        assert_eq!(
            value,
            json!({"description": "d", "prompt": "p", "fork": false})
        );
        assert_eq!(parse_agent_call(&value).unwrap(), call);
    }
}
