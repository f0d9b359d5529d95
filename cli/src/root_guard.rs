//! Safe defaults for where a run starts. Commands may write anywhere under
//! the project root (the OS sandbox's writable directory), so a project root
//! of `/` or of the home directory itself would let them write everywhere
//! this user can, or every file of the home directory (shell start-up files,
//! `~/.ssh`, other projects). `troupe run`, `troupe resume` and `troupe chat`
//! refuse to start there unless `--cwd` names that very directory and the
//! person confirms it: on a terminal by answering a yes/no question, or with
//! `--confirm-cwd`. A project that is not a git repository gets a one-line
//! warning (what commands change there cannot be reviewed or undone with
//! git). [`decide`] is the pure rule; [`check_project_dir`] applies it to
//! the command line and the terminal. `troupe sandbox status` words the same
//! facts with [`status_lines`].

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use troupe_config::paths;

use crate::project::{Locations, SetupError};

/// The command-line flag that confirms a broad project root without a
/// question.
pub(crate) const CONFIRM_FLAG: &str = "--confirm-cwd";

/// A project root under which commands could write far more than a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BroadRoot {
    /// `/`: every file this user may write.
    FileSystem,
    /// The home directory itself.
    Home,
}

impl BroadRoot {
    /// What commands could write under it, for messages.
    fn reach(self) -> &'static str {
        match self {
            Self::FileSystem => "every file this user may write",
            Self::Home => {
                "every file of your home directory (shell start-up files, ~/.ssh, other projects)"
            }
        }
    }

    /// What the directory is, for messages.
    fn name(self) -> &'static str {
        match self {
            Self::FileSystem => "the file system's root",
            Self::Home => "your home directory",
        }
    }
}

/// Which broad root `root` is, if any: `/`, or the home directory `home`
/// (compared canonical when both exist).
pub(crate) fn broad_root(root: &Path, home: Option<&Path>) -> Option<BroadRoot> {
    let root = canonical(root);
    if root.parent().is_none() {
        return Some(BroadRoot::FileSystem);
    }
    home.map(canonical)
        .filter(|home| *home == root)
        .map(|_| BroadRoot::Home)
}

/// What to do before a run starts in a project root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootDecision {
    /// Start.
    Proceed,
    /// Ask the person on the terminal; start only on a yes.
    Ask,
    /// Refuse (exit code 2).
    Refuse,
}

/// The rule: a broad project root starts only when `--cwd` named that very
/// directory (`named_by_cwd`) and the person confirmed it, with the flag
/// (`confirmed`) or, when a terminal can ask (`can_ask`), by answering yes.
pub(crate) fn decide(
    broad: Option<BroadRoot>,
    named_by_cwd: bool,
    confirmed: bool,
    can_ask: bool,
) -> RootDecision {
    match (broad, named_by_cwd, confirmed, can_ask) {
        (None, ..) => RootDecision::Proceed,
        (Some(_), false, ..) => RootDecision::Refuse,
        (Some(_), true, true, _) => RootDecision::Proceed,
        (Some(_), true, false, true) => RootDecision::Ask,
        (Some(_), true, false, false) => RootDecision::Refuse,
    }
}

/// Why a run does not start in `root`, and what to do instead.
pub(crate) fn refusal(root: &Path, broad: BroadRoot, named_by_cwd: bool) -> String {
    let root = root.display();
    let how = if named_by_cwd {
        format!("confirm it with {CONFIRM_FLAG} (on a terminal, answer the question)")
    } else {
        format!("name it explicitly: --cwd {root} {CONFIRM_FLAG}")
    };
    format!(
        "refusing to start with the project root {root} ({}): commands may write anywhere \
         under the project root, here {}. Start in a project directory instead (cd into it, \
         or --cwd DIR; a project root is the nearest directory holding .git or .troupe), or, \
         to work on {root} itself, {how}",
        broad.name(),
        broad.reach()
    )
}

/// The yes/no question asked on a terminal.
pub(crate) fn question(root: &Path, broad: BroadRoot) -> String {
    format!(
        "The project root is {} ({}): commands may write {}. Start anyway? [y/N] ",
        root.display(),
        broad.name(),
        broad.reach()
    )
}

