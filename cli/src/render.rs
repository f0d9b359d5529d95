//! Terminal rendering of run events (SPEC §1.1, §1.5).
//!
//! Human mode writes progress to stderr — the session and run ids first, then
//! iterations, tool lines (each finished call names its target), narration
//! that preceded tool calls, task plans as they change, notices and errors,
//! and at the end the command
//! that continues the session — and leaves stdout to the final answer.
//! Colour follows `--color` and `NO_COLOR`. Text that comes from outside
//! (model text, tool names, arguments and output, provider messages) passes
//! through `sanitize::for_terminal` first, so it cannot drive the terminal;
//! Troupe's own colour codes are added after. JSON mode writes exactly one
//! event per line to stdout, flushed per line, and nothing else (byte-faithful).

use std::collections::HashMap;
use std::io::Write;

use troupe_protocol::events::{EventKind, NOTICE_MODEL_RETRY, RunEvent, RunStatus, preview};
use troupe_store::short_id;

use crate::sanitize::for_terminal;
use crate::task_plan_view::TaskPlans;

/// The line of a `run_moved` event (node names as the terminal may show
/// them).
pub(crate) fn moved_line(kind: &EventKind) -> Option<String> {
    let EventKind::RunMoved { from_node, to_node } = kind else {
        return None;
    };
    Some(format!(
        "the run moved from node {} to node {} (its node stopped answering)",
        for_terminal(from_node),
        for_terminal(to_node)
    ))
}

/// The `--color` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// Colour when stderr is a terminal and `NO_COLOR` is unset or empty.
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Whether progress on stderr is coloured: `always` and `never` say so;
/// `auto` colours only a terminal, and only when `NO_COLOR` is unset or empty
/// (<https://no-color.org>).
pub(crate) fn use_color(
    choice: ColorChoice,
    stderr_is_terminal: bool,
    no_color: Option<&str>,
) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => stderr_is_terminal && no_color.is_none_or(str::is_empty),
    }
}

/// How a person's terminal output looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenderStyle {
    /// ANSI colour (dim progress lines).
    pub color: bool,
    /// Say, when the run ends, which command continues it.
    pub next_steps: bool,
    /// The directory relative paths of the run's calls name files in (to
    /// show what an edit would change); `None` when unknown.
    pub dir: Option<std::path::PathBuf>,
}

/// Longest one-line output shown on a finished tool's line, in characters.
const OUTPUT_LINE_CHARS: usize = 80;

/// The line a `hook` event is shown as, and whether it is quiet (dim): a
/// hook that let the work go on is quiet; a block or a failure is not.
pub(crate) fn hook_line(
    event: &str,
    command: &str,
    outcome: &str,
    message: Option<&str>,
) -> (String, bool) {
    let command = for_terminal(&preview(command)).into_owned();
    let message = message
        .map(|m| for_terminal(&preview(m)).into_owned())
        .unwrap_or_default();
    match outcome {
        "continue" => (format!("hook {event} `{command}` ran"), true),
        "block" => (
            format!("hook {event} `{command}` blocked: {message}"),
            false,
        ),
        _ => (format!("hook warning: {message}"), false),
    }
}

/// The line of a finished tool call: mark, tool, target, time and what came
/// out. A one-line output is shown (shortened), a longer one counted; an
/// error shows its text.
/// `✓ read_file src/lib.rs (0 ms, 120 lines)`, `✗ bash make (15 ms): exit 2`.
pub(crate) fn finished_line(
    name: &str,
    target: Option<&str>,
    is_error: bool,
    duration_ms: u64,
    output_lines: u64,
    output_preview: &str,
) -> String {
    let mark = if is_error { "✗" } else { "✓" };
    let target = target.map(|t| format!(" {t}")).unwrap_or_default();
    let head = format!("{mark} {name}{target}");
    let output = output_preview.trim();
    if is_error {
        return format!("{head} ({duration_ms} ms): {output}");
    }
    match output_lines {
        0 => format!("{head} ({duration_ms} ms, no output)"),
        1 => {
            let mut line: String = output.chars().take(OUTPUT_LINE_CHARS).collect();
            if output.chars().count() > OUTPUT_LINE_CHARS {
                line.push('…');
            }
            format!("{head} ({duration_ms} ms): {line}")
        }
        n => format!("{head} ({duration_ms} ms, {n} lines)"),
    }
}

