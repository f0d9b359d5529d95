//! Differences between two checkpoints, or a checkpoint and the work tree,
//! as data: which files were added, removed or modified, and how many lines
//! each gained and lost. [`parse_changes`] reads git's `diff-tree -z`
//! output (`--name-status` and `--numstat`) and is pure.

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
    fn malformed_output_is_an_error() {
        assert!(parse_changes(b"M\0", b"").is_err());
        assert!(parse_changes(b"X\0path\0", b"").is_err());
        assert!(parse_changes(b"M\0p\0", b"1\tp\0").is_err());
        assert_eq!(parse_changes(b"", b"").unwrap(), []);
    }
}
