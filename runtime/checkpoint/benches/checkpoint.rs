//! What a checkpoint costs: the time of a snapshot of a 10,000-file git
//! repository (100 directories of 100 files, committed) after one file and
//! after 100 files changed, and how much the store grows over 100 snapshots
//! that each change one file.
//!
//! - `snapshot/one_changed`: one file rewritten, then a snapshot;
//! - `snapshot/hundred_changed`: 100 files in 100 directories rewritten,
//!   then a snapshot;
//! - `snapshot/unchanged`: a snapshot of a work tree equal to the last one.
//!
//! The store's growth is printed after the timings. Results go to
//! `docs/performance.md`, never into assertions.

use std::path::Path;
use std::process::Command;

use criterion::{Criterion, criterion_group};
use troupe_checkpoint::{CheckpointStore, SnapshotMeta};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;

/// A committed git repository of `DIRS` × `FILES_PER_DIR` small files.
fn repository(root: &Path) {
    for dir in 0..DIRS {
        let path = root.join(format!("src/module{dir}"));
        std::fs::create_dir_all(&path).expect("directory");
        for file in 0..FILES_PER_DIR {
            let text =
                format!("// module {dir} file {file}\npub fn f{file}() -> usize {{ {dir} }}\n");
            std::fs::write(path.join(format!("file{file}.rs")), text).expect("file");
        }
    }
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=B",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-qm",
            "files",
        ],
    ] {
        let status = Command::new("git")
            .args(args)
            .current_dir(root)
            .status()
            .expect("git");
        assert!(status.success());
    }
}

fn meta(turn: u64) -> SnapshotMeta {
    SnapshotMeta {
        session: "bench".to_owned(),
        run: "run".to_owned(),
        turn,
        agent_path: "main".to_owned(),
        tool_call_ids: vec![format!("call-{turn}")],
        kind: Default::default(),
    }
}

/// Rewrites `count` files (one per directory), different each `round`.
fn change(root: &Path, count: usize, round: u64) {
    for dir in 0..count {
        let path = root.join(format!("src/module{dir}/file0.rs"));
        std::fs::write(path, format!("// round {round}\n")).expect("write");
    }
}

fn snapshot_cost(c: &mut Criterion) {
    let base = tempfile::tempdir().expect("temporary directory");
    let root = base.path().join("repository");
    std::fs::create_dir_all(&root).expect("project");
    repository(&root);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = runtime
        .block_on(CheckpointStore::open(&base.path().join("home"), &root))
        .expect("store");
    runtime
        .block_on(store.snapshot(meta(0)))
        .expect("first snapshot");
    let mut round = 0u64;
    let mut group = c.benchmark_group("snapshot");
    for (name, count) in [
        ("one_changed", 1),
        ("hundred_changed", 100),
        ("unchanged", 0),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                round += 1;
                change(&root, count, round);
                let checkpoint = runtime
                    .block_on(store.snapshot(meta(round)))
                    .expect("snapshot");
                assert_eq!(checkpoint.record.unchanged, count == 0);
            });
        });
    }
    group.finish();
}

/// Prints how the store grows over 100 snapshots that each change one file.
fn store_growth() {
    let base = tempfile::tempdir().expect("temporary directory");
    let root = base.path().join("repository");
    std::fs::create_dir_all(&root).expect("project");
    repository(&root);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = CheckpointStore::open(&base.path().join("home"), &root)
            .await
            .expect("store");
        let empty = store.size().await.expect("size");
        store.snapshot(meta(0)).await.expect("first snapshot");
        let first = store.size().await.expect("size");
        let started = std::time::Instant::now();
        for round in 1..=100 {
            change(&root, 1, round);
            store.snapshot(meta(round)).await.expect("snapshot");
        }
        let elapsed = started.elapsed();
        let after = store.size().await.expect("size");
        let pruned = store.prune(0, &["bench".to_owned()]).await.expect("prune");
        println!(
            "store growth: empty store {empty} B; after the first snapshot {first} B; \
             after 100 more snapshots of one changed file {after} B \
             (+{} B per snapshot, {:.1} ms per snapshot); packed by a prune that \
             keeps the session: {} B ({} sessions removed)",
            (after - first) / 100,
            elapsed.as_secs_f64() * 10.0,
            pruned.bytes_after,
            pruned.removed_sessions.len()
        );
    });
}

criterion_group!(benches, snapshot_cost);

fn main() {
    benches();
    store_growth();
    Criterion::default().configure_from_args().final_summary();
}
