//! Following one run in the terminal, whether it runs in this process or in
//! the daemon: render its events (prose on stderr, or JSON lines on stdout),
//! answer its approvals as the command was told to, cancel it on the first
//! stop signal and give up waiting on the second, print the final answer.
//!
//! What differs between an embedded run and a daemon's is only how events
//! arrive and how answers and cancellation go back: a [`RunLink`].
//!
//! On a terminal (stderr is one) the run is shown live as a chat turn is
//! ([`Presentation::Live`]): the answer streams as Markdown, a spinner says
//! what the agent does, and the line that ends the run comes after the
//! answer. Elsewhere progress lines go to stderr as they always did and the
//! answer, byte for byte, to stdout.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use futures::future::BoxFuture;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};
use troupe_store::short_id;

use crate::approval;
use crate::chat::screen::Screen;
use crate::chat::view::{TurnView, activity_text};
use crate::render::{HumanRenderer, RenderStyle, next_step, write_json_line};
use crate::signals::{StopSignal, StopSignals, exit_code, notice};

/// How a followed run is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presentation {
    /// One JSON event per line on stdout, nothing else.
    Json,
    /// Progress lines on stderr, the answer on stdout at the end (rendered as
    /// Markdown when stdout is a terminal).
    Plain,
    /// A spinner and progress on stderr, the answer streamed as Markdown as
    /// it arrives: to stdout when it is a terminal, else with the progress
    /// (and then raw to stdout at the end).
    Live {
        /// Stdout is a terminal.
        answer_on_stdout: bool,
    },
}

impl Presentation {
    /// The presentation for `--json` and which streams are terminals.
    pub(crate) fn choose(json: bool, stderr_terminal: bool, stdout_terminal: bool) -> Self {
        match (json, stderr_terminal) {
            (true, _) => Self::Json,
            (false, true) => Self::Live {
                answer_on_stdout: stdout_terminal,
            },
            (false, false) => Self::Plain,
        }
    }

    /// The presentation for this process's streams.
    fn of_process(json: bool) -> Self {
        Self::choose(
            json,
            std::io::stderr().is_terminal(),
            std::io::stdout().is_terminal(),
        )
    }
}

/// The final answer as stdout shows it: rendered Markdown on a terminal,
/// else byte for byte what the model wrote (without trailing whitespace).
pub(crate) fn answer_text(final_text: &str, stdout_terminal: bool, color: bool) -> String {
    if stdout_terminal {
        let skin = crate::chat::markdown::skin(color);
        crate::chat::markdown::render(
            &skin,
            &crate::sanitize::for_terminal(final_text.trim_end()),
            crate::chat::screen::terminal_width(),
        )
    } else {
        final_text.trim_end().to_string()
    }
}

/// The connection between the terminal and one run.
pub(crate) trait RunLink {
    /// The run's next event; `None` when no more can come. Cancel-safe (it
    /// sits in a `select!` with the signals).
    fn next_event(&mut self) -> impl Future<Output = Option<RunEvent>> + Send;

    /// Asks the run to cancel.
    fn cancel(&self) -> BoxFuture<'static, ()>;

    /// What answers the run's approval requests (it outlives the prompt
    /// that waits for the person).
    fn answerer(&self) -> Answerer;

    /// Hands text the person wrote to the run, for its next model call.
    fn send_message(&self, text: String) -> BoxFuture<'static, Result<(), String>>;
}

/// Sends one answer — approval id, outcome, reason — to the run.
pub(crate) type Answerer = std::sync::Arc<
    dyn Fn(String, ApprovalOutcome, Option<String>) -> BoxFuture<'static, ()> + Send + Sync,
>;

/// How following a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Followed {
    /// The run ended (or its events stopped coming): its status and answer,
    /// and the first stop signal received meanwhile.
    Ended {
        /// The main agent's status (`error` when the events stopped early).
        status: RunStatus,
        /// The final answer.
        final_text: String,
        /// The first stop signal, if one arrived.
        signal: Option<StopSignal>,
    },
    /// A second stop signal: stop waiting and exit with its code.
    Abandoned(StopSignal),
}

impl Followed {
    /// The process's exit code.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Ended { status, signal, .. } => exit_code(*status, *signal),
            Self::Abandoned(signal) => signal.exit_code(),
        }
    }
}

/// What the first stop signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// Cancel the run and wait for its end (the command that started it).
    Cancel,
    /// Stop following; the run goes on (`troupe runs attach`).
    Detach,
}

