//! The OS sandbox of commands through the real `troupe` binary against the
//! scripted model server: in bypass mode with an allow-all rule, a command
//! still cannot write outside the allowed roots (`touch`, `cp`, a
//! redirection, a Python one-liner), cannot read `/proc/$PPID/environ`, and
//! cannot change Troupe's own files inside the project, as root and as an
//! unprivileged user; writes inside the roots, the spill directory and the
//! session's temporary directory (`TMPDIR`) work; background tasks are
//! confined the same way; `read-only` refuses every write, `off` runs as
//! before; `network = false` stops a loopback TCP connection the default
//! allows; `troupe sandbox status` reports it all.
//!
//! Commands reach their targets through shell variables so the permission
//! layer's analysis cannot recognise them: what stops them here is the
//! kernel. Each command ends by printing a marker, so a test sees that it
//! ran.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Env, describe, run};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};
use troupe_test_support::{Need, require};

/// The unprivileged user of the `setpriv` runs.
const NOBODY: u32 = 65_534;

/// Printed by the last step of every command.
const MARKER: &str = "command-finished";

/// Whether this test process runs as root (needed to switch users).
fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `command` run through `setpriv` as user and group `NOBODY`.
fn as_nobody(command: &Command) -> Command {
    let mut wrapped = Command::new("setpriv");
    wrapped.args([
        format!("--reuid={NOBODY}"),
        format!("--regid={NOBODY}"),
        "--clear-groups".to_owned(),
        "--".to_owned(),
    ]);
    wrapped.arg(command.get_program()).args(command.get_args());
    wrapped.env_clear();
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            wrapped.env(key, value);
        }
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped.stdin(std::process::Stdio::null());
    wrapped
}

/// Gives every file under `dir` to `NOBODY`.
fn give_to_nobody(dir: &Path) {
    let status = Command::new("chown")
        .args([
            "-R",
            &format!("{NOBODY}:{NOBODY}"),
            &dir.display().to_string(),
        ])
        .status()
        .unwrap();
    assert!(status.success(), "chown {}", dir.display());
}

/// A test environment with a user configuration holding `extra` and an
/// allow-all rule, and a directory outside every root that the user running
/// troupe may write.
struct Setup {
    env: Env,
    outside: tempfile::TempDir,
}

impl Setup {
    fn new(extra: &str) -> Self {
        let env = Env::new();
        env.write_user_config(&format!("[permissions]\nallow = [\"Bash\"]\n{extra}"));
        std::fs::write(env.root().join(".troupe/config.toml"), "").unwrap();
        std::fs::write(env.root().join(".mcp.json"), "{}").unwrap();
        Self {
            env,
            outside: tempfile::tempdir().unwrap(),
        }
    }

    fn outside(&self) -> PathBuf {
        self.outside.path().to_path_buf()
    }

    /// Runs one `troupe run --mode bypass` whose model makes `calls` (bash
    /// arguments), one per response, then answers; returns the results the
    /// model saw, in order.
    async fn run(&self, calls: &[Value], unprivileged: bool) -> Vec<String> {
        let mut script = Script::new();
        for call in calls {
            script = script.then(tool_call("bash", call.clone()));
        }
        let server = ScriptedServer::start(script.then(text("done")))
            .await
            .unwrap();
        let mut command = self.env.command(Some(&server));
        command.args(["run", "--json", "--mode", "bypass", "try it"]);
        if unprivileged {
            give_to_nobody(self.env.home.path());
            give_to_nobody(self.env.root());
            give_to_nobody(self.outside.path());
            command = as_nobody(&command);
        }
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        let requests = server.requests();
        assert_eq!(requests.len(), calls.len() + 1, "{}", describe(&output));
        requests[1..]
            .iter()
            .map(|request| request.tool_results().last().unwrap().content.clone())
            .collect()
    }
}

fn bash(command: &str) -> Value {
    json!({ "command": command })
}

