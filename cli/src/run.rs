//! `troupe run`: one task to completion on an embedded runtime (SPEC §1.1).
//!
//! Starts the actor runtime in this process, submits the prompt, renders the
//! run's events (prose on stderr, or JSON lines on stdout), answers approvals on
//! the terminal, cancels on Ctrl-C (a second Ctrl-C exits at once), prints the
//! final answer on stdout and exits with the run's status code.

use std::io::{IsTerminal, Write};

use troupe_actors::{Approver, RunSubmission, Runtime};
use troupe_runtime::events::{ApprovalOutcome, EventKind, RunStatus};

use crate::render::{HumanRenderer, write_json_line};
use crate::setup::{self, Prepared, RunOptions};
use crate::{EXIT_RUNTIME, EXIT_USAGE, RunArgs, approval};

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

/// Runs `troupe run`.
pub async fn run(args: RunArgs) -> u8 {
    let options = RunOptions {
        cwd: args.cwd.clone(),
        provider: args.provider.clone(),
        model: args.model.clone(),
        mode: args.mode,
        max_turns: args.max_turns,
        budget_tokens: args.budget_tokens,
        timeout_secs: args.timeout,
    };
    let prepared = match setup::prepare(&options, None).await {
        Ok(prepared) => prepared,
        Err(err) => {
            eprintln!("troupe: {err}");
            return EXIT_USAGE;
        }
    };
    let approvals = if approval::terminal_available() {
        Approvals::Terminal
    } else {
        Approvals::Nobody
    };
    execute(prepared, args.prompt, args.json, approvals).await
}

/// Submits `prompt` on a fresh embedded runtime and follows the run to its end.
/// Returns the exit code.
pub async fn execute(prepared: Prepared, prompt: String, json: bool, approvals: Approvals) -> u8 {
    let runtime = match Runtime::start().await {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: {err}");
            return EXIT_RUNTIME;
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
                return EXIT_RUNTIME;
            }
        };
    let submission = RunSubmission {
        prompt,
        session_id: Some(prepared.session_id.clone()),
        env: prepared.env,
        permissions: prepared.permissions,
        mode: prepared.mode,
        limits: prepared.limits,
        approver: match approvals {
            Approvals::Nobody => Approver::Absent,
            Approvals::Terminal | Approvals::AutoAllow => Approver::Present,
        },
        history: Vec::new(),
    };
    let mut handle = match runtime.submit(submission).await {
        Ok(handle) => handle,
        Err(err) => {
            eprintln!("troupe: {err}");
            runtime.shutdown().await;
            return EXIT_RUNTIME;
        }
    };
    let mut renderer = HumanRenderer::new(std::io::stderr().is_terminal());
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
                        answer_approval(&runtime, &handle.run_id, approvals, approval_id, tool, args, reason, json);
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
                    return RunStatus::Cancelled.exit_code() as u8;
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
    final_status.exit_code() as u8
}

/// Answers one approval request according to `approvals`, without blocking the
/// event loop.
#[allow(clippy::too_many_arguments)]
fn answer_approval(
    runtime: &Runtime,
    run_id: &str,
    approvals: Approvals,
    approval_id: &str,
    tool: &str,
    args: &str,
    reason: &str,
    json: bool,
) {
    let runtime = runtime.clone();
    let run_id = run_id.to_string();
    let approval_id = approval_id.to_string();
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
            let (tool, args, reason) = (tool.to_string(), args.to_string(), reason.to_string());
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
