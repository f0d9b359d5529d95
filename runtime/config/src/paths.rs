//! File locations (SPEC §1.2): the data directory, the user configuration
//! directory, the project configuration file and project-root discovery.
//!
//! Every decision here is a pure function of an [`Env`] lookup so it can be
//! tested without touching the process environment; [`ProcessEnv`] is the thin
//! adapter that reads the real one. Project-root discovery looks at the file
//! system (it only checks whether entries exist). This module reads no file
//! contents and never writes anything.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use troupe_paths::PROJECT_DIR_NAME;

/// SPEC §1.2: variable naming the data directory outright.
pub(crate) const TROUPE_HOME_VAR: &str = "TROUPE_HOME";
/// XDG base-directory variable for state (data directory parent).
pub(crate) const XDG_STATE_HOME_VAR: &str = "XDG_STATE_HOME";
/// XDG base-directory variable for configuration.
pub(crate) const XDG_CONFIG_HOME_VAR: &str = "XDG_CONFIG_HOME";
/// The user's home directory.
pub(crate) const HOME_VAR: &str = "HOME";
/// Directory name used under the XDG base directories.
pub(crate) const APP_DIR_NAME: &str = "troupe";
/// Name of a configuration file, user and project alike (SPEC §1.2).
pub const CONFIG_FILE_NAME: &str = "config.toml";
/// Marker of a repository root used by project-root discovery.
const GIT_MARKER: &str = ".git";
/// `$HOME`-relative default of `XDG_STATE_HOME` (XDG base-directory spec).
const DEFAULT_STATE_SUBDIR: &str = ".local/state";
/// `$HOME`-relative default of `XDG_CONFIG_HOME` (XDG base-directory spec).
const DEFAULT_CONFIG_SUBDIR: &str = ".config";

/// A read-only view of environment variables.
///
/// Implemented for closures `Fn(&str) -> Option<String>`, for string maps (handy
/// in tests) and for [`ProcessEnv`].
pub trait Env {
    /// The value of `name`, or `None` when it is not set.
    fn var(&self, name: &str) -> Option<String>;

    /// The value of `name` when it is set and not empty. An empty value counts
    /// as unset everywhere in configuration.
    fn non_empty(&self, name: &str) -> Option<String> {
        self.var(name).filter(|value| !value.is_empty())
    }
}

impl<F> Env for F
where
    F: Fn(&str) -> Option<String>,
{
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

impl Env for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// The real process environment. Values that are not valid Unicode count as
/// unset. Provider keys removed from the environment at start-up are still
/// found here (see `troupe_process::secrets`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name)
            .ok()
            .or_else(|| troupe_process::secrets::withheld(name))
    }
}

/// A location could not be determined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Neither the specific variables nor `HOME` are set.
    #[error("cannot determine the {what}: {hint}")]
    NoHome {
        /// What was being located.
        what: &'static str,
        /// Which variables to set.
        hint: &'static str,
    },
}

/// The home directory (`HOME`), when set and not empty.
pub fn home_dir(env: &impl Env) -> Option<PathBuf> {
    env.non_empty(HOME_VAR).map(PathBuf::from)
}

/// An XDG base directory from `var`, honoured only when absolute (the XDG
/// base-directory spec says relative values are invalid and must be ignored).
fn xdg_base(env: &impl Env, var: &str) -> Option<PathBuf> {
    env.non_empty(var)
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
}

/// SPEC §1.2: the data directory: `TROUPE_HOME`, else `$XDG_STATE_HOME/troupe`,
/// else `~/.local/state/troupe`.
pub(crate) fn data_dir(env: &impl Env) -> Result<PathBuf, PathError> {
    if let Some(dir) = env.non_empty(TROUPE_HOME_VAR) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(base) = xdg_base(env, XDG_STATE_HOME_VAR) {
        return Ok(base.join(APP_DIR_NAME));
    }
    home_dir(env)
        .map(|home| home.join(DEFAULT_STATE_SUBDIR).join(APP_DIR_NAME))
        .ok_or(PathError::NoHome {
            what: "data directory",
            hint: "set TROUPE_HOME, XDG_STATE_HOME or HOME",
        })
}

/// The data directory made absolute, remembering a relative `TROUPE_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedDataDir {
    /// The absolute data directory.
    pub path: PathBuf,
    /// The value of `TROUPE_HOME` when it was relative (and so was resolved
    /// against the current directory).
    pub relative_home: Option<String>,
}

