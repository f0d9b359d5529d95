//! `grep` (SPEC §4): regular-expression search over files with ripgrep's
//! library crates (`grep-regex`, `grep-searcher`, `ignore`'s parallel walker).
//! Output modes: `files_with_matches` (default), `content` (`path:line:text`),
//! `count` (`path:count`); at most 500 entries, sorted by path then line, with a
//! note when more matched. Binary files (a NUL byte) are skipped, `.gitignore`d
//! and hidden files too (see `walk`). Memory and time stay bounded on any
//! input: files over `MAX_FILE_BYTES` are not searched and a line over
//! `MAX_SEARCH_LINE_BYTES` ends its file's search; the result names both. Reads only; the searched path is resolved
//! at the moment of use like every path.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkState};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files::{self, display_path};
use super::output::MAX_OUTPUT_BYTES;
use super::walk::{BoundedBest, MAX_RESULTS, StopFlag, walk_builder};
use super::{Access, PermissionSubject, ToolContext, ToolOutput, plural};
use crate::builtin::{Builtin, BuiltinTool, ToolClass};

/// Bytes of one matching line shown in `content` mode; longer lines (minified
/// code) are cut with `…`.
pub(crate) const MAX_LINE_BYTES: usize = 400;

/// Files larger than this (256 MiB) are not searched; the result names them.
/// Keeps one call's time bounded on huge logs and images of disks.
pub(crate) const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// A line longer than this (4 MiB) ends the search of its file (matches
/// before it are kept) and the result names the file: the searcher holds a
/// whole line in memory, so this bounds memory per search thread.
pub(crate) const MAX_SEARCH_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Paths named per kind of skipped file in a result.
const MAX_NAMED_SKIPS: usize = 5;

/// The `grep` tool.
#[derive(Debug)]
pub struct Grep;

/// What `grep` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OutputMode {
    /// Paths of matching files.
    #[default]
    FilesWithMatches,
    /// `path:line:text` per matching line.
    Content,
    /// `path:count` per matching file.
    Count,
}

/// The arguments; the tool's schema is derived from them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Regex (Rust syntax; `(?i)` ignores case)
    pattern: String,
    /// File or directory (default: project root)
    path: Option<String>,
    /// Only files matching it, e.g. *.rs
    glob: Option<String>,
    /// files_with_matches (default): paths; content: path:line:text; count: path:count
    #[serde(default)]
    output_mode: OutputMode,
}

impl Grep {
    /// The tool, with the schema of its arguments.
    pub fn new() -> Builtin<Self> {
        Builtin::new(Self)
    }
}

impl BuiltinTool for Grep {
    type Args = Args;
    const NAME: &'static str = "grep";
    const CLASS: ToolClass = ToolClass::READ;

    fn description(&self) -> &str {
        "Search file contents with a regex, skipping .gitignored, hidden and binary files. At \
         most 500 entries, by path."
    }

    fn target(&self, args: &Value) -> PermissionSubject {
        super::read_file::path_subject(args, Access::Read)
    }

    fn run<'a>(&'a self, args: Self::Args, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let root = match files::resolve_for_use(
                ctx,
                args.path.as_deref().unwrap_or("."),
                Access::Read,
            ) {
                Ok(root) => root,
                Err(message) => return ToolOutput::error(message),
            };
            let query = match GrepQuery::new(
                &args.pattern,
                args.glob.as_deref(),
                &root.path,
                args.output_mode,
            ) {
                Ok(query) => query,
                Err(message) => return ToolOutput::error(message),
            };
            let project_root = ctx.sandbox.project_root().to_path_buf();
            let stop = StopFlag::new();
            let _stop_on_drop = stop.guard();
            let work = tokio::task::spawn_blocking(move || {
                if let Err(err) = std::fs::metadata(&root.path) {
                    return Err(files::explain_io(&root.display, &err));
                }
                let report = query.run(&root.path, &stop);
                Ok(report.render(&project_root, &args.pattern, &root.display))
            });
            tokio::select! {
                joined = work => match joined {
                    Ok(Ok(text)) => ToolOutput::ok(text),
                    Ok(Err(message)) => ToolOutput::error(message),
                    Err(err) => ToolOutput::error(format!("grep failed: {err}")),
                },
                () = ctx.cancel.cancelled() => ToolOutput::error("grep was cancelled."),
            }
        })
    }
}

/// A compiled search: matcher, file filter and mode.
#[derive(Debug, Clone)]
pub(crate) struct GrepQuery {
    matcher: RegexMatcher,
    overrides: Option<Override>,
    mode: OutputMode,
    cap: usize,
}

