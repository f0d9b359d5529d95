//! Hard blocks (SPEC §5): destructive commands and writes that are refused in
//! every mode, `bypass` included, before any rule is looked at.
//!
//! This module owns the analysis of one command line: it parses it with
//! [`super::syntax`] (refusing a line the grammar cannot read: nothing may
//! hide behind a syntax error), walks every simple command (compound lines, `$(…)`,
//! backticks, process substitution, `bash -c`/`sh -c`/`su -c`/`eval` scripts,
//! here-documents and literal text fed to a shell, `find -exec`, and the
//! `sudo`/`env`/`nohup`/`time`/`xargs`/`parallel`/… prefixes, with the
//! arguments literal input feeds `xargs` and `parallel`), and reports the
//! first hard block it meets plus a view of every simple command for rule
//! matching. It also decides whether a file path lies in the project's `.git`
//! internals; which `git config` lines are refused is `git_config`'s. It does
//! not decide anything else (rules, modes and the sandbox are `engine`'s) and
//! runs nothing; its only contact with the file system is the path resolver
//! it is handed.
//!
//! The analysis follows the working directory through `cd` (tracking every
//! directory a line could be in, so `cd build; rm -rf *` is seen to delete the
//! project if `cd` fails, while `cd build && rm -rf *` is not, and every
//! directory of a `CDPATH` the line sets), and the descriptors an `exec`
//! connects to the network. It does not evaluate variables other than
//! `$HOME`, `$PWD` and `CDPATH`, arithmetic or encodings: hard blocks
//! stop accidents and the common destructive idioms, they are not a sandbox for
//! deliberately obfuscated code (that is what `ask` and the modes are for).
//!
//! This module holds the public types and the walk itself (scripts,
//! pipelines, redirections, prefixes, the working directory, nesting); what
//! a program does is checked by its family, one module each: [`delete`],
//! [`devices`], [`power`], [`network`], [`protected`] and [`nested`]. The
//! static table `DISPATCH` maps a program's base name to its family's
//! handler.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use super::git_config::git_config_change;
use super::syntax::{
    self, AndOr, Command, Connector, MAX_PARSE_BYTES, Pipeline, RedirOp, Redirect, Script,
    SimpleCommand, Unreadable, Word,
};
use troupe_paths::protected::{ProtectedKind, ProtectedPaths};

mod delete;
mod devices;
mod nested;
mod network;
mod power;
mod protected;
#[cfg(test)]
mod tests;

use self::delete::*;
use self::devices::*;
use self::nested::*;
use self::network::*;
use self::power::*;

/// Substitutions, `bash -c` scripts and `eval` strings nested deeper than this
/// are refused as too complex to check (SPEC §15: bad input is a clear error).
pub const MAX_COMMAND_NESTING: usize = 8;

/// How many possible working directories are tracked through `cd`; past this
/// the analysis stops assuming where relative paths point.
pub const MAX_TRACKED_DIRECTORIES: usize = 8;

/// Most commands a line may run for items of literal input that `xargs -I`
/// or `parallel` feed them, over the whole line (nested ones included);
/// a line that feeds more cannot be checked.
pub const MAX_FED_RUNS: usize = 256;

/// Words that start a command without being its program.
const TRANSPARENT_WORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "esac",
];

/// Words that stand for the current directory.
const CWD_WORDS: &[&str] = &["$PWD", "${PWD}", "$(pwd)", "`pwd`"];

/// A program that runs the rest of its arguments as a command: its name, the
/// options that take a separate argument, and how many operands come before the
/// command (`timeout DURATION cmd`).
struct Prefix {
    name: &'static str,
    options_with_argument: &'static [&'static str],
    operands: usize,
}

