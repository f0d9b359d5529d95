//! The tool layer (SPEC §4): the [`Tool`] trait every tool implements (built-in,
//! MCP, `agent`), the context a call runs in, and what a call returns.
//!
//! A tool never returns a Rust error and never panics by design: every failure is
//! a [`ToolOutput`] with `is_error` set, written so the model can act on it.
//! Permission decisions are not made here (see `permissions`); a tool only says
//! what it touches ([`PermissionSubject`]) and re-checks paths against the
//! sandbox at the moment of use.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod memory;
pub mod skills;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use troupe_protocol::permission::{Access, PermissionSubject, ToolCategory};

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use troupe_paths::sandbox::PathSandbox;
use troupe_protocol::model::{ToolOutputPart, ToolResult};

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
    /// The OS sandbox that confines commands.
    pub os_sandbox: Arc<troupe_process::os_sandbox::CommandSandbox>,
    /// Directory for spilled outputs of this session.
    pub spill_dir: PathBuf,
    /// Cancelled when the call, its turn or its run is cancelled.
    pub cancel: CancellationToken,
    /// Environment passed to child processes: the reduced base set plus the
    /// configured allowlist, plus extra variables such as `TRACEPARENT`.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Shell tasks started with `run_in_background`, shared by one session.
    pub background: Arc<background::BackgroundTasks>,
    /// True when a person approved this very call or an allow rule names the
    /// path it reads, which lets a read-only tool read a path outside the
    /// allowed roots. Writes outside are refused always.
    pub outside_read_approved: bool,
    /// The run the call belongs to, for what a tool shows or asks while it
    /// runs (`None`: nobody is listening, nobody can be asked).
    pub reach: Option<Arc<dyn CallReach>>,
}

/// A question a running call puts to a person through the run's approval
/// path (shown like an approval: `tool`, then `args`, then `reason`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// Who asks (e.g. `mcp server github`).
    pub tool: String,
    /// The question, with what an answer may hold.
    pub args: String,
    /// How to answer.
    pub reason: String,
}

/// A person's answer: the outcome and the text given with it.
pub type Answer = (troupe_protocol::events::ApprovalOutcome, Option<String>);

/// What a running call can reach of the run that made it, beyond its
/// result: notices for people (progress) and a person to ask.
pub trait CallReach: Send + Sync {
    /// Shows people `text` as a notice with `code` (never added to history).
    fn notice(&self, code: &str, text: String);
    /// Asks a person; `None` when nobody can be asked in this run.
    fn ask(&self, question: Question) -> Option<BoxFuture<'static, Answer>>;
    /// True when the run's permission rules allow reaching `host` without
    /// asking (a `web_fetch` redirect to another host). None by default.
    fn host_allowed(&self, _host: &str) -> bool {
        false
    }
}

/// One tool.
pub trait Tool: Send + Sync {
    /// Name offered to the model, `^[A-Za-z0-9_-]{1,64}$`.
    fn name(&self) -> &str;
    /// Description written for the model: what it can and cannot do, defaults.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments (an object schema with `required`).
    fn input_schema(&self) -> &Value;
    /// `input_schema` already compiled, when the tool keeps it (an MCP tool
    /// compiles its server's schema once, when it is made): every registry
    /// the tool joins shares it. `None`: the registry compiles it.
    fn compiled_schema(&self) -> Option<&registry::ArgumentSchema> {
        None
    }
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

/// Deserialises validated arguments into a tool's argument struct; a mismatch
/// (arguments that skipped validation) becomes an error result.
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Value,
) -> Result<T, ToolOutput> {
    serde_json::from_value(args)
        .map_err(|err| ToolOutput::error(format!("Invalid arguments for {tool}: {err}.")))
}

/// `1 line`, `2 lines`.
pub(crate) fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub mod background;
pub(crate) mod bash;
pub mod builtin;
pub(crate) mod edit_file;
pub(crate) mod files;
pub(crate) mod glob;
pub mod grep;
pub mod output;
pub(crate) mod read_file;
pub mod registry;
pub mod schema;
pub mod target;
pub mod task_plan;
pub(crate) mod tasks;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub(crate) mod walk;
pub mod web;
pub(crate) mod write_file;

pub use registry::{RegistryError, ToolRegistry};

/// Every built-in tool of the tool layer, in the fixed definition order (the
/// request prefix depends on it, SPEC §14): read_file, write_file, edit_file,
/// glob, grep, bash, task_output, task_list, task_kill, web_fetch (with
/// default options and a cache of its own), update_plan. `agent` and `load_skill` are
/// registered by the layers that own them.
pub(crate) fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    builtin_tools_with(Some(Arc::new(web::WebFetch::new(
        web::WebOptions::default(),
        Arc::new(web::PageCache::default()),
    ))))
}

