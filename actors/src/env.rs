//! What the agents of a session work with that does not change during a run:
//! the provider, the registry of tools, the roles, the sandbox, the system
//! prompt, the store. Built by a front door (the CLI's set-up, tests) and
//! shared by every agent of the tree.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use troupe_runtime::agent::ToolCatalogue;
use troupe_runtime::agent::agent_tool::agent_tool_definition;
use troupe_runtime::agent::roles::{RoleSet, RoleTools};
use troupe_runtime::config::Price;
use troupe_runtime::llm::{Provider, SystemPrompt, ToolDefinition};
use troupe_runtime::sandbox::PathSandbox;
use troupe_runtime::store::Store;
use troupe_runtime::telemetry::genai::ContentCapture;
use troupe_runtime::tools::RegistryError;
use troupe_runtime::tools::background::BackgroundTasks;
use troupe_runtime::tools::registry::ToolRegistry;

/// Builds a provider for another model of the same endpoint (a role that
/// names its model). The error says why the model cannot be used.
pub type ProviderForModel = Arc<dyn Fn(&str) -> Result<Arc<dyn Provider>, String> + Send + Sync>;

/// The tool catalogues built for an environment, by role name and whether the
/// `agent` tool is part of it: built once, shared by every agent with that
/// role (a catalogue holds every definition, so it is not small).
#[derive(Default)]
pub struct CatalogueCache(Mutex<HashMap<(String, bool), Arc<ToolCatalogue>>>);

/// Everything the agents of a session work with that does not change during a run.
pub struct AgentEnv {
    /// The model provider.
    pub provider: Arc<dyn Provider>,
    /// Builds providers for roles that name another model; `None`: such roles
    /// use the session's provider.
    pub provider_for_model: Option<ProviderForModel>,
    /// Prices for cost budgets, when known.
    pub price: Option<Price>,
    /// Every tool of the session (each agent's catalogue is taken from it).
    pub registry: Arc<ToolRegistry>,
    /// The roles `agent` calls may name.
    pub roles: Arc<RoleSet>,
    /// The path sandbox.
    pub sandbox: Arc<PathSandbox>,
    /// The system prompt (stable part fixed for the session).
    pub system: SystemPrompt,
    /// Where large outputs are spilled.
    pub spill_dir: PathBuf,
    /// The provider's context window in tokens (0: no compaction).
    pub context_window: u64,
    /// Environment given to child processes.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Background shell tasks of the session.
    pub background: Arc<BackgroundTasks>,
    /// Default per-call timeout.
    pub tool_timeout: Duration,
    /// The durable store of sessions, runs and events.
    pub store: Store,
    /// Whether prompts, completions and tool arguments go on spans.
    pub capture: ContentCapture,
    /// Catalogues built so far (start with `CatalogueCache::default()`).
    pub catalogues: CatalogueCache,
}

impl AgentEnv {
    /// The `agent` tool's definition for these roles.
    pub fn agent_tool(&self) -> ToolDefinition {
        agent_tool_definition(&self.roles)
    }

    /// The main agent's catalogue: every tool of the registry and `agent`.
    pub fn main_catalogue(&self) -> Result<Arc<ToolCatalogue>, RegistryError> {
        // Not a valid role name, so no role file can take its place.
        self.catalogue("(main)", &RoleTools::All, true)
    }

    /// The catalogue of role `role` allowing `tools`, with the `agent` tool
    /// when `with_agent` (and the role allows it): built on first use, then
    /// shared.
    pub fn catalogue(
        &self,
        role: &str,
        tools: &RoleTools,
        with_agent: bool,
    ) -> Result<Arc<ToolCatalogue>, RegistryError> {
        let key = (role.to_string(), with_agent);
        // A panic while holding the lock leaves a map of finished entries.
        let mut built = self
            .catalogues
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(catalogue) = built.get(&key) {
            return Ok(catalogue.clone());
        }
        let agent_tool = with_agent.then(|| self.agent_tool());
        let catalogue = Arc::new(ToolCatalogue::for_role(&self.registry, tools, agent_tool)?);
        built.insert(key, catalogue.clone());
        Ok(catalogue)
    }

    /// The provider for `model`: the session's own when it is that model.
    pub fn provider_for_model(&self, model: &str) -> Result<Arc<dyn Provider>, String> {
        if model == self.provider.model() {
            return Ok(self.provider.clone());
        }
        match &self.provider_for_model {
            Some(build) => build(model),
            None => Err(format!(
                "this runtime cannot switch from model {} to another",
                self.provider.model()
            )),
        }
    }
}
