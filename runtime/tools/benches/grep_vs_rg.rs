//! Benchmark: the `grep` tool against the `rg` binary (SPEC §4 target: at most
//! 1.5× ripgrep on a tree of at least 20,000 files).
//!
//! Generates a deterministic tree in a temporary directory (source-like files,
//! plus `.gitignore`d directories that both must skip), then times the real
//! `grep` tool (through `Tool::execute`, as the agent calls it) for a literal
//! and a regex pattern in `files_with_matches` and `content` modes. When `rg` is
//! on PATH, times `rg -l` / `rg -n` on the same tree and prints the ratio.
//! Numbers go to `docs/performance.md`, never into assertions.
//!
//! Run: `cargo bench -p troupe-tools --bench grep_vs_rg` (or
//! `runtime/tools/benches/grep_vs_rg.sh`, which installs ripgrep first).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_paths::sandbox::{PathSandbox, resolve_path};
use troupe_tools::background::BackgroundTasks;
use troupe_tools::{Tool, ToolContext, grep::Grep};

/// Directories of searched files.
const DIRS: usize = 250;
/// Files per searched directory (250 × 84 = 21,000 files).
const FILES_PER_DIR: usize = 84;
/// Files in each ignored directory (`target/`, `node_modules/`).
const IGNORED_FILES: usize = 2_000;
/// Lines per generated file.
const LINES_PER_FILE: usize = 60;
/// One file in this many contains the rare literal.
const LITERAL_EVERY: usize = 97;
/// Timed runs per measurement (after one warm-up run); the median is reported.
const RUNS: usize = 15;

const LITERAL: &str = "troupe_needle_token";
const REGEX: &str = r"fn\s+handle_[a-z]+_v[0-9]\(";

const WORDS: [&str; 16] = [
    "let", "value", "count", "buffer", "index", "result", "config", "state", "parse", "render",
    "client", "request", "worker", "spawn", "token", "stream",
];

/// Deterministic pseudo-random numbers (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn word(&mut self) -> &'static str {
        WORDS[(self.next() % WORDS.len() as u64) as usize]
    }
}

fn file_body(rng: &mut Lcg, with_literal: bool) -> String {
    let mut out = String::with_capacity(LINES_PER_FILE * 48);
    for line in 0..LINES_PER_FILE {
        match rng.next() % 10 {
            0 => out.push_str(&format!(
                "fn handle_{}_v{}(x: u32) -> u32 {{\n",
                rng.word(),
                rng.next() % 10
            )),
            1 => out.push_str("}\n"),
            2 => out.push_str(&format!(
                "    // {} {} {}\n",
                rng.word(),
                rng.word(),
                rng.word()
            )),
            _ => out.push_str(&format!(
                "    let {}_{} = {}({});\n",
                rng.word(),
                line,
                rng.word(),
                rng.next() % 1000
            )),
        }
        if with_literal && line == LINES_PER_FILE / 2 {
            out.push_str(&format!("    // see {LITERAL} here\n"));
        }
    }
    out
}

fn generate_tree(root: &Path) -> usize {
    let mut rng = Lcg(0x7e57_5eed);
    std::fs::create_dir_all(root.join(".git")).unwrap_or_else(|e| panic!("mkdir .git: {e}"));
    std::fs::write(root.join(".gitignore"), "target/\nnode_modules/\n*.log\n")
        .unwrap_or_else(|e| panic!("write .gitignore: {e}"));
    let mut count = 0;
    for d in 0..DIRS {
        let dir = root.join(format!("src/mod_{:03}/sub_{}", d, d % 7));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        for f in 0..FILES_PER_DIR {
            count += 1;
            let body = file_body(&mut rng, count % LITERAL_EVERY == 0);
            std::fs::write(dir.join(format!("file_{f:03}.rs")), body)
                .unwrap_or_else(|e| panic!("write: {e}"));
        }
    }
    for ignored in ["target/debug/build", "node_modules/pkg/lib"] {
        let dir = root.join(ignored);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        for f in 0..IGNORED_FILES {
            std::fs::write(
                dir.join(format!("gen_{f:04}.rs")),
                file_body(&mut rng, true),
            )
            .unwrap_or_else(|e| panic!("write: {e}"));
        }
    }
    count
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Times `tool` and, when given, `reference`, alternating them run by run so
/// that both see the same load on a shared machine. One warm-up run each (it
/// also fills the page cache). Returns the medians and the output line counts.
fn time_pair(
    mut tool: impl FnMut() -> usize,
    mut reference: Option<&mut dyn FnMut() -> usize>,
) -> ((Duration, usize), Option<(Duration, usize)>) {
    let tool_lines = tool();
    let reference_lines = reference.as_mut().map(|r| r());
    let mut tool_samples = Vec::with_capacity(RUNS);
    let mut reference_samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        tool();
        tool_samples.push(start.elapsed());
        if let Some(r) = reference.as_mut() {
            let start = Instant::now();
            r();
            reference_samples.push(start.elapsed());
        }
    }
    (
        (median(tool_samples), tool_lines),
        reference_lines.map(|lines| (median(reference_samples), lines)),
    )
}

