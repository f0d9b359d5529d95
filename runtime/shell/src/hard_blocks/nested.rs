//! Nested code: `sh -c`/`bash -c` and other shells, interpreters, `eval`,
//! `source`, `su -c`, `script -c`, `find -exec`, literal text or downloads
//! fed to a shell, `xargs` and `parallel` with the items fed to them, and
//! fork bombs.

use super::*;

/// `script -qc CMD`.
pub(super) fn script(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    if let Some(script) = option_value(call.args, &["-c", "--command"]) {
        walker.nested(&script, call.cwds, call.depth);
    }
    None
}

/// `eval ARGS…`: the joined arguments are shell source.
pub(super) fn eval(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let (args, cwds, depth) = (call.args, call.cwds, call.depth);
    walker.downloaded_code(call.program, args, depth);
    let joined: Vec<&str> = args.iter().map(|w| w.value.as_str()).collect();
    walker.nested(&joined.join(" "), cwds, depth);
    for arg in args {
        walker.printed_code(arg, cwds, depth);
    }
    None
}

/// `source FILE` and `. FILE`.
pub(super) fn source(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.downloaded_code(call.program, call.args, call.depth);
    if let Some(file) = call.args.first() {
        walker.printed_code(file, call.cwds, call.depth);
    }
    None
}

/// `su -c CMD`.
pub(super) fn su(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let args = call.args;
    walker.downloaded_code(call.program, args, call.depth);
    let script = args
        .iter()
        .position(|a| a.value == "-c" || a.value == "--command")
        .and_then(|i| args.get(i + 1));
    if let Some(script) = script {
        walker.nested(&script.value, call.cwds, call.depth);
    }
    None
}

/// A shell: its `-c` script, or the file it runs.
pub(super) fn shell(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    let (args, cwds, depth) = (call.args, call.cwds, call.depth);
    walker.downloaded_code(call.program, args, depth);
    let invocation = shell_invocation(args);
    if let Some(script) = invocation.script {
        walker.nested(&script.value, cwds, depth);
        walker.printed_code(script, cwds, depth);
    } else if let Some(file) = invocation.file {
        // `bash <(echo 'rm -rf /')` runs what the substitution prints.
        walker.printed_code(file, cwds, depth);
    }
    None
}

/// True for a shell of [`SHELLS`].
pub(super) fn is_shell(program: &str) -> bool {
    SHELLS.contains(&program)
}

/// An interpreter given downloaded code.
pub(super) fn interpreter(walker: &mut Walker<'_, '_>, call: &Call<'_>) -> Option<Vec<Cwd>> {
    walker.downloaded_code(call.program, call.args, call.depth);
    None
}

/// Shells whose `-c` argument is a script and whose standard input is code.
pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh",
];

/// Interpreters that execute their standard input when given no program.
pub(super) const INTERPRETERS: &[&str] =
    &["python", "perl", "ruby", "node", "nodejs", "php", "lua"];

pub(super) fn is_interpreter(program: &str) -> bool {
    INTERPRETERS.iter().any(|name| {
        program == *name
            || program
                .strip_prefix(name)
                .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// How a shell was invoked.
pub(super) struct ShellInvocation<'w> {
    /// The `-c` script.
    script: Option<&'w Word>,
    /// The script file it runs, without `-c`.
    file: Option<&'w Word>,
    /// True when it executes its standard input.
    reads_stdin: bool,
}

pub(super) fn shell_invocation(args: &[Word]) -> ShellInvocation<'_> {
    let mut i = 0;
    let mut command = false;
    let mut stdin_flag = false;
    while let Some(arg) = args.get(i) {
        let value = arg.value.as_str();
        if value == "--" {
            i += 1;
            break;
        }
        if value.starts_with("--") {
            i += if matches!(value, "--rcfile" | "--init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if (value.starts_with('-') || value.starts_with('+')) && value.len() > 1 {
            let flags = &value[1..];
            if value.starts_with('-') {
                command |= flags.contains('c');
                stdin_flag |= flags.contains('s');
            }
            i += if flags.contains('o') || flags.contains('O') {
                2
            } else {
                1
            };
            continue;
        }
        break;
    }
    let operand = args.get(i);
    if command {
        return ShellInvocation {
            script: operand,
            file: None,
            reads_stdin: false,
        };
    }
    let reads_stdin = stdin_flag || operand.is_none_or(|w| is_stdin_path(&w.value));
    ShellInvocation {
        script: None,
        file: operand.filter(|_| !stdin_flag),
        reads_stdin,
    }
}

pub(super) fn interpreter_reads_stdin(args: &[Word]) -> bool {
    for arg in args {
        let value = arg.value.as_str();
        if is_stdin_path(value) {
            return true;
        }
        if ["-c", "-e", "-E", "-m", "-r", "-p", "-n"]
            .iter()
            .any(|flag| value.starts_with(flag))
        {
            return false;
        }
        if !value.starts_with('-') {
            return false;
        }
    }
    true
}

/// A prefix that turns its input into the command's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Feeder {
    /// `xargs`: runs the command itself, with the items as arguments.
    Xargs,
    /// `parallel`: runs each job as a shell command line.
    Parallel,
}

/// The innermost `xargs` or `parallel` among a command's prefix words, with
/// its index.
pub(super) fn feeder(prefix_words: &[&str]) -> Option<(usize, Feeder)> {
    prefix_words.iter().enumerate().rev().find_map(|(i, word)| {
        match prefix_named(word).map(|p| p.name) {
            Some("xargs") => Some((i, Feeder::Xargs)),
            Some("parallel") => Some((i, Feeder::Parallel)),
            _ => None,
        }
    })
}

/// `parallel`'s separators between the command and its argument sources.
pub(super) fn is_parallel_separator(value: &str) -> bool {
    matches!(value, ":::" | ":::+" | "::::" | "::::+")
}

/// How `xargs` splits its input into items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Split {
    /// Blanks and newlines, with quotes and backslashes (the default).
    Blanks,
    /// One item per line (`-I`, and `parallel`).
    Lines,
    /// NUL bytes (`-0`).
    Nul,
    /// A delimiter (`-d X`).
    Delimiter(char),
}

