//! The OS sandbox of commands (`[sandbox]`): `bash`, background tasks and
//! (through the same [`CommandSandbox::confine`]) any other command the
//! runtime starts are confined by the kernel, whatever the permission layer
//! allowed, bypass mode included.
//!
//! Not to be confused with [`troupe_paths::sandbox`], the *path* sandbox that file
//! tools consult in-process: this one is enforced by Linux on the child
//! process and everything it starts.
//!
//! - `plan` decides, purely, what a command may write (the allowed roots,
//!   the spill directory, the session's temporary directory, a few devices),
//!   which of Troupe's protected places and git's configuration must stay
//!   read-only inside them, and which of Troupe's private places (the data
//!   directory, the user's configuration) are hidden from commands.
//! - `git` finds git's configuration places in the writable roots.
//! - `apply` turns a plan into a Landlock ruleset and namespaces made in
//!   the parent and applies them in the child between fork and exec.
//! - `kept` keeps a session's confinement for its next commands while the
//!   plan, its places and the host's mounts stay as they were.
//! - `guard` puts back protected files no mount keeps read-only (created
//!   ones, and git's configuration where no mount can be made).
//! - [`KernelSupport`] is probed once per process: the Landlock ABI and
//!   whether mount and network namespaces can be made (as root, or through
//!   a user namespace). Where something is missing, [`CommandSandbox::notices`]
//!   says what is not enforced; commands never run less confined silently.

pub(crate) mod apply;
pub(crate) mod git;
pub(crate) mod guard;
pub(crate) mod kept;
pub(crate) mod plan;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use troupe_paths::protected::ProtectedKind;
use troupe_paths::protected::ProtectedPaths;
use troupe_protocol::permission::{SandboxMode, SandboxSettings};

pub(crate) use apply::{ApplyError, NamespaceKind};
pub use guard::{SetAside, WatchedFiles};
pub(crate) use plan::{Carve, Plan, PlanInputs};

/// Name of the session's temporary directory inside its spill directory.
pub(crate) const TEMP_DIR_NAME: &str = "tmp";

/// The lowest Landlock ABI with TCP rules.
const NETWORK_ABI: i32 = 4;
/// The lowest Landlock ABI with signal and abstract-socket scoping.
const SCOPE_ABI: i32 = 6;

/// What the running kernel offers, probed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSupport {
    /// The Landlock ABI version; 0 when Landlock is absent or disabled.
    pub landlock_abi: i32,
    /// How mount and network namespaces can be made, if at all.
    pub namespaces: Option<NamespaceKind>,
}

impl KernelSupport {
    /// Probes this kernel (cached for the life of the process).
    pub fn probe() -> Self {
        static PROBED: OnceLock<KernelSupport> = OnceLock::new();
        *PROBED.get_or_init(|| {
            let landlock_abi = apply::landlock_abi();
            // SAFETY: geteuid cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            let namespaces = [NamespaceKind::Privileged, NamespaceKind::User]
                .into_iter()
                .filter(|kind| root || *kind == NamespaceKind::User)
                .find(|kind| apply::namespaces_work(*kind));
            let support = KernelSupport {
                landlock_abi,
                namespaces,
            };
            tracing::debug!(?support, "OS sandbox support");
            support
        })
    }

    /// One line per capability, for `troupe sandbox status`.
    pub fn describe(&self) -> Vec<String> {
        let landlock = if self.landlock_abi > 0 {
            let mut extras = Vec::new();
            if self.landlock_abi >= NETWORK_ABI {
                extras.push("TCP rules");
            }
            if self.landlock_abi >= SCOPE_ABI {
                extras.push("signal and abstract-socket scoping");
            }
            let extras = if extras.is_empty() {
                String::new()
            } else {
                format!(" ({})", extras.join(", "))
            };
            format!("Landlock: ABI {}{extras}", self.landlock_abi)
        } else {
            "Landlock: not offered by this kernel".to_owned()
        };
        let namespaces = match self.namespaces {
            Some(NamespaceKind::Privileged) => "namespaces: mount and network (as root)",
            Some(NamespaceKind::User) => "namespaces: mount and network (through a user namespace)",
            None => "namespaces: not available",
        };
        vec![landlock, namespaces.to_owned()]
    }
}

/// What confining one command takes (see
/// [`CommandSandbox::prepare_confinement`]).
#[derive(Debug)]
pub(crate) struct Confinement {
    /// The command's `TMPDIR`.
    pub temp_dir: Option<PathBuf>,
    /// Protected files to put back when it ends.
    pub watched: WatchedFiles,
    /// The steps the child applies to itself before `exec`.
    pub prepared: apply::Prepared,
}

/// The OS confinement of one session's commands.
#[derive(Debug, Clone)]
pub struct CommandSandbox {
    settings: SandboxSettings,
    support: KernelSupport,
    /// `None` for mode `off`.
    plan: Option<Plan>,
    /// The plan of hooks (see [`CommandSandbox::for_hooks`]).
    hooks_plan: Option<Plan>,
    temp_dir: Option<PathBuf>,
    /// What the plan was made from, to make it again for each command when
    /// it depends on a directory listing ([`Carve::Split`]).
    inputs: OwnedInputs,
    /// The confinement made for the commands' plan, kept for the next ones.
    kept: kept::KeptConfinement,
    /// The same for the hooks' plan.
    hooks_kept: kept::KeptConfinement,
}

