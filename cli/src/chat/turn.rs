//! Following one turn of the chat: its events shown as they come, its
//! approval requests asked one at a time, text typed meanwhile handed to the
//! run for its next model call, Esc or Ctrl-C cancelling it.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Usage;

use super::keys::{TurnKey, TypedLine, turn_key};
use super::screen::{KeyMode, Screen};
use super::view::TurnView;
use crate::approval::{Request, describe, parse_answer};
use crate::follow::RunLink;
use crate::signals::{StopSignal, StopSignals};
use crate::task_plan_view::TaskPlans;

/// How a turn ended.
#[derive(Debug)]
pub(crate) struct TurnEnd {
    /// The main agent's status (`error` when the events stopped early).
    pub status: RunStatus,
    /// Tokens of the turn.
    pub usage: Usage,
    /// Text typed during the turn that no model call took, in order: the
    /// chat sends it as the next message.
    pub unsent: Vec<String>,
    /// A stop signal from outside the terminal (SIGTERM, SIGHUP): the chat
    /// ends with its code.
    pub signal: Option<StopSignal>,
    /// A line typed but not sent when the turn ended: the prompt starts
    /// with it.
    pub typed: String,
}

/// An approval request waiting for the person.
struct Ask {
    approval_id: String,
    /// What is asked.
    request: Request,
}

/// Longest shown part of an approval's arguments, in characters.
const ASK_ARGS_CHARS: usize = 2_000;

/// Follows the turn on `link` to its end; relative paths of its calls name
/// files under `dir`. `task_plans` are the agents' plans as shown so far;
/// the turn's `plan_updated` events change them.
pub(crate) async fn follow_turn(
    link: &mut impl RunLink,
    screen: &Screen,
    signals: &mut StopSignals,
    dir: &Path,
    task_plans: &mut TaskPlans,
) -> TurnEnd {
    let key_mode = KeyMode::enter();
    let mut keys = key_mode.active().then(EventStream::new);
    let mut view = TurnView::default();
    view.task_plans = std::mem::take(task_plans);
    let mut typed = TypedLine::default();
    let mut answer = TypedLine::default();
    let mut asks: VecDeque<Ask> = VecDeque::new();
    let mut sent: Vec<String> = Vec::new();
    let mut cancelling = false;
    let mut end = TurnEnd {
        status: RunStatus::Error,
        usage: Usage::default(),
        unsent: Vec::new(),
        signal: None,
        typed: String::new(),
    };
    let started = Instant::now();
    loop {
        screen.status(status_text(
            &view,
            started.elapsed().as_secs(),
            asks.front().map(|_| answer.as_str()),
            typed.as_str(),
            cancelling,
        ));
        tokio::select! {
            event = link.next_event() => {
                let Some(event) = event else {
                    screen.line("(the run's events stopped; see `troupe runs list`)");
                    break;
                };
                if on_event(&event, &mut asks, &mut sent, screen, &mut end, dir) {
                    screen.show(view.on(&event));
                    break;
                }
                screen.show(view.on(&event));
            }
            key = next_key(&mut keys) => {
                let key = turn_key(&key);
                if key == TurnKey::ClearScreen {
                    screen.clear();
                    continue;
                }
                if key == TurnKey::Cancel {
                    if cancelling {
                        screen.line("(stopped waiting; the run is still being cancelled)");
                        end.status = RunStatus::Cancelled;
                        break;
                    }
                    cancelling = true;
                    screen.line("(cancelling the turn…)");
                    link.cancel().await;
                    continue;
                }
                if let Some(ask) = asks.front() {
                    let Some(line) = answer.apply(&key) else { continue };
                    match parse_answer(&line) {
                        Some((outcome, reason)) => {
                            tokio::spawn((link.answerer())(ask.approval_id.clone(), outcome, reason));
                            asks.pop_front();
                            if let Some(next) = asks.front() {
                                show_ask(screen, next, dir);
                            }
                        }
                        None => screen.line("  answer y (yes), a (always), n [reason] (no) or c (cancel the turn)"),
                    }
                } else if let Some(line) = typed.apply(&key) {
                    screen.line(&format!("» {line} (queued for the next step)"));
                    sent.push(line.clone());
                    let delivery = link.send_message(line);
                    tokio::spawn(async move {
                        // Text the run did not take is sent as the next
                        // message when the turn ends.
                        if let Err(err) = delivery.await {
                            tracing::debug!(%err, "a queued message was not delivered");
                        }
                    });
                }
            }
            signal = signals.recv() => {
                if end.signal.is_some() {
                    break;
                }
                end.signal = Some(signal);
                screen.line(&format!("({} received; cancelling the turn)", signal.name()));
                cancelling = true;
                link.cancel().await;
            }
        }
    }
    drop(keys);
    if key_mode.active() {
        // Keys typed as the turn ended are read already: keep them.
        while let Ok(true) = crossterm::event::poll(std::time::Duration::ZERO) {
            if let Ok(Event::Key(key)) = crossterm::event::read()
                && let Some(line) = typed.apply(&turn_key(&key))
            {
                sent.push(line);
            }
        }
    }
    drop(key_mode);
    *task_plans = std::mem::take(&mut view.task_plans);
    end.unsent = sent;
    end.typed = typed.as_str().to_string();
    end
}

