//! The client's environment as it travels through the cluster: without its
//! secrets. A submission is stored in a JetStream stream that every node
//! (and whoever reads the server) can read, so the node that accepts a run
//! removes every variable that holds a secret before it publishes the
//! request ([`public_environment`]), and lists the removed names — never
//! their values — in `TROUPE_WITHHOLD_VARS`. The node that takes the run
//! puts its own values of those names, and of its own provider key
//! variables, back in ([`with_node_secrets`]): a run uses the keys of the
//! node that runs it.
//!
//! A variable holds a secret ([`is_secret_name`]) when its name is one of
//! the provider key variables given (the standard ones and every
//! `api_key_env` the configuration names), or ends with `_KEY`, `_TOKEN`,
//! `_SECRET`, `_PASSWORD`, `_PASSWD`, `_PASSPHRASE` or `_CREDENTIALS`
//! (or is one of those words alone), in any case.

use std::collections::{BTreeMap, BTreeSet};

/// The variable that lists the names of the removed secrets (names only),
/// the same variable a troupe process uses to tell the process it starts
/// which variables it withholds.
pub const WITHHELD_LIST_VAR: &str = "TROUPE_WITHHOLD_VARS";

/// Name endings that mark a variable as a secret.
pub const SECRET_SUFFIXES: [&str; 7] = [
    "_KEY",
    "_TOKEN",
    "_SECRET",
    "_PASSWORD",
    "_PASSWD",
    "_PASSPHRASE",
    "_CREDENTIALS",
];

/// Whether the variable `name` holds a secret: one of `keys` (compared
/// without regard to case), or a name with a secret's ending.
pub fn is_secret_name(name: &str, keys: &BTreeSet<String>) -> bool {
    let upper = name.to_ascii_uppercase();
    keys.iter().any(|key| key.eq_ignore_ascii_case(name))
        || SECRET_SUFFIXES
            .iter()
            .any(|suffix| upper.ends_with(suffix) || upper == suffix[1..])
}

/// `env` without the variables that hold secrets (as [`is_secret_name`]
/// decides with `keys`), with [`WITHHELD_LIST_VAR`] naming what was removed
/// (and what the client already listed there); no list when nothing was.
pub fn public_environment(
    env: &BTreeMap<String, String>,
    keys: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut withheld = listed_names(env);
    let mut public = BTreeMap::new();
    for (name, value) in env {
        if name == WITHHELD_LIST_VAR {
            continue;
        }
        if is_secret_name(name, keys) {
            withheld.insert(name.clone());
        } else {
            public.insert(name.clone(), value.clone());
        }
    }
    if !withheld.is_empty() {
        let list: Vec<&str> = withheld.iter().map(String::as_str).collect();
        public.insert(WITHHELD_LIST_VAR.into(), list.join(","));
    }
    public
}

/// `env` (a published environment) with this node's own value, as `lookup`
/// gives it, of every name it lists in [`WITHHELD_LIST_VAR`] and of each of
/// `own_keys`; a name this node has no value for stays absent. Any value
/// of such a name that arrived in `env` is replaced or dropped: only the
/// node's own secrets are used.
pub fn with_node_secrets(
    mut env: BTreeMap<String, String>,
    own_keys: &BTreeSet<String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut names = listed_names(&env);
    names.extend(own_keys.iter().cloned());
    for name in names {
        match lookup(&name) {
            Some(value) => env.insert(name, value),
            None => env.remove(&name),
        };
    }
    env
}

/// The names `env` lists in [`WITHHELD_LIST_VAR`] that can be variable
/// names.
fn listed_names(env: &BTreeMap<String, String>) -> BTreeSet<String> {
    env.get(WITHHELD_LIST_VAR)
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|name| {
                    !name.is_empty()
                        && !name.starts_with(|c: char| c.is_ascii_digit())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    fn keys(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn configured_key_names_and_secret_endings_are_secrets_in_any_case() {
        let configured = keys(&["MY_LLM", "ANTHROPIC_API_KEY"]);
        for secret in [
            "MY_LLM",
            "my_llm",
            "ANTHROPIC_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "gitlab_token",
            "CLIENT_SECRET",
            "DB_PASSWORD",
            "SMTP_PASSWD",
            "GPG_PASSPHRASE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "TOKEN",
            "password",
        ] {
            assert!(is_secret_name(secret, &configured), "{secret}");
        }
        for public in [
            "HOME",
            "PATH",
            "ANTHROPIC_BASE_URL",
            "KEYBOARD",
            "TOKENIZER_PATH",
            "MY_LLM_URL",
            "SECRETARY",
            "XDG_CONFIG_HOME",
        ] {
            assert!(!is_secret_name(public, &configured), "{public}");
        }
    }

    #[test]
    fn the_public_environment_keeps_no_secret_and_lists_the_names_removed() {
        let client = env(&[
            ("HOME", "/home/ann"),
            ("ANTHROPIC_API_KEY", "sk-client"),
            ("CORP_LLM", "corp-secret"),
            ("GITHUB_TOKEN", "ghp-client"),
            ("TROUPE_WITHHOLD_VARS", "OTHER_VAR,9BAD,bad name"),
        ]);
        let public = public_environment(&client, &keys(&["CORP_LLM"]));
        assert_eq!(
            public,
            env(&[
                ("HOME", "/home/ann"),
                (
                    "TROUPE_WITHHOLD_VARS",
                    "ANTHROPIC_API_KEY,CORP_LLM,GITHUB_TOKEN,OTHER_VAR"
                ),
            ])
        );
        let text = format!("{public:?}");
        for value in ["sk-client", "corp-secret", "ghp-client"] {
            assert!(!text.contains(value), "{text}");
        }
        // Nothing to remove: no list.
        let plain = env(&[("HOME", "/h")]);
        assert_eq!(public_environment(&plain, &BTreeSet::new()), plain);
    }

    #[test]
    fn the_taking_node_puts_back_only_its_own_secrets() {
        let published = env(&[
            ("HOME", "/home/ann"),
            ("TROUPE_WITHHOLD_VARS", "ANTHROPIC_API_KEY,GITHUB_TOKEN"),
            // Sent by a hostile node: replaced by this node's own value.
            ("OPENAI_API_KEY", "sk-forged"),
        ]);
        let node = env(&[
            ("ANTHROPIC_API_KEY", "sk-node"),
            ("OPENAI_API_KEY", "sk-own"),
        ]);
        let filled = with_node_secrets(published.clone(), &keys(&["OPENAI_API_KEY"]), |name| {
            node.get(name).cloned()
        });
        assert_eq!(filled["ANTHROPIC_API_KEY"], "sk-node");
        assert_eq!(filled["OPENAI_API_KEY"], "sk-own");
        assert!(!filled.contains_key("GITHUB_TOKEN"));
        assert_eq!(filled["HOME"], "/home/ann");
        // A key this node does not have is not taken from the message.
        let bare = with_node_secrets(published, &keys(&["OPENAI_API_KEY"]), |_| None);
        assert!(!bare.contains_key("OPENAI_API_KEY"));
        assert!(!bare.contains_key("ANTHROPIC_API_KEY"));
    }
}
