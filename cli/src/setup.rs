//! Turns command-line options and configuration into what a run needs: the
//! provider, the tool registry, the sandbox, the permission engine, the system
//! prompt, the child-process environment and the limits. Every failure here is a
//! usage or configuration error (exit code 2) with a message that says what to fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::project::{
    Locations, ProjectConfig, RunOptions, SetupError, load_project, working_directory,
};

use troupe_actors::{AgentEnv, ProviderForModel, SessionTarget};
use troupe_agent::prompt::{GitStatus, with_memory, with_skill_catalogue};
use troupe_config::{Config, Limits, ResolvedProvider, resolve_provider, startup_warnings};
use troupe_llm::build_provider;
use troupe_loader::{GIT_STATUS_BUDGET, build_system_prompt, load_roles, read_git_status};
use troupe_paths::protected::ProtectedPaths;
use troupe_paths::sandbox::PathSandbox;
use troupe_permissions::PermissionEngine;
use troupe_process::child_environment_withholding;
use troupe_process::os_sandbox::CommandSandbox;
use troupe_protocol::permission::PermissionMode;
use troupe_store::Store;
use troupe_telemetry::genai::ContentCapture;
use troupe_tools::memory::{Remember, SessionMemory, load_for_prompt};
use troupe_tools::skills::{LoadSkill, SkillSet};
use troupe_tools::web::{PageCache, WebFetch, WebOptions};
use troupe_tools::{Tool, ToolRegistry, builtin_registry_with_web};

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
            &writable_private_dirs(&locations.data_dir, project_root, &spill_dir),
        );
    // Ready before the first command, off this path.
    troupe_process::process_tree::detect_in_background();
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
    let (roles, role_warnings) = load_roles(config_dir.as_deref(), own_files);
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
    let mut builder = AgentEnv::builder(provider, store, sandbox, spill_dir)
        .provider_for_model(provider_for_model)
        .price(resolved.price)
        .registry(registry_with_skills(skills, &config.web))
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
        .memory(SessionMemory::new(memory));
    if config.checkpoints.enabled {
        builder = builder.checkpoints(locations.data_dir.clone(), project_root.to_path_buf());
    }
    let env = builder.build();
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

/// The pages `web_fetch` fetched, kept for the life of the process: the
/// daemon's runs share them (15 minutes per URL, bounded).
fn page_cache() -> Arc<PageCache> {
    static CACHE: std::sync::OnceLock<Arc<PageCache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Arc::new(PageCache::default())).clone()
}

/// `web_fetch` as `[web]` configures it (`None` when it is turned off),
/// keeping its pages in the process's cache.
fn web_fetch_tool(web: &troupe_config::WebSettings) -> Option<Arc<dyn Tool>> {
    web.enabled.then(|| {
        let options = WebOptions {
            allow_private: web.allow_private.clone(),
            ..WebOptions::default()
        };
        Arc::new(WebFetch::new(options, page_cache())) as Arc<dyn Tool>
    })
}

/// The built-in tools (`web_fetch` as `web` configures it), `remember`, and
/// `load_skill` when there is at least one skill.
pub(crate) fn registry_with_skills(
    skills: SkillSet,
    web: &troupe_config::WebSettings,
) -> ToolRegistry {
    let mut registry = builtin_registry_with_web(web_fetch_tool(web));
    if let Err(err) = registry.register_derived(Arc::new(Remember::new())) {
        tracing::error!(error = %err, "remember not registered");
    }
    if !skills.is_empty()
        && let Err(err) = registry.register_derived(Arc::new(LoadSkill::new(Arc::new(skills))))
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
        &writable_private_dirs(&locations.data_dir, sandbox.project_root(), spill_dir),
    );
    CommandSandbox::new(config.sandbox, sandbox.roots(), &protected, spill_dir)
}

/// The directories inside the data directory a session's tools may write:
/// its spill directory, and its project when that is a run's checkout of a
/// repository (`troupe_cluster::workspace`).
fn writable_private_dirs(data_dir: &Path, project_root: &Path, spill_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![spill_dir.to_path_buf()];
    if troupe_cluster::workspace::is_run_checkout(data_dir, project_root) {
        dirs.push(project_root.to_path_buf());
    }
    dirs
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
