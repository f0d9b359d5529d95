//! What a user could change when a call cannot run: the advice appended to a
//! refusal the model (and the person reading the run) sees.
//!
//! [`advice`] is a pure function of the mode, the request, the step of the
//! decision order that decided it, the allow rule that would cover exactly
//! that call, whether a person can answer approvals in this run, and the
//! project root. It only suggests what would work in the current mode: no
//! `--mode accept-edits` for a command (that mode asks for commands too), no
//! `--mode` at all where no mode helps (ask rules, reads outside the allowed
//! roots), and every allow rule as the exact line and the file it goes in.

use std::path::Path;

use troupe_protocol::permission::PermissionMode;
use troupe_protocol::permission::{PermissionSubject, ToolCategory};

use super::{Cause, PermissionRequest};

/// The user configuration file, as the advice names it.
const USER_FILE: &str = "~/.config/troupe/config.toml";

/// Everything the advice depends on.
#[derive(Debug, Clone, Copy)]
pub struct AdviceFacts<'a> {
    /// The mode the call was decided in.
    pub mode: PermissionMode,
    /// The call.
    pub request: &'a PermissionRequest,
    /// The step of the decision order that decided it.
    pub cause: Cause,
    /// The allow rule that covers exactly this call (what an "allow always"
    /// answer would remember).
    pub rule: &'a str,
    /// True when a person can answer approvals in this run.
    pub approver: bool,
    /// The project root; its `.troupe/config.toml` is the project file.
    pub project_root: &'a Path,
}

/// The advice for a call that was refused, or that needs approval nobody can
/// give. `None` when nothing the user could change would let it run (hard
/// blocks, unusable paths), when the refusal already names the rule to change
/// (deny rules), or when a person will be asked anyway.
pub fn advice(facts: &AdviceFacts<'_>) -> Option<String> {
    match facts.cause {
        Cause::HardBlock | Cause::UnusablePath | Cause::DenyRule | Cause::AllowRule => None,
        Cause::OutsideWrite => Some(format!(
            "No mode allows writing outside the allowed roots. The user can add the directory \
             to the allowed roots with `extra_roots = [\"/path/to/dir\"]` under `[permissions]` \
             in {}.",
            files(facts.project_root)
        )),
        Cause::PlanMode => Some(
            "Plan mode offers read-only tools only. The user can leave it by rerunning with \
             `--mode default` (asks before changes) or `--mode accept-edits` (edits inside the \
             project run without asking), which override `mode = \"plan\"` in a configuration \
             file."
                .to_owned(),
        ),
        Cause::OutsideRead | Cause::AskRule | Cause::Mode | Cause::UncertainCommand
            if facts.approver =>
        {
            None
        }
        Cause::UncertainCommand => Some(format!(
            "The user can run `troupe` on a terminal to approve it, or allow this exact command \
             with {}; a rule with `*` never covers a command with `$(…)`, backticks, process \
             substitution or a redirection outside the allowed roots.",
            rule_line(facts)
        )),
        Cause::OutsideRead => Some(format!(
            "No mode reads outside the allowed roots without asking. The user can allow it with \
             {}, or add the directory to `extra_roots` there, or run `troupe` on a terminal to \
             approve it.",
            rule_line(facts)
        )),
        Cause::AskRule => Some(
            "An ask rule asks in every mode, bypass included, so only a person can allow this \
             call: the user can run `troupe` on a terminal to approve it, or remove or narrow \
             that ask rule in the configuration file the reason names."
                .to_owned(),
        ),
        Cause::Mode => {
            let mode = match helpful_mode(facts.mode, facts.request) {
                Some((flag, effect)) => format!("rerun with `--mode {flag}` ({effect}), "),
                None => String::new(),
            };
            let mut text = format!(
                "The user can {mode}allow it with {}, or run `troupe` on a terminal to approve \
                 it.",
                rule_line(facts)
            );
            if let Some((wider, prefix)) = wider_command_rule(facts.request) {
                text.push_str(&format!(
                    " A `*` in a rule matches any text: {} allows every command starting with \
                     `{prefix} `.",
                    toml_string(&wider)
                ));
            }
            Some(text)
        }
    }
}