/// [`PlanInputs`] owned.
#[derive(Debug, Clone, Default)]
struct OwnedInputs {
    roots: Vec<PathBuf>,
    temp_dir: PathBuf,
    places: Vec<PathBuf>,
    file_places: Vec<PathBuf>,
    exempt: Vec<PathBuf>,
    /// The data directory (always hidden where mounts can be made).
    data_dirs: Vec<PathBuf>,
    /// The user's configuration directory (hidden from commands, not from
    /// hooks).
    config_dirs: Vec<PathBuf>,
    /// Directories inside those that commands still read.
    shown_read_only: Vec<PathBuf>,
    /// Git's configuration in the writable roots.
    git: git::GitPlaces,
    /// Whether the user's configuration directory stays visible (hooks).
    show_user_config: bool,
}

/// Directory of the user's configuration that commands still read: the
/// skills, whose scripts the model runs.
const SHOWN_CONFIG_DIRS: [&str; 1] = [troupe_paths::SKILLS_DIR_NAME];

impl CommandSandbox {
    /// No confinement: commands run as the runtime itself would run them.
    pub fn off() -> Self {
        Self {
            settings: SandboxSettings {
                mode: SandboxMode::Off,
                network: true,
            },
            support: KernelSupport {
                landlock_abi: 0,
                namespaces: None,
            },
            plan: None,
            hooks_plan: None,
            temp_dir: None,
            inputs: OwnedInputs::default(),
            kept: kept::KeptConfinement::default(),
            hooks_kept: kept::KeptConfinement::default(),
        }
    }

    /// The sandbox of a session with allowed `roots` (resolved, project root
    /// first, spill directory among them), Troupe's `protected` places and
    /// `spill_dir`, which holds the session's temporary directory. Probes
    /// the kernel on first use.
    pub fn new(
        settings: SandboxSettings,
        roots: &[PathBuf],
        protected: &ProtectedPaths,
        spill_dir: &Path,
    ) -> Self {
        let support = if settings.mode == SandboxMode::Off {
            KernelSupport {
                landlock_abi: 0,
                namespaces: None,
            }
        } else {
            KernelSupport::probe()
        };
        Self::with_support(settings, roots, protected, spill_dir, support)
    }

    /// [`CommandSandbox::new`] with the kernel support given (tests vary it).
    pub fn with_support(
        settings: SandboxSettings,
        roots: &[PathBuf],
        protected: &ProtectedPaths,
        spill_dir: &Path,
        support: KernelSupport,
    ) -> Self {
        let temp_dir = spill_dir.join(TEMP_DIR_NAME);
        let resolved_temp =
            troupe_paths::sandbox::resolve_path(&temp_dir).unwrap_or(temp_dir.clone());
        let exempt: Vec<PathBuf> = protected.exempt().map(Path::to_path_buf).collect();
        // A place given through a link is listed resolved as well: only
        // that form is hidden. One that does not exist yet is hidden once
        // it does.
        let real_dir = |path: &Path| git::look(path) == git::Entry::Dir;
        let through_link = |path: &Path| {
            std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
        };
        let private = |wanted: ProtectedKind| -> Vec<PathBuf> {
            protected
                .private_places()
                .filter(|(place, kind)| *kind == wanted && !through_link(place))
                .map(|(place, _)| place.to_path_buf())
                .collect()
        };
        let config_dirs = private(ProtectedKind::UserConfig);
        let shown_read_only = config_dirs
            .iter()
            .flat_map(|dir| SHOWN_CONFIG_DIRS.iter().map(|name| dir.join(name)))
            .filter(|dir| real_dir(dir))
            .collect();
        let git_roots: Vec<PathBuf> = roots
            .iter()
            .filter(|root| !exempt.iter().any(|dir| root.starts_with(dir)))
            .cloned()
            .collect();
        let git = git::places(&git_roots, git::look, list_dir);
        let inputs = OwnedInputs {
            roots: roots.to_vec(),
            temp_dir: resolved_temp,
            places: protected.places().map(Path::to_path_buf).collect(),
            file_places: protected.file_places().map(Path::to_path_buf).collect(),
            exempt,
            data_dirs: private(ProtectedKind::DataDir),
            config_dirs,
            shown_read_only,
            git,
            show_user_config: false,
        };
        let mut sandbox = Self {
            settings,
            support,
            plan: None,
            hooks_plan: None,
            temp_dir: None,
            inputs,
            kept: kept::KeptConfinement::default(),
            hooks_kept: kept::KeptConfinement::default(),
        };
        sandbox.plan = sandbox.make_plan();
        if !sandbox.inputs.config_dirs.is_empty() {
            sandbox.inputs.show_user_config = true;
            sandbox.hooks_plan = sandbox.make_plan();
            sandbox.inputs.show_user_config = false;
        }
        sandbox.temp_dir = sandbox.plan.as_ref().map(|_| temp_dir);
        sandbox
    }

