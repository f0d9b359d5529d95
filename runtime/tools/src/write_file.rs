//! `write_file` (SPEC §4): creates or overwrites a file, creating parent
//! directories. The path is resolved at the moment of use; writes outside the
//! allowed roots are refused whatever the permission engine said, and every
//! component is opened without following symlinks.

use std::io;
use std::path::Path;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files::{self, Replaced};
use super::{Access, PermissionSubject, ToolContext, ToolOutput, plural};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// The `write_file` tool.
#[derive(Debug)]
pub(crate) struct WriteFile;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// Project-relative or absolute
    path: String,
    /// The whole new content
    content: String,
}

impl WriteFile {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for WriteFile {
    type Args = Args;
    const NAME: &'static str = "write_file";
    const CLASS: ToolClass = ToolClass::WRITE;

    fn description(&self) -> &str {
        "Create a file or replace all of it, creating parent directories. To change part of \
         a file use edit_file."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        super::read_file::path_subject(args, Access::Write)
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let target = match files::resolve_for_use(ctx, &args.path, Access::Write) {
                Ok(target) => target,
                Err(message) => return ToolOutput::error(message),
            };
            let work = tokio::task::spawn_blocking(move || {
                write_whole(&target.path, args.content.as_bytes())
                    .map(|outcome| describe(&target.display, args.content.len(), outcome))
                    .map_err(|err| files::explain_io(&target.display, &err))
            });
            match work.await {
                Ok(Ok(text)) => ToolOutput::ok(text),
                Ok(Err(message)) => ToolOutput::error(message),
                Err(err) => ToolOutput::error(format!("write_file failed: {err}")),
            }
        })
    }
}

/// Whether a write created the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    /// The file did not exist.
    Created,
    /// An existing file of this many bytes was replaced.
    Overwritten {
        /// Its previous size.
        previous_bytes: u64,
    },
}

/// Writes `content` to the resolved `path`, creating parents, never following
/// a symlink in any component. An existing file is replaced (a new file
/// renamed over it, keeping its mode), never written through: its other hard
/// links keep their content.
pub(crate) fn write_whole(path: &Path, content: &[u8]) -> io::Result<WriteOutcome> {
    Ok(match files::replace_file(path, content, true)? {
        Replaced::Created => WriteOutcome::Created,
        Replaced::Existing { previous_bytes } => WriteOutcome::Overwritten { previous_bytes },
    })
}

fn describe(display: &str, bytes: usize, outcome: WriteOutcome) -> String {
    let size = plural(bytes as u64, "byte");
    match outcome {
        WriteOutcome::Created => format!("Created {display} ({size})."),
        WriteOutcome::Overwritten { previous_bytes } => format!(
            "Overwrote {display} ({size}; it had {}).",
            plural(previous_bytes, "byte")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(WriteFile::new().input_schema());
    }
}
