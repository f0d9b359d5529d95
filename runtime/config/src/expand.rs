//! `${VAR}` expansion of MCP server settings (SPEC §1.2).
//!
//! Exactly the form `${NAME}` expands, where NAME is an environment-variable
//! name (`[A-Za-z_][A-Za-z0-9_]*`); `$NAME` is left alone and there is no escape
//! sequence (`$${X}` is a literal `$` followed by the expansion of `${X}`). A
//! `${` that is not closed, or that does not hold a valid name, is kept as
//! written. An undefined variable expands to "" and its name is reported once,
//! so the caller can warn once per variable. A variable the caller refuses
//! (the provider key variables: no MCP server is ever given a provider key)
//! expands to "" too and is reported apart, set or not. Expansion applies to
//! MCP `env` values, `headers` values, `url` and `args`; nothing else is
//! expanded. The values that were put in are reported as well, so whoever
//! shows the entry can mask them. This module only transforms strings: it
//! reads the environment through an [`Env`] and never the process
//! environment directly.

use super::file::McpServerFile;
use super::paths::Env;

/// Opening of an expansion.
const OPEN: &str = "${";
/// Closing of an expansion.
const CLOSE: char = '}';

/// Whether `name` is a valid environment-variable name for expansion.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) if first == '_' || first.is_ascii_alphabetic() => {}
        _ => return false,
    }
    chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// What expansion met on the way: the variables that were not set, those
/// that were refused, and the values put in. Each name once, in order of
/// first appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Variables that are not set (each expanded to "").
    pub undefined: Vec<String>,
    /// Variables the caller refused (each expanded to "", set or not).
    pub refused: Vec<String>,
    /// The values put in for the variables that expanded.
    pub values: Vec<String>,
}

