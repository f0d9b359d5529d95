//! Declaring a built-in tool: what it is — its name, argument type, class and
//! target — and what it does with arguments already parsed into that type
//! ([`BuiltinTool`]). [`Builtin`] turns a declaration into a [`Tool`]: the
//! schema offered to the model is derived from the argument type once, and a
//! call's arguments are deserialised into it before the tool runs, so no tool
//! repeats the same boilerplate.

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{PermissionSubject, Tool, ToolCategory, ToolContext, ToolOutput, parse_args};

/// How a tool is treated before it runs: its permission category, whether
/// it is read-only (consecutive read-only calls run together and never wait
/// for a person) and whether it is a system tool (exempt from role
/// allowlists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolClass {
    /// Permission category.
    pub category: ToolCategory,
    /// No side effects.
    pub read_only: bool,
    /// Exempt from role allowlists.
    pub system: bool,
}

impl ToolClass {
    /// Reads, with no side effect.
    pub const READ: Self = Self {
        category: ToolCategory::Read,
        read_only: true,
        system: false,
    };
    /// Writes files.
    pub const WRITE: Self = Self {
        category: ToolCategory::Write,
        read_only: false,
        system: false,
    };
    /// Runs commands.
    pub const EXECUTE: Self = Self {
        category: ToolCategory::Execute,
        read_only: false,
        system: false,
    };

    /// The same class, for a system tool.
    pub const fn system(self) -> Self {
        Self {
            system: true,
            ..self
        }
    }
}

/// A built-in tool, declared.
pub trait BuiltinTool: Send + Sync + 'static {
    /// The arguments; the schema offered to the model is derived from them.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// Name offered to the model, `^[A-Za-z0-9_-]{1,64}$`.
    const NAME: &'static str;
    /// How it is treated before it runs.
    const CLASS: ToolClass;
    /// Description written for the model: what it can and cannot do, defaults.
    fn description(&self) -> &str;
    /// What a call touches, from its validated arguments.
    fn target(&self, _args: &Value) -> PermissionSubject {
        PermissionSubject::None
    }
    /// A timeout that replaces the default per-call timeout.
    fn timeout(&self, _args: &Value) -> Option<Duration> {
        None
    }
    /// Runs the call with its parsed arguments. Must honour `ctx.cancel`.
    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
}

/// A declared tool as the registry takes it, with its derived schema.
#[derive(Debug)]
pub struct Builtin<T> {
    tool: T,
    schema: Value,
}

impl<T: BuiltinTool> Builtin<T> {
    /// `tool`, with the schema of its arguments.
    pub fn new(tool: T) -> Self {
        Self {
            tool,
            schema: super::schema::of::<T::Args>(),
        }
    }

    /// The declared tool.
    pub fn tool(&self) -> &T {
        &self.tool
    }
}

impl<T: BuiltinTool> Tool for Builtin<T> {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        T::CLASS.read_only
    }

    fn category(&self) -> ToolCategory {
        T::CLASS.category
    }

    fn is_system(&self) -> bool {
        T::CLASS.system
    }

    fn permission_subject(&self, args: &Value) -> PermissionSubject {
        self.tool.target(args)
    }

    fn timeout(&self, args: &Value) -> Option<Duration> {
        self.tool.timeout(args)
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        match parse_args::<T::Args>(T::NAME, args) {
            Ok(args) => self.tool.run(args, ctx),
            Err(out) => Box::pin(std::future::ready(out)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::Deserialize;
    use serde_json::json;
    use troupe_paths::sandbox::PathSandbox;

    use super::*;

    /// A declared tool that echoes its parsed argument.
    struct Echo;

    /// Its arguments.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct EchoArgs {
        /// What to say back
        text: String,
    }

    impl BuiltinTool for Echo {
        type Args = EchoArgs;
        const NAME: &'static str = "echo";
        const CLASS: ToolClass = ToolClass::EXECUTE.system();

        fn description(&self) -> &str {
            "Says the text back."
        }

        fn target(&self, args: &Value) -> PermissionSubject {
            PermissionSubject::Command {
                command: args["text"].as_str().unwrap_or_default().into(),
            }
        }

        fn timeout(&self, _args: &Value) -> Option<Duration> {
            Some(Duration::from_secs(7))
        }

        fn run<'a>(&'a self, args: EchoArgs, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move { ToolOutput::ok(args.text) })
        }
    }

    fn context(root: &std::path::Path) -> ToolContext {
        ToolContext {
            call_id: "c1".into(),
            os_sandbox: Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
            sandbox: Arc::new(PathSandbox::new(root, &[], None).unwrap()),
            spill_dir: root.join("spill"),
            cancel: tokio_util::sync::CancellationToken::new(),
            child_env: Arc::new(Vec::new()),
            background: Arc::new(crate::background::BackgroundTasks::new()),
            outside_read_approved: false,
            reach: None,
        }
    }

    #[test]
    fn a_declaration_is_a_tool_with_its_derived_schema_and_class() {
        let tool = Builtin::new(Echo);
        assert_eq!(tool.name(), "echo");
        assert_eq!(tool.description(), "Says the text back.");
        crate::testing::assert_schema_matches::<EchoArgs>(tool.input_schema());
        assert!(!tool.read_only());
        assert_eq!(tool.category(), ToolCategory::Execute);
        assert!(tool.is_system());
        assert_eq!(
            tool.permission_subject(&json!({"text": "hi"})),
            PermissionSubject::Command {
                command: "hi".into()
            }
        );
        assert_eq!(
            tool.timeout(&json!({"text": "hi"})),
            Some(Duration::from_secs(7))
        );
    }

    #[tokio::test]
    async fn arguments_are_parsed_before_the_tool_runs_and_a_mismatch_is_an_error_result() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let tool = Builtin::new(Echo);
        let out = tool.execute(json!({"text": "hello"}), &ctx).await;
        assert_eq!(out, ToolOutput::ok("hello"));
        let out = tool.execute(json!({"text": 3}), &ctx).await;
        assert!(out.is_error);
        let crate::ToolOutputPart::Text { text } = &out.content[0] else {
            panic!("a text result: {out:?}");
        };
        assert!(text.starts_with("Invalid arguments for echo:"), "{text}");
    }
}
