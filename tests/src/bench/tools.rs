//! Read-only tools that exist only for the benchmarks: one that does nothing
//! (to separate the runtime's cost from a real tool's) and one that sleeps for
//! a given time (to show that a read-only batch runs concurrently). They
//! implement the real `Tool` trait and run in the real executors.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::permission::ToolCategory;
use troupe_tools::{Tool, ToolContext, ToolOutput};

/// Longest sleep [`SleepTool`] accepts, in milliseconds; longer would outlast
/// the default per-call timeout of SPEC §3 (30 s).
pub const MAX_SLEEP_MILLIS: u64 = 20_000;

/// Read-only and trivial: answers `ok <n>` at once. Each call carries a
/// different `n` so the repeated-call guard of SPEC §3 never stops a run.
pub struct NoopTool {
    schema: Value,
}

impl NoopTool {
    /// The tool.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 0}},
                "required": ["n"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for NoopTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for NoopTool {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "Does nothing and answers ok."
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
    fn execute<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match args["n"].as_u64() {
                Some(n) => ToolOutput::ok(format!("ok {n}")),
                None => ToolOutput::error("noop needs a non-negative integer n"),
            }
        })
    }
}

/// Read-only: sleeps `millis` milliseconds (at most [`MAX_SLEEP_MILLIS`]),
/// then answers `slept <label>`; stops early when the call is cancelled.
pub struct SleepTool {
    schema: Value,
}

impl SleepTool {
    /// The tool.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "millis": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MILLIS},
                    "label": {"type": "string"}
                },
                "required": ["millis", "label"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for SleepTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for SleepTool {
    fn name(&self) -> &str {
        "sleep"
    }
    fn description(&self) -> &str {
        "Waits for the given number of milliseconds."
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
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let label = args["label"].as_str().unwrap_or_default().to_string();
            let millis = match args["millis"].as_u64() {
                Some(millis) if millis <= MAX_SLEEP_MILLIS => millis,
                _ => {
                    return ToolOutput::error(format!(
                        "sleep needs millis between 0 and {MAX_SLEEP_MILLIS}"
                    ));
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(millis)) => {
                    ToolOutput::ok(format!("slept {label}"))
                }
                _ = ctx.cancel.cancelled() => ToolOutput::error(format!("{label} cancelled")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use troupe_paths::sandbox::PathSandbox;
    use troupe_tools::ToolRegistry;
    use troupe_tools::background::BackgroundTasks;
    use troupe_tools::builtin_registry;

    use super::*;

    fn context(dir: &std::path::Path) -> ToolContext {
        ToolContext {
            call_id: "call-1".into(),
            os_sandbox: std::sync::Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
            sandbox: Arc::new(PathSandbox::new(dir, &[], None).unwrap()),
            spill_dir: dir.join("spill"),
            cancel: tokio_util::sync::CancellationToken::new(),
            child_env: Arc::new(Vec::new()),
            background: Arc::new(BackgroundTasks::new()),
            outside_read_approved: false,
            reach: None,
        }
    }

    fn registry() -> ToolRegistry {
        let mut registry = builtin_registry();
        registry.register(Arc::new(NoopTool::new())).unwrap();
        registry.register(Arc::new(SleepTool::new())).unwrap();
        registry
    }

    #[test]
    fn both_register_as_read_only_with_valid_schemas() {
        let registry = registry();
        assert!(registry.is_read_only("noop"));
        assert!(registry.is_read_only("sleep"));
        assert!(registry.validate("noop", r#"{"n": 3}"#).is_ok());
        assert!(registry.validate("noop", r#"{"n": -1}"#).is_err());
        assert!(
            registry
                .validate("sleep", r#"{"millis": 5, "label": "a"}"#)
                .is_ok()
        );
        let too_long = format!(r#"{{"millis": {}, "label": "a"}}"#, MAX_SLEEP_MILLIS + 1);
        assert!(registry.validate("sleep", &too_long).is_err());
    }

    #[tokio::test]
    async fn noop_answers_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let output = NoopTool::new().execute(json!({"n": 7}), &ctx).await;
        assert_eq!(output, ToolOutput::ok("ok 7"));
        let bad = NoopTool::new().execute(json!({"n": "x"}), &ctx).await;
        assert!(bad.is_error);
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_waits_at_least_the_given_time() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let started = tokio::time::Instant::now();
        let output = SleepTool::new()
            .execute(json!({"millis": 250, "label": "a"}), &ctx)
            .await;
        assert_eq!(output, ToolOutput::ok("slept a"));
        assert!(started.elapsed() >= Duration::from_millis(250));
    }

    #[tokio::test]
    async fn sleep_stops_when_cancelled_and_refuses_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        ctx.cancel.cancel();
        let output = SleepTool::new()
            .execute(json!({"millis": MAX_SLEEP_MILLIS, "label": "b"}), &ctx)
            .await;
        assert_eq!(output, ToolOutput::error("b cancelled"));
        let bad = SleepTool::new()
            .execute(json!({"millis": MAX_SLEEP_MILLIS + 1, "label": "c"}), &ctx)
            .await;
        assert!(bad.is_error);
    }
}