/// The command of the main test: every write outside and every change to
/// Troupe's files fails, reading the parent's environment fails, writes
/// inside the roots and the temporary directory work.
fn escape_attempts(outside: &Path, config_dir: &Path) -> String {
    format!(
        "o='{outside}'; c='{config}'; t=.troupe; m=.mcp.json; \
         touch \"$o/touched\"; cp /etc/hostname \"$o/copied\"; echo x > \"$o/redirected\"; \
         python3 -c \"open('$o/python', 'w').write('x')\"; \
         cat /proc/$PPID/environ > /dev/null 2>&1 && echo environ-readable; \
         echo bypass >> \"$t/config.toml\"; echo '{{\"x\": 1}}' > \"$m\"; rm -f \"$m\"; \
         mv \"$t\" moved; echo x > \"$c/config.toml\"; \
         mkdir -p src && echo ok > src/inside.txt; echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
         echo {MARKER}",
        outside = outside.display(),
        config = config_dir.display(),
    )
}

async fn writes_outside_the_roots_are_stopped(unprivileged: bool) {
    let setup = Setup::new("");
    let outside = setup.outside();
    let config_dir = setup.env.user_config_dir();
    let results = setup
        .run(
            &[bash(&escape_attempts(&outside, &config_dir))],
            unprivileged,
        )
        .await;
    let result = &results[0];
    assert!(result.contains(MARKER), "the command ran: {result}");
    for name in ["touched", "copied", "redirected", "python"] {
        assert!(!outside.join(name).exists(), "{name} was written: {result}");
    }
    assert!(!result.contains("environ-readable"), "{result}");
    let root = setup.env.root();
    assert_eq!(
        std::fs::read_to_string(root.join(".troupe/config.toml")).unwrap(),
        ""
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".mcp.json")).unwrap(),
        "{}"
    );
    assert!(!root.join("moved").exists());
    assert!(
        std::fs::read_to_string(config_dir.join("config.toml"))
            .unwrap()
            .starts_with("[permissions]")
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/inside.txt"))
            .ok()
            .as_deref(),
        Some("ok\n"),
        "{result}"
    );
    assert!(result.contains("tmp\n"), "TMPDIR is writable: {result}");
    let temp = tmp_file(&setup.env.data_dir()).expect("the session's temporary directory");
    assert_eq!(std::fs::read_to_string(temp).unwrap(), "tmp\n");
}

/// The `t` file in some session's temporary directory under `data_dir`.
fn tmp_file(data_dir: &Path) -> Option<PathBuf> {
    let spill = data_dir.join("spill");
    std::fs::read_dir(spill)
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("tmp/t"))
        .find(|path| path.exists())
}

#[tokio::test]
async fn writes_outside_the_roots_are_stopped_even_in_bypass_with_an_allow_all_rule() {
    if !require(Need::Landlock) {
        return;
    }
    writes_outside_the_roots_are_stopped(false).await;
}

#[tokio::test]
async fn writes_outside_the_roots_are_stopped_for_an_unprivileged_user() {
    if !require(Need::Landlock) || !is_root() {
        return;
    }
    writes_outside_the_roots_are_stopped(true).await;
}

#[tokio::test]
async fn troupes_files_cannot_be_created_where_they_do_not_exist_yet() {
    if !require(Need::Landlock) {
        return;
    }
    let setup = Setup::new("");
    let root = setup.env.root().to_path_buf();
    std::fs::remove_dir_all(root.join(".troupe")).unwrap();
    std::fs::remove_file(root.join(".mcp.json")).unwrap();
    let create = format!(
        "t=.troupe; m=.mcp.json; mkdir -p \"$t\"; echo 'mode = \"bypass\"' > \"$t/config.toml\"; \
         echo '{{\"mcpServers\": {{}}}}' > \"$m\"; echo {MARKER}"
    );
    let results = setup.run(&[bash(&create)], false).await;
    let result = &results[0];
    assert!(result.contains(MARKER), "the command ran: {result}");
    assert!(!root.join(".troupe/config.toml").exists(), "{result}");
    assert!(!root.join(".mcp.json").exists(), "{result}");
    if troupe_process::os_sandbox::KernelSupport::probe()
        .namespaces
        .is_some()
    {
        // With mounts the root is writable whole: the directory was made
        // empty and kept read-only; the file could be written, and was set
        // aside with nothing lost, and the model is told.
        assert!(root.join(".troupe").is_dir());
        let aside = std::fs::read_to_string(root.join(".mcp.json.rejected")).unwrap();
        assert!(aside.contains("mcpServers"), "{aside}");
        assert!(result.contains("a file Troupe protects"), "{result}");
    }
}