impl ResolvedDataDir {
    /// A one-line notice naming the absolute directory a relative
    /// `TROUPE_HOME` was resolved to, or `None` when it was not relative.
    pub fn notice(&self) -> Option<String> {
        self.relative_home.as_ref().map(|value| {
            format!(
                "{TROUPE_HOME_VAR}={value} is relative; using {}",
                self.path.display()
            )
        })
    }
}

/// [`data_dir`] made absolute: a relative `TROUPE_HOME` is joined to `cwd`
/// once, so every later use (the store, spill files, the sandbox roots) names
/// the same directory whatever working directory a run is given.
pub(crate) fn resolve_data_dir(env: &impl Env, cwd: &Path) -> Result<ResolvedDataDir, PathError> {
    let dir = data_dir(env)?;
    if dir.is_absolute() {
        return Ok(ResolvedDataDir {
            path: dir,
            relative_home: None,
        });
    }
    // Only TROUPE_HOME can be relative: the XDG value is ignored unless
    // absolute, and HOME-based defaults follow HOME.
    let relative_home = env.non_empty(TROUPE_HOME_VAR);
    Ok(ResolvedDataDir {
        path: cwd.join(dir),
        relative_home,
    })
}

/// SPEC §1.2: the user configuration directory: `$XDG_CONFIG_HOME/troupe`,
/// else `~/.config/troupe`.
pub fn config_dir(env: &impl Env) -> Result<PathBuf, PathError> {
    if let Some(base) = xdg_base(env, XDG_CONFIG_HOME_VAR) {
        return Ok(base.join(APP_DIR_NAME));
    }
    home_dir(env)
        .map(|home| home.join(DEFAULT_CONFIG_SUBDIR).join(APP_DIR_NAME))
        .ok_or(PathError::NoHome {
            what: "configuration directory",
            hint: "set XDG_CONFIG_HOME or HOME",
        })
}

/// SPEC §1.2: the user configuration file, `<config dir>/config.toml`.
pub fn user_config_file(env: &impl Env) -> Result<PathBuf, PathError> {
    config_dir(env).map(|dir| dir.join(CONFIG_FILE_NAME))
}

/// SPEC §1.2: the project configuration file, `<root>/.troupe/config.toml`.
pub fn project_config_file(root: &Path) -> PathBuf {
    root.join(PROJECT_DIR_NAME).join(CONFIG_FILE_NAME)
}

/// The project root for a working directory: the nearest ancestor of `cwd`
/// (itself included) that contains a `.troupe/` directory or a `.git` entry
/// (a directory, or a file in linked worktrees and submodules); `cwd` itself
/// when there is none.
pub fn find_project_root(cwd: &Path) -> PathBuf {
    project_root_where(cwd, has_project_marker)
}

/// Whether `dir` holds a `.troupe/` directory or a `.git` entry.
pub(crate) fn has_project_marker(dir: &Path) -> bool {
    dir.join(PROJECT_DIR_NAME).is_dir() || dir.join(GIT_MARKER).exists()
}

/// The nearest ancestor of `cwd` (itself included) for which `is_root` holds,
/// else `cwd`.
pub(crate) fn project_root_where(cwd: &Path, is_root: impl Fn(&Path) -> bool) -> PathBuf {
    cwd.ancestors()
        .find(|dir| is_root(dir))
        .unwrap_or(cwd)
        .to_path_buf()
}

