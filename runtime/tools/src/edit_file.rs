//! `edit_file` (SPEC §4): exact string replacement. Not found → error (with a
//! hint when the text matches once whitespace is ignored); more than one match
//! without `replace_all` → error with the count; `old_string == new_string` →
//! error. The file is resolved and opened like `write_file` (refused outside the
//! allowed roots, no symlink followed).

use std::io::{self, Read};
use std::path::Path;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files::{self, OpenMode};
use super::{Access, PermissionSubject, ToolContext, ToolOutput, plural};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// Line numbers of matches listed in an ambiguity error or a result.
const MAX_LISTED_MATCH_LINES: usize = 10;

/// Files over this size (8 MiB) are not edited, and an edit whose result
/// would be larger is refused before the result is built: one call holds at
/// most the file and its result in memory.
pub(crate) const MAX_EDIT_BYTES: u64 = 8 * 1024 * 1024;

/// The `edit_file` tool.
#[derive(Debug)]
pub(crate) struct EditFile;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// Project-relative or absolute
    path: String,
    /// Exact text to replace
    old_string: String,
    /// The text to put instead
    new_string: String,
    /// Replace every occurrence
    #[serde(default)]
    replace_all: bool,
}

impl EditFile {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for EditFile {
    type Args = Args;
    const NAME: &'static str = "edit_file";
    const CLASS: ToolClass = ToolClass::WRITE;

    fn description(&self) -> &str {
        "Replace exact text in a file. old_string must match, whitespace included (copy it \
         from read_file output without number and tab), and be unique unless replace_all: \
         add surrounding lines to make it so. Otherwise nothing changes and the error says why."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        super::read_file::path_subject(args, Access::Write)
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if args.old_string.is_empty() {
                return ToolOutput::error(
                    "old_string is empty; to create a file or replace all of it use write_file.",
                );
            }
            if args.old_string == args.new_string {
                return ToolOutput::error(
                    "old_string and new_string are identical; nothing would change.",
                );
            }
            let target = match files::resolve_for_use(ctx, &args.path, Access::Write) {
                Ok(target) => target,
                Err(message) => return ToolOutput::error(message),
            };
            let work =
                tokio::task::spawn_blocking(move || edit(&target.path, &target.display, &args));
            match work.await {
                Ok(Ok(text)) => ToolOutput::ok(text),
                Ok(Err(message)) => ToolOutput::error(message),
                Err(err) => ToolOutput::error(format!("edit_file failed: {err}")),
            }
        })
    }
}

fn edit(path: &Path, display: &str, args: &Args) -> Result<String, String> {
    let mut file = files::open_beneath(path, OpenMode::Read, false).map_err(|err| {
        if err.kind() == io::ErrorKind::NotFound {
            format!("File not found: {display}. Use write_file to create it.")
        } else {
            files::explain_io(display, &err)
        }
    })?;
    let content = read_for_edit(&mut file, display)?;
    drop(file);
    if files::looks_binary(&content) {
        return Err(format!(
            "{display} is a binary file; edit_file edits text only."
        ));
    }
    let plan = plan_edit(
        &content,
        &args.old_string,
        &args.new_string,
        args.replace_all,
    )
    .map_err(|err| err.message(display))?;
    write_edited(path, display, &plan.content)?;
    let mut lines = plan
        .lines
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if plan.count > plan.lines.len() {
        lines.push_str(", …");
    }
    let crlf = if plan.crlf {
        " (matched with the file's CRLF line endings)"
    } else {
        ""
    };
    Ok(format!(
        "Replaced {} in {display} (line {lines}){crlf}.",
        plural(plan.count as u64, "occurrence")
    ))
}

/// Reads a file to edit, refusing one over [`MAX_EDIT_BYTES`] before reading
/// it (and one that grows past it while read).
fn read_for_edit(file: &mut std::fs::File, display: &str) -> Result<Vec<u8>, String> {
    let meta = files::ensure_regular(file).map_err(|err| files::explain_io(display, &err))?;
    let too_large = |size: u64| {
        format!(
            "{display} is {size} bytes; edit_file edits files of at most {MAX_EDIT_BYTES} bytes \
             (8 MiB). Nothing was changed; use bash (e.g. `sed -i`) for a file this large."
        )
    };
    if meta.len() > MAX_EDIT_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut content = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut content)
        .map_err(|err| files::explain_io(display, &err))?;
    if content.len() as u64 > MAX_EDIT_BYTES {
        return Err(too_large(content.len() as u64));
    }
    Ok(content)
}

