//! The model call of one turn, streamed in a task of its own so the agent's
//! mailbox stays free: each stream event goes back to the agent as a message.

use std::sync::Arc;

use futures::StreamExt;
use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};
use troupe_llm::{ChatRequest, Provider};

use super::{AgentMsg, Work};
use crate::tasks::OwnedTasks;

/// Starts the model call of `epoch`. Cancelling `cancel` drops the stream,
/// which aborts the HTTP request; the loop learns of it from its own token.
pub(super) fn start(
    tasks: &mut OwnedTasks,
    agent: &ActorRef<AgentMsg>,
    provider: &Arc<dyn Provider>,
    epoch: u64,
    request: ChatRequest,
    cancel: CancellationToken,
    span: Span,
) {
    let stream = provider.stream(&request);
    drop(request);
    let agent = agent.clone();
    // The stream is polled inside the `chat` span (its logs carry the
    // trace), but messages are sent outside it, and the task lets go of the
    // span before the last one: the span ends with the call, not whenever
    // this task happens to be dropped.
    tasks.spawn(async move {
        let mut stream = stream;
        loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => return,
                item = stream.next().instrument(span.clone()) => item,
            };
            match item {
                Some(Ok(event)) => {
                    let sent = agent.cast(AgentMsg::work(Work::Model {
                        epoch,
                        item: Ok(event),
                    }));
                    if sent.is_err() {
                        return;
                    }
                }
                Some(Err(err)) => {
                    drop(span);
                    let _ = agent.cast(AgentMsg::work(Work::Model {
                        epoch,
                        item: Err(err),
                    }));
                    return;
                }
                None => {
                    drop(span);
                    let _ = agent.cast(AgentMsg::work(Work::ModelEnded { epoch }));
                    return;
                }
            }
        }
    });
}
