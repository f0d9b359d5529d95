//! Snapshots, diffs and restores of work trees, changed by files and by
//! shell commands.

use std::os::unix::fs::PermissionsExt;

use troupe_checkpoint::{ChangeKind, DiffTarget};

use crate::checkpoint_support::{Project, meta, work_tree};

#[tokio::test]
async fn a_restore_undoes_changes_made_by_files_and_by_shell_commands() {
    let project = Project::plain();
    project.write("a.txt", "one\ntwo\n");
    project.write("dir/b.txt", "b\n");
    project.write("dir/deep/c.txt", "c\n");
    let store = project.store().await;
    let first = store.snapshot(meta("s1", 1)).await.unwrap();
    assert_eq!(first.number, 1);
    assert!(!first.record.unchanged);
    let original = work_tree(&project);

    project.write("a.txt", "one\nTWO\nthree\n");
    project.write("new/added.txt", "added\n");
    project.bash(
        "rm dir/b.txt && rm -r dir/deep && echo more >> a.txt && mkdir -p x/y && echo z > x/y/z",
    );

    let diff = store.diff(&first, DiffTarget::WorkTree).await.unwrap();
    let kinds: Vec<(String, ChangeKind)> = diff
        .files
        .iter()
        .map(|f| (f.path.to_string_lossy().into_owned(), f.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("a.txt".to_owned(), ChangeKind::Modified),
            ("dir/b.txt".to_owned(), ChangeKind::Removed),
            ("dir/deep/c.txt".to_owned(), ChangeKind::Removed),
            ("new/added.txt".to_owned(), ChangeKind::Added),
            ("x/y/z".to_owned(), ChangeKind::Added),
        ]
    );
    let a = &diff.files[0];
    assert_eq!((a.lines_added, a.lines_removed), (Some(3), Some(1)));

    let restored = store.restore(&first, meta("s1", 2)).await.unwrap();
    assert_eq!(work_tree(&project), original);
    assert!(!project.exists("new"), "directories left empty go too");
    assert!(!project.exists("x"));
    assert_eq!(restored.before.number, 2);
    assert_eq!(restored.changes.files.len(), 5);
    assert_eq!(
        store
            .diff(&first, DiffTarget::WorkTree)
            .await
            .unwrap()
            .files,
        []
    );
}

#[tokio::test]
async fn restoring_the_snapshot_a_restore_took_redoes_the_changes() {
    let project = Project::repository(&[("src/lib.rs", "fn a() {}\n"), ("README", "r\n")]);
    let store = project.store().await;
    let before_turn = store.snapshot(meta("s", 1)).await.unwrap();
    project.bash("echo 'fn b() {}' >> src/lib.rs && rm README && printf 'n' > notes.md");
    let changed = work_tree(&project);

    let undo = store.restore(&before_turn, meta("s", 2)).await.unwrap();
    assert_eq!(project.read("src/lib.rs"), "fn a() {}\n");
    assert!(project.exists("README") && !project.exists("notes.md"));

    let redo = store.restore(&undo.before, meta("s", 3)).await.unwrap();
    assert_eq!(work_tree(&project), changed);
    assert_eq!(redo.before.tree(), before_turn.tree());
    let numbers: Vec<u64> = store
        .checkpoints("s")
        .await
        .unwrap()
        .iter()
        .map(|c| c.number)
        .collect();
    // The redo's own snapshot equals the first checkpoint's tree but follows
    // another one, so it is a checkpoint of its own.
    assert_eq!(numbers, [1, 2, 3]);
}

#[tokio::test]
async fn a_snapshot_equal_to_the_last_one_makes_no_commit() {
    let project = Project::plain();
    project.write("f", "x");
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    let objects = count_objects(&project);
    assert!(objects >= 3, "a blob, a tree and a commit: {objects}");
    let again = store.snapshot(meta("s", 2)).await.unwrap();
    assert!(again.record.unchanged);
    assert_eq!(again.commit, first.commit);
    assert_eq!(again.number, first.number);
    assert_eq!(again.tree(), first.tree());
    assert_eq!(again.record.parent.as_deref(), Some(first.commit.as_str()));
    assert_eq!(again.record.meta.turn, 2);
    assert_eq!(count_objects(&project), objects);
    assert_eq!(store.checkpoints("s").await.unwrap().len(), 1);

    // Another session starts its own chain, even from the same tree.
    let other = store.snapshot(meta("t", 1)).await.unwrap();
    assert!(!other.record.unchanged);
    assert_eq!(other.record.parent, None);
    project.write("f", "y");
    let second = store.snapshot(meta("s", 3)).await.unwrap();
    assert_eq!(second.number, 2);
    assert_eq!(second.record.parent.as_deref(), Some(first.commit.as_str()));
}

