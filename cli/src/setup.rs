//! Turns command-line options and configuration into what a run needs: the
//! provider, the tool registry, the sandbox, the permission engine, the system
//! prompt, the child-process environment and the limits. Every failure here is a
//! usage or configuration error (exit code 2) with a message that says what to fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::{EXIT_RUNTIME, EXIT_USAGE};

use troupe_actors::{AgentEnv, ProviderForModel, SessionTarget};
use troupe_agent::prompt::{
    GIT_STATUS_BUDGET, GitStatus, build_system_prompt, read_git_status, with_memory,
    with_skill_catalogue,
};
use troupe_agent::roles::RoleSet;
use troupe_config::paths::{self, ProcessEnv};
use troupe_config::{
    Config, ConfigSources, Limits, ResolvedProvider, TrustStore, load_config_with_trust,
    resolve_provider, startup_warnings, untrusted_notice,
};
use troupe_llm::build_provider;
use troupe_paths::protected::ProtectedPaths;
use troupe_paths::sandbox::PathSandbox;
use troupe_permissions::PermissionEngine;
use troupe_process::child_environment_withholding;
use troupe_process::os_sandbox::CommandSandbox;
use troupe_protocol::permission::PermissionMode;
use troupe_store::{Store, StoreError};
use troupe_telemetry::genai::ContentCapture;
use troupe_tools::memory::{Remember, SessionMemory, load_for_prompt};
use troupe_tools::skills::{LoadSkill, SkillSet};
use troupe_tools::{ToolRegistry, builtin_registry};

/// A setup failure, already worded for the person at the terminal, with the
/// exit code it deserves.
#[derive(Debug)]
pub(crate) struct SetupError {
    /// What went wrong and what to do.
    pub message: String,
    /// SPEC §1.1 exit code: 2 for usage and configuration, 1 for the rest.
    pub code: u8,
}

impl SetupError {
    /// A usage or configuration error (exit code 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_USAGE,
        }
    }

    /// A runtime error such as an unusable store (exit code 1).
    pub(crate) fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_RUNTIME,
        }
    }
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Where a command keeps its data and finds its configuration, and the
/// environment variables configuration is read with.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Locations {
    /// The data directory (absolute): the store and spill files.
    pub data_dir: PathBuf,
    /// The user configuration directory (config file, roles, instructions);
    /// `None` leaves user configuration out.
    pub config_dir: Option<PathBuf>,
    /// The home directory (`~` in paths).
    pub home: Option<PathBuf>,
    /// The environment a client sent with its run (the daemon prepares the
    /// run as the client's shell would); `None` = this process's.
    pub vars: Option<Arc<BTreeMap<String, String>>>,
    /// The client's current directory; `None` = this process's.
    pub current_dir: Option<PathBuf>,
}

impl std::fmt::Debug for Locations {
    // Never prints the variables' values (they hold provider keys).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locations")
            .field("data_dir", &self.data_dir)
            .field("config_dir", &self.config_dir)
            .field("home", &self.home)
            .field("vars", &self.vars.as_ref().map(|vars| vars.len()))
            .field("current_dir", &self.current_dir)
            .finish()
    }
}

impl Locations {
    /// The locations a client's environment `vars` names, with the data
    /// directory of the daemon that prepares the run.
    pub(crate) fn for_client(
        data_dir: PathBuf,
        vars: BTreeMap<String, String>,
        current_dir: PathBuf,
    ) -> Self {
        let lookup = |name: &str| vars.get(name).cloned();
        Self {
            data_dir,
            config_dir: paths::config_dir(&lookup).ok(),
            home: paths::home_dir(&lookup),
            vars: Some(Arc::new(vars)),
            current_dir: Some(current_dir),
        }
    }

