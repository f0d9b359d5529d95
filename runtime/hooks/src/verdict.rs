//! What a hook's ending means (pure): `interpret` reads one hook's exit
//! code, output and timing; [`HookVerdict`] combines the hooks of one event,
//! in order, the first block ending the walk.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Hook, HookEvent};

/// How much of a hook's stdout and stderr is read; the rest is discarded.
pub(crate) const HOOK_OUTPUT_CAP: usize = 64 * 1024;

/// How a hook process ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookExit {
    /// Its exit code; `None` when it was killed by a signal or never ran.
    pub code: Option<i32>,
    /// It ran past its timeout and was killed.
    pub timed_out: bool,
    /// It could not be started (why).
    pub spawn_error: Option<String>,
    /// What it wrote on stdout (at most `HOOK_OUTPUT_CAP` bytes).
    pub stdout: String,
    /// What it wrote on stderr (at most `HOOK_OUTPUT_CAP` bytes).
    pub stderr: String,
}

/// What one hook asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum HookOutcome {
    /// Go on; possibly with new arguments (PreToolUse) or a note for the model.
    Proceed {
        /// PreToolUse: the arguments to use instead.
        updated_input: Option<Map<String, Value>>,
        /// A note for the model.
        note: Option<String>,
    },
    /// Stop what the event announces, for this reason.
    Block {
        /// Why (the hook's stderr or its `reason`).
        reason: String,
    },
    /// The hook failed; the work goes on and the person is told.
    Warn {
        /// What went wrong.
        message: String,
    },
}

impl HookOutcome {
    /// `continue`, `block` or `error` (`timeout` is told apart by the caller).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Proceed { .. } => "continue",
            Self::Block { .. } => "block",
            Self::Warn { .. } => "error",
        }
    }
}

/// One hook run, for events and spans.
#[derive(Debug, Clone, PartialEq)]
pub struct HookReport {
    /// The event.
    pub event: HookEvent,
    /// The command.
    pub command: String,
    /// `continue`, `block`, `error` or `timeout`.
    pub outcome: &'static str,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The block reason or the warning.
    pub message: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
}

impl HookReport {
    /// The `hook` event that tells of this run.
    pub fn event_kind(&self) -> troupe_protocol::events::EventKind {
        troupe_protocol::events::EventKind::Hook {
            event: self.event.as_str().to_owned(),
            command: self.command.clone(),
            outcome: self.outcome.to_owned(),
            message: self.message.clone(),
            duration_ms: self.duration_ms,
        }
    }
}

/// What the hooks of one event decided together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookVerdict {
    /// A hook blocked (the first one; later hooks did not run).
    pub blocked: Option<String>,
    /// The arguments after every rewrite (PreToolUse), when any hook rewrote.
    pub updated_input: Option<Map<String, Value>>,
    /// Notes for the model, in hook order.
    pub notes: Vec<String>,
    /// Every hook that ran.
    pub reports: Vec<HookReport>,
}

impl HookVerdict {
    /// Adds one hook's outcome; returns false when the walk must stop (it
    /// blocked).
    pub fn add(
        &mut self,
        hook: &Hook,
        exit: &HookExit,
        outcome: HookOutcome,
        ran: Duration,
    ) -> bool {
        let (outcome_name, message) = match &outcome {
            HookOutcome::Proceed { .. } => ("continue", None),
            HookOutcome::Block { reason } => ("block", Some(reason.clone())),
            HookOutcome::Warn { message } if exit.timed_out => ("timeout", Some(message.clone())),
            HookOutcome::Warn { message } => ("error", Some(message.clone())),
        };
        self.reports.push(HookReport {
            event: hook.event,
            command: hook.command.clone(),
            outcome: outcome_name,
            exit_code: exit.code,
            message,
            duration_ms: u64::try_from(ran.as_millis()).unwrap_or(u64::MAX),
        });
        match outcome {
            HookOutcome::Proceed {
                updated_input,
                note,
            } => {
                if let Some(input) = updated_input {
                    self.updated_input = Some(input);
                }
                self.notes.extend(note);
                true
            }
            HookOutcome::Block { reason } => {
                self.blocked = Some(reason);
                false
            }
            HookOutcome::Warn { .. } => true,
        }
    }

    /// The notes as one text for the model, if any.
    pub fn note_text(&self) -> Option<String> {
        (!self.notes.is_empty()).then(|| self.notes.join("\n"))
    }

    /// Adds the reports and notes of `later` (hooks of another event that
    /// ran after these); a block of `later` counts when none came before.
    pub fn extend(&mut self, later: HookVerdict) {
        if self.blocked.is_none() {
            self.blocked = later.blocked;
        }
        self.notes.extend(later.notes);
        self.reports.extend(later.reports);
    }

    /// The text put before a prompt: the hooks' notes, labelled.
    pub fn prompt_note(&self) -> Option<String> {
        self.note_text()
            .map(|notes| format!("(Notes from hooks: {notes})"))
    }
}

