//! The agent crate's own code stays free of I/O: no clock, no file, no
//! environment, no tokio outside its tests; and free of what only an
//! interpreter may hold: no cancellation token, no lock or atomic shared
//! with other agents, no `tracing` span (the machines name spans with ids).
//! A word below found in product code fails here with the file and line, so
//! the machines stay sans-IO.

use std::path::{Path, PathBuf};

/// What product code of this crate must not name.
const FORBIDDEN: [&str; 18] = [
    "Instant::now",
    "Utc::now",
    "Local::now",
    "SystemTime::now",
    "std::fs",
    "tokio::",
    "tokio_util",
    "read_dir",
    "symlink_metadata",
    "std::env",
    "CancellationToken",
    "Mutex",
    "RwLock",
    "Atomic",
    "OnceLock",
    "Span::",
    "tracing::Span",
    "_span!",
];

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            into.push(path);
        }
    }
}

/// The product code of one file: a `tests.rs` file is a test module whole;
/// elsewhere everything from the first `#[cfg(test)]` on is (the crate keeps
/// its test modules last).
fn product_code(path: &Path, text: &str) -> String {
    if path.file_name().is_some_and(|name| name == "tests.rs") {
        return String::new();
    }
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

fn offences(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        for (number, line) in product_code(path, text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word}", path.display(), number + 1));
                }
            }
        }
    }
    found
}

#[test]
fn the_agent_crate_reads_no_clock_file_or_environment_and_holds_no_token_lock_or_span() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    assert!(paths.len() > 20, "the crate's sources: {paths:?}");
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect();
    let found = offences(&files);
    assert!(
        found.is_empty(),
        "I/O in troupe-agent's own code:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_what_it_looks_for_and_skips_tests() {
    let files = vec![
        (
            PathBuf::from("a.rs"),
            "fn f() { let t = std::time::Instant::now(); }\n#[cfg(test)]\nmod tests { fn g() { std::fs::read(\"x\"); } }\n"
                .to_string(),
        ),
        (PathBuf::from("b.rs"), "// std::env in a comment is fine\nfn h() { std::env::var(\"A\"); }\n".to_string()),
        (PathBuf::from("tests.rs"), "fn t() { tokio::spawn(async {}); }\n".to_string()),
        (
            PathBuf::from("c.rs"),
            "struct S { cancel: CancellationToken }\nfn k(s: &tracing::Span) { Span::none(); }\n".to_string(),
        ),
    ];
    assert_eq!(
        offences(&files),
        [
            "a.rs:1: Instant::now",
            "b.rs:2: std::env",
            "c.rs:1: CancellationToken",
            "c.rs:2: Span::",
            "c.rs:2: tracing::Span"
        ]
    );
}
