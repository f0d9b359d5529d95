//! One measured multi-turn run for the per-turn benchmarks (SPEC §14: runtime
//! overhead per agent turn with one read-only tool call, durable write
//! included): the script, the run on the real actor tree with the real
//! Anthropic adapter and the session store, and the replays that split its wall
//! time into what the scripted server costs and what the product costs.
//!
//! The run's harness opens a sled store in a temporary data directory and the
//! agent writes the prompt, every message, pending tool results and the run
//! record to it, with an fsync before each model call and before each
//! `tool_finished` event, as in the product. With telemetry installed, the
//! run's spans go to the same store (through [`super::spans::StoreSwitch`]) and
//! their number is part of the sample, so a bench can tell a traced run from an
//! untraced one.
//!
//! Nothing here asserts a timing: the benches print the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_config::Limits;
use troupe_llm::{ChatRequest, anthropic};
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

use super::arrivals::ArrivalStamps;
use super::replay::{replay_provider, replay_raw};
use super::scripted_provider;
use super::spans::StoreSwitch;
use super::stats::millis;
use super::system::process_cpu_time;
use super::tools::NoopTool;
use crate::{Harness, RunOptions, WAIT};

/// Lines of each file `read_file` reads.
pub const FILE_LINES: usize = 10;

/// The read-only tool every turn calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// The built-in `read_file` of a small file.
    ReadFile,
    /// The bench-only `noop` tool (the runtime's cost without a real tool).
    Noop,
}

impl ToolKind {
    /// How reports name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::ReadFile => "read_file (10-line file)",
            Self::Noop => "noop (bench tool)",
        }
    }
}

/// `turns` model calls: `turns − 1` asking for one call of `kind` each (with
/// distinct arguments, so the repeated-call guard never stops the run), then
/// a text answer. Every request's arrival is stamped in `stamps`.
pub fn script(kind: ToolKind, turns: usize, stamps: &ArrivalStamps) -> Script {
    let mut script = Script::new();
    for i in 0..turns.saturating_sub(1) {
        let response = match kind {
            ToolKind::ReadFile => tool_call("read_file", json!({ "path": file_name(i) })),
            ToolKind::Noop => tool_call("noop", json!({ "n": i })),
        };
        script = script.then(stamps.turn(response));
    }
    script.then(stamps.turn(text("All files read; nothing else to do.")))
}

/// The project file read in turn `i`.
pub fn file_name(i: usize) -> String {
    format!("src/file_{i:03}.txt")
}

/// Limits that only the script ends: turns, tokens and tool calls are not the
/// subject here.
pub fn generous_limits(turns: usize) -> Limits {
    let turns = u32::try_from(turns).unwrap_or(u32::MAX);
    Limits {
        max_turns: turns.saturating_add(1),
        budget_tokens: u64::MAX,
        max_tool_calls: turns.saturating_add(1),
        ..Limits::default()
    }
}

/// One measured run, in totals.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Model calls of the run.
    pub turns: usize,
    /// Submit to `run_finished`.
    pub wall: Duration,
    /// CPU time the whole process used from submit to `run_finished` (the
    /// runtime, the in-process scripted server, sled's threads and, with
    /// telemetry on, the exporter).
    pub cpu: Duration,
    /// The recorded requests replayed over one bare HTTP connection.
    pub server: Duration,
    /// The same conversation prefixes replayed through the real adapter.
    pub model: Duration,
    /// Request arrival to the next request's arrival, at the server.
    pub turn_times: Vec<Duration>,
    /// What building the last request costs.
    pub last_request: RequestCost,
    /// Span records the store holds for the run (0 without telemetry).
    pub spans_stored: usize,
}

impl Sample {
    /// Wall time per model call, in ms.
    pub fn gross_ms(&self) -> f64 {
        per_turn(self.wall, self.turns)
    }

    /// Bare-HTTP replay per model call, in ms.
    pub fn server_ms(&self) -> f64 {
        per_turn(self.server, self.turns)
    }

    /// Process CPU time per model call, in ms.
    pub fn cpu_ms(&self) -> f64 {
        per_turn(self.cpu, self.turns)
    }

    /// Adapter replay per model call, in ms.
    pub fn model_ms(&self) -> f64 {
        per_turn(self.model, self.turns)
    }

    /// `gross − server` per model call, in ms: the figure compared with
    /// SPEC §14's ≤ 3 ms.
    pub fn overhead_ms(&self) -> f64 {
        self.gross_ms() - self.server_ms()
    }

    /// `gross − model` per model call, in ms: actors, executors, tools, event
    /// log, store writes and spans.
    pub fn loop_ms(&self) -> f64 {
        self.gross_ms() - self.model_ms()
    }
}

/// What building the last model request of a run costs.
#[derive(Debug, Clone)]
pub struct RequestCost {
    /// Messages in the request.
    pub messages: usize,
    /// Copying the history into the request.
    pub clone_history: Duration,
    /// Building the tool definitions.
    pub definitions: Duration,
    /// Encoding the body.
    pub body: Duration,
    /// Size of the encoded body.
    pub body_bytes: usize,
}

/// `total` per model call, in ms.
pub fn per_turn(total: Duration, turns: usize) -> f64 {
    millis(total) / turns.max(1) as f64
}