/// The `xargs` options that decide what the command is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct XargsOptions {
    /// The replace string (`-I R`, `-i`): each item replaces it in the command.
    pub(super) replace: Option<String>,
    /// How the input is split.
    pub(super) split: Split,
    /// The file the items come from instead of the pipe (`-a FILE`).
    pub(super) arg_file: Option<String>,
}

pub(super) fn parse_delimiter(value: &str) -> char {
    match value {
        "\\n" => '\n',
        "\\t" => '\t',
        "\\0" => '\0',
        _ => value.chars().next().unwrap_or('\n'),
    }
}

/// Reads `xargs`'s options (the words after `xargs`, up to the command).
pub(super) fn xargs_options(words: &[&str]) -> XargsOptions {
    let mut replace = None;
    let mut nul = false;
    let mut delimiter = None;
    let mut arg_file = None;
    let mut i = 0;
    while let Some(&word) = words.get(i) {
        if word == "--" || !word.starts_with('-') || word == "-" {
            break;
        }
        match word {
            "-I" => {
                replace = words.get(i + 1).map(|r| (*r).to_owned());
                i += 1;
            }
            "-i" | "--replace" => replace = Some("{}".to_owned()),
            "-0" | "--null" => nul = true,
            "-d" | "--delimiter" => {
                delimiter = words.get(i + 1).map(|d| parse_delimiter(d));
                i += 1;
            }
            "-a" | "--arg-file" => {
                arg_file = Some(words.get(i + 1).copied().unwrap_or_default().to_owned());
                i += 1;
            }
            "-n" | "-P" | "-L" | "-s" | "-E" | "--max-args" | "--max-procs" | "--max-chars" => {
                i += 1;
            }
            _ => {
                if let Some(r) = word.strip_prefix("--replace=") {
                    replace = Some(r.to_owned());
                } else if let Some(d) = word.strip_prefix("--delimiter=") {
                    delimiter = Some(parse_delimiter(d));
                } else if let Some(file) = word.strip_prefix("--arg-file=") {
                    arg_file = Some(file.to_owned());
                } else if word.starts_with("--") {
                } else if let Some(r) = word.strip_prefix("-I") {
                    replace = Some(r.to_owned());
                } else if let Some(r) = word.strip_prefix("-i") {
                    replace = Some(r.to_owned());
                } else if let Some(d) = word.strip_prefix("-d") {
                    delimiter = Some(parse_delimiter(d));
                } else if let Some(file) = word.strip_prefix("-a") {
                    arg_file = Some(file.to_owned());
                } else if word[1..].chars().all(|c| "0rtpxo".contains(c)) && word.contains('0') {
                    nul = true;
                }
            }
        }
        i += 1;
    }
    let split = if nul {
        Split::Nul
    } else if let Some(delimiter) = delimiter {
        Split::Delimiter(delimiter)
    } else if replace.is_some() {
        Split::Lines
    } else {
        Split::Blanks
    };
    XargsOptions {
        replace,
        split,
        arg_file,
    }
}

/// Splits text into `xargs` items: blanks separate, quotes and backslashes
/// keep them together.
pub(super) fn xargs_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            (None, c) => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(current);
    }
    out
}