/// The built-in tools with `web_fetch` as given (`None`: left out, as
/// `[web] enabled = false` asks).
fn builtin_tools_with(web_fetch: Option<Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(read_file::ReadFile::new()),
        Arc::new(write_file::WriteFile::new()),
        Arc::new(edit_file::EditFile::new()),
        Arc::new(glob::Glob::new()),
        Arc::new(grep::Grep::new()),
        Arc::new(bash::Bash::new()),
        Arc::new(tasks::TaskOutput::new()),
        Arc::new(tasks::TaskList::new()),
        Arc::new(tasks::TaskKill::new()),
    ];
    tools.extend(web_fetch);
    tools.push(Arc::new(task_plan::UpdatePlan::new()));
    tools
}

/// A registry with `builtin_tools`, their schemas compiled at their first
/// call. A built-in tool whose registration fails (impossible unless its
/// schema is not an object schema, which the unit tests rule out, as they
/// rule out one that does not compile) is logged and left out rather than
/// taking the runtime down.
pub fn builtin_registry() -> ToolRegistry {
    registry_of(builtin_tools())
}

/// [`builtin_registry`] with `web_fetch` as given: the front door builds it
/// from the `[web]` settings and a cache that outlives the run (`None`:
/// `web_fetch` is not offered).
pub fn builtin_registry_with_web(web_fetch: Option<Arc<dyn Tool>>) -> ToolRegistry {
    registry_of(builtin_tools_with(web_fetch))
}

fn registry_of(tools: Vec<Arc<dyn Tool>>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in tools {
        let name = tool.name().to_string();
        if let Err(err) = registry.register_derived(tool) {
            tracing::error!(tool = %name, error = %err, "built-in tool not registered");
        }
    }
    registry
}