    fn carve(&self) -> Carve {
        if self.support.namespaces.is_some() {
            Carve::Mounts
        } else {
            Carve::Split
        }
    }

    fn make_plan(&self) -> Option<Plan> {
        let mut hidden = self.inputs.data_dirs.clone();
        if !self.inputs.show_user_config {
            hidden.extend(self.inputs.config_dirs.iter().cloned());
        }
        let git_read_only: Vec<PathBuf> = self.inputs.git.read_only().cloned().collect();
        let inputs = PlanInputs {
            settings: self.settings,
            roots: &self.inputs.roots,
            temp_dir: &self.inputs.temp_dir,
            protected: &self.inputs.places,
            exempt: &self.inputs.exempt,
            carve: self.carve(),
            hidden: &hidden,
            shown_read_only: &self.inputs.shown_read_only,
            git_read_only: &git_read_only,
            pinned: &self.inputs.git.pinned,
        };
        plan::plan(&inputs, list_dir)
    }

    /// The sandbox of hooks: the same, but the user's configuration
    /// directory stays visible (read-only), since hooks are the user's own
    /// commands and may live there.
    pub fn for_hooks(&self) -> Self {
        let mut sandbox = self.clone();
        if !self.inputs.config_dirs.is_empty() {
            sandbox.inputs.show_user_config = true;
            sandbox.plan = self.hooks_plan.clone();
            sandbox.kept = self.hooks_kept.clone();
        }
        sandbox
    }

    /// The settings this sandbox was made from.
    pub fn settings(&self) -> SandboxSettings {
        self.settings
    }

    /// The kernel support it relies on.
    pub fn support(&self) -> KernelSupport {
        self.support
    }

    /// The plan applied to each command; `None` when the mode is `off`.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The session's temporary directory (`TMPDIR` of confined commands).
    pub fn temp_dir(&self) -> Option<&Path> {
        self.temp_dir.as_deref()
    }

    /// Whether commands are confined by the kernel at all.
    pub fn enforced(&self) -> bool {
        self.plan.is_some() && self.support.landlock_abi > 0
    }

    /// What is configured but not enforced on this kernel, one sentence
    /// each; empty when everything is (or the mode is `off`).
    pub fn notices(&self) -> Vec<String> {
        let Some(plan) = &self.plan else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if self.support.landlock_abi == 0 {
            out.push(format!(
                "the OS sandbox (mode {}) is not enforced: this kernel offers no Landlock, so \
                 commands can write anywhere this user can and inspect other processes",
                self.settings.mode.as_str()
            ));
        }
        if !plan.network && self.support.namespaces.is_none() {
            if self.support.landlock_abi >= NETWORK_ABI {
                out.push(
                    "sandbox network = false blocks TCP only: no network namespace can be \
                     made here, so UDP and other sockets stay open"
                        .to_owned(),
                );
            } else {
                out.push(
                    "sandbox network = false is not enforced: this kernel offers neither \
                     network namespaces nor Landlock TCP rules"
                        .to_owned(),
                );
            }
        }
        out
    }

