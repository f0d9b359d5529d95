//! Benchmark: what tracing adds to the runtime overhead of an agent turn
//! (SPEC §11, §14; target: at most 10% more than with telemetry off).
//!
//! The run is `agent_turn`'s (`bench::turns::one_run`): `TURNS` model calls
//! (default 50) each asking for one `read_file` call, then a text answer, on
//! the real actor tree with the real Anthropic adapter and a sled store in a
//! temporary data directory (durable writes and fsyncs included). The two
//! set-ups compared against the target:
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
//! Three more set-ups split the difference: `logs` (the pipeline installed
//! with neither local store nor export: the log layer alone, no span reaches
//! OpenTelemetry), `local` (local span store only) and `export` (OTLP export
//! only).
//!
//! A global subscriber can be installed once per process and never removed,
//! so each set-up runs in a child process (this binary, started with
//! `TROUPE_BENCH_TRACING_CHILD=<set-up>`), and the parent runs them in
//! `ROUNDS` rounds (default 10), each round running every set-up once in an
//! order that rotates and reverses from round to round, each child making 2
//! warm-up runs and then its share of the samples. Alternation spreads the
//! machine's changing load over all set-ups instead of charging it to
//! whichever ran last.
//!
//! Reported for each set-up, per turn: `gross` (wall / turns), `server`
//! (bare-HTTP replay), `overhead` = gross − server (the SPEC §14 figure),
//! `loop` = gross − adapter replay, and the CPU time the whole process used
//! during the run (all threads: runtime, in-process scripted server, sled,
//! exporter), which is less noisy than wall time on a shared machine and
//! shows whether a difference is work or waiting; then each set-up against
//! `off`: the ratio of the medians, what it adds per turn, and the ratio of
//! each round's pair of medians; the spans stored per run, the exporter's
//! counters and what the collector received.
//!
//! Environment: `TROUPE_BENCH_SAMPLES` (runs per set-up, default 60),
//! `TROUPE_BENCH_ROUNDS` (default 10), `TROUPE_BENCH_TURNS` (default 50),
//! `TROUPE_BENCH_TRACING_SETUPS` (comma-separated set-ups, default all five;
//! `off` is always measured). Figures go to `docs/performance.md`, never into
//! assertions.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use troupe_telemetry::{ExportStats, Telemetry, TelemetryGuard, TelemetrySettings};
use troupe_tests::bench::collector::OtlpCollector;
use troupe_tests::bench::spans::StoreSwitch;
use troupe_tests::bench::stats::Summary;
use troupe_tests::bench::system::machine_line;
use troupe_tests::bench::turns::{ToolKind, one_run};
use troupe_tests::bench::{
    count_from_env, invoked_as_benchmark, round_order, run_on_tokio_workers,
};

/// Model calls per run unless `TROUPE_BENCH_TURNS` says otherwise.
const DEFAULT_TURNS: usize = 50;
/// Measured runs per set-up unless `TROUPE_BENCH_SAMPLES` says otherwise.
const DEFAULT_SAMPLES: usize = 60;
/// Rounds unless `TROUPE_BENCH_ROUNDS` says otherwise.
const DEFAULT_ROUNDS: usize = 10;
/// Runs of each child before it measures (connection pool, lazy statics,
/// compiled schemas, the exporter's first connection).
const WARMUP_RUNS: usize = 2;
/// Issue target: tracing adds at most 10% to the per-turn overhead.
const TARGET_RATIO: f64 = 1.10;
/// Variable that turns this binary into a measuring child; its value names
/// the set-up.
const CHILD_VAR: &str = "TROUPE_BENCH_TRACING_CHILD";
/// Runs a child measures.
const CHILD_SAMPLES_VAR: &str = "TROUPE_BENCH_CHILD_SAMPLES";
/// Model calls per run, passed to the children.
const TURNS_VAR: &str = "TROUPE_BENCH_TURNS";
/// Set-ups to measure.
const SETUPS_VAR: &str = "TROUPE_BENCH_TRACING_SETUPS";
/// The standard variable naming the collector (SPEC §1.2).
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Telemetry variables the children must not inherit from this process: a
/// child that exports gets the endpoint alone, and every child the default
/// log filter (`warn`).
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

/// What telemetry a child installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// No subscriber.
    Off,
    /// The pipeline with neither local store nor export (log layer only).
    Logs,
    /// The pipeline with the local span store only.
    Local,
    /// The pipeline with OTLP export only.
    Export,
    /// The pipeline with the local span store and OTLP export.
    On,
    /// As `on`, but the collector is down (a closed port).
    Down,
    /// As `on`, but the collector accepts connections and never answers.
    Hanging,
}