/// Expands every `${NAME}` in `input`, except that a name `refuse` accepts
/// expands to "". What it met is added to `met`.
pub(crate) fn expand_into(
    input: &str,
    env: &impl Env,
    refuse: &impl Fn(&str) -> bool,
    met: &mut Expansion,
) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after_open = &rest[start + OPEN.len()..];
        let name = after_open
            .find(CLOSE)
            .map(|end| &after_open[..end])
            .filter(|name| is_var_name(name));
        match name {
            Some(name) => {
                if refuse(name) {
                    push_once(&mut met.refused, name);
                } else {
                    match env.var(name) {
                        Some(value) => {
                            out.push_str(&value);
                            push_once(&mut met.values, &value);
                        }
                        None => push_once(&mut met.undefined, name),
                    }
                }
                rest = &after_open[name.len() + CLOSE.len_utf8()..];
            }
            None => {
                // Not an expansion: keep the `${` and continue after it, so a
                // later well-formed `${X}` in the same string still expands.
                out.push_str(OPEN);
                rest = after_open;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Adds `item` to `list` unless it is there already.
fn push_once(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|seen| seen == item) {
        list.push(item.to_owned());
    }
}

/// Expands every `${NAME}` in `input`; returns the result and the names of the
/// undefined variables (each once, in order of first appearance).
#[cfg(test)]
pub(crate) fn expand(input: &str, env: &impl Env) -> (String, Vec<String>) {
    let mut met = Expansion::default();
    let out = expand_into(input, env, &|_: &str| false, &mut met);
    (out, met.undefined)
}

/// Expands an MCP server entry's `env` values, `headers` values, `url` and
/// `args`; a variable `refuse` accepts expands to "" wherever it appears.
/// Returns the expanded entry and what expansion met (each name once, in
/// order of first appearance: args, env, url, headers).
pub fn expand_mcp_server(
    server: &McpServerFile,
    env: &impl Env,
    refuse: impl Fn(&str) -> bool,
) -> (McpServerFile, Expansion) {
    let mut met = Expansion::default();
    let mut out = server.clone();
    out.args = server
        .args
        .iter()
        .map(|arg| expand_into(arg, env, &refuse, &mut met))
        .collect();
    out.env = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), expand_into(v, env, &refuse, &mut met)))
        .collect();
    out.url = server
        .url
        .as_deref()
        .map(|url| expand_into(url, env, &refuse, &mut met));
    out.headers = server
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), expand_into(v, env, &refuse, &mut met)))
        .collect();
    (out, met)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env() -> BTreeMap<String, String> {
        [("TOKEN", "s3cret"), ("HOST", "127.0.0.1"), ("EMPTY", "")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn braced_form_expands() {
        assert_eq!(
            expand("Bearer ${TOKEN}", &env()),
            ("Bearer s3cret".to_owned(), vec![])
        );
        assert_eq!(
            expand("http://${HOST}:8080/${TOKEN}", &env()).0,
            "http://127.0.0.1:8080/s3cret"
        );
    }

    #[test]
    fn bare_dollar_form_is_left_alone() {
        assert_eq!(expand("$TOKEN and $ alone", &env()).0, "$TOKEN and $ alone");
    }

    #[test]
    fn double_dollar_is_not_an_escape() {
        assert_eq!(expand("$${TOKEN}", &env()).0, "$s3cret");
    }

    #[test]
    fn undefined_expands_to_empty_and_is_reported_once() {
        let (out, undefined) = expand("${NOPE}-${NOPE}-${ALSO}", &env());
        assert_eq!(out, "--");
        assert_eq!(undefined, vec!["NOPE".to_owned(), "ALSO".to_owned()]);
    }

    #[test]
    fn set_but_empty_is_defined() {
        assert_eq!(expand("a${EMPTY}b", &env()), ("ab".to_owned(), vec![]));
    }

    #[test]
    fn malformed_forms_are_kept() {
        assert_eq!(expand("${", &env()).0, "${");
        assert_eq!(expand("${TOKEN", &env()).0, "${TOKEN");
        assert_eq!(expand("${}", &env()).0, "${}");
        assert_eq!(expand("${1X}", &env()).0, "${1X}");
        assert_eq!(expand("${A B}", &env()).0, "${A B}");
        assert_eq!(
            expand("${bad name} ${TOKEN}", &env()).0,
            "${bad name} s3cret"
        );
    }

    #[test]
    fn non_ascii_text_survives() {
        assert_eq!(expand("é${TOKEN}ü", &env()).0, "és3cretü");
    }

    #[test]
    fn mcp_server_fields_expand_and_others_do_not() {
        let server = McpServerFile {
            command: Some("${TOKEN}".into()),
            args: vec!["--token=${TOKEN}".into(), "${MISSING}".into()],
            env: [("API_TOKEN".to_owned(), "${TOKEN}".to_owned())].into(),
            url: Some("http://${HOST}/mcp".into()),
            headers: [("Authorization".to_owned(), "Bearer ${MISSING}".to_owned())].into(),
            ..McpServerFile::default()
        };
        let (out, met) = expand_mcp_server(&server, &env(), |_| false);
        assert_eq!(out.command.as_deref(), Some("${TOKEN}"));
        assert_eq!(out.args, vec!["--token=s3cret".to_owned(), String::new()]);
        assert_eq!(out.env["API_TOKEN"], "s3cret");
        assert_eq!(out.url.as_deref(), Some("http://127.0.0.1/mcp"));
        assert_eq!(out.headers["Authorization"], "Bearer ");
        assert_eq!(met.undefined, vec!["MISSING".to_owned()]);
        assert!(met.refused.is_empty());
        assert_eq!(
            met.values,
            vec!["s3cret".to_owned(), "127.0.0.1".to_owned()]
        );
    }

    #[test]
    fn refused_variables_expand_to_nothing_in_every_field_set_or_not() {
        let env: BTreeMap<String, String> = [("KEY", "sk-secret"), ("OWN", "mine")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let server = McpServerFile {
            args: vec!["--key=${KEY}".into(), "${OWN}".into()],
            env: [("K".to_owned(), "${KEY}".to_owned())].into(),
            url: Some("http://h/mcp?k=${KEY}&u=${UNSET_KEY}&o=${OWN}".into()),
            headers: [("X-Key".to_owned(), "${KEY}".to_owned())].into(),
            ..McpServerFile::default()
        };
        let refuse = |name: &str| name == "KEY" || name == "UNSET_KEY";
        let (out, met) = expand_mcp_server(&server, &env, refuse);
        assert_eq!(out.args, vec!["--key=".to_owned(), "mine".to_owned()]);
        assert_eq!(out.env["K"], "");
        assert_eq!(out.url.as_deref(), Some("http://h/mcp?k=&u=&o=mine"));
        assert_eq!(out.headers["X-Key"], "");
        assert_eq!(met.refused, vec!["KEY".to_owned(), "UNSET_KEY".to_owned()]);
        assert!(met.undefined.is_empty());
        assert_eq!(met.values, vec!["mine".to_owned()]);
        for field in [out.args.join(" "), out.url.clone().unwrap_or_default()] {
            assert!(!field.contains("sk-secret"), "{field}");
        }
    }
}
