//! Output limits of command tools (SPEC §4): bash and background-task output over
//! 2,000 lines or 50 KB keeps the TAIL (errors are at the end), prefixed with
//! `[kept lines A-B of N; full output: PATH]`, the full output spilled to a file in
//! the session's spill directory.
//!
//! `plan_tail` is the pure decision (which bytes of the end to keep);
//! `OutputCollector` streams a command's output through it with bounded memory:
//! it keeps the whole output while it is small, and once it is over the limits it
//! writes everything to the spill file and keeps only a tail window in memory.
//! Spill files of one session stay within `SPILL_QUOTA_BYTES` (oldest
//! removed first when a new one is created) and their directory goes with the
//! session ([`remove_spill_dirs`]).
//! This module owns spill files of commands only; layer-1 spilling of other tool
//! results (SPEC §10) is the compactor's business, not this module's.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// SPEC §4: command output over this many lines keeps only its tail.
pub(crate) const MAX_OUTPUT_LINES: usize = 2_000;

/// SPEC §4: command output over this many bytes (50 KB) keeps only its tail. The
/// same bound caps `read_file` results and the text of `grep` results.
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;

/// Bytes of the [`MAX_OUTPUT_BYTES`] budget left for the header and the notes
/// around a truncated body, so that a whole command result stays within 50 KB and
/// is never spilled a second time by layer 1 (SPEC §10 spills results over 50 KB).
pub(crate) const NOTES_RESERVE_BYTES: usize = 1_024;

/// A runaway command must not fill the disk: a spill file stops growing at this
/// size (256 MiB) and the result says so. The tail kept in the result is still
/// the true end of the output.
pub(crate) const MAX_SPILL_BYTES: u64 = 256 * 1024 * 1024;

/// Spill files of one session take at most this much disk (1 GiB): before a
/// spill file is created, the oldest files of the session's spill directory
/// are removed until the others and one full spill file fit.
pub(crate) const SPILL_QUOTA_BYTES: u64 = 1024 * 1024 * 1024;

/// Name of the directory below the data directory holding one spill
/// directory per session.
pub(crate) const SPILL_ROOT_DIR: &str = "spill";

/// The spill directory of session `session_id` below `data_dir`.
pub fn session_spill_dir(data_dir: &Path, session_id: &str) -> PathBuf {
    data_dir.join(SPILL_ROOT_DIR).join(session_id)
}

/// Removes the spill directories of `session_ids` (sessions being removed).
/// Best effort: a directory that cannot be removed is logged and left.
pub fn remove_spill_dirs(data_dir: &Path, session_ids: &[String]) {
    for id in session_ids {
        // An id naming a path component other than a plain name is not a
        // session's directory.
        if id.is_empty() || id.contains(['/', '\\']) || id == "." || id == ".." {
            continue;
        }
        let dir = session_spill_dir(data_dir, id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::debug!(path = %dir.display(), "spill directory removed"),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %dir.display(), error = %err, "cannot remove spill directory")
            }
        }
    }
}

/// A file in a spill directory, as the quota sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpillFile {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// When it was last written.
    pub modified: std::time::SystemTime,
}

/// Which files to remove, oldest first (then by path), so that the others
/// plus `incoming` bytes fit in `quota`. Pure.
pub(crate) fn spill_files_to_remove(
    files: &[SpillFile],
    incoming: u64,
    quota: u64,
) -> Vec<PathBuf> {
    let mut total: u64 = files.iter().map(|file| file.bytes).sum();
    let mut by_age: Vec<&SpillFile> = files.iter().collect();
    by_age.sort_by(|a, b| (a.modified, &a.path).cmp(&(b.modified, &b.path)));
    let mut remove = Vec::new();
    for file in by_age {
        if total.saturating_add(incoming) <= quota {
            break;
        }
        total -= file.bytes;
        remove.push(file.path.clone());
    }
    remove
}

/// Makes room in `dir` for a new spill file at `incoming_path` under
/// `quota`: removes the oldest other files as [`spill_files_to_remove`]
/// says. Returns the files removed. Best effort: errors are logged.
pub(crate) fn make_spill_room(dir: &Path, incoming_path: &Path, quota: u64) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %dir.display(), error = %err, "cannot list spill directory");
            }
            return Vec::new();
        }
    };
    let files: Vec<SpillFile> = entries
        .flatten()
        .filter(|entry| entry.path() != incoming_path)
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            meta.is_file().then(|| SpillFile {
                path: entry.path(),
                bytes: meta.len(),
                modified: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            })
        })
        .collect();
    let remove = spill_files_to_remove(&files, MAX_SPILL_BYTES.min(quota), quota);
    let mut removed = Vec::new();
    for path in remove {
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "spill file removed to stay within the quota");
                removed.push(path);
            }
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "cannot remove spill file")
            }
        }
    }
    removed
}

