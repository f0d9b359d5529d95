//! Read-only commands: which command lines only read, so that they need no
//! approval in any mode and run concurrently with other read-only calls, like
//! `read_file`.
//!
//! A line is read-only when its strict reading ([`super::bash_ast`]) has no
//! doubt and is plain (simple commands joined by `|`, `&&`, `||`, `;`; nothing
//! in the background), no command has an assignment (`LD_PRELOAD=… ls` runs
//! code), every word is literal, every program is a bare name in `PROGRAMS`
//! used only with the flags listed there (an unknown flag makes the line not
//! read-only: `find -delete`, `rg --pre`, `git diff --output`), and the only
//! redirections write to `/dev/null`, duplicate descriptors or give text on
//! standard input. The result lists the paths the line reads (operands,
//! `< FILE`, flag values such as `grep -f FILE`): `engine` checks that they
//! lie inside the allowed roots, as it does for `read_file`.
//!
//! The table is a closed list; a program, subcommand or flag that is not in it
//! is not read-only. This module is pure: it reads no file and resolves no
//! path.

use super::bash_ast::{RedirectKind, SimpleCommand, Syntax};

/// How a program's operands are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operands {
    /// Every operand is a path the program reads.
    Paths,
    /// The first operand is a pattern (unless `-e`/`-f` gave one), the rest
    /// are paths (`grep`, `rg`).
    PatternThenPaths,
    /// Operands are text that is only printed (`echo`).
    Text,
    /// No operands are accepted (`pwd`).
    Nothing,
    /// `find`: starting points, then an expression of known primaries.
    Find,
}

/// What a flag's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    /// Text, a number, a pattern: not a file.
    Text,
    /// A file the program reads.
    Path,
    /// A pattern that takes the place of the first operand (`grep -e`).
    Pattern,
    /// A file of patterns that takes the place of the first operand (`grep -f`).
    PatternFile,
}

/// One read-only program: its name, the flags it may be given without a
/// value, the flags that take one, and how its operands are read.
struct Program {
    name: &'static str,
    flags: &'static [&'static str],
    valued: &'static [(&'static str, Value)],
    operands: Operands,
    /// `-NUM` (`head -5`, `grep -3`) is accepted.
    numeric_flag: bool,
}

/// `git` subcommands that only read, with their flags.
struct GitSubcommand {
    name: &'static str,
    flags: &'static [&'static str],
    valued: &'static [(&'static str, Value)],
}

const T: Value = Value::Text;

