//! Approval prompts on the terminal (SPEC §5 human in the loop).
//!
//! `troupe run` answers `approval_requested` events by asking on the controlling
//! terminal (`/dev/tty`), so prompts work even when stdout is redirected. When
//! there is no terminal the run is started with nobody to ask, and the agent
//! denies with a reason instead of waiting.
//!
//! What is asked is described the same way by `troupe run` and `troupe chat`
//! ([`describe`]): a `write_file` or `edit_file` call as the diff it would
//! make, anything else as its arguments; why it needs approval, once; and
//! the exact rule an "always" answer keeps, and where.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::Path;

use troupe_protocol::events::ApprovalOutcome;

use crate::diff;
use crate::sanitize::for_terminal;

/// Largest file read to show what a write or an edit would change.
const DIFF_FILE_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// One approval request, as the prompt describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// `tool`, or `[main/fork-1] tool` for a sub-agent's request.
    pub label: String,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments (JSON text), or a server's question.
    pub args: String,
    /// Why the call needs approval.
    pub reason: String,
    /// The rule an "always" answer keeps.
    pub always_rule: Option<String>,
}

/// The file a `write_file` or `edit_file` call names, and the text it would
/// hold after the call given its `current` text (`None`: no such file).
/// `None` for other tools and for arguments that are not such a call's. An
/// edit whose text is not found in the file is shown as the replacement
/// alone.
pub(crate) fn proposed_change(
    tool: &str,
    args: &str,
    current: Option<&str>,
) -> Option<(String, String, String)> {
    let args: serde_json::Value = serde_json::from_str(args).ok()?;
    let path = args.get("path")?.as_str()?.to_string();
    let text = |name: &str| args.get(name).and_then(|v| v.as_str()).map(str::to_string);
    match tool {
        "write_file" => {
            let content = text("content")?;
            Some((path, current.unwrap_or_default().to_string(), content))
        }
        "edit_file" => {
            let (old, new) = (text("old_string")?, text("new_string")?);
            let replace_all = args
                .get("replace_all")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            match current {
                Some(current) if !old.is_empty() && current.contains(&old) => {
                    let edited = if replace_all {
                        current.replace(&old, &new)
                    } else {
                        current.replacen(&old, &new, 1)
                    };
                    Some((path, current.to_string(), edited))
                }
                _ => Some((path, old, new)),
            }
        }
        _ => None,
    }
}

/// The current text of `path` (relative to `dir` unless absolute), when it
/// is a readable text file of reasonable size.
fn current_text(dir: &Path, path: &str) -> Option<String> {
    let path = dir.join(path);
    let metadata = std::fs::metadata(&path).ok()?;
    if !metadata.is_file() || metadata.len() > DIFF_FILE_MAX_BYTES {
        return None;
    }
    String::from_utf8(std::fs::read(&path).ok()?).ok()
}

/// What "always" keeps, in words: the exact rule and where it is kept.
pub(crate) fn always_line(rule: &str) -> String {
    format!(
        "[a]lways keeps the allow rule `{}` for the rest of this session (stored with the \
         session, not written to any config file)",
        for_terminal(rule)
    )
}

/// The lines that describe `request`: what wants to run (a write or an edit
/// as the diff it would make to the file under `dir`, coloured when `color`
/// is on), why, once, and what "always" would keep.
pub(crate) fn describe(request: &Request, dir: &Path, color: bool) -> String {
    let change = {
        let path = serde_json::from_str::<serde_json::Value>(&request.args)
            .ok()
            .and_then(|args| args.get("path")?.as_str().map(str::to_string));
        let current = path.as_deref().and_then(|path| current_text(dir, path));
        proposed_change(&request.tool, &request.args, current.as_deref())
    };
    let mut text = match change {
        Some((path, old, new)) => {
            let lines =
                diff::unified_diff(&path, &old, &new, diff::CONTEXT_LINES, diff::MAX_DIFF_LINES);
            let shown = if lines.is_empty() {
                "(no change to the file's text)".to_string()
            } else {
                diff::render(&lines, color, |line| for_terminal(line).into_owned())
            };
            format!(
                "{} wants to change {}:\n{shown}",
                for_terminal(&request.label),
                for_terminal(&path)
            )
        }
        None => heading(&request.label, &request.args),
    };
    text.push_str(&format!("\n  ({})", for_terminal(&request.reason)));
    if let Some(rule) = &request.always_rule {
        text.push_str(&format!("\n  {}", always_line(rule)));
    }
    text
}

