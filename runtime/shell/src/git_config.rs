//! Git configuration that names programs: whether a `git config` command
//! line sets a key that makes git run a program (`core.fsmonitor`,
//! `core.pager`, `diff.<driver>.textconv`, an alias starting with `!`, …) or
//! look for hooks or more configuration elsewhere (`core.hooksPath`,
//! `include.path`, `safe.directory`, …). Such a key set by a command runs its
//! program in the next git command in the repository, Troupe's own included,
//! outside anything that confined the command that set it.
//!
//! Pure: a function of the words after `git` (quotes removed). The hard
//! blocks (`hard_blocks`) call it for every `git` command they read; it does
//! not decide anything else, and it reads the text only: configuration
//! written by other means is the OS sandbox's to stop.

use super::syntax::Word;

/// git's own options that take a separate value (`git -C DIR config …`).
const GIT_OPTIONS_WITH_VALUE: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--super-prefix",
];

/// `git config` options that take a separate value.
const GIT_CONFIG_OPTIONS_WITH_VALUE: &[&str] = &[
    "-f",
    "--file",
    "--blob",
    "--type",
    "--default",
    "--comment",
    "--value",
    "--url",
];

/// Sections that hold keys of [`git_key_runs_program`]: renaming a section
/// to one of them can create such a key.
const GIT_PROGRAM_SECTIONS: &[&str] = &[
    "core",
    "sequence",
    "diff",
    "merge",
    "filter",
    "credential",
    "gpg",
    "uploadpack",
    "alias",
    "include",
    "includeif",
    "safe",
    "pager",
    "interactive",
    "remote",
    "difftool",
    "mergetool",
    "browser",
    "man",
    "guitool",
    "sendemail",
    "submodule",
    "trailer",
    "imap",
    "hook",
    "init",
];

/// What `git … config …` would change that makes git run a program or look
/// for hooks or configuration elsewhere, as a sentence; `None` for reads,
/// harmless keys and other git commands.
pub fn git_config_change(args: &[Word]) -> Option<String> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let value = arg.value.as_str();
        if GIT_OPTIONS_WITH_VALUE.contains(&value) {
            i += 2;
        } else if value.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    if args.get(i).map(|w| w.value.as_str()) != Some("config") {
        return None;
    }
    let mut operands: Vec<&Word> = Vec::new();
    let mut action: Option<&str> = None;
    let mut scope = "this repository".to_owned();
    let mut options_ended = false;
    let mut rest = args[i + 1..].iter();
    while let Some(arg) = rest.next() {
        let value = arg.value.as_str();
        if options_ended || !value.starts_with('-') || value == "-" {
            operands.push(arg);
            continue;
        }
        match value {
            "--" => options_ended = true,
            "--global" => scope = "every repository of the user".to_owned(),
            "--system" => scope = "every repository on this machine".to_owned(),
            "-f" | "--file" => {
                if let Some(file) = rest.next() {
                    scope = format!("whatever reads `{}`", file.value);
                }
            }
            "--add" | "--replace-all" => action = Some("set"),
            "-e" | "--edit" => action = Some("edit"),
            "--rename-section" => action = Some("rename-section"),
            "--get" | "--get-all" | "--get-regexp" | "--get-urlmatch" | "--get-color"
            | "--get-colorbool" | "-l" | "--list" | "--unset" | "--unset-all"
            | "--remove-section" => action = Some("read"),
            v if GIT_CONFIG_OPTIONS_WITH_VALUE.contains(&v) => {
                rest.next();
            }
            v => {
                if let Some(file) = v.strip_prefix("--file=") {
                    scope = format!("whatever reads `{file}`");
                }
            }
        }
    }
    // `git config set KEY VALUE` and the other subcommands of git 2.46.
    if action.is_none()
        && let Some(first) = operands.first()
    {
        let subcommand = match first.value.as_str() {
            "set" => Some("set"),
            "edit" => Some("edit"),
            "rename-section" => Some("rename-section"),
            "get" | "list" | "unset" | "remove-section" => Some("read"),
            _ => None,
        };
        if subcommand.is_some() {
            action = subcommand;
            operands.remove(0);
        }
    }
    let must = "tell the user what should change there and why: the user must make that change";
    match action.unwrap_or("set") {
        "set" => {
            let (key, value) = (operands.first()?, operands.get(1)?);
            git_key_runs_program(&key.value, value).then(|| {
                format!(
                    "`git config` setting `{}` makes git run a program, or look for hooks or configuration elsewhere, in {scope}, Troupe's own git commands included; {must}",
                    key.value
                )
            })
        }
        "edit" => Some(format!(
            "`git config --edit` lets its editor write any key, including keys that make git run a program, in {scope}; {must}"
        )),
        "rename-section" => {
            let new = operands.get(1)?;
            let section = new.value.split('.').next()?.to_ascii_lowercase();
            GIT_PROGRAM_SECTIONS.contains(&section.as_str()).then(|| {
                format!(
                    "`git config --rename-section` into `{}` can create keys that make git run a program in {scope}; {must}",
                    new.value
                )
            })
        }
        _ => None,
    }
}