/// One result entry, ordered by path then line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    /// The file.
    pub path: PathBuf,
    /// Line number (content mode) or 0.
    pub line: u64,
    /// Line text (content mode) or empty.
    pub text: String,
    /// Matching lines in the file (count mode) or 0.
    pub count: u64,
}

/// What a search found.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrepReport {
    /// The first entries by path (and line).
    pub entries: Vec<Entry>,
    /// Entries there would be without the cap (files for files_with_matches
    /// and count, matching lines for content).
    pub total_entries: u64,
    /// Matching lines in all files (count and content modes).
    pub total_matches: u64,
    /// Files with at least one match.
    pub matching_files: u64,
    /// Paths that could not be read.
    pub unreadable: u64,
    /// Files not searched for being over [`MAX_FILE_BYTES`]: how many, and
    /// the first few by path.
    pub too_large: Skipped,
    /// Files searched only up to a line over [`MAX_SEARCH_LINE_BYTES`].
    pub long_lines: Skipped,
    /// The mode searched in.
    pub mode: OutputMode,
}

/// Files left out (wholly or partly) for one reason.
#[derive(Debug, Clone, Default)]
pub(crate) struct Skipped {
    /// How many.
    pub count: u64,
    /// The first few by path.
    pub named: Vec<PathBuf>,
}

impl Skipped {
    /// A note for the result: `(what: a, b and N more)`, or none.
    fn note(&self, project_root: &Path, what: &str) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        let mut names: Vec<String> = self
            .named
            .iter()
            .map(|path| display_path(project_root, path))
            .collect();
        let more = self.count.saturating_sub(names.len() as u64);
        if more > 0 {
            names.push(format!("{more} more"));
        }
        Some(format!(
            "({} {what}: {})",
            plural(self.count, "file"),
            names.join(", ")
        ))
    }
}

impl GrepQuery {
    /// Compiles `pattern` (and the optional glob filter relative to `root`).
    /// Errors are written for the model.
    pub(crate) fn new(
        pattern: &str,
        glob: Option<&str>,
        root: &Path,
        mode: OutputMode,
    ) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("pattern is empty.".into());
        }
        let matcher = RegexMatcherBuilder::new()
            .line_terminator(Some(b'\n'))
            .build(pattern)
            .map_err(|err| format!("Invalid regex `{pattern}`: {err}"))?;
        let overrides = match glob.map(str::trim).filter(|g| !g.is_empty()) {
            None => None,
            Some(glob) => {
                let mut builder = OverrideBuilder::new(root);
                builder
                    .add(glob)
                    .map_err(|err| format!("Invalid glob `{glob}`: {err}"))?;
                Some(
                    builder
                        .build()
                        .map_err(|err| format!("Invalid glob `{glob}`: {err}"))?,
                )
            }
        };
        Ok(Self {
            matcher,
            overrides,
            mode,
            cap: MAX_RESULTS,
        })
    }

    /// Searches `root` (a file or a directory) with the parallel walker; stops
    /// early (with partial results) once `stop` is raised.
    pub(crate) fn run(&self, root: &Path, stop: &StopFlag) -> GrepReport {
        let shared = Arc::new(Mutex::new(Totals::new(self.cap)));
        let mut builder = VisitorBuilder {
            query: self,
            shared: Arc::clone(&shared),
            stop,
        };
        let mut walk = walk_builder(root);
        if let Some(overrides) = &self.overrides {
            walk.overrides(overrides.clone());
        }
        walk.build_parallel().visit(&mut builder);
        drop(builder);
        let totals = std::mem::replace(
            &mut *shared.lock().unwrap_or_else(PoisonError::into_inner),
            Totals::new(0),
        );
        GrepReport {
            entries: totals.best.into_sorted(),
            total_entries: totals.entries,
            total_matches: totals.matches,
            matching_files: totals.files,
            unreadable: totals.unreadable,
            too_large: Skipped {
                count: totals.too_large,
                named: totals.too_large_named.into_sorted(),
            },
            long_lines: Skipped {
                count: totals.long_lines,
                named: totals.long_lines_named.into_sorted(),
            },
            mode: self.mode,
        }
    }
}

