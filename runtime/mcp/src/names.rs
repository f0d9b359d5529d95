//! Names of MCP tools as the model sees them (SPEC §8): `mcp__<server>__<tool>`,
//! which must match `^[A-Za-z0-9_-]{1,64}$` like every tool name. A tool whose
//! qualified name does not is skipped (the caller warns); nothing is renamed,
//! so a permission rule written for a name always means that tool.

use troupe_tools::registry::{MAX_TOOL_NAME_LEN, valid_tool_name};

/// `mcp__<server>__`: the prefix of every tool of `server` (and of the
/// permission rule `mcp__<server>__*`).
pub(crate) fn server_prefix(server: &str) -> String {
    format!("mcp__{server}__")
}

/// The name the model is offered for `tool` of `server`, or why the tool is
/// skipped.
pub(crate) fn qualified_tool_name(server: &str, tool: &str) -> Result<String, String> {
    if tool.is_empty() {
        return Err(format!(
            "a tool of MCP server {server:?} is skipped: it has no name"
        ));
    }
    let name = format!("{}{tool}", server_prefix(server));
    if valid_tool_name(&name) {
        return Ok(name);
    }
    let shown: String = tool.chars().take(80).collect();
    if name.len() > MAX_TOOL_NAME_LEN {
        Err(format!(
            "tool {shown:?} of MCP server {server:?} is skipped: its name {name:?} is longer \
             than {MAX_TOOL_NAME_LEN} characters"
        ))
    } else {
        Err(format!(
            "tool {shown:?} of MCP server {server:?} is skipped: a tool name may only use \
             A-Z a-z 0-9 _ -"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_validated() {
        assert_eq!(
            qualified_tool_name("fixture", "read_file").unwrap(),
            "mcp__fixture__read_file"
        );
        assert_eq!(
            qualified_tool_name("everything", "get-sum").unwrap(),
            "mcp__everything__get-sum"
        );
        for hostile in [
            "bad name",
            "a/b",
            "x\u{202e}y",
            "",
            "ünï",
            "a.b",
            "rm -rf /;",
        ] {
            let err = qualified_tool_name("s", hostile).unwrap_err();
            assert!(err.contains("skipped"), "{err}");
        }
        let long = "t".repeat(60);
        let err = qualified_tool_name("server", &long).unwrap_err();
        assert!(err.contains("longer than 64"), "{err}");
        let fits = "t".repeat(64 - "mcp__s__".len());
        assert!(qualified_tool_name("s", &fits).is_ok());
    }

    #[test]
    fn the_prefix_is_what_permission_rules_name() {
        assert_eq!(server_prefix("github"), "mcp__github__");
    }
}
