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
use super::{
    Access, PermissionSubject, Tool, ToolCategory, ToolContext, ToolOutput, parse_args, plural,
};

/// The `write_file` tool.
#[derive(Debug)]
pub(crate) struct WriteFile {
    schema: Value,
}

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// File path, relative to the project root or absolute
    path: String,
    /// The complete new content
    content: String,
}

impl WriteFile {
    /// The tool with its schema.
    pub(crate) fn new() -> Self {
        Self {
            schema: super::schema::of::<Args>(),
        }
    }
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a file or replace its whole content; parent directories are created. Prefer \
         edit_file to change part of an existing file. Only paths inside the project (or other \
         allowed directories) can be written."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        false
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Write
    }

    fn permission_subject(&self, args: &Value) -> PermissionSubject {
        super::read_file::path_subject(args, Access::Write)
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args: Args = match parse_args(self.name(), args) {
                Ok(args) => args,
                Err(out) => return out,
            };
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

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(WriteFile::new().input_schema());
    }
}
