//! The permission engine (SPEC §5): one [`PermissionEngine`] per session turns a
//! [`PermissionRequest`] into a [`Decision`].
//!
//! Order: paths are resolved through the sandbox first, then hard blocks and the
//! sandbox's write limit → deny rules → plan mode → reads outside the allowed
//! roots (ask unless an allow rule names the path) → ask rules (never for
//! read-only calls, always for hosts) → allow rules (static, then session "always" answers;
//! a pattern allows a command only when the command is read with confidence)
//! → the mode's fallback. A command line that only reads (see `read_only`),
//! inside the allowed roots, is a read-only call like `read_file`. A request
//! to a host (`web_fetch`) is read-only for the project but reaches out of it:
//! plan mode does not refuse it, and in every mode but bypass a host that no
//! rule names asks. This module owns that order and the reason texts; it
//! does not wait for anyone, emit events or run anything (the agent actor
//! does), and it touches the file system only through the sandbox's resolver.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use troupe_config::PermissionSettings;
use troupe_paths::sandbox::{PathSandbox, SandboxError};
use troupe_paths::view::FileSystemView;
use troupe_protocol::permission::{Access, PermissionSubject, ToolCategory};
use troupe_protocol::permission::{PermissionMode, RuleEntry};

use super::rules::{
    Candidate, CommandFacts, PathFacts, PatternContext, RequestFacts, Rule, allowing_rules,
    escape_command, normalize_host,
};
use super::{Cause, Decision, PermissionError, PermissionRequest};
use troupe_paths::protected::ProtectedPaths;
use troupe_shell::bash_ast::{self, RedirectKind, Syntax};
use troupe_shell::hard_blocks::{self, HardBlock, ShellContext, normalize};
use troupe_shell::read_only::{self, ReadOnlyLine};

/// A decision with what it grants the launched tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Allow, ask or deny, with the reason.
    pub decision: Decision,
    /// True when the decision allows reading a path that resolves outside the
    /// allowed roots, which only an allow rule naming the path does (configured,
    /// or remembered from an "allow always" answer). The tool is then launched
    /// as if a person had approved this very call: without that, the tool
    /// refuses outside reads on its own. Never true for writes.
    pub outside_read_granted: bool,
    /// The step of the decision order that decided.
    pub cause: Cause,
}

/// Decides tool calls for one session. Cheap to share behind an `Arc`: the mode
/// and the session's "always" rules sit behind locks.
#[derive(Debug)]
pub struct PermissionEngine {
    sandbox: Arc<PathSandbox>,
    home: Option<PathBuf>,
    mode: RwLock<PermissionMode>,
    allow: Vec<Rule>,
    ask: Vec<Rule>,
    deny: Vec<Rule>,
    session: RwLock<Vec<(RuleEntry, Rule)>>,
    protected: ProtectedPaths,
}

impl PermissionEngine {
    /// Builds the engine from the effective settings. The sandbox must already
    /// hold the settings' `extra_roots` (and the spill directory). Fails with
    /// the first rule that does not parse, naming its text and source.
    pub fn new(
        settings: &PermissionSettings,
        sandbox: Arc<PathSandbox>,
    ) -> Result<Self, PermissionError> {
        let home = sandbox.home().map(|home| {
            sandbox
                .resolve_absolute(home)
                .unwrap_or_else(|_| normalize(home))
        });
        let ctx = PatternContext {
            project_root: sandbox.project_root(),
            home: home.as_deref(),
        };
        let compile = |entries: &[RuleEntry]| -> Result<Vec<Rule>, PermissionError> {
            entries
                .iter()
                .map(|entry| parse_entry(entry, &ctx))
                .collect()
        };
        let sandbox_root = &sandbox.project_root().to_path_buf();
        let allow = compile(&settings.allow)?;
        let ask = compile(&settings.ask)?;
        let deny = compile(&settings.deny)?;
        Ok(Self {
            sandbox,
            home,
            mode: RwLock::new(settings.mode),
            allow,
            ask,
            deny,
            session: RwLock::new(Vec::new()),
            protected: ProtectedPaths::for_project(sandbox_root),
        })
    }

    /// Also protects the user's Troupe configuration directory and the data
    /// directory (the project's `.troupe/` and `.mcp.json` always are): no
    /// tool writes there in any mode. `exempt` directories inside them (the
    /// session's spill directory) stay writable.
    pub fn with_protected_dirs(
        mut self,
        config_dir: Option<&Path>,
        data_dir: Option<&Path>,
        exempt: &[PathBuf],
    ) -> Self {
        self.protected = ProtectedPaths::for_project(self.sandbox.project_root())
            .with_user_dirs(config_dir, data_dir, exempt);
        self
    }

    /// The sandbox the engine resolves paths with.
    pub fn sandbox(&self) -> &Arc<PathSandbox> {
        &self.sandbox
    }

