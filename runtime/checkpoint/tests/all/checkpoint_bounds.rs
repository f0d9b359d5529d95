//! The store's size, its pruning, and removing a session.

use crate::checkpoint_support::{Project, meta};

#[tokio::test]
async fn prune_drops_the_oldest_sessions_never_kept_ones_and_the_size_falls() {
    let project = Project::plain();
    let store = project.store().await;
    // Sessions are ordered by their newest commit's time (seconds), then by
    // name: these are named in the order they are made.
    for (index, session) in ["a-old", "b-kept", "c-new"].iter().enumerate() {
        for turn in 0..3u64 {
            let text: String = (0..40_000u64)
                .map(|i| format!("{session}{turn}{}\n", i * 7919 % 10007 + index as u64))
                .collect();
            project.write(&format!("{session}.txt"), &text);
            store.snapshot(meta(session, turn)).await.unwrap();
        }
        std::fs::remove_file(project.path(&format!("{session}.txt"))).unwrap();
        store.snapshot(meta(session, 9)).await.unwrap();
    }
    let size = store.size().await.unwrap();
    assert!(size > 0);
    let untouched = store.prune(size * 10, &[]).await.unwrap();
    assert_eq!(untouched.removed_sessions, Vec::<String>::new());

    let report = store.prune(0, &["b-kept".to_owned()]).await.unwrap();
    assert_eq!(report.removed_sessions, ["a-old", "c-new"]);
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    assert_eq!(store.checkpoints("a-old").await.unwrap(), []);
    assert_eq!(store.checkpoints("b-kept").await.unwrap().len(), 4);
    // What is kept can still be restored.
    let kept = store.checkpoints("b-kept").await.unwrap();
    store.restore(&kept[1], meta("b-kept", 10)).await.unwrap();
    assert!(project.read("b-kept.txt").starts_with("b-kept1"));
}

#[tokio::test]
async fn removing_a_session_drops_its_refs_only() {
    let project = Project::plain();
    project.write("f", "1");
    let store = project.store().await;
    store.snapshot(meta("a", 1)).await.unwrap();
    project.write("f", "2");
    store.snapshot(meta("a", 2)).await.unwrap();
    store.snapshot(meta("b", 1)).await.unwrap();
    assert_eq!(store.remove_session("a").await.unwrap(), 2);
    assert_eq!(store.remove_session("a").await.unwrap(), 0);
    assert_eq!(store.checkpoints("a").await.unwrap(), []);
    assert_eq!(store.checkpoints("b").await.unwrap().len(), 1);
    // A new chain starts at 1 again.
    project.write("f", "3");
    assert_eq!(store.snapshot(meta("a", 3)).await.unwrap().number, 1);
    assert!(store.remove_session("../b").await.is_err());
}

#[tokio::test]
async fn two_values_on_one_store_number_one_chain_and_wait_for_each_other() {
    // Two processes (here two values, which share nothing in memory) take
    // turns on one session: each sees the other's checkpoints.
    let project = Project::plain();
    let first = project.store().await;
    let second = project.store().await;
    project.write("f", "1");
    assert_eq!(first.snapshot(meta("s", 1)).await.unwrap().number, 1);
    project.write("f", "2");
    assert_eq!(second.snapshot(meta("s", 2)).await.unwrap().number, 2);
    project.write("f", "3");
    let third = first.snapshot(meta("s", 3)).await.unwrap();
    assert_eq!(third.number, 3);
    assert_eq!(
        third.record.parent.as_deref(),
        Some(&*second.checkpoints("s").await.unwrap()[1].commit)
    );
    // At the same time: both succeed, one after the other.
    project.write("g", "x");
    let (a, b) = tokio::join!(first.snapshot(meta("a", 1)), second.snapshot(meta("b", 1)));
    assert_eq!((a.unwrap().number, b.unwrap().number), (1, 1));
    // Another value's removal is seen: the chain starts again at 1.
    second.remove_session("s").await.unwrap();
    project.write("f", "4");
    assert_eq!(first.snapshot(meta("s", 4)).await.unwrap().number, 1);
}

