//! Running git for the store: `GIT_DIR` is the store, `GIT_WORK_TREE` the
//! project, `GIT_INDEX_FILE` the store's own index, each set from the path
//! itself (any byte a directory name may hold reaches git as it is), and
//! every inherited variable that could point git elsewhere removed. The
//! command is `troupe_process::git_command`'s, allowed to write the store,
//! and the work tree only while restoring.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use troupe_process::git_command::git_command_writing;

use crate::CheckpointError;

/// Inherited variables that would make git use another repository, index,
/// object store or namespace.
const REDIRECTING_ENV: [&str; 9] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
];

/// Settings of the store's own index, after (so over) the overrides of
/// every Troupe git: the untracked cache and a split index make staging a
/// large work tree cheaper; both live in the store's index only. A shared
/// index replaced is deleted at once rather than kept for two weeks.
const STORE_SETTINGS: [&str; 6] = [
    "-c",
    "core.untrackedCache=true",
    "-c",
    "core.splitIndex=true",
    "-c",
    "splitIndex.sharedIndexExpire=now",
];

/// The identity of the store's commits.
const IDENTITY_ENV: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "Troupe"),
    ("GIT_AUTHOR_EMAIL", "checkpoints@troupe.invalid"),
    ("GIT_COMMITTER_NAME", "Troupe"),
    ("GIT_COMMITTER_EMAIL", "checkpoints@troupe.invalid"),
];

/// The most of git's error output an error keeps.
const STDERR_KEPT_BYTES: usize = 600;

/// What a git command of the store may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    /// The store only.
    Store,
    /// The store and the work tree (a restore).
    StoreAndWorkTree,
}

/// Which index a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Index {
    /// The store's own.
    Own,
    /// An empty one (a file that never exists).
    Empty,
}

/// The store's git: where it is and whose work tree it records.
#[derive(Debug, Clone)]
pub(crate) struct StoreGit {
    pub project: PathBuf,
    pub git_dir: PathBuf,
    pub index: PathBuf,
}

impl StoreGit {
    /// Runs `git ARGS` on the store with `stdin`; its standard output.
    pub(crate) async fn run(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
        writes: Writes,
        index: Index,
    ) -> Result<Vec<u8>, CheckpointError> {
        let command = self.command(args, writes, index);
        output(command, args, stdin).await
    }

    /// Runs `git ARGS -- PATHS` on the store, reading its own index and
    /// writing nothing but the store: each path is taken literally (no
    /// wildcard, no magic), as the bytes it is; its standard output.
    pub(crate) async fn run_on_paths(
        &self,
        args: &[&str],
        paths: &[&std::ffi::OsStr],
    ) -> Result<Vec<u8>, CheckpointError> {
        let mut command = self.command(args, Writes::Store, Index::Own);
        for name in [
            "GIT_GLOB_PATHSPECS",
            "GIT_NOGLOB_PATHSPECS",
            "GIT_ICASE_PATHSPECS",
        ] {
            command.env_remove(name);
        }
        command
            .env("GIT_LITERAL_PATHSPECS", "1")
            .arg("--")
            .args(paths);
        output(command, args, None).await
    }

    /// The command `git ARGS` on the store.
    fn command(&self, args: &[&str], writes: Writes, index: Index) -> tokio::process::Command {
        let mut writable = vec![self.git_dir.clone()];
        if writes == Writes::StoreAndWorkTree {
            writable.push(self.project.clone());
        }
        let with_settings: Vec<&str> = STORE_SETTINGS.iter().chain(args).copied().collect();
        let mut command = git_command_writing(&self.project, &with_settings, &writable);
        for name in REDIRECTING_ENV {
            command.env_remove(name);
        }
        let index_file = match index {
            Index::Own => self.index.clone(),
            Index::Empty => self.git_dir.join("troupe-empty-index"),
        };
        command
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.project)
            .env("GIT_INDEX_FILE", index_file)
            .envs(IDENTITY_ENV);
        command
    }

    /// Creates the store: `git init --bare` of the store alone (git refuses
    /// a work tree there).
    pub(crate) async fn init(&self) -> Result<(), CheckpointError> {
        let args = ["init", "--bare", "--quiet"];
        let mut command =
            git_command_writing(&self.project, &args, std::slice::from_ref(&self.git_dir));
        for name in REDIRECTING_ENV {
            command.env_remove(name);
        }
        command.env("GIT_DIR", &self.git_dir);
        output(command, &args, None).await.map(drop)
    }
}