/// Writes the edited content by replacement (a new file renamed over the
/// old one, keeping its mode), so other hard links to the file keep the old
/// content.
fn write_edited(path: &Path, display: &str, content: &[u8]) -> Result<(), String> {
    files::replace_file(path, content, false)
        .map(|_| ())
        .map_err(|err| files::explain_io(display, &err))
}

/// The new content and where the replacements start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EditPlan {
    /// The file after the edit.
    pub content: Vec<u8>,
    /// Occurrences replaced.
    pub count: usize,
    /// 1-based line of the first replaced occurrences (at most 10), in the
    /// original file.
    pub lines: Vec<u64>,
    /// True when the strings were matched after converting `\n` to `\r\n`.
    pub crlf: bool,
}

/// Why an edit cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EditError {
    /// `old_string` does not occur; `near_line` when it occurs once whitespace
    /// is ignored.
    NotFound {
        /// Line where a whitespace-insensitive match starts.
        near_line: Option<u64>,
    },
    /// `old_string` occurs more than once and `replace_all` is false.
    Ambiguous {
        /// Occurrences.
        count: usize,
        /// Lines where the first ones (at most 10) start.
        lines: Vec<u64>,
    },
    /// The edited file would be larger than `limit` bytes.
    TooLarge {
        /// Occurrences that would be replaced.
        count: usize,
        /// Bytes the result would have.
        result_bytes: u128,
        /// The limit ([`MAX_EDIT_BYTES`]).
        limit: u64,
    },
}

impl EditError {
    /// The model-facing message.
    pub(crate) fn message(&self, display: &str) -> String {
        match self {
            EditError::NotFound { near_line: None } => format!(
                "old_string was not found in {display}. Read the file again and copy the exact \
                 text; nothing was changed."
            ),
            EditError::NotFound {
                near_line: Some(line),
            } => format!(
                "old_string was not found in {display} exactly, but it matches near line {line} \
                 if whitespace is ignored: copy the exact indentation, spaces/tabs and line breaks \
                 from read_file; nothing was changed."
            ),
            EditError::Ambiguous { count, lines } => {
                let shown: Vec<String> = lines
                    .iter()
                    .take(MAX_LISTED_MATCH_LINES)
                    .map(u64::to_string)
                    .collect();
                let more = if *count > shown.len() { ", …" } else { "" };
                format!(
                    "old_string occurs {count} times in {display} (lines {}{more}); add \
                     surrounding lines to make it unique, or set replace_all to true to replace \
                     every occurrence. Nothing was changed.",
                    shown.join(", ")
                )
            }
            EditError::TooLarge {
                count,
                result_bytes,
                limit,
            } => format!(
                "Refused: replacing {} in {display} would make the file {result_bytes} bytes; \
                 edit_file writes files of at most {limit} bytes. Nothing was changed.",
                plural(*count as u64, "occurrence")
            ),
        }
    }
}