#[tokio::test]
async fn an_undo_record_is_kept_even_when_the_files_did_not_change() {
    let project = Project::plain();
    project.write("f", "1");
    let store = project.store().await;
    let turn = store.snapshot(meta("s", 1)).await.unwrap();
    let same = store.snapshot(meta("s", 2)).await.unwrap();
    assert!(same.record.unchanged);
    let mut undo = meta("s", 3);
    undo.kind = troupe_checkpoint::CheckpointKind::BeforeUndo { target: 1 };
    let recorded = store.snapshot(undo).await.unwrap();
    assert!(!recorded.record.unchanged);
    assert_eq!(recorded.number, 2);
    assert_eq!(recorded.tree(), turn.tree());
    assert_eq!(store.checkpoints("s").await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_home_sweep_drops_orphans_then_the_oldest_sessions_of_every_store_never_one_in_use() {
    // Two projects under one data directory.
    let first = Project::plain();
    let second = Project::named("second");
    let home = first.home.clone();
    let second_store = troupe_checkpoint::CheckpointStore::open(&home, &second.root)
        .await
        .unwrap();
    let first_store = first.store().await;
    for (index, session) in ["gone", "old", "busy"].iter().enumerate() {
        first.write("f", &format!("{session}{}", "x".repeat(50_000 + index)));
        first_store.snapshot(meta(session, 1)).await.unwrap();
    }
    second.write("g", &"y".repeat(80_000));
    second_store.snapshot(meta("new", 1)).await.unwrap();
    let exists = |session: &str| session != "gone";
    let in_use = |session: &str| session == "busy";
    // A bound above everything drops only the orphan.
    let sweep = troupe_checkpoint::sweep_home(&home, &exists, &in_use, u64::MAX)
        .await
        .unwrap();
    assert_eq!(sweep.orphans, ["gone"]);
    assert!(sweep.pruned.is_empty());
    assert!(first_store.checkpoints("gone").await.unwrap().is_empty());
    // A bound of nothing drops every session but the one in use, oldest
    // first, across both stores.
    let sweep = troupe_checkpoint::sweep_home(&home, &exists, &in_use, 0)
        .await
        .unwrap();
    let mut pruned = sweep.pruned.clone();
    pruned.sort();
    assert_eq!(pruned, ["new", "old"]);
    assert!(sweep.bytes_after > 0, "{sweep:?}");
    assert_eq!(first_store.checkpoints("busy").await.unwrap().len(), 1);
    assert!(second_store.checkpoints("new").await.unwrap().is_empty());
    // What is kept still restores.
    first.write("f", "changed");
    let busy = first_store.checkpoints("busy").await.unwrap();
    first_store
        .restore(&busy[0], meta("busy", 2))
        .await
        .unwrap();
    assert!(first.read("f").starts_with("busy"));
}

#[tokio::test]
async fn a_store_is_put_in_place_whole_and_an_abandoned_creation_is_removed() {
    let project = Project::plain();
    project.write("a.txt", "a\n");
    drop(project.store().await);
    let store_dir = project.store_dir();
    let name = store_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // A process that is gone was creating it: its directory is left over.
    std::fs::remove_dir_all(&store_dir).unwrap();
    let abandoned = store_dir.with_file_name(format!("{name}.creating-4194399"));
    std::fs::create_dir_all(abandoned.join("objects")).unwrap();

    let store = project.store().await;
    assert!(!abandoned.exists());
    let config = std::fs::read_to_string(store_dir.join("config")).unwrap();
    assert!(config.contains("auto = 0"), "{config}");
    let siblings: Vec<String> = std::fs::read_dir(store_dir.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(siblings, [name], "nothing but the store is left beside it");
    assert_eq!(store.snapshot(meta("s1", 1)).await.unwrap().number, 1);
}