/// The user's own list of untracked entries (`ls-files --others
/// --directory`), read from the repository holding `project` without
/// writing anything; `None` when `project` is not in a git repository git
/// can read.
pub(crate) async fn user_untracked(project: &Path) -> Option<Vec<u8>> {
    let args = [
        "ls-files",
        "-z",
        "--others",
        "--directory",
        "--exclude-standard",
    ];
    user_listing(project, &args).await
}

/// `git ARGS` on the repository holding `project`, read-only.
async fn user_listing(project: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let mut command = troupe_process::git_command::git_command(project, args);
    for name in REDIRECTING_ENV {
        command.env_remove(name);
    }
    match output(command, args, None).await {
        Ok(listing) => Some(listing),
        Err(err) => {
            tracing::debug!(%err, "the project is not read as a git repository");
            None
        }
    }
}

/// The user's own list of tracked files (`ls-files -z`), read from the
/// repository holding `project` without writing anything; `None` when
/// `project` is not in a git repository git can read.
pub(crate) async fn user_tracked(project: &Path) -> Option<Vec<u8>> {
    user_listing(project, &["ls-files", "-z"]).await
}

/// Runs `command` (whose arguments were `args`), feeding it `stdin`.
async fn output(
    mut command: tokio::process::Command,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Vec<u8>, CheckpointError> {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(CheckpointError::Spawn)?;
    let feed = child.stdin.take();
    let write = async move {
        if let (Some(mut pipe), Some(bytes)) = (feed, stdin) {
            // A git that stops reading early fails on its own; its status
            // says why, so a broken pipe here adds nothing.
            let _ = pipe.write_all(bytes).await;
        }
    };
    let (_, finished) = tokio::join!(write, child.wait_with_output());
    let finished = finished.map_err(CheckpointError::Spawn)?;
    if finished.status.success() {
        return Ok(finished.stdout);
    }
    let stderr = String::from_utf8_lossy(&finished.stderr);
    let start = stderr
        .char_indices()
        .rev()
        .nth(STDERR_KEPT_BYTES)
        .map_or(0, |(at, _)| at);
    Err(CheckpointError::Git {
        command: subcommand(args),
        status: finished.status.to_string(),
        stderr: stderr[start..].trim().to_owned(),
    })
}

/// The subcommand of `args` (the first argument not an option).
fn subcommand(args: &[&str]) -> String {
    args.iter()
        .find(|arg| !arg.starts_with('-'))
        .copied()
        .unwrap_or("git")
        .to_owned()
}

/// `bytes` as one line of text (git's answer to `write-tree`,
/// `commit-tree`, `rev-parse`).
pub(crate) fn one_line(command: &str, bytes: &[u8]) -> Result<String, CheckpointError> {
    let text = std::str::from_utf8(bytes)
        .map(str::trim)
        .unwrap_or_default();
    if text.is_empty() || text.contains('\n') || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CheckpointError::Output {
            command: command.to_owned(),
            detail: format!(
                "expected an object id, got {:?}",
                String::from_utf8_lossy(bytes)
            ),
        });
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ids_are_read_strictly() {
        assert_eq!(one_line("x", b"abc123\n").unwrap(), "abc123");
        for bad in [&b""[..], b"abc\ndef\n", b"not hex", b"\xff"] {
            assert!(one_line("x", bad).is_err());
        }
    }

    #[test]
    fn the_subcommand_is_the_first_word_not_an_option() {
        assert_eq!(subcommand(&["-z", "ls-files", "-o"]), "ls-files");
        assert_eq!(subcommand(&[]), "git");
    }
}
