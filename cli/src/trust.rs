//! `troupe trust [DIR]`: lets the project that holds DIR (the current
//! directory by default) apply its whole `.troupe/config.toml` and
//! `.mcp.json`, including the settings and servers that widen what runs
//! unasked or where data goes, and its role files and skills; `--revoke`
//! takes that back. The list lives in the data directory (see
//! `troupe_config::trust`); nothing else is changed. What it prints names the
//! project's files that exist ([`project_files`]), never one it does not
//! have.

use std::path::Path;

use troupe_config::TrustStore;
use troupe_config::trust::{PROJECT_CONFIG_LABEL, project_root_of};

use crate::project::Locations;
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// Runs `troupe trust`; returns the exit code.
pub(crate) fn trust(dir: Option<&Path>, revoke: bool) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let dir = dir.unwrap_or(Path::new("."));
    let root = match project_root_of(dir) {
        Ok(root) => root,
        Err(err) => {
            eprintln!("troupe: {}: {err}", dir.display());
            return EXIT_USAGE;
        }
    };
    let store = TrustStore::new(&locations.data_dir);
    match store.set(&root, !revoke) {
        Ok(root) => {
            println!("{}", outcome(&root, &project_files(&root), revoke));
            0
        }
        Err(err) => {
            eprintln!("troupe: cannot update the trusted projects: {err}");
            EXIT_RUNTIME
        }
    }
}

/// The files of the project at `root` that trust governs and that exist, as
/// the project root names them.
fn project_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    if root.join(PROJECT_CONFIG_LABEL).is_file() {
        files.push(PROJECT_CONFIG_LABEL.to_owned());
    }
    if root.join(".mcp.json").is_file() {
        files.push(".mcp.json".to_owned());
    }
    if root.join(".troupe/agents").is_dir() {
        files.push("its role files (.troupe/agents)".to_owned());
    }
    if root.join(".troupe/skills").is_dir() {
        files.push("its skills (.troupe/skills)".to_owned());
    }
    files
}

/// What `troupe trust` says once the project at `root`, holding `files`, is
/// trusted (or, with `revoke`, no longer is).
fn outcome(root: &Path, files: &[String], revoke: bool) -> String {
    let root = root.display();
    match (revoke, files.is_empty()) {
        (false, false) => format!(
            "{root} is trusted; these now apply in full: {}",
            files.join(", ")
        ),
        (false, true) => format!(
            "{root} is trusted: it has no {PROJECT_CONFIG_LABEL}, .mcp.json, role files or \
             skills yet; what it adds applies in full"
        ),
        (true, false) => format!(
            "{root} is no longer trusted: of {}, what widens what runs or where data goes (MCP \
             servers, hooks, allow rules, …), role files and skills are ignored",
            files.join(", ")
        ),
        (true, true) => format!(
            "{root} is no longer trusted: it has no {PROJECT_CONFIG_LABEL}, .mcp.json, role \
             files or skills; what it adds that widens what runs or where data goes will be \
             ignored"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_the_project_has_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(project_files(dir.path()).is_empty());
        let said = outcome(Path::new("/p"), &[], false);
        assert_eq!(
            said,
            "/p is trusted: it has no .troupe/config.toml, .mcp.json, role files or skills yet; \
             what it adds applies in full"
        );
        std::fs::write(dir.path().join(".mcp.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.path().join(".troupe/agents")).unwrap();
        let files = project_files(dir.path());
        assert_eq!(files, [".mcp.json", "its role files (.troupe/agents)"]);
        let said = outcome(Path::new("/p"), &files, false);
        assert_eq!(
            said,
            "/p is trusted; these now apply in full: .mcp.json, its role files (.troupe/agents)"
        );
        assert!(!said.contains("config.toml"), "{said}");
        let said = outcome(Path::new("/p"), &files, true);
        assert!(said.starts_with("/p is no longer trusted: of .mcp.json, its role files"));
        assert!(!said.contains("config.toml"), "{said}");
        std::fs::write(dir.path().join(".troupe/config.toml"), "").unwrap();
        assert_eq!(project_files(dir.path())[0], ".troupe/config.toml");
    }
}
