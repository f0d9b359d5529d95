//! The user documentation stands on its own: no page of docs/ and not the
//! README cites the product specification ("SPEC", "§"), which users do not
//! have.

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_path_buf()
}

/// README.md and every file under docs/, recursively.
fn documentation() -> Vec<PathBuf> {
    let mut files = vec![workspace().join("README.md")];
    let mut dirs = vec![workspace().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn docs_and_readme_never_cite_the_specification() {
    let files = documentation();
    assert!(files.len() > 5, "{files:?}");
    let mut citations = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if line.contains("SPEC") || line.contains('§') {
                citations.push(format!("{}:{}: {line}", file.display(), number + 1));
            }
        }
    }
    assert!(
        citations.is_empty(),
        "the documentation must stand alone:\n{}",
        citations.join("\n")
    );
}