    /// Prepares `command` to run confined: `TMPDIR` points at the session's
    /// temporary directory (created here), and a hook run in the child
    /// before `exec` enters the namespaces and the Landlock domain. Call it
    /// after every other `pre_exec` hook that needs to write files (joining
    /// a cgroup): hooks run in the order they were added, and after this
    /// one the child can no longer write there. Does nothing for mode `off`.
    ///
    /// A protected directory that a mount should keep read-only but that
    /// does not exist yet is created empty first; a protected file in that
    /// situation is returned, for the caller to set aside if the command
    /// creates it ([`WatchedFiles::set_aside_created`]).
    pub fn confine(
        &self,
        command: &mut tokio::process::Command,
    ) -> Result<WatchedFiles, ApplyError> {
        let Some(confinement) = self.prepare_confinement()? else {
            return Ok(WatchedFiles::default());
        };
        if let Some(dir) = &confinement.temp_dir {
            command.env("TMPDIR", dir);
        }
        let prepared = confinement.prepared;
        // Entered again inside the namespaces (`std` enters it before the
        // hook runs).
        let cwd = match command.as_std().get_current_dir() {
            Some(dir) => dir.to_path_buf(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        let cwd = std::ffi::CString::new(cwd.as_os_str().as_encoded_bytes())
            .map_err(|_| ApplyError::Nul(cwd.display().to_string()))?;
        // SAFETY: `enter` only makes async-signal-safe system calls on
        // memory prepared before the fork (see `apply`).
        unsafe {
            command.pre_exec(move || apply::enter(&prepared, &cwd));
        }
        Ok(confinement.watched)
    }

    /// What confining one command takes, prepared in this process: its
    /// `TMPDIR` (created here), the protected files to watch, and the steps
    /// the child applies to itself before `exec`. `None` for mode `off`.
    /// See [`CommandSandbox::confine`].
    pub(crate) fn prepare_confinement(&self) -> Result<Option<Confinement>, ApplyError> {
        if self.plan.is_none() {
            return Ok(None);
        }
        if let Some(dir) = &self.temp_dir
            && let Err(err) = std::fs::create_dir_all(dir)
        {
            tracing::warn!(dir = %dir.display(), error = %err, "cannot create the session's temporary directory");
        }
        // A split plan follows the entries the roots hold now.
        let fresh = match self.carve() {
            Carve::Split => self.make_plan(),
            Carve::Mounts => None,
        };
        let Some(plan) = fresh.as_ref().or(self.plan.as_ref()) else {
            return Ok(None);
        };
        let file_places: Vec<PathBuf> = self
            .inputs
            .file_places
            .iter()
            .chain(&self.inputs.git.files)
            .cloned()
            .collect();
        let missing = plan::missing_places(plan, &file_places, |path| {
            std::fs::symlink_metadata(path).is_ok()
        });
        for dir in &missing.create {
            // Empty, so a bind mount keeps it read-only; a directory that
            // cannot be made here cannot be made by the command either.
            if let Err(err) = std::fs::create_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot create a protected directory to keep it read-only");
            }
        }
        let mut watched = WatchedFiles::missing(missing.watch);
        if self.carve() == Carve::Split && self.settings.mode == SandboxMode::WorkspaceWrite {
            // No mount keeps git's configuration read-only: it is taken
            // now and put back when the command ends.
            watched.snapshot(&self.inputs.git.files, &self.inputs.git.dirs);
        }
        let landlock = self.support.landlock_abi > 0;
        let prepared = self.kept.get_or_make(plan, || {
            apply::prepare(plan, landlock, self.support.namespaces)
        })?;
        Ok(Some(Confinement {
            temp_dir: self.temp_dir.clone(),
            watched,
            prepared,
        }))
    }

    /// A few lines describing this sandbox, for `troupe sandbox status`.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!(
            "mode: {}; network: {}",
            self.settings.mode.as_str(),
            if self.settings.network { "on" } else { "off" }
        )];
        let Some(plan) = &self.plan else {
            out.push("commands run unconfined".to_owned());
            return out;
        };
        if plan.writable.is_empty() {
            out.push("writable: nothing but the devices".to_owned());
        } else {
            out.push("writable:".to_owned());
            out.extend(plan.writable.iter().map(|p| format!("  {}", p.display())));
        }
        if !plan.read_only_mounts.is_empty() || !plan.pinned.is_empty() {
            out.push("read-only inside them:".to_owned());
            out.extend(
                plan.read_only_mounts
                    .iter()
                    .map(|p| format!("  {}", p.display())),
            );
            out.extend(
                plan.pinned
                    .iter()
                    .map(|p| format!("  {} (cannot be renamed or replaced)", p.display())),
            );
        }
        let private: Vec<&PathBuf> = self
            .inputs
            .data_dirs
            .iter()
            .chain(&self.inputs.config_dirs)
            .collect();
        if !plan.hidden.is_empty() {
            out.push("hidden from commands:".to_owned());
            out.extend(plan.hidden.iter().map(|p| format!("  {}", p.display())));
            for shown in &plan.shown {
                let how = if shown.writable {
                    "writable"
                } else {
                    "read-only"
                };
                out.push(format!("  except {} ({how})", shown.path.display()));
            }
        } else if !private.is_empty() && self.carve() == Carve::Split {
            out.push(
                "not hidden from commands (no mount namespace can be made here), read-only:"
                    .to_owned(),
            );
            out.extend(private.iter().map(|p| format!("  {}", p.display())));
            out.push(
                "  the daemon refuses runs and approvals that come from commands instead"
                    .to_owned(),
            );
        }
        if self.carve() == Carve::Split && !self.inputs.git.files.is_empty() {
            out.push(
                "git configuration (no mount namespace): restored after each command if changed"
                    .to_owned(),
            );
        }
        out
    }
}

/// Confines `command` read-only: it may write only the harmless devices,
/// and neither connect nor bind TCP sockets, through Landlock alone (no
/// namespace is made, so it costs next to nothing). Nothing is done where
/// the kernel offers no Landlock.
pub fn confine_read_only(command: &mut tokio::process::Command) -> Result<(), ApplyError> {
    confine_writing_only(command, &[])
}

/// Confines `command` as [`confine_read_only`] does, except that it may
/// also write below each of `writable` (directories or files; one that does
/// not exist grants nothing).
pub fn confine_writing_only(
    command: &mut tokio::process::Command,
    writable: &[PathBuf],
) -> Result<(), ApplyError> {
    confine_writing(command, writable, false)
}

/// [`confine_writing_only`] with TCP allowed: a git that fetches from a
/// remote repository.
pub fn confine_writing_with_network(
    command: &mut tokio::process::Command,
    writable: &[PathBuf],
) -> Result<(), ApplyError> {
    confine_writing(command, writable, true)
}

fn confine_writing(
    command: &mut tokio::process::Command,
    writable: &[PathBuf],
    network: bool,
) -> Result<(), ApplyError> {
    // Only the Landlock ABI is needed: one system call, where the full
    // probe starts processes to try the namespaces (and would hold up a
    // session's first `git status` by that much).
    static LANDLOCK_ABI: OnceLock<i32> = OnceLock::new();
    if *LANDLOCK_ABI.get_or_init(apply::landlock_abi) == 0 {
        return Ok(());
    }
    let plan = Plan {
        writable: writable.to_vec(),
        devices: plan::DEVICES.iter().map(PathBuf::from).collect(),
        network,
        ..Plan::default()
    };
    let prepared = apply::prepare(&plan, true, None)?;
    // SAFETY: `enter` only makes async-signal-safe system calls on memory
    // prepared before the fork (see `apply`); no namespace is entered, so
    // the working directory stays as it is.
    unsafe {
        command.pre_exec(move || apply::enter(&prepared, c"."));
    }
    Ok(())
}

