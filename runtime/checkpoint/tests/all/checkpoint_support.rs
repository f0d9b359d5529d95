//! Projects in temporary directories and what the tests read from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use troupe_checkpoint::{CheckpointStore, SnapshotMeta};

/// A data directory and a project directory, both temporary.
pub(crate) struct Project {
    _base: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) root: PathBuf,
}

impl Project {
    /// An empty project directory named `name`.
    pub(crate) fn named(name: &str) -> Self {
        let base = tempfile::tempdir().unwrap();
        let home = base.path().join("home");
        let root = base.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Self {
            _base: base,
            home,
            root,
        }
    }

    /// An empty project that is not a git repository.
    pub(crate) fn plain() -> Self {
        Self::named("project")
    }

    /// A git repository with `files` committed.
    pub(crate) fn repository(files: &[(&str, &str)]) -> Self {
        let project = Self::named("repository");
        project.git(&["init", "-q", "-b", "main"]);
        for (path, text) in files {
            project.write(path, text);
        }
        project.git(&["add", "-A"]);
        project.git(&["commit", "-q", "-m", "first"]);
        project
    }

    /// Runs the user's git in the project.
    pub(crate) fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=U", "-c", "user.email=u@example.com"])
            .args(args)
            .current_dir(&self.root)
            .env_remove("GIT_DIR")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("GIT_WORK_TREE")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    pub(crate) fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub(crate) fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).unwrap()
    }

    pub(crate) fn exists(&self, relative: &str) -> bool {
        self.path(relative).symlink_metadata().is_ok()
    }

    /// Runs `script` with bash in the project, as a command would change it.
    pub(crate) fn bash(&self, script: &str) {
        let status = Command::new("bash")
            .args(["-c", script])
            .current_dir(&self.root)
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }

    /// The git directory of the project's store (the only one in `home`).
    pub(crate) fn store_dir(&self) -> PathBuf {
        std::fs::read_dir(self.home.join("checkpoints"))
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path()
    }

    pub(crate) async fn store(&self) -> CheckpointStore {
        CheckpointStore::open(&self.home, &self.root).await.unwrap()
    }
}

/// A snapshot's description for `session`, turn `turn`.
pub(crate) fn meta(session: &str, turn: u64) -> SnapshotMeta {
    SnapshotMeta {
        session: session.to_owned(),
        run: "run-1".to_owned(),
        turn,
        agent_path: "main".to_owned(),
        tool_call_ids: vec![format!("call-{turn}")],
        kind: Default::default(),
    }
}

/// Every file below `dir` (relative path → content; a symbolic link's
/// target prefixed by `->`), directories included as empty entries.
pub(crate) fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                let mut bytes = b"->".to_vec();
                bytes.extend(target.as_os_str().as_encoded_bytes());
                out.insert(relative, bytes);
            } else if kind.is_dir() {
                out.insert(relative, Vec::new());
                pending.push(path);
            } else {
                out.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `contents` of the project without its `.git`.
pub(crate) fn work_tree(project: &Project) -> BTreeMap<PathBuf, Vec<u8>> {
    contents(&project.root)
        .into_iter()
        .filter(|(path, _)| !path.starts_with(".git"))
        .collect()
}
