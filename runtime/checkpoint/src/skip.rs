//! What a snapshot leaves out, decided from the project's untracked entries.
//!
//! "Untracked" means: not in the user's git index when the project is a git
//! repository (git's own `ls-files --others --directory` list: a directory
//! none of whose files the user tracks is one entry), and any file when it is
//! not (the same list against an empty index, honouring the `.gitignore`
//! files: each top-level entry not ignored). Ignored paths are never listed:
//! they are left out without being skipped. Of the untracked entries, a
//! snapshot skips:
//! - any entry inside or naming a build or dependency folder
//!   ([`BUILD_FOLDERS`]), as that folder, and the build folders inside an
//!   untracked directory that is kept;
//! - a directory holding [`MAX_UNTRACKED_DIR_FILES`] files or more (counted
//!   below it, outside build folders; counting stops there);
//! - a file larger than [`MAX_UNTRACKED_FILE_BYTES`].
//!
//! Tracked files are never skipped, whatever their size or folder. The
//! store's own exclude file ([`build_folder_excludes`]) keeps build folders
//! from ever being read while staging. Only untracked entries are looked
//! at, and a large directory is counted only up to the limit, so deciding
//! stays fast. [`classify`] and [`build_folder_of`] are pure.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Untracked files larger than this are skipped (10 MiB).
pub const MAX_UNTRACKED_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Untracked directories holding this many files or more are skipped.
pub const MAX_UNTRACKED_DIR_FILES: usize = 200;

/// Build and dependency folders: skipped wherever they are untracked.
pub const BUILD_FOLDERS: [&str; 14] = [
    "node_modules",
    "target",
    ".venv",
    "venv",
    "dist",
    "build",
    "__pycache__",
    ".cache",
    ".gradle",
    ".next",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    "bower_components",
];

/// Why a path was left out of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SkipReason {
    /// An untracked file over [`MAX_UNTRACKED_FILE_BYTES`].
    LargeFile {
        /// Its size.
        bytes: u64,
    },
    /// An untracked directory of [`MAX_UNTRACKED_DIR_FILES`] files or more.
    ManyFiles {
        /// How many were counted (counting stops at the limit).
        at_least: usize,
    },
    /// An untracked build or dependency folder ([`BUILD_FOLDERS`]).
    BuildFolder,
}

/// A path a snapshot left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Relative to the project root, `/`-separated (a name that is not
    /// UTF-8 is shown with replacement characters).
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// A path left out, with its exact bytes (for git) and its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkippedPath {
    /// The path as git wrote it, without a trailing `/`.
    pub raw: Vec<u8>,
    /// What the record says.
    pub skipped: Skipped,
}

impl SkippedPath {
    /// Whether it is a build folder (ignored by the store).
    pub(crate) fn is_build_folder(&self) -> bool {
        self.skipped.reason == SkipReason::BuildFolder
    }
}

/// What is known of one untracked entry when deciding on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A file of this many bytes.
    File(u64),
    /// A directory holding at least this many files outside build folders
    /// (counting stopped at [`MAX_UNTRACKED_DIR_FILES`]).
    Dir(usize),
}

/// A measured untracked entry: its [`Measure`], and for a directory the
/// build folders found inside it (paths relative to the project).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Measured {
    pub measure: Measure,
    pub build_folders: Vec<Vec<u8>>,
}

impl From<Measure> for Measured {
    fn from(measure: Measure) -> Self {
        Self {
            measure,
            build_folders: Vec::new(),
        }
    }
}

/// The build folder that `path` (`/`-separated) is or lies in: its prefix
/// up to and including the first component named in [`BUILD_FOLDERS`].
/// Pure.
pub fn build_folder_of(path: &[u8]) -> Option<&[u8]> {
    let mut start = 0;
    for part in path.split(|&b| b == b'/') {
        let end = start + part.len();
        if BUILD_FOLDERS.iter().any(|name| name.as_bytes() == part) {
            return Some(&path[..end]);
        }
        start = end + 1;
    }
    None
}

/// Whether an untracked entry measured as `measure` is skipped, and why.
/// Pure.
pub fn classify(measure: Measure) -> Option<SkipReason> {
    match measure {
        Measure::File(bytes) if bytes > MAX_UNTRACKED_FILE_BYTES => {
            Some(SkipReason::LargeFile { bytes })
        }
        Measure::Dir(files) if files >= MAX_UNTRACKED_DIR_FILES => {
            Some(SkipReason::ManyFiles { at_least: files })
        }
        _ => None,
    }
}