/// True when setting git configuration `key` (any case) to `value` makes
/// git run a program, or look for hooks or configuration elsewhere. A value
/// known only when the line runs counts as a program where the value decides.
fn git_key_runs_program(key: &str, value: &Word) -> bool {
    let key = key.to_ascii_lowercase();
    let Some((section, rest)) = key.split_once('.') else {
        return false;
    };
    let (subsection, name) = match rest.rsplit_once('.') {
        Some((subsection, name)) => (Some(subsection), name),
        None => (None, rest),
    };
    let text = value.value.as_str();
    let unknown = text.contains(['$', '`']);
    let boolean = matches!(
        text.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
    );
    let shell_command = unknown || text.starts_with('!');
    let sub = subsection.is_some();
    match (section, sub, name) {
        // A boolean turns the built-in monitor or the default pager on or off.
        ("core", false, "fsmonitor") | ("pager", false, _) => unknown || !boolean,
        (
            "core",
            false,
            "hookspath"
            | "pager"
            | "editor"
            | "sshcommand"
            | "askpass"
            | "gitproxy"
            | "alternaterefscommand",
        )
        | ("sequence", false, "editor")
        | ("diff", false, "external")
        | ("diff", true, "textconv" | "command")
        | ("merge", true, "driver")
        | ("filter", true, "clean" | "smudge" | "process")
        | ("credential", _, "helper")
        | ("gpg", _, "program")
        | ("gpg", true, "defaultkeycommand")
        | ("uploadpack", false, "packobjectshook")
        | ("include", false, "path")
        | ("includeif", true, "path")
        | ("safe", false, "directory")
        | ("interactive", false, "difffilter")
        | ("remote", true, "uploadpack" | "receivepack")
        | ("difftool" | "mergetool" | "browser" | "man", true, "cmd" | "path")
        | ("guitool", true, "cmd")
        | ("sendemail", _, "tocmd" | "cccmd" | "headercmd" | "sendmailcmd")
        | ("trailer", true, "command" | "cmd")
        | ("imap", false, "tunnel")
        | ("hook", true, "command")
        | ("init", false, "templatedir") => true,
        // An alias or a submodule update starting with `!` is a shell command.
        ("alias", _, _) | ("submodule", true, "update") => shell_command,
        // An SMTP server given as a path is a program.
        ("sendemail", _, "smtpserver") => unknown || text.starts_with(['/', '~']),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(value: &str) -> Word {
        let mut word = Word::default();
        word.value = value.to_owned();
        word
    }

    fn change(line: &str) -> Option<String> {
        let words: Vec<Word> = line.split_whitespace().map(word).collect();
        git_config_change(&words)
    }

    #[test]
    fn keys_that_name_programs_any_case() {
        for (key, value, runs) in [
            ("core.fsmonitor", "sh x", true),
            ("Core.FSMonitor", "sh x", true),
            ("core.fsmonitor", "true", false),
            ("core.fsmonitor", "$X", true),
            ("core.hooksPath", "hooks", true),
            ("core.pager", "cat", true),
            ("core.editor", "vim", true),
            ("core.sshCommand", "ssh", true),
            ("core.askPass", "x", true),
            ("core.gitProxy", "x", true),
            ("core.alternateRefsCommand", "x", true),
            ("core.autocrlf", "true", false),
            ("sequence.editor", "x", true),
            ("diff.external", "x", true),
            ("diff.pdf.textconv", "x", true),
            ("diff.pdf.command", "x", true),
            ("diff.renames", "true", false),
            ("merge.ours.driver", "x", true),
            ("merge.ours.name", "x", false),
            ("filter.lfs.clean", "x", true),
            ("filter.lfs.smudge", "x", true),
            ("filter.lfs.process", "x", true),
            ("filter.lfs.required", "true", false),
            ("credential.helper", "store", true),
            ("credential.https://example.com.helper", "x", true),
            ("credential.username", "x", false),
            ("gpg.program", "x", true),
            ("gpg.ssh.program", "x", true),
            ("gpg.ssh.defaultKeyCommand", "x", true),
            ("gpg.format", "ssh", false),
            ("uploadpack.packObjectsHook", "x", true),
            ("alias.x", "!sh y", true),
            ("alias.x", "status", false),
            ("include.path", "x", true),
            ("includeIf.gitdir:~/w/.path", "x", true),
            ("safe.directory", "*", true),
            ("pager.log", "sh x", true),
            ("pager.branch", "false", false),
            ("interactive.diffFilter", "x", true),
            ("remote.origin.uploadpack", "x", true),
            ("remote.origin.receivepack", "x", true),
            ("remote.origin.url", "x", false),
            ("difftool.x.cmd", "x", true),
            ("mergetool.x.path", "x", true),
            ("browser.x.cmd", "x", true),
            ("man.x.path", "x", true),
            ("guitool.x.cmd", "x", true),
            ("sendemail.toCmd", "x", true),
            ("sendemail.work.ccCmd", "x", true),
            ("sendemail.smtpServer", "/usr/bin/x", true),
            ("sendemail.smtpServer", "smtp.example.com", false),
            ("submodule.x.update", "!sh y", true),
            ("submodule.x.update", "rebase", false),
            ("trailer.x.command", "x", true),
            ("imap.tunnel", "x", true),
            ("hook.x.command", "x", true),
            ("init.templateDir", "x", true),
            ("receive.procReceiveRefs", "refs/for", false),
            ("user.name", "x", false),
            ("nodot", "x", false),
        ] {
            assert_eq!(
                git_key_runs_program(key, &word(value)),
                runs,
                "{key} = {value}"
            );
        }
    }

    #[test]
    fn every_spelling_of_setting_a_key() {
        for line in [
            "config core.pager x",
            "config set core.pager x",
            "config set --append core.pager x",
            "config --add core.pager x",
            "config --replace-all core.pager x y",
            "config --local core.pager x",
            "config --worktree core.pager x",
            "config --global core.pager x",
            "config --system core.pager x",
            "config -f .git/config core.pager x",
            "config --file=.git/config core.pager x",
            "config --type string core.pager x",
            "config -- core.pager x",
            "-C . config core.pager x",
            "--git-dir=.git --no-pager config core.pager x",
            "-c a.b=c config core.pager x",
            "config --edit",
            "config -e",
            "config edit",
            "config --rename-section x core",
            "config rename-section x.y includeIf.z",
        ] {
            assert!(change(line).is_some(), "{line}");
        }
        for line in [
            "config core.pager",
            "config --get core.pager",
            "config get core.pager",
            "config --get-regexp core",
            "config -l",
            "config list",
            "config --unset core.pager",
            "config unset core.pager",
            "config --remove-section core",
            "config --rename-section x y",
            "config user.name x",
            "config --blob HEAD:cfg --get core.pager",
            "log config core.pager x",
            "status",
        ] {
            assert_eq!(change(line), None, "{line}");
        }
        let global = change("config --global core.pager x").unwrap_or_default();
        assert!(global.contains("every repository of the user"), "{global}");
        let file = change("config -f other.cfg core.pager x").unwrap_or_default();
        assert!(file.contains("whatever reads `other.cfg`"), "{file}");
    }
}