    /// The current mode.
    pub fn mode(&self) -> PermissionMode {
        *self.mode.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Switches mode (`/plan`, `/do`, `/mode`).
    pub fn set_mode(&self, mode: PermissionMode) {
        *self.mode.write().unwrap_or_else(PoisonError::into_inner) = mode;
    }

    /// Remembers an "allow always" answer for the rest of the session: an allow
    /// rule consulted after the configured allow rules.
    pub fn add_session_rule(&self, entry: RuleEntry) -> Result<(), PermissionError> {
        let ctx = PatternContext {
            project_root: self.sandbox.project_root(),
            home: self.home.as_deref(),
        };
        let rule = parse_entry(&entry, &ctx)?;
        let mut session = self.session.write().unwrap_or_else(PoisonError::into_inner);
        if !session
            .iter()
            .any(|(existing, _)| existing.rule == entry.rule)
        {
            session.push((entry, rule));
        }
        Ok(())
    }

    /// The session's "always" rules, in the order they were added (to keep
    /// with the session and restore on resume).
    pub fn session_rules(&self) -> Vec<RuleEntry> {
        self.session
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(entry, _)| entry.clone())
            .collect()
    }

    /// The rule an "allow always" answer to `request` should remember: a
    /// command gives `Bash(<exact command>)` (stars escaped), a write gives
    /// `Write(<path relative to the project root>)`, a read (asked only outside
    /// the allowed roots) gives `Read(<absolute path>)`, anything else the tool
    /// name. Paths are the resolved ones, glob characters escaped.
    pub fn always_rule_for(&self, request: &PermissionRequest) -> String {
        match &request.subject {
            PermissionSubject::Command { command } => {
                format!("Bash({})", escape_command(command.trim()))
            }
            PermissionSubject::Path { path, access } => {
                let resolved = self
                    .sandbox
                    .resolve(path)
                    .map(|r| r.path)
                    .unwrap_or_else(|_| self.lexical(path));
                let root = self.sandbox.project_root();
                let shown = match resolved.strip_prefix(root) {
                    Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
                    _ => resolved.to_string_lossy().into_owned(),
                };
                let name = match access {
                    Access::Read => "Read",
                    Access::Write => "Write",
                };
                format!("{name}({})", globset::escape(&shown))
            }
            PermissionSubject::Host { host } => {
                format!("WebFetch(domain:{})", normalize_host(host))
            }
            PermissionSubject::None => request.tool_name.clone(),
        }
    }

    /// Decides one call.
    pub fn decide(&self, request: &PermissionRequest) -> Decision {
        self.verdict(request).decision
    }

    /// Decides one call and says whether the decision lets the tool read a
    /// path outside the allowed roots (see `Verdict`): both come from the
    /// same resolution of the path.
    pub fn verdict(&self, request: &PermissionRequest) -> Verdict {
        let mut outside_read = false;
        let (decision, cause) = self.decide_resolved(request, &mut outside_read);
        Verdict {
            outside_read_granted: outside_read && decision.is_allow(),
            decision,
            cause,
        }
    }