/// How far the in-memory tail window may grow past what it must hold before it
/// is compacted (amortises the cost of dropping its front).
const WINDOW_SLACK_FACTOR: usize = 2;

/// Bytes kept in the tail window beyond the kept budget, so that a UTF-8
/// sequence cut at the window's front can be skipped without losing kept bytes.
const WINDOW_UTF8_MARGIN: usize = 8;

/// Limits applied to one output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutputLimits {
    /// Output with more lines than this is truncated.
    pub max_lines: usize,
    /// Output with more bytes than this is truncated.
    pub max_bytes: usize,
    /// Bytes of the tail kept when truncating (at most `max_bytes`).
    pub keep_bytes: usize,
}

impl OutputLimits {
    /// SPEC §4 limits for command output: 2,000 lines or 50 KB, the kept tail
    /// leaving room for the header and notes.
    pub(crate) const COMMAND: Self = Self {
        max_lines: MAX_OUTPUT_LINES,
        max_bytes: MAX_OUTPUT_BYTES,
        keep_bytes: MAX_OUTPUT_BYTES - NOTES_RESERVE_BYTES,
    };

    /// True when an output of this size must be truncated.
    pub(crate) fn exceeded_by(&self, total_bytes: u64, total_lines: u64) -> bool {
        total_bytes > self.max_bytes as u64 || total_lines > self.max_lines as u64
    }
}

/// Number of lines in `text`: newline characters, plus one for a last line
/// without a newline. Empty text has no lines.
#[cfg(test)]
pub(crate) fn count_lines(text: &[u8]) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', text).count() as u64;
    match text.last() {
        Some(b'\n') | None => newlines,
        Some(_) => newlines + 1,
    }
}

/// Which part of the end of an output to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TailPlan {
    /// Byte index in the window where the kept text starts (a char boundary).
    pub keep_from: usize,
    /// First kept line, 1-based.
    pub first_line: u64,
    /// Last kept line (the last line of the output).
    pub last_line: u64,
    /// Lines in the whole output.
    pub total_lines: u64,
    /// True when the last line alone is longer than the budget and only its end
    /// is kept.
    pub line_cut: bool,
}

/// Decides which tail of an output to keep: as many whole lines from the end as
/// fit in `limits.max_lines` lines and `limits.keep_bytes` bytes; when not even
/// the last line fits, the end of that line, cut at a char boundary.
///
/// `window` is the end of the output (the whole output when `window_is_whole`);
/// when it is not whole it must hold at least `limits.keep_bytes` bytes, so that
/// a line starting before it is known to be too long. `total_lines` counts the
/// lines of the whole output.
pub(crate) fn plan_tail(
    window: &str,
    window_is_whole: bool,
    total_lines: u64,
    limits: &OutputLimits,
) -> TailPlan {
    let bytes = window.as_bytes();
    let end = bytes.len();
    // A final newline ends the last line; it does not start another one.
    let mut search_end = if bytes.last() == Some(&b'\n') {
        end - 1
    } else {
        end
    };
    let mut keep_from = end;
    let mut kept_lines: u64 = 0;
    while kept_lines < limits.max_lines as u64 {
        let line_start = match memchr::memrchr(b'\n', &bytes[..search_end]) {
            Some(newline) => newline + 1,
            None if window_is_whole => 0,
            // The line starts before the window: longer than the budget.
            None => break,
        };
        if end - line_start > limits.keep_bytes {
            break;
        }
        keep_from = line_start;
        kept_lines += 1;
        if line_start == 0 {
            break;
        }
        search_end = line_start - 1;
    }
    let mut line_cut = false;
    if kept_lines == 0 && end > 0 {
        // Not even the last line fits: keep its end, never cutting a character.
        let mut start = end.saturating_sub(limits.keep_bytes);
        while !window.is_char_boundary(start) {
            start += 1;
        }
        keep_from = start;
        kept_lines = 1;
        line_cut = keep_from > 0 && bytes[keep_from - 1] != b'\n';
    }
    let last_line = total_lines;
    TailPlan {
        keep_from,
        first_line: (last_line + 1).saturating_sub(kept_lines).max(1),
        last_line,
        total_lines,
        line_cut,
    }
}

