//! Front matter of Markdown files that configure Troupe: role files
//! (`.troupe/agents/NAME.md`), skills (`.troupe/skills/NAME/SKILL.md`) and
//! custom commands (`.troupe/commands/NAME.md`).
//!
//! A file starts with a `---` line (YAML) or a `+++` line (TOML), then its keys,
//! then the same delimiter line, then the body. Parsing is pure; every error is
//! a message naming the line (when known) and what to fix. Callers supply the
//! key struct (`deny_unknown_fields` makes unknown keys errors) and a hint of
//! the keys they expect, used when the front matter is missing.

use serde::de::DeserializeOwned;

use crate::load::line_at;

/// Front matter syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// Between `---` lines.
    Yaml,
    /// Between `+++` lines.
    Toml,
}

impl Syntax {
    /// The delimiter line.
    pub fn delimiter(self) -> &'static str {
        match self {
            Self::Yaml => "---",
            Self::Toml => "+++",
        }
    }
}

/// A file cut into front matter and body.
#[derive(Debug)]
pub struct Split<'a> {
    /// The syntax of the front matter.
    pub syntax: Syntax,
    /// The front matter without its delimiter lines.
    pub front: &'a str,
    /// Everything after the closing delimiter line.
    pub body: &'a str,
}

/// Cuts `text` at its front matter delimiters (the first line, and the next
/// line equal to it). `keys_hint` names the keys the caller expects, e.g.
/// "`description: ...` (and optional name)", for the missing-front-matter message.
pub fn split_front_matter<'a>(text: &'a str, keys_hint: &str) -> Result<Split<'a>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let syntax = match first.trim_end() {
        "---" => Syntax::Yaml,
        "+++" => Syntax::Toml,
        _ => {
            return Err(format!(
                "has no front matter: start the file with a `---` line, then {keys_hint}, then \
                 a `---` line, then the body (or use `+++` lines around TOML)"
            ));
        }
    };
    let delimiter = syntax.delimiter();
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == delimiter {
            return Ok(Split {
                syntax,
                front: &rest[..offset],
                body: &rest[offset + line.len()..],
            });
        }
        offset += line.len();
    }
    Err(format!(
        "the front matter opened by `{delimiter}` on line 1 is never closed; add a \
         `{delimiter}` line after its keys"
    ))
}

/// Parses the front matter into `T`. `front` is the text between the
/// delimiters; a newline is put before it so the parsers' line numbers are the
/// file's. Empty front matter is `T::default()`.
pub fn parse_front_matter<T: DeserializeOwned + Default>(
    syntax: Syntax,
    front: &str,
) -> Result<T, String> {
    if front.trim().is_empty() {
        return Ok(T::default());
    }
    let source = format!("\n{front}");
    match syntax {
        Syntax::Yaml => serde_yaml_ng::from_str(&source).map_err(|e| {
            let text = e.to_string();
            match e.location() {
                Some(at) => {
                    let mark = format!(" at line {} column {}", at.line(), at.column());
                    format!(
                        "line {}: YAML front matter: {}",
                        at.line(),
                        text.replacen(&mark, "", 1)
                    )
                }
                None => format!("YAML front matter: {text}"),
            }
        }),
        Syntax::Toml => toml::from_str(&source).map_err(|e| {
            let message = e.message().trim_end();
            match e.span() {
                Some(span) => format!(
                    "line {}: TOML front matter: {message}",
                    line_at(&source, span.start)
                ),
                None => format!("TOML front matter: {message}"),
            }
        }),
    }
}

/// The line of `key` in the front matter (`key:` or `key =` at the start of a
/// line), as a `line N: ` prefix, or nothing.
pub fn key_prefix(front: &str, key: &str) -> String {
    front
        .lines()
        .position(|line| {
            line.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with([':', '=']))
        })
        // The front matter starts on line 2.
        .map(|i| format!("line {}: ", i + 2))
        .unwrap_or_default()
}

/// `text` with runs of whitespace collapsed to one space, trimmed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Keys {
        name: Option<String>,
    }

    #[test]
    fn yaml_and_toml_split_and_parse() {
        let split = split_front_matter("---\nname: a\n---\nbody\n", "keys").unwrap();
        assert_eq!(split.syntax, Syntax::Yaml);
        assert_eq!(split.body, "body\n");
        let keys: Keys = parse_front_matter(split.syntax, split.front).unwrap();
        assert_eq!(keys.name.as_deref(), Some("a"));
        let split = split_front_matter("\u{feff}+++\nname = \"b\"\n+++\n", "keys").unwrap();
        let keys: Keys = parse_front_matter(split.syntax, split.front).unwrap();
        assert_eq!(keys.name.as_deref(), Some("b"));
        let empty: Keys = parse_front_matter(Syntax::Yaml, " \n").unwrap();
        assert_eq!(empty, Keys::default());
    }

    #[test]
    fn errors_name_the_problem_and_line() {
        let err = split_front_matter("plain text", "`name: ...`").unwrap_err();
        assert!(err.contains("has no front matter") && err.contains("`name: ...`"));
        let err = split_front_matter("---\nname: a\n", "k").unwrap_err();
        assert!(err.contains("never closed"), "{err}");
        let err = parse_front_matter::<Keys>(Syntax::Yaml, "name: a\nother: b\n").unwrap_err();
        assert!(err.starts_with("line 3: YAML front matter"), "{err}");
        let err = parse_front_matter::<Keys>(Syntax::Toml, "name = \"a\"\nx = 1\n").unwrap_err();
        assert!(err.starts_with("line 3: TOML front matter"), "{err}");
        assert_eq!(key_prefix("a: 1\nname: x\n", "name"), "line 3: ");
        assert_eq!(key_prefix("a: 1\n", "name"), "");
        assert_eq!(one_line("  a \n b  "), "a b");
    }
}
