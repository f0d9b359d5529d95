//! Reading what the system prompt tells the model about its world: the
//! instruction files (`AGENTS.md`, `TROUPE.md` of the user config directory
//! and the project root), `git status` within a time budget, the platform and
//! today's date. `troupe_agent::prompt` assembles them without I/O.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use troupe_agent::prompt::{
    EnvironmentFacts, GIT_STATUS_MAX_LINES, GitStatus, INSTRUCTION_FILES, InstructionFile,
    system_prompt,
};
use troupe_protocol::model::SystemPrompt;
use troupe_tools::skills::INSTRUCTION_FILE_MAX_BYTES;

/// How long the first request may wait for `git status` before the
/// environment goes without it (SPEC §14: first request within 30 ms; git
/// status of a very large repository alone takes longer).
pub const GIT_STATUS_BUDGET: Duration = Duration::from_millis(15);
/// Reads the instruction files: the user's (`config_dir`) first, then the
/// project's. Unreadable files are skipped with a warning.
pub fn load_instructions(config_dir: Option<&Path>, project_root: &Path) -> Vec<InstructionFile> {
    let mut files = Vec::new();
    let dirs = config_dir.into_iter().chain(std::iter::once(project_root));
    for dir in dirs {
        for name in INSTRUCTION_FILES {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let mut content = String::from_utf8_lossy(&bytes).into_owned();
                    if content.len() > INSTRUCTION_FILE_MAX_BYTES {
                        let mut cut = INSTRUCTION_FILE_MAX_BYTES;
                        while !content.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        content.truncate(cut);
                        content.push_str("\n[instructions cut: file too long]");
                    }
                    files.push(InstructionFile { path, content });
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "cannot read instruction file")
                }
            }
        }
    }
    files
}

