//! The spans of a run as the in-memory capture and the local span store see
//! them: exact tree, names, attributes, one trace, nothing else; trace ids in
//! log lines; `traceparent` propagation; content capture on and off; the local
//! store's records and their rendered tree.

use crate::telemetry_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::trace::SpanData;
use telemetry_support::{
    CONVERSATION, LogBuffer, MODEL, RESPONSE_MODEL, SPANS_PER_RUN, TOOLS, mimic_run,
};
use tracing::Span;
use troupe_telemetry::genai::{self, ContentCapture};
use troupe_telemetry::testing::{CapturedSpans, capture};
use troupe_telemetry::{
    MemorySpanSink, SpanRecord, Telemetry, TelemetrySettings, propagation, render_span_tree,
};

fn attributes(span: &SpanData) -> BTreeMap<String, Value> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect()
}

fn s(value: &str) -> Value {
    Value::from(value.to_string())
}

fn find<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn capture_settings() -> TelemetrySettings {
    TelemetrySettings {
        log_filter: "info".into(),
        ..TelemetrySettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_a_run_is_one_trace_with_the_exact_tree_and_attributes() {
    let captured = CapturedSpans::new();
    let logs = LogBuffer::default();
    let telemetry = Telemetry::builder(&capture_settings())
        .span_processor(captured.clone())
        .log_writer(logs.clone())
        .build()
        .unwrap();
    let observed = {
        let _default = tracing::dispatcher::set_default(telemetry.dispatch());
        mimic_run("run-1", ContentCapture::new(false)).await
    };
    let spans = captured.spans();

    // Every step and nothing else.
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(spans.len(), SPANS_PER_RUN, "{names:?}");
    assert_eq!(
        names,
        BTreeSet::from([
            "invoke_agent main",
            "chat claude-sonnet-4-5",
            "execute_tool read_file",
            "execute_tool grep",
            "execute_tool bash",
        ])
    );

    // One trace; the agent is the root, every step its child.
    let agent = find(&spans, "invoke_agent main")[0];
    let trace = agent.span_context.trace_id();
    assert_ne!(trace, TraceId::INVALID);
    assert_eq!(agent.parent_span_id, SpanId::INVALID);
    for span in &spans {
        assert_eq!(span.span_context.trace_id(), trace, "{}", span.name);
        if span.name != "invoke_agent main" {
            assert_eq!(
                span.parent_span_id,
                agent.span_context.span_id(),
                "{}",
                span.name
            );
        }
    }
    // The agent ends last.
    assert_eq!(spans.last().unwrap().name, "invoke_agent main");

    // invoke_agent.
    assert_eq!(
        attributes(agent),
        BTreeMap::from([
            ("gen_ai.operation.name".into(), s("invoke_agent")),
            ("gen_ai.agent.name".into(), s("main")),
            ("gen_ai.conversation.id".into(), s(CONVERSATION)),
            ("troupe.run_id".into(), s("run-1")),
            ("troupe.run.status".into(), s("finished")),
        ])
    );
    assert_eq!(agent.span_kind, SpanKind::Internal);
    assert_eq!(agent.status, Status::Unset);

    // chat: the first call (ended first) with every GenAI attribute.
    let chats = find(&spans, "chat claude-sonnet-4-5");
    assert_eq!(chats.len(), 2);
    let first = chats
        .iter()
        .find(|c| attributes(c)["gen_ai.response.id"] == s("msg_1"))
        .unwrap();
    assert_eq!(
        attributes(first),
        BTreeMap::from([
            ("gen_ai.operation.name".into(), s("chat")),
            ("gen_ai.provider.name".into(), s("anthropic")),
            ("gen_ai.request.model".into(), s(MODEL)),
            ("gen_ai.conversation.id".into(), s(CONVERSATION)),
            ("gen_ai.response.model".into(), s(RESPONSE_MODEL)),
            ("gen_ai.response.id".into(), s("msg_1")),
            ("gen_ai.usage.input_tokens".into(), Value::I64(1300)),
            ("gen_ai.usage.output_tokens".into(), Value::I64(40)),
            (
                "gen_ai.usage.cache_read.input_tokens".into(),
                Value::I64(1000)
            ),
            (
                "gen_ai.usage.cache_creation.input_tokens".into(),
                Value::I64(200)
            ),
            (
                "gen_ai.response.finish_reasons".into(),
                Value::Array(Array::String(vec!["tool_use".into()]))
            ),
        ])
    );
    assert_eq!(first.span_kind, SpanKind::Client);
    assert!(first.events.is_empty(), "log lines are not span events");
    let second = chats
        .iter()
        .find(|c| attributes(c)["gen_ai.response.id"] == s("msg_2"))
        .unwrap();
    assert_eq!(
        attributes(second)["gen_ai.response.finish_reasons"],
        Value::Array(Array::String(vec!["end_turn".into()]))
    );
    assert!(second.start_time >= first.end_time);

    // execute_tool ×3: ids, permission events, the timed-out one in error.
    for (tool, call_id) in TOOLS {
        let span = find(&spans, &format!("execute_tool {tool}"))[0];
        let attrs = attributes(span);
        assert_eq!(attrs["gen_ai.operation.name"], s("execute_tool"));
        assert_eq!(attrs["gen_ai.tool.name"], s(tool));
        assert_eq!(attrs["gen_ai.tool.call.id"], s(call_id));
        assert_eq!(attrs["gen_ai.tool.type"], s("function"));
        assert!(!attrs.contains_key("gen_ai.tool.call.arguments"));
        let events: Vec<_> = span.events.iter().collect();
        assert_eq!(events.len(), 1, "{tool}: only the permission event");
        assert_eq!(events[0].name, "permission");
        let event_attrs: BTreeMap<String, Value> = events[0]
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.clone()))
            .collect();
        assert_eq!(
            event_attrs,
            BTreeMap::from([
                ("troupe.permission.decision".into(), s("allow")),
                ("troupe.permission.reason".into(), s("read-only tool")),
            ])
        );
        if tool == "bash" {
            assert_eq!(attrs["error.type"], s("timeout"));
            assert_eq!(span.status, Status::error("timeout"));
        } else {
            assert!(!attrs.contains_key("error.type"));
            assert_eq!(span.status, Status::Unset);
        }
        // The traceparent taken inside the task names this very span.
        let (_, traceparent) = observed
            .tool_traceparents
            .iter()
            .find(|(name, _)| name == tool)
            .unwrap();
        assert_eq!(
            traceparent.as_deref(),
            Some(format!("00-{trace}-{}-01", span.span_context.span_id()).as_str())
        );
    }

    // Log lines inside a step carry the run's trace id; logs outside do not.
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("streaming the first response"))
        .unwrap_or_else(|| panic!("no log line in {text}"));
    assert!(line.contains(&format!("trace_id={trace}")), "{line}");
    assert!(line.contains(" INFO "), "{line}");
    let tool_line = text
        .lines()
        .find(|l| l.contains("tool grep running"))
        .unwrap();
    assert!(
        tool_line.contains(&format!("trace_id={trace}")),
        "{tool_line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_two_runs_are_two_traces() {
    let (telemetry, captured) = capture(&TelemetrySettings::default()).unwrap();
    {
        let _default = tracing::dispatcher::set_default(telemetry.dispatch());
        mimic_run("run-a", ContentCapture::default()).await;
        mimic_run("run-b", ContentCapture::default()).await;
    }
    let traces: BTreeSet<String> = captured
        .spans()
        .iter()
        .map(|s| s.span_context.trace_id().to_string())
        .collect();
    assert_eq!(captured.len(), 2 * SPANS_PER_RUN);
    assert_eq!(traces.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_content_is_recorded_only_when_capture_is_on() {
    let (telemetry, captured) = capture(&TelemetrySettings::default()).unwrap();
    {
        let _default = tracing::dispatcher::set_default(telemetry.dispatch());
        mimic_run("run-c", ContentCapture::new(true)).await;
    }
    let spans = captured.spans();
    let first = spans
        .iter()
        .find(|c| attributes(c).get("gen_ai.response.id") == Some(&s("msg_1")))
        .unwrap();
    let attrs = attributes(first);
    let input: serde_json::Value =
        serde_json::from_str(&attrs["gen_ai.input.messages"].as_str()).unwrap();
    assert_eq!(
        input,
        serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": "find the bug"}]}])
    );
    let output: serde_json::Value =
        serde_json::from_str(&attrs["gen_ai.output.messages"].as_str()).unwrap();
    assert_eq!(output[0]["finish_reason"], "tool_use");
    let tool = find(&spans, "execute_tool grep")[0];
    assert_eq!(attributes(tool)["gen_ai.tool.call.arguments"], s("{}"));
}

#[test]
fn telemetry_a_remote_traceparent_becomes_the_parent_of_the_run() {
    let (telemetry, captured) = capture(&TelemetrySettings::default()).unwrap();
    let remote = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    tracing::dispatcher::with_default(telemetry.dispatch(), || {
        let agent = genai::agent_span(&Span::none(), "run-r", "main", "s");
        propagation::set_remote_parent(&agent, remote).unwrap();
        let tool = genai::tool_span(&agent, "bash", "c1");
        // Too late once the span started (its child exists).
        assert!(propagation::set_remote_parent(&agent, remote).is_err());
        let child_env = propagation::traceparent_of(&tool).unwrap();
        assert!(child_env.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
    });
    let spans = captured.spans();
    let agent = find(&spans, "invoke_agent main")[0];
    assert_eq!(
        agent.span_context.trace_id().to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(agent.parent_span_id.to_string(), "00f067aa0ba902b7");
    assert!(agent.parent_span_is_remote);
}

/// Deterministic times for the snapshot: the real tree and attributes, with
/// start and duration fixed per span so concurrency does not reorder lines.
fn normalised(mut records: Vec<SpanRecord>) -> Vec<SpanRecord> {
    let base = DateTime::<Utc>::from_timestamp_millis(1_780_000_000_000).unwrap();
    for record in &mut records {
        let (start, ms) = match (record.name.as_str(), record.attribute("gen_ai.response.id")) {
            ("invoke_agent main", _) => (0, 2_345),
            (_, Some("msg_1")) => (1, 812),
            ("execute_tool read_file", _) => (900, 3),
            ("execute_tool grep", _) => (901, 41),
            ("execute_tool bash", _) => (902, 1_000),
            (_, Some("msg_2")) => (2_000, 300),
            (other, _) => panic!("unexpected span {other}"),
        };
        record.start = base + Duration::milliseconds(start);
        record.end = record.start + Duration::milliseconds(ms);
        record.duration_ms = ms as f64;
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_the_local_store_keeps_the_run_and_renders_its_tree() {
    let sink = Arc::new(MemorySpanSink::new());
    let telemetry = Telemetry::builder(&TelemetrySettings::default())
        .local_sink(sink.clone())
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap();
    {
        let _default = tracing::dispatcher::set_default(telemetry.dispatch());
        // A step outside any run (an MCP connection at start-up) is not stored.
        drop(genai::mcp_connect_span(&Span::none(), "everything", "pipe"));
        mimic_run("run-7", ContentCapture::new(true)).await;
    }
    assert_eq!(sink.run_ids(), ["run-7"]);
    let records = sink.spans("run-7");
    assert_eq!(records.len(), SPANS_PER_RUN);
    let trace = &records[0].trace_id;
    assert!(records.iter().all(|r| &r.trace_id == trace));
    // Content never reaches the local store.
    assert!(
        records
            .iter()
            .all(|r| !r.attributes.contains_key("gen_ai.input.messages"))
    );
    // Records are plain JSON for the store.
    let json = serde_json::to_value(&records[0]).unwrap();
    let back: SpanRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back, records[0]);

    let text = render_span_tree(&normalised(records));
    let expected = "\
invoke_agent main  2.35 s  run=run-7 conversation=sess-1 status=finished
├─ chat claude-sonnet-4-5  812 ms  model=claude-sonnet-4-5-20250929 in=1300 out=40 cache_read=1000 cache_write=200 finish=tool_use
├─ execute_tool read_file  3.0 ms  call=call_1
│  · permission allow: read-only tool
├─ execute_tool grep  41 ms  call=call_2
│  · permission allow: read-only tool
├─ execute_tool bash  1.00 s  call=call_3 error=timeout ERROR
│  · permission allow: read-only tool
└─ chat claude-sonnet-4-5  300 ms  model=claude-sonnet-4-5-20250929 in=1330 out=12 cache_read=1300 cache_write=0 finish=end_turn
";
    assert_eq!(text, expected, "\n{text}");
}

#[test]
fn telemetry_a_live_runs_finished_steps_are_stored_before_the_run_ends() {
    let sink = Arc::new(MemorySpanSink::new());
    let telemetry = Telemetry::builder(&TelemetrySettings::default())
        .local_sink(sink.clone())
        .log_writer(tracing_subscriber::fmt::TestWriter::new())
        .build()
        .unwrap();
    tracing::dispatcher::with_default(telemetry.dispatch(), || {
        let agent = genai::agent_span(&Span::none(), "run-live", "main", "s");
        let chat = genai::chat_span(&agent, "openai", "gpt-5", "s");
        drop(chat);
        let stored = sink.spans("run-live");
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].name, "chat gpt-5");
        let sub = genai::agent_span(&agent, "run-live", "main/explorer-1", "s2");
        let sub_chat = genai::chat_span(&sub, "openai", "gpt-5", "s2");
        drop(sub_chat);
        drop(sub);
        assert_eq!(sink.spans("run-live").len(), 3);
        drop(agent);
    });
    let names: Vec<String> = sink.spans("run-live").into_iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "chat gpt-5",
            "chat gpt-5",
            "invoke_agent main/explorer-1",
            "invoke_agent main"
        ]
    );
    let tree = render_span_tree(&sink.spans("run-live"));
    let expected = [
        "invoke_agent main  ",
        "├─ chat gpt-5  ",
        "└─ invoke_agent main/explorer-1  ",
        "   └─ chat gpt-5  ",
    ];
    assert_eq!(tree.lines().count(), expected.len(), "{tree}");
    for (line, start) in tree.lines().zip(expected) {
        assert!(
            line.starts_with(start),
            "{line:?} should start with {start:?}\n{tree}"
        );
    }
}

#[test]
fn telemetry_a_span_table_carries_out_a_machines_operations_as_the_helpers_would() {
    use troupe_protocol::events::{ApprovalOutcome, RunStatus};
    use troupe_protocol::model::Usage;
    use troupe_telemetry::genai::ToolErrorKind;
    use troupe_telemetry::span_ops::{SpanId as Id, SpanKind as Kind, SpanNote, SpanOp, SpanTable};

    let (telemetry, captured) = capture(&TelemetrySettings::default()).unwrap();
    let _default = tracing::dispatcher::set_default(telemetry.dispatch());
    let open = |id: u64, parent: Option<u64>, kind: Kind| SpanOp::Open {
        id: Id(id),
        parent: parent.map(Id),
        kind,
    };
    let note = |id: u64, note: SpanNote| SpanOp::Note { id: Id(id), note };
    let close = |id: u64| SpanOp::Close { id: Id(id) };
    let mut table = SpanTable::new(Span::none());
    for op in [
        open(
            0,
            None,
            Kind::Agent {
                run_id: "run-t".into(),
                agent: "main".into(),
                conversation_id: CONVERSATION.into(),
            },
        ),
        open(
            1,
            Some(0),
            Kind::Chat {
                provider: "anthropic".into(),
                entry: "claude".into(),
                model: MODEL.into(),
                conversation_id: CONVERSATION.into(),
            },
        ),
        note(
            1,
            SpanNote::Usage(Usage {
                input: 10,
                output: 5,
                cache_read: 0,
                cache_write: 0,
            }),
        ),
        close(1),
        open(
            2,
            Some(0),
            Kind::Tool {
                tool: "bash".into(),
                call_id: "c1".into(),
            },
        ),
        open(
            3,
            Some(2),
            Kind::Approval {
                tool: "bash".into(),
                call_id: "c1".into(),
                approval_id: "run-t-1".into(),
            },
        ),
        note(3, SpanNote::Approval(ApprovalOutcome::Deny)),
        close(3),
        note(2, SpanNote::ToolError(ToolErrorKind::Denied)),
        close(2),
        // Ops on spans that are gone change nothing.
        note(2, SpanNote::Error("late")),
        close(7),
        note(0, SpanNote::RunEnd(RunStatus::Finished)),
    ] {
        table.apply(op);
    }
    assert_eq!(captured.len(), 3, "closed spans have ended");
    assert_eq!(table.open_count(), 1);
    // Work that runs in a span that is not open stays in the trace.
    assert_eq!(table.get(Id(9)).id(), Span::none().id());
    table.apply(close(0));
    let spans = captured.spans();
    assert_eq!(spans.len(), 4);
    let agent = find(&spans, "invoke_agent main")[0];
    assert_eq!(agent.parent_span_id, SpanId::INVALID);
    let chat = find(&spans, &format!("chat {MODEL}"))[0];
    let tool = find(&spans, "execute_tool bash")[0];
    let wait = find(&spans, "await_approval bash")[0];
    assert_eq!(chat.parent_span_id, agent.span_context.span_id());
    assert_eq!(tool.parent_span_id, agent.span_context.span_id());
    assert_eq!(wait.parent_span_id, tool.span_context.span_id());
    assert_eq!(
        attributes(chat)["gen_ai.usage.input_tokens"],
        Value::I64(10)
    );
    assert_eq!(attributes(chat)["gen_ai.provider.name"], s("anthropic"));
    assert_eq!(attributes(chat)["troupe.provider.entry"], s("claude"));
    assert_eq!(attributes(tool)["error.type"], s("denied"));
    assert_eq!(attributes(wait)["troupe.approval.outcome"], s("deny"));
    assert_eq!(attributes(agent)["troupe.run.status"], s("finished"));

    // A span left open ends when its table is dropped.
    let mut table = SpanTable::new(Span::none());
    table.apply(open(
        0,
        None,
        Kind::Compaction {
            trigger: "auto".into(),
            tokens_before: 100,
        },
    ));
    drop(table);
    assert_eq!(captured.len(), 5);
}
