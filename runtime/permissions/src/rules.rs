//! Permission rules (SPEC §5): the `Name` / `Name(pattern)` syntax, its typed
//! parse errors, and how one rule matches one request.
//!
//! This module owns rule text and matching only. It never decides: the order in
//! which deny, ask and allow rules are consulted, the sandbox and the modes are
//! `engine`'s. Paths reach it already resolved through the sandbox; commands
//! reach it already split into simple commands by `hard_blocks`. The only file
//! system access is resolving the literal prefix of an absolute path pattern
//! (so `/tmp/**` still matches when `/tmp` is a symlink), done once at parse.
//!
//! Rule names: `Bash` (and the tool name `bash`) with a command pattern; `Read`
//! for read access of any path-taking tool; `Write` and `Edit` (synonyms) for
//! write access; `WebFetch` with a `domain:` pattern for the hosts `web_fetch`
//! reaches (`WebFetch(domain:docs.rs)`, `WebFetch(domain:*.python.org)`); any
//! other name is a tool name, where `*` is a wildcard
//! (`mcp__github__*`). Command patterns treat `*` as "any text" (`\*` is a
//! literal star, `\\` a backslash); path patterns are globs.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

use troupe_paths::sandbox::resolve_path;
use troupe_protocol::permission::{Access, ToolCategory};
use troupe_protocol::permission::{RuleEntry, RuleSource};

use troupe_shell::hard_blocks::{CommandView, normalize};

/// Why a rule's text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleParseError {
    /// Nothing but white space.
    #[error("the rule is empty")]
    Empty,
    /// `Name(pattern` without the closing parenthesis.
    #[error("the pattern must end with `)`")]
    UnclosedParenthesis,
    /// The name has characters a tool name cannot have.
    #[error(
        "`{0}` is not a rule name: use Bash, Read, Write, Edit, a tool name (agent, read_file) or an MCP name such as mcp__server__*"
    )]
    InvalidName(String),
    /// `Name()`.
    #[error("the pattern inside the parentheses is empty; write `{0}` alone to match every call")]
    EmptyPattern(String),
    /// A path glob that does not compile.
    #[error("invalid path pattern `{pattern}`: {message}")]
    InvalidGlob {
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        message: String,
    },
    /// A `WebFetch` pattern that is not `domain:HOST` or `domain:*.HOST`.
    #[error(
        "invalid web pattern `{0}`: write `domain:` and a host name, e.g. `WebFetch(domain:docs.rs)` or `WebFetch(domain:*.python.org)`"
    )]
    InvalidDomain(String),
    /// `~/…` with no home directory known.
    #[error("the path pattern `{0}` starts with `~` but no home directory is known")]
    NoHome(String),
}

/// Where paths in patterns are anchored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PatternContext<'a> {
    /// The resolved project root: relative patterns are relative to it.
    pub(crate) project_root: &'a Path,
    /// The home directory `~` stands for.
    pub(crate) home: Option<&'a Path>,
}

/// Human name of a rule source, for reasons and errors.
pub(crate) fn source_name(source: RuleSource) -> &'static str {
    match source {
        RuleSource::User => "user config",
        RuleSource::Project => "project config",
        RuleSource::Cli => "the command line",
        RuleSource::Session => "an \"allow always\" answer in this session",
    }
}

/// A wildcard pattern where `*` matches any text (also `/` and spaces).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wildcard {
    /// The literal pieces between stars; one piece means no star.
    parts: Vec<String>,
}