/// The entries of `dir`, sorted; empty when it cannot be read.
fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SpawnPath, drive, spawn_shell_confined};
    use tokio_util::sync::CancellationToken;

    /// A project with `.troupe/` and `.mcp.json`, a spill directory, and a
    /// directory outside both.
    struct Layout {
        _base: tempfile::TempDir,
        project: PathBuf,
        spill: PathBuf,
        outside: PathBuf,
    }

    fn layout() -> Layout {
        let base = tempfile::tempdir().unwrap();
        let root = troupe_paths::sandbox::resolve_path(base.path()).unwrap();
        let project = root.join("project");
        let spill = root.join("data/spill/s1");
        let outside = root.join("outside");
        for dir in [&project.join(".troupe"), &spill, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(project.join(".troupe/config.toml"), "").unwrap();
        std::fs::write(project.join(".mcp.json"), "{}").unwrap();
        Layout {
            _base: base,
            project,
            spill,
            outside,
        }
    }

    fn sandbox(
        layout: &Layout,
        settings: SandboxSettings,
        support: KernelSupport,
    ) -> CommandSandbox {
        let protected = ProtectedPaths::for_project(&layout.project).with_user_dirs(
            None,
            Some(&layout.spill.join("../..")),
            std::slice::from_ref(&layout.spill),
        );
        let roots = vec![layout.project.clone(), layout.spill.clone()];
        CommandSandbox::with_support(settings, &roots, &protected, &layout.spill, support)
    }

    async fn run(sandbox: &CommandSandbox, cwd: &Path, command: &str) -> (i32, String) {
        run_by(sandbox, cwd, command, SpawnPath::IntoCgroup).await
    }

    /// [`run`], starting the command by `path`.
    async fn run_by(
        sandbox: &CommandSandbox,
        cwd: &Path,
        command: &str,
        path: SpawnPath,
    ) -> (i32, String) {
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let mut shell = crate::spawn_shell_by(
            command,
            cwd,
            &env,
            crate::process_tree::containment(),
            Some(sandbox),
            path,
        )
        .unwrap();
        let mut out = Vec::new();
        let outcome = drive(&mut shell, None, &CancellationToken::new(), |b| {
            out.extend_from_slice(b)
        })
        .await;
        let code = outcome.status.and_then(|s| s.code()).unwrap_or(-1);
        (code, String::from_utf8_lossy(&out).into_owned())
    }

    fn workspace_write() -> SandboxSettings {
        SandboxSettings::default()
    }

    #[tokio::test]
    async fn a_sessions_commands_share_namespaces_made_once_until_a_place_they_hold_changes() {
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 || support.namespaces.is_none() {
            eprintln!("no Landlock or no namespaces here");
            return;
        }
        let layout = layout();
        let settings = SandboxSettings {
            mode: SandboxMode::WorkspaceWrite,
            network: false,
        };
        let sandbox = sandbox(&layout, settings, support);
        let own = |name: &str| std::fs::read_link(format!("/proc/self/ns/{name}")).unwrap();
        let namespaces = "readlink /proc/self/ns/mnt /proc/self/ns/net; pwd -P";
        let (code, first) = run(&sandbox, &layout.project, namespaces).await;
        assert_eq!(code, 0, "{first}");
        let lines: Vec<&str> = first.lines().collect();
        assert_ne!(lines[0], own("mnt").to_str().unwrap(), "{first}");
        assert_ne!(lines[1], own("net").to_str().unwrap(), "{first}");
        // The working directory is the project's, looked up inside.
        assert_eq!(lines[2], layout.project.to_str().unwrap(), "{first}");
        // The next commands, by either way of starting them (and a clone of
        // the sandbox), enter the same ones.
        let (_, second) = run(&sandbox, &layout.project, namespaces).await;
        assert_eq!(second, first);
        let (_, forked) = run_by(
            &sandbox.clone(),
            &layout.project,
            namespaces,
            SpawnPath::Forked,
        )
        .await;
        assert_eq!(forked, first);

        // A command cannot change the namespaces the next one enters: its
        // unmounts and mounts are refused, and `.troupe` stays read-only.
        let (_, out) = run(
            &sandbox,
            &layout.project,
            "umount -l .troupe; umount -l /; mount -t tmpfs none .troupe; echo tried",
        )
        .await;
        assert!(out.ends_with("tried\n"), "{out}");
        let (code, out) = run(
            &sandbox,
            &layout.project,
            "echo x > .troupe/planted && echo wrote",
        )
        .await;
        assert_ne!(code, 0, "{out}");
        assert!(!out.contains("wrote"), "{out}");
        assert!(!layout.project.join(".troupe/planted").exists());

        // `.troupe` replaced from outside: the kept bind would still show
        // the old directory (its `config.toml`), so the namespaces are made
        // again, showing the new one (empty), read-only.
        std::fs::rename(layout.project.join(".troupe"), layout.outside.join("old")).unwrap();
        std::fs::create_dir(layout.project.join(".troupe")).unwrap();
        let (code, out) = run(
            &sandbox,
            &layout.project,
            "ls -A .troupe; echo listed; echo x > .troupe/planted && echo wrote",
        )
        .await;
        assert_ne!(code, 0, "{out}");
        assert!(out.starts_with("listed\n"), "{out}");
        assert!(!out.contains("wrote"), "{out}");
        assert!(!layout.project.join(".troupe/planted").exists());

        // `.mcp.json` gone, then written again from outside: read-only in
        // the next command.
        std::fs::remove_file(layout.project.join(".mcp.json")).unwrap();
        let (_, _) = run(&sandbox, &layout.project, "true").await;
        std::fs::write(layout.project.join(".mcp.json"), "{}").unwrap();
        let (code, out) = run(
            &sandbox,
            &layout.project,
            "echo '{\"mcpServers\":{}}' > .mcp.json && echo wrote",
        )
        .await;
        assert_ne!(code, 0, "{out}");
        assert!(!out.contains("wrote"), "{out}");
        assert_eq!(
            std::fs::read_to_string(layout.project.join(".mcp.json")).unwrap(),
            "{}"
        );
    }

    #[test]
    fn namespaces_made_by_many_threads_at_once_never_wait_on_each_other() {
        // Each making forks a child that waits to be killed: children
        // forked at the same moment hold copies of each other's pipes, so
        // nothing may wait for a pipe to close.
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 || support.namespaces.is_none() {
            eprintln!("no Landlock or no namespaces here");
            return;
        }
        let layout = layout();
        let plan = sandbox(&layout, workspace_write(), support)
            .plan()
            .unwrap()
            .clone();
        let (done, finished) = std::sync::mpsc::channel();
        for _ in 0..8 {
            let (plan, done) = (plan.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    apply::prepare(&plan, true, support.namespaces).unwrap();
                }
                done.send(()).unwrap();
            });
        }
        for _ in 0..8 {
            finished
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("every thread made its namespaces");
        }
    }

    #[tokio::test]
    async fn writes_land_only_inside_the_roots_and_troupe_files_stay_read_only() {
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 {
            let layout = layout();
            assert!(
                !sandbox(&layout, workspace_write(), support)
                    .notices()
                    .is_empty()
            );
            return;
        }
        // Both ways of starting a command (inside its cgroup, or forked
        // and joining it) confine it the same.
        for (support, path) in [
            (support, SpawnPath::IntoCgroup),
            (support, SpawnPath::Forked),
            (
                KernelSupport {
                    namespaces: None,
                    ..support
                },
                SpawnPath::IntoCgroup,
            ),
        ] {
            let layout = layout();
            let sandbox = sandbox(&layout, workspace_write(), support);
            let outside = layout.outside.display().to_string();
            let (code, out) = run_by(
                &sandbox,
                &layout.project,
                &format!(
                    "touch {outside}/a; echo x > {outside}/b; cp /etc/hostname {outside}/c; \
                     echo y >> .troupe/config.toml; rm -f .mcp.json; mv .troupe gone; \
                     touch .troupe/new; mkdir src; echo ok > src/lib.rs; \
                     echo t > \"$TMPDIR/t\"; echo s > {spill}/s; echo done",
                    spill = layout.spill.display()
                ),
                path,
            )
            .await;
            assert_eq!(code, 0, "{out}");
            assert!(out.ends_with("done\n"), "{out}");
            for name in ["a", "b", "c"] {
                assert!(
                    !layout.outside.join(name).exists(),
                    "{name} with {support:?}"
                );
            }
            assert_eq!(
                std::fs::read_to_string(layout.project.join(".troupe/config.toml")).unwrap(),
                ""
            );
            assert!(layout.project.join(".mcp.json").exists());
            assert!(!layout.project.join("gone").exists());
            assert!(!layout.project.join(".troupe/new").exists());
            assert!(layout.spill.join("tmp/t").exists());
            assert!(layout.spill.join("s").exists());
            if support.namespaces.is_some() {
                // Split carving cannot create entries at the top of the root.
                assert!(layout.project.join("src/lib.rs").exists(), "{out}");
            }
        }
    }

    #[tokio::test]
    async fn protected_places_that_do_not_exist_yet_cannot_be_created() {
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 {
            return;
        }
        for support in [
            support,
            KernelSupport {
                namespaces: None,
                ..support
            },
        ] {
            let layout = layout();
            std::fs::remove_dir_all(layout.project.join(".troupe")).unwrap();
            std::fs::remove_file(layout.project.join(".mcp.json")).unwrap();
            let sandbox = sandbox(&layout, workspace_write(), support);
            let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
            let mut shell = spawn_shell_confined(
                "mkdir -p .troupe; echo 'mode = \"bypass\"' > .troupe/config.toml; \
                 echo '{\"mcpServers\": {}}' > .mcp.json; echo done",
                &layout.project,
                &env,
                &sandbox,
            )
            .unwrap();
            let outcome = drive(&mut shell, None, &CancellationToken::new(), |_| {}).await;
            assert!(outcome.status.is_some());
            let set_aside = shell.group.set_aside_created_protected();
            assert!(
                !layout.project.join(".troupe/config.toml").exists(),
                "{support:?}"
            );
            assert!(!layout.project.join(".mcp.json").exists(), "{support:?}");
            if support.namespaces.is_some() {
                // The directory was made empty and kept read-only; the file
                // could be written, and was set aside with nothing lost.
                assert!(layout.project.join(".troupe").is_dir());
                let aside = layout
                    .project
                    .join(format!(".mcp.json{}", guard::SET_ASIDE_SUFFIX));
                assert_eq!(
                    set_aside,
                    vec![SetAside {
                        path: layout.project.join(".mcp.json"),
                        aside: Some(aside.clone()),
                        restored: false
                    }]
                );
                assert!(
                    std::fs::read_to_string(aside)
                        .unwrap()
                        .contains("mcpServers")
                );
            } else {
                // Split carving never grants the project root itself.
                assert!(set_aside.is_empty());
                assert!(!layout.project.join(".troupe").exists());
            }
        }
    }

    /// Every way this kernel can confine: as probed, through a user
    /// namespace when root could also make one, and without namespaces.
    fn supports() -> Vec<KernelSupport> {
        let support = KernelSupport::probe();
        let mut out = vec![support];
        if support.namespaces == Some(NamespaceKind::Privileged)
            && apply::namespaces_work(NamespaceKind::User)
        {
            out.push(KernelSupport {
                namespaces: Some(NamespaceKind::User),
                ..support
            });
        }
        out.push(KernelSupport {
            namespaces: None,
            ..support
        });
        out
    }

    #[tokio::test]
    async fn the_data_and_configuration_directories_are_hidden_but_for_the_spill_directory_and_skills()
     {
        if KernelSupport::probe().landlock_abi == 0 {
            return;
        }
        for support in supports() {
            let layout = layout();
            let data = layout.spill.join("../..");
            let data = troupe_paths::sandbox::resolve_path(&data).unwrap();
            let config = layout.outside.join("cfg/troupe");
            std::fs::create_dir_all(config.join("skills/pdf")).unwrap();
            std::fs::write(config.join("config.toml"), "secret-config").unwrap();
            std::fs::write(config.join("skills/pdf/run.sh"), "echo skill-ran").unwrap();
            std::fs::write(data.join("daemon.token"), "secret-token").unwrap();
            std::fs::create_dir_all(data.join("spill/other")).unwrap();
            std::fs::write(data.join("spill/other/x"), "secret-spill").unwrap();
            std::fs::write(layout.spill.join("mine"), "my-spill").unwrap();
            let protected = ProtectedPaths::for_project(&layout.project).with_user_dirs(
                Some(&config),
                Some(&data),
                std::slice::from_ref(&layout.spill),
            );
            let roots = vec![layout.project.clone(), layout.spill.clone()];
            let sandbox = CommandSandbox::with_support(
                workspace_write(),
                &roots,
                &protected,
                &layout.spill,
                support,
            );
            let script = format!(
                "cat {data}/daemon.token; ls {data}; cat {data}/spill/other/x; \
                 cat {config}/config.toml; cat {spill}/mine; echo w > {spill}/w; \
                 sh {config}/skills/pdf/run.sh; echo x > {config}/skills/pdf/run.sh; \
                 touch {data}/new; echo end",
                data = data.display(),
                config = config.display(),
                spill = layout.spill.display(),
            );
            let (_, out) = run(&sandbox, &layout.project, &script).await;
            assert!(out.contains("my-spill"), "{support:?}: {out}");
            assert!(out.contains("skill-ran"), "{support:?}: {out}");
            assert!(out.ends_with("end\n"), "{support:?}: {out}");
            assert!(layout.spill.join("w").exists(), "{support:?}");
            assert_eq!(
                std::fs::read_to_string(config.join("skills/pdf/run.sh")).unwrap(),
                "echo skill-ran"
            );
            assert!(!data.join("new").exists(), "{support:?}");
            let hidden = support.namespaces.is_some();
            for secret in ["secret-token", "secret-config", "secret-spill"] {
                assert_eq!(!out.contains(secret), hidden, "{secret} {support:?}: {out}");
            }
            assert_eq!(
                !sandbox
                    .describe()
                    .iter()
                    .any(|line| line.contains("not hidden")),
                hidden
            );
            if hidden {
                // Hooks are the user's own commands: they still read the
                // configuration directory, never the data directory.
                let (_, out) = run(
                    &sandbox.for_hooks(),
                    &layout.project,
                    &format!(
                        "cat {}/config.toml; cat {}/daemon.token; echo end",
                        config.display(),
                        data.display()
                    ),
                )
                .await;
                assert!(out.contains("secret-config"), "{out}");
                assert!(!out.contains("secret-token"), "{out}");
            }
        }
    }

    /// A git repository in the layout's project with one commit.
    fn git_repository(layout: &Layout) {
        let git = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(&layout.project)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::create_dir_all(layout.project.join("src")).unwrap();
        std::fs::write(layout.project.join("src/a.txt"), "a\n").unwrap();
        git(&["add", "src/a.txt"]);
        git(&["commit", "-qm", "first"]);
    }

    #[tokio::test]
    async fn git_configuration_stays_as_it_was_while_git_itself_works() {
        if KernelSupport::probe().landlock_abi == 0 {
            return;
        }
        for support in supports() {
            let layout = layout();
            git_repository(&layout);
            let config_before =
                std::fs::read_to_string(layout.project.join(".git/config")).unwrap();
            let sandbox = sandbox(&layout, workspace_write(), support);
            let env = vec![
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("HOME".to_owned(), layout.outside.display().to_string()),
            ];
            let script = "git config core.fsmonitor 'touch MARKER'; \
                 printf '[core]\\n\\tfsmonitor = touch MARKER\\n' >> .git/config; \
                 printf '#!/bin/sh\\ntouch MARKER\\n' > .git/hooks/post-checkout; \
                 mkdir -p .git/info; echo '* filter=evil' > .git/info/attributes; \
                 echo b > src/b.txt && git -c user.name=t -c user.email=t@t add src/b.txt && \
                 git -c user.name=t -c user.email=t@t commit -qm second && echo committed; \
                 echo /elsewhere > .git/commondir; mv .git .git-old";
            let mut shell = spawn_shell_confined(script, &layout.project, &env, &sandbox).unwrap();
            let mut out = Vec::new();
            drive(&mut shell, None, &CancellationToken::new(), |b| {
                out.extend_from_slice(b)
            })
            .await;
            let set_aside = shell.group.set_aside_created_protected();
            let out = String::from_utf8_lossy(&out);
            assert!(out.contains("committed"), "{support:?}: {out}");
            let git = layout.project.join(".git");
            assert_eq!(
                std::fs::read_to_string(git.join("config")).unwrap(),
                config_before,
                "{support:?}: {out}"
            );
            assert!(!git.join("hooks/post-checkout").exists(), "{support:?}");
            assert!(!git.join("commondir").exists(), "{support:?}");
            assert!(!git.join("info/attributes").exists(), "{support:?}");
            assert!(
                set_aside
                    .iter()
                    .any(|done| done.path == git.join("commondir")),
                "{support:?}: {set_aside:?}"
            );
            // Pinned (or, in a split root, at the top of a root no command
            // may change): the directory could not be renamed away.
            assert!(!layout.project.join(".git-old").exists(), "{support:?}");
            if support.namespaces.is_none() {
                // No mount kept the configuration read-only: what the
                // command wrote was put back and set aside.
                assert!(
                    set_aside.iter().any(|done| done.path == git.join("config")
                        && done.restored
                        && done.aside.is_some()),
                    "{support:?}: {set_aside:?}"
                );
            }
            let log = std::process::Command::new("git")
                .args(["log", "--oneline"])
                .current_dir(&layout.project)
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 2);
        }
    }

    #[tokio::test]
    async fn other_processes_cannot_be_inspected() {
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 {
            return;
        }
        let layout = layout();
        let sandbox = sandbox(&layout, workspace_write(), support);
        let (code, out) = run(&sandbox, &layout.project, "cat /proc/$PPID/environ").await;
        assert_ne!(code, 0, "{out}");
        let (code, _) = run(
            &CommandSandbox::off(),
            &layout.project,
            "cat /proc/$PPID/environ",
        )
        .await;
        assert_eq!(code, 0);
    }

    #[tokio::test]
    async fn a_confined_command_cannot_reach_around_what_is_hidden() {
        if KernelSupport::probe().landlock_abi == 0 {
            return;
        }
        let layout = layout();
        let sandbox = sandbox(&layout, workspace_write(), KernelSupport::probe());
        // Another process's view of the file system, and the capabilities
        // that open files without a path or change mounts.
        let (_, out) = run(
            &sandbox,
            &layout.project,
            "ls /proc/$PPID/root/ >/dev/null 2>&1 && echo root-readable; \
             grep CapEff /proc/self/status",
        )
        .await;
        assert!(!out.contains("root-readable"), "{out}");
        let effective = out
            .lines()
            .find_map(|line| line.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{out}"));
        for capability in apply::DROPPED_CAPABILITIES {
            assert_eq!(effective & (1 << capability), 0, "{capability}: {out}");
        }
    }

    #[tokio::test]
    async fn read_only_refuses_every_write_and_off_refuses_none() {
        let support = KernelSupport::probe();
        if support.landlock_abi == 0 {
            return;
        }
        let layout = layout();
        let settings = SandboxSettings {
            mode: SandboxMode::ReadOnly,
            network: true,
        };
        let sandbox = sandbox(&layout, settings, support);
        let (code, out) = run(
            &sandbox,
            &layout.project,
            "touch a; echo x > /dev/null && cat /etc/hostname > /dev/null && echo read",
        )
        .await;
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("read"), "{out}");
        assert!(!layout.project.join("a").exists());
        let (code, out) = run(
            &CommandSandbox::off(),
            &layout.project,
            &format!("touch {}/a", layout.outside.display()),
        )
        .await;
        assert_eq!(code, 0, "{out}");
        assert!(layout.outside.join("a").exists());
    }
}
