//! `read_file` (SPEC §4): numbered lines (`%6d\t`), paged by `offset`/`limit`,
//! at most 2,000 lines and 50 KB per call, binary files refused, non-UTF-8 text
//! decoded lossily and said so. Reads only; it resolves its path at the moment
//! of use and refuses paths outside the allowed roots unless a person approved
//! the call or an allow rule names the path.

use std::io::{self, BufRead, BufReader, Read};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::{self, OpenMode};
use super::output::{MAX_OUTPUT_BYTES, MAX_OUTPUT_LINES};
use super::{
    Access, PermissionSubject, Tool, ToolCategory, ToolContext, ToolOutput, parse_args, plural,
};

/// SPEC §4: lines returned by default and at most per call.
pub const MAX_READ_LINES: usize = MAX_OUTPUT_LINES;

/// SPEC §4: bytes of numbered output returned at most per call (50 KB).
pub const MAX_READ_BYTES: usize = MAX_OUTPUT_BYTES;

/// Buffer size of the line reader.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The `read_file` tool.
#[derive(Debug)]
pub struct ReadFile {
    schema: Value,
}

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

impl ReadFile {
    /// The tool with its schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the project root or absolute"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based (default 1)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Lines to return (default and max 2000)"}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for ReadFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file as numbered lines (number, tab, text). Returns at most 2000 lines and \
         50 KB from `offset`, the total line count, and the offset to continue from. Refuses \
         binary files and directories (use glob). Also reads the full-output files named in \
         truncated results."
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn read_only(&self) -> bool {
        true
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    fn permission_subject(&self, args: &Value) -> PermissionSubject {
        path_subject(args, Access::Read)
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args: Args = match parse_args(self.name(), args) {
                Ok(args) => args,
                Err(out) => return out,
            };
            let target = match files::resolve_for_use(ctx, &args.path, Access::Read) {
                Ok(target) => target,
                Err(message) => return ToolOutput::error(message),
            };
            let request = ReadRequest {
                offset: args.offset.unwrap_or(1).max(1),
                limit: args.limit,
            };
            let display = target.display.clone();
            let work =
                tokio::task::spawn_blocking(move || read_numbered(&target.path, &display, request));
            match work.await {
                Ok(Ok(text)) => ToolOutput::ok(text),
                Ok(Err(message)) => ToolOutput::error(message),
                Err(err) => ToolOutput::error(format!("read_file failed: {err}")),
            }
        })
    }
}

/// The permission subject of a tool whose `path` argument is optional (`.`).
pub(crate) fn path_subject(args: &Value, access: Access) -> PermissionSubject {
    let path = args
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or(".")
        .to_string();
    PermissionSubject::Path { path, access }
}

/// Which lines to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// First line, 1-based.
    pub offset: u64,
    /// Lines requested (clamped to [`MAX_READ_LINES`]).
    pub limit: Option<u64>,
}

/// Reads `path` (already resolved and checked) and renders the requested page.
fn read_numbered(
    path: &std::path::Path,
    display: &str,
    request: ReadRequest,
) -> Result<String, String> {
    let file = files::open_beneath(path, OpenMode::Read, false)
        .map_err(|err| files::explain_io(display, &err))?;
    files::ensure_regular(&file).map_err(|err| files::explain_io(display, &err))?;
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
    let mut head = Vec::with_capacity(files::BINARY_SNIFF_BYTES);
    (&mut reader)
        .take(files::BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|err| files::explain_io(display, &err))?;
    if files::looks_binary(&head) {
        return Err(format!(
            "{display} is a binary file (it contains NUL bytes); read_file shows text only. \
             Use bash (e.g. `xxd` or `file`) to inspect it."
        ));
    }
    let source = io::Cursor::new(head).chain(reader);
    render_page(BufReader::with_capacity(READ_BUFFER_BYTES, source), request).map_err(|err| {
        match err {
            PageError::Io(err) => files::explain_io(display, &err),
            past_end @ PageError::OffsetPastEnd { .. } => format!("{display}: {past_end}."),
        }
    })
}

/// Why a page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The offset lies past the last line.
    #[error("offset {offset} is past the end of the file ({})", plural(*total, "line"))]
    OffsetPastEnd {
        /// The requested offset.
        offset: u64,
        /// Lines in the file.
        total: u64,
    },
}