/// The items a stream gives a command, split as `split` says.
pub(super) fn stream_items(stream: &Stream, split: Split) -> Vec<String> {
    let keep = |part: &str| (!part.trim().is_empty()).then(|| part.trim().to_owned());
    match stream {
        Stream::Paths(paths) => paths.clone(),
        Stream::Text(text) => match split {
            Split::Blanks => xargs_words(text),
            Split::Lines => text.lines().filter_map(keep).collect(),
            // `printf '/\0'` is kept as written: split on the escape too.
            Split::Nul => text
                .split('\0')
                .flat_map(|part| part.split("\\0"))
                .filter_map(keep)
                .collect(),
            Split::Delimiter(delimiter) => text.split(delimiter).filter_map(keep).collect(),
        },
    }
}

/// The `parallel` options that decide what its jobs are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct ParallelOptions {
    /// Replace strings given with `-I`.
    replace: Vec<String>,
    /// The file the arguments come from (`-a FILE`).
    arg_file: Option<String>,
    /// True when the input is passed to the jobs' standard input (`--pipe`).
    pipe: bool,
}

/// Reads `parallel`'s options (the words after `parallel`, up to the command).
pub(super) fn parallel_options(words: &[&str]) -> ParallelOptions {
    let with_argument = PREFIXES
        .iter()
        .find(|p| p.name == "parallel")
        .map_or(&[][..], |p| p.options_with_argument);
    let mut out = ParallelOptions::default();
    let mut i = 0;
    while let Some(&word) = words.get(i) {
        if word == "--" || !word.starts_with('-') {
            break;
        }
        match word {
            "-I" => {
                if let Some(r) = words.get(i + 1) {
                    out.replace.push((*r).to_owned());
                }
                i += 1;
            }
            "-a" | "--arg-file" => {
                out.arg_file = Some(words.get(i + 1).copied().unwrap_or_default().to_owned());
                i += 1;
            }
            "--pipe" | "--pipepart" | "--spreadstdin" => out.pipe = true,
            w if w.starts_with("--arg-file=") => {
                out.arg_file = w.strip_prefix("--arg-file=").map(str::to_owned);
            }
            w if w.starts_with("-a") && !w.starts_with("--") => {
                out.arg_file = Some(w[2..].to_owned());
            }
            w if with_argument.contains(&w) => i += 1,
            _ => {}
        }
        i += 1;
    }
    out
}

/// Characters after which `parallel` quotes an argument it inserts.
pub(super) const SHELL_SPECIAL: &[char] = &[
    ' ', '\t', '\n', ';', '&', '|', '<', '>', '(', ')', '$', '`', '\\', '"', '\'',
];

/// The command line `parallel` runs for one argument: the command with the
/// argument in place of its replace strings (`{}`, `{.}`, `{/}`, `{//}`,
/// `{/.}`, `{1}`, `-I` ones), or appended; the argument itself when there is
/// no command.
pub(super) fn parallel_job(program: &[Word], item: &str, replace: &[String]) -> String {
    if program.is_empty() {
        return item.to_owned();
    }
    let quote = |value: &str| {
        if value.contains(SHELL_SPECIAL) {
            format!("'{}'", value.replace('\'', "'\\''"))
        } else {
            value.to_owned()
        }
    };
    let path = Path::new(item);
    let base = path
        .file_name()
        .map_or_else(|| item.to_owned(), |n| n.to_string_lossy().into_owned());
    let dir = match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => ".".to_owned(),
        Some(parent) => parent.to_string_lossy().into_owned(),
        None => item.to_owned(),
    };
    let strip_extension = |value: &str| match value.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.contains('/') => stem.to_owned(),
        _ => value.to_owned(),
    };
    let mut strings: Vec<(String, String)> = vec![
        ("{}".to_owned(), quote(item)),
        ("{.}".to_owned(), quote(&strip_extension(item))),
        ("{//}".to_owned(), quote(&dir)),
        ("{/}".to_owned(), quote(&base)),
        ("{/.}".to_owned(), quote(&strip_extension(&base))),
    ];
    strings.extend((1..=9).map(|n| (format!("{{{n}}}"), quote(item))));
    strings.extend(replace.iter().map(|r| (r.clone(), quote(item))));
    let mut used = false;
    let words: Vec<String> = program
        .iter()
        .map(|word| {
            let mut value = word.value.clone();
            for (pattern, with) in &strings {
                if value.contains(pattern.as_str()) {
                    used = true;
                    value = value.replace(pattern.as_str(), with);
                }
            }
            value
        })
        .collect();
    let mut job = words.join(" ");
    if !used {
        job.push(' ');
        job.push_str(&quote(item));
    }
    job
}

