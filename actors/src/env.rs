//! What the agents of a session work with: the provider, the registry of
//! tools, the roles, the sandbox, the system prompt, the store — fixed for a
//! run — and the MCP servers, whose tools join and leave while it runs.
//! Built by a front door (the CLI's set-up, tests) and shared by every agent
//! of the tree.
//!
//! A catalogue is a snapshot: the built-in tools in their fixed order, then
//! the tools of the ready MCP servers sorted by name, filtered by the
//! agent's role. Snapshots are cached per role and per MCP tools generation,
//! so an agent that asks again gets the very same catalogue until a server's
//! tools change (and the cached request prefix stays put).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use troupe_agent::agent_tool::agent_tool_definition;
use troupe_agent::compact::offload::Ledger;
use troupe_agent::roles::{RoleSet, RoleTools};
use troupe_agent::session::Transcript;
use troupe_agent::{
    AgentSpec, Approver, CatalogueSource, ContextSetup, LoopSetup, RunLedger, ToolCatalogue,
};
use troupe_config::Price;
use troupe_llm::Provider;
use troupe_paths::sandbox::PathSandbox;
use troupe_permissions::PermissionEngine;
use troupe_process::os_sandbox::CommandSandbox;
use troupe_protocol::model::{SystemPrompt, ToolDefinition};
use troupe_store::Store;
use troupe_telemetry::genai::ContentCapture;
use troupe_tools::RegistryError;
use troupe_tools::background::BackgroundTasks;
use troupe_tools::registry::ToolRegistry;

use crate::mcp::McpHub;

/// Builds a provider for another model of the same endpoint (a role that
/// names its model). The error says why the model cannot be used.
pub type ProviderForModel = Arc<dyn Fn(&str) -> Result<Arc<dyn Provider>, String> + Send + Sync>;

/// The tool catalogues built for an environment, by role name and whether the
/// `agent` tool is part of it, for the MCP tools generation they were built
/// at: shared by every agent with that role (a catalogue holds every
/// definition, so it is not small).
#[derive(Default)]
pub(crate) struct CatalogueCache {
    catalogues: Mutex<HashMap<(String, bool), Built<ToolCatalogue>>>,
    registry: Mutex<Option<Built<ToolRegistry>>>,
}

/// Something built for one MCP tools generation.
type Built<T> = (u64, Arc<T>);

/// What a catalogue is built from, so it can be built again when the MCP
/// tools change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueKey {
    /// The role name (`(main)` for the main agent).
    pub role: String,
    /// What the role allows.
    pub tools: RoleTools,
    /// Whether the `agent` tool is offered.
    pub with_agent: bool,
}

impl CatalogueKey {
    /// The main agent's: every tool and `agent`.
    pub fn main() -> Self {
        // Not a valid role name, so no role file can take its place.
        Self {
            role: "(main)".into(),
            tools: RoleTools::All,
            with_agent: true,
        }
    }
}

/// Everything the agents of a session work with that does not change during a run.
pub struct AgentEnv {
    /// The model provider.
    pub(crate) provider: Arc<dyn Provider>,
    /// Builds providers for roles that name another model; `None`: such roles
    /// use the session's provider.
    pub(crate) provider_for_model: Option<ProviderForModel>,
    /// Prices for cost budgets, when known.
    pub(crate) price: Option<Price>,
    /// The built-in tools of the session (each agent's catalogue is taken
    /// from it and the ready MCP servers' tools).
    pub(crate) registry: Arc<ToolRegistry>,
    /// The MCP servers whose tools join the catalogue, when any (the
    /// servers run as long as a clone of this handle lives).
    pub(crate) mcp: Option<McpHub>,
    /// The roles `agent` calls may name.
    pub(crate) roles: Arc<RoleSet>,
    /// The path sandbox.
    pub(crate) sandbox: Arc<PathSandbox>,
    /// The OS sandbox of commands.
    pub(crate) os_sandbox: Arc<CommandSandbox>,
    /// The system prompt (stable part fixed for the session).
    pub(crate) system: SystemPrompt,
    /// Where large outputs are spilled.
    pub(crate) spill_dir: PathBuf,
    /// The provider's context window in tokens (0: no compaction).
    pub(crate) context_window: u64,
    /// Summaries are prepared ahead, from 70% of the threshold, while the
    /// agent goes on (`[compaction] work_ahead`).
    pub(crate) work_ahead: bool,
    /// Environment given to child processes.
    pub(crate) child_env: Arc<Vec<(String, String)>>,
    /// Background shell tasks of the session.
    pub(crate) background: Arc<BackgroundTasks>,
    /// Default per-call timeout.
    pub(crate) tool_timeout: Duration,
    /// The durable store of sessions, runs and events.
    pub(crate) store: Store,
    /// Whether prompts, completions and tool arguments go on spans.
    pub(crate) capture: ContentCapture,
    /// Catalogues built so far (start with `CatalogueCache::default()`).
    pub(crate) catalogues: CatalogueCache,
    /// The hooks of the configuration (a project's only once it is trusted).
    pub(crate) hooks: Arc<troupe_hooks::HookSet>,
    /// The project memory the stable prompt holds (kept with a new session)
    /// and the background updates in flight.
    pub(crate) memory: troupe_tools::memory::SessionMemory,
    /// The run's checkpoints, when they are on (`[checkpoints] enabled`).
    pub(crate) checkpoints: Option<Arc<crate::checkpoints::RunCheckpoints>>,
}

