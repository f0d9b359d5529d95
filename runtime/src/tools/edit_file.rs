//! `edit_file` (SPEC §4): exact string replacement. Not found → error (with a
//! hint when the text matches once whitespace is ignored); more than one match
//! without `replace_all` → error with the count; `old_string == new_string` →
//! error. The file is resolved and opened like `write_file` (refused outside the
//! allowed roots, no symlink followed).

use std::io::{self, Read};
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::{self, OpenMode};
use super::{
    Access, PermissionSubject, Tool, ToolCategory, ToolContext, ToolOutput, parse_args, plural,
};

/// Line numbers of matches listed in an ambiguity error.
const MAX_LISTED_MATCH_LINES: usize = 10;

/// The `edit_file` tool.
#[derive(Debug)]
pub struct EditFile {
    schema: Value,
}

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl EditFile {
    /// The tool with its schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the project root or absolute"},
                    "old_string": {"type": "string", "description": "Exact text to replace"},
                    "new_string": {"type": "string", "description": "Replacement text"},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for EditFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace exact text in a file. old_string must match exactly, whitespace included (copy \
         it from read_file output without the line-number prefix), and be unique unless \
         replace_all is true; otherwise nothing changes and the error says why. Include enough \
         surrounding lines to make it unique."
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
    files::ensure_regular(&file).map_err(|err| files::explain_io(display, &err))?;
    let mut content = Vec::new();
    file.read_to_end(&mut content)
        .map_err(|err| files::explain_io(display, &err))?;
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
    let lines = plan
        .lines
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let crlf = if plan.crlf {
        " (matched with the file's CRLF line endings)"
    } else {
        ""
    };
    Ok(format!(
        "Replaced {} in {display} (line {lines}){crlf}.",
        plural(plan.lines.len() as u64, "occurrence")
    ))
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
pub struct EditPlan {
    /// The file after the edit.
    pub content: Vec<u8>,
    /// 1-based line of each replaced occurrence, in the original file.
    pub lines: Vec<u64>,
    /// True when the strings were matched after converting `\n` to `\r\n`.
    pub crlf: bool,
}

/// Why an edit cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
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
        /// Lines where they start.
        lines: Vec<u64>,
    },
}

impl EditError {
    /// The model-facing message.
    pub fn message(&self, display: &str) -> String {
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
                let more = if lines.len() > MAX_LISTED_MATCH_LINES {
                    ", …"
                } else {
                    ""
                };
                format!(
                    "old_string occurs {count} times in {display} (lines {}{more}); add \
                     surrounding lines to make it unique, or set replace_all to true to replace \
                     every occurrence. Nothing was changed.",
                    shown.join(", ")
                )
            }
        }
    }
}

/// Decides an edit. Pure: exact byte matching, falling back to CRLF-converted
/// strings when the file uses CRLF and the strings have bare `\n`.
pub fn plan_edit(
    content: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<EditPlan, EditError> {
    let mut old_bytes = std::borrow::Cow::Borrowed(old.as_bytes());
    let mut new_bytes = std::borrow::Cow::Borrowed(new.as_bytes());
    let mut starts = find_all(content, &old_bytes);
    let mut crlf = false;
    if starts.is_empty()
        && old.contains('\n')
        && !old.contains('\r')
        && memchr::memmem::find(content, b"\r\n").is_some()
    {
        let old_crlf = old.replace('\n', "\r\n");
        let found = find_all(content, old_crlf.as_bytes());
        if !found.is_empty() {
            starts = found;
            crlf = true;
            old_bytes = std::borrow::Cow::Owned(old_crlf.into_bytes());
            new_bytes = std::borrow::Cow::Owned(
                new.replace("\r\n", "\n").replace('\n', "\r\n").into_bytes(),
            );
        }
    }
    if starts.is_empty() {
        return Err(EditError::NotFound {
            near_line: whitespace_insensitive_line(content, old),
        });
    }
    let lines = line_numbers(content, &starts);
    if starts.len() > 1 && !replace_all {
        return Err(EditError::Ambiguous {
            count: starts.len(),
            lines,
        });
    }
    let mut out = Vec::with_capacity(content.len() + starts.len() * new_bytes.len());
    let mut at = 0;
    for &start in &starts {
        out.extend_from_slice(&content[at..start]);
        out.extend_from_slice(&new_bytes);
        at = start + old_bytes.len();
    }
    out.extend_from_slice(&content[at..]);
    Ok(EditPlan {
        content: out,
        lines,
        crlf,
    })
}

/// Non-overlapping occurrences of `needle`, left to right.
fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let finder = memchr::memmem::Finder::new(needle);
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(pos) = finder.find(&haystack[at..]) {
        starts.push(at + pos);
        at += pos + needle.len().max(1);
        if at > haystack.len() {
            break;
        }
    }
    starts
}

/// 1-based line numbers of byte offsets (sorted ascending).
fn line_numbers(content: &[u8], starts: &[usize]) -> Vec<u64> {
    let mut lines = Vec::with_capacity(starts.len());
    let mut line = 1u64;
    let mut at = 0usize;
    for &start in starts {
        line += memchr::memchr_iter(b'\n', &content[at..start]).count() as u64;
        at = start;
        lines.push(line);
    }
    lines
}

/// The line where `old` starts in `content` when every run of whitespace is
/// collapsed to one space in both (and leading/trailing whitespace ignored).
fn whitespace_insensitive_line(content: &[u8], old: &str) -> Option<u64> {
    let text = String::from_utf8_lossy(content);
    let (needle, _) = collapse_whitespace(old);
    if needle.is_empty() {
        return None;
    }
    let (hay, line_of) = collapse_whitespace(&text);
    let pos = hay.find(&needle)?;
    line_of.get(pos).copied()
}

/// Collapses whitespace runs to single spaces and trims; returns the text and
/// the original 1-based line of each output byte.
fn collapse_whitespace(text: &str) -> (String, Vec<u64>) {
    let mut out = String::with_capacity(text.len());
    let mut line_of = Vec::with_capacity(text.len());
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
            out.push(' ');
            line_of.push(space_line);
        }
        out.push(c);
        line_of.extend(std::iter::repeat_n(line, c.len_utf8()));
    }
    (out, line_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_replacement() {
        let plan = plan_edit(b"a\nfoo bar\nb\n", "foo", "baz", false).unwrap();
        assert_eq!(plan.content, b"a\nbaz bar\nb\n");
        assert_eq!(plan.lines, vec![2]);
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