/// What a command prints into a pipe, when the line says: literal text, the
/// starting points of an unnarrowed `find`, every entry for a plain `ls`;
/// `cat`, `tee`, `sort` and `uniq` pass on what they read.
pub(super) fn stream_after(
    simple: &SimpleCommand,
    before: Option<Stream>,
    depth: usize,
) -> Option<Stream> {
    if let Some(text) = printed_by(simple, depth) {
        return Some(Stream::Text(text));
    }
    let (program, args) = program_of(simple);
    let values: Vec<&str> = args.iter().map(|w| w.value.as_str()).collect();
    let operands = values.iter().filter(|v| !v.starts_with('-')).count();
    let reads_a_file = simple.redirects.iter().any(|r| {
        matches!(
            r.op,
            RedirOp::In | RedirOp::InOut | RedirOp::HereDoc | RedirOp::HereString
        )
    });
    match program {
        "find" => find_listing(&values).map(Stream::Paths),
        "ls" if operands == 0 => {
            let all = values
                .iter()
                .any(|v| v.starts_with('-') && !v.starts_with("--") && v.contains(['a', 'A']));
            let mut entries = vec!["*".to_owned()];
            if all {
                entries.push(".*".to_owned());
            }
            Some(Stream::Paths(entries))
        }
        "cat" | "sort" | "uniq" if operands == 0 && !reads_a_file => before,
        "tee" if !reads_a_file => before,
        _ => None,
    }
}

/// The starting points `find` prints first when nothing narrows what it
/// prints and it does nothing else (`find /`, `find ~ -print0`).
pub(super) fn find_listing(values: &[&str]) -> Option<Vec<String>> {
    let (roots, start) = find_roots(values);
    let expression = &values[start..];
    let only_prints = expression.iter().all(|v| {
        !v.starts_with('-') || FIND_HARMLESS.contains(v) || FIND_HARMLESS_WITH_VALUE.contains(v)
    }) && !expression.contains(&"-delete");
    if !only_prints || find_narrowed(expression) {
        return None;
    }
    Some(roots.into_iter().map(str::to_owned).collect())
}

/// The text a piece of shell source prints literally (see [`script_output`]).
pub(super) fn printed_text(source: &str, depth: usize) -> Option<String> {
    if depth > MAX_COMMAND_NESTING {
        return None;
    }
    script_output(&syntax::parse(source), depth)
}

/// What a script prints when the line says: what each of its pipelines
/// prints (`echo a; printf b`, `echo x | cat`).
pub(super) fn script_output(script: &Script, depth: usize) -> Option<String> {
    let mut out = Vec::new();
    for list in &script.lists {
        let pipelines = std::iter::once(&list.first).chain(list.rest.iter().map(|(_, p)| p));
        for pipeline in pipelines {
            let mut stream = None;
            for command in &pipeline.commands {
                stream = command_output(command, stream, depth);
            }
            if let Some(Stream::Text(text)) = stream {
                out.push(text);
            }
        }
    }
    (!out.is_empty()).then(|| out.join("\n"))
}

/// What one command of a pipeline prints, given what it reads.
pub(super) fn command_output(
    command: &Command,
    before: Option<Stream>,
    depth: usize,
) -> Option<Stream> {
    match command {
        Command::Simple(simple) => stream_after(simple, before, depth),
        Command::Subshell(script) | Command::Group(script) if depth < MAX_COMMAND_NESTING => {
            script_output(script, depth + 1).map(Stream::Text)
        }
        _ => None,
    }
}

/// What a simple command prints literally: [`literal_output`], or `cat` of
/// process substitutions that print literal text (`cat <(echo x)`).
pub(super) fn printed_by(simple: &SimpleCommand, depth: usize) -> Option<String> {
    if let Some(text) = literal_output(simple) {
        return Some(text);
    }
    let (program, args) = program_of(simple);
    if program != "cat" || args.is_empty() {
        return None;
    }
    let texts: Option<Vec<String>> = args
        .iter()
        .map(|arg| process_output(&arg.value, depth))
        .collect();
    texts.map(|texts| texts.join("\n"))
}

/// What a process substitution word (`<(echo /)`) prints literally.
pub(super) fn process_output(word: &str, depth: usize) -> Option<String> {
    let inner = word.strip_prefix("<(")?.strip_suffix(')')?;
    printed_text(inner, depth + 1)
}

/// True when a command given as text (`nc -e /bin/sh`, `ncat -c 'bash -i'`,
/// `socat … EXEC:sh`) executes its standard input.
pub(super) fn text_executes_stdin(command: &str) -> bool {
    simple_commands(&syntax::parse(command))
        .into_iter()
        .any(simple_executes_stdin)
}

