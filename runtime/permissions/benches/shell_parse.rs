//! The cost of deciding a `bash` call (target: at most 100 µs for a typical
//! command): the whole permission decision through the public
//! [`PermissionEngine::decide`], which parses the line twice (the lenient
//! parser of the hard blocks and the strict tree-sitter-bash reading), looks
//! for hard blocks, classifies read-only commands (resolving the paths they
//! read), checks redirections and matches the allow rules.
//!
//! Lines: a typical build-and-filter command, a read-only pipeline, a longer
//! compound line with a here-document and a substitution, and a 4 KiB script.
//! Results go to `docs/performance.md`, never into assertions.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use troupe_config::PermissionSettings;
use troupe_paths::sandbox::PathSandbox;
use troupe_permissions::{PermissionEngine, PermissionRequest};
use troupe_protocol::permission::{PermissionMode, RuleEntry, RuleSource};
use troupe_protocol::permission::{PermissionSubject, ToolCategory};
use troupe_shell::command_is_read_only;

/// The lines decided, by name.
fn lines() -> Vec<(&'static str, String)> {
    let script: String = (0..100)
        .map(|i| format!("echo step {i} && cargo build -p crate{i} 2>&1 | tail -n 5\n"))
        .collect();
    vec![
        (
            "typical",
            "cargo test --all -- --nocapture 2>&1 | tail -n 50".to_owned(),
        ),
        ("read_only", "grep -rn 'fn main' src | wc -l".to_owned()),
        (
            "compound",
            "cd sub && make -j4 > build.log 2>&1; cat <<EOF > notes.md\nbuilt $(date)\nEOF\ngit status --short"
                .to_owned(),
        ),
        ("script_4k", script),
    ]
}

fn request(line: &str) -> PermissionRequest {
    PermissionRequest {
        tool_name: "bash".to_owned(),
        category: ToolCategory::Execute,
        read_only: false,
        subject: PermissionSubject::Command {
            command: line.to_owned(),
        },
    }
}

fn decide(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    let sandbox =
        Arc::new(PathSandbox::new(&project, &[], Some(dir.path().join("home"))).expect("sandbox"));
    let allow = ["Bash(cargo test*)", "Bash(git status*)", "Bash(echo *)"]
        .iter()
        .map(|rule| RuleEntry {
            rule: (*rule).to_owned(),
            source: RuleSource::User,
        })
        .collect();
    let settings = PermissionSettings {
        mode: PermissionMode::Default,
        allow,
        ..PermissionSettings::default()
    };
    let engine = PermissionEngine::new(&settings, sandbox).expect("engine");
    let mut group = c.benchmark_group("shell_parse/decide");
    for (name, line) in lines() {
        let request = request(&line);
        group.bench_with_input(BenchmarkId::from_parameter(name), &request, |b, request| {
            b.iter(|| black_box(engine.decide(black_box(request))));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("shell_parse/classify");
    for (name, line) in lines() {
        group.bench_with_input(BenchmarkId::from_parameter(name), &line, |b, line| {
            b.iter(|| black_box(command_is_read_only(black_box(line))));
        });
    }
    group.finish();
}

criterion_group!(benches, decide);
criterion_main!(benches);