/// The read-only programs.
const PROGRAMS: &[Program] = &[
    Program {
        name: "ls",
        flags: &[
            "-a",
            "-A",
            "-b",
            "-B",
            "-c",
            "-C",
            "-d",
            "-f",
            "-F",
            "-g",
            "-G",
            "-h",
            "-H",
            "-i",
            "-k",
            "-l",
            "-m",
            "-n",
            "-N",
            "-o",
            "-p",
            "-q",
            "-Q",
            "-r",
            "-R",
            "-s",
            "-S",
            "-t",
            "-u",
            "-U",
            "-v",
            "-x",
            "-X",
            "-Z",
            "-1",
            "--all",
            "--almost-all",
            "--author",
            "--escape",
            "--directory",
            "--classify",
            "--file-type",
            "--full-time",
            "--group-directories-first",
            "--no-group",
            "--human-readable",
            "--si",
            "--dereference-command-line",
            "--inode",
            "--kibibytes",
            "--literal",
            "--numeric-uid-gid",
            "--hide-control-chars",
            "--show-control-chars",
            "--quote-name",
            "--reverse",
            "--recursive",
            "--size",
            "--context",
            "--color",
            "--colour",
        ],
        valued: &[
            ("-w", T),
            ("-I", T),
            ("-T", T),
            ("--width", T),
            ("--ignore", T),
            ("--hide", T),
            ("--sort", T),
            ("--time", T),
            ("--time-style", T),
            ("--format", T),
            ("--block-size", T),
            ("--indicator-style", T),
            ("--quoting-style", T),
            ("--tabsize", T),
        ],
        operands: Operands::Paths,
        numeric_flag: false,
    },
    Program {
        name: "cat",
        flags: &[
            "-A",
            "-b",
            "-e",
            "-E",
            "-n",
            "-s",
            "-t",
            "-T",
            "-u",
            "-v",
            "--show-all",
            "--number-nonblank",
            "--number",
            "--squeeze-blank",
            "--show-ends",
            "--show-tabs",
            "--show-nonprinting",
        ],
        valued: &[],
        operands: Operands::Paths,
        numeric_flag: false,
    },
    Program {
        name: "head",
        flags: &[
            "-q",
            "-v",
            "-z",
            "--quiet",
            "--silent",
            "--verbose",
            "--zero-terminated",
        ],
        valued: &[("-c", T), ("-n", T), ("--bytes", T), ("--lines", T)],
        operands: Operands::Paths,
        numeric_flag: true,
    },
    Program {
        name: "tail",
        flags: &[
            "-f",
            "-F",
            "-q",
            "-v",
            "-z",
            "-r",
            "--follow",
            "--retry",
            "--quiet",
            "--silent",
            "--verbose",
            "--zero-terminated",
        ],
        valued: &[
            ("-c", T),
            ("-n", T),
            ("-s", T),
            ("--bytes", T),
            ("--lines", T),
            ("--sleep-interval", T),
            ("--pid", T),
            ("--max-unchanged-stats", T),
        ],
        operands: Operands::Paths,
        numeric_flag: true,
    },
    Program {
        name: "wc",
        flags: &[
            "-c",
            "-m",
            "-l",
            "-L",
            "-w",
            "--bytes",
            "--chars",
            "--lines",
            "--max-line-length",
            "--words",
        ],
        valued: &[("--files0-from", Value::Path), ("--total", T)],
        operands: Operands::Paths,
        numeric_flag: false,
    },
    Program {
        name: "grep",
        flags: GREP_FLAGS,
        valued: GREP_VALUED,
        operands: Operands::PatternThenPaths,
        numeric_flag: true,
    },
    Program {
        name: "egrep",
        flags: GREP_FLAGS,
        valued: GREP_VALUED,
        operands: Operands::PatternThenPaths,
        numeric_flag: true,
    },
    Program {
        name: "fgrep",
        flags: GREP_FLAGS,
        valued: GREP_VALUED,
        operands: Operands::PatternThenPaths,
        numeric_flag: true,
    },
    Program {
        name: "rg",
        flags: &[
            "-i",
            "-s",
            "-S",
            "-v",
            "-w",
            "-x",
            "-c",
            "-l",
            "-n",
            "-N",
            "-H",
            "-I",
            "-o",
            "-q",
            "-F",
            "-P",
            "-U",
            "-u",
            "-a",
            "-0",
            "-p",
            "--hidden",
            "--no-ignore",
            "--no-ignore-vcs",
            "--no-ignore-parent",
            "--no-ignore-dot",
            "--ignore-case",
            "--case-sensitive",
            "--smart-case",
            "--invert-match",
            "--word-regexp",
            "--line-regexp",
            "--count",
            "--count-matches",
            "--files-with-matches",
            "--files-without-match",
            "--line-number",
            "--no-line-number",
            "--with-filename",
            "--no-filename",
            "--only-matching",
            "--quiet",
            "--fixed-strings",
            "--pcre2",
            "--multiline",
            "--multiline-dotall",
            "--files",
            "--json",
            "--vimgrep",
            "--heading",
            "--no-heading",
            "--stats",
            "--column",
            "--no-column",
            "--trim",
            "--no-messages",
            "--unrestricted",
            "--null",
            "--text",
            "--type-list",
            "--pretty",
            "--byte-offset",
            "--passthru",
            "--crlf",
            "--no-config",
            "--one-file-system",
            "--sort-files",
            "--color",
            "--colour",
        ],
        valued: &[
            ("-e", Value::Pattern),
            ("--regexp", Value::Pattern),
            ("-f", Value::PatternFile),
            ("--file", Value::PatternFile),
            ("-g", T),
            ("--glob", T),
            ("--iglob", T),
            ("-t", T),
            ("--type", T),
            ("-T", T),
            ("--type-not", T),
            ("--type-add", T),
            ("-A", T),
            ("-B", T),
            ("-C", T),
            ("--after-context", T),
            ("--before-context", T),
            ("--context", T),
            ("-m", T),
            ("--max-count", T),
            ("-d", T),
            ("--max-depth", T),
            ("--maxdepth", T),
            ("--max-filesize", T),
            ("-M", T),
            ("--max-columns", T),
            ("--sort", T),
            ("--sortr", T),
            ("--colors", T),
            ("-j", T),
            ("--threads", T),
            ("-r", T),
            ("--replace", T),
            ("-E", T),
            ("--encoding", T),
            ("--ignore-file", Value::Path),
            ("--path-separator", T),
            ("--context-separator", T),
            ("--field-match-separator", T),
        ],
        operands: Operands::PatternThenPaths,
        numeric_flag: false,
    },
    Program {
        name: "find",
        flags: &["-H", "-P"],
        valued: &[],
        operands: Operands::Find,
        numeric_flag: false,
    },
    Program {
        name: "pwd",
        flags: &["-L", "-P"],
        valued: &[],
        operands: Operands::Nothing,
        numeric_flag: false,
    },
    Program {
        name: "echo",
        flags: &["-n", "-e", "-E"],
        valued: &[],
        operands: Operands::Text,
        numeric_flag: false,
    },
    Program {
        name: "stat",
        flags: &["-f", "-t", "--file-system", "--terse"],
        valued: &[("-c", T), ("--format", T), ("--printf", T)],
        operands: Operands::Paths,
        numeric_flag: false,
    },
    Program {
        name: "du",
        flags: &[
            "-a",
            "-b",
            "-c",
            "-h",
            "-k",
            "-m",
            "-s",
            "-x",
            "-P",
            "-S",
            "--all",
            "--apparent-size",
            "--bytes",
            "--total",
            "--human-readable",
            "--summarize",
            "--one-file-system",
            "--no-dereference",
            "--separate-dirs",
            "--si",
        ],
        valued: &[("-d", T), ("--max-depth", T), ("--block-size", T)],
        operands: Operands::Paths,
        numeric_flag: false,
    },
];

