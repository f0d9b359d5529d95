//! Benchmark: what tracing adds to the runtime overhead of an agent turn
//! (SPEC §11, §14; target: at most 10% more than with telemetry off).
//!
//! The run is `agent_turn`'s (`bench::turns::one_run`): `TURNS` model calls
//! (default 50) each asking for one `read_file` call, then a text answer, on
//! the real actor tree with the real Anthropic adapter and a sled store in a
//! temporary data directory (durable writes and fsyncs included). It is
//! measured in two set-ups:
//!
//! - `off`: no `tracing` subscriber in the process (telemetry disabled);
//! - `on`: the product's pipeline installed as the process's global
//!   subscriber with `Telemetry::builder(..).local_sink(..).install()`, the
//!   settings read from the standard variables as the CLI reads them
//!   (`OTEL_EXPORTER_OTLP_ENDPOINT` set): every span of the run is kept in the
//!   local span store (the run's own sled store, as `troupe` keeps spans in
//!   its session store) and exported over OTLP http/protobuf to a loopback
//!   collector (`bench::collector`, an axum receiver answering 200 to
//!   `POST /v1/traces`) that runs in this parent process.
//!
//! A global subscriber can be installed once per process and never removed,
//! so each set-up runs in a child process (this binary, started with
//! `TROUPE_BENCH_TRACING_CHILD=off|on`), and the parent alternates them in
//! `ROUNDS` rounds (default 10) in ABBA order (off, on, on, off, …), each
//! child making 2 warm-up runs and then its share of the samples. Alternation
//! spreads the machine's changing load over both set-ups instead of charging
//! it to whichever ran second.
//!
//! Reported for each set-up, per turn: `gross` (wall / turns), `server`
//! (bare-HTTP replay), `overhead` = gross − server (the SPEC §14 figure),
//! `loop` = gross − adapter replay; then the ratio of the medians on / off,
//! what tracing adds per turn, the ratio of each round's pair of medians, the
//! spans stored per run, the exporter's counters and what the collector got.
//!
//! Environment: `TROUPE_BENCH_SAMPLES` (runs per set-up, default 60),
//! `TROUPE_BENCH_ROUNDS` (default 10), `TROUPE_BENCH_TURNS` (default 50).
//! Figures go to `docs/performance.md`, never into assertions.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use troupe_runtime::telemetry::{ExportStats, Telemetry, TelemetryGuard, TelemetrySettings};
use troupe_tests::bench::collector::OtlpCollector;
use troupe_tests::bench::spans::StoreSwitch;
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::turns::{ToolKind, one_run};
use troupe_tests::bench::{count_from_env, invoked_as_benchmark, run_on_tokio_workers};

/// Model calls per run unless `TROUPE_BENCH_TURNS` says otherwise.
const DEFAULT_TURNS: usize = 50;
/// Measured runs per set-up unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 60;
/// Alternations unless `TROUPE_BENCH_ROUNDS` says otherwise.
const DEFAULT_ROUNDS: usize = 10;
/// Runs of each child before it measures (connection pool, lazy statics,
/// compiled schemas, the exporter's first connection).
const WARMUP_RUNS: usize = 2;
/// Issue target: tracing adds at most 10% to the per-turn overhead.
const TARGET_RATIO: f64 = 1.10;
/// Variable that turns this binary into a measuring child, and its values.
const CHILD_VAR: &str = "TROUPE_BENCH_TRACING_CHILD";
/// Runs a child measures.
const CHILD_SAMPLES_VAR: &str = "TROUPE_BENCH_CHILD_SAMPLES";
/// Model calls per run, passed to the children.
const TURNS_VAR: &str = "TROUPE_BENCH_TURNS";
/// The standard variable naming the collector (SPEC §1.2).
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Telemetry variables the children must not inherit from this process: the
/// `on` child gets the endpoint alone and the default log filter (`warn`).
const UNINHERITED_VARS: [&str; 6] = [
    ENDPOINT_VAR,
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "TROUPE_LOG",
    "RUST_LOG",
];
/// Prefix of a child's line carrying one sample.
const SAMPLE_LINE: &str = "sample ";
/// Prefix of a child's line carrying the exporter's counters.
const EXPORT_LINE: &str = "export ";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    On,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            other => Err(format!("{CHILD_VAR} must be off or on, got {other:?}")),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Off => "telemetry off (no subscriber)",
            Self::On => "telemetry on (local span store + OTLP export to loopback)",
        }
    }
}

/// Picks one per-turn figure.
type Pick = dyn Fn(&Figures) -> f64;

/// Per-turn figures of one run, as a child reports them.
#[derive(Debug, Clone, Copy)]
struct Figures {
    gross: f64,
    server: f64,
    model: f64,
    spans: f64,
}

impl Figures {
    fn overhead(&self) -> f64 {
        self.gross - self.server
    }

    fn loop_time(&self) -> f64 {
        self.gross - self.model
    }

    fn to_line(self) -> String {
        let value = json!({
            "gross_ms": self.gross,
            "server_ms": self.server,
            "model_ms": self.model,
            "spans": self.spans,
        });
        format!("{SAMPLE_LINE}{value}")
    }

