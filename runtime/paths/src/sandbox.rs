//! The path sandbox (SPEC §5): every path a tool touches is resolved — `~`,
//! relative paths, `..`, symlinks (also for files that do not exist yet, through
//! their nearest existing ancestor) — before it is compared with the allowed
//! roots (project root, the session's spill directory, configured extra roots).
//!
//! This module decides containment only, plus one fact about a file to write:
//! [`PathSandbox::resolve_file`] refuses a path that names a directory. What
//! follows from containment (writes outside are denied, reads outside ask) is
//! the permission engine's business; tools call [`PathSandbox::resolve`] (or
//! `resolve_file`) again at the moment of use, so a symlink swapped in between
//! the permission check and the use is caught.
//!
//! A sandbox reads the file system through the [`FileSystemView`] it was
//! built with ([`PathSandbox::new`]: the real one; [`PathSandbox::with_view`]:
//! any, such as a tests' file system in memory).

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::view::{Entry, FileSystemView, RealFileSystem};

/// SPEC §5: symlink chains longer than this are refused (as the kernel's ELOOP).
pub(crate) const MAX_SYMLINK_HOPS: usize = 40;

/// Why a path could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The path is empty.
    #[error("empty path")]
    Empty,
    /// The path contains a NUL byte.
    #[error("path contains a NUL byte")]
    Nul,
    /// Too many symlinks to follow.
    #[error("too many levels of symbolic links resolving {0}")]
    SymlinkLoop(PathBuf),
    /// The path of a file to write names a directory.
    #[error("`{0}` names a directory, not a file")]
    Directory(String),
    /// Reading the file system failed.
    #[error("cannot resolve {path}: {source}")]
    Io {
        /// The path being resolved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// A resolved path and where it lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The absolute path with every symlink of its existing part followed.
    pub path: PathBuf,
    /// The allowed root containing it, if any.
    pub root: Option<PathBuf>,
}

impl ResolvedPath {
    /// True when the path lies inside an allowed root.
    pub fn is_inside(&self) -> bool {
        self.root.is_some()
    }
}

/// The allowed roots of one session, resolved once at construction.
#[derive(Debug, Clone)]
pub struct PathSandbox {
    project_root: PathBuf,
    roots: Vec<PathBuf>,
    home: Option<PathBuf>,
    view: Arc<dyn FileSystemView>,
}

impl PathSandbox {
    /// Builds a sandbox for `project_root` plus `extra_roots` (the spill directory
    /// is passed as one of them). Roots are resolved like any other path, so a
    /// root given through a symlink still matches. `home` expands a leading `~`.
    pub fn new(
        project_root: &Path,
        extra_roots: &[PathBuf],
        home: Option<PathBuf>,
    ) -> Result<Self, SandboxError> {
        let cwd = std::env::current_dir().map_err(|source| SandboxError::Io {
            path: PathBuf::from("."),
            source,
        })?;
        Self::with_view(
            Arc::new(RealFileSystem),
            &cwd.join(project_root),
            extra_roots,
            home,
        )
    }

    /// Like [`Self::new`], reading the file system through `view`;
    /// `project_root` is absolute (a relative one is taken from `/`).
    pub fn with_view(
        view: Arc<dyn FileSystemView>,
        project_root: &Path,
        extra_roots: &[PathBuf],
        home: Option<PathBuf>,
    ) -> Result<Self, SandboxError> {
        let project_root = resolve_with(view.as_ref(), &Path::new("/").join(project_root))?;
        let mut roots = vec![project_root.clone()];
        for extra in extra_roots {
            let resolved = resolve_with(view.as_ref(), &project_root.join(extra))?;
            if !roots.contains(&resolved) {
                roots.push(resolved);
            }
        }
        Ok(Self {
            project_root,
            roots,
            home,
            view,
        })
    }

    /// What the sandbox reads the file system through.
    pub fn view(&self) -> &dyn FileSystemView {
        self.view.as_ref()
    }

    /// Resolves an absolute path as [`resolve_path`] does, through this
    /// sandbox's view.
    pub fn resolve_absolute(&self, absolute: &Path) -> Result<PathBuf, SandboxError> {
        resolve_with(self.view.as_ref(), absolute)
    }

    /// The resolved project root.
    pub fn project_root(&self) -> &Path {
        &self.project_root
    }

