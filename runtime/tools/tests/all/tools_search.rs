//! Normal behaviour of glob and grep through the registry.

use crate::tools_support;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tools_support::{Harness, err_text, ok_text};

fn set_mtime(path: &std::path::Path, secs_after_epoch: u64) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs_after_epoch))
        .unwrap();
}

fn project() -> Harness {
    let h = Harness::new();
    h.write(".gitignore", "target/\n*.log\n");
    set_mtime(&h.write("src/old.rs", "fn old() { needle(); }\n"), 1_000);
    set_mtime(
        &h.write("src/new.rs", "fn new() {}\n// NEEDLE\nneedle\n"),
        3_000,
    );
    set_mtime(&h.write("src/deep/mid.rs", "mod mid;\n"), 2_000);
    h.write("README.md", "the needle in docs\n");
    h.write("target/gen.rs", "needle ignored\n");
    h.write("debug.log", "needle ignored\n");
    h.write(".hidden/secret.rs", "needle hidden\n");
    h.write("data.bin", b"needle\0\x01\x02");
    h
}

#[tokio::test]
async fn glob_is_newest_first_and_respects_ignores() {
    let h = project();
    let out = ok_text(&h.call("glob", json!({"pattern": "**/*.rs"})).await);
    assert_eq!(out, "src/new.rs\nsrc/deep/mid.rs\nsrc/old.rs");
    let out = ok_text(&h.call("glob", json!({"pattern": "src/*.rs"})).await);
    assert_eq!(out, "src/new.rs\nsrc/old.rs");
    let out = ok_text(
        &h.call("glob", json!({"pattern": "*.rs", "path": "src/deep"}))
            .await,
    );
    assert_eq!(out, "src/deep/mid.rs");
    let out = ok_text(&h.call("glob", json!({"pattern": "*.{md,bin}"})).await);
    assert_eq!(out.lines().count(), 2, "{out}");
    let out = ok_text(&h.call("glob", json!({"pattern": "**/*.zig"})).await);
    assert_eq!(out, "No files match `**/*.zig` in `.`.");
    let err = err_text(&h.call("glob", json!({"pattern": "src/[unclosed"})).await);
    assert!(err.starts_with("Invalid glob `src/[unclosed`"), "{err}");
}

#[tokio::test]
async fn glob_caps_at_500() {
    let h = Harness::new();
    for i in 0..620 {
        h.write(&format!("many/f{i:04}.txt"), "");
    }
    let out = ok_text(&h.call("glob", json!({"pattern": "many/*.txt"})).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[500], "(showing 500 of 620; narrow the pattern)");
}

#[tokio::test]
async fn grep_modes() {
    let h = project();
    let out = ok_text(&h.call("grep", json!({"pattern": "needle"})).await);
    assert_eq!(out, "README.md\nsrc/new.rs\nsrc/old.rs");
    let out = ok_text(
        &h.call(
            "grep",
            json!({"pattern": "(?i)needle", "glob": "*.rs", "output_mode": "content"}),
        )
        .await,
    );
    assert_eq!(
        out,
        "src/new.rs:2:// NEEDLE\nsrc/new.rs:3:needle\nsrc/old.rs:1:fn old() { needle(); }"
    );
    let out = ok_text(
        &h.call("grep", json!({"pattern": "needle", "output_mode": "count"}))
            .await,
    );
    assert_eq!(
        out,
        "README.md:1\nsrc/new.rs:1\nsrc/old.rs:1\n(3 matching lines in 3 files)"
    );
    let out = ok_text(
        &h.call("grep", json!({"pattern": "needle", "path": "src/old.rs"}))
            .await,
    );
    assert_eq!(out, "src/old.rs");
    let out = ok_text(&h.call("grep", json!({"pattern": "absent_word"})).await);
    assert_eq!(out, "No matches for `absent_word` in `.`.");
}

#[tokio::test]
async fn grep_errors() {
    let h = project();
    let err = err_text(&h.call("grep", json!({"pattern": "a(b"})).await);
    assert!(err.starts_with("Invalid regex `a(b`:"), "{err}");
    let err = err_text(
        &h.call("grep", json!({"pattern": "x", "path": "nope"}))
            .await,
    );
    assert_eq!(err, "File not found: nope.");
    let err = err_text(
        &h.call("grep", json!({"pattern": "x", "output_mode": "lines"}))
            .await,
    );
    assert!(err.contains("output_mode"), "{err}");
}
