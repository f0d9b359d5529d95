//! How a loop ends: a limit, an interruption (cancellation or a shared budget
//! from above), a store that refuses writes, or the last save. Every ending
//! leaves a valid history that ends with an assistant message (SPEC §3).

use crate::history::complete_results;
use crate::subagent::MAX_DEPTH;
use crate::{CLEANUP_GRACE, LimitHit, RunOutcome, StopCause};
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_telemetry::genai::ToolErrorKind;
use troupe_telemetry::span_ops::SpanNote;
use troupe_tools::CANCELLED_RESULT;

use super::{AfterSave, AgentLoop, Cancelling, Effect, Phase, close, note};

/// The text that closes a history whose store refused a write.
const STORE_FAILED_CLOSING: &str = "(The run stopped: its history could not be saved.)";

impl AgentLoop {
    /// Stops on a limit this agent ran into: notice, closed history, end.
    pub(super) fn stop_on_limit(&mut self, hit: LimitHit, out: &mut Vec<Effect>) {
        let notice = hit.notice();
        out.push(Effect::Emit(EventKind::notice(notice.clone())));
        self.transcript.close(&notice);
        self.finish_with(
            RunOutcome {
                status: RunStatus::Stopped,
                stop_reason: hit.stop_reason().to_string(),
                final_text: notice,
                usage: Usage::default(),
            },
            out,
        );
    }

    /// Saves the closed history, then ends with `outcome` (at once when the
    /// store already failed).
    pub(super) fn finish_with(&mut self, outcome: RunOutcome, out: &mut Vec<Effect>) {
        if self.store_failed {
            self.finished(outcome, out);
        } else {
            self.save_then(AfterSave::Finish(outcome), out);
        }
    }

    /// The loop is over: the span ends before anyone hears of it.
    pub(super) fn finished(&mut self, mut outcome: RunOutcome, out: &mut Vec<Effect>) {
        outcome.usage = self.usage;
        note(out, self.span, SpanNote::RunEnd(outcome.status));
        close(out, self.span);
        if self.task.is_some() {
            out.push(Effect::Emit(EventKind::SubagentFinished {
                status: outcome.status,
            }));
        }
        self.phase = Phase::Done;
        // The interpreter releases whatever still hangs below this agent.
        out.push(Effect::Finished(outcome));
    }

    /// Stops the run's whole tree: records `cause` with the run's account
    /// (true when it was the first cause) and has the interpreter cancel the
    /// tree. This agent takes no new work from here on; it hears of the stop
    /// as every agent does ([`super::Input::Interrupted`]).
    pub(super) fn stop_tree(&mut self, cause: StopCause, out: &mut Vec<Effect>) -> bool {
        let first = self.account.stop(cause);
        out.push(Effect::StopTree);
        self.interrupted = true;
        first
    }

    /// The outcome of an interruption, from the run's stop cause.
    fn interruption(&self) -> RunOutcome {
        match self.account.stop_cause().as_ref() {
            Some(StopCause::Limit(hit)) => RunOutcome {
                status: RunStatus::Stopped,
                stop_reason: hit.stop_reason().to_string(),
                final_text: hit.notice(),
                usage: Usage::default(),
            },
            Some(StopCause::Cancelled) | None => RunOutcome {
                status: RunStatus::Cancelled,
                stop_reason: "cancelled".into(),
                final_text: CANCELLED_RESULT.to_string(),
                usage: Usage::default(),
            },
        }
    }

    /// [`super::Input::Interrupted`]: the agent's token was cancelled. A save
    /// in flight is waited for first, at most [`crate::SAVE_DEADLINE`].
    pub(super) fn interrupt(&mut self, out: &mut Vec<Effect>) {
        self.interrupted = true;
        match &self.phase {
            Phase::Done => {}
            Phase::Saving(then) => {
                if !matches!(then, AfterSave::Finish(_)) {
                    self.interrupt_pending = true;
                }
                out.push(Effect::ArmSaveDeadline {
                    save: self.saves,
                    after: crate::SAVE_DEADLINE,
                });
            }
            _ => self.interrupt_now(out),
        }
    }