    /// The value of an environment variable as configuration sees it.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        match &self.vars {
            Some(vars) => vars.get(name).cloned(),
            None => troupe_config::paths::Env::var(&ProcessEnv, name),
        }
    }

    /// The locations the process environment names. A relative `TROUPE_HOME`
    /// is resolved against the current directory here, once, and a notice
    /// naming the absolute directory goes to stderr.
    pub(crate) fn from_process() -> Result<Self, SetupError> {
        let resolved =
            paths::process_data_dir().map_err(|err| SetupError::usage(err.to_string()))?;
        if let Some(notice) = resolved.notice() {
            eprintln!("troupe: {notice}");
        }
        Ok(Self {
            data_dir: resolved.path,
            config_dir: paths::config_dir(&ProcessEnv).ok(),
            home: paths::home_dir(&ProcessEnv),
            vars: None,
            current_dir: None,
        })
    }

    /// A self-contained home: data in `data_dir`, no user configuration (so
    /// default settings apply, plus whatever the project holds).
    pub(crate) fn isolated(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            config_dir: None,
            home: paths::home_dir(&ProcessEnv),
            vars: None,
            current_dir: None,
        }
    }

    /// Where configuration files are looked for from `cwd`.
    fn config_sources(&self, cwd: &Path) -> ConfigSources {
        ConfigSources {
            user: self
                .config_dir
                .as_deref()
                .map(|dir| dir.join(paths::CONFIG_FILE_NAME)),
            project_root: Some(paths::find_project_root(cwd)),
            home: self.home.clone(),
        }
    }

    /// Opens the session store in the data directory. When a daemon holds
    /// it, the message names the daemon.
    pub(crate) fn open_store(&self) -> Result<Store, SetupError> {
        Store::open(&self.data_dir).map_err(|err| {
            let holder = match (&err, crate::daemon::home::read_state(&self.data_dir)) {
                (StoreError::Locked { .. }, Some(state))
                    if crate::daemon::home::daemon_alive(&state) =>
                {
                    format!(
                        "; it is the daemon (pid {}, listening on {}): run without --no-daemon \
                         to use it",
                        state.pid, state.addr
                    )
                }
                _ => String::new(),
            };
            SetupError::runtime(format!("{err}{holder}"))
        })
    }
}

/// What the command line says about a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunOptions {
    /// `--cwd`.
    pub cwd: Option<PathBuf>,
    /// `--provider`.
    pub provider: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--mode`.
    pub mode: Option<PermissionMode>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--budget-tokens`.
    pub budget_tokens: Option<u64>,
    /// `--timeout` in seconds.
    pub timeout_secs: Option<u64>,
}

impl RunOptions {
    /// What the command line's run flags say.
    pub(crate) fn from_flags(flags: &crate::RunFlags) -> Self {
        Self {
            cwd: flags.cwd.clone(),
            provider: flags.provider.clone(),
            model: flags.model.clone(),
            mode: flags.mode,
            max_turns: flags.max_turns,
            budget_tokens: flags.budget_tokens,
            timeout_secs: flags.timeout,
        }
    }
}

/// Everything a run needs, ready to submit.
pub(crate) struct Prepared {
    /// The agent's environment.
    pub env: Arc<AgentEnv>,
    /// The permission engine.
    pub permissions: PermissionEngine,
    /// The effective mode.
    pub mode: PermissionMode,
    /// The effective limits.
    pub limits: Limits,
    /// The session the run belongs to.
    pub session: SessionTarget,
    /// Things the person should know before the run (a broken role file, a
    /// setting that has no effect).
    pub warnings: Vec<String>,
}

impl Prepared {
    /// The submission of `prompt` as prepared, with `approver` answering
    /// its approvals.
    pub(crate) fn into_submission(
        self,
        prompt: String,
        approver: troupe_actors::Approver,
    ) -> troupe_actors::RunSubmission {
        troupe_actors::RunSubmission {
            prompt,
            session: self.session,
            env: self.env,
            permissions: self.permissions,
            mode: self.mode,
            limits: self.limits,
            approver,
        }
    }
}

/// The configuration of the project a directory belongs to, as far as the
/// project's trust lets it apply.
#[derive(Debug, Clone)]
pub(crate) struct ProjectConfig {
    /// The merged configuration (an untrusted project's widening settings
    /// left out).
    pub config: Config,
    /// The project root.
    pub root: PathBuf,
    /// Whether the person trusts the project.
    pub trusted: bool,
    /// What of the project waits for trust: settings of its files, its role
    /// files and its skills. Empty when it is trusted.
    pub ignored: Vec<String>,
}

impl ProjectConfig {
    /// The project root whose own role files and skills apply: none for a
    /// project that is not trusted.
    pub(crate) fn own_files(&self) -> Option<&Path> {
        self.trusted.then_some(self.root.as_path())
    }

    /// The one notice naming what was left out, when something was.
    pub(crate) fn notice(&self) -> Option<String> {
        (!self.ignored.is_empty()).then(|| untrusted_notice(&self.root, &self.ignored))
    }
}