/// What a stop reason means, in words.
pub(crate) fn stop_cause_words(stop_reason: &str) -> String {
    match stop_reason {
        "max_turns" => "turn limit".into(),
        "unknown_tools" => "unknown tools requested".into(),
        "repeated_calls" => "the same call repeated".into(),
        "budget_tokens" => "token budget".into(),
        "budget_usd" => "cost budget".into(),
        "wall_clock" => "time limit".into(),
        "max_tool_calls" => "tool-call budget".into(),
        "hook_blocked" => "a hook blocked the prompt".into(),
        other => other.replace('_', " "),
    }
}

/// The one line that says, when a run ends, what to type next: the command
/// that continues its session and, when there is something to look into, the
/// command that shows its trace.
pub(crate) fn next_step(
    status: RunStatus,
    stop_reason: &str,
    session_id: &str,
    run_id: &str,
) -> String {
    let resume = format!("troupe resume {}", short_id(session_id));
    let trace = format!("troupe trace {}", short_id(run_id));
    match status {
        RunStatus::Finished => {
            format!("(finished) follow up with: {resume} \"…\"; trace: {trace}")
        }
        RunStatus::Stopped => format!(
            "(stopped: {}) continue with: {resume}",
            stop_cause_words(stop_reason)
        ),
        RunStatus::Cancelled => format!("(cancelled) continue with: {resume}"),
        RunStatus::Error => format!(
            "(error: {}) see: {trace}; try again with: {resume}",
            stop_cause_words(stop_reason)
        ),
        RunStatus::Interrupted => format!("(interrupted) continue with: {resume}"),
    }
}

/// Targets of started calls (what `tool_started` named), by agent path and
/// call id, until their `tool_finished` line shows them.
#[derive(Debug, Default)]
pub(crate) struct CallTargets(HashMap<(String, String), String>);

impl CallTargets {
    /// A call started with `target`, if it names one.
    pub(crate) fn started(&mut self, agent_path: &str, call_id: &str, target: Option<&String>) {
        if let Some(target) = target {
            self.0.insert(
                (agent_path.to_string(), call_id.to_string()),
                target.clone(),
            );
        }
    }

    /// The target of a call that finished (forgotten from now on).
    pub(crate) fn finished(&mut self, agent_path: &str, call_id: &str) -> Option<String> {
        self.0
            .remove(&(agent_path.to_string(), call_id.to_string()))
    }

    /// No call is waiting for its finish line.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Renders events for people on stderr.
pub(crate) struct HumanRenderer {
    /// Text of each agent's current response not yet shown (parallel
    /// sub-agents interleave their events; each keeps its own text).
    pending_text: HashMap<String, String>,
    /// Targets of started calls, by agent path and call id, until they finish.
    targets: CallTargets,
    /// Each agent's task plan as last shown.
    task_plans: TaskPlans,
    style: RenderStyle,
}

impl HumanRenderer {
    /// A renderer in `style`.
    pub(crate) fn new(style: RenderStyle) -> Self {
        Self {
            pending_text: HashMap::new(),
            targets: CallTargets::default(),
            task_plans: TaskPlans::default(),
            style,
        }
    }

