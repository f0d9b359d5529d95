//! Where a command keeps its data and finds its configuration ([`Locations`]),
//! what the command line says about a run ([`RunOptions`]), and the
//! configuration of the project a directory belongs to, loaded with the
//! user's trust ([`configured`], [`configured_with_root`]). Every failure
//! here is a [`SetupError`]: a message that says what to fix, with the exit
//! code it deserves. `setup` builds a run from this; the MCP commands and
//! the daemon's MCP servers read the same configuration through it.

use crate::{EXIT_RUNTIME, EXIT_USAGE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use troupe_agent::roles::RoleSet;
use troupe_config::paths::{self, ProcessEnv};
use troupe_config::{
    Config, ConfigSources, LeftOut, ResolvedProvider, TrustStore, UntrustedServer,
    load_config_with_trust, resolve_provider, untrusted_notice,
};
use troupe_loader::{load_roles, project_role_names};
use troupe_protocol::permission::PermissionMode;
use troupe_store::{Store, StoreError};
use troupe_tools::skills::SkillSet;

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

    /// The user's own config file alone (no project's), as loaded.
    pub(crate) fn user_config(&self) -> Result<troupe_config::Config, troupe_config::ConfigError> {
        troupe_config::load_config(&ConfigSources {
            user: self
                .config_dir
                .as_deref()
                .map(|dir| dir.join(paths::CONFIG_FILE_NAME)),
            project_root: None,
            home: self.home.clone(),
        })
    }

    /// The user's config file, or `None` (logged) when it cannot be read:
    /// that error is reported where the file is loaded for a run.
    fn user_config_or_defaults(&self) -> Option<troupe_config::Config> {
        match self.user_config() {
            Ok(config) => Some(config),
            Err(err) => {
                tracing::warn!(%err, "the user's settings could not be read; defaults apply");
                None
            }
        }
    }

    /// The `[store]` settings of the user's config file (defaults when it
    /// has none or cannot be read).
    pub(crate) fn store_settings(&self) -> troupe_config::StoreSettings {
        self.user_config_or_defaults()
            .map(|config| config.store)
            .unwrap_or_default()
    }

    /// The user's `[cluster]` table (empty when the file has none or
    /// cannot be read).
    pub(crate) fn cluster_settings(&self) -> troupe_config::ClusterFile {
        self.user_config_or_defaults()
            .map(|config| config.cluster)
            .unwrap_or_default()
    }

    /// The user's `[checkpoints]` settings (defaults when the file cannot
    /// be read).
    pub(crate) fn checkpoint_settings(&self) -> troupe_config::CheckpointSettings {
        self.user_config_or_defaults()
            .map(|config| config.checkpoints)
            .unwrap_or_default()
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
                         to use it, or stop it first with `troupe daemon stop`",
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
    /// files and its skills, each with the file it came from. Empty when it
    /// is trusted.
    pub ignored: Vec<LeftOut>,
    /// The MCP servers of its files that wait for trust. Empty when it is
    /// trusted.
    pub untrusted_servers: Vec<UntrustedServer>,
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
/// them: under the directory they came from.
fn own_files_left_out(root: &Path) -> Vec<LeftOut> {
    let roles = project_role_names(root)
        .into_iter()
        .map(|name| LeftOut::new(".troupe/agents", format!("role {name}")));
    let skills = SkillSet::project_skill_names(root)
        .into_iter()
        .map(|name| LeftOut::new(".troupe/skills", format!("skill {name}")));
    roles.chain(skills).collect()
}

/// Reads the configuration of the project holding `cwd`, as far as its
/// trust lets it apply.
pub(crate) fn load_project(locations: &Locations, cwd: &Path) -> Result<ProjectConfig, SetupError> {
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
        untrusted_servers: loaded.untrusted_servers,
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
    let (roles, _) = load_roles(locations.config_dir.as_deref(), project.own_files());
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
    /// What is ignored until it is trusted, each with its file.
    pub ignored: Vec<LeftOut>,
}

impl TrustQuestion {
    /// What is ignored, grouped by the file it came from, with the commands
    /// its MCP servers and hooks would run.
    pub(crate) fn listing(&self) -> String {
        troupe_config::trust::left_out_listing(&self.ignored)
    }
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

/// The working directory: `--cwd` (which must be an existing directory) or the
/// current one, made absolute.
pub(crate) fn working_directory(
    locations: &Locations,
    cwd: Option<&Path>,
) -> Result<PathBuf, SetupError> {
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
