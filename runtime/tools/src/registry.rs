//! The tool registry (SPEC §4): the tools of one agent in a stable definition
//! order, lookup by name, the subsets offered per role and mode, and argument
//! validation against each tool's JSON Schema before execution.
//!
//! A schema is compiled once: by the tool itself when it keeps its compiled
//! schema (`Tool::compiled_schema`: an MCP tool, made once per server
//! listing, joins every agent's registry with it), at registration, or, for
//! a tool whose schema
//! is derived from its argument type and checked by the unit tests (the
//! built-in tools, `remember`, `load_skill`, `agent`), at its first call, so
//! a run that calls few tools compiles few schemas and none before its first
//! request (the first compilation sets up the JSON Schema meta-schema, about
//! 1.5 ms). Clones share what was compiled. Validation errors are written for
//! the model (which field, what was expected, the required fields), never
//! panics. The registry does not execute tools and makes no permission
//! decisions; MCP tools are registered here like built-in ones.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::Tool;
use troupe_protocol::model::ToolDefinition;

/// SPEC §4 (provider constraint): tool names match `^[A-Za-z0-9_-]{1,64}$`.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// At most this many schema violations are listed in one error.
const MAX_LISTED_VIOLATIONS: usize = 5;

/// Characters of unparseable arguments quoted back to the model.
const BAD_JSON_EXCERPT_CHARS: usize = 120;

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A tool of that name is already registered.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The name does not match `^[A-Za-z0-9_-]{{1,64}}$`.
    #[error("invalid tool name `{0}`: use 1 to 64 of A-Z a-z 0-9 _ -")]
    InvalidName(String),
    /// The input schema is not a valid object schema.
    #[error("tool `{name}` has an invalid input schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// One registered tool with its compiled schema.
#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    schema: ArgumentSchema,
}

/// The object schema of a tool's arguments, compiled once (at once, or at
/// the first call): validates raw arguments and words every failure for the
/// model. Cheap to clone; clones share the compiled validator.
#[derive(Clone)]
pub struct ArgumentSchema {
    /// The schema as given.
    schema: Arc<Value>,
    /// The validator, or why the schema does not compile; set by
    /// [`ArgumentSchema::compile`] or at the first validation.
    validator: Arc<OnceLock<Result<jsonschema::Validator, String>>>,
    /// `{path: string, offset?: integer}`: the expected shape, for messages.
    signature: Arc<str>,
}

impl std::fmt::Debug for ArgumentSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ArgumentSchema")
            .field(&self.signature)
            .finish()
    }
}

impl ArgumentSchema {
    /// Compiles the schema of tool `name`; it must be an object schema.
    pub fn compile(name: &str, schema: &Value) -> Result<Self, RegistryError> {
        let deferred = Self::deferred(name, schema)?;
        if let Err(message) = deferred.validator() {
            return Err(RegistryError::InvalidSchema {
                name: name.to_string(),
                message: message.to_string(),
            });
        }
        Ok(deferred)
    }

