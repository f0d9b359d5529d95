//! How `troupe` is invoked, through the real binary: the prompt from stdin
//! (`troupe run -`) and empty prompts, a relative `TROUPE_HOME`, the demo's
//! own home, `--help` naming only commands that exist, shell completions and
//! the manual page.

use std::process::{Command, Output, Stdio};

use crate::support::{COMMAND_LIMIT, Env, TROUPE, describe, json_lines, run, text};
use troupe_scripted::{Script, ScriptedServer, ServerConfig};

/// Runs `command` with `input` on its stdin, to its end.
async fn run_with_stdin(mut command: Command, input: &str) -> Output {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::support::spawn(command);
    let mut stdin = child.stdin.take().unwrap();
    let input = input.as_bytes().to_vec();
    // Written by its own task so a full pipe cannot stall the test; dropping
    // the handle closes the child's stdin.
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(&input).await
    });
    let output = tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .expect("troupe finishes in time")
        .expect("troupe runs");
    writer.await.unwrap().unwrap();
    output
}

#[tokio::test]
async fn dash_reads_the_prompt_from_stdin() {
    let server = ScriptedServer::start_with(
        Script::new().then(troupe_scripted::text("Read it.")),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "-"]);
    let output = run_with_stdin(command, "Summarise the README\nin two lines\n").await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(text(&output.stdout).trim(), "Read it.");
    let requests = server.requests();
    assert_eq!(
        requests[0].first_user_text().as_deref(),
        Some("Summarise the README\nin two lines"),
        "the whole of stdin without its trailing line break"
    );
}

#[tokio::test]
async fn empty_prompts_are_usage_errors() {
    let server = ScriptedServer::start_with(Script::new(), ServerConfig::non_strict())
        .await
        .unwrap();
    let env = Env::new();
    // An empty stdin for `-` (the command's stdin is /dev/null).
    let mut command = env.command(Some(&server));
    command.args(["run", "-"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("stdin"),
        "{}",
        describe(&output)
    );
    let mut command = env.command(Some(&server));
    command.args(["run", "-"]);
    let output = run_with_stdin(command, " \n").await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    for prompt in ["", "   ", "\n"] {
        let mut command = env.command(Some(&server));
        command.args(["run", prompt]);
        let output = run(command).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{prompt:?}: {}",
            describe(&output)
        );
        assert!(
            text(&output.stderr).contains("the prompt is empty"),
            "{}",
            describe(&output)
        );
    }
    assert_eq!(
        server.request_count(),
        0,
        "no empty prompt reached the model"
    );
}

#[tokio::test]
async fn a_relative_troupe_home_is_resolved_once_and_named() {
    let server = ScriptedServer::start_with(
        Script::new().then(troupe_scripted::text("Done.")),
        ServerConfig::non_strict(),
    )
    .await
    .unwrap();
    let env = Env::new();
    let mut command = env.command_with_home(Some(&server), std::path::Path::new("rel-home"));
    command.args(["run", "--json", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let absolute = env.root().join("rel-home");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "TROUPE_HOME=rel-home is relative; using {}",
            absolute.display()
        )),
        "{stderr}"
    );
    // The session is in the resolved directory.
    let session = crate::support::session_of(&json_lines(&output.stdout));
    let mut command = env.command_with_home(None, &absolute);
    command.args(["sessions", "list", "--json"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        text(&output.stdout).contains(&session),
        "{}",
        describe(&output)
    );
    assert!(
        text(&output.stderr).is_empty(),
        "an absolute TROUPE_HOME gets no notice: {}",
        describe(&output)
    );
}