/// Makes a file name from a call or task id: ASCII letters, digits, `-`, `_` and
/// `.` are kept, anything else becomes `_`, and a name made only of dots cannot
/// result.
pub(crate) fn spill_file_name(prefix: &str, id: &str) -> String {
    let cleaned: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}-{cleaned}.log")
}

/// The rendered output of a command, ready for a tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedOutput {
    /// The output, or its tail with the header and notes.
    pub text: String,
    /// True when the output was over the limits and only the tail is shown.
    pub truncated: bool,
}

/// Where the spill file stands.
#[derive(Debug)]
enum Spill {
    /// Nothing written yet.
    NotStarted,
    /// Writing; `written` bytes so far.
    Open { file: File, written: u64 },
    /// Stopped growing at [`MAX_SPILL_BYTES`].
    Capped,
    /// Creating or writing the file failed.
    Failed(String),
}

/// Collects a command's output with bounded memory and spills it when it is over
/// the limits (see the module docs).
#[derive(Debug)]
pub(crate) struct OutputCollector {
    limits: OutputLimits,
    spill_path: PathBuf,
    /// The whole output while `whole`; afterwards its last bytes.
    window: Vec<u8>,
    whole: bool,
    total_bytes: u64,
    newlines: u64,
    last_byte: Option<u8>,
    spill: Spill,
    eager: bool,
    quota: u64,
}

impl OutputCollector {
    /// A collector that creates the spill file only once the output is over the
    /// limits (bash).
    pub(crate) fn new(spill_path: PathBuf, limits: OutputLimits) -> Self {
        Self {
            limits,
            spill_path,
            window: Vec::new(),
            whole: true,
            total_bytes: 0,
            newlines: 0,
            last_byte: None,
            spill: Spill::NotStarted,
            eager: false,
            quota: SPILL_QUOTA_BYTES,
        }
    }

    /// The same collector with another spill quota for its directory.
    #[cfg(test)]
    pub(crate) fn with_quota(mut self, quota: u64) -> Self {
        self.quota = quota;
        self
    }

    /// A collector that writes every byte to the spill file from the start
    /// (background tasks, whose output keeps growing).
    pub(crate) fn eager(spill_path: PathBuf, limits: OutputLimits) -> Self {
        let mut collector = Self::new(spill_path, limits);
        collector.eager = true;
        collector.open_spill();
        collector
    }

    /// Bytes received so far.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Lines received so far.
    pub(crate) fn total_lines(&self) -> u64 {
        match self.last_byte {
            Some(b'\n') | None => self.newlines,
            Some(_) => self.newlines + 1,
        }
    }

    /// True once the output is over the limits.
    pub(crate) fn is_over_limits(&self) -> bool {
        self.limits
            .exceeded_by(self.total_bytes, self.total_lines())
    }

