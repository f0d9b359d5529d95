//! Path checks and file access at the moment of use, shared by the path-taking
//! tools (SPEC §5 path sandbox, defence in depth).
//!
//! [`resolve_for_use`] resolves a raw path with the session's sandbox right
//! before the tool touches it: a path to write that names a directory, and
//! writes outside the allowed roots, are refused always; reads outside are refused unless a person approved that very call
//! or an allow rule names the path (the permission check says which).
//! [`open_beneath`] then opens the resolved path one component at a time with
//! `O_NOFOLLOW`, so a symlink swapped into any component after the check makes
//! the open fail instead of escaping. [`replace_file`] is the one write path of
//! the file tools: it writes a temporary file in the target's directory and
//! renames it over the target, so a write never goes through a hard link into
//! a file elsewhere. Permission decisions are not made here.

use std::path::{Path, PathBuf};

use super::{Access, ToolContext};
pub(crate) use troupe_paths::file_io::{
    BINARY_SNIFF_BYTES, OpenMode, Replaced, display_path, ensure_regular, explain_io,
    lexical_normalize, looks_binary, open_beneath, replace_file,
};
use troupe_paths::sandbox::SandboxError;

/// A path checked for one use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsePath {
    /// The resolved absolute path (no symlinks, no `..`).
    pub path: PathBuf,
    /// How to show it to the model: relative to the project root when inside
    /// it, absolute otherwise.
    pub display: String,
}

/// Resolves `raw` for `access` at the moment of use, or explains (for the
/// model) why it may not be used.
pub(crate) fn resolve_for_use(
    ctx: &ToolContext,
    raw: &str,
    access: Access,
) -> Result<UsePath, String> {
    let resolution = match access {
        // A file to write must not name a directory (`dir/.`, `dir/`).
        Access::Write => ctx.sandbox.resolve_file(raw),
        Access::Read => ctx.sandbox.resolve(raw),
    };
    let resolved = resolution.map_err(|err| match err {
        SandboxError::Directory(_) => format!(
            "Refused: `{raw}` names a directory, not a file; give the path of a file. Nothing was \
             written."
        ),
        err => format!("Cannot use path `{raw}`: {err}."),
    })?;
    let display = display_path(ctx.sandbox.project_root(), &resolved.path);
    if !resolved.is_inside() {
        let through_link = symlink_note(ctx, raw, &resolved.path);
        match access {
            Access::Write => {
                return Err(format!(
                    "Refused: `{raw}` resolves to {}, outside the project and the other allowed \
                     directories; writing there is never allowed.{through_link}",
                    resolved.path.display()
                ));
            }
            Access::Read if !ctx.outside_read_approved => {
                return Err(format!(
                    "Refused: `{raw}` resolves to {}, outside the project and the other allowed \
                     directories; reading it needs a person's approval of this call or an allow rule \
                     naming the path.{through_link}",
                    resolved.path.display()
                ));
            }
            Access::Read => {}
        }
    }
    Ok(UsePath {
        path: resolved.path,
        display,
    })
}

/// When the lexical form of `raw` lies inside a root but its resolution does
/// not, a symlink is involved: say so, since the permission check may have seen
/// the path before the link changed.
fn symlink_note(ctx: &ToolContext, raw: &str, resolved: &Path) -> String {
    if raw.starts_with('~') {
        return String::new();
    }
    let lexical = lexical_normalize(&ctx.sandbox.project_root().join(raw));
    let lexically_inside = ctx
        .sandbox
        .roots()
        .iter()
        .any(|root| lexical.starts_with(root));
    if lexically_inside && lexical != resolved {
        " It goes through a symbolic link: if the link changed after the permission check, \
         that check saw a different path."
            .to_string()
    } else {
        String::new()
    }
}
