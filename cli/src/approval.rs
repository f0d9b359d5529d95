//! Approval prompts on the terminal (SPEC §5 human in the loop).
//!
//! `troupe run` answers `approval_requested` events by asking on the controlling
//! terminal (`/dev/tty`), so prompts work even when stdout is redirected. When
//! there is no terminal the run is started with nobody to ask, and the agent
//! denies with a reason instead of waiting.

use std::io::{BufRead, BufReader, IsTerminal, Write};

use troupe_protocol::events::ApprovalOutcome;

use crate::sanitize::for_terminal;

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

/// Asks on the terminal until a valid answer is typed. Blocking: call it from
/// a blocking task. End of input or an unusable terminal counts as a denial.
pub(crate) fn ask(tool: &str, args: &str, reason: &str) -> (ApprovalOutcome, Option<String>) {
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
    let _ = writeln!(
        writer,
        "\n{}\n  ({})",
        heading(tool, args),
        for_terminal(reason)
    );
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
