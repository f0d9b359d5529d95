//! Provider keys out of reach of every command (SPEC §5, §15).
//!
//! At start-up, before any thread exists, [`harden_process`] reads the
//! variables that hold provider keys into memory once, then removes them from
//! the process's own environment block: the entry leaves `environ` and the
//! bytes of the original `NAME=value` string are overwritten, so neither
//! `getenv`, a child that inherits the environment, nor `/proc/PID/environ`
//! (which shows the original block) still holds the value. It also marks the
//! process non-dumpable (`PR_SET_DUMPABLE` 0: `/proc/PID/environ`, `mem` and
//! `ptrace` are closed to processes of the same user) and sets the core-dump
//! size limit to 0. Configuration keeps reading the keys through
//! [`withheld`] (`config::ProcessEnv` falls back to it), so providers built
//! later, in a long-lived daemon too, still get them.
//!
//! Which names are withheld is decided by pure functions: [`key_names`] (the
//! standard names plus every `api_key_env` a configuration names),
//! `config_key_names` (those of a merged configuration and of start-up) and
//! [`withhold_request`] (the names a starting troupe process hands its daemon).
//! [`crate::child_environment`] never passes a withheld name to
//! a child, whatever the allowlist says, and an MCP entry never expands one
//! ([`is_key_name`], in any case). This module does not decide which
//! configuration applies (that is `config`'s job) and starts no process.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use troupe_protocol::model::Protocol;

/// Variables that hold provider credentials whatever the configuration says.
pub(crate) const STANDARD_KEY_VARS: [&str; 3] = [
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
];

/// Variable in which a troupe process that starts another one (its daemon)
/// names the key variables it passes along, so the new process withholds
/// them too: a comma-separated list of names, never values.
pub const WITHHOLD_VARS_VAR: &str = "TROUPE_WITHHOLD_VARS";

/// What [`harden_process`] read at start-up.
#[derive(Debug)]
struct Withheld {
    /// Every name withheld, set or not.
    names: BTreeSet<String>,
    /// The values of those that were set.
    values: BTreeMap<String, String>,
}

/// Set once by [`harden_process`].
static WITHHELD: OnceLock<Withheld> = OnceLock::new();

/// The key variables to withhold: `STANDARD_KEY_VARS`, each protocol's
/// default key variable and every name in `configured` (the `api_key_env` of
/// provider entries, the names a parent process listed). Empty names and
/// names that cannot be variable names are left out.
pub fn key_names<'a>(configured: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let defaults = [Protocol::Anthropic, Protocol::OpenAi].map(Protocol::default_api_key_env);
    STANDARD_KEY_VARS
        .iter()
        .copied()
        .chain(defaults)
        .chain(configured)
        .filter(|name| is_variable_name(name))
        .map(str::to_owned)
        .collect()
}

/// Whether `name` is one of `keys`, compared without regard to case, so a
/// differently spelled reference is refused as well.
pub fn is_key_name(keys: &BTreeSet<String>, name: &str) -> bool {
    keys.iter().any(|key| key.eq_ignore_ascii_case(name))
}

/// The names listed in a [`WITHHOLD_VARS_VAR`] value.
pub fn parse_withhold_list(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect()
}

/// What a troupe process passes to a troupe process it starts so the child
/// can use the same keys and withholds them as well: the values of `names`
/// that `lookup` knows, plus [`WITHHOLD_VARS_VAR`] listing those names.
pub fn withhold_request(
    names: &BTreeSet<String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = names
        .iter()
        .filter_map(|name| lookup(name).map(|value| (name.clone(), value)))
        .collect();
    let listed: Vec<&str> = out.iter().map(|(name, _)| name.as_str()).collect();
    let list = listed.join(",");
    if !list.is_empty() {
        out.push((WITHHOLD_VARS_VAR.to_owned(), list));
    }
    out
}

/// Whether `name` looks like an environment variable name.
fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A withheld variable's value, as read at start-up.
pub fn withheld(name: &str) -> Option<String> {
    WITHHELD.get().and_then(|w| w.values.get(name).cloned())
}

/// The names withheld at start-up (whether or not they were set).
pub fn withheld_names() -> BTreeSet<String> {
    WITHHELD.get().map(|w| w.names.clone()).unwrap_or_default()
}

/// The process environment as configuration sees it: the current variables
/// plus the withheld ones (what a client sends its daemon with a run).
pub fn process_vars() -> Vec<(String, String)> {
    let mut vars: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    if let Some(withheld) = WITHHELD.get() {
        for (name, value) in &withheld.values {
            vars.entry(name.clone()).or_insert_with(|| value.clone());
        }
    }
    vars.into_iter().collect()
}

