//! Session and run ids given on the command line: a full id, its short id
//! (the 8 characters lists and progress lines show, see
//! [`troupe_store::short_id`]) or a unique prefix of either, as `git` takes a
//! prefix of a commit hash. The store finds the ids a prefix names;
//! [`outcome`] words what that means for the person
//! (an ambiguous prefix lists its matches, a prefix matching nothing says
//! so). Both are usage errors (exit code 2). Lists show each id by
//! [`unique_short_ids`]: its short id, lengthened where two ids shown share
//! one.

use troupe_store::{IdMatch, SHORT_ID_LEN, Store, short_id};

use crate::project::SetupError;

/// What kind of id a command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdKind {
    /// A session id (`resume`, `run --session`, `sessions show|export|rm`).
    Session,
    /// A run id (`trace`).
    Run,
}

impl IdKind {
    fn noun(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Run => "run",
        }
    }

    /// Where the person finds ids of this kind.
    fn where_to_look(self) -> &'static str {
        match self {
            Self::Session => "list sessions with `troupe sessions list`",
            Self::Run => "see `troupe runs list` for run ids",
        }
    }
}

/// The full id `given` names, or a usage error saying why it names none.
pub(crate) fn resolve(store: &Store, kind: IdKind, given: &str) -> Result<String, SetupError> {
    let found = match kind {
        IdKind::Session => store.find_session(given),
        IdKind::Run => store.find_run(given),
    };
    match found {
        Ok(found) => outcome(kind, given, found).map_err(SetupError::usage),
        Err(troupe_store::StoreError::InvalidId { reason, .. }) => Err(SetupError::usage(format!(
            "invalid {} id {given:?}: {reason}",
            kind.noun()
        ))),
        Err(err) => Err(SetupError::runtime(err.to_string())),
    }
}

/// The full id of a lookup, or the message that explains why `given` names
/// no single id.
pub(crate) fn outcome(kind: IdKind, given: &str, found: IdMatch) -> Result<String, String> {
    let noun = kind.noun();
    match found {
        IdMatch::Unique(id) => Ok(id),
        IdMatch::NoMatch => Err(format!(
            "no {noun} {given}: no {noun} id or short id starts with it; {}",
            kind.where_to_look()
        )),
        IdMatch::Ambiguous { ids, total } => {
            let mut message =
                format!("{noun} id prefix {given} is ambiguous; it starts {total} {noun} ids:");
            for id in &ids {
                message.push_str("\n  ");
                message.push_str(id);
            }
            if total > ids.len() {
                message.push_str(&format!("\n  … and {} more", total - ids.len()));
            }
            message.push_str("\ngive more characters of the id");
            Err(message)
        }
    }
}

/// The id each of `ids` is shown by in a listing of them all: its
/// [`short_id`], lengthened (as git lengthens an abbreviated hash) to the
/// shortest end of the id, at least [`SHORT_ID_LEN`] characters and never
/// starting with a hyphen, that no other UUID of `ids` ends with. An id that
/// is not a UUID is shown whole; an id listed twice is one id. Pure; same
/// order as `ids`.
pub(crate) fn unique_short_ids<'a>(ids: &[&'a str]) -> Vec<&'a str> {
    let mut by_short: std::collections::HashMap<&str, Vec<&str>> = std::collections::HashMap::new();
    for id in ids.iter().copied().filter(|id| is_uuid(id)) {
        let same = by_short.entry(short_id(id)).or_default();
        if !same.contains(&id) {
            same.push(id);
        }
    }
    ids.iter()
        .map(|&id| {
            let Some(same) = by_short.get(short_id(id)).filter(|same| same.len() > 1) else {
                return short_id(id);
            };
            let shared = same
                .iter()
                .filter(|other| **other != id)
                .map(|other| common_end_len(id, other))
                .max()
                .unwrap_or(0);
            let mut len = (shared + 1).clamp(SHORT_ID_LEN, id.len());
            if id.as_bytes().get(id.len() - len) == Some(&b'-') {
                len = (len + 1).min(id.len());
            }
            &id[id.len() - len..]
        })
        .collect()
}

