//! `troupe sandbox status`: what the OS sandbox of commands does for the
//! directory given (the current one by default) on this machine — its project
//! root (whether it is a git repository, and how far writes reach when it is
//! `/` or the home directory), the configured mode and network switch, what the kernel offers (Landlock ABI,
//! namespaces), the directories commands may write and the places kept
//! read-only inside them, and every part of the configuration this kernel
//! cannot enforce. The exit code is 1 when something configured is not
//! enforced, so scripts can check it.

use std::path::PathBuf;

use clap::Subcommand;
use troupe_paths::sandbox::PathSandbox;
use troupe_process::os_sandbox::CommandSandbox;
use troupe_tools::output::session_spill_dir;

use crate::project::{Locations, RunOptions, configured_with_root};
use crate::setup::command_sandbox;
use crate::{EXIT_RUNTIME, EXIT_USAGE};

/// `troupe sandbox` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum SandboxCommand {
    /// Show how commands are confined here: mode, network, kernel support,
    /// writable directories, read-only places, and what is not enforced.
    /// Exits with 1 when something configured is not enforced.
    Status {
        /// Directory whose configuration is used (default: the current one).
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
}

/// The session id shown in the paths of a session's directories.
const SESSION_PLACEHOLDER: &str = "SESSION";

/// Runs `troupe sandbox`; returns the exit code.
pub(crate) fn sandbox(command: SandboxCommand) -> u8 {
    let SandboxCommand::Status { cwd } = command;
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let options = RunOptions {
        cwd,
        ..RunOptions::default()
    };
    let (config, root) = match configured_with_root(&locations, &options) {
        Ok(project) => (project.config, project.root),
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let spill_dir = session_spill_dir(&locations.data_dir, SESSION_PLACEHOLDER);
    let mut roots = vec![spill_dir.clone()];
    roots.extend(config.permissions.extra_roots.iter().cloned());
    let paths = match PathSandbox::new(&root, &roots, locations.home.clone()) {
        Ok(paths) => paths,
        Err(err) => {
            eprintln!("troupe: cannot resolve the allowed roots: {err}");
            return EXIT_USAGE;
        }
    };
    let sandbox = command_sandbox(&config, &paths, &locations, &spill_dir);
    let mut text = crate::root_guard::status_lines(&root, locations.home.as_deref()).join("\n");
    text.push('\n');
    text.push_str(&report(&sandbox));
    print!("{text}");
    if sandbox.notices().is_empty() {
        0
    } else {
        EXIT_RUNTIME
    }
}

/// The text `troupe sandbox status` prints.
fn report(sandbox: &CommandSandbox) -> String {
    let mut lines = sandbox.describe();
    lines.extend(troupe_process::os_sandbox::KernelSupport::probe().describe());
    if let Some(dir) = sandbox.temp_dir() {
        lines.push(format!("TMPDIR of commands: {}", dir.display()));
    }
    let notices = sandbox.notices();
    if sandbox.plan().is_some() && notices.is_empty() {
        lines.push("enforced: yes".to_owned());
    }
    for notice in notices {
        lines.push(format!("not enforced: {notice}"));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
