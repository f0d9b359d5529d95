//! `troupe demo` (SPEC §1.6): an offline demonstration that needs no API key.
//!
//! It starts the built-in scripted model server on loopback (the same one the
//! test suite uses, speaking the real Anthropic wire protocol), writes a
//! throw-away sample repository, and runs a scripted task on the real embedded
//! runtime: a read-only batch of three tools that run concurrently, then an edit
//! that needs approval (granted automatically by the demo), then a fork into
//! three sub-agents that check the rest of the package in parallel, then the
//! final answer. The live event stream — the forks' events interleaved and
//! labelled with their agent paths — is printed as it happens, then the span
//! tree with the three forks' `invoke_agent` spans. It says plainly that the
//! model is scripted.
//!
//! The demo has a home of its own: a temporary data directory and no user
//! configuration, so it runs with default settings whatever the person's
//! configuration says and leaves nothing in their session store. `--keep`
//! keeps that home and the sample repository and prints how to look at them.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use troupe_config::{DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_TOKENS, ResolvedProvider};
use troupe_protocol::model::Protocol;
use troupe_protocol::permission::PermissionMode;
use troupe_scripted::{Matcher, Response, Script, ScriptedServer, ServerConfig, Turn, Usage, text};

use troupe_actors::SessionTarget;

use crate::follow::Approvals;
use crate::project::{Locations, RunOptions};
use crate::render::RenderStyle;
use crate::run::execute;
use crate::setup;
use crate::{DemoArgs, EXIT_RUNTIME};

/// The task the scripted model "works" on.
const DEMO_PROMPT: &str =
    "The test for `mean` in the stats package fails. Find the bug and fix it.";

/// What the demo says before and after, so nobody mistakes it for a real model.
const SCRIPTED_NOTICE: &str = "This demo talks to Troupe's built-in SCRIPTED model server on \
127.0.0.1: the model's replies are pre-written, no real model is called and no API key is \
needed. Everything else is real: the actor runtime, the Anthropic wire protocol over HTTP, \
the tools, the permission engine and the event stream.";

/// The sample repository: a tiny Python package with an off-by-one bug.
const SAMPLE_FILES: [(&str, &str); 3] = [
    (
        "README.md",
        "# stats\n\nA tiny statistics helper used by the Troupe demo.\n",
    ),
    (
        "stats.py",
        "\"\"\"Small statistics helpers.\"\"\"\n\n\ndef mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / (len(values) - 1)\n\n\ndef median(values):\n    \"\"\"Middle value of a non-empty list.\"\"\"\n    ordered = sorted(values)\n    middle = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[middle]\n    return (ordered[middle - 1] + ordered[middle]) / 2\n",
    ),
    (
        "test_stats.py",
        "from stats import mean, median\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n\n\ndef test_median():\n    assert median([3, 1, 2]) == 2\n",
    ),
];

/// The three forked checks: the words of its task that route each fork's
/// requests, its task, the file it reads and its report.
const FORK_CHECKS: [(&str, &str, &str, &str); 3] = [
    (
        "Review `median` in stats.py",
        "Review `median` in stats.py for wrong results on even-length or unsorted input.",
        "stats.py",
        "Scope: `median` in stats.py. It sorts its input and averages the two middle values          for even lengths, so it is correct; an empty list raises IndexError, which matches          its docstring (non-empty input).",
    ),
    (
        "what test_stats.py covers",
        "List what test_stats.py covers and what it misses.",
        "test_stats.py",
        "Scope: test_stats.py. It checks `mean([1, 2, 3])` and `median([3, 1, 2])`; it does          not cover even-length input to `median` or single-element lists.",
    ),
    (
        "README.md describes the package",
        "Check that README.md describes the package accurately.",
        "README.md",
        "Scope: README.md. It calls the package a tiny statistics helper, which is accurate;          it does not list the two functions.",
    ),
];

