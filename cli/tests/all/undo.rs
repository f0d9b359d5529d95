//! `troupe undo` through the real binary against the scripted model server:
//! a session's first run writes `a.txt` with `write_file`, its second runs
//! `rm a.txt && echo x > b.txt`; undo brings back the state before the
//! second run, a second undo the state before the first, `--redo` the
//! state the last undo replaced; the repository's own `.git` is never
//! written. Files changed outside are refused without `--force`; a run's
//! `checkpoint_created` events and `troupe checkpoints list` show what
//! was taken; without `--yes` and a terminal nothing changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Env, describe, json_lines, run, session_of, text};
use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text as say, tool_call};

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}

fn git(root: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(["-c", "user.name=U", "-c", "user.email=u@example.com"])
        .args(args)
        .current_dir(root)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// `troupe ARGS`, embedded.
async fn troupe(env: &Env, server: Option<&ScriptedServer>, args: &[&str]) -> Output {
    troupe_via(env, server, args, Through::Embedded).await
}

/// Where a command's work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Through {
    /// In the command's own process.
    Embedded,
    /// By a daemon (started on demand by `run`, found by the others).
    Daemon,
}

fn command_via(
    env: &Env,
    server: Option<&ScriptedServer>,
    args: &[&str],
    through: Through,
) -> std::process::Command {
    let mut command = env.command(server);
    if through == Through::Daemon {
        command
            .env_remove("TROUPE_NO_DAEMON")
            .env("TROUPE_DAEMON_IDLE_SECS", "60");
    }
    command.args(args);
    command
}

async fn troupe_via(
    env: &Env,
    server: Option<&ScriptedServer>,
    args: &[&str],
    through: Through,
) -> Output {
    run(command_via(env, server, args, through)).await
}

async fn ok(env: &Env, server: Option<&ScriptedServer>, args: &[&str]) -> String {
    ok_via(env, server, args, Through::Embedded).await
}

async fn ok_via(
    env: &Env,
    server: Option<&ScriptedServer>,
    args: &[&str],
    through: Through,
) -> String {
    let output = troupe_via(env, server, args, through).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        describe(&output)
    );
    text(&output.stdout)
}

/// A session of two runs in a git repository: the first writes `a.txt`,
/// the second runs `rm a.txt && echo x > b.txt`. Returns the session id and
/// each run's events.
async fn two_runs(env: &Env) -> (String, Vec<Value>, Vec<Value>) {
    two_runs_via(env, Through::Embedded).await
}

async fn two_runs_via(env: &Env, through: Through) -> (String, Vec<Value>, Vec<Value>) {
    let root = env.root();
    std::fs::write(root.join("README"), "hello\n").unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "first"]);
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "write_file",
                json!({"path": "a.txt", "content": "A\n"}),
            ))
            .then(say("Wrote a.txt."))
            .then(tool_call(
                "bash",
                json!({"command": "rm a.txt && echo x > b.txt"}),
            ))
            .then(say("Swapped.")),
    )
    .await
    .unwrap();
    let first = json_lines(
        ok_via(
            env,
            Some(&server),
            &["run", "--json", "--mode", "bypass", "write a"],
            through,
        )
        .await
        .as_bytes(),
    );
    let session = session_of(&first);
    let second = json_lines(
        ok_via(
            env,
            Some(&server),
            &["resume", &session, "--json", "--mode", "bypass", "swap"],
            through,
        )
        .await
        .as_bytes(),
    );
    (session, first, second)
}

