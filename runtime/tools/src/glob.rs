//! `glob` (SPEC §4): files matching a glob pattern under a directory, newest
//! first by modification time, at most 500 with a note, paths relative to the
//! project root, the listing at most 50 KB. `*` stays within one directory,
//! `**` crosses directories. Memory is bounded: only the 500 newest matches
//! are kept while walking.
//! Walks with the shared ripgrep-style filters (`walk`). Reads only; the walked
//! directory is resolved at the moment of use like every path.

use std::cmp::Reverse;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use futures::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkState};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files::{self, display_path};
use super::output::{MAX_OUTPUT_BYTES, NOTES_RESERVE_BYTES};
use super::walk::{BoundedBest, MAX_RESULTS, StopFlag, walk_builder};
use super::{Access, PermissionSubject, ToolContext, ToolOutput};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// The `glob` tool.
#[derive(Debug)]
pub(crate) struct Glob;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// e.g. **/*.rs or src/*.{ts,tsx}
    pattern: String,
    /// Directory to search (default: project root)
    path: Option<String>,
}

impl Glob {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for Glob {
    type Args = Args;
    const NAME: &'static str = "glob";
    const CLASS: ToolClass = ToolClass::READ;

    fn description(&self) -> &str {
        "Find files by glob pattern (`*` within a directory, `**` across them), skipping \
         .gitignored and hidden files. Paths newest first, at most 500."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        super::read_file::path_subject(args, Access::Read)
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let pattern = args.pattern.trim();
            if pattern.is_empty() {
                return ToolOutput::error("pattern is empty; try `**/*` for every file.");
            }
            let (prefix, rest) = split_literal_prefix(pattern);
            let base = args.path.as_deref().unwrap_or(".");
            let walk_raw = join_raw(base, &prefix);
            let root = match files::resolve_for_use(ctx, &walk_raw, Access::Read) {
                Ok(root) => root,
                Err(message) => return ToolOutput::error(message),
            };
            let matcher = match GlobBuilder::new(&rest).literal_separator(true).build() {
                Ok(glob) => glob.compile_matcher(),
                Err(err) => return ToolOutput::error(format!("Invalid glob `{pattern}`: {err}.")),
            };
            let project_root = ctx.sandbox.project_root().to_path_buf();
            let pattern = pattern.to_string();
            let stop = StopFlag::new();
            let _stop_on_drop = stop.guard();
            let work = tokio::task::spawn_blocking(move || {
                run_glob(
                    &root.path,
                    &root.display,
                    &matcher,
                    &project_root,
                    &pattern,
                    &stop,
                )
            });
            tokio::select! {
                joined = work => match joined {
                    Ok(Ok(text)) => ToolOutput::ok(text),
                    Ok(Err(message)) => ToolOutput::error(message),
                    Err(err) => ToolOutput::error(format!("glob failed: {err}")),
                },
                () = ctx.cancel.cancelled() => ToolOutput::error("glob was cancelled."),
            }
        })
    }
}

/// Joins the `path` argument and a literal pattern prefix as the model wrote
/// them (the sandbox resolves the result).
fn join_raw(base: &str, prefix: &str) -> String {
    if prefix.is_empty() {
        base.to_string()
    } else if prefix.starts_with('/') || base == "." {
        prefix.to_string()
    } else {
        format!("{}/{prefix}", base.trim_end_matches('/'))
    }
}

/// Splits a pattern into the leading directories without glob syntax and the
/// rest, so the walk starts as deep as possible: `src/**/*.rs` → (`src`,
/// `**/*.rs`); `*.rs` → (``, `*.rs`). The last component always stays in the
/// rest. A leading `./` is dropped.
pub(crate) fn split_literal_prefix(pattern: &str) -> (String, String) {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let is_glob = |part: &str| part.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let literal = parts
        .iter()
        .take(parts.len().saturating_sub(1))
        .take_while(|part| !is_glob(part))
        .count();
    let mut prefix = parts[..literal].join("/");
    if absolute {
        prefix.insert(0, '/');
    }
    (prefix, parts[literal..].join("/"))
}

/// One match: newest first, then by path.
type Ranked = (Reverse<SystemTime>, PathBuf);

struct Shared {
    best: BoundedBest<Ranked>,
    total: u64,
}

struct Builder<'a> {
    root: &'a Path,
    matcher: &'a GlobMatcher,
    shared: Arc<Mutex<Shared>>,
    stop: &'a StopFlag,
}

impl<'s> ParallelVisitorBuilder<'s> for Builder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            root: self.root,
            matcher: self.matcher,
            best: BoundedBest::new(MAX_RESULTS),
            total: 0,
            shared: Arc::clone(&self.shared),
            stop: self.stop,
        })
    }
}