/// The scripted conversation: a read-only batch, an edit, three forks, the answer.
fn demo_script() -> Script {
    let mut fan_out = Response::empty().and_text(
        "Fixed. Three forked workers will now check the rest of the package in parallel.",
    );
    for (_, task, _, _) in FORK_CHECKS {
        fan_out = fan_out.and_tool_call(
            "agent",
            json!({"description": "check one part", "prompt": task, "fork": true}),
        );
    }
    let mut script = Script::new()
        .then(
            Response::empty()
                .and_text("I'll look at the package and its test first.")
                .and_tool_call("glob", json!({"pattern": "**/*.py"}))
                .and_tool_call("grep", json!({"pattern": "def ", "output_mode": "content"}))
                .and_tool_call("read_file", json!({"path": "stats.py"}))
                .with_usage(Usage::new(1_850, 96).with_cache_creation(2_400)),
        )
        .then(
            Response::empty()
                .and_text(
                    "`mean` divides by `len(values) - 1` instead of `len(values)`. Fixing it.",
                )
                .and_tool_call(
                    "edit_file",
                    json!({
                        "path": "stats.py",
                        "old_string": "return sum(values) / (len(values) - 1)",
                        "new_string": "return sum(values) / len(values)"
                    }),
                )
                .with_usage(
                    Usage::new(620, 88)
                        .with_cache_read(2_400)
                        .with_cache_creation(1_900),
                ),
        )
        .then(fan_out.with_usage(Usage::new(180, 150).with_cache_read(4_300)));
    // Each fork's requests are told apart by its task; all three start from
    // the same cached prefix (the parent's conversation).
    for (marker, _, file, report) in FORK_CHECKS {
        script = script
            .then(
                Turn::new(
                    Response::empty()
                        .and_tool_call("read_file", json!({ "path": file }))
                        .with_usage(Usage::new(90, 40).with_cache_read(4_480)),
                )
                .when(Matcher::any_user_contains(marker)),
            )
            .then(
                Turn::new(text(report).with_usage(Usage::new(260, 70).with_cache_read(4_480)))
                    .when(Matcher::any_user_contains(marker)),
            );
    }
    script.then(
        Response::empty()
            .and_text(
                "Fixed the bug in `stats.py`: `mean` divided the sum by `n - 1`, so \
                 `mean([1, 2, 3])` returned 3 instead of 2. It now divides by `len(values)`, \
                 which makes `test_mean` pass. The forked checks found `median` correct, and \
                 noted that the tests do not cover even-length input to `median` and that the \
                 README does not list the functions.",
            )
            .with_usage(Usage::new(640, 90).with_cache_read(4_780)),
    )
}

/// Writes the sample repository into `dir`.
fn write_sample(dir: &Path) -> std::io::Result<()> {
    for (name, content) in SAMPLE_FILES {
        std::fs::write(dir.join(name), content)?;
    }
    // A `.troupe` directory marks the project root for config discovery.
    std::fs::create_dir_all(dir.join(".troupe"))
}

/// A temporary directory, created with `prefix`.
fn temp_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(prefix).tempdir()
}

/// What the demo prints after `--keep`: where the sample repository and the
/// demo's own home are, and the commands that look at what it left there.
pub(crate) fn kept_notice(
    sample: &Path,
    home: &Path,
    session_id: Option<&str>,
    run_id: Option<&str>,
) -> String {
    let env = format!("TROUPE_HOME={}", home.display());
    let mut lines = vec![
        format!("Sample repository kept at {}", sample.display()),
        format!(
            "The demo's home (its session store) kept at {}",
            home.display()
        ),
        "Look at what the demo stored with:".to_string(),
        format!("  {env} troupe sessions list --all"),
    ];
    if let Some(id) = session_id {
        lines.push(format!("  {env} troupe sessions show {id}"));
    }
    if let Some(id) = run_id {
        lines.push(format!("  {env} troupe trace {id}"));
    }
    lines.join("\n")
}

/// Runs the demo; returns the exit code.
///
/// The demo runs in a home of its own, a temporary data directory with no
/// user configuration (default settings), so it neither writes into the
/// person's session store nor depends on their configuration. Both that home
/// and the sample repository are deleted at the end unless `--keep` is given.
pub(crate) async fn demo(args: DemoArgs, color: bool) -> u8 {
    let sample = match temp_dir("troupe-demo-") {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("troupe demo: cannot create the sample repository: {err}");
            return EXIT_RUNTIME;
        }
    };
    if let Err(err) = write_sample(sample.path()) {
        eprintln!("troupe demo: cannot write the sample repository: {err}");
        return EXIT_RUNTIME;
    }
    let home = match temp_dir("troupe-demo-home-") {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("troupe demo: cannot create the demo's home: {err}");
            return EXIT_RUNTIME;
        }
    };
    let locations = Locations::isolated(home.path().to_path_buf());
    let code = demo_in(&args, sample.path(), &locations, color).await;
    if args.keep {
        let (sample, home) = (sample.keep(), home.keep());
        eprintln!(
            "\n{}",
            kept_notice(
                &sample,
                &home,
                code.session_id.as_deref(),
                code.run_id.as_deref()
            )
        );
    } else if !args.json {
        eprintln!(
            "The sample repository and the demo's session were deleted (keep them with --keep)."
        );
    }
    code.exit
}

/// How the demo ended.
struct DemoEnd {
    /// The exit code.
    exit: u8,
    /// The demo's session, when the run started.
    session_id: Option<String>,
    /// The demo's run, when it started.
    run_id: Option<String>,
}