    fn from_json(value: &Value) -> Result<Self, String> {
        let field = |name: &str| {
            value[name]
                .as_f64()
                .ok_or_else(|| format!("sample line without {name}: {value}"))
        };
        Ok(Self {
            gross: field("gross_ms")?,
            server: field("server_ms")?,
            model: field("model_ms")?,
            spans: field("spans")?,
        })
    }
}

/// Installs the product's telemetry as the global subscriber, settings from
/// the process environment as `troupe` reads them, spans kept through
/// `switch`.
fn install(switch: Arc<StoreSwitch>) -> Result<TelemetryGuard, String> {
    let settings = TelemetrySettings::from_process_env().map_err(|e| e.to_string())?;
    if settings.export.is_none() {
        return Err(format!(
            "{ENDPOINT_VAR} is not set: no OTLP export to measure"
        ));
    }
    Telemetry::builder(&settings)
        .local_sink(switch)
        .build()
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| e.to_string())
}

/// Child mode: measure `samples` runs in one set-up and print them.
fn child(mode: Mode) -> Result<(), String> {
    let samples = count_from_env(CHILD_SAMPLES_VAR, 1)?;
    let turns = count_from_env(TURNS_VAR, DEFAULT_TURNS)?;
    let switch = Arc::new(StoreSwitch::new());
    let mut guard = match mode {
        Mode::Off => None,
        Mode::On => Some(install(switch.clone())?),
    };
    let spans = (mode == Mode::On).then(|| switch.clone());
    let figures = run_on_tokio_workers(async move {
        for _ in 0..WARMUP_RUNS {
            one_run(ToolKind::ReadFile, turns, spans.as_deref()).await?;
        }
        let mut figures = Vec::with_capacity(samples);
        for _ in 0..samples {
            let sample = one_run(ToolKind::ReadFile, turns, spans.as_deref()).await?;
            figures.push(Figures {
                gross: sample.gross_ms(),
                server: sample.server_ms(),
                model: sample.model_ms(),
                spans: sample.spans_stored as f64,
            });
        }
        Ok(figures)
    })?;
    for figure in figures {
        println!("{}", figure.to_line());
    }
    if let Some(guard) = guard.as_mut() {
        guard.shutdown().map_err(|e| e.to_string())?;
        let stats = guard.export_stats();
        let value = json!({
            "exported": stats.exported,
            "failed": stats.failed,
            "dropped": stats.dropped,
            "unfiled": switch.unfiled(),
        });
        println!("{EXPORT_LINE}{value}");
    }
    Ok(())
}

/// What one child measured.
struct ChildOutput {
    figures: Vec<Figures>,
    export: ExportStats,
    unfiled: u64,
}

fn run_child(
    mode: Mode,
    samples: usize,
    turns: usize,
    endpoint: &str,
) -> Result<ChildOutput, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    for var in UNINHERITED_VARS {
        command.env_remove(var);
    }
    if mode == Mode::On {
        command.env(ENDPOINT_VAR, endpoint);
    }
    let mut process = command
        .env(CHILD_VAR, mode.name())
        .env(CHILD_SAMPLES_VAR, samples.to_string())
        .env(TURNS_VAR, turns.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the {} child: {e}", mode.name()))?;
    let stdout = process.stdout.take().ok_or("child has no stdout")?;
    let mut output = ChildOutput {
        figures: Vec::with_capacity(samples),
        export: ExportStats::default(),
        unfiled: 0,
    };
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("{} child: {e}", mode.name()))?;
        let parse = |text: &str| -> Result<Value, String> {
            serde_json::from_str(text).map_err(|e| format!("child line {line:?}: {e}"))
        };
        if let Some(rest) = line.strip_prefix(SAMPLE_LINE) {
            output.figures.push(Figures::from_json(&parse(rest)?)?);
        } else if let Some(rest) = line.strip_prefix(EXPORT_LINE) {
            let value = parse(rest)?;
            let count = |name: &str| value[name].as_u64().unwrap_or(0);
            output.export = ExportStats {
                queued: 0,
                exported: count("exported"),
                failed: count("failed"),
                dropped: count("dropped"),
            };
            output.unfiled = count("unfiled");
        } else {
            println!("  [{} child] {line}", mode.name());
        }
    }
    let status = process.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("the {} child exited {status}", mode.name()));
    }
    if output.figures.len() != samples {
        return Err(format!(
            "the {} child reported {} samples of {samples}",
            mode.name(),
            output.figures.len()
        ));
    }
    // A comparison of two identical set-ups would be worthless: check that
    // spans were kept exactly when telemetry was on.
    let traced = output.figures.iter().filter(|f| f.spans > 0.0).count();
    match mode {
        Mode::Off if traced > 0 => Err(format!("{traced} untraced runs stored spans")),
        Mode::On if traced != samples => {
            Err(format!("{} traced runs stored no span", samples - traced))
        }
        _ => Ok(output),
    }
}

fn summary(values: &[f64]) -> Option<Summary> {
    Summary::of(values)
}

