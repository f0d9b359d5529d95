//! Every key docs/configuration.md documents either does something or is
//! warned about at start-up: the test reads the key tables of the document,
//! writes a configuration file using each key, loads it with the real loader,
//! resolves the provider, and checks that the key changed the resolved
//! configuration (for the keys the runtime acts on) or that
//! [`startup_warnings`] says it is not supported yet. A documented key in
//! neither list fails the test, and so does a list entry the document lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use troupe_config::{
    Config, ConfigSources, NOT_SUPPORTED, ResolvedProvider, load_config, resolve_provider,
    startup_warnings,
};

/// The configuration document, next to the workspace's crates.
const DOC: &str = include_str!("../../../../docs/configuration.md");

/// Keys the runtime acts on, each with the value the test writes (a TOML
/// expression) and the other keys of the same table it needs, as
/// `(dotted key, TOML expression)`. `NAME` is an entry name.
/// Other keys of the same table a case needs: `(key, TOML expression)`.
type Companions = &'static [(&'static str, &'static str)];

const ACTED: &[(&str, &str, Companions)] = &[
    ("default_provider", "\"q\"", &[]),
    ("providers.NAME.protocol", "\"openai\"", &[]),
    ("providers.NAME.model", "\"other-model\"", &[]),
    ("providers.NAME.base_url", "\"http://127.0.0.1:10\"", &[]),
    ("providers.NAME.api_key_env", "\"OTHER_KEY\"", &[]),
    ("providers.NAME.context_window", "50000", &[]),
    ("providers.NAME.max_tokens", "1000", &[]),
    ("providers.NAME.thinking", "true", &[]),
    ("providers.NAME.price", "{ input = 1.0, output = 2.0 }", &[]),
    ("providers.NAME.idle_timeout_secs", "5", &[]),
    ("providers.NAME.max_retries", "0", &[]),
    (
        "providers.NAME.store",
        "true",
        &[("protocol", "\"openai-responses\"")],
    ),
    ("permissions.mode", "\"bypass\"", &[]),
    ("permissions.allow", "[\"Bash(ls)\"]", &[]),
    ("permissions.ask", "[\"Bash(ls)\"]", &[]),
    ("permissions.deny", "[\"Bash(ls)\"]", &[]),
    ("permissions.extra_roots", "[\"/tmp\"]", &[]),
    ("limits.max_turns", "3", &[]),
    ("limits.budget_tokens", "10", &[]),
    ("limits.budget_usd", "1.5", &[]),
    ("limits.wall_clock_secs", "7", &[]),
    ("limits.max_tool_calls", "3", &[]),
    ("limits.max_parallel_subagents", "2", &[]),
    ("tools.env_allowlist", "[\"CARGO_HOME\"]", &[]),
    ("tools.timeout_secs", "5", &[]),
    ("telemetry.capture_content", "true", &[]),
    ("sandbox.mode", "\"read-only\"", &[]),
    ("sandbox.network", "false", &[]),
    ("compaction.work_ahead", "false", &[]),
    ("store.keep_days", "3", &[]),
    ("store.max_bytes", "1000000", &[]),
    ("web.enabled", "false", &[]),
    ("web.allow_private", "[\"127.0.0.1:8080\"]", &[]),
    ("checkpoints.enabled", "false", &[]),
    ("checkpoints.max_bytes", "1000000", &[]),
    ("cluster.url", "\"nats://127.0.0.1:4222\"", &[]),
    ("cluster.credentials", "\"/etc/troupe/node.creds\"", &[]),
    ("cluster.lease_secs", "30", &[]),
    ("cluster.replicas", "3", &[]),
    ("cluster.file_repositories", "true", &[]),
    (
        "mcp_servers.NAME.type",
        "\"stdio\"",
        &[("command", "\"x\"")],
    ),
    ("mcp_servers.NAME.command", "\"x\"", &[]),
    ("mcp_servers.NAME.args", "[\"a\"]", &[("command", "\"x\"")]),
    (
        "mcp_servers.NAME.env",
        "{ A = \"b\" }",
        &[("command", "\"x\"")],
    ),
    ("mcp_servers.NAME.cwd", "\"tools\"", &[("command", "\"x\"")]),
    ("mcp_servers.NAME.url", "\"http://127.0.0.1:1/mcp\"", &[]),
    (
        "mcp_servers.NAME.headers",
        "{ A = \"b\" }",
        &[("url", "\"http://127.0.0.1:1/mcp\"")],
    ),
    (
        "mcp_servers.NAME.startup_grace_secs",
        "1",
        &[("command", "\"x\"")],
    ),
    ("mcp_servers.NAME.enabled", "false", &[("command", "\"x\"")]),
    ("hooks.EVENT.command", "\"./check.sh\"", &[]),
    ("hooks.EVENT.matcher", "\"bash\"", &[("command", "\"x\"")]),
    ("hooks.EVENT.timeout_secs", "5", &[("command", "\"x\"")]),
    ("hooks.EVENT.once", "true", &[("command", "\"x\"")]),
];

