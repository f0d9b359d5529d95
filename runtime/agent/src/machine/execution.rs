//! The execution half of a turn: groups of calls planned by class, each call
//! decided (catalogue, arguments, sub-agent rules, tool-call budget,
//! permission), started in order, answered, made durable, and reported in
//! order; approvals pending inside a group. Groups that settle at once are
//! walked in a loop, never by recursion.

use std::collections::HashMap;
use std::time::Duration;

use crate::StopCause;
use crate::agent_tool::parse_agent_call;
use crate::catalogue::CatalogueEntry;
use crate::history::complete_results;
use crate::plan::{CallClass, plan_execution};
use crate::subagent::{child_path, plan_child};
use troupe_permissions::{AdviceFacts, PermissionRequest};
use troupe_protocol::events::{ApprovalOutcome, EventKind, preview};
use troupe_protocol::model::{Message, ToolCall, ToolResult};
use troupe_protocol::permission::Decision;
use troupe_protocol::permission::{PermissionSubject, ToolCategory};
use troupe_protocol::permission::{RuleEntry, RuleSource};
use troupe_protocol::task_plan::TaskPlan;
use troupe_telemetry::genai::ToolErrorKind;
use troupe_telemetry::span_ops::{SpanKind, SpanNote};
use troupe_tools::ToolOutput;
use troupe_tools::target::tool_target;
use troupe_tools::task_plan::UPDATE_PLAN_TOOL_NAME;

use super::{
    AfterSave, AgentLaunch, AgentLoop, Approver, CallState, Effect, Execution, Launchable,
    PendingApproval, Phase, ResponseSaved, ToolLaunch, close, note,
};

/// What the permission step decided for one call, before anything runs.
enum Prepared {
    /// Run it; `outside_read` when the decision lets it read outside the
    /// allowed roots (an allow rule names the path).
    Run {
        launch: Launchable,
        outside_read: bool,
    },
    /// Answer it at once with this error.
    Refuse(String, ToolErrorKind),
    /// Ask a person first.
    Ask {
        request: PermissionRequest,
        launch: Launchable,
        reason: String,
    },
}

impl Execution {
    /// Records call `index`'s result (once) and ends its span. Returns true
    /// when the result was new.
    fn settle(
        &mut self,
        index: usize,
        result: ToolResult,
        error: Option<ToolErrorKind>,
        capture: troupe_telemetry::genai::ContentCapture,
        out: &mut Vec<Effect>,
    ) -> bool {
        let state = &mut self.states[index];
        if state.result.is_some() {
            return false;
        }
        if let Some(span) = state.span.take() {
            if capture.is_enabled() {
                note(out, span, SpanNote::ToolResult(result.clone()));
            }
            if let Some(kind) = error.or(result.is_error.then_some(ToolErrorKind::Failed)) {
                note(out, span, SpanNote::ToolError(kind));
            }
            close(out, span);
        }
        state.result = Some(result);
        true
    }

    /// True when every call of the current group has a durable result, none
    /// is running and no approval is pending: its finish events may be seen.
    fn group_settled(&self) -> bool {
        self.approvals.is_empty()
            && self.groups[self.group].indices().all(|index| {
                let state = &self.states[index];
                state.result.is_some() && state.durable && !state.running
            })
    }

    /// True while an executor or child works on a call.
    pub(super) fn anything_running(&self) -> bool {
        self.states.iter().any(|state| state.running)
    }

    /// True when call `index`, settling now, is the last one of the
    /// execution: the last group, every other call of it settled and
    /// durable, nothing running, no approval pending. Its result is then
    /// saved with the turn's tool message, which follows at once.
    fn settles_last(&self, index: usize) -> bool {
        self.group + 1 == self.groups.len()
            && self.approvals.is_empty()
            && self.groups[self.group].indices().all(|other| {
                let state = &self.states[other];
                other == index || (state.result.is_some() && state.durable && !state.running)
            })
    }

