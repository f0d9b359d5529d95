//! The configuration example of SPEC §1.2, copied verbatim into
//! `tests/data/spec_config.toml`, parses and means what the spec says.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use troupe_config::{
    ConfigSources, Limits, McpTransport, Price, Thinking, expand_mcp_server, load_config,
    parse_config_file, resolve_provider,
};
use troupe_protocol::model::Protocol;
use troupe_protocol::permission::{PermissionMode, RuleSource};

const SPEC_EXAMPLE: &str = include_str!("data/spec_config.toml");

#[test]
fn spec_example_parses_field_by_field() {
    let file = parse_config_file(Path::new("spec_config.toml"), SPEC_EXAMPLE).unwrap();
    assert_eq!(file.default_provider.as_deref(), Some("claude"));
    let claude = &file.providers["claude"];
    assert_eq!(claude.protocol, Some(Protocol::Anthropic));
    assert_eq!(claude.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(
        claude.base_url.as_deref(),
        Some("https://api.anthropic.com")
    );
    assert_eq!(claude.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(claude.context_window, Some(200_000));
    assert_eq!(claude.max_tokens, Some(8_192));
    assert_eq!(claude.thinking, Some(Thinking::Enabled(false)));
    assert_eq!(
        claude.price,
        Some(Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        })
    );

    let everything = &file.mcp_servers["everything"];
    assert_eq!(everything.transport, Some(McpTransport::Stdio));
    assert_eq!(everything.command.as_deref(), Some("npx"));
    assert_eq!(
        everything.args,
        vec![
            "-y".to_owned(),
            "@modelcontextprotocol/server-everything".to_owned()
        ]
    );
    assert_eq!(everything.env["API_TOKEN"], "${MY_TOKEN}");
    let search = &file.mcp_servers["search"];
    assert_eq!(search.transport, Some(McpTransport::Http));
    assert_eq!(search.url.as_deref(), Some("http://127.0.0.1:8080/mcp"));
    assert_eq!(search.headers["Authorization"], "Bearer ${SEARCH_TOKEN}");

    let permissions = file.permissions.as_ref().unwrap();
    assert_eq!(permissions.mode, Some(PermissionMode::Default));
    assert_eq!(permissions.allow, vec!["Bash(cargo test*)".to_owned()]);
    assert!(permissions.ask.is_empty());
    assert_eq!(permissions.deny, vec!["Read(.env)".to_owned()]);
    assert!(permissions.extra_roots.is_empty());
    assert_eq!(
        file.telemetry.as_ref().unwrap().capture_content,
        Some(false)
    );
}

#[test]
fn spec_example_loads_to_the_documented_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".troupe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), SPEC_EXAMPLE).unwrap();
    let config = load_config(&ConfigSources {
        user: None,
        project_root: Some(tmp.path().to_path_buf()),
        home: None,
    })
    .unwrap();
    // The example's [limits] are the defaults.
    assert_eq!(config.limits, Limits::default());
    assert_eq!(config.limits.wall_clock, Duration::from_secs(3_600));
    assert_eq!(config.permissions.allow[0].source, RuleSource::Project);

    let env: BTreeMap<String, String> = [("ANTHROPIC_API_KEY", "sk-ant"), ("MY_TOKEN", "t0k")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let p = resolve_provider(&config, None, &env).unwrap();
    assert_eq!(p.name, "claude");
    assert_eq!(p.api_key.as_deref(), Some("sk-ant"));
    assert_eq!(p.max_tokens, 8_192);
    assert_eq!(p.thinking_budget, None);

    let (everything, met) = expand_mcp_server(&config.mcp_servers["everything"], &env, |_| false);
    assert_eq!(everything.env["API_TOKEN"], "t0k");
    assert!(met.undefined.is_empty());
    let (search, met) = expand_mcp_server(&config.mcp_servers["search"], &env, |_| false);
    assert_eq!(search.headers["Authorization"], "Bearer ");
    assert_eq!(met.undefined, vec!["SEARCH_TOKEN".to_owned()]);
}
