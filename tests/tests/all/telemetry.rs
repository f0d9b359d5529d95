//! The span tree of a real run (SPEC §11): the actor tree against the scripted
//! model, spans captured in memory as the product's pipeline produces them.
//! One trace per run; one span per agent run, model call, tool call and
//! approval wait; GenAI attributes; permission decisions as span events.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use troupe_actors::Approver;
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Matcher, Response, Script, Turn, Usage, text, tool_call};
use troupe_telemetry::{TelemetrySettings, testing};
use troupe_tests::tools::PanicTool;
use troupe_tests::{Harness, RunOptions, run_events};

fn attributes(span: &SpanData) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

fn named<'a>(spans: &'a [SpanData], prefix: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_is_one_trace_with_a_span_for_every_step() {
    let (telemetry, captured) = testing::capture(&TelemetrySettings::default()).unwrap();
    // Everything (actors, executors, the model stream) runs on this thread.
    let _default = tracing::dispatcher::set_default(telemetry.dispatch());

    let script = Script::new()
        .then(
            Response::empty()
                .and_tool_call("read_file", json!({"path": "a.txt"}))
                .and_tool_call("glob", json!({"pattern": "*.txt"}))
                .and_tool_call("explode", json!({"label": "x"}))
                .with_usage(Usage::new(100, 20).with_cache_creation(50)),
        )
        .then(tool_call(
            "write_file",
            json!({"path": "b.txt", "content": "B"}),
        ))
        .then(text("done").with_usage(Usage::new(10, 5).with_cache_read(150)));
    let h = Harness::anthropic(script).await;
    std::fs::write(h.root().join("a.txt"), "alpha\n").unwrap();
    let env = h.env_with(vec![Arc::new(PanicTool::new(true))]);
    let mut options = RunOptions::bypass(env);
    options.mode = PermissionMode::Default;
    options.approver = Approver::Absent;
    let mut run = h.submit("go", options).await;
    let events = run_events(&mut run).await;
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::RunFinished {
            status: RunStatus::Finished,
            ..
        }
    ));
    // The root span ends with the run; its record arrives with the outcome.
    let spans = captured.spans();

    let roots = named(&spans, "invoke_agent");
    assert_eq!(
        roots.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = roots[0];
    let trace = root.span_context.trace_id();
    assert!(
        spans.iter().all(|s| s.span_context.trace_id() == trace),
        "one trace"
    );
    assert_eq!(root.name, "invoke_agent main");
    let root_attrs = attributes(root);
    assert_eq!(root_attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(root_attrs["gen_ai.conversation.id"], run.session_id);
    assert_eq!(root_attrs["troupe.run_id"], run.run_id);

    let chats = named(&spans, "chat ");
    assert_eq!(chats.len(), 3);
    for chat in &chats {
        assert_eq!(chat.name, "chat scripted-model");
        assert_eq!(chat.parent_span_id, root.span_context.span_id());
        let attrs = attributes(chat);
        assert_eq!(attrs["gen_ai.operation.name"], "chat");
        // The provider system, as the conventions name it; the entry's own
        // name beside it.
        assert_eq!(attrs["gen_ai.provider.name"], "anthropic");
        assert_eq!(attrs["troupe.provider.entry"], "scripted");
        assert_eq!(attrs["gen_ai.request.model"], "scripted-model");
        assert_eq!(attrs["gen_ai.response.model"], "scripted-model");
        // The id the server gave the response (`message_start.message.id`).
        let id = &attrs["gen_ai.response.id"];
        assert!(id.starts_with("msg_01") && id.len() > 20, "{id}");
        assert_eq!(attrs["gen_ai.conversation.id"], run.session_id);
        assert!(attrs.contains_key("gen_ai.usage.input_tokens"));
        assert!(attrs.contains_key("gen_ai.usage.output_tokens"));
        assert!(attrs.contains_key("gen_ai.response.finish_reasons"));
        assert!(
            !attrs.contains_key("gen_ai.input.messages"),
            "content is off by default"
        );
    }
    let mut ids: Vec<String> = chats
        .iter()
        .map(|chat| attributes(chat)["gen_ai.response.id"].clone())
        .collect();
    let mut sent: Vec<String> = h
        .server
        .requests()
        .into_iter()
        .filter_map(|request| request.response_id)
        .collect();
    ids.sort();
    sent.sort();
    assert_eq!(ids, sent, "each chat span names its own response");
    let first = attributes(chats[0]);
    // Input tokens count cached input too (GenAI conventions).
    assert_eq!(first["gen_ai.usage.input_tokens"], "150");
    assert_eq!(first["gen_ai.usage.output_tokens"], "20");
    assert_eq!(first["gen_ai.usage.cache_creation.input_tokens"], "50");
    assert!(first["gen_ai.response.finish_reasons"].contains("tool_use"));
    assert_eq!(
        attributes(chats[2])["gen_ai.usage.cache_read.input_tokens"],
        "150"
    );

    let tools = named(&spans, "execute_tool");
    let by_tool: HashMap<String, &SpanData> = tools
        .iter()
        .map(|s| (attributes(s)["gen_ai.tool.name"].clone(), *s))
        .collect();
    assert_eq!(tools.len(), 4);
    for name in ["read_file", "glob", "explode", "write_file"] {
        let span = by_tool[name];
        assert_eq!(span.name, format!("execute_tool {name}"));
        assert_eq!(span.parent_span_id, root.span_context.span_id());
        assert!(attributes(span)["gen_ai.tool.call.id"].starts_with("toolu_"));
        let decisions: Vec<String> = span
            .events
            .iter()
            .filter(|e| e.name == "permission")
            .flat_map(|e| e.attributes.iter())
            .filter(|kv| kv.key.as_str() == "troupe.permission.decision")
            .map(|kv| kv.value.to_string())
            .collect();
        // The engine asks for the write; with nobody to ask it becomes a denial.
        let expected = if name == "write_file" { "ask" } else { "allow" };
        assert_eq!(decisions, vec![expected.to_string()], "{name}");
    }
    assert_eq!(by_tool["read_file"].status, Status::Unset);
    assert!(matches!(by_tool["explode"].status, Status::Error { .. }));
    assert_eq!(attributes(by_tool["explode"])["error.type"], "panic");
    assert!(matches!(by_tool["write_file"].status, Status::Error { .. }));
    assert_eq!(attributes(by_tool["write_file"])["error.type"], "denied");

    // Nothing else: no spans of libraries or internals.
    assert_eq!(spans.len(), 1 + 3 + 4);
}

#[tokio::test(flavor = "current_thread")]
async fn commands_run_by_a_tool_continue_the_trace() {
    let (telemetry, captured) = testing::capture(&TelemetrySettings::default()).unwrap();
    let _default = tracing::dispatcher::set_default(telemetry.dispatch());
    let script = Script::new()
        .then(tool_call(
            "bash",
            json!({"command": "echo \"tp=$TRACEPARENT\""}),
        ))
        .then(text("done"));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("go", RunOptions::bypass(env)).await;
    run_events(&mut run).await;
    let output = h.server.requests()[1].tool_results()[0].content.clone();
    let spans = captured.spans();
    let bash = named(&spans, "execute_tool bash")[0];
    let expected = format!(
        "tp=00-{}-{}-01",
        bash.span_context.trace_id(),
        bash.span_context.span_id()
    );
    assert!(output.contains(&expected), "{output} lacks {expected}");
}

#[tokio::test(flavor = "current_thread")]
async fn each_child_agent_is_an_invoke_agent_span_under_its_execute_tool_agent_span() {
    let (telemetry, captured) = testing::capture(&TelemetrySettings::default()).unwrap();
    let _default = tracing::dispatcher::set_default(telemetry.dispatch());
    let fork = |task: &str| json!({"description": "part", "prompt": task, "fork": true});
    let script = Script::new()
        .then(
            Response::empty()
                .and_tool_call("agent", fork("SPAN-A"))
                .and_tool_call("agent", fork("SPAN-B"))
                .and_tool_call("agent", fork("SPAN-C")),
        )
        .then(
            Turn::new(tool_call("glob", json!({"pattern": "*"})))
                .when(Matcher::any_user_contains("SPAN-A")),
        )
        .then(Turn::new(text("Scope: a.")).when(Matcher::any_user_contains("SPAN-A")))
        .then(Turn::new(text("Scope: b.")).when(Matcher::any_user_contains("SPAN-B")))
        .then(Turn::new(text("Scope: c.")).when(Matcher::any_user_contains("SPAN-C")))
        .then(Turn::new(text("merged")).when(Matcher::first_user_contains("TREE")));
    let h = Harness::anthropic(script).await;
    let env = h.env_with(vec![]);
    let mut run = h.submit("TREE of agents", RunOptions::bypass(env)).await;
    run_events(&mut run).await;
    let spans = captured.spans();
    let trace = spans[0].span_context.trace_id();
    assert!(
        spans.iter().all(|s| s.span_context.trace_id() == trace),
        "one trace"
    );
    let agents = named(&spans, "invoke_agent");
    let root = agents
        .iter()
        .find(|s| s.name == "invoke_agent main")
        .expect("the main agent's span");
    let spawns: Vec<&SpanData> = named(&spans, "execute_tool agent")
        .into_iter()
        .filter(|s| s.parent_span_id == root.span_context.span_id())
        .collect();
    assert_eq!(spawns.len(), 3);
    for n in 1..=3 {
        let name = format!("invoke_agent main/fork-{n}");
        let child = agents
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name}"));
        let parent = spawns
            .iter()
            .find(|s| s.span_context.span_id() == child.parent_span_id)
            .unwrap_or_else(|| panic!("{name} is not under an execute_tool agent span"));
        assert_eq!(attributes(parent)["gen_ai.tool.name"], "agent");
        // The child's own steps hang below its own span.
        let chats = named(&spans, "chat ")
            .into_iter()
            .filter(|s| s.parent_span_id == child.span_context.span_id())
            .count();
        assert_eq!(chats, if n == 1 { 2 } else { 1 }, "{name}");
    }
    let glob = named(&spans, "execute_tool glob")[0];
    let fork_one = agents
        .iter()
        .find(|s| s.name == "invoke_agent main/fork-1")
        .unwrap();
    assert_eq!(glob.parent_span_id, fork_one.span_context.span_id());
    assert_eq!(agents.len(), 4);
}
