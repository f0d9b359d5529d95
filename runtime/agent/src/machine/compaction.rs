//! The compacting half of a turn, before its model call: layer 1 (large
//! results offloaded, decided once per call id), then, at the threshold, a
//! summary of the older history (layer 2) made by a model call with no tools
//! — or swapped in from one prepared ahead, from 70% of the threshold, while
//! the agent went on; the emergency path when the provider says the prompt is
//! too long; a summary before the first request of a continued session near
//! the window; and a loop whose only job is a summary (manual compaction).
//! Every rule is a function of `crate::compact`; this only sequences them.
//!
//! Every compaction starts in [`AgentLoop::begin_compaction`] and ends in
//! [`AgentLoop::apply_summary`], [`AgentLoop::summary_failed`] or
//! [`AgentLoop::summary_skipped`], whatever its trigger. A summary is asked
//! for and applied only when it shrinks the history by the margin of
//! `crate::compact::shrink`; at the threshold, large results of the recent
//! batch are offloaded before a summary that could not.

use std::collections::VecDeque;

use crate::compact::ahead::{PrefixKey, prefix_key, should_prepare, still_matches};
use crate::compact::breaker::Breaker;
use crate::compact::estimate::TokenEstimate;
use crate::compact::offload::{Ledger, OffloadPlan};
use crate::compact::shrink::{SUMMARY_DID_NOT_SHRINK, Sizes, Step, choose, relief_needed};
use crate::compact::summary::{
    FileSnapshot, RECOVERY_FILES, budgets, compacted, extract_summary, files_outside,
    groups_to_drop, recovery_attachment, summary_request, tail_start, without_oldest_groups,
};
use crate::compact::{auto_threshold, emergency_limit, resume_threshold};
use troupe_llm::{ChatRequest, ProviderError};
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_protocol::model::{Message, Usage};
use troupe_protocol::model::{ProviderErrorKind, ToolDefinition};
use troupe_store::CompactionMarker;
use troupe_telemetry::span_ops::{SpanId, SpanKind, SpanNote};

use super::{AfterSave, AgentLoop, Effect, Phase, close, note};
use crate::RunOutcome;

/// How many too-long summary requests are retried with fewer groups.
const SUMMARY_ATTEMPTS: u32 = 8;

/// What a loop starts from for compaction.
#[derive(Debug, Clone, Default)]
pub struct ContextSetup {
    /// The provider's context window in tokens (0: compaction off).
    pub window: u64,
    /// The session's layer-1 decisions (a fork starts from its parent's).
    pub ledger: Ledger,
    /// Summaries are prepared ahead, from 70% of the threshold, while the
    /// agent goes on.
    pub work_ahead: bool,
    /// The loop continues a stored session: when its first request is
    /// estimated above the window − 8,000, the history is compacted first.
    pub resumed: bool,
    /// The loop's only job is to compact the history (manual compaction):
    /// it summarises, stores the result and finishes, with no model turn.
    pub compact_only: bool,
}

/// Why a summary is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// The estimate reached the threshold.
    Auto,
    /// Someone asked for it (`troupe sessions compact`, `/compact`, the API).
    Manual,
    /// A stored session is continued with an estimate near the window.
    Resume,
    /// The provider refused the prompt as too long.
    Emergency,
}

impl Trigger {
    /// The trigger as events and spans name it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Manual => "manual",
            Self::Resume => "resume",
            Self::Emergency => "emergency",
        }
    }
}

/// A summary prepared ahead, for the history prefix of `key`.
#[derive(Debug)]
struct Ahead {
    key: PrefixKey,
    state: AheadState,
}

#[derive(Debug)]
enum AheadState {
    /// Its request runs beside the agent's turns.
    InFlight {
        epoch: u64,
        /// `compact ahead`: the preparation's request runs in it.
        span: SpanId,
    },
    /// Its summary, ready to swap in.
    Ready(String),
}

