//! Custom chat commands: `<project>/.troupe/commands/NAME.md` and
//! `<user config dir>/commands/NAME.md`. Typing `/NAME ARGS` in the chat sends
//! the file's body as the message, with `$ARGUMENTS` replaced by `ARGS`.
//!
//! Front matter (YAML `---` or TOML `+++`, with an optional `description`) is
//! optional. A project command replaces a user command of the same name.
//! Like skills, the files may come from cloned repositories: names are
//! validated, each file is read through a size cap, symlinks may not leave
//! their root, and a broken file is skipped with a [`SkillWarning`] naming it.
//! Which names belong to built-in commands is the chat's business: it drops
//! those with [`CommandSet::without`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{SkillWarning, cut_body, read_skill_file};
use crate::registry::valid_tool_name;
use troupe_config::front_matter::{key_prefix, one_line, parse_front_matter, split_front_matter};

/// Directory of commands under `.troupe/` and under the user config dir.
pub(crate) const COMMANDS_DIR_NAME: &str = "commands";
/// Extension of command files; other files are ignored.
const COMMAND_FILE_EXTENSION: &str = "md";
/// Command files read per directory, in file-name order.
pub(crate) const MAX_COMMANDS_PER_DIR: usize = 128;
/// Longest description in characters.
pub(crate) const MAX_COMMAND_DESCRIPTION_CHARS: usize = 200;
/// What `$ARGUMENTS` in a body stands for.
pub(crate) const ARGUMENTS_PLACEHOLDER: &str = "$ARGUMENTS";
/// The keys of a command's front matter.
const COMMAND_KEYS_HINT: &str = "`description: ...`";

/// One custom command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    /// Typed as `/NAME` (`^[A-Za-z0-9_-]{1,64}$`, the file name without `.md`).
    pub name: String,
    /// One line for `/help` (may be empty).
    pub description: String,
    /// The message template (cut like a skill body).
    pub body: String,
    /// The file it came from.
    pub path: PathBuf,
}

impl CustomCommand {
    /// The message `/NAME arguments` sends.
    pub fn expand(&self, arguments: &str) -> String {
        expand(&self.body, arguments)
    }
}

/// `body` with every `$ARGUMENTS` replaced by `arguments` (trimmed). A body
/// without the placeholder gets non-empty arguments appended after a blank
/// line, so they are never lost.
pub(crate) fn expand(body: &str, arguments: &str) -> String {
    let arguments = arguments.trim();
    if body.contains(ARGUMENTS_PLACEHOLDER) {
        body.replace(ARGUMENTS_PLACEHOLDER, arguments)
    } else if arguments.is_empty() {
        body.to_owned()
    } else {
        format!("{body}\n\n{arguments}")
    }
}

/// The custom commands of a chat, sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandSet {
    commands: BTreeMap<String, CustomCommand>,
}

impl CommandSet {
    /// The commands of the user config directory (when given) and of
    /// `<project_root>/.troupe/commands/`; a project command replaces a user
    /// command of the same name. A missing directory is not reported.
    pub fn load(
        user_config_dir: Option<&Path>,
        project_root: &Path,
    ) -> (CommandSet, Vec<SkillWarning>) {
        let (commands, warnings) = super::load_layered(
            user_config_dir,
            Some(project_root),
            COMMANDS_DIR_NAME,
            load_dir,
        );
        (CommandSet { commands }, warnings)
    }

    /// The set without the commands `is_builtin` claims, each dropped one
    /// reported with a warning: a custom command never shadows a built-in one.
    pub fn without(mut self, is_builtin: impl Fn(&str) -> bool) -> (CommandSet, Vec<SkillWarning>) {
        let shadowing: Vec<String> = self
            .commands
            .keys()
            .filter(|name| is_builtin(name))
            .cloned()
            .collect();
        let mut warnings = Vec::new();
        for name in shadowing {
            if let Some(command) = self.commands.remove(&name) {
                warnings.push(SkillWarning::new(
                    &command.path,
                    format!("/{name} is a built-in command; skipped: rename the file"),
                ));
            }
        }
        (self, warnings)
    }

    /// The command called `name` (exactly as typed).
    pub fn get(&self, name: &str) -> Option<&CustomCommand> {
        self.commands.get(name)
    }

    /// The commands, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &CustomCommand> {
        self.commands.values()
    }

    /// True when there is no command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

