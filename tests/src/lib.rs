//! Shared helpers of the end-to-end scenarios: a scripted model server, a
//! throw-away project, the real actor runtime wired to them, and ways to wait on
//! a run's events with timeouts (never sleeps).

pub mod bench;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use troupe_actors::{
    AgentEnv, AgentEnvBuilder, Approver, ProviderForModel, RunHandle, RunOutcome, RunSubmission,
    Runtime, SessionTarget,
};
use troupe_config::{
    DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_TOKENS, Limits, PermissionSettings, ResolvedProvider,
};
use troupe_llm::retry::RetryPolicy;
use troupe_llm::{Provider, anthropic, openai, openai_responses};
use troupe_loader::load_roles;
use troupe_paths::sandbox::PathSandbox;
use troupe_permissions::PermissionEngine;
use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::Message;
use troupe_protocol::model::Protocol;
use troupe_protocol::model::SystemPrompt;
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Script, ScriptedServer};
use troupe_store::Store;
use troupe_telemetry::genai::ContentCapture;
use troupe_tools::{Tool, ToolRegistry, builtin_registry};

/// How long any single wait in a scenario may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The stable system prompt used by scenarios (its bytes are asserted).
pub const TEST_STABLE_PROMPT: &str = "You are a test agent.";
/// The environment part used by scenarios.
pub const TEST_ENVIRONMENT: &str = "# Environment\nWorking directory: (test)";

/// A scripted server, a project directory and a runtime.
pub struct Harness {
    /// The scripted model server.
    pub server: ScriptedServer,
    /// The runtime under test.
    pub runtime: Runtime,
    /// The project root.
    pub project: TempDir,
    /// The data directory (spill files).
    pub data: TempDir,
    /// Wire protocol used.
    pub protocol: Protocol,
    /// The session store (in `data`).
    pub store: Store,
    /// Content capture on spans (off unless a test turns it on).
    pub capture: ContentCapture,
    /// The context window agents compact for (0, the default: no compaction).
    pub context_window: u64,
    /// Summaries are prepared ahead (off unless a test turns it on).
    pub work_ahead: bool,
}

impl Harness {
    /// Starts a harness speaking `protocol`.
    pub async fn start(script: Script, protocol: Protocol) -> Self {
        let server = ScriptedServer::start(script)
            .await
            .expect("scripted server starts");
        let data = tempfile::tempdir().expect("data dir");
        let store = Store::open(data.path()).expect("store opens");
        let runtime = Runtime::start(store.clone()).await.expect("runtime starts");
        Self {
            server,
            runtime,
            project: tempfile::tempdir().expect("project dir"),
            data,
            protocol,
            store,
            capture: ContentCapture::default(),
            context_window: 0,
            work_ahead: false,
        }
    }

    /// Starts a harness speaking the Anthropic protocol.
    pub async fn anthropic(script: Script) -> Self {
        Self::start(script, Protocol::Anthropic).await
    }

    /// The project root path.
    pub fn root(&self) -> &Path {
        self.project.path()
    }

    /// The provider configuration pointing at the scripted server.
    pub fn resolved_provider(&self) -> ResolvedProvider {
        let base_url = match self.protocol {
            Protocol::Anthropic => self.server.anthropic_base_url(),
            Protocol::OpenAi | Protocol::OpenAiResponses => self.server.openai_base_url(),
        };
        ResolvedProvider {
            name: "scripted".into(),
            protocol: self.protocol,
            model: "scripted-model".into(),
            base_url,
            api_key: Some("test-key".into()),
            api_key_env: "TEST_KEY".into(),
            context_window: DEFAULT_CONTEXT_WINDOW,
            max_tokens: DEFAULT_MAX_TOKENS,
            thinking_budget: None,
            price: None,
            idle_timeout: Duration::from_secs(10),
            max_retries: 0,
            store: false,
        }
    }