/// The compaction state of one loop.
#[derive(Debug)]
pub(super) struct ContextState {
    window: u64,
    pub(super) ledger: Ledger,
    estimate: TokenEstimate,
    breaker: Breaker,
    /// Layer 1 ran for the coming model call.
    offloaded: bool,
    /// Layer 1 under pressure (large results offloaded wherever they are,
    /// the recent batch included) ran for the coming model call.
    relieved: bool,
    /// No automatic summary before the coming model call (it failed, or
    /// there was nothing to summarise).
    skip_summary: bool,
    /// The emergency compaction of this turn was used.
    emergency_used: bool,
    /// Files read most recently, newest first.
    recent_files: VecDeque<FileSnapshot>,
    /// Prepare summaries ahead.
    work_ahead: bool,
    /// A summary prepared (or being prepared) ahead.
    ahead: Option<Ahead>,
    /// The first request of a continued session is still to come.
    resume_pending: bool,
    /// Only compact, then finish.
    pub(super) compact_only: bool,
}

impl ContextState {
    pub(super) fn new(setup: ContextSetup) -> Self {
        Self {
            window: setup.window,
            ledger: setup.ledger,
            estimate: TokenEstimate::reset(),
            breaker: Breaker::default(),
            offloaded: false,
            relieved: false,
            skip_summary: false,
            emergency_used: false,
            recent_files: VecDeque::new(),
            work_ahead: setup.work_ahead,
            ahead: None,
            resume_pending: setup.resumed,
            compact_only: setup.compact_only,
        }
    }

    /// The estimate's anchor.
    #[cfg(test)]
    pub(super) fn estimate(&self) -> TokenEstimate {
        self.estimate
    }

    /// Whether a summary is being prepared ahead (`Some(false)`) or is
    /// ready (`Some(true)`).
    #[cfg(test)]
    pub(super) fn prepared(&self) -> Option<bool> {
        self.ahead
            .as_ref()
            .map(|ahead| matches!(ahead.state, AheadState::Ready(_)))
    }

    /// Whether automatic summaries are suspended.
    #[cfg(test)]
    pub(super) fn breaker_is_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Remembers a file the agent read (for the recovery attachment).
    pub(super) fn file_read(&mut self, path: String, content: String) {
        self.recent_files.retain(|file| file.path != path);
        self.recent_files.push_front(FileSnapshot { path, content });
        self.recent_files.truncate(RECOVERY_FILES);
    }
}

/// A summary request in flight.
pub(super) struct Summarising {
    pub(super) epoch: u64,
    /// Messages before this index are being summarised.
    cut: usize,
    trigger: Trigger,
    span: SpanId,
    before_tokens: u64,
    /// Too-long answers so far (groups dropped).
    too_long: u32,
}

impl Summarising {
    pub(super) fn span(&self) -> SpanId {
        self.span
    }
}

/// Characters of a request as the estimate counts them.
fn request_chars(system_chars: usize, tools: &[ToolDefinition], history_chars: u64) -> u64 {
    let tools: usize = tools
        .iter()
        .map(|tool| tool.name.len() + tool.description.len() + tool.input_schema.to_string().len())
        .sum();
    (system_chars + tools) as u64 + history_chars
}

impl AgentLoop {
    /// The messages a request carries: the history with the ledger applied.
    pub(super) fn request_messages(&self) -> Vec<Message> {
        self.context.ledger.apply(self.transcript.messages())
    }

    fn system_chars(&self) -> usize {
        self.system.stable.len() + self.system.environment.len()
    }

    /// Characters of the next request (the history as the ledger sends
    /// it), counted without building it.
    pub(super) fn next_request_chars(&self) -> u64 {
        let tools = self.catalogue.offered(self.permissions.mode());
        let history = self.context.ledger.sent_chars(self.transcript.messages());
        request_chars(self.system_chars(), tools, history)
    }

    /// The estimate of the next request.
    pub(super) fn estimated_tokens(&self) -> u64 {
        self.context.estimate.tokens(self.next_request_chars())
    }

    /// Re-anchors the estimate after a model call of this agent answered
    /// with `usage` (its answer is the last message).
    pub(super) fn re_anchor(&mut self, usage: &Usage) {
        if usage.input + usage.output + usage.cache_read + usage.cache_write == 0 {
            return; // the provider reported nothing to anchor to
        }
        self.context.estimate = TokenEstimate::anchored(usage, self.next_request_chars());
    }

