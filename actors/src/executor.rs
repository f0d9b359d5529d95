//! The tool executor: one short-lived actor per tool call, spawned linked to its
//! agent (DESIGN.md principle 3).
//!
//! It runs the tool inside its own `handle`, under the call's timeout and
//! cancellation token, reports the output to the agent and stops. If the tool
//! panics, ractor catches the panic, this actor fails, and the agent's
//! supervision handler turns the failure into the error result
//! "tool panicked: …" for this call only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tracing::{Instrument, Span};

use crate::port::Port;
use troupe_telemetry::genai::ToolErrorKind;
use troupe_tools::{Tool, ToolContext, ToolOutput};

pub(crate) use troupe_agent::CLEANUP_GRACE;

/// What an executor reports to its agent.
#[derive(Debug)]
pub(crate) struct ToolReport {
    /// The execution epoch the call belongs to.
    pub epoch: u64,
    /// Index of the call within its assistant message.
    pub index: usize,
    /// What the tool produced.
    pub output: ToolOutput,
    /// How long it ran.
    pub duration: Duration,
    /// Why it failed, when the executor knows better than the output
    /// (timeout, cancellation).
    pub error: Option<ToolErrorKind>,
}

/// Where an executor reports: the agent's mailbox, through a port so the
/// executor does not depend on the agent's message type.
pub(crate) type ReportTo = Port<ToolReport>;

/// Everything one call needs.
pub(crate) struct ExecutorArgs {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Validated arguments.
    pub args: Value,
    /// The call's context (its cancellation token is a child of the turn's).
    pub context: ToolContext,
    /// Time limit.
    pub timeout: Duration,
    /// Execution epoch.
    pub epoch: u64,
    /// Call index.
    pub index: usize,
    /// Where to report.
    pub report_to: ReportTo,
    /// The call's `execute_tool` span; the tool runs inside it.
    pub span: Span,
}

/// Message of the executor: there is only one thing to do.
pub(crate) enum ExecutorMsg {
    /// Run the call.
    Run,
}

/// The executor actor.
pub(crate) struct ToolExecutor;

impl Actor for ToolExecutor {
    type Msg = ExecutorMsg;
    type State = Option<ExecutorArgs>;
    type Arguments = ExecutorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Work runs in `handle`, where a panic is reported to the supervisor
        // (a panic in `pre_start` would not be).
        myself.cast(ExecutorMsg::Run)?;
        Ok(Some(args))
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        _message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some(args) = state.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let (output, error) = run_with_limits(&args).instrument(args.span.clone()).await;
        // Report outside the call's span, holding no clone of it: the span
        // ends when the agent records the result.
        let ExecutorArgs {
            report_to,
            span,
            epoch,
            index,
            ..
        } = args;
        drop(span);
        report_to.send(ToolReport {
            epoch,
            index,
            output,
            duration: started.elapsed(),
            error,
        });
        myself.stop(None);
        Ok(())
    }
}

/// Runs the tool under its timeout and cancellation.
async fn run_with_limits(args: &ExecutorArgs) -> (ToolOutput, Option<ToolErrorKind>) {
    let cancel = args.context.cancel.clone();
    let execution = args.tool.execute(args.args.clone(), &args.context);
    tokio::pin!(execution);
    // Biased: once the call is cancelled its result is "(cancelled)" whatever
    // the tool returns while stopping (SPEC §3).
    tokio::select! {
        biased;
        _ = cancel.cancelled() => {
            // Let the tool kill what it started; its own output is discarded.
            let _ = tokio::time::timeout(CLEANUP_GRACE, &mut execution).await;
            (
                ToolOutput::error(troupe_tools::CANCELLED_RESULT),
                Some(ToolErrorKind::Cancelled),
            )
        }
        output = &mut execution => (output, None),
        _ = tokio::time::sleep(args.timeout) => {
            cancel.cancel();
            let _ = tokio::time::timeout(CLEANUP_GRACE, &mut execution).await;
            (
                ToolOutput::error(format!(
                    "{} timed out after {} s and was stopped",
                    args.tool.name(),
                    args.timeout.as_secs_f64()
                )),
                Some(ToolErrorKind::TimedOut),
            )
        }
    }
}