    /// The schema of tool `name`, which must be an object schema, compiled
    /// at its first validation: for schemas derived from a type and checked
    /// by tests, never for a schema someone else wrote (an MCP server's).
    pub fn deferred(name: &str, schema: &Value) -> Result<Self, RegistryError> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistryError::InvalidSchema {
                name: name.to_string(),
                message: "the schema must have \"type\": \"object\"".into(),
            });
        }
        Ok(Self {
            schema: Arc::new(schema.clone()),
            validator: Arc::new(OnceLock::new()),
            signature: signature_of(schema).into(),
        })
    }

    /// The compiled validator, compiling it the first time.
    fn validator(&self) -> Result<&jsonschema::Validator, &str> {
        self.validator
            .get_or_init(|| jsonschema::validator_for(&self.schema).map_err(|err| err.to_string()))
            .as_ref()
            .map_err(String::as_str)
    }

    /// Parses and validates the raw arguments of a call to tool `name`. The
    /// error is written for the model: unparseable JSON (with an excerpt), or
    /// the schema violations with the expected shape. Blank input is `{}`.
    pub fn validate(&self, name: &str, raw_input: &str) -> Result<Value, String> {
        let trimmed = raw_input.trim();
        let source = if trimmed.is_empty() { "{}" } else { trimmed };
        let value: Value = serde_json::from_str(source).map_err(|err| {
            format!(
                "Arguments for {name} are not valid JSON ({err}): {}\nExpected a JSON object: {}",
                excerpt(raw_input),
                self.signature
            )
        })?;
        let validator = self.validator().map_err(|err| {
            tracing::error!(tool = name, error = err, "a tool's schema does not compile");
            format!("The schema of {name} does not compile ({err}); the call was not made.")
        })?;
        let violations: Vec<String> = validator
            .iter_errors(&value)
            .map(|err| {
                let at = err.instance_path().to_string();
                if at.is_empty() {
                    format!("- {err}")
                } else {
                    format!("- `{}`: {err}", at.trim_start_matches('/'))
                }
            })
            .collect();
        if violations.is_empty() {
            return Ok(value);
        }
        let shown = violations.len().min(MAX_LISTED_VIOLATIONS);
        let mut message = format!("Invalid arguments for {name}:\n");
        message.push_str(&violations[..shown].join("\n"));
        if violations.len() > shown {
            message.push_str(&format!("\n- … and {} more", violations.len() - shown));
        }
        message.push_str(&format!("\nExpected: {}", self.signature));
        Err(message)
    }
}

/// The tools of one agent, in insertion order. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool at the end of the definition order, compiling its schema.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.add(tool, ArgumentSchema::compile)
    }

    /// Adds a tool whose schema is derived from its argument type and
    /// checked by the unit tests, compiling the schema at its first call
    /// (see the module docs).
    pub fn register_derived(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.add(tool, ArgumentSchema::deferred)
    }

    fn add(
        &mut self,
        tool: Arc<dyn Tool>,
        schema_of: fn(&str, &Value) -> Result<ArgumentSchema, RegistryError>,
    ) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        if !valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.index.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let schema = match tool.compiled_schema() {
            Some(compiled) => compiled.clone(),
            None => schema_of(&name, tool.input_schema())?,
        };
        self.index.insert(name, self.entries.len());
        self.entries.push(Entry { tool, schema });
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.index.get(name).map(|&i| &self.entries[i].tool)
    }

    /// True when a tool called `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tool names in definition order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.tool.name())
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when `name` is registered and read-only (unknown tools are not).
    pub fn is_read_only(&self, name: &str) -> bool {
        self.get(name).is_some_and(|tool| tool.read_only())
    }

    /// Definitions as offered to the model, in the stable definition order
    /// (the request prefix depends on it: SPEC §14).
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.entries
            .iter()
            .map(|e| ToolDefinition {
                name: e.tool.name().to_string(),
                description: e.tool.description().to_string(),
                input_schema: e.tool.input_schema().clone(),
            })
            .collect()
    }

    /// A registry with the tools `allowlist` names plus every system tool
    /// (system tools are exempt from role allowlists), in the original order.
    /// An entry ending in `*` allows every name starting with what precedes it
    /// (`mcp__github__*`).
    pub fn filtered<S: AsRef<str>>(&self, allowlist: &[S]) -> ToolRegistry {
        self.subset(|tool| tool.is_system() || Self::name_allowed(allowlist, tool.name()))
    }

    /// True when `allowlist` allows `name`: an entry equal to it, or an entry
    /// ending in `*` whose prefix it starts with.
    pub fn name_allowed<S: AsRef<str>>(allowlist: &[S], name: &str) -> bool {
        allowlist
            .iter()
            .any(|entry| name_matches(entry.as_ref(), name))
    }

    /// The read-only tools only (plan mode, SPEC §5).
    pub fn read_only_subset(&self) -> ToolRegistry {
        self.subset(|tool| tool.read_only())
    }

    fn subset(&self, keep: impl Fn(&dyn Tool) -> bool) -> ToolRegistry {
        let mut out = ToolRegistry::new();
        for entry in &self.entries {
            if keep(entry.tool.as_ref()) {
                out.index
                    .insert(entry.tool.name().to_string(), out.entries.len());
                out.entries.push(entry.clone());
            }
        }
        out
    }

    /// Parses and validates the raw arguments of a call to `name`. The error is
    /// written for the model: unknown tool, unparseable JSON (with an excerpt),
    /// or the schema violations with the expected shape.
    pub fn validate(&self, name: &str, raw_input: &str) -> Result<Value, String> {
        let Some(&i) = self.index.get(name) else {
            let available: Vec<&str> = self.names().collect();
            return Err(format!(
                "Unknown tool `{name}`. Available tools: {}.",
                available.join(", ")
            ));
        };
        self.entries[i].schema.validate(name, raw_input)
    }
}