    /// Adds a chunk of output.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        self.total_bytes += chunk.len() as u64;
        self.newlines += memchr::memchr_iter(b'\n', chunk).count() as u64;
        self.last_byte = chunk.last().copied();
        self.window.extend_from_slice(chunk);
        if self.eager {
            self.write_spill(chunk);
        } else if matches!(self.spill, Spill::NotStarted) && self.is_over_limits() {
            self.open_spill();
            let everything = std::mem::take(&mut self.window);
            self.write_spill(&everything);
            self.window = everything;
        } else if !matches!(self.spill, Spill::NotStarted) {
            self.write_spill(chunk);
        }
        if self.is_over_limits() {
            self.compact_window();
        }
    }

    /// Flushes the spill file.
    pub(crate) fn flush(&mut self) {
        if let Spill::Open { file, .. } = &mut self.spill
            && let Err(err) = file.flush()
        {
            self.spill = Spill::Failed(err.to_string());
        }
    }

    /// The output as a tool shows it: whole when within the limits, otherwise
    /// the tail with the `[kept lines A-B of N; full output: PATH]` header.
    pub(crate) fn render(&self) -> RenderedOutput {
        if !self.is_over_limits() {
            return RenderedOutput {
                text: String::from_utf8_lossy(&self.window).into_owned(),
                truncated: false,
            };
        }
        let mut start = 0;
        if !self.whole {
            // The window may start inside a UTF-8 sequence: skip its rest.
            while start < self.window.len() && is_utf8_continuation(self.window[start]) {
                start += 1;
            }
        }
        let window = String::from_utf8_lossy(&self.window[start..]);
        let plan = plan_tail(&window, self.whole, self.total_lines(), &self.limits);
        let body = &window[plan.keep_from..];
        let mut text = String::with_capacity(body.len() + NOTES_RESERVE_BYTES);
        let path = self.spill_path.display();
        match &self.spill {
            Spill::Open { .. } | Spill::Capped => text.push_str(&format!(
                "[kept lines {}-{} of {}; full output: {path}]\n",
                plan.first_line, plan.last_line, plan.total_lines
            )),
            Spill::Failed(err) => text.push_str(&format!(
                "[kept lines {}-{} of {}; the full output could not be saved to {path}: {err}]\n",
                plan.first_line, plan.last_line, plan.total_lines
            )),
            Spill::NotStarted => text.push_str(&format!(
                "[kept lines {}-{} of {}]\n",
                plan.first_line, plan.last_line, plan.total_lines
            )),
        }
        if matches!(self.spill, Spill::Capped) {
            text.push_str(&format!(
                "[the output file holds only the first {MAX_SPILL_BYTES} of {} bytes]\n",
                self.total_bytes
            ));
        }
        if plan.line_cut {
            text.push_str(&format!(
                "[line {} is too long: only its last {} bytes are shown]\n",
                plan.last_line,
                body.len()
            ));
        }
        text.push_str(body);
        RenderedOutput {
            text,
            truncated: true,
        }
    }

    fn compact_window(&mut self) {
        let keep = self.limits.keep_bytes + WINDOW_UTF8_MARGIN;
        if self.window.len() > keep * WINDOW_SLACK_FACTOR {
            let drop = self.window.len() - keep;
            self.window.drain(..drop);
            self.whole = false;
        }
    }

    fn open_spill(&mut self) {
        self.spill = match create_spill_file(&self.spill_path, self.quota) {
            Ok(file) => Spill::Open { file, written: 0 },
            Err(err) => {
                tracing::warn!(path = %self.spill_path.display(), error = %err, "cannot create spill file");
                Spill::Failed(err.to_string())
            }
        };
    }

    fn write_spill(&mut self, chunk: &[u8]) {
        let Spill::Open { file, written } = &mut self.spill else {
            return;
        };
        let room = MAX_SPILL_BYTES.saturating_sub(*written);
        let take = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if let Err(err) = file.write_all(&chunk[..take]) {
            tracing::warn!(path = %self.spill_path.display(), error = %err, "cannot write spill file");
            self.spill = Spill::Failed(err.to_string());
            return;
        }
        *written += take as u64;
        if take < chunk.len() {
            let _ = file.flush();
            self.spill = Spill::Capped;
        }
    }
}