    /// [`super::Input::SaveOverdue`]: the save an interruption waits for did
    /// not answer in time; it counts as failed (the history may not be on
    /// disk), and the agent ends.
    pub(super) fn on_save_overdue(&mut self, save: u64, out: &mut Vec<Effect>) {
        if save != self.saves || !matches!(self.phase, Phase::Saving(_)) {
            return;
        }
        self.interrupt_pending = false;
        if self.interrupted && matches!(self.phase, Phase::Saving(AfterSave::Announce(_))) {
            // The turn's last results wait in a save the disk does not
            // confirm: end as the interruption says. The closing save
            // carries them and reports it if it is not confirmed either;
            // their finish events are never sent.
            self.phase = Phase::Saving(AfterSave::ModelCall);
            self.interrupt_now(out);
            return;
        }
        let seconds = crate::SAVE_DEADLINE.as_secs();
        self.on_saved(
            Err(format!(
                "the disk did not confirm the save within {seconds} s"
            )),
            out,
        );
    }

    /// Interrupts whatever runs, with the outcome the stop cause gives.
    pub(super) fn interrupt_now(&mut self, out: &mut Vec<Effect>) {
        let outcome = self.interruption();
        let unfinished = unfinished_result(self.account.stop_cause().as_ref());
        self.interrupt_with(outcome, &unfinished, out);
    }

