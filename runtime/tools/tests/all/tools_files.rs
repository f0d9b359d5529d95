//! Normal behaviour of read_file, write_file and edit_file through the registry.

use crate::tools_support;

use serde_json::json;
use tools_support::{Harness, err_text, ok_text};

#[tokio::test]
async fn read_file_numbers_lines_and_reports_totals() {
    let h = Harness::new();
    h.write("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    let out = ok_text(&h.call("read_file", json!({"path": "src/main.rs"})).await);
    assert_eq!(out, "1\tfn main() {\n2\t    println!(\"hi\");\n3\t}");
}

#[tokio::test]
async fn read_file_pages_with_offset_and_limit() {
    let h = Harness::new();
    let body: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    h.write("big.txt", body);
    let first = ok_text(&h.call("read_file", json!({"path": "big.txt"})).await);
    assert!(first.starts_with("1\tline 1\n"));
    assert!(first.contains("2000\tline 2000\n"));
    assert!(first.ends_with("(lines 1-2000 of 3000; 1000 more: call read_file with offset=2001)"));
    let next = ok_text(
        &h.call("read_file", json!({"path": "big.txt", "offset": 2001}))
            .await,
    );
    assert!(next.starts_with("2001\tline 2001\n"));
    assert!(next.ends_with("(lines 2001-3000 of 3000; end of file)"));
    let window = ok_text(
        &h.call(
            "read_file",
            json!({"path": "big.txt", "offset": 10, "limit": 2}),
        )
        .await,
    );
    assert_eq!(
        window,
        "10\tline 10\n11\tline 11\n(lines 10-11 of 3000; 2989 more: call read_file with offset=12)"
    );
}

#[tokio::test]
async fn read_file_special_cases() {
    let h = Harness::new();
    h.write("empty.txt", "");
    assert_eq!(
        ok_text(&h.call("read_file", json!({"path": "empty.txt"})).await),
        "(the file is empty)"
    );
    std::fs::create_dir_all(h.project.join("dir")).unwrap();
    let err = err_text(&h.call("read_file", json!({"path": "dir"})).await);
    assert!(
        err.contains("dir is a directory") && err.contains("glob"),
        "{err}"
    );
    let err = err_text(&h.call("read_file", json!({"path": "missing.txt"})).await);
    assert_eq!(err, "File not found: missing.txt.");
    h.write("short.txt", "a\n");
    let err = err_text(
        &h.call("read_file", json!({"path": "short.txt", "offset": 3}))
            .await,
    );
    assert!(
        err.contains("offset 3 is past the end of the file (1 line)"),
        "{err}"
    );
}

#[tokio::test]
async fn read_file_reads_spill_files() {
    let h = Harness::new();
    std::fs::create_dir_all(&h.spill).unwrap();
    std::fs::write(h.spill.join("bash-call_9.log"), "spilled\n").unwrap();
    let path = h.spill.join("bash-call_9.log");
    let out = ok_text(
        &h.call("read_file", json!({"path": path.to_str().unwrap()}))
            .await,
    );
    assert_eq!(out, "1\tspilled");
}

#[tokio::test]
async fn write_file_creates_parents_and_reports_overwrite() {
    let h = Harness::new();
    let out = ok_text(
        &h.call(
            "write_file",
            json!({"path": "a/b/new.txt", "content": "héllo"}),
        )
        .await,
    );
    assert_eq!(out, "Created a/b/new.txt (6 bytes).");
    assert_eq!(h.read("a/b/new.txt"), "héllo");
    let out = ok_text(
        &h.call("write_file", json!({"path": "a/b/new.txt", "content": "x"}))
            .await,
    );
    assert_eq!(out, "Overwrote a/b/new.txt (1 byte; it had 6 bytes).");
    assert_eq!(h.read("a/b/new.txt"), "x");
    std::fs::create_dir_all(h.project.join("adir")).unwrap();
    let err = err_text(
        &h.call("write_file", json!({"path": "adir", "content": "x"}))
            .await,
    );
    assert!(
        err.contains("`adir` names a directory, not a file"),
        "{err}"
    );
}

#[tokio::test]
async fn edit_file_replaces_unique_and_all() {
    let h = Harness::new();
    h.write("lib.rs", "let a = 1;\nlet b = 2;\nlet a2 = 1;\n");
    let out = ok_text(
        &h.call(
            "edit_file",
            json!({"path": "lib.rs", "old_string": "let b = 2;", "new_string": "let b = 3;"}),
        )
        .await,
    );
    assert_eq!(out, "Replaced 1 occurrence in lib.rs (line 2).");
    assert_eq!(h.read("lib.rs"), "let a = 1;\nlet b = 3;\nlet a2 = 1;\n");
    let out = ok_text(
        &h.call(
            "edit_file",
            json!({"path": "lib.rs", "old_string": "= 1;", "new_string": "= 9;", "replace_all": true}),
        )
        .await,
    );
    assert_eq!(out, "Replaced 2 occurrences in lib.rs (line 1, 3).");
    assert_eq!(h.read("lib.rs"), "let a = 9;\nlet b = 3;\nlet a2 = 9;\n");
}

#[tokio::test]
async fn edit_file_refusals_change_nothing() {
    let h = Harness::new();
    h.write("f.py", "def f():\n    return 1\n");
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "f.py", "old_string": "return 2", "new_string": "x"}),
        )
        .await,
    );
    assert!(
        err.starts_with("old_string was not found in f.py."),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "f.py", "old_string": "def f():\n  return 1", "new_string": "x"}),
        )
        .await,
    );
    assert!(
        err.contains("matches near line 1 if whitespace is ignored"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "f.py", "old_string": "f", "new_string": "f"}),
        )
        .await,
    );
    assert_eq!(
        err,
        "old_string and new_string are identical; nothing would change."
    );
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "f.py", "old_string": "", "new_string": "f"}),
        )
        .await,
    );
    assert!(err.contains("old_string is empty"), "{err}");
    assert_eq!(h.read("f.py"), "def f():\n    return 1\n");
}
