//! The OS sandbox of commands (`[sandbox]`): `bash`, background tasks and
//! (through the same [`CommandSandbox::confine`]) any other command the
//! runtime starts are confined by the kernel, whatever the permission layer
//! allowed, bypass mode included.
//!
//! Not to be confused with [`crate::sandbox`], the *path* sandbox that file
//! tools consult in-process: this one is enforced by Linux on the child
//! process and everything it starts.
//!
//! - `plan` decides, purely, what a command may write (the allowed roots,
//!   the spill directory, the session's temporary directory, a few devices)
//!   and which of Troupe's protected places must stay read-only inside them.
//! - `apply` turns a plan into a Landlock ruleset and namespace set-up in
//!   the parent and applies it in the child between fork and exec.
//! - [`KernelSupport`] is probed once per process: the Landlock ABI and
//!   whether mount and network namespaces can be made (as root, or through
//!   a user namespace). Where something is missing, [`CommandSandbox::notices`]
//!   says what is not enforced; commands never run less confined silently.

pub(crate) mod apply;
pub(crate) mod plan;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::{SandboxMode, SandboxSettings};
use crate::permissions::ProtectedPaths;

pub(crate) use apply::{ApplyError, NamespaceKind};
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

/// The OS confinement of one session's commands.
#[derive(Debug, Clone)]
pub struct CommandSandbox {
    settings: SandboxSettings,
    support: KernelSupport,
    /// `None` for mode `off`.
    plan: Option<Plan>,
    temp_dir: Option<PathBuf>,
    /// What the plan was made from, to make it again for each command when
    /// it depends on a directory listing ([`Carve::Split`]).
    inputs: OwnedInputs,
}

/// [`PlanInputs`] owned.
#[derive(Debug, Clone, Default)]
struct OwnedInputs {
    roots: Vec<PathBuf>,
    temp_dir: PathBuf,
    places: Vec<PathBuf>,
    file_places: Vec<PathBuf>,
    exempt: Vec<PathBuf>,
}

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
            temp_dir: None,
            inputs: OwnedInputs::default(),
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
        let resolved_temp = crate::sandbox::resolve_path(&temp_dir).unwrap_or(temp_dir.clone());
        let inputs = OwnedInputs {
            roots: roots.to_vec(),
            temp_dir: resolved_temp,
            places: protected.places().map(Path::to_path_buf).collect(),
            file_places: protected.file_places().map(Path::to_path_buf).collect(),
            exempt: protected.exempt().map(Path::to_path_buf).collect(),
        };
        let mut sandbox = Self {
            settings,
            support,
            plan: None,
            temp_dir: None,
            inputs,
        };
        sandbox.plan = sandbox.make_plan();
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
        let inputs = PlanInputs {
            settings: self.settings,
            roots: &self.inputs.roots,
            temp_dir: &self.inputs.temp_dir,
            protected: &self.inputs.places,
            exempt: &self.inputs.exempt,
            carve: self.carve(),
        };
        plan::plan(&inputs, list_dir)
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
        if self.plan.is_none() {
            return Ok(WatchedFiles::default());
        }
        if let Some(dir) = &self.temp_dir {
            if let Err(err) = std::fs::create_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot create the session's temporary directory");
            }
            command.env("TMPDIR", dir);
        }
        // A split plan follows the entries the roots hold now.
        let fresh = match self.carve() {
            Carve::Split => self.make_plan(),
            Carve::Mounts => None,
        };
        let Some(plan) = fresh.as_ref().or(self.plan.as_ref()) else {
            return Ok(WatchedFiles::default());
        };
        let missing = plan::missing_places(plan, &self.inputs.file_places, |path| {
            std::fs::symlink_metadata(path).is_ok()
        });
        for dir in &missing.create {
            // Empty, so a bind mount keeps it read-only; a directory that
            // cannot be made here cannot be made by the command either.
            if let Err(err) = std::fs::create_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot create a protected directory to keep it read-only");
            }
        }
        let landlock = self.support.landlock_abi > 0;
        let prepared = apply::prepare(plan, landlock, self.support.namespaces)?;
        // SAFETY: `enter` only makes async-signal-safe system calls on
        // memory prepared before the fork (see `apply`).
        unsafe {
            command.pre_exec(move || apply::enter(&prepared));
        }
        Ok(WatchedFiles(missing.watch))
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
        if !plan.read_only_mounts.is_empty() {
            out.push("read-only inside them:".to_owned());
            out.extend(
                plan.read_only_mounts
                    .iter()
                    .map(|p| format!("  {}", p.display())),
            );
        }
        out
    }
}

/// Suffix of the name a protected file created by a command is moved to.
pub(crate) const SET_ASIDE_SUFFIX: &str = ".rejected";

/// Protected files that did not exist when a confined command started and
/// that no mount can keep read-only (see `MissingPlaces`): whatever the
/// command creates there is set aside when it ends
/// ([`WatchedFiles::set_aside_created`]), renamed with
/// `SET_ASIDE_SUFFIX` so no program reads it as configuration and
/// nothing is lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchedFiles(Vec<PathBuf>);

impl WatchedFiles {
    /// Whether nothing is watched.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves each watched file that exists now (a file, a link or a
    /// directory of that name) to its set-aside name, replacing an earlier
    /// one; returns `(path, new path)` of each moved.
    pub fn set_aside_created(&self) -> Vec<(PathBuf, PathBuf)> {
        let mut moved = Vec::new();
        for path in &self.0 {
            if std::fs::symlink_metadata(path).is_err() {
                continue;
            }
            let mut aside = path.clone().into_os_string();
            aside.push(SET_ASIDE_SUFFIX);
            let aside = PathBuf::from(aside);
            if std::fs::symlink_metadata(&aside).is_ok_and(|meta| meta.is_dir()) {
                let _ = std::fs::remove_dir_all(&aside);
            }
            match std::fs::rename(path, &aside) {
                Ok(()) => {
                    tracing::warn!(path = %path.display(), aside = %aside.display(), "a command created a protected file; it was set aside");
                    moved.push((path.clone(), aside));
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "a command created a protected file that cannot be set aside");
                }
            }
        }
        moved
    }
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
    use crate::tools::process::{drive, spawn_shell_confined};
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
        let root = crate::sandbox::resolve_path(base.path()).unwrap();
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
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let mut shell = spawn_shell_confined(command, cwd, &env, sandbox).unwrap();
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
        for support in [
            support,
            KernelSupport {
                namespaces: None,
                ..support
            },
        ] {
            let layout = layout();
            let sandbox = sandbox(&layout, workspace_write(), support);
            let outside = layout.outside.display().to_string();
            let (code, out) = run(
                &sandbox,
                &layout.project,
                &format!(
                    "touch {outside}/a; echo x > {outside}/b; cp /etc/hostname {outside}/c; \
                     echo y >> .troupe/config.toml; rm -f .mcp.json; mv .troupe gone; \
                     touch .troupe/new; mkdir src; echo ok > src/lib.rs; \
                     echo t > \"$TMPDIR/t\"; echo s > {spill}/s; echo done",
                    spill = layout.spill.display()
                ),
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
                let aside = layout.project.join(format!(".mcp.json{SET_ASIDE_SUFFIX}"));
                assert_eq!(
                    set_aside,
                    vec![(layout.project.join(".mcp.json"), aside.clone())]
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