struct Visitor<'a> {
    root: &'a Path,
    matcher: &'a GlobMatcher,
    best: BoundedBest<Ranked>,
    total: u64,
    shared: Arc<Mutex<Shared>>,
    stop: &'a StopFlag,
}

impl ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.stop.is_stopped() {
            return WalkState::Quit;
        }
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            return WalkState::Continue;
        }
        let Ok(rel) = entry.path().strip_prefix(self.root) else {
            return WalkState::Continue;
        };
        if !self.matcher.is_match(rel) {
            return WalkState::Continue;
        }
        self.total += 1;
        let mtime = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.best.push((Reverse(mtime), entry.into_path()));
        WalkState::Continue
    }
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.total += self.total;
        let best = std::mem::replace(&mut self.best, BoundedBest::new(0));
        shared.best.merge(best);
    }
}

fn run_glob(
    root: &Path,
    root_display: &str,
    matcher: &GlobMatcher,
    project_root: &Path,
    pattern: &str,
    stop: &StopFlag,
) -> Result<String, String> {
    match std::fs::metadata(root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "{root_display} is a file, not a directory; glob searches directories."
            ));
        }
        Err(err) => return Err(files::explain_io(root_display, &err)),
    }
    let shared = Arc::new(Mutex::new(Shared {
        best: BoundedBest::new(MAX_RESULTS),
        total: 0,
    }));
    let mut builder = Builder {
        root,
        matcher,
        shared: Arc::clone(&shared),
        stop,
    };
    walk_builder(root).build_parallel().visit(&mut builder);
    drop(builder);
    let shared = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(PoisonError::into_inner),
        Shared {
            best: BoundedBest::new(0),
            total: 0,
        },
    );
    let found = shared.best.into_sorted();
    if found.is_empty() {
        return Ok(format!("No files match `{pattern}` in `{root_display}`."));
    }
    let paths: Vec<String> = found
        .iter()
        .map(|(_, path)| display_path(project_root, path))
        .collect();
    Ok(render_paths(&paths, shared.total, MAX_GLOB_TEXT_BYTES))
}

/// Bytes of paths a result holds at most (the 50 KB result bound less room
/// for the note): 500 very long paths would not fit.
const MAX_GLOB_TEXT_BYTES: usize = MAX_OUTPUT_BYTES - NOTES_RESERVE_BYTES;

/// The result text: one path a line while they fit in `max_bytes`, then a
/// note when fewer than `total` are shown.
pub(crate) fn render_paths(paths: &[String], total: u64, max_bytes: usize) -> String {
    let mut text = String::new();
    let mut shown = 0usize;
    for path in paths {
        let extra = path.len() + usize::from(!text.is_empty());
        if text.len() + extra > max_bytes && shown > 0 {
            break;
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(path);
        shown += 1;
    }
    if total > shown as u64 {
        text.push_str(&format!(
            "\n(showing {shown} of {total}; narrow the pattern)"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(Glob::new().input_schema());
    }

    fn split(p: &str) -> (String, String) {
        split_literal_prefix(p)
    }

    #[test]
    fn literal_prefixes() {
        assert_eq!(split("src/**/*.rs"), ("src".into(), "**/*.rs".into()));
        assert_eq!(split("*.rs"), ("".into(), "*.rs".into()));
        assert_eq!(split("./a/b/c.txt"), ("a/b".into(), "c.txt".into()));
        assert_eq!(split("/abs/dir/*.rs"), ("/abs/dir".into(), "*.rs".into()));
        assert_eq!(split("a/{b,c}/d/*.rs"), ("a".into(), "{b,c}/d/*.rs".into()));
        assert_eq!(split("../x/*"), ("../x".into(), "*".into()));
    }

    #[test]
    fn paths_are_capped_by_count_and_bytes() {
        let paths: Vec<String> = (0..3).map(|i| format!("{i}{}", "x".repeat(9))).collect();
        assert_eq!(render_paths(&paths, 3, 1000), paths.join("\n"));
        assert_eq!(
            render_paths(&paths, 700, 1000),
            format!(
                "{}\n(showing 3 of 700; narrow the pattern)",
                paths.join("\n")
            )
        );
        // 10-byte paths: two fit in 21 bytes, the third would not.
        assert_eq!(
            render_paths(&paths, 3, 21),
            format!(
                "{}\n{}\n(showing 2 of 3; narrow the pattern)",
                paths[0], paths[1]
            )
        );
    }

    #[test]
    fn raw_joins() {
        assert_eq!(join_raw(".", "src"), "src");
        assert_eq!(join_raw("crates/", "src"), "crates/src");
        assert_eq!(join_raw("crates", ""), "crates");
        assert_eq!(join_raw("crates", "/abs"), "/abs");
    }
}
