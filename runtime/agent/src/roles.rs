//! Sub-agent roles: the two built-in roles (`general`, `explorer`), role files
//! (`<project>/.troupe/agents/NAME.md`, `<user config dir>/agents/NAME.md`) and
//! the [`RoleSet`] that merges them in a stable order.
//!
//! A role file is Markdown with YAML (`---`) or TOML (`+++`) front matter; the
//! body is the role's system prompt. Role files come from cloned repositories,
//! so parsing treats them as hostile input: sizes, counts and names are
//! bounded, YAML aliases cannot expand without bound, and a broken file is
//! reported as a [`RoleWarning`] instead of failing. This module reads no
//! file: the loader (`troupe-loader`) finds and reads the role files, keeping
//! symlinks inside their root, and hands their texts to [`parse_role`] and
//! [`RoleSet::with_file_roles`]. It does not know which tools exist (an
//! allowlist is applied by the tool registry).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use troupe_config::front_matter::{key_prefix, parse_front_matter, split_front_matter};
use troupe_tools::registry::valid_tool_name;

/// Turn limit of a sub-agent whose role sets none (the main agent's default).
pub(crate) const SUBAGENT_MAX_TURNS: u32 = 25;
/// Name of the general-purpose built-in role, used when a call names no role.
pub(crate) const GENERAL_ROLE: &str = "general";
/// Name of the read-only built-in role.
pub(crate) const EXPLORER_ROLE: &str = "explorer";
/// Directory of role files under `.troupe/` and under the user config dir.
pub const AGENTS_DIR_NAME: &str = "agents";
/// Extension of role files; other files in the directory are ignored.
pub const ROLE_FILE_EXTENSION: &str = "md";
/// Largest role file read: a prompt longer than this is a mistake or an attack.
pub const MAX_ROLE_FILE_BYTES: u64 = 64 * 1024;
/// Role files read per directory, so a hostile repository cannot flood the
/// tool description (every role is listed there) or the load time.
pub const MAX_ROLE_FILES_PER_DIR: usize = 64;
/// Longest role name: names appear in agent paths and in every request.
pub(crate) const MAX_ROLE_NAME_LEN: usize = 32;
/// Longest description in characters: it is repeated in every request.
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 500;
/// Range of `max_turns` in a role file: at least one turn, and no role may run
/// unboundedly longer than a main agent would.
pub(crate) const ROLE_MAX_TURNS_RANGE: std::ops::RangeInclusive<i64> = 1..=200;
/// Entries of a `tools` list: far more than any real allowlist, and a bound on
/// what YAML aliases can multiply.
const MAX_TOOL_ENTRIES: usize = 128;
/// Longest `model` value in characters: model ids are short.
const MAX_MODEL_CHARS: usize = 200;
/// `model` value meaning "the parent's model" (as in Claude Code agent files).
const INHERIT_MODEL: &str = "inherit";

/// Prompt of the built-in `general` role.
const GENERAL_PROMPT: &str = "\
You are a sub-agent: another agent has delegated a task to you. Complete it \
autonomously with the tools you have (search, read, edit, run commands); do not \
ask questions, since nobody can answer them before you finish. Stay within the \
task: make no unrelated changes, and verify what you change where you can (build, \
run the tests). When you are done, reply with a concise report of what you found \
or did, naming the files involved by path, and anything left unresolved. That \
report is all the delegating agent will see, so include every fact it needs and \
leave out the step-by-step narrative.";

/// Prompt of the built-in `explorer` role.
const EXPLORER_PROMPT: &str = "\
You are a read-only investigator: another agent has sent you a question about \
this codebase. Answer it by searching and reading code, configuration and \
documentation. Never modify anything: do not create, edit or delete files, and \
run no command that changes state. Search broadly first (file names, symbols, \
strings), then read the relevant parts closely, and check each conclusion \
against the code instead of guessing. Finish with a concise report that answers \
the question directly and cites file paths with line numbers (path:line) for \
every claim. That report is all the asking agent will see.";

/// Description of the built-in `general` role, shown to the model.
const GENERAL_DESCRIPTION: &str = "Multi-step tasks, research, code changes, commands; all tools.";

