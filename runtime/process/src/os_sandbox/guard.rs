//! Protected files that no mount keeps read-only while a confined command
//! runs, put back when it ends.
//!
//! Two cases need it. A protected file that does not exist yet (`.mcp.json`,
//! `.git/commondir`) cannot be bound read-only, and cannot be made up front
//! since other programs read it as configuration: if the command creates it,
//! it is set aside. And where no mount namespace can be made, git's
//! configuration (`.git/config`, `.git/hooks/…`) stays writable, since git
//! must create files at the top of `.git`: its content is taken before the
//! command and compared after it, a change is set aside and the file
//! restored. Nothing is lost: what the command wrote is renamed with
//! [`SET_ASIDE_SUFFIX`], where no program reads it as configuration.
//!
//! [`verdict`] decides, purely, what to do with one file; [`WatchedFiles`]
//! takes the snapshots and carries the verdicts out.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Suffix of the name a protected file created or changed by a command is
/// moved to.
pub(crate) const SET_ASIDE_SUFFIX: &str = ".rejected";

/// Suffix of hook files git never runs (the samples `git init` writes).
const SAMPLE_SUFFIX: &str = ".sample";

/// Files larger than this are not guarded by content (git's configuration
/// is a few KB; a hook a few KB more).
const MAX_GUARDED_BYTES: u64 = 1024 * 1024;

/// What a guarded file is, before or after a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileState {
    /// Nothing is there.
    Missing,
    /// A regular file with this content and these permission bits.
    File {
        /// The bytes.
        content: Vec<u8>,
        /// The permission bits.
        mode: u32,
    },
    /// Something that cannot be restored by content: a directory, a link,
    /// a file too large.
    Other,
}

/// What to do with a guarded file once the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It is as before (or was never ours to restore).
    Keep,
    /// Move what is there aside; it did not exist before.
    SetAside,
    /// Move what is there aside and write the earlier content back.
    SetAsideAndRestore,
    /// It was removed: write the earlier content back.
    Restore,
}

/// The verdict for a file that was `before` and is `now`. Pure.
pub(crate) fn verdict(before: &FileState, now: &FileState) -> Verdict {
    match (before, now) {
        (_, _) if before == now => Verdict::Keep,
        // Something that could not be taken cannot be put back either.
        (FileState::Other, _) => Verdict::Keep,
        (FileState::Missing, _) => Verdict::SetAside,
        (FileState::File { .. }, FileState::Missing) => Verdict::Restore,
        (FileState::File { .. }, _) => Verdict::SetAsideAndRestore,
    }
}

/// Reads the state of `path`, not following a final link.
pub(crate) fn read_state(path: &Path) -> FileState {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return FileState::Missing;
    };
    if !meta.is_file() || meta.len() > MAX_GUARDED_BYTES {
        return FileState::Other;
    }
    match std::fs::read(path) {
        Ok(content) => FileState::File {
            content,
            mode: meta.permissions().mode() & 0o7777,
        },
        Err(_) => FileState::Other,
    }
}

/// One protected file a command created, changed or removed, and what was
/// done about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The protected file.
    pub path: PathBuf,
    /// Where what the command left there went, if anything was there.
    pub aside: Option<PathBuf>,
    /// Whether the earlier content was written back.
    pub restored: bool,
}

impl SetAside {
    /// One sentence for the command's result; `who` is "command" or "task".
    pub fn note(&self, who: &str) -> String {
        let path = self.path.display();
        match (&self.aside, self.restored) {
            (Some(aside), false) => format!(
                "the {who} created {path}, a file Troupe protects; it was moved to {} and has no effect",
                aside.display()
            ),
            (Some(aside), true) => format!(
                "the {who} changed {path}, a file Troupe protects; the change was moved to {} and the file restored",
                aside.display()
            ),
            (None, _) => {
                format!("the {who} removed {path}, a file Troupe protects; it was restored")
            }
        }
    }
}

/// A directory whose runnable entries are guarded (`.git/hooks`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct GuardedDir {
    dir: PathBuf,
    /// Whether it was a directory before.
    existed: bool,
    /// Its runnable entries before.
    entries: Vec<(OsString, FileState)>,
}

/// Protected files a confined command must leave as it found them; see the
/// module's documentation. [`WatchedFiles::set_aside_created`] puts them
/// back once the command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchedFiles {
    files: Vec<(PathBuf, FileState)>,
    dirs: Vec<GuardedDir>,
}