/// Follows `link` until the main agent's `run_finished`, shown as the
/// process's streams allow (see [`Presentation`]), answering approvals as
/// `approvals` says. Prints the final answer on stdout when the run finished
/// and output is not JSON, before the line that ends the run.
pub(crate) async fn follow<L: RunLink>(
    link: &mut L,
    signals: &mut StopSignals,
    json: bool,
    style: RenderStyle,
    approvals: Approvals,
    on_signal: OnSignal,
) -> Followed {
    let presentation = Presentation::of_process(json);
    let mut shown = Shown::new(presentation, style.clone());
    let mut first_signal: Option<StopSignal> = None;
    let mut status = RunStatus::Error;
    let mut final_text = String::new();
    let asks = ApprovalAsks {
        dir: style.dir.clone().unwrap_or_default(),
        color: style.color,
    };
    loop {
        shown.status(first_signal.is_some());
        tokio::select! {
            event = link.next_event() => {
                let Some(event) = event else { break };
                if let Err(err) = shown.event(&event, approvals) {
                    // A closed pipe (`troupe run --json | head`) ends the run.
                    tracing::debug!(%err, "output closed; cancelling");
                    link.cancel().await;
                }
                match &event.kind {
                    EventKind::ApprovalRequested { approval_id, tool, args, reason, always_rule } => {
                        let ask = ApprovalAsk {
                            agent_path: &event.agent_path,
                            approval_id,
                            tool,
                            args,
                            reason,
                            always_rule: always_rule.as_deref(),
                        };
                        shown.asking(approvals);
                        answer_approval(link, approvals, ask, json, &asks);
                    }
                    EventKind::ApprovalResolved { .. } => shown.answered(),
                    EventKind::RunFinished { status: ended, final_text: text, .. }
                        if event.agent_path == "main" =>
                    {
                        status = *ended;
                        final_text = text.clone();
                        break;
                    }
                    _ => {}
                }
            }
            signal = signals.recv() => {
                if first_signal.is_some() {
                    shown.close();
                    notice(&format!("{} received again; exiting without waiting", signal.name()));
                    return Followed::Abandoned(signal);
                }
                if on_signal == OnSignal::Detach {
                    shown.close();
                    notice("stopped following; the run goes on");
                    return Followed::Abandoned(signal);
                }
                first_signal = Some(signal);
                if !json {
                    shown.notice(&signal.cancelling_notice());
                }
                link.cancel().await;
            }
        }
    }
    shown.close();
    Followed::Ended {
        status,
        final_text,
        signal: first_signal,
    }
}

/// What approval prompts need to describe a request.
struct ApprovalAsks {
    /// The directory relative paths of the run's calls name files in.
    dir: PathBuf,
    /// Colour the diff.
    color: bool,
}

/// The run's events as they are being shown.
struct Shown {
    presentation: Presentation,
    style: RenderStyle,
    renderer: HumanRenderer,
    /// The live view: the spinner and the turn's view.
    live: Option<(Screen, TurnView)>,
    started: Instant,
    /// Approvals asked on the terminal and not answered yet.
    open_asks: usize,
}

impl Shown {
    fn new(presentation: Presentation, style: RenderStyle) -> Self {
        let live = match presentation {
            Presentation::Live { answer_on_stdout } => Some((
                Screen::new(style.color, answer_on_stdout),
                TurnView::default(),
            )),
            Presentation::Json | Presentation::Plain => None,
        };
        Self {
            presentation,
            renderer: HumanRenderer::new(style.clone()),
            style,
            live,
            started: Instant::now(),
            open_asks: 0,
        }
    }

    /// Updates the spinner's text.
    fn status(&self, cancelling: bool) {
        if let Some((screen, view)) = &self.live {
            screen.status(activity_text(
                view,
                self.started.elapsed().as_secs(),
                self.open_asks > 0,
                cancelling,
            ));
        }
    }

    /// Shows one event; the final answer, when the run finished, comes
    /// before the line that ends it.
    fn event(&mut self, event: &RunEvent, approvals: Approvals) -> std::io::Result<()> {
        let main_end = match &event.kind {
            EventKind::RunFinished {
                status, final_text, ..
            } if event.agent_path == "main" => Some((*status, final_text.as_str())),
            _ => None,
        };
        // A question asked on this terminal says what the request is itself.
        let asked_here = approvals == Approvals::Terminal
            && matches!(event.kind, EventKind::ApprovalRequested { .. });
        match (&self.presentation, &mut self.live) {
            (Presentation::Json, _) => write_json_line(event, &mut std::io::stdout().lock()),
            (Presentation::Live { answer_on_stdout }, Some((screen, view))) => {
                if let EventKind::RunStarted { .. } = event.kind
                    && event.agent_path == "main"
                {
                    screen.show(vec![crate::chat::view::Shown::Dim(format!(
                        "session {}  run {}",
                        short_id(&event.session_id),
                        short_id(&event.run_id)
                    ))]);
                }
                screen.show(view.on(event));
                if let Some((status, final_text)) = main_end {
                    if status == RunStatus::Finished && !*answer_on_stdout {
                        print_answer(final_text, false, self.style.color);
                    }
                    if self.style.next_steps
                        && let EventKind::RunFinished {
                            status,
                            stop_reason,
                            ..
                        } = &event.kind
                    {
                        screen.line(&next_step(
                            *status,
                            stop_reason,
                            &event.session_id,
                            &event.run_id,
                        ));
                    }
                }
                Ok(())
            }
            (Presentation::Plain | Presentation::Live { .. }, _) => {
                if let Some((RunStatus::Finished, final_text)) = main_end {
                    print_answer(
                        final_text,
                        std::io::stdout().is_terminal(),
                        self.style.color,
                    );
                }
                if asked_here {
                    return Ok(());
                }
                self.renderer.render(event, &mut std::io::stderr().lock())
            }
        }
    }