/// How many characters `a` and `b` share at their ends.
fn common_end_len(a: &str, b: &str) -> usize {
    a.bytes()
        .rev()
        .zip(b.bytes().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// How each id of a listing is shown: by [`unique_short_ids`] of all the ids
/// it was made with; any other id by its short id.
#[derive(Debug, Default)]
pub(crate) struct ShownIds(std::collections::HashMap<String, String>);

impl ShownIds {
    /// The forms of `ids`, each told apart from the others.
    pub(crate) fn new<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let ids: Vec<&str> = ids.into_iter().collect();
        let shown = unique_short_ids(&ids);
        Self(
            ids.iter()
                .zip(shown)
                .map(|(id, shown)| ((*id).to_owned(), shown.to_owned()))
                .collect(),
        )
    }

    /// How `id` is shown.
    pub(crate) fn get<'a>(&'a self, id: &'a str) -> &'a str {
        self.0.get(id).map_or_else(|| short_id(id), String::as_str)
    }
}

/// A UUID is the one kind of id whose short id is shorter than it.
fn is_uuid(id: &str) -> bool {
    short_id(id).len() < id.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_match_is_the_full_id() {
        assert_eq!(
            outcome(IdKind::Session, "01a", IdMatch::Unique("01abc".into())),
            Ok("01abc".to_string())
        );
    }

    #[test]
    fn no_match_says_so_and_where_ids_are() {
        let message = outcome(IdKind::Run, "zz", IdMatch::NoMatch).unwrap_err();
        assert_eq!(
            message,
            "no run zz: no run id or short id starts with it; see `troupe runs list` for run ids"
        );
        let message = outcome(IdKind::Session, "zz", IdMatch::NoMatch).unwrap_err();
        assert!(message.contains("troupe sessions list"), "{message}");
    }

    #[test]
    fn an_ambiguous_prefix_lists_its_matches() {
        let message = outcome(
            IdKind::Session,
            "01",
            IdMatch::Ambiguous {
                ids: vec!["01a".into(), "01b".into()],
                total: 2,
            },
        )
        .unwrap_err();
        assert_eq!(
            message,
            "session id prefix 01 is ambiguous; it starts 2 session ids:\n  01a\n  01b\ngive more characters of the id"
        );
        let message = outcome(
            IdKind::Session,
            "01",
            IdMatch::Ambiguous {
                ids: vec!["01a".into()],
                total: 12,
            },
        )
        .unwrap_err();
        assert!(message.contains("\n  … and 11 more\n"), "{message}");
    }

    #[test]
    fn ids_sharing_a_short_id_are_shown_by_longer_ends() {
        // Same last 8 characters; they differ 10 characters from the end.
        let a = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
        let b = "0193a1f2-0c4d-7e01-8a2b-3c3d5e6f7a8b";
        let c = "0193a1f2-0c4d-7e01-8a2b-111111111111";
        assert_eq!(
            unique_short_ids(&[a, b, c]),
            ["4d5e6f7a8b", "3d5e6f7a8b", "11111111"]
        );
        // Nothing shared: every id is its short id.
        assert_eq!(unique_short_ids(&[a, c]), ["5e6f7a8b", "11111111"]);
        // The same id twice is one id, not a clash.
        assert_eq!(unique_short_ids(&[a, a]), ["5e6f7a8b", "5e6f7a8b"]);
        // Ids that are not UUIDs are shown whole.
        assert_eq!(
            unique_short_ids(&["feed-0001", a]),
            ["feed-0001", "5e6f7a8b"]
        );
        assert!(unique_short_ids(&[]).is_empty());
        let shown = ShownIds::new([a, b]);
        assert_eq!(shown.get(b), "3d5e6f7a8b");
        assert_eq!(shown.get(c), "11111111", "an id it was not made with");
    }

    #[test]
    fn a_lengthened_id_never_starts_with_a_hyphen_and_stops_at_the_whole_id() {
        // The whole last group is shared: the end takes in the hyphen and
        // one more character.
        let a = "0193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
        let b = "0193a1f2-0c4d-7e01-8a2c-3c4d5e6f7a8b";
        assert_eq!(
            unique_short_ids(&[a, b]),
            ["b-3c4d5e6f7a8b", "c-3c4d5e6f7a8b"]
        );
        // Ids that differ only in their first character are shown whole.
        let c = "1193a1f2-0c4d-7e01-8a2b-3c4d5e6f7a8b";
        assert_eq!(unique_short_ids(&[a, c]), [a, c]);
    }
}
