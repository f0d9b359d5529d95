//! `troupe completions SHELL` and `troupe man`: the shell completion script
//! and the manual page, both generated from the command-line definition
//! itself so they always list the commands and options that exist. Both are
//! printed to stdout for the person (or a package script) to install; `troupe
//! man --out-dir DIR` writes one page per command instead.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::{Cli, EXIT_RUNTIME};

/// The completion script of `shell` for the `troupe` command.
pub(crate) fn completion_script(shell: Shell) -> Vec<u8> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "troupe", &mut script);
    script
}

/// The manual page of the `troupe` command, in roff.
pub(crate) fn man_page() -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    Ok(page)
}

/// Writes `bytes` to stdout; returns the exit code.
fn print(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("troupe: cannot write to stdout: {err}");
            EXIT_RUNTIME
        }
    }
}

/// Runs `troupe completions SHELL`.
pub(crate) fn completions(shell: Shell) -> u8 {
    print(&completion_script(shell))
}

/// Runs `troupe man [--out-dir DIR]`: the page of `troupe` on stdout, or the
/// pages of `troupe` and of every subcommand written into `out_dir`.
pub(crate) fn man(out_dir: Option<&Path>) -> u8 {
    let Some(dir) = out_dir else {
        return match man_page() {
            Ok(page) => print(&page),
            Err(err) => {
                eprintln!("troupe: cannot render the manual page: {err}");
                EXIT_RUNTIME
            }
        };
    };
    let written =
        std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(Cli::command(), dir));
    match written {
        Ok(()) => {
            eprintln!("troupe: manual pages written to {}", dir.display());
            0
        }
        Err(err) => {
            eprintln!(
                "troupe: cannot write the manual pages to {}: {err}",
                dir.display()
            );
            EXIT_RUNTIME
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_completion_script_knows_the_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completion_script(shell)).unwrap();
            for name in ["run", "resume", "sessions", "trace", "demo"] {
                assert!(script.contains(name), "{shell}: {name} missing");
            }
        }
    }

    #[test]
    fn the_man_page_is_roff_naming_the_subcommands() {
        let page = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(page.contains(".TH troupe 1"), "{page}");
        for name in ["run", "resume", "sessions", "trace", "demo"] {
            assert!(
                page.contains(&format!("troupe\\-{name}")),
                "{name} missing: {page}"
            );
        }
    }
}