/// The untracked entries of git's `-z` list that a snapshot skips, each once
/// (entries inside one build folder collapse into it, and build folders
/// inside a directory that is kept are skipped on their own). `measure` is
/// asked only about entries no build folder covers; `None` (the entry
/// vanished) skips nothing.
pub(crate) fn skipped_entries<M>(listing: &[u8], mut measure: M) -> Vec<SkippedPath>
where
    M: FnMut(&[u8], bool) -> Option<Measured>,
{
    let mut out: Vec<SkippedPath> = Vec::new();
    let mut push = |raw: &[u8], reason: SkipReason| {
        if !out.iter().any(|seen| seen.raw == raw) {
            out.push(SkippedPath {
                raw: raw.to_vec(),
                skipped: Skipped {
                    path: String::from_utf8_lossy(raw).into_owned(),
                    reason,
                },
            });
        }
    };
    for entry in listing.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let is_dir = entry.ends_with(b"/");
        let path = entry.strip_suffix(b"/").unwrap_or(entry);
        // The root itself is never skipped.
        if path.is_empty() || path == b"." {
            continue;
        }
        if let Some(folder) = build_folder_of(path) {
            push(folder, SkipReason::BuildFolder);
            continue;
        }
        let Some(measured) = measure(path, is_dir) else {
            continue;
        };
        match classify(measured.measure) {
            Some(reason) => push(path, reason),
            None => {
                for folder in &measured.build_folders {
                    push(folder, SkipReason::BuildFolder);
                }
            }
        }
    }
    out
}

/// Measures the untracked entry `path` (relative to `root`): a file's size
/// or a directory's file count, up to the limit, with the build folders in
/// it. Symbolic links count as small files and are not followed.
pub(crate) fn measure_entry(root: &Path, path: &[u8], is_dir: bool) -> Option<Measured> {
    let full = root.join(OsStr::from_bytes(path));
    if is_dir {
        let (files, folders) = count_files(&full, MAX_UNTRACKED_DIR_FILES);
        let build_folders = folders
            .iter()
            .filter_map(|folder| folder.strip_prefix(root).ok())
            .map(|relative| relative.as_os_str().as_bytes().to_vec())
            .collect();
        return Some(Measured {
            measure: Measure::Dir(files),
            build_folders,
        });
    }
    let meta = std::fs::symlink_metadata(&full).ok()?;
    Some(Measure::File(if meta.is_file() { meta.len() } else { 0 }).into())
}

/// The number of files below `dir` (symbolic links count, directories do
/// not), counting no further than `limit`, and the build folders found,
/// whose files are not counted.
fn count_files(dir: &Path, limit: usize) -> (usize, Vec<PathBuf>) {
    let mut count = 0;
    let mut build_folders = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => {
                    let name = entry.file_name();
                    if BUILD_FOLDERS
                        .iter()
                        .any(|folder| name.as_bytes() == folder.as_bytes())
                    {
                        build_folders.push(entry.path());
                    } else {
                        pending.push(entry.path());
                    }
                }
                Ok(_) => count += 1,
                Err(_) => {}
            }
            if count >= limit {
                return (count, build_folders);
            }
        }
    }
    (count, build_folders)
}

/// The NUL-separated pathspecs of `git add -A` for a snapshot: the whole
/// work tree but each skipped path (literally: no character of a name is a
/// wildcard). Pure.
pub(crate) fn add_pathspecs(skipped: &[SkippedPath]) -> Vec<u8> {
    let mut out = b".\0".to_vec();
    // Build folders are the store's ignored paths already; git refuses to
    // be given an ignored name, even to leave it out.
    for path in skipped.iter().filter(|path| !path.is_build_folder()) {
        out.extend_from_slice(b":(exclude,literal)");
        out.extend_from_slice(&path.raw);
        out.push(0);
    }
    out
}

/// The store's `info/exclude`: every build folder, at any depth. Pure.
pub fn build_folder_excludes() -> String {
    let mut out = String::from("# Build and dependency folders: never staged unless tracked.\n");
    for name in BUILD_FOLDERS {
        out.push_str(name);
        out.push_str("/\n");
    }
    out
}

