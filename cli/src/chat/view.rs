//! What the chat, and `troupe run` on a terminal, show for each event of a
//! turn: the main agent's answer as Markdown blocks, one line per tool call with its status, sub-agent lines
//! labelled by their agent path, notices and errors, and the counts the
//! spinner shows. Pure: the screen prints what it returns.

use std::collections::HashMap;

use troupe_protocol::events::{EventKind, NOTICE_MODEL_RETRY, RunEvent, RunStatus, preview};

use super::markdown::MarkdownStream;
use crate::render::{
    CallTargets, compaction_line, finished_line, hook_line, rewound_line, stop_cause_words,
};
use crate::task_plan_view::TaskPlans;

/// One thing to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shown {
    /// Part of the answer, Markdown.
    Markdown(String),
    /// A line of its own.
    Line(String),
    /// A progress line (dim where colour is on).
    Dim(String),
    /// An error line.
    Error(String),
}

/// The view of one turn.
#[derive(Debug, Default)]
pub(crate) struct TurnView {
    answer: MarkdownStream,
    /// Text of each sub-agent's current response, shown before its tool lines.
    narration: HashMap<String, String>,
    /// Targets of started calls, by agent path and call id.
    targets: CallTargets,
    /// Each agent's task plan as last shown (kept by the chat between turns).
    pub task_plans: TaskPlans,
    /// The main agent's iteration.
    pub iteration: u32,
    /// Tokens used so far by the whole tree (input, output and cache).
    pub tokens: u64,
    /// The main agent is thinking.
    pub thinking: bool,
}