    /// The real adapter for the scripted server, with fast retries.
    pub fn provider(&self) -> Arc<dyn Provider> {
        let resolved = self.resolved_provider();
        let policy = RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
        };
        match self.protocol {
            Protocol::Anthropic => Arc::new(
                anthropic::AnthropicProvider::with_retry_policy(&resolved, policy)
                    .expect("anthropic provider"),
            ),
            Protocol::OpenAi => Arc::new(
                openai::OpenAiProvider::with_retry_policy(&resolved, policy)
                    .expect("openai provider"),
            ),
            Protocol::OpenAiResponses => Arc::new(
                openai_responses::OpenAiResponsesProvider::with_retry_policy(&resolved, policy)
                    .expect("openai responses provider"),
            ),
        }
    }

    /// The sandbox of the project (spill directory included).
    pub fn sandbox(&self) -> Arc<PathSandbox> {
        Arc::new(PathSandbox::new(self.root(), &[self.spill_dir()], None).expect("sandbox"))
    }

    /// The spill directory.
    pub fn spill_dir(&self) -> PathBuf {
        self.data.path().join("spill")
    }

    /// An agent environment with the built-in tools plus `extra` test tools.
    pub fn env_with(&self, extra: Vec<Arc<dyn Tool>>) -> Arc<AgentEnv> {
        let mut registry = builtin_registry();
        for tool in extra {
            registry.register(tool).expect("test tool registers");
        }
        self.env_with_registry(registry)
    }

    /// An agent environment with test tools and the given hooks.
    pub fn env_with_hooks(
        &self,
        extra: Vec<Arc<dyn Tool>>,
        hooks: Vec<troupe_hooks::Hook>,
    ) -> Arc<AgentEnv> {
        let mut registry = builtin_registry();
        for tool in extra {
            registry.register(tool).expect("test tool registers");
        }
        Arc::new(
            self.agent_env(registry)
                .hooks(troupe_hooks::HookSet::new(hooks))
                .build(),
        )
    }

    /// An agent environment with the given registry.
    pub fn env_with_registry(&self, registry: ToolRegistry) -> Arc<AgentEnv> {
        Arc::new(self.agent_env(registry).build())
    }

    /// An agent environment with test tools and a per-call timeout.
    pub fn env_with_timeout(&self, extra: Vec<Arc<dyn Tool>>, timeout: Duration) -> Arc<AgentEnv> {
        let mut registry = builtin_registry();
        for tool in extra {
            registry.register(tool).expect("test tool registers");
        }
        Arc::new(self.agent_env(registry).tool_timeout(timeout).build())
    }

    /// An agent environment with the built-in tools whose agents talk to
    /// `provider` (a wrapper around [`Harness::provider`], for instance).
    pub fn env_with_provider(&self, provider: Arc<dyn Provider>) -> Arc<AgentEnv> {
        Arc::new(
            self.agent_env(builtin_registry())
                .provider(provider)
                .build(),
        )
    }

    /// An agent environment with the built-in tools and the tools of the
    /// MCP servers of `hub`.
    pub fn env_with_mcp(&self, hub: troupe_actors::McpHub) -> Arc<AgentEnv> {
        Arc::new(self.agent_env(builtin_registry()).mcp(Some(hub)).build())
    }

    /// Builds the scripted provider for another model (roles that name one);
    /// [`tools::PANIC_MODEL`] gives a provider that panics.
    pub fn provider_for_model(&self) -> ProviderForModel {
        let resolved = self.resolved_provider();
        let protocol = self.protocol;
        Arc::new(move |model: &str| {
            if model == tools::PANIC_MODEL {
                return Ok(Arc::new(tools::PanickingProvider) as Arc<dyn Provider>);
            }
            let resolved = resolved.clone().with_model(model.to_string());
            debug_assert_eq!(resolved.protocol, protocol);
            troupe_llm::build_provider(&resolved).map_err(|err| err.to_string())
        })
    }

    fn agent_env(&self, registry: ToolRegistry) -> AgentEnvBuilder {
        // Roles: the built-ins plus the project's `.troupe/agents/*.md`.
        let (roles, warnings) = load_roles(None, Some(self.root()));
        assert!(warnings.is_empty(), "role files load: {warnings:?}");
        AgentEnv::builder(
            self.provider(),
            self.store.clone(),
            self.sandbox(),
            self.spill_dir(),
        )
        .provider_for_model(self.provider_for_model())
        .registry(registry)
        .roles(roles)
        .system(SystemPrompt {
            stable: TEST_STABLE_PROMPT.into(),
            environment: TEST_ENVIRONMENT.into(),
        })
        .context_window(self.context_window)
        .work_ahead(self.work_ahead)
        .child_env(vec![("PATH".into(), "/usr/bin:/bin".into())])
        .tool_timeout(Duration::from_secs(30))
        .capture(self.capture)
    }

    /// A permission engine for `mode` with no rules.
    pub fn permissions(&self, mode: PermissionMode) -> PermissionEngine {
        let settings = PermissionSettings {
            mode,
            ..PermissionSettings::default()
        };
        PermissionEngine::new(&settings, self.sandbox()).expect("permission engine")
    }

    /// Submits a run in a new session.
    pub async fn submit(&self, prompt: &str, options: RunOptions) -> RunHandle {
        self.runtime
            .submit(RunSubmission {
                prompt: prompt.into(),
                session: match options.session_id {
                    Some(id) => SessionTarget::Continue(id),
                    None => SessionTarget::New(None),
                },
                env: options.env,
                permissions: self.permissions(options.mode),
                mode: options.mode,
                limits: options.limits,
                approver: options.approver,
            })
            .await
            .expect("run starts")
    }

    /// Compacts a stored session now (manual compaction) with `env`.
    pub async fn compact(
        &self,
        session_id: &str,
        env: Arc<AgentEnv>,
    ) -> Result<RunHandle, troupe_actors::RuntimeError> {
        self.runtime
            .compact(RunSubmission {
                prompt: String::new(),
                session: SessionTarget::Continue(session_id.to_string()),
                env,
                permissions: self.permissions(PermissionMode::Bypass),
                mode: PermissionMode::Bypass,
                limits: Limits::default(),
                approver: Approver::Absent,
            })
            .await
    }

    /// The history of a session (live, kept since its last run, or stored).
    pub async fn history(&self, session_id: &str) -> Vec<Message> {
        tokio::time::timeout(WAIT, self.runtime.history(session_id))
            .await
            .expect("history answered in time")
            .expect("session has a history")
    }
}