impl GrepReport {
    /// The text shown to the model; paths relative to `project_root`.
    pub(crate) fn render(&self, project_root: &Path, pattern: &str, root_display: &str) -> String {
        let skip_notes: Vec<String> = [
            self.too_large.note(
                project_root,
                &format!(
                    "larger than {} not searched (use bash for them)",
                    super::read_file::human_bytes(MAX_FILE_BYTES)
                ),
            ),
            self.long_lines.note(
                project_root,
                &format!(
                    "searched only up to a line longer than {}",
                    super::read_file::human_bytes(MAX_SEARCH_LINE_BYTES as u64)
                ),
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        if self.entries.is_empty() {
            let mut text = format!("No matches for `{pattern}` in `{root_display}`.");
            if self.unreadable > 0 {
                text.push_str(&format!(
                    " ({} could not be read.)",
                    plural(self.unreadable, "path")
                ));
            }
            for note in &skip_notes {
                text.push(' ');
                text.push_str(note);
            }
            return text;
        }
        let mut text = String::new();
        let mut shown = 0usize;
        let mut byte_capped = false;
        for entry in &self.entries {
            let path = display_path(project_root, &entry.path);
            let line = match self.mode {
                OutputMode::FilesWithMatches => path,
                OutputMode::Count => format!("{path}:{}", entry.count),
                OutputMode::Content => format!("{path}:{}:{}", entry.line, entry.text),
            };
            if text.len() + line.len() + 1 > MAX_OUTPUT_BYTES - crate::output::NOTES_RESERVE_BYTES {
                byte_capped = true;
                break;
            }
            text.push_str(&line);
            text.push('\n');
            shown += 1;
        }
        let noun = match self.mode {
            OutputMode::Content => "matching lines",
            OutputMode::FilesWithMatches | OutputMode::Count => "files",
        };
        if byte_capped || self.total_entries > shown as u64 {
            text.push_str(&format!(
                "(showing {shown} of {} {noun}; narrow the pattern, path or glob)\n",
                self.total_entries
            ));
        }
        if self.mode == OutputMode::Count {
            text.push_str(&format!(
                "({} in {})\n",
                plural(self.total_matches, "matching line"),
                plural(self.matching_files, "file")
            ));
        }
        if self.unreadable > 0 {
            text.push_str(&format!(
                "({} could not be read)\n",
                plural(self.unreadable, "path")
            ));
        }
        for note in &skip_notes {
            text.push_str(note);
            text.push('\n');
        }
        text.truncate(text.trim_end_matches('\n').len());
        text
    }
}

struct Totals {
    best: BoundedBest<Entry>,
    entries: u64,
    matches: u64,
    files: u64,
    unreadable: u64,
    too_large: u64,
    too_large_named: BoundedBest<PathBuf>,
    long_lines: u64,
    long_lines_named: BoundedBest<PathBuf>,
}

impl Totals {
    fn new(cap: usize) -> Self {
        Self {
            best: BoundedBest::new(cap),
            entries: 0,
            matches: 0,
            files: 0,
            unreadable: 0,
            too_large: 0,
            too_large_named: BoundedBest::new(MAX_NAMED_SKIPS),
            long_lines: 0,
            long_lines_named: BoundedBest::new(MAX_NAMED_SKIPS),
        }
    }

    fn absorb(&mut self, other: Totals) {
        self.entries += other.entries;
        self.matches += other.matches;
        self.files += other.files;
        self.unreadable += other.unreadable;
        self.too_large += other.too_large;
        self.long_lines += other.long_lines;
        self.best.merge(other.best);
        self.too_large_named.merge(other.too_large_named);
        self.long_lines_named.merge(other.long_lines_named);
    }
}

struct VisitorBuilder<'a> {
    query: &'a GrepQuery,
    shared: Arc<Mutex<Totals>>,
    stop: &'a StopFlag,
}

impl<'s> ParallelVisitorBuilder<'s> for VisitorBuilder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        let searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(self.query.mode == OutputMode::Content)
            .heap_limit(Some(MAX_SEARCH_LINE_BYTES))
            .build();
        Box::new(Visitor {
            query: self.query,
            matcher: self.query.matcher.clone(),
            searcher,
            totals: Totals::new(self.query.cap),
            shared: Arc::clone(&self.shared),
            stop: self.stop,
        })
    }
}

struct Visitor<'a> {
    query: &'a GrepQuery,
    matcher: RegexMatcher,
    searcher: Searcher,
    totals: Totals,
    shared: Arc<Mutex<Totals>>,
    stop: &'a StopFlag,
}

