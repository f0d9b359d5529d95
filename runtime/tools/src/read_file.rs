//! `read_file`: numbered lines (`N\t`, the number unpadded), paged by `offset`/`limit`,
//! at most 2,000 lines and 50 KB per call, binary files refused, non-UTF-8 text
//! decoded lossily and said so. Memory is bounded whatever the file: a line
//! keeps at most [`MAX_LINE_BYTES`] (longer ones are cut with a marker naming
//! the `byte_offset` to continue from) and one call reads at most
//! [`MAX_SCAN_BYTES`]. Reads only; it resolves its path at the moment
//! of use and refuses paths outside the allowed roots unless a person approved
//! the call or an allow rule names the path.

use std::io::{self, BufRead, BufReader, Read};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files::{self, OpenMode};
use super::output::{MAX_OUTPUT_BYTES, MAX_OUTPUT_LINES};
use super::{Access, PermissionSubject, ToolContext, ToolOutput, plural};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// SPEC §4: lines returned by default and at most per call.
pub(crate) const MAX_READ_LINES: usize = MAX_OUTPUT_LINES;

/// SPEC §4: bytes of numbered output returned at most per call (50 KB).
pub(crate) const MAX_READ_BYTES: usize = MAX_OUTPUT_BYTES;

/// Buffer size of the line reader.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Bytes of one line shown at most; a longer line is cut with a marker that
/// gives the byte to continue from (`byte_offset`). Bounds memory on files
/// with huge lines (minified code, sparse or generated files).
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024;

/// Bytes one call reads at most (1 GiB): skipping to `offset`, reading the page
/// and counting the lines after it. Past it the result says how far it got.
pub(crate) const MAX_SCAN_BYTES: u64 = 1024 * 1024 * 1024;

/// The `read_file` tool.
#[derive(Debug)]
pub(crate) struct ReadFile;

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// Project-relative or absolute
    path: String,
    /// First line, 1-based (default 1)
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Default and max 2000
    #[schemars(range(min = 1))]
    limit: Option<u64>,
    /// Byte of line `offset` to start at (goes on with a cut line)
    byte_offset: Option<u64>,
}

impl ReadFile {
    /// The tool, with the schema of its arguments.
    pub(crate) fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for ReadFile {
    type Args = Args;
    const NAME: &'static str = "read_file";
    const CLASS: ToolClass = ToolClass::READ;

    fn description(&self) -> &str {
        "Read a text file as numbered lines (number, tab, text), at most 2000 lines and 50 KB \
         from `offset`; a last line says where to go on if there is more. A line over 16 KB \
         is cut where a marker gives the byte_offset to go on. Not for binary files or \
         directories."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        path_subject(args, Access::Read)
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let target = match files::resolve_for_use(ctx, &args.path, Access::Read) {
                Ok(target) => target,
                Err(message) => return ToolOutput::error(message),
            };
            let request = ReadRequest {
                offset: args.offset.unwrap_or(1).max(1),
                limit: args.limit,
                byte_offset: args.byte_offset.unwrap_or(0),
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
pub(crate) struct ReadRequest {
    /// First line, 1-based.
    pub offset: u64,
    /// Lines requested (clamped to [`MAX_READ_LINES`]).
    pub limit: Option<u64>,
    /// Byte within line `offset` to start from (continuing a cut line).
    pub byte_offset: u64,
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
    render_page(
        BufReader::with_capacity(READ_BUFFER_BYTES, source),
        request,
        MAX_SCAN_BYTES,
    )
    .map_err(|err| match err {
        PageError::Io(err) => files::explain_io(display, &err),
        other => format!("{display}: {other}."),
    })
}

/// Why a page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PageError {
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
    /// `byte_offset` lies past the end of its line.
    #[error(
        "byte_offset {byte_offset} is past the end of line {line} ({}); lines are cut at \
         {MAX_LINE_BYTES} bytes and the marker says where to continue",
        plural(*length, "byte")
    )]
    ByteOffsetPastLine {
        /// The line.
        line: u64,
        /// The requested byte offset.
        byte_offset: u64,
        /// Bytes in the line.
        length: u64,
    },
    /// The requested place lies beyond what one call reads.
    #[error(
        "the requested place lies beyond the first {} read_file scans per call ({} seen); \
         use grep to find what you need, or bash (`sed -n`, `tail -c`, `head -c`) on a file \
         this large",
        human_bytes(*scanned),
        plural(*lines_seen, "line")
    )]
    BeyondScan {
        /// Bytes scanned.
        scanned: u64,
        /// Lines seen before the scan stopped.
        lines_seen: u64,
    },
}

