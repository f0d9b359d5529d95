//! What snapshots leave out, what their records say of it, and that
//! restores leave it alone.

use troupe_checkpoint::{DiffTarget, SkipReason};

use crate::checkpoint_support::{Project, meta, work_tree};

const ELEVEN_MIB: usize = 11 * 1024 * 1024;

fn skipped(checkpoint: &troupe_checkpoint::Checkpoint) -> Vec<(String, SkipReason)> {
    let mut out: Vec<(String, SkipReason)> = checkpoint
        .record
        .skipped
        .iter()
        .map(|s| (s.path.clone(), s.reason.clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn many_files(project: &Project, dir: &str, count: usize) {
    for i in 0..count {
        project.write(&format!("{dir}/f{i}.txt"), "x");
    }
}

#[tokio::test]
async fn large_files_crowded_directories_and_build_folders_are_skipped_and_recorded() {
    let project = Project::repository(&[("src/main.rs", "fn main() {}\n")]);
    project.write("big.bin", &"b".repeat(ELEVEN_MIB));
    many_files(&project, "generated", 250);
    project.write("node_modules/pkg/index.js", "js");
    project.write("web/node_modules/p/i.js", "js");
    project.write("src/new.rs", "new");
    project.write("small/ok.txt", "ok");
    // Tracked files are never skipped, whatever their size.
    project.write("tracked-big.bin", &"t".repeat(ELEVEN_MIB));
    project.git(&["add", "tracked-big.bin"]);

    let store = project.store().await;
    let checkpoint = store.snapshot(meta("s", 1)).await.unwrap();
    assert_eq!(
        skipped(&checkpoint),
        [
            (
                "big.bin".to_owned(),
                SkipReason::LargeFile {
                    bytes: ELEVEN_MIB as u64
                }
            ),
            (
                "generated".to_owned(),
                SkipReason::ManyFiles { at_least: 200 }
            ),
            ("node_modules".to_owned(), SkipReason::BuildFolder),
            ("web/node_modules".to_owned(), SkipReason::BuildFolder),
        ]
    );
    // The records come back from the store with the same list.
    let listed = store.checkpoints("s").await.unwrap();
    assert_eq!(listed[0].record.skipped, checkpoint.record.skipped);

    // Nothing skipped is in the tree; the rest is.
    let empty = store.snapshot(meta("empty", 1)).await.unwrap();
    let files = list_tree(&project, &empty);
    for path in [
        "src/new.rs",
        "small/ok.txt",
        "tracked-big.bin",
        "src/main.rs",
    ] {
        assert!(files.contains(&path.to_owned()), "{path} in {files:?}");
    }
    assert!(
        files
            .iter()
            .all(|f| !f.starts_with("generated/") && !f.contains("node_modules") && f != "big.bin")
    );

    // Restoring leaves skipped paths alone, whatever happened to them.
    project.bash("echo changed > generated/f1.txt && rm big.bin && echo x > node_modules/new.js && echo edit > src/new.rs");
    let before = work_tree(&project);
    store.restore(&checkpoint, meta("s", 2)).await.unwrap();
    let after = work_tree(&project);
    assert_eq!(project.read("src/new.rs"), "new");
    assert_eq!(project.read("generated/f1.txt"), "changed\n");
    assert!(!project.exists("big.bin"));
    assert_eq!(project.read("node_modules/new.js"), "x\n");
    let differing: Vec<_> = before
        .keys()
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert_eq!(differing, [std::path::Path::new("src/new.rs")]);
}

/// The paths of the tree of `checkpoint`, read with the store's git.
fn list_tree(project: &Project, checkpoint: &troupe_checkpoint::Checkpoint) -> Vec<String> {
    let store_dir = project.store_dir();
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&store_dir)
        .args(["ls-tree", "-r", "--name-only", checkpoint.tree()])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn in_a_plain_directory_every_file_counts_as_untracked() {
    let project = Project::plain();
    project.write("notes.txt", "n");
    project.write("big.iso", &"i".repeat(ELEVEN_MIB));
    many_files(&project, "photos", 250);
    project.write("target/debug/out", "o");
    project.write("src/a.rs", "a");
    let store = project.store().await;
    let checkpoint = store.snapshot(meta("s", 1)).await.unwrap();
    let reasons: Vec<String> = skipped(&checkpoint).into_iter().map(|s| s.0).collect();
    assert_eq!(reasons, ["big.iso", "photos", "target"]);
    let files = list_tree(&project, &checkpoint);
    assert_eq!(files, ["notes.txt", "src/a.rs"]);
}

#[tokio::test]
async fn ignored_files_stay_out_and_restores_leave_them_alone() {
    let project = Project::repository(&[(".gitignore", "*.log\nsecret/\n"), ("a", "1")]);
    project.write("run.log", "log 1");
    project.write("secret/key", "k1");
    let store = project.store().await;
    let checkpoint = store.snapshot(meta("s", 1)).await.unwrap();
    assert_eq!(checkpoint.record.skipped, []);
    assert!(!list_tree(&project, &checkpoint).contains(&"run.log".to_owned()));

    project.bash("echo log 2 > run.log && rm -r secret && echo 2 > a && echo x > other.log");
    let diff = store.diff(&checkpoint, DiffTarget::WorkTree).await.unwrap();
    assert_eq!(diff.files.len(), 1, "{diff:?}");
    store.restore(&checkpoint, meta("s", 2)).await.unwrap();
    assert_eq!(project.read("a"), "1");
    assert_eq!(project.read("run.log"), "log 2\n");
    assert_eq!(project.read("other.log"), "x\n");
    assert!(!project.exists("secret"));
}

#[tokio::test]
async fn a_file_that_grows_past_the_limit_leaves_the_store_and_is_left_alone() {
    let project = Project::plain();
    project.write("data.csv", "small");
    project.write("keep.txt", "1");
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    project.write("data.csv", &"d".repeat(ELEVEN_MIB));
    project.write("keep.txt", "2");
    let grown = store.snapshot(meta("s", 2)).await.unwrap();
    assert_eq!(skipped(&grown)[0].0, "data.csv");
    // Back to the first checkpoint: it held the small file, so it comes back.
    store.restore(&first, meta("s", 3)).await.unwrap();
    assert_eq!(project.read("data.csv"), "small");
    // Back to the grown one: the store never had the large file; the small
    // one now on disk is not the store's to remove.
    store.restore(&grown, meta("s", 4)).await.unwrap();
    assert_eq!(project.read("keep.txt"), "2");
    assert_eq!(project.read("data.csv"), "small");
}

/// Whether the store holds a blob of `content`.
fn store_has_blob(project: &Project, content: &str) -> bool {
    let store_dir = project.store_dir();
    let hash = std::process::Command::new("git")
        .args(["hash-object", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(content.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let hash = String::from_utf8(hash.stdout).unwrap();
    std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&store_dir)
        .args(["cat-file", "-e", hash.trim()])
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn a_build_folder_appearing_between_snapshots_is_never_read_into_the_store() {
    let project = Project::plain();
    project.write("src/a.rs", "a");
    let store = project.store().await;
    store.snapshot(meta("s", 1)).await.unwrap();
    project.write("node_modules/dep/index.js", "dependency 8d1f");
    project.write("web/dist/app.js", "bundle 77c2");
    project.write("src/b.rs", "b 31aa");
    let second = store.snapshot(meta("s", 2)).await.unwrap();
    let recorded: Vec<String> = skipped(&second).into_iter().map(|s| s.0).collect();
    assert_eq!(recorded, ["node_modules", "web/dist"]);
    assert!(store_has_blob(&project, "b 31aa"));
    assert!(!store_has_blob(&project, "dependency 8d1f"));
    assert!(!store_has_blob(&project, "bundle 77c2"));
}

#[tokio::test]
async fn a_build_folder_the_user_tracks_is_captured_and_kept_up_to_date() {
    let project = Project::repository(&[("build/script.sh", "v1"), ("a", "1")]);
    let store = project.store().await;
    let first = store.snapshot(meta("s", 1)).await.unwrap();
    assert_eq!(first.record.skipped, []);
    project.write("build/script.sh", "v2 5e0b");
    let second = store.snapshot(meta("s", 2)).await.unwrap();
    assert!(!second.record.unchanged);
    assert!(store_has_blob(&project, "v2 5e0b"));
    store.restore(&first, meta("s", 3)).await.unwrap();
    assert_eq!(project.read("build/script.sh"), "v1");
}

#[tokio::test]
async fn a_project_its_enclosing_repository_does_not_track_is_a_plain_directory() {
    let project = Project::named("inner");
    let outer = project.root.parent().unwrap().to_path_buf();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=U", "-c", "user.email=u@example.com"])
            .args(args)
            .current_dir(&outer)
            .status()
            .unwrap();
        assert!(status.success());
    };
    git(&["init", "-q"]);
    std::fs::write(outer.join("tracked"), "t").unwrap();
    git(&["add", "tracked"]);
    git(&["commit", "-qm", "outer"]);
    many_files(&project, "src", 150);
    many_files(&project, "assets", 120);
    project.write("big.bin", &"b".repeat(ELEVEN_MIB));
    let store = project.store().await;
    let checkpoint = store.snapshot(meta("s", 1)).await.unwrap();
    let recorded: Vec<String> = skipped(&checkpoint).into_iter().map(|s| s.0).collect();
    assert_eq!(recorded, ["big.bin"]);
    assert_eq!(list_tree(&project, &checkpoint).len(), 270);
}