/// True for names matching `^[A-Za-z0-9_-]{1,64}$`.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn name_matches(entry: &str, name: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => entry == name,
    }
}

/// A short quote of unparseable input, cut at a char boundary.
fn excerpt(raw: &str) -> String {
    let mut chars = raw.chars();
    let head: String = chars.by_ref().take(BAD_JSON_EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("`{head}…`")
    } else {
        format!("`{head}`")
    }
}

/// Renders an object schema as `{a: string, b?: integer, c?: "x"|"y"}`:
/// required fields first (and unmarked), optional ones with `?`.
pub(crate) fn signature_of(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "{}".into();
    };
    let mut fields: Vec<(bool, String)> = props
        .iter()
        .map(|(name, prop)| {
            let is_required = required.contains(&name.as_str());
            let mark = if is_required { "" } else { "?" };
            (!is_required, format!("{name}{mark}: {}", type_of(prop)))
        })
        .collect();
    fields.sort_by_key(|(optional, _)| *optional);
    let fields: Vec<String> = fields.into_iter().map(|(_, f)| f).collect();
    let mut out = format!("{{{}}}", fields.join(", "));
    if !required.is_empty() {
        out.push_str(&format!(" (required: {})", required.join(", ")));
    }
    out
}

fn type_of(prop: &Value) -> String {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    match prop.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ToolContext, ToolOutput};
    use futures::future::BoxFuture;
    use serde_json::json;
    use troupe_protocol::permission::ToolCategory;

    struct Fake {
        name: &'static str,
        schema: Value,
        read_only: bool,
        system: bool,
    }

    impl Tool for Fake {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> &str {
            "fake"
        }
        fn input_schema(&self) -> &Value {
            &self.schema
        }
        fn read_only(&self) -> bool {
            self.read_only
        }
        fn category(&self) -> ToolCategory {
            ToolCategory::Read
        }
        fn is_system(&self) -> bool {
            self.system
        }
        fn execute<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async { ToolOutput::ok("") })
        }
    }

    fn fake(name: &'static str, read_only: bool, system: bool) -> Arc<dyn Tool> {
        Arc::new(Fake {
            name,
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "count": {"type": "integer", "minimum": 1},
                    "mode": {"enum": ["a", "b"]}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            read_only,
            system,
        })
    }

    fn registry() -> ToolRegistry {
        let mut r = ToolRegistry::new();
        r.register(fake("zeta", true, false)).unwrap();
        r.register(fake("alpha", false, false)).unwrap();
        r.register(fake("sys", false, true)).unwrap();
        r.register(fake("mcp__gh__issues", true, false)).unwrap();
        r
    }

    #[test]
    fn insertion_order_and_duplicates() {
        let mut r = registry();
        assert_eq!(
            r.names().collect::<Vec<_>>(),
            ["zeta", "alpha", "sys", "mcp__gh__issues"]
        );
        let defs: Vec<String> = r.definitions().into_iter().map(|d| d.name).collect();
        assert_eq!(defs, ["zeta", "alpha", "sys", "mcp__gh__issues"]);
        assert!(matches!(
            r.register(fake("alpha", true, false)),
            Err(RegistryError::Duplicate(n)) if n == "alpha"
        ));
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn bad_names_and_schemas_are_rejected() {
        let mut r = ToolRegistry::new();
        assert!(matches!(
            r.register(fake("has space", true, false)),
            Err(RegistryError::InvalidName(_))
        ));
        let not_object = Arc::new(Fake {
            name: "x",
            schema: json!({"type": "string"}),
            read_only: true,
            system: false,
        });
        assert!(matches!(
            r.register(not_object),
            Err(RegistryError::InvalidSchema { .. })
        ));
        let broken = Arc::new(Fake {
            name: "y",
            schema: json!({"type": "object", "properties": {"a": {"type": 5}}}),
            read_only: true,
            system: false,
        });
        assert!(matches!(
            r.register(broken),
            Err(RegistryError::InvalidSchema { .. })
        ));
        // A derived schema is compiled at the first call: one that does not
        // compile is registered, and its calls are refused with the reason.
        let broken_derived = Arc::new(Fake {
            name: "z",
            schema: json!({"type": "object", "properties": {"a": {"type": 5}}}),
            read_only: true,
            system: false,
        });
        r.register_derived(broken_derived).unwrap();
        let refused = r.validate("z", "{}").unwrap_err();
        assert!(
            refused.starts_with("The schema of z does not compile"),
            "{refused}"
        );
        let not_object = Arc::new(Fake {
            name: "w",
            schema: json!({"type": "string"}),
            read_only: true,
            system: false,
        });
        assert!(matches!(
            r.register_derived(not_object),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert!(valid_tool_name(&"a".repeat(64)));
        assert!(!valid_tool_name(&"a".repeat(65)));
        assert!(!valid_tool_name(""));
    }

    #[test]
    fn subsets_keep_order_and_system_tools() {
        let r = registry();
        let f = r.filtered(&["alpha", "zeta"]);
        assert_eq!(f.names().collect::<Vec<_>>(), ["zeta", "alpha", "sys"]);
        let f = r.filtered(&["mcp__gh__*"]);
        assert_eq!(f.names().collect::<Vec<_>>(), ["sys", "mcp__gh__issues"]);
        let f = r.filtered::<&str>(&[]);
        assert_eq!(f.names().collect::<Vec<_>>(), ["sys"]);
        let ro = r.read_only_subset();
        assert_eq!(ro.names().collect::<Vec<_>>(), ["zeta", "mcp__gh__issues"]);
        assert!(ro.get("alpha").is_none());
        assert!(r.is_read_only("zeta"));
        assert!(!r.is_read_only("alpha"));
        assert!(!r.is_read_only("nope"));
    }

    #[test]
    fn validation_accepts_good_input_and_blank_as_empty_object() {
        let r = registry();
        assert_eq!(
            r.validate("zeta", r#"{"path":"a","count":2}"#).unwrap(),
            json!({"path":"a","count":2})
        );
        let err = r.validate("zeta", "  ").unwrap_err();
        assert!(err.contains("\"path\" is a required property"), "{err}");
    }

    #[test]
    fn validation_errors_name_the_problem() {
        let r = registry();
        let err = r.validate("nope", "{}").unwrap_err();
        assert!(
            err.starts_with("Unknown tool `nope`. Available tools: zeta, alpha"),
            "{err}"
        );

        let err = r
            .validate("zeta", r#"{"path": "a", "count": }"#)
            .unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        assert!(err.contains(r#"`{"path": "a", "count": }`"#), "{err}");

        let err = r
            .validate("zeta", r#"{"path": 5, "count": "x", "extra": 1}"#)
            .unwrap_err();
        assert!(err.contains("`path`: 5 is not of type \"string\""), "{err}");
        assert!(
            err.contains("`count`: \"x\" is not of type \"integer\""),
            "{err}"
        );
        assert!(err.contains("extra"), "{err}");
        assert!(
            err.contains(
                r#"Expected: {path: string, count?: integer, mode?: "a"|"b"} (required: path)"#
            ),
            "{err}"
        );

        let err = r.validate("zeta", r#"[1,2]"#).unwrap_err();
        assert!(err.contains("is not of type \"object\""), "{err}");

        let long = format!("{{\"path\": \"{}", "é".repeat(500));
        let err = r.validate("zeta", &long).unwrap_err();
        assert!(err.contains('…'), "{err}");
    }
}