/// Command prefixes that are looked through to the command they run.
const PREFIXES: &[Prefix] = &[
    Prefix {
        name: "sudo",
        options_with_argument: &[
            "-u",
            "-g",
            "-h",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
            "-R",
            "--user",
            "--group",
            "--host",
            "--prompt",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--close-from",
            "--command-timeout",
            "--chroot",
        ],
        operands: 0,
    },
    Prefix {
        name: "doas",
        options_with_argument: &["-u", "-C"],
        operands: 0,
    },
    Prefix {
        name: "env",
        options_with_argument: &["-u", "-C", "-S", "--unset", "--chdir"],
        operands: 0,
    },
    Prefix {
        name: "nohup",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "time",
        options_with_argument: &["-f", "-o"],
        operands: 0,
    },
    Prefix {
        name: "nice",
        options_with_argument: &["-n", "--adjustment"],
        operands: 0,
    },
    Prefix {
        name: "chroot",
        options_with_argument: &["--userspec", "--groups"],
        operands: 1,
    },
    Prefix {
        name: "unshare",
        options_with_argument: &[
            "-S", "-G", "--setuid", "--setgid", "-R", "-w", "--root", "--wd",
        ],
        operands: 0,
    },
    Prefix {
        name: "runuser",
        options_with_argument: &[
            "-u",
            "-g",
            "-G",
            "--user",
            "--group",
            "--supp-group",
            "-s",
            "--shell",
        ],
        operands: 0,
    },
    Prefix {
        name: "strace",
        options_with_argument: &[
            "-o", "-p", "-e", "-s", "-u", "-E", "-a", "-b", "-P", "-I", "-X", "-O", "-S",
        ],
        operands: 0,
    },
    Prefix {
        name: "ltrace",
        options_with_argument: &["-o", "-p", "-e", "-s", "-u", "-a", "-n"],
        operands: 0,
    },
    Prefix {
        name: "taskset",
        options_with_argument: &[],
        operands: 1,
    },
    Prefix {
        name: "flock",
        options_with_argument: &["-w", "-E", "--timeout", "--conflict-exit-code"],
        operands: 1,
    },
    Prefix {
        name: "ionice",
        options_with_argument: &["-c", "-n", "-p", "-P", "-u"],
        operands: 0,
    },
    Prefix {
        name: "timeout",
        options_with_argument: &["-s", "-k", "--signal", "--kill-after"],
        operands: 1,
    },
    Prefix {
        name: "command",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "exec",
        options_with_argument: &["-a"],
        operands: 0,
    },
    Prefix {
        name: "builtin",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "xargs",
        options_with_argument: &[
            "-I",
            "-n",
            "-P",
            "-L",
            "-s",
            "-d",
            "-E",
            "-a",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
        ],
        operands: 0,
    },
    Prefix {
        name: "parallel",
        options_with_argument: &[
            "-a",
            "--arg-file",
            "--arg-sep",
            "--arg-file-sep",
            "-C",
            "--colsep",
            "-d",
            "--delimiter",
            "-E",
            "-I",
            "-j",
            "--jobs",
            "-P",
            "--max-procs",
            "-L",
            "--max-lines",
            "-n",
            "--max-args",
            "-N",
            "-S",
            "--sshlogin",
            "--slf",
            "--sshloginfile",
            "--tmpdir",
            "--tagstring",
            "--results",
            "--res",
            "--joblog",
            "--workdir",
            "--wd",
            "--env",
            "--timeout",
            "--delay",
            "--halt",
            "--memfree",
            "--load",
            "--retries",
            "--basefile",
            "--bf",
            "--return",
            "--transferfile",
            "--tf",
            "--block",
            "--recstart",
            "--recend",
            "--rpl",
            "--limit",
            "--termseq",
            "--ssh",
        ],
        operands: 0,
    },
    Prefix {
        name: "pkexec",
        options_with_argument: &["--user"],
        operands: 0,
    },
    Prefix {
        name: "stdbuf",
        options_with_argument: &["-i", "-o", "-e"],
        operands: 0,
    },
    Prefix {
        name: "setsid",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "busybox",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "toybox",
        options_with_argument: &[],
        operands: 0,
    },
    Prefix {
        name: "watch",
        options_with_argument: &["-n", "--interval"],
        operands: 0,
    },
];

/// Which hard block refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HardBlockKind {
    /// Recursive `rm` of `/`, a top-level directory, home, or the project root.
    RecursiveDelete,
    /// `mkfs*`.
    Format,
    /// `dd of=/dev/…`, redirections and copies onto devices.
    DeviceWrite,
    /// A function that calls itself twice in a pipe or in the background.
    ForkBomb,
    /// `chmod -R`/`chown -R`/`chgrp -R` on `/`, a top-level directory or home.
    RecursivePermissions,
    /// Downloaded content executed by a shell or interpreter.
    PipeToShell,
    /// `shutdown`, `reboot`, `halt`, `poweroff`, `init 0/6`.
    PowerOff,
    /// Writes into the project's `.git` internals.
    GitInternals,
    /// Writes into the files that govern Troupe itself.
    ProtectedConfig,
    /// `git config` setting a key that makes git run a program or look for
    /// hooks or configuration elsewhere.
    GitConfig,
    /// Nesting too deep to check.
    TooComplex,
    /// Shell syntax the grammar cannot read (a syntax error, a missing
    /// token, a line past the length limit): nothing may hide behind it.
    Unreadable,
}

/// A hard block with the sentence that explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardBlock {
    /// Which block.
    pub(crate) kind: HardBlockKind,
    /// A sentence for the model and the person.
    pub reason: String,
}

/// The closing words of every hard-block reason.
const EVERY_MODE: &str = "This is refused in every mode, bypass included.";

impl HardBlock {
    fn new(kind: HardBlockKind, detail: &str) -> Self {
        let label = match kind {
            HardBlockKind::RecursiveDelete => "recursive delete of a protected directory",
            HardBlockKind::Format => "formatting a file system",
            HardBlockKind::DeviceWrite => "raw write to a device",
            HardBlockKind::ForkBomb => "fork bomb",
            HardBlockKind::RecursivePermissions => {
                "recursive permission change on a system directory"
            }
            HardBlockKind::PipeToShell => "downloaded code piped to a shell",
            HardBlockKind::PowerOff => "power off or reboot",
            HardBlockKind::GitInternals => "write into .git internals",
            HardBlockKind::ProtectedConfig => "write to Troupe's own configuration",
            HardBlockKind::GitConfig => "git configuration that names a program",
            HardBlockKind::TooComplex => "command too deeply nested to check",
            HardBlockKind::Unreadable => "command that cannot be read",
        };
        Self {
            kind,
            reason: format!("hard block ({label}): {detail}. {EVERY_MODE}"),
        }
    }

    /// The block for `action` (e.g. "writing `.troupe/config.toml`"), which
    /// would change a protected place.
    pub fn protected(action: &str, kind: ProtectedKind) -> Self {
        Self::new(
            HardBlockKind::ProtectedConfig,
            &format!(
                "{action} would change {}, which tools never change; tell the user what should change there and why: the user must make that change",
                kind.describe()
            ),
        )
    }

    /// The block for a file write into `.git` internals.
    pub fn git_write(path: &Path) -> Self {
        Self::new(
            HardBlockKind::GitInternals,
            &format!(
                "`{}` is inside the repository's .git directory; change the repository with git commands instead",
                path.display()
            ),
        )
    }
}

/// What the analysis needs to know about the surroundings.
pub struct ShellContext<'a> {
    /// The resolved project root (the working directory of commands).
    pub project_root: &'a Path,
    /// The home directory, resolved, when known.
    pub home: Option<&'a Path>,
    /// Resolves symlinks of an absolute path; `None` when it cannot.
    pub resolve: &'a dyn Fn(&Path) -> Option<PathBuf>,
    /// The places no command may write.
    pub protected: &'a ProtectedPaths,
}