/// Description of the built-in `explorer` role, shown to the model.
const EXPLORER_DESCRIPTION: &str =
    "Read-only: searches and reads code to answer a question, citing paths and lines.";

/// What a role may use, besides the system tools every agent keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleTools {
    /// Every tool of the parent.
    All,
    /// The read-only tools only.
    ReadOnly,
    /// The named tools. An entry ending in `*` allows every name starting with
    /// what precedes it (`mcp__github__*`), as in `ToolRegistry::filtered`.
    Only(Vec<String>),
}

/// Where a role was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleSource {
    /// Built into Troupe.
    Builtin,
    /// A file in the user's config directory.
    User(PathBuf),
    /// A file in the project's `.troupe/agents/`.
    Project(PathBuf),
}

/// A sub-agent role: who the child is and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// Name the model passes as `role` (`^[a-z0-9][a-z0-9_-]{0,31}$`).
    pub name: String,
    /// One line for the model: when to use this role (whitespace collapsed).
    pub description: String,
    /// The child's system prompt.
    pub prompt: String,
    /// Tools the child may use.
    pub tools: RoleTools,
    /// Model for the child; `None` = the parent's.
    pub model: Option<String>,
    /// Turn limit; `None` = `SUBAGENT_MAX_TURNS`.
    pub max_turns: Option<u32>,
    /// Where the role was defined.
    pub source: RoleSource,
}

impl Role {
    /// The turn limit of a child in this role.
    pub fn turn_limit(&self) -> u32 {
        self.max_turns.unwrap_or(SUBAGENT_MAX_TURNS)
    }

    fn builtin(name: &str, description: &str, prompt: &str, tools: RoleTools) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            prompt: prompt.to_owned(),
            tools,
            model: None,
            max_turns: None,
            source: RoleSource::Builtin,
        }
    }
}

/// A role file (or directory) that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct RoleWarning {
    /// The file or directory.
    pub path: PathBuf,
    /// What is wrong and what to fix; starts with `line N:` when the problem is
    /// on a known line.
    pub message: String,
}

impl RoleWarning {
    /// A warning about `path`.
    pub fn new(path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// The roles available to an agent, in a stable order: the built-ins first
/// (`general`, `explorer`), then the others sorted by name. The order and
/// content decide the `agent` tool's description, so equal sets give
/// byte-identical descriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSet {
    roles: Vec<Role>,
}

impl Default for RoleSet {
    fn default() -> Self {
        Self::builtin()
    }
}

impl RoleSet {
    /// The built-in roles only.
    pub fn builtin() -> Self {
        Self {
            roles: builtin_roles(),
        }
    }

    /// The built-ins, replaced in place by file roles of the same name, then
    /// the remaining file roles in name order. A project role replaces a user
    /// role of the same name whole before this (the loader's merge).
    pub fn with_file_roles(mut files: BTreeMap<String, Role>) -> Self {
        let mut roles = builtin_roles();
        for role in &mut roles {
            if let Some(file_role) = files.remove(&role.name) {
                *role = file_role;
            }
        }
        roles.extend(files.into_values());
        Self { roles }
    }

    /// The role called `name`.
    pub fn get(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|role| role.name == name)
    }

    /// The roles in the stable order.
    pub fn iter(&self) -> std::slice::Iter<'_, Role> {
        self.roles.iter()
    }

    /// The role names in the stable order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.roles.iter().map(|role| role.name.as_str())
    }

    /// Number of roles.
    pub fn len(&self) -> usize {
        self.roles.len()
    }

    /// False for every set built here: the built-in positions are always filled.
    pub fn is_empty(&self) -> bool {
        self.roles.is_empty()
    }
}