const GREP_FLAGS: &[&str] = &[
    "-i",
    "-y",
    "-v",
    "-w",
    "-x",
    "-c",
    "-l",
    "-L",
    "-n",
    "-h",
    "-H",
    "-o",
    "-q",
    "-s",
    "-r",
    "-E",
    "-F",
    "-G",
    "-P",
    "-z",
    "-Z",
    "-a",
    "-I",
    "-b",
    "-T",
    "-U",
    "--ignore-case",
    "--no-ignore-case",
    "--invert-match",
    "--word-regexp",
    "--line-regexp",
    "--count",
    "--files-with-matches",
    "--files-without-match",
    "--line-number",
    "--no-filename",
    "--with-filename",
    "--only-matching",
    "--quiet",
    "--silent",
    "--no-messages",
    "--recursive",
    "--extended-regexp",
    "--fixed-strings",
    "--basic-regexp",
    "--perl-regexp",
    "--null",
    "--null-data",
    "--text",
    "--byte-offset",
    "--initial-tab",
    "--line-buffered",
    "--binary",
    "--color",
    "--colour",
];

const GREP_VALUED: &[(&str, Value)] = &[
    ("-e", Value::Pattern),
    ("--regexp", Value::Pattern),
    ("-f", Value::PatternFile),
    ("--file", Value::PatternFile),
    ("-A", T),
    ("-B", T),
    ("-C", T),
    ("--after-context", T),
    ("--before-context", T),
    ("--context", T),
    ("-m", T),
    ("--max-count", T),
    ("--include", T),
    ("--exclude", T),
    ("--exclude-dir", T),
    ("--exclude-from", Value::Path),
    ("--label", T),
    ("--binary-files", T),
    ("-d", T),
    ("--directories", T),
    ("-D", T),
    ("--devices", T),
];