/// The project's role files and skills, named as the untrusted notice names
/// them.
fn own_files_left_out(root: &Path) -> Vec<String> {
    let roles = RoleSet::project_role_names(root)
        .into_iter()
        .map(|name| format!("role {name} (.troupe/agents)"));
    let skills = SkillSet::project_skill_names(root)
        .into_iter()
        .map(|name| format!("skill {name} (.troupe/skills)"));
    roles.chain(skills).collect()
}

/// Reads the configuration of the project holding `cwd`, as far as its
/// trust lets it apply.
fn load_project(locations: &Locations, cwd: &Path) -> Result<ProjectConfig, SetupError> {
    let sources = locations.config_sources(cwd);
    let root = sources
        .project_root
        .clone()
        .unwrap_or_else(|| cwd.to_path_buf());
    let trusted = TrustStore::new(&locations.data_dir)
        .is_trusted(&root)
        .map_err(|err| SetupError::usage(format!("cannot read the trusted projects: {err}")))?;
    let loaded = load_config_with_trust(&sources, trusted)
        .map_err(|err| SetupError::usage(err.to_string()))?;
    let mut ignored = loaded.ignored;
    if !trusted {
        ignored.extend(own_files_left_out(&root));
    }
    Ok(ProjectConfig {
        config: loaded.config,
        root,
        trusted,
        ignored,
    })
}

/// What configuration says for the directory `options` names, without
/// preparing a run: what the chat's `/mode`, `/model`, `/cost`, `/tools` and
/// `/agents` show.
pub(crate) struct Configured {
    /// The merged configuration.
    pub config: Config,
    /// The provider runs would use, or why none can be used.
    pub provider: Result<ResolvedProvider, String>,
    /// The sub-agent roles.
    pub roles: RoleSet,
    /// The project root runs would use.
    pub project_root: PathBuf,
    /// Whether the project is trusted (its own role files and skills apply).
    pub trusted: bool,
}

impl Configured {
    /// The project root whose own role files and skills apply: none for a
    /// project that is not trusted.
    pub(crate) fn own_files(&self) -> Option<&Path> {
        self.trusted.then_some(self.project_root.as_path())
    }
}

/// Reads configuration as a run with `options` would, from this process's
/// environment.
pub(crate) fn configured(
    locations: &Locations,
    options: &RunOptions,
) -> Result<Configured, SetupError> {
    let cwd = working_directory(locations, options.cwd.as_deref())?;
    let project = load_project(locations, &cwd)?;
    let env = |name: &str| locations.var(name);
    let provider = resolve_provider(&project.config, options.provider.as_deref(), &env)
        .map(|resolved| match &options.model {
            Some(model) => resolved.with_model(model.clone()),
            None => resolved,
        })
        .map_err(|err| err.to_string());
    let (roles, _) = RoleSet::load(locations.config_dir.as_deref(), project.own_files());
    Ok(Configured {
        provider,
        roles,
        trusted: project.trusted,
        config: project.config,
        project_root: project.root,
    })
}

/// A project whose files ask for settings, servers, roles or skills that
/// need the person's trust before they apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TrustQuestion {
    /// The project root (what `troupe trust` records).
    pub root: PathBuf,
    /// What is ignored until it is trusted.
    pub ignored: Vec<String>,
}

/// The trust question for the project `options` names, if it is not trusted
/// and its files ask for something that applies only once it is.
pub(crate) fn trust_question(
    locations: &Locations,
    options: &RunOptions,
) -> Result<Option<TrustQuestion>, SetupError> {
    let cwd = working_directory(locations, options.cwd.as_deref())?;
    let project = load_project(locations, &cwd)?;
    Ok(
        (!project.trusted && !project.ignored.is_empty()).then_some(TrustQuestion {
            root: project.root,
            ignored: project.ignored,
        }),
    )
}

/// The configuration of the project of the directory `options` names (what
/// `troupe mcp list` starts servers from).
pub(crate) fn configured_with_root(
    locations: &Locations,
    options: &RunOptions,
) -> Result<ProjectConfig, SetupError> {
    let cwd = working_directory(locations, options.cwd.as_deref())?;
    load_project(locations, &cwd)
}

/// Where a run's MCP servers come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum McpSource<'a> {
    /// Started for the run; whoever runs it shuts them down at its end.
    Own,
    /// The daemon's, shared with the project's other runs; the run must
    /// not shut them down.
    Shared(&'a crate::daemon::mcp_hubs::McpHubs),
}

