//! What the OS sandbox costs per command: starting `bash -c true` in its own
//! process group and containment, waiting for it, with and without the
//! sandbox.
//!
//! - `unconfined`: `spawn_shell_in` without a sandbox (mode `off`).
//! - `landlock_split`: workspace-write with Landlock only: the ruleset is
//!   built in the parent (one path descriptor per rule) and applied between
//!   fork and exec; the project root holds `.troupe`, so it is split into
//!   its entries.
//! - `landlock_namespaces`: workspace-write with a private mount namespace
//!   (`.troupe` and `.mcp.json` bound read-only) and Landlock.
//! - `landlock_namespaces_no_network`: the same with `network = false` (a
//!   network namespace as well).
//! - `landlock_namespaces_private`: `landlock_namespaces` as a session has
//!   it: the project (another one) is a git repository (its `.git` pinned,
//!   its configuration and hooks bound read-only), and the data directory
//!   and the user's configuration are hidden behind empty file systems, with
//!   the spill directory and the configuration's skills shown again.
//!
//! Results go to `docs/performance.md`, never into assertions.

use std::path::PathBuf;

use criterion::{Criterion, criterion_group};
use tokio_util::sync::CancellationToken;
use troupe_paths::protected::ProtectedPaths;
use troupe_process::os_sandbox::{CommandSandbox, KernelSupport};
use troupe_process::process_tree;
use troupe_process::{drive, spawn_shell_in};
use troupe_protocol::permission::{SandboxMode, SandboxSettings};

fn sandboxes(
    project: &std::path::Path,
    spill: &std::path::Path,
    private: (&std::path::Path, &std::path::Path, &std::path::Path),
) -> Vec<(&'static str, Option<CommandSandbox>)> {
    let support = KernelSupport::probe();
    let protected = ProtectedPaths::for_project(project);
    let roots: Vec<PathBuf> = vec![project.to_path_buf(), spill.to_path_buf()];
    let on = SandboxSettings {
        mode: SandboxMode::WorkspaceWrite,
        network: true,
    };
    let off_net = SandboxSettings {
        network: false,
        ..on
    };
    let split = KernelSupport {
        namespaces: None,
        ..support
    };
    let mut out = vec![("unconfined", None)];
    if support.landlock_abi > 0 {
        out.push((
            "landlock_split",
            Some(CommandSandbox::with_support(
                on, &roots, &protected, spill, split,
            )),
        ));
        if support.namespaces.is_some() {
            out.push((
                "landlock_namespaces",
                Some(CommandSandbox::with_support(
                    on, &roots, &protected, spill, support,
                )),
            ));
            out.push((
                "landlock_namespaces_no_network",
                Some(CommandSandbox::with_support(
                    off_net, &roots, &protected, spill, support,
                )),
            ));
            let (repository, config, data) = private;
            let roots: Vec<PathBuf> = vec![repository.to_path_buf(), spill.to_path_buf()];
            let with_private = ProtectedPaths::for_project(repository).with_user_dirs(
                Some(config),
                Some(data),
                &[spill.to_path_buf()],
            );
            out.push((
                "landlock_namespaces_private",
                Some(CommandSandbox::with_support(
                    on,
                    &roots,
                    &with_private,
                    spill,
                    support,
                )),
            ));
        }
    }
    out
}

fn spawn_cost(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let project = dir.path().join("project");
    let repository = dir.path().join("repository");
    let data = dir.path().join("data");
    let spill = data.join("spill/s1");
    let config = dir.path().join("config/troupe");
    for sub in [
        project.join(".troupe"),
        project.join("src"),
        repository.join(".troupe"),
        spill.clone(),
        config.join("skills"),
    ] {
        std::fs::create_dir_all(sub).expect("directory");
    }
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repository)
        .status()
        .expect("git");
    assert!(init.success());
    std::fs::write(project.join(".mcp.json"), "{}").expect(".mcp.json");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let mut group = c.benchmark_group("spawn_bash_true");
    for (name, sandbox) in sandboxes(&project, &spill, (&repository, &config, &data)) {
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let mut shell = spawn_shell_in(
                        "true",
                        &project,
                        &env,
                        process_tree::containment(),
                        sandbox.as_ref(),
                    )
                    .expect("spawn");
                    let outcome = drive(&mut shell, None, &CancellationToken::new(), |_| {}).await;
                    assert_eq!(outcome.status.and_then(|s| s.code()), Some(0));
                });
            });
        });
    }
    group.finish();
}

criterion_group!(benches, spawn_cost);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