/// Flags common to the `git` subcommands that show history and changes.
const GIT_SHOW_FLAGS: &[&str] = &[
    "--oneline",
    "--graph",
    "--all",
    "--decorate",
    "--no-decorate",
    "--stat",
    "--shortstat",
    "--numstat",
    "--name-only",
    "--name-status",
    "--summary",
    "-p",
    "-u",
    "--patch",
    "--no-patch",
    "-s",
    "--reverse",
    "--first-parent",
    "--merges",
    "--no-merges",
    "--abbrev-commit",
    "--no-abbrev-commit",
    "--follow",
    "--pretty",
    "--no-color",
    "--color",
    "--word-diff",
    "--color-words",
    "--no-ext-diff",
    "--no-textconv",
    "--left-right",
    "--topo-order",
    "--date-order",
    "--full-history",
    "--simplify-by-decoration",
    "--branches",
    "--tags",
    "--remotes",
    "-i",
    "--regexp-ignore-case",
    "--all-match",
    "-E",
    "-F",
    "-w",
    "--ignore-all-space",
    "-b",
    "--ignore-space-change",
    "--ignore-blank-lines",
    "--ignore-space-at-eol",
    "--no-renames",
    "-M",
    "-C",
    "--find-renames",
    "--find-copies",
    "--minimal",
    "--patience",
    "--histogram",
    "--raw",
    "-R",
    "-a",
    "--text",
    "--full-index",
    "--abbrev",
    "-z",
    "--cached",
    "--staged",
    "--merge-base",
    "--exit-code",
    "--quiet",
    "--check",
    "--relative",
    "--no-prefix",
    "--show-signature",
    "--source",
    "--parents",
    "--children",
    "--boundary",
    "--cherry-pick",
    "--cherry-mark",
    "--log-size",
    "-m",
    "-c",
    "--cc",
    "--dirstat",
    "--compact-summary",
    "--patch-with-stat",
];

const GIT_SHOW_VALUED: &[(&str, Value)] = &[
    ("-n", T),
    ("--max-count", T),
    ("--skip", T),
    ("--since", T),
    ("--after", T),
    ("--until", T),
    ("--before", T),
    ("--author", T),
    ("--committer", T),
    ("--grep", T),
    ("--date", T),
    ("--format", T),
    ("-S", T),
    ("-G", T),
    ("-U", T),
    ("--unified", T),
    ("--diff-filter", T),
    ("--word-diff-regex", T),
    ("--stat-width", T),
    ("--encoding", T),
];

/// The `git` subcommands that only read.
const GIT_SUBCOMMANDS: &[GitSubcommand] = &[
    GitSubcommand {
        name: "status",
        flags: &[
            "-s",
            "--short",
            "-b",
            "--branch",
            "--porcelain",
            "--long",
            "-v",
            "--verbose",
            "-u",
            "--untracked-files",
            "--ignored",
            "--show-stash",
            "--ahead-behind",
            "--no-ahead-behind",
            "--column",
            "--no-column",
            "-z",
            "--renames",
            "--no-renames",
        ],
        valued: &[],
    },
    GitSubcommand {
        name: "log",
        flags: GIT_SHOW_FLAGS,
        valued: GIT_SHOW_VALUED,
    },
    GitSubcommand {
        name: "diff",
        flags: GIT_SHOW_FLAGS,
        valued: GIT_SHOW_VALUED,
    },
    GitSubcommand {
        name: "show",
        flags: GIT_SHOW_FLAGS,
        valued: GIT_SHOW_VALUED,
    },
];

