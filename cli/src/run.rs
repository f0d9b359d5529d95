//! `troupe run`: one task to completion on an embedded runtime (SPEC §1.1).
//!
//! Starts the actor runtime in this process, submits the prompt, renders the
//! run's events (prose on stderr, or JSON lines on stdout), answers approvals on
//! the terminal, cancels on Ctrl-C, SIGTERM or SIGHUP (a second one exits at
//! once), prints the final answer on stdout and exits with the run's status
//! code (128 + the signal's number for a run a signal cancelled).
//!
//! The prompt is the `PROMPT` argument, or all of stdin for `-`; an empty one
//! is a usage error.

use std::io::{Read, Write};

use std::collections::HashSet;
use troupe_actors::{Approver, RunSubmission, Runtime};

use troupe_runtime::events::{ApprovalOutcome, EventKind, RunStatus};
use troupe_runtime::session::recover_interrupted_runs;
use troupe_runtime::store::{SESSION_MAX_AGE, Store};

use crate::ids::{self, IdKind};
use crate::render::{HumanRenderer, RenderStyle, write_json_line};
use crate::setup::{Locations, Prepared, RunOptions, SetupError};
use crate::{EXIT_RUNTIME, ResumeArgs, RunArgs, RunFlags, approval};

/// Who answers approval requests of a run started from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approvals {
    /// Ask on the terminal.
    Terminal,
    /// Nobody can answer: the agent denies with a reason.
    Nobody,
    /// Answer every request with "allow" and say so (the demo).
    AutoAllow,
}

/// SPEC §9: what `troupe resume ID` says when no prompt is given.
pub const CONTINUE_PROMPT: &str =
    "Continue where you left off. If the task is done, say so briefly.";

/// The prompt argument that means "read the prompt from stdin".
pub const STDIN_PROMPT: &str = "-";

/// The prompt a run gets from its `PROMPT` argument: the argument itself, or
/// for `-` everything `read_stdin` returns without its trailing line break.
/// A prompt that is empty or only whitespace is a usage error.
pub fn prompt_from(
    arg: &str,
    read_stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, SetupError> {
    if arg != STDIN_PROMPT {
        if arg.trim().is_empty() {
            return Err(SetupError::usage(
                "the prompt is empty: give the task as an argument, or `-` to read it from stdin",
            ));
        }
        return Ok(arg.to_string());
    }
    let text = read_stdin()
        .map_err(|err| SetupError::usage(format!("cannot read the prompt from stdin: {err}")))?;
    let text = text
        .strip_suffix('\n')
        .map(|rest| rest.strip_suffix('\r').unwrap_or(rest))
        .unwrap_or(&text);
    if text.trim().is_empty() {
        return Err(SetupError::usage(
            "the prompt read from stdin (`-`) is empty: pipe the task in, e.g. `echo TASK | troupe run -`",
        ));
    }
    Ok(text.to_string())
}

/// All of the process's stdin as text.
fn read_all_stdin() -> std::io::Result<String> {
    let mut text = String::new();
    std::io::stdin().lock().read_to_string(&mut text)?;
    Ok(text)
}

/// Runs `troupe run`; `color` says whether progress is coloured.
pub async fn run(args: RunArgs, color: bool) -> u8 {
    let prompt = match prompt_from(&args.prompt, read_all_stdin) {
        Ok(prompt) => prompt,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    start(prompt, args.session.as_deref(), &args.flags, color).await
}

/// Runs `troupe resume ID [PROMPT]`.
pub async fn resume(args: ResumeArgs, color: bool) -> u8 {
    let prompt = match args.prompt {
        Some(arg) => match prompt_from(&arg, read_all_stdin) {
            Ok(prompt) => prompt,
            Err(err) => {
                eprintln!("troupe: {err}");
                return err.code;
            }
        },
        None => CONTINUE_PROMPT.to_string(),
    };
    start(prompt, Some(&args.id), &args.flags, color).await
}

/// Opens the store, recovers interrupted runs, prepares and executes a run.
/// `session` is the id, or a unique prefix of the id, of a session to continue.
async fn start(prompt: String, session: Option<&str>, flags: &RunFlags, color: bool) -> u8 {
    let options = RunOptions {
        cwd: flags.cwd.clone(),
        provider: flags.provider.clone(),
        model: flags.model.clone(),
        mode: flags.mode,
        max_turns: flags.max_turns,
        budget_tokens: flags.budget_tokens,
        timeout_secs: flags.timeout,
    };
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let store = match locations.open_store() {
        Ok(store) => store,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let session = match session.map(|given| ids::resolve(&store, IdKind::Session, given)) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(err)) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let session = session.as_deref();
    let telemetry = crate::telemetry::start(&store);
    report_recovered(&store, flags.json);
    let prepared = match crate::setup::prepare(&options, None, &store, &locations, session).await {
        Ok(prepared) => prepared,
        Err(err) => {
            eprintln!("troupe: {err}");
            telemetry.stop();
            return err.code;
        }
    };
    remove_old_sessions(&store, session);
    if !flags.json {
        for warning in &prepared.warnings {
            eprintln!("troupe: {warning}");
        }
    }
    let approvals = if approval::terminal_available() {
        Approvals::Terminal
    } else {
        Approvals::Nobody
    };
    let style = RenderStyle {
        color,
        next_steps: true,
    };
    let (code, _run_id) = execute(prepared, store, prompt, flags.json, style, approvals).await;
    telemetry.stop();
    code
}

/// Marks runs a dead process left unfinished as interrupted (repairing their
/// sessions) and tells the person how to continue them.
pub fn report_recovered(store: &Store, json: bool) {
    match recover_interrupted_runs(store, chrono::Utc::now()) {
        Ok(recovered) => {
            for run in recovered {
                if !json {
                    let children = match run.children.len() {
                        0 => String::new(),
                        n => format!(" ({n} sub-agent session(s) repaired too)"),
                    };
                    eprintln!(
                        "troupe: run {} was interrupted (its process stopped){children}; continue it with: troupe resume {}",
                        run.run.run_id, run.run.session_id
                    );
                }
            }
        }
        Err(err) => eprintln!("troupe: could not recover interrupted runs: {err}"),
    }
}

/// SPEC §9: sessions older than 30 days are removed in the background, never
/// one in use: the session this run continues is in use before its run record
/// exists, and the store also keeps any session with a running run.
fn remove_old_sessions(store: &Store, continued: Option<&str>) {
    let store = store.clone();
    let in_use: HashSet<String> = continued.map(str::to_string).into_iter().collect();
    tokio::task::spawn_blocking(move || {
        match store.remove_sessions_older_than(SESSION_MAX_AGE, chrono::Utc::now(), &in_use) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(count = removed.len(), "removed sessions older than 30 days");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "could not remove old sessions"),
        }
    });
}