/// Whether `answer` is a yes.
pub(crate) fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Whether `dir` or a directory above it holds `.git` (a directory, or the
/// file of a worktree or submodule).
pub(crate) fn in_git_repository(dir: &Path) -> bool {
    dir.ancestors().any(|dir| dir.join(".git").exists())
}

/// The one-line warning for a project that is not a git repository.
pub(crate) fn not_git_warning(root: &Path) -> String {
    format!(
        "warning: {} is not a git repository: what commands change there cannot be reviewed or \
         undone with git",
        root.display()
    )
}

/// What `troupe sandbox status` says about the project root `root`: it,
/// whether it is a git repository, and how far writes would reach when it is
/// `/` or the home directory.
pub(crate) fn status_lines(root: &Path, home: Option<&Path>) -> Vec<String> {
    let git = if in_git_repository(root) {
        "a git repository"
    } else {
        "not a git repository: what commands change cannot be reviewed or undone with git"
    };
    let mut lines = vec![format!("project root: {} ({git})", root.display())];
    if let Some(broad) = broad_root(root, home) {
        lines.push(format!(
            "warning: the project root is {}: commands may write {}; troupe run and troupe \
             chat start here only with --cwd {} and a confirmation",
            broad.name(),
            broad.reach(),
            root.display()
        ));
    }
    lines
}

/// Checks the directory a run or chat would start in (`--cwd` as given, or
/// the current directory): refuses a broad project root unless `--cwd` named
/// it and the person confirmed (`confirmed`, or a yes on the terminal), and
/// returns the warnings to show (the project is not a git repository).
pub(crate) async fn check_project_dir(
    locations: &Locations,
    cwd: Option<&Path>,
    confirmed: bool,
) -> Result<Vec<String>, SetupError> {
    let dir = crate::project::working_directory(locations, cwd)?;
    let root = paths::find_project_root(&dir);
    let broad = broad_root(&root, locations.home.as_deref());
    let named_by_cwd = cwd.is_some() && canonical(&dir) == canonical(&root);
    let can_ask = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    match (decide(broad, named_by_cwd, confirmed, can_ask), broad) {
        (RootDecision::Proceed, _) | (_, None) => {}
        (RootDecision::Refuse, Some(broad)) => {
            return Err(SetupError::usage(refusal(&root, broad, named_by_cwd)));
        }
        (RootDecision::Ask, Some(broad)) => {
            let question = question(&root, broad);
            let answer = tokio::task::spawn_blocking(move || ask(&question))
                .await
                .ok()
                .flatten();
            if !answer.as_deref().is_some_and(is_yes) {
                return Err(SetupError::usage(format!(
                    "not started in {}: the project root was not confirmed",
                    root.display()
                )));
            }
        }
    }
    Ok(if in_git_repository(&root) {
        Vec::new()
    } else {
        vec![not_git_warning(&root)]
    })
}

/// Asks `question` on stderr and reads one line of stdin; `None` when
/// nothing could be read.
pub(crate) fn ask(question: &str) -> Option<String> {
    let mut stderr = std::io::stderr();
    stderr.write_all(question.as_bytes()).ok()?;
    stderr.flush().ok()?;
    let mut answer = String::new();
    match std::io::stdin().lock().read_line(&mut answer) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(answer),
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_and_the_home_directory_are_broad_roots() {
        let home = tempfile::tempdir().unwrap();
        let project = home.path().join("src/app");
        std::fs::create_dir_all(&project).unwrap();
        assert_eq!(
            broad_root(Path::new("/"), Some(home.path())),
            Some(BroadRoot::FileSystem)
        );
        assert_eq!(
            broad_root(home.path(), Some(home.path())),
            Some(BroadRoot::Home)
        );
        // The same directory named another way.
        assert_eq!(
            broad_root(&home.path().join("src/.."), Some(home.path())),
            Some(BroadRoot::Home)
        );
        assert_eq!(broad_root(&project, Some(home.path())), None);
        assert_eq!(broad_root(home.path(), None), None);
    }

    #[test]
    fn a_broad_root_starts_only_when_named_and_confirmed() {
        use RootDecision::*;
        let broad = Some(BroadRoot::Home);
        assert_eq!(decide(None, false, false, false), Proceed);
        assert_eq!(decide(None, true, false, true), Proceed);
        // Not named by --cwd: refused whatever else is said.
        assert_eq!(decide(broad, false, true, true), Refuse);
        assert_eq!(decide(broad, false, false, true), Refuse);
        // Named: the flag confirms, a terminal asks, nothing else refuses.
        assert_eq!(decide(broad, true, true, false), Proceed);
        assert_eq!(decide(broad, true, false, true), Ask);
        assert_eq!(decide(broad, true, false, false), Refuse);
        assert_eq!(
            decide(Some(BroadRoot::FileSystem), true, false, false),
            Refuse
        );
    }

    #[test]
    fn the_refusal_names_the_directory_and_what_to_do() {
        let message = refusal(Path::new("/home/me"), BroadRoot::Home, false);
        assert!(
            message.starts_with("refusing to start with the project root /home/me (your home"),
            "{message}"
        );
        assert!(
            message.ends_with("name it explicitly: --cwd /home/me --confirm-cwd"),
            "{message}"
        );
        let message = refusal(Path::new("/"), BroadRoot::FileSystem, true);
        assert!(
            message.contains("every file this user may write"),
            "{message}"
        );
        assert!(
            message.ends_with("confirm it with --confirm-cwd (on a terminal, answer the question)")
        );
    }

    #[test]
    fn yes_is_y_or_yes_in_any_case() {
        for answer in ["y\n", "Y", " yes ", "YES\n"] {
            assert!(is_yes(answer), "{answer:?}");
        }
        for answer in ["", "\n", "n", "no", "yess", "sure"] {
            assert!(!is_yes(answer), "{answer:?}");
        }
    }

    #[test]
    fn a_git_repository_is_found_from_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        assert!(!in_git_repository(&inner));
        // A worktree's `.git` is a file.
        std::fs::write(dir.path().join("a/.git"), "gitdir: elsewhere\n").unwrap();
        assert!(in_git_repository(&inner));
        assert!(!in_git_repository(dir.path()));
    }

    #[test]
    fn the_status_says_how_far_writes_reach() {
        let home = tempfile::tempdir().unwrap();
        let lines = status_lines(home.path(), Some(home.path()));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].ends_with(
            "(not a git repository: what commands change cannot be reviewed or undone with git)"
        ));
        assert!(
            lines[1].contains("every file of your home directory"),
            "{lines:?}"
        );
        let root = status_lines(Path::new("/"), Some(home.path()));
        assert!(
            root[1].contains("every file this user may write"),
            "{root:?}"
        );
        std::fs::create_dir(home.path().join("p")).unwrap();
        std::fs::create_dir(home.path().join("p/.git")).unwrap();
        let lines = status_lines(&home.path().join("p"), Some(home.path()));
        assert_eq!(
            lines,
            vec![format!(
                "project root: {} (a git repository)",
                home.path().join("p").display()
            )]
        );
    }
}