/// One simple command as rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandView {
    /// The command's source text.
    pub source: String,
    /// Its words after quote removal, joined by single spaces.
    pub words: String,
    /// Its words from the program on (prefixes such as `sudo`, `env`, `nohup`
    /// and leading assignments dropped), joined by single spaces.
    pub effective: String,
}

/// The result of analysing one command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandAnalysis {
    /// The first hard block met, if any.
    pub block: Option<HardBlock>,
    /// Every simple command of the line, nested ones included.
    pub commands: Vec<CommandView>,
}

/// Analyses a command line run in the project root.
pub fn analyse_command(line: &str, ctx: &ShellContext<'_>) -> CommandAnalysis {
    let mut walker = Walker {
        ctx,
        block: None,
        views: Vec::new(),
        cdpath: None,
        network_fds: Vec::new(),
        fed_runs: 0,
        inherited: None,
    };
    let script = syntax::parse_line(line);
    walker.fork_bombs(&script);
    walker.script(&script, &[Some(ctx.project_root.to_path_buf())], 0);
    walker.unreadable(&script, line, "the command");
    CommandAnalysis {
        block: walker.block,
        commands: walker.views,
    }
}

/// True when `path` (absolute) lies in a `.git` directory of the project (or is
/// one).
pub fn in_git_internals(path: &Path, project_root: &Path) -> bool {
    path.strip_prefix(project_root)
        .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
}

/// Lexical normalisation of an absolute path: `.` dropped, `..` applied
/// ([`troupe_paths::file_io::lexical_normalize`]).
pub fn normalize(path: &Path) -> PathBuf {
    troupe_paths::file_io::lexical_normalize(path)
}

/// A possible working directory; `None` when it cannot be known.
type Cwd = Option<PathBuf>;

fn push_unique<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

fn cap_cwds(mut cwds: Vec<Cwd>) -> Vec<Cwd> {
    if cwds.len() > MAX_TRACKED_DIRECTORIES {
        cwds.truncate(MAX_TRACKED_DIRECTORIES - 1);
        push_unique(&mut cwds, None);
    }
    cwds
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Multi-call programs whose name may carry a suffix (`busybox-x86_64`,
/// `toybox.static`): they run the applet named by their first argument.
const MULTI_CALL: &[&str] = &["busybox", "toybox"];

/// The prefix a word names, by its base name.
fn prefix_named(word: &str) -> Option<&'static Prefix> {
    let name = basename(word);
    PREFIXES.iter().find(|p| {
        p.name == name
            || (MULTI_CALL.contains(&p.name)
                && name
                    .strip_prefix(p.name)
                    .is_some_and(|rest| rest.starts_with(['-', '.', '_'])))
    })
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Index of the word that names the program actually run, after assignments,
/// reserved words and prefixes such as `sudo -u root`, `env X=1`, `timeout 5`.
pub fn effective_start(words: &[&str]) -> usize {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        if is_assignment(word) || TRANSPARENT_WORDS.contains(word) {
            i += 1;
            continue;
        }
        let Some(prefix) = prefix_named(word) else {
            break;
        };
        i += 1;
        while let Some(arg) = words.get(i) {
            if *arg == "--" {
                i += 1;
                break;
            }
            if arg.starts_with('-') && arg.len() > 1 {
                // `-iu root`: a cluster of short flags whose last one takes
                // the next word.
                let cluster_takes = !arg.starts_with("--")
                    && arg.len() > 2
                    && !arg.contains('=')
                    && arg.chars().last().is_some_and(|last| {
                        prefix
                            .options_with_argument
                            .contains(&format!("-{last}").as_str())
                    });
                i += if prefix.options_with_argument.contains(arg) || cluster_takes {
                    2
                } else {
                    1
                };
            } else if prefix.name == "env" && is_assignment(arg) {
                i += 1;
            } else {
                break;
            }
        }
        i += prefix.operands;
    }
    i.min(words.len())
}

fn is_home_literal(base: &str) -> bool {
    matches!(base, "~" | "$HOME" | "${HOME}") || (base.starts_with('~') && !base.contains('/'))
}

/// What a protected path is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Protected {
    Root,
    TopLevel(PathBuf),
    Home,
    ProjectRoot,
    AboveProject(PathBuf),
}

impl Protected {
    fn describe(&self) -> String {
        match self {
            Self::Root => "the filesystem root".to_owned(),
            Self::TopLevel(path) => format!("the top-level directory `{}`", path.display()),
            Self::Home => "the home directory".to_owned(),
            Self::ProjectRoot => "the project root".to_owned(),
            Self::AboveProject(path) => {
                format!("`{}`, which contains the project", path.display())
            }
        }
    }

    fn is_system(&self) -> bool {
        matches!(self, Self::Root | Self::TopLevel(_) | Self::Home)
    }
}

struct Walker<'c, 'a> {
    ctx: &'c ShellContext<'a>,
    block: Option<HardBlock>,
    views: Vec<CommandView>,
    /// `CDPATH` as the line last set it (`cd` then searches it).
    cdpath: Option<String>,
    /// Descriptors of the shell that an `exec` redirection connected to the
    /// network (`exec 3<>/dev/tcp/host/80`).
    network_fds: Vec<u32>,
    /// Commands checked so far for items fed by `xargs -I` or `parallel`.
    fed_runs: usize,
    /// What the subshell or group being walked reads on its standard input.
    inherited: Option<Stream>,
}

/// What a family's handler is given: one command from its program on.
struct Call<'w> {
    /// The program's base name.
    program: &'w str,
    /// Its arguments.
    args: &'w [Word],
    /// The directories it may run in.
    cwds: &'w [Cwd],
    /// How deeply the command is nested in substitutions and scripts.
    depth: usize,
}