    /// The decision order and the step that decided; sets `outside_read` when
    /// the request reads a path that resolves outside the allowed roots.
    fn decide_resolved(
        &self,
        request: &PermissionRequest,
        outside_read: &mut bool,
    ) -> (Decision, Cause) {
        let mode = self.mode();
        let root = self.sandbox.project_root();
        let mut facts = RequestFacts {
            tool_name: &request.tool_name,
            category: request.category,
            path: None,
            command: None,
            host: None,
        };
        let mut inside = true;
        // For commands: read-only inside the roots, and why a pattern may not
        // vouch for the line.
        let mut command_read_only = false;
        let mut doubt: Option<String> = None;
        match &request.subject {
            PermissionSubject::None => {}
            PermissionSubject::Host { host } => facts.host = Some(normalize_host(host)),
            PermissionSubject::Command { command } => {
                let resolve = |path: &Path| self.sandbox.resolve_absolute(path).ok();
                let ctx = ShellContext {
                    project_root: root,
                    home: self.home.as_deref(),
                    resolve: &resolve,
                    protected: &self.protected,
                };
                let analysis = hard_blocks::analyse_command(command, &ctx);
                if let Some(block) = analysis.block {
                    let decision = Decision::Deny {
                        reason: block.reason,
                    };
                    return (decision, Cause::HardBlock);
                }
                facts.command = Some(CommandFacts {
                    line: command.trim().to_owned(),
                    views: analysis.commands,
                });
                let syntax = bash_ast::analyse(command);
                command_read_only =
                    read_only::classify(&syntax).is_ok_and(|line| self.reads_inside(&line));
                doubt = self.doubt(&syntax);
            }
            PermissionSubject::Path { path, access } => {
                // A file to write must not name a directory: `dir/.` would
                // otherwise resolve to `dir` and be written as a file.
                let resolution = match access {
                    Access::Write => self.sandbox.resolve_file(path),
                    Access::Read => self.sandbox.resolve(path),
                };
                let resolved = match resolution {
                    Ok(resolved) => resolved,
                    Err(err @ SandboxError::Directory(_)) => {
                        let decision = Decision::Deny {
                            reason: format!(
                                "{err}; `{}` writes files only, so the call is refused in every mode",
                                request.tool_name
                            ),
                        };
                        return (decision, Cause::UnusablePath);
                    }
                    Err(err) => {
                        let decision = Decision::Deny {
                            reason: format!("cannot check the path `{path}`: {err}"),
                        };
                        return (decision, Cause::UnusablePath);
                    }
                };
                inside = resolved.is_inside();
                *outside_read = !inside && *access == Access::Read;
                let lexical = self.lexical(path);
                if *access == Access::Write {
                    for candidate in [&resolved.path, &lexical] {
                        if hard_blocks::in_git_internals(candidate, root) {
                            let decision = Decision::Deny {
                                reason: HardBlock::git_write(candidate).reason,
                            };
                            return (decision, Cause::HardBlock);
                        }
                        if let Some(kind) = self.protected.covers(candidate) {
                            let action = format!("writing `{path}`");
                            let decision = Decision::Deny {
                                reason: HardBlock::protected(&action, kind).reason,
                            };
                            return (decision, Cause::HardBlock);
                        }
                    }
                    if !inside {
                        let decision = Decision::Deny {
                            reason: format!(
                                "`{path}` resolves to `{}`, outside the allowed roots ({}); writes outside the allowed roots are refused in every mode, bypass included",
                                resolved.path.display(),
                                self.roots_text()
                            ),
                        };
                        return (decision, Cause::OutsideWrite);
                    }
                }
                facts.path = Some(PathFacts {
                    access: *access,
                    resolved: Candidate::new(resolved.path, root),
                    lexical: Candidate::new(lexical, root),
                });
            }
        }

        if let Some(rule) = self.deny.iter().find(|rule| rule.restricts(&facts)) {
            let decision = Decision::Deny {
                reason: format!("denied by rule {}", rule.describe()),
            };
            return (decision, Cause::DenyRule);
        }

        let read_only = request.read_only || command_read_only;
        // A request to a host changes nothing in the project but reaches out
        // of it: it is never waved through as a read, in any mode.
        let network = facts.host.is_some();

        if mode == PermissionMode::Plan && !read_only && !network {
            return (plan_refusal(request), Cause::PlanMode);
        }

        let session = self.session.read().unwrap_or_else(PoisonError::into_inner);
        let allow: Vec<&Rule> = self
            .allow
            .iter()
            .chain(session.iter().map(|(_, rule)| rule))
            .collect();

        if let Some(path) = facts.path.as_ref().filter(|_| !inside) {
            // Only reads reach here: writes outside were refused above.
            if let Some(rule) = allow
                .iter()
                .find(|rule| rule.allows_path_explicitly(&facts))
            {
                let decision = Decision::Allow {
                    reason: format!(
                        "allowed by rule {}, which names this path outside the allowed roots",
                        rule.describe()
                    ),
                };
                return (decision, Cause::AllowRule);
            }
            let decision = Decision::Ask {
                reason: format!(
                    "`{}` is outside the allowed roots ({}); reading it needs approval",
                    path.resolved.abs.display(),
                    self.roots_text()
                ),
            };
            return (decision, Cause::OutsideRead);
        }

        if (!read_only || network)
            && let Some(rule) = self.ask.iter().find(|rule| rule.restricts(&facts))
        {
            let decision = Decision::Ask {
                reason: format!("approval required by rule {}", rule.describe()),
            };
            return (decision, Cause::AskRule);
        }

        let allowing = allowing_rules(&allow, &facts);
        let mut unsure = None;
        if !allowing.is_empty() {
            let names: Vec<String> = allowing.iter().map(|rule| rule.describe()).collect();
            let noun = if names.len() == 1 { "rule" } else { "rules" };
            // A rule that names the whole line (an "allow always" answer) or
            // every command vouches for exactly what was allowed; a pattern
            // vouches only for a line read with confidence.
            let vouched = allowing.iter().all(|rule| rule.vouches_for_line(&facts));
            match doubt.filter(|_| !vouched) {
                None => {
                    let decision = Decision::Allow {
                        reason: format!("allowed by {noun} {}", names.join(" and ")),
                    };
                    return (decision, Cause::AllowRule);
                }
                Some(doubt) => unsure = Some((noun, names, doubt)),
            }
        }

        let decision = fallback(mode, request, &facts, inside, read_only);
        match unsure {
            Some((noun, names, doubt)) if !decision.is_allow() => {
                let decision = Decision::Ask {
                    reason: format!(
                        "the allow {noun} {} would cover this command, but a pattern allows a command only when every part of it can be checked, and {doubt}; approval needed",
                        names.join(" and ")
                    ),
                };
                (decision, Cause::UncertainCommand)
            }
            _ => (decision, Cause::Mode),
        }
    }