impl Setup {
    const ALL: [Self; 7] = [
        Self::Off,
        Self::Logs,
        Self::Local,
        Self::Export,
        Self::On,
        Self::Down,
        Self::Hanging,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Logs => "logs",
            Self::Local => "local",
            Self::Export => "export",
            Self::On => "on",
            Self::Down => "down",
            Self::Hanging => "hanging",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|setup| setup.name() == text.trim())
            .ok_or_else(|| {
                format!("unknown set-up {text:?} (off, logs, local, export, on, down, hanging)")
            })
    }

    fn label(self) -> &'static str {
        match self {
            Self::Off => "off: telemetry disabled (no subscriber)",
            Self::Logs => "logs: pipeline installed, no local store, no export",
            Self::Local => "local: local span store only",
            Self::Export => "export: OTLP export to loopback only",
            Self::On => "on: local span store + OTLP export to loopback",
            Self::Down => "down: local span store + OTLP export to a closed port",
            Self::Hanging => {
                "hanging: local span store + OTLP export to a collector that never answers"
            }
        }
    }

    fn installs(self) -> bool {
        self != Self::Off
    }

    fn stores_spans(self) -> bool {
        matches!(self, Self::Local | Self::On | Self::Down | Self::Hanging)
    }

    /// The child has an OTLP endpoint set.
    fn exports(self) -> bool {
        matches!(self, Self::Export | Self::On | Self::Down | Self::Hanging)
    }

    /// Its spans reach a working collector.
    fn reaches_collector(self) -> bool {
        matches!(self, Self::Export | Self::On)
    }
}

/// The set-ups named in `text` (comma-separated), `off` first and always.
fn parse_setups(text: Option<&str>) -> Result<Vec<Setup>, String> {
    let Some(text) = text else {
        return Ok(Setup::ALL.to_vec());
    };
    let mut setups = vec![Setup::Off];
    for name in text.split(',').filter(|name| !name.trim().is_empty()) {
        let setup = Setup::parse(name)?;
        if !setups.contains(&setup) {
            setups.push(setup);
        }
    }
    Ok(setups)
}

/// Picks one per-turn figure.
type Pick = dyn Fn(&Figures) -> f64;

/// Per-turn figures of one run, as a child reports them.
#[derive(Debug, Clone, Copy)]
struct Figures {
    gross: f64,
    server: f64,
    model: f64,
    cpu: f64,
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
            "cpu_ms": self.cpu,
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
            cpu: field("cpu_ms")?,
            spans: field("spans")?,
        })
    }
}

/// Installs the product's telemetry as the global subscriber, settings from
/// the process environment as `troupe` reads them; spans kept through
/// `switch` when `setup` stores them.
fn install(setup: Setup, switch: Arc<StoreSwitch>) -> Result<TelemetryGuard, String> {
    let settings = TelemetrySettings::from_process_env().map_err(|e| e.to_string())?;
    if settings.export.is_some() != setup.exports() {
        return Err(format!(
            "set-up {} with {ENDPOINT_VAR} {}",
            setup.name(),
            if settings.export.is_some() {
                "set"
            } else {
                "unset"
            }
        ));
    }
    let mut builder = Telemetry::builder(&settings);
    if setup.stores_spans() {
        builder = builder.local_sink(switch);
    }
    builder
        .build()
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| e.to_string())
}

