//! Reading shell command lines as the permission engine needs them, with no
//! side effects beyond path resolution. One grammar, `tree-sitter-bash`,
//! reads every line: `syntax` builds from its tree the commands hard blocks
//! walk (a line it cannot read is refused), `bash_ast` reads the same tree
//! strictly for what is granted on a pattern, `read_only` says which command
//! lines only read, `hard_blocks` analyses destructive commands and
//! `git_config` says which `git config` commands set keys that run programs.

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod bash_ast;
pub mod git_config;
pub mod hard_blocks;
pub mod read_only;
pub mod syntax;

/// True when a command line only reads, judged by its text alone: every
/// program and flag in it is known to be read-only and nothing is redirected
/// to a file. The permission engine also checks that what it reads lies inside
/// the allowed roots; this function is what the execution plan uses to run
/// such a call concurrently with other read-only calls.
pub fn command_is_read_only(command: &str) -> bool {
    read_only::is_read_only_text(&bash_ast::analyse(command))
}
