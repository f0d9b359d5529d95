//! What a confined command may touch, decided from the settings and the
//! session's paths alone: [`plan`] is a pure function (the directory listing
//! it may need is passed in), so every rule of the OS sandbox is tested
//! without a kernel.
//!
//! The rules:
//! - reading and executing stay allowed everywhere;
//! - `workspace-write` grants writes below the allowed roots (project root,
//!   spill directory, extra roots) and the session's temporary directory;
//!   `read-only` grants none; both grant the harmless devices
//!   ([`DEVICES`]);
//! - a protected place (Troupe's own files) that lies inside a writable
//!   directory is carved out: read-only bind mounts when the process can
//!   create a mount namespace ([`Carve::Mounts`]); otherwise the writable
//!   directory is split into its entries minus the protected ones
//!   ([`Carve::Split`]), which leaves the directories on the way read-only;
//! - a writable directory that lies inside a protected place (and not inside
//!   an exempt one such as the spill directory) is dropped;
//! - Troupe's private places (the data directory, the user's configuration
//!   directory) are hidden behind an empty read-only file system when mounts
//!   can be made, wherever they lie; the writable directories inside them
//!   (the session's spill directory) and the few read-only ones commands need
//!   (the user's skills) are shown again;
//! - git's own configuration inside a writable root (`.git/config`,
//!   `.git/hooks`, …) is carved out read-only like a protected place, and the
//!   `.git` directory holding it is pinned (bound onto itself, so it cannot
//!   be renamed or replaced), when mounts can be made; a split root leaves
//!   them to the caller, which guards them by content;
//! - `network = false` asks for a network namespace when one can be made,
//!   and for the TCP rules of the kernel's access control either way.

use std::path::{Path, PathBuf};

use troupe_protocol::permission::{SandboxMode, SandboxSettings};

/// Device files commands may write (and use with `ioctl`) in every confined
/// mode: output sinks, random sources and terminals. `/dev/shm` is not among
/// them: shared memory outlives the command and is shared with every process.
pub(crate) const DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// How protected places inside writable directories are kept read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carve {
    /// Read-only bind mounts in a private mount namespace.
    Mounts,
    /// Writable directories are split around the protected places.
    Split,
}

/// The paths the plan is made from, all absolute and resolved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanInputs<'a> {
    /// `[sandbox]` settings.
    pub settings: SandboxSettings,
    /// The allowed roots (project root first, spill directory, extra roots).
    pub roots: &'a [PathBuf],
    /// The session's temporary directory (`TMPDIR` of commands).
    pub temp_dir: &'a Path,
    /// Troupe's protected places.
    pub protected: &'a [PathBuf],
    /// Directories inside protected places that stay writable.
    pub exempt: &'a [PathBuf],
    /// How carving is possible in this process.
    pub carve: Carve,
    /// Troupe's private places, hidden from commands entirely (mounts only).
    pub hidden: &'a [PathBuf],
    /// Directories inside hidden places that commands may still read.
    pub shown_read_only: &'a [PathBuf],
    /// Git's configuration places inside the writable roots, kept read-only
    /// (mounts only).
    pub git_read_only: &'a [PathBuf],
    /// Directories bound onto themselves so they cannot be renamed, removed
    /// or replaced (mounts only).
    pub pinned: &'a [PathBuf],
}

/// A directory inside a hidden place that commands see again, bound from
/// where it really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The directory.
    pub path: PathBuf,
    /// Whether commands may write below it.
    pub writable: bool,
}

/// What the spawn code applies to one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Directories (and files) below which everything may be written.
    pub writable: Vec<PathBuf>,
    /// Device files that may be written.
    pub devices: Vec<PathBuf>,
    /// Protected places made read-only by bind mounts, in mount order.
    pub read_only_mounts: Vec<PathBuf>,
    /// Exempt directories inside those, bound writable again on top.
    pub writable_mounts: Vec<PathBuf>,
    /// Places hidden behind an empty read-only file system.
    pub hidden: Vec<PathBuf>,
    /// Directories inside hidden places shown again.
    pub shown: Vec<Shown>,
    /// Directories bound onto themselves (`.git`).
    pub pinned: Vec<PathBuf>,
    /// Whether commands may use the network.
    pub network: bool,
}

impl Plan {
    /// Whether the plan needs a private mount or network namespace.
    pub fn needs_namespaces(&self) -> bool {
        !self.read_only_mounts.is_empty()
            || !self.hidden.is_empty()
            || !self.pinned.is_empty()
            || !self.network
    }
}

