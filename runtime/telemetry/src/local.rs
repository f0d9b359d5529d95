//! The local span store's side of the pipeline: an SDK [`SpanProcessor`] that
//! turns every finished span into a compact [`SpanRecord`] and hands it to a
//! [`SpanSink`] under its run id, so `troupe trace RUN` can print a run's span
//! tree with no collector. Owns the run-id bookkeeping; does not store anything
//! itself (the sled store implements [`SpanSink`]) and never exports.
//!
//! **Which run a span belongs to.** The run id is the `troupe.run_id` attribute
//! of `invoke_agent` spans. The processor keeps a map trace id → run id, filled
//! when a span carrying the attribute starts (the root starts before any of its
//! children: creating a child starts its parent) or ends. Spans of a trace with
//! a known run are handed to the sink as they end, so a live run's finished
//! steps are visible at once.
//!
//! A span that ends while its trace has no run id yet (possible only when the
//! root never started before its children, e.g. a remote parent) is buffered per
//! trace and handed over as soon as the run id is known. The buffer is bounded
//! by [`MAX_PENDING_SPANS`]; beyond it the oldest trace's spans are discarded
//! and counted. A trace whose local root ends without any run id is not part of
//! a run: its buffered spans are discarded. When the span that registered the
//! run ends, the trace moves to a short list of [`RECENT_RUNS`] so that a
//! straggler ending after the root is still filed.
//!
//! Content attributes (`gen_ai.input.messages`, …) are never copied into
//! records: the session store keeps the conversation itself.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use opentelemetry::trace::{SpanId, Status, TraceId};
use opentelemetry::{Array, Context, KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use serde::{Deserialize, Serialize};

use super::RUN_ID_ATTRIBUTE;
use super::genai;

/// Most spans buffered while their trace has no run id yet (all traces together).
pub(crate) const MAX_PENDING_SPANS: usize = 4096;

/// Finished runs remembered so that spans ending after their root are still filed.
pub(crate) const RECENT_RUNS: usize = 64;

/// Longest attribute value copied into a record, in characters; longer values
/// are cut and end with `…`.
pub(crate) const MAX_ATTRIBUTE_CHARS: usize = 512;

/// Attribute namespaces copied into records.
const KEPT_PREFIXES: [&str; 4] = ["gen_ai.", "troupe.", "error.", "mcp."];

/// Attributes never copied into records (content).
const CONTENT_KEYS: [&str; 5] = [
    genai::INPUT_MESSAGES,
    genai::OUTPUT_MESSAGES,
    genai::SYSTEM_INSTRUCTIONS,
    genai::TOOL_CALL_ARGUMENTS,
    genai::TOOL_CALL_RESULT,
];

/// Status of a finished span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum SpanStatus {
    /// Nothing was said (the normal case).
    Unset,
    /// Explicitly successful.
    Ok,
    /// Failed.
    Error {
        /// What failed (the `error.type` for Troupe's spans).
        description: String,
    },
}

/// A span event (a permission decision, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanEventRecord {
    /// Event name.
    pub name: String,
    /// When it happened.
    pub time: DateTime<Utc>,
    /// Its attributes as text.
    pub attributes: BTreeMap<String, String>,
}

/// One finished span as the local store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// The parent's span id, `None` for a root.
    pub parent_span_id: Option<String>,
    /// Span name (`chat claude-sonnet-4-5`, `execute_tool bash`, …).
    pub name: String,
    /// Start time.
    pub start: DateTime<Utc>,
    /// End time.
    pub end: DateTime<Utc>,
    /// `end - start` in milliseconds.
    pub duration_ms: f64,
    /// Status.
    pub status: SpanStatus,
    /// The `gen_ai.*`, `troupe.*`, `error.*` and `mcp.*` attributes as text
    /// (content attributes excluded, values cut at `MAX_ATTRIBUTE_CHARS`).
    pub attributes: BTreeMap<String, String>,
    /// Span events in order.
    pub events: Vec<SpanEventRecord>,
}

impl SpanRecord {
    /// The compact record of a finished SDK span.
    pub fn from_span_data(span: &SpanData) -> Self {
        let parent = span.parent_span_id;
        let duration = span
            .end_time
            .duration_since(span.start_time)
            .unwrap_or(Duration::ZERO);
        Self {
            trace_id: span.span_context.trace_id().to_string(),
            span_id: span.span_context.span_id().to_string(),
            parent_span_id: (parent != SpanId::INVALID).then(|| parent.to_string()),
            name: span.name.to_string(),
            start: timestamp(span.start_time),
            end: timestamp(span.end_time),
            duration_ms: duration.as_secs_f64() * 1_000.0,
            status: match &span.status {
                Status::Unset => SpanStatus::Unset,
                Status::Ok => SpanStatus::Ok,
                Status::Error { description } => SpanStatus::Error {
                    description: description.to_string(),
                },
            },
            attributes: kept_attributes(&span.attributes),
            events: span
                .events
                .iter()
                .map(|event| SpanEventRecord {
                    name: event.name.to_string(),
                    time: timestamp(event.timestamp),
                    attributes: kept_attributes(&event.attributes),
                })
                .collect(),
        }
    }

