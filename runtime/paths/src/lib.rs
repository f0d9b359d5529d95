//! Where a path leads, at the bottom of the house: [`sandbox`] resolves what
//! a path names (symlinks followed, `..` folded) and keeps tools inside the
//! allowed roots, [`protected`] lists the places that govern Troupe itself
//! and that no tool writes, and [`file_io`] opens and replaces files without
//! following a link swapped in after a check; [`view`] is what resolution
//! reads of the file system, behind a trait. This root names the places
//! Troupe keeps its own files in a project and in the user's configuration
//! directory.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod file_io;
pub mod protected;
pub mod sandbox;
pub mod view;

/// Name of the per-project directory at the project root (SPEC §1.2).
pub const PROJECT_DIR_NAME: &str = ".troupe";

/// Directory of skills under `.troupe/` and under the user config dir.
pub const SKILLS_DIR_NAME: &str = "skills";