/// Loads configuration for `options` and prepares a run, with MCP servers of
/// its own. `provider_override` replaces the configured provider (the demo's
/// scripted model).
pub(crate) async fn prepare(
    options: &RunOptions,
    provider_override: Option<ResolvedProvider>,
    store: &Store,
    locations: &Locations,
    continue_session: Option<&str>,
) -> Result<Prepared, SetupError> {
    prepare_with(
        options,
        provider_override,
        store,
        locations,
        continue_session,
        McpSource::Own,
    )
    .await
}

/// [`prepare`], with the MCP servers `servers` gives.
pub(crate) async fn prepare_with(
    options: &RunOptions,
    provider_override: Option<ResolvedProvider>,
    store: &Store,
    locations: &Locations,
    continue_session: Option<&str>,
    servers: McpSource<'_>,
) -> Result<Prepared, SetupError> {
    // A continued session runs where it ran before, unless told otherwise.
    let stored_cwd = match continue_session {
        Some(id) => match store.session(id) {
            Ok(Some(meta)) => Some(meta.cwd),
            Ok(None) => {
                return Err(SetupError::usage(format!(
                    "no session {id}; list sessions with `troupe sessions list`"
                )));
            }
            Err(err) => return Err(SetupError::runtime(err.to_string())),
        },
        None => None,
    };
    let mut warnings = Vec::new();
    let cwd = match choose_work_dir(options.cwd.is_some(), stored_cwd, |dir| dir.is_dir()) {
        WorkDir::Stored(stored) => stored,
        WorkDir::Given => working_directory(locations, options.cwd.as_deref())?,
        WorkDir::Current { gone } => {
            let cwd = working_directory(locations, None)?;
            if let Some(gone) = gone {
                warnings.push(gone_directory_notice(&gone, &cwd));
            }
            cwd
        }
    };
    let project = load_project(locations, &cwd)?;
    warnings.extend(project.notice());
    let own_files = project.own_files().map(Path::to_path_buf);
    let ProjectConfig {
        config,
        root: project_root,
        ..
    } = project;
    // MCP servers connect while the rest is set up; the run waits for them
    // at most their grace period, at the end of `assemble`.
    let (mcp, mcp_warnings) = match servers {
        McpSource::Own => crate::mcp::start_servers(&config, locations, &project_root).await,
        McpSource::Shared(hubs) => hubs.servers_for(&config, locations, &project_root).await,
    };
    warnings.extend(mcp_warnings);
    // git status runs while the rest is set up; the first request waits for it
    // at most GIT_STATUS_BUDGET from here.
    let git_status = tokio::spawn({
        let root = project_root.clone();
        async move { read_git_status(&root, GIT_STATUS_BUDGET).await }
    });
    let resolved = match provider_override {
        Some(resolved) => resolved,
        None => {
            let env = |name: &str| locations.var(name);
            let resolved = resolve_provider(&config, options.provider.as_deref(), &env)
                .map_err(|err| SetupError::usage(err.to_string()))?;
            match &options.model {
                Some(model) => resolved.with_model(model.clone()),
                None => resolved,
            }
        }
    };
    let session = match continue_session {
        Some(id) => SessionTarget::Continue(id.to_string()),
        None => SessionTarget::New(Some(uuid::Uuid::now_v7().to_string())),
    };
    let git_status = git_status.await.unwrap_or(GitStatus::TooSlow);
    let place = Place {
        project_root: &project_root,
        own_files: own_files.as_deref(),
        locations,
        store: store.clone(),
        mcp,
    };
    let mut prepared = assemble(&config, options, place, resolved, session, git_status).await?;
    warnings.append(&mut prepared.warnings);
    prepared.warnings = warnings;
    Ok(prepared)
}

/// Where a run works and keeps its data.
struct Place<'a> {
    /// The project root.
    project_root: &'a Path,
    /// The project root whose role files and skills apply (none when the
    /// project is not trusted).
    own_files: Option<&'a Path>,
    /// The data and configuration directories.
    locations: &'a Locations,
    /// The session store.
    store: Store,
    /// The MCP servers, started.
    mcp: Option<troupe_actors::McpHub>,
}

/// Where a run works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkDir {
    /// The directory given with `--cwd`.
    Given,
    /// The continued session's own directory, which still exists.
    Stored(PathBuf),
    /// The current directory; `gone` is the continued session's directory
    /// when it no longer exists (the person is told).
    Current {
        /// The session's directory that is missing.
        gone: Option<PathBuf>,
    },
}