fn show(values: &[f64]) -> String {
    summary(values).map_or_else(|| "no samples".into(), |s| s.to_string())
}

fn median(values: &[f64]) -> f64 {
    summary(values).map_or(f64::NAN, |s| s.median)
}

fn report_mode(mode: Mode, figures: &[Figures]) {
    let column = |pick: &dyn Fn(&Figures) -> f64| -> String {
        show(&figures.iter().map(pick).collect::<Vec<_>>())
    };
    println!("\n== {} ==", mode.label());
    println!("  per turn, ms:");
    println!("    gross                   {}", column(&|f| f.gross));
    println!("    server (bare HTTP)      {}", column(&|f| f.server));
    println!("    overhead = gross−server {}", column(&Figures::overhead));
    println!(
        "    loop = gross−model      {}",
        column(&Figures::loop_time)
    );
    println!("  spans stored per run      {}", column(&|f| f.spans));
}

fn report_comparison(off: &[Figures], on: &[Figures], rounds: &[(Vec<Figures>, Vec<Figures>)]) {
    println!("\n== tracing on / off ==");
    let metrics: [(&str, &Pick); 3] = [
        ("overhead = gross−server", &Figures::overhead),
        ("gross", &|f| f.gross),
        ("loop = gross−model", &Figures::loop_time),
    ];
    for (name, pick) in metrics {
        let off_median = median(&off.iter().map(pick).collect::<Vec<_>>());
        let on_median = median(&on.iter().map(pick).collect::<Vec<_>>());
        println!(
            "  {name:<24} off {off_median:.3} ms, on {on_median:.3} ms: \
             ratio {:.3}, tracing adds {:.1} µs per turn",
            on_median / off_median,
            (on_median - off_median) * 1_000.0
        );
    }
    let paired: Vec<f64> = rounds
        .iter()
        .map(|(off, on)| {
            median(&on.iter().map(Figures::overhead).collect::<Vec<_>>())
                / median(&off.iter().map(Figures::overhead).collect::<Vec<_>>())
        })
        .collect();
    println!(
        "  overhead ratio of each round's medians  {}",
        show(&paired)
    );
    let ratio = median(&on.iter().map(Figures::overhead).collect::<Vec<_>>())
        / median(&off.iter().map(Figures::overhead).collect::<Vec<_>>());
    println!(
        "  target: ratio ≤ {TARGET_RATIO:.2} (tracing adds at most 10%): {}",
        if ratio <= TARGET_RATIO {
            "met"
        } else {
            "missed"
        }
    );
}

fn parent() -> Result<(), String> {
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    let rounds = count_from_env("TROUPE_BENCH_ROUNDS", DEFAULT_ROUNDS)?.min(samples);
    let turns = count_from_env(TURNS_VAR, DEFAULT_TURNS)?;
    let per_child = samples.div_ceil(rounds);
    println!(
        "tracing_turn: read_file turns, {turns} model calls per run; {rounds} rounds × \
         {per_child} runs per set-up (ABBA order), {WARMUP_RUNS} warm-up runs per child"
    );
    println!("{}", machine_line());

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    let collector = tokio
        .block_on(OtlpCollector::start())
        .map_err(|e| format!("collector: {e}"))?;
    let endpoint = collector.endpoint();

    let mut off = Vec::new();
    let mut on = Vec::new();
    let mut by_round = Vec::with_capacity(rounds);
    let mut export = ExportStats::default();
    let mut unfiled = 0;
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Mode::Off, Mode::On]
        } else {
            [Mode::On, Mode::Off]
        };
        let mut pair = (Vec::new(), Vec::new());
        for mode in order {
            let output = run_child(mode, per_child, turns, &endpoint)?;
            match mode {
                Mode::Off => pair.0 = output.figures,
                Mode::On => {
                    pair.1 = output.figures;
                    export.exported += output.export.exported;
                    export.failed += output.export.failed;
                    export.dropped += output.export.dropped;
                    unfiled += output.unfiled;
                }
            }
        }
        off.extend_from_slice(&pair.0);
        on.extend_from_slice(&pair.1);
        by_round.push(pair);
    }
    let received = tokio.block_on(collector.shutdown());

    report_mode(Mode::Off, &off);
    report_mode(Mode::On, &on);
    report_comparison(&off, &on, &by_round);
    println!(
        "  OTLP export (all on-children, warm-ups included): {} spans exported, {} failed, \
         {} dropped; {} spans with no store; the collector answered {} requests ({:.1} KiB)",
        export.exported,
        export.failed,
        export.dropped,
        unfiled,
        received.requests,
        received.bytes as f64 / 1024.0
    );
    println!("\n{}", machine_line());
    Ok(())
}

fn main() {
    if let Ok(mode) = std::env::var(CHILD_VAR) {
        if let Err(err) = Mode::parse(&mode).and_then(child) {
            eprintln!("tracing_turn child: {err}");
            std::process::exit(1);
        }
        return;
    }
    if !invoked_as_benchmark() {
        return;
    }
    if let Err(err) = parent() {
        eprintln!("tracing_turn: {err}");
        std::process::exit(1);
    }
}
