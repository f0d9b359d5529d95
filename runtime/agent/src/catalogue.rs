//! The tool catalogue of one agent (SPEC §4, §7): the tools it may call, built
//! once from the session's registry and its role, with the definitions it is
//! offered per permission mode in a stable order, the class of each call for
//! the execution plan, and argument validation.
//!
//! A name outside the catalogue is unknown to the agent, whether or not some
//! other agent of the run could use it: it is refused and counts toward the
//! agent's unknown-tool limit. The `agent` tool is part of the catalogue when
//! the agent may be offered it; it is carried out by the runtime, not by a
//! [`Tool`], so the catalogue keeps only its definition and schema.

use std::sync::Arc;

use serde_json::Value;

use crate::agent_tool::AGENT_TOOL_NAME;
use crate::plan::CallClass;
use crate::roles::RoleTools;
use troupe_permissions::offered_in_mode;
use troupe_protocol::model::ToolDefinition;
use troupe_protocol::permission::PermissionMode;
use troupe_protocol::permission::PermissionSubject;
use troupe_shell::command_is_read_only;
use troupe_tools::registry::ArgumentSchema;
use troupe_tools::{RegistryError, Tool, ToolRegistry};

/// What a name in the catalogue refers to.
#[derive(Clone)]
pub enum CatalogueEntry<'a> {
    /// A tool run by a tool executor.
    Tool(&'a Arc<dyn Tool>),
    /// The `agent` tool: starts a child agent.
    Agent,
}

/// The `agent` tool's definition with its compiled schema.
#[derive(Clone)]
struct AgentEntry {
    definition: ToolDefinition,
    schema: ArgumentSchema,
}

/// The tools of one agent. Shared (`Arc`) by an agent and its forks, whose
/// requests must offer byte-identical definitions.
#[derive(Clone)]
pub struct ToolCatalogue {
    registry: ToolRegistry,
    agent: Option<AgentEntry>,
    /// Offered in every mode but plan: every tool, `agent` last.
    offered_all: Vec<ToolDefinition>,
    /// Offered in plan mode: the read-only tools.
    offered_read_only: Vec<ToolDefinition>,
}

impl std::fmt::Debug for ToolCatalogue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.offered_all.iter().map(|def| &def.name))
            .finish()
    }
}

/// `definition` as offered to the model (`troupe_tools::schema::offered`):
/// what every request carries, validated against the whole schema still.
fn offered_form(mut definition: ToolDefinition) -> ToolDefinition {
    definition.input_schema =
        troupe_tools::schema::offered(std::mem::take(&mut definition.input_schema));
    definition
}

impl ToolCatalogue {
    /// A catalogue of `registry`'s tools plus, when given, the `agent` tool.
    pub fn new(
        registry: ToolRegistry,
        agent_tool: Option<ToolDefinition>,
    ) -> Result<Self, RegistryError> {
        let agent = agent_tool
            .map(|definition| {
                ArgumentSchema::deferred(&definition.name, &definition.input_schema)
                    .map(|schema| AgentEntry { definition, schema })
            })
            .transpose()?;
        let mut offered_all: Vec<ToolDefinition> = registry
            .definitions()
            .into_iter()
            .map(offered_form)
            .collect();
        let mut offered_read_only: Vec<ToolDefinition> = offered_all
            .iter()
            .filter(|def| offered_in_mode(PermissionMode::Plan, registry.is_read_only(&def.name)))
            .cloned()
            .collect();
        if let Some(agent) = &agent {
            let offered = offered_form(agent.definition.clone());
            if offered_in_mode(PermissionMode::Plan, false) {
                offered_read_only.push(offered.clone());
            }
            offered_all.push(offered);
        }
        Ok(Self {
            registry,
            agent,
            offered_all,
            offered_read_only,
        })
    }

    /// The catalogue of a role: the tools `tools` allows from `registry`
    /// (system tools always; read-only roles get read-only tools only), and
    /// the `agent` tool when it is given and the role may use it.
    pub fn for_role(
        registry: &ToolRegistry,
        tools: &RoleTools,
        agent_tool: Option<ToolDefinition>,
    ) -> Result<Self, RegistryError> {
        let (subset, agent_allowed) = match tools {
            RoleTools::All => (registry.clone(), true),
            RoleTools::ReadOnly => (registry.read_only_subset(), false),
            RoleTools::Only(allow) => {
                let agent_named = ToolRegistry::name_allowed(allow, AGENT_TOOL_NAME);
                (registry.filtered(allow), agent_named)
            }
        };
        Self::new(subset, agent_tool.filter(|_| agent_allowed))
    }