/// Takes in what `event` means for the turn's own state; true when it is the
/// main agent's end.
fn on_event(
    event: &RunEvent,
    asks: &mut VecDeque<Ask>,
    sent: &mut Vec<String>,
    screen: &Screen,
    end: &mut TurnEnd,
    dir: &Path,
) -> bool {
    match &event.kind {
        EventKind::ApprovalRequested {
            approval_id,
            tool,
            args,
            reason,
            always_rule,
        } => {
            let label = if event.agent_path == "main" {
                tool.clone()
            } else {
                format!("[{}] {tool}", event.agent_path)
            };
            let mut shown_args: String = args.chars().take(ASK_ARGS_CHARS).collect();
            if args.chars().count() > ASK_ARGS_CHARS && !is_edit(tool) {
                shown_args.push('…');
            }
            asks.push_back(Ask {
                approval_id: approval_id.clone(),
                request: Request {
                    label,
                    tool: tool.clone(),
                    // A write's or an edit's diff needs its whole arguments.
                    args: if is_edit(tool) {
                        args.clone()
                    } else {
                        shown_args
                    },
                    reason: reason.clone(),
                    always_rule: always_rule.clone(),
                },
            });
            if asks.len() == 1 {
                show_ask(screen, &asks[0], dir);
            }
        }
        EventKind::ApprovalResolved { approval_id, .. } => {
            // Answered here, elsewhere (`troupe approve`) or closed by a cancel.
            let was_asked = asks.front().is_some_and(|a| &a.approval_id == approval_id);
            asks.retain(|ask| &ask.approval_id != approval_id);
            if was_asked && let Some(next) = asks.front() {
                show_ask(screen, next, dir);
            }
        }
        EventKind::UserMessage { text } if event.agent_path == "main" => {
            if let Some(index) = sent.iter().position(|queued| queued == text) {
                sent.remove(index);
            }
        }
        EventKind::RunFinished {
            status,
            usage_total,
            ..
        } if event.agent_path == "main" => {
            end.status = *status;
            end.usage = *usage_total;
            return true;
        }
        _ => {}
    }
    false
}

/// Whether `tool`'s approval shows a diff.
fn is_edit(tool: &str) -> bool {
    matches!(tool, "write_file" | "edit_file")
}

fn show_ask(screen: &Screen, ask: &Ask, dir: &Path) {
    screen.line(&ask_text(ask, dir, screen.color()));
}