/// Decides an edit. Pure: exact byte matching, falling back to CRLF-converted
/// strings when the file uses CRLF and the strings have bare `\n`.
pub(crate) fn plan_edit(
    content: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<EditPlan, EditError> {
    plan_edit_within(content, old, new, replace_all, MAX_EDIT_BYTES)
}

/// [`plan_edit`] with a result limit of `limit` bytes.
pub(crate) fn plan_edit_within(
    content: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
    limit: u64,
) -> Result<EditPlan, EditError> {
    let mut old_bytes = std::borrow::Cow::Borrowed(old.as_bytes());
    let mut new_bytes = std::borrow::Cow::Borrowed(new.as_bytes());
    let mut starts = memchr::memmem::find(content, &old_bytes);
    let mut crlf = false;
    if starts.is_none()
        && old.contains('\n')
        && !old.contains('\r')
        && memchr::memmem::find(content, b"\r\n").is_some()
    {
        let old_crlf = old.replace('\n', "\r\n");
        let found = memchr::memmem::find(content, old_crlf.as_bytes());
        if found.is_some() {
            starts = found;
            crlf = true;
            old_bytes = std::borrow::Cow::Owned(old_crlf.into_bytes());
            new_bytes = std::borrow::Cow::Owned(
                new.replace("\r\n", "\n").replace('\n', "\r\n").into_bytes(),
            );
        }
    }
    if starts.is_none() {
        return Err(EditError::NotFound {
            near_line: whitespace_insensitive_line(content, old),
        });
    }
    // Counting first and checking the result's size before building it:
    // nothing here grows with the number of occurrences.
    let finder = memchr::memmem::Finder::new(&old_bytes);
    let count = finder.find_iter(content).count();
    let lines = line_numbers(
        content,
        finder.find_iter(content).take(MAX_LISTED_MATCH_LINES),
    );
    if count > 1 && !replace_all {
        return Err(EditError::Ambiguous { count, lines });
    }
    let result_bytes = content.len() as u128 - count as u128 * old_bytes.len() as u128
        + count as u128 * new_bytes.len() as u128;
    if result_bytes > u128::from(limit) {
        return Err(EditError::TooLarge {
            count,
            result_bytes,
            limit,
        });
    }
    // Within the limit, which fits in memory (and in a usize).
    let mut out = Vec::with_capacity(result_bytes as usize);
    let mut at = 0;
    for start in finder.find_iter(content) {
        out.extend_from_slice(&content[at..start]);
        out.extend_from_slice(&new_bytes);
        at = start + old_bytes.len();
    }
    out.extend_from_slice(&content[at..]);
    Ok(EditPlan {
        content: out,
        count,
        lines,
        crlf,
    })
}

/// 1-based line numbers of byte offsets (ascending).
fn line_numbers(content: &[u8], starts: impl Iterator<Item = usize>) -> Vec<u64> {
    let mut lines = Vec::new();
    let mut line = 1u64;
    let mut at = 0usize;
    for start in starts {
        line += memchr::memchr_iter(b'\n', &content[at..start]).count() as u64;
        at = start;
        lines.push(line);
    }
    lines
}

/// The line where `old` starts in `content` when every run of whitespace is
/// collapsed to one space in both (and leading/trailing whitespace ignored).
/// Holds the collapsed text only (no table per byte): the line is found by
/// walking the text again up to the match.
fn whitespace_insensitive_line(content: &[u8], old: &str) -> Option<u64> {
    let text = String::from_utf8_lossy(content);
    let needle = collapse_whitespace(old, |_, _| {});
    if needle.is_empty() {
        return None;
    }
    let hay = collapse_whitespace(&text, |_, _| {});
    let pos = hay.find(&needle)?;
    drop(hay);
    let mut found = None;
    collapse_whitespace(&text, |at, line| {
        if at == pos && found.is_none() {
            found = Some(line);
        }
    });
    found
}

/// Collapses whitespace runs to single spaces and trims. `seen(at, line)` is
/// told, for each byte pushed, its offset in the output and the original
/// 1-based line it comes from.
fn collapse_whitespace(text: &str, mut seen: impl FnMut(usize, u64)) -> String {
    let mut out = String::with_capacity(text.len());
    let mut line = 1u64;
    let mut pending_space: Option<u64> = None;
    for c in text.chars() {
        if c.is_whitespace() {
            if !out.is_empty() && pending_space.is_none() {
                pending_space = Some(line);
            }
            if c == '\n' {
                line += 1;
            }
            continue;
        }
        if let Some(space_line) = pending_space.take() {
            seen(out.len(), space_line);
            out.push(' ');
        }
        seen(out.len(), line);
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(EditFile::new().input_schema());
    }

    #[test]
    fn unique_replacement() {
        let plan = plan_edit(b"a\nfoo bar\nb\n", "foo", "baz", false).unwrap();
        assert_eq!(plan.content, b"a\nbaz bar\nb\n");
        assert_eq!(plan.lines, vec![2]);
    }

    #[test]
    fn an_oversized_result_is_refused_before_it_is_built() {
        // The case: every `e` of a 2 MB file replaced by 5,000
        // characters would be about 2.5 GB.
        let content = "e".repeat(2 * 1024 * 1024);
        let err = plan_edit(content.as_bytes(), "e", &"x".repeat(5_000), true).unwrap_err();
        let EditError::TooLarge {
            count,
            result_bytes,
            limit,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*count, 2 * 1024 * 1024);
        assert_eq!(*result_bytes, 2 * 1024 * 1024 * 5_000);
        assert_eq!(*limit, MAX_EDIT_BYTES);
        let msg = err.message("big.txt");
        assert!(
            msg.contains("would make the file 10485760000 bytes")
                && msg.contains("Nothing was changed"),
            "{msg}"
        );
        // At the limit exactly it is made.
        let plan = plan_edit_within(b"aXbXc", "X", "--", true, 7).unwrap();
        assert_eq!(plan.content, b"a--b--c");
        assert!(plan_edit_within(b"aXbXc", "X", "--", true, 6).is_err());
    }

    #[test]
    fn many_occurrences_list_only_the_first_lines() {
        let content = "x\n".repeat(50);
        let plan = plan_edit(content.as_bytes(), "x", "y", true).unwrap();
        assert_eq!(plan.count, 50);
        assert_eq!(plan.lines, (1..=10).collect::<Vec<u64>>());
        let err = plan_edit(content.as_bytes(), "x", "y", false).unwrap_err();
        let msg = err.message("f");
        assert!(
            msg.contains("occurs 50 times in f (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)"),
            "{msg}"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_EDIT_BYTES + 1).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let err = read_for_edit(&mut file, "big").unwrap_err();
        assert!(
            err.contains("edits files of at most 8388608 bytes"),
            "{err}"
        );
    }

    #[test]
    fn ambiguous_without_replace_all() {
        let err = plan_edit(b"x\nx\ny\nx\n", "x", "z", false).unwrap_err();
        assert_eq!(
            err,
            EditError::Ambiguous {
                count: 3,
                lines: vec![1, 2, 4]
            }
        );
        let msg = err.message("f.rs");
        assert!(
            msg.contains("occurs 3 times in f.rs (lines 1, 2, 4)"),
            "{msg}"
        );
        assert!(msg.contains("replace_all"), "{msg}");
    }

    #[test]
    fn replace_all_replaces_every_occurrence() {
        let plan = plan_edit(b"aXbXc", "X", "--", true).unwrap();
        assert_eq!(plan.content, b"a--b--c");
        assert_eq!(plan.lines.len(), 2);
        // Non-overlapping.
        let plan = plan_edit(b"aaaa", "aa", "b", true).unwrap();
        assert_eq!(plan.content, b"bb");
    }

    #[test]
    fn not_found_with_whitespace_hint() {
        let file = b"fn main() {\n    let x = 1;\n}\n";
        let err = plan_edit(file, "let  x =\t1;", "y", false).unwrap_err();
        assert_eq!(err, EditError::NotFound { near_line: Some(2) });
        assert!(err.message("m.rs").contains("near line 2"));
        let err = plan_edit(file, "nothing like it", "y", false).unwrap_err();
        assert_eq!(err, EditError::NotFound { near_line: None });
    }

    #[test]
    fn crlf_files_match_lf_strings() {
        let plan = plan_edit(b"a\r\nb\r\nc\r\n", "a\nb", "x\ny", false).unwrap();
        assert!(plan.crlf);
        assert_eq!(plan.content, b"x\r\ny\r\nc\r\n");
    }

    #[test]
    fn multibyte_text_and_non_utf8_bytes_survive() {
        let plan = plan_edit("héllo wörld".as_bytes(), "wörld", "welt", false).unwrap();
        assert_eq!(plan.content, "héllo welt".as_bytes());
        let plan = plan_edit(b"\xff\xfe key=1 \xff", "key=1", "key=2", false).unwrap();
        assert_eq!(plan.content, b"\xff\xfe key=2 \xff");
    }
}