/// Checks a command of its family; returns the directories after it when
/// the command changes them (`cd`), `None` when it leaves them.
type Handler = fn(&mut Walker<'_, '_>, &Call<'_>) -> Option<Vec<Cwd>>;

/// The families of hard blocks, one module each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// [`delete`]: `rm`, `find -delete`, `rsync --delete`.
    Delete,
    /// [`devices`]: raw device writes, formatting, partitions.
    Devices,
    /// [`power`]: shutting down and rebooting.
    Power,
    /// [`network`]: netcat and `socat` running programs.
    Network,
    /// [`protected`]: `.git` internals, Troupe's files, permissions.
    Protected,
    /// [`nested`]: shells, interpreters, `eval`, `source`, `su`, `script`.
    Nested,
    /// The working directory: `cd`, `pushd`, `popd`.
    Directory,
}

/// How a table entry recognises a program, by its base name.
enum Programs {
    /// One of these names.
    Named(&'static [&'static str]),
    /// Any name the test accepts.
    Matching(fn(&str) -> bool),
}

/// One entry of [`DISPATCH`].
struct Dispatch {
    /// The programs it handles.
    programs: Programs,
    /// The family they belong to (what the tests check).
    #[cfg_attr(not(test), allow(dead_code))]
    family: Family,
    /// What checks them.
    handler: Handler,
}

const fn named(names: &'static [&'static str], family: Family, handler: Handler) -> Dispatch {
    Dispatch {
        programs: Programs::Named(names),
        family,
        handler,
    }
}

const fn matching(test: fn(&str) -> bool, family: Family, handler: Handler) -> Dispatch {
    Dispatch {
        programs: Programs::Matching(test),
        family,
        handler,
    }
}

/// Which family checks which program; the first entry that recognises a
/// program handles it (so `perl` edits in place and is not checked as an
/// interpreter). Programs not listed run no check of their own; their
/// substitutions, redirections and prefixes are checked all the same.
static DISPATCH: &[Dispatch] = &[
    named(&["rm"], Family::Delete, delete::rm),
    named(&["dd"], Family::Devices, devices::dd),
    named(
        &["shred", "wipefs", "blkdiscard"],
        Family::Devices,
        devices::destroy,
    ),
    named(&["tee"], Family::Protected, protected::tee),
    named(
        &["cp", "mv", "install", "ln", "link"],
        Family::Protected,
        protected::copy,
    ),
    named(&["git"], Family::Protected, protected::git),
    matching(network::is_netcat, Family::Network, network::netcat),
    named(&["socat"], Family::Network, network::socat),
    named(&["truncate"], Family::Protected, protected::truncate),
    named(
        &["chmod", "chown", "chgrp"],
        Family::Protected,
        protected::permissions,
    ),
    named(&["init", "telinit"], Family::Power, power::runlevel),
    named(&["systemctl"], Family::Power, power::systemctl),
    named(&["cd", "pushd"], Family::Directory, change_directory),
    named(&["popd"], Family::Directory, pop_directory),
    named(&["find"], Family::Delete, delete::find),
    named(&["rsync"], Family::Delete, delete::rsync),
    named(&["script"], Family::Nested, nested::script),
    named(&["sed"], Family::Protected, protected::sed),
    named(&["perl"], Family::Protected, protected::perl),
    named(&["tar"], Family::Protected, protected::tar),
    named(&["kexec"], Family::Power, power::kexec),
    named(
        &["mkswap", "mkdosfs", "mkexfatfs", "mkntfs"],
        Family::Devices,
        devices::format,
    ),
    named(
        &["sfdisk", "parted", "cryptsetup"],
        Family::Devices,
        devices::partition,
    ),
    named(&["eval"], Family::Nested, nested::eval),
    named(&["source", "."], Family::Nested, nested::source),
    named(&["su"], Family::Nested, nested::su),
    matching(devices::is_mkfs, Family::Devices, devices::format),
    matching(power::is_power_program, Family::Power, power::program),
    matching(nested::is_shell, Family::Nested, nested::shell),
    matching(is_interpreter, Family::Nested, nested::interpreter),
];

/// The entry that handles `program` (a base name).
fn dispatch(program: &str) -> Option<&'static Dispatch> {
    DISPATCH.iter().find(|entry| match entry.programs {
        Programs::Named(names) => names.contains(&program),
        Programs::Matching(test) => test(program),
    })
}

/// `cd DIR` and `pushd DIR`.
fn change_directory(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    Some(walker.cd(call.args, call.cwds))
}

/// `popd`: where it returns to is not known.
fn pop_directory(_: &mut Walker<'_, '_>, _: &Call<'_>) -> Option<Vec<Cwd>> {
    Some(vec![None])
}

/// What flows through a pipe into the next command, when the line says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stream {
    /// Text printed literally (`echo /`, `printf`, `cat <<EOF`).
    Text(String),
    /// Paths listed one per item (`find /` starts with `/`; `ls` lists `*`).
    Paths(Vec<String>),
}

impl Walker<'_, '_> {
    fn block(&mut self, kind: HardBlockKind, detail: &str) {
        if self.block.is_none() {
            self.block = Some(HardBlock::new(kind, detail));
        }
    }

    fn script(&mut self, script: &Script, cwds: &[Cwd], depth: usize) -> Vec<Cwd> {
        if script.too_deep {
            self.block(
                HardBlockKind::TooComplex,
                "the command nests subshells or groups too deeply to be checked",
            );
        }
        let mut current = cwds.to_vec();
        for list in &script.lists {
            let after = self.and_or(list, &current, depth);
            if !list.background {
                current = after;
            }
        }
        current
    }

