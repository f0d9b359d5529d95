//! What path resolution reads of the file system, behind one trait: whether a
//! name is a symlink (and where it points), a directory or something else,
//! and the names in a directory. [`crate::sandbox::PathSandbox`] and the
//! permission engine ask a [`FileSystemView`] instead of calling `std::fs`
//! themselves, so that whoever builds them decides what they read:
//! [`RealFileSystem`] in the product, [`MemoryFileSystem`] (feature
//! `testing`) in tests of the machines that decide on paths, which then need
//! no temporary directory.

use std::ffi::OsString;
use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};

/// What a name in the file system is, without following it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A symbolic link, with its target as written.
    Link(PathBuf),
    /// A directory.
    Directory,
    /// Anything else (a file, a device, a socket).
    Other,
}

/// The reads path resolution makes.
pub trait FileSystemView: Send + Sync + Debug {
    /// What `path` names, without following a final symlink
    /// (`symlink_metadata`, then `read_link` for a link). A missing name is
    /// `ErrorKind::NotFound`; a path through a file, `NotADirectory`.
    fn entry(&self, path: &Path) -> io::Result<Entry>;

    /// The names in directory `dir`, or `None` when it holds more than
    /// `limit` entries (a listing stays bounded).
    fn names(&self, dir: &Path, limit: usize) -> io::Result<Option<Vec<OsString>>>;
}

/// The machine's own file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFileSystem;

impl FileSystemView for RealFileSystem {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            Ok(Entry::Link(std::fs::read_link(path)?))
        } else if meta.is_dir() {
            Ok(Entry::Directory)
        } else {
            Ok(Entry::Other)
        }
    }

    fn names(&self, dir: &Path, limit: usize) -> io::Result<Option<Vec<OsString>>> {
        let mut names = Vec::new();
        for (count, entry) in std::fs::read_dir(dir)?.enumerate() {
            if count >= limit {
                return Ok(None);
            }
            names.push(entry?.file_name());
        }
        Ok(Some(names))
    }
}

#[cfg(any(test, feature = "testing"))]
pub use memory::MemoryFileSystem;

#[cfg(any(test, feature = "testing"))]
mod memory {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, PoisonError};

    use super::*;

    /// A file system held in memory, for tests: absolute paths to entries.
    /// Every ancestor of an added entry is a directory.
    #[derive(Debug, Default)]
    pub struct MemoryFileSystem {
        entries: Mutex<BTreeMap<PathBuf, Entry>>,
    }

    impl MemoryFileSystem {
        /// An empty file system (only `/`).
        pub fn new() -> Self {
            Self::default()
        }

        /// Adds a directory (and its ancestors).
        pub fn dir(&self, path: impl AsRef<Path>) -> &Self {
            self.add(path.as_ref(), Entry::Directory)
        }

        /// Adds a file (and the directories above it).
        pub fn file(&self, path: impl AsRef<Path>) -> &Self {
            self.add(path.as_ref(), Entry::Other)
        }

        /// Adds a symlink to `target` (and the directories above it).
        pub fn link(&self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> &Self {
            self.add(path.as_ref(), Entry::Link(target.as_ref().to_path_buf()))
        }

        fn add(&self, path: &Path, entry: Entry) -> &Self {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            for ancestor in path.ancestors().skip(1) {
                entries
                    .entry(ancestor.to_path_buf())
                    .or_insert(Entry::Directory);
            }
            entries.insert(path.to_path_buf(), entry);
            self
        }
    }

    impl FileSystemView for MemoryFileSystem {
        fn entry(&self, path: &Path) -> io::Result<Entry> {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if path == Path::new("/") {
                return Ok(Entry::Directory);
            }
            if let Some(entry) = entries.get(path) {
                return Ok(entry.clone());
            }
            let through_file = path
                .ancestors()
                .skip(1)
                .any(|ancestor| matches!(entries.get(ancestor), Some(Entry::Other)));
            Err(if through_file {
                io::ErrorKind::NotADirectory.into()
            } else {
                io::ErrorKind::NotFound.into()
            })
        }

        fn names(&self, dir: &Path, limit: usize) -> io::Result<Option<Vec<OsString>>> {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if dir != Path::new("/") && entries.get(dir) != Some(&Entry::Directory) {
                return Err(io::ErrorKind::NotFound.into());
            }
            let names: Vec<OsString> = entries
                .keys()
                .filter(|path| path.parent() == Some(dir))
                .filter_map(|path| path.file_name().map(|name| name.to_os_string()))
                .collect();
            Ok((names.len() <= limit).then_some(names))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_file_system_tells_links_directories_and_files_apart() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let fs = RealFileSystem;
        assert_eq!(fs.entry(&dir.path().join("d")).unwrap(), Entry::Directory);
        assert_eq!(fs.entry(&dir.path().join("f")).unwrap(), Entry::Other);
        assert_eq!(
            fs.entry(&dir.path().join("l")).unwrap(),
            Entry::Link(PathBuf::from("f"))
        );
        let missing = fs.entry(&dir.path().join("none")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let mut names = fs.names(dir.path(), 10).unwrap().unwrap();
        names.sort();
        assert_eq!(names, ["d", "f", "l"]);
        assert_eq!(fs.names(dir.path(), 2).unwrap(), None, "bounded");
    }

    #[test]
    fn the_memory_file_system_answers_as_the_real_one_does() {
        let fs = MemoryFileSystem::new();
        fs.file("/p/src/a.rs").link("/p/out", "/etc");
        assert_eq!(fs.entry(Path::new("/p")).unwrap(), Entry::Directory);
        assert_eq!(fs.entry(Path::new("/p/src/a.rs")).unwrap(), Entry::Other);
        assert_eq!(
            fs.entry(Path::new("/p/out")).unwrap(),
            Entry::Link(PathBuf::from("/etc"))
        );
        assert_eq!(
            fs.entry(Path::new("/p/nothing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            fs.entry(Path::new("/p/src/a.rs/x")).unwrap_err().kind(),
            io::ErrorKind::NotADirectory
        );
        assert_eq!(
            fs.names(Path::new("/p"), 10).unwrap().unwrap(),
            ["out", "src"]
        );
        assert_eq!(fs.names(Path::new("/p"), 1).unwrap(), None);
    }
}
