//! The on-disk layout of the session store: tree names, key encodings, id rules
//! and the versioned JSON value envelope (documented in `docs/storage.md`).
//!
//! Every key that belongs to a session or a run starts with the owner's id and a
//! `0x00` separator. Ids never contain `0x00`, so the prefix `id 0x00` of one
//! owner is never a prefix of another owner's keys, even when one id is a prefix
//! of another (`a` and `ab`). Integers in keys are 8-byte big-endian, so sled's
//! byte-ordered iteration yields them in numeric order. This module is pure: it
//! builds and parses bytes and touches no database.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::StoreError;

/// Name of the database directory inside the data directory.
pub const DB_DIR_NAME: &str = "db";

/// Tree of session metadata: key `session_id`.
pub const SESSIONS_TREE: &str = "sessions";
/// Tree of messages: key `session_id 0x00 index(u64 BE)`.
pub const MESSAGES_TREE: &str = "messages";
/// Tree of tool results waiting for their tool message: key `session_id 0x00 call_id`.
pub const PENDING_TREE: &str = "pending_results";
/// Tree of compaction markers: key `session_id 0x00 marker_seq(u64 BE)`.
pub const MARKERS_TREE: &str = "markers";
/// Tree of the layer-1 replacement ledger: key `session_id 0x00 call_id`.
pub const LEDGER_TREE: &str = "ledger";
/// Tree of "allow always" rules: key `session_id`.
pub const RULES_TREE: &str = "session_rules";
/// Tree of the project memory each session's prompt holds: key `session_id`.
pub const MEMORY_TREE: &str = "session_memory";
/// Tree of the task plan of each session's agent (`update_plan`): key `session_id`.
pub const TASK_PLANS_TREE: &str = "task_plans";
/// Tree of run records: key `run_id`.
pub const RUNS_TREE: &str = "runs";
/// Index of a session's runs: key `session_id 0x00 run_id`, empty value.
pub const SESSION_RUNS_TREE: &str = "session_runs";
/// Tree of run events: key `run_id 0x00 seq(u64 BE)`.
pub const EVENTS_TREE: &str = "events";
/// Tree of span records: key `run_id 0x00 span_id`.
pub const SPANS_TREE: &str = "spans";

/// Separator between an owner id and the rest of a key.
pub(crate) const SEPARATOR: u8 = 0x00;

/// Longest accepted session or run id, in bytes (ids are UUIDs in practice).
pub const MAX_ID_BYTES: usize = 256;

/// Version tag written into every value; readers skip records of another version.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Size of an integer in a key.
const U64_BYTES: usize = 8;

/// Checks an owner id (session or run): non-empty, at most [`MAX_ID_BYTES`],
/// no `0x00` byte (the separator).
pub(crate) fn check_id(what: &'static str, id: &str) -> Result<(), StoreError> {
    let reason = if id.is_empty() {
        "it is empty".to_owned()
    } else if id.len() > MAX_ID_BYTES {
        format!("it is longer than {MAX_ID_BYTES} bytes")
    } else if id.as_bytes().contains(&SEPARATOR) {
        "it contains a NUL character".to_owned()
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidId {
        what,
        id: id.to_owned(),
        reason,
    })
}

/// Checks an id that follows the separator (call id, span id): non-empty.
pub(crate) fn check_child_id(what: &'static str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() {
        return Err(StoreError::InvalidId {
            what,
            id: String::new(),
            reason: "it is empty".to_owned(),
        });
    }
    Ok(())
}

/// `owner 0x00`: the prefix of every key of one session or run.
pub(crate) fn owner_prefix(owner: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(owner.len() + 1 + U64_BYTES);
    key.extend_from_slice(owner.as_bytes());
    key.push(SEPARATOR);
    key
}

/// `owner 0x01`: the first key after every key of `owner` (exclusive range end).
pub(crate) fn owner_end(owner: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(owner.len() + 1);
    key.extend_from_slice(owner.as_bytes());
    key.push(SEPARATOR + 1);
    key
}

/// `owner 0x00 n(u64 BE)`: messages, markers, events.
pub fn numbered_key(owner: &str, n: u64) -> Vec<u8> {
    let mut key = owner_prefix(owner);
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// `owner 0x00 child`: pending results, ledger entries, spans, a session's runs.
pub(crate) fn child_key(owner: &str, child: &str) -> Vec<u8> {
    let mut key = owner_prefix(owner);
    key.extend_from_slice(child.as_bytes());
    key
}

/// The number of a [`numbered_key`] of `owner`, or `None` when the key has
/// another shape.
pub fn parse_numbered_key(owner: &str, key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(owner_prefix(owner).as_slice())?;
    let bytes: [u8; U64_BYTES] = rest.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// The child part of a `child_key` of `owner`, when it is UTF-8.
pub fn parse_child_key<'k>(owner: &str, key: &'k [u8]) -> Option<&'k str> {
    let rest = key.strip_prefix(owner_prefix(owner).as_slice())?;
    std::str::from_utf8(rest).ok()
}