impl Wildcard {
    /// Parses `pattern`; with `escapes`, `\*` is a literal star and `\\` a
    /// backslash (any other backslash is literal).
    fn new(pattern: &str, escapes: bool) -> Self {
        let mut parts = vec![String::new()];
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if escapes && matches!(chars.peek(), Some('*' | '\\')) => {
                    if let (Some(next), Some(last)) = (chars.next(), parts.last_mut()) {
                        last.push(next);
                    }
                }
                '*' => parts.push(String::new()),
                c => {
                    if let Some(last) = parts.last_mut() {
                        last.push(c);
                    }
                }
            }
        }
        Self { parts }
    }

    fn is_literal(&self) -> bool {
        self.parts.len() == 1
    }

    fn matches(&self, text: &str) -> bool {
        let (first, last) = match (self.parts.first(), self.parts.last()) {
            (Some(first), Some(last)) => (first.as_str(), last.as_str()),
            _ => return text.is_empty(),
        };
        if self.parts.len() == 1 {
            return text == first;
        }
        if text.len() < first.len() + last.len()
            || !text.starts_with(first)
            || !text.ends_with(last)
        {
            return false;
        }
        let end = text.len() - last.len();
        let mut pos = first.len();
        for middle in &self.parts[1..self.parts.len() - 1] {
            match text
                .get(pos..end)
                .and_then(|rest| rest.find(middle.as_str()))
            {
                Some(found) => pos += found + middle.len(),
                None => return false,
            }
        }
        true
    }
}

/// Escapes a command so that it parses back as a literal command pattern.
pub(crate) fn escape_command(command: &str) -> String {
    command.replace('\\', "\\\\").replace('*', "\\*")
}

/// The hosts a `WebFetch(domain:…)` rule names: one host, or every
/// subdomain of one (`*.python.org`: `docs.python.org`, `a.b.python.org`,
/// not `python.org` itself). Compared without case and trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DomainPattern {
    /// Exactly this host.
    Exact(String),
    /// Any host ending in `.` and this suffix.
    Subdomains(String),
}

impl DomainPattern {
    fn parse(raw: &str) -> Result<Self, RuleParseError> {
        let invalid = || RuleParseError::InvalidDomain(raw.to_owned());
        let host = raw.trim().strip_prefix("domain:").ok_or_else(invalid)?;
        let host = normalize_host(host);
        let (wild, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_owned()),
            None => (false, host),
        };
        let valid = !name.is_empty()
            && name.split('.').all(|label| !label.is_empty())
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']')
            });
        if !valid {
            return Err(invalid());
        }
        Ok(if wild {
            Self::Subdomains(name)
        } else {
            Self::Exact(name)
        })
    }

    fn matches(&self, host: &str) -> bool {
        let host = normalize_host(host);
        match self {
            Self::Exact(name) => host == *name,
            Self::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

/// A host as rules compare it: lower-case, without a trailing dot.
pub(crate) fn normalize_host(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// How a path pattern is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// Matched against the absolute resolved path.
    Absolute,
    /// Matched against the path relative to the project root.
    Relative,
    /// `**/…`: relative inside the project, absolute (without the leading `/`)
    /// elsewhere.
    AnyDepth,
}

/// A compiled path glob.
#[derive(Debug, Clone)]
struct PathPattern {
    matcher: GlobMatcher,
    anchor: Anchor,
}

const GLOB_META: [char; 5] = ['*', '?', '[', '{', '\\'];

/// Joins a literal base directory (escaped for globs) and glob components.
fn glob_under(base: &Path, components: &[&str]) -> String {
    let mut out = globset::escape(&base.to_string_lossy());
    for component in components {
        if !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(component);
    }
    out
}

impl PathPattern {
    fn compile(raw: &str, ctx: &PatternContext<'_>) -> Result<Self, RuleParseError> {
        let trimmed = raw.trim();
        let pattern = if trimmed.ends_with('/') && trimmed != "/" {
            format!("{trimmed}**")
        } else {
            trimmed.to_owned()
        };
        let (text, anchor) = if pattern == "~" || pattern.starts_with("~/") {
            let home = ctx
                .home
                .ok_or_else(|| RuleParseError::NoHome(raw.to_owned()))?;
            let rest: Vec<&str> = pattern
                .trim_start_matches('~')
                .split('/')
                .filter(|c| !c.is_empty())
                .collect();
            (glob_under(home, &rest), Anchor::Absolute)
        } else if pattern.starts_with('/') {
            (absolute_glob(&pattern), Anchor::Absolute)
        } else {
            let mut relative = pattern.as_str();
            while let Some(rest) = relative.strip_prefix("./") {
                relative = rest;
            }
            if relative.split('/').any(|c| c == "..") {
                let joined = format!("{}/{relative}", ctx.project_root.display());
                (absolute_glob(&joined), Anchor::Absolute)
            } else if relative == "**" || relative.starts_with("**/") {
                (relative.to_owned(), Anchor::AnyDepth)
            } else {
                (relative.to_owned(), Anchor::Relative)
            }
        };
        let glob = GlobBuilder::new(&text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|err| RuleParseError::InvalidGlob {
                pattern: raw.to_owned(),
                message: err.kind().to_string(),
            })?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            anchor,
        })
    }

    fn matches(&self, candidate: &Candidate) -> bool {
        match (self.anchor, &candidate.rel) {
            (Anchor::Absolute, _) => self.matcher.is_match(&candidate.abs),
            (Anchor::Relative | Anchor::AnyDepth, Some(rel)) => {
                !rel.as_os_str().is_empty() && self.matcher.is_match(rel)
            }
            (Anchor::Relative, None) => false,
            (Anchor::AnyDepth, None) => {
                let abs = &candidate.abs;
                self.matcher.is_match(abs.strip_prefix("/").unwrap_or(abs))
            }
        }
    }
}