/// Decides where a run works: `--cwd` when given, else a continued session's
/// directory when it still is one (`is_dir`), else the current directory.
pub(crate) fn choose_work_dir(
    given: bool,
    stored: Option<PathBuf>,
    is_dir: impl Fn(&Path) -> bool,
) -> WorkDir {
    match stored {
        _ if given => WorkDir::Given,
        Some(stored) if is_dir(&stored) => WorkDir::Stored(stored),
        gone => WorkDir::Current { gone },
    }
}

/// What a person is told when a continued session's directory is gone.
pub(crate) fn gone_directory_notice(gone: &Path, used: &Path) -> String {
    format!(
        "the session's directory {} no longer exists; working in {} instead (pass --cwd to choose)",
        gone.display(),
        used.display()
    )
}

/// Builds the pieces once configuration and provider are known.
async fn assemble(
    config: &Config,
    options: &RunOptions,
    place: Place<'_>,
    resolved: ResolvedProvider,
    session: SessionTarget,
    git_status: GitStatus,
) -> Result<Prepared, SetupError> {
    let Place {
        project_root,
        own_files,
        locations,
        store,
        mcp,
    } = place;
    let provider = build_provider(&resolved).map_err(|err| SetupError::usage(err.to_string()))?;
    let session_id = match &session {
        SessionTarget::New(Some(id)) | SessionTarget::Continue(id) => id.clone(),
        SessionTarget::New(None) => uuid::Uuid::now_v7().to_string(),
    };
    let spill_dir = troupe_tools::output::session_spill_dir(&locations.data_dir, &session_id);
    let mut roots = vec![spill_dir.clone()];
    roots.extend(config.permissions.extra_roots.iter().cloned());
    let home = locations.home.clone();
    let sandbox = Arc::new(
        PathSandbox::new(project_root, &roots, home)
            .map_err(|err| SetupError::usage(format!("cannot set up the path sandbox: {err}")))?,
    );
    let mode = options.mode.unwrap_or(config.permissions.mode);
    let mut settings = config.permissions.clone();
    settings.mode = mode;
    let permissions = PermissionEngine::new(&settings, sandbox.clone())
        .map_err(|err| SetupError::usage(err.to_string()))?
        .with_protected_dirs(
            locations.config_dir.as_deref(),
            Some(&locations.data_dir),
            std::slice::from_ref(&spill_dir),
        );
    let os_sandbox = command_sandbox(config, &sandbox, locations, &spill_dir);
    let config_dir = locations.config_dir.clone();
    let mut system = build_system_prompt(
        config_dir.as_deref(),
        project_root,
        provider.model(),
        git_status,
    );
    let memory = session_memory(&store, &session, project_root);
    system.stable = with_memory(system.stable, memory.as_deref());
    let (skills, skill_warnings) = SkillSet::load(config_dir.as_deref(), own_files);
    system.stable = with_skill_catalogue(system.stable, &skills);
    let withheld = troupe_config::keys::config_key_names(config);
    let child_env = child_environment_withholding(&config.tools.env_allowlist, &withheld, |name| {
        locations.var(name)
    });
    let (roles, role_warnings) = RoleSet::load(config_dir.as_deref(), own_files);
    let mut warnings: Vec<String> = role_warnings
        .iter()
        .map(|warning| format!("role ignored: {warning}"))
        .collect();
    warnings.extend(
        skill_warnings
            .iter()
            .map(|warning| format!("skill ignored: {warning}")),
    );
    warnings.extend(troupe_agent::compact::window_warning(&resolved));
    warnings.extend(startup_warnings(config, &resolved));
    warnings.extend(os_sandbox.notices());
    let mut limits = config.limits;
    if let Some(max_turns) = options.max_turns {
        limits.max_turns = max_turns;
    }
    if let Some(tokens) = options.budget_tokens {
        limits.budget_tokens = tokens;
    }
    if let Some(secs) = options.timeout_secs {
        limits.wall_clock = Duration::from_secs(secs);
    }
    let switch_from = resolved.clone();
    let provider_for_model: ProviderForModel = Arc::new(move |model: &str| {
        build_provider(&switch_from.clone().with_model(model.to_string()))
            .map_err(|err| err.to_string())
    });
    let env = AgentEnv::builder(provider, store, sandbox, spill_dir)
        .provider_for_model(provider_for_model)
        .price(resolved.price)
        .registry(registry_with_skills(skills))
        .roles(roles)
        .os_sandbox(os_sandbox)
        .system(system)
        .context_window(resolved.context_window)
        .work_ahead(config.compaction.work_ahead)
        .child_env(child_env)
        .tool_timeout(config.tools.timeout)
        .capture(ContentCapture::new(config.telemetry.capture_content))
        .mcp(mcp.clone())
        .hooks(troupe_hooks::HookSet::new(config.hooks.clone()))
        .memory(SessionMemory::new(memory))
        .build();
    // The first model request waits for servers still starting, at most
    // their grace period; later ones join from the next request on.
    if let Some(hub) = &mcp {
        hub.state().wait_for_startup().await;
        warnings.extend(crate::mcp::startup_notices(hub.state()));
    }
    Ok(Prepared {
        env: Arc::new(env),
        permissions,
        mode,
        limits,
        session,
        warnings,
    })
}

