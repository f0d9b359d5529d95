//! Hooks in the loop: which hook runs the loop asks for and waits on, and
//! what their verdicts change. PreToolUse hooks of a group's calls run before
//! the group is decided (a block refuses the call, a rewrite replaces its
//! arguments, which are then validated and decided like the model's);
//! PostToolUse hooks run once a call produced its result, before it is
//! stored (their notes are appended to it); Stop / SubagentStop hooks run
//! once the final answer is stored (a block makes the agent go on once, the
//! reason given to it as a user message); Notification hooks run when an
//! approval waits, and only report.

use serde_json::Value;
use troupe_telemetry::span_ops::SpanId;

use crate::RunOutcome;
use troupe_hooks::{HookEvent, HookPayload, HookPlace, HookVerdict};
use troupe_protocol::events::EventKind;
use troupe_protocol::model::{Message, ToolCall, ToolOutputPart, ToolResult};

use super::{AfterSave, AgentLoop, Effect, Phase};

/// The label of a hook's note in what the model reads.
const NOTE_LABEL: &str = "Note from a hook:";

/// What a hook run answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookCall {
    /// The PreToolUse hooks of call `index` of execution `epoch`.
    PreTool {
        /// Epoch of the execution.
        epoch: u64,
        /// Call index.
        index: usize,
    },
    /// The PostToolUse hooks of call `index` of execution `epoch`.
    PostTool {
        /// Epoch of the execution.
        epoch: u64,
        /// Call index.
        index: usize,
    },
    /// The Stop (or SubagentStop) hooks at the end of the agent's work.
    Stop,
    /// Hooks that only report (Notification).
    Report,
}

/// Hooks to run for the loop; answer with [`super::Input::HooksRan`].
#[derive(Debug)]
pub struct HookRequest {
    /// What the answer is for.
    pub call: HookCall,
    /// The event.
    pub event: HookEvent,
    /// What matchers are compared with.
    pub subject: Option<String>,
    /// The payload.
    pub payload: HookPayload,
    /// Where the hooks run.
    pub place: HookPlace,
    /// Parent of their spans. They are killed when the agent stops (hooks
    /// that only report: when the run stops).
    pub span: SpanId,
}

/// Where the PreToolUse hooks of the current group stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum GroupHooks {
    /// Not asked for yet.
    #[default]
    NotRun,
    /// This many calls' hooks have not answered.
    Waiting(usize),
    /// Answered (or none to run).
    Done,
}

/// A finished call whose PostToolUse hooks run before it is recorded.
pub(super) struct HeldResult {
    pub result: ToolResult,
    pub duration: std::time::Duration,
    pub error: Option<troupe_telemetry::genai::ToolErrorKind>,
}

/// A tool call's arguments as a payload value: the JSON, or the text the
/// model wrote when it is not JSON.
fn input_value(call: &ToolCall) -> Value {
    call.input_value()
        .unwrap_or_else(|_| Value::String(call.input.clone()))
}

/// The result with the hooks' notes appended, each labelled.
pub(super) fn with_notes(mut result: ToolResult, notes: &[String]) -> ToolResult {
    for note in notes {
        result.content.push(ToolOutputPart::Text {
            text: format!("{NOTE_LABEL} {note}"),
        });
    }
    result
}

/// The user message that makes an agent go on after a Stop hook blocked.
pub(super) fn continue_message(event: HookEvent, reason: &str) -> String {
    format!("A {event} hook asked you to continue before finishing: {reason}")
}

impl AgentLoop {
    fn hook_place(&self) -> HookPlace {
        HookPlace {
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            agent_path: self.spec.path.clone(),
            cwd: self.permissions.sandbox().project_root().to_path_buf(),
        }
    }

    fn request_hooks(
        &self,
        call: HookCall,
        event: HookEvent,
        subject: Option<String>,
        payload: HookPayload,
        span: SpanId,
        out: &mut Vec<Effect>,
    ) {
        out.push(Effect::RunHooks(Box::new(HookRequest {
            call,
            event,
            subject,
            payload,
            place: self.hook_place(),
            span,
        })));
    }

    /// Asks for the PreToolUse hooks of the current group's calls; returns
    /// true while the group must wait for them.
    pub(super) fn pre_tool_hooks(&mut self, out: &mut Vec<Effect>) -> bool {
        let Phase::Executing(execution) = &self.phase else {
            return false;
        };
        match execution.group_hooks {
            GroupHooks::Done => return false,
            GroupHooks::Waiting(_) => return true,
            GroupHooks::NotRun => {}
        }
        let epoch = execution.epoch;
        let wanted: Vec<(usize, ToolCall)> = execution.groups[execution.group]
            .indices()
            .filter(|&index| {
                !execution.states[index].pre_hooked
                    && self
                        .hooks
                        .any_for(HookEvent::PreToolUse, Some(&execution.calls[index].name))
            })
            .map(|index| (index, execution.calls[index].clone()))
            .collect();
        let place = self.hook_place();
        for (index, call) in &wanted {
            let mut payload = HookPayload::new(HookEvent::PreToolUse, &place);
            payload.tool_name = Some(call.name.clone());
            payload.tool_call_id = Some(call.id.clone());
            payload.tool_input = Some(input_value(call));
            self.request_hooks(
                HookCall::PreTool {
                    epoch,
                    index: *index,
                },
                HookEvent::PreToolUse,
                Some(call.name.clone()),
                payload,
                self.span,
                out,
            );
        }
        let Phase::Executing(execution) = &mut self.phase else {
            return false;
        };
        for (index, _) in &wanted {
            execution.states[*index].pre_hooked = true;
        }
        if wanted.is_empty() {
            execution.group_hooks = GroupHooks::Done;
            false
        } else {
            execution.group_hooks = GroupHooks::Waiting(wanted.len());
            true
        }
    }