/// Child mode: measure runs in one set-up and print them.
fn child(setup: Setup) -> Result<(), String> {
    let samples = count_from_env(CHILD_SAMPLES_VAR, 1)?;
    let turns = count_from_env(TURNS_VAR, DEFAULT_TURNS)?;
    let switch = Arc::new(StoreSwitch::new());
    let mut guard = if setup.installs() {
        Some(install(setup, switch.clone())?)
    } else {
        None
    };
    let spans = setup.stores_spans().then(|| switch.clone());
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
                cpu: sample.cpu_ms(),
                spans: sample.spans_stored as f64,
            });
        }
        Ok(figures)
    })?;
    for figure in figures {
        println!("{}", figure.to_line());
    }
    if let Some(guard) = guard.as_mut() {
        // A collector that is down or hangs makes shutdown give up at its
        // bound: that is the behaviour under test, not a failure.
        if let Err(err) = guard.shutdown() {
            if setup.reaches_collector() || !setup.exports() {
                return Err(err.to_string());
            }
            eprintln!(
                "  ({} set-up) shutdown gave up at its bound: {err}",
                setup.name()
            );
        }
        let stats = guard.export_stats();
        let value = json!({
            "exported": stats.exported,
            "failed": stats.failed,
            "retries": stats.retries,
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
    setup: Setup,
    samples: usize,
    turns: usize,
    endpoints: &Endpoints,
) -> Result<ChildOutput, String> {
    let endpoint = match setup {
        Setup::Down => &endpoints.down,
        Setup::Hanging => &endpoints.hanging,
        _ => &endpoints.collector,
    };
    let name = setup.name();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    for var in UNINHERITED_VARS {
        command.env_remove(var);
    }
    if setup.exports() {
        command.env(ENDPOINT_VAR, endpoint);
    }
    let mut process = command
        .env(CHILD_VAR, name)
        .env(CHILD_SAMPLES_VAR, samples.to_string())
        .env(TURNS_VAR, turns.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the {name} child: {e}"))?;
    let stdout = process.stdout.take().ok_or("child has no stdout")?;
    let mut output = ChildOutput {
        figures: Vec::with_capacity(samples),
        export: ExportStats::default(),
        unfiled: 0,
    };
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("{name} child: {e}"))?;
        let parse = |text: &str| -> Result<Value, String> {
            serde_json::from_str(text).map_err(|e| format!("child line {line:?}: {e}"))
        };
        if let Some(rest) = line.strip_prefix(SAMPLE_LINE) {
            output.figures.push(Figures::from_json(&parse(rest)?)?);
        } else if let Some(rest) = line.strip_prefix(EXPORT_LINE) {
            let value = parse(rest)?;
            let count = |field: &str| value[field].as_u64().unwrap_or(0);
            output.export = ExportStats {
                queued: 0,
                exported: count("exported"),
                failed: count("failed"),
                retries: count("retries"),
                dropped: count("dropped"),
            };
            output.unfiled = count("unfiled");
        } else {
            println!("  [{name} child] {line}");
        }
    }
    let status = process.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("the {name} child exited {status}"));
    }
    if output.figures.len() != samples {
        return Err(format!(
            "the {name} child reported {} samples of {samples}",
            output.figures.len()
        ));
    }
    // A comparison of identical set-ups would be worthless: check that spans
    // were kept and exported exactly when the set-up says so.
    let traced = output.figures.iter().filter(|f| f.spans > 0.0).count();
    let expected = if setup.stores_spans() { samples } else { 0 };
    if traced != expected {
        return Err(format!(
            "{traced} of {samples} runs of the {name} child stored spans"
        ));
    }
    if setup.reaches_collector() != (output.export.exported > 0) {
        return Err(format!(
            "the {name} child exported {} spans",
            output.export.exported
        ));
    }
    Ok(output)
}

fn show(values: &[f64]) -> String {
    Summary::of(values).map_or_else(|| "no samples".into(), |s| s.to_string())
}

fn median(values: &[f64]) -> f64 {
    Summary::of(values).map_or(f64::NAN, |s| s.median)
}

fn median_of(figures: &[Figures], pick: &Pick) -> f64 {
    median(&figures.iter().map(pick).collect::<Vec<_>>())
}

/// Everything measured in one set-up.
struct Measured {
    setup: Setup,
    figures: Vec<Figures>,
    /// The figures of each round.
    rounds: Vec<Vec<Figures>>,
    export: ExportStats,
    unfiled: u64,
}

fn report_setup(measured: &Measured) {
    let figures = &measured.figures;
    let column = |pick: &Pick| -> String { show(&figures.iter().map(pick).collect::<Vec<_>>()) };
    println!("\n== {} ==", measured.setup.label());
    println!("  per turn, ms:");
    println!("    gross                   {}", column(&|f| f.gross));
    println!("    server (bare HTTP)      {}", column(&|f| f.server));
    println!("    overhead = gross−server {}", column(&Figures::overhead));
    println!(
        "    loop = gross−model      {}",
        column(&Figures::loop_time)
    );
    println!("    process CPU             {}", column(&|f| f.cpu));
    println!("  spans stored per run      {}", column(&|f| f.spans));
    if measured.setup.installs() {
        let export = measured.export;
        println!(
            "  OTLP export (warm-ups included): {} spans exported, {} failed, {} dropped; \
             {} spans ended with no store",
            export.exported, export.failed, export.dropped, measured.unfiled
        );
    }
}