/// What sets one agent of a tree apart from the others; the environment
/// adds what every agent of a session shares ([`AgentEnv::loop_setup`]).
pub(crate) struct AgentSeat {
    /// Who the agent is in the tree.
    pub spec: AgentSpec,
    /// The run it works for.
    pub run_id: String,
    /// The session holding its transcript.
    pub session_id: String,
    /// The session whose prompt cache its requests share.
    pub cache_key: String,
    /// A sub-agent's task.
    pub task: Option<String>,
    /// Its system prompt.
    pub system: SystemPrompt,
    /// Its tools, and where newer ones come from.
    pub catalogue: Arc<ToolCatalogue>,
    /// Where newer tools come from (none: the catalogue stays as given).
    pub catalogue_source: Option<Arc<dyn CatalogueSource>>,
    /// The run's permission engine.
    pub permissions: Arc<PermissionEngine>,
    /// The run's account.
    pub account: Arc<dyn RunLedger>,
    /// Who answers approvals.
    pub approver: Approver,
    /// The provider it calls.
    pub provider: Arc<dyn Provider>,
    /// The history it starts from.
    pub transcript: Transcript,
    /// Its layer-1 decisions so far.
    pub ledger: Ledger,
    /// A stored session continued (its first turn checks the context).
    pub resumed: bool,
    /// The run only compacts.
    pub compact_only: bool,
}

impl AgentEnv {
    /// The setup of one agent's loop: its seat in the tree, with the
    /// session's roles, prices, content capture, context window and hooks.
    pub(crate) fn loop_setup(&self, seat: AgentSeat) -> LoopSetup {
        LoopSetup {
            spec: seat.spec,
            run_id: seat.run_id,
            session_id: seat.session_id,
            cache_key: seat.cache_key,
            task: seat.task,
            system: seat.system,
            catalogue: seat.catalogue,
            catalogue_source: seat.catalogue_source,
            roles: self.roles.clone(),
            permissions: seat.permissions,
            account: seat.account,
            approver: seat.approver,
            provider_name: seat.provider.name().to_string(),
            provider_system: seat.provider.system().to_string(),
            model: seat.provider.model().to_string(),
            price: self.price,
            capture: self.capture,
            transcript: seat.transcript,
            context: ContextSetup {
                window: self.context_window,
                ledger: seat.ledger,
                work_ahead: self.work_ahead,
                resumed: seat.resumed,
                compact_only: seat.compact_only,
            },
            hooks: self.hooks.clone(),
            checkpoints: self.checkpoints.is_some(),
        }
    }

    /// The one way to build an environment: for `provider`, writing into
    /// `store`, with paths confined to `sandbox` and large outputs spilled
    /// under `spill_dir`. Everything else starts at what a session without
    /// configuration has — the built-in tools and roles, no OS sandbox, no
    /// MCP servers, no hooks, no memory, an empty system prompt, no
    /// compaction (window 0), the default tool timeout — and is set on the
    /// builder.
    pub fn builder(
        provider: Arc<dyn Provider>,
        store: Store,
        sandbox: Arc<PathSandbox>,
        spill_dir: PathBuf,
    ) -> AgentEnvBuilder {
        AgentEnvBuilder {
            env: AgentEnv {
                provider,
                provider_for_model: None,
                price: None,
                registry: Arc::new(troupe_tools::builtin_registry()),
                mcp: None,
                roles: Arc::new(RoleSet::builtin()),
                sandbox,
                os_sandbox: Arc::new(CommandSandbox::off()),
                system: SystemPrompt::default(),
                spill_dir,
                context_window: 0,
                work_ahead: false,
                child_env: Arc::new(Vec::new()),
                background: Arc::new(BackgroundTasks::new()),
                tool_timeout: troupe_config::ToolSettings::default().timeout,
                store,
                capture: ContentCapture::default(),
                catalogues: CatalogueCache::default(),
                hooks: Arc::new(troupe_hooks::HookSet::default()),
                memory: troupe_tools::memory::SessionMemory::default(),
                checkpoints: None,
            },
        }
    }