/// The mode (other than the current one) whose fallback allows the request,
/// with what it does; `None` when no mode short of `bypass` would and the
/// current mode is already `bypass`.
fn helpful_mode(
    mode: PermissionMode,
    request: &PermissionRequest,
) -> Option<(&'static str, &'static str)> {
    let edit_inside = request.category == ToolCategory::Write
        && matches!(request.subject, PermissionSubject::Path { .. });
    let accept_edits = (
        PermissionMode::AcceptEdits.as_str(),
        "edits inside the project run without asking",
    );
    let bypass = (
        PermissionMode::Bypass.as_str(),
        "everything runs that no deny rule, hard block or sandbox limit forbids",
    );
    match mode {
        PermissionMode::Default if edit_inside => Some(accept_edits),
        PermissionMode::Bypass => None,
        _ => Some(bypass),
    }
}

/// `allow = ["<rule>"]` under `[permissions]` in the two files.
fn rule_line(facts: &AdviceFacts<'_>) -> String {
    format!(
        "`allow = [{}]` under `[permissions]` in {}",
        toml_string(facts.rule),
        files(facts.project_root)
    )
}

/// The project file and the user file, in words.
fn files(project_root: &Path) -> String {
    format!(
        "`{}` (this project, once trusted with `troupe trust`) or `{USER_FILE}` (every project)",
        project_root.join(".troupe").join("config.toml").display()
    )
}