    fn dim(&self, text: &str) -> String {
        if self.style.color {
            format!("\x1b[2m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Renders one event to `out` (stderr in practice).
    pub(crate) fn render(&mut self, event: &RunEvent, out: &mut impl Write) -> std::io::Result<()> {
        let prefix = if event.agent_path == "main" {
            String::new()
        } else {
            format!("[{}] ", event.agent_path)
        };
        match &event.kind {
            EventKind::RunStarted { .. } => {
                if event.agent_path == "main" {
                    writeln!(
                        out,
                        "{}",
                        self.dim(&format!(
                            "session {}  run {}",
                            short_id(&event.session_id),
                            short_id(&event.run_id)
                        ))
                    )?;
                }
            }
            EventKind::Iteration { n } => {
                self.pending_text.remove(&event.agent_path);
                if *n > 1 {
                    writeln!(out, "{}", self.dim(&format!("{prefix}· turn {n}")))?;
                }
            }
            EventKind::TextDelta { text } => self
                .pending_text
                .entry(event.agent_path.clone())
                .or_default()
                .push_str(text),
            EventKind::ThinkingDelta { .. } => {}
            EventKind::ToolStarted {
                call_id,
                name,
                args_preview,
                target,
            } => {
                let narration = self
                    .pending_text
                    .remove(&event.agent_path)
                    .unwrap_or_default();
                let narration = narration.trim();
                if !narration.is_empty() {
                    writeln!(out, "{prefix}{}", for_terminal(narration))?;
                }
                writeln!(
                    out,
                    "{prefix}→ {} {}",
                    for_terminal(name),
                    for_terminal(args_preview)
                )?;
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
                    &for_terminal(name),
                    target.as_deref().map(for_terminal).as_deref(),
                    *is_error,
                    *duration_ms,
                    *output_lines,
                    &for_terminal(output_preview),
                );
                writeln!(out, "{}", self.dim(&format!("{prefix}{line}")))?;
            }
            EventKind::ApprovalRequested { tool, reason, .. } => {
                writeln!(
                    out,
                    "{prefix}? {} needs approval: {}",
                    for_terminal(tool),
                    for_terminal(reason)
                )?;
            }
            EventKind::ApprovalResolved { outcome, .. } => {
                writeln!(
                    out,
                    "{}",
                    self.dim(&format!("{prefix}  approval: {}", outcome.as_str()))
                )?;
            }
            EventKind::Usage { .. } => {}
            EventKind::Compaction {
                phase,
                trigger,
                before_tokens,
                after_tokens,
            } => writeln!(
                out,
                "{}",
                self.dim(&format!(
                    "{prefix}{}",
                    compaction_line(phase, trigger, *before_tokens, *after_tokens)
                ))
            )?,
            EventKind::SubagentStarted { role, task } => {
                writeln!(
                    out,
                    "{prefix}started ({}): {}",
                    for_terminal(role),
                    for_terminal(&preview(task))
                )?;
            }
            EventKind::SubagentFinished { status } => {
                self.pending_text.remove(&event.agent_path);
                writeln!(out, "{prefix}finished: {}", status.as_str())?;
            }
            EventKind::Notice { text, code } => {
                let text = for_terminal(text);
                let quiet = [NOTICE_MODEL_RETRY, troupe_mcp::calls::NOTICE_MCP_PROGRESS];
                if code.as_deref().is_some_and(|code| quiet.contains(&code)) {
                    writeln!(out, "{}", self.dim(&format!("{prefix}{text}")))?;
                } else {
                    writeln!(out, "{prefix}{text}")?;
                }
            }
            EventKind::UserMessage { text } => {
                writeln!(out, "{prefix}» {}", preview(text))?;
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
                    writeln!(out, "{}", self.dim(&format!("{prefix}{line}")))?;
                } else {
                    writeln!(out, "{prefix}{line}")?;
                }
            }
            EventKind::PlanUpdated { explanation, plan } => {
                let lines = self
                    .task_plans
                    .update(&event.agent_path, plan, explanation.as_deref());
                for line in lines {
                    writeln!(out, "{prefix}{line}")?;
                }
            }
            // Taken before most turns that write: a line each would drown
            // the answer (`troupe checkpoints list` shows them).
            EventKind::CheckpointCreated { .. } => {}
            EventKind::Rewound { .. } => {
                if let Some(line) = rewound_line(&event.kind) {
                    writeln!(out, "{}", self.dim(&format!("{prefix}{line}")))?;
                }
            }
            EventKind::RunMoved { .. } => {
                if let Some(line) = moved_line(&event.kind) {
                    writeln!(out, "{}", self.dim(&format!("{prefix}{line}")))?;
                }
            }
            EventKind::Error { kind, message } => {
                writeln!(out, "{prefix}error ({kind}): {}", for_terminal(message))?;
            }
            EventKind::RunFinished {
                status,
                stop_reason,
                usage_total,
                ..
            } => {
                writeln!(
                    out,
                    "{}",
                    self.dim(&format!(
                        "{prefix}{} ({stop_reason}); tokens: {} in, {} out, {} cache read, {} cache write",
                        status.as_str(),
                        usage_total.input,
                        usage_total.output,
                        usage_total.cache_read,
                        usage_total.cache_write
                    ))
                )?;
                if self.style.next_steps && event.agent_path == "main" {
                    writeln!(
                        out,
                        "{}",
                        next_step(*status, stop_reason, &event.session_id, &event.run_id)
                    )?;
                }
            }
        }
        out.flush()
    }
}

/// What a `compaction` event's trigger adds to its line: nothing for an
/// automatic one (or an older event without a trigger), else ` (manual)`,
/// ` (resume)`, ` (emergency)`.
pub(crate) fn trigger_note(trigger: &str) -> String {
    match trigger {
        "" | "auto" => String::new(),
        other => format!(" ({})", for_terminal(other)),
    }
}

/// The line of a `rewound` event: where the conversation went back to and
/// where the history from before is kept.
pub(crate) fn rewound_line(kind: &EventKind) -> Option<String> {
    let EventKind::Rewound {
        to_run,
        branch,
        removed_messages,
        files_restored,
    } = kind
    else {
        return None;
    };
    let files = if *files_restored {
        " and the files"
    } else {
        ""
    };
    Some(format!(
        "rewound: the conversation{files} went back to the end of run {to_run} ({removed_messages} message(s) removed, kept in session {})",
        troupe_store::short_id(branch)
    ))
}

/// A `compaction` event as a line: the estimate before and after once it
/// finished, else the estimate it started from (`started`, `failed`,
/// `skipped`: nothing was applied).
pub(crate) fn compaction_line(phase: &str, trigger: &str, before: u64, after: u64) -> String {
    let phase = for_terminal(phase);
    let trigger = trigger_note(trigger);
    if phase == "finished" {
        format!("compaction {phase}{trigger}: {before} → {after} tokens")
    } else {
        format!("compaction {phase}{trigger}: {before} tokens")
    }
}

/// Writes one event as a JSON line and flushes.
pub(crate) fn write_json_line(event: &RunEvent, out: &mut impl Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, event)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_line_names_its_trigger_unless_automatic() {
        assert_eq!(trigger_note("auto"), "");
        assert_eq!(trigger_note(""), "");
        assert_eq!(trigger_note("manual"), " (manual)");
        assert_eq!(trigger_note("resume"), " (resume)");
        assert_eq!(
            compaction_line("finished", "auto", 91_000, 30_000),
            "compaction finished: 91000 → 30000 tokens"
        );
        assert_eq!(
            compaction_line("skipped", "auto", 91_000, 0),
            "compaction skipped: 91000 tokens"
        );
        assert_eq!(
            compaction_line("failed", "manual", 61_000, 0),
            "compaction failed (manual): 61000 tokens"
        );
    }
    use troupe_protocol::model::Usage;