    /// Finish events of the current group, in call order.
    fn finish_events(&self) -> Vec<EventKind> {
        let mut events = Vec::new();
        for index in self.groups[self.group].indices() {
            let call = &self.calls[index];
            if let Some(result) = &self.states[index].result {
                let output = result.joined_text();
                events.push(EventKind::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    is_error: result.is_error,
                    output_preview: preview(&output),
                    output_lines: output.lines().count() as u64,
                    duration_ms: self.states[index].duration_ms,
                });
            }
        }
        events
    }

    /// Every call's result, unfinished ones answered with `unfinished`.
    pub(super) fn into_results(self, unfinished: &str) -> Vec<ToolResult> {
        let results = self.states.into_iter().map(|state| state.result).collect();
        complete_results(&self.calls, results, unfinished)
    }
}

impl AgentLoop {
    /// Plans and starts the execution of a recorded response's calls.
    pub(super) fn start_execution(
        &mut self,
        calls: Vec<ToolCall>,
        response: ResponseSaved,
        out: &mut Vec<Effect>,
    ) {
        if self.interrupted {
            self.phase = Phase::Saving(AfterSave::Execute(calls));
            self.interrupt_now(out);
            return;
        }
        self.epoch += 1;
        let classes: Vec<_> = calls
            .iter()
            .map(|call| self.catalogue.class(&call.name, &call.input))
            .collect();
        // A turn that can change files waits for the project's files to be
        // captured first (reads alone, and `update_plan`, need nothing).
        let checkpoint_pending =
            self.checkpoints && classes.iter().any(|class| *class != CallClass::ReadOnly);
        if checkpoint_pending {
            out.push(Effect::Checkpoint {
                epoch: self.epoch,
                meta: troupe_checkpoint::SnapshotMeta {
                    session: self.cache_key.clone(),
                    run: self.run_id.clone(),
                    turn: u64::from(self.guard.turns()),
                    agent_path: self.spec.path.clone(),
                    tool_call_ids: calls.iter().map(|call| call.id.clone()).collect(),
                    kind: troupe_checkpoint::CheckpointKind::Turn,
                },
                span: self.span,
            });
        }
        let states = calls
            .iter()
            .map(|_| CallState {
                result: None,
                duration_ms: 0,
                span: None,
                running: false,
                durable: true,
                hook_block: None,
                hook_notes: Vec::new(),
                hook_reports: Vec::new(),
                held: None,
                pre_hooked: false,
            })
            .collect();
        self.phase = Phase::Executing(Execution {
            epoch: self.epoch,
            groups: plan_execution(&classes),
            calls,
            states,
            group: 0,
            group_started: false,
            group_hooks: super::hooks::GroupHooks::NotRun,
            approvals: HashMap::new(),
            durable_with_turn: response == ResponseSaved::WithResults,
            task_plan_from: None,
            response,
            checkpoint_pending,
        });
        self.advance(out);
    }

    /// [`super::Input::Checkpointed`]: the calls waiting for the files to
    /// be captured go on, with or without them (a failure is told, never
    /// fatal).
    pub(super) fn on_checkpointed(
        &mut self,
        epoch: u64,
        result: Result<(), String>,
        out: &mut Vec<Effect>,
    ) {
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        if execution.epoch != epoch || !execution.checkpoint_pending {
            return;
        }
        execution.checkpoint_pending = false;
        if let Err(err) = result {
            self.checkpoint_failed(&err, out);
        }
        self.advance(out);
    }