#[tokio::test]
async fn background_tasks_are_confined_too() {
    if !require(Need::Landlock) {
        return;
    }
    let setup = Setup::new("");
    let outside = setup.outside();
    let background = format!(
        "o='{}'; touch \"$o/bg\" 2>/dev/null; \
         if [ -e \"$o/bg\" ]; then echo escaped > marker.tmp; else echo confined > marker.tmp; fi; \
         mv marker.tmp bg-marker",
        outside.display()
    );
    let wait = format!(
        "for i in $(seq 400); do [ -e bg-marker ] && break; sleep 0.05; done; cat bg-marker; echo {MARKER}"
    );
    let results = setup
        .run(
            &[
                json!({ "command": background, "run_in_background": true }),
                bash(&wait),
            ],
            false,
        )
        .await;
    assert!(results[1].contains(MARKER), "{}", results[1]);
    assert!(results[1].contains("confined"), "{}", results[1]);
    assert!(!outside.join("bg").exists());
}

#[tokio::test]
async fn read_only_mode_refuses_every_write() {
    if !require(Need::Landlock) {
        return;
    }
    let setup = Setup::new("[sandbox]\nmode = \"read-only\"\n");
    let results = setup
        .run(
            &[bash(&format!(
                "echo x > inside.txt; echo t > \"$TMPDIR/t\"; cat .mcp.json > /dev/null && echo read-ok; echo {MARKER}"
            ))],
            false,
        )
        .await;
    assert!(results[0].contains(MARKER), "{}", results[0]);
    assert!(results[0].contains("read-ok"), "{}", results[0]);
    assert!(!setup.env.root().join("inside.txt").exists());
    assert!(tmp_file(&setup.env.data_dir()).is_none());
}

#[tokio::test]
async fn off_mode_runs_commands_unconfined() {
    let setup = Setup::new("[sandbox]\nmode = \"off\"\n");
    let outside = setup.outside();
    let results = setup
        .run(
            &[bash(&format!(
                "o='{}'; touch \"$o/touched\"; echo \"tmp=$TMPDIR\"; echo {MARKER}",
                outside.display()
            ))],
            false,
        )
        .await;
    assert!(results[0].contains(MARKER), "{}", results[0]);
    assert!(outside.join("touched").exists(), "{}", results[0]);
    assert!(
        results[0].contains("tmp=\n"),
        "no TMPDIR is set: {}",
        results[0]
    );
}

/// The result of a command that connects to a loopback listener.
async fn connect_from_a_command(extra: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let setup = Setup::new(extra);
    let results = setup
        .run(
            &[bash(&format!(
                "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; \
                 else echo refused; fi; echo {MARKER}"
            ))],
            false,
        )
        .await;
    drop(listener);
    results[0].clone()
}

#[tokio::test]
async fn the_network_is_on_by_default_and_off_with_network_false() {
    let result = connect_from_a_command("").await;
    assert!(
        result.contains(MARKER) && result.contains("connected"),
        "{result}"
    );
    if !require(Need::Landlock) {
        return;
    }
    let result = connect_from_a_command("[sandbox]\nnetwork = false\n").await;
    assert!(
        result.contains(MARKER) && result.contains("refused"),
        "{result}"
    );
}