impl<'a> IntoIterator for &'a RoleSet {
    type Item = &'a Role;
    type IntoIter = std::slice::Iter<'a, Role>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

fn builtin_roles() -> Vec<Role> {
    vec![
        Role::builtin(
            GENERAL_ROLE,
            GENERAL_DESCRIPTION,
            GENERAL_PROMPT,
            RoleTools::All,
        ),
        Role::builtin(
            EXPLORER_ROLE,
            EXPLORER_DESCRIPTION,
            EXPLORER_PROMPT,
            RoleTools::ReadOnly,
        ),
    ]
}

/// True for names matching `^[a-z0-9][a-z0-9_-]{0,31}$`.
pub(crate) fn valid_role_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let Some(first) = bytes.next() else {
        return false;
    };
    name.len() <= MAX_ROLE_NAME_LEN
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The keys a role file's front matter may have, for the missing-front-matter
/// message.
const ROLE_KEYS_HINT: &str = "`description: ...` (and optional name, tools, model, max_turns)";

/// The front matter keys. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping of description, name, tools, model, max_turns"
)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    tools: Option<ToolList>,
    model: Option<String>,
    max_turns: Option<i64>,
}

/// A `tools` value: a list of names, or one comma-separated string.
/// Entries are checked while they are read, so aliases cannot multiply them.
#[derive(Debug, Default)]
struct ToolList(Vec<String>);

