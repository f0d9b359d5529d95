//! Telemetry (SPEC §11, §1.2): the OpenTelemetry pipeline, the GenAI span
//! conventions, trace-context propagation and the local span store.
//!
//! This module owns everything between a `tracing` span created by one of the
//! [`genai`] helpers and the bytes that leave the process: the `tracing`
//! subscriber (a log layer on stderr whose lines carry the trace id, and the
//! `tracing-opentelemetry` layer), the SDK tracer provider, the OTLP batch
//! exporter with its bounded queue and drop counter, and the
//! `LocalSpanProcessor` that keeps each run's spans with the run for
//! `troupe trace RUN`. It must not touch actors, the sled store or the terminal:
//! actors call the [`genai`] helpers (or carry out a machine's
//! [`span_ops::SpanOp`]s, which map onto them), the store implements
//! [`SpanSink`], and the CLI prints [`render_span_tree`].
//!
//! Only spans of `TRACE_TARGET` reach OpenTelemetry (one span per agent run,
//! model call, tool call, approval wait, compaction, hook and MCP call — nothing
//! else), so dependencies that create their own `tracing` spans never appear in
//! a trace.
//!
//! How a parent travels across actor messages: a message that starts work carries
//! the parent as a [`tracing::Span`] handle (see [`propagation`] for why), and
//! child processes get the W3C `traceparent` from
//! [`propagation::current_traceparent`].

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod brief;
mod export;
pub mod genai;
mod local;
mod per_run;
mod pipeline;
pub mod propagation;
mod render;
mod settings;
pub mod span_ops;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use brief::{BriefFormat, LogStyle};
pub use local::{MemorySpanSink, SpanRecord, SpanSink, SpanStatus};
pub use per_run::{MAX_WAITING_SPANS, RunExports};
pub use pipeline::{Telemetry, TelemetryGuard, init, log_filter};
pub use render::render_span_tree;
pub use settings::{OtlpExport, TelemetrySettings, log_filter_from_env};
pub use stats::{ExportStats, TelemetryError};

/// The `tracing` target of every span and span event that becomes
/// OpenTelemetry data. The OpenTelemetry layer is filtered to this target.
pub(crate) const TRACE_TARGET: &str = "troupe::trace";

/// Attribute on `invoke_agent` spans naming the run they belong to; the local
/// span store files every span of the trace under this run id.
pub(crate) const RUN_ID_ATTRIBUTE: &str = "troupe.run_id";