impl TurnView {
    /// What `event` shows.
    pub(crate) fn on(&mut self, event: &RunEvent) -> Vec<Shown> {
        let main = event.agent_path == "main";
        let prefix = if main {
            String::new()
        } else {
            format!("[{}] ", event.agent_path)
        };
        let mut shown = Vec::new();
        match &event.kind {
            EventKind::RunStarted { .. } => {}
            EventKind::Iteration { n } => {
                if main {
                    self.flush_answer(&mut shown);
                    self.iteration = *n;
                } else {
                    self.narration.remove(&event.agent_path);
                }
            }
            EventKind::TextDelta { text } => {
                if main {
                    self.thinking = false;
                    shown.extend(self.answer.push(text).map(Shown::Markdown));
                } else {
                    self.narration
                        .entry(event.agent_path.clone())
                        .or_default()
                        .push_str(text);
                }
            }
            EventKind::ThinkingDelta { .. } => self.thinking = main,
            EventKind::ToolStarted {
                call_id,
                name,
                args_preview,
                target,
            } => {
                if main {
                    self.flush_answer(&mut shown);
                } else if let Some(narration) = self.narration.remove(&event.agent_path) {
                    let narration = narration.trim();
                    if !narration.is_empty() {
                        shown.push(Shown::Dim(format!("{prefix}{}", preview(narration))));
                    }
                }
                shown.push(Shown::Line(format!("{prefix}→ {name} {args_preview}")));
                self.targets
                    .started(&event.agent_path, call_id, target.as_ref());
            }
            EventKind::ToolFinished {
                call_id,
                name,
                is_error,
                output_preview,
                output_lines,
                duration_ms,
            } => {
                let target = self.targets.finished(&event.agent_path, call_id);
                let line = finished_line(
                    name,
                    target.as_deref(),
                    *is_error,
                    *duration_ms,
                    *output_lines,
                    output_preview,
                );
                shown.push(Shown::Dim(format!("{prefix}{line}")));
            }
            // The turn asks; the answer's line is enough here.
            EventKind::ApprovalRequested { .. } => {}
            EventKind::ApprovalResolved { outcome, .. } => {
                shown.push(Shown::Dim(format!(
                    "{prefix}  approval: {}",
                    outcome.as_str()
                )));
            }
            EventKind::Usage {
                input,
                output,
                cache_read,
                cache_write,
            } => self.tokens += input + output + cache_read + cache_write,
            EventKind::Compaction {
                phase,
                trigger,
                before_tokens,
                after_tokens,
            } => shown.push(Shown::Dim(format!(
                "{prefix}{}",
                compaction_line(phase, trigger, *before_tokens, *after_tokens)
            ))),
            EventKind::SubagentStarted { role, task } => {
                shown.push(Shown::Line(format!(
                    "{prefix}started ({role}): {}",
                    preview(task)
                )));
            }
            EventKind::SubagentFinished { status } => {
                self.narration.remove(&event.agent_path);
                shown.push(Shown::Line(format!(
                    "{prefix}finished: {}",
                    status.as_str()
                )));
            }
            EventKind::UserMessage { text } => {
                shown.push(Shown::Dim(format!(
                    "» {} (sent with the next step)",
                    preview(text)
                )));
            }
            EventKind::Rewound { .. } => {
                if let Some(line) = rewound_line(&event.kind) {
                    shown.push(Shown::Dim(format!("{prefix}{line}")));
                }
            }
            EventKind::RunMoved { .. } => {
                if let Some(line) = crate::render::moved_line(&event.kind) {
                    shown.push(Shown::Dim(format!("{prefix}{line}")));
                }
            }
            EventKind::Notice { text, code } => {
                if code.as_deref() == Some(NOTICE_MODEL_RETRY) {
                    shown.push(Shown::Dim(format!("{prefix}{text}")));
                } else {
                    shown.push(Shown::Line(format!("{prefix}{text}")));
                }
            }
            EventKind::Hook {
                event,
                command,
                outcome,
                message,
                ..
            } => {
                let (line, quiet) = hook_line(event, command, outcome, message.as_deref());
                if quiet {
                    shown.push(Shown::Dim(format!("{prefix}{line}")));
                } else {
                    shown.push(Shown::Line(format!("{prefix}{line}")));
                }
            }
            EventKind::PlanUpdated { explanation, plan } => {
                if main {
                    self.flush_answer(&mut shown);
                }
                let lines = self
                    .task_plans
                    .update(&event.agent_path, plan, explanation.as_deref());
                shown.extend(
                    lines
                        .into_iter()
                        .map(|line| Shown::Line(format!("{prefix}{line}"))),
                );
            }
            // Taken before most turns that write: a line each would drown
            // the answer (`troupe checkpoints list` shows them).
            EventKind::CheckpointCreated { .. } => {}
            EventKind::Error { kind, message } => {
                shown.push(Shown::Error(format!("{prefix}error ({kind}): {message}")));
            }
            EventKind::RunFinished {
                status,
                stop_reason,
                usage_total,
                ..
            } => {
                if main {
                    self.flush_answer(&mut shown);
                    shown.push(Shown::Dim(ending_line(
                        *status,
                        stop_reason,
                        self.iteration,
                        usage_total.total(),
                    )));
                }
            }
        }
        shown
    }

    fn flush_answer(&mut self, shown: &mut Vec<Shown>) {
        shown.extend(self.answer.finish().map(Shown::Markdown));
    }
}

/// What the spinner says the agent does: cancelling, waiting for an
/// answer, thinking or working; its step, tokens and time.
pub(crate) fn activity_text(
    view: &TurnView,
    seconds: u64,
    waiting: bool,
    cancelling: bool,
) -> String {
    let doing = if cancelling {
        "cancelling"
    } else if waiting {
        "waiting for you"
    } else if view.thinking {
        "thinking"
    } else {
        "working"
    };
    let step = view.iteration.max(1);
    let working_on = view
        .task_plans
        .current_step("main")
        .map(|current| format!(" · {current}"))
        .unwrap_or_default();
    format!(
        "{doing} · step {step}{working_on} · {} tokens · {seconds}s",
        view.tokens
    )
}