impl ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.stop.is_stopped() {
            return WalkState::Quit;
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                self.totals.unreadable += 1;
                return WalkState::Continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            return WalkState::Continue;
        }
        if entry
            .metadata()
            .is_ok_and(|meta| meta.len() > MAX_FILE_BYTES)
        {
            self.totals.too_large += 1;
            self.totals.too_large_named.push(entry.into_path());
            return WalkState::Continue;
        }
        let mode = self.query.mode;
        let mut sink = FileSink {
            mode,
            lines: Vec::new(),
            matches: 0,
            binary: false,
            keep_lines: self.query.cap,
        };
        if let Err(err) = self
            .searcher
            .search_path(&self.matcher, entry.path(), &mut sink)
        {
            if !is_line_limit_error(&err) {
                self.totals.unreadable += 1;
                return WalkState::Continue;
            }
            // Matches before the long line are kept.
            self.totals.long_lines += 1;
            self.totals
                .long_lines_named
                .push(entry.path().to_path_buf());
        }
        if sink.binary || sink.matches == 0 {
            return WalkState::Continue;
        }
        self.totals.files += 1;
        self.totals.matches += sink.matches;
        match mode {
            OutputMode::FilesWithMatches | OutputMode::Count => {
                self.totals.entries += 1;
                let probe = Entry {
                    path: entry.path().to_path_buf(),
                    line: 0,
                    text: String::new(),
                    count: sink.matches,
                };
                self.totals.best.push(probe);
            }
            OutputMode::Content => {
                self.totals.entries += sink.matches;
                let path = entry.into_path();
                for (line, text) in sink.lines {
                    let item = Entry {
                        path: path.clone(),
                        line,
                        text,
                        count: 0,
                    };
                    if !self.totals.best.would_keep(&item) {
                        break;
                    }
                    self.totals.best.push(item);
                }
            }
        }
        WalkState::Continue
    }
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let mine = std::mem::replace(&mut self.totals, Totals::new(0));
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .absorb(mine);
    }
}

/// Collects the matches of one file.
struct FileSink {
    mode: OutputMode,
    lines: Vec<(u64, String)>,
    matches: u64,
    binary: bool,
    keep_lines: usize,
}

impl Sink for FileSink {
    type Error = std::io::Error;

    fn matched(&mut self, _searcher: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        match self.mode {
            OutputMode::FilesWithMatches => {
                self.matches += 1;
                Ok(false)
            }
            OutputMode::Count => {
                self.matches += mat.lines().count() as u64;
                Ok(true)
            }
            OutputMode::Content => {
                let first = mat.line_number().unwrap_or(0);
                for (i, line) in mat.lines().enumerate() {
                    self.matches += 1;
                    if self.lines.len() < self.keep_lines {
                        self.lines.push((first + i as u64, shorten_line(line)));
                    }
                }
                Ok(true)
            }
        }
    }

