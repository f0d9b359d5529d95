//! Protected paths (SPEC §5): the files that govern Troupe itself — the
//! project's `.troupe/` directory and `.mcp.json`, the user's Troupe
//! configuration directory and the data directory — are never written by
//! tools, in any mode, bypass included. A model that could edit them could
//! raise its own permissions for the next run.
//!
//! [`ProtectedPaths`] answers one question, pure apart from resolving its own
//! directories once at construction: does this absolute path lie in a
//! protected place, and which? The engine asks it for file-tool writes and the
//! shell analysis for the write targets it recognises (redirections, `tee`,
//! `cp`/`mv`/`install`/`ln` destinations, `dd of=`, `truncate`, `rm`).

use std::path::{Path, PathBuf};

use crate::PROJECT_DIR_NAME;
use crate::sandbox::resolve_path;

/// The project file that configures MCP servers for every tool of its kind.
pub(crate) const MCP_JSON: &str = ".mcp.json";

/// What a protected place is, for the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtectedKind {
    /// `<project>/.troupe/**`.
    ProjectConfig,
    /// `<project>/.mcp.json`.
    McpJson,
    /// The user's Troupe configuration directory.
    UserConfig,
    /// The data directory (sessions, spill files, the trust list).
    DataDir,
}

impl ProtectedKind {
    /// A few words naming it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::ProjectConfig => "the project's Troupe configuration (.troupe)",
            Self::McpJson => "the project's MCP server list (.mcp.json)",
            Self::UserConfig => "the user's Troupe configuration directory",
            Self::DataDir => "Troupe's data directory",
        }
    }

    /// Whether the place is a directory (every kind but `.mcp.json`).
    pub fn is_directory(self) -> bool {
        !matches!(self, Self::McpJson)
    }
}

/// The places tools never write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectedPaths {
    /// Directories and files, each as given and resolved, with their kind.
    places: Vec<(PathBuf, ProtectedKind)>,
    /// Directories inside a protected one that stay writable (the session's
    /// spill directory).
    exempt: Vec<PathBuf>,
}

impl ProtectedPaths {
    /// The project's own protected files under `project_root`.
    pub fn for_project(project_root: &Path) -> Self {
        let mut out = Self::default();
        out.add(
            &project_root.join(PROJECT_DIR_NAME),
            ProtectedKind::ProjectConfig,
        );
        out.add(&project_root.join(MCP_JSON), ProtectedKind::McpJson);
        out
    }

    /// Adds the user's configuration directory and the data directory;
    /// `exempt` directories inside them stay writable.
    pub fn with_user_dirs(
        mut self,
        config_dir: Option<&Path>,
        data_dir: Option<&Path>,
        exempt: &[PathBuf],
    ) -> Self {
        if let Some(dir) = config_dir {
            self.add(dir, ProtectedKind::UserConfig);
        }
        if let Some(dir) = data_dir {
            self.add(dir, ProtectedKind::DataDir);
        }
        for dir in exempt {
            self.exempt.push(dir.clone());
            if let Ok(resolved) = resolve_path(dir)
                && resolved != *dir
            {
                self.exempt.push(resolved);
            }
        }
        self
    }

    fn add(&mut self, path: &Path, kind: ProtectedKind) {
        self.places.push((path.to_path_buf(), kind));
        if let Ok(resolved) = resolve_path(path)
            && resolved != path
        {
            self.places.push((resolved, kind));
        }
    }

    /// Every protected place, each as given and as resolved.
    pub fn places(&self) -> impl Iterator<Item = &Path> {
        self.places.iter().map(|(place, _)| place.as_path())
    }

    /// The protected places that are files (as given and as resolved).
    pub fn file_places(&self) -> impl Iterator<Item = &Path> {
        self.places
            .iter()
            .filter(|(_, kind)| !kind.is_directory())
            .map(|(place, _)| place.as_path())
    }

    /// The user's configuration directory and the data directory (each as
    /// given and as resolved): Troupe's private places, which commands do
    /// not even read where the OS sandbox can hide them.
    pub fn private_places(&self) -> impl Iterator<Item = (&Path, ProtectedKind)> {
        self.places
            .iter()
            .filter(|(_, kind)| matches!(kind, ProtectedKind::UserConfig | ProtectedKind::DataDir))
            .map(|(place, kind)| (place.as_path(), *kind))
    }

    /// The directories inside protected places that stay writable.
    pub fn exempt(&self) -> impl Iterator<Item = &Path> {
        self.exempt.iter().map(PathBuf::as_path)
    }

    /// The protected place `path` (absolute, normalised) lies in, if any.
    pub fn covers(&self, path: &Path) -> Option<ProtectedKind> {
        if self.exempt.iter().any(|dir| path.starts_with(dir)) {
            return None;
        }
        self.places
            .iter()
            .find(|(place, _)| path.starts_with(place))
            .map(|(_, kind)| *kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_files_and_user_directories_are_covered() {
        let protected = ProtectedPaths::for_project(Path::new("/nonexistent/p")).with_user_dirs(
            Some(Path::new("/nonexistent/cfg/troupe")),
            Some(Path::new("/nonexistent/data")),
            &[PathBuf::from("/nonexistent/data/spill/s1")],
        );
        let cases = [
            ("/nonexistent/p/.troupe", Some(ProtectedKind::ProjectConfig)),
            (
                "/nonexistent/p/.troupe/config.toml",
                Some(ProtectedKind::ProjectConfig),
            ),
            ("/nonexistent/p/.mcp.json", Some(ProtectedKind::McpJson)),
            (
                "/nonexistent/cfg/troupe/config.toml",
                Some(ProtectedKind::UserConfig),
            ),
            (
                "/nonexistent/data/trusted.toml",
                Some(ProtectedKind::DataDir),
            ),
            ("/nonexistent/data/spill/s2/x", Some(ProtectedKind::DataDir)),
            ("/nonexistent/data/spill/s1/x", None),
            ("/nonexistent/p/src/main.rs", None),
            ("/nonexistent/p/.troupe-notes", None),
            ("/nonexistent/p/sub/.mcp.json", None),
            ("/nonexistent/cfg/other", None),
        ];
        for (path, expected) in cases {
            assert_eq!(protected.covers(Path::new(path)), expected, "{path}");
        }
    }
}