/// Renders one page of numbered lines from `reader` with the footer that says
/// where the page lies in the file. Pure apart from reading.
pub fn render_page<R: BufRead>(mut reader: R, request: ReadRequest) -> Result<String, PageError> {
    let limit = request
        .limit
        .unwrap_or(MAX_READ_LINES as u64)
        .min(MAX_READ_LINES as u64);
    let limit_clamped = request.limit.is_some_and(|l| l > MAX_READ_LINES as u64);
    let mut out = String::new();
    let mut line = Vec::new();
    let mut line_no: u64 = 0;
    let mut returned: u64 = 0;
    let mut next_offset: Option<u64> = None;
    let mut lossy = false;
    let mut crlf = false;
    let mut cut_line: Option<u64> = None;
    loop {
        if next_offset.is_some() {
            // The page is full: only count the remaining lines.
            let remaining = count_remaining(&mut reader)?;
            line_no += remaining;
            break;
        }
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        line_no += 1;
        if line_no < request.offset {
            continue;
        }
        if returned == limit {
            next_offset = Some(line_no);
            continue;
        }
        let mut content: &[u8] = &line;
        if let Some(stripped) = content.strip_suffix(b"\n") {
            content = stripped;
            if let Some(stripped) = content.strip_suffix(b"\r") {
                content = stripped;
                crlf = true;
            }
        }
        let text = match std::str::from_utf8(content) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => {
                lossy = true;
                String::from_utf8_lossy(content)
            }
        };
        let prefix = format!("{line_no:>6}\t");
        let room = MAX_READ_BYTES.saturating_sub(out.len());
        if prefix.len() + text.len() + 1 > room {
            if returned > 0 {
                next_offset = Some(line_no);
                continue;
            }
            // A single line longer than the budget: show its start.
            let mut end = room.saturating_sub(prefix.len() + 1);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&prefix);
            out.push_str(&text[..end]);
            out.push('\n');
            cut_line = Some(line_no);
            returned = 1;
            continue;
        }
        out.push_str(&prefix);
        out.push_str(&text);
        out.push('\n');
        returned += 1;
    }
    let total = line_no;
    if total == 0 {
        return Ok("(the file is empty)".to_string());
    }
    if request.offset > total {
        return Err(PageError::OffsetPastEnd {
            offset: request.offset,
            total,
        });
    }
    let first = request.offset;
    let last = first + returned - 1;
    match next_offset {
        Some(next) => out.push_str(&format!(
            "(lines {first}-{last} of {total}; {} more: call read_file with offset={next})",
            total - last
        )),
        None if first == 1 => out.push_str(&format!("(end of file; {})", plural(total, "line"))),
        None => out.push_str(&format!("(lines {first}-{last} of {total}; end of file)")),
    }
    if let Some(n) = cut_line {
        out.push_str(&format!(
            "\n(line {n} is longer than 50 KB; only its start is shown: use grep or bash to see the rest)"
        ));
    }
    if limit_clamped {
        out.push_str(&format!(
            "\n(limit is at most {MAX_READ_LINES} lines per call)"
        ));
    }
    if lossy {
        out.push_str("\n(the file is not valid UTF-8; invalid bytes are shown as \u{FFFD})");
    }
    if crlf {
        out.push_str("\n(the file has CRLF line endings; they are not shown)");
    }
    Ok(out)
}

/// Counts the lines left in `reader` without keeping them.
fn count_remaining<R: BufRead>(reader: &mut R) -> io::Result<u64> {
    let mut lines = 0u64;
    let mut last: Option<u8> = None;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        lines += memchr::memchr_iter(b'\n', buf).count() as u64;
        last = buf.last().copied();
        let n = buf.len();
        reader.consume(n);
    }
    if matches!(last, Some(b) if b != b'\n') {
        lines += 1;
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &[u8], offset: u64, limit: Option<u64>) -> Result<String, String> {
        render_page(
            io::Cursor::new(text.to_vec()),
            ReadRequest { offset, limit },
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_lines_and_reports_end() {
        let out = page(b"a\nb\n", 1, None).unwrap();
        assert_eq!(out, "     1\ta\n     2\tb\n(end of file; 2 lines)");
        let out = page(b"a\nb", 2, None).unwrap();
        assert_eq!(out, "     2\tb\n(lines 2-2 of 2; end of file)");
    }

    #[test]
    fn pages_by_limit_and_says_where_to_continue() {
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        let out = page(text.as_bytes(), 3, Some(4)).unwrap();
        assert!(out.starts_with("     3\tl3\n"), "{out}");
        assert!(
            out.ends_with("(lines 3-6 of 10; 4 more: call read_file with offset=7)"),
            "{out}"
        );
    }

    #[test]
    fn default_page_is_2000_lines() {
        let text: String = (1..=2500).map(|i| format!("{i}\n")).collect();
        let out = page(text.as_bytes(), 1, Some(5000)).unwrap();
        assert!(out.contains("  2000\t2000\n"));
        assert!(!out.contains("\t2001\n"));
        assert!(out.contains("(lines 1-2000 of 2500; 500 more: call read_file with offset=2001)"));
        assert!(out.contains("limit is at most 2000"));
    }

    #[test]
    fn byte_budget_stops_early() {
        let line = "x".repeat(1000);
        let text: String = (0..100).map(|_| format!("{line}\n")).collect();
        let out = page(text.as_bytes(), 1, None).unwrap();
        assert!(out.len() <= MAX_READ_BYTES + 200);
        // 1008 bytes per numbered line: 50 fit in 51,200 bytes.
        assert!(
            out.contains("(lines 1-50 of 100; 50 more: call read_file with offset=51)"),
            "{out}"
        );
    }

    #[test]
    fn huge_single_line_shows_its_start() {
        let text = "é".repeat(40_000); // 80,000 bytes, one line
        let out = page(text.as_bytes(), 1, None).unwrap();
        assert!(out.contains("line 1 is longer than 50 KB"));
        assert!(out.len() <= MAX_READ_BYTES + 300);
        assert!(out.contains("(end of file; 1 line)"));
    }

    #[test]
    fn empty_file_and_offset_past_end() {
        assert_eq!(page(b"", 1, None).unwrap(), "(the file is empty)");
        let err = page(b"a\n", 5, None).unwrap_err();
        assert!(
            err.contains("offset 5 is past the end of the file (1 line)"),
            "{err}"
        );
    }

    #[test]
    fn lossy_and_crlf_are_reported() {
        let out = page(b"ok\r\nbad \xff\xfe\r\n", 1, None).unwrap();
        assert!(out.contains("     1\tok\n"));
        assert!(out.contains("     2\tbad \u{FFFD}\u{FFFD}\n"));
        assert!(out.contains("not valid UTF-8"));
        assert!(out.contains("CRLF"));
    }
}
