//! Where a run may start, through the real `troupe` binary: a project root of
//! `/` or of the home directory itself is refused (exit code 2, the
//! directory named, what to do said) unless `--cwd` names it and
//! `--confirm-cwd` confirms it; a project that is not a git repository gets
//! one warning line; `troupe sandbox status` says how far writes reach.

use std::path::Path;

use crate::support::{Env, describe, run, text};
use troupe_scripted::{Script, ScriptedServer, text as say};

/// `troupe run hello` in `dir` with `args` after it.
async fn run_in(
    env: &Env,
    server: &ScriptedServer,
    dir: &Path,
    args: &[&str],
) -> std::process::Output {
    let mut command = env.command(Some(server));
    command.current_dir(dir).args(["run", "hello"]).args(args);
    run(command).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_the_home_directory_is_refused_unless_named_and_confirmed() {
    let server = ScriptedServer::start(Script::new().then(say("done")))
        .await
        .unwrap();
    let env = Env::new();
    let home = env.home.path();
    let home_text = home.display().to_string();

    // Started from the home directory: refused, and told how to go on.
    let output = run_in(&env, &server, home, &[]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "refusing to start with the project root {home_text} (your home directory)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("--cwd {home_text} --confirm-cwd")),
        "{stderr}"
    );
    // Naming it is not enough without a terminal to confirm on.
    let output = run_in(&env, &server, env.root(), &["--cwd", &home_text]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("confirm it with --confirm-cwd"),
        "{}",
        describe(&output)
    );
    // Confirming a directory --cwd did not name is not enough either.
    let output = run_in(&env, &server, home, &["--confirm-cwd"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        server.requests().is_empty(),
        "a refused run asked the model"
    );

    // Named and confirmed: it runs, with the warning that it is no git
    // repository.
    let output = run_in(
        &env,
        &server,
        env.root(),
        &["--cwd", &home_text, "--confirm-cwd"],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(text(&output.stdout).trim(), "done");
    assert_eq!(server.requests().len(), 1);
    assert!(
        text(&output.stderr).contains(&format!("{home_text} is not a git repository")),
        "{}",
        describe(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_the_file_systems_root_is_refused() {
    let server = ScriptedServer::start(Script::new().then(say("done")))
        .await
        .unwrap();
    let env = Env::new();
    for (dir, args, advice) in [
        (
            Path::new("/"),
            &[][..],
            "name it explicitly: --cwd / --confirm-cwd",
        ),
        (
            env.root(),
            &["--cwd", "/"][..],
            "confirm it with --confirm-cwd",
        ),
    ] {
        let output = run_in(&env, &server, dir, args).await;
        assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("refusing to start with the project root / (the file system's root)"),
            "{stderr}"
        );
        assert!(
            stderr.contains("every file this user may write"),
            "{stderr}"
        );
        assert!(stderr.contains(advice), "{stderr}");
    }
    assert!(
        server.requests().is_empty(),
        "a refused run asked the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_that_is_not_a_git_repository_is_one_warning() {
    let server = ScriptedServer::start(Script::new().then(say("one")).then(say("two")))
        .await
        .unwrap();
    let env = Env::new();
    let warning = format!("{} is not a git repository", env.root().display());
    let output = run_in(&env, &server, env.root(), &[]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert_eq!(
        stderr
            .lines()
            .filter(|line| line.contains(&warning))
            .count(),
        1,
        "{stderr}"
    );

    std::fs::create_dir(env.root().join(".git")).unwrap();
    let output = run_in(&env, &server, env.root(), &[]).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        !text(&output.stderr).contains("is not a git repository"),
        "{}",
        describe(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_status_says_how_far_writes_reach() {
    let env = Env::new();
    let home_text = env.home.path().display().to_string();
    let status = |dir: &str| {
        let mut command = env.command(None);
        command.args(["sandbox", "status", "--cwd", dir]);
        command
    };

    let stdout = text(&run(status("/")).await.stdout);
    assert!(
        stdout.starts_with("project root: / (not a git repository"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "warning: the project root is the file system's root: commands may write every file \
             this user may write"
        ),
        "{stdout}"
    );

    let stdout = text(&run(status(&home_text)).await.stdout);
    assert!(
        stdout.contains(
            "warning: the project root is your home directory: commands may write every file of \
             your home directory"
        ),
        "{stdout}"
    );

    let root = env.root().display().to_string();
    let stdout = text(&run(status(&root)).await.stdout);
    assert!(
        stdout.starts_with(&format!("project root: {root} (not a git repository")),
        "{stdout}"
    );
    assert!(!stdout.contains("warning:"), "{stdout}");

    std::fs::create_dir(env.root().join(".git")).unwrap();
    let stdout = text(&run(status(&root)).await.stdout);
    assert!(
        stdout.starts_with(&format!("project root: {root} (a git repository)\n")),
        "{stdout}"
    );
}