fn count_objects(project: &Project) -> usize {
    crate::checkpoint_support::contents(&project.store_dir())
        .keys()
        .filter(|path| path.starts_with("objects") && path.components().count() == 3)
        .count()
}

#[tokio::test]
async fn records_come_back_from_the_store_as_they_were_written() {
    let project = Project::plain();
    project.write("f", "1");
    let store = project.store().await;
    let mut first_meta = meta("s", 1);
    first_meta.tool_call_ids = vec!["call \"quoted\"\nnewline".to_owned(), "b".to_owned()];
    first_meta.agent_path = "main/reviewer".to_owned();
    let first = store.snapshot(first_meta).await.unwrap();
    project.write("f", "2");
    let second = store.snapshot(meta("s", 2)).await.unwrap();
    drop(store);
    // A store opened again knows the session's chain from its refs.
    let store = project.store().await;
    assert_eq!(
        store.checkpoints("s").await.unwrap(),
        [first.clone(), second.clone()]
    );
    project.write("f", "3");
    let third = store.snapshot(meta("s", 3)).await.unwrap();
    assert_eq!(third.number, 3);
    assert_eq!(third.record.parent, Some(second.commit));
    assert!(first.record.time.ends_with('Z'));
}

#[tokio::test]
async fn spaces_unicode_symlinks_and_the_executable_bit_are_restored() {
    let project = Project::plain();
    project.write("with space/a file.txt", "s\n");
    project.write("ünïcødé/日本.txt", "u\n");
    project.write("run.sh", "#!/bin/sh\n");
    project.write("-dash", "d\n");
    project.write("*star[1]?", "glob\n");
    let script = project.path("run.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("with space/a file.txt", project.path("link")).unwrap();
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    let original = work_tree(&project);

    project.bash(
        "rm 'with space/a file.txt' && echo changed > ünïcødé/日本.txt && chmod -x run.sh \
         && rm link && ln -s elsewhere link && rm -- -dash '*star[1]?'",
    );
    let diff = store.diff(&first, DiffTarget::WorkTree).await.unwrap();
    assert_eq!(diff.files.len(), 6, "{diff:?}");
    store.restore(&first, meta("s", 2)).await.unwrap();
    assert_eq!(work_tree(&project), original);
    let mode = std::fs::metadata(&script).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0o111);
    assert_eq!(
        std::fs::read_link(project.path("link")).unwrap(),
        std::path::Path::new("with space/a file.txt")
    );
}

#[tokio::test]
async fn a_project_path_git_could_misread_is_handled_as_it_is() {
    let project = Project::named("-p :(exclude)*[a]? é\nline");
    project.write("f.txt", "1");
    project.write(":(top)x", "2");
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.bash("echo 9 > f.txt && rm ':(top)x' && echo n > n");
    store.restore(&first, meta("s", 2)).await.unwrap();
    assert_eq!(project.read("f.txt"), "1");
    assert_eq!(project.read(":(top)x"), "2");
    assert!(!project.exists("n"));
}