/// What `hook` asks for, from how it ended.
///
/// Exit 0: go on; stdout, when it is a JSON object, may hold `updated_input`
/// (an object: PreToolUse only), `note` (a string) and `decision: "block"`
/// with `reason` (blocks like exit 2). Exit 2: block with stderr as the
/// reason, where the event can be blocked (elsewhere a warning). Anything
/// else, a timeout, a signal or a command that did not start: a warning.
pub(crate) fn interpret(hook: &Hook, exit: &HookExit) -> HookOutcome {
    let event = hook.event;
    let label = short_command(&hook.command);
    if let Some(err) = &exit.spawn_error {
        return HookOutcome::Warn {
            message: format!("{event} hook `{label}` could not start: {err}"),
        };
    }
    if exit.timed_out {
        return HookOutcome::Warn {
            message: format!(
                "{event} hook `{label}` ran past its {} s timeout and was stopped",
                hook.timeout.as_secs()
            ),
        };
    }
    match exit.code {
        Some(0) => from_stdout(hook, &exit.stdout),
        Some(2) if event.can_block() => HookOutcome::Block {
            reason: reason_or_default(&exit.stderr, &label),
        },
        Some(2) => HookOutcome::Warn {
            message: format!(
                "{event} hook `{label}` exited with 2, but {event} cannot be blocked{}",
                detail(&exit.stderr)
            ),
        },
        Some(code) => HookOutcome::Warn {
            message: format!(
                "{event} hook `{label}` exited with {code}{}",
                detail(&exit.stderr)
            ),
        },
        None => HookOutcome::Warn {
            message: format!(
                "{event} hook `{label}` was killed by a signal{}",
                detail(&exit.stderr)
            ),
        },
    }
}

/// Exit 0: what stdout asks for.
fn from_stdout(hook: &Hook, stdout: &str) -> HookOutcome {
    let event = hook.event;
    let label = short_command(&hook.command);
    let trimmed = stdout.trim();
    if !trimmed.starts_with('{') {
        // Plain output is for the log, not for the model.
        return HookOutcome::Proceed {
            updated_input: None,
            note: None,
        };
    }
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(trimmed) else {
        return HookOutcome::Warn {
            message: format!("{event} hook `{label}` printed output that is not a JSON object"),
        };
    };
    if object.get("decision").and_then(Value::as_str) == Some("block") {
        let reason = object
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("blocked by the {event} hook `{label}`"));
        return if event.can_block() {
            HookOutcome::Block { reason }
        } else {
            HookOutcome::Warn {
                message: format!(
                    "{event} hook `{label}` asked to block, but {event} cannot be blocked"
                ),
            }
        };
    }
    let updated_input = match object.remove("updated_input") {
        None | Some(Value::Null) => None,
        Some(Value::Object(input)) if event == HookEvent::PreToolUse => Some(input),
        Some(Value::Object(_)) => {
            return HookOutcome::Warn {
                message: format!(
                    "{event} hook `{label}` gave updated_input, which only PreToolUse hooks may"
                ),
            };
        }
        Some(_) => {
            return HookOutcome::Warn {
                message: format!(
                    "{event} hook `{label}` gave an updated_input that is not an object"
                ),
            };
        }
    };
    let note = match object.remove("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.trim().is_empty() => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => {
            return HookOutcome::Warn {
                message: format!("{event} hook `{label}` gave a note that is not a string"),
            };
        }
    };
    HookOutcome::Proceed {
        updated_input,
        note,
    }
}

/// The first line of a command, cut to 60 characters, for messages.
pub(crate) fn short_command(command: &str) -> String {
    let line = command.lines().next().unwrap_or_default().trim();
    let mut out: String = line.chars().take(60).collect();
    if out.len() < line.len() || command.trim().lines().count() > 1 {
        out.push('…');
    }
    out
}

fn reason_or_default(stderr: &str, label: &str) -> String {
    let reason = stderr.trim();
    if reason.is_empty() {
        format!("blocked by the hook `{label}` (it gave no reason)")
    } else {
        reason.to_owned()
    }
}

