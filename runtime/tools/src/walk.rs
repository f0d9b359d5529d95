//! Directory walking shared by `glob` and `grep`: ripgrep's `ignore` walker with
//! ripgrep's default filters (`.gitignore`, `.ignore`, `.git/info/exclude`, the
//! global git excludes, hidden files and directories skipped, symlinks not
//! followed), except that `.gitignore` files are honoured outside git
//! repositories too. Also the bounded "best N" collector both tools use to cap
//! their results without holding every match in memory.
//!
//! Walking only; what is matched or searched belongs to the tools.

use std::collections::BinaryHeap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ignore::WalkBuilder;

/// SPEC §4: `grep` and `glob` return at most this many entries by default.
pub(crate) const MAX_RESULTS: usize = 500;

/// A walker over `root` with the filters described in the module docs.
pub(crate) fn walk_builder(root: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(root);
    builder
        .standard_filters(true)
        .hidden(true)
        .require_git(false)
        .follow_links(false);
    builder
}

/// Tells a blocking walk to stop. The async side holds a [`StopOnDrop`]: when
/// the call's future is dropped (an outer timeout) or cancelled, the walk quits
/// at its next entry instead of running on unobserved.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A flag not yet raised.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Raises the flag.
    pub(crate) fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// True once raised.
    pub(crate) fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A guard raising the flag when dropped.
    pub(crate) fn guard(&self) -> StopOnDrop {
        StopOnDrop(self.clone())
    }
}

/// Raises its [`StopFlag`] when dropped.
#[derive(Debug)]
pub(crate) struct StopOnDrop(StopFlag);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Keeps the `cap` smallest items pushed into it (by `Ord`), in bounded memory.
#[derive(Debug, Clone)]
pub(crate) struct BoundedBest<T: Ord> {
    heap: BinaryHeap<T>,
    cap: usize,
}

impl<T: Ord> BoundedBest<T> {
    /// An empty collector keeping at most `cap` items.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(cap.saturating_add(1).min(1024)),
            cap,
        }
    }

    /// True when `item` would be kept (cheap pre-check before building it).
    pub(crate) fn would_keep(&self, item: &T) -> bool {
        self.heap.len() < self.cap || self.heap.peek().is_some_and(|worst| item < worst)
    }

    /// Offers an item.
    pub(crate) fn push(&mut self, item: T) {
        if self.cap == 0 {
            return;
        }
        if self.heap.len() < self.cap {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|worst| item < *worst) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    /// Merges another collector into this one.
    pub(crate) fn merge(&mut self, other: BoundedBest<T>) {
        for item in other.heap {
            self.push(item);
        }
    }

    /// The kept items, smallest first.
    pub(crate) fn into_sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_smallest() {
        let mut best = BoundedBest::new(3);
        for x in [5, 1, 9, 3, 7, 2] {
            best.push(x);
        }
        assert!(best.would_keep(&0));
        assert!(!best.would_keep(&8));
        let mut other = BoundedBest::new(3);
        other.push(0);
        best.merge(other);
        assert_eq!(best.into_sorted(), vec![0, 1, 2]);
        let mut none = BoundedBest::new(0);
        none.push(1);
        assert!(none.into_sorted().is_empty());
    }

    #[test]
    fn stop_flag_is_raised_by_its_guard() {
        let flag = StopFlag::new();
        let guard = flag.guard();
        assert!(!flag.is_stopped());
        drop(guard);
        assert!(flag.is_stopped());
    }

    #[test]
    fn walker_respects_gitignore_without_git_and_skips_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".gitignore"), "ignored/\n*.log\n").unwrap();
        std::fs::create_dir_all(root.join("ignored")).unwrap();
        std::fs::create_dir_all(root.join(".hidden")).unwrap();
        std::fs::write(root.join("ignored/a.txt"), "").unwrap();
        std::fs::write(root.join(".hidden/b.txt"), "").unwrap();
        std::fs::write(root.join("x.log"), "").unwrap();
        std::fs::write(root.join("keep.txt"), "").unwrap();
        let mut files: Vec<String> = walk_builder(root)
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["keep.txt"]);
    }
}