/// `git` options before the subcommand that change nothing.
const GIT_GLOBAL_FLAGS: &[&str] = &["--no-pager", "-P"];

/// `find` primaries that take no value and neither write nor run anything.
const FIND_PRIMARIES: &[&str] = &[
    "-print",
    "-print0",
    "-ls",
    "-prune",
    "-quit",
    "-true",
    "-false",
    "-depth",
    "-d",
    "-xdev",
    "-mount",
    "-noleaf",
    "-empty",
    "-executable",
    "-readable",
    "-writable",
    "-nogroup",
    "-nouser",
    "-daystart",
    "-ignore_readdir_race",
    "-noignore_readdir_race",
    "-not",
    "-a",
    "-and",
    "-o",
    "-or",
    "!",
    "(",
    ")",
    ",",
];

/// `find` primaries that take one value and neither write nor run anything.
const FIND_VALUED: &[&str] = &[
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-regextype",
    "-type",
    "-xtype",
    "-size",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-newer",
    "-anewer",
    "-cnewer",
    "-perm",
    "-user",
    "-group",
    "-uid",
    "-gid",
    "-links",
    "-inum",
    "-samefile",
    "-maxdepth",
    "-mindepth",
    "-used",
    "-lname",
    "-ilname",
    "-fstype",
    "-printf",
];

/// Targets a read-only line may redirect output to.
const DISCARD_TARGETS: &[&str] = &["/dev/null"];

/// Why a line is not read-only (for tests and tracing; the model sees the
/// normal decision instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReadOnly {
    /// The strict reading has a doubt or the line is not plain.
    NotPlain,
    /// A redirection writes somewhere other than `/dev/null`.
    Redirection,
    /// A command has a `NAME=value` assignment.
    Assignment,
    /// A word holds an expansion.
    Expansion,
    /// The program is not in the table.
    Program(String),
    /// A flag or subcommand is not in the program's list.
    Flag(String),
    /// The program got operands it does not take.
    Operand(String),
}

/// A read-only line, with the paths it reads as written (`~` unexpanded,
/// relative to the working directory, globs kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOnlyLine {
    /// The paths read.
    pub reads: Vec<String>,
}

/// Classifies a strictly read line.
pub fn classify(syntax: &Syntax) -> Result<ReadOnlyLine, NotReadOnly> {
    if !syntax.confident() || !syntax.plain || syntax.background || syntax.commands.is_empty() {
        return Err(NotReadOnly::NotPlain);
    }
    let mut line = ReadOnlyLine::default();
    for redirection in &syntax.redirections {
        match redirection.kind {
            RedirectKind::Duplicate | RedirectKind::Text => {}
            RedirectKind::Write
                if redirection
                    .target
                    .as_deref()
                    .is_some_and(|t| DISCARD_TARGETS.contains(&t)) => {}
            RedirectKind::Read => match &redirection.target {
                Some(target) => line.reads.push(target.clone()),
                None => return Err(NotReadOnly::Expansion),
            },
            RedirectKind::Write | RedirectKind::ReadWrite => return Err(NotReadOnly::Redirection),
        }
    }
    for command in &syntax.commands {
        classify_command(command, &mut line.reads)?;
    }
    // Brace expansion and `~user` make paths this module cannot see.
    let hidden = |path: &String| {
        path.contains('{') || (path.starts_with('~') && path != "~" && !path.starts_with("~/"))
    };
    if line.reads.iter().any(hidden) {
        return Err(NotReadOnly::Expansion);
    }
    Ok(line)
}