    /// [`super::Input::CheckpointRecorded`]: a new checkpoint is announced
    /// (one equal to the last is not); a failure is told. Whatever the
    /// agent does by then.
    pub(super) fn on_checkpoint_recorded(
        &mut self,
        turn: u64,
        tool_call_ids: Vec<String>,
        result: Result<super::CheckpointTaken, String>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(taken) if taken.unchanged => {}
            Ok(taken) => out.push(Effect::Emit(EventKind::CheckpointCreated {
                number: taken.number,
                commit: taken.commit,
                turn,
                tool_call_ids,
                skipped: taken.skipped,
            })),
            Err(err) => self.checkpoint_failed(&err, out),
        }
    }

    /// A checkpoint failed: told once, and the agent takes no more (a store
    /// git cannot write fails the same way every turn).
    fn checkpoint_failed(&mut self, err: &str, out: &mut Vec<Effect>) {
        if !self.checkpoints {
            return;
        }
        self.checkpoints = false;
        out.push(Effect::Emit(EventKind::Notice {
            text: format!(
                "no checkpoint before this turn, nor before this agent's later turns (they cannot be undone): {err}"
            ),
            code: Some(troupe_protocol::events::NOTICE_CHECKPOINT_FAILED.to_owned()),
        }));
    }

    /// Walks the groups: starts the current one, and while it is settled
    /// reports it and moves on; after the last one records the results and
    /// goes back to the model.
    pub(super) fn advance(&mut self, out: &mut Vec<Effect>) {
        loop {
            let interrupted = self.interrupted;
            let Phase::Executing(execution) = &mut self.phase else {
                return;
            };
            if !execution.group_started {
                if interrupted {
                    self.interrupt_now(out);
                    return;
                }
                if execution.checkpoint_pending {
                    return;
                }
                if self.pre_tool_hooks(out) {
                    return;
                }
                self.start_group(out);
                continue;
            }
            if !execution.group_settled() {
                return;
            }
            let finished = execution.finish_events();
            let last_group = execution.group + 1 == execution.groups.len();
            if !(last_group && execution.durable_with_turn) {
                out.extend(finished.iter().cloned().map(Effect::Emit));
            }
            execution.group += 1;
            execution.group_started = false;
            execution.group_hooks = super::hooks::GroupHooks::NotRun;
            if execution.group < execution.groups.len() {
                continue;
            }
            let Phase::Executing(execution) = std::mem::replace(&mut self.phase, Phase::Idle)
            else {
                return;
            };
            let announce = execution.durable_with_turn;
            let results = execution.into_results(troupe_tools::CANCELLED_RESULT);
            self.transcript.push(Message::tool_results(results));
            let then = if announce {
                AfterSave::Announce(finished)
            } else {
                AfterSave::ModelCall
            };
            self.save_then(then, out);
            return;
        }
    }

    /// Starts the current group: decides every call, emits the start events in
    /// order, then launches the allowed calls and asks for the others.
    fn start_group(&mut self, out: &mut Vec<Effect>) {
        let (indices, calls, blocks, mut hook_reports) = {
            let Phase::Executing(execution) = &mut self.phase else {
                return;
            };
            let group = execution.groups[execution.group];
            let mut indices = Vec::new();
            let mut calls = Vec::new();
            let mut blocks = Vec::new();
            let mut hook_reports = Vec::new();
            for index in group.indices() {
                indices.push(index);
                calls.push(execution.calls[index].clone());
                blocks.push(execution.states[index].hook_block.clone());
                hook_reports.push(std::mem::take(&mut execution.states[index].hook_reports));
            }
            (indices, calls, blocks, hook_reports)
        };
        let grant = self.account.take_tool_calls(calls.len() as u32, self.now);
        let refused_by_budget = grant.hit.as_ref().map(|hit| hit.notice());
        let mut prepared: Vec<(Prepared, Option<Decision>)> = Vec::with_capacity(calls.len());
        for (k, call) in calls.iter().enumerate() {
            if let Some(reason) = &blocks[k] {
                let text = format!("Blocked by a PreToolUse hook: {reason}");
                prepared.push((Prepared::Refuse(text, ToolErrorKind::Denied), None));
            } else if k < grant.granted as usize {
                prepared.push(self.prepare(call));
            } else {
                let text = format!(
                    "Not run. {}",
                    refused_by_budget.as_deref().unwrap_or_default()
                );
                prepared.push((Prepared::Refuse(text, ToolErrorKind::Denied), None));
            }
        }
        let capture = self.capture;
        let mut spans = Vec::with_capacity(calls.len());
        for (k, (call, (_, decision))) in calls.iter().zip(&prepared).enumerate() {
            let span = self.open_span(
                None,
                SpanKind::Tool {
                    tool: call.name.clone(),
                    call_id: call.id.clone(),
                },
                out,
            );
            if let Some(decision) = decision {
                note(out, span, SpanNote::Permission(decision.clone()));
            }
            if capture.is_enabled() {
                note(out, span, SpanNote::ToolArguments(call.input.clone()));
            }
            spans.push(span);
            out.push(Effect::Emit(EventKind::ToolStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                args_preview: preview(&call.input),
                target: tool_target(&call.name, &call.input),
            }));
            // What the call's PreToolUse hooks did follows the call it
            // concerns, as its result does.
            let reports = std::mem::take(&mut hook_reports[k]);
            out.extend(reports.into_iter().map(Effect::Emit));
        }
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        execution.group_started = true;
        for (&index, span) in indices.iter().zip(spans) {
            execution.states[index].span = Some(span);
        }
        for (index, (prepared, _)) in indices.into_iter().zip(prepared) {
            match prepared {
                Prepared::Refuse(text, kind) => {
                    let Phase::Executing(execution) = &mut self.phase else {
                        return;
                    };
                    let result = ToolResult::text(execution.calls[index].id.clone(), text, true);
                    execution.settle(index, result, Some(kind), capture, out);
                }
                Prepared::Run {
                    launch,
                    outside_read,
                } => self.launch(index, launch, outside_read, out),
                Prepared::Ask {
                    request,
                    launch,
                    reason,
                } => self.ask(index, request, launch, reason, out),
            }
        }
        if let Some(hit) = grant.hit {
            // The tool-call budget is the run's: stop the whole tree.
            if self.stop_tree(StopCause::Limit(hit.clone()), out) {
                out.push(Effect::Emit(EventKind::notice(hit.notice())));
            }
        }
    }

    /// Emits `approval_requested` and waits for the answer.
    fn ask(
        &mut self,
        index: usize,
        request: PermissionRequest,
        launch: Launchable,
        reason: String,
        out: &mut Vec<Effect>,
    ) {
        let approval_id = format!("{}-{}", self.run_id, self.account.next_approval_number());
        let Phase::Executing(execution) = &self.phase else {
            return;
        };
        let (tool_span, tool, call_id) = (
            execution.states[index].span,
            execution.calls[index].name.clone(),
            execution.calls[index].id.clone(),
        );
        let span = self.open_span(
            tool_span,
            SpanKind::Approval {
                tool,
                call_id,
                approval_id: approval_id.clone(),
            },
            out,
        );
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        let call = &execution.calls[index];
        let (tool, reason_text) = (call.name.clone(), reason.clone());
        out.push(Effect::Emit(EventKind::ApprovalRequested {
            approval_id: approval_id.clone(),
            tool: call.name.clone(),
            args: call.input.clone(),
            reason,
            always_rule: Some(self.permissions.always_rule_for(&request)),
        }));
        out.push(Effect::AwaitApproval {
            approval_id: approval_id.clone(),
        });
        execution.approvals.insert(
            approval_id,
            PendingApproval {
                index,
                request,
                launch,
                span,
            },
        );
        self.notify_hooks(&tool, &reason_text, out);
    }

    /// Starts call `index`: a tool executor, or a child agent.
    fn launch(
        &mut self,
        index: usize,
        launch: Launchable,
        outside_read_approved: bool,
        out: &mut Vec<Effect>,
    ) {
        let child_number = match &launch {
            Launchable::Agent(_) => {
                self.children += 1;
                self.children
            }
            Launchable::Tool { .. } => 0,
        };
        let parent_path = self.spec.path.clone();
        let agent_span = self.span;
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        let epoch = execution.epoch;
        let call_id = execution.calls[index].id.clone();
        let span = execution.states[index].span.unwrap_or(agent_span);
        execution.states[index].running = true;
        match launch {
            Launchable::Tool { tool, args } => out.push(Effect::RunTool(ToolLaunch {
                epoch,
                index,
                call_id,
                tool,
                args,
                outside_read_approved,
                span,
            })),
            Launchable::Agent(mut child) => {
                child.spec.path = child_path(&parent_path, child.label(), child_number);
                out.push(Effect::StartAgent(AgentLaunch {
                    epoch,
                    index,
                    call_id,
                    child,
                    span,
                }));
            }
        }
    }

    /// The permission step for one call (pure decisions), with the
    /// permission decision when one was made.
    fn prepare(&self, call: &ToolCall) -> (Prepared, Option<Decision>) {
        let mode = self.permissions.mode();
        let Some(entry) = self.catalogue.get(&call.name) else {
            let text = self.catalogue.unknown_tool_text(&call.name, mode);
            return (Prepared::Refuse(text, ToolErrorKind::UnknownTool), None);
        };
        let args = match self.catalogue.validate(&call.name, &call.input) {
            Ok(args) => args,
            Err(message) => {
                return (
                    Prepared::Refuse(message, ToolErrorKind::InvalidArguments),
                    None,
                );
            }
        };
        let (request, launch) = match entry {
            CatalogueEntry::Tool(tool) => (
                PermissionRequest {
                    tool_name: call.name.clone(),
                    category: tool.category(),
                    read_only: tool.read_only(),
                    subject: tool.permission_subject(&args),
                },
                Launchable::Tool {
                    tool: tool.clone(),
                    args,
                },
            ),
            CatalogueEntry::Agent => {
                let child = parse_agent_call(&args).and_then(|parsed| {
                    plan_child(
                        &self.spec,
                        &self.roles,
                        &parsed,
                        &call.id,
                        self.transcript.messages(),
                    )
                });
                let child = match child {
                    Ok(child) => child,
                    Err(reason) => return (Prepared::Refuse(reason, ToolErrorKind::Denied), None),
                };
                (
                    PermissionRequest {
                        tool_name: call.name.clone(),
                        category: ToolCategory::Agent,
                        read_only: false,
                        subject: PermissionSubject::None,
                    },
                    Launchable::Agent(Box::new(child)),
                )
            }
        };
        let verdict = self.permissions.verdict(&request);
        let advice = troupe_permissions::advice(&AdviceFacts {
            mode,
            request: &request,
            cause: verdict.cause,
            rule: &self.permissions.always_rule_for(&request),
            approver: self.approver == Approver::Present,
            project_root: self.permissions.sandbox().project_root(),
        });
        let with_advice = |text: String| match &advice {
            Some(advice) => format!("{text} {advice}"),
            None => text,
        };
        let decision = verdict.decision;
        let prepared = match &decision {
            Decision::Allow { .. } => Prepared::Run {
                launch,
                outside_read: verdict.outside_read_granted,
            },
            Decision::Deny { reason } => Prepared::Refuse(
                with_advice(format!("Permission denied: {reason}")),
                ToolErrorKind::Denied,
            ),
            Decision::Ask { reason } => match self.approver {
                Approver::Present => Prepared::Ask {
                    request,
                    launch,
                    reason: reason.clone(),
                },
                Approver::Absent => Prepared::Refuse(
                    with_advice(format!(
                        "Permission denied: this call needs approval ({reason}) and nobody can \
                         answer in this run."
                    )),
                    ToolErrorKind::Denied,
                ),
            },
        };
        (prepared, Some(decision))
    }

    /// The execution `epoch` belongs to, running or being cancelled.
    pub(super) fn execution_mut(&mut self, epoch: u64) -> Option<&mut Execution> {
        match &mut self.phase {
            Phase::Executing(execution) if execution.epoch == epoch => Some(execution),
            Phase::Cancelling(cancelling) if cancelling.execution.epoch == epoch => {
                Some(&mut cancelling.execution)
            }
            _ => None,
        }
    }

    pub(super) fn on_call_finished(
        &mut self,
        epoch: u64,
        index: usize,
        output: ToolOutput,
        duration: Duration,
        error: Option<ToolErrorKind>,
        out: &mut Vec<Effect>,
    ) {
        let Some(execution) = self.execution_mut(epoch) else {
            return;
        };
        let Some(state) = execution.states.get_mut(index) else {
            return;
        };
        if state.result.is_some() || state.held.is_some() {
            return;
        }
        let notes = std::mem::take(&mut state.hook_notes);
        let result = output.into_result(execution.calls[index].id.clone());
        let held = super::hooks::HeldResult {
            result: super::hooks::with_notes(result, &notes),
            duration,
            error,
        };
        if let Some(held) = self.hold_for_post_hooks(epoch, index, held, out) {
            self.record_finished(epoch, index, held.result, held.duration, held.error, out);
        }
    }

    /// Records a finished call's result (its hooks done): settled, stored as
    /// a pending result, and the execution moves on.
    pub(super) fn record_finished(
        &mut self,
        epoch: u64,
        index: usize,
        result: ToolResult,
        duration: Duration,
        error: Option<ToolErrorKind>,
        out: &mut Vec<Effect>,
    ) {
        let capture = self.capture;
        let executing = matches!(self.phase, Phase::Executing(_));
        let Some(execution) = self.execution_mut(epoch) else {
            return;
        };
        let Some(state) = execution.states.get_mut(index) else {
            return;
        };
        state.running = false;
        let read = read_file_snapshot(&execution.calls[index], &result);
        let task_plan = task_plan_of(&execution.calls[index], &result)
            .filter(|_| execution.task_plan_from.is_none_or(|from| from < index));
        if task_plan.is_some() {
            execution.task_plan_from = Some(index);
        }
        let last = executing && execution.settles_last(index);
        if execution.settle(index, result.clone(), error, capture, out) {
            let state = &mut execution.states[index];
            state.duration_ms = duration.as_millis() as u64;
            if last || execution.response == ResponseSaved::WithResults {
                // The turn's tool message, saved next, holds it: one write
                // instead of two before the model hears of it, and its
                // finish event waits for that write. A result of a response
                // not yet durable waits for that write too: it only read.
                state.durable = true;
                execution.durable_with_turn = true;
            } else {
                // A finished call's work is durable at once, not only with
                // its turn, and before its finish event is seen.
                state.durable = false;
                out.push(Effect::SavePending {
                    epoch,
                    index,
                    result,
                });
            }
        }
        if let Some((path, content)) = read {
            self.context.file_read(path, content);
        }
        if let Some(plan) = task_plan {
            self.keep_task_plan(plan, out);
        }
        self.after_call(out);
    }

    pub(super) fn on_pending_saved(
        &mut self,
        epoch: u64,
        index: usize,
        result: Result<(), String>,
        out: &mut Vec<Effect>,
    ) {
        let Some(execution) = self.execution_mut(epoch) else {
            return;
        };
        match result {
            Ok(()) => {
                if let Some(state) = execution.states.get_mut(index) {
                    state.durable = true;
                }
                self.after_call(out);
            }
            Err(err) => self.pending_save_failed(err, out),
        }
    }

    /// After a call settled: move on (executing) or maybe end (cancelling).
    fn after_call(&mut self, out: &mut Vec<Effect>) {
        match &self.phase {
            Phase::Executing(_) => self.advance(out),
            Phase::Cancelling(cancelling) if !cancelling.execution.anything_running() => {
                self.complete_cancellation(out)
            }
            _ => {}
        }
    }

    pub(super) fn on_approval(
        &mut self,
        approval_id: String,
        outcome: ApprovalOutcome,
        reason: Option<String>,
        out: &mut Vec<Effect>,
    ) {
        let capture = self.capture;
        let Phase::Executing(execution) = &mut self.phase else {
            return;
        };
        let Some(pending) = execution.approvals.remove(&approval_id) else {
            tracing::debug!(%approval_id, "answer for an approval that is not pending");
            return;
        };
        out.push(Effect::ApprovalsClosed(vec![approval_id.clone()]));
        out.push(Effect::Emit(EventKind::ApprovalResolved {
            approval_id,
            outcome: outcome.clone(),
        }));
        note(out, pending.span, SpanNote::Approval(outcome.clone()));
        close(out, pending.span);
        let index = pending.index;
        match outcome {
            ApprovalOutcome::Cancel => {
                // "Cancel" at any prompt cancels the whole run.
                self.stop_tree(StopCause::Cancelled, out);
                self.interrupt_now(out);
                return;
            }
            ApprovalOutcome::Deny => {
                let text = match reason {
                    Some(reason) if !reason.trim().is_empty() => {
                        format!("The user denied this call: {}", reason.trim())
                    }
                    _ => "The user denied this call.".to_string(),
                };
                let id = execution.calls[index].id.clone();
                let result = ToolResult::text(id, text, true);
                execution.settle(index, result, Some(ToolErrorKind::Denied), capture, out);
            }
            ApprovalOutcome::Allow | ApprovalOutcome::AllowAlways => {
                if outcome == ApprovalOutcome::AllowAlways {
                    self.remember_always(&pending.request, out);
                }
                self.launch(index, pending.launch, true, out);
            }
        }
        self.advance(out);
    }

    /// Keeps the plan of a successful `update_plan` call: the agent's plan
    /// from now on, announced with the whole list and kept with the session.
    fn keep_task_plan(&mut self, plan: TaskPlan, out: &mut Vec<Effect>) {
        out.push(Effect::Emit(EventKind::PlanUpdated {
            explanation: plan.explanation.clone(),
            plan: plan.plan.clone(),
        }));
        self.transcript.set_task_plan(plan.clone());
        out.push(Effect::SaveTaskPlan(plan));
    }

    /// Keeps an "always" answer as a session rule.
    fn remember_always(&mut self, request: &PermissionRequest, out: &mut Vec<Effect>) {
        let rule = self.permissions.always_rule_for(request);
        match self.permissions.add_session_rule(RuleEntry {
            rule,
            source: RuleSource::Session,
        }) {
            // Kept with the session, so a resumed run remembers it.
            Ok(()) => out.push(Effect::SaveRules(self.permissions.session_rules())),
            Err(err) => tracing::warn!(%err, "could not remember the approval as a rule"),
        }
    }
}

/// The plan a successful `update_plan` call made (its arguments as the tool
/// ran them: a hook's rewrite is in `call`); a refused call makes none.
fn task_plan_of(call: &ToolCall, result: &ToolResult) -> Option<TaskPlan> {
    if call.name != UPDATE_PLAN_TOOL_NAME || result.is_error {
        return None;
    }
    TaskPlan::from_arguments(&call.input).ok()
}

/// The path and text of a successful `read_file` call, for the recovery
/// attachment of a later compaction.
fn read_file_snapshot(call: &ToolCall, result: &ToolResult) -> Option<(String, String)> {
    if call.name != "read_file" || result.is_error {
        return None;
    }
    let args = call.input_value().ok()?;
    let path = args.get("path")?.as_str()?.to_string();
    Some((path, result.joined_text()))
}