    /// An approval is being asked on the terminal: the spinner steps aside.
    fn asking(&mut self, approvals: Approvals) {
        if approvals != Approvals::Terminal {
            return;
        }
        self.open_asks += 1;
        if let Some((screen, _)) = &self.live
            && self.open_asks == 1
        {
            screen.pause();
        }
    }

    /// An approval was answered (here or elsewhere).
    fn answered(&mut self) {
        if self.open_asks == 0 {
            return;
        }
        self.open_asks -= 1;
        if let Some((screen, _)) = &self.live
            && self.open_asks == 0
        {
            screen.resume();
        }
    }

    /// A notice of Troupe's own.
    fn notice(&self, text: &str) {
        match &self.live {
            Some((screen, _)) => screen.line(&format!("troupe: {text}")),
            None => notice(text),
        }
    }

    /// Removes the spinner.
    fn close(&mut self) {
        if let Some((screen, _)) = self.live.take() {
            screen.close();
        }
    }
}

/// Prints the final answer on stdout as [`answer_text`] says.
fn print_answer(final_text: &str, stdout_terminal: bool, color: bool) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "{}",
        answer_text(final_text, stdout_terminal, color)
    );
    let _ = stdout.flush();
}

/// One approval request as the event gave it.
struct ApprovalAsk<'a> {
    /// The agent that asks (`main`, `main/fork-1`).
    agent_path: &'a str,
    approval_id: &'a str,
    tool: &'a str,
    args: &'a str,
    reason: &'a str,
    always_rule: Option<&'a str>,
}

/// Answers one approval request according to `approvals`, without blocking the
/// event loop. Requests of sub-agents are labelled with their agent path.
fn answer_approval<L: RunLink>(
    link: &L,
    approvals: Approvals,
    ask: ApprovalAsk<'_>,
    json: bool,
    asks: &ApprovalAsks,
) {
    let approval_id = ask.approval_id.to_string();
    let tool = if ask.agent_path == "main" {
        ask.tool.to_string()
    } else {
        format!("[{}] {}", ask.agent_path, ask.tool)
    };
    let answer = link.answerer();
    match approvals {
        Approvals::Nobody => {}
        Approvals::AutoAllow => {
            if !json {
                eprintln!("  (demo: approving {tool} automatically)");
            }
            tokio::spawn(answer(approval_id, ApprovalOutcome::Allow, None));
        }
        Approvals::Terminal => {
            let request = approval::Request {
                label: tool,
                tool: ask.tool.to_string(),
                args: ask.args.to_string(),
                reason: ask.reason.to_string(),
                always_rule: ask.always_rule.map(str::to_string),
            };
            let (dir, color) = (asks.dir.clone(), asks.color);
            tokio::spawn(async move {
                let asked =
                    tokio::task::spawn_blocking(move || approval::ask(&request, &dir, color)).await;
                let (outcome, reason) =
                    asked.unwrap_or((ApprovalOutcome::Deny, Some("prompt failed".into())));
                answer(approval_id, outcome, reason).await;
            });
        }
    }
}

/// Who answers approval requests of a run started from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Approvals {
    /// Ask on the terminal.
    Terminal,
    /// Nobody can answer: the agent denies with a reason.
    Nobody,
    /// Answer every request with "allow" and say so (the demo).
    AutoAllow,
}

impl Approvals {
    /// Asked on the terminal when there is one, else nobody can answer.
    pub(crate) fn from_terminal() -> Self {
        if approval::terminal_available() {
            Self::Terminal
        } else {
            Self::Nobody
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_is_shown_live_and_anything_else_plain() {
        assert_eq!(Presentation::choose(true, true, true), Presentation::Json);
        assert_eq!(Presentation::choose(true, false, false), Presentation::Json);
        assert_eq!(
            Presentation::choose(false, true, true),
            Presentation::Live {
                answer_on_stdout: true
            }
        );
        assert_eq!(
            Presentation::choose(false, true, false),
            Presentation::Live {
                answer_on_stdout: false
            }
        );
        assert_eq!(
            Presentation::choose(false, false, true),
            Presentation::Plain
        );
        assert_eq!(
            Presentation::choose(false, false, false),
            Presentation::Plain
        );
    }

    #[test]
    fn a_piped_answer_is_the_models_text_and_a_terminal_gets_markdown() {
        let answer = "# Title\n\nSome **bold** [link](https://x.dev)\n\n";
        assert_eq!(
            answer_text(answer, false, true),
            "# Title\n\nSome **bold** [link](https://x.dev)"
        );
        let shown = answer_text(answer, true, false);
        assert!(
            shown.starts_with("Title\n\nSome bold link (https://x.dev)"),
            "{shown:?}"
        );
    }
}