/// `Bash(<first two words> *)` and those two words, for a command of at
/// least three plain words (no quoting, operators or substitutions).
fn wider_command_rule(request: &PermissionRequest) -> Option<(String, String)> {
    let PermissionSubject::Command { command } = &request.subject else {
        return None;
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || " -_./=:,+@%".contains(c);
    let command = command.trim();
    if !command.chars().all(plain) {
        return None;
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    (words.len() >= 3).then(|| {
        let prefix = format!("{} {}", words[0], words[1]);
        (format!("Bash({prefix} *)"), prefix)
    })
}

/// A TOML basic string holding `text`.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::permission::Access;

    const ROOT: &str = "/work/proj";

    fn bash(command: &str) -> PermissionRequest {
        PermissionRequest {
            tool_name: "bash".into(),
            category: ToolCategory::Execute,
            read_only: false,
            subject: PermissionSubject::Command {
                command: command.into(),
            },
        }
    }

    fn write(path: &str) -> PermissionRequest {
        PermissionRequest {
            tool_name: "write_file".into(),
            category: ToolCategory::Write,
            read_only: false,
            subject: PermissionSubject::Path {
                path: path.into(),
                access: Access::Write,
            },
        }
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

    fn mcp() -> PermissionRequest {
        PermissionRequest {
            tool_name: "mcp__github__create_issue".into(),
            category: ToolCategory::Execute,
            read_only: false,
            subject: PermissionSubject::None,
        }
    }

    fn advise(
        mode: PermissionMode,
        request: &PermissionRequest,
        cause: Cause,
        rule: &str,
        approver: bool,
    ) -> Option<String> {
        advice(&AdviceFacts {
            mode,
            request,
            cause,
            rule,
            approver,
            project_root: Path::new(ROOT),
        })
    }

    const FILES: &str = "`/work/proj/.troupe/config.toml` (this project, once trusted with `troupe trust`) or `~/.config/troupe/config.toml` (every project)";

    #[test]
    fn a_mode_fallback_nobody_can_answer_names_only_modes_that_help() {
        use PermissionMode::{AcceptEdits, Bypass, Default};
        let cargo = bash("cargo test --all");
        let ls = bash("ls");
        let edit = write("src/lib.rs");
        let issue = mcp();
        // (mode, request, rule, expected --mode, present in the text)
        let table: [(PermissionMode, &PermissionRequest, &str, Option<&str>, &str); 6] = [
            (
                Default,
                &cargo,
                "Bash(cargo test --all)",
                Some("bypass"),
                "`allow = [\"Bash(cargo test --all)\"]` under `[permissions]` in",
            ),
            (
                AcceptEdits,
                &cargo,
                "Bash(cargo test --all)",
                Some("bypass"),
                "\"Bash(cargo test *)\" allows every command starting with `cargo test `.",
            ),
            (
                Default,
                &ls,
                "Bash(ls)",
                Some("bypass"),
                "`allow = [\"Bash(ls)\"]`",
            ),
            (
                Default,
                &edit,
                "Write(src/lib.rs)",
                Some("accept-edits"),
                "`allow = [\"Write(src/lib.rs)\"]`",
            ),
            (
                AcceptEdits,
                &issue,
                "mcp__github__create_issue",
                Some("bypass"),
                "`allow = [\"mcp__github__create_issue\"]`",
            ),
            (Bypass, &issue, "mcp__github__create_issue", None, FILES),
        ];
        for (mode, request, rule, flag, phrase) in table {
            let text = advise(mode, request, Cause::Mode, rule, false).expect("advice");
            assert!(text.contains(phrase), "{mode:?} {request:?}: {text}");
            assert!(text.contains(FILES), "{text}");
            assert!(text.contains("run `troupe` on a terminal"), "{text}");
            match flag {
                Some(flag) => {
                    assert!(text.contains(&format!("`--mode {flag}`")), "{text}");
                    assert_eq!(text.matches("--mode").count(), 1, "{text}");
                }
                None => assert!(!text.contains("--mode"), "{text}"),
            }
            assert!(
                !text.contains(&format!("--mode {}", mode.as_str())),
                "advice names the current mode: {text}"
            );
            // With a person to ask there is nothing to advise.
            assert_eq!(advise(mode, request, Cause::Mode, rule, true), None);
        }
        // Only plain commands of three words or more get a wider pattern.
        let ls_text = advise(Default, &ls, Cause::Mode, "Bash(ls)", false).expect("advice");
        assert!(!ls_text.contains("A `*`"), "{ls_text}");
        let piped = bash("cargo test | grep x");
        let piped_text = advise(
            Default,
            &piped,
            Cause::Mode,
            "Bash(cargo test | grep x)",
            false,
        )
        .expect("a");
        assert!(!piped_text.contains("A `*`"), "{piped_text}");
    }

    #[test]
    fn ask_rules_and_outside_reads_suggest_no_mode() {
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Bypass,
        ] {
            let text = advise(
                mode,
                &bash("git push"),
                Cause::AskRule,
                "Bash(git push)",
                false,
            )
            .expect("a");
            assert!(
                text.contains("asks in every mode, bypass included"),
                "{text}"
            );
            assert!(!text.contains("--mode"), "{text}");
            let text = advise(
                mode,
                &read("/etc/hostname"),
                Cause::OutsideRead,
                "Read(/etc/hostname)",
                false,
            )
            .expect("advice");
            assert!(!text.contains("--mode"), "{text}");
            assert!(
                text.contains(&format!(
                    "`allow = [\"Read(/etc/hostname)\"]` under `[permissions]` in {FILES}"
                )),
                "{text}"
            );
            assert!(text.contains("`extra_roots`"), "{text}");
            for cause in [Cause::AskRule, Cause::OutsideRead] {
                assert_eq!(advise(mode, &read("/x"), cause, "Read(/x)", true), None);
            }
        }
    }

    #[test]
    fn refusals_advise_only_where_something_can_change() {
        let push = bash("git push");
        for approver in [false, true] {
            for cause in [
                Cause::HardBlock,
                Cause::UnusablePath,
                Cause::DenyRule,
                Cause::AllowRule,
            ] {
                assert_eq!(
                    advise(
                        PermissionMode::Bypass,
                        &push,
                        cause,
                        "Bash(git push)",
                        approver
                    ),
                    None
                );
            }
            let plan = advise(
                PermissionMode::Plan,
                &write("a"),
                Cause::PlanMode,
                "Write(a)",
                approver,
            )
            .expect("advice");
            assert!(plan.contains("`--mode default`"), "{plan}");
            assert!(!plan.contains("--mode plan"), "{plan}");
            let outside = advise(
                PermissionMode::Bypass,
                &write("/etc/x"),
                Cause::OutsideWrite,
                "Write(/etc/x)",
                approver,
            )
            .expect("advice");
            assert!(
                outside.contains("No mode allows writing outside"),
                "{outside}"
            );
            assert!(!outside.contains("--mode"), "{outside}");
            assert!(outside.contains(FILES), "{outside}");
        }
    }

    #[test]
    fn rules_are_written_as_toml_strings() {
        assert_eq!(toml_string(r"Bash(ls \*.rs)"), r#""Bash(ls \\*.rs)""#);
        assert_eq!(toml_string("Bash(echo \"hi\")"), r#""Bash(echo \"hi\")""#);
        assert_eq!(toml_string("a\u{1}"), r#""a\u0001""#);
        let parsed: toml::Table =
            toml::from_str(&format!("allow = {}", toml_string("Bash(a \\* \"b\")"))).unwrap();
        assert_eq!(parsed["allow"].as_str(), Some("Bash(a \\* \"b\")"));
    }
}
