//! `troupe trust [DIR]`: lets the project that holds DIR (the current
//! directory by default) apply its whole `.troupe/config.toml` and
//! `.mcp.json`, including the settings and servers that widen what runs
//! unasked or where data goes, and its role files and skills; `--revoke`
//! takes that back. The list lives in the data directory (see
//! `troupe_config::trust`); nothing else is changed.

use std::path::Path;

use troupe_config::TrustStore;
use troupe_config::paths;
use troupe_config::trust::project_root_of;

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
            let file = paths::project_config_file(&root);
            if revoke {
                println!(
                    "{} is no longer trusted: settings of {} that widen what runs or where data \
                     goes, its MCP servers, role files and skills are ignored",
                    root.display(),
                    file.display()
                );
            } else {
                println!(
                    "{} is trusted: {}, its .mcp.json, role files and skills apply in full",
                    root.display(),
                    file.display()
                );
            }
            0
        }
        Err(err) => {
            eprintln!("troupe: cannot update the trusted projects: {err}");
            EXIT_RUNTIME
        }
    }
}
