//! `troupe run`: one task to completion on an embedded runtime (SPEC §1.1).
//!
//! Starts the actor runtime in this process, submits the prompt, renders the
//! run's events (prose on stderr, or JSON lines on stdout), answers approvals on
//! the terminal, cancels on Ctrl-C (a second Ctrl-C exits at once), prints the
//! final answer on stdout and exits with the run's status code.

use std::io::Write;

use std::collections::HashSet;
use troupe_actors::{Approver, RunSubmission, Runtime};

use troupe_runtime::events::{ApprovalOutcome, EventKind, RunStatus};
use troupe_runtime::session::recover_interrupted_runs;
use troupe_runtime::store::{SESSION_MAX_AGE, Store};

use crate::ids::{self, IdKind};
use crate::render::{HumanRenderer, RenderStyle, write_json_line};
use crate::setup::{self, Prepared, RunOptions};
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

/// Runs `troupe run`; `color` says whether progress is coloured.
pub async fn run(args: RunArgs, color: bool) -> u8 {
    start(args.prompt, args.session.as_deref(), &args.flags, color).await
}

/// Runs `troupe resume ID [PROMPT]`.
pub async fn resume(args: ResumeArgs, color: bool) -> u8 {
    let prompt = args.prompt.unwrap_or_else(|| CONTINUE_PROMPT.to_string());
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
    let store = match setup::open_store() {
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
    let prepared = match setup::prepare(&options, None, &store, session).await {
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
    let runtime = match Runtime::start(store.clone()).await {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: {err}");
            return (EXIT_RUNTIME, None);
        }
    };
    // One listener for the whole run: a SIGINT arriving between two polls is
    // kept, not lost.
    let mut interrupt =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(signal) => signal,
            Err(err) => {
                eprintln!("troupe: cannot listen for Ctrl-C: {err}");
                runtime.shutdown().await;
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
    let mut interrupts = 0u32;
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
            _ = interrupt.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    eprintln!("troupe: interrupted twice; exiting without waiting");
                    return (RunStatus::Cancelled.exit_code() as u8, Some(handle.run_id.clone()));
                }
                if !json {
                    eprintln!("troupe: cancelling (Ctrl-C again to exit at once)");
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
    (final_status.exit_code() as u8, Some(handle.run_id.clone()))
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
