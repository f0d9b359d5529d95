//! The model-call half of a turn: budget and turn checks, the request (with
//! the plan-mode reminder of its iteration in plan mode), the
//! stream's events, and what its end means (finish, stop on a loop limit, or
//! record the calls and run them). Call ids a response repeats are repaired
//! before the response is recorded. Every fifth completed turn of the
//! session's main agent asks for a background memory update.

use crate::StopCause;
use crate::history::{call_ids, complete_results, repair_call_ids};
use crate::prompt::{plan_reminder, task_plan_reminder, with_plan_reminder};
use crate::{EMPTY_RESPONSE_PLACEHOLDER, RunOutcome};
use troupe_llm::{ChatRequest, ProviderError, ResponseAccumulator, ResponseMetadata, StreamEvent};
use troupe_protocol::events::{EventKind, NOTICE_MODEL_RETRY, RunStatus};
use troupe_protocol::model::{ContentBlock, Message, StopReason, ToolCall, Usage};
use troupe_telemetry::span_ops::{SpanId, SpanKind, SpanNote};

use super::{AfterSave, AgentLoop, Effect, Phase, ResponseSaved, Streaming, close, note};
use crate::plan::CallClass;

impl AgentLoop {
    /// Checks the run's budgets and the turn limit, then starts one model call.
    pub(super) fn model_call(&mut self, out: &mut Vec<Effect>) {
        if self.interrupted {
            self.interrupt_now(out);
            return;
        }
        if self.take_queued_messages(out) {
            // Durable before the model sees it; the save comes back here.
            self.save_then(AfterSave::ModelCall, out);
            return;
        }
        if self.offload_step(out) {
            return;
        }
        if let Some(hit) = self.account.check(self.now) {
            // Budgets are the run's: the whole tree stops.
            self.stop_tree(StopCause::Limit(hit.clone()), out);
            self.stop_on_limit(hit, out);
            return;
        }
        if self.summary_step(out) {
            return;
        }
        let n = match self.guard.begin_turn() {
            Ok(n) => n,
            Err(hit) => {
                self.stop_on_limit(hit, out);
                return;
            }
        };
        out.push(Effect::Emit(EventKind::Iteration { n }));
        // A summary prepared ahead runs beside this call, never before it.
        self.prepare_step(out);
        self.epoch += 1;
        // Tools of servers that joined are offered from this request on,
        // those of servers that left are not.
        if let Some(latest) = self
            .catalogue_source
            .as_ref()
            .and_then(|source| source.latest(&self.catalogue))
        {
            self.catalogue = latest;
        }
        // The mode is read once per request: tools and reminder agree. The
        // plan reminder rides in this request's environment part only.
        let mode = self.permissions.mode();
        let messages = self.request_messages();
        let system = with_plan_reminder(&self.system, plan_reminder(mode, n));
        let task_plan = task_plan_reminder(self.transcript.task_plan(), &messages);
        let request = ChatRequest {
            system: with_plan_reminder(&system, task_plan.as_deref()),
            messages,
            tools: self.catalogue.offered(mode).to_vec(),
            session_id: Some(self.cache_key.clone()),
        };
        let span = self.open_span(
            None,
            SpanKind::Chat {
                provider: self.provider_system.clone(),
                entry: self.provider_name.clone(),
                model: self.model.clone(),
                conversation_id: self.session_id.clone(),
            },
            out,
        );
        if self.capture.is_enabled() {
            let system = format!(
                "{}\n\n{}",
                request.system.stable, request.system.environment
            );
            note(out, span, SpanNote::SystemInstructions(system));
            note(out, span, SpanNote::InputMessages(request.messages.clone()));
        }
        self.phase = Phase::Streaming(Streaming {
            epoch: self.epoch,
            acc: ResponseAccumulator::new(),
            span,
        });
        out.push(Effect::CallModel {
            epoch: self.epoch,
            request,
            span,
        });
    }

    /// The stream of the current call, if `epoch` is its epoch.
    fn streaming(&mut self, epoch: u64) -> Option<&mut Streaming> {
        match &mut self.phase {
            Phase::Streaming(streaming) if streaming.epoch == epoch => Some(streaming),
            _ => None,
        }
    }

