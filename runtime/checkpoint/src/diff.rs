//! Differences between two checkpoints, or a checkpoint and the work tree,
//! as data: which files were added, removed or modified, and how many lines
//! each gained and lost. [`parse_changes`] reads git's `diff-tree -z`
//! output (`--name-status` and `--numstat`) and is pure; [`parse_raw`] and
//! [`split_patches`] read what the unified patches of a few files are made
//! from (`--raw` and `-p`), also pure.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::CheckpointError;
use crate::record::Checkpoint;

/// What a diff compares a checkpoint with.
#[derive(Debug, Clone, Copy)]
pub enum DiffTarget<'a> {
    /// Another checkpoint.
    Checkpoint(&'a Checkpoint),
    /// The work tree as it is now (staged as a snapshot would stage it,
    /// without making a checkpoint).
    WorkTree,
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Absent before, present after.
    Added,
    /// Present before, absent after.
    Removed,
    /// Present in both, with other content, mode or type.
    Modified,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the project root.
    pub path: PathBuf,
    /// How it changed.
    pub kind: ChangeKind,
    /// Lines added (`None` for a binary file).
    pub lines_added: Option<u64>,
    /// Lines removed (`None` for a binary file).
    pub lines_removed: Option<u64>,
}

/// What changed between two trees, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointDiff {
    /// The tree compared from.
    pub from_tree: String,
    /// The tree compared to.
    pub to_tree: String,
    /// Every changed file.
    pub files: Vec<FileChange>,
}

impl CheckpointDiff {
    /// The files of one kind of change.
    pub fn of_kind(&self, kind: ChangeKind) -> impl Iterator<Item = &FileChange> {
        self.files.iter().filter(move |file| file.kind == kind)
    }

    /// Lines added and removed over all files (binary files count none).
    pub fn line_totals(&self) -> (u64, u64) {
        self.files.iter().fold((0, 0), |(added, removed), file| {
            (
                added + file.lines_added.unwrap_or(0),
                removed + file.lines_removed.unwrap_or(0),
            )
        })
    }
}

fn malformed(detail: &str) -> CheckpointError {
    CheckpointError::Output {
        command: "diff-tree".to_owned(),
        detail: detail.to_owned(),
    }
}