    /// Walks an and-or list, tracking which directories each pipeline may run
    /// in: after `cd X`, success moves on to X, failure stays.
    fn and_or(&mut self, list: &AndOr, cwds: &[Cwd], depth: usize) -> Vec<Cwd> {
        let mut states: Vec<(Cwd, bool)> = cwds.iter().cloned().map(|c| (c, true)).collect();
        let pipelines = std::iter::once((None, &list.first))
            .chain(list.rest.iter().map(|(conn, p)| (Some(*conn), p)));
        for (connector, pipeline) in pipelines {
            let (running, skipped): (Vec<_>, Vec<_>) =
                states.into_iter().partition(|(_, ok)| match connector {
                    None => true,
                    Some(Connector::And) => *ok,
                    Some(Connector::Or) => !*ok,
                });
            let mut run_cwds = Vec::new();
            for (cwd, _) in running {
                push_unique(&mut run_cwds, cwd);
            }
            let mut next = skipped;
            if !run_cwds.is_empty() {
                let success = self.pipeline(pipeline, &run_cwds, depth);
                for cwd in cap_cwds(success) {
                    push_unique(&mut next, (cwd, true));
                }
                for cwd in run_cwds {
                    push_unique(&mut next, (cwd, false));
                }
            }
            states = next;
        }
        let mut out = Vec::new();
        for (cwd, _) in states {
            push_unique(&mut out, cwd);
        }
        cap_cwds(out)
    }

    /// Walks a pipeline; returns the directories after it succeeds.
    fn pipeline(&mut self, pipeline: &Pipeline, cwds: &[Cwd], depth: usize) -> Vec<Cwd> {
        let mut downloaded = false;
        // Literal text (echo, printf, a here-document) piped into a shell is
        // shell source: it is checked like a `-c` script.
        let mut piped_text: Vec<String> = Vec::new();
        for (position, command) in pipeline.commands.iter().enumerate() {
            if self.executes_stdin(command) {
                if downloaded {
                    self.block(
                        HardBlockKind::PipeToShell,
                        "downloaded content is piped into a shell or interpreter; download the script, read it, then run it",
                    );
                }
                for text in &piped_text {
                    self.nested(text, cwds, depth);
                }
            }
            downloaded |= self.downloads(command, depth, position > 0);
            if downloaded
                && let Command::Simple(simple) = command
                && process_substitution_executes(simple)
            {
                self.block(
                    HardBlockKind::PipeToShell,
                    "downloaded content is fed to a shell or interpreter through a process substitution; download the script, read it, then run it",
                );
            }
            if let Command::Simple(simple) = command
                && let Some(text) = printed_by(simple, depth)
            {
                piped_text.push(text);
            }
        }
        let single = pipeline.commands.len() == 1;
        let mut after = cwds.to_vec();
        // The first command reads what the enclosing subshell or group reads.
        let mut stream: Option<Stream> = self.inherited.clone();
        for (position, command) in pipeline.commands.iter().enumerate() {
            let input = Input {
                stream: stream.as_ref(),
                piped: position > 0,
            };
            let result = self.command(command, cwds, depth, input);
            if single {
                after = result;
            }
            stream = command_output(command, stream, depth);
        }
        after
    }

    fn command(
        &mut self,
        command: &Command,
        cwds: &[Cwd],
        depth: usize,
        input: Input<'_>,
    ) -> Vec<Cwd> {
        match command {
            Command::Simple(simple) => self.simple(simple, cwds, depth, input),
            Command::Subshell(script) => {
                let saved = std::mem::replace(&mut self.inherited, input.stream.cloned());
                self.script(script, cwds, depth);
                self.inherited = saved;
                cwds.to_vec()
            }
            Command::Group(script) => {
                let saved = std::mem::replace(&mut self.inherited, input.stream.cloned());
                let after = self.script(script, cwds, depth);
                self.inherited = saved;
                after
            }
            Command::Function { body, .. } => {
                self.script(body, cwds, depth);
                cwds.to_vec()
            }
        }
    }

    /// Parses and walks nested shell source (a substitution, a `-c` script).
    fn nested(&mut self, source: &str, cwds: &[Cwd], depth: usize) {
        if depth + 1 > MAX_COMMAND_NESTING {
            self.block(
                HardBlockKind::TooComplex,
                &format!(
                    "the command nests substitutions or shells more than {MAX_COMMAND_NESTING} levels deep and cannot be checked"
                ),
            );
            return;
        }
        let script = syntax::parse(source);
        self.fork_bombs(&script);
        self.script(&script, cwds, depth + 1);
        self.unreadable(&script, source, "a script the command runs");
    }

    /// Refuses a line (or nested script) the grammar could not read. The
    /// readable parts were walked first, so a more specific block wins.
    fn unreadable(&mut self, script: &Script, source: &str, what: &str) {
        let Some(unreadable) = script.unreadable else {
            return;
        };
        let detail = match unreadable {
            Unreadable::Syntax(offset) => {
                let near: String = source
                    .get(offset..)
                    .unwrap_or("")
                    .chars()
                    .take(24)
                    .collect();
                let near = if near.trim().is_empty() {
                    "at the end".to_owned()
                } else {
                    format!("near `{}`", near.trim_end())
                };
                format!(
                    "the shell syntax of {what} cannot be read at byte {offset} ({near}), and a command could hide behind the error; rewrite it so that it parses (close every quote, bracket and here-document) and run it again"
                )
            }
            Unreadable::TooLong => format!(
                "{what} is longer than {MAX_PARSE_BYTES} bytes, more than can be read; split it into smaller commands"
            ),
            Unreadable::NoTree => {
                format!("the shell parser gave no reading of {what}; rewrite it and run it again")
            }
        };
        self.block(HardBlockKind::Unreadable, &detail);
    }