/// Writes a user configuration file into `env`'s configuration directory.
fn write_user_config(env: &Env, text: &str) {
    let dir = env.home.path().join("config").join("troupe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// `troupe sessions list --json` in `env`'s own data directory.
async fn user_sessions(env: &Env) -> String {
    let mut command = env.command(None);
    command.args(["sessions", "list", "--json"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    text(&output.stdout)
}

#[tokio::test]
async fn the_demo_runs_in_its_own_home_with_default_settings() {
    let env = Env::new();
    write_user_config(&env, "[limits]\nmax_turns = 1\n");
    let mut command = env.command(None);
    command.arg("demo");
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("stats.py is fixed"),
        "{}",
        describe(&output)
    );
    assert_eq!(
        user_sessions(&env).await,
        "",
        "the demo left a session in TROUPE_HOME"
    );
}

#[tokio::test]
async fn the_demo_keeps_its_home_and_says_how_to_look_at_it() {
    let env = Env::new();
    // What the demo keeps goes under the test's own temporary directory.
    let tmp = env.home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut command = env.command(None);
    command.env("TMPDIR", &tmp).args(["demo", "--keep"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = text(&output.stderr);
    let line = |prefix: &str| {
        stderr
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}: {stderr}"))
            .trim()
            .to_string()
    };
    let sample = std::path::PathBuf::from(line("Sample repository kept at "));
    let home = std::path::PathBuf::from(line("The demo's home (its session store) kept at "));
    assert!(
        sample.starts_with(&tmp) && home.starts_with(&tmp),
        "{stderr}"
    );
    let list = format!(
        "  TROUPE_HOME={} troupe sessions list --all",
        home.display()
    );
    assert!(stderr.lines().any(|line| line == list), "{stderr}");
    // The command it names shows the demo's session.
    let mut command = env.command_with_home(None, &home);
    command.args(["sessions", "list", "--json", "--all"]);
    let listed = run(command).await;
    assert_eq!(listed.status.code(), Some(0), "{}", describe(&listed));
    // The session `sessions show` names is the demo's (its forks' too).
    let show = format!("  TROUPE_HOME={} troupe sessions show ", home.display());
    let session = line(&show);
    assert!(
        text(&listed.stdout).contains(&format!("{{\"id\":\"{session}\"")),
        "{session}: {}",
        describe(&listed)
    );
    assert!(sample.join("stats.py").is_file());
    assert_eq!(user_sessions(&env).await, "");
}

/// Runs `troupe ARGS` with no environment beyond `PATH`, which must succeed.
async fn troupe_ok(args: &[&str]) -> String {
    let mut command = Command::new(TROUPE);
    command.args(args).stdin(Stdio::null());
    let output = run(command).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        describe(&output)
    );
    text(&output.stdout)
}

/// The command names listed under `Commands:` in `troupe --help`.
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // Wrapped descriptions are indented further than the names.
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn help_advertises_only_commands_that_exist() {
    let help = troupe_ok(&["--help"]).await;
    let commands = listed_commands(&help);
    for expected in [
        "run",
        "resume",
        "sessions",
        "trace",
        "demo",
        "completions",
        "man",
        "serve",
        "runs",
        "approve",
        "chat",
        "mcp",
    ] {
        assert!(commands.iter().any(|c| c == expected), "{expected}: {help}");
    }
    for command in commands.iter().filter(|c| *c != "help") {
        troupe_ok(&[command, "--help"]).await;
    }
}

#[tokio::test]
async fn completion_scripts_are_generated_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let script = troupe_ok(&["completions", shell]).await;
        assert!(script.contains("run"), "{shell}: {script}");
        assert!(script.contains("sessions"), "{shell}: {script}");
    }
    let mut command = Command::new(TROUPE);
    command.args(["completions", "tcsh"]);
    assert_eq!(run(command).await.status.code(), Some(2));
}

#[tokio::test]
async fn the_man_page_is_roff_and_names_the_subcommands() {
    let page = troupe_ok(&["man"]).await;
    assert!(page.contains(".TH troupe 1"), "{page}");
    for name in ["run", "resume", "sessions", "trace", "demo", "completions"] {
        assert!(page.contains(&format!("troupe\\-{name}")), "{name}: {page}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    troupe_ok(&["man", "--out-dir", out.to_str().unwrap()]).await;
    for file in ["troupe.1", "troupe-run.1", "troupe-sessions-list.1"] {
        let page = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(page.contains(".TH"), "{file}: {page}");
    }
}

/// A daemon's reaper acts for the process that started it alone: named
/// after another process (the variable set by hand or inherited), it exits
/// with code 2 at once and kills nothing; named after its parent, it waits
/// for its input to end, then ends.
#[tokio::test]
async fn a_reaper_named_after_a_process_that_is_not_its_parent_does_nothing() {
    let env = Env::new();
    let mut foreign = env.command(None);
    foreign.env(troupe_process::reaper::REAPER_VAR, "1");
    let output = run_with_stdin(foreign, "").await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(output.stdout.is_empty(), "{}", describe(&output));

    let mut own = env.command(None);
    own.env(
        troupe_process::reaper::REAPER_VAR,
        std::process::id().to_string(),
    );
    let output = run_with_stdin(own, "").await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
}