/// The line that closes a turn: how it ended, its steps and tokens.
pub(crate) fn ending_line(status: RunStatus, stop_reason: &str, steps: u32, tokens: u64) -> String {
    let how = match status {
        RunStatus::Finished => "done".to_string(),
        RunStatus::Cancelled => "cancelled".to_string(),
        RunStatus::Stopped => format!("stopped: {}", stop_cause_words(stop_reason)),
        RunStatus::Error => format!("error: {}", stop_cause_words(stop_reason)),
        RunStatus::Interrupted => "interrupted".to_string(),
    };
    let steps = match steps {
        1 => "1 step".to_string(),
        n => format!("{n} steps"),
    };
    format!("({how} · {steps} · {tokens} tokens)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::model::Usage;

    fn event(path: &str, kind: EventKind) -> RunEvent {
        RunEvent {
            seq: 1,
            run_id: "r".into(),
            session_id: "s".into(),
            agent_path: path.into(),
            ts: String::new(),
            kind,
        }
    }

    fn text(path: &str, text: &str) -> RunEvent {
        event(path, EventKind::TextDelta { text: text.into() })
    }

    #[test]
    fn the_answer_streams_as_markdown_blocks_and_flushes_before_a_tool_line() {
        let mut view = TurnView::default();
        assert!(
            view.on(&event("main", EventKind::Iteration { n: 1 }))
                .is_empty()
        );
        assert!(view.on(&text("main", "Let me ")).is_empty());
        assert_eq!(
            view.on(&text("main", "look.\n\nFirst")),
            vec![Shown::Markdown("Let me look.\n\n".into())]
        );
        let started = view.on(&event(
            "main",
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "read_file".into(),
                args_preview: "{\"path\":\"a.rs\"}".into(),
                target: Some("a.rs".into()),
            },
        ));
        assert_eq!(
            started,
            vec![
                Shown::Markdown("First".into()),
                Shown::Line("→ read_file {\"path\":\"a.rs\"}".into())
            ]
        );
        let finished = view.on(&event(
            "main",
            EventKind::ToolFinished {
                call_id: "c1".into(),
                name: "read_file".into(),
                is_error: false,
                output_preview: "x".into(),
                output_lines: 12,
                duration_ms: 3,
            },
        ));
        assert_eq!(
            finished,
            vec![Shown::Dim("✓ read_file a.rs (3 ms, 12 lines)".into())]
        );
    }

    #[test]
    fn sub_agents_are_labelled_by_path_and_their_text_is_not_the_answer() {
        let mut view = TurnView::default();
        let path = "main/fork-1";
        assert!(view.on(&text(path, "checking the tests")).is_empty());
        let started = view.on(&event(
            path,
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "bash".into(),
                args_preview: "cargo test".into(),
                target: None,
            },
        ));
        assert_eq!(
            started,
            vec![
                Shown::Dim("[main/fork-1] checking the tests".into()),
                Shown::Line("[main/fork-1] → bash cargo test".into())
            ]
        );
        let done = view.on(&event(
            path,
            EventKind::SubagentFinished {
                status: RunStatus::Finished,
            },
        ));
        assert_eq!(
            done,
            vec![Shown::Line("[main/fork-1] finished: finished".into())]
        );
    }

    #[test]
    fn usage_counts_tokens_and_the_end_says_how_the_turn_went() {
        let mut view = TurnView::default();
        view.on(&event("main", EventKind::Iteration { n: 2 }));
        view.on(&event(
            "main",
            EventKind::Usage {
                input: 100,
                output: 20,
                cache_read: 5,
                cache_write: 1,
            },
        ));
        assert_eq!(view.tokens, 126);
        view.on(&text("main", "All done"));
        let usage = Usage {
            input: 100,
            output: 20,
            cache_read: 5,
            cache_write: 1,
        };
        let end = view.on(&event(
            "main",
            EventKind::RunFinished {
                status: RunStatus::Finished,
                stop_reason: "end_turn".into(),
                final_text: "All done".into(),
                usage_total: usage,
            },
        ));
        assert_eq!(
            end,
            vec![
                Shown::Markdown("All done".into()),
                Shown::Dim("(done · 2 steps · 126 tokens)".into())
            ]
        );
        assert_eq!(
            ending_line(RunStatus::Stopped, "max_turns", 1, 9),
            "(stopped: turn limit · 1 step · 9 tokens)"
        );
    }
}
