//! The agent's background memory update: the loop's
//! [`Effect::UpdateMemory`](troupe_agent::Effect::UpdateMemory) runs
//! [`troupe_tools::memory::distil`] in a task of its own, tracked by the
//! session's [`SessionMemory`](troupe_tools::memory::SessionMemory) so a
//! process about to exit can let it finish. Nothing comes back to the agent:
//! the outcome is logged, a failure only warned about.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use troupe_llm::Provider;
use troupe_tools::memory::{DistilOutcome, distil};

use crate::env::AgentEnv;

/// Starts the update of the project memory from `digest`.
pub(super) fn start_update(env: &AgentEnv, provider: &Arc<dyn Provider>, digest: String) {
    let provider = provider.clone();
    let root: PathBuf = env.sandbox.project_root().to_path_buf();
    let span = tracing::info_span!("memory_update", project = %root.display());
    env.memory.updates.spawn(
        async move {
            // Its own token: the update outlives the turn that asked for it.
            let cancel = CancellationToken::new();
            match distil(provider.as_ref(), &root, &digest, &cancel).await {
                Ok((outcome, usage)) => {
                    let tokens = usage.total();
                    match outcome {
                        DistilOutcome::Rejected { reason } => {
                            tracing::warn!(%reason, tokens, "the project memory was not updated")
                        }
                        other => tracing::info!(outcome = ?other, tokens, "project memory update"),
                    }
                }
                Err(err) => tracing::warn!(%err, "the project memory was not updated"),
            }
        }
        .instrument(span),
    );
}