#[tokio::test]
async fn changes_made_outside_since_a_checkpoint_are_named() {
    let project = Project::plain();
    project.write("a", "1");
    project.write("b", "1");
    let store = project.store().await;
    let after_turn = store.snapshot(meta("s", 1)).await.unwrap();
    assert_eq!(store.changed_since(&after_turn).await.unwrap(), []);
    project.bash("echo 2 > b && touch c");
    let changed: Vec<String> = store
        .changed_since(&after_turn)
        .await
        .unwrap()
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect();
    assert_eq!(changed, ["b", "c"]);
    // Looking made no checkpoint.
    assert_eq!(store.checkpoints("s").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_bad_session_id_or_checkpoint_is_refused_before_anything_changes() {
    let project = Project::plain();
    project.write("a", "1");
    let store = project.store().await;
    for bad in ["../heads/main", "a/b", "", "x y", ".git"] {
        let err = store.snapshot(meta(bad, 1)).await.unwrap_err();
        assert!(err.to_string().contains("invalid session id"), "{err}");
    }
    let mut forged = store.snapshot(meta("s", 1)).await.unwrap();
    project.write("a", "2");
    forged.record.tree = "0123456789012345678901234567890123456789".to_owned();
    assert!(store.restore(&forged, meta("s", 2)).await.is_err());
    forged.record.tree = "--help".to_owned();
    assert!(store.restore(&forged, meta("s", 2)).await.is_err());
    assert_eq!(project.read("a"), "2");
    assert_eq!(store.checkpoints("s").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_restore_writes_nothing_through_a_link_that_replaced_a_directory() {
    let project = Project::plain();
    project.write("d/f", "mine");
    let outside = project.root.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.bash(&format!("rm -r d && ln -s '{}' d", outside.display()));
    store.restore(&first, meta("s", 2)).await.unwrap();
    assert!(!project.path("d").symlink_metadata().unwrap().is_symlink());
    assert_eq!(project.read("d/f"), "mine");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[tokio::test]
async fn a_nested_repository_is_recorded_by_its_commit_and_never_removed() {
    let project = Project::plain();
    project.write("a", "1");
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.bash(
        "mkdir nested && cd nested && git init -q && echo n > n && git add n \
         && git -c user.name=U -c user.email=u@example.com commit -qm n",
    );
    let second = store.snapshot(meta("s", 2)).await.unwrap();
    assert!(!second.record.unchanged);
    store.restore(&first, meta("s", 3)).await.unwrap();
    assert_eq!(project.read("nested/n"), "n\n");
    assert!(project.path("nested/.git/HEAD").is_file());
}

#[tokio::test]
async fn restoring_some_paths_leaves_every_other_file_as_it_is() {
    let project = Project::plain();
    project.write("kept.txt", "old kept\n");
    project.write("back.txt", "old back\n");
    let store = project.store().await;
    let before = store.snapshot(meta("s", 1)).await.unwrap();
    project.write("kept.txt", "new kept\n");
    project.write("back.txt", "new back\n");
    project.write("dir/added.txt", "added\n");
    let restored = store
        .restore_paths(
            &before,
            &["back.txt".into(), "dir/added.txt".into()],
            meta("s", 2),
        )
        .await
        .unwrap();
    assert_eq!(project.read("back.txt"), "old back\n");
    assert!(!project.exists("dir/added.txt") && !project.exists("dir"));
    assert_eq!(project.read("kept.txt"), "new kept\n");
    let changed: Vec<String> = restored
        .changes
        .files
        .iter()
        .map(|file| file.path.to_string_lossy().into_owned())
        .collect();
    assert_eq!(changed, ["back.txt", "dir/added.txt"]);
    // The snapshot taken first brings it all back.
    store.restore(&restored.before, meta("s", 3)).await.unwrap();
    assert_eq!(project.read("back.txt"), "new back\n");
    assert_eq!(project.read("dir/added.txt"), "added\n");
}

#[tokio::test]
async fn a_staged_snapshot_holds_the_files_as_they_were_when_it_answered() {
    let project = Project::plain();
    project.write("f.txt", "before\n");
    let store = std::sync::Arc::new(project.store().await);
    let staged = store.snapshot_staged(meta("s", 1)).await.unwrap();
    // The work tree changes at once, while the record is being written.
    project.write("f.txt", "after\n");
    project.write("new.txt", "new\n");
    let checkpoint = staged.recorded.await.unwrap().unwrap();
    assert_eq!(checkpoint.number, 1);
    store.restore(&checkpoint, meta("s", 2)).await.unwrap();
    assert_eq!(project.read("f.txt"), "before\n");
    assert!(!project.exists("new.txt"));
    // A bad session id is refused before anything starts.
    assert!(store.snapshot_staged(meta("../x", 1)).await.is_err());
}
