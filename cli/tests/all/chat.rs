//! `troupe chat` driven through a real terminal: tmux runs it in a pane,
//! `send-keys` types, `capture-pane` reads the screen. Covered: a turn whose
//! tool call waits for an approval answered at the prompt, a message typed
//! while the agent works reaching its next model call, `/cost`, Esc
//! cancelling a turn (its command killed), Ctrl-C at the idle prompt leaving,
//! the line history kept for the next chat, custom commands with their
//! arguments and `/skills`, `/plan` then `/do`, `/memory` and `/mcp`; through
//! the daemon and embedded.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{COMMAND_LIMIT, Env, stop_daemon};
use serde_json::json;
use troupe_scripted::{Script, ScriptedServer, text, tool_call};
use troupe_test_support::{Need, require};

/// How long the screen may take to show what a test waits for.
const SCREEN_LIMIT: Duration = Duration::from_secs(30);

/// A tmux server of its own, running one `troupe chat` in a 140×50 pane.
struct Pane {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pane {
    /// Starts `command` (its environment and directory included) in a pane;
    /// when it exits the pane shows `[exit CODE]` and stays.
    fn start(command: &Command) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mut line = String::from("env -i TERM=xterm-256color");
        for (name, value) in command.get_envs() {
            if let Some(value) = value {
                line.push_str(&format!(
                    " {}={}",
                    name.to_string_lossy(),
                    quote(&value.to_string_lossy())
                ));
            }
        }
        line.push_str(&format!(
            " {}",
            quote(&command.get_program().to_string_lossy())
        ));
        for arg in command.get_args() {
            line.push_str(&format!(" {}", quote(&arg.to_string_lossy())));
        }
        let cwd = command.get_current_dir().unwrap();
        let shell = format!(
            "cd {} && {line}; echo \"[exit $?]\"; exec cat",
            quote(&cwd.to_string_lossy())
        );
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "chat",
                "-x",
                "140",
                "-y",
                "50",
            ])
            .arg(shell)
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux starts");
        Self { socket, _dir: dir }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Presses keys (tmux key names: `Enter`, `Escape`, `C-c`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Types `text` literally, then Enter.
    fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "chat", "-l", text]);
        self.keys(&["Enter"]);
    }

    /// What the pane shows now (no scrollback), lines joined.
    fn visible(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", "chat"])
    }

    /// The screen and its scrollback, lines joined.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", "chat", "-S", "-500"])
    }

    /// Waits (bounded) until the screen shows `needle` `times` times.
    fn wait_for_times(&self, needle: &str, times: usize) -> String {
        let deadline = Instant::now() + SCREEN_LIMIT;
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= times {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {needle:?} {times} time(s):\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, needle: &str) -> String {
        self.wait_for_times(needle, 1)
    }

    /// Waits (bounded) until the idle prompt has been shown `times` times.
    fn wait_for_prompt(&self, times: usize) {
        let deadline = Instant::now() + SCREEN_LIMIT;
        loop {
            let screen = self.screen();
            let prompts = screen
                .lines()
                .filter(|line| {
                    line.starts_with('›') || (line.starts_with('[') && line.contains("] ›"))
                })
                .count();
            if prompts >= times {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the prompt was not shown {times} time(s):\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn chat_command(env: &Env, server: &ScriptedServer, args: &[&str]) -> Command {
    let mut command = env.command(Some(server));
    command.arg("chat").args(args);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_through_the_daemon_asks_approvals_takes_queued_text_and_counts_cost() {
    if !require(Need::Tmux) {
        return;
    }
    let gate = "while [ ! -e go ]; do sleep 0.02; done; echo opened";
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ))
        .then(text("Wrote **notes.txt**.\n\nAnything else?"))
        .then(tool_call("bash", json!({"command": gate})))
        .then(text("Done, and I used tabs."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let mut command = chat_command(&env, &server, &[]);
    command.env_remove("TROUPE_NO_DAEMON");
    let pane = Pane::start(&command);
    pane.wait_for_prompt(1);

    // A turn whose call needs an approval: asked in place, answered with y.
    pane.line("write the notes");
    // Shown as the diff it would make, with the rule "always" would keep.
    pane.wait_for("write_file wants to change notes.txt:");
    pane.wait_for("+approved");
    pane.wait_for("[a]lways keeps the allow rule `Write(notes.txt)` for the rest of this session");
    pane.wait_for("allow? [y]es / [a]lways / [n]o [reason] / [c]ancel the turn");
    pane.line("y");
    let screen = pane.wait_for("(done · 2 steps");
    assert!(screen.contains("Anything else?"), "{screen}");
    assert!(screen.contains("approval: allow"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "approved\n"
    );

    // Text typed while a command runs goes to the model's next call.
    pane.wait_for_prompt(2);
    pane.line("go on");
    pane.wait_for("bash wants to run");
    // An answer that is none of the choices is asked again.
    pane.line("maybe");
    pane.wait_for("answer y (yes), a (always), n [reason] (no) or c (cancel the turn)");
    pane.line("y");
    pane.wait_for_times("approval: allow", 2);
    pane.line("use tabs");
    pane.wait_for("(queued for the next step)");
    std::fs::write(env.root().join("go"), "").unwrap();
    let screen = pane.wait_for("Done, and I used tabs.");
    assert!(
        screen.contains("» use tabs (sent with the next step)"),
        "{screen}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "no extra turn for the queued text");
    assert!(requests[3].any_user_text_contains("use tabs"));
    assert!(!requests[2].any_user_text_contains("use tabs"));
    // One session: the second message continued the first.
    assert!(requests[2].any_user_text_contains("write the notes"));

    // /cost adds up both turns.
    pane.wait_for_prompt(3);
    pane.line("/cost");
    let screen = pane.wait_for("2 turn(s):");
    assert!(screen.contains("cost: unknown"), "{screen}");

    pane.wait_for_prompt(4);
    pane.keys(&["C-c"]);
    pane.wait_for("[exit 0]");
    stop_daemon(&env.data_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esc_cancels_a_turn_and_its_command_and_the_history_is_kept() {
    if !require(Need::Tmux) {
        return;
    }
    // Unique to this test process, so only its command matches in /proc.
    let marker = format!("sleep 301{:07}", std::process::id());
    let script = Script::new()
        .then(tool_call("bash", json!({"command": marker.clone()})))
        .then(text("Resumed after the cancel."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "bypass"]));
    pane.wait_for_prompt(1);
    pane.line("wait a while");
    pane.wait_for("→ bash");
    pane.keys(&["Escape"]);
    let screen = pane.wait_for("(cancelled ·");
    assert!(screen.contains("cancelling the turn"), "{screen}");
    let left =
        crate::support::wait_for_processes(&marker, COMMAND_LIMIT, |pids| pids.is_empty()).await;
    assert!(left.is_empty(), "the cancelled command is gone: {left:?}");

    // The next message continues the same session with a valid history.
    pane.wait_for_prompt(2);
    pane.line("/mode");
    pane.wait_for("mode: bypass");
    pane.wait_for_prompt(3);
    pane.line("carry on");
    pane.wait_for("Resumed after the cancel.");
    let requests = server.requests();
    assert!(requests[1].any_user_text_contains("wait a while"));
    assert!(requests[1].any_user_text_contains("carry on"));

    pane.wait_for_prompt(4);
    pane.line("/exit");
    pane.wait_for("[exit 0]");

    // The line history is kept for the next chat.
    let history = std::fs::read_to_string(env.data_dir().join("chat_history")).unwrap();
    assert!(history.contains("wait a while"), "{history}");
    assert!(history.contains("carry on"), "{history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_and_sub_agent_lines_in_an_embedded_chat() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(tool_call(
            "agent",
            json!({"description": "part of the work", "prompt": "CHILD-TASK", "fork": true}),
        ))
        .then(text("child report"))
        .then(text("All parts done."))
        .then(text("A fresh start."))
        .then(text("Back in the first conversation."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    // The project's own role files apply once it is trusted.
    env.trust();
    std::fs::create_dir_all(env.root().join(".troupe/agents")).unwrap();
    std::fs::write(
        env.root().join(".troupe/agents/reviewer.md"),
        "---\ndescription: Reviews diffs\ntools: read_file, grep\n---\nReview the diff.\n",
    )
    .unwrap();
    let pane = Pane::start(&chat_command(&env, &server, &[]));
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    let help = command("/help", "/agents");
    assert!(help.contains("/resume ID"), "{help}");
    let agents = command("/agents", "reviewer");
    assert!(
        agents.contains("Reviews diffs (read_file, grep)"),
        "{agents}"
    );
    assert!(agents.contains("explorer"), "{agents}");
    command("/mode plan", "(mode plan from the next message on)");
    let tools = command("/tools", "Tools offered in plan mode:");
    assert!(tools.contains("read_file"), "{tools}");
    assert!(
        !tools.contains("write_file"),
        "plan mode offers no write tool:\n{tools}"
    );
    command("/mode default", "(mode default from the next message on)");
    command("/frobnicate", "unknown command /frobnicate");

    // A fork's lines are labelled with its path.
    let screen = command("split the work", "All parts done.");
    assert!(
        screen.contains("[main/fork-1] finished: finished"),
        "{screen}"
    );
    assert!(screen.contains("→ agent"), "{screen}");
    let first = session_shown(&screen, 0);

    // /clear starts a new session; /resume goes back to one by a prefix.
    command("/clear", "(a new conversation starts");
    let screen = command("hello again", "A fresh start.");
    assert_ne!(session_shown(&screen, 1), first);
    assert!(!server.requests()[3].any_user_text_contains("split the work"));
    command("/sessions", "(continue one with /resume ID)");
    // The banner shows the short id, which names the session.
    assert_eq!(first.len(), 8, "{first}");
    command(
        &format!("/resume {first}"),
        &format!("(continuing session {first})"),
    );
    command("and now?", "Back in the first conversation.");
    assert!(server.requests()[4].any_user_text_contains("split the work"));
    command(
        "/model claude-other",
        "(model claude-other from the next message on)",
    );
    command("/exit", "[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_continue_picks_up_the_projects_latest_session() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(text("Older done."))
        .then(text("Latest done."))
        .then(text("Picked up again."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let mut started = Vec::new();
    for prompt in ["older task", "latest task"] {
        let output = crate::support::run({
            let mut command = env.command(Some(&server));
            command.args(["run", prompt]);
            command
        })
        .await;
        assert_eq!(output.status.code(), Some(0));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        // Start-up warnings (a project that is not a git repository) come
        // first.
        let first = stderr
            .lines()
            .find(|line| line.starts_with("session "))
            .unwrap_or_default()
            .to_string();
        let session = first
            .strip_prefix("session ")
            .and_then(|rest| rest.split_once("  run "))
            .map(|(session, _)| session.to_string())
            .unwrap_or_else(|| panic!("{stderr}"));
        started.push(session);
    }
    let pane = Pane::start(&chat_command(&env, &server, &["--continue"]));
    pane.wait_for(&format!("(continuing session {})", started[1]));
    pane.wait_for_prompt(1);
    pane.line("and now?");
    pane.wait_for("Picked up again.");
    assert!(server.requests()[2].any_user_text_contains("latest task"));
    assert!(!server.requests()[2].any_user_text_contains("older task"));
    pane.wait_for_prompt(2);
    pane.line("/exit");
    pane.wait_for("[exit 0]");
}

/// The id of the `index`th session the screen announced.
fn session_shown(screen: &str, index: usize) -> String {
    screen
        .lines()
        .filter_map(|line| line.strip_prefix("(session "))
        .map(|rest| rest.trim_end_matches(')').to_string())
        .nth(index)
        .unwrap_or_else(|| panic!("no session {index} on the screen:\n{screen}"))
}

#[test]
fn without_a_terminal_chat_is_a_usage_error_that_names_troupe_run() {
    let env = Env::new();
    let output = env.command(None).arg("chat").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(stderr.contains("troupe run"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_a_turn_and_closing_the_terminal_cancels_the_next_cleanly() {
    if !require(Need::Tmux) {
        return;
    }
    let first = format!("sleep 302{:07}", std::process::id());
    let second = format!("sleep 303{:07}", std::process::id());
    let script = Script::new()
        .then(tool_call("bash", json!({"command": first.clone()})))
        .then(tool_call("bash", json!({"command": second.clone()})))
        .then(text("not reached"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "bypass"]));
    pane.wait_for_prompt(1);
    pane.line("first");
    pane.wait_for("→ bash");
    crate::support::wait_for_processes(&first, COMMAND_LIMIT, |pids| !pids.is_empty()).await;
    pane.keys(&["C-c"]);
    let screen = pane.wait_for("(cancelled ·");
    assert!(screen.contains("cancelling the turn"), "{screen}");
    let session = session_shown(&screen, 0);

    pane.wait_for_prompt(2);
    pane.line("second");
    pane.wait_for_times("→ bash", 2);
    crate::support::wait_for_processes(&second, COMMAND_LIMIT, |pids| !pids.is_empty()).await;
    // The terminal goes away (SIGHUP): the turn is cancelled, the process
    // exits and lets go of the store, and nothing it started survives.
    drop(pane);
    crate::support::wait_until_unlocked(&env.data_dir(), COMMAND_LIMIT)
        .await
        .unwrap();
    for marker in [&first, &second] {
        let left =
            crate::support::wait_for_processes(marker, COMMAND_LIMIT, |pids| pids.is_empty()).await;
        assert!(left.is_empty(), "{marker} is gone: {left:?}");
    }
    // Both turns are stored with every call answered.
    let history = crate::support::export(&env, &session).await;
    let texts: Vec<String> = history.iter().map(|m| m.text()).collect();
    assert!(texts.iter().any(|t| t == "first"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "second"), "{texts:?}");
    troupe_agent::validate_history(&history).unwrap();
    let calls = history.iter().flat_map(|m| m.tool_calls()).count();
    let results = history.iter().flat_map(|m| m.tool_results_iter()).count();
    assert_eq!((calls, results), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_sequences_from_the_model_never_reach_the_terminal() {
    if !require(Need::Tmux) {
        return;
    }
    let hostile =
        "Fine.\u{1b}]2;pwned\u{7}\u{1b}]52;c;ZWNobyBoaQ==\u{7}\u{1b}[2J\u{1b}[H then more";
    let script = Script::new()
        .then(tool_call(
            "bash",
            json!({"command": "printf 'out\\033[2J\\033]2;owned\\007put\\n'"}),
        ))
        .then(text(hostile));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "bypass"]));
    pane.wait_for_prompt(1);
    pane.line("say it");
    let screen = pane.wait_for("then more");
    // Nothing was cleared, no title was set, the text is all there.
    assert!(screen.contains("/help lists commands"), "{screen}");
    assert!(screen.contains("Fine."), "{screen}");
    assert!(
        screen.contains("output") || screen.contains("out^?") || screen.contains("out"),
        "{screen}"
    );
    let title = pane.tmux(&["display-message", "-p", "-t", "chat", "#{pane_title}"]);
    assert!(
        !title.contains("pwned") && !title.contains("owned"),
        "{title}"
    );
    pane.wait_for_prompt(2);
    pane.keys(&["C-d"]);
    pane.wait_for("[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_asks_once_to_trust_a_project_whose_configuration_needs_it() {
    if !require(Need::Tmux) {
        return;
    }
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    let env = Env::new();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[permissions]\nmode = \"bypass\"\n[[hooks.Stop]]\ncommand = \"./notify.sh\"\n",
    )
    .unwrap();
    std::fs::write(
        env.root().join(".mcp.json"),
        r#"{"mcpServers": {"web": {"command": "web-server-absent", "args": ["--port", "9"]}}}"#,
    )
    .unwrap();
    let pane = Pane::start(&chat_command(&env, &server, &[]));
    let screen = pane.wait_for("(review its files first)? [y/N]");
    // Each setting under its file, with the commands it would run.
    assert!(
        screen.contains(
            "trust: .troupe/config.toml: permissions.mode = \"bypass\", hooks.Stop (runs \
             `./notify.sh`); .mcp.json: server web (runs `web-server-absent --port 9`)."
        ),
        "{screen}"
    );
    pane.line("y");
    pane.wait_for("(trusted ");
    pane.wait_for_prompt(1);
    pane.line("/mode");
    pane.wait_for("mode: bypass");
    pane.wait_for_prompt(2);
    pane.keys(&["C-d"]);
    pane.wait_for("[exit 0]");
    let trusted = std::fs::read_to_string(env.data_dir().join("trusted.toml")).unwrap();
    let root = std::fs::canonicalize(env.root()).unwrap();
    assert!(trusted.contains(&*root.to_string_lossy()), "{trusted}");

    // Trusted now: the next chat does not ask again.
    let pane = Pane::start(&chat_command(&env, &server, &[]));
    pane.wait_for_prompt(1);
    assert!(!pane.screen().contains("[y/N]"));
    pane.keys(&["C-d"]);
    pane.wait_for("[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_commands_expand_their_arguments_and_skills_are_listed() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new().then(text("Reviewed as asked."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    // The project's own skills apply once it is trusted.
    env.trust();
    let commands = env.root().join(".troupe/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("review.md"),
        "---\ndescription: Review one file\n---\nREVIEW-CMD: read $ARGUMENTS and list its bugs.\n",
    )
    .unwrap();
    // Named like a built-in: never shadows it, and says so.
    std::fs::write(commands.join("cost.md"), "not the real cost\n").unwrap();
    let user_commands = env.home.path().join("config/troupe/commands");
    std::fs::create_dir_all(&user_commands).unwrap();
    std::fs::write(user_commands.join("review.md"), "USER-REVIEW $ARGUMENTS\n").unwrap();
    let skill = env.root().join(".troupe/skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\ndescription: Deploy to staging\n---\nmake deploy\n",
    )
    .unwrap();

    let pane = Pane::start(&chat_command(&env, &server, &[]));
    // The whole line, not only its start: the screen may be read while the
    // line is being written.
    let screen = pane.wait_for(".troupe/commands/cost.md: /cost is a built-in command");
    assert!(screen.contains("custom command ignored"), "{screen}");
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    let help = command("/help", "Custom commands");
    assert!(help.contains("/review [ARGS]  Review one file"), "{help}");
    assert!(help.contains("/skills"), "{help}");
    let skills = command("/skills", "Skills (the agent loads them");
    assert!(
        skills.contains("deploy       Deploy to staging"),
        "{skills}"
    );
    command("/review src/lib.rs", "Reviewed as asked.");
    let request = &server.requests()[0];
    assert_eq!(
        request.last_user_text().as_deref(),
        Some("REVIEW-CMD: read src/lib.rs and list its bugs.")
    );
    command("/cost", "1 turn(s)");
    command("/exit", "[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_then_do_plans_with_read_only_tools_and_carries_out_in_the_mode_before() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(text("PLAN: 1. change lib.rs"))
        .then(text("Carried out."));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "accept-edits"]));
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    command("/do", "(not in plan mode: /plan starts planning)");
    command("/plan", "(plan mode from the next message on");
    command("/plan", "(already in plan mode; /do carries out the plan)");
    let screen = command("how do we split lib.rs?", "PLAN: 1. change lib.rs");
    assert!(screen.contains("[plan] ›"), "{screen}");
    let screen = command("/do keep the tests", "Carried out.");
    assert!(
        screen.contains("(mode accept-edits again; carrying out the plan)"),
        "{screen}"
    );
    command("/mode", "mode: accept-edits");
    command("/exit", "[exit 0]");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let planning = &requests[0];
    assert!(
        planning
            .system_text()
            .contains("# Plan mode\nYou are in plan mode")
    );
    let tools = planning.tool_names();
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"write_file".to_owned()) && !tools.contains(&"bash".to_owned()));
    let doing = &requests[1];
    assert_eq!(
        doing.last_user_text().as_deref(),
        Some("Carry out the plan you made above, step by step.\n\nkeep the tests")
    );
    assert!(doing.any_user_text_contains("how do we split lib.rs?"));
    assert!(!doing.system_text().contains("# Plan mode"));
    assert!(doing.tool_names().contains(&"write_file".to_owned()));
    // Both turns share the cached stable block.
    assert_eq!(planning.body["system"][0], doing.body["system"][0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_shows_and_adds_notes_and_mcp_lists_the_servers() {
    if !require(Need::Tmux) {
        return;
    }
    let server = ScriptedServer::start(Script::new()).await.unwrap();
    let env = Env::new();
    env.trust();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[mcp_servers.quits]\ncommand = \"sh\"\nargs = [\"-c\", \"echo cannot start >&2; exit 3\"]\n",
    )
    .unwrap();
    let pane = Pane::start(&chat_command(&env, &server, &[]));
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    command("/memory", "No project memory yet");
    command("/memory Deploys go through make ship.", "(remembered in");
    assert_eq!(
        std::fs::read_to_string(env.root().join(".troupe/memory.md")).unwrap(),
        "- Deploys go through make ship.\n"
    );
    let screen = command(
        "/memory",
        "this conversation keeps the memory it started with",
    );
    assert!(
        screen.contains("\n- Deploys go through make ship."),
        "{screen}"
    );
    let screen = command("/mcp", "last error:");
    assert!(screen.contains("quits  failed  stdio"), "{screen}");
    assert!(screen.contains("cannot start"), "{screen}");
    command("/exit", "[exit 0]");
    assert!(server.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_an_embedded_chat_lets_a_background_memory_update_finish() {
    if !require(Need::Tmux) {
        return;
    }
    let main = |response| {
        troupe_scripted::Turn::new(response)
            .when(troupe_scripted::Matcher::system_contains("You are Troupe"))
    };
    let mut script = Script::new();
    for i in 0..4 {
        script = script.then(main(tool_call(
            "glob",
            json!({ "pattern": format!("*{i}") }),
        )));
    }
    let script = script.then(main(text("Looked around."))).then(
        // Slower than the person leaving: the chat must wait for it.
        troupe_scripted::Turn::new(text("- kept\n- learned\n"))
            .when(troupe_scripted::Matcher::system_contains(
                "You maintain the project memory",
            ))
            .with_delay(Duration::from_millis(500)),
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    std::fs::write(env.root().join(".troupe/memory.md"), "- kept\n").unwrap();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "bypass"]));
    pane.wait_for_prompt(1);
    pane.line("look around");
    pane.wait_for("Looked around.");
    pane.wait_for_prompt(2);
    pane.line("/exit");
    pane.wait_for("[exit 0]");
    assert_eq!(
        std::fs::read_to_string(env.root().join(".troupe/memory.md")).unwrap(),
        "- kept\n- learned\n"
    );
}

/// The process id `daemon.json` in `data_dir` names, once it names one.
fn daemon_pid(data_dir: &std::path::Path) -> u32 {
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(data_dir.join("daemon.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|state| state["pid"].as_u64())
        {
            return pid as u32;
        }
        assert!(Instant::now() < deadline, "daemon.json names a daemon");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until process `pid` has exited.
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + COMMAND_LIMIT;
    while troupe_process::process_is_alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} exits");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_chat_keeps_its_daemon_and_carries_on_in_its_session_when_the_daemon_is_gone() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(text("first answer"))
        .then(text("second answer"))
        .then(text("third answer"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let data = env.data_dir();
    let mut command = chat_command(&env, &server, &[]);
    command
        .env_remove("TROUPE_NO_DAEMON")
        .env("TROUPE_DAEMON_IDLE_SECS", "1");
    let pane = Pane::start(&command);
    pane.wait_for_prompt(1);
    pane.line("remember the word heron");
    pane.wait_for("first answer");
    pane.wait_for_prompt(2);
    let first = daemon_pid(&data);

    // Three idle limits with nothing to do but an open chat: the chat
    // counts as a client, so its daemon stays.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        troupe_process::process_is_alive(first),
        "the daemon stays while a chat is open:\n{}",
        std::fs::read_to_string(data.join("daemon.log")).unwrap_or_default()
    );

    // Stopped the way the idle limit or a person stops it: the next message
    // starts a daemon again and lands in the same session.
    // SAFETY: plain signal delivery to the test's own daemon.
    unsafe { libc::kill(first as i32, libc::SIGTERM) };
    wait_gone(first);
    pane.line("which word?");
    pane.wait_for("second answer");
    pane.wait_for_prompt(3);
    let second = daemon_pid(&data);
    assert_ne!(second, first, "a new daemon answered");

    // Killed outright, leaving its daemon.json behind: the same again.
    // SAFETY: as above.
    unsafe { libc::kill(second as i32, libc::SIGKILL) };
    wait_gone(second);
    pane.line("and again?");
    let screen = pane.wait_for("third answer");
    pane.wait_for_prompt(4);
    assert_ne!(daemon_pid(&data), second, "a third daemon answered");

    // One session throughout: shown once, and every request carries the
    // history of the first message.
    assert_eq!(screen.matches("(session ").count(), 1, "{screen}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].any_user_text_contains("remember the word heron"));
    assert!(requests[2].any_user_text_contains("which word?"));
    assert!(!screen.contains("does not answer"), "{screen}");

    // Once the chat has gone, its daemon leaves after its idle limit.
    let last = daemon_pid(&data);
    pane.keys(&["C-c"]);
    pane.wait_for("[exit 0]");
    wait_gone(last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_starts_with_a_banner_renders_answers_and_ctrl_l_clears_the_screen() {
    if !require(Need::Tmux) {
        return;
    }
    let answer = "# Result\n\nFirst paragraph.\n\nSee [the guide](https://guide.example/g).\n";
    let server = ScriptedServer::start(Script::new().then(text(answer)))
        .await
        .unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "accept-edits"]));
    let root = std::fs::canonicalize(env.root()).unwrap();
    let banner = pane.wait_for("troupe chat · model ");
    let first = banner
        .lines()
        .find(|line| line.starts_with("troupe chat · model "))
        .unwrap();
    assert!(
        first.ends_with(&format!("· mode accept-edits · project {}", root.display())),
        "{banner}"
    );
    pane.wait_for_prompt(1);

    pane.line("report");
    let screen = pane.wait_for("(done · 1 step");
    let lines: Vec<&str> = screen.lines().collect();
    // The heading at the left margin, blank lines between blocks, the
    // link's target shown.
    let heading = lines
        .iter()
        .position(|line| line.trim_end() == "Result")
        .unwrap_or_else(|| panic!("the heading starts its line:\n{screen}"));
    assert_eq!(lines[heading + 1].trim(), "", "{screen}");
    assert_eq!(
        lines[heading + 2].trim_end(),
        "First paragraph.",
        "{screen}"
    );
    assert_eq!(lines[heading + 3].trim(), "", "{screen}");
    assert!(
        lines[heading + 4].contains("See the guide (https://guide.example/g)."),
        "{screen}"
    );

    // Ctrl-L at the prompt clears the screen.
    pane.wait_for_prompt(2);
    pane.keys(&["C-l"]);
    let deadline = Instant::now() + SCREEN_LIMIT;
    while pane.visible().contains("First paragraph.") {
        assert!(
            Instant::now() < deadline,
            "Ctrl-L did not clear:\n{}",
            pane.visible()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    pane.keys(&["C-d"]);
    pane.wait_for("[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_without_a_provider_says_so_as_it_starts() {
    if !require(Need::Tmux) {
        return;
    }
    let env = Env::new();
    let mut command = env.command(None);
    command.arg("chat");
    let pane = Pane::start(&command);
    let screen = pane.wait_for("troupe chat · no model");
    assert!(
        screen.contains("troupe: no provider configured"),
        "{screen}"
    );
    pane.wait_for_prompt(1);
    pane.keys(&["C-d"]);
    pane.wait_for("[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_lists_the_turns_and_cuts_the_conversation_of_an_embedded_chat() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(text("ANSWER-ONE"))
        .then(text("ANSWER-TWO"))
        .then(text("ANSWER-THREE"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let pane = Pane::start(&chat_command(&env, &server, &[]));
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    command("/rewind", "(nothing to rewind: no conversation yet)");
    command("TURN-ONE", "ANSWER-ONE");
    command("TURN-TWO", "ANSWER-TWO");
    let listed = command("/rewind", "(go back to the end of a turn with /rewind N)");
    assert!(
        listed.contains("TURN-ONE") && listed.contains("TURN-TWO"),
        "{listed}"
    );
    command("/rewind two", "/rewind takes a turn number");
    let done = command("/rewind 1 conversation", "Rewound session");
    assert!(done.contains("1 run(s) undone"), "{done}");
    // The session stayed in this chat's memory: the next turn reads the cut
    // history from the store, with the note.
    command("and now", "ANSWER-THREE");
    let request = server.requests().pop().unwrap();
    let sent = serde_json::to_string(request.messages()).unwrap();
    assert!(
        sent.contains("TURN-ONE") && sent.contains("ANSWER-ONE"),
        "{sent}"
    );
    assert!(
        !sent.contains("TURN-TWO") && !sent.contains("ANSWER-TWO"),
        "{sent}"
    );
    assert!(sent.contains("rewound to the end of prompt 1"), "{sent}");
    command("/exit", "[exit 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_and_rewind_in_a_chat_bring_the_files_back_and_forth() {
    if !require(Need::Tmux) {
        return;
    }
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "A\n"}),
        ))
        .then(text("WROTE-A"))
        .then(tool_call(
            "bash",
            json!({"command": "rm a.txt && echo x > b.txt"}),
        ))
        .then(text("SWAPPED"))
        .then(text("BACK-AT-ONE"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let root = env.root().to_path_buf();
    let pane = Pane::start(&chat_command(&env, &server, &["--mode", "bypass"]));
    let mut prompts = 1;
    let mut command = |line: &str, expect: &str| {
        pane.wait_for_prompt(prompts);
        pane.line(line);
        prompts += 1;
        pane.wait_for(expect)
    };
    command("/undo", "(nothing to undo: no conversation yet)");
    command("write a", "WROTE-A");
    command("swap", "SWAPPED");
    let listed = command("/rewind", "(go back to the end of a turn with /rewind N)");
    assert!(listed.contains("files each run changed"), "{listed}");
    let undone = command("/undo", "files:");
    assert!(undone.contains("D b.txt"), "{undone}");
    assert!(root.join("a.txt").exists() && !root.join("b.txt").exists());
    command("/undo redo", "brings back the files");
    assert!(!root.join("a.txt").exists() && root.join("b.txt").exists());
    command("/undo sideways", "/undo takes nothing or `redo`");
    let rewound = command("/rewind 1", "Rewound session");
    assert!(
        rewound.contains("the files: 1 added, 1 removed"),
        "{rewound}"
    );
    assert!(root.join("a.txt").exists() && !root.join("b.txt").exists());
    command("and now", "BACK-AT-ONE");
    let sent = serde_json::to_string(server.requests().pop().unwrap().messages()).unwrap();
    assert!(
        !sent.contains("rm a.txt") && sent.contains("files were restored"),
        "{sent}"
    );
    command("/exit", "[exit 0]");
}