fn rg_available() -> bool {
    Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_rg(root: &Path, args: &[&str]) -> usize {
    let out = Command::new("rg")
        .arg("--no-config")
        .args(args)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("rg failed to start: {e}"));
    out.stdout.iter().filter(|&&b| b == b'\n').count()
}

fn main() {
    let mut stdout = std::io::stdout().lock();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let root: PathBuf = resolve_path(dir.path()).unwrap_or_else(|e| panic!("resolve: {e}"));
    let started = Instant::now();
    let files = generate_tree(&root);
    let _ = writeln!(
        stdout,
        "tree: {files} searched files + {} ignored, generated in {:.1} s",
        2 * IGNORED_FILES,
        started.elapsed().as_secs_f64()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let sandbox =
        Arc::new(PathSandbox::new(&root, &[], None).unwrap_or_else(|e| panic!("sandbox: {e}")));
    let ctx = ToolContext {
        call_id: "bench".into(),
        os_sandbox: std::sync::Arc::new(troupe_process::os_sandbox::CommandSandbox::off()),
        sandbox,
        spill_dir: root.join(".spill"),
        cancel: CancellationToken::new(),
        child_env: Arc::new(Vec::new()),
        background: Arc::new(BackgroundTasks::new()),
        outside_read_approved: false,
        reach: None,
    };
    let grep = Grep::new();
    let have_rg = rg_available();
    if !have_rg {
        let _ = writeln!(stdout, "rg not on PATH: timing the grep tool only");
    }

    let _ = writeln!(
        stdout,
        "{:<22} {:<8} {:>10} {:>10} {:>7}",
        "pattern", "mode", "tool ms", "rg ms", "ratio"
    );
    for (label, pattern) in [("literal", LITERAL), ("regex", REGEX)] {
        for (mode, rg_flag) in [("files_with_matches", "-l"), ("content", "-n")] {
            let tool = || {
                let out = runtime
                    .block_on(grep.execute(json!({"pattern": pattern, "output_mode": mode}), &ctx));
                assert!(!out.is_error, "grep tool failed: {out:?}");
                out.into_result("bench").joined_text().lines().count()
            };
            let mut rg = || run_rg(&root, &[rg_flag, pattern]);
            let reference: Option<&mut dyn FnMut() -> usize> =
                if have_rg { Some(&mut rg) } else { None };
            let ((tool_time, tool_lines), rg_result) = time_pair(tool, reference);
            let short_mode = if mode == "content" {
                "content"
            } else {
                "files"
            };
            match rg_result {
                Some((rg_time, rg_lines)) => {
                    let ratio = tool_time.as_secs_f64() / rg_time.as_secs_f64();
                    let _ = writeln!(
                        stdout,
                        "{:<22} {:<8} {:>10.1} {:>10.1} {:>6.2}x   (tool lines {tool_lines}, rg lines {rg_lines})",
                        label,
                        short_mode,
                        tool_time.as_secs_f64() * 1e3,
                        rg_time.as_secs_f64() * 1e3,
                        ratio
                    );
                }
                None => {
                    let _ = writeln!(
                        stdout,
                        "{:<22} {:<8} {:>10.1} {:>10} {:>7}",
                        label,
                        short_mode,
                        tool_time.as_secs_f64() * 1e3,
                        "-",
                        "-"
                    );
                }
            }
        }
    }
}