/// Keys that are accepted but have no effect yet, each with its value, its
/// companions, and the phrase its warning starts with.
const WARNED: &[(&str, &str, Companions, &str)] = &[];

/// The dotted keys of the document's key tables: the rows of every table
/// under `## Keys`, prefixed by their section (`[providers.NAME]` gives
/// `providers.NAME.`; "Top level" gives no prefix).
fn documented_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_keys = false;
    let mut prefix: Option<String> = None;
    for line in DOC.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_keys = title.trim() == "Keys";
            prefix = None;
            continue;
        }
        if !in_keys {
            continue;
        }
        if let Some(title) = line.strip_prefix("### ") {
            let title = title.trim();
            prefix = if title == "Top level" {
                Some(String::new())
            } else {
                // `[table]`, or `[[array]]` for arrays of tables.
                let table = title
                    .trim_matches('`')
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .map(|t| t.trim_start_matches('[').trim_end_matches(']'))
                    .unwrap_or_else(|| panic!("unexpected key section title {title:?}"));
                Some(format!("{table}."))
            };
            continue;
        }
        let (Some(prefix), Some(row)) = (&prefix, line.strip_prefix("| `")) else {
            continue;
        };
        let key = row.split('`').next().expect("a key cell");
        keys.insert(format!("{prefix}{key}"));
    }
    keys
}

/// What a configuration resolves to, as far as a run can see it: the merged
/// settings (without the raw provider and MCP entries, which only act through
/// the resolved provider, and without the list of files read) and the
/// provider resolution.
#[derive(Debug, PartialEq)]
struct Observed {
    config: Config,
    provider: Result<ResolvedProvider, String>,
}

/// The configuration every case starts from: two providers on loopback (so
/// `default_provider` has a choice and no key is needed), `p` chosen.
fn baseline() -> toml::Table {
    toml::from_str(
        r#"
default_provider = "p"
[providers.p]
base_url = "http://127.0.0.1:9"
[providers.q]
base_url = "http://127.0.0.1:9"
"#,
    )
    .expect("baseline parses")
}

fn value(expression: &str) -> toml::Value {
    let table: toml::Table = toml::from_str(&format!("v = {expression}"))
        .unwrap_or_else(|err| panic!("{expression}: {err}"));
    table["v"].clone()
}

/// Sets a dotted key (`NAME` stands for `p` under `providers`, `s` under
/// `mcp_servers`; `EVENT` for the one entry of `[[hooks.Stop]]`), creating
/// tables on the way.
fn set(table: &mut toml::Table, dotted: &str, expression: &str) {
    let parts: Vec<&str> = dotted.split('.').collect();
    let mut current = table;
    for (i, part) in parts.iter().enumerate() {
        if *part == "EVENT" {
            let entries = current
                .entry("Stop".to_owned())
                .or_insert_with(|| toml::Value::Array(vec![toml::Value::Table(toml::Table::new())]))
                .as_array_mut()
                .expect("an array of tables");
            current = entries[0].as_table_mut().expect("a table entry");
            continue;
        }
        let part = match (*part, parts.first()) {
            ("NAME", Some(&"providers")) => "p",
            ("NAME", _) => "s",
            (part, _) => part,
        };
        if i + 1 == parts.len() {
            current.insert(part.to_owned(), value(expression));
        } else {
            current = current
                .entry(part.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .expect("a table on the way");
        }
    }
}

/// Writes `table` as the project file of a fresh project (its `[store]`,
/// `[cluster]` and
/// `[web]`, which only the user's file may hold, as the user file), loads and
/// resolves it, and returns what a run would see and the start-up warnings.
fn load(table: &toml::Table) -> (Observed, Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join(".troupe")).expect("mkdir");
    let mut table = table.clone();
    let mut user = toml::Table::new();
    for only_user in ["store", "web", "checkpoints", "cluster"] {
        if let Some(value) = table.remove(only_user) {
            user.insert(only_user.into(), value);
        }
    }
    let user = (!user.is_empty()).then(|| {
        let path = dir.path().join("user-config.toml");
        std::fs::write(&path, toml::to_string(&user).expect("serialises")).expect("write");
        path
    });
    let text = toml::to_string(&table).expect("serialises");
    std::fs::write(dir.path().join(".troupe/config.toml"), &text).expect("write");
    let sources = ConfigSources {
        user,
        project_root: Some(dir.path().to_path_buf()),
        home: Some(Path::new("/nonexistent-home").to_path_buf()),
    };
    let config = load_config(&sources).unwrap_or_else(|err| panic!("{err}\n{text}"));
    let env: BTreeMap<String, String> = BTreeMap::new();
    let provider = resolve_provider(&config, None, &env).map_err(|err| err.to_string());
    let warnings = match &provider {
        Ok(provider) => startup_warnings(&config, provider),
        Err(_) => Vec::new(),
    };
    let config = Config {
        providers: Default::default(),
        sources: Vec::new(),
        budget_usd_written: false,
        ..config
    };
    (Observed { config, provider }, warnings)
}