/// The plan for `inputs`; `None` when the mode is `off`. `list` gives the
/// entries of a directory (absolute paths); it is only called for
/// [`Carve::Split`].
pub(crate) fn plan<F>(inputs: &PlanInputs<'_>, list: F) -> Option<Plan>
where
    F: Fn(&Path) -> Vec<PathBuf>,
{
    let candidates: Vec<PathBuf> = match inputs.settings.mode {
        SandboxMode::Off => return None,
        SandboxMode::ReadOnly => Vec::new(),
        SandboxMode::WorkspaceWrite => inputs
            .roots
            .iter()
            .chain(std::iter::once(&inputs.temp_dir.to_path_buf()))
            .cloned()
            .collect(),
    };
    let is_exempt = |path: &Path| inputs.exempt.iter().any(|dir| path.starts_with(dir));
    let is_protected = |path: &Path| {
        !is_exempt(path) && inputs.protected.iter().any(|place| path.starts_with(place))
    };
    let mut writable: Vec<PathBuf> = Vec::new();
    let mut read_only_mounts: Vec<PathBuf> = Vec::new();
    for dir in candidates.iter().cloned() {
        if is_protected(&dir) || writable.iter().any(|w| dir.starts_with(w)) {
            continue;
        }
        // A later root can hold an earlier one: keep the outer one only.
        writable.retain(|w| !w.starts_with(&dir));
        let inside: Vec<&PathBuf> = inputs
            .protected
            .iter()
            .filter(|place| place.starts_with(&dir) && **place != dir && !is_exempt(place))
            .collect();
        match inputs.carve {
            Carve::Mounts => {
                writable.push(dir);
                for place in inside {
                    if !read_only_mounts.contains(place) {
                        read_only_mounts.push(place.clone());
                    }
                }
            }
            Carve::Split => split_around(&dir, &inside, &list, &is_exempt, &mut writable),
        }
    }
    let (hidden, shown, pinned) = match inputs.carve {
        Carve::Mounts => {
            for place in inputs.git_read_only {
                let inside_writable = writable.iter().any(|dir| place.starts_with(dir));
                if inside_writable && !read_only_mounts.contains(place) {
                    read_only_mounts.push(place.clone());
                }
            }
            let pinned: Vec<PathBuf> = inputs
                .pinned
                .iter()
                .filter(|dir| writable.iter().any(|w| dir.starts_with(w)))
                .cloned()
                .collect();
            // What commands write inside a hidden place, also where an
            // outer root holds it, is shown again.
            let written: Vec<PathBuf> = candidates
                .iter()
                .filter(|dir| writable.iter().any(|w| dir.starts_with(w)))
                .cloned()
                .collect();
            let (hidden, shown) = hide(inputs.hidden, inputs.shown_read_only, &written);
            (hidden, shown, pinned)
        }
        Carve::Split => (Vec::new(), Vec::new(), Vec::new()),
    };
    // A hidden place is read-only already and cannot be renamed: no bind
    // mount is needed on it or inside it, but for what is shown again.
    read_only_mounts.retain(|place| !hidden.iter().any(|dir| place.starts_with(dir)));
    read_only_mounts.sort_by_key(|path| path.components().count());
    let writable_mounts = inputs
        .exempt
        .iter()
        .filter(|dir| read_only_mounts.iter().any(|place| dir.starts_with(place)))
        .cloned()
        .collect();
    Some(Plan {
        writable,
        devices: DEVICES.iter().map(PathBuf::from).collect(),
        read_only_mounts,
        writable_mounts,
        hidden,
        shown,
        pinned,
        network: inputs.settings.network,
    })
}

/// The hidden places (outermost only) and what is shown again inside them:
/// every writable directory inside one, writable, and each of `read_only`
/// inside one that no shown directory holds already, read-only.
fn hide(
    places: &[PathBuf],
    read_only: &[PathBuf],
    writable: &[PathBuf],
) -> (Vec<PathBuf>, Vec<Shown>) {
    let mut hidden: Vec<PathBuf> = Vec::new();
    for place in places {
        // A place below another hidden one is hidden already.
        if hidden.iter().any(|outer| place.starts_with(outer)) {
            continue;
        }
        hidden.retain(|inner| !inner.starts_with(place));
        hidden.push(place.clone());
    }
    let inside = |path: &Path| {
        hidden
            .iter()
            .any(|place| path.starts_with(place) && path != place)
    };
    let mut shown: Vec<Shown> = Vec::new();
    for dir in writable.iter().filter(|dir| inside(dir)) {
        if shown.iter().any(|outer| dir.starts_with(&outer.path)) {
            continue;
        }
        shown.retain(|inner| !inner.path.starts_with(dir));
        shown.push(Shown {
            path: dir.clone(),
            writable: true,
        });
    }
    for dir in read_only {
        if inside(dir) && !shown.iter().any(|outer| dir.starts_with(&outer.path)) {
            shown.push(Shown {
                path: dir.clone(),
                writable: false,
            });
        }
    }
    shown.sort_by_key(|shown| shown.path.components().count());
    (hidden, shown)
}

/// What a command's start does about protected places a bind mount should
/// keep read-only but that do not exist yet (a bind mount needs something to
/// bind, and the directory holding the place is writable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MissingPlaces {
    /// Directories created empty first, then bound read-only like the rest.
    pub create: Vec<PathBuf>,
    /// Files that cannot be made up front (other programs read them as
    /// configuration): set aside if the command creates them.
    pub watch: Vec<PathBuf>,
}