/// An absolute glob whose literal prefix is resolved like any path (`..`
/// applied, symlinks followed), so it compares with resolved request paths.
fn absolute_glob(pattern: &str) -> String {
    let components: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let literal = components
        .iter()
        .position(|c| c.contains(GLOB_META))
        .unwrap_or(components.len());
    let prefix: PathBuf = std::iter::once("/")
        .chain(components[..literal].iter().copied())
        .collect();
    let base = resolve_path(&prefix).unwrap_or_else(|_| normalize(&prefix));
    glob_under(&base, &components[literal..])
}

/// A path in the two forms rules compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Absolute path.
    pub(crate) abs: PathBuf,
    /// Relative to the project root, when inside it.
    pub(crate) rel: Option<PathBuf>,
}

impl Candidate {
    pub(crate) fn new(abs: PathBuf, project_root: &Path) -> Self {
        let rel = abs.strip_prefix(project_root).ok().map(Path::to_path_buf);
        Self { abs, rel }
    }
}

/// A path subject as rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathFacts {
    /// Read or write.
    pub(crate) access: Access,
    /// Symlinks followed.
    pub(crate) resolved: Candidate,
    /// `..` applied without following symlinks.
    pub(crate) lexical: Candidate,
}

/// A command subject as rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandFacts {
    /// The whole command line, trimmed.
    pub(crate) line: String,
    /// Every simple command in it.
    pub(crate) views: Vec<CommandView>,
}

/// One request as rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestFacts<'r> {
    /// Tool name.
    pub(crate) tool_name: &'r str,
    /// Tool category.
    pub(crate) category: ToolCategory,
    /// The path, for path subjects.
    pub(crate) path: Option<PathFacts>,
    /// The command, for command subjects.
    pub(crate) command: Option<CommandFacts>,
    /// The host, for network subjects (normalized).
    pub(crate) host: Option<String>,
}

#[derive(Debug, Clone)]
enum Matcher {
    Bash(Option<Wildcard>),
    Read(Option<PathPattern>),
    Write(Option<PathPattern>),
    WebFetch(Option<DomainPattern>),
    Tool {
        name: Wildcard,
        path: Option<PathPattern>,
    },
}

/// One parsed rule with its origin.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    text: String,
    source: RuleSource,
    matcher: Matcher,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*'))
}