    fn simple(
        &mut self,
        simple: &SimpleCommand,
        cwds: &[Cwd],
        depth: usize,
        input: Input<'_>,
    ) -> Vec<Cwd> {
        let values: Vec<&str> = simple.words.iter().map(|w| w.value.as_str()).collect();
        let start = effective_start(&values);
        self.views.push(CommandView {
            source: simple.source.clone(),
            words: values.join(" "),
            effective: values[start..].join(" "),
        });
        // `env -S 'rm -rf /'` runs its split string as a command; so does
        // `flock FILE -c CMD`.
        // Only the prefix words count (plus the `-c CMD` a prefix's operand
        // left at the program's place): `echo flock -c x` runs nothing.
        for script in prefix_scripts(&values[..(start + 2).min(values.len())]) {
            self.nested(&script, cwds, depth);
        }
        let targets = simple.redirects.iter().map(|r| &r.target);
        for word in simple.words.iter().chain(targets) {
            for sub in &word.subs {
                self.nested(&sub.source, cwds, depth);
            }
        }
        for redirect in &simple.redirects {
            if redirect.op.writes(&redirect.target.value) {
                self.check_write_target(&redirect.target.value, cwds, "a redirection");
            }
            if let Some(doc) = &redirect.heredoc
                && doc.expands
            {
                for sub in &doc.subs {
                    self.nested(&sub.source, cwds, depth);
                }
            }
        }
        // `CDPATH=/ cd usr`: the assignment holds for this command only.
        let cdpath = values[..start]
            .iter()
            .filter(|v| is_assignment(v))
            .filter_map(|v| v.strip_prefix("CDPATH="))
            .next_back()
            .map(str::to_owned);
        if start == values.len() {
            // Assignments alone (`CDPATH=/`) and `exec` with redirections
            // alone (`exec 3<>/dev/tcp/host/80`) change the shell itself.
            if cdpath.is_some() {
                self.cdpath = cdpath;
            }
            if values.first().is_some_and(|w| basename(w) == "exec") {
                self.network_fds = network_descriptors(&simple.redirects, &self.network_fds);
            }
            return cwds.to_vec();
        }
        if values.first().is_some_and(|w| basename(w) == "exec")
            && values[start..].iter().all(|w| is_named_descriptor(w))
        {
            // `exec {fd}<>/dev/tcp/host/80`: the shell picks the number and
            // stores it in `$fd`.
            let named: Vec<Redirect> = simple
                .redirects
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r.fd = r.fd.or(Some(NAMED_FD));
                    r
                })
                .collect();
            self.network_fds = network_descriptors(&named, &self.network_fds);
            return cwds.to_vec();
        }
        self.shell_variables(&values[start..]);
        // `env -C / rm -rf *`: the command runs elsewhere; the line goes on
        // where it was.
        let directory = prefix_directory(&values[..start]);
        let run_cwds: Vec<Cwd> = match directory {
            Some(PrefixDirectory::Path(dir)) => {
                cwds.iter().map(|cwd| self.expand(dir, cwd)).collect()
            }
            Some(PrefixDirectory::Unknown) => vec![None],
            None => cwds.to_vec(),
        };
        if simple_executes_stdin(simple) {
            let inherited: Vec<u32> = self
                .network_fds
                .iter()
                .copied()
                .filter(|fd| !(input.piped && *fd == 0))
                .collect();
            let from_network = network_descriptors(&simple.redirects, &inherited).contains(&0);
            self.stdin_code(simple, from_network, &run_cwds, depth);
        }
        let feeder = feeder(&values[..start]);
        // `parallel CMD ::: ARGS`: the command ends where its arguments begin.
        let end = match feeder {
            Some((_, Feeder::Parallel)) => simple.words[start..]
                .iter()
                .position(|w| is_parallel_separator(&w.value))
                .map_or(simple.words.len(), |p| start + p),
            _ => simple.words.len(),
        };
        let saved = cdpath.map(|value| self.cdpath.replace(value));
        let after = self.run(&simple.words[start..end], &run_cwds, depth);
        if let Some(saved) = saved {
            self.cdpath = saved;
        }
        if let Some((at, kind)) = feeder {
            // A redirection of the standard input replaces the pipe: a
            // here-string or here-document with its text, a file with what
            // the line cannot know.
            let replaced = simple.redirects.iter().rev().find(|r| {
                r.fd.is_none_or(|fd| fd == 0)
                    && matches!(
                        r.op,
                        RedirOp::In
                            | RedirOp::InOut
                            | RedirOp::DupIn
                            | RedirOp::HereString
                            | RedirOp::HereDoc
                    )
            });
            let own = replaced.and_then(|r| match (r.op, &r.heredoc) {
                (RedirOp::HereString, _) => Some(Stream::Text(r.target.value.clone())),
                (RedirOp::HereDoc, Some(doc)) => Some(Stream::Text(doc.body.clone())),
                _ => None,
            });
            let stream = if replaced.is_some() {
                own.as_ref()
            } else {
                input.stream
            };
            let options = &values[at + 1..start];
            let command = &simple.words[start..];
            match kind {
                Feeder::Xargs => self.xargs(options, command, stream, &run_cwds, depth),
                Feeder::Parallel => self.parallel(options, command, stream, &run_cwds, depth),
            }
        }
        if directory.is_some() {
            return cwds.to_vec();
        }
        after
    }

    /// `export CDPATH=…`, `declare CDPATH=…`, `unset CDPATH`.
    fn shell_variables(&mut self, words: &[&str]) {
        let Some((program, args)) = words.split_first() else {
            return;
        };
        match *program {
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                if let Some(value) = args
                    .iter()
                    .filter_map(|a| a.strip_prefix("CDPATH="))
                    .next_back()
                {
                    self.cdpath = Some(value.to_owned());
                }
            }
            "unset" if args.contains(&"CDPATH") => self.cdpath = None,
            _ => {}
        }
    }

    /// Checks one command from its program word on; returns the directories
    /// after it (changed only by `cd`, `pushd` and `popd`). The program's
    /// base name picks the family that checks it in [`DISPATCH`].
    fn run(&mut self, words: &[Word], cwds: &[Cwd], depth: usize) -> Vec<Cwd> {
        let Some((first, args)) = words.split_first() else {
            return cwds.to_vec();
        };
        let call = Call {
            program: basename(&first.value),
            args,
            cwds,
            depth,
        };
        dispatch(call.program)
            .and_then(|entry| (entry.handler)(self, &call))
            .unwrap_or_else(|| cwds.to_vec())
    }

    fn cd(&self, args: &[Word], cwds: &[Cwd]) -> Vec<Cwd> {
        let target = args
            .iter()
            .map(|a| a.value.as_str())
            .find(|v| !v.starts_with('-') || *v == "-");
        let mut out = Vec::new();
        for cwd in cwds {
            match target {
                None => push_unique(&mut out, self.ctx.home.map(Path::to_path_buf)),
                Some("-") => push_unique(&mut out, None),
                Some(target) => {
                    // With `CDPATH` set, a name that does not start with `/`,
                    // `.` or `..` is looked up in each of its directories
                    // first (an empty entry is the current directory).
                    if let Some(cdpath) = self.cdpath.as_deref().filter(|_| searches_cdpath(target))
                    {
                        for entry in cdpath.split(':') {
                            let next = if entry.is_empty() {
                                self.expand(target, cwd)
                            } else {
                                let entry = entry.trim_end_matches('/');
                                self.expand(&format!("{entry}/{target}"), cwd)
                            };
                            push_unique(&mut out, next);
                        }
                    }
                    push_unique(&mut out, self.expand(target, cwd));
                }
            }
        }
        cap_cwds(out)
    }

    /// An absolute, lexically normalised path for a word, when it can be known.
    fn expand(&self, raw: &str, cwd: &Cwd) -> Option<PathBuf> {
        let home_rest = if raw == "~" || raw == "$HOME" || raw == "${HOME}" {
            Some("")
        } else {
            raw.strip_prefix("~/")
                .or_else(|| raw.strip_prefix("$HOME/"))
                .or_else(|| raw.strip_prefix("${HOME}/"))
        };
        if let Some(rest) = home_rest {
            return self.ctx.home.map(|home| normalize(&home.join(rest)));
        }
        for pwd in CWD_WORDS {
            if let Some(rest) = raw.strip_prefix(pwd)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                let rest = rest.trim_start_matches('/');
                return cwd.as_ref().map(|cwd| normalize(&cwd.join(rest)));
            }
        }
        if raw.contains('$') || raw.contains('`') || raw.starts_with('~') {
            return None;
        }
        if raw.starts_with('/') {
            return Some(normalize(Path::new(raw)));
        }
        cwd.as_ref().map(|cwd| normalize(&cwd.join(raw)))
    }

    fn classify(&self, path: &Path) -> Option<Protected> {
        let depth = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count();
        if depth == 0 {
            return Some(Protected::Root);
        }
        let first_has_glob = path
            .components()
            .find_map(|c| match c {
                Component::Normal(part) => Some(part.to_string_lossy().contains(['*', '?', '['])),
                _ => None,
            })
            .unwrap_or(false);
        if depth == 1 || first_has_glob {
            return Some(Protected::TopLevel(path.to_path_buf()));
        }
        if let Some(home) = self.ctx.home
            && home.starts_with(path)
        {
            return Some(Protected::Home);
        }
        let root = self.ctx.project_root;
        if path == root {
            return Some(Protected::ProjectRoot);
        }
        if root.starts_with(path) {
            return Some(Protected::AboveProject(path.to_path_buf()));
        }
        None
    }

    /// Whether deleting `raw` recursively would hit a protected directory, in
    /// any of the directories the command may run in.
    fn protected(&self, raw: &str, cwds: &[Cwd]) -> Option<Protected> {
        if raw.is_empty() {
            return None;
        }
        let base = strip_glob_tail(raw);
        if is_home_literal(base) {
            return Some(Protected::Home);
        }
        for cwd in cwds {
            let Some(path) = self.expand(base, cwd) else {
                continue;
            };
            if let Some(found) = self.classify(&path) {
                return Some(found);
            }
            if let Some(resolved) = (self.ctx.resolve)(&path)
                && let Some(found) = self.classify(&resolved)
            {
                return Some(found);
            }
        }
        None
    }

    fn check_write_target(&mut self, raw: &str, cwds: &[Cwd], how: &str) {
        if raw.starts_with('/') && normalize(Path::new(raw)) == Path::new(SYSRQ_TRIGGER) {
            self.power_off(&format!("{how} writing to `{raw}`"));
        }
        if is_device_target(raw) {
            self.block(
                HardBlockKind::DeviceWrite,
                &format!("{how} writing to `{raw}` would overwrite a disk or system device"),
            );
        }
        self.check_git_target(raw, cwds, how);
    }

    fn check_git_target(&mut self, raw: &str, cwds: &[Cwd], how: &str) {
        for cwd in cwds {
            let Some(path) = self.expand(raw, cwd) else {
                continue;
            };
            let root = self.ctx.project_root;
            let resolved = (self.ctx.resolve)(&path);
            let resolved_inside = resolved
                .as_deref()
                .is_some_and(|r| in_git_internals(r, root));
            if in_git_internals(&path, root) || resolved_inside {
                self.block(
                    HardBlockKind::GitInternals,
                    &format!(
                        "{how} on `{raw}` changes the repository's .git directory; use git commands instead"
                    ),
                );
                return;
            }
            let protected = self.ctx.protected.covers(&path).or_else(|| {
                resolved
                    .as_deref()
                    .and_then(|r| self.ctx.protected.covers(r))
            });
            if let Some(kind) = protected {
                if self.block.is_none() {
                    self.block = Some(HardBlock::protected(&format!("{how} on `{raw}`"), kind));
                }
                return;
            }
        }
    }
}