/// A signal that cancels the run: Ctrl-C, `kill`/`timeout`/`docker stop`, or
/// a closed terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP.
    Hangup,
}

impl StopSignal {
    /// Every signal that cancels a run.
    pub const ALL: [StopSignal; 3] = [Self::Interrupt, Self::Terminate, Self::Hangup];

    /// The signal's number (the same on every Unix for these three).
    pub fn number(self) -> u8 {
        match self {
            Self::Hangup => 1,
            Self::Interrupt => 2,
            Self::Terminate => 15,
        }
    }

    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hangup => "SIGHUP",
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }

    /// The exit code of a process this signal stopped: 128 + its number.
    pub fn exit_code(self) -> u8 {
        128 + self.number()
    }

    /// What to tell the person when the signal arrives first.
    pub fn cancelling_notice(self) -> String {
        match self {
            Self::Interrupt => "cancelling (Ctrl-C again to exit at once)".to_string(),
            other => format!(
                "{} received; cancelling (send it again to exit at once)",
                other.name()
            ),
        }
    }

    fn kind(self) -> tokio::signal::unix::SignalKind {
        use tokio::signal::unix::SignalKind;
        match self {
            Self::Interrupt => SignalKind::interrupt(),
            Self::Terminate => SignalKind::terminate(),
            Self::Hangup => SignalKind::hangup(),
        }
    }
}

/// The exit code of a run that ended with `status`, `signal` being the first
/// stop signal received while it ran: a run the signal cancelled exits with
/// 128 + the signal's number (130, 143, 129); any other end keeps its status's
/// code (a run that finished before the cancellation landed exits 0).
pub fn exit_code(status: RunStatus, signal: Option<StopSignal>) -> u8 {
    match signal {
        Some(signal) if status == RunStatus::Cancelled => signal.exit_code(),
        _ => status.exit_code() as u8,
    }
}