/// True when a process substitution of the command executes what it is given
/// (`tee >(sh)`, `> >(bash)`).
pub(super) fn process_substitution_executes(simple: &SimpleCommand) -> bool {
    simple
        .words
        .iter()
        .chain(simple.redirects.iter().map(|r| &r.target))
        .flat_map(|w| &w.subs)
        .filter(|sub| sub.process)
        .any(|sub| {
            simple_commands(&syntax::parse(&sub.source))
                .into_iter()
                .any(simple_executes_stdin)
        })
}

/// Paths through which a program reads its standard input.
pub(super) fn is_stdin_path(value: &str) -> bool {
    matches!(
        value,
        "-" | "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" | "/proc/self/fd/0/"
    )
}

/// The scripts a command's prefixes run themselves: `env -S STRING`
/// (`-SSTRING`, `--split-string=STRING`), and `flock … -c CMD` /
/// `runuser … -c CMD`, whose `-c` ends the prefix before its operands.
pub(super) fn prefix_scripts(words: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut prefix = "";
    let mut i = 0;
    while let Some(word) = words.get(i) {
        let name = basename(word);
        if matches!(name, "env" | "flock" | "runuser") {
            prefix = name;
        } else if prefix == "env" {
            if matches!(*word, "-S" | "--split-string") {
                if let Some(script) = words.get(i + 1) {
                    out.push((*script).to_owned());
                }
                i += 1;
            } else if let Some(script) = word.strip_prefix("--split-string=") {
                out.push(script.to_owned());
            } else if let Some(script) = word.strip_prefix("-S").filter(|s| !s.is_empty()) {
                out.push(script.to_owned());
            }
        } else if !prefix.is_empty() && matches!(*word, "-c" | "--command") {
            if let Some(script) = words.get(i + 1) {
                out.push((*script).to_owned());
            }
            i += 1;
        }
        i += 1;
    }
    out
}

/// The text a command writes when it only prints literal arguments or a
/// here-document (`echo`, `printf`, `cat <<EOF`).
pub(super) fn literal_output(simple: &SimpleCommand) -> Option<String> {
    let (program, args) = program_of(simple);
    let values = args.iter().map(|w| w.value.as_str());
    match program {
        "echo" => {
            let words: Vec<&str> = values
                .skip_while(|v| matches!(*v, "-n" | "-e" | "-E" | "-ne" | "-en"))
                .collect();
            Some(words.join(" "))
        }
        "printf" => {
            let words: Vec<&str> = values.collect();
            printf_output(&words)
        }
        "cat" if args.is_empty() => simple.redirects.iter().find_map(|r| match r.op {
            RedirOp::HereDoc => r.heredoc.as_ref().map(|doc| doc.body.clone()),
            RedirOp::HereString => Some(r.target.value.clone()),
            _ => None,
        }),
        _ => None,
    }
}

/// What `printf FORMAT ARG…` prints: each conversion (`%s`, `%b`, `%d`, …)
/// takes the next argument as written, and the format is used again while
/// arguments remain; `\n` and `\t` are expanded. `None` for `printf -v`,
/// which prints nothing.
pub(super) fn printf_output(args: &[&str]) -> Option<String> {
    let args = match args.first() {
        Some(&"-v") => return None,
        Some(&"--") => &args[1..],
        _ => args,
    };
    let Some((format, rest)) = args.split_first() else {
        return Some(String::new());
    };
    let mut rest = rest.iter();
    let mut out = String::new();
    loop {
        let mut converted = false;
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.peek() {
                Some('%') => {
                    out.push('%');
                    chars.next();
                }
                Some(_) => {
                    // Flags, width and precision up to the conversion letter.
                    for d in chars.by_ref() {
                        if d.is_ascii_alphabetic() {
                            break;
                        }
                    }
                    converted = true;
                    if let Some(arg) = rest.next() {
                        out.push_str(arg);
                    }
                }
                None => out.push('%'),
            }
        }
        if !converted || rest.len() == 0 {
            break;
        }
    }
    Some(out.replace("\\n", "\n").replace("\\t", "\t"))
}

pub(super) fn simple_executes_stdin(simple: &SimpleCommand) -> bool {
    let (program, args) = program_of(simple);
    let through_xargs = simple
        .words
        .iter()
        .take_while(|w| basename(&w.value) != program)
        .any(|w| basename(&w.value) == "xargs");
    if through_xargs && (SHELLS.contains(&program) || is_interpreter(program)) {
        // `… | xargs sh -c` runs what it reads as commands.
        return true;
    }
    if matches!(program, "awk" | "gawk" | "mawk" | "nawk" | "busybox awk")
        && args
            .iter()
            .any(|a| a.value.contains("system(") || a.value.contains("| getline"))
    {
        return true;
    }
    if SHELLS.contains(&program) {
        return shell_invocation(args).reads_stdin;
    }
    if is_interpreter(program) {
        return interpreter_reads_stdin(args);
    }
    if matches!(program, "source" | ".") {
        return args.first().is_some_and(|a| is_stdin_path(&a.value));
    }
    false
}