fn classify_command(command: &SimpleCommand, reads: &mut Vec<String>) -> Result<(), NotReadOnly> {
    if command.assignments > 0 {
        return Err(NotReadOnly::Assignment);
    }
    let words: Vec<&str> = command
        .words
        .iter()
        .map(|w| w.as_deref().ok_or(NotReadOnly::Expansion))
        .collect::<Result<_, _>>()?;
    let Some((program, args)) = words.split_first() else {
        return Err(NotReadOnly::NotPlain);
    };
    if *program == "git" {
        return git(args, reads);
    }
    let spec = PROGRAMS
        .iter()
        .find(|p| p.name == *program)
        .ok_or_else(|| NotReadOnly::Program((*program).to_owned()))?;
    let parsed = parse_flags(
        args,
        spec.flags,
        spec.valued,
        spec.numeric_flag,
        spec.operands == Operands::Find,
    )?;
    reads.extend(parsed.paths);
    let mut operands = parsed.operands.into_iter();
    match spec.operands {
        Operands::Paths => reads.extend(operands.map(str::to_owned)),
        Operands::PatternThenPaths => {
            if !parsed.pattern_given {
                operands.next();
            }
            reads.extend(operands.map(str::to_owned));
        }
        Operands::Text => {}
        Operands::Nothing => {
            if let Some(extra) = operands.next() {
                return Err(NotReadOnly::Operand(extra.to_owned()));
            }
        }
        Operands::Find => find(&operands.collect::<Vec<_>>(), reads)?,
    }
    Ok(())
}

/// Flags and operands of one command.
#[derive(Debug, Default)]
struct Parsed<'w> {
    operands: Vec<&'w str>,
    paths: Vec<String>,
    pattern_given: bool,
}

/// Splits `args` into flags (each of which must be known) and operands. With
/// `stop_at_operand`, everything from the first operand on is an operand
/// (`find`'s expression).
fn parse_flags<'w>(
    args: &[&'w str],
    flags: &[&str],
    valued: &[(&str, Value)],
    numeric_flag: bool,
    stop_at_operand: bool,
) -> Result<Parsed<'w>, NotReadOnly> {
    let mut parsed = Parsed::default();
    let value_of = |name: &str| valued.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let take_value = |parsed: &mut Parsed<'w>, kind: Value, value: &str| match kind {
        Value::Text => {}
        Value::Path => parsed.paths.push(value.to_owned()),
        Value::Pattern => parsed.pattern_given = true,
        Value::PatternFile => {
            parsed.pattern_given = true;
            parsed.paths.push(value.to_owned());
        }
    };
    let mut i = 0;
    while let Some(arg) = args.get(i).copied() {
        i += 1;
        if arg == "--" {
            parsed.operands.extend(args[i..].iter().copied());
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (&arg[..name.len() + 2], Some(value)),
                None => (arg, None),
            };
            if let Some(kind) = value_of(name) {
                let value = match inline {
                    Some(value) => value,
                    None => {
                        let value = args
                            .get(i)
                            .copied()
                            .ok_or_else(|| NotReadOnly::Flag(arg.to_owned()))?;
                        i += 1;
                        value
                    }
                };
                take_value(&mut parsed, kind, value);
            } else if !flags.contains(&name) {
                return Err(NotReadOnly::Flag(arg.to_owned()));
            }
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            if stop_at_operand && !flags.contains(&arg) {
                parsed.operands.extend(args[i - 1..].iter().copied());
                break;
            }
            if numeric_flag && arg[1..].bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // A cluster of short flags; a flag that takes a value ends it,
            // with the value glued (`-n5`) or in the next word.
            let cluster = &arg[1..];
            for (at, c) in cluster.char_indices() {
                let name = format!("-{c}");
                if let Some(kind) = value_of(&name) {
                    let rest = &cluster[at + c.len_utf8()..];
                    let value = if rest.is_empty() {
                        let value = args
                            .get(i)
                            .copied()
                            .ok_or_else(|| NotReadOnly::Flag(arg.to_owned()))?;
                        i += 1;
                        value
                    } else {
                        rest
                    };
                    take_value(&mut parsed, kind, value);
                    break;
                }
                if !flags.contains(&name.as_str()) {
                    return Err(NotReadOnly::Flag(arg.to_owned()));
                }
            }
            continue;
        }
        if stop_at_operand {
            parsed.operands.extend(args[i - 1..].iter().copied());
            break;
        }
        parsed.operands.push(arg);
    }
    Ok(parsed)
}