    /// The model provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The built-in tools of the session.
    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// The MCP servers whose tools join the catalogue, when any.
    pub fn mcp(&self) -> Option<&McpHub> {
        self.mcp.as_ref()
    }

    /// The path sandbox.
    pub fn sandbox(&self) -> &Arc<PathSandbox> {
        &self.sandbox
    }

    /// The system prompt.
    pub fn system(&self) -> &SystemPrompt {
        &self.system
    }

    /// The default per-call timeout.
    pub fn tool_timeout(&self) -> Duration {
        self.tool_timeout
    }

    /// The project memory the stable prompt holds, and its updates in flight.
    pub fn memory(&self) -> &troupe_tools::memory::SessionMemory {
        &self.memory
    }

    /// The `agent` tool's definition for these roles.
    pub fn agent_tool(&self) -> ToolDefinition {
        agent_tool_definition(&self.roles)
    }

    /// The main agent's catalogue: every tool of the registry and `agent`.
    pub fn main_catalogue(&self) -> Result<Arc<ToolCatalogue>, RegistryError> {
        self.catalogue_for(&CatalogueKey::main())
    }

    /// The catalogue of role `role` allowing `tools`, with the `agent` tool
    /// when `with_agent` (and the role allows it): built on first use, then
    /// shared until the MCP tools change.
    pub fn catalogue(
        &self,
        role: &str,
        tools: &RoleTools,
        with_agent: bool,
    ) -> Result<Arc<ToolCatalogue>, RegistryError> {
        self.catalogue_for(&CatalogueKey {
            role: role.to_string(),
            tools: tools.clone(),
            with_agent,
        })
    }

    /// The current catalogue for `key` (see [`AgentEnv::catalogue`]).
    pub fn catalogue_for(&self, key: &CatalogueKey) -> Result<Arc<ToolCatalogue>, RegistryError> {
        let (generation, registry) = self.current_registry();
        let map_key = (key.role.clone(), key.with_agent);
        // A panic while holding the lock leaves a map of finished entries.
        let mut built = self
            .catalogues
            .catalogues
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((built_at, catalogue)) = built.get(&map_key)
            && *built_at == generation
        {
            return Ok(catalogue.clone());
        }
        let agent_tool = key.with_agent.then(|| self.agent_tool());
        let catalogue = Arc::new(ToolCatalogue::for_role(&registry, &key.tools, agent_tool)?);
        built.insert(map_key, (generation, catalogue.clone()));
        Ok(catalogue)
    }

    /// The generation of the MCP tools (0 without servers): a catalogue built
    /// at another generation may be stale.
    pub fn tools_generation(&self) -> u64 {
        self.mcp
            .as_ref()
            .map_or(0, |mcp| mcp.state().tools_generation())
    }