/// The [`MissingPlaces`] of `plan`: every read-only mount that does not
/// exist, a directory unless it is one of `file_places`.
pub(crate) fn missing_places<E>(plan: &Plan, file_places: &[PathBuf], exists: E) -> MissingPlaces
where
    E: Fn(&Path) -> bool,
{
    let mut missing = MissingPlaces::default();
    for place in plan.read_only_mounts.iter().filter(|place| !exists(place)) {
        if file_places.contains(place) {
            missing.watch.push(place.clone());
        } else {
            missing.create.push(place.clone());
        }
    }
    missing
}

/// Grants `dir` whole when no protected place lies inside it, else each of
/// its entries (recursively around the places), never the places
/// themselves nor `dir` itself.
fn split_around<F, E>(
    dir: &Path,
    inside: &[&PathBuf],
    list: &F,
    is_exempt: &E,
    writable: &mut Vec<PathBuf>,
) where
    F: Fn(&Path) -> Vec<PathBuf>,
    E: Fn(&Path) -> bool,
{
    if inside.is_empty() {
        writable.push(dir.to_path_buf());
        return;
    }
    for entry in list(dir) {
        if inside.iter().any(|place| **place == entry) && !is_exempt(&entry) {
            continue;
        }
        let deeper: Vec<&PathBuf> = inside
            .iter()
            .copied()
            .filter(|place| place.starts_with(&entry) && **place != entry)
            .collect();
        split_around(&entry, &deeper, list, is_exempt, writable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    fn inputs<'a>(
        mode: SandboxMode,
        roots: &'a [PathBuf],
        protected: &'a [PathBuf],
        exempt: &'a [PathBuf],
        carve: Carve,
    ) -> PlanInputs<'a> {
        PlanInputs {
            settings: SandboxSettings {
                mode,
                network: true,
            },
            roots,
            temp_dir: Path::new("/data/spill/s1/tmp"),
            protected,
            exempt,
            carve,
            hidden: &[],
            shown_read_only: &[],
            git_read_only: &[],
            pinned: &[],
        }
    }

    fn no_listing(_: &Path) -> Vec<PathBuf> {
        Vec::new()
    }

    #[test]
    fn missing_directories_are_created_and_missing_files_watched() {
        let plan = Plan {
            read_only_mounts: paths(&["/p/.troupe", "/p/.mcp.json", "/home/u/.config/troupe"]),
            ..Plan::default()
        };
        let files = paths(&["/p/.mcp.json"]);
        let none_exist = missing_places(&plan, &files, |_| false);
        assert_eq!(
            none_exist.create,
            paths(&["/p/.troupe", "/home/u/.config/troupe"])
        );
        assert_eq!(none_exist.watch, paths(&["/p/.mcp.json"]));
        let all_exist = missing_places(&plan, &files, |_| true);
        assert_eq!(all_exist, MissingPlaces::default());
        // A split plan binds nothing, so nothing is created or watched: the
        // directories holding the places are never granted whole.
        assert_eq!(
            missing_places(&Plan::default(), &files, |_| false),
            MissingPlaces::default()
        );
    }

    #[test]
    fn off_confines_nothing() {
        let roots = paths(&["/p"]);
        let plan = plan(
            &inputs(SandboxMode::Off, &roots, &[], &[], Carve::Mounts),
            no_listing,
        );
        assert_eq!(plan, None);
    }

    #[test]
    fn workspace_write_grants_roots_and_the_temporary_directory_and_carves_protected_places() {
        let roots = paths(&["/p", "/data/spill/s1", "/extra"]);
        let protected = paths(&["/p/.troupe", "/p/.mcp.json", "/cfg/troupe", "/data"]);
        let exempt = paths(&["/data/spill/s1"]);
        let plan = plan(
            &inputs(
                SandboxMode::WorkspaceWrite,
                &roots,
                &protected,
                &exempt,
                Carve::Mounts,
            ),
            no_listing,
        )
        .unwrap();
        // The temporary directory lies in the spill directory: one grant.
        assert_eq!(plan.writable, paths(&["/p", "/data/spill/s1", "/extra"]));
        assert_eq!(
            plan.read_only_mounts,
            paths(&["/p/.troupe", "/p/.mcp.json"])
        );
        assert!(plan.writable_mounts.is_empty());
        assert!(plan.devices.contains(&PathBuf::from("/dev/null")));
        assert!(!plan.devices.contains(&PathBuf::from("/dev/shm")));
        assert!(plan.network);
        assert!(plan.needs_namespaces());
    }

    #[test]
    fn read_only_grants_only_devices() {
        let roots = paths(&["/p", "/data/spill/s1"]);
        let protected = paths(&["/p/.troupe"]);
        let plan = plan(
            &inputs(
                SandboxMode::ReadOnly,
                &roots,
                &protected,
                &[],
                Carve::Mounts,
            ),
            no_listing,
        )
        .unwrap();
        assert!(plan.writable.is_empty());
        assert!(plan.read_only_mounts.is_empty());
        assert_eq!(plan.devices.len(), DEVICES.len());
        assert!(!plan.needs_namespaces());
    }

    #[test]
    fn roots_inside_protected_places_are_dropped_unless_exempt() {
        // `extra_roots = ["~/.config/troupe"]` and a data directory inside
        // the project: the spill directory stays writable, bound again.
        let roots = paths(&["/p", "/cfg/troupe/sub", "/p/.th/spill/s1"]);
        let protected = paths(&["/cfg/troupe", "/p/.th"]);
        let exempt = paths(&["/p/.th/spill/s1"]);
        let mut inputs = inputs(
            SandboxMode::WorkspaceWrite,
            &roots,
            &protected,
            &exempt,
            Carve::Mounts,
        );
        let temp = PathBuf::from("/p/.th/spill/s1/tmp");
        inputs.temp_dir = &temp;
        let plan = plan(&inputs, no_listing).unwrap();
        assert_eq!(plan.writable, paths(&["/p"]));
        assert_eq!(plan.read_only_mounts, paths(&["/p/.th"]));
        assert_eq!(plan.writable_mounts, paths(&["/p/.th/spill/s1"]));
    }

    #[test]
    fn nested_roots_collapse_into_the_outer_one() {
        let roots = paths(&["/p/sub", "/p"]);
        let plan = plan(
            &inputs(SandboxMode::WorkspaceWrite, &roots, &[], &[], Carve::Mounts),
            no_listing,
        )
        .unwrap();
        assert_eq!(plan.writable, paths(&["/p", "/data/spill/s1/tmp"]));
    }

    #[test]
    fn without_mounts_a_root_is_split_around_its_protected_entries() {
        let roots = paths(&["/p", "/data/spill/s1"]);
        let protected = paths(&["/p/.troupe", "/p/.mcp.json", "/p/deep/.troupe", "/data"]);
        let exempt = paths(&["/data/spill/s1"]);
        let listing = |dir: &Path| -> Vec<PathBuf> {
            match dir.to_str() {
                Some("/p") => paths(&["/p/.troupe", "/p/.mcp.json", "/p/src", "/p/deep"]),
                Some("/p/deep") => paths(&["/p/deep/.troupe", "/p/deep/a"]),
                _ => Vec::new(),
            }
        };
        let plan = plan(
            &inputs(
                SandboxMode::WorkspaceWrite,
                &roots,
                &protected,
                &exempt,
                Carve::Split,
            ),
            listing,
        )
        .unwrap();
        assert_eq!(
            plan.writable,
            paths(&["/p/src", "/p/deep/a", "/data/spill/s1"])
        );
        assert!(plan.read_only_mounts.is_empty());
        assert!(!plan.needs_namespaces());
    }

    #[test]
    fn private_places_are_hidden_and_what_commands_need_is_shown_again() {
        let roots = paths(&["/p", "/data/spill/s1"]);
        let protected = paths(&["/p/.troupe", "/cfg/troupe", "/data"]);
        let exempt = paths(&["/data/spill/s1"]);
        let hidden = paths(&["/data", "/cfg/troupe", "/data/spill"]);
        let shown = paths(&["/cfg/troupe/skills", "/elsewhere/skills"]);
        let mut made = inputs(
            SandboxMode::WorkspaceWrite,
            &roots,
            &protected,
            &exempt,
            Carve::Mounts,
        );
        made.hidden = &hidden;
        made.shown_read_only = &shown;
        let made_plan = plan(&made, no_listing).unwrap();
        assert_eq!(made_plan.hidden, paths(&["/data", "/cfg/troupe"]));
        assert_eq!(
            made_plan.shown,
            vec![
                Shown {
                    path: PathBuf::from("/data/spill/s1"),
                    writable: true
                },
                Shown {
                    path: PathBuf::from("/cfg/troupe/skills"),
                    writable: false
                },
            ]
        );
        assert_eq!(made_plan.writable, paths(&["/p", "/data/spill/s1"]));
        assert_eq!(made_plan.read_only_mounts, paths(&["/p/.troupe"]));
        assert!(made_plan.writable_mounts.is_empty());
        assert!(made_plan.needs_namespaces());

        // A data directory inside the project is hidden, not bound
        // read-only, and its spill directory is shown again.
        let roots = paths(&["/p", "/p/.th/spill/s1"]);
        let protected = paths(&["/p/.troupe", "/p/.th"]);
        let exempt = paths(&["/p/.th/spill/s1"]);
        let hidden = paths(&["/p/.th"]);
        let mut made = inputs(
            SandboxMode::WorkspaceWrite,
            &roots,
            &protected,
            &exempt,
            Carve::Mounts,
        );
        let temp = PathBuf::from("/p/.th/spill/s1/tmp");
        made.temp_dir = &temp;
        made.hidden = &hidden;
        let made_plan = plan(&made, no_listing).unwrap();
        assert_eq!(made_plan.hidden, paths(&["/p/.th"]));
        assert_eq!(made_plan.read_only_mounts, paths(&["/p/.troupe"]));
        assert!(made_plan.writable_mounts.is_empty());
        assert_eq!(
            made_plan.shown,
            vec![Shown {
                path: PathBuf::from("/p/.th/spill/s1"),
                writable: true
            }]
        );

        // Without mounts nothing can be hidden.
        let mut split = made;
        split.carve = Carve::Split;
        let split_plan = plan_split(&split);
        assert!(split_plan.hidden.is_empty() && split_plan.shown.is_empty());
    }

    fn plan_split(inputs: &PlanInputs<'_>) -> Plan {
        plan(inputs, |dir: &Path| match dir.to_str() {
            Some("/p") => paths(&["/p/.troupe", "/p/.th", "/p/src", "/p/.git"]),
            _ => Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn git_configuration_is_read_only_and_its_directory_pinned_inside_writable_roots() {
        let roots = paths(&["/p", "/data/spill/s1"]);
        let git = paths(&["/p/.git/config", "/p/.git/hooks", "/other/.git/config"]);
        let pinned = paths(&["/p/.git", "/other/.git"]);
        let mut made = inputs(SandboxMode::WorkspaceWrite, &roots, &[], &[], Carve::Mounts);
        made.git_read_only = &git;
        made.pinned = &pinned;
        let made_plan = plan(&made, no_listing).unwrap();
        assert_eq!(made_plan.pinned, paths(&["/p/.git"]));
        assert_eq!(
            made_plan.read_only_mounts,
            paths(&["/p/.git/config", "/p/.git/hooks"])
        );
        assert!(made_plan.needs_namespaces());

        // A split root is not split around them (git writes new files at
        // the top of `.git`); the caller guards them by content instead.
        made.carve = Carve::Split;
        let split_plan = plan_split(&made);
        assert!(split_plan.pinned.is_empty());
        assert!(split_plan.read_only_mounts.is_empty());
        assert!(split_plan.writable.contains(&PathBuf::from("/p")));

        // Read-only mode writes nothing: nothing to carve.
        let mut read_only = made;
        read_only.settings.mode = SandboxMode::ReadOnly;
        read_only.carve = Carve::Mounts;
        let read_only_plan = plan(&read_only, no_listing).unwrap();
        assert!(read_only_plan.pinned.is_empty() && read_only_plan.read_only_mounts.is_empty());
    }

    #[test]
    fn network_off_needs_a_namespace() {
        let roots = paths(&["/p"]);
        let mut inputs = inputs(SandboxMode::ReadOnly, &roots, &[], &[], Carve::Mounts);
        inputs.settings.network = false;
        let plan = plan(&inputs, no_listing).unwrap();
        assert!(!plan.network);
        assert!(plan.needs_namespaces());
    }
}