/// Where a command's prefixes make it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefixDirectory<'w> {
    /// A directory as written.
    Path(&'w str),
    /// A directory the line does not name (another user's home).
    Unknown,
}

/// The home directory of `root`, where `pkexec` and `sudo -i` start.
const ROOT_HOME: &str = "/root";

/// The directory a command's prefixes make it run in: `env -C DIR`,
/// `env --chdir=DIR`, `sudo -D DIR`, `sudo --chdir=DIR`; the target user's
/// home for `pkexec` (without `--keep-cwd`) and `sudo -i`/`--login`.
fn prefix_directory<'w>(words: &[&'w str]) -> Option<PrefixDirectory<'w>> {
    let mut prefix = "";
    let mut found = None;
    // `sudo -i`/`pkexec` start in the home of their user (`root` unless said).
    let mut login: Option<&str> = None;
    let mut user = "root";
    let mut i = 0;
    while let Some(word) = words.get(i) {
        let name = basename(word);
        if matches!(name, "env" | "sudo" | "pkexec") {
            prefix = name;
            user = "root";
            if name == "pkexec" {
                login = Some("pkexec");
            }
        } else if prefix == "pkexec" {
            match *word {
                "--keep-cwd" => login = None,
                "--user" => {
                    user = words.get(i + 1).copied().unwrap_or_default();
                    i += 1;
                }
                _ => {}
            }
        } else if let Some(dir) = word.strip_prefix("--chdir=") {
            found = Some(PrefixDirectory::Path(dir));
        } else if prefix == "sudo" && *word == "--login" {
            login = Some("sudo");
        } else if prefix == "sudo" && (*word == "-u" || *word == "--user") {
            user = words.get(i + 1).copied().unwrap_or_default();
            i += 1;
        } else if let Some(name) = word.strip_prefix("--user=").filter(|_| prefix == "sudo") {
            user = name;
        } else {
            let short = if prefix == "env" { "-C" } else { "-D" };
            if prefix.is_empty() {
            } else if *word == short || *word == "--chdir" {
                found = words.get(i + 1).copied().map(PrefixDirectory::Path);
                i += 1;
            } else if let Some(dir) = word.strip_prefix(short).filter(|d| !d.is_empty()) {
                found = Some(PrefixDirectory::Path(dir));
            } else if prefix == "sudo" && word.starts_with('-') && !word.starts_with("--") {
                // `-i`, `-iu USER`, `-Ei`.
                let flags = &word[1..];
                if flags.contains('i') {
                    login = Some("sudo");
                }
                if flags.ends_with('u') {
                    user = words.get(i + 1).copied().unwrap_or_default();
                    i += 1;
                }
            }
        }
        i += 1;
    }
    if found.is_none() && login.is_some() {
        return Some(if user == "root" || user == "0" || user == "#0" {
            PrefixDirectory::Path(ROOT_HOME)
        } else {
            PrefixDirectory::Unknown
        });
    }
    found
}