    /// Holds a finished call's result for its PostToolUse hooks; returns it
    /// back when none applies (or the run is stopping).
    pub(super) fn hold_for_post_hooks(
        &mut self,
        epoch: u64,
        index: usize,
        held: HeldResult,
        out: &mut Vec<Effect>,
    ) -> Option<HeldResult> {
        let Phase::Executing(execution) = &mut self.phase else {
            return Some(held);
        };
        if execution.epoch != epoch {
            return Some(held);
        }
        let call = execution.calls[index].clone();
        if !self.hooks.any_for(HookEvent::PostToolUse, Some(&call.name)) {
            return Some(held);
        }
        let span = execution.states[index].span.unwrap_or(self.span);
        let mut payload = HookPayload::new(HookEvent::PostToolUse, &self.hook_place());
        payload.tool_name = Some(call.name.clone());
        payload.tool_call_id = Some(call.id.clone());
        payload.tool_input = Some(input_value(&call));
        payload.tool_result = Some(held.result.joined_text());
        payload.tool_is_error = Some(held.result.is_error);
        let Phase::Executing(execution) = &mut self.phase else {
            return Some(held);
        };
        // Still running as far as the group is concerned: a cancellation
        // waits for the hooks (which stop with the agent's token).
        execution.states[index].held = Some(held);
        self.request_hooks(
            HookCall::PostTool { epoch, index },
            HookEvent::PostToolUse,
            Some(call.name),
            payload,
            span,
            out,
        );
        None
    }

    /// Asks for the Notification hooks of an approval that waits.
    pub(super) fn notify_hooks(&self, tool: &str, reason: &str, out: &mut Vec<Effect>) {
        if !self.hooks.any_for(HookEvent::Notification, None) {
            return;
        }
        let mut payload = HookPayload::new(HookEvent::Notification, &self.hook_place());
        payload.tool_name = Some(tool.to_owned());
        payload.message = Some(format!("Troupe needs your approval for {tool}: {reason}"));
        self.request_hooks(
            HookCall::Report,
            HookEvent::Notification,
            None,
            payload,
            self.span,
            out,
        );
    }

    /// Asks for the PreCompact hooks (`phase` `started`) or the PostCompact
    /// hooks (`finished`, `failed`, `skipped`) of a compaction. They only report: the
    /// compaction does not wait for them.
    pub(super) fn compaction_hooks(
        &self,
        phase: &str,
        trigger: &str,
        before_tokens: u64,
        after_tokens: u64,
        out: &mut Vec<Effect>,
    ) {
        let event = if phase == "started" {
            HookEvent::PreCompact
        } else {
            HookEvent::PostCompact
        };
        if !self.hooks.any_for(event, Some(trigger)) {
            return;
        }
        let mut payload = HookPayload::new(event, &self.hook_place());
        payload.trigger = Some(trigger.to_owned());
        payload.tokens_before = Some(before_tokens);
        if event == HookEvent::PostCompact {
            payload.tokens_after = Some(after_tokens);
            payload.message = match phase {
                "failed" => Some("the compaction failed".to_owned()),
                "skipped" => {
                    Some("the compaction was skipped: it would not shrink the history".to_owned())
                }
                _ => None,
            };
        }
        self.request_hooks(
            HookCall::Report,
            event,
            Some(trigger.to_owned()),
            payload,
            self.span,
            out,
        );
    }

    /// The event its end runs: Stop for the main agent, SubagentStop for
    /// the others.
    fn stop_event(&self) -> HookEvent {
        if self.spec.depth == 0 {
            HookEvent::Stop
        } else {
            HookEvent::SubagentStop
        }
    }

    /// The final answer is recorded: save it, then run the Stop hooks when
    /// some apply (once per loop), else end.
    pub(super) fn end_turn(&mut self, outcome: RunOutcome, out: &mut Vec<Effect>) {
        let event = self.stop_event();
        let subject = (event == HookEvent::SubagentStop).then(|| self.spec.role.clone());
        if self.stop_hook_continued || !self.hooks.any_for(event, subject.as_deref()) {
            self.finish_with(outcome, out);
            return;
        }
        self.save_then(AfterSave::StopHooks(outcome), out);
    }