/// True when a person can be asked: stdin is a terminal and `/dev/tty` opens.
pub(crate) fn terminal_available() -> bool {
    std::io::stdin().is_terminal()
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .is_ok()
}

/// Parses an answer typed at the prompt: `y`/`yes`, `a`/`always`, `n`/`no`,
/// `c`/`cancel`; anything after the first word of a yes or a no is kept (a
/// no's reason for the model, or the field values answering an MCP server's
/// question).
pub(crate) fn parse_answer(line: &str) -> Option<(ApprovalOutcome, Option<String>)> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (
            word,
            Some(rest.trim().to_string()).filter(|r| !r.is_empty()),
        ),
        None => (line, None),
    };
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Some((ApprovalOutcome::Allow, rest)),
        "a" | "always" => Some((ApprovalOutcome::AllowAlways, rest)),
        "n" | "no" => Some((ApprovalOutcome::Deny, rest)),
        "c" | "cancel" => Some((ApprovalOutcome::Cancel, None)),
        _ => None,
    }
}

/// The first lines of a prompt: what wants to run, or what an MCP server
/// asks (its questions arrive as approvals from `mcp server NAME`).
/// The arguments come from the model and the question from a server: both
/// are cleaned of terminal control sequences before they are shown.
pub(crate) fn heading(tool: &str, args: &str) -> String {
    let shown: String = args.chars().take(2_000).collect();
    let shown = for_terminal(&shown);
    let tool = for_terminal(tool);
    // A sub-agent's requests are prefixed with `[path] `.
    let asker = tool.rsplit("] ").next().unwrap_or(&tool);
    if asker.starts_with("mcp server ") {
        format!("{tool} asks: {shown}")
    } else {
        format!("{tool} wants to run: {shown}")
    }
}

