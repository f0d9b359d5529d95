//! Session and run ids given on the command line: a full id, its short id
//! (the 8 characters lists and progress lines show, see
//! [`troupe_store::short_id`]) or a unique prefix of either, as `git` takes a
//! prefix of a commit hash. The store finds the ids a prefix names;
//! [`outcome`] words what that means for the person
//! (an ambiguous prefix lists its matches, a prefix matching nothing says
//! so). Both are usage errors (exit code 2).

use troupe_store::{IdMatch, Store};

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
}