/// `find`'s starting points and expression: only known primaries.
fn find(rest: &[&str], reads: &mut Vec<String>) -> Result<(), NotReadOnly> {
    let start = rest
        .iter()
        .position(|w| w.starts_with('-') || matches!(*w, "(" | ")" | "!" | ","))
        .unwrap_or(rest.len());
    reads.extend(rest[..start].iter().map(|w| (*w).to_owned()));
    let mut i = start;
    while let Some(primary) = rest.get(i) {
        if FIND_PRIMARIES.contains(primary) {
            i += 1;
        } else if FIND_VALUED.contains(primary)
            || primary.starts_with("-newer") && primary.len() == "-newerXY".len()
        {
            if i + 1 >= rest.len() {
                return Err(NotReadOnly::Flag((*primary).to_owned()));
            }
            i += 2;
        } else {
            return Err(NotReadOnly::Flag((*primary).to_owned()));
        }
    }
    Ok(())
}

/// `git [--no-pager] status|log|diff|show …`: operands (revisions, paths) are
/// all checked as paths, since `git diff A B` with a path outside the
/// repository compares files anywhere.
fn git(args: &[&str], reads: &mut Vec<String>) -> Result<(), NotReadOnly> {
    let mut i = 0;
    while args.get(i).is_some_and(|a| GIT_GLOBAL_FLAGS.contains(a)) {
        i += 1;
    }
    let Some(name) = args.get(i) else {
        return Err(NotReadOnly::Flag("git".to_owned()));
    };
    let sub = GIT_SUBCOMMANDS
        .iter()
        .find(|s| s.name == *name)
        .ok_or_else(|| NotReadOnly::Flag((*name).to_owned()))?;
    let parsed = parse_flags(&args[i + 1..], sub.flags, sub.valued, true, false)?;
    reads.extend(parsed.paths);
    reads.extend(parsed.operands.into_iter().map(str::to_owned));
    Ok(())
}

/// True when a line is read-only by its text alone (the paths it reads are
/// not checked here).
pub fn is_read_only_text(syntax: &Syntax) -> bool {
    classify(syntax).is_ok()
}

#[cfg(test)]
mod tests {
    use super::super::bash_ast::analyse;
    use super::*;

    fn reads(line: &str) -> Result<Vec<String>, NotReadOnly> {
        classify(&analyse(line)).map(|l| l.reads)
    }

    #[test]
    fn read_only_lines_and_what_they_read() {
        for (line, expected) in [
            ("ls", vec![]),
            ("ls -la src", vec!["src"]),
            ("ls -lah --color=never target/", vec!["target/"]),
            ("cat Cargo.toml", vec!["Cargo.toml"]),
            ("cat -n a b", vec!["a", "b"]),
            ("head -n 20 src/main.rs", vec!["src/main.rs"]),
            ("head -5 x", vec!["x"]),
            ("tail -n50 log.txt", vec!["log.txt"]),
            ("wc -l src/*.rs", vec!["src/*.rs"]),
            ("grep -rn 'fn main' src", vec!["src"]),
            ("grep -e x -e y a.txt", vec!["a.txt"]),
            ("grep -f pats.txt a.txt", vec!["pats.txt", "a.txt"]),
            ("grep -A3 TODO -- -odd-name", vec!["-odd-name"]),
            ("rg -n --hidden TODO", vec![]),
            (
                "rg -t rust -g '!target' unwrap src tests",
                vec!["src", "tests"],
            ),
            ("find . -name '*.rs' -type f", vec!["."]),
            (
                "find src tests -maxdepth 2 -newer x -print0",
                vec!["src", "tests"],
            ),
            ("find -H . \\( -name a -o -name b \\) -print", vec!["."]),
            ("git status", vec![]),
            ("git status --short", vec![]),
            ("git log --oneline -n 5", vec![]),
            ("git --no-pager log -p -3 -- src/lib.rs", vec!["src/lib.rs"]),
            ("git diff --stat HEAD~1", vec!["HEAD~1"]),
            ("git show HEAD:src/main.rs", vec!["HEAD:src/main.rs"]),
            ("pwd", vec![]),
            ("echo 'hello world' \"quoted\"", vec![]),
            ("echo -n done", vec![]),
            ("cat < input.txt", vec!["input.txt"]),
            ("ls 2>/dev/null && pwd; echo x 2>&1", vec![]),
            ("cat a | grep x | wc -l", vec!["a"]),
            ("grep x <<< 'text'", vec![]),
            ("stat -c %s Cargo.toml", vec!["Cargo.toml"]),
            ("du -sh target", vec!["target"]),
        ] {
            let expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
            assert_eq!(reads(line), Ok(expected), "{line:?}");
        }
    }