/// SPEC §3: the result given to a call that was cancelled before it finished.
pub const CANCELLED_RESULT: &str = "(cancelled)";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fixed request prefix (tool definitions + system prompt) stays
    /// within 8 KB with every built-in tool; these eleven tools'
    /// definitions, as offered, get 5.3 KB of it (5,303 bytes today).
    const DEFINITIONS_BUDGET_BYTES: usize = 5_350;

    #[test]
    fn builtin_registry_has_every_tool_in_order() {
        let registry = builtin_registry();
        assert_eq!(
            registry.names().collect::<Vec<_>>(),
            [
                "read_file",
                "write_file",
                "edit_file",
                "glob",
                "grep",
                "bash",
                "task_output",
                "task_list",
                "task_kill",
                "web_fetch",
                "update_plan"
            ]
        );
        let without = builtin_registry_with_web(None);
        assert!(without.get("web_fetch").is_none());
        assert_eq!(without.names().count(), 10);
    }

    #[test]
    fn builtin_definitions_fit_the_prefix_budget() {
        let mut defs = builtin_registry().definitions();
        for def in &mut defs {
            def.input_schema = schema::offered(std::mem::take(&mut def.input_schema));
        }
        let bytes = serde_json::to_string(&defs).unwrap().len();
        assert!(
            bytes <= DEFINITIONS_BUDGET_BYTES,
            "tool definitions take {bytes} bytes, over {DEFINITIONS_BUDGET_BYTES}"
        );
    }

    #[test]
    fn builtin_schemas_are_strict_objects() {
        for tool in builtin_tools() {
            let schema = tool.input_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(schema["additionalProperties"], false, "{}", tool.name());
            let props = schema["properties"].as_object().unwrap();
            for required in schema["required"].as_array().into_iter().flatten() {
                assert!(
                    props.contains_key(required.as_str().unwrap()),
                    "{}",
                    tool.name()
                );
            }
            assert!(!tool.description().is_empty());
        }
    }

    /// Every schema a built-in tool, `remember` and `load_skill` offer, by
    /// tool name (the `agent` tool's is checked where it is defined).
    fn offered_schemas() -> Vec<(String, serde_json::Value)> {
        let mut tools = builtin_tools();
        tools.push(Arc::new(crate::memory::Remember::new()));
        tools.push(Arc::new(crate::skills::LoadSkill::new(Arc::new(
            crate::skills::SkillSet::default(),
        ))));
        tools
            .iter()
            .map(|tool| (tool.name().to_owned(), tool.input_schema().clone()))
            .collect()
    }

    #[test]
    fn every_offered_schema_compiles() {
        for (name, schema) in offered_schemas() {
            if let Err(err) = crate::registry::ArgumentSchema::compile(&name, &schema) {
                panic!("{name}: {err}");
            }
        }
    }

    #[test]
    fn every_offered_schema_has_the_shape_providers_accept() {
        for (name, schema) in offered_schemas() {
            crate::testing::assert_provider_shape(&name, &schema);
        }
    }

    #[test]
    fn derived_schemas_keep_what_the_tools_promised() {
        let schemas: std::collections::BTreeMap<String, serde_json::Value> =
            offered_schemas().into_iter().collect();
        let at = |tool: &str, pointer: &str| {
            schemas[tool]
                .pointer(pointer)
                .cloned()
                .unwrap_or_else(|| panic!("{tool}{pointer} missing: {}", schemas[tool]))
        };
        let expected = [
            ("read_file", "/required", json!(["path"])),
            ("read_file", "/properties/offset/type", json!("integer")),
            ("read_file", "/properties/offset/minimum", json!(1)),
            ("read_file", "/properties/limit/minimum", json!(1)),
            ("read_file", "/properties/byte_offset/minimum", json!(0)),
            ("write_file", "/required", json!(["path", "content"])),
            (
                "edit_file",
                "/required",
                json!(["path", "old_string", "new_string"]),
            ),
            (
                "edit_file",
                "/properties/replace_all/type",
                json!("boolean"),
            ),
            ("glob", "/required", json!(["pattern"])),
            ("glob", "/properties/path/type", json!("string")),
            ("grep", "/required", json!(["pattern"])),
            (
                "grep",
                "/properties/output_mode/enum",
                json!(["files_with_matches", "content", "count"]),
            ),
            ("bash", "/required", json!(["command"])),
            ("bash", "/properties/timeout_secs/minimum", json!(1)),
            (
                "bash",
                "/properties/run_in_background/type",
                json!("boolean"),
            ),
            ("task_output", "/required", json!(["id"])),
            ("task_list", "/properties", json!({})),
            ("task_kill", "/required", json!(["id"])),
            ("web_fetch", "/required", json!(["url"])),
            ("web_fetch", "/properties/max_chars/maximum", json!(100000)),
            ("web_fetch", "/properties/start_index/minimum", json!(0)),
            ("remember", "/required", json!(["note"])),
            ("load_skill", "/required", json!(["name"])),
            ("update_plan", "/required", json!(["plan"])),
        ];
        for (tool, pointer, value) in expected {
            assert_eq!(at(tool, pointer), value, "{tool}{pointer}");
        }
        // Every property has a description.
        for (name, schema) in &schemas {
            for (prop, value) in schema["properties"].as_object().into_iter().flatten() {
                assert!(value["description"].is_string(), "{name}.{prop}: {value}");
            }
        }
    }

    #[test]
    fn schemas_are_the_same_bytes_every_time() {
        let first: Vec<String> = offered_schemas()
            .iter()
            .map(|(_, s)| s.to_string())
            .collect();
        let again: Vec<String> = offered_schemas()
            .iter()
            .map(|(_, s)| s.to_string())
            .collect();
        assert_eq!(first, again);
    }

    #[test]
    fn builtin_flags() {
        let registry = builtin_registry();
        let read_only = registry.read_only_subset();
        let read_only: Vec<&str> = read_only.names().collect();
        assert_eq!(
            read_only,
            [
                "read_file",
                "glob",
                "grep",
                "task_output",
                "task_list",
                "web_fetch",
                "update_plan"
            ]
        );
        let system = registry.filtered::<&str>(&[]);
        let system: Vec<&str> = system.names().collect();
        assert_eq!(
            system,
            ["task_output", "task_list", "task_kill", "update_plan"]
        );
        let category = |name: &str| registry.get(name).unwrap().category();
        assert_eq!(category("read_file"), ToolCategory::Read);
        assert_eq!(category("write_file"), ToolCategory::Write);
        assert_eq!(category("edit_file"), ToolCategory::Write);
        assert_eq!(category("bash"), ToolCategory::Execute);
        assert_eq!(category("task_kill"), ToolCategory::Execute);
    }

    #[test]
    fn permission_subjects() {
        let registry = builtin_registry();
        let subject = |name: &str, args: serde_json::Value| {
            registry.get(name).unwrap().permission_subject(&args)
        };
        assert_eq!(
            subject("read_file", serde_json::json!({"path": "a"})),
            PermissionSubject::Path {
                path: "a".into(),
                access: Access::Read
            }
        );
        assert_eq!(
            subject("edit_file", serde_json::json!({"path": "a"})),
            PermissionSubject::Path {
                path: "a".into(),
                access: Access::Write
            }
        );
        assert_eq!(
            subject("grep", serde_json::json!({"pattern": "x"})),
            PermissionSubject::Path {
                path: ".".into(),
                access: Access::Read
            }
        );
        assert_eq!(
            subject(
                "web_fetch",
                serde_json::json!({"url": "https://Docs.rs/x?y#z"})
            ),
            PermissionSubject::Host {
                host: "docs.rs".into()
            }
        );
        // A URL the tool refuses on its own touches no host.
        assert_eq!(
            subject(
                "web_fetch",
                serde_json::json!({"url": "file:///etc/passwd"})
            ),
            PermissionSubject::None
        );
        assert_eq!(
            subject("bash", serde_json::json!({"command": "ls"})),
            PermissionSubject::Command {
                command: "ls".into()
            }
        );
    }
}