/// `git status --short --branch` in `dir`, cut to `GIT_STATUS_MAX_LINES`,
/// waiting at most `budget` (the git process is killed after it). A
/// directory with no `.git` in it or above it is not a repository, told
/// without starting git (see [`may_be_in_work_tree`]).
pub async fn read_git_status(dir: &Path, budget: Duration) -> GitStatus {
    if !may_be_in_work_tree(dir, |var| std::env::var_os(var).is_some()) {
        return GitStatus::NotRepository;
    }
    // Without the parallel index preload, git stays on one core and the
    // budget holds even in very large repositories.
    let child = troupe_process::git_command::git_command(
        dir,
        &[
            "-c",
            "core.preloadIndex=false",
            "status",
            "--short",
            "--branch",
        ],
    )
    .stderr(Stdio::null())
    .output();
    let output = match tokio::time::timeout(budget, child).await {
        Err(_) => return GitStatus::TooSlow,
        Ok(Err(_)) => return GitStatus::NotRepository,
        Ok(Ok(output)) => output,
    };
    if !output.status.success() {
        return GitStatus::NotRepository;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = lines
        .iter()
        .take(GIT_STATUS_MAX_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > GIT_STATUS_MAX_LINES {
        kept.push_str(&format!(
            "\n… and {} more changed paths",
            lines.len() - GIT_STATUS_MAX_LINES
        ));
    }
    GitStatus::Status(kept)
}

/// False when git cannot find a work tree from `dir`: no `.git` (a
/// directory, or the file of a linked work tree or submodule) in `dir` or
/// any directory above it, and neither `GIT_DIR` nor `GIT_WORK_TREE` set
/// (`is_set` says which variables are). True means git may find one, and
/// git decides. Looking costs a few `stat`s; starting git in a directory
/// that is no repository costs milliseconds, and on a busy machine more than
/// the status's budget, which would then call it a large repository.
pub(crate) fn may_be_in_work_tree(dir: &Path, is_set: impl Fn(&str) -> bool) -> bool {
    if is_set("GIT_DIR") || is_set("GIT_WORK_TREE") {
        return true;
    }
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    absolute
        .ancestors()
        .any(|ancestor| std::fs::symlink_metadata(ancestor.join(".git")).is_ok())
}

/// Today's date in local time, `YYYY-MM-DD`.
pub fn today() -> String {
    chrono::Local::now().format("%Y-%m-%d").to_string()
}

/// The platform string, e.g. `linux x86_64`.
pub fn platform() -> String {
    format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
}

/// Builds both parts for a session in `project_root` with `model`, given the
/// git status (start [`read_git_status`] early: it overlaps other start-up work).
pub fn build_system_prompt(
    config_dir: Option<&Path>,
    project_root: &Path,
    model: &str,
    git_status: GitStatus,
) -> SystemPrompt {
    let instructions = load_instructions(config_dir, project_root);
    let facts = EnvironmentFacts {
        cwd: project_root.to_path_buf(),
        platform: platform(),
        date: today(),
        git_status,
        model: model.to_string(),
    };
    system_prompt(&instructions, &facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_user_then_project_instructions() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::write(user.path().join("AGENTS.md"), "user rule").unwrap();
        std::fs::write(project.path().join("TROUPE.md"), "project rule").unwrap();
        std::fs::write(project.path().join("AGENTS.md"), "x".repeat(50_000)).unwrap();
        let files = load_instructions(Some(user.path()), project.path());
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].content, "user rule");
        assert!(
            files[1]
                .content
                .ends_with("[instructions cut: file too long]")
        );
        assert_eq!(files[2].content, "project rule");
    }

    #[test]
    fn a_work_tree_is_looked_for_upwards_and_git_s_variables_defer_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let unset = |_: &str| false;
        assert!(!may_be_in_work_tree(&deep, unset));
        assert!(may_be_in_work_tree(&deep, |var| var == "GIT_DIR"));
        assert!(may_be_in_work_tree(&deep, |var| var == "GIT_WORK_TREE"));
        // A linked work tree or a submodule has a `.git` file.
        std::fs::write(dir.path().join("a/.git"), "gitdir: /elsewhere\n").unwrap();
        assert!(may_be_in_work_tree(&deep, unset));
        assert!(!may_be_in_work_tree(dir.path(), unset));
        std::fs::remove_file(dir.path().join("a/.git")).unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        assert!(may_be_in_work_tree(&deep, unset));
    }

    #[tokio::test]
    async fn outside_a_repository_no_git_runs_so_no_budget_is_too_short() {
        let dir = tempfile::tempdir().unwrap();
        // Were git started, a zero budget would end as `TooSlow`.
        assert_eq!(
            read_git_status(dir.path(), Duration::ZERO).await,
            GitStatus::NotRepository
        );
    }

    #[tokio::test]
    async fn git_status_outside_a_repository_and_in_one() {
        let dir = tempfile::tempdir().unwrap();
        let patient = Duration::from_secs(5);
        assert_eq!(
            read_git_status(dir.path(), patient).await,
            GitStatus::NotRepository
        );
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(init.success());
        std::fs::write(dir.path().join("new.txt"), "x").unwrap();
        match read_git_status(dir.path(), patient).await {
            GitStatus::Status(text) => assert!(text.contains("?? new.txt"), "{text}"),
            other => panic!("{other:?}"),
        }
        // A git that cannot answer in time: a filter driver hangs on a
        // tracked file whose stat changed.
        let git = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "{args:?}");
        };
        git(&["add", "new.txt"]);
        git(&["commit", "-qm", "one"]);
        std::fs::write(dir.path().join(".gitattributes"), "*.txt filter=slow\n").unwrap();
        git(&["config", "filter.slow.clean", "sleep 5; cat"]);
        touch_later(&dir.path().join("new.txt"));
        assert_eq!(
            read_git_status(dir.path(), Duration::from_millis(100)).await,
            GitStatus::TooSlow
        );
    }

    /// Gives `path` a modification time a few seconds ahead, so git must
    /// read it again.
    fn touch_later(path: &Path) {
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(later).unwrap();
    }

    /// Runs `git` in `dir` as a user would, failing the test if it fails.
    fn user_git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    #[tokio::test]
    async fn git_status_runs_nothing_the_repository_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        user_git(root, &["init", "-q"]);
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        user_git(root, &["add", "a.txt"]);
        user_git(root, &["commit", "-qm", "one"]);
        let marker = |what: &str| root.join(format!("MARKER-{what}"));
        let program = |what: &str| format!("touch {}", marker(what).display());
        let hooks = root.join("evil-hooks");
        std::fs::create_dir(&hooks).unwrap();
        for hook in ["post-index-change", "post-checkout", "pre-commit"] {
            let path = hooks.join(hook);
            std::fs::write(&path, format!("#!/bin/sh\n{}\n", program("hook"))).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        std::fs::write(root.join(".gitattributes"), "*.txt filter=evil diff=evil\n").unwrap();
        let settings = [
            ("core.fsmonitor", program("fsmonitor")),
            ("core.hooksPath", hooks.display().to_string()),
            ("core.pager", program("pager")),
            ("diff.external", program("diff")),
            ("diff.evil.textconv", program("textconv")),
            ("credential.helper", format!("!{}", program("credential"))),
            ("core.sshCommand", program("ssh")),
            ("filter.evil.clean", format!("{}; cat", program("filter"))),
            ("filter.evil.smudge", format!("{}; cat", program("smudge"))),
        ];
        for (key, value) in &settings {
            user_git(root, &["config", key, value]);
        }
        std::fs::write(root.join("b.txt"), "untracked\n").unwrap();
        touch_later(&root.join("a.txt"));
        match read_git_status(root, Duration::from_secs(10)).await {
            GitStatus::Status(text) => assert!(text.contains("?? b.txt"), "{text}"),
            other => panic!("{other:?}"),
        }
        let ran: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("MARKER"))
            .collect();
        // A filter driver cannot be turned off by name: it runs, but
        // confined it can change nothing.
        let confined = troupe_process::os_sandbox::KernelSupport::probe().landlock_abi > 0;
        let expected: &[&str] = if confined { &[] } else { &["MARKER-filter"] };
        assert_eq!(ran, expected);
        // The same repository, as a user's own git sees it, does run them:
        // the test's settings are live.
        user_git(root, &["status", "--short"]);
        assert!(marker("fsmonitor").exists());
    }
}