/// Listeners for every [`StopSignal`], installed for the whole run: a signal
/// arriving between two polls is kept, not lost.
struct StopSignals {
    listeners: Vec<(StopSignal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    /// Installs the listeners; from here on these signals no longer end the
    /// process by themselves.
    fn listen() -> std::io::Result<Self> {
        let listeners = StopSignal::ALL
            .into_iter()
            .map(|signal| Ok((signal, tokio::signal::unix::signal(signal.kind())?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Self { listeners })
    }

    /// The next stop signal.
    async fn recv(&mut self) -> StopSignal {
        let waits = self.listeners.iter_mut().map(|(signal, listener)| {
            let signal = *signal;
            Box::pin(async move {
                listener.recv().await;
                signal
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// Writes one line to stderr, ignoring failures (after SIGHUP the terminal
/// may be gone).
fn notice(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "troupe: {line}");
}

/// Submits `prompt` on a fresh embedded runtime and follows the run to its end,
/// rendering its events as `style` says (or as JSON lines).
/// Returns the exit code and the run id (when the run started).
pub async fn execute(
    prepared: Prepared,
    store: Store,
    prompt: String,
    json: bool,
    style: RenderStyle,
    approvals: Approvals,
) -> (u8, Option<String>) {
    // Installed before anything runs, so a stop signal always cancels cleanly.
    let mut signals = match StopSignals::listen() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("troupe: cannot listen for Ctrl-C, SIGTERM and SIGHUP: {err}");
            return (EXIT_RUNTIME, None);
        }
    };
    let runtime = match Runtime::start(store.clone()).await {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: {err}");
            return (EXIT_RUNTIME, None);
        }
    };
    let submission = RunSubmission {
        prompt,
        session: prepared.session,
        env: prepared.env,
        permissions: prepared.permissions,
        mode: prepared.mode,
        limits: prepared.limits,
        approver: match approvals {
            Approvals::Nobody => Approver::Absent,
            Approvals::Terminal | Approvals::AutoAllow => Approver::Present,
        },
    };
    let mut handle = match runtime.submit(submission).await {
        Ok(handle) => handle,
        Err(err) => {
            eprintln!("troupe: {err}");
            runtime.shutdown().await;
            return (EXIT_RUNTIME, None);
        }
    };
    let mut renderer = HumanRenderer::new(style);
    let mut first_signal: Option<StopSignal> = None;
    let mut final_status = RunStatus::Error;
    let mut final_text = String::new();
    loop {
        tokio::select! {
            event = handle.events.recv() => {
                let Some(event) = event else { break };
                let written = if json {
                    write_json_line(&event, &mut std::io::stdout().lock())
                } else {
                    renderer.render(&event, &mut std::io::stderr().lock())
                };
                if let Err(err) = written {
                    // A closed pipe (`troupe run --json | head`) ends the run.
                    tracing::debug!(%err, "output closed; cancelling");
                    let _ = runtime.cancel(&handle.run_id).await;
                }
                match &event.kind {
                    EventKind::ApprovalRequested { approval_id, tool, args, reason } => {
                        let asker = ApprovalAsk {
                            agent_path: &event.agent_path,
                            approval_id,
                            tool,
                            args,
                            reason,
                        };
                        answer_approval(&runtime, &handle.run_id, approvals, asker, json);
                    }
                    EventKind::RunFinished { status, final_text: text, .. } if event.agent_path == "main" => {
                        final_status = *status;
                        final_text = text.clone();
                        break;
                    }
                    _ => {}
                }
            }
            signal = signals.recv() => {
                if first_signal.is_some() {
                    notice(&format!("{} received again; exiting without waiting", signal.name()));
                    return (signal.exit_code(), Some(handle.run_id.clone()));
                }
                first_signal = Some(signal);
                if !json {
                    notice(&signal.cancelling_notice());
                }
                let _ = runtime.cancel(&handle.run_id).await;
            }
        }
    }
    if !json && final_status == RunStatus::Finished {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", final_text.trim_end());
        let _ = stdout.flush();
    }
    runtime.shutdown().await;
    // Spans that ended after the run's last write (its root, the last model
    // call) go to the store too before the process exits.
    if let Err(err) = store.flush() {
        eprintln!("troupe: the store could not be flushed at exit: {err}");
    }
    (
        exit_code(final_status, first_signal),
        Some(handle.run_id.clone()),
    )
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
fn answer_approval(
    runtime: &Runtime,
    run_id: &str,
    approvals: Approvals,
    ask: ApprovalAsk<'_>,
    json: bool,
) {
    let runtime = runtime.clone();
    let run_id = run_id.to_string();
    let approval_id = ask.approval_id.to_string();
    let tool = if ask.agent_path == "main" {
        ask.tool.to_string()
    } else {
        format!("[{}] {}", ask.agent_path, ask.tool)
    };
    let (args, reason) = (ask.args, ask.reason);
    match approvals {
        Approvals::Nobody => {}
        Approvals::AutoAllow => {
            if !json {
                eprintln!("  (demo: approving {tool} automatically)");
            }
            tokio::spawn(async move {
                let _ = runtime
                    .approve(&run_id, &approval_id, ApprovalOutcome::Allow, None)
                    .await;
            });
        }
        Approvals::Terminal => {
            let (args, reason) = (args.to_string(), reason.to_string());
            tokio::spawn(async move {
                let answer =
                    tokio::task::spawn_blocking(move || approval::ask(&tool, &args, &reason)).await;
                let (outcome, reason) =
                    answer.unwrap_or((ApprovalOutcome::Deny, Some("prompt failed".into())));
                let _ = runtime
                    .approve(&run_id, &approval_id, outcome, reason)
                    .await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stdin() -> std::io::Result<String> {
        panic!("stdin is read only for `-`")
    }

    #[test]
    fn a_prompt_argument_is_taken_as_it_is() {
        assert_eq!(prompt_from("fix it\n", no_stdin).unwrap(), "fix it\n");
    }

    #[test]
    fn an_empty_or_blank_prompt_is_a_usage_error() {
        for arg in ["", "  ", "\n\t"] {
            let err = prompt_from(arg, no_stdin).unwrap_err();
            assert_eq!(err.code, crate::EXIT_USAGE);
            assert!(err.message.contains("prompt is empty"), "{err}");
        }
    }

    #[test]
    fn dash_reads_stdin_without_its_trailing_line_break() {
        let read = |text: &'static str| move || Ok(text.to_string());
        assert_eq!(prompt_from("-", read("fix it\n")).unwrap(), "fix it");
        assert_eq!(prompt_from("-", read("fix it\r\n")).unwrap(), "fix it");
        assert_eq!(
            prompt_from("-", read("line 1\nline 2")).unwrap(),
            "line 1\nline 2"
        );
        // Only the one line break that ends the input goes.
        assert_eq!(prompt_from("-", read("a\n\n")).unwrap(), "a\n");
    }

    #[test]
    fn an_empty_stdin_is_a_usage_error() {
        for text in ["", "\n", "  \n"] {
            let err = prompt_from("-", move || Ok(text.to_string())).unwrap_err();
            assert_eq!(err.code, crate::EXIT_USAGE);
            assert!(err.message.contains("stdin"), "{err}");
        }
        let err = prompt_from("-", || Err(std::io::Error::other("broken"))).unwrap_err();
        assert_eq!(err.code, crate::EXIT_USAGE);
    }

    #[test]
    fn a_run_a_signal_cancelled_exits_with_128_plus_the_signal() {
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Interrupt)),
            130
        );
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Terminate)),
            143
        );
        assert_eq!(
            exit_code(RunStatus::Cancelled, Some(StopSignal::Hangup)),
            129
        );
    }

    #[test]
    fn other_ends_keep_their_status_code() {
        assert_eq!(
            exit_code(RunStatus::Finished, Some(StopSignal::Terminate)),
            0
        );
        assert_eq!(exit_code(RunStatus::Finished, None), 0);
        assert_eq!(
            exit_code(RunStatus::Cancelled, None),
            RunStatus::Cancelled.exit_code() as u8
        );
        assert_eq!(
            exit_code(RunStatus::Error, Some(StopSignal::Hangup)),
            RunStatus::Error.exit_code() as u8
        );
    }

    #[test]
    fn notices_name_the_signal() {
        assert!(StopSignal::Interrupt.cancelling_notice().contains("Ctrl-C"));
        assert!(
            StopSignal::Terminate
                .cancelling_notice()
                .contains("SIGTERM")
        );
        assert!(StopSignal::Hangup.cancelling_notice().contains("SIGHUP"));
    }
}
