//! The agent's compaction effects: layer-1 spill files and their ledger
//! entries, the summary model call (streamed in a task of its own, its text
//! collected), and the compaction marker. The decisions are the loop's.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};
use troupe_runtime::compact::offload::{OffloadPlan, spill_file_name};
use troupe_runtime::llm::{ChatRequest, Provider, ResponseAccumulator};
use troupe_runtime::store::{CompactionMarker, LedgerEntry, Store};

use super::{AgentMsg, Work};

/// Writes the spill files of `plan` below `spill_dir` and keeps every
/// decision with `session`, made durable by the store's writer. Returns the results spilled (call
/// id, path); a spill that failed is left out, so the loop tries it again.
pub(super) async fn offload(
    store: &Store,
    session: &str,
    spill_dir: &PathBuf,
    plan: OffloadPlan,
) -> Vec<(String, String)> {
    let mut spilled = Vec::new();
    let mut entries: Vec<LedgerEntry> = plan.kept;
    if !plan.spill.is_empty()
        && let Err(err) = tokio::fs::create_dir_all(spill_dir).await
    {
        tracing::warn!(%err, dir = %spill_dir.display(), "the spill directory cannot be created");
    }
    for order in plan.spill {
        let path = spill_dir.join(spill_file_name(&order.call_id));
        match tokio::fs::write(&path, order.text.as_bytes()).await {
            Ok(()) => {
                entries.push(LedgerEntry {
                    call_id: order.call_id.clone(),
                    replaced: true,
                    spill_path: Some(path.clone()),
                    original_bytes: order.text.len() as u64,
                });
                spilled.push((order.call_id, path.display().to_string()));
            }
            Err(err) => {
                tracing::warn!(%err, path = %path.display(), "a large result could not be offloaded; it is tried again next turn");
            }
        }
    }
    let owner = session.to_string();
    let kept = store
        .commit_and_wait(move |store| {
            entries
                .iter()
                .try_for_each(|entry| store.put_ledger_entry(&owner, entry))
        })
        .await;
    if let Err(err) = kept {
        // The decisions hold for this run; a resumed session decides again.
        tracing::warn!(%err, "layer-1 decisions could not be kept with the session");
    }
    spilled
}

/// Hands a compaction marker to the store's writer; the answer comes back as
/// [`Work::Saved`] once it is durable.
pub(super) fn save_marker(
    agent: &ActorRef<AgentMsg>,
    store: &Store,
    session: &str,
    marker: CompactionMarker,
) {
    let session = session.to_string();
    let agent = agent.clone();
    store.commit(
        move |store| store.put_marker(&session, &marker),
        move |outcome| {
            let result = outcome.map_err(|err| {
                tracing::error!(%err, "the compaction marker could not be stored");
                err.to_string()
            });
            let _ = agent.cast(AgentMsg::work(Work::Saved { upto: None, result }));
        },
    );
}

/// Starts the summary call of `epoch`: the whole answer comes back as one
/// message. Cancelling `cancel` drops the stream (and the HTTP request).
pub(super) fn summarise(
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
    tokio::spawn(async move {
        let mut stream = stream;
        let mut answer = ResponseAccumulator::new();
        let result = loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => return,
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
        let result = result.map(|()| answer.into_message().text());
        let _ = agent.cast(AgentMsg::work(Work::Summarised {
            epoch,
            result,
            usage,
        }));
    });
}
