//! Places the functions a run executes next to each other in the release
//! `troupe` executable.
//!
//! The kernel maps an executable's code into a process a page at a time, and
//! up to 64 KiB around each page touched. A run touches a few megabytes of
//! functions spread over the whole text segment, so far more of it becomes
//! resident than it executes. `link/hot-functions.txt` lists the functions the
//! whole-binary bench's runs execute (written by
//! `tests/benches/hot-functions.sh`); LLD's `--symbol-ordering-file` puts them
//! first, together. A name the build no longer has is skipped: a stale list
//! costs memory, never correctness.
//!
//! Only for release builds for `x86_64-unknown-linux-gnu` with the linker
//! Rust chooses there from 1.90 on (LLD): not with an older compiler, a
//! configured linker (`RUSTC_LINKER`) or linker flags in `RUSTFLAGS`.
//! `TROUPE_NO_FUNCTION_ORDER=1` turns it off (for a comparison).

use std::path::Path;
use std::process::Command;

/// The first Rust release whose `x86_64-unknown-linux-gnu` links with LLD.
const LLD_BY_DEFAULT_SINCE: u32 = 90;

fn main() {
    println!("cargo:rerun-if-changed=link/hot-functions.txt");
    println!("cargo:rerun-if-env-changed=TROUPE_NO_FUNCTION_ORDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let linker_flags = ["linker", "fuse-ld", "link-self-contained"];
    if var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("PROFILE") != "release"
        || !var("TROUPE_NO_FUNCTION_ORDER").is_empty()
        || !var("RUSTC_LINKER").is_empty()
        || linker_flags
            .iter()
            .any(|flag| var("CARGO_ENCODED_RUSTFLAGS").contains(flag))
        || rustc_minor(&var("RUSTC")).is_none_or(|minor| minor < LLD_BY_DEFAULT_SINCE)
    {
        return;
    }
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/hot-functions.txt");
    if !list.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=troupe=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    println!("cargo:rustc-link-arg-bin=troupe=-Wl,--no-warn-symbol-ordering");
}

/// The minor version of `rustc` (`rustc 1.95.0 (…)` gives 95).
fn rustc_minor(rustc: &str) -> Option<u32> {
    let output = Command::new(if rustc.is_empty() { "rustc" } else { rustc })
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("1"), Some(minor)) => minor.parse().ok(),
        _ => None,
    }
}