/// The changes named by `name_status` (`diff-tree -r -z --no-renames
/// --name-status`) with the line counts of `numstat` (`... --numstat`).
/// Pure.
pub fn parse_changes(
    name_status: &[u8],
    numstat: &[u8],
) -> Result<Vec<FileChange>, CheckpointError> {
    let mut files = Vec::new();
    let mut fields = name_status.split(|&b| b == 0).filter(|f| !f.is_empty());
    while let Some(status) = fields.next() {
        let path = fields
            .next()
            .ok_or_else(|| malformed("a status without a path"))?;
        let kind = match status.first() {
            Some(b'A') => ChangeKind::Added,
            Some(b'D') => ChangeKind::Removed,
            Some(b'M' | b'T') => ChangeKind::Modified,
            _ => return Err(malformed("an unknown status letter")),
        };
        files.push(FileChange {
            path: PathBuf::from(OsStr::from_bytes(path)),
            kind,
            lines_added: None,
            lines_removed: None,
        });
    }
    for line in numstat.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let mut parts = line.splitn(3, |&b| b == b'\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("a numstat line without three fields"));
        };
        let path = OsStr::from_bytes(path);
        if let Some(file) = files.iter_mut().find(|file| file.path.as_os_str() == path) {
            file.lines_added = count(added);
            file.lines_removed = count(removed);
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// A numstat count; `-` (a binary file) is `None`.
fn count(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Bounds on the patches [`crate::CheckpointStore::file_patches`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchLimits {
    /// The most files given a patch; the others are counted.
    pub max_files: usize,
    /// The largest file (before or after) whose patch is read; a larger one
    /// is [`PatchBody::TooLarge`].
    pub max_file_bytes: u64,
}

impl Default for PatchLimits {
    fn default() -> Self {
        Self {
            max_files: 100,
            max_file_bytes: 256 * 1024,
        }
    }
}

/// What a file's patch shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "body")]
pub enum PatchBody {
    /// git's unified patch of the file, from its `---`/`+++` lines (or its
    /// mode lines) on; empty when only the mode changed.
    Text {
        /// The patch (lossy UTF-8).
        patch: String,
    },
    /// A binary file: no lines to show.
    Binary,
    /// A file larger than [`PatchLimits::max_file_bytes`], before or after.
    TooLarge {
        /// Its larger size, in bytes.
        bytes: u64,
    },
}

/// The patch of one changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePatch {
    /// Relative to the project root.
    pub path: PathBuf,
    /// How it changed.
    pub kind: ChangeKind,
    /// What it shows.
    #[serde(flatten)]
    pub body: PatchBody,
}

/// The patches between two trees, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePatches {
    /// Each changed file, up to [`PatchLimits::max_files`].
    pub files: Vec<FilePatch>,
    /// Changed files beyond the bound, not listed.
    pub omitted: usize,
}

/// One entry of `diff-tree -r -z --raw --no-abbrev --no-renames`: a changed
/// path with the objects before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    /// The path, as git's bytes.
    pub path: Vec<u8>,
    /// How it changed.
    pub kind: ChangeKind,
    /// The object before (`None` when added) and its mode.
    pub old: Option<(String, String)>,
    /// The object after (`None` when removed) and its mode.
    pub new: Option<(String, String)>,
}

impl RawChange {
    /// Whether either side is a commit of a nested repository (a gitlink,
    /// mode 160000), which the store holds no object of.
    pub fn is_gitlink(&self) -> bool {
        [&self.old, &self.new]
            .into_iter()
            .flatten()
            .any(|(mode, _)| mode == "160000")
    }
}

/// The entries of `diff-tree -r -z --raw --no-abbrev --no-renames` output
/// (`:OLDMODE NEWMODE OLDID NEWID STATUS\0PATH\0` each). Pure.
pub fn parse_raw(raw: &[u8]) -> Result<Vec<RawChange>, CheckpointError> {
    let mut changes = Vec::new();
    let mut fields = raw.split(|&b| b == 0).filter(|f| !f.is_empty());
    while let Some(header) = fields.next() {
        let path = fields
            .next()
            .ok_or_else(|| malformed("a raw entry without a path"))?;
        let header = std::str::from_utf8(header)
            .ok()
            .and_then(|header| header.strip_prefix(':'))
            .ok_or_else(|| malformed("a raw entry without its ':'"))?;
        let parts: Vec<&str> = header.split(' ').collect();
        let [old_mode, new_mode, old_id, new_id, status] = parts[..] else {
            return Err(malformed("a raw entry without five fields"));
        };
        let side = |mode: &str, id: &str| {
            (!id.bytes().all(|b| b == b'0')).then(|| (mode.to_owned(), id.to_owned()))
        };
        let kind = match status.as_bytes().first() {
            Some(b'A') => ChangeKind::Added,
            Some(b'D') => ChangeKind::Removed,
            Some(b'M' | b'T') => ChangeKind::Modified,
            _ => return Err(malformed("an unknown status letter")),
        };
        if !crate::store::is_object_id(old_id) || !crate::store::is_object_id(new_id) {
            return Err(malformed("a raw entry without full object ids"));
        }
        changes.push(RawChange {
            path: path.to_vec(),
            kind,
            old: side(old_mode, old_id),
            new: side(new_mode, new_id),
        });
    }
    Ok(changes)
}

/// git's `-p` output for several files cut into each file's patch, in
/// order: each starts at a `diff --git ` line (a line of content starts
/// with ` `, `+` or `-`, so it is never one), and loses that line and the
/// `index` line of its header. Pure.
pub fn split_patches(patch: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(patch);
    let mut files: Vec<String> = Vec::new();
    let mut in_header = false;
    for line in text.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            files.push(String::new());
            in_header = true;
            continue;
        }
        let Some(current) = files.last_mut() else {
            continue;
        };
        if line.starts_with("--- ") || line.starts_with("@@") {
            in_header = false;
        }
        if in_header && line.starts_with("index ") {
            continue;
        }
        current.push_str(line);
    }
    files
}