/// `resolve_data_dir` of the real environment and current directory. A
/// current directory that cannot be read leaves a relative value as it is.
pub fn process_data_dir() -> Result<ResolvedDataDir, PathError> {
    let cwd = std::env::current_dir().unwrap_or_default();
    resolve_data_dir(&ProcessEnv, &cwd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn data_dir_prefers_troupe_home() {
        let e = env(&[
            ("TROUPE_HOME", "/srv/troupe"),
            ("XDG_STATE_HOME", "/x/state"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(data_dir(&e), Ok(PathBuf::from("/srv/troupe")));
    }

    #[test]
    fn a_relative_troupe_home_is_resolved_against_cwd_with_a_notice() {
        let e = env(&[("TROUPE_HOME", "data/th"), ("HOME", "/home/u")]);
        let resolved = resolve_data_dir(&e, Path::new("/work/proj")).unwrap();
        assert_eq!(resolved.path, PathBuf::from("/work/proj/data/th"));
        assert_eq!(resolved.relative_home.as_deref(), Some("data/th"));
        let notice = resolved.notice().unwrap();
        assert!(notice.contains("TROUPE_HOME=data/th"), "{notice}");
        assert!(notice.contains("/work/proj/data/th"), "{notice}");
    }

    #[test]
    fn an_absolute_data_dir_has_no_notice() {
        for e in [
            env(&[("TROUPE_HOME", "/srv/troupe")]),
            env(&[("XDG_STATE_HOME", "/x/state")]),
            env(&[("HOME", "/home/u")]),
        ] {
            let resolved = resolve_data_dir(&e, Path::new("/work/proj")).unwrap();
            assert!(
                resolved.path.starts_with("/srv")
                    || resolved.path.starts_with("/x")
                    || resolved.path.starts_with("/home")
            );
            assert_eq!(resolved.notice(), None);
        }
    }

    #[test]
    fn data_dir_uses_xdg_state_home_then_home() {
        let e = env(&[("XDG_STATE_HOME", "/x/state"), ("HOME", "/home/u")]);
        assert_eq!(data_dir(&e), Ok(PathBuf::from("/x/state/troupe")));
        let e = env(&[("HOME", "/home/u")]);
        assert_eq!(
            data_dir(&e),
            Ok(PathBuf::from("/home/u/.local/state/troupe"))
        );
    }

    #[test]
    fn empty_and_relative_xdg_values_are_ignored() {
        let e = env(&[
            ("TROUPE_HOME", ""),
            ("XDG_STATE_HOME", "relative/state"),
            ("XDG_CONFIG_HOME", ""),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(
            data_dir(&e),
            Ok(PathBuf::from("/home/u/.local/state/troupe"))
        );
        assert_eq!(config_dir(&e), Ok(PathBuf::from("/home/u/.config/troupe")));
    }

    #[test]
    fn config_dir_respects_xdg_config_home() {
        let e = env(&[("XDG_CONFIG_HOME", "/x/cfg"), ("HOME", "/home/u")]);
        assert_eq!(config_dir(&e), Ok(PathBuf::from("/x/cfg/troupe")));
        assert_eq!(
            user_config_file(&e),
            Ok(PathBuf::from("/x/cfg/troupe/config.toml"))
        );
    }

    #[test]
    fn no_home_is_an_error_naming_the_variables() {
        let e = env(&[]);
        let err = data_dir(&e).unwrap_err().to_string();
        assert!(err.contains("TROUPE_HOME"), "{err}");
        let err = config_dir(&e).unwrap_err().to_string();
        assert!(err.contains("XDG_CONFIG_HOME"), "{err}");
    }

    #[test]
    fn closures_are_environments() {
        let e = |name: &str| (name == "HOME").then(|| "/h".to_owned());
        assert_eq!(config_dir(&e), Ok(PathBuf::from("/h/.config/troupe")));
    }

    #[test]
    fn project_config_file_is_under_dot_troupe() {
        assert_eq!(
            project_config_file(Path::new("/repo")),
            PathBuf::from("/repo/.troupe/config.toml")
        );
    }

    #[test]
    fn project_root_is_nearest_marked_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let outer = tmp.path().join("outer");
        let inner = outer.join("inner");
        let deep = inner.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(outer.join(".git")).unwrap();
        assert_eq!(find_project_root(&deep), outer);

        std::fs::create_dir_all(inner.join(".troupe")).unwrap();
        assert_eq!(find_project_root(&deep), inner);
    }

    #[test]
    fn git_file_marks_a_root_but_troupe_file_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        let sub = wt.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(".troupe"), "not a directory").unwrap();
        std::fs::write(wt.join(".git"), "gitdir: elsewhere").unwrap();
        assert_eq!(find_project_root(&sub), wt);
    }

    #[test]
    fn unmarked_cwd_is_its_own_root() {
        let cwd = Path::new("/a/b/c");
        assert_eq!(project_root_where(cwd, |_| false), PathBuf::from("/a/b/c"));
        assert_eq!(
            project_root_where(cwd, |d| d == Path::new("/a")),
            PathBuf::from("/a")
        );
        assert_eq!(project_root_where(cwd, |_| true), PathBuf::from("/a/b/c"));
    }
}