    #[test]
    fn lines_that_are_not_read_only() {
        use NotReadOnly as N;
        for (line, expected) in [
            ("echo hi > out.txt", N::Redirection),
            ("cat a >> b", N::Redirection),
            ("ls &> all.txt", N::Redirection),
            ("ls --unknown-flag", N::Flag("--unknown-flag".into())),
            ("ls -l -Y", N::Flag("-Y".into())),
            ("cat -z x", N::Flag("-z".into())),
            ("find . -delete", N::Flag("-delete".into())),
            ("find . -name x -exec rm {} +", N::Flag("-exec".into())),
            ("find . -fprint out", N::Flag("-fprint".into())),
            ("find . -fls out", N::Flag("-fls".into())),
            ("find . -okdir rm {} ;", N::Flag("-okdir".into())),
            ("rg --pre ./script x", N::Flag("--pre".into())),
            ("rg -z x", N::Flag("-z".into())),
            ("git diff --output=x", N::Flag("--output=x".into())),
            ("git diff --ext-diff", N::Flag("--ext-diff".into())),
            ("git diff --no-index a b", N::Flag("--no-index".into())),
            ("git -C /etc status", N::Flag("-C".into())),
            ("git -c core.pager=sh log", N::Flag("-c".into())),
            ("git commit -m x", N::Flag("commit".into())),
            ("git push", N::Flag("push".into())),
            ("pwd extra", N::Operand("extra".into())),
            ("rm -rf target", N::Program("rm".into())),
            ("./ls", N::Program("./ls".into())),
            ("/bin/cat x", N::Program("/bin/cat".into())),
            ("sudo cat x", N::Program("sudo".into())),
            ("cargo test", N::Program("cargo".into())),
            ("LD_PRELOAD=x.so ls", N::Assignment),
            ("cat $FILE", N::Expansion),
            ("echo \"$HOME\"", N::Expansion),
            ("cat {a,b}x{1..2}", N::Expansion),
            ("ls &", N::NotPlain),
            ("(ls)", N::NotPlain),
            ("ls; touch x", N::Program("touch".into())),
            ("echo $(rm -rf x)", N::NotPlain),
            ("cat <(curl x)", N::NotPlain),
            ("ls | sh", N::Program("sh".into())),
            ("ls() { rm -rf x; }; ls", N::NotPlain),
            ("", N::NotPlain),
            ("grep -R x .", N::Flag("-R".into())),
            ("rg -L x", N::Flag("-L".into())),
            ("find -L . -name x", N::Flag("-L".into())),
            ("find . -follow", N::Flag("-follow".into())),
            ("cat {/etc/passwd,x}", N::Expansion),
            ("cat ~root/.ssh/id_rsa", N::Expansion),
            ("head -n", N::Flag("-n".into())),
        ] {
            assert_eq!(reads(line), Err(expected), "{line:?}");
        }
    }
}
