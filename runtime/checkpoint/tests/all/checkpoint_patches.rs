//! The unified patches of the files two trees differ in: every kind of
//! change, files changed by shell commands, binary and large files, names
//! and contents git could misread, and the bounds.

use std::path::PathBuf;

use troupe_checkpoint::{ChangeKind, PatchBody, PatchLimits};

use crate::checkpoint_support::{Project, meta};

fn text(body: &PatchBody) -> &str {
    match body {
        PatchBody::Text { patch } => patch,
        other => panic!("expected a patch, got {other:?}"),
    }
}

#[tokio::test]
async fn each_changed_file_has_its_patch_and_large_or_binary_ones_a_single_entry() {
    let project = Project::plain();
    project.write("kept.txt", "one\ntwo\nthree\n");
    project.write("gone.txt", "bye\n");
    project.write("big.txt", &"x\n".repeat(300_000));
    let store = project.store().await;
    let first = store.snapshot(meta("s1", 1)).await.unwrap();

    project.bash(
        "rm gone.txt && echo created > made.txt && sed -i s/two/TWO/ kept.txt \
         && printf 'a\\0b' > blob.bin && echo more >> big.txt \
         && printf '+fake\\ndiff --git a/x b/x\\n' > 'odd *name[1].txt'",
    );
    let now = store.work_tree_id().await.unwrap();
    let before = store.checkpoints("s1").await.unwrap();

    let patches = store
        .file_patches(first.tree(), &now, &[], PatchLimits::default())
        .await
        .unwrap();
    let listed: Vec<(String, ChangeKind)> = patches
        .files
        .iter()
        .map(|file| (file.path.to_string_lossy().into_owned(), file.kind))
        .collect();
    assert_eq!(
        listed,
        [
            ("big.txt".to_owned(), ChangeKind::Modified),
            ("blob.bin".to_owned(), ChangeKind::Added),
            ("gone.txt".to_owned(), ChangeKind::Removed),
            ("kept.txt".to_owned(), ChangeKind::Modified),
            ("made.txt".to_owned(), ChangeKind::Added),
            ("odd *name[1].txt".to_owned(), ChangeKind::Added),
        ]
    );
    assert_eq!(patches.omitted, 0);
    let body = |name: &str| {
        &patches
            .files
            .iter()
            .find(|file| file.path == std::path::Path::new(name))
            .unwrap()
            .body
    };
    assert_eq!(body("big.txt"), &PatchBody::TooLarge { bytes: 600_005 });
    assert_eq!(body("blob.bin"), &PatchBody::Binary);
    let gone = text(body("gone.txt"));
    assert!(gone.contains("--- a/gone.txt\n+++ /dev/null\n"), "{gone}");
    assert!(gone.contains("-bye\n"), "{gone}");
    let kept = text(body("kept.txt"));
    assert!(
        kept.contains("@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"),
        "{kept}"
    );
    assert!(!kept.contains("index "), "{kept}");
    assert!(text(body("made.txt")).contains("+created\n"));
    let odd = text(body("odd *name[1].txt"));
    assert!(odd.contains("++fake\n+diff --git a/x b/x\n"), "{odd}");

    // Only the paths asked, taken literally: a wildcard matches nothing else.
    let some = store
        .file_patches(
            first.tree(),
            &now,
            &[PathBuf::from("odd *name[1].txt"), PathBuf::from("*.txt")],
            PatchLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(some.files.len(), 1);
    assert_eq!(text(&some.files[0].body), odd);

    let bounded = store
        .file_patches(
            first.tree(),
            &now,
            &[],
            PatchLimits {
                max_files: 2,
                max_file_bytes: 4,
            },
        )
        .await
        .unwrap();
    assert_eq!((bounded.files.len(), bounded.omitted), (2, 4));
    let bodies: Vec<&PatchBody> = bounded.files.iter().map(|file| &file.body).collect();
    assert_eq!(
        bodies,
        [&PatchBody::TooLarge { bytes: 600_005 }, &PatchBody::Binary]
    );

    // Reading made no checkpoint.
    assert_eq!(store.checkpoints("s1").await.unwrap(), before);
    assert!(
        store
            .file_patches("HEAD", &now, &[], PatchLimits::default())
            .await
            .is_err()
    );
}