/// Options of a submitted run.
pub struct RunOptions {
    /// Agent environment.
    pub env: Arc<AgentEnv>,
    /// Permission mode.
    pub mode: PermissionMode,
    /// Limits.
    pub limits: Limits,
    /// Who answers approvals.
    pub approver: Approver,
    /// Session to continue.
    pub session_id: Option<String>,
}

impl RunOptions {
    /// Bypass mode (no approvals), default limits, nobody to ask.
    pub fn bypass(env: Arc<AgentEnv>) -> Self {
        Self {
            env,
            mode: PermissionMode::Bypass,
            limits: Limits::default(),
            approver: Approver::Absent,
            session_id: None,
        }
    }
}

/// Receives events until `run_finished` of the main agent; fails the test on
/// timeout.
pub async fn run_events(handle: &mut RunHandle) -> Vec<RunEvent> {
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .expect("next event in time")
            .expect("event stream open until run_finished");
        let last =
            matches!(event.kind, EventKind::RunFinished { .. }) && event.agent_path == "main";
        events.push(event);
        if last {
            return events;
        }
    }
}

/// Receives events until one matches `pred`; returns everything received.
pub async fn events_until(
    handle: &mut RunHandle,
    pred: impl Fn(&RunEvent) -> bool,
) -> Vec<RunEvent> {
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, handle.events.recv())
            .await
            .expect("next event in time")
            .expect("event stream open");
        let hit = pred(&event);
        events.push(event);
        if hit {
            return events;
        }
    }
}

/// The outcome of a run.
pub async fn outcome(handle: RunHandle) -> RunOutcome {
    tokio::time::timeout(WAIT, handle.outcome)
        .await
        .expect("outcome in time")
        .expect("outcome sent")
}

/// True when process `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "pid (comm) S ...".
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// `(status, stop_reason, final_text)` of a run's events, which must end
/// with `run_finished`.
pub fn finished(events: &[RunEvent]) -> (RunStatus, String, String) {
    match &events.last().expect("events").kind {
        EventKind::RunFinished {
            status,
            stop_reason,
            final_text,
            ..
        } => (*status, stop_reason.clone(), final_text.clone()),
        other => panic!("last event is {other:?}"),
    }
}

/// The `type` names of events, in order.
pub fn types(events: &[RunEvent]) -> Vec<&'static str> {
    events.iter().map(|event| event.kind.type_name()).collect()
}

pub use troupe_test_support::{mcp_fixture, mcp_fixture_python};