    pub(super) fn on_model_event(&mut self, epoch: u64, event: StreamEvent, out: &mut Vec<Effect>) {
        let Some(streaming) = self.streaming(epoch) else {
            return;
        };
        match &event {
            StreamEvent::TextDelta(text) if !text.is_empty() => {
                out.push(Effect::Emit(EventKind::TextDelta { text: text.clone() }))
            }
            StreamEvent::ThinkingDelta(text) if !text.is_empty() => {
                out.push(Effect::Emit(EventKind::ThinkingDelta {
                    text: text.clone(),
                }))
            }
            StreamEvent::Retrying(retrying) => out.push(Effect::Emit(EventKind::Notice {
                text: retrying.notice(),
                code: Some(NOTICE_MODEL_RETRY.to_string()),
            })),
            _ => {}
        }
        streaming.acc.push(&event);
    }

    /// Ends the current stream: its usage is counted and noted on its span
    /// (which the caller closes).
    fn end_stream(&mut self, out: &mut Vec<Effect>) -> Option<(ResponseAccumulator, SpanId)> {
        let Phase::Streaming(_) = &self.phase else {
            return None;
        };
        let Phase::Streaming(streaming) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return None;
        };
        let usage = streaming.acc.usage();
        note(out, streaming.span, SpanNote::Usage(usage));
        self.count_usage(&usage);
        Some((streaming.acc, streaming.span))
    }

    pub(super) fn count_usage(&mut self, usage: &Usage) {
        self.usage.add(usage);
        self.account.add_usage(usage, self.price.as_ref());
    }

    /// A failed model call: keep what was delivered, close the history, end.
    pub(super) fn on_model_failed(
        &mut self,
        epoch: u64,
        error: ProviderError,
        out: &mut Vec<Effect>,
    ) {
        if self.streaming(epoch).is_none() {
            return;
        }
        let Some((acc, span)) = self.end_stream(out) else {
            return;
        };
        if *acc.metadata() != ResponseMetadata::default() {
            note(out, span, metadata_note(&acc, &self.model));
        }
        note(out, span, SpanNote::ChatError(error.kind));
        close(out, span);
        if error.kind == troupe_protocol::model::ProviderErrorKind::PromptTooLong
            && acc.blocks().is_empty()
            && self.emergency(out)
        {
            // Compacted once, then the call is tried again.
            return;
        }
        out.push(Effect::Emit(EventKind::Error {
            kind: error.kind.as_str().to_string(),
            message: error.to_string(),
        }));
        let closing = format!("(The model request failed: {}.)", error.message);
        self.keep_partial_response(
            acc.into_message(),
            "(not run: the model response was cut off)",
        );
        self.transcript.close(&closing);
        self.finish_with(
            RunOutcome {
                status: RunStatus::Error,
                stop_reason: "provider_error".into(),
                final_text: closing,
                usage: Usage::default(),
            },
            out,
        );
    }

    /// Keeps a partial response in history; calls it contains are answered
    /// with `unrun_text` so the history stays valid.
    pub(super) fn keep_partial_response(&mut self, mut partial: Message, unrun_text: &str) {
        if partial.content.is_empty() {
            return;
        }
        self.repair_call_ids(&mut partial);
        let calls: Vec<ToolCall> = partial.tool_calls().cloned().collect();
        self.transcript.push(partial);
        if !calls.is_empty() {
            let results = complete_results(&calls, Vec::new(), unrun_text);
            self.transcript.push(Message::tool_results(results));
        }
    }

    /// Gives the calls of a response ids unique in the whole history before
    /// it is recorded or anything runs (see [`repair_call_ids`]).
    fn repair_call_ids(&self, message: &mut Message) {
        if message.tool_calls().next().is_none() {
            return;
        }
        let taken = call_ids(self.transcript.messages());
        for renamed in repair_call_ids(message, &taken) {
            tracing::warn!(
                from = %renamed.from,
                to = %renamed.to,
                index = renamed.index,
                "the provider repeated a tool call id; the call gets a fresh one"
            );
        }
    }

    pub(super) fn on_model_ended(&mut self, epoch: u64, out: &mut Vec<Effect>) {
        if self.streaming(epoch).is_none() {
            return;
        }
        let Some((acc, span)) = self.end_stream(out) else {
            return;
        };
        let usage = acc.usage();
        let reason = acc.stop_reason().cloned().unwrap_or(StopReason::EndTurn);
        note(out, span, metadata_note(&acc, &self.model));
        note(out, span, SpanNote::Finish(reason.clone()));
        out.push(Effect::Emit(EventKind::usage(&usage)));
        let mut message = acc.into_message();
        if message.content.is_empty() {
            message.content.push(ContentBlock::Text {
                text: EMPTY_RESPONSE_PLACEHOLDER.to_string(),
            });
        }
        self.repair_call_ids(&mut message);
        if self.capture.is_enabled() {
            note(
                out,
                span,
                SpanNote::OutputMessage {
                    message: message.clone(),
                    reason,
                },
            );
        }
        close(out, span);
        let calls: Vec<ToolCall> = message.tool_calls().cloned().collect();
        let text = message.text();
        self.transcript.push(message);
        self.re_anchor(&usage);
        self.turn_done();
        self.memory_step(out);
        if calls.is_empty() {
            self.end_turn(
                RunOutcome {
                    status: RunStatus::Finished,
                    stop_reason: "end_turn".into(),
                    final_text: text,
                    usage: Usage::default(),
                },
                out,
            );
            return;
        }
        let catalogue = self.catalogue.clone();
        if let Some(hit) = self
            .guard
            .observe_calls(&calls, |name| catalogue.contains(name))
        {
            let notice = hit.notice();
            let results = complete_results(&calls, Vec::new(), &format!("Not run. {notice}"));
            self.transcript.push(Message::tool_results(results));
            self.stop_on_limit(hit, out);
            return;
        }
        // Calls that change something are durable before any of them runs:
        // a crash during execution leaves them answered "interrupted", never
        // re-run. Calls that only read may run again after a crash (the model
        // asks anew), so a response of nothing else runs at once and is made
        // durable with its results, before the next request: one write a
        // turn instead of two. Not where a PreToolUse hook could rewrite a
        // call into one that changes something.
        let only_reads = calls.iter().all(|call| {
            catalogue.class(&call.name, &call.input) == CallClass::ReadOnly
                && !self
                    .hooks
                    .any_for(troupe_hooks::HookEvent::PreToolUse, Some(&call.name))
        });
        if only_reads && !self.interrupted {
            self.start_execution(calls, ResponseSaved::WithResults, out);
        } else {
            self.save_then(AfterSave::Execute(calls), out);
        }
    }
}

