//! What `troupe run` tells the person about its configuration and provider,
//! through the real binary against the scripted model server: settings that
//! have no effect (and MCP servers that cannot start) are warned about
//! before the run, and a rejected key names
//! the variable and the provider entry to fix.

use crate::support::{Env, describe, run, text};
use troupe_scripted::{Fault, Script, ScriptedServer};

#[tokio::test]
async fn settings_without_effect_are_warned_about_before_the_run() {
    let server = ScriptedServer::start(Script::new().then(troupe_scripted::text("done")))
        .await
        .unwrap();
    let env = Env::new();
    std::fs::write(
        env.root().join(".troupe/config.toml"),
        "[mcp_servers.github]\ncommand = \"github-mcp\"\n\n[limits]\nbudget_usd = 1.0\n",
    )
    .unwrap();
    env.trust();
    let mut command = env.command(Some(&server));
    command.args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = text(&output.stderr);
    // A configured MCP server is started; one that cannot start is named.
    assert!(
        stderr.contains("troupe: MCP server github could not start: cannot start `github-mcp`"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "troupe: `limits.budget_usd` has no effect with provider `claude`, which has no \
             `price`"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_rejected_key_names_the_variable_and_the_provider_entry() {
    let server = ScriptedServer::start(Script::new().then(Fault::Unauthorized))
        .await
        .unwrap();
    let env = Env::new();
    let mut command = env.command(Some(&server));
    command.args(["run", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "the provider rejected the key (401): check ANTHROPIC_API_KEY, read by \
             [providers.claude] api_key_env"
        ),
        "{stderr}"
    );
}
