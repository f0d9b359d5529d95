//! Git's own configuration inside the writable roots: the files and
//! directories through which a repository names programs that git runs
//! (`core.fsmonitor`, `core.hooksPath`, filter and diff drivers in
//! `.git/config`; the scripts in `.git/hooks/`; drivers chosen in
//! `.git/info/attributes`) or through which it sends git to another
//! directory for all of that (`.git/commondir`). A command that could write them would run code
//! outside the sandbox the next time anyone runs git there.
//!
//! [`places`] decides, purely, which places those are for a set of roots,
//! given a way to look at the file system. The sandbox keeps them read-only
//! and pins the `.git` directory itself where it can make mounts, and
//! guards them by content otherwise (see [`super::guard`]). Submodules'
//! git directories (`.git/modules/NAME`, nested) are covered the same way;
//! other repositories nested deeper in a root are not.

use std::path::{Path, PathBuf};

/// Name of git's directory (or gitdir file) in a work tree.
pub(crate) const GIT_DIR_NAME: &str = ".git";

/// Directories of a git directory that hold programs git runs.
const GUARDED_DIRS: [&str; 1] = ["hooks"];

/// Files of a git directory that configure it, choose its drivers or send
/// git elsewhere.
const GUARDED_FILES: [&str; 4] = ["config", "config.worktree", "commondir", "info/attributes"];

/// How deep submodules' git directories are followed, and how many.
const MAX_MODULE_DEPTH: usize = 4;
const MAX_MODULES: usize = 64;

/// What a path is, as far as this module cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A directory (not through a symbolic link).
    Dir,
    /// A regular file.
    File,
    /// Nothing, or something else (a link: the place it names is not ours
    /// to guard through it).
    Other,
}

/// The places of git's configuration in some roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GitPlaces {
    /// `.git` directories to pin (bound onto themselves).
    pub pinned: Vec<PathBuf>,
    /// Directories to keep read-only (created empty when missing).
    pub dirs: Vec<PathBuf>,
    /// Files to keep read-only, existing or not (`.git` files of linked
    /// work trees among them).
    pub files: Vec<PathBuf>,
}

impl GitPlaces {
    /// Every read-only place, directories first.
    pub(crate) fn read_only(&self) -> impl Iterator<Item = &PathBuf> {
        self.dirs.iter().chain(&self.files)
    }
}

/// The git places of `roots`: for each root whose `.git` is a directory,
/// that directory (pinned), its guarded directories and files, and the same
/// for each submodule's git directory below `.git/modules`; for a root whose
/// `.git` is a file (a linked work tree or a submodule's checkout), that
/// file. `kind` looks at one path, `list` gives a directory's entries.
pub(crate) fn places<K, L>(roots: &[PathBuf], kind: K, list: L) -> GitPlaces
where
    K: Fn(&Path) -> Entry,
    L: Fn(&Path) -> Vec<PathBuf>,
{
    let mut out = GitPlaces::default();
    for root in roots {
        let git = root.join(GIT_DIR_NAME);
        match kind(&git) {
            Entry::Dir => {
                out.pinned.push(git.clone());
                let mut modules = 0;
                add_git_dir(&git, 0, &kind, &list, &mut modules, &mut out);
            }
            Entry::File => out.files.push(git),
            Entry::Other => {}
        }
    }
    out
}