impl Rule {
    /// Parses a rule entry against the project root and home directory.
    pub(crate) fn parse(
        entry: &RuleEntry,
        ctx: &PatternContext<'_>,
    ) -> Result<Self, RuleParseError> {
        let text = entry.rule.trim();
        if text.is_empty() {
            return Err(RuleParseError::Empty);
        }
        let (name, pattern) = match text.find('(') {
            None => (text, None),
            Some(open) => {
                let inner = text
                    .get(open + 1..)
                    .and_then(|rest| rest.strip_suffix(')'))
                    .ok_or(RuleParseError::UnclosedParenthesis)?;
                let name = text[..open].trim();
                if inner.trim().is_empty() {
                    return Err(RuleParseError::EmptyPattern(name.to_owned()));
                }
                (name, Some(inner.trim()))
            }
        };
        if !valid_name(name) {
            return Err(RuleParseError::InvalidName(name.to_owned()));
        }
        let path = |p: &str| PathPattern::compile(p, ctx);
        let matcher = match name {
            "Bash" | "bash" => Matcher::Bash(pattern.map(|p| Wildcard::new(p, true))),
            "Read" => Matcher::Read(pattern.map(path).transpose()?),
            "Write" | "Edit" => Matcher::Write(pattern.map(path).transpose()?),
            "WebFetch" => Matcher::WebFetch(pattern.map(DomainPattern::parse).transpose()?),
            _ => Matcher::Tool {
                name: Wildcard::new(name, false),
                path: pattern.map(path).transpose()?,
            },
        };
        Ok(Self {
            text: text.to_owned(),
            source: entry.source,
            matcher,
        })
    }

    /// `"Bash(git push*)" from project config`.
    pub(crate) fn describe(&self) -> String {
        format!("\"{}\" from {}", self.text, source_name(self.source))
    }

    /// Deny and ask semantics: the rule matches when it matches the path in
    /// either form (resolved or lexical), the whole command line or any simple
    /// command in it (with or without prefixes such as `sudo`).
    pub(crate) fn restricts(&self, facts: &RequestFacts<'_>) -> bool {
        match &self.matcher {
            Matcher::Bash(pattern) => match (&facts.command, pattern) {
                (Some(_), None) => true,
                (Some(command), Some(pattern)) => {
                    pattern.matches(&command.line)
                        || command.views.iter().any(|view| {
                            pattern.matches(&view.source)
                                || pattern.matches(&view.words)
                                || pattern.matches(&view.effective)
                        })
                }
                (None, None) => facts.tool_name == "bash",
                (None, Some(_)) => false,
            },
            Matcher::Read(pattern) => self.path_rule(facts, Access::Read, pattern.as_ref(), true),
            Matcher::Write(pattern) => self.path_rule(facts, Access::Write, pattern.as_ref(), true),
            Matcher::WebFetch(pattern) => host_rule(facts, pattern.as_ref()),
            Matcher::Tool { name, path } => {
                name.matches(facts.tool_name)
                    && path.as_ref().is_none_or(|pattern| {
                        facts.path.as_ref().is_some_and(|p| {
                            pattern.matches(&p.resolved) || pattern.matches(&p.lexical)
                        })
                    })
            }
        }
    }

    /// Allow semantics for a request without a command: paths are compared in
    /// their resolved form only, so a symlink cannot borrow an allowance.
    pub(crate) fn allows(&self, facts: &RequestFacts<'_>) -> bool {
        match &self.matcher {
            Matcher::Bash(_) => self.allows_any_command(facts),
            Matcher::Read(pattern) => self.path_rule(facts, Access::Read, pattern.as_ref(), false),
            Matcher::Write(pattern) => {
                self.path_rule(facts, Access::Write, pattern.as_ref(), false)
            }
            Matcher::WebFetch(pattern) => host_rule(facts, pattern.as_ref()),
            Matcher::Tool { name, path } => {
                name.matches(facts.tool_name)
                    && path.as_ref().is_none_or(|pattern| {
                        facts
                            .path
                            .as_ref()
                            .is_some_and(|p| pattern.matches(&p.resolved))
                    })
            }
        }
    }