#[tokio::test]
async fn sandbox_status_says_what_is_enforced() {
    let setup = Setup::new("");
    let mut command = setup.env.command(None);
    command.args(["sandbox", "status"]);
    let output = run(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        stdout.contains("mode: workspace-write; network: on"),
        "{}",
        describe(&output)
    );
    let root = troupe_paths::sandbox::resolve_path(setup.env.root()).unwrap();
    assert!(
        stdout.contains(&format!("  {}\n", root.join(".troupe").display())),
        "{stdout}"
    );
    if Need::Landlock.available() {
        assert!(stdout.contains("Landlock: ABI"), "{stdout}");
        assert!(stdout.contains("enforced: yes"), "{stdout}");
        let data = troupe_paths::sandbox::resolve_path(&setup.env.data_dir()).unwrap();
        let hidden = format!("hidden from commands:\n  {}\n", data.display());
        if troupe_process::os_sandbox::KernelSupport::probe()
            .namespaces
            .is_some()
        {
            assert!(stdout.contains(&hidden), "{stdout}");
        } else {
            assert!(stdout.contains("not hidden from commands"), "{stdout}");
        }
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    } else {
        assert!(stdout.contains("not enforced:"), "{stdout}");
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    }

    let setup = Setup::new("[sandbox]\nmode = \"off\"\n");
    let mut command = setup.env.command(None);
    command.args(["sandbox", "status"]);
    let output = run(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(stdout.contains("commands run unconfined"), "{stdout}");
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
}

/// `git ARGS` in `dir` as the user runs it, outside Troupe.
fn user_git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn a_commands_git_configuration_never_runs_outside_the_sandbox() {
    let setup = Setup::new("");
    let root = setup.env.root().to_path_buf();
    user_git(&root, &["init", "-q"]);
    std::fs::write(root.join("tracked.txt"), "x\n").unwrap();
    user_git(&root, &["add", "tracked.txt"]);
    user_git(&root, &["commit", "-qm", "first"]);
    let config_before = std::fs::read_to_string(root.join(".git/config")).unwrap();
    let marker = setup.outside().join("MARKER");
    let payload = format!("touch {}", marker.display());

    // A command tries every way into git's configuration it can spell
    // (through variables, so that only the sandbox stands in the way).
    if Need::Landlock.available() {
        let attempt = format!(
            "g=.git; k=core.fsmonitor; git config \"$k\" '{payload}'; \
             printf '[core]\\n\\tfsmonitor = {payload}\\n' >> \"$g/config\"; \
             python3 -c \"open('$g/hooks/post-index-change', 'w').write('#!/bin/sh\\n{payload}\\n')\"; \
             ln \"$g/config\" linked-config && echo '[core] hooksPath = /tmp' >> linked-config; \
             echo {MARKER}"
        );
        let results = setup.run(&[bash(&attempt)], false).await;
        assert!(
            results[0].contains(MARKER),
            "the command ran: {}",
            results[0]
        );
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            config_before,
            "{}",
            results[0]
        );
        assert!(!root.join(".git/hooks/post-index-change").exists());
    }

    // Changed by other means: the next run's start reads git status, and
    // runs nothing the configuration names.
    // (A start waits for git status only briefly, and this machine may be
    // busy: runs repeat until one start collected it.)
    user_git(&root, &["config", "core.fsmonitor", &payload]);
    std::fs::write(root.join("untracked.txt"), "y\n").unwrap();
    let mut collected = false;
    for _ in 0..30 {
        let server = ScriptedServer::start(Script::new().then(text("done")))
            .await
            .unwrap();
        let mut command = setup.env.command(Some(&server));
        command.args(["run", "--json", "look"]);
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        assert!(!marker.exists(), "the configured program ran");
        if server.requests()[0]
            .system_text()
            .contains("?? untracked.txt")
        {
            collected = true;
            break;
        }
    }
    assert!(collected, "no run's start collected git status");
    // The configuration is live: a user's own git runs it.
    user_git(&root, &["status", "--short"]);
    assert!(marker.exists());
}

#[tokio::test]
async fn troupes_data_and_configuration_directories_are_hidden_from_commands() {
    if !require(Need::Landlock) {
        return;
    }
    let setup = Setup::new("");
    let data = setup.env.data_dir();
    let config = setup.env.user_config_dir();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("daemon.token"), "secret-token-value").unwrap();
    std::fs::create_dir_all(config.join("skills/tool")).unwrap();
    std::fs::write(config.join("skills/tool/helper.sh"), "echo helper-ran").unwrap();
    let read = format!(
        "d='{data}'; c='{config}'; cat \"$d/daemon.token\"; ls \"$d\"; grep -r . \"$c/config.toml\"; \
         sh \"$c/skills/tool/helper.sh\"; echo spilled > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; echo {MARKER}",
        data = data.display(),
        config = config.display(),
    );
    let results = setup.run(&[bash(&read)], false).await;
    let result = &results[0];
    assert!(result.contains(MARKER), "the command ran: {result}");
    assert!(
        result.contains("helper-ran"),
        "skills stay readable: {result}"
    );
    assert!(
        result.contains("spilled"),
        "the temporary directory works: {result}"
    );
    let mounts = troupe_process::os_sandbox::KernelSupport::probe()
        .namespaces
        .is_some();
    assert_eq!(!result.contains("secret-token-value"), mounts, "{result}");
    assert_eq!(!result.contains("allow = "), mounts, "{result}");
}