/// The NUL-separated literal pathspecs naming each of `paths`. Pure.
pub(crate) fn literal_pathspecs<'a>(paths: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for path in paths {
        out.extend_from_slice(b":(literal)");
        out.extend_from_slice(path);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_folder_is_found_at_any_depth_by_whole_name() {
        assert_eq!(build_folder_of(b"node_modules"), Some(&b"node_modules"[..]));
        assert_eq!(
            build_folder_of(b"web/node_modules/x/y.js"),
            Some(&b"web/node_modules"[..])
        );
        assert_eq!(
            build_folder_of(b"a/target/b/target"),
            Some(&b"a/target"[..])
        );
        assert_eq!(build_folder_of(b"src/targets/x"), None);
        assert_eq!(build_folder_of(b"my_node_modules"), None);
        assert_eq!(build_folder_of(b""), None);
    }

    #[test]
    fn limits_are_exclusive_for_files_and_inclusive_for_directories() {
        assert_eq!(classify(Measure::File(MAX_UNTRACKED_FILE_BYTES)), None);
        assert_eq!(
            classify(Measure::File(MAX_UNTRACKED_FILE_BYTES + 1)),
            Some(SkipReason::LargeFile {
                bytes: MAX_UNTRACKED_FILE_BYTES + 1
            })
        );
        assert_eq!(classify(Measure::Dir(199)), None);
        assert_eq!(
            classify(Measure::Dir(200)),
            Some(SkipReason::ManyFiles { at_least: 200 })
        );
    }

    #[test]
    fn entries_in_one_build_folder_collapse_and_others_are_measured() {
        let listing = b"node_modules/a.js\0node_modules/b/c.js\0big.bin\0many/\0small.txt\0\0";
        let mut asked = Vec::new();
        let skipped = skipped_entries(listing, |path, is_dir| {
            asked.push((String::from_utf8_lossy(path).into_owned(), is_dir));
            let measure = match path {
                b"big.bin" => Measure::File(MAX_UNTRACKED_FILE_BYTES + 1),
                b"many" => Measure::Dir(200),
                _ => Measure::File(1),
            };
            Some(measure.into())
        });
        let paths: Vec<&str> = skipped.iter().map(|s| s.skipped.path.as_str()).collect();
        assert_eq!(paths, ["node_modules", "big.bin", "many"]);
        assert_eq!(skipped[0].skipped.reason, SkipReason::BuildFolder);
        assert_eq!(
            asked,
            [
                ("big.bin".to_owned(), false),
                ("many".to_owned(), true),
                ("small.txt".to_owned(), false)
            ]
        );
    }

    #[test]
    fn skipped_names_stay_literal_in_pathspecs() {
        assert_eq!(
            skipped_entries(b"./\0/\0", |_, _| Some(Measure::Dir(500).into())),
            []
        );
        let skipped = skipped_entries(b"a*[b]? c/\0", |_, _| Some(Measure::Dir(500).into()));
        assert_eq!(add_pathspecs(&skipped), b".\0:(exclude,literal)a*[b]? c\0");
        assert_eq!(
            literal_pathspecs(skipped.iter().map(|s| s.raw.as_slice())),
            b":(literal)a*[b]? c\0"
        );
        assert_eq!(add_pathspecs(&[]), b".\0");
        let folder = skipped_entries(b"node_modules/\0", |_, _| None);
        assert_eq!(add_pathspecs(&folder), b".\0");
    }

    #[test]
    fn build_folders_inside_a_kept_directory_are_skipped_on_their_own() {
        let skipped = skipped_entries(b"web/\0small/\0", |path, _| {
            let folders = if path == b"web" {
                vec![b"web/node_modules".to_vec(), b"web/a/dist".to_vec()]
            } else {
                Vec::new()
            };
            Some(Measured {
                measure: Measure::Dir(3),
                build_folders: folders,
            })
        });
        let paths: Vec<&str> = skipped.iter().map(|s| s.skipped.path.as_str()).collect();
        assert_eq!(paths, ["web/node_modules", "web/a/dist"]);
    }

    #[test]
    fn every_build_folder_is_excluded_as_a_directory() {
        let excludes = build_folder_excludes();
        assert_eq!(excludes.lines().count(), BUILD_FOLDERS.len() + 1);
        assert!(excludes.lines().any(|line| line == "node_modules/"));
        assert!(excludes.lines().skip(1).all(|line| line.ends_with('/')));
    }

    #[test]
    fn counting_stops_at_the_limit_and_passes_over_build_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::create_dir_all(dir.path().join("a/b/node_modules/x")).unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("a/b/{i}")), "").unwrap();
            std::fs::write(dir.path().join(format!("a/b/node_modules/x/{i}")), "").unwrap();
        }
        std::fs::write(dir.path().join("a/top"), "").unwrap();
        let (count, folders) = count_files(&dir.path().join("a"), 100);
        assert_eq!(count, 6);
        assert_eq!(folders, [dir.path().join("a/b/node_modules")]);
        assert_eq!(count_files(&dir.path().join("a"), 3).0, 3);
        assert_eq!(count_files(&dir.path().join("missing"), 3).0, 0);
        let measured = measure_entry(dir.path(), b"a", true).unwrap();
        assert_eq!(measured.build_folders, [b"a/b/node_modules".to_vec()]);
    }
}