/// `1 GiB`, `16 KiB`, `300 bytes`: a size for messages.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = KIB * 1024;
    const GIB: u64 = MIB * 1024;
    match bytes {
        b if b >= GIB && b % GIB == 0 => format!("{} GiB", b / GIB),
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => plural(b, "byte"),
    }
}

/// What [`read_line_part`] saw of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LinePart {
    /// Bytes of the line seen, its terminator excluded (all of them when
    /// `complete`).
    len: u64,
    /// The line was read to its end (a newline or the end of the file).
    complete: bool,
    /// It ended with a newline.
    newline: bool,
}

/// Reads one line from `reader` in bounded memory: `keep` receives at most
/// `keep_max` bytes of it, starting at byte `skip`; the rest is only counted.
/// Stops mid-line when `budget` (bytes left to scan, decremented) runs out.
/// `None` at the end of the input.
fn read_line_part<R: BufRead>(
    reader: &mut R,
    keep: &mut Vec<u8>,
    skip: u64,
    keep_max: usize,
    budget: &mut u64,
) -> io::Result<Option<LinePart>> {
    keep.clear();
    let mut len: u64 = 0;
    let mut any = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(LinePart {
                len,
                complete: true,
                newline: false,
            }));
        }
        if *budget == 0 {
            // More input follows, unread: the line (maybe not begun) goes on.
            return Ok(Some(LinePart {
                len,
                complete: false,
                newline: false,
            }));
        }
        any = true;
        let allowed = usize::try_from(*budget)
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        let chunk = &chunk[..allowed];
        let (body, newline) = match memchr::memchr(b'\n', chunk) {
            Some(at) => (&chunk[..at], true),
            None => (chunk, false),
        };
        let start = len;
        let end = len + body.len() as u64;
        let from = skip.max(start);
        let to = skip.saturating_add(keep_max as u64).min(end);
        if from < to {
            // Both lie within `body`, whose length is a usize.
            keep.extend_from_slice(&body[(from - start) as usize..(to - start) as usize]);
        }
        len = end;
        let used = body.len() + usize::from(newline);
        reader.consume(used);
        *budget -= used as u64;
        if newline {
            return Ok(Some(LinePart {
                len,
                complete: true,
                newline: true,
            }));
        }
    }
}

/// The longest prefix of `bytes` that does not end inside a UTF-8 sequence
/// (invalid bytes elsewhere are kept: they are shown as U+FFFD).
fn cut_at_char_boundary(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Err(err) if err.error_len().is_none() => &bytes[..err.valid_up_to()],
        _ => bytes,
    }
}