    /// An attribute's text, if present.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn timestamp(time: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(time)
}

fn kept_attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .filter(|kv| {
            let key = kv.key.as_str();
            KEPT_PREFIXES.iter().any(|prefix| key.starts_with(prefix))
                && !CONTENT_KEYS.contains(&key)
        })
        .map(|kv| (kv.key.to_string(), shorten(value_text(&kv.value))))
        .collect()
}

/// An attribute value as text; arrays are joined with `,`.
fn value_text(value: &Value) -> String {
    match value {
        Value::Array(Array::String(items)) => items
            .iter()
            .map(|item| item.as_str())
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

fn shorten(text: String) -> String {
    match text.char_indices().nth(MAX_ATTRIBUTE_CHARS) {
        None => text,
        Some((cut, _)) => {
            let mut short = text[..cut].to_string();
            short.push('…');
            short
        }
    }
}

/// Where the local span processor puts finished spans: the store implements it
/// (`put_span(run_id, span_id, …)`). Called on the thread that ended the span,
/// so it must be quick and must not block on I/O for long; it must never panic.
pub trait SpanSink: Send + Sync + 'static {
    /// Keeps one finished span of a run.
    fn record(&self, run_id: &str, span: SpanRecord);
}

/// A [`SpanSink`] in memory, for tests and embedded runs without a store.
#[derive(Debug, Default)]
pub struct MemorySpanSink {
    runs: Mutex<BTreeMap<String, Vec<SpanRecord>>>,
}

impl MemorySpanSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// The spans of a run, in the order they ended.
    pub fn spans(&self, run_id: &str) -> Vec<SpanRecord> {
        self.lock().get(run_id).cloned().unwrap_or_default()
    }

    /// The run ids seen.
    pub fn run_ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<SpanRecord>>> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single push), so a poisoned lock is still usable.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SpanSink for MemorySpanSink {
    fn record(&self, run_id: &str, span: SpanRecord) {
        self.lock()
            .entry(run_id.to_string())
            .or_default()
            .push(span);
    }
}

/// The run a trace belongs to, and the span that registered it.
#[derive(Debug, Clone)]
struct ActiveRun {
    run_id: Arc<str>,
    owner: SpanId,
}

/// Run-id bookkeeping of the local processor, without the SDK types (tested
/// on its own).
#[derive(Debug, Default)]
struct RunIndex {
    active: HashMap<TraceId, ActiveRun>,
    recent: VecDeque<(TraceId, Arc<str>)>,
    pending: HashMap<TraceId, Vec<SpanRecord>>,
    pending_order: VecDeque<TraceId>,
    pending_total: usize,
    discarded: u64,
}

/// What one finished span looks like to the index.
struct Finished {
    trace: TraceId,
    span: SpanId,
    run_attribute: Option<Arc<str>>,
    /// No parent in this process (no parent, or a remote one).
    local_root: bool,
    record: SpanRecord,
}

type Batch = Vec<(Arc<str>, SpanRecord)>;

impl RunIndex {
    fn run_of(&self, trace: TraceId) -> Option<Arc<str>> {
        if let Some(active) = self.active.get(&trace) {
            return Some(active.run_id.clone());
        }
        self.recent
            .iter()
            .find(|(t, _)| *t == trace)
            .map(|(_, run)| run.clone())
    }

    /// A span carrying a run id started: register the trace if it is new.
    fn started(&mut self, trace: TraceId, span: SpanId, run_id: Arc<str>) -> Batch {
        if self.active.contains_key(&trace) {
            return Vec::new();
        }
        self.active.insert(
            trace,
            ActiveRun {
                run_id: run_id.clone(),
                owner: span,
            },
        );
        self.take_pending(trace, &run_id)
    }

    fn ended(&mut self, finished: Finished) -> Batch {
        let Finished {
            trace,
            span,
            run_attribute,
            local_root,
            record,
        } = finished;
        let mut out = Vec::new();
        if let Some(run_id) = &run_attribute {
            out = self.started(trace, span, run_id.clone());
        }
        match self.run_of(trace) {
            Some(run_id) => {
                out.extend(self.take_pending(trace, &run_id));
                out.push((run_id, record));
            }
            None if local_root => {
                // The whole trace ended without a run: not a run's spans.
                self.drop_pending(trace);
            }
            None => self.buffer(trace, record),
        }
        let owner_ended = self
            .active
            .get(&trace)
            .is_some_and(|active| active.owner == span);
        if owner_ended && let Some(active) = self.active.remove(&trace) {
            self.recent.push_back((trace, active.run_id));
            while self.recent.len() > RECENT_RUNS {
                self.recent.pop_front();
            }
        }
        out
    }

