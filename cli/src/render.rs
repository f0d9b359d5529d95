//! Terminal rendering of run events (SPEC §1.1, §1.5).
//!
//! Human mode writes progress to stderr — iterations, tool lines, narration that
//! preceded tool calls, notices and errors — and leaves stdout to the final
//! answer. JSON mode writes exactly one event per line to stdout, flushed per
//! line, and nothing else.

use std::collections::HashMap;
use std::io::Write;

use troupe_runtime::events::{EventKind, RunEvent, preview};

/// Renders events for people on stderr.
pub struct HumanRenderer {
    /// Text of each agent's current response not yet shown (parallel
    /// sub-agents interleave their events; each keeps its own text).
    pending_text: HashMap<String, String>,
    color: bool,
}

impl HumanRenderer {
    /// A renderer; colours when stderr is a terminal.
    pub fn new(color: bool) -> Self {
        Self {
            pending_text: HashMap::new(),
            color,
        }
    }

    fn dim(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[2m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Renders one event to `out` (stderr in practice).
    pub fn render(&mut self, event: &RunEvent, out: &mut impl Write) -> std::io::Result<()> {
        let prefix = if event.agent_path == "main" {
            String::new()
        } else {
            format!("[{}] ", event.agent_path)
        };
        match &event.kind {
            EventKind::RunStarted { .. } => {}
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
                name, args_preview, ..
            } => {
                let narration = self
                    .pending_text
                    .remove(&event.agent_path)
                    .unwrap_or_default();
                let narration = narration.trim();
                if !narration.is_empty() {
                    writeln!(out, "{prefix}{narration}")?;
                }
                writeln!(out, "{prefix}→ {name} {args_preview}")?;
            }
            EventKind::ToolFinished {
                name,
                is_error,
                output_preview,
                duration_ms,
                ..
            } => {
                let mark = if *is_error { "✗" } else { "✓" };
                let line = format!("{prefix}{mark} {name} ({duration_ms} ms) {output_preview}");
                writeln!(out, "{}", self.dim(&line))?;
            }
            EventKind::ApprovalRequested { tool, reason, .. } => {
                writeln!(out, "{prefix}? {tool} needs approval: {reason}")?;
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
                before_tokens,
                after_tokens,
            } => writeln!(
                out,
                "{}",
                self.dim(&format!(
                    "{prefix}compaction {phase}: {before_tokens} → {after_tokens} tokens"
                ))
            )?,
            EventKind::SubagentStarted { role, task } => {
                writeln!(out, "{prefix}started ({role}): {}", preview(task))?;
            }
            EventKind::SubagentFinished { status } => {
                self.pending_text.remove(&event.agent_path);
                writeln!(out, "{prefix}finished: {}", status.as_str())?;
            }
            EventKind::Notice { text } => writeln!(out, "{prefix}{text}")?,
            EventKind::Error { kind, message } => {
                writeln!(out, "{prefix}error ({kind}): {message}")?;
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
            }
        }
        out.flush()
    }
}

/// Writes one event as a JSON line and flushes.
pub fn write_json_line(event: &RunEvent, out: &mut impl Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, event)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_runtime::events::RunStatus;
    use troupe_runtime::model::Usage;

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

    #[test]
    fn narration_before_a_tool_is_shown_and_final_text_is_not() {
        let mut renderer = HumanRenderer::new(false);
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
        write_json_line(
            &event(
                2,
                EventKind::Notice {
                    text: "a\nb".into(),
                },
            ),
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["type"], "notice");
        assert_eq!(second["text"], "a\nb");
    }
}