impl DemoEnd {
    fn failed(exit: u8) -> Self {
        Self {
            exit,
            session_id: None,
            run_id: None,
        }
    }
}

/// Runs the scripted task on the sample repository in `sample`, with the
/// store and configuration of `locations`.
async fn demo_in(args: &DemoArgs, sample: &Path, locations: &Locations, color: bool) -> DemoEnd {
    let server = match ScriptedServer::start_with(demo_script(), ServerConfig::non_strict()).await {
        Ok(server) => server,
        Err(err) => {
            eprintln!("troupe demo: cannot start the scripted model server: {err}");
            return DemoEnd::failed(EXIT_RUNTIME);
        }
    };
    let provider = ResolvedProvider {
        name: "scripted".into(),
        protocol: Protocol::Anthropic,
        model: "scripted-demo-model".into(),
        base_url: server.anthropic_base_url(),
        api_key: None,
        api_key_env: "ANTHROPIC_API_KEY".into(),
        context_window: DEFAULT_CONTEXT_WINDOW,
        max_tokens: DEFAULT_MAX_TOKENS,
        thinking_budget: None,
        price: None,
        idle_timeout: Duration::from_secs(30),
        max_retries: 0,
        store: false,
    };
    let options = RunOptions {
        cwd: Some(sample.to_path_buf()),
        mode: Some(PermissionMode::Default),
        ..RunOptions::default()
    };
    let store = match locations.open_store() {
        Ok(store) => store,
        Err(err) => {
            eprintln!("troupe demo: {err}");
            return DemoEnd::failed(err.code);
        }
    };
    let telemetry = crate::telemetry::start(&store, crate::telemetry::terminal_log_style());
    let prepared = match setup::prepare(&options, Some(provider), &store, locations, None).await {
        Ok(prepared) => prepared,
        Err(err) => {
            eprintln!("troupe demo: {err}");
            telemetry.stop();
            return DemoEnd::failed(err.code);
        }
    };
    let session_id = match &prepared.session {
        SessionTarget::New(id) => id.clone(),
        SessionTarget::Continue(id) => Some(id.clone()),
    };
    if !args.json {
        eprintln!("{SCRIPTED_NOTICE}\n");
        eprintln!("Sample repository: {}", sample.display());
        eprintln!("Task: {DEMO_PROMPT}\n");
    }
    // The demo's session cannot be continued (its model and sample are
    // gone afterwards): no next step is suggested.
    let style = RenderStyle {
        color,
        next_steps: false,
        dir: None,
    };
    let (exit, run_id) = execute(
        prepared,
        store.clone(),
        DEMO_PROMPT.to_string(),
        args.json,
        style,
        Approvals::AutoAllow,
    )
    .await;
    if !args.json {
        let fixed = std::fs::read_to_string(sample.join("stats.py"))
            .map(|text| text.contains("return sum(values) / len(values)"))
            .unwrap_or(false);
        eprintln!(
            "\nThe scripted model made {} requests; stats.py {}.",
            server.request_count(),
            if fixed { "is fixed" } else { "was not changed" }
        );
        if let Some(run_id) = &run_id {
            telemetry.sync_spans();
            match crate::telemetry::span_tree(&store, run_id) {
                Ok(Some(tree)) => {
                    eprintln!("\nSpan tree of run {run_id}:");
                    eprintln!("{}", tree.trim_end());
                }
                Ok(None) => eprintln!("\nNo spans were recorded for run {run_id}."),
                Err(err) => eprintln!("\nThe span tree could not be read: {err}"),
            }
        }
        eprintln!("Reminder: the model in this demo is scripted.");
    }
    server.shutdown().await;
    telemetry.stop();
    DemoEnd {
        exit,
        session_id,
        run_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_notice_names_both_places_and_the_commands_to_look() {
        let notice = kept_notice(
            Path::new("/tmp/troupe-demo-x"),
            Path::new("/tmp/troupe-demo-home-y"),
            Some("S1"),
            Some("R1"),
        );
        assert!(notice.contains("/tmp/troupe-demo-x"), "{notice}");
        for command in [
            "TROUPE_HOME=/tmp/troupe-demo-home-y troupe sessions list --all",
            "TROUPE_HOME=/tmp/troupe-demo-home-y troupe sessions show S1",
            "TROUPE_HOME=/tmp/troupe-demo-home-y troupe trace R1",
        ] {
            assert!(notice.contains(command), "{command} missing: {notice}");
        }
    }

    #[test]
    fn without_a_run_the_kept_notice_still_says_where_the_home_is() {
        let notice = kept_notice(Path::new("/s"), Path::new("/h"), None, None);
        assert!(
            notice.contains("TROUPE_HOME=/h troupe sessions list"),
            "{notice}"
        );
        assert!(!notice.contains("trace"), "{notice}");
    }
}