fn with(key: &str, expression: &str, companions: &[(&str, &str)]) -> toml::Table {
    let mut table = baseline();
    let parent = key.rsplit_once('.').map(|(parent, _)| parent);
    for (companion, companion_value) in companions {
        let path = match parent {
            Some(parent) => format!("{parent}.{companion}"),
            None => (*companion).to_owned(),
        };
        set(&mut table, &path, companion_value);
    }
    set(&mut table, key, expression);
    table
}

#[test]
fn every_documented_key_acts_or_is_warned_about() {
    let documented = documented_keys();
    assert!(
        documented.len() >= 30,
        "the key tables were not found: {documented:?}"
    );
    let acted: BTreeSet<&str> = ACTED.iter().map(|(key, ..)| *key).collect();
    let warned: BTreeSet<&str> = WARNED.iter().map(|(key, ..)| *key).collect();
    for key in &documented {
        assert!(
            acted.contains(key.as_str()) || warned.contains(key.as_str()),
            "docs/configuration.md documents `{key}`, which is neither known to be acted \
             upon nor warned about at start-up: make it act, warn about it, or remove it"
        );
    }
    for key in acted.iter().chain(&warned) {
        assert!(
            documented.contains(*key),
            "`{key}` is listed here but not documented in docs/configuration.md"
        );
    }

    let (base, base_warnings) = load(&baseline());
    assert!(base.provider.is_ok(), "{base:?}");
    assert!(base_warnings.is_empty(), "{base_warnings:?}");

    for (key, expression, companions) in ACTED {
        let (observed, warnings) = load(&with(key, expression, companions));
        assert_ne!(observed, base, "`{key}` = {expression} changed nothing");
        assert!(
            !warnings.iter().any(|w| w.contains(NOT_SUPPORTED)),
            "`{key}`: {warnings:?}"
        );
    }
    for (key, expression, companions, phrase) in WARNED {
        let (_, warnings) = load(&with(key, expression, companions));
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with(phrase) && w.contains(NOT_SUPPORTED)),
            "`{key}` = {expression} gave no \"{NOT_SUPPORTED}\" warning: {warnings:?}"
        );
    }
}

#[test]
fn a_cost_budget_without_a_price_for_the_provider_in_use_is_warned_about() {
    let (_, warnings) = load(&with("limits.budget_usd", "1.5", &[]));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("`limits.budget_usd` has no effect with provider `p`"),
        "{warnings:?}"
    );
    let mut priced = with("limits.budget_usd", "1.5", &[]);
    set(
        &mut priced,
        "providers.NAME.price",
        "{ input = 1.0, output = 2.0 }",
    );
    assert_eq!(load(&priced).1, Vec::<String>::new());
    // The price of another entry does not count.
    let mut elsewhere = with("limits.budget_usd", "1.5", &[]);
    set(
        &mut elsewhere,
        "providers.q.price",
        "{ input = 1.0, output = 2.0 }",
    );
    assert_eq!(load(&elsewhere).1.len(), 1);
}