    /// Tool definitions offered in `mode`, in the stable order.
    pub fn offered(&self, mode: PermissionMode) -> &[ToolDefinition] {
        if mode == PermissionMode::Plan {
            &self.offered_read_only
        } else {
            &self.offered_all
        }
    }

    /// The entry called `name`, if this agent may call it.
    pub fn get(&self, name: &str) -> Option<CatalogueEntry<'_>> {
        match &self.agent {
            Some(agent) if agent.definition.name == name => Some(CatalogueEntry::Agent),
            _ => self.registry.get(name).map(CatalogueEntry::Tool),
        }
    }

    /// True when this agent may call `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// True when the `agent` tool is part of the catalogue.
    pub fn has_agent_tool(&self) -> bool {
        self.agent.is_some()
    }

    /// How a call to `name` with the raw arguments `raw_input` takes part in
    /// the execution plan (unknown names run alone and fail at once). A tool
    /// whose subject is a command line (`bash`) is read-only for a call whose
    /// command only reads ([`command_is_read_only`]): a pure function of the
    /// arguments, so the plan never depends on the file system.
    pub fn class(&self, name: &str, raw_input: &str) -> CallClass {
        match self.get(name) {
            Some(CatalogueEntry::Agent) => CallClass::Agent,
            Some(CatalogueEntry::Tool(tool)) if tool.read_only() => CallClass::ReadOnly,
            Some(CatalogueEntry::Tool(tool)) => {
                let command = serde_json::from_str::<Value>(raw_input)
                    .ok()
                    .map(|args| tool.permission_subject(&args));
                match command {
                    Some(PermissionSubject::Command { command })
                        if command_is_read_only(&command) =>
                    {
                        CallClass::ReadOnly
                    }
                    _ => CallClass::SideEffect,
                }
            }
            None => CallClass::SideEffect,
        }
    }

    /// Names of every tool in the catalogue, in definition order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.offered_all.iter().map(|def| def.name.as_str())
    }

    /// Parses and validates the raw arguments of a call to `name` (which must
    /// be in the catalogue); the error is written for the model.
    pub fn validate(&self, name: &str, raw_input: &str) -> Result<Value, String> {
        match &self.agent {
            Some(agent) if agent.definition.name == name => agent.schema.validate(name, raw_input),
            _ => self.registry.validate(name, raw_input),
        }
    }

    /// The text refusing a call to `name`, which this agent may not call.
    pub fn unknown_tool_text(&self, name: &str, mode: PermissionMode) -> String {
        let offered: Vec<&str> = self
            .offered(mode)
            .iter()
            .map(|def| def.name.as_str())
            .collect();
        format!(
            "Unknown tool \"{name}\". Available tools: {}.",
            offered.join(", ")
        )
    }
}

/// Where an agent's tools come from when they can change during its run
/// (MCP servers joining or leaving): the interpreter injects one, and the loop
/// asks it just before each model request, so the calls of that response are
/// checked against what the request offered. It only answers from what is in
/// memory.
pub trait CatalogueSource: Send + Sync {
    /// A newer catalogue than `current`, if the tools changed since.
    fn latest(&self, current: &Arc<ToolCatalogue>) -> Option<Arc<ToolCatalogue>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_tool::agent_tool_definition;
    use crate::roles::RoleSet;
    use troupe_tools::builtin_registry;

    fn agent_def() -> ToolDefinition {
        agent_tool_definition(&RoleSet::builtin())
    }

    #[test]
    fn everything_with_agent_last_in_a_stable_order() {
        let registry = builtin_registry();
        let catalogue =
            ToolCatalogue::for_role(&registry, &RoleTools::All, Some(agent_def())).unwrap();
        let names: Vec<&str> = catalogue.names().collect();
        let mut expected: Vec<&str> = registry.names().collect();
        expected.push(AGENT_TOOL_NAME);
        assert_eq!(names, expected);
        assert_eq!(catalogue.class("agent", "{}"), CallClass::Agent);
        assert_eq!(catalogue.class("read_file", "{}"), CallClass::ReadOnly);
        assert_eq!(catalogue.class("bash", "{}"), CallClass::SideEffect);
        assert_eq!(catalogue.class("nope", "{}"), CallClass::SideEffect);
        assert!(!catalogue.contains("nope"));
        let plan: Vec<&str> = catalogue
            .offered(PermissionMode::Plan)
            .iter()
            .map(|def| def.name.as_str())
            .collect();
        assert!(!plan.contains(&"agent") && !plan.contains(&"bash"));
        assert!(plan.contains(&"read_file"));
    }