fn report_against_off(off: &Measured, other: &Measured) {
    println!("\n== {} / off ==", other.setup.name());
    let metrics: [(&str, &Pick); 4] = [
        ("overhead = gross−server", &Figures::overhead),
        ("gross", &|f| f.gross),
        ("loop = gross−model", &Figures::loop_time),
        ("process CPU", &|f| f.cpu),
    ];
    for (name, pick) in metrics {
        let off_median = median_of(&off.figures, pick);
        let other_median = median_of(&other.figures, pick);
        println!(
            "  {name:<24} off {off_median:.3} ms, {} {other_median:.3} ms: \
             ratio {:.3}, adds {:.1} µs per turn",
            other.setup.name(),
            other_median / off_median,
            (other_median - off_median) * 1_000.0
        );
    }
    let paired: Vec<f64> = off
        .rounds
        .iter()
        .zip(&other.rounds)
        .map(|(off, other)| {
            median_of(other, &Figures::overhead) / median_of(off, &Figures::overhead)
        })
        .collect();
    println!(
        "  overhead ratio of each round's medians  {}",
        show(&paired)
    );
    if other.setup == Setup::On {
        let ratio = median_of(&other.figures, &Figures::overhead)
            / median_of(&off.figures, &Figures::overhead);
        println!(
            "  target: overhead ratio ≤ {TARGET_RATIO:.2} (tracing adds at most 10%): {}",
            if ratio <= TARGET_RATIO {
                "met"
            } else {
                "missed"
            }
        );
    }
}

fn parent() -> Result<(), String> {
    let samples = count_from_env("TROUPE_BENCH_SAMPLES", DEFAULT_SAMPLES)?;
    let rounds = count_from_env("TROUPE_BENCH_ROUNDS", DEFAULT_ROUNDS)?.min(samples);
    let turns = count_from_env(TURNS_VAR, DEFAULT_TURNS)?;
    let setups = parse_setups(std::env::var(SETUPS_VAR).ok().as_deref())?;
    let per_child = samples.div_ceil(rounds);
    let names: Vec<&str> = setups.iter().map(|s| s.name()).collect();
    println!(
        "tracing_turn: read_file turns, {turns} model calls per run; set-ups {}; \
         {rounds} rounds × {per_child} runs per set-up (order rotating), \
         {WARMUP_RUNS} warm-up runs per child",
        names.join(", ")
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
    let endpoints = Endpoints {
        collector: collector.endpoint(),
        down: tokio.block_on(closed_endpoint())?,
        hanging: tokio.block_on(hanging_endpoint())?,
    };

    let mut measured: Vec<Measured> = setups
        .iter()
        .map(|&setup| Measured {
            setup,
            figures: Vec::new(),
            rounds: Vec::with_capacity(rounds),
            export: ExportStats::default(),
            unfiled: 0,
        })
        .collect();
    for round in 0..rounds {
        for setup in round_order(&setups, round) {
            let output = run_child(setup, per_child, turns, &endpoints)?;
            let Some(slot) = measured.iter_mut().find(|m| m.setup == setup) else {
                return Err(format!("set-up {} was not planned", setup.name()));
            };
            slot.figures.extend_from_slice(&output.figures);
            slot.rounds.push(output.figures);
            slot.export.exported += output.export.exported;
            slot.export.failed += output.export.failed;
            slot.export.dropped += output.export.dropped;
            slot.unfiled += output.unfiled;
        }
    }
    let received = tokio.block_on(collector.shutdown());

    for one in &measured {
        report_setup(one);
    }
    let Some((off, others)) = measured.split_first() else {
        return Err("nothing measured".into());
    };
    for other in others {
        report_against_off(off, other);
    }
    println!(
        "\nthe collector answered {} export requests ({:.1} KiB)",
        received.requests,
        received.bytes as f64 / 1024.0
    );
    println!("\n{}", machine_line());
    Ok(())
}

/// Where each set-up exports to.
struct Endpoints {
    /// The loopback collector.
    collector: String,
    /// A port nobody listens on.
    down: String,
    /// A listener that accepts and never answers.
    hanging: String,
}

/// The URL of a loopback port that was free a moment ago: connections are refused.
async fn closed_endpoint() -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    drop(listener);
    Ok(format!("http://{addr}"))
}

/// The URL of a collector that accepts every connection and never answers;
/// the connections stay open for the life of the bench.
async fn hanging_endpoint() -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Ok(format!("http://{addr}"))
}

fn main() {
    if let Ok(setup) = std::env::var(CHILD_VAR) {
        if let Err(err) = Setup::parse(&setup).and_then(child) {
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