    /// True when every path a read-only line reads lies inside the allowed
    /// roots (symlinks followed; a glob in the last component is listed and
    /// each match checked).
    fn reads_inside(&self, line: &ReadOnlyLine) -> bool {
        line.reads.iter().all(|raw| {
            if raw == "-" {
                return true;
            }
            let (dir, pattern) = match split_glob(raw) {
                GlobPath::Plain => return self.sandbox.resolve(raw).is_ok_and(|r| r.is_inside()),
                GlobPath::Unchecked => return false,
                GlobPath::InLast { dir, pattern } => (dir, pattern),
            };
            let dir = if dir.is_empty() { "." } else { dir };
            let Ok(resolved) = self.sandbox.resolve(dir) else {
                return false;
            };
            resolved.is_inside()
                && glob_matches(self.sandbox.view(), &resolved.path, pattern).is_some_and(
                    |matches| {
                        matches.iter().all(|m| {
                            self.sandbox
                                .resolve_absolute(m)
                                .is_ok_and(|p| self.inside_roots(&p))
                        })
                    },
                )
        })
    }

    fn inside_roots(&self, path: &Path) -> bool {
        self.sandbox
            .roots()
            .iter()
            .any(|root| path.starts_with(root))
    }

    /// Why a pattern may not vouch for a command line, if it may not: a doubt
    /// of the strict reading, or a redirection that writes outside the allowed
    /// roots (or somewhere only known when the line runs).
    fn doubt(&self, syntax: &Syntax) -> Option<String> {
        if let Some(doubt) = &syntax.doubt {
            return Some(doubt.describe());
        }
        let changes_directory = syntax
            .commands
            .iter()
            .any(|c| matches!(c.program(), Some("cd" | "pushd" | "popd")));
        for redirection in &syntax.redirections {
            if !matches!(
                redirection.kind,
                RedirectKind::Write | RedirectKind::ReadWrite
            ) {
                continue;
            }
            let Some(target) = redirection.target.as_deref() else {
                return Some("it redirects output to a file named only when it runs".to_owned());
            };
            if is_output_device(target) {
                continue;
            }
            if target.contains(['*', '?', '[']) {
                return Some(format!("it redirects output to the pattern `{target}`"));
            }
            let absolute = target.starts_with('/') || target == "~" || target.starts_with("~/");
            if changes_directory && !absolute {
                return Some(format!(
                    "it redirects output to `{target}` after changing directory"
                ));
            }
            match self.sandbox.resolve(target) {
                Ok(resolved) if resolved.is_inside() => {}
                Ok(resolved) => {
                    return Some(format!(
                        "it redirects output to `{}`, outside the allowed roots ({})",
                        resolved.path.display(),
                        self.roots_text()
                    ));
                }
                Err(err) => {
                    return Some(format!(
                        "its redirection target `{target}` cannot be checked: {err}"
                    ));
                }
            }
        }
        None
    }

    /// `path` as written, `~` expanded and `..` applied without following
    /// symlinks, absolute.
    fn lexical(&self, raw: &str) -> PathBuf {
        let expanded = match (self.sandbox.home(), raw.strip_prefix('~')) {
            (Some(home), Some("")) => home.to_path_buf(),
            (Some(home), Some(rest)) if rest.starts_with('/') => {
                home.join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(raw),
        };
        normalize(&self.sandbox.project_root().join(expanded))
    }

    fn roots_text(&self) -> String {
        let roots: Vec<String> = self
            .sandbox
            .roots()
            .iter()
            .map(|root| root.display().to_string())
            .collect();
        roots.join(", ")
    }
}

/// Output targets that are not files: writing to them changes nothing on disk.
fn is_output_device(target: &str) -> bool {
    matches!(
        target,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    ) || target
        .strip_prefix("/dev/fd/")
        .is_some_and(|fd| !fd.is_empty() && fd.bytes().all(|b| b.is_ascii_digit()))
}

/// Most directory entries listed to check a glob's matches; a larger
/// directory makes the line not read-only.
const MAX_GLOB_ENTRIES: usize = 10_000;

/// How a path read by a command uses glob characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GlobPath<'a> {
    /// None: the path names one file.
    Plain,
    /// In the last component only (`src/*.rs`): one directory to list.
    InLast {
        /// The directory (`""` for the working directory).
        dir: &'a str,
        /// The pattern of the last component.
        pattern: &'a str,
    },
    /// In a directory component (`*/x`): not checked.
    Unchecked,
}

fn split_glob(raw: &str) -> GlobPath<'_> {
    const META: [char; 3] = ['*', '?', '['];
    if !raw.contains(META) {
        return GlobPath::Plain;
    }
    let (dir, pattern) = match raw.rsplit_once('/') {
        Some(("", last)) => ("/", last),
        Some((dir, last)) => (dir, last),
        None => ("", raw),
    };
    if dir.contains(META) {
        GlobPath::Unchecked
    } else {
        GlobPath::InLast { dir, pattern }
    }
}

/// The entries of `dir` whose names match the glob `pattern` (hidden names
/// only when the pattern starts with `.`), or `None` when the pattern does not
/// compile or the directory is too large to list.
fn glob_matches(view: &dyn FileSystemView, dir: &Path, pattern: &str) -> Option<Vec<PathBuf>> {
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .ok()?
        .compile_matcher();
    let mut out = Vec::new();
    let names = match view.names(dir, MAX_GLOB_ENTRIES) {
        Ok(names) => names?,
        // Nothing to list: the shell passes the pattern itself, which names
        // no file.
        Err(_) => return Some(out),
    };
    for name in names {
        let text = name.to_string_lossy();
        if text.starts_with('.') && !pattern.starts_with('.') {
            continue;
        }
        if matcher.is_match(text.as_ref()) {
            out.push(dir.join(&name));
        }
    }
    Some(out)
}