fn load_dir(
    dir: &Path,
    root: &Path,
    warnings: &mut Vec<SkillWarning>,
) -> BTreeMap<String, CustomCommand> {
    let mut commands = BTreeMap::new();
    let Some((names, canonical_root)) = super::listed_entries(
        dir,
        root,
        "commands",
        MAX_COMMANDS_PER_DIR,
        |name| {
            Path::new(name)
                .extension()
                .is_some_and(|ext| ext == COMMAND_FILE_EXTENSION)
        },
        warnings,
    ) else {
        return commands;
    };
    for file_name in names {
        let path = dir.join(&file_name);
        let stem = Path::new(&file_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !valid_tool_name(&stem) {
            warnings.push(SkillWarning::new(
                &path,
                "is not a command name; skipped: name the file with 1 to 64 of A-Z a-z 0-9 _ - \
                 and .md",
            ));
            continue;
        }
        let text = match read_skill_file(&path, &canonical_root) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(message) => {
                warnings.push(SkillWarning::new(&path, message));
                continue;
            }
        };
        match parse_command(&text, &stem, &path) {
            Ok(command) => {
                commands.insert(command.name.clone(), command);
            }
            Err(message) => warnings.push(SkillWarning::new(&path, message)),
        }
    }
    commands
}

/// The front matter keys. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with description")]
struct CommandFrontMatter {
    description: Option<String>,
}

/// Parses one command file; `name` is its file name without `.md`. Front
/// matter is optional; without it the whole text is the body.
pub(crate) fn parse_command(text: &str, name: &str, path: &Path) -> Result<CustomCommand, String> {
    let starts_front_matter = text
        .trim_start_matches('\u{feff}')
        .lines()
        .next()
        .is_some_and(|first| matches!(first.trim_end(), "---" | "+++"));
    let (description, body) = if starts_front_matter {
        let split = split_front_matter(text, COMMAND_KEYS_HINT)?;
        let front: CommandFrontMatter = parse_front_matter(split.syntax, split.front)?;
        let description = one_line(front.description.as_deref().unwrap_or_default());
        let chars = description.chars().count();
        if chars > MAX_COMMAND_DESCRIPTION_CHARS {
            return Err(format!(
                "{}`description` has {chars} characters, more than \
                 {MAX_COMMAND_DESCRIPTION_CHARS}; shorten it",
                key_prefix(split.front, "description")
            ));
        }
        (description, split.body)
    } else {
        (String::new(), text)
    };
    let body = cut_body(body.trim());
    if body.is_empty() {
        return Err("the body is empty; write the message the command sends".into());
    }
    Ok(CustomCommand {
        name: name.to_owned(),
        description,
        body,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn arguments_are_substituted_or_appended() {
        assert_eq!(
            expand("Review $ARGUMENTS now; $ARGUMENTS!", " a b "),
            "Review a b now; a b!"
        );
        assert_eq!(expand("Review $ARGUMENTS", ""), "Review ");
        assert_eq!(expand("Fix it", "in src"), "Fix it\n\nin src");
        assert_eq!(expand("Fix it", "  "), "Fix it");
    }

    #[test]
    fn front_matter_is_optional_but_checked() {
        let path = Path::new("/p/review.md");
        let plain = parse_command("Review $ARGUMENTS\n", "review", path).unwrap();
        assert_eq!(plain.description, "");
        assert_eq!(plain.body, "Review $ARGUMENTS");
        let with = parse_command("---\ndescription: Review  a file\n---\nBody", "r", path).unwrap();
        assert_eq!(with.description, "Review a file");
        assert_eq!(with.body, "Body");
        assert_eq!(with.expand("x"), "Body\n\nx");
        for (text, needle) in [
            ("---\ndescription: d\n", "never closed"),
            ("---\nmodel: x\n---\nB", "line 2: YAML front matter"),
            ("---\ndescription: d\n---\n \n", "the body is empty"),
        ] {
            let err = parse_command(text, "r", path).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn project_overrides_user_and_builtins_are_never_shadowed() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let user_dir = user.path().join("commands");
        let project_dir = project.path().join(".troupe/commands");
        write(&user_dir, "review.md", "USER review");
        write(&user_dir, "fix.md", "Fix $ARGUMENTS");
        write(&project_dir, "review.md", "PROJECT review");
        let help = write(&project_dir, "help.md", "not a help");
        let bad = write(&project_dir, "a.b.md", "x");
        write(&project_dir, "notes.txt", "ignored");
        let (set, warnings) = CommandSet::load(Some(user.path()), project.path());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].path, bad);
        let (set, warnings) = set.without(|name| name == "help");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].path, help);
        assert!(warnings[0].message.contains("/help is a built-in command"));
        let names: Vec<&str> = set.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["fix", "review"]);
        assert_eq!(set.get("review").unwrap().body, "PROJECT review");
        assert_eq!(set.get("fix").unwrap().expand("the bug"), "Fix the bug");
        assert!(set.get("Review").is_none());
    }
}