/// Adds the guarded places of the git directory `dir`, then those of its
/// submodules' git directories.
fn add_git_dir<K, L>(
    dir: &Path,
    depth: usize,
    kind: &K,
    list: &L,
    modules: &mut usize,
    out: &mut GitPlaces,
) where
    K: Fn(&Path) -> Entry,
    L: Fn(&Path) -> Vec<PathBuf>,
{
    out.dirs
        .extend(GUARDED_DIRS.iter().map(|name| dir.join(name)));
    out.files
        .extend(GUARDED_FILES.iter().map(|name| dir.join(name)));
    if depth >= MAX_MODULE_DEPTH {
        return;
    }
    let modules_dir = dir.join("modules");
    if kind(&modules_dir) != Entry::Dir {
        return;
    }
    let mut pending = list(&modules_dir);
    while let Some(candidate) = pending.pop() {
        if *modules >= MAX_MODULES || kind(&candidate) != Entry::Dir {
            continue;
        }
        if kind(&candidate.join("HEAD")) == Entry::File {
            *modules += 1;
            add_git_dir(&candidate, depth + 1, kind, list, modules, out);
        } else {
            // A submodule named `a/b` lives in `modules/a/b`.
            pending.extend(list(&candidate));
        }
    }
}

/// What `path` is on this file system, not following a final link.
pub(crate) fn look(path: &Path) -> Entry {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Entry::Dir,
        Ok(meta) if meta.is_file() => Entry::File,
        _ => Entry::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    fn lookup(
        dirs: &'static [&'static str],
        files: &'static [&'static str],
    ) -> impl Fn(&Path) -> Entry {
        move |path: &Path| {
            let path = path.to_str().unwrap_or_default();
            if dirs.contains(&path) {
                Entry::Dir
            } else if files.contains(&path) {
                Entry::File
            } else {
                Entry::Other
            }
        }
    }

    fn lister(dirs: &'static [&'static str]) -> impl Fn(&Path) -> Vec<PathBuf> {
        move |dir: &Path| {
            let mut out: Vec<PathBuf> = dirs
                .iter()
                .map(PathBuf::from)
                .filter(|path| path.parent() == Some(dir))
                .collect();
            out.sort();
            out
        }
    }

    #[test]
    fn a_repository_pins_its_git_directory_and_guards_its_configuration() {
        const DIRS: &[&str] = &["/p", "/p/.git", "/p/.git/hooks", "/spill"];
        let places = places(&paths(&["/p", "/spill"]), lookup(DIRS, &[]), lister(DIRS));
        assert_eq!(places.pinned, paths(&["/p/.git"]));
        assert_eq!(places.dirs, paths(&["/p/.git/hooks"]));
        assert_eq!(
            places.files,
            paths(&[
                "/p/.git/config",
                "/p/.git/config.worktree",
                "/p/.git/commondir",
                "/p/.git/info/attributes"
            ])
        );
    }

    #[test]
    fn submodules_are_guarded_and_a_gitdir_file_is_kept_read_only() {
        const DIRS: &[&str] = &[
            "/p/.git",
            "/p/.git/modules",
            "/p/.git/modules/lib",
            "/p/.git/modules/vendor",
            "/p/.git/modules/vendor/deep",
            "/p/.git/modules/lib/modules",
            "/p/.git/modules/lib/modules/inner",
        ];
        const FILES: &[&str] = &[
            "/p/.git/modules/lib/HEAD",
            "/p/.git/modules/vendor/deep/HEAD",
            "/p/.git/modules/lib/modules/inner/HEAD",
            "/w/.git",
        ];
        let places = places(&paths(&["/p", "/w"]), lookup(DIRS, FILES), lister(DIRS));
        assert_eq!(places.pinned, paths(&["/p/.git"]));
        for config in [
            "/p/.git/config",
            "/p/.git/modules/lib/config",
            "/p/.git/modules/vendor/deep/config",
            "/p/.git/modules/lib/modules/inner/config",
            "/w/.git",
        ] {
            assert!(places.files.contains(&PathBuf::from(config)), "{config}");
        }
        assert!(
            places
                .dirs
                .contains(&PathBuf::from("/p/.git/modules/vendor/deep/hooks"))
        );
        assert!(
            !places
                .files
                .contains(&PathBuf::from("/p/.git/modules/vendor/config"))
        );
    }

    #[test]
    fn a_root_without_git_has_nothing_to_guard() {
        let places = places(&paths(&["/p"]), lookup(&["/p"], &[]), lister(&[]));
        assert_eq!(places, GitPlaces::default());
    }
}