/// The words by which a function calls itself without naming itself.
pub(super) const SELF_CALLS: &[&str] = &["$FUNCNAME", "${FUNCNAME}", "${FUNCNAME[0]}"];

/// The functions a script defines that call themselves, directly or through
/// each other, at least twice in one pipeline or at least twice with one call
/// in the background: exponential process growth. Returns the names of the
/// first such cycle.
pub(super) fn fork_bomb(script: &Script) -> Option<Vec<String>> {
    let mut functions: Vec<(&str, &Script)> = Vec::new();
    collect_functions(script, &mut functions);
    if functions.is_empty() {
        return None;
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in &functions {
        index.entry(name).or_insert_with(|| {
            names.push(name);
            names.len() - 1
        });
    }
    // Which defined functions each one calls (a name defined twice calls
    // what either body calls).
    let mut calls: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
    for (name, body) in &functions {
        let caller = index[name];
        for simple in simple_commands(body) {
            let program = called_name(simple);
            let callee = if SELF_CALLS.contains(&program) {
                Some(caller)
            } else {
                index.get(program).copied()
            };
            if let Some(callee) = callee {
                calls[caller].push(callee);
            }
        }
    }
    for edges in &mut calls {
        edges.sort_unstable();
        edges.dedup();
    }
    for cycle in strongly_connected(&calls) {
        let recursive = cycle.len() > 1 || calls[cycle[0]].contains(&cycle[0]);
        if !recursive {
            continue;
        }
        let members: HashSet<&str> = cycle.iter().map(|&f| names[f]).collect();
        let multiplies = functions
            .iter()
            .filter(|(name, _)| members.contains(name))
            .any(|(_, body)| calls_multiply(body, &members));
        if multiplies {
            let mut cycle = cycle;
            cycle.sort_unstable();
            return Some(cycle.into_iter().map(|f| names[f].to_owned()).collect());
        }
    }
    None
}

/// The strongly connected components of a call graph (Kosaraju's two
/// passes, without recursion): the groups of functions that reach each other.
pub(super) fn strongly_connected(calls: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = calls.len();
    let mut visited = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    for start in 0..n {
        if visited[start] {
            continue;
        }
        visited[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some((node, edge)) = stack.pop() {
            match calls[node].get(edge) {
                Some(&next) => {
                    stack.push((node, edge + 1));
                    if !visited[next] {
                        visited[next] = true;
                        stack.push((next, 0));
                    }
                }
                None => finished.push(node),
            }
        }
    }
    let mut callers = vec![Vec::new(); n];
    for (caller, callees) in calls.iter().enumerate() {
        for &callee in callees {
            callers[callee].push(caller);
        }
    }
    let mut assigned = vec![false; n];
    let mut components = Vec::new();
    for &start in finished.iter().rev() {
        if assigned[start] {
            continue;
        }
        assigned[start] = true;
        let mut members = Vec::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            members.push(node);
            for &caller in &callers[node] {
                if !assigned[caller] {
                    assigned[caller] = true;
                    stack.push(caller);
                }
            }
        }
        components.push(members);
    }
    components
}

/// The name a simple command calls: its program, or the first word `eval`
/// runs (`eval f`).
pub(super) fn called_name(simple: &SimpleCommand) -> &str {
    match program_of(simple) {
        ("eval", args) => args
            .first()
            .and_then(|a| a.value.split_whitespace().next())
            .unwrap_or_default(),
        (program, _) => program,
    }
}

/// Every function definition of a script, nested ones included.
pub(super) fn collect_functions<'s>(script: &'s Script, out: &mut Vec<(&'s str, &'s Script)>) {
    for list in &script.lists {
        let pipelines = std::iter::once(&list.first).chain(list.rest.iter().map(|(_, p)| p));
        for pipeline in pipelines {
            for command in &pipeline.commands {
                match command {
                    Command::Function { name, body } => {
                        out.push((name.as_str(), body));
                        collect_functions(body, out);
                    }
                    Command::Subshell(inner) | Command::Group(inner) => {
                        collect_functions(inner, out);
                    }
                    Command::Simple(_) => {}
                }
            }
        }
    }
}

/// True when a function body calls `members` at least twice in one
/// pipeline, or at least twice with one call in the background.
pub(super) fn calls_multiply(body: &Script, members: &HashSet<&str>) -> bool {
    let mut total = 0usize;
    let mut backgrounded = false;
    let mut piped_twice = false;
    count_member_calls(
        members,
        body,
        &mut total,
        &mut backgrounded,
        &mut piped_twice,
        false,
    );
    piped_twice || (total >= 2 && backgrounded)
}