/// Renders one page of numbered lines from `reader` with the footer that says
/// where the page lies in the file. Memory stays bounded whatever the input:
/// each line keeps at most [`MAX_LINE_BYTES`] (a longer one is cut with a
/// marker giving the byte to continue from) and at most `scan_limit` bytes are
/// read in all. Pure apart from reading.
pub(crate) fn render_page<R: BufRead>(
    mut reader: R,
    request: ReadRequest,
    scan_limit: u64,
) -> Result<String, PageError> {
    let limit = request
        .limit
        .unwrap_or(MAX_READ_LINES as u64)
        .min(MAX_READ_LINES as u64);
    let limit_clamped = request.limit.is_some_and(|l| l > MAX_READ_LINES as u64);
    let mut budget = scan_limit;
    let mut out = String::new();
    let mut line = Vec::new();
    let mut line_no: u64 = 0;
    let mut returned: u64 = 0;
    let mut next_offset: Option<u64> = None;
    let mut lossy = false;
    let mut crlf = false;
    let mut cut_lines: u64 = 0;
    // The scan stopped before the end of the file (within line `n`).
    let mut scan_stopped: Option<u64> = None;
    loop {
        if next_offset.is_some() {
            // The page is full: only count the remaining lines.
            let (remaining, complete) = count_remaining(&mut reader, &mut budget)?;
            line_no += remaining;
            if !complete {
                scan_stopped = Some(line_no);
            }
            break;
        }
        let first = line_no + 1 == request.offset;
        let skip = if first { request.byte_offset } else { 0 };
        let wanted = line_no + 1 >= request.offset;
        let keep_max = if wanted { MAX_LINE_BYTES } else { 0 };
        let Some(part) = read_line_part(&mut reader, &mut line, skip, keep_max, &mut budget)?
        else {
            break;
        };
        line_no += 1;
        if !part.complete {
            scan_stopped = Some(line_no);
        }
        if !wanted {
            if !part.complete {
                return Err(PageError::BeyondScan {
                    scanned: scan_limit,
                    lines_seen: line_no - 1,
                });
            }
            continue;
        }
        if returned == limit {
            next_offset = Some(line_no);
            if !part.complete {
                break;
            }
            continue;
        }
        let mut length = part.len;
        let mut content: &[u8] = &line;
        if part.newline && skip + content.len() as u64 == length && content.ends_with(b"\r") {
            content = &content[..content.len() - 1];
            length -= 1;
            crlf = true;
        }
        if first && skip > 0 && skip >= length && part.complete {
            return Err(PageError::ByteOffsetPastLine {
                line: line_no,
                byte_offset: skip,
                length,
            });
        }
        let shown_end = skip + content.len() as u64;
        let cut = shown_end < length || !part.complete;
        if cut {
            content = cut_at_char_boundary(content);
        }
        let text = match std::str::from_utf8(content) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => {
                lossy = true;
                String::from_utf8_lossy(content)
            }
        };
        let mut rendered = format!("{line_no}\t");
        if first && skip > 0 {
            rendered.push_str(&format!("[…from byte {skip}] "));
        }
        rendered.push_str(&text);
        if cut {
            let continue_at = skip + content.len() as u64;
            let of = if part.complete {
                format!("of {length}")
            } else {
                format!("of more than {length}")
            };
            rendered.push_str(&format!(
                " […line {line_no} cut at byte {continue_at} {of}: continue it with \
                 offset={line_no} byte_offset={continue_at}]"
            ));
            cut_lines += 1;
        }
        rendered.push('\n');
        let room = MAX_READ_BYTES.saturating_sub(out.len());
        if rendered.len() > room && returned > 0 {
            next_offset = Some(line_no);
            if !part.complete {
                break;
            }
            continue;
        }
        out.push_str(&rendered);
        returned += 1;
        if !part.complete {
            break;
        }
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
    let last = first + returned.max(1) - 1;
    let of_total = match scan_stopped {
        Some(_) => format!("at least {total}"),
        None => total.to_string(),
    };
    match (next_offset, scan_stopped) {
        (Some(next), None) => out.push_str(&format!(
            "(lines {first}-{last} of {total}; {} more: call read_file with offset={next})",
            total - last
        )),
        (Some(next), Some(_)) => out.push_str(&format!(
            "(lines {first}-{last} of {of_total}; more: call read_file with offset={next})"
        )),
        (None, Some(_)) => out.push_str(&format!(
            "(lines {first}-{last} of {of_total}; read_file stopped reading after {} in this \
             call)",
            human_bytes(scan_limit)
        )),
        // The whole file: nothing to say that the numbers do not (a footer
        // would be carried by every later request).
        (None, None) if first == 1 => {
            if out.ends_with('\n') {
                out.pop();
            }
        }
        (None, None) => out.push_str(&format!("(lines {first}-{last} of {total}; end of file)")),
    }
    if cut_lines > 0 {
        out.push_str(&format!(
            "\n({} longer than {MAX_LINE_BYTES} bytes cut; each cut says where to continue)",
            plural(cut_lines, "line")
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

/// Counts the lines left in `reader` without keeping them, reading at most
/// `budget` bytes (decremented). Returns the count and whether the end of the
/// input was reached.
fn count_remaining<R: BufRead>(reader: &mut R, budget: &mut u64) -> io::Result<(u64, bool)> {
    let mut lines = 0u64;
    let mut last: Option<u8> = None;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        if *budget == 0 {
            return Ok((lines, false));
        }
        let take = usize::try_from(*budget)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        lines += memchr::memchr_iter(b'\n', &buf[..take]).count() as u64;
        last = buf[..take].last().copied();
        reader.consume(take);
        *budget -= take as u64;
    }
    if matches!(last, Some(b) if b != b'\n') {
        lines += 1;
    }
    Ok((lines, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(ReadFile::new().input_schema());
    }

    fn page(text: &[u8], offset: u64, limit: Option<u64>) -> Result<String, String> {
        page_at(text, offset, 0, limit, MAX_SCAN_BYTES)
    }

    fn page_at(
        text: &[u8],
        offset: u64,
        byte_offset: u64,
        limit: Option<u64>,
        scan: u64,
    ) -> Result<String, String> {
        render_page(
            io::Cursor::new(text.to_vec()),
            ReadRequest {
                offset,
                limit,
                byte_offset,
            },
            scan,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_lines_and_reports_end() {
        let out = page(b"a\nb\n", 1, None).unwrap();
        assert_eq!(out, "1\ta\n2\tb", "the whole file needs no footer");
        let out = page(b"a\nb", 2, None).unwrap();
        assert_eq!(out, "2\tb\n(lines 2-2 of 2; end of file)");
    }

    #[test]
    fn pages_by_limit_and_says_where_to_continue() {
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        let out = page(text.as_bytes(), 3, Some(4)).unwrap();
        assert!(out.starts_with("3\tl3\n"), "{out}");
        assert!(
            out.ends_with("(lines 3-6 of 10; 4 more: call read_file with offset=7)"),
            "{out}"
        );
    }

    #[test]
    fn default_page_is_2000_lines() {
        let text: String = (1..=2500).map(|i| format!("{i}\n")).collect();
        let out = page(text.as_bytes(), 1, Some(5000)).unwrap();
        assert!(out.contains("2000\t2000\n"));
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
        // 1003 bytes per numbered line up to line 9, 1004 after: 51 fit in
        // 51,200 bytes.
        assert!(
            out.contains("(lines 1-51 of 100; 49 more: call read_file with offset=52)"),
            "{out}"
        );
    }

    #[test]
    fn a_long_line_is_cut_with_the_byte_to_continue_from() {
        let text = format!("{}\nnext\n", "é".repeat(40_000)); // 80,000 bytes, then a line
        let out = page(text.as_bytes(), 1, None).unwrap();
        // Cut on a char boundary at or below the cap.
        let cut_at = MAX_LINE_BYTES as u64;
        assert!(
            out.contains(&format!(
                " […line 1 cut at byte {cut_at} of 80000: continue it with offset=1 \
                 byte_offset={cut_at}]\n"
            )),
            "{out}"
        );
        assert!(out.contains("2\tnext\n"), "{out}");
        assert!(
            out.contains("2\tnext\n(1 line longer than 16384 bytes cut"),
            "{out}"
        );
        assert!(out.len() <= MAX_LINE_BYTES + 500);
        // Continuing from the marker's byte shows the next part.
        let out = page_at(text.as_bytes(), 1, cut_at, Some(1), MAX_SCAN_BYTES).unwrap();
        assert!(out.starts_with("1\t[…from byte 16384] éé"), "{out}");
        assert!(out.contains("cut at byte 32768 of 80000"), "{out}");
        // The last part ends the line without a marker.
        let out = page_at(text.as_bytes(), 1, 65_536, Some(1), MAX_SCAN_BYTES).unwrap();
        assert!(!out.contains("cut at"), "{out}");
        assert!(
            out.contains("(lines 1-1 of 2; 1 more: call read_file with offset=2)"),
            "{out}"
        );
        let err = page_at(text.as_bytes(), 1, 80_000, None, MAX_SCAN_BYTES).unwrap_err();
        assert!(
            err.contains("byte_offset 80000 is past the end of line 1"),
            "{err}"
        );
    }

    #[test]
    fn a_multibyte_character_is_never_split_by_a_cut() {
        // One ASCII byte first, so the cap falls inside a two-byte character.
        let text = format!("a{}", "é".repeat(MAX_LINE_BYTES));
        let out = page(text.as_bytes(), 1, None).unwrap();
        let cut = MAX_LINE_BYTES as u64 - 1;
        assert!(out.contains(&format!("cut at byte {cut} of")), "{out}");
        assert!(!out.contains('\u{FFFD}'), "{out}");
    }

    #[test]
    fn the_scan_limit_bounds_skipping_reading_and_counting() {
        let text: String = (1..=100).map(|i| format!("{i:09}\n")).collect(); // 10 bytes a line
        // Counting stops: the total is a lower bound.
        let out = page_at(text.as_bytes(), 1, 0, Some(2), 200).unwrap();
        assert!(
            out.ends_with("(lines 1-2 of at least 20; more: call read_file with offset=3)"),
            "{out}"
        );
        // Skipping stops: the offset is out of reach.
        let err = page_at(text.as_bytes(), 50, 0, None, 200).unwrap_err();
        assert!(err.contains("beyond the first 200 bytes"), "{err}");
        assert!(err.contains("20 lines seen"), "{err}");
        // A line longer than the scan: shown cut, the page ends there.
        let long = format!("{}\nb\n", "x".repeat(500));
        let out = page_at(long.as_bytes(), 1, 0, None, 300).unwrap();
        assert!(out.contains("cut at byte 300 of more than 300"), "{out}");
        assert!(out.contains("stopped reading after 300 bytes"), "{out}");
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
        assert!(out.contains("1\tok\n"));
        assert!(out.contains("2\tbad \u{FFFD}\u{FFFD}\n"));
        assert!(out.contains("not valid UTF-8"));
        assert!(out.contains("CRLF"));
    }
}