/// What [`harden_process`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hardening {
    /// Names whose values were read and scrubbed from the environment.
    pub scrubbed: Vec<String>,
    /// Steps that failed, worded for a log line.
    pub failures: Vec<String>,
}

/// Reads the variables `names` into memory, scrubs them from the process's
/// environment block, marks the process non-dumpable and disables core dumps.
/// Runs once; later calls do nothing and report nothing.
///
/// # Safety
///
/// Must be called before any other thread exists (first thing in `main`):
/// it edits the environment, which other threads may read without a lock.
pub unsafe fn harden_process(names: &BTreeSet<String>) -> Hardening {
    let mut report = Hardening::default();
    if WITHHELD.get().is_some() {
        return report;
    }
    // SAFETY: the caller guarantees no other thread exists.
    let captured = unsafe { scrub_environment(names) };
    report.scrubbed = captured.keys().cloned().collect();
    // Names that were not set are remembered too: `withheld_names` lists
    // every name a child must never get.
    let _ = WITHHELD.set(Withheld {
        names: names.clone(),
        values: captured,
    });
    if let Err(err) = set_not_dumpable() {
        report
            .failures
            .push(format!("cannot mark the process non-dumpable: {err}"));
    }
    if let Err(err) = disable_core_dumps() {
        report
            .failures
            .push(format!("cannot disable core dumps: {err}"));
    }
    report
}

/// Removes every variable of `names` from `environ` and overwrites the bytes
/// of its `NAME=value` string; returns the values that were set.
///
/// # Safety
///
/// No other thread may exist.
unsafe fn scrub_environment(names: &BTreeSet<String>) -> BTreeMap<String, String> {
    unsafe extern "C" {
        static mut environ: *const *const libc::c_char;
    }
    let mut found: Vec<(String, Option<String>, *mut u8, usize)> = Vec::new();
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings
    // maintained by libc; nothing changes it while we read (one thread).
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = CStr::from_ptr(*entry);
            let bytes = text.to_bytes();
            if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                let name = &bytes[..eq];
                if let Ok(name) = std::str::from_utf8(name)
                    && names.contains(name)
                {
                    let value = String::from_utf8(bytes[eq + 1..].to_vec()).ok();
                    found.push((
                        name.to_owned(),
                        value,
                        (*entry).cast_mut().cast(),
                        bytes.len(),
                    ));
                }
            }
            entry = entry.add(1);
        }
    }
    let mut values = BTreeMap::new();
    for (name, value, ptr, len) in found {
        // SAFETY: one thread (the caller's guarantee). `remove_var` drops the
        // pointer from `environ` and never frees the string, which lives in
        // the block the kernel placed on the stack at exec (nothing has called
        // setenv yet at start-up), so overwriting it below is sound.
        unsafe {
            std::env::remove_var(OsStr::from_bytes(name.as_bytes()));
            std::ptr::write_bytes(ptr, 0, len);
        }
        if let Some(value) = value.filter(|value| !value.is_empty()) {
            values.insert(name, value);
        }
    }
    values
}

/// `prctl(PR_SET_DUMPABLE, 0)`.
fn set_not_dumpable() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `setrlimit(RLIMIT_CORE, 0)`.
fn disable_core_dumps() -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a stack value for the call's duration.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_and_configured_names_are_withheld() {
        let names = key_names(["MY_LLM_KEY", "", "1BAD", "bad-name", "ANTHROPIC_API_KEY"]);
        assert!(names.contains("ANTHROPIC_API_KEY"));
        assert!(names.contains("OPENAI_API_KEY"));
        assert!(names.contains("ANTHROPIC_AUTH_TOKEN"));
        assert!(names.contains("MY_LLM_KEY"));
        assert!(!names.contains(""));
        assert!(!names.contains("1BAD"));
        assert!(!names.contains("bad-name"));
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn a_child_troupe_gets_the_values_and_their_names_only() {
        let names = key_names(["MY_LLM_KEY"]);
        let lookup = |name: &str| match name {
            "ANTHROPIC_API_KEY" => Some("sk-a".to_owned()),
            "MY_LLM_KEY" => Some("sk-m".to_owned()),
            _ => None,
        };
        assert_eq!(
            withhold_request(&names, lookup),
            vec![
                ("ANTHROPIC_API_KEY".to_owned(), "sk-a".to_owned()),
                ("MY_LLM_KEY".to_owned(), "sk-m".to_owned()),
                (
                    WITHHOLD_VARS_VAR.to_owned(),
                    "ANTHROPIC_API_KEY,MY_LLM_KEY".to_owned()
                ),
            ]
        );
        assert!(withhold_request(&names, |_| None).is_empty());
        assert_eq!(parse_withhold_list(" A, ,B,"), vec!["A", "B"]);
    }
}
