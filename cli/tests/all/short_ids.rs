//! Short ids that clash, through the real `troupe` binary: when two sessions
//! or runs of a listing share their last 8 characters, `sessions list`,
//! `runs list` and `sessions show` show each by a longer end of its id (as
//! git lengthens an abbreviated hash), and that longer form names the id
//! wherever an id is taken.

use crate::support::{Env, describe, plant_sessions, run, text};

/// Two session ids with the same last 8 characters; they differ 10 from the
/// end.
const SESSION_A: &str = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
const SESSION_B: &str = "0193a1f2-0c4d-7e02-8a2b-3c3d5e6f7a8b";
/// Two run ids of session A that share their whole last group.
const RUN_A: &str = "0193a1f2-0c4d-7e01-8a2b-111122223333";
const RUN_B: &str = "0193a1f2-0c4d-7e01-8a2c-111122223333";

/// Plants the sessions and runs while no `troupe` process holds the store.
async fn plant(env: &Env) {
    plant_sessions(env, &[SESSION_A, SESSION_B], &[RUN_A, RUN_B]).await;
}

/// `troupe ARGS`' stdout, checked to succeed.
async fn stdout_of(env: &Env, args: &[&str]) -> String {
    let mut command = env.command(None);
    command.args(args);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    text(&output.stdout)
}

/// The first column of each line but the header.
fn first_column(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

#[tokio::test]
async fn clashing_short_ids_are_lengthened_in_lists_and_name_their_ids() {
    let env = Env::new();
    plant(&env).await;

    let mut sessions = first_column(&stdout_of(&env, &["sessions", "list"]).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    sessions.sort();
    assert_eq!(sessions, ["3d5e6f7a8b", "4d5e6f7a8b"]);

    let listing = stdout_of(&env, &["runs", "list"]).await;
    let mut runs = first_column(&listing);
    runs.sort();
    assert_eq!(runs, ["b-111122223333", "c-111122223333"], "{listing}");

    let shown = stdout_of(&env, &["sessions", "show", "4d5e6f7a8b"]).await;
    assert!(shown.contains(SESSION_A), "{shown}");
    assert!(
        shown.contains("run       b-111122223333  finished"),
        "{shown}"
    );
    assert!(
        shown.contains("run       c-111122223333  finished"),
        "{shown}"
    );

    // The lengthened forms name their ids; the 8-character one is ambiguous.
    let shown = stdout_of(&env, &["runs", "show", "c-111122223333"]).await;
    assert!(shown.starts_with(&format!("run      {RUN_B}\n")), "{shown}");
    let mut command = env.command(None);
    command.args(["sessions", "show", "5e6f7a8b"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("is ambiguous"),
        "{}",
        describe(&output)
    );
}