fn checkpoint_events(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| event["type"] == "checkpoint_created")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_twice_then_redo_walks_the_files_back_and_forth_and_leaves_git_alone() {
    let env = Env::new();
    let (session, first, second) = two_runs(&env).await;
    let root = env.root();
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "x\n");
    assert!(!root.join("a.txt").exists());
    // Each run's writing turn was preceded by a checkpoint.
    let (made_first, made_second) = (checkpoint_events(&first), checkpoint_events(&second));
    assert_eq!(made_first.len(), 1, "{first:?}");
    assert_eq!(made_first[0]["number"], 1);
    assert_eq!(made_second.len(), 1, "{second:?}");
    let dot_git = tree(&root.join(".git"));

    let undone = ok(&env, None, &["undo", &session, "--yes"]).await;
    assert!(
        undone.contains("A a.txt") && undone.contains("D b.txt"),
        "{undone}"
    );
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A\n");
    assert!(!root.join("b.txt").exists());

    let output = ok(&env, None, &["undo", &session, "--yes", "--json"]).await;
    let report: Value = serde_json::from_str(output.trim()).unwrap();
    assert_eq!(report["action"], "undo");
    assert_eq!(report["applied"], true);
    assert!(!root.join("a.txt").exists() && !root.join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("README")).unwrap(),
        "hello\n"
    );

    // Nothing is left to undo: a clear refusal that changes nothing.
    let refused = troupe(&env, None, &["undo", &session, "--yes"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(
        text(&refused.stderr).contains("no turn that changed files"),
        "{}",
        describe(&refused)
    );

    ok(&env, None, &["undo", &session, "--redo", "--yes"]).await;
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A\n");
    assert!(!root.join("b.txt").exists());
    ok(&env, None, &["undo", &session, "--redo", "--yes"]).await;
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "x\n");
    assert!(!root.join("a.txt").exists());

    assert_eq!(
        tree(&root.join(".git")),
        dot_git,
        "the repository's .git changed"
    );

    // The listing names every checkpoint: two turns, two run ends, two
    // undos, two redos.
    let listed = ok(&env, None, &["checkpoints", "list", &session, "--json"]).await;
    let kinds: Vec<String> = json_lines(listed.as_bytes())
        .iter()
        .map(|line| line["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "turn",
            "run end",
            "turn",
            "run end",
            "before undo",
            "before undo",
            "before redo",
            "before redo"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_changed_outside_are_not_overwritten_without_force_and_no_terminal_means_no_change() {
    let env = Env::new();
    let (session, _, _) = two_runs(&env).await;
    let root = env.root();
    // Without --yes and without a terminal: the plan is shown, nothing moves.
    let planned = troupe(&env, None, &["undo", &session]).await;
    assert_eq!(planned.status.code(), Some(2), "{}", describe(&planned));
    assert!(
        text(&planned.stdout).contains("A a.txt"),
        "{}",
        describe(&planned)
    );
    assert!(
        text(&planned.stderr).contains("--yes"),
        "{}",
        describe(&planned)
    );
    assert!(root.join("b.txt").exists() && !root.join("a.txt").exists());
    // The user edits b.txt after the run: the undo would remove it.
    std::fs::write(root.join("b.txt"), "mine\n").unwrap();
    let refused = troupe(&env, None, &["undo", &session, "--yes"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    let said = text(&refused.stderr);
    assert!(said.contains("b.txt") && said.contains("--force"), "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "mine\n"
    );
    // --force restores over it; --redo brings the edited file back.
    ok(&env, None, &["undo", &session, "--yes", "--force"]).await;
    assert!(!root.join("b.txt").exists());
    ok(&env, None, &["undo", &session, "--redo", "--yes"]).await;
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "mine\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checkpoints_off_no_checkpoint_is_taken_and_undo_says_why() {
    let env = Env::new();
    env.write_user_config("[checkpoints]\nenabled = false\n");
    let (session, first, second) = two_runs(&env).await;
    assert!(checkpoint_events(&first).is_empty() && checkpoint_events(&second).is_empty());
    let refused = troupe(&env, None, &["undo", &session, "--yes"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(
        text(&refused.stderr).contains("no checkpoints"),
        "{}",
        describe(&refused)
    );
    assert!(!env.data_dir().join("checkpoints").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_session_drops_its_checkpoints() {
    let env = Env::new();
    let (session, _, _) = two_runs(&env).await;
    let listed = ok(&env, None, &["checkpoints", "list", &session, "--json"]).await;
    assert_eq!(json_lines(listed.as_bytes()).len(), 4, "{listed}");
    assert_eq!(refs_of(&env, &session), 4);
    ok(&env, None, &["sessions", "rm", &session]).await;
    assert_eq!(refs_of(&env, &session), 0);
}

/// The number of checkpoint refs of `session` in the data directory's only
/// store.
fn refs_of(env: &Env, session: &str) -> usize {
    let dir = std::fs::read_dir(env.data_dir().join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "git"))
        .unwrap();
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&dir)
        .args(["for-each-ref", &format!("refs/troupe/{session}/")])
        .output()
        .unwrap();
    text(&out.stdout).lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_daemon_undo_refuses_a_running_session_and_orphaned_checkpoints_are_swept() {
    let env = Env::new();
    let data = env.data_dir();
    let (session, _, _) = two_runs_via(&env, Through::Daemon).await;
    let root = env.root().to_path_buf();
    // Checkpoints of a session the store does not hold: swept by the
    // daemon's retention pass, which runs when it starts.
    crate::support::stop_daemon(&data);
    let store = troupe_checkpoint::CheckpointStore::open(&data, &root)
        .await
        .unwrap();
    store
        .snapshot(troupe_checkpoint::SnapshotMeta {
            session: "gone-0193".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(refs_of(&env, "gone-0193"), 1);

    // A run in progress on the session (its command waits for a file
    // outside the project, so the run changes nothing there).
    let go = env.home.path().join("go");
    let gate = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("bash", json!({"command": gate})))
            .then(say("Went.")),
    )
    .await
    .unwrap();
    let mut running = command_via(
        &env,
        Some(&server),
        &["resume", &session, "--json", "--mode", "bypass", "wait"],
        Through::Daemon,
    );
    running.stdout(std::process::Stdio::piped());
    let mut child = crate::support::spawn(running);
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let started = tokio::time::timeout(crate::support::COMMAND_LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("\"tool_started\"") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(started);
    let refused = troupe_via(&env, None, &["undo", &session, "--yes"], Through::Daemon).await;
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(
        text(&refused.stderr).contains("in progress"),
        "{}",
        describe(&refused)
    );
    assert!(root.join("b.txt").exists() && !root.join("a.txt").exists());
    std::fs::write(&go, "").unwrap();
    let status = tokio::time::timeout(crate::support::COMMAND_LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    // The daemon's first retention pass dropped the orphan.
    let deadline = std::time::Instant::now() + crate::support::COMMAND_LIMIT;
    while refs_of(&env, "gone-0193") != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan's checkpoints stay"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // The run ended: the daemon undoes. The last run changed nothing (its
    // command only waited), so the undo goes back to before the swap.
    let undone = ok_via(&env, None, &["undo", &session, "--yes"], Through::Daemon).await;
    assert!(
        undone.contains("A a.txt") && undone.contains("D b.txt"),
        "{undone}"
    );
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A\n");
    assert!(!root.join("b.txt").exists());
    let listed = ok_via(
        &env,
        None,
        &["checkpoints", "list", &session],
        Through::Daemon,
    )
    .await;
    assert!(
        listed.contains("before undo") && listed.contains("checkpoint store takes"),
        "{listed}"
    );
    crate::support::stop_daemon(&data);
}

/// A run whose main agent starts a sub-agent that writes `r.txt`, then
/// writes `m.txt` itself and, when `main_edits_child_file`, `r.txt` too.
async fn run_with_a_sub_agent(env: &Env, main_edits_child_file: bool) -> String {
    use troupe_scripted::{Matcher, Turn};
    let main = |action| Turn::new(action).when(Matcher::first_user_contains("delegate"));
    let child = |action| Turn::new(action).when(Matcher::first_user_contains("CHILD"));
    let mut script = Script::new()
        .then(main(tool_call(
            "agent",
            json!({"description": "write r", "prompt": "CHILD: write r.txt"}),
        )))
        .then(child(tool_call(
            "write_file",
            json!({"path": "r.txt", "content": "R\n"}),
        )))
        .then(child(say("r written")))
        .then(main(tool_call(
            "write_file",
            json!({"path": "m.txt", "content": "M\n"}),
        )));
    if main_edits_child_file {
        script = script.then(main(tool_call(
            "write_file",
            json!({"path": "r.txt", "content": "main's R\n"}),
        )));
    }
    let server = ScriptedServer::start(script.then(main(say("all done"))))
        .await
        .unwrap();
    let events = json_lines(
        ok(
            env,
            Some(&server),
            &["run", "--json", "--mode", "bypass", "delegate"],
        )
        .await
        .as_bytes(),
    );
    let agents: Vec<&str> = checkpoint_events(&events)
        .iter()
        .map(|event| event["agent_path"].as_str().unwrap())
        .collect();
    assert!(
        agents.contains(&"main/general-1") && agents.contains(&"main"),
        "{agents:?}"
    );
    session_of(&events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agents_turn_is_undone_alone_unless_a_later_turn_changed_its_files() {
    let env = Env::new();
    let session = run_with_a_sub_agent(&env, false).await;
    let root = env.root();
    let undone = ok(
        &env,
        None,
        &["undo", &session, "--agent", "main/general-1", "--yes"],
    )
    .await;
    assert!(
        undone.contains("D r.txt") && !undone.contains("m.txt"),
        "{undone}"
    );
    assert!(!root.join("r.txt").exists());
    assert_eq!(std::fs::read_to_string(root.join("m.txt")).unwrap(), "M\n");
    // The sub-agent has nothing left; --redo brings its file back.
    let refused = troupe(
        &env,
        None,
        &["undo", &session, "--agent", "main/general-1", "--yes"],
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    ok(&env, None, &["undo", &session, "--redo", "--yes"]).await;
    assert_eq!(std::fs::read_to_string(root.join("r.txt")).unwrap(), "R\n");

    // When the main agent changed the sub-agent's file afterwards, the
    // sub-agent's turn cannot be undone alone: the later turn is named.
    let env = Env::new();
    let session = run_with_a_sub_agent(&env, true).await;
    let refused = troupe(
        &env,
        None,
        &["undo", &session, "--agent", "main/general-1", "--yes"],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    let said = text(&refused.stderr);
    assert!(said.contains("r.txt changed by main in turn"), "{said}");
    assert_eq!(
        std::fs::read_to_string(env.root().join("r.txt")).unwrap(),
        "main's R\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_to_run_one_brings_back_its_files_and_its_conversation_together() {
    let env = Env::new();
    let (session, _, _) = two_runs(&env).await;
    let root = env.root();
    // The listing says which files each run changed.
    let listed = ok(&env, None, &["rewind", &session]).await;
    assert!(
        listed.contains("files each run changed:\n  1  a.txt\n  2  a.txt, b.txt\n"),
        "{listed}"
    );
    // The files are shown before anything changes.
    let planned = troupe(&env, None, &["rewind", &session, "--to", "1", "--code"]).await;
    assert_eq!(planned.status.code(), Some(2), "{}", describe(&planned));
    let plan = text(&planned.stdout);
    assert!(
        plan.contains("A a.txt") && plan.contains("D b.txt"),
        "{plan}"
    );
    assert!(root.join("b.txt").exists());
    // Changed outside since run 2 ended: refused without --force.
    std::fs::write(root.join("b.txt"), "mine\n").unwrap();
    let refused = troupe(&env, None, &["rewind", &session, "--to", "1", "--yes"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(
        text(&refused.stderr).contains("b.txt"),
        "{}",
        describe(&refused)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "mine\n"
    );

    let done = ok(
        &env,
        None,
        &[
            "rewind", &session, "--to", "1", "--both", "--yes", "--force",
        ],
    )
    .await;
    assert!(done.contains("the files: 1 added, 1 removed"), "{done}");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A\n");
    assert!(!root.join("b.txt").exists());

    // The next request knows nothing of run 2 and is told the files went
    // back too.
    let server = ScriptedServer::start(Script::new().then(say("Back at one.")))
        .await
        .unwrap();
    let resumed = json_lines(
        ok(
            &env,
            Some(&server),
            &["resume", &session, "--json", "go on"],
        )
        .await
        .as_bytes(),
    );
    let rewound = resumed
        .iter()
        .find(|event| event["type"] == "rewound")
        .unwrap();
    assert_eq!(rewound["files_restored"], true);
    let request = server.requests().pop().unwrap();
    let sent = serde_json::to_string(request.messages()).unwrap();
    assert!(
        !sent.contains("rm a.txt") && !sent.contains("swap"),
        "{sent}"
    );
    assert!(sent.contains("files were restored"), "{sent}");
    // The rewind's record lets --redo bring run 2's files back.
    ok(&env, None, &["undo", &session, "--redo", "--yes"]).await;
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "mine\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_clean_removes_what_the_policy_says_and_their_checkpoints_with_them() {
    let env = Env::new();
    let (session, _, _) = two_runs(&env).await;
    assert_eq!(refs_of(&env, &session), 4);
    // Nothing is due: nothing goes.
    let kept = ok(&env, None, &["sessions", "clean"]).await;
    assert!(kept.contains("removed 0 session(s)"), "{kept}");
    assert_eq!(refs_of(&env, &session), 4);
    // A bound the session does not fit in: it goes, and its checkpoints.
    env.write_user_config("[store]\nmax_bytes = 1\n");
    let cleaned = ok(&env, None, &["sessions", "clean"]).await;
    assert!(
        cleaned.contains("removed 1 session(s)")
            && cleaned.contains("of 1 session(s) that are gone"),
        "{cleaned}"
    );
    assert_eq!(refs_of(&env, &session), 0);
}