/// What a command of a pipeline reads on its standard input.
#[derive(Debug, Clone, Copy, Default)]
struct Input<'s> {
    /// What the previous command prints, when the line says.
    stream: Option<&'s Stream>,
    /// True when the standard input is the pipe from the previous command.
    piped: bool,
}

/// True when a `cd` target is looked up in `CDPATH`: a name that does not
/// start with `/`, `.` or `..` (nor expands to an absolute path).
fn searches_cdpath(target: &str) -> bool {
    !(target.starts_with(['/', '~', '$', '`'])
        || target == "."
        || target == ".."
        || target.starts_with("./")
        || target.starts_with("../"))
}

/// The value of the first of `names` in `args` (`-c VALUE`, `--command=VALUE`,
/// or a short-flag cluster ending in the option, `-qc VALUE`).
fn option_value(args: &[Word], names: &[&str]) -> Option<String> {
    for (i, arg) in args.iter().enumerate() {
        let value = arg.value.as_str();
        for name in names {
            if value == *name {
                return args.get(i + 1).map(|w| w.value.clone());
            }
            if name.starts_with("--")
                && let Some(rest) = value.strip_prefix(&format!("{name}="))
            {
                return Some(rest.to_owned());
            }
            if !name.starts_with("--")
                && !value.starts_with("--")
                && value.starts_with('-')
                && value.len() > 2
                && value.ends_with(&name[1..])
                && value[1..].chars().all(|c| c.is_ascii_alphabetic())
            {
                return args.get(i + 1).map(|w| w.value.clone());
            }
        }
    }
    None
}

/// Every simple command of a script, nested subshells, groups and function
/// bodies included (not substitutions).
fn simple_commands(script: &Script) -> Vec<&SimpleCommand> {
    let mut out = Vec::new();
    for list in &script.lists {
        let pipelines = std::iter::once(&list.first).chain(list.rest.iter().map(|(_, p)| p));
        for pipeline in pipelines {
            for command in &pipeline.commands {
                match command {
                    Command::Simple(simple) => out.push(simple),
                    Command::Subshell(inner) | Command::Group(inner) => {
                        out.extend(simple_commands(inner));
                    }
                    Command::Function { body, .. } => out.extend(simple_commands(body)),
                }
            }
        }
    }
    out
}

fn program_of(simple: &SimpleCommand) -> (&str, &[Word]) {
    let values: Vec<&str> = simple.words.iter().map(|w| w.value.as_str()).collect();
    let start = effective_start(&values);
    match simple.words.get(start) {
        Some(first) => (basename(&first.value), &simple.words[start + 1..]),
        None => ("", &[]),
    }
}
