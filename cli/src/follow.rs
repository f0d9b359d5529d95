//! Following one run in the terminal, whether it runs in this process or in
//! the daemon: render its events (prose on stderr, or JSON lines on stdout),
//! answer its approvals as the command was told to, cancel it on the first
//! stop signal and give up waiting on the second, print the final answer.
//!
//! What differs between an embedded run and a daemon's is only how events
//! arrive and how answers and cancellation go back: a [`RunLink`].

use std::io::Write;

use futures::future::BoxFuture;
use troupe_protocol::events::{ApprovalOutcome, EventKind, RunEvent, RunStatus};

use crate::approval;
use crate::render::{HumanRenderer, RenderStyle, write_json_line};
use crate::signals::{StopSignal, StopSignals, exit_code, notice};

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

/// Follows `link` until the main agent's `run_finished`, rendering as `style`
/// says (or JSON lines), answering approvals as `approvals` says. Prints the
/// final answer on stdout when the run finished and output is prose.
pub(crate) async fn follow<L: RunLink>(
    link: &mut L,
    signals: &mut StopSignals,
    json: bool,
    style: RenderStyle,
    approvals: Approvals,
    on_signal: OnSignal,
) -> Followed {
    let mut renderer = HumanRenderer::new(style);
    let mut first_signal: Option<StopSignal> = None;
    let mut status = RunStatus::Error;
    let mut final_text = String::new();
    loop {
        tokio::select! {
            event = link.next_event() => {
                let Some(event) = event else { break };
                let written = if json {
                    write_json_line(&event, &mut std::io::stdout().lock())
                } else {
                    renderer.render(&event, &mut std::io::stderr().lock())
                };
                if let Err(err) = written {
                    // A closed pipe (`troupe run --json | head`) ends the run.
                    tracing::debug!(%err, "output closed; cancelling");
                    link.cancel().await;
                }
                match &event.kind {
                    EventKind::ApprovalRequested { approval_id, tool, args, reason } => {
                        let ask = ApprovalAsk {
                            agent_path: &event.agent_path,
                            approval_id,
                            tool,
                            args,
                            reason,
                        };
                        answer_approval(link, approvals, ask, json);
                    }
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
                    notice(&format!("{} received again; exiting without waiting", signal.name()));
                    return Followed::Abandoned(signal);
                }
                if on_signal == OnSignal::Detach {
                    notice("stopped following; the run goes on");
                    return Followed::Abandoned(signal);
                }
                first_signal = Some(signal);
                if !json {
                    notice(&signal.cancelling_notice());
                }
                link.cancel().await;
            }
        }
    }
    if !json && status == RunStatus::Finished {
        let mut stdout = std::io::stdout().lock();
        // On a terminal the answer is text from the model like any other;
        // piped, it stays byte for byte what the model wrote.
        let shown = if std::io::IsTerminal::is_terminal(&stdout) {
            crate::sanitize::for_terminal(final_text.trim_end())
        } else {
            std::borrow::Cow::Borrowed(final_text.trim_end())
        };
        let _ = writeln!(stdout, "{shown}");
        let _ = stdout.flush();
    }
    Followed::Ended {
        status,
        final_text,
        signal: first_signal,
    }
}

/// One approval request as the event gave it.
struct ApprovalAsk<'a> {
    /// The agent that asks (`main`, `main/fork-1`).
    agent_path: &'a str,
    approval_id: &'a str,
    tool: &'a str,
    args: &'a str,
    reason: &'a str,
}

/// Answers one approval request according to `approvals`, without blocking the
/// event loop. Requests of sub-agents are labelled with their agent path.
fn answer_approval<L: RunLink>(link: &L, approvals: Approvals, ask: ApprovalAsk<'_>, json: bool) {
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
            let (args, reason) = (ask.args.to_string(), ask.reason.to_string());
            tokio::spawn(async move {
                let asked =
                    tokio::task::spawn_blocking(move || approval::ask(&tool, &args, &reason)).await;
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
