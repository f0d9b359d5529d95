//! What a tool call is about, in a few words for people: the path of a file
//! tool, the command of `bash`, the pattern of `grep`/`glob`, the role and
//! label of `agent`, the task id of the task tools, the URL of `web_fetch`. Carried as `target` on
//! `tool_started` so two parallel calls of one tool can be told apart.
//!
//! Pure: a function of the tool name and its raw JSON arguments. Unknown tools
//! (MCP) and arguments without the expected field have no target.

use serde_json::Value;

use troupe_protocol::events::preview;

/// Longest target, in characters, before it is cut with `…`.
pub const TARGET_MAX_CHARS: usize = 80;

/// The target of a call of `tool` with JSON arguments `args`, one line of at
/// most [`TARGET_MAX_CHARS`] characters; `None` when the tool has none or the
/// arguments do not name it.
pub fn tool_target(tool: &str, args: &str) -> Option<String> {
    let args: Value = serde_json::from_str(args).ok()?;
    let field = |name: &str| {
        args.get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|value| !value.is_empty())
    };
    let target = match tool {
        "read_file" | "write_file" | "edit_file" => field("path")?.to_string(),
        "bash" => field("command")?.to_string(),
        "grep" | "glob" => match field("path") {
            Some(path) => format!("{} in {path}", field("pattern")?),
            None => field("pattern")?.to_string(),
        },
        "task_output" | "task_kill" => field("id")?.to_string(),
        "web_fetch" => field("url")?.to_string(),
        "agent" => {
            let role = if args.get("fork").and_then(Value::as_bool) == Some(true) {
                "fork"
            } else {
                field("role").unwrap_or("general")
            };
            match field("description").or_else(|| field("prompt")) {
                Some(label) => format!("{role}: {label}"),
                None => role.to_string(),
            }
        }
        _ => return None,
    };
    Some(shorten(&target))
}

/// One line of at most [`TARGET_MAX_CHARS`] characters, cut with `…`.
fn shorten(text: &str) -> String {
    let line = preview(text);
    if line.chars().count() <= TARGET_MAX_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(TARGET_MAX_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_tools_name_their_path() {
        for tool in ["read_file", "write_file", "edit_file"] {
            assert_eq!(
                tool_target(tool, r#"{"path":"src/lib.rs","content":"x"}"#).as_deref(),
                Some("src/lib.rs"),
                "{tool}"
            );
        }
    }

    #[test]
    fn bash_names_its_command_on_one_short_line() {
        assert_eq!(
            tool_target("bash", r#"{"command":"cargo test\n  -p x"}"#).as_deref(),
            Some("cargo test -p x")
        );
        let long = format!(r#"{{"command":"echo {}"}}"#, "a".repeat(200));
        let target = tool_target("bash", &long).unwrap();
        assert_eq!(target.chars().count(), TARGET_MAX_CHARS + 1);
        assert!(target.ends_with('…'));
    }

    #[test]
    fn search_tools_name_their_pattern_and_where() {
        assert_eq!(
            tool_target("grep", r#"{"pattern":"fn main"}"#).as_deref(),
            Some("fn main")
        );
        assert_eq!(
            tool_target("glob", r#"{"pattern":"**/*.rs","path":"src"}"#).as_deref(),
            Some("**/*.rs in src")
        );
    }

    #[test]
    fn agent_names_its_role_and_label() {
        assert_eq!(
            tool_target(
                "agent",
                r#"{"description":"find the parser","prompt":"long","role":"explorer"}"#
            )
            .as_deref(),
            Some("explorer: find the parser")
        );
        assert_eq!(
            tool_target("agent", r#"{"prompt":"check the tests","fork":true}"#).as_deref(),
            Some("fork: check the tests")
        );
        assert_eq!(
            tool_target("agent", r#"{"description":"x"}"#).as_deref(),
            Some("general: x")
        );
    }

    #[test]
    fn task_tools_name_the_task() {
        assert_eq!(
            tool_target("task_output", r#"{"id":"t3"}"#).as_deref(),
            Some("t3")
        );
    }

    #[test]
    fn web_fetch_names_its_url() {
        assert_eq!(
            tool_target("web_fetch", r#"{"url":"https://docs.rs/tokio"}"#).as_deref(),
            Some("https://docs.rs/tokio")
        );
    }

    #[test]
    fn no_target_without_the_field_a_known_tool_or_valid_json() {
        assert_eq!(tool_target("read_file", "{}"), None);
        assert_eq!(tool_target("read_file", r#"{"path":"  "}"#), None);
        assert_eq!(tool_target("read_file", r#"{"path":7}"#), None);
        assert_eq!(tool_target("read_file", "{\"path\":"), None);
        assert_eq!(tool_target("task_list", "{}"), None);
        assert_eq!(tool_target("mcp__x__y", r#"{"path":"a"}"#), None);
    }
}
