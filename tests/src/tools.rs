//! Tools that exist only to test the runtime: they make concurrency, panics,
//! slowness and ordering observable. They implement the real `Tool` trait and
//! run in the real executors; nothing of the product is replaced.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use troupe_protocol::permission::ToolCategory;
use troupe_tools::{Tool, ToolContext, ToolOutput};

/// A shared log of what test tools did, in order.
#[derive(Debug, Default, Clone)]
pub struct ActivityLog(Arc<(Mutex<Vec<String>>, tokio::sync::Notify)>);

impl ActivityLog {
    /// Records one line.
    pub fn record(&self, line: impl Into<String>) {
        if let Ok(mut lines) = self.0.0.lock() {
            lines.push(line.into());
        }
        self.0.1.notify_waiters();
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .0
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default()
    }

    /// Waits until `line` is recorded (work that ends after the run did);
    /// false when it is not within `limit`.
    pub async fn wait_for(&self, line: &str, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let recorded = self.0.1.notified();
                if self.lines().iter().any(|l| l == line) {
                    return;
                }
                recorded.await;
            }
        })
        .await
        .is_ok()
    }
}

fn schema_with_label() -> Value {
    json!({
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "required": ["label"],
        "additionalProperties": false
    })
}

fn label(args: &Value) -> String {
    args["label"].as_str().unwrap_or_default().to_string()
}

/// Read-only: waits until `parties` calls have all started (so it only
/// completes when they run concurrently), then answers `met <label>`. Gives up
/// with an error after `patience`.
pub struct RendezvousTool {
    barrier: Arc<Barrier>,
    patience: Duration,
    log: ActivityLog,
    schema: Value,
}

impl RendezvousTool {
    /// A rendezvous of `parties` calls.
    pub fn new(parties: usize, patience: Duration, log: ActivityLog) -> Self {
        Self {
            barrier: Arc::new(Barrier::new(parties)),
            patience,
            log,
            schema: schema_with_label(),
        }
    }
}

impl Tool for RendezvousTool {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> &str {
        "Waits for the other rendezvous calls of the batch."
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
            let label = label(&args);
            self.log.record(format!("start {label}"));
            let met = tokio::time::timeout(self.patience, self.barrier.wait()).await;
            self.log.record(format!("end {label}"));
            match met {
                Ok(_) => ToolOutput::ok(format!("met {label}")),
                Err(_) => ToolOutput::error(format!("{label}: the others never started")),
            }
        })
    }
}

/// Panics with the given message (read-only or not).
pub struct PanicTool {
    read_only: bool,
    schema: Value,
}

impl PanicTool {
    /// A panicking tool.
    pub fn new(read_only: bool) -> Self {
        Self {
            read_only,
            schema: schema_with_label(),
        }
    }
}

impl Tool for PanicTool {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "Panics."
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn category(&self) -> ToolCategory {
        if self.read_only {
            ToolCategory::Read
        } else {
            ToolCategory::Execute
        }
    }
    fn execute<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let label = label(&args);
            panic!("boom {label}");
        })
    }
}

/// Records start and end in the log; read-only or a side effect. With `hold`,
/// it waits until cancelled and records that.
pub struct StepTool {
    name: String,
    read_only: bool,
    hold: bool,
    log: ActivityLog,
    schema: Value,
}

impl StepTool {
    /// A step tool named `name`.
    pub fn new(name: &str, read_only: bool, hold: bool, log: ActivityLog) -> Self {
        Self {
            name: name.to_string(),
            read_only,
            hold,
            log,
            schema: schema_with_label(),
        }
    }
}

impl Tool for StepTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "Records its start and end."
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn category(&self) -> ToolCategory {
        if self.read_only {
            ToolCategory::Read
        } else {
            ToolCategory::Execute
        }
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let label = label(&args);
            self.log.record(format!("start {} {label}", self.name));
            if self.hold {
                // Recorded however the hold ends: cancelled, or its future
                // dropped because its executor was stopped.
                let _released =
                    Released(self.log.clone(), format!("released {} {label}", self.name));
                ctx.cancel.cancelled().await;
                self.log.record(format!("cancelled {} {label}", self.name));
                return ToolOutput::error("stopped");
            }
            tokio::task::yield_now().await;
            self.log.record(format!("end {} {label}", self.name));
            ToolOutput::ok(format!("{} {label} done", self.name))
        })
    }
}

/// Records its line when dropped.
struct Released(ActivityLog, String);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.record(std::mem::take(&mut self.1));
    }
}

/// A model id that makes the harness's provider switch return a
/// [`PanickingProvider`]: a role naming it gives a sub-agent whose first
/// model call panics inside the agent actor.
pub const PANIC_MODEL: &str = "panic-model";

/// A provider whose `stream` panics: the agent actor calling it fails, which
/// is how a test makes a whole agent (not one of its tools) panic.
pub struct PanickingProvider;

impl troupe_llm::Provider for PanickingProvider {
    fn name(&self) -> &str {
        "panicking"
    }
    fn system(&self) -> &'static str {
        "anthropic"
    }
    fn model(&self) -> &str {
        PANIC_MODEL
    }
    fn stream(
        &self,
        _request: &troupe_llm::ChatRequest,
    ) -> futures::stream::BoxStream<
        'static,
        Result<troupe_llm::StreamEvent, troupe_llm::ProviderError>,
    > {
        panic!("the panicking provider was asked for a response");
    }
}

/// Read-only; asking it for its timeout panics. The agent asks while it
/// starts the call's executor, inside its own handler, so this makes the
/// agent actor itself fail (not the executor). It first waits (at most 10 s)
/// until `after` is in the log, so an earlier call of the same batch is
/// surely running when the agent fails.
pub struct AgentBombTool {
    log: ActivityLog,
    after: String,
    schema: Value,
}

impl AgentBombTool {
    /// The tool, going off once `after` is logged.
    pub fn new(log: ActivityLog, after: &str) -> Self {
        Self {
            log,
            after: after.to_string(),
            schema: schema_with_label(),
        }
    }
}

impl Tool for AgentBombTool {
    fn name(&self) -> &str {
        "agent_bomb"
    }
    fn description(&self) -> &str {
        "Makes the agent that starts it fail."
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
    fn timeout(&self, _args: &Value) -> Option<Duration> {
        // A synchronous wait inside the agent's handler; `block_in_place`
        // hands this worker's other tasks (the executor just spawned) to
        // another thread meanwhile. Needs the multi-thread runtime.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        tokio::task::block_in_place(|| {
            while !self.log.lines().contains(&self.after) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        panic!("the agent failed while starting agent_bomb");
    }
    fn execute<'a>(&'a self, _args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::ok("unreachable") })
    }
}