impl WatchedFiles {
    /// Files that do not exist now: whatever a command creates there is set
    /// aside.
    pub(crate) fn missing(paths: Vec<PathBuf>) -> Self {
        Self {
            files: paths
                .into_iter()
                .map(|path| (path, FileState::Missing))
                .collect(),
            dirs: Vec::new(),
        }
    }

    /// Adds `files` and the runnable entries of `dirs` as they are now.
    pub(crate) fn snapshot(&mut self, files: &[PathBuf], dirs: &[PathBuf]) {
        for path in files {
            self.files.push((path.clone(), read_state(path)));
        }
        for dir in dirs {
            let existed = std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir());
            let entries = if existed {
                runnable_entries(dir)
                    .into_iter()
                    .map(|name| {
                        let state = read_state(&dir.join(&name));
                        (name, state)
                    })
                    .collect()
            } else {
                Vec::new()
            };
            self.dirs.push(GuardedDir {
                dir: dir.clone(),
                existed,
                entries,
            });
        }
    }

    /// Whether nothing is watched.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty()
    }

    /// Puts every watched file back as it was: what the command created or
    /// changed is moved to its set-aside name (replacing an earlier one),
    /// earlier content is written back. Returns what was done, one entry
    /// per file. Safe to call again: a second call finds nothing to do.
    pub fn set_aside_created(&self) -> Vec<SetAside> {
        let mut done = Vec::new();
        for (path, before) in &self.files {
            apply(path, before, &mut done);
        }
        for guarded in &self.dirs {
            let is_dir = std::fs::symlink_metadata(&guarded.dir).is_ok_and(|meta| meta.is_dir());
            if !is_dir {
                if !guarded.existed {
                    continue;
                }
                // The directory was replaced or removed: set aside whatever
                // is there and make it again.
                let aside = set_aside(&guarded.dir);
                if let Err(err) = std::fs::create_dir_all(&guarded.dir) {
                    tracing::warn!(dir = %guarded.dir.display(), error = %err, "a protected directory cannot be made again");
                    continue;
                }
                if aside.is_some() {
                    done.push(SetAside {
                        path: guarded.dir.clone(),
                        aside,
                        restored: true,
                    });
                }
            }
            let mut names: Vec<OsString> = guarded
                .entries
                .iter()
                .map(|(name, _)| name.clone())
                .collect();
            for name in runnable_entries(&guarded.dir) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            for name in names {
                let before = guarded
                    .entries
                    .iter()
                    .find(|(known, _)| *known == name)
                    .map_or(FileState::Missing, |(_, state)| state.clone());
                apply(&guarded.dir.join(&name), &before, &mut done);
            }
        }
        done
    }
}

/// The entries of `dir` git may run: every name but samples and set-aside
/// files.
fn runnable_entries(dir: &Path) -> Vec<OsString> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = entries
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| {
            let text = name.to_string_lossy();
            !text.ends_with(SAMPLE_SUFFIX) && !text.ends_with(SET_ASIDE_SUFFIX)
        })
        .collect();
    names.sort();
    names
}

/// Carries out the verdict for `path`, recording what was done.
fn apply(path: &Path, before: &FileState, done: &mut Vec<SetAside>) {
    let now = read_state(path);
    let verdict = verdict(before, &now);
    let (aside, restore) = match verdict {
        Verdict::Keep => return,
        Verdict::SetAside => (set_aside(path), false),
        Verdict::SetAsideAndRestore => (set_aside(path), true),
        Verdict::Restore => (None, true),
    };
    let mut restored = false;
    if restore && let FileState::File { content, mode } = before {
        restored = match write_back(path, content, *mode) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "a protected file cannot be restored");
                false
            }
        };
    }
    if aside.is_some() || restored {
        done.push(SetAside {
            path: path.to_path_buf(),
            aside,
            restored,
        });
    }
}

/// Moves what is at `path` (a file, a link or a directory) to its set-aside
/// name, replacing an earlier one; the new path, or `None` when nothing
/// could be moved.
fn set_aside(path: &Path) -> Option<PathBuf> {
    std::fs::symlink_metadata(path).ok()?;
    let mut aside = path.as_os_str().to_owned();
    aside.push(SET_ASIDE_SUFFIX);
    let aside = PathBuf::from(aside);
    if std::fs::symlink_metadata(&aside).is_ok_and(|meta| meta.is_dir()) {
        let _ = std::fs::remove_dir_all(&aside);
    }
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::warn!(path = %path.display(), aside = %aside.display(), "a command created or changed a protected file; it was set aside");
            Some(aside)
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "a command created or changed a protected file that cannot be set aside");
            None
        }
    }
}

