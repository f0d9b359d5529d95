//! How Troupe runs git itself (the git status of the prompt's environment,
//! and any later use): never as the repository would have it.
//!
//! A repository's configuration can name programs that git runs on its own
//! (`core.fsmonitor`, hooks through `core.hooksPath`, a pager, an external
//! diff, credential helpers, filter drivers), and a command the model ran
//! may have written that configuration. So [`git_command`] starts git with
//! every such setting turned off on its command line (which wins over every
//! configuration file, and reaches the git processes it starts through
//! `GIT_CONFIG_PARAMETERS`), without the system configuration, without
//! optional locks, with no network transport, and confined by the kernel
//! with writes and TCP refused where the kernel offers Landlock: a filter
//! driver, which no setting can switch off by name, runs but can change
//! nothing. The user's own global configuration still applies (it lies
//! outside every writable root). [`git_command_writing`] is the same git
//! allowed to write below named places only (a store of Troupe's own, a
//! work tree it restores).

use std::path::{Path, PathBuf};

/// The `-c` settings Troupe's own git runs with: nothing the repository
/// names runs, nothing widens where git works.
pub const GIT_OVERRIDES: [&str; 8] = [
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "diff.external=",
    "credential.helper=",
    "core.sshCommand=false",
    "protocol.allow=never",
    "core.untrackedCache=false",
];

/// Environment of Troupe's own git: no system configuration, no prompts,
/// no optional locks (a read-only git never writes the index).
pub const GIT_ENV: [(&str, &str); 4] = [
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_ASKPASS", "false"),
];

/// `git ARGS…` in `dir`, as Troupe runs git itself: the overrides, the
/// environment above, stdin from /dev/null, killed when dropped, and
/// confined read-only without network where the kernel allows (a command
/// that cannot be confined runs with the overrides alone, and says so in
/// the log).
pub fn git_command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    git_command_writing(dir, args, &[])
}

/// [`git_command`] for a git that must write: it may write below each of
/// `writable` (a store of Troupe's own, a work tree it restores) and
/// nowhere else, confined as above otherwise.
pub fn git_command_writing(
    dir: &Path,
    args: &[&str],
    writable: &[PathBuf],
) -> tokio::process::Command {
    let mut command = unconfined(dir, args, &[]);
    if let Err(err) = crate::os_sandbox::confine_writing_only(&mut command, writable) {
        tracing::warn!(%err, "git runs unconfined");
    }
    command
}

/// [`git_command_writing`] for a git that fetches from a remote
/// repository over one of `protocols` (`https`, `ssh`, `file`) and no
/// other (`GIT_ALLOW_PROTOCOL` and `protocol.<name>.allow`, so `ext::`,
/// `fd::` and every other transport are refused), with TCP allowed by the
/// kernel confinement when a protocol needs the network. `ssh` runs as the
/// node's `ssh` in batch mode (no prompt, known hosts only).
pub fn git_fetch_command(
    dir: &Path,
    args: &[&str],
    writable: &[PathBuf],
    protocols: &[&str],
) -> tokio::process::Command {
    let mut settings: Vec<String> = protocols
        .iter()
        .map(|protocol| format!("protocol.{protocol}.allow=always"))
        .collect();
    if protocols.contains(&"ssh") {
        settings.push("core.sshCommand=ssh -o BatchMode=yes -o StrictHostKeyChecking=yes".into());
    }
    let mut command = unconfined(dir, args, &settings);
    command
        .env("GIT_ALLOW_PROTOCOL", protocols.join(":"))
        .env_remove("GIT_SSH")
        .env_remove("GIT_SSH_COMMAND")
        .env_remove("GIT_PROXY_COMMAND");
    let networked = protocols.iter().any(|protocol| *protocol != "file");
    let confined = if networked {
        crate::os_sandbox::confine_writing_with_network(&mut command, writable)
    } else {
        crate::os_sandbox::confine_writing_only(&mut command, writable)
    };
    if let Err(err) = confined {
        tracing::warn!(%err, "git runs unconfined");
    }
    command
}

/// `git` with the overrides, then `settings` (later `-c` settings win),
/// then `args`, in `dir`, with [`GIT_ENV`], stdin from /dev/null, killed
/// when dropped; not confined yet.
fn unconfined(dir: &Path, args: &[&str], settings: &[String]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    for setting in GIT_OVERRIDES {
        command.arg("-c").arg(setting);
    }
    for setting in settings {
        command.arg("-c").arg(setting);
    }
    command
        .args(args)
        .current_dir(dir)
        .envs(GIT_ENV)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_writing_git_writes_where_it_is_allowed_and_nowhere_else() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("allowed");
        let other = dir.path().join("other");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let writable = std::slice::from_ref(&allowed);
        let init = |place: &Path| {
            git_command_writing(place, &["init", "--quiet"], writable)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        };
        assert!(init(&allowed).await.unwrap().success());
        assert!(allowed.join(".git/HEAD").is_file());
        if crate::os_sandbox::apply::landlock_abi() == 0 {
            eprintln!("no Landlock here: writes are not confined");
            return;
        }
        assert!(!init(&other).await.unwrap().success());
        assert!(!other.join(".git").exists());
    }

    #[tokio::test]
    async fn a_fetching_git_uses_only_the_protocols_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let target = dir.path().join("clone");
        let writable = [dir.path().to_path_buf()];
        let clone = |url: String, protocols: &'static [&'static str]| {
            let target = target.to_string_lossy().into_owned();
            let mut command = git_fetch_command(
                dir.path(),
                &["clone", "--quiet", "--", &url, &target],
                &writable,
                protocols,
            );
            command
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            async move { command.output().await.unwrap() }
        };
        // A remote helper that would run a command: refused, nothing ran.
        let hostile = format!("ext::sh -c touch% {}", marker.display());
        let refused = clone(hostile, &["file", "https", "ssh"]).await;
        assert!(!refused.status.success());
        assert!(!marker.exists());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("transport 'ext' not allowed"),
            "{refused:?}"
        );
        // A file:// URL where only https is allowed: refused.
        let source = dir.path().join("source");
        std::fs::create_dir_all(&source).unwrap();
        let refused = clone(format!("file://{}", source.display()), &["https"]).await;
        assert!(!refused.status.success());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("transport 'file' not allowed"),
            "{refused:?}"
        );
    }
}
