//! The agent's compaction effects: layer-1 spill files and their ledger
//! entries, the summary model call (handed to the session's compactor,
//! `crate::compactor`), and the compaction marker. The decisions are the
//! loop's.

use std::path::PathBuf;

use ractor::{Actor, ActorRef, MessagingErr};
use tokio_util::sync::CancellationToken;
use tracing::Span;
use troupe_agent::Input;
use troupe_agent::compact::offload::{OffloadPlan, spill_file_name};
use troupe_llm::{ChatRequest, ProviderError};
use troupe_protocol::model::ProviderErrorKind;
use troupe_protocol::model::Usage;
use troupe_store::{CompactionMarker, LedgerEntry, Store};

use super::{AgentMsg, Work};
use crate::compactor::{Compactor, CompactorArgs, CompactorHandle, CompactorMsg, Summary};
use crate::port::Port;

/// Writes the spill files of `plan` below `spill_dir` and keeps every
/// decision with `session` through the store's writer, waiting for it to
/// be durable when something was spilled (the request then sends the
/// spill's preview). Returns the results spilled (call id, path); a spill
/// that failed is left out, so the loop tries it again.
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
    let write = move |store: &Store| {
        entries
            .iter()
            .try_for_each(|entry| store.put_ledger_entry(&owner, entry))
    };
    if spilled.is_empty() {
        // Only decisions to keep results as they are: the request sends
        // nothing they change, so it need not wait for them. The writer
        // keeps order, so the turn's next durable save carries them; a
        // session resumed before that decides again, the same way.
        store.commit(write, |kept| {
            if let Err(err) = kept {
                tracing::warn!(%err, "layer-1 decisions could not be kept with the session");
            }
        });
        return spilled;
    }
    if let Err(err) = store.commit_and_wait(write).await {
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
            let _ = agent.cast(AgentMsg::work(Work::Saved { result }));
        },
    );
}

impl super::AgentState {
    /// Hands summary request `epoch` to the session's compactor, started on
    /// the first summary (linked: it ends with the agent) and again if it is
    /// gone; its answer comes back as [`Work::Summarised`]. When no
    /// compactor can be started, the summary fails at once.
    pub(super) async fn summarise(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        epoch: u64,
        request: ChatRequest,
        cancel: CancellationToken,
        span: Span,
    ) -> Option<Input> {
        let mut message = CompactorMsg::Summarise {
            epoch,
            request,
            cancel,
            span,
        };
        for _ in 0..2 {
            let compactor = match &self.compactor {
                Some(handle) => handle.0.clone(),
                None => {
                    let agent = myself.clone();
                    let args = CompactorArgs {
                        report: Port::new(move |summary: Summary| {
                            agent
                                .cast(AgentMsg::work(Work::Summarised {
                                    epoch: summary.epoch,
                                    result: summary.result,
                                    usage: summary.usage,
                                }))
                                .is_ok()
                        }),
                        provider: self.provider.clone(),
                    };
                    match Actor::spawn_linked(None, Compactor, args, myself.get_cell()).await {
                        Ok((compactor, _)) => {
                            self.compactor = Some(CompactorHandle(compactor.clone()));
                            compactor
                        }
                        Err(err) => {
                            tracing::error!(%err, "the compactor could not start");
                            break;
                        }
                    }
                }
            };
            match compactor.cast(message) {
                Ok(()) => return None,
                Err(MessagingErr::SendErr(returned)) => {
                    // It is gone: start another one for this request.
                    self.compactor = None;
                    message = returned;
                }
                Err(err) => {
                    tracing::error!(%err, "the compactor refused a summary request");
                    self.compactor = None;
                    break;
                }
            }
        }
        Some(Input::Summarised {
            epoch,
            result: Err(ProviderError::new(
                self.provider.name(),
                ProviderErrorKind::StreamBroken,
                "the compactor could not be started",
            )),
            usage: Usage::default(),
        })
    }
}