pub(super) fn count_member_calls(
    members: &HashSet<&str>,
    script: &Script,
    total: &mut usize,
    backgrounded: &mut bool,
    piped_twice: &mut bool,
    in_background: bool,
) {
    for list in &script.lists {
        let background = in_background || list.background;
        let pipelines = std::iter::once(&list.first).chain(list.rest.iter().map(|(_, p)| p));
        for pipeline in pipelines {
            let mut in_pipeline = 0usize;
            for command in &pipeline.commands {
                match command {
                    Command::Simple(simple) => {
                        let program = called_name(simple);
                        if members.contains(&program) || SELF_CALLS.contains(&program) {
                            in_pipeline += 1;
                            *total += 1;
                            *backgrounded |= background;
                        }
                    }
                    Command::Subshell(inner) | Command::Group(inner) => {
                        count_member_calls(
                            members,
                            inner,
                            total,
                            backgrounded,
                            piped_twice,
                            background,
                        );
                    }
                    Command::Function { .. } => {}
                }
            }
            *piped_twice |= in_pipeline >= 2;
        }
    }
}

impl Walker<'_, '_> {
    /// Blocks functions that call themselves, directly or through each
    /// other, more than once in a pipe or in the background.
    pub(super) fn fork_bombs(&mut self, script: &Script) {
        if let Some(names) = fork_bomb(script) {
            let detail = match names.as_slice() {
                [name] => format!(
                    "function `{name}` calls itself more than once in a pipe or in the background, which exhausts the process table"
                ),
                _ => format!(
                    "functions {} call each other more than once in a pipe or in the background, which exhausts the process table",
                    names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            self.block(HardBlockKind::ForkBomb, &detail);
        }
    }

    /// Walks the text that substitutions in `word` print literally, as shell
    /// source: `bash -c "$(echo 'rm -rf /')"`, `sh < <(printf …)`.
    pub(super) fn printed_code(&mut self, word: &Word, cwds: &[Cwd], depth: usize) {
        for sub in &word.subs {
            if let Some(text) = printed_text(&sub.source, depth + 1) {
                self.nested(&text, cwds, depth);
            }
        }
    }

    /// A command that executes its standard input: refuses input from the
    /// network or a download, and walks literal shell source fed to a shell.
    pub(super) fn stdin_code(
        &mut self,
        simple: &SimpleCommand,
        from_network: bool,
        cwds: &[Cwd],
        depth: usize,
    ) {
        let (program, _) = program_of(simple);
        if from_network {
            self.block(
                HardBlockKind::PipeToShell,
                &format!(
                    "`{program}` would execute what it reads from a network connection on its standard input; download the script, read it, then run it"
                ),
            );
        }
        let fed_download = simple.redirects.iter().any(|r| {
            matches!(r.op, RedirOp::In | RedirOp::HereString)
                && r.target
                    .subs
                    .iter()
                    .any(|sub| source_downloads(&sub.source, depth + 1))
        });
        if fed_download {
            self.block(
                HardBlockKind::PipeToShell,
                &format!(
                    "`{program}` would execute content fetched from the network on its standard input; download the script, read it, then run it"
                ),
            );
        }
        if !(SHELLS.contains(&program) || matches!(program, "source" | ".")) {
            return;
        }
        for redirect in &simple.redirects {
            match (redirect.op, &redirect.heredoc) {
                (RedirOp::HereDoc, Some(doc)) => self.nested(&doc.body, cwds, depth),
                (RedirOp::HereString, _) => {
                    self.nested(&redirect.target.value, cwds, depth);
                    self.printed_code(&redirect.target, cwds, depth);
                }
                (RedirOp::In, _) => self.printed_code(&redirect.target, cwds, depth),
                _ => {}
            }
        }
    }

    /// Counts one command run for a fed item; false (and a block) past
    /// [`MAX_FED_RUNS`].
    pub(super) fn count_fed_run(&mut self) -> bool {
        self.fed_runs += 1;
        if self.fed_runs > MAX_FED_RUNS {
            self.block(
                HardBlockKind::TooComplex,
                &format!(
                    "the command runs more than {MAX_FED_RUNS} commands for arguments fed by `xargs -I` or `parallel`, more than can be checked"
                ),
            );
            return false;
        }
        true
    }

    /// `… | xargs [-I R] CMD`: checks CMD with the items the pipe feeds it
    /// when the line prints them literally (`echo / | xargs rm -rf`).
    pub(super) fn xargs(
        &mut self,
        options: &[&str],
        command: &[Word],
        stream: Option<&Stream>,
        cwds: &[Cwd],
        depth: usize,
    ) {
        let options = xargs_options(options);
        // `-a FILE` replaces the pipe; a process substitution's literal text
        // is known (`xargs -a <(echo /) rm -rf`).
        let from_file;
        let stream = match &options.arg_file {
            Some(file) => {
                from_file = process_output(file, depth).map(Stream::Text);
                from_file.as_ref()
            }
            None => stream,
        };
        let Some(stream) = stream else {
            return;
        };
        let items = stream_items(stream, options.split);
        match &options.replace {
            Some(replace) => {
                for item in &items {
                    if !self.count_fed_run() {
                        return;
                    }
                    let words: Vec<Word> = command
                        .iter()
                        .map(|word| {
                            let mut word = word.clone();
                            word.value = word.value.replace(replace.as_str(), item);
                            word
                        })
                        .collect();
                    self.run(&words, cwds, depth);
                }
            }
            None => {
                let mut words = command.to_vec();
                words.extend(items.into_iter().map(|value| {
                    let mut word = Word::default();
                    word.value = value;
                    word
                }));
                self.run(&words, cwds, depth);
            }
        }
    }

    /// `parallel CMD ::: ARGS` (or ARGS fed by the pipe): each job is a
    /// shell command line, checked as such.
    pub(super) fn parallel(
        &mut self,
        options: &[&str],
        command: &[Word],
        stream: Option<&Stream>,
        cwds: &[Cwd],
        depth: usize,
    ) {
        let options = parallel_options(options);
        let separator = command.iter().position(|w| is_parallel_separator(&w.value));
        let program = &command[..separator.unwrap_or(command.len())];
        let mut items = Vec::new();
        let file_items = |file: &str| {
            process_output(file, depth)
                .map(|text| stream_items(&Stream::Text(text), Split::Lines))
                .unwrap_or_default()
        };
        if let Some(separator) = separator {
            // `:::` is followed by arguments, `::::` by files that hold them.
            let mut literal = true;
            for word in &command[separator..] {
                match word.value.as_str() {
                    ":::" | ":::+" => literal = true,
                    "::::" | "::::+" => literal = false,
                    value if literal => items.push(value.to_owned()),
                    value => items.extend(file_items(value)),
                }
            }
        } else if let Some(file) = &options.arg_file {
            items = file_items(file);
        } else if !options.pipe
            && let Some(stream) = stream
        {
            items = stream_items(stream, Split::Lines);
        }
        for item in &items {
            if !self.count_fed_run() {
                return;
            }
            let job = parallel_job(program, item, &options.replace);
            self.nested(&job, cwds, depth);
        }
    }

    pub(super) fn executes_stdin(&self, command: &Command) -> bool {
        match command {
            Command::Simple(simple) => simple_executes_stdin(simple),
            Command::Subshell(script) | Command::Group(script) => simple_commands(script)
                .into_iter()
                .any(simple_executes_stdin),
            Command::Function { .. } => false,
        }
    }

    /// `find … -exec CMD {} ;` (and `-execdir`, `-ok`, `-okdir`): checks
    /// the command it runs. When no test before the action narrows what is
    /// found, `{}` stands for each starting point, since the first thing
    /// `find` visits is the starting point itself (`find / -exec rm -rf {} +`
    /// is `rm -rf /`).
    pub(super) fn find_exec(&mut self, args: &[Word], cwds: &[Cwd], depth: usize) {
        let values: Vec<&str> = args.iter().map(|w| w.value.as_str()).collect();
        let (roots, expression_start) = find_roots(&values);
        let mut i = expression_start;
        while i < args.len() {
            if matches!(
                args[i].value.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir"
            ) {
                let start = i + 1;
                let mut end = start;
                while end < args.len() && !matches!(args[end].value.as_str(), ";" | "+") {
                    end += 1;
                }
                let sub = &args[start..end];
                let values: Vec<&str> = sub.iter().map(|w| w.value.as_str()).collect();
                let effective = effective_start(&values);
                self.views.push(CommandView {
                    source: values.join(" "),
                    words: values.join(" "),
                    effective: values[effective..].join(" "),
                });
                let before: Vec<&str> = args[expression_start..i]
                    .iter()
                    .map(|w| w.value.as_str())
                    .collect();
                if find_narrowed(&before) {
                    self.run(&sub[effective..], cwds, depth);
                } else {
                    for root in &roots {
                        let substituted: Vec<Word> = sub[effective..]
                            .iter()
                            .map(|word| {
                                let mut word = word.clone();
                                word.value = word.value.replace("{}", root);
                                word
                            })
                            .collect();
                        self.run(&substituted, cwds, depth);
                    }
                }
                i = end;
            }
            i += 1;
        }
    }
}