    /// Layer 1 before a model call: results to offload or to keep are
    /// decided (once) and handed to the interpreter. True when it waits for
    /// [`super::Input::Offloaded`].
    pub(super) fn offload_step(&mut self, out: &mut Vec<Effect>) -> bool {
        if std::mem::take(&mut self.context.offloaded) || self.context.window == 0 {
            return false;
        }
        let plan: OffloadPlan = self.context.ledger.plan(self.transcript.messages());
        if plan.is_empty() {
            return false;
        }
        self.phase = Phase::Offloading;
        out.push(Effect::Offload(plan));
        true
    }

    /// The interpreter spilled what it could (`spilled`: call id and path).
    pub(super) fn on_offloaded(&mut self, spilled: Vec<(String, String)>, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Offloading) {
            return;
        }
        let before = self.next_request_chars();
        let count = spilled.len();
        for (call_id, path) in spilled {
            self.context.ledger.spilled(&call_id, &path);
        }
        if self.context.relieved && count > 0 {
            // Results inside the anchored part may have gone: the estimate
            // is scaled by what is left rather than floored at the anchor.
            let before_tokens = self.estimated_tokens();
            let after = self.next_request_chars();
            self.context.estimate = self.context.estimate.shrunk(before, after);
            out.push(Effect::Emit(EventKind::notice(format!(
                "context near the window: {count} large tool result(s) offloaded to spill \
                 files (about {before_tokens} → {} tokens)",
                self.estimated_tokens()
            ))));
        }
        self.phase = Phase::Idle;
        self.context.offloaded = true;
        self.model_call(out);
    }

    /// The threshold summaries are made for: the automatic one, or half the
    /// window when the window is too small for automatic summaries.
    fn summary_threshold(&self) -> u64 {
        auto_threshold(self.context.window).unwrap_or(self.context.window / 2)
    }

    /// Layer 2 before a model call: the first request of a continued
    /// session estimated above the window − 8,000 compacts first (whatever
    /// the window); otherwise, when the estimate reaches the threshold and
    /// the breaker allows, the step [`choose`] names: large results offloaded
    /// wherever they are (when a summary would not shrink the history by the
    /// margin, or would leave it at the threshold), an automatic summary, or
    /// neither — the compaction is skipped, with no request. True when a
    /// compaction (or the offloading) began.
    pub(super) fn summary_step(&mut self, out: &mut Vec<Effect>) -> bool {
        let relieved = std::mem::take(&mut self.context.relieved);
        if std::mem::take(&mut self.context.resume_pending) && self.context.window > 0 {
            let estimate = self.estimated_tokens();
            if estimate >= resume_threshold(self.context.window)
                && self.begin_compaction(Trigger::Resume, estimate, out)
            {
                return true;
            }
        }
        if std::mem::take(&mut self.context.skip_summary) {
            return false;
        }
        let Some(threshold) = auto_threshold(self.context.window) else {
            return false;
        };
        let estimate = self.estimated_tokens();
        if estimate < threshold || !self.context.breaker.allows(self.guard.turns()) {
            return false;
        }
        let sizes = self.sizes(self.summary_cut());
        let relief = if relieved {
            OffloadPlan::default() // tried for this call: what is left stays
        } else {
            let needed = relief_needed(sizes.request, estimate, threshold);
            self.context
                .ledger
                .relief(self.transcript.messages(), needed)
        };
        match choose(sizes, estimate, threshold, !relief.is_empty()) {
            Step::Offload => {
                self.context.relieved = true;
                self.phase = Phase::Offloading;
                out.push(Effect::Offload(relief));
                true
            }
            Step::Summarise => self.begin_compaction(Trigger::Auto, estimate, out),
            Step::Skip(why) => {
                self.summary_skipped(Trigger::Auto, estimate, why, false, out);
                true
            }
        }
    }

    /// Where a summary would cut the history now (`None`: nothing precedes
    /// the tail it keeps).
    pub(super) fn summary_cut(&self) -> Option<usize> {
        let budgets = budgets(self.summary_threshold());
        tail_start(self.transcript.messages(), budgets.tail_tokens).filter(|cut| *cut > 0)
    }

    /// What the history offers a summary cut at `cut`, in characters as
    /// the next request carries them.
    pub(super) fn sizes(&self, cut: Option<usize>) -> Sizes {
        let request = self.next_request_chars();
        let Some(cut) = cut.filter(|cut| *cut > 0) else {
            return Sizes {
                request,
                older: 0,
                replacement: 0,
            };
        };
        let messages = self.transcript.messages();
        let ledger = &self.context.ledger;
        Sizes {
            request,
            older: ledger.sent_chars(&messages[..cut]),
            replacement: ledger.sent_chars(&self.summary_messages("", cut)),
        }
    }

    /// What replaces `messages[..cut]`: the summary and the recovery
    /// attachment (the files read last whose reading is not in the kept
    /// tail, the tools on offer, the task plan when the tail does not show
    /// it) as one user message. The plan travels with the summary, not in
    /// the system prompt, so the request's prefix stays as it is when the
    /// plan changes later.
    fn summary_messages(&self, summary: &str, cut: usize) -> Vec<Message> {
        let tools = self.catalogue.offered(self.permissions.mode());
        let tail = &self.transcript.messages()[cut..];
        let files: Vec<FileSnapshot> = self.context.recent_files.iter().cloned().collect();
        let files = files_outside(&files, tail);
        let budgets = budgets(self.summary_threshold());
        let mut attachment = recovery_attachment(&files, tools, budgets.file_tokens);
        if let Some(plan) = crate::prompt::task_plan_reminder(self.transcript.task_plan(), tail) {
            attachment.push_str("\n\n");
            attachment.push_str(&plan);
        }
        compacted(summary, &attachment, &[])
    }

    /// Work ahead, as a model call starts: from 70% of the threshold (below
    /// it), a summary of the older history is asked for beside the agent's
    /// call — once at a time, never moving the estimate, never touching the
    /// history. Its answer waits in [`ContextState`] until the threshold.
    pub(super) fn prepare_step(&mut self, out: &mut Vec<Effect>) {
        if !self.context.work_ahead || self.context.ahead.is_some() {
            return;
        }
        let Some(threshold) = auto_threshold(self.context.window) else {
            return;
        };
        if !self.context.breaker.allows(self.guard.turns()) {
            return;
        }
        let estimate = self.estimated_tokens();
        if !should_prepare(estimate, threshold) {
            return;
        }
        // Nothing is prepared that could not shrink the history by the
        // margin (a cut holding only the task, say).
        let Some(cut) = self.summary_cut() else {
            return;
        };
        if !self.sizes(Some(cut)).worth_summarising() {
            return;
        }
        let messages = self.transcript.messages();
        let key = prefix_key(messages, cut);
        let request = ChatRequest {
            system: self.system.clone(),
            messages: summary_request(&self.context.ledger.apply(&messages[..cut])),
            tools: Vec::new(),
            session_id: Some(self.cache_key.clone()),
        };
        self.epoch += 1;
        let span = self.open_span(None, compaction_span("ahead", estimate), out);
        self.context.ahead = Some(Ahead {
            key,
            state: AheadState::InFlight {
                epoch: self.epoch,
                span,
            },
        });
        out.push(Effect::Summarise {
            epoch: self.epoch,
            request,
            span,
        });
    }

    /// Whether `epoch` is the summary being prepared ahead.
    fn is_preparing(&self, epoch: u64) -> bool {
        matches!(
            &self.context.ahead,
            Some(Ahead { state: AheadState::InFlight { epoch: e, .. }, .. }) if *e == epoch
        )
    }

    /// The summary prepared ahead answered: kept if it still fits the
    /// history, else discarded. Its usage is spent, never an anchor.
    fn on_prepared(
        &mut self,
        result: Result<String, ProviderError>,
        usage: &Usage,
        out: &mut Vec<Effect>,
    ) {
        self.count_usage(usage);
        let Some(Ahead {
            key,
            state: AheadState::InFlight { span, .. },
        }) = self.context.ahead.take()
        else {
            return;
        };
        match result {
            Ok(answer) => {
                let summary = extract_summary(&answer);
                if summary.trim().is_empty() {
                    note(out, span, SpanNote::Error("empty_summary"));
                } else if !still_matches(&key, self.transcript.messages()) {
                    note(out, span, SpanNote::Error("stale"));
                    tracing::debug!("a summary prepared ahead no longer fits the history");
                } else {
                    self.context.ahead = Some(Ahead {
                        key,
                        state: AheadState::Ready(summary),
                    });
                }
            }
            // The summary is made at the threshold instead.
            Err(error) => note(out, span, SpanNote::ChatError(error.kind)),
        }
        close(out, span);
    }

    /// The one place a compaction of any trigger starts. An automatic one
    /// takes the summary prepared ahead when it still fits the history: a
    /// ready one is swapped in at once, one still on its way is waited for;
    /// a stale one is discarded and a summary asked for now. False (and
    /// nothing started) when the history is too short to cut.
    pub(super) fn begin_compaction(
        &mut self,
        trigger: Trigger,
        before_tokens: u64,
        out: &mut Vec<Effect>,
    ) -> bool {
        if trigger == Trigger::Auto
            && let Some(ahead) = self.context.ahead.take()
        {
            let fits = still_matches(&ahead.key, self.transcript.messages());
            let cut = ahead.key.len;
            match ahead.state {
                AheadState::Ready(summary) if fits => {
                    self.swap_prepared(summary, cut, before_tokens, out);
                    return true;
                }
                AheadState::InFlight { epoch, span: ahead } if fits => {
                    // Its request goes on in the preparation's span; the
                    // wait for it is this compaction's.
                    close(out, ahead);
                    self.announce_compaction("started", trigger, before_tokens, 0, out);
                    let span =
                        self.open_span(None, compaction_span(trigger.as_str(), before_tokens), out);
                    self.phase = Phase::Summarising(Summarising {
                        epoch,
                        cut,
                        trigger,
                        span,
                        before_tokens,
                        too_long: 0,
                    });
                    return true;
                }
                AheadState::InFlight { epoch, span } => {
                    note(out, span, SpanNote::Error("stale"));
                    close(out, span);
                    out.push(Effect::Cancel { epoch });
                }
                AheadState::Ready(_) => {}
            }
            tracing::debug!("a summary prepared ahead no longer fits the history; discarded");
        }
        self.start_summary(trigger, before_tokens, 0, out)
    }

    /// Swaps in the summary prepared ahead for `messages[..cut]`: no model
    /// call on the agent's path.
    fn swap_prepared(
        &mut self,
        summary: String,
        cut: usize,
        before_tokens: u64,
        out: &mut Vec<Effect>,
    ) {
        let trigger = Trigger::Auto;
        self.announce_compaction("started", trigger, before_tokens, 0, out);
        let span = self.open_span(None, compaction_span(trigger.as_str(), before_tokens), out);
        let summarising = Summarising {
            epoch: self.epoch,
            cut,
            trigger,
            span,
            before_tokens,
            too_long: 0,
        };
        self.apply_summary(summarising, &summary, out);
    }

    /// The one place a compaction's start and end are told: the
    /// `compaction` event, and the PreCompact (`started`) or PostCompact
    /// (`finished`, `failed`) hooks, for every trigger alike.
    fn announce_compaction(
        &self,
        phase: &str,
        trigger: Trigger,
        before_tokens: u64,
        after_tokens: u64,
        out: &mut Vec<Effect>,
    ) {
        out.push(Effect::Emit(EventKind::Compaction {
            phase: phase.into(),
            trigger: trigger.as_str().into(),
            before_tokens,
            after_tokens,
        }));
        self.compaction_hooks(phase, trigger.as_str(), before_tokens, after_tokens, out);
    }

    /// Manual compaction: the loop's only job. Summarises the older history
    /// (whatever the breaker says) and finishes; a history too short to cut
    /// ends the loop with an error saying so.
    pub(super) fn compact_now(&mut self, out: &mut Vec<Effect>) {
        let before = self.estimated_tokens();
        if self.begin_compaction(Trigger::Manual, before, out) {
            return;
        }
        let text = format!(
            "(Nothing to compact: the conversation, about {before} tokens, is short enough to \
             be kept whole.)"
        );
        out.push(Effect::Emit(EventKind::Error {
            kind: "nothing_to_compact".into(),
            message: text.clone(),
        }));
        self.finish_with(
            RunOutcome {
                status: RunStatus::Error,
                stop_reason: "nothing_to_compact".into(),
                final_text: text,
                usage: Usage::default(),
            },
            out,
        );
    }

    /// Starts a summary of the older history. False (and nothing started)
    /// when the history is too short to cut, or when what precedes the cut
    /// is too little for its summary to shrink the history by the margin.
    fn start_summary(
        &mut self,
        trigger: Trigger,
        before_tokens: u64,
        too_long: u32,
        out: &mut Vec<Effect>,
    ) -> bool {
        let Some(cut) = self.summary_cut() else {
            return false;
        };
        if !self.sizes(Some(cut)).worth_summarising() {
            return false;
        }
        let messages = self.transcript.messages();
        let older = &messages[..cut];
        let groups = crate::compact::summary::user_turn_starts(older).len();
        let part = without_oldest_groups(older, groups_to_drop(too_long, groups));
        let request = ChatRequest {
            system: self.system.clone(),
            messages: summary_request(&self.context.ledger.apply(part)),
            tools: Vec::new(),
            session_id: Some(self.cache_key.clone()),
        };
        self.epoch += 1;
        let span = self.open_span(None, compaction_span(trigger.as_str(), before_tokens), out);
        if too_long == 0 {
            self.announce_compaction("started", trigger, before_tokens, 0, out);
        }
        self.phase = Phase::Summarising(Summarising {
            epoch: self.epoch,
            cut,
            trigger,
            span,
            before_tokens,
            too_long,
        });
        out.push(Effect::Summarise {
            epoch: self.epoch,
            request,
            span,
        });
        true
    }

    /// The summary model call of `epoch` answered.
    pub(super) fn on_summarised(
        &mut self,
        epoch: u64,
        result: Result<String, ProviderError>,
        usage: Usage,
        out: &mut Vec<Effect>,
    ) {
        if self.is_preparing(epoch) {
            self.on_prepared(result, &usage, out);
            return;
        }
        if !matches!(&self.phase, Phase::Summarising(s) if s.epoch == epoch) {
            return;
        }
        // Spent like any call, but never an anchor for the estimate.
        self.count_usage(&usage);
        let Phase::Summarising(summarising) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        let summary = match result {
            Ok(answer) => extract_summary(&answer),
            Err(error)
                if error.kind == ProviderErrorKind::PromptTooLong
                    && summarising.too_long + 1 < SUMMARY_ATTEMPTS =>
            {
                // Too long to summarise: leave older groups out and ask again.
                let (trigger, before, too_long) = (
                    summarising.trigger,
                    summarising.before_tokens,
                    summarising.too_long + 1,
                );
                close(out, summarising.span);
                if !self.start_summary(trigger, before, too_long, out) {
                    self.summary_failed(trigger, before, "nothing left to summarise", out);
                }
                return;
            }
            Err(error) => {
                note(out, summarising.span, SpanNote::ChatError(error.kind));
                close(out, summarising.span);
                let Summarising {
                    trigger,
                    before_tokens,
                    ..
                } = summarising;
                self.summary_failed(trigger, before_tokens, &error.to_string(), out);
                return;
            }
        };
        if summary.trim().is_empty() {
            close(out, summarising.span);
            self.summary_failed(
                summarising.trigger,
                summarising.before_tokens,
                "the summary was empty",
                out,
            );
            return;
        }
        self.apply_summary(summarising, &summary, out);
    }

    /// The one place a compaction that worked ends: the summary and the
    /// recovery attachment replace `messages[..cut]`, the estimate is reset,
    /// the marker is stored; then the turn goes on (or, for a manual
    /// compaction, the loop finishes). A summary that would not shrink the
    /// next request by the margin is discarded instead: the compaction is
    /// skipped.
    fn apply_summary(&mut self, summarising: Summarising, summary: &str, out: &mut Vec<Effect>) {
        let summary_messages = self.summary_messages(summary, summarising.cut);
        let before_chars = self.next_request_chars();
        let after_chars = {
            let ledger = &self.context.ledger;
            let kept = &self.transcript.messages()[summarising.cut..];
            let tools = self.catalogue.offered(self.permissions.mode());
            request_chars(
                self.system_chars(),
                tools,
                ledger.sent_chars(&summary_messages) + ledger.sent_chars(kept),
            )
        };
        if !crate::compact::shrink::shrank_enough(before_chars, after_chars) {
            note(out, summarising.span, SpanNote::Error("no_shrink"));
            close(out, summarising.span);
            tracing::debug!(
                before_chars,
                after_chars,
                "a summary that would not shrink the history is discarded"
            );
            self.summary_skipped(
                summarising.trigger,
                summarising.before_tokens,
                SUMMARY_DID_NOT_SHRINK,
                true,
                out,
            );
            return;
        }
        self.context.estimate = TokenEstimate::reset();
        let marker: CompactionMarker = self.transcript.compact(
            summary_messages,
            summarising.cut,
            self.now,
            (summarising.before_tokens, 0),
        );
        self.context.ledger.retain_for(self.transcript.messages());
        // A summary prepared ahead for the prefix just replaced is stale (one
        // still on its way is checked when it answers).
        if let Some(Ahead {
            key,
            state: AheadState::Ready(_),
        }) = &self.context.ahead
            && !still_matches(key, self.transcript.messages())
        {
            self.context.ahead = None;
        }
        let after = self.estimated_tokens();
        let mut marker = marker;
        marker.after_tokens = after;
        if summarising.trigger == Trigger::Auto {
            // A summary that leaves the history at the threshold did not
            // help: it counts as a failure, so summaries cannot loop.
            if after >= self.summary_threshold() {
                self.context.breaker.failed(self.guard.turns());
            } else {
                self.context.breaker.succeeded();
            }
        }
        note(
            out,
            summarising.span,
            SpanNote::Compaction {
                tokens_after: after,
            },
        );
        close(out, summarising.span);
        self.announce_compaction(
            "finished",
            summarising.trigger,
            marker.before_tokens,
            after,
            out,
        );
        // The marker is durable before the next request is built from it.
        self.context.skip_summary = true;
        self.context.offloaded = true;
        let then = match summarising.trigger {
            Trigger::Manual => AfterSave::Finish(RunOutcome {
                status: RunStatus::Finished,
                stop_reason: "compacted".into(),
                final_text: format!(
                    "Compacted the conversation: about {} tokens before, {after} after.",
                    marker.before_tokens
                ),
                usage: Usage::default(),
            }),
            Trigger::Emergency if after > emergency_limit(self.context.window) => {
                AfterSave::TooLong(after)
            }
            _ => AfterSave::ModelCall,
        };
        self.phase = Phase::Saving(then);
        self.saves_in_flight.push_back(None);
        out.push(Effect::SaveMarker(marker));
    }

    /// The one place a compaction that failed ends: an automatic one is
    /// counted by the breaker and the turn goes on with the full history (as
    /// after a failed resume summary); a manual one ends the loop with the
    /// reason; an emergency one ends the turn.
    fn summary_failed(
        &mut self,
        trigger: Trigger,
        before_tokens: u64,
        why: &str,
        out: &mut Vec<Effect>,
    ) {
        self.announce_compaction("failed", trigger, before_tokens, 0, out);
        self.no_summary("failed", trigger, before_tokens, why, out);
    }

    /// The one place a compaction that would not shrink the history ends:
    /// no summary is applied (none was asked for, or its answer left the
    /// history too large), the `compaction` event says `skipped`, and it
    /// goes on as after a failure — counted by the breaker when automatic.
    /// `started`: its start was announced (the PostCompact hooks then run).
    fn summary_skipped(
        &mut self,
        trigger: Trigger,
        before_tokens: u64,
        why: &str,
        started: bool,
        out: &mut Vec<Effect>,
    ) {
        if started {
            self.announce_compaction("skipped", trigger, before_tokens, 0, out);
        } else {
            out.push(Effect::Emit(EventKind::Compaction {
                phase: "skipped".into(),
                trigger: trigger.as_str().into(),
                before_tokens,
                after_tokens: 0,
            }));
        }
        self.no_summary("skipped", trigger, before_tokens, why, out);
    }

    /// After a compaction that applied nothing (`phase`: `failed` or
    /// `skipped`), by trigger.
    fn no_summary(
        &mut self,
        phase: &str,
        trigger: Trigger,
        before_tokens: u64,
        why: &str,
        out: &mut Vec<Effect>,
    ) {
        match trigger {
            Trigger::Auto | Trigger::Resume => {
                if trigger == Trigger::Auto {
                    self.context.breaker.failed(self.guard.turns());
                }
                out.push(Effect::Emit(EventKind::notice(format!(
                    "context compaction {phase} ({why}); going on with the full history"
                ))));
                self.context.skip_summary = true;
                self.context.offloaded = true;
                self.model_call(out);
            }
            Trigger::Emergency => self.end_too_long(before_tokens, out),
            Trigger::Manual => {
                let text = format!("(The conversation could not be compacted: {why}.)");
                out.push(Effect::Emit(EventKind::Error {
                    kind: "compaction_failed".into(),
                    message: text.clone(),
                }));
                self.finish_with(
                    RunOutcome {
                        status: RunStatus::Error,
                        stop_reason: "compaction_failed".into(),
                        final_text: text,
                        usage: Usage::default(),
                    },
                    out,
                );
            }
        }
    }

    /// The provider refused the prompt as too long: compact once (whatever
    /// the breaker says, with a summary made now: the provider counted more
    /// than the estimate, and one prepared ahead keeps a longer tail) and try
    /// again; the second refusal ends the turn. When no summary is worth
    /// making (the history is one huge recent batch, say), every result over
    /// the pressure floor is offloaded instead (the provider's count, not the
    /// estimate, said it is too long). True when an emergency compaction (or
    /// the offloading) started.
    pub(super) fn emergency(&mut self, out: &mut Vec<Effect>) -> bool {
        if self.context.window == 0 || self.context.emergency_used {
            return false;
        }
        self.context.emergency_used = true;
        let before = self.estimated_tokens();
        if self.begin_compaction(Trigger::Emergency, before, out) {
            return true;
        }
        let relief = self
            .context
            .ledger
            .relief(self.transcript.messages(), u64::MAX);
        if relief.is_empty() {
            return false;
        }
        self.context.relieved = true;
        self.phase = Phase::Offloading;
        out.push(Effect::Offload(relief));
        true
    }

    /// A new turn of the model may use the emergency path again.
    pub(super) fn turn_done(&mut self) {
        self.context.emergency_used = false;
    }

    /// Ends the turn: the history does not fit the window even compacted.
    pub(super) fn end_too_long(&mut self, tokens: u64, out: &mut Vec<Effect>) {
        let text = format!(
            "(The conversation is too long for the model's context window even after compacting \
             it: about {tokens} tokens for a window of {}. Start a new session, or continue with \
             a model that has a larger window.)",
            self.context.window
        );
        out.push(Effect::Emit(EventKind::Error {
            kind: "prompt_too_long".into(),
            message: text.clone(),
        }));
        self.transcript.close(&text);
        self.finish_with(
            crate::RunOutcome {
                status: troupe_protocol::events::RunStatus::Error,
                stop_reason: "prompt_too_long".into(),
                final_text: text,
                usage: Usage::default(),
            },
            out,
        );
    }
}

/// `compact {trigger}` with the estimate before it.
fn compaction_span(trigger: &str, tokens_before: u64) -> SpanKind {
    SpanKind::Compaction {
        trigger: trigger.to_string(),
        tokens_before,
    }
}