    /// The home directory a leading `~` expands to, when known.
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    /// The allowed roots, project root first.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Resolves a path as a tool received it (relative to the project root;
    /// `~` and `~/…` expand to the home directory) and says which root holds it.
    pub fn resolve(&self, raw: &str) -> Result<ResolvedPath, SandboxError> {
        if raw.is_empty() {
            return Err(SandboxError::Empty);
        }
        if raw.contains('\0') {
            return Err(SandboxError::Nul);
        }
        let expanded = match (&self.home, raw.strip_prefix('~')) {
            (Some(home), Some("")) => home.clone(),
            (Some(home), Some(rest)) if rest.starts_with('/') => {
                home.join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(raw),
        };
        let absolute = self.project_root.join(expanded);
        let path = self.resolve_absolute(&absolute)?;
        let root = self
            .roots
            .iter()
            .find(|root| path.starts_with(root))
            .cloned();
        Ok(ResolvedPath { path, root })
    }
}

impl PathSandbox {
    /// Resolves the path of a file to write (`write_file`, `edit_file`) like
    /// [`Self::resolve`], refusing one that names a directory: its text ends in
    /// `/`, `/.` or `/..` (or is `.` or `..`), which resolution would drop, or it
    /// resolves to an existing directory.
    pub fn resolve_file(&self, raw: &str) -> Result<ResolvedPath, SandboxError> {
        if names_directory(raw) {
            return Err(SandboxError::Directory(raw.to_owned()));
        }
        let resolved = self.resolve(raw)?;
        // The resolved path has no symlink left in its existing part.
        if matches!(self.view.entry(&resolved.path), Ok(Entry::Directory)) {
            return Err(SandboxError::Directory(raw.to_owned()));
        }
        Ok(resolved)
    }
}

/// True when the text of a path names a directory whatever exists: it ends
/// in `/`, `/.` or `/..`, or is `.` or `..`.
pub fn names_directory(raw: &str) -> bool {
    raw.ends_with('/') || raw == "." || raw == ".." || raw.ends_with("/.") || raw.ends_with("/..")
}

/// Resolves an absolute path: `.` dropped, `..` applied to the resolved prefix,
/// every existing symlink followed (relative targets against their directory),
/// the non-existing tail appended lexically. Never requires the path to exist.
/// Reads the machine's own file system.
pub fn resolve_path(absolute: &Path) -> Result<PathBuf, SandboxError> {
    resolve_with(&RealFileSystem, absolute)
}

/// [`resolve_path`] through `view`.
pub fn resolve_with(view: &dyn FileSystemView, absolute: &Path) -> Result<PathBuf, SandboxError> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(absolute, &mut pending);
    pending.reverse();
    let mut resolved = PathBuf::from("/");
    let mut hops = 0usize;
    // Once a component does not exist, nothing below it can be a symlink.
    let mut exists = true;
    while let Some(component) = pending.pop() {
        if component == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&component);
        if !exists {
            resolved = candidate;
            continue;
        }
        match view.entry(&candidate) {
            Ok(Entry::Link(target)) => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(SandboxError::SymlinkLoop(absolute.to_path_buf()));
                }
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                let mut target_parts = Vec::new();
                push_components(&target, &mut target_parts);
                for part in target_parts.into_iter().rev() {
                    pending.push(part);
                }
            }
            Ok(_) => resolved = candidate,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                exists = false;
                resolved = candidate;
            }
            Err(err) if err.kind() == io::ErrorKind::NotADirectory => {
                exists = false;
                resolved = candidate;
            }
            Err(source) => {
                return Err(SandboxError::Io {
                    path: candidate,
                    source,
                });
            }
        }
    }
    Ok(resolved)
}