impl AgentLoop {
    /// After a completed turn of the main agent: every
    /// [`troupe_tools::memory::DISTIL_EVERY_TURNS`] turns of the session, the
    /// project memory is updated in the background from the conversation.
    fn memory_step(&self, out: &mut Vec<Effect>) {
        if self.spec.depth > 0 || self.spec.is_fork {
            return;
        }
        let messages = self.transcript.messages();
        let completed = messages
            .iter()
            .filter(|message| message.role == troupe_protocol::model::Role::Assistant)
            .count();
        if troupe_tools::memory::distil_due(completed) {
            out.push(Effect::UpdateMemory {
                digest: troupe_tools::memory::conversation_digest(messages),
            });
        }
    }
}

/// What the provider said about its response, for its chat span: the model
/// that answered (the requested one when the provider named none) and the
/// response id when it sent one.
fn metadata_note(acc: &ResponseAccumulator, requested: &str) -> SpanNote {
    let metadata = acc.metadata();
    SpanNote::Response {
        model: metadata
            .model
            .clone()
            .unwrap_or_else(|| requested.to_string()),
        response_id: metadata.id.clone(),
    }
}

impl AgentLoop {
    /// Keeps text the person wrote during the run for the next model call; a
    /// loop that is over takes nothing more.
    pub(super) fn queue_message(&mut self, text: String) {
        if matches!(self.phase, Phase::Done) || text.trim().is_empty() {
            return;
        }
        self.queued_messages.push(text);
    }

    /// Moves the queued text into the history as one user message (one text
    /// block per message written) and announces each; true when there was any.
    pub(super) fn take_queued_messages(&mut self, out: &mut Vec<Effect>) -> bool {
        if self.queued_messages.is_empty() {
            return false;
        }
        let texts = std::mem::take(&mut self.queued_messages);
        for text in &texts {
            out.push(Effect::Emit(EventKind::UserMessage { text: text.clone() }));
        }
        self.transcript.push(Message {
            role: troupe_protocol::model::Role::User,
            content: texts
                .into_iter()
                .map(|text| ContentBlock::Text { text })
                .collect(),
        });
        true
    }
}