/// Asks on the terminal until a valid answer is typed, describing `request`
/// as [`describe`] does. Blocking: call it from a blocking task. End of
/// input or an unusable terminal counts as a denial.
pub(crate) fn ask(request: &Request, dir: &Path, color: bool) -> (ApprovalOutcome, Option<String>) {
    let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        return (ApprovalOutcome::Deny, Some("no terminal to ask on".into()));
    };
    let Ok(mut writer) = tty.try_clone() else {
        return (ApprovalOutcome::Deny, Some("no terminal to ask on".into()));
    };
    let mut reader = BufReader::new(tty);
    let _ = writeln!(writer, "\n{}", describe(request, dir, color));
    loop {
        let _ = write!(
            writer,
            "Allow? [y]es / [a]lways / [n]o [reason] / [c]ancel run: "
        );
        let _ = writer.flush();
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return (ApprovalOutcome::Deny, Some("no answer".into())),
            Ok(_) => {
                if let Some(answer) = parse_answer(&line) {
                    return answer;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tool: &str, args: serde_json::Value, rule: Option<&str>) -> Request {
        Request {
            label: tool.into(),
            tool: tool.into(),
            args: args.to_string(),
            reason: "default mode asks before edits".into(),
            always_rule: rule.map(str::to_string),
        }
    }

    #[test]
    fn a_write_is_shown_as_the_diff_it_would_make() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let asked = request(
            "write_file",
            serde_json::json!({"path": "a.txt", "content": "one\n2\nthree\n"}),
            Some("Write(a.txt)"),
        );
        let text = describe(&asked, dir.path(), false);
        assert_eq!(
            text,
            "write_file wants to change a.txt:\n--- a.txt\n+++ a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n  (default mode asks before edits)\n  [a]lways keeps the allow rule `Write(a.txt)` for the rest of this session (stored with the session, not written to any config file)"
        );
        assert_eq!(text.matches("default mode asks").count(), 1);
        assert!(!text.contains("\"content\""), "no JSON arguments: {text}");
    }

    #[test]
    fn an_edit_is_applied_to_the_file_or_shown_alone() {
        let args =
            serde_json::json!({"path": "f", "old_string": "b", "new_string": "B"}).to_string();
        assert_eq!(
            proposed_change("edit_file", &args, Some("a\nb\nc\nb\n")),
            Some(("f".into(), "a\nb\nc\nb\n".into(), "a\nB\nc\nb\n".into()))
        );
        let all = serde_json::json!({"path": "f", "old_string": "b", "new_string": "B", "replace_all": true}).to_string();
        assert_eq!(
            proposed_change("edit_file", &all, Some("b b")).map(|c| c.2),
            Some("B B".into())
        );
        assert_eq!(
            proposed_change("edit_file", &args, None),
            Some(("f".into(), "b".into(), "B".into()))
        );
        assert_eq!(proposed_change("bash", "{\"command\":\"ls\"}", None), None);
        assert_eq!(proposed_change("write_file", "not json", None), None);
    }

    #[test]
    fn other_calls_show_their_arguments_and_a_question_has_no_rule() {
        let asked = request(
            "bash",
            serde_json::json!({"command": "ls"}),
            Some("Bash(ls)"),
        );
        let text = describe(&asked, Path::new("/nonexistent"), false);
        assert!(
            text.starts_with("bash wants to run: {\"command\":\"ls\"}\n"),
            "{text}"
        );
        assert!(text.contains("`Bash(ls)`"), "{text}");
        let question = Request {
            always_rule: None,
            ..request("mcp server ev", serde_json::json!({}), None)
        };
        assert!(!describe(&question, Path::new("/"), false).contains("[a]lways"));
    }

    #[test]
    fn control_sequences_in_what_is_asked_never_reach_the_terminal() {
        let shown = heading(
            "mcp server \u{1b}]0;evil\u{7}ev",
            "Name?\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J",
        );
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
        assert!(!shown.contains('\u{7}'), "{shown:?}");
        assert!(shown.contains("asks: Name?"), "{shown:?}");
    }

    #[test]
    fn a_servers_question_is_headed_as_a_question() {
        assert_eq!(heading("bash", "ls"), "bash wants to run: ls");
        assert_eq!(
            heading("mcp server ev", "Your name?"),
            "mcp server ev asks: Your name?"
        );
        assert_eq!(
            heading("[main/general-1] mcp server ev", "Your name?"),
            "[main/general-1] mcp server ev asks: Your name?"
        );
    }

    #[test]
    fn answers() {
        assert_eq!(parse_answer("y\n"), Some((ApprovalOutcome::Allow, None)));
        assert_eq!(
            parse_answer("Always"),
            Some((ApprovalOutcome::AllowAlways, None))
        );
        assert_eq!(
            parse_answer("n  use the test database "),
            Some((ApprovalOutcome::Deny, Some("use the test database".into())))
        );
        assert_eq!(parse_answer("no"), Some((ApprovalOutcome::Deny, None)));
        assert_eq!(
            parse_answer("y {\"name\": \"Ann\"}"),
            Some((ApprovalOutcome::Allow, Some("{\"name\": \"Ann\"}".into())))
        );
        assert_eq!(parse_answer("c"), Some((ApprovalOutcome::Cancel, None)));
        assert_eq!(parse_answer("maybe"), None);
        assert_eq!(parse_answer(""), None);
    }
}