    /// The final answer is durable: run the Stop hooks.
    pub(super) fn run_stop_hooks(&mut self, outcome: RunOutcome, out: &mut Vec<Effect>) {
        let event = self.stop_event();
        let subject = (event == HookEvent::SubagentStop).then(|| self.spec.role.clone());
        let mut payload = HookPayload::new(event, &self.hook_place());
        payload.last_message = Some(outcome.final_text.clone());
        payload.stop_hook_active = Some(self.stop_hook_continued);
        self.phase = Phase::Hooking(outcome);
        self.request_hooks(HookCall::Stop, event, subject, payload, self.span, out);
    }

    /// [`Input::HooksRan`].
    pub(super) fn on_hooks_ran(
        &mut self,
        call: HookCall,
        verdict: HookVerdict,
        out: &mut Vec<Effect>,
    ) {
        let reports = verdict.reports.iter().map(|report| report.event_kind());
        match (&call, &mut self.phase) {
            // Held until the call's `tool_started`, so that what a hook did
            // to a call comes after the call in the run's events.
            (HookCall::PreTool { epoch, index }, Phase::Executing(execution))
                if execution.epoch == *epoch && *index < execution.states.len() =>
            {
                execution.states[*index].hook_reports.extend(reports);
            }
            _ => out.extend(reports.map(Effect::Emit)),
        }
        match call {
            HookCall::PreTool { epoch, index } => {
                self.pre_tool_answered(epoch, index, verdict, out)
            }
            HookCall::PostTool { epoch, index } => {
                self.post_tool_answered(epoch, index, verdict, out)
            }
            HookCall::Stop => self.stop_answered(verdict, out),
            HookCall::Report => {}
        }
    }

    fn pre_tool_answered(
        &mut self,
        epoch: u64,
        index: usize,
        verdict: HookVerdict,
        out: &mut Vec<Effect>,
    ) {
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        if execution.epoch != epoch || index >= execution.calls.len() {
            return;
        }
        let GroupHooks::Waiting(left) = execution.group_hooks else {
            return;
        };
        if let Some(reason) = verdict.blocked {
            execution.states[index].hook_block = Some(reason);
        } else if let Some(input) = verdict.updated_input {
            // Decided (validated, permission) as if the model had written it.
            execution.calls[index].input = Value::Object(input).to_string();
        }
        execution.states[index].hook_notes = verdict.notes;
        execution.group_hooks = if left <= 1 {
            GroupHooks::Done
        } else {
            GroupHooks::Waiting(left - 1)
        };
        if execution.group_hooks == GroupHooks::Done {
            self.regroup_after_rewrites();
            self.advance(out);
        }
    }

    /// Plans the current group again from its calls' arguments as they are
    /// now: a rewrite that gives a call another class (a read-only `ls`
    /// rewritten into `touch`) must not run it alongside the others. The
    /// group splits into the groups its calls would have formed; each call's
    /// hooks have run already and do not run again.
    fn regroup_after_rewrites(&mut self) {
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        let current = execution.groups[execution.group];
        let classes: Vec<_> = current
            .indices()
            .map(|index| {
                let call = &execution.calls[index];
                self.catalogue.class(&call.name, &call.input)
            })
            .collect();
        let planned: Vec<_> = crate::plan_execution(&classes)
            .into_iter()
            .map(|group| crate::ExecutionGroup {
                start: group.start + current.start,
                end: group.end + current.start,
                concurrent: group.concurrent,
            })
            .collect();
        if planned != [current] {
            let at = execution.group;
            execution.groups.splice(at..=at, planned);
        }
    }

    fn post_tool_answered(
        &mut self,
        epoch: u64,
        index: usize,
        verdict: HookVerdict,
        out: &mut Vec<Effect>,
    ) {
        let Some(execution) = self.execution_mut(epoch) else {
            return;
        };
        let Some(held) = execution
            .states
            .get_mut(index)
            .and_then(|state| state.held.take())
        else {
            return;
        };
        let notes = verdict.notes;
        let result = with_notes(held.result, &notes);
        self.record_finished(epoch, index, result, held.duration, held.error, out);
    }

    fn stop_answered(&mut self, verdict: HookVerdict, out: &mut Vec<Effect>) {
        let Phase::Hooking(_) = &self.phase else {
            return;
        };
        let Phase::Hooking(outcome) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match verdict.blocked {
            Some(reason) if !self.stop_hook_continued => {
                self.stop_hook_continued = true;
                let text = continue_message(self.stop_event(), &reason);
                out.push(Effect::Emit(EventKind::notice(text.clone())));
                self.transcript.push(Message::user_text(text));
                self.save_then(AfterSave::ModelCall, out);
            }
            _ => self.finish_with(outcome, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_appended_with_a_label() {
        let result = ToolResult::text("c1", "output", false);
        let noted = with_notes(result, &["formatted".into(), "checked".into()]);
        assert_eq!(
            noted.joined_text(),
            "output\nNote from a hook: formatted\nNote from a hook: checked"
        );
        assert!(!noted.is_error);
    }

    #[test]
    fn the_continue_message_names_the_event_and_reason() {
        assert_eq!(
            continue_message(HookEvent::Stop, "tests fail"),
            "A Stop hook asked you to continue before finishing: tests fail"
        );
    }
}