/// The project memory a run's prompt holds: a continued session's own (the
/// memory as it started), else the project's memory file now. A continued
/// session that kept none (it started before memory was kept) keeps the
/// current file from now on.
fn session_memory(store: &Store, session: &SessionTarget, project_root: &Path) -> Option<String> {
    let SessionTarget::Continue(id) = session else {
        return load_for_prompt(project_root);
    };
    match store.session_memory(id) {
        Ok(Some(kept)) => (!kept.is_empty()).then_some(kept),
        Ok(None) => {
            let memory = load_for_prompt(project_root);
            if let Err(err) = store.put_session_memory(id, memory.as_deref().unwrap_or_default()) {
                tracing::warn!(%err, "the session's memory could not be kept with it");
            }
            memory
        }
        Err(err) => {
            tracing::warn!(%err, "the session's memory could not be read; the current file is used");
            load_for_prompt(project_root)
        }
    }
}

/// The built-in tools, `remember`, and `load_skill` when there is at least
/// one skill.
pub(crate) fn registry_with_skills(skills: SkillSet) -> ToolRegistry {
    let mut registry = builtin_registry();
    if let Err(err) = registry.register(Arc::new(Remember::new())) {
        tracing::error!(error = %err, "remember not registered");
    }
    if !skills.is_empty()
        && let Err(err) = registry.register(Arc::new(LoadSkill::new(Arc::new(skills))))
    {
        tracing::error!(error = %err, "load_skill not registered");
    }
    registry
}

/// The OS sandbox of a session's commands: its allowed roots, the spill
/// directory (which holds its temporary directory) and Troupe's protected
/// places, as the permission engine sees them.
pub(crate) fn command_sandbox(
    config: &Config,
    sandbox: &PathSandbox,
    locations: &Locations,
    spill_dir: &Path,
) -> CommandSandbox {
    let protected = ProtectedPaths::for_project(sandbox.project_root()).with_user_dirs(
        locations.config_dir.as_deref(),
        Some(&locations.data_dir),
        &[spill_dir.to_path_buf()],
    );
    CommandSandbox::new(config.sandbox, sandbox.roots(), &protected, spill_dir)
}

/// The working directory: `--cwd` (which must be an existing directory) or the
/// current one, made absolute.
fn working_directory(locations: &Locations, cwd: Option<&Path>) -> Result<PathBuf, SetupError> {
    let current = match &locations.current_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|err| {
            SetupError::usage(format!("cannot read the current directory: {err}"))
        })?,
    };
    let dir = match cwd {
        Some(dir) => current.join(dir),
        None => current,
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(SetupError::usage(format!(
            "--cwd {}: not a directory",
            dir.display()
        ))),
        Err(err) => Err(SetupError::usage(format!("--cwd {}: {err}", dir.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continued_session_works_in_its_directory_while_it_exists() {
        let stored = || Some(PathBuf::from("/repo"));
        assert_eq!(
            choose_work_dir(false, stored(), |_| true),
            WorkDir::Stored("/repo".into())
        );
        assert_eq!(
            choose_work_dir(false, stored(), |_| false),
            WorkDir::Current {
                gone: Some("/repo".into())
            }
        );
        assert_eq!(choose_work_dir(true, stored(), |_| false), WorkDir::Given);
        assert_eq!(choose_work_dir(true, None, |_| true), WorkDir::Given);
        assert_eq!(
            choose_work_dir(false, None, |_| true),
            WorkDir::Current { gone: None }
        );
    }

    #[test]
    fn the_gone_directory_notice_names_both_directories() {
        assert_eq!(
            gone_directory_notice(Path::new("/old/repo"), Path::new("/home/me")),
            "the session's directory /old/repo no longer exists; working in /home/me instead (pass --cwd to choose)"
        );
    }
}
