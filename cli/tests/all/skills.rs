//! Skills through the real binary against the scripted model server: the
//! catalogue sits in the cached (stable) system block of every request, the
//! `load_skill` tool puts a skill's body into the conversation, a project skill
//! replaces a user skill of the same name, a broken skill file is named in a
//! warning and skipped, and `load_skill` is offered in plan mode and to the
//! read-only `explorer` role.

use std::path::Path;

use crate::support::{Env, describe, run, text};
use serde_json::json;
use troupe_scripted::{Matcher, Script, ScriptedServer, Turn, tool_call};

fn write_skill(skills_dir: &Path, name: &str, body: &str) {
    let dir = skills_dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), body).unwrap();
}

/// A project with a `deploy` skill (also defined, differently, by the user),
/// a user-only `lint` skill and a broken project skill.
fn env_with_skills() -> Env {
    let env = Env::new();
    // The project's own skills apply once it is trusted.
    env.trust();
    let user = env.home.path().join("config/troupe/skills");
    let project = env.root().join(".troupe/skills");
    write_skill(
        &user,
        "deploy",
        "---\ndescription: USER-DEPLOY description\n---\nUSER-DEPLOY-BODY\n",
    );
    write_skill(
        &user,
        "lint",
        "---\ndescription: Lint the workspace\n---\nRun the linter.\n",
    );
    write_skill(
        &project,
        "deploy",
        "---\ndescription: Deploy the service to staging\n---\nPROJECT-DEPLOY-BODY: run make deploy.\n",
    );
    write_skill(&project, "broken", "no front matter here\n");
    env
}

const CATALOGUE: &str = "# Skills\nSkills are instructions for specific tasks. When a task \
matches one, call load_skill with its name before you start, and follow what it says.\n\
- deploy: Deploy the service to staging\n- lint: Lint the workspace";

#[tokio::test]
async fn catalogue_is_in_the_cached_system_block_and_load_skill_returns_the_body() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("load_skill", json!({"name": "deploy"})))
            .then(tool_call("load_skill", json!({"name": "nope"})))
            .then(troupe_scripted::text("done")),
    )
    .await
    .unwrap();
    let env = env_with_skills();
    let mut command = env.command(Some(&server));
    command.args(["run", "ship it"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("skill ignored: ")
            && stderr.contains(".troupe/skills/broken/SKILL.md: has no front matter"),
        "{stderr}"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let mut stable_blocks = Vec::new();
    for request in &requests {
        let system = request.body["system"].as_array().unwrap();
        assert_eq!(system.len(), 2, "{system:?}");
        // The catalogue ends the stable block, which carries the cache
        // breakpoint; the environment block after it does not.
        let stable = system[0]["text"].as_str().unwrap();
        assert!(stable.ends_with(CATALOGUE), "{stable}");
        assert!(!stable.contains("USER-DEPLOY") && !stable.contains("broken"));
        assert_eq!(system[0]["cache_control"]["type"], "ephemeral");
        assert!(system[1].get("cache_control").is_none(), "{system:?}");
        assert!(request.tool_names().contains(&"load_skill".to_owned()));
        stable_blocks.push(stable.to_owned());
    }
    assert!(stable_blocks.windows(2).all(|w| w[0] == w[1]));

    let loaded = requests[1].tool_results().pop().unwrap();
    assert!(!loaded.is_error);
    assert_eq!(
        loaded.content,
        "# Skill: deploy\n\nPROJECT-DEPLOY-BODY: run make deploy."
    );
    let unknown = requests[2].tool_results().pop().unwrap();
    assert!(unknown.is_error);
    assert!(
        unknown
            .content
            .contains("Unknown skill \"nope\". Known skills: deploy, lint."),
        "{}",
        unknown.content
    );
}

#[tokio::test]
async fn without_skills_there_is_no_catalogue_and_no_load_skill() {
    let server = ScriptedServer::start(Script::new().then(troupe_scripted::text("done")))
        .await
        .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let request = &server.requests()[0];
    assert!(!request.system_text().contains("# Skills"));
    assert!(!request.tool_names().contains(&"load_skill".to_owned()));
}

#[tokio::test]
async fn load_skill_is_offered_in_plan_mode() {
    let server = ScriptedServer::start(Script::new().then(troupe_scripted::text("planned")))
        .await
        .unwrap();
    let env = env_with_skills();
    let mut command = env.command(Some(&server));
    command.args(["run", "--mode", "plan", "plan the deploy"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let plan = server.requests()[0].tool_names();
    assert!(plan.contains(&"load_skill".to_owned()), "{plan:?}");
    assert!(!plan.contains(&"bash".to_owned()), "{plan:?}");
}

#[tokio::test]
async fn load_skill_is_offered_to_the_read_only_explorer_role() {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "agent",
                json!({"description": "look", "prompt": "EXPLORE-TASK", "role": "explorer"}),
            ))
            .then(
                Turn::new(troupe_scripted::text("explored"))
                    .when(Matcher::any_user_contains("EXPLORE-TASK")),
            )
            .then(troupe_scripted::text("done")),
    )
    .await
    .unwrap();
    let env = env_with_skills();
    let mut command = env.command(Some(&server));
    command.args(["run", "--mode", "bypass", "look around"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let requests = server.requests();
    let child = requests
        .iter()
        .find(|r| {
            r.first_user_text()
                .is_some_and(|t| t.contains("EXPLORE-TASK"))
        })
        .unwrap_or_else(|| panic!("no child request: {}", describe(&output)));
    let tools = child.tool_names();
    assert!(tools.contains(&"load_skill".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"write_file".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn the_catalogue_is_byte_identical_across_runs_of_one_session() {
    let server = ScriptedServer::start(
        Script::new()
            .then(troupe_scripted::text("first"))
            .then(troupe_scripted::text("second")),
    )
    .await
    .unwrap();
    let env = env_with_skills();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "one"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let id = crate::support::session_of(&crate::support::json_lines(&output.stdout));
    let mut command = env.command(Some(&server));
    command.args(["run", "--session", &id, "two"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let stable = |i: usize| {
        requests[i].body["system"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(stable(0).ends_with(CATALOGUE));
    assert_eq!(stable(0), stable(1));
}