/// Appends the meaningful components of `path` (no root, no `.`) to `out`.
fn push_components(path: &Path, out: &mut Vec<OsString>) {
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part.to_os_string()),
            Component::ParentDir => out.push(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathSandbox, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = resolve_path(dir.path()).unwrap();
        let project = base.join("project");
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let spill = base.join("spill");
        let sandbox = PathSandbox::new(&project, &[spill], Some(base.join("home"))).unwrap();
        (dir, sandbox, base)
    }

    #[test]
    fn relative_and_dot_dot_inside() {
        let (_dir, sandbox, base) = setup();
        let r = sandbox.resolve("src/../src/./main.rs").unwrap();
        assert_eq!(r.path, base.join("project/src/main.rs"));
        assert_eq!(r.root.as_deref(), Some(base.join("project").as_path()));
    }

    #[test]
    fn traversal_escapes_are_outside() {
        let (_dir, sandbox, base) = setup();
        let r = sandbox.resolve("../outside/x").unwrap();
        assert_eq!(r.path, base.join("outside/x"));
        assert!(!r.is_inside());
        let r = sandbox.resolve("src/../../../../../../etc/passwd").unwrap();
        assert_eq!(r.path, PathBuf::from("/etc/passwd"));
        assert!(!r.is_inside());
    }

    #[test]
    fn absolute_paths_are_compared_too() {
        let (_dir, sandbox, base) = setup();
        assert!(!sandbox.resolve("/etc/shadow").unwrap().is_inside());
        let inside = base.join("project/src/lib.rs");
        assert!(
            sandbox
                .resolve(inside.to_str().unwrap())
                .unwrap()
                .is_inside()
        );
    }

    #[test]
    fn sibling_with_common_prefix_is_outside() {
        let (_dir, sandbox, base) = setup();
        std::fs::create_dir_all(base.join("project-evil")).unwrap();
        assert!(!sandbox.resolve("../project-evil/x").unwrap().is_inside());
    }

    #[test]
    fn symlinked_file_and_directory_escapes_are_outside() {
        let (_dir, sandbox, base) = setup();
        std::fs::write(base.join("outside/secret"), "s").unwrap();
        symlink(base.join("outside/secret"), base.join("project/link")).unwrap();
        symlink(base.join("outside"), base.join("project/dirlink")).unwrap();
        let r = sandbox.resolve("link").unwrap();
        assert_eq!(r.path, base.join("outside/secret"));
        assert!(!r.is_inside());
        // A file that does not exist yet under a symlinked directory.
        let r = sandbox.resolve("dirlink/new-file").unwrap();
        assert_eq!(r.path, base.join("outside/new-file"));
        assert!(!r.is_inside());
    }

    #[test]
    fn relative_and_dangling_symlinks() {
        let (_dir, sandbox, base) = setup();
        symlink("../../outside/ghost", base.join("project/src/dangling")).unwrap();
        let r = sandbox.resolve("src/dangling").unwrap();
        assert_eq!(r.path, base.join("outside/ghost"));
        assert!(!r.is_inside());
        symlink("main.rs", base.join("project/src/alias")).unwrap();
        assert!(sandbox.resolve("src/alias").unwrap().is_inside());
    }

    #[test]
    fn symlink_loops_are_errors() {
        let (_dir, sandbox, base) = setup();
        symlink(base.join("project/b"), base.join("project/a")).unwrap();
        symlink(base.join("project/a"), base.join("project/b")).unwrap();
        assert!(matches!(
            sandbox.resolve("a/x"),
            Err(SandboxError::SymlinkLoop(_))
        ));
    }

    #[test]
    fn spill_and_extra_roots_are_inside_and_home_expands() {
        let (_dir, sandbox, base) = setup();
        let r = sandbox
            .resolve(base.join("spill/call_1").to_str().unwrap())
            .unwrap();
        assert_eq!(r.root.as_deref(), Some(base.join("spill").as_path()));
        let r = sandbox.resolve("~/.ssh/id_rsa").unwrap();
        assert_eq!(r.path, base.join("home/.ssh/id_rsa"));
        assert!(!r.is_inside());
        assert!(!sandbox.resolve("~").unwrap().is_inside());
    }

    #[test]
    fn root_given_through_a_symlink_still_matches() {
        let (_dir, _sandbox, base) = setup();
        symlink(base.join("project"), base.join("via")).unwrap();
        let sandbox = PathSandbox::new(&base.join("via"), &[], None).unwrap();
        assert_eq!(sandbox.project_root(), base.join("project"));
        assert!(sandbox.resolve("src/x").unwrap().is_inside());
    }

    #[test]
    fn a_file_path_that_names_a_directory_is_refused() {
        let (_dir, sandbox, base) = setup();
        std::fs::create_dir_all(base.join("home")).unwrap();
        for raw in [
            "newdir/.",
            "newdir/",
            "newdir/sub/..",
            "src",
            "src/",
            ".",
            "..",
            "src/main.rs/.",
            "~",
        ] {
            assert!(
                matches!(sandbox.resolve_file(raw), Err(SandboxError::Directory(ref r)) if r == raw),
                "{raw}"
            );
        }
        std::fs::write(base.join("project/src/main.rs"), "").unwrap();
        symlink(base.join("project/src"), base.join("project/srclink")).unwrap();
        assert!(matches!(
            sandbox.resolve_file("srclink"),
            Err(SandboxError::Directory(_))
        ));
        let r = sandbox.resolve_file("src/main.rs").unwrap();
        assert_eq!(r.path, base.join("project/src/main.rs"));
        assert!(sandbox.resolve_file("src/new.rs").is_ok());
        assert!(sandbox.resolve_file("newdir/file.txt").is_ok());
        assert!(sandbox.resolve_file("src/.hidden").is_ok());
        assert!(names_directory("a/"));
        assert!(!names_directory("a/.b"));
        assert!(!names_directory("a/..b"));
    }

    #[test]
    fn bad_input() {
        let (_dir, sandbox, _base) = setup();
        assert!(matches!(sandbox.resolve(""), Err(SandboxError::Empty)));
        assert!(matches!(sandbox.resolve("a\0b"), Err(SandboxError::Nul)));
    }
}