/// Writes `content` with `mode` to `path` (where nothing is now) through a
/// temporary file renamed over it, following no link on the way.
fn write_back(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    troupe_paths::file_io::replace_file(path, content, false)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileState {
        FileState::File {
            content: text.as_bytes().to_vec(),
            mode: 0o644,
        }
    }

    #[test]
    fn verdicts_put_every_change_back_and_keep_what_was_not_taken() {
        let cases = [
            (FileState::Missing, FileState::Missing, Verdict::Keep),
            (FileState::Missing, file("x"), Verdict::SetAside),
            (FileState::Missing, FileState::Other, Verdict::SetAside),
            (file("a"), file("a"), Verdict::Keep),
            (file("a"), file("b"), Verdict::SetAsideAndRestore),
            (
                file("a"),
                FileState::File {
                    content: b"a".to_vec(),
                    mode: 0o755,
                },
                Verdict::SetAsideAndRestore,
            ),
            (file("a"), FileState::Other, Verdict::SetAsideAndRestore),
            (file("a"), FileState::Missing, Verdict::Restore),
            (FileState::Other, file("a"), Verdict::Keep),
            (FileState::Other, FileState::Missing, Verdict::Keep),
        ];
        for (before, now, expected) in cases {
            assert_eq!(verdict(&before, &now), expected, "{before:?} → {now:?}");
        }
    }

    #[test]
    fn changed_created_and_removed_files_are_put_back_with_nothing_lost() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let commondir = dir.path().join("commondir");
        let hooks = dir.path().join("hooks");
        std::fs::write(&config, "[core]\n").unwrap();
        std::fs::create_dir(&hooks).unwrap();
        std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::write(hooks.join("post-merge.sample"), "sample").unwrap();
        let mut watched = WatchedFiles::default();
        watched.snapshot(
            &[config.clone(), commondir.clone()],
            std::slice::from_ref(&hooks),
        );

        std::fs::write(&config, "[core]\n\tfsmonitor = sh x\n").unwrap();
        std::fs::write(&commondir, "/elsewhere\n").unwrap();
        std::fs::remove_file(hooks.join("pre-commit")).unwrap();
        std::fs::write(hooks.join("post-checkout"), "#!/bin/sh\ntouch x\n").unwrap();
        std::fs::write(hooks.join("post-merge.sample"), "changed sample").unwrap();

        let done = watched.set_aside_created();
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "[core]\n");
        assert!(
            std::fs::read_to_string(dir.path().join("config.rejected"))
                .unwrap()
                .contains("fsmonitor")
        );
        assert!(!commondir.exists());
        assert!(dir.path().join("commondir.rejected").exists());
        assert_eq!(
            std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
        assert!(!hooks.join("post-checkout").exists());
        assert!(hooks.join("post-checkout.rejected").exists());
        // Samples never run: a change to one is left alone.
        assert_eq!(
            std::fs::read_to_string(hooks.join("post-merge.sample")).unwrap(),
            "changed sample"
        );
        let notes: Vec<String> = done.iter().map(|done| done.note("command")).collect();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("changed") && notes[0].contains("restored"));
        assert!(notes[1].contains("created"));
        assert!(notes.iter().any(|note| note.contains("removed")));
        // Everything is as before: a second call does nothing.
        assert!(watched.set_aside_created().is_empty());
    }

    #[test]
    fn a_replaced_hooks_directory_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = dir.path().join("hooks");
        std::fs::create_dir(&hooks).unwrap();
        std::fs::write(hooks.join("pre-push"), "#!/bin/sh\n").unwrap();
        let mut watched = WatchedFiles::default();
        watched.snapshot(&[], std::slice::from_ref(&hooks));
        std::fs::rename(&hooks, dir.path().join("old")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("evil"), &hooks).unwrap();
        let done = watched.set_aside_created();
        assert!(hooks.is_dir());
        assert_eq!(
            std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
            "#!/bin/sh\n"
        );
        assert!(
            std::fs::symlink_metadata(dir.path().join("hooks.rejected"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(done.len(), 2, "{done:?}");
    }
}