    #[test]
    fn bash_calls_that_only_read_are_read_only() {
        let catalogue = ToolCatalogue::new(builtin_registry(), None).unwrap();
        let class = |command: &str| {
            let input = serde_json::json!({ "command": command }).to_string();
            catalogue.class("bash", &input)
        };
        for command in [
            "cat Cargo.toml",
            "ls -la src",
            "wc -l a b",
            "git status",
            "grep -rn x .",
        ] {
            assert_eq!(class(command), CallClass::ReadOnly, "{command}");
        }
        for command in [
            "cat a > b",
            "ls --unknown-flag",
            "touch x",
            "echo $(id)",
            "find . -delete",
            "cargo test",
        ] {
            assert_eq!(class(command), CallClass::SideEffect, "{command}");
        }
        assert_eq!(catalogue.class("bash", "not json"), CallClass::SideEffect);
        assert_eq!(
            catalogue.class("write_file", r#"{"path":"a","content":"x"}"#),
            CallClass::SideEffect
        );
    }

    #[test]
    fn read_only_roles_get_read_only_tools_and_no_agent() {
        let registry = builtin_registry();
        let catalogue =
            ToolCatalogue::for_role(&registry, &RoleTools::ReadOnly, Some(agent_def())).unwrap();
        assert!(!catalogue.has_agent_tool());
        for name in catalogue.names() {
            assert!(registry.is_read_only(name), "{name} is not read-only");
        }
        assert!(!catalogue.contains("write_file"));
        assert!(!catalogue.contains("bash"));
        assert!(catalogue.contains("grep"));
        assert_eq!(
            catalogue.offered(PermissionMode::Default),
            catalogue.offered(PermissionMode::Plan)
        );
    }

    #[test]
    fn allowlists_with_wildcards_and_agent_only_when_named() {
        let registry = builtin_registry();
        let only = RoleTools::Only(vec!["read_file".into(), "gr*".into()]);
        let catalogue = ToolCatalogue::for_role(&registry, &only, Some(agent_def())).unwrap();
        assert!(catalogue.contains("read_file") && catalogue.contains("grep"));
        assert!(!catalogue.contains("glob") && !catalogue.has_agent_tool());
        let with_agent = RoleTools::Only(vec!["agent".into()]);
        let catalogue = ToolCatalogue::for_role(&registry, &with_agent, Some(agent_def())).unwrap();
        assert!(catalogue.has_agent_tool());
    }

    #[test]
    fn agent_arguments_are_validated_against_its_schema() {
        let catalogue = ToolCatalogue::new(builtin_registry(), Some(agent_def())).unwrap();
        assert!(
            catalogue
                .validate("agent", r#"{"description":"d","prompt":"p"}"#)
                .is_ok()
        );
        let err = catalogue.validate("agent", r#"{"prompt": 5}"#).unwrap_err();
        assert!(err.contains("Invalid arguments for agent"), "{err}");
        assert!(catalogue.validate("read_file", r#"{"path":"a"}"#).is_ok());
        let text = catalogue.unknown_tool_text("nope", PermissionMode::Default);
        assert!(text.starts_with("Unknown tool \"nope\". Available tools: read_file"));
    }

    #[test]
    fn definitions_are_offered_short_and_calls_checked_against_the_whole_schema() {
        let catalogue = ToolCatalogue::new(builtin_registry(), Some(agent_def())).unwrap();
        for mode in [PermissionMode::Default, PermissionMode::Plan] {
            for def in catalogue.offered(mode) {
                assert!(
                    def.input_schema.get("additionalProperties").is_none(),
                    "{}: {}",
                    def.name,
                    def.input_schema
                );
                assert!(!def.input_schema.to_string().contains(r#""default":false"#));
            }
        }
        // A property that is not offered is still refused, with the reason.
        for (name, args) in [
            ("read_file", r#"{"path":"a","mode":"fast"}"#),
            ("agent", r#"{"description":"d","prompt":"p","model":"x"}"#),
        ] {
            let err = catalogue.validate(name, args).unwrap_err();
            assert!(err.contains("Invalid arguments"), "{name}: {err}");
        }
    }
}