impl ToolList {
    fn push(&mut self, entry: &str) -> Result<(), String> {
        let entry = entry.trim();
        let name = entry.strip_suffix('*').unwrap_or(entry);
        let valid = valid_tool_name(name) || (name.is_empty() && entry == "*");
        if !valid {
            let shown: String = entry.chars().take(80).collect();
            return Err(format!(
                "{shown:?} is not a tool name; use names like read_file, or a prefix ending in \
                 `*` such as mcp__github__*"
            ));
        }
        if self.0.len() >= MAX_TOOL_ENTRIES {
            return Err(format!("more than {MAX_TOOL_ENTRIES} entries"));
        }
        if !self.0.iter().any(|e| e == entry) {
            self.0.push(entry.to_owned());
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ToolListVisitor;

        impl<'de> Visitor<'de> for ToolListVisitor {
            type Value = ToolList;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of tool names or one comma-separated string")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<ToolList, E> {
                let mut list = ToolList::default();
                for entry in value.split(',').filter(|e| !e.trim().is_empty()) {
                    list.push(entry).map_err(E::custom)?;
                }
                Ok(list)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolList, A::Error> {
                let mut list = ToolList::default();
                let mut index = 0usize;
                while let Some(entry) = seq.next_element::<String>()? {
                    list.push(&entry)
                        .map_err(|m| de::Error::custom(format!("entry {index}: {m}")))?;
                    index += 1;
                }
                Ok(list)
            }
        }

        deserializer.deserialize_any(ToolListVisitor)
    }
}

/// Parses one role file's text. `stem` is the file name without `.md`, the
/// default name. The error says what to fix.
pub fn parse_role(text: &str, stem: &str, source: RoleSource) -> Result<Role, String> {
    let split = split_front_matter(text, ROLE_KEYS_HINT)?;
    let front: FrontMatter = parse_front_matter(split.syntax, split.front)?;
    let at = |key: &str| key_prefix(split.front, key);

    let name = match front.name {
        Some(name) => {
            if !valid_role_name(&name) {
                return Err(format!(
                    "{}`name`: {:?} is not a role name; use 1 to {MAX_ROLE_NAME_LEN} of a-z 0-9 \
                     _ -, starting with a letter or digit",
                    at("name"),
                    name.chars().take(80).collect::<String>()
                ));
            }
            name
        }
        None => {
            if !valid_role_name(stem) {
                return Err(format!(
                    "the file name {stem:?} is not a role name; rename the file or set `name`, \
                     using 1 to {MAX_ROLE_NAME_LEN} of a-z 0-9 _ -, starting with a letter or digit"
                ));
            }
            stem.to_owned()
        }
    };

    let description = front
        .description
        .as_deref()
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    if description.is_empty() {
        return Err(format!(
            "{}missing `description`: add one line saying when to use this role",
            at("description")
        ));
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "{}`description` has {chars} characters, more than {MAX_DESCRIPTION_CHARS}; shorten it \
             (it is sent with every request)",
            at("description")
        ));
    }

    let tools = match front.tools {
        Some(ToolList(list)) => RoleTools::Only(list),
        None => RoleTools::All,
    };

    let model = match front.model.as_deref().map(str::trim) {
        None => None,
        Some(INHERIT_MODEL) => None,
        Some("") => {
            return Err(format!(
                "{}`model` is empty; name a model, or remove the key to use the parent's model",
                at("model")
            ));
        }
        Some(model) if model.chars().count() > MAX_MODEL_CHARS => {
            return Err(format!(
                "{}`model` is longer than {MAX_MODEL_CHARS} characters; name a model id",
                at("model")
            ));
        }
        Some(model) => Some(model.to_owned()),
    };

    let max_turns = match front.max_turns {
        None => None,
        Some(n) => match u32::try_from(n) {
            Ok(turns) if ROLE_MAX_TURNS_RANGE.contains(&n) => Some(turns),
            _ => {
                return Err(format!(
                    "{}`max_turns` is {n}; use a whole number from {} to {}",
                    at("max_turns"),
                    ROLE_MAX_TURNS_RANGE.start(),
                    ROLE_MAX_TURNS_RANGE.end()
                ));
            }
        },
    };

    let prompt = split.body.trim();
    if prompt.is_empty() {
        let delimiter = split.syntax.delimiter();
        return Err(format!(
            "the prompt is empty; write the role's instructions after the closing `{delimiter}` \
             line"
        ));
    }

    Ok(Role {
        name,
        description,
        prompt: prompt.to_owned(),
        tools,
        model,
        max_turns,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const GOOD_YAML: &str = "---\ndescription: Reviews diffs\n---\nReview the diff.\n";

    fn parse(text: &str) -> Result<Role, String> {
        parse_role(text, "stem", RoleSource::Builtin)
    }

    #[test]
    fn builtins_come_in_a_fixed_order() {
        let set = RoleSet::builtin();
        assert_eq!(set.names().collect::<Vec<_>>(), ["general", "explorer"]);
        let general = set.get(GENERAL_ROLE).unwrap();
        assert_eq!(general.tools, RoleTools::All);
        assert_eq!(general.source, RoleSource::Builtin);
        assert_eq!(general.turn_limit(), SUBAGENT_MAX_TURNS);
        let explorer = set.get(EXPLORER_ROLE).unwrap();
        assert_eq!(explorer.tools, RoleTools::ReadOnly);
        assert!(explorer.prompt.contains("Never modify"));
        assert!(general.prompt.contains("report"));
        for role in &set {
            assert!(valid_role_name(&role.name));
            assert!(role.description.chars().count() <= MAX_DESCRIPTION_CHARS);
        }
        assert_eq!(RoleSet::default(), set);
        assert_eq!(set.len(), 2);
        assert!(!set.is_empty());
        assert!(set.get("nope").is_none());
    }

    #[test]
    fn role_names_follow_the_pattern() {
        for good in ["a", "0", "code-reviewer", "a_b", &"x".repeat(32)] {
            assert!(valid_role_name(good), "{good}");
        }
        for bad in ["", "-a", "_a", "A", "a b", "a.b", "é", &"x".repeat(33)] {
            assert!(!valid_role_name(bad), "{bad}");
        }
    }

    #[test]
    fn yaml_front_matter_with_every_key() {
        let role = parse(
            "---\nname: reviewer\ndescription: Reviews  a\n  diff\ntools:\n  - read_file\n  - \
             mcp__github__*\nmodel: claude-x\nmax_turns: 7\n---\n\n  Review it.\n\n",
        )
        .unwrap();
        assert_eq!(role.name, "reviewer");
        assert_eq!(role.description, "Reviews a diff");
        assert_eq!(
            role.tools,
            RoleTools::Only(vec!["read_file".into(), "mcp__github__*".into()])
        );
        assert_eq!(role.model.as_deref(), Some("claude-x"));
        assert_eq!(role.max_turns, Some(7));
        assert_eq!(role.turn_limit(), 7);
        assert_eq!(role.prompt, "Review it.");
    }

    #[test]
    fn toml_front_matter_with_every_key() {
        let role = parse(
            "+++\nname = \"t\"\ndescription = \"TOML role\"\ntools = [\"grep\", \"glob\"]\n\
             model = \"m\"\nmax_turns = 200\n+++\nDo it.",
        )
        .unwrap();
        assert_eq!(role.name, "t");
        assert_eq!(role.description, "TOML role");
        assert_eq!(
            role.tools,
            RoleTools::Only(vec!["grep".into(), "glob".into()])
        );
        assert_eq!(role.model.as_deref(), Some("m"));
        assert_eq!(role.max_turns, Some(200));
        assert_eq!(role.prompt, "Do it.");
    }

    #[test]
    fn tools_as_a_comma_separated_string() {
        let role =
            parse("---\ndescription: d\ntools: read_file, grep ,glob,, read_file\n---\nP").unwrap();
        assert_eq!(
            role.tools,
            RoleTools::Only(vec!["read_file".into(), "grep".into(), "glob".into()])
        );
        let role = parse("+++\ndescription = \"d\"\ntools = \"a, b*\"\n+++\nP").unwrap();
        assert_eq!(role.tools, RoleTools::Only(vec!["a".into(), "b*".into()]));
        // An empty list allows only the system tools.
        let role = parse("---\ndescription: d\ntools: []\n---\nP").unwrap();
        assert_eq!(role.tools, RoleTools::Only(vec![]));
    }

    #[test]
    fn defaults_name_from_stem_all_tools_inherit_model() {
        let role = parse("---\ndescription: d\nmodel: inherit\ntools:\n---\nP").unwrap();
        assert_eq!(role.name, "stem");
        assert_eq!(role.tools, RoleTools::All);
        assert_eq!(role.model, None);
        assert_eq!(role.max_turns, None);
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let role = parse("\u{feff}---\r\ndescription: d\r\n---\r\nPrompt\r\n").unwrap();
        assert_eq!(role.description, "d");
        assert_eq!(role.prompt, "Prompt");
    }

    #[test]
    fn broken_texts_are_errors_that_say_what_to_fix() {
        let cases: &[(&str, &str)] = &[
            ("no front matter", "has no front matter"),
            ("---\ndescription: d\nPrompt", "never closed"),
            ("+++\ndescription = \"d\"\n---\nP", "never closed"),
            ("---\ndescription: d\n---\n  \n", "prompt is empty"),
            ("---\n---\nP", "missing `description`"),
            (
                "---\ndescription: \"  \"\n---\nP",
                "line 2: missing `description`",
            ),
            ("---\ndescription: d\ncolour: red\n---\nP", "line 3"),
            (
                "---\ndescription: d\ncolour: red\n---\nP",
                "unknown field `colour`",
            ),
            (
                "---\ndescription: d\nmax_turns: 0\n---\nP",
                "line 3: `max_turns` is 0",
            ),
            (
                "---\ndescription: d\nmax_turns: 201\n---\nP",
                "from 1 to 200",
            ),
            (
                "---\ndescription: d\nmax_turns: -5\n---\nP",
                "`max_turns` is -5",
            ),
            (
                "---\ndescription: d\nmax_turns: many\n---\nP",
                "invalid type",
            ),
            (
                "---\ndescription: d\nname: Bad Name\n---\nP",
                "line 3: `name`",
            ),
            (
                "---\ndescription: d\nmodel: \" \"\n---\nP",
                "`model` is empty",
            ),
            (
                "---\ndescription: d\ntools: [\"read file\"]\n---\nP",
                "not a tool name",
            ),
            ("---\ndescription: d\ntools: 3\n---\nP", "comma-separated"),
            ("---\ndescription: d\ntools: [[a]]\n---\nP", "invalid type"),
            ("---\n- a\n- b\n---\nP", "mapping of description"),
            ("---\ndescription: [unclosed\n---\nP", "line 2"),
            ("---\ndescription: d\ndescription: e\n---\nP", "duplicate"),
            ("---\ndescription: *nowhere\n---\nP", "unknown anchor"),
            ("+++\ndescription = \"d\"\nbogus = 1\n+++\nP", "line 3"),
            ("+++\ndescription = \"d\"\nbogus = 1\n+++\nP", "bogus"),
            ("+++\ndescription = \n+++\nP", "line 2: TOML front matter"),
            (
                "+++\ndescription = \"d\"\nmax_turns = 0\n+++\nP",
                "line 3: `max_turns`",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let long = format!("---\ndescription: {}\n---\nP", "d".repeat(501));
        let err = parse(&long).unwrap_err();
        assert!(err.contains("501 characters"), "{err}");
        assert!(parse(&format!("---\ndescription: {}\n---\nP", "d".repeat(500))).is_ok());
        let err = parse_role(GOOD_YAML, "Bad Stem", RoleSource::Builtin).unwrap_err();
        assert!(err.contains("file name \"Bad Stem\""), "{err}");
    }

    #[test]
    fn yaml_error_lines_are_file_lines() {
        let err = parse("---\ndescription: d\ntools: [a\nmodel: x\n---\nP").unwrap_err();
        assert!(err.starts_with("line "), "{err}");
        let line: usize = err["line ".len()..]
            .split(':')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!((3..=5).contains(&line), "{err}");
    }

    #[test]
    fn too_many_tool_entries_are_refused() {
        let list: Vec<String> = (0..=MAX_TOOL_ENTRIES).map(|i| format!("t{i}")).collect();
        let text = format!("---\ndescription: d\ntools: [{}]\n---\nP", list.join(", "));
        let err = parse(&text).unwrap_err();
        assert!(err.contains("more than 128 entries"), "{err}");
    }

    #[test]
    fn billion_laughs_returns_quickly() {
        let lols = ["\"lol\""; 9].join(",");
        let mut laughs = format!("a: &a [{lols}]\n");
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for pair in names.windows(2) {
            let refs = vec![format!("*{}", pair[0]); 9].join(",");
            laughs.push_str(&format!("{}: &{} [{refs}]\n", pair[1], pair[1]));
        }
        let start = Instant::now();
        // The classic document: its keys are unknown, so it stops at the first.
        let err = parse(&format!("---\n{laughs}description: *i\n---\nP")).unwrap_err();
        assert!(err.contains("unknown field `a`"), "{err}");
        // The same nesting inside the keys that are read: a list where a name
        // is expected stops at once.
        let mut nested = format!("[&a [{lols}]");
        for pair in names.windows(2) {
            let refs = vec![format!("*{}", pair[0]); 9].join(",");
            nested.push_str(&format!(", &{} [{refs}]", pair[1]));
        }
        nested.push(']');
        for key in ["tools", "description", "name", "model", "max_turns"] {
            let err = parse(&format!("---\ndescription: d\n{key}: {nested}\n---\nP")).unwrap_err();
            assert!(
                err.contains("invalid type") || err.contains("duplicate"),
                "{key}: {err}"
            );
        }
        // Many aliases of one long string: refused at the first entry.
        let long = "x".repeat(30_000);
        let refs = vec!["*s"; 8_000].join(",");
        let err = parse(&format!("---\nmodel: &s {long}\ntools: [{refs}]\n---\nP")).unwrap_err();
        assert!(err.contains("not a tool name"), "{err}");
        // Aliases of short scalars are bounded values and fine.
        let role =
            parse("---\nname: &n rev\ndescription: *n\ntools: [&t grep, *t]\n---\nP").unwrap();
        assert_eq!(role.description, "rev");
        assert_eq!(role.tools, RoleTools::Only(vec!["grep".into()]));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let depth = 20_000;
        let yaml = format!(
            "---\ndescription: d\ntools: {}{}\n---\nP",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(parse(&yaml).is_err());
        let toml = format!(
            "+++\ndescription = \"d\"\ntools = {}{}\n+++\nP",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(parse(&toml).is_err());
    }

    #[test]
    fn no_panic_on_odd_inputs() {
        let inputs = [
            "",
            "---",
            "---\n",
            "+++\n+++",
            "---\n---",
            "\u{feff}",
            "---\n...\n---\nP",
            "---\n!!binary aGVsbG8=\n---\nP",
            "---\n? [a]\n: b\n---\nP",
            "---\n<<: *a\n---\nP",
            "---\ndescription: !tag d\n---\nP",
            "+++\n[[x]]\n+++\nP",
            "---\n\t\n---\nP",
            "---\n%YAML 1.2\n---\nP",
            "---\n---\n---\nP",
        ];
        for input in inputs {
            let _ = parse(input);
        }
    }
}