    /// True when the rule names a path pattern that matches the resolved path
    /// of a read: only such a rule lets a read outside the allowed roots pass
    /// without asking.
    pub(crate) fn allows_path_explicitly(&self, facts: &RequestFacts<'_>) -> bool {
        let Some(path) = &facts.path else {
            return false;
        };
        match &self.matcher {
            Matcher::Read(Some(pattern)) => {
                path.access == Access::Read && pattern.matches(&path.resolved)
            }
            Matcher::Tool {
                name,
                path: Some(pattern),
            } => name.matches(facts.tool_name) && pattern.matches(&path.resolved),
            _ => false,
        }
    }

    /// True when the rule allows every command of the request's tool (`Bash`
    /// alone, or the tool's own name without a pattern).
    fn allows_any_command(&self, facts: &RequestFacts<'_>) -> bool {
        match &self.matcher {
            Matcher::Bash(None) => facts.command.is_some() || facts.tool_name == "bash",
            Matcher::Tool { name, path: None } => name.matches(facts.tool_name),
            _ => false,
        }
    }

    /// True when the rule allows a command line by naming it whole (a
    /// pattern without wildcards equal to the line, what an "allow always"
    /// answer stores) or by allowing every command: such a rule vouches for
    /// exactly the text a person allowed, so no strict reading is needed.
    pub(crate) fn vouches_for_line(&self, facts: &RequestFacts<'_>) -> bool {
        self.allows_any_command(facts)
            || facts.command.as_ref().is_some_and(|command| {
                self.command_pattern()
                    .is_some_and(|p| p.is_literal() && p.matches(&command.line))
            })
    }

    fn command_pattern(&self) -> Option<&Wildcard> {
        match &self.matcher {
            Matcher::Bash(Some(pattern)) => Some(pattern),
            _ => None,
        }
    }

    fn path_rule(
        &self,
        facts: &RequestFacts<'_>,
        access: Access,
        pattern: Option<&PathPattern>,
        lexical_too: bool,
    ) -> bool {
        let wanted = match access {
            Access::Read => ToolCategory::Read,
            Access::Write => ToolCategory::Write,
        };
        match (&facts.path, pattern) {
            (Some(path), None) => path.access == access,
            (Some(path), Some(pattern)) => {
                path.access == access
                    && (pattern.matches(&path.resolved)
                        || (lexical_too && pattern.matches(&path.lexical)))
            }
            (None, None) => {
                facts.command.is_none() && facts.host.is_none() && facts.category == wanted
            }
            (None, Some(_)) => false,
        }
    }
}

/// Whether a `WebFetch` rule covers a request: `WebFetch` alone covers every
/// network request, a `domain:` pattern the hosts it names.
fn host_rule(facts: &RequestFacts<'_>, pattern: Option<&DomainPattern>) -> bool {
    match (&facts.host, pattern) {
        (Some(_), None) => true,
        (Some(host), Some(pattern)) => pattern.matches(host),
        (None, _) => false,
    }
}

