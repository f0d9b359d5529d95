//! The user's own `.git` is never written: every file under it is the same,
//! byte for byte, after snapshots, diffs, restores and prunes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use troupe_checkpoint::DiffTarget;

use crate::checkpoint_support::{Project, contents, meta};

fn dot_git(project: &Project) -> BTreeMap<PathBuf, Vec<u8>> {
    contents(&project.path(".git"))
}

#[tokio::test]
async fn the_users_git_directory_is_byte_identical_after_every_operation() {
    let project = Project::repository(&[("a.txt", "a\n"), ("src/b.rs", "b\n")]);
    // An index with staged and unstaged changes, a stash, an untracked file.
    project.write("a.txt", "stashed\n");
    project.git(&["stash", "-q"]);
    project.write("src/b.rs", "staged\n");
    project.git(&["add", "src/b.rs"]);
    project.write("a.txt", "unstaged\n");
    project.write("untracked.txt", "u\n");
    let before = dot_git(&project);
    let status_before = project.git(&["status", "--porcelain"]);

    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.bash("echo more >> a.txt && rm untracked.txt && echo c > c.txt");
    store.snapshot(meta("s", 2)).await.unwrap();
    store.diff(&first, DiffTarget::WorkTree).await.unwrap();
    store.changed_since(&first).await.unwrap();
    store.restore(&first, meta("s", 3)).await.unwrap();
    store.prune(0, &[]).await.unwrap();

    assert_eq!(dot_git(&project), before, "the user's .git changed");
    assert_eq!(project.git(&["status", "--porcelain"]), status_before);
    assert!(!store.git_dir().starts_with(&project.root));
}

#[tokio::test]
async fn the_projects_git_directory_is_never_captured_nor_restored() {
    let project = Project::repository(&[("a", "1")]);
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.write("a", "2");
    project.git(&["commit", "-qam", "second"]);
    let after_commit = dot_git(&project);
    store.restore(&first, meta("s", 2)).await.unwrap();
    assert_eq!(project.read("a"), "1");
    // The commit made meanwhile is still the user's.
    assert_eq!(dot_git(&project), after_commit);
    let diff = store.diff(&first, DiffTarget::WorkTree).await.unwrap();
    assert!(diff.files.iter().all(|f| !f.path.starts_with(".git")));
}
