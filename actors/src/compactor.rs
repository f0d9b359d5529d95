//! The compactor of one agent's session: the actor that makes the summary
//! requests of context compaction beside the agent (the tree's `Compactor`,
//! one per session, started with the session's first summary and linked to
//! its agent, so it ends with it).
//!
//! What to summarise, when, and what to do with the answer are the agent
//! loop's decisions (`troupe_agent::compact`, the machine's compaction
//! phases); the compactor only carries a request out and answers the agent
//! with a [`Summary`] through the port the agent gave it. Each summary streams in a task of its own — a
//! summary prepared ahead and one the agent waits for may overlap — and the
//! compactor watches each task: a panic in the provider's code while it
//! streams a summary is contained here and answered as a failed summary
//! (which the loop counts like any other failure), never as a dead agent.
//! A cancelled summary is answered with nothing: the loop has moved on.

use std::sync::Arc;

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, Span};
use troupe_llm::{ChatRequest, Provider, ProviderError, ResponseAccumulator};
use troupe_protocol::model::ProviderErrorKind;
use troupe_protocol::model::Usage;

use crate::port::Port;
use crate::tasks::OwnedTasks;

/// Messages of the compactor.
pub(crate) enum CompactorMsg {
    /// Make summary request `epoch`; stop when `cancel` is cancelled.
    Summarise {
        /// The loop's step the answer belongs to.
        epoch: u64,
        /// The summary request (no tools).
        request: ChatRequest,
        /// Cancelled when the loop no longer wants the answer.
        cancel: CancellationToken,
        /// The compaction's span; the request runs inside it.
        span: Span,
    },
}

/// A summary's answer: its whole text (or why it failed) and what it used.
pub(crate) struct Summary {
    /// The loop's step the answer belongs to.
    pub epoch: u64,
    /// The summary, or why there is none.
    pub result: Result<String, ProviderError>,
    /// What the summary request used.
    pub usage: Usage,
}

/// Arguments of the compactor.
pub(crate) struct CompactorArgs {
    /// Where its answers go (its agent's mailbox).
    pub report: Port<Summary>,
    /// The agent's provider.
    pub provider: Arc<dyn Provider>,
}

/// The compactor actor.
pub(crate) struct Compactor;

/// State of the compactor: its arguments and the tasks of its summaries.
pub(crate) struct CompactorState {
    report: Port<Summary>,
    provider: Arc<dyn Provider>,
    /// Aborted when the compactor stops (with its agent).
    tasks: OwnedTasks,
}

impl Actor for Compactor {
    type Msg = CompactorMsg;
    type State = CompactorState;
    type Arguments = CompactorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CompactorState {
            report: args.report,
            provider: args.provider,
            tasks: OwnedTasks::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let CompactorMsg::Summarise {
            epoch,
            request,
            cancel,
            span,
        } = message;
        let provider = state.provider.clone();
        let provider_name = provider.name().to_string();
        let report = state.report.clone();
        state.tasks.spawn(async move {
            // A task of its own, watched from this one: its panic is an
            // answer, and it is aborted with this one.
            let summary = AbortOnDropHandle::new(tokio::spawn(stream_summary(
                provider, request, cancel, span,
            )));
            let (result, usage) = match summary.await {
                Ok(Some(answer)) => answer,
                // Cancelled: the loop has moved on.
                Ok(None) => return,
                Err(err) => {
                    let what = if err.is_panic() {
                        "panicked"
                    } else {
                        "was stopped"
                    };
                    tracing::error!(epoch, %err, "a summary request {what}");
                    (
                        Err(ProviderError::new(
                            provider_name,
                            ProviderErrorKind::StreamBroken,
                            format!("the summary request {what}"),
                        )),
                        Usage::default(),
                    )
                }
            };
            report.send(Summary {
                epoch,
                result,
                usage,
            });
        });
        Ok(())
    }
}

/// A compactor as its agent holds it: stopped when dropped, so it never
/// outlives its agent, also when the agent panicked.
pub(crate) struct CompactorHandle(pub(crate) ActorRef<CompactorMsg>);

impl Drop for CompactorHandle {
    fn drop(&mut self) {
        self.0.stop(None);
    }
}

/// What a summary request answered: its whole text (or the error) and its
/// usage.
type SummaryAnswer = (Result<String, ProviderError>, Usage);

/// Streams one summary request to its end; `None` when `cancel` stopped it
/// (dropping the stream drops the HTTP request).
async fn stream_summary(
    provider: Arc<dyn Provider>,
    request: ChatRequest,
    cancel: CancellationToken,
    span: Span,
) -> Option<SummaryAnswer> {
    let mut stream = provider.stream(&request);
    drop(request);
    let mut answer = ResponseAccumulator::new();
    let result = loop {
        let item = tokio::select! {
            _ = cancel.cancelled() => return None,
            item = stream.next().instrument(span.clone()) => item,
        };
        match item {
            Some(Ok(event)) => answer.push(&event),
            Some(Err(err)) => break Err(err),
            None => break Ok(()),
        }
    };
    drop(span);
    let usage = answer.usage();
    Some((result.map(|()| answer.into_message().text()), usage))
}
