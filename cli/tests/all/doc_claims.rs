//! The docs never say that something the code produces "does not exist yet":
//! a sentence of `docs/*.md`, `README.md` or `deploy/README.md` that says
//! something is missing or to come must not name, in backticks, a span the
//! runtime opens, an event type it emits or a command the binary has.

use std::path::{Path, PathBuf};
use std::process::Command;

const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");

/// Words that say something is missing or to come.
const NOT_YET: [&str; 7] = [
    "not yet",
    "does not exist",
    "do not exist",
    "not implemented",
    "is planned",
    "are planned",
    "coming soon",
];

/// The operations of the spans the runtime opens (`troupe_telemetry::genai`).
const SPANS: [&str; 9] = [
    "invoke_agent",
    "chat",
    "execute_tool",
    "await_approval",
    "compact",
    "hook",
    "mcp",
    "initialize",
    "tools/call",
];

fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md"), root.join("deploy/README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "md") {
            files.push(path);
        }
    }
    files
}

/// The subcommands `troupe --help` lists.
fn commands() -> Vec<String> {
    let out = Command::new(TROUPE).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The names a claim must not call missing: spans, event types, commands
/// (bare and as `troupe NAME`).
fn known_names() -> Vec<String> {
    let mut names: Vec<String> = SPANS.iter().map(|s| s.to_string()).collect();
    names.extend(
        troupe_protocol::events::EVENT_TYPES
            .iter()
            .map(|s| s.to_string()),
    );
    for command in commands() {
        names.push(format!("troupe {command}"));
        names.push(command);
    }
    names
}

/// The sentences of `text` that say something is missing and name one of
/// `names` in backticks (a span name such as `chat {model}` counts by its
/// first word).
fn false_claims(text: &str, names: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for paragraph in text.split("\n\n") {
        let paragraph = paragraph.replace('\n', " ");
        for sentence in paragraph.split(". ") {
            let lower = sentence.to_lowercase();
            if !NOT_YET.iter().any(|phrase| lower.contains(phrase)) {
                continue;
            }
            let quoted = sentence.split('`').skip(1).step_by(2);
            for code in quoted {
                let first = code.split_whitespace().next().unwrap_or_default();
                let hit = names
                    .iter()
                    .any(|name| name == code || (!first.is_empty() && name == first));
                if hit {
                    found.push(format!("`{code}` in: {}", sentence.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn no_doc_calls_a_span_event_or_command_of_the_code_missing() {
    let names = known_names();
    assert!(names.iter().any(|n| n == "troupe trace"), "{names:?}");
    let mut found = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for claim in false_claims(&text, &names) {
            found.push(format!("{}: {claim}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "docs call these missing:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_a_false_claim_and_passes_plain_uses_of_the_words() {
    let names: Vec<String> = ["compact", "hook", "troupe trace"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let text = "Compaction, hooks and MCP spans do not exist yet: `compact {trigger}`\n\
                and `hook {event}` come later. A path that does not exist yet is\n\
                resolved through its parent (`src/new.rs`).\n\n\
                `troupe trace` is not implemented.";
    assert_eq!(
        false_claims(text, &names),
        [
            "`compact {trigger}` in: Compaction, hooks and MCP spans do not exist yet: `compact {trigger}` and `hook {event}` come later",
            "`hook {event}` in: Compaction, hooks and MCP spans do not exist yet: `compact {trigger}` and `hook {event}` come later",
            "`troupe trace` in: `troupe trace` is not implemented.",
        ]
    );
}