    /// The built-in tools followed by the ready MCP servers' tools (sorted by
    /// name), with the generation they belong to. A tool that cannot be
    /// registered is logged and left out.
    pub fn current_registry(&self) -> (u64, Arc<ToolRegistry>) {
        let Some(mcp) = self.mcp.as_ref().map(McpHub::state) else {
            return (0, self.registry.clone());
        };
        let mut cached = self
            .catalogues
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let generation = mcp.tools_generation();
        if let Some((built_at, registry)) = cached.as_ref()
            && *built_at == generation
        {
            return (generation, registry.clone());
        }
        let (generation, tools) = mcp.tools();
        let mut registry = (*self.registry).clone();
        for tool in tools {
            let name = tool.name().to_string();
            if let Err(err) = registry.register(tool) {
                tracing::warn!(tool = %name, error = %err, "MCP tool not offered");
            }
        }
        let registry = Arc::new(registry);
        *cached = Some((generation, registry.clone()));
        (generation, registry)
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

/// Sets the parts of an [`AgentEnv`] that differ from a session without
/// configuration ([`AgentEnv::builder`]).
pub struct AgentEnvBuilder {
    env: AgentEnv,
}

impl AgentEnvBuilder {
    /// The model provider.
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.env.provider = provider;
        self
    }

    /// Providers for roles that name another model.
    pub fn provider_for_model(mut self, build: ProviderForModel) -> Self {
        self.env.provider_for_model = Some(build);
        self
    }

    /// Prices for cost budgets.
    pub fn price(mut self, price: Option<Price>) -> Self {
        self.env.price = price;
        self
    }

    /// The session's tools (the built-in ones by default).
    pub fn registry(mut self, registry: ToolRegistry) -> Self {
        self.env.registry = Arc::new(registry);
        self
    }

    /// The MCP servers whose tools join the catalogue.
    pub fn mcp(mut self, mcp: Option<McpHub>) -> Self {
        self.env.mcp = mcp;
        self
    }

    /// The roles `agent` calls may name (the built-in ones by default).
    pub fn roles(mut self, roles: RoleSet) -> Self {
        self.env.roles = Arc::new(roles);
        self
    }

    /// The OS sandbox of commands (off by default).
    pub fn os_sandbox(mut self, os_sandbox: CommandSandbox) -> Self {
        self.env.os_sandbox = Arc::new(os_sandbox);
        self
    }

    /// The system prompt.
    pub fn system(mut self, system: SystemPrompt) -> Self {
        self.env.system = system;
        self
    }

    /// The provider's context window in tokens (0, the default: no
    /// compaction).
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.env.context_window = tokens;
        self
    }

    /// Whether summaries are prepared ahead (`[compaction] work_ahead`).
    pub fn work_ahead(mut self, work_ahead: bool) -> Self {
        self.env.work_ahead = work_ahead;
        self
    }

    /// The environment given to child processes (empty by default).
    pub fn child_env(mut self, vars: Vec<(String, String)>) -> Self {
        self.env.child_env = Arc::new(vars);
        self
    }

    /// The default per-call timeout.
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.env.tool_timeout = timeout;
        self
    }

    /// Whether prompts, completions and tool arguments go on spans.
    pub fn capture(mut self, capture: ContentCapture) -> Self {
        self.env.capture = capture;
        self
    }

    /// The hooks of the configuration.
    pub fn hooks(mut self, hooks: troupe_hooks::HookSet) -> Self {
        self.env.hooks = Arc::new(hooks);
        self
    }

    /// The project memory the stable prompt holds.
    pub fn memory(mut self, memory: troupe_tools::memory::SessionMemory) -> Self {
        self.env.memory = memory;
        self
    }

    /// Checkpoints of the project's files before each turn that can change
    /// them, kept in the data directory `home` (none by default).
    pub fn checkpoints(mut self, home: PathBuf, project: PathBuf) -> Self {
        self.env.checkpoints = Some(Arc::new(crate::checkpoints::RunCheckpoints::new(
            home, project,
        )));
        self
    }

    /// The environment.
    pub fn build(self) -> AgentEnv {
        self.env
    }
}
/// The catalogue of one agent as the MCP tools of this moment make it
/// (`troupe_agent::CatalogueSource`): asked before each model request, it
/// rebuilds the catalogue (from the cache) only when the tools changed since
/// it last looked.
pub(crate) struct LiveCatalogue {
    env: Arc<AgentEnv>,
    key: CatalogueKey,
    /// The tools generation it last looked at.
    seen: std::sync::Mutex<Option<u64>>,
}

impl LiveCatalogue {
    /// The catalogue of `key` in `env`.
    pub(crate) fn new(env: Arc<AgentEnv>, key: CatalogueKey) -> Arc<Self> {
        Arc::new(Self {
            env,
            key,
            seen: std::sync::Mutex::new(None),
        })
    }
}

impl CatalogueSource for LiveCatalogue {
    fn latest(&self, current: &Arc<ToolCatalogue>) -> Option<Arc<ToolCatalogue>> {
        let generation = self.env.tools_generation();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *seen == Some(generation) {
            return None;
        }
        *seen = Some(generation);
        match self.env.catalogue_for(&self.key) {
            Ok(catalogue) if !Arc::ptr_eq(&catalogue, current) => Some(catalogue),
            Ok(_) => None,
            Err(err) => {
                tracing::warn!(%err, "the tool catalogue could not be rebuilt; the previous one is kept");
                None
            }
        }
    }
}