    fn take_pending(&mut self, trace: TraceId, run_id: &Arc<str>) -> Batch {
        match self.pending.remove(&trace) {
            None => Vec::new(),
            Some(records) => {
                self.pending_order.retain(|t| *t != trace);
                self.pending_total -= records.len();
                records
                    .into_iter()
                    .map(|record| (run_id.clone(), record))
                    .collect()
            }
        }
    }

    fn drop_pending(&mut self, trace: TraceId) {
        if let Some(records) = self.pending.remove(&trace) {
            self.pending_order.retain(|t| *t != trace);
            self.pending_total -= records.len();
        }
    }

    fn buffer(&mut self, trace: TraceId, record: SpanRecord) {
        while self.pending_total >= MAX_PENDING_SPANS {
            let Some(oldest) = self.pending_order.pop_front() else {
                break;
            };
            if let Some(records) = self.pending.remove(&oldest) {
                self.pending_total -= records.len();
                self.discarded += records.len() as u64;
            }
        }
        let entry = self.pending.entry(trace).or_default();
        if entry.is_empty() {
            self.pending_order.push_back(trace);
        }
        entry.push(record);
        self.pending_total += 1;
    }
}

/// The SDK span processor of the local span store (see the module doc).
pub(crate) struct LocalSpanProcessor {
    sink: Arc<dyn SpanSink>,
    index: Mutex<RunIndex>,
}

impl fmt::Debug for LocalSpanProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSpanProcessor").finish_non_exhaustive()
    }
}