/// One run of `turns` model calls calling `kind`, in a fresh harness (scripted
/// server, project, data directory and store), then its two replays. When
/// `spans` is given, the run's spans are filed in this run's store.
pub async fn one_run(
    kind: ToolKind,
    turns: usize,
    spans: Option<&StoreSwitch>,
) -> Result<Sample, String> {
    let stamps = ArrivalStamps::new();
    let h = Harness::anthropic(script(kind, turns, &stamps)).await;
    if let Some(switch) = spans {
        switch.set(h.store.clone());
    }
    std::fs::create_dir_all(h.root().join("src")).map_err(|e| e.to_string())?;
    for i in 0..turns {
        let body: String = (0..FILE_LINES)
            .map(|line| format!("line {line} of file {i}: some ordinary text\n"))
            .collect();
        std::fs::write(h.root().join(file_name(i)), body).map_err(|e| e.to_string())?;
    }
    let env = h.env_with(vec![Arc::new(NoopTool::new())]);
    let mut options = RunOptions::bypass(env.clone());
    options.limits = generous_limits(turns);

    let cpu_before = process_cpu_time().map_err(|e| format!("getrusage: {e}"))?;
    let started = Instant::now();
    let mut handle = h.submit("Read the files one by one.", options).await;
    let status = loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .map_err(|_| "no event in time".to_string())?
            .ok_or("event stream closed before run_finished")?;
        if let EventKind::RunFinished { status, .. } = event.kind
            && event.agent_path == "main"
        {
            break status;
        }
    };
    let wall = started.elapsed();
    let cpu = process_cpu_time()
        .map_err(|e| format!("getrusage: {e}"))?
        .saturating_sub(cpu_before);
    if status != RunStatus::Finished {
        return Err(format!("run ended {status:?}"));
    }
    let requests = h.server.requests();
    if requests.len() != turns || !h.server.violations().is_empty() {
        return Err(format!(
            "{} requests for {turns} turns; violations: {:?}",
            requests.len(),
            h.server.violations()
        ));
    }
    let turn_times = stamps.times().windows(2).map(|w| w[1] - w[0]).collect();
    let history = h.history(&handle.session_id).await;
    if let Some(switch) = spans {
        // Spans are written in the background; count them once written.
        switch.sync();
    }
    let spans_stored = h
        .store
        .spans(&handle.run_id)
        .map_err(|e| format!("spans of the run: {e}"))?
        .len();

    let prefix = &history[..history.len().saturating_sub(1)];
    let clock = Instant::now();
    let messages = prefix.to_vec();
    let clone_history = clock.elapsed();
    let clock = Instant::now();
    let tools = env.registry().definitions();
    let definitions = clock.elapsed();
    let request = ChatRequest {
        system: env.system().clone(),
        messages,
        tools,
        session_id: None,
    };
    let clock = Instant::now();
    let encoded =
        anthropic::request_body(&h.resolved_provider(), &request).map_err(|e| e.to_string())?;
    let last_request = RequestCost {
        messages: request.messages.len(),
        clone_history,
        definitions,
        body: clock.elapsed(),
        body_bytes: encoded.len(),
    };

    let raw_server = ScriptedServer::start(script(kind, turns, &ArrivalStamps::new()))
        .await
        .map_err(|e| e.to_string())?;
    let server: Duration = replay_raw(raw_server.addr(), &requests)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .sum();

    let adapter_server = ScriptedServer::start(script(kind, turns, &ArrivalStamps::new()))
        .await
        .map_err(|e| e.to_string())?;
    let provider = scripted_provider(&adapter_server.anthropic_base_url())?;
    let model: Duration = replay_provider(
        provider.as_ref(),
        env.system(),
        &env.registry().definitions(),
        &history,
    )
    .await
    .map_err(|e| e.to_string())?
    .into_iter()
    .sum();

    h.runtime.clone().shutdown().await;
    Ok(Sample {
        turns,
        wall,
        cpu,
        server,
        model,
        turn_times,
        last_request,
        spans_stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_turn_figures_split_the_wall_time() {
        let sample = Sample {
            turns: 4,
            wall: Duration::from_millis(8),
            cpu: Duration::from_millis(6),
            server: Duration::from_millis(2),
            model: Duration::from_millis(4),
            turn_times: Vec::new(),
            last_request: RequestCost {
                messages: 0,
                clone_history: Duration::ZERO,
                definitions: Duration::ZERO,
                body: Duration::ZERO,
                body_bytes: 0,
            },
            spans_stored: 0,
        };
        assert_eq!(sample.gross_ms(), 2.0);
        assert_eq!(sample.server_ms(), 0.5);
        assert_eq!(sample.overhead_ms(), 1.5);
        assert_eq!(sample.model_ms(), 1.0);
        assert_eq!(sample.loop_ms(), 1.0);
        assert_eq!(sample.cpu_ms(), 1.5);
        assert_eq!(
            per_turn(Duration::from_millis(3), 0),
            3.0,
            "no division by 0"
        );
    }

    #[test]
    fn scripts_call_the_tool_until_the_last_turn() {
        let stamps = ArrivalStamps::new();
        assert_eq!(script(ToolKind::Noop, 3, &stamps).len(), 3);
        assert_eq!(file_name(7), "src/file_007.txt");
        let limits = generous_limits(50);
        assert_eq!((limits.max_turns, limits.max_tool_calls), (51, 51));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_run_is_measured_and_replayed() {
        let sample = one_run(ToolKind::ReadFile, 3, None).await.unwrap();
        assert_eq!(sample.turns, 3);
        assert_eq!(sample.turn_times.len(), 2);
        assert!(sample.wall > Duration::ZERO && sample.server > Duration::ZERO);
        assert_eq!(sample.spans_stored, 0, "no telemetry installed");
        assert!(sample.last_request.messages >= 5);
    }
}
