//! Git repositories of a test's own: a bare repository with known commits,
//! reachable over `file://`.

use std::path::Path;
use std::process::Command;

/// Runs git in `dir`, as a test's own setup.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// A bare repository with two commits on `main` (`notes.txt` = `first`,
/// then `second`), the first tagged `v1`: its `file://` URL and the first
/// commit.
pub fn two_commit_repository(dir: &Path) -> (String, String) {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(work.join("notes.txt"), "first\n").unwrap();
    git(&work, &["add", "notes.txt"]);
    git(&work, &["commit", "--quiet", "-m", "first"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["tag", "v1"]);
    std::fs::write(work.join("notes.txt"), "second\n").unwrap();
    git(&work, &["commit", "--quiet", "-am", "second"]);
    let bare = dir.join("origin.git");
    git(
        dir,
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    (format!("file://{}", bare.display()), first)
}