    /// Interrupts whatever runs: stop the stream, stop calls, answer what did
    /// not finish with `unfinished`, close the history; end once running calls
    /// have stopped (or their grace is over).
    fn interrupt_with(&mut self, outcome: RunOutcome, unfinished: &str, out: &mut Vec<Effect>) {
        self.interrupted = true;
        out.push(Effect::StopBelow);
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Streaming(streaming) => {
                note(out, streaming.span, SpanNote::Error("cancelled"));
                note(out, streaming.span, SpanNote::Usage(streaming.acc.usage()));
                self.count_usage(&streaming.acc.usage());
                close(out, streaming.span);
                self.keep_partial_response(streaming.acc.into_message(), unfinished);
                self.transcript.close(&outcome.final_text);
                self.finish_with(outcome, out);
            }
            Phase::Executing(mut execution) => {
                // Hooks of calls that will not start are still told of.
                for state in &mut execution.states {
                    let reports = std::mem::take(&mut state.hook_reports);
                    out.extend(reports.into_iter().map(Effect::Emit));
                }
                let mut approvals: Vec<String> = execution.approvals.keys().cloned().collect();
                approvals.sort();
                for approval_id in &approvals {
                    out.push(Effect::Emit(EventKind::ApprovalResolved {
                        approval_id: approval_id.clone(),
                        outcome: ApprovalOutcome::Cancel,
                    }));
                }
                if !approvals.is_empty() {
                    out.push(Effect::ApprovalsClosed(approvals));
                }
                let running = execution.anything_running();
                let epoch = execution.epoch;
                self.phase = Phase::Cancelling(Cancelling {
                    execution,
                    outcome,
                    unfinished: unfinished.to_string(),
                });
                if running {
                    // Runners report once their work has stopped; the grace
                    // bounds the wait (children wait for their own runners).
                    let levels_below = MAX_DEPTH.saturating_sub(self.spec.depth) + 1;
                    out.push(Effect::ArmCleanupGrace {
                        epoch,
                        after: CLEANUP_GRACE * levels_below,
                    });
                } else {
                    self.complete_cancellation(out);
                }
            }
            Phase::Cancelling(cancelling) => self.phase = Phase::Cancelling(cancelling),
            Phase::Saving(AfterSave::Execute(calls)) => {
                let results = complete_results(&calls, Vec::new(), unfinished);
                self.transcript.push(Message::tool_results(results));
                self.transcript.close(&outcome.final_text);
                self.finish_with(outcome, out);
            }
            Phase::Saving(AfterSave::Finish(done)) => {
                self.phase = Phase::Saving(AfterSave::Finish(done))
            }
            Phase::Saving(AfterSave::Announce(events)) => {
                // The save that holds the calls' results was answered.
                out.extend(events.into_iter().map(Effect::Emit));
                self.transcript.close(&outcome.final_text);
                self.finish_with(outcome, out);
            }
            Phase::Done => self.phase = Phase::Done,
            Phase::Summarising(summarising) => {
                note(out, summarising.span(), SpanNote::Error("cancelled"));
                close(out, summarising.span());
                self.transcript.close(&outcome.final_text);
                self.finish_with(outcome, out);
            }
            Phase::Idle
            | Phase::Offloading
            | Phase::Hooking(_)
            | Phase::Saving(
                AfterSave::ModelCall
                | AfterSave::TooLong(_)
                | AfterSave::StopHooks(_)
                | AfterSave::Compact,
            ) => {
                self.transcript.close(&outcome.final_text);
                self.finish_with(outcome, out);
            }
        }
    }

    pub(super) fn on_grace_over(&mut self, epoch: u64, out: &mut Vec<Effect>) {
        if matches!(&self.phase, Phase::Cancelling(c) if c.execution.epoch == epoch) {
            self.complete_cancellation(out);
        }
    }

    /// Ends an interrupted execution: the started group's finish events, every
    /// call answered, the history closed.
    pub(super) fn complete_cancellation(&mut self, out: &mut Vec<Effect>) {
        let Phase::Cancelling(_) = &self.phase else {
            return;
        };
        let Phase::Cancelling(mut cancelling) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        let execution = &mut cancelling.execution;
        for state in &mut execution.states {
            if let Some(span) = state.span.take() {
                note(out, span, SpanNote::ToolError(ToolErrorKind::Cancelled));
                close(out, span);
            }
        }
        // Approvals still pending were resolved as cancelled when the
        // interruption began; their waits end with the execution.
        let mut waits: Vec<_> = execution
            .approvals
            .drain()
            .map(|(_, pending)| pending.span)
            .collect();
        waits.sort();
        for span in waits {
            close(out, span);
        }
        if execution.group_started
            && let Some(group) = execution.groups.get(execution.group)
        {
            for index in group.indices() {
                let call = &execution.calls[index];
                let result = execution.states[index].result.as_ref();
                let output = result
                    .map(|r| r.joined_text())
                    .unwrap_or_else(|| cancelling.unfinished.clone());
                out.push(Effect::Emit(EventKind::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    is_error: result.is_none_or(|r| r.is_error),
                    output_preview: troupe_protocol::events::preview(&output),
                    output_lines: output.lines().count() as u64,
                    duration_ms: execution.states[index].duration_ms,
                }));
            }
        }
        let results = cancelling.execution.into_results(&cancelling.unfinished);
        self.transcript.push(Message::tool_results(results));
        self.transcript.close(&cancelling.outcome.final_text);
        self.finish_with(cancelling.outcome, out);
    }

    /// An [`super::Effect::Save`] failed: say so and end without trying again.
    pub(super) fn save_failed(&mut self, err: String, then: AfterSave, out: &mut Vec<Effect>) {
        self.store_failed = true;
        match then {
            AfterSave::Finish(mut outcome) => {
                out.push(Effect::Emit(EventKind::Error {
                    kind: "store".into(),
                    message: format!("the end of the run could not be saved: {err}"),
                }));
                // The answer was given but is not on disk: the run did not end well.
                if outcome.status == RunStatus::Finished {
                    outcome.status = RunStatus::Error;
                    outcome.stop_reason = "store_error".into();
                }
                self.finished(outcome, out);
            }
            then => {
                out.push(Effect::Emit(EventKind::Error {
                    kind: "store".into(),
                    message: format!("the session could not be saved: {err}"),
                }));
                if let AfterSave::Execute(calls) = then {
                    let results = complete_results(
                        &calls,
                        Vec::new(),
                        "(not run: the session could not be saved)",
                    );
                    self.transcript.push(Message::tool_results(results));
                }
                self.transcript.close(STORE_FAILED_CLOSING);
                self.finished(store_failed_outcome(), out);
            }
        }
    }

    /// A finished call's result could not be stored: stop everything, end
    /// without saving again.
    pub(super) fn pending_save_failed(&mut self, err: String, out: &mut Vec<Effect>) {
        if self.store_failed {
            return;
        }
        self.store_failed = true;
        out.push(Effect::Emit(EventKind::Error {
            kind: "store".into(),
            message: format!("the session could not be saved: {err}"),
        }));
        self.interrupt_with(store_failed_outcome(), CANCELLED_RESULT, out);
    }
}

/// The result of a call left without one when the run is stopped from
/// above: a budget says which budget (so the model knows the call did not
/// run and why), anything else is a cancellation.
pub(super) fn unfinished_result(cause: Option<&StopCause>) -> String {
    match cause {
        Some(StopCause::Limit(hit)) => format!("Not run. {}", hit.notice()),
        Some(StopCause::Cancelled) | None => CANCELLED_RESULT.to_string(),
    }
}

fn store_failed_outcome() -> RunOutcome {
    RunOutcome {
        status: RunStatus::Error,
        stop_reason: "store_error".into(),
        final_text: STORE_FAILED_CLOSING.into(),
        usage: Usage::default(),
    }
}