fn parse_entry(entry: &RuleEntry, ctx: &PatternContext<'_>) -> Result<Rule, PermissionError> {
    Rule::parse(entry, ctx).map_err(|error| PermissionError::InvalidRule {
        rule: entry.rule.clone(),
        origin: entry.source,
        error,
    })
}

/// Plan mode's refusal of a call that is not read-only.
fn plan_refusal(request: &PermissionRequest) -> Decision {
    Decision::Deny {
        reason: format!(
            "plan mode offers only read-only tools; `{}` changes things, so it is refused until plan mode ends",
            request.tool_name
        ),
    }
}

/// The mode's answer when no rule decided (SPEC §5 modes).
fn fallback(
    mode: PermissionMode,
    request: &PermissionRequest,
    facts: &RequestFacts<'_>,
    inside: bool,
    read_only: bool,
) -> Decision {
    if let Some(host) = &facts.host {
        return if mode == PermissionMode::Bypass {
            Decision::Allow {
                reason: "bypass mode allows what no deny rule, hard block or sandbox limit forbids"
                    .to_owned(),
            }
        } else {
            Decision::Ask {
                reason: format!(
                    "`{}` reaches the host `{host}`, which no WebFetch(domain:…) rule allows; approval needed",
                    request.tool_name
                ),
            }
        };
    }
    if facts.command.is_some() && read_only && !request.read_only {
        return Decision::Allow {
            reason: "read-only command (every program and flag in it only reads, inside the allowed roots): allowed in every mode".to_owned(),
        };
    }
    if read_only || request.category == ToolCategory::Read {
        return Decision::Allow {
            reason: "read-only call: allowed in every mode".to_owned(),
        };
    }
    let allow = |reason: String| Decision::Allow { reason };
    let ask = |reason: &str| Decision::Ask {
        reason: reason.to_owned(),
    };
    match (mode, request.category) {
        (PermissionMode::Bypass, _) => allow(
            "bypass mode allows what no deny rule, hard block or sandbox limit forbids".to_owned(),
        ),
        (PermissionMode::Plan, _) => plan_refusal(request),
        (_, ToolCategory::Agent) => allow(format!(
            "starting a sub-agent is allowed in {} mode; each call it makes is checked on its own",
            mode.as_str()
        )),
        (PermissionMode::AcceptEdits, ToolCategory::Write) => {
            if facts.path.is_some() && inside {
                allow("accept-edits mode allows writes inside the allowed roots".to_owned())
            } else {
                ask("accept-edits mode asks for writes it cannot place inside the project")
            }
        }
        (PermissionMode::Default, ToolCategory::Write) => {
            ask("default mode asks before changing files")
        }
        (PermissionMode::Default | PermissionMode::AcceptEdits, _) => ask(&format!(
            "{} mode asks before running commands or tools with side effects",
            mode.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_paths::sandbox::resolve_path;
    use troupe_protocol::permission::RuleSource;

    struct Setup {
        _dir: tempfile::TempDir,
        base: PathBuf,
        sandbox: Arc<PathSandbox>,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = resolve_path(dir.path()).expect("resolve");
        std::fs::create_dir_all(base.join("project/src")).expect("mkdir");
        let sandbox = Arc::new(
            PathSandbox::new(&base.join("project"), &[], Some(base.join("home"))).expect("sandbox"),
        );
        Setup {
            _dir: dir,
            base,
            sandbox,
        }
    }

    fn settings(mode: PermissionMode, allow: &[&str], deny: &[&str]) -> PermissionSettings {
        let entries = |rules: &[&str]| {
            rules
                .iter()
                .map(|rule| RuleEntry {
                    rule: (*rule).to_owned(),
                    source: RuleSource::User,
                })
                .collect()
        };
        PermissionSettings {
            mode,
            allow: entries(allow),
            deny: entries(deny),
            ..PermissionSettings::default()
        }
    }

    fn request(subject: PermissionSubject, category: ToolCategory) -> PermissionRequest {
        PermissionRequest {
            tool_name: "t".into(),
            category,
            read_only: false,
            subject,
        }
    }

    fn write(path: &str) -> PermissionRequest {
        request(
            PermissionSubject::Path {
                path: path.into(),
                access: Access::Write,
            },
            ToolCategory::Write,
        )
    }

    fn read(path: &str) -> PermissionRequest {
        PermissionRequest {
            tool_name: "read_file".into(),
            category: ToolCategory::Read,
            read_only: true,
            subject: PermissionSubject::Path {
                path: path.into(),
                access: Access::Read,
            },
        }
    }

    #[test]
    fn an_allow_rule_naming_an_outside_path_grants_the_read() {
        let s = setup();
        std::fs::create_dir_all(s.base.join("etc")).expect("mkdir");
        let pattern = format!("Read({}/host*)", s.base.join("etc").display());
        let engine = PermissionEngine::new(
            &settings(PermissionMode::Default, &[&pattern], &[]),
            s.sandbox,
        )
        .expect("engine");
        let hostname = s.base.join("etc/hostname").display().to_string();
        let verdict = engine.verdict(&read(&hostname));
        assert!(verdict.decision.is_allow(), "{verdict:?}");
        assert!(verdict.outside_read_granted);
        assert!(verdict.decision.reason().contains("names this path"));

        // Not named: asked, and nothing is granted.
        let passwd = engine.verdict(&read(&s.base.join("etc/passwd").display().to_string()));
        assert!(passwd.decision.is_ask() && !passwd.outside_read_granted);
        // Inside the project: allowed, but there is nothing outside to grant.
        let inside = engine.verdict(&read("src/a.rs"));
        assert!(inside.decision.is_allow() && !inside.outside_read_granted);
        // A rule naming the path never lets a write out.
        let write_rule = format!("Write({}/**)", s.base.join("etc").display());
        let engine = PermissionEngine::new(
            &settings(PermissionMode::Bypass, &[&write_rule, &pattern], &[]),
            engine.sandbox().clone(),
        )
        .expect("engine");
        let refused = engine.verdict(&write(&hostname));
        assert!(refused.decision.is_deny() && !refused.outside_read_granted);
    }

    #[test]
    fn an_always_answer_for_an_outside_read_grants_the_identical_read() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        let request = read("../notes/todo.txt");
        let first = engine.verdict(&request);
        assert!(first.decision.is_ask() && !first.outside_read_granted);
        let rule = engine.always_rule_for(&request);
        assert_eq!(
            rule,
            format!("Read({})", s.base.join("notes/todo.txt").display())
        );
        engine
            .add_session_rule(RuleEntry {
                rule,
                source: RuleSource::Session,
            })
            .expect("valid");
        let again = engine.verdict(&request);
        assert!(again.decision.is_allow(), "{again:?}");
        assert!(again.outside_read_granted);
        assert_eq!(engine.decide(&request), again.decision);
        // Another file next to it is still asked about.
        assert!(engine.decide(&read("../notes/other.txt")).is_ask());
    }

    #[test]
    fn mode_can_be_switched() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        assert_eq!(engine.mode(), PermissionMode::Default);
        assert!(engine.decide(&write("src/a.rs")).is_ask());
        engine.set_mode(PermissionMode::AcceptEdits);
        assert_eq!(engine.mode(), PermissionMode::AcceptEdits);
        assert!(engine.decide(&write("src/a.rs")).is_allow());
        engine.set_mode(PermissionMode::Plan);
        assert!(engine.decide(&write("src/a.rs")).is_deny());
    }

    #[test]
    fn deny_rule_reason_wins_over_plan_mode() {
        let s = setup();
        let engine = PermissionEngine::new(
            &settings(PermissionMode::Plan, &[], &["Write(src/**)"]),
            s.sandbox,
        )
        .expect("engine");
        let decision = engine.decide(&write("src/a.rs"));
        assert_eq!(
            decision.reason(),
            "denied by rule \"Write(src/**)\" from user config"
        );
    }

    #[test]
    fn session_rules_are_kept_once_and_validated() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        let entry = RuleEntry {
            rule: "Bash(cargo build)".into(),
            source: RuleSource::Session,
        };
        engine.add_session_rule(entry.clone()).expect("valid");
        engine.add_session_rule(entry.clone()).expect("valid");
        assert_eq!(engine.session_rules(), vec![entry]);
        let bad = engine.add_session_rule(RuleEntry {
            rule: "Write(".into(),
            source: RuleSource::Session,
        });
        assert!(matches!(
            bad,
            Err(PermissionError::InvalidRule {
                origin: RuleSource::Session,
                ..
            })
        ));
        assert_eq!(engine.session_rules().len(), 1);
    }

    #[test]
    fn always_rules_escape_glob_characters_and_round_trip() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        let odd = write("src/[id]*.rs");
        let rule = engine.always_rule_for(&odd);
        assert_eq!(rule, "Write(src/[[]id[]][*].rs)");
        engine
            .add_session_rule(RuleEntry {
                rule,
                source: RuleSource::Session,
            })
            .expect("valid");
        assert!(engine.decide(&odd).is_allow());
        assert!(engine.decide(&write("src/i.rs")).is_ask());
        assert_eq!(
            engine.always_rule_for(&request(PermissionSubject::None, ToolCategory::Agent)),
            "t"
        );
    }

    fn fetch(host: &str) -> PermissionRequest {
        PermissionRequest {
            tool_name: "web_fetch".into(),
            category: ToolCategory::Read,
            read_only: true,
            subject: PermissionSubject::Host { host: host.into() },
        }
    }

    #[test]
    fn a_host_asks_in_every_mode_but_bypass_unless_a_rule_decides() {
        let s = setup();
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
        ] {
            let engine = PermissionEngine::new(
                &settings(
                    mode,
                    &["WebFetch(domain:docs.rs)", "WebFetch(domain:*.python.org)"],
                    &["WebFetch(domain:evil.example)"],
                ),
                s.sandbox.clone(),
            )
            .expect("engine");
            let asked = engine.decide(&fetch("example.com"));
            assert!(asked.is_ask(), "{mode:?}: {asked:?}");
            assert!(asked.reason().contains("example.com"), "{asked:?}");
            assert!(engine.decide(&fetch("docs.rs")).is_allow(), "{mode:?}");
            assert!(
                engine.decide(&fetch("Docs.Python.org")).is_allow(),
                "{mode:?}"
            );
            assert!(engine.decide(&fetch("python.org")).is_ask(), "{mode:?}");
            assert!(
                matches!(engine.decide(&fetch("evil.example")), Decision::Deny { .. }),
                "{mode:?}"
            );
        }
        let bypass = PermissionEngine::new(
            &settings(
                PermissionMode::Bypass,
                &[],
                &["WebFetch(domain:evil.example)"],
            ),
            s.sandbox.clone(),
        )
        .expect("engine");
        assert!(bypass.decide(&fetch("example.com")).is_allow());
        assert!(matches!(
            bypass.decide(&fetch("evil.example")),
            Decision::Deny { .. }
        ));
        // Ask rules apply to hosts although the call is read-only.
        let asking = PermissionEngine::new(
            &PermissionSettings {
                ask: vec![RuleEntry {
                    rule: "WebFetch(domain:docs.rs)".into(),
                    source: RuleSource::User,
                }],
                ..settings(PermissionMode::Bypass, &["WebFetch"], &[])
            },
            s.sandbox,
        )
        .expect("engine");
        assert!(asking.decide(&fetch("docs.rs")).is_ask());
        assert!(asking.decide(&fetch("example.com")).is_allow());
    }

    #[test]
    fn always_for_a_host_allows_that_host_only() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        let rule = engine.always_rule_for(&fetch("Docs.RS."));
        assert_eq!(rule, "WebFetch(domain:docs.rs)");
        engine
            .add_session_rule(RuleEntry {
                rule,
                source: RuleSource::Session,
            })
            .expect("valid");
        assert!(engine.decide(&fetch("docs.rs")).is_allow());
        assert!(engine.decide(&fetch("sub.docs.rs")).is_ask());
        assert!(engine.decide(&fetch("example.com")).is_ask());
    }

    #[test]
    fn lexical_form_expands_home_and_applies_dot_dot() {
        let s = setup();
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        assert_eq!(engine.lexical("~/x/../y"), s.base.join("home/y"));
        assert_eq!(engine.lexical("~"), s.base.join("home"));
        assert_eq!(engine.lexical("src/../../z"), s.base.join("z"));
        assert_eq!(engine.lexical("/a/./b"), PathBuf::from("/a/b"));
    }

    fn command(line: &str) -> PermissionRequest {
        PermissionRequest {
            tool_name: "bash".into(),
            category: ToolCategory::Execute,
            read_only: false,
            subject: PermissionSubject::Command {
                command: line.into(),
            },
        }
    }

    #[test]
    fn patterns_allow_only_commands_read_with_confidence() {
        let s = setup();
        let engine = PermissionEngine::new(
            &settings(
                PermissionMode::Default,
                &["Bash(cargo test*)", "Bash(echo *)", "Bash(cd *)"],
                &[],
            ),
            s.sandbox,
        )
        .expect("engine");
        for line in [
            "cargo test",
            "cargo test --all 2>&1",
            "cargo test > target/log.txt",
            "cargo test 2>/dev/null",
            "cargo test >> ~/../project/out.txt",
        ] {
            let verdict = engine.verdict(&command(line));
            assert!(verdict.decision.is_allow(), "{line}: {verdict:?}");
            assert_eq!(verdict.cause, Cause::AllowRule, "{line}");
        }
        let home = s.base.join("home");
        for (line, why) in [
            (
                "cargo test > ~/.bashrc",
                format!(
                    "it redirects output to `{}`, outside the allowed roots",
                    home.join(".bashrc").display()
                ),
            ),
            (
                "cargo test 2> /tmp/x",
                "it redirects output to `/tmp/x`, outside the allowed roots".to_owned(),
            ),
            (
                "echo $(echo hi)",
                "it contains a command substitution".to_owned(),
            ),
            (
                "echo `echo hi`",
                "it contains a command substitution".to_owned(),
            ),
            (
                "cargo test <(echo x)",
                "it contains a process substitution".to_owned(),
            ),
            (
                "cargo test > \"$OUT\"",
                "it redirects output to a file named only when it runs".to_owned(),
            ),
            (
                "cd .. && cargo test > out.txt",
                "it redirects output to `out.txt` after changing directory".to_owned(),
            ),
        ] {
            let verdict = engine.verdict(&command(line));
            assert!(verdict.decision.is_ask(), "{line}: {verdict:?}");
            assert_eq!(verdict.cause, Cause::UncertainCommand, "{line}");
            let reason = verdict.decision.reason();
            assert!(reason.contains(&why), "{line}: {reason}");
            assert!(
                reason.contains("would cover this command, but a pattern allows a command only when every part of it can be checked"),
                "{reason}"
            );
        }
        // A line the grammar cannot read is refused outright: nothing may
        // hide behind a syntax error.
        let verdict = engine.verdict(&command("cargo test; echo 'unterminated"));
        assert!(verdict.decision.is_deny(), "{verdict:?}");
        assert_eq!(verdict.cause, Cause::HardBlock);
        assert!(
            verdict.decision.reason().contains("cannot be read at byte"),
            "{verdict:?}"
        );
        engine.set_mode(PermissionMode::Bypass);
        assert!(engine.decide(&command("cargo test > ~/.bashrc")).is_allow());
    }

    #[test]
    fn exact_and_catch_all_rules_vouch_for_the_line() {
        let s = setup();
        let line = "echo $(date) > /tmp/when";
        let engine = PermissionEngine::new(
            &settings(PermissionMode::Default, &[], &[]),
            s.sandbox.clone(),
        )
        .expect("engine");
        let request = command(line);
        assert!(engine.decide(&request).is_ask());
        engine
            .add_session_rule(RuleEntry {
                rule: engine.always_rule_for(&request),
                source: RuleSource::Session,
            })
            .expect("valid");
        assert!(engine.decide(&request).is_allow());
        let every = PermissionEngine::new(
            &settings(PermissionMode::Default, &["Bash"], &[]),
            s.sandbox,
        )
        .expect("engine");
        assert!(every.decide(&request).is_allow());
    }

    #[test]
    fn read_only_commands_need_no_approval_in_any_mode() {
        let s = setup();
        let project = s.base.join("project");
        std::fs::write(project.join("src/a.rs"), "fn a() {}").expect("write");
        std::fs::write(project.join("src/b.rs"), "fn b() {}").expect("write");
        let engine = PermissionEngine::new(
            &settings(PermissionMode::Default, &[], &["Bash(head *)"]),
            s.sandbox,
        )
        .expect("engine");
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
            PermissionMode::Bypass,
        ] {
            engine.set_mode(mode);
            for line in [
                "cat src/a.rs",
                "ls -la src",
                "wc -l src/*.rs",
                "git status",
                "grep -rn fn src | wc -l",
                "cat ~/../project/src/a.rs",
                &format!("cat {}", project.join("src/a.rs").display()),
            ] {
                let verdict = engine.verdict(&command(line));
                assert!(verdict.decision.is_allow(), "{mode:?} {line}: {verdict:?}");
                assert_eq!(verdict.cause, Cause::Mode);
                assert!(
                    verdict.decision.reason().starts_with("read-only command"),
                    "{}",
                    verdict.decision.reason()
                );
            }
        }
        engine.set_mode(PermissionMode::Default);
        // A deny rule still wins.
        assert!(engine.decide(&command("head -n1 src/a.rs")).is_deny());
        // Reads outside the allowed roots are asked, like read_file's.
        for line in [
            "cat /etc/passwd",
            "cat ~/.ssh/id_rsa",
            "ls ..",
            "wc -l ../*",
            "grep -r x /etc",
            "cat < /etc/hostname",
            "git diff /etc/passwd src/a.rs",
            "cat */a.rs",
        ] {
            let decision = engine.decide(&command(line));
            assert!(decision.is_ask(), "{line}: {decision:?}");
        }
        // Not read-only: asked as before.
        for line in ["cat src/a.rs > src/c.rs", "ls --unknown", "touch x"] {
            assert!(engine.decide(&command(line)).is_ask(), "{line}");
        }
    }

    #[test]
    fn a_glob_matching_a_symlink_out_of_the_roots_is_not_read_only() {
        let s = setup();
        let project = s.base.join("project");
        std::fs::create_dir_all(s.base.join("secret")).expect("mkdir");
        std::fs::write(s.base.join("secret/key"), "k").expect("write");
        std::fs::write(project.join("src/a.rs"), "a").expect("write");
        std::os::unix::fs::symlink(s.base.join("secret/key"), project.join("src/z.rs"))
            .expect("symlink");
        let engine = PermissionEngine::new(&settings(PermissionMode::Default, &[], &[]), s.sandbox)
            .expect("engine");
        assert!(engine.decide(&command("cat src/*.rs")).is_ask());
        assert!(engine.decide(&command("cat src/z.rs")).is_ask());
        assert!(engine.decide(&command("cat src/a*")).is_allow());
    }

    #[test]
    fn write_category_without_a_path_asks_in_accept_edits() {
        let s = setup();
        let engine =
            PermissionEngine::new(&settings(PermissionMode::AcceptEdits, &[], &[]), s.sandbox)
                .expect("engine");
        let decision = engine.decide(&request(PermissionSubject::None, ToolCategory::Write));
        assert!(decision.is_ask());
        assert!(
            decision
                .reason()
                .contains("cannot place inside the project")
        );
    }
}