    fn binary_data(&mut self, _searcher: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// True when a search error is the searcher's heap limit (a line over
/// [`MAX_SEARCH_LINE_BYTES`]). The searcher reports it as an
/// `io::ErrorKind::Other` error it builds itself; errors from the operating
/// system never have that kind (std maps unknown codes to `Uncategorized`).
fn is_line_limit_error(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::Other && err.raw_os_error().is_none()
}

/// A matching line for display: line terminator dropped, decoded lossily, cut
/// at [`MAX_LINE_BYTES`] on a char boundary.
fn shorten_line(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(line);
    if text.len() <= MAX_LINE_BYTES {
        return text.into_owned();
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn the_schema_is_derived_from_the_arguments() {
        crate::testing::assert_schema_matches::<Args>(Grep::new().input_schema());
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(
            root.join("src/a.rs"),
            "fn alpha() {}\nfn beta() {}\n// alpha again\n",
        )
        .unwrap();
        std::fs::write(root.join("src/b.txt"), "alpha in text\n").unwrap();
        std::fs::write(root.join("target/c.rs"), "alpha ignored\n").unwrap();
        std::fs::write(root.join("bin.dat"), b"alpha\0binary").unwrap();
        dir
    }

    fn run(dir: &Path, pattern: &str, glob: Option<&str>, mode: OutputMode) -> GrepReport {
        GrepQuery::new(pattern, glob, dir, mode)
            .unwrap()
            .run(dir, &StopFlag::new())
    }

    #[test]
    fn files_with_matches_sorted_skipping_ignored_and_binary() {
        let dir = tree();
        let report = run(dir.path(), "alpha", None, OutputMode::FilesWithMatches);
        let text = report.render(dir.path(), "alpha", ".");
        assert_eq!(text, "src/a.rs\nsrc/b.txt");
    }

    #[test]
    fn content_and_count_modes() {
        let dir = tree();
        let report = run(dir.path(), "alpha", Some("*.rs"), OutputMode::Content);
        let text = report.render(dir.path(), "alpha", ".");
        assert_eq!(text, "src/a.rs:1:fn alpha() {}\nsrc/a.rs:3:// alpha again");
        let report = run(dir.path(), "(?i)ALPHA", None, OutputMode::Count);
        let text = report.render(dir.path(), "alpha", ".");
        assert_eq!(
            text,
            "src/a.rs:2\nsrc/b.txt:1\n(3 matching lines in 2 files)"
        );
    }

    #[test]
    fn cap_and_note() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (0..700).map(|i| format!("hit {i}\n")).collect();
        std::fs::write(dir.path().join("many.txt"), body).unwrap();
        let report = run(dir.path(), "hit", None, OutputMode::Content);
        assert_eq!(report.entries.len(), MAX_RESULTS);
        assert_eq!(report.total_entries, 700);
        let text = report.render(dir.path(), "hit", ".");
        assert!(text.starts_with("many.txt:1:hit 0\nmany.txt:2:hit 1\n"));
        assert!(
            text.ends_with("(showing 500 of 700 matching lines; narrow the pattern, path or glob)"),
            "{}",
            &text[text.len() - 200..]
        );
    }

    #[test]
    fn a_raised_stop_flag_ends_the_walk() {
        let dir = tree();
        let stop = StopFlag::new();
        stop.stop();
        let query =
            GrepQuery::new("alpha", None, dir.path(), OutputMode::FilesWithMatches).unwrap();
        assert_eq!(query.run(dir.path(), &stop).matching_files, 0);
    }

    #[test]
    fn invalid_regex_and_no_match() {
        let dir = tree();
        let err = GrepQuery::new("(unclosed", None, dir.path(), OutputMode::Content).unwrap_err();
        assert!(err.starts_with("Invalid regex `(unclosed`:"), "{err}");
        let report = run(
            dir.path(),
            "zzz_nothing",
            None,
            OutputMode::FilesWithMatches,
        );
        assert_eq!(
            report.render(dir.path(), "zzz_nothing", "."),
            "No matches for `zzz_nothing` in `.`."
        );
    }

    #[test]
    fn single_file_root_and_long_lines() {
        let dir = tree();
        let long = format!("needle {}\n", "x".repeat(2000));
        std::fs::write(dir.path().join("long.txt"), long).unwrap();
        let report = run(
            &dir.path().join("long.txt"),
            "needle",
            None,
            OutputMode::Content,
        );
        let text = report.render(dir.path(), "needle", "long.txt");
        assert!(text.starts_with("long.txt:1:needle xxx"));
        assert!(text.ends_with('…'));
        assert!(text.len() < MAX_LINE_BYTES + 40);
    }

    #[test]
    fn huge_files_and_huge_lines_are_skipped_and_named() {
        let dir = tree();
        // Sparse: a text start, then nothing written up to past the file limit.
        let big = std::fs::File::create(dir.path().join("big.log")).unwrap();
        std::io::Write::write_all(&mut &big, b"alpha in a huge file\n").unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        // One line over the line limit after a matching line.
        let mut long = b"alpha before the long line\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_SEARCH_LINE_BYTES + 1024));
        long.extend_from_slice(b"\nalpha after it\n");
        std::fs::write(dir.path().join("min.js"), long).unwrap();
        let report = run(dir.path(), "alpha", None, OutputMode::Content);
        assert_eq!(report.too_large.count, 1);
        assert_eq!(report.long_lines.count, 1);
        let text = report.render(dir.path(), "alpha", ".");
        assert!(
            text.contains("min.js:1:alpha before the long line"),
            "{text}"
        );
        assert!(!text.contains("alpha after it"), "{text}");
        assert!(!text.contains("huge file"), "{text}");
        assert!(
            text.contains("(1 file larger than 256 MiB not searched (use bash for them): big.log)"),
            "{text}"
        );
        assert!(
            text.contains("(1 file searched only up to a line longer than 4 MiB: min.js)"),
            "{text}"
        );
        // Said when nothing matched too.
        let report = run(
            dir.path(),
            "zzz_nothing",
            None,
            OutputMode::FilesWithMatches,
        );
        let text = report.render(dir.path(), "zzz_nothing", ".");
        assert!(
            text.starts_with("No matches for `zzz_nothing` in `.`. (1 file larger"),
            "{text}"
        );
    }

    #[test]
    fn skip_notes_name_a_few_files_and_count_the_rest() {
        let skipped = Skipped {
            count: 7,
            named: (1..=5).map(|i| PathBuf::from(format!("/p/f{i}"))).collect(),
        };
        assert_eq!(
            skipped.note(Path::new("/p"), "too big").unwrap(),
            "(7 files too big: f1, f2, f3, f4, f5, 2 more)"
        );
        assert!(Skipped::default().note(Path::new("/p"), "x").is_none());
    }
}