/// The allow rules that together allow a request, or `None`.
///
/// For a command line: one rule allowing every command, or a rule without
/// wildcards equal to the whole line (what an "allow always" answer stores),
/// or else every simple command of the line — nested ones included — must be
/// matched by some allow rule (its source text or its words; prefixes such as
/// `sudo` are not looked through). So `Bash(cargo test*)` allows
/// `cargo test --all` but not `cargo test && rm -rf src`.
pub(crate) fn allowing_rules<'a>(rules: &[&'a Rule], facts: &RequestFacts<'_>) -> Vec<&'a Rule> {
    let Some(command) = &facts.command else {
        return rules
            .iter()
            .find(|rule| rule.allows(facts))
            .map(|rule| vec![*rule])
            .unwrap_or_default();
    };
    let view_matches = |pattern: &Wildcard, view: &CommandView| {
        pattern.matches(&view.source) || pattern.matches(&view.words)
    };
    // The first rule, in configured order, that allows the line on its own.
    let alone = rules.iter().find(|rule| {
        rule.allows_any_command(facts)
            || rule.command_pattern().is_some_and(|p| {
                (p.is_literal() && p.matches(&command.line))
                    || (!command.views.is_empty()
                        && command.views.iter().all(|view| view_matches(p, view)))
            })
    });
    if let Some(rule) = alone {
        return vec![*rule];
    }
    if command.views.is_empty() {
        return Vec::new();
    }
    let mut used: Vec<&'a Rule> = Vec::new();
    for view in &command.views {
        let found = rules.iter().find(|rule| {
            rule.command_pattern()
                .is_some_and(|pattern| view_matches(pattern, view))
        });
        match found {
            Some(rule) => {
                if !used.iter().any(|u| std::ptr::eq(*u, *rule)) {
                    used.push(rule);
                }
            }
            None => return Vec::new(),
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/nonexistent-troupe-root/proj";

    fn ctx() -> PatternContext<'static> {
        PatternContext {
            project_root: Path::new(ROOT),
            home: Some(Path::new("/nonexistent-troupe-root/home")),
        }
    }

    fn rule(text: &str) -> Result<Rule, RuleParseError> {
        Rule::parse(
            &RuleEntry {
                rule: text.to_owned(),
                source: RuleSource::Project,
            },
            &ctx(),
        )
    }

    fn path_facts(access: Access, abs: &str) -> RequestFacts<'static> {
        let candidate = Candidate::new(PathBuf::from(abs), Path::new(ROOT));
        RequestFacts {
            tool_name: "read_file",
            category: ToolCategory::Read,
            path: Some(PathFacts {
                access,
                resolved: candidate.clone(),
                lexical: candidate,
            }),
            command: None,
            host: None,
        }
    }

    fn host_facts(host: &str) -> RequestFacts<'static> {
        RequestFacts {
            tool_name: "web_fetch",
            category: ToolCategory::Read,
            path: None,
            command: None,
            host: Some(normalize_host(host)),
        }
    }

    #[test]
    fn web_rules_name_a_host_or_its_subdomains() {
        let docs = rule("WebFetch(domain:docs.rs)").expect("parses");
        assert!(docs.allows(&host_facts("docs.rs")));
        assert!(docs.allows(&host_facts("DOCS.rs.")));
        assert!(!docs.allows(&host_facts("evil-docs.rs")));
        assert!(!docs.allows(&host_facts("docs.rs.evil.com")));
        assert!(!docs.allows(&host_facts("sub.docs.rs")));
        let python = rule("WebFetch(domain:*.python.org)").expect("parses");
        assert!(python.allows(&host_facts("docs.python.org")));
        assert!(python.allows(&host_facts("a.b.python.org")));
        assert!(!python.allows(&host_facts("python.org")));
        assert!(!python.allows(&host_facts("evilpython.org")));
        assert!(!python.allows(&host_facts("python.org.evil.com")));
        let any = rule("WebFetch").expect("parses");
        assert!(any.restricts(&host_facts("example.com")));
        // Web rules never match files or commands, nor path rules hosts.
        assert!(!any.restricts(&path_facts(Access::Read, "/etc/hosts")));
        assert!(!any.restricts(&command_facts("curl x", &["curl x"])));
        assert!(!rule("Read").unwrap().allows(&host_facts("example.com")));
        assert!(!rule("Bash").unwrap().allows(&host_facts("example.com")));
        // The tool's own name works like any tool rule.
        assert!(
            rule("web_fetch")
                .unwrap()
                .allows(&host_facts("example.com"))
        );
        for bad in [
            "WebFetch(docs.rs)",
            "WebFetch(domain:)",
            "WebFetch(domain:*)",
            "WebFetch(domain:a..b)",
            "WebFetch(domain:a b)",
            "WebFetch(domain:*.*.org)",
        ] {
            assert!(
                matches!(rule(bad), Err(RuleParseError::InvalidDomain(_))),
                "{bad}"
            );
        }
    }

    fn command_facts(line: &str, views: &[&str]) -> RequestFacts<'static> {
        RequestFacts {
            tool_name: "bash",
            category: ToolCategory::Execute,
            path: None,
            command: Some(CommandFacts {
                line: line.to_owned(),
                views: views
                    .iter()
                    .map(|v| CommandView {
                        source: (*v).to_owned(),
                        words: (*v).to_owned(),
                        effective: (*v).to_owned(),
                    })
                    .collect(),
            }),
            host: None,
        }
    }

    #[test]
    fn wildcard_matching() {
        let w = Wildcard::new("git push*", true);
        assert!(w.matches("git push"));
        assert!(w.matches("git push origin main"));
        assert!(!w.matches("git pull"));
        assert!(!w.matches("echo git push"));
        let w = Wildcard::new("*a*b*", true);
        assert!(w.matches("xaybz"));
        assert!(!w.matches("xbya"));
        let w = Wildcard::new("ab*ba", true);
        assert!(!w.matches("aba"));
        assert!(w.matches("abba"));
        let w = Wildcard::new(r"ls \*.rs", true);
        assert!(w.is_literal());
        assert!(w.matches("ls *.rs"));
        assert!(!w.matches("ls main.rs"));
        let w = Wildcard::new("mcp__github__*", false);
        assert!(w.matches("mcp__github__create_issue"));
        assert!(!w.matches("mcp__gitlab__x"));
        assert_eq!(
            Wildcard::new(&escape_command(r"rm * \x"), true),
            Wildcard::new(r"rm \* \\x", true)
        );
        assert!(Wildcard::new(&escape_command(r"rm * \x"), true).matches(r"rm * \x"));
    }

    #[test]
    fn parse_errors_are_typed() {
        assert_eq!(rule("  ").err(), Some(RuleParseError::Empty));
        assert_eq!(
            rule("Bash(git push").err(),
            Some(RuleParseError::UnclosedParenthesis)
        );
        assert_eq!(
            rule("Bash()").err(),
            Some(RuleParseError::EmptyPattern("Bash".into()))
        );
        assert_eq!(
            rule("bad name(x)").err(),
            Some(RuleParseError::InvalidName("bad name".into()))
        );
        assert!(matches!(
            rule("Read(src/[)").err(),
            Some(RuleParseError::InvalidGlob { pattern, .. }) if pattern == "src/["
        ));
        let no_home = Rule::parse(
            &RuleEntry {
                rule: "Read(~/.ssh/**)".into(),
                source: RuleSource::User,
            },
            &PatternContext {
                project_root: Path::new(ROOT),
                home: None,
            },
        );
        assert!(matches!(no_home, Err(RuleParseError::NoHome(_))));
        assert!(rule("Bash(echo $(date))").is_ok());
        assert!(rule("mcp__github__*").is_ok());
    }

    #[test]
    fn relative_path_patterns() {
        let env = rule("Read(.env)").expect("parses");
        assert!(env.restricts(&path_facts(Access::Read, &format!("{ROOT}/.env"))));
        assert!(!env.restricts(&path_facts(Access::Read, &format!("{ROOT}/src/.env"))));
        assert!(!env.restricts(&path_facts(Access::Write, &format!("{ROOT}/.env"))));
        let src = rule("Write(src/**)").expect("parses");
        assert!(src.allows(&path_facts(Access::Write, &format!("{ROOT}/src/a/b.rs"))));
        assert!(!src.allows(&path_facts(Access::Write, &format!("{ROOT}/tests/a.rs"))));
        let star = rule("Edit(src/*)").expect("parses");
        assert!(star.allows(&path_facts(Access::Write, &format!("{ROOT}/src/a.rs"))));
        assert!(!star.allows(&path_facts(Access::Write, &format!("{ROOT}/src/a/b.rs"))));
        let dir = rule("Read(docs/)").expect("parses");
        assert!(dir.restricts(&path_facts(Access::Read, &format!("{ROOT}/docs/x/y.md"))));
    }

    #[test]
    fn any_depth_and_absolute_patterns() {
        let pem = rule("Read(**/*.pem)").expect("parses");
        assert!(pem.restricts(&path_facts(Access::Read, &format!("{ROOT}/key.pem"))));
        assert!(pem.restricts(&path_facts(Access::Read, &format!("{ROOT}/a/b/key.pem"))));
        assert!(pem.restricts(&path_facts(Access::Read, "/etc/ssl/key.pem")));
        assert!(!pem.restricts(&path_facts(Access::Read, "/etc/ssl/key.crt")));
        let etc = rule("Read(/etc/**)").expect("parses");
        assert!(etc.allows_path_explicitly(&path_facts(Access::Read, "/etc/hosts")));
        assert!(!etc.allows_path_explicitly(&path_facts(Access::Read, "/usr/etc/hosts")));
        let home = rule("Read(~/.ssh/**)").expect("parses");
        assert!(home.restricts(&path_facts(
            Access::Read,
            "/nonexistent-troupe-root/home/.ssh/id_rsa"
        )));
        let up = rule("Read(../shared/**)").expect("parses");
        assert!(up.restricts(&path_facts(
            Access::Read,
            "/nonexistent-troupe-root/shared/x"
        )));
        let relative_outside = rule("Read(src/**)").expect("parses");
        assert!(!relative_outside.restricts(&path_facts(Access::Read, "/src/x")));
        let bare_read = rule("Read").expect("parses");
        assert!(!bare_read.allows_path_explicitly(&path_facts(Access::Read, "/etc/hosts")));
    }

    #[test]
    fn tool_name_rules() {
        let mcp = rule("mcp__github__*").expect("parses");
        let facts = RequestFacts {
            tool_name: "mcp__github__create_issue",
            category: ToolCategory::Execute,
            path: None,
            command: None,
            host: None,
        };
        assert!(mcp.restricts(&facts));
        assert!(mcp.allows(&facts));
        let other = RequestFacts {
            tool_name: "mcp__jira__create_issue",
            ..facts.clone()
        };
        assert!(!mcp.restricts(&other));
        let agent = rule("agent").expect("parses");
        assert!(!agent.restricts(&facts));
        let scoped = rule("read_file(src/**)").expect("parses");
        assert!(scoped.allows(&path_facts(Access::Read, &format!("{ROOT}/src/x"))));
        assert!(!scoped.allows(&path_facts(Access::Read, &format!("{ROOT}/x"))));
    }

    #[test]
    fn restrictive_command_matching_sees_every_simple_command() {
        let push = rule("Bash(git push*)").expect("parses");
        assert!(push.restricts(&command_facts("git push origin", &["git push origin"])));
        assert!(push.restricts(&command_facts(
            "cargo test && git push",
            &["cargo test", "git push"]
        )));
        assert!(!push.restricts(&command_facts("git pull", &["git pull"])));
        assert!(
            rule("Bash")
                .expect("parses")
                .restricts(&command_facts("ls", &["ls"]))
        );
    }

    #[test]
    fn allowing_a_compound_line_needs_every_part() {
        let test = rule("Bash(cargo test*)").expect("parses");
        let grep = rule("Bash(grep *)").expect("parses");
        let rules = [&test, &grep];
        let single = command_facts("cargo test --all", &["cargo test --all"]);
        assert_eq!(allowing_rules(&rules, &single).len(), 1);
        let chained = command_facts("cargo test && rm -rf src", &["cargo test", "rm -rf src"]);
        assert!(allowing_rules(&rules, &chained).is_empty());
        let piped = command_facts("cargo test | grep FAIL", &["cargo test", "grep FAIL"]);
        assert_eq!(allowing_rules(&rules, &piped).len(), 2);
        let exact = rule("Bash(make && make install)").expect("parses");
        let line = command_facts("make && make install", &["make", "make install"]);
        assert_eq!(allowing_rules(&[&exact], &line).len(), 1);
        let bare = rule("Bash").expect("parses");
        assert_eq!(allowing_rules(&[&bare], &chained).len(), 1);
    }
}