impl LocalSpanProcessor {
    /// A processor handing records to `sink`.
    pub(crate) fn new(sink: Arc<dyn SpanSink>) -> Self {
        Self {
            sink,
            index: Mutex::new(RunIndex::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunIndex> {
        // Every index update completes before anything that could panic, so a
        // poisoned lock still holds a consistent index.
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deliver(&self, batch: Batch) {
        for (run_id, record) in batch {
            self.sink.record(&run_id, record);
        }
    }
}

fn run_attribute(attributes: &[KeyValue]) -> Option<Arc<str>> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == RUN_ID_ATTRIBUTE)
        .map(|kv| Arc::from(kv.value.as_str().as_ref()))
}

impl SpanProcessor for LocalSpanProcessor {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        use opentelemetry::trace::Span as _;
        let trace = span.span_context().trace_id();
        if self.lock().active.contains_key(&trace) {
            return;
        }
        // Only the first span of a trace gets here (normally the root); copying
        // its data is the price of reading its attributes.
        let Some(data) = span.exported_data() else {
            return;
        };
        if let Some(run_id) = run_attribute(&data.attributes) {
            let batch = self
                .lock()
                .started(trace, data.span_context.span_id(), run_id);
            self.deliver(batch);
        }
    }

    fn on_end(&self, span: SpanData) {
        let finished = Finished {
            trace: span.span_context.trace_id(),
            span: span.span_context.span_id(),
            run_attribute: run_attribute(&span.attributes),
            local_root: span.parent_span_id == SpanId::INVALID || span.parent_span_is_remote,
            record: SpanRecord::from_span_data(&span),
        };
        let batch = self.lock().ended(finished);
        self.deliver(batch);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(n: u128) -> TraceId {
        TraceId::from_bytes(n.to_be_bytes())
    }

    fn span(n: u64) -> SpanId {
        SpanId::from_bytes(n.to_be_bytes())
    }

    fn record(name: &str) -> SpanRecord {
        let t = DateTime::<Utc>::from(SystemTime::UNIX_EPOCH);
        SpanRecord {
            trace_id: String::new(),
            span_id: String::new(),
            parent_span_id: None,
            name: name.to_string(),
            start: t,
            end: t,
            duration_ms: 0.0,
            status: SpanStatus::Unset,
            attributes: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    fn finished(t: u128, s: u64, run: Option<&str>, root: bool, name: &str) -> Finished {
        Finished {
            trace: trace(t),
            span: span(s),
            run_attribute: run.map(Arc::from),
            local_root: root,
            record: record(name),
        }
    }

    fn names(batch: &Batch) -> Vec<(String, String)> {
        batch
            .iter()
            .map(|(run, r)| (run.to_string(), r.name.clone()))
            .collect()
    }

    #[test]
    fn children_of_a_started_run_are_delivered_at_once() {
        let mut index = RunIndex::default();
        assert!(
            index
                .started(trace(1), span(1), Arc::from("run-1"))
                .is_empty()
        );
        let out = index.ended(finished(1, 2, None, false, "chat"));
        assert_eq!(names(&out), [("run-1".into(), "chat".into())]);
        let out = index.ended(finished(1, 1, Some("run-1"), true, "invoke_agent"));
        assert_eq!(names(&out), [("run-1".into(), "invoke_agent".into())]);
        assert!(index.active.is_empty());
        // A straggler after the root is still filed.
        let out = index.ended(finished(1, 3, None, false, "late"));
        assert_eq!(names(&out), [("run-1".into(), "late".into())]);
    }

    #[test]
    fn children_ending_before_the_run_is_known_wait_for_it() {
        let mut index = RunIndex::default();
        assert!(index.ended(finished(1, 2, None, false, "chat")).is_empty());
        assert!(index.ended(finished(1, 3, None, false, "tool")).is_empty());
        assert_eq!(index.pending_total, 2);
        let out = index.ended(finished(1, 1, Some("run-1"), true, "invoke_agent"));
        assert_eq!(
            names(&out),
            [
                ("run-1".into(), "chat".into()),
                ("run-1".into(), "tool".into()),
                ("run-1".into(), "invoke_agent".into())
            ]
        );
        assert_eq!(index.pending_total, 0);
        assert!(index.pending_order.is_empty());
    }

    #[test]
    fn a_sub_agent_span_does_not_close_the_run() {
        let mut index = RunIndex::default();
        index.started(trace(1), span(1), Arc::from("run-1"));
        let out = index.ended(finished(1, 5, Some("run-1"), false, "invoke_agent sub"));
        assert_eq!(out.len(), 1);
        assert!(index.active.contains_key(&trace(1)));
    }

    #[test]
    fn traces_without_a_run_are_discarded_when_their_root_ends() {
        let mut index = RunIndex::default();
        assert!(index.ended(finished(7, 2, None, false, "child")).is_empty());
        assert!(
            index
                .ended(finished(7, 1, None, true, "initialize"))
                .is_empty()
        );
        assert_eq!(index.pending_total, 0);
        assert!(index.pending.is_empty());
        assert_eq!(index.discarded, 0);
    }

    #[test]
    fn the_pending_buffer_is_bounded_dropping_the_oldest_trace() {
        let mut index = RunIndex::default();
        for i in 0..MAX_PENDING_SPANS {
            index.ended(finished(1, i as u64 + 10, None, false, "old"));
        }
        index.ended(finished(2, 1, None, false, "new"));
        assert_eq!(index.pending_total, 1);
        assert_eq!(index.discarded, MAX_PENDING_SPANS as u64);
        assert!(!index.pending.contains_key(&trace(1)));
        let out = index.ended(finished(2, 2, Some("run-2"), true, "root"));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn recent_runs_are_bounded() {
        let mut index = RunIndex::default();
        for t in 0..(RECENT_RUNS as u128 + 5) {
            index.ended(finished(t + 1, 1, Some("r"), true, "root"));
        }
        assert_eq!(index.recent.len(), RECENT_RUNS);
        assert_eq!(index.run_of(trace(1)), None);
        assert!(index.run_of(trace(RECENT_RUNS as u128 + 5)).is_some());
    }

    #[test]
    fn attributes_are_filtered_and_shortened() {
        let long = "x".repeat(MAX_ATTRIBUTE_CHARS + 10);
        let kept = kept_attributes(&[
            KeyValue::new("gen_ai.tool.name", "bash"),
            KeyValue::new("gen_ai.usage.input_tokens", 12_i64),
            KeyValue::new("troupe.hook.command", long),
            KeyValue::new("gen_ai.input.messages", "[secret]"),
            KeyValue::new("code.file.path", "src/x.rs"),
            KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(Array::String(vec!["tool_use".into(), "end_turn".into()])),
            ),
        ]);
        assert_eq!(kept["gen_ai.tool.name"], "bash");
        assert_eq!(kept["gen_ai.usage.input_tokens"], "12");
        assert_eq!(kept["gen_ai.response.finish_reasons"], "tool_use,end_turn");
        assert_eq!(
            kept["troupe.hook.command"].chars().count(),
            MAX_ATTRIBUTE_CHARS + 1
        );
        assert!(kept["troupe.hook.command"].ends_with('…'));
        assert!(!kept.contains_key("gen_ai.input.messages"));
        assert!(!kept.contains_key("code.file.path"));
    }

    #[test]
    fn memory_sink_groups_by_run() {
        let sink = MemorySpanSink::new();
        sink.record("a", record("one"));
        sink.record("b", record("two"));
        sink.record("a", record("three"));
        assert_eq!(sink.run_ids(), ["a", "b"]);
        let names: Vec<_> = sink.spans("a").into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["one", "three"]);
        assert!(sink.spans("zzz").is_empty());
    }
}