/// A [`child_key`] split into its owner and child ids, whoever the owner
/// is; `None` when the key has no separator or either part is not UTF-8.
pub(crate) fn split_child_key(key: &[u8]) -> Option<(&str, &str)> {
    let separator = key.iter().position(|byte| *byte == SEPARATOR)?;
    let owner = std::str::from_utf8(&key[..separator]).ok()?;
    let child = std::str::from_utf8(&key[separator + 1..]).ok()?;
    Some((owner, child))
}

/// The envelope every value is stored in: `{"v":1,"data":…}`.
#[derive(Serialize)]
struct EnvelopeOut<'a, T> {
    v: u32,
    data: &'a T,
}

/// The envelope as read back.
#[derive(Deserialize)]
struct EnvelopeIn<T> {
    v: u32,
    data: T,
}

/// Only the version of an envelope, to explain why a record did not decode.
#[derive(Deserialize)]
struct VersionOnly {
    v: u32,
}

/// Encodes a value in the versioned envelope.
pub fn encode<T: Serialize>(data: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&EnvelopeOut {
        v: FORMAT_VERSION,
        data,
    })
    .map_err(StoreError::Encode)
}

/// Decodes a value from its envelope. The error is a reason for people:
/// truncated or invalid JSON, an unknown version, a wrong shape.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match serde_json::from_slice::<EnvelopeIn<T>>(bytes) {
        Ok(envelope) if envelope.v == FORMAT_VERSION => Ok(envelope.data),
        Ok(envelope) => Err(unsupported_version(envelope.v)),
        Err(error) => match serde_json::from_slice::<VersionOnly>(bytes) {
            Ok(version) if version.v != FORMAT_VERSION => Err(unsupported_version(version.v)),
            _ if error.is_eof() => {
                Err(format!("truncated record ({} bytes): {error}", bytes.len()))
            }
            _ => Err(format!(
                "undecodable record ({} bytes): {error}",
                bytes.len()
            )),
        },
    }
}

fn unsupported_version(v: u32) -> String {
    format!(
        "record format version {v} is not supported (this build reads version {FORMAT_VERSION})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_keys_sort_numerically_across_byte_boundaries() {
        let values = [0u64, 1, 255, 256, 65_535, 65_536, 1 << 32, u64::MAX];
        let keys: Vec<Vec<u8>> = values.iter().map(|n| numbered_key("s", *n)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (n, key) in values.iter().zip(&keys) {
            assert_eq!(parse_numbered_key("s", key), Some(*n));
        }
    }

    #[test]
    fn prefixes_of_ids_that_prefix_each_other_do_not_overlap() {
        let a_prefix = owner_prefix("a");
        let ab_key = numbered_key("ab", 0);
        assert!(!ab_key.starts_with(&a_prefix));
        // Every key of `a` lies in [a\0, a\x01) and no key of `ab` does.
        let a_end = owner_end("a");
        assert!(numbered_key("a", u64::MAX) < a_end);
        assert!(child_key("a", "\u{10FFFF}") < a_end);
        assert!(ab_key > a_end);
        assert!(child_key("a", "x") >= a_prefix);
        assert_eq!(parse_numbered_key("a", &ab_key), None);
    }

    #[test]
    fn ids_are_checked() {
        assert!(check_id("session", "s-1").is_ok());
        assert!(check_id("session", "").is_err());
        assert!(check_id("session", "a\0b").is_err());
        assert!(check_id("run", &"x".repeat(MAX_ID_BYTES + 1)).is_err());
        assert!(check_id("run", &"x".repeat(MAX_ID_BYTES)).is_ok());
        assert!(check_child_id("call", "").is_err());
        let err = check_id("session", "a\0b").unwrap_err().to_string();
        assert!(err.contains("NUL"), "{err}");
    }

    #[test]
    fn child_keys_parse_back() {
        let key = child_key("s", "toolu_1");
        assert_eq!(parse_child_key("s", &key), Some("toolu_1"));
        assert_eq!(parse_child_key("t", &key), None);
        assert_eq!(split_child_key(&key), Some(("s", "toolu_1")));
        assert_eq!(split_child_key(b"no separator"), None);
    }

    #[test]
    fn envelope_round_trip_and_reasons() {
        let bytes = encode(&vec![1u32, 2]).unwrap();
        assert_eq!(bytes, br#"{"v":1,"data":[1,2]}"#);
        assert_eq!(decode::<Vec<u32>>(&bytes), Ok(vec![1, 2]));

        let truncated = &bytes[..bytes.len() - 3];
        let reason = decode::<Vec<u32>>(truncated).unwrap_err();
        assert!(reason.starts_with("truncated"), "{reason}");

        let reason = decode::<Vec<u32>>(b"\xff\x00garbage").unwrap_err();
        assert!(reason.starts_with("undecodable"), "{reason}");

        let reason = decode::<Vec<u32>>(br#"{"v":2,"data":{"new":"shape"}}"#).unwrap_err();
        assert!(reason.contains("version 2"), "{reason}");
        let reason = decode::<Vec<u32>>(br#"{"v":2,"data":[1]}"#).unwrap_err();
        assert!(reason.contains("version 2"), "{reason}");
    }
}