/// Whether a file's patch (as [`split_patches`] gives it) says the file is
/// binary: no hunk, and git's `Binary files … differ` line. Pure.
pub fn is_binary_patch(patch: &str) -> bool {
    patch.lines().any(|line| line.starts_with("Binary files "))
        && !patch.lines().any(|line| line.starts_with("@@"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_line_counts_are_joined_by_path() {
        let name_status = b"M\0src/a b.rs\0A\0new\xff.bin\0D\0gone.txt\0T\0link\0";
        let numstat = b"3\t1\tsrc/a b.rs\0-\t-\tnew\xff.bin\x000\t2\tgone.txt\x001\t1\tlink\0";
        let files = parse_changes(name_status, numstat).unwrap();
        let summary: Vec<(String, ChangeKind, Option<u64>, Option<u64>)> = files
            .iter()
            .map(|f| {
                (
                    f.path.to_string_lossy().into_owned(),
                    f.kind,
                    f.lines_added,
                    f.lines_removed,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("gone.txt".into(), ChangeKind::Removed, Some(0), Some(2)),
                ("link".into(), ChangeKind::Modified, Some(1), Some(1)),
                ("new\u{fffd}.bin".into(), ChangeKind::Added, None, None),
                ("src/a b.rs".into(), ChangeKind::Modified, Some(3), Some(1)),
            ]
        );
        let diff = CheckpointDiff {
            files,
            ..CheckpointDiff::default()
        };
        assert_eq!(diff.line_totals(), (4, 4));
        assert_eq!(diff.of_kind(ChangeKind::Added).count(), 1);
    }

    #[test]
    fn raw_entries_name_both_sides_and_their_modes() {
        let zero = "0".repeat(40);
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let raw = format!(
            ":100644 100644 {a} {b} M\0dir/x y\0:000000 100755 {zero} {b} A\0new\0:100644 000000 {a} {zero} D\0gone\0:160000 160000 {a} {b} M\0sub\0"
        );
        let changes = parse_raw(raw.as_bytes()).unwrap();
        assert_eq!(changes.len(), 4);
        assert_eq!(changes[0].path, b"dir/x y");
        assert_eq!(changes[0].kind, ChangeKind::Modified);
        assert_eq!(changes[1].old, None);
        assert_eq!(changes[1].new, Some(("100755".into(), b.clone())));
        assert_eq!(changes[2].kind, ChangeKind::Removed);
        assert_eq!(changes[2].new, None);
        assert!(changes[3].is_gitlink() && !changes[0].is_gitlink());
        for bad in [
            format!("100644 100644 {a} {b} M\0p\0"),
            format!(":100644 {a} {b} M\0p\0"),
            format!(":100644 100644 {a} {b} X\0p\0"),
            format!(":100644 100644 abc {b} M\0p\0"),
            format!(":100644 100644 {a} {b} M\0"),
        ] {
            assert!(parse_raw(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(parse_raw(b"").unwrap(), []);
    }

    #[test]
    fn a_patch_of_several_files_is_cut_at_each_file_header() {
        let patch = b"diff --git a/a b/a\nindex 1..2 100644\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-diff --git x\n+index y\n\
diff --git a/bin b/bin\nnew file mode 100644\nindex 0..3\nBinary files /dev/null and b/bin differ\n\
diff --git a/m b/m\nold mode 100644\nnew mode 100755\n";
        let files = split_patches(patch);
        assert_eq!(files.len(), 3);
        assert_eq!(
            files[0],
            "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-diff --git x\n+index y\n"
        );
        assert!(!is_binary_patch(&files[0]));
        assert!(files[1].starts_with("new file mode 100644\nBinary files"));
        assert!(is_binary_patch(&files[1]));
        assert_eq!(files[2], "old mode 100644\nnew mode 100755\n");
        assert!(split_patches(b"").is_empty());
        assert!(split_patches(b"stray\n").is_empty());
    }

    #[test]
    fn malformed_output_is_an_error() {
        assert!(parse_changes(b"M\0", b"").is_err());
        assert!(parse_changes(b"X\0path\0", b"").is_err());
        assert!(parse_changes(b"M\0p\0", b"1\tp\0").is_err());
        assert_eq!(parse_changes(b"", b"").unwrap(), []);
    }
}