/// The lines that ask: what wants to run (or what an MCP server asks) as
/// the terminal prompt of `troupe run` describes it, and the answers.
fn ask_text(ask: &Ask, dir: &Path, color: bool) -> String {
    format!(
        "? {}\n  allow? [y]es / [a]lways / [n]o [reason] / [c]ancel the turn",
        describe(&ask.request, dir, color)
    )
}

/// The next key pressed; pending forever when keys are not read.
async fn next_key(keys: &mut Option<EventStream>) -> crossterm::event::KeyEvent {
    loop {
        let Some(stream) = keys.as_mut() else {
            return std::future::pending().await;
        };
        match stream.next().await {
            Some(Ok(Event::Key(key))) => return key,
            Some(Ok(_)) => {}
            Some(Err(err)) => {
                tracing::debug!(%err, "reading keys failed; keys are no longer read");
                *keys = None;
            }
            None => *keys = None,
        }
    }
}

/// The spinner's text: what the agent does, its step, tokens and time, and
/// the line being typed (an approval answer, or text to queue).
pub(crate) fn status_text(
    view: &TurnView,
    seconds: u64,
    answering: Option<&str>,
    typed: &str,
    cancelling: bool,
) -> String {
    let head = super::view::activity_text(view, seconds, answering.is_some(), cancelling);
    match answering {
        Some(answer) => format!("{head}  allow? › {answer}"),
        None if !typed.is_empty() => format!("{head}  › {typed}"),
        None => format!("{head}  (type to add a message · Esc cancels)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(label: &str, args: &str) -> Ask {
        Ask {
            approval_id: "a1".into(),
            request: Request {
                label: label.into(),
                tool: label.rsplit("] ").next().unwrap_or(label).into(),
                args: args.into(),
                reason: "why".into(),
                always_rule: None,
            },
        }
    }

    #[test]
    fn a_server_question_is_asked_not_run() {
        let dir = Path::new("/nonexistent");
        let text = ask_text(
            &ask("[main/fork-1] mcp server notes", "Your name?"),
            dir,
            false,
        );
        assert!(
            text.starts_with("? [main/fork-1] mcp server notes asks: Your name?\n  (why)\n"),
            "{text}"
        );
        let text = ask_text(
            &ask("bash", "rm -rf build\u{1b}]52;c;eA==\u{7}"),
            dir,
            false,
        );
        assert!(
            text.starts_with("? bash wants to run: rm -rf build"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
    }

    #[test]
    fn the_status_says_what_happens_and_shows_what_is_typed() {
        let mut view = TurnView::default();
        assert_eq!(
            status_text(&view, 3, None, "", false),
            "working · step 1 · 0 tokens · 3s  (type to add a message · Esc cancels)"
        );
        view.iteration = 2;
        view.tokens = 1_500;
        view.thinking = true;
        assert_eq!(
            status_text(&view, 9, None, "use tabs", false),
            "thinking · step 2 · 1500 tokens · 9s  › use tabs"
        );
        assert_eq!(
            status_text(&view, 9, Some("n too risky"), "use tabs", false),
            "waiting for you · step 2 · 1500 tokens · 9s  allow? › n too risky"
        );
        assert!(status_text(&view, 9, None, "", true).starts_with("cancelling"));
        // The main agent's step in progress stays in view while the turn runs.
        let step = troupe_protocol::task_plan::TaskStep::new;
        use troupe_protocol::task_plan::StepStatus;
        view.task_plans.update(
            "main",
            &[
                step("Read", StepStatus::Completed),
                step("Fix", StepStatus::InProgress),
            ],
            None,
        );
        view.task_plans.update(
            "main/fork-1",
            &[step("Other", StepStatus::InProgress)],
            None,
        );
        assert_eq!(
            status_text(&view, 9, None, "", false),
            "thinking · step 2 · ◼ Fix (1/2) · 1500 tokens · 9s  (type to add a message · Esc cancels)"
        );
    }
}