fn detail(stderr: &str) -> String {
    match stderr.trim().lines().next() {
        Some(line) if !line.trim().is_empty() => format!(": {}", line.trim()),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_protocol::permission::RuleSource;

    fn hook(event: HookEvent) -> Hook {
        Hook::new(event, None, "./check.sh", Some(7), false, RuleSource::User).unwrap()
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> HookExit {
        HookExit {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..HookExit::default()
        }
    }

    fn proceed() -> HookOutcome {
        HookOutcome::Proceed {
            updated_input: None,
            note: None,
        }
    }

    #[test]
    fn exit_codes_decide() {
        let pre = hook(HookEvent::PreToolUse);
        assert_eq!(interpret(&pre, &exited(0, "", "")), proceed());
        assert_eq!(interpret(&pre, &exited(0, "all fine\n", "")), proceed());
        assert_eq!(
            interpret(&pre, &exited(2, "", "  no force pushes\n")),
            HookOutcome::Block {
                reason: "no force pushes".into()
            }
        );
        let HookOutcome::Block { reason } = interpret(&pre, &exited(2, "", "")) else {
            panic!("exit 2 blocks");
        };
        assert!(reason.contains("gave no reason"), "{reason}");
        let HookOutcome::Warn { message } = interpret(&pre, &exited(1, "", "oops\nmore")) else {
            panic!("exit 1 warns");
        };
        assert_eq!(message, "PreToolUse hook `./check.sh` exited with 1: oops");
        let post = hook(HookEvent::PostToolUse);
        let HookOutcome::Warn { message } = interpret(&post, &exited(2, "", "no")) else {
            panic!("PostToolUse cannot block");
        };
        assert!(message.contains("cannot be blocked"), "{message}");
        let killed = HookExit {
            code: None,
            ..HookExit::default()
        };
        assert!(matches!(interpret(&pre, &killed), HookOutcome::Warn { .. }));
    }

    #[test]
    fn timeouts_and_spawn_failures_warn() {
        let pre = hook(HookEvent::PreToolUse);
        let timed_out = HookExit {
            timed_out: true,
            ..HookExit::default()
        };
        let HookOutcome::Warn { message } = interpret(&pre, &timed_out) else {
            panic!("timeout warns");
        };
        assert!(message.contains("7 s timeout"), "{message}");
        let missing = HookExit {
            spawn_error: Some("no such file".into()),
            ..HookExit::default()
        };
        assert!(matches!(
            interpret(&pre, &missing),
            HookOutcome::Warn { .. }
        ));
    }

    #[test]
    fn stdout_json_rewrites_notes_and_blocks() {
        let pre = hook(HookEvent::PreToolUse);
        let out = interpret(
            &pre,
            &exited(
                0,
                r#"{"updated_input": {"command": "ls -la"}, "note": "listed"}"#,
                "",
            ),
        );
        let expected_input = json!({"command": "ls -la"}).as_object().cloned();
        assert_eq!(
            out,
            HookOutcome::Proceed {
                updated_input: expected_input,
                note: Some("listed".into())
            }
        );
        let blocked = interpret(
            &pre,
            &exited(0, r#"{"decision":"block","reason":"nope"}"#, ""),
        );
        assert_eq!(
            blocked,
            HookOutcome::Block {
                reason: "nope".into()
            }
        );
        for bad in [r#"{"updated_input": 3}"#, r#"{"note": 3}"#, "{not json"] {
            assert!(
                matches!(
                    interpret(&pre, &exited(0, bad, "")),
                    HookOutcome::Warn { .. }
                ),
                "{bad}"
            );
        }
        let post = hook(HookEvent::PostToolUse);
        let rewrite = interpret(&post, &exited(0, r#"{"updated_input": {"a": 1}}"#, ""));
        assert!(matches!(rewrite, HookOutcome::Warn { .. }));
        let note = interpret(&post, &exited(0, r#"{"note": "formatted the file"}"#, ""));
        assert_eq!(
            note,
            HookOutcome::Proceed {
                updated_input: None,
                note: Some("formatted the file".into())
            }
        );
    }

    #[test]
    fn a_verdict_stops_at_the_first_block_and_keeps_the_last_rewrite() {
        let pre = hook(HookEvent::PreToolUse);
        let mut verdict = HookVerdict::default();
        let first = json!({"command": "a"}).as_object().cloned();
        let second = json!({"command": "b"}).as_object().cloned();
        let ran = Duration::from_millis(3);
        assert!(verdict.add(
            &pre,
            &exited(0, "", ""),
            HookOutcome::Proceed {
                updated_input: first,
                note: Some("one".into())
            },
            ran
        ));
        assert!(verdict.add(
            &pre,
            &exited(1, "", ""),
            HookOutcome::Warn {
                message: "w".into()
            },
            ran
        ));
        assert!(verdict.add(
            &pre,
            &exited(0, "", ""),
            HookOutcome::Proceed {
                updated_input: second.clone(),
                note: Some("two".into())
            },
            ran
        ));
        assert!(!verdict.add(
            &pre,
            &exited(2, "", "stop"),
            HookOutcome::Block {
                reason: "stop".into()
            },
            ran
        ));
        assert_eq!(verdict.updated_input, second);
        assert_eq!(verdict.note_text().as_deref(), Some("one\ntwo"));
        assert_eq!(verdict.blocked.as_deref(), Some("stop"));
        let outcomes: Vec<_> = verdict.reports.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes, ["continue", "error", "continue", "block"]);
        assert_eq!(verdict.reports[0].duration_ms, 3);
    }

    #[test]
    fn short_commands_are_one_line() {
        assert_eq!(short_command("./a.sh"), "./a.sh");
        assert_eq!(short_command("echo a\necho b"), "echo a…");
        assert_eq!(short_command(&"x".repeat(80)).chars().count(), 61);
    }
}