    fn event(seq: u64, kind: EventKind) -> RunEvent {
        RunEvent {
            seq,
            run_id: "r".into(),
            session_id: "s".into(),
            agent_path: "main".into(),
            ts: "t".into(),
            kind,
        }
    }

    const PLAIN: RenderStyle = RenderStyle {
        color: false,
        next_steps: true,
        dir: None,
    };

    fn rendered(renderer: &mut HumanRenderer, events: Vec<RunEvent>) -> String {
        let mut out = Vec::new();
        for event in &events {
            renderer.render(event, &mut out).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    fn at(path: &str, kind: EventKind) -> RunEvent {
        RunEvent {
            agent_path: path.into(),
            ..event(1, kind)
        }
    }

    fn finished(status: RunStatus, stop_reason: &str) -> EventKind {
        EventKind::RunFinished {
            status,
            stop_reason: stop_reason.into(),
            final_text: String::new(),
            usage_total: Usage::default(),
        }
    }

    #[test]
    fn colour_follows_the_flag_the_terminal_and_no_color() {
        use ColorChoice::*;
        for (choice, terminal, no_color, expected) in [
            (Auto, true, None, true),
            (Auto, true, Some(""), true),
            (Auto, true, Some("1"), false),
            (Auto, false, None, false),
            (Always, false, Some("1"), true),
            (Never, true, None, false),
        ] {
            assert_eq!(
                use_color(choice, terminal, no_color),
                expected,
                "{choice:?} {terminal} {no_color:?}"
            );
        }
    }

    #[test]
    fn ids_come_first_and_the_next_command_last() {
        let mut renderer = HumanRenderer::new(PLAIN);
        let text = rendered(
            &mut renderer,
            vec![
                event(1, EventKind::RunStarted { prompt: "p".into() }),
                event(2, finished(RunStatus::Stopped, "max_turns")),
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&"session s  run r"), "{text}");
        assert_eq!(
            lines.last(),
            Some(&"(stopped: turn limit) continue with: troupe resume s"),
            "{text}"
        );
        // Without next steps (the demo) the status line ends the output.
        let mut renderer = HumanRenderer::new(RenderStyle {
            next_steps: false,
            ..PLAIN
        });
        let text = rendered(
            &mut renderer,
            vec![event(2, finished(RunStatus::Finished, "end_turn"))],
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn every_ending_names_the_command_that_continues() {
        assert_eq!(
            next_step(RunStatus::Finished, "end_turn", "S", "R"),
            "(finished) follow up with: troupe resume S \"…\"; trace: troupe trace R"
        );
        assert_eq!(
            next_step(RunStatus::Cancelled, "cancelled", "S", "R"),
            "(cancelled) continue with: troupe resume S"
        );
        assert_eq!(
            next_step(RunStatus::Error, "provider_error", "S", "R"),
            "(error: provider error) see: troupe trace R; try again with: troupe resume S"
        );
        assert_eq!(
            next_step(RunStatus::Stopped, "budget_tokens", "S", "R"),
            "(stopped: token budget) continue with: troupe resume S"
        );
        assert_eq!(
            next_step(RunStatus::Interrupted, "interrupted", "S", "R"),
            "(interrupted) continue with: troupe resume S"
        );
    }

    #[test]
    fn finished_tools_name_their_target_and_count_long_output() {
        assert_eq!(
            finished_line(
                "read_file",
                Some("src/lib.rs"),
                false,
                0,
                120,
                "1\tuse x; 2\t…"
            ),
            "✓ read_file src/lib.rs (0 ms, 120 lines)"
        );
        assert_eq!(
            finished_line(
                "edit_file",
                Some("a.rs"),
                false,
                3,
                1,
                "Replaced 1 occurrence"
            ),
            "✓ edit_file a.rs (3 ms): Replaced 1 occurrence"
        );
        assert_eq!(
            finished_line("bash", Some("true"), false, 5, 0, ""),
            "✓ bash true (5 ms, no output)"
        );
        assert_eq!(
            finished_line("bash", Some("make"), true, 15, 3, "exit 2: no rule"),
            "✗ bash make (15 ms): exit 2: no rule"
        );
        assert_eq!(
            finished_line("task_list", None, false, 1, 2, "a b"),
            "✓ task_list (1 ms, 2 lines)"
        );
        let long = "x".repeat(100);
        let line = finished_line("edit_file", None, false, 1, 1, &long);
        assert!(line.ends_with(&format!("{}…", "x".repeat(80))), "{line}");
    }

    #[test]
    fn parallel_calls_of_one_tool_are_told_apart() {
        let mut renderer = HumanRenderer::new(PLAIN);
        let start = |id: &str, path: &str| EventKind::ToolStarted {
            call_id: id.into(),
            name: "read_file".into(),
            args_preview: format!("{{\"path\":\"{path}\"}}"),
            target: Some(path.into()),
        };
        let finish = |id: &str, lines: u64| EventKind::ToolFinished {
            call_id: id.into(),
            name: "read_file".into(),
            is_error: false,
            output_preview: "1\tx".into(),
            output_lines: lines,
            duration_ms: 0,
        };
        let text = rendered(
            &mut renderer,
            vec![
                event(1, start("c1", "a.rs")),
                event(2, start("c2", "b.rs")),
                // A sub-agent's call with the same id is its own.
                at("main/explorer-1", start("c1", "c.rs")),
                event(3, finish("c1", 10)),
                event(4, finish("c2", 20)),
                at("main/explorer-1", finish("c1", 30)),
            ],
        );
        assert!(
            text.contains("\n✓ read_file a.rs (0 ms, 10 lines)\n"),
            "{text}"
        );
        assert!(
            text.contains("\n✓ read_file b.rs (0 ms, 20 lines)\n"),
            "{text}"
        );
        assert!(
            text.contains("\n[main/explorer-1] ✓ read_file c.rs (0 ms, 30 lines)\n"),
            "{text}"
        );
        assert!(renderer.targets.is_empty());
    }

    #[test]
    fn a_retry_notice_is_one_line() {
        let mut renderer = HumanRenderer::new(PLAIN);
        let text = rendered(
            &mut renderer,
            vec![event(
                1,
                EventKind::Notice {
                    text: "retrying model request (retry 1/4): 529 overloaded; next in 0.5 s"
                        .into(),
                    code: Some(NOTICE_MODEL_RETRY.into()),
                },
            )],
        );
        assert_eq!(
            text,
            "retrying model request (retry 1/4): 529 overloaded; next in 0.5 s\n"
        );
    }

    #[test]
    fn narration_before_a_tool_is_shown_and_final_text_is_not() {
        let mut renderer = HumanRenderer::new(PLAIN);
        let mut out = Vec::new();
        for (seq, kind) in [
            EventKind::Iteration { n: 1 },
            EventKind::TextDelta {
                text: "Let me ".into(),
            },
            EventKind::TextDelta {
                text: "look.".into(),
            },
            EventKind::ToolStarted {
                call_id: "c".into(),
                name: "read_file".into(),
                args_preview: "{\"path\":\"a\"}".into(),
                target: Some("a".into()),
            },
            EventKind::Iteration { n: 2 },
            EventKind::TextDelta {
                text: "The answer".into(),
            },
            EventKind::RunFinished {
                status: RunStatus::Finished,
                stop_reason: "end_turn".into(),
                final_text: "The answer".into(),
                usage_total: Usage::default(),
            },
        ]
        .into_iter()
        .enumerate()
        {
            renderer.render(&event(seq as u64, kind), &mut out).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Let me look.\n→ read_file"));
        assert!(!text.contains("The answer"));
        assert!(text.contains("finished (end_turn)"));
    }

    #[test]
    fn json_lines_are_one_object_per_line() {
        let mut out = Vec::new();
        write_json_line(&event(1, EventKind::Iteration { n: 1 }), &mut out).unwrap();
        write_json_line(&event(2, EventKind::notice("a\nb")), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["type"], "notice");
        assert_eq!(second["text"], "a\nb");
        assert!(second.get("code").is_none(), "a plain notice has no code");
    }
    #[test]
    fn model_text_and_tool_output_cannot_drive_the_terminal() {
        let mut renderer = HumanRenderer::new(RenderStyle {
            color: true,
            next_steps: false,
            dir: None,
        });
        let out = rendered(
            &mut renderer,
            vec![
                event(
                    1,
                    EventKind::TextDelta {
                        text: "\x1b]52;c;ZXZpbA==\x07Reading\x1b[2J".into(),
                    },
                ),
                event(
                    2,
                    EventKind::ToolStarted {
                        call_id: "c1".into(),
                        name: "bash".into(),
                        args_preview: "{\"command\":\"x\x1b]0;t\x07\"}".into(),
                        target: None,
                    },
                ),
                event(
                    3,
                    EventKind::ToolFinished {
                        call_id: "c1".into(),
                        name: "bash".into(),
                        is_error: false,
                        output_preview: "ok\r$ fake prompt".into(),
                        output_lines: 1,
                        duration_ms: 1,
                    },
                ),
            ],
        );
        assert!(
            out.starts_with("Reading\n→ bash {\"command\":\"x\"}\n"),
            "{out:?}"
        );
        assert!(out.contains("ok^M$ fake prompt"), "{out:?}");
        // Only Troupe's own dim colour is left.
        let escapes: Vec<&str> = out.matches('\x1b').collect();
        assert_eq!(escapes.len(), 2, "{out:?}");
        assert!(
            out.contains("\x1b[2m✓ bash (1 ms): ok^M$ fake prompt\x1b[0m"),
            "{out:?}"
        );
    }
}