fn is_utf8_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// Creates (or truncates) a spill file readable by its owner only, never
/// following a symlink at its name, creating the spill directory if needed
/// and making room in it under `quota` first.
fn create_spill_file(path: &Path, quota: u64) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        make_spill_room(dir, path, quota);
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(SPILL_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Spill files may hold secrets printed by commands: owner only.
const SPILL_FILE_MODE: u32 = 0o600;

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: OutputLimits = OutputLimits {
        max_lines: 3,
        max_bytes: 20,
        keep_bytes: 12,
    };

    #[test]
    fn count_lines_conventions() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"a"), 1);
        assert_eq!(count_lines(b"a\n"), 1);
        assert_eq!(count_lines(b"a\nb"), 2);
        assert_eq!(count_lines(b"\n\n"), 2);
    }

    #[test]
    fn limits_trigger_strictly_above() {
        let l = OutputLimits::COMMAND;
        assert!(!l.exceeded_by(MAX_OUTPUT_BYTES as u64, MAX_OUTPUT_LINES as u64));
        assert!(l.exceeded_by(MAX_OUTPUT_BYTES as u64 + 1, 1));
        assert!(l.exceeded_by(10, MAX_OUTPUT_LINES as u64 + 1));
    }

    #[test]
    fn tail_keeps_last_lines_within_line_limit() {
        let text = "1\n2\n3\n4\n5\n";
        let plan = plan_tail(text, true, 5, &SMALL);
        assert_eq!(&text[plan.keep_from..], "3\n4\n5\n");
        assert_eq!(
            (plan.first_line, plan.last_line, plan.total_lines),
            (3, 5, 5)
        );
        assert!(!plan.line_cut);
    }

    #[test]
    fn tail_keeps_whole_lines_within_byte_budget() {
        let text = "aaaaa\nbbbbb\ncccc\n";
        let plan = plan_tail(text, true, 3, &SMALL);
        // "bbbbb\ncccc\n" is 11 bytes <= 12; adding "aaaaa\n" would be 17.
        assert_eq!(&text[plan.keep_from..], "bbbbb\ncccc\n");
        assert_eq!((plan.first_line, plan.last_line), (2, 3));
    }

    #[test]
    fn tail_without_final_newline() {
        let text = "x\ny\nz";
        let plan = plan_tail(text, true, 3, &SMALL);
        assert_eq!(&text[plan.keep_from..], "x\ny\nz");
        assert_eq!(plan.first_line, 1);
    }

    #[test]
    fn huge_last_line_is_cut_at_char_boundary() {
        // 'é' is two bytes: an odd budget would split one.
        let line: String = "é".repeat(20);
        let text = format!("short\n{line}");
        let limits = OutputLimits {
            max_lines: 10,
            max_bytes: 20,
            keep_bytes: 7,
        };
        let plan = plan_tail(&text, true, 2, &limits);
        let kept = &text[plan.keep_from..];
        assert!(plan.line_cut);
        assert_eq!(kept, "ééé");
        assert_eq!((plan.first_line, plan.last_line), (2, 2));
    }

    #[test]
    fn window_not_whole_never_keeps_a_line_starting_before_it() {
        let window = "bbbbbbbbbbbb\nccc\n"; // first line started before the window
        let plan = plan_tail(window, false, 40, &SMALL);
        assert_eq!(&window[plan.keep_from..], "ccc\n");
        assert_eq!((plan.first_line, plan.last_line), (40, 40));
    }

    #[test]
    fn exactly_at_the_limits_is_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.log");
        let mut c = OutputCollector::new(spill.clone(), OutputLimits::COMMAND);
        let line = "x".repeat(24) + "\n"; // 25 bytes * 2000 = 50,000 bytes
        for _ in 0..MAX_OUTPUT_LINES {
            c.push(line.as_bytes());
        }
        assert_eq!(c.total_lines(), MAX_OUTPUT_LINES as u64);
        let r = c.render();
        assert!(!r.truncated);
        assert_eq!(r.text.len(), 50_000);
        assert!(!spill.exists());
        // One more line crosses the line limit.
        c.push(b"last\n");
        let r = c.render();
        assert!(r.truncated);
        assert!(spill.exists());
        assert!(r.text.starts_with(&format!(
            "[kept lines 2-2001 of 2001; full output: {}]\n",
            spill.display()
        )));
    }

    #[test]
    fn exactly_50_kb_is_kept_and_one_more_byte_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.log");
        let mut c = OutputCollector::new(spill.clone(), OutputLimits::COMMAND);
        c.push(&vec![b'a'; MAX_OUTPUT_BYTES]);
        assert!(!c.render().truncated);
        c.push(b"b");
        let r = c.render();
        assert!(r.truncated);
        assert!(r.text.len() <= MAX_OUTPUT_BYTES);
        assert!(r.text.ends_with('b'));
        assert!(r.text.contains("[line 1 is too long"));
        assert_eq!(std::fs::read(&spill).unwrap().len(), MAX_OUTPUT_BYTES + 1);
    }

    #[test]
    fn streaming_many_chunks_keeps_true_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.log");
        let mut c = OutputCollector::new(spill.clone(), OutputLimits::COMMAND);
        let mut all = Vec::new();
        for i in 1..=100_000u32 {
            let line = format!("line {i} ✓\n");
            all.extend_from_slice(line.as_bytes());
            c.push(line.as_bytes());
        }
        c.flush();
        let r = c.render();
        assert!(r.truncated);
        assert!(r.text.len() <= MAX_OUTPUT_BYTES);
        assert!(r.text.ends_with("line 100000 ✓\n"));
        assert!(
            r.text
                .starts_with("[kept lines 98001-100000 of 100000; full output: ")
        );
        assert_eq!(std::fs::read(&spill).unwrap(), all);
        // Memory stays bounded.
        assert!(c.window.len() <= (OutputLimits::COMMAND.keep_bytes + 8) * 2 + 20);
    }

    #[test]
    fn multibyte_chars_split_across_chunks_and_window_front() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = OutputCollector::new(dir.path().join("o"), SMALL);
        let text = "日本語のテキスト".repeat(10);
        for byte in text.as_bytes() {
            c.push(std::slice::from_ref(byte));
        }
        let r = c.render();
        assert!(r.truncated);
        let body = r.text.lines().last().unwrap();
        assert!(!body.contains('\u{FFFD}'), "{body}");
        assert!(text.ends_with(body));
    }

    #[test]
    fn eager_collector_always_writes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("task.log");
        let mut c = OutputCollector::eager(spill.clone(), OutputLimits::COMMAND);
        c.push(b"hello\n");
        c.flush();
        assert_eq!(std::fs::read(&spill).unwrap(), b"hello\n");
        assert_eq!(c.render().text, "hello\n");
    }

    #[test]
    fn spill_failure_is_reported_in_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let mut c = OutputCollector::new(blocker.join("out.log"), SMALL);
        c.push(b"0123456789\n0123456789\n0123456789\n");
        let r = c.render();
        assert!(r.text.contains("could not be saved"), "{}", r.text);
    }

    #[test]
    fn spill_names_are_sanitised() {
        assert_eq!(spill_file_name("bash", "toolu_01AB"), "bash-toolu_01AB.log");
        assert_eq!(spill_file_name("bash", "../../x y"), "bash-.._.._x_y.log");
    }

    fn spill_file(name: &str, bytes: u64, age_secs: u64) -> SpillFile {
        SpillFile {
            path: PathBuf::from(name),
            bytes,
            modified: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000 - age_secs),
        }
    }

    #[test]
    fn the_quota_removes_the_oldest_files_first() {
        let files = [
            spill_file("new", 300, 1),
            spill_file("old", 300, 100),
            spill_file("mid", 300, 50),
        ];
        // 900 stored + 200 incoming > 1000: the oldest goes.
        assert_eq!(
            spill_files_to_remove(&files, 200, 1000),
            vec![PathBuf::from("old")]
        );
        // 900 + 500: two go, oldest first.
        assert_eq!(
            spill_files_to_remove(&files, 500, 1000),
            vec![PathBuf::from("old"), PathBuf::from("mid")]
        );
        assert!(spill_files_to_remove(&files, 100, 1000).is_empty());
        assert!(spill_files_to_remove(&[], 5000, 1000).is_empty());
    }

    #[test]
    fn creating_a_spill_file_makes_room_under_the_quota() {
        let dir = tempfile::tempdir().unwrap();
        let quota = 3 * MAX_SPILL_BYTES;
        // Three sparse full-size files, oldest first; a fourth spill needs room.
        for (i, name) in ["a.log", "b.log", "c.log"].iter().enumerate() {
            let file = File::create(dir.path().join(name)).unwrap();
            file.set_len(MAX_SPILL_BYTES).unwrap();
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + i as u64);
            file.set_modified(at).unwrap();
        }
        let limits = OutputLimits {
            max_lines: 1,
            max_bytes: 4,
            keep_bytes: 4,
        };
        let mut collector =
            OutputCollector::new(dir.path().join("d.log"), limits).with_quota(quota);
        collector.push(b"line 1\nline 2\n");
        collector.flush();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["b.log", "c.log", "d.log"]);
        assert_eq!(
            std::fs::read(dir.path().join("d.log")).unwrap(),
            b"line 1\nline 2\n"
        );
    }

    #[test]
    fn removing_sessions_removes_their_spill_directories_only() {
        let data = tempfile::tempdir().unwrap();
        for id in ["s1", "s2"] {
            let dir = session_spill_dir(data.path(), id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("bash-c1.log"), "x").unwrap();
        }
        remove_spill_dirs(
            data.path(),
            &["s1".to_string(), "..".to_string(), "gone".to_string()],
        );
        assert!(!session_spill_dir(data.path(), "s1").exists());
        assert!(
            session_spill_dir(data.path(), "s2")
                .join("bash-c1.log")
                .exists()
        );
        assert!(data.path().join(SPILL_ROOT_DIR).exists());
    }
}
