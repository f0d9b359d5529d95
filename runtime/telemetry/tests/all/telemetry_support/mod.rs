//! Shared by the telemetry tests: a workload that creates the spans of one
//! small run with the `genai` helpers (agent → chat → three concurrent tool
//! calls in tokio tasks with the parent passed explicitly → chat), and small
//! helpers to read attributes.
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex};

use tracing::Span;
use tracing::instrument::{Instrument, WithSubscriber};
use troupe_protocol::events::RunStatus;
use troupe_protocol::model::{Message, StopReason, Usage};
use troupe_protocol::permission::Decision;
use troupe_telemetry::genai::{self, ContentCapture, ToolErrorKind};
use troupe_telemetry::propagation;

/// The model asked for.
pub(crate) const MODEL: &str = "claude-sonnet-4-5";
/// The model that answered.
pub(crate) const RESPONSE_MODEL: &str = "claude-sonnet-4-5-20250929";
/// The session id.
pub(crate) const CONVERSATION: &str = "sess-1";
/// The tools called in the middle turn, with their call ids.
pub(crate) const TOOLS: [(&str, &str); 3] = [
    ("read_file", "call_1"),
    ("grep", "call_2"),
    ("bash", "call_3"),
];
/// Spans one workload creates.
pub(crate) const SPANS_PER_RUN: usize = 6;

/// The usage of the first model call.
pub(crate) fn first_usage() -> Usage {
    Usage {
        input: 100,
        output: 40,
        cache_read: 1000,
        cache_write: 200,
    }
}

/// What the workload saw while it ran.
#[derive(Debug, Default, Clone)]
pub(crate) struct Observed {
    /// `traceparent` of each tool span, by tool name, taken inside its task.
    pub tool_traceparents: Vec<(String, Option<String>)>,
}

/// Creates the spans of one run under the current default dispatcher (tasks
/// inherit it with `with_current_subscriber`). `bash` times out.
pub(crate) async fn mimic_run(run_id: &str, capture: ContentCapture) -> Observed {
    let agent = genai::agent_span(&Span::none(), run_id, "main", CONVERSATION);

    // Not a step of the run: must never reach OpenTelemetry.
    let unrelated = tracing::info_span!(parent: &agent, "unrelated_helper_span");
    drop(unrelated);

    let chat = genai::chat_span(&agent, "anthropic", MODEL, CONVERSATION);
    capture.record_input_messages(&chat, &[Message::user_text("find the bug")]);
    async {
        tracing::info!("streaming the first response");
        tokio::task::yield_now().await;
    }
    .instrument(chat.clone())
    .await;
    genai::record_response(&chat, RESPONSE_MODEL, Some("msg_1"));
    genai::record_usage(&chat, &first_usage());
    genai::record_finish(&chat, &StopReason::ToolUse);
    capture.record_output_message(
        &chat,
        &Message::assistant_text("calling tools"),
        &StopReason::ToolUse,
    );
    drop(chat);

    let observed = Arc::new(Mutex::new(Observed::default()));
    let mut tasks = Vec::new();
    for (tool, call_id) in TOOLS {
        let parent = agent.clone();
        let observed = observed.clone();
        tasks.push(tokio::spawn(
            async move {
                let span = genai::tool_span(&parent, tool, call_id);
                drop(parent);
                genai::permission_event(
                    &span,
                    &Decision::Allow {
                        reason: "read-only tool".into(),
                    },
                );
                capture.record_tool_arguments(&span, "{}");
                let traceparent = async {
                    // An ordinary log line inside a step: not a span event.
                    tracing::warn!("tool {tool} running");
                    tokio::task::yield_now().await;
                    propagation::current_traceparent()
                }
                .instrument(span.clone())
                .await;
                if tool == "bash" {
                    genai::record_tool_error(&span, ToolErrorKind::TimedOut);
                }
                observed
                    .lock()
                    .unwrap()
                    .tool_traceparents
                    .push((tool.to_string(), traceparent));
            }
            .with_current_subscriber(),
        ));
    }
    for task in tasks {
        task.await.expect("tool task panicked");
    }

    let chat = genai::chat_span(&agent, "anthropic", MODEL, CONVERSATION);
    genai::record_response(&chat, RESPONSE_MODEL, Some("msg_2"));
    genai::record_usage(
        &chat,
        &Usage {
            input: 30,
            output: 12,
            cache_read: 1300,
            cache_write: 0,
        },
    );
    genai::record_finish(&chat, &StopReason::EndTurn);
    drop(chat);

    genai::record_run_end(&agent, RunStatus::Finished);
    drop(agent);
    observed.lock().unwrap().clone()
}

/// A log writer that keeps everything written, for assertions on log lines.
#[derive(Clone, Default)]
pub(crate) struct LogBuffer(pub Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
