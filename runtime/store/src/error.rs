//! Errors of the session store and the mapping of sled and file-system errors to
//! them.
//!
//! Owns [`StoreError`] and the pure functions that classify a low-level failure
//! (lock held by another process, unwritable directory, disk full, damaged file).
//! It performs no I/O itself and knows nothing of the key layout.

use std::io;
use std::path::{Path, PathBuf};

/// The prefix of the message sled 0.34 gives when another process holds the
/// exclusive lock on its data file (`Config::try_lock` in sled 0.34.7). sled
/// reports it as a plain `io::ErrorKind::Other`, so the text is the only signal;
/// a test opens a locked database to pin this behaviour.
const SLED_LOCK_MESSAGE: &str = "could not acquire lock";

/// A failure of the session store. Every message says what failed and what to
/// do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the database open (sled allows one process only).
    #[error(
        "the session database {} is in use by another troupe process ({detail}): a run or \
         `troupe serve`; wait for it or stop it, or point TROUPE_HOME at another directory",
        path.display()
    )]
    Locked {
        /// The database directory.
        path: PathBuf,
        /// What the lock attempt reported.
        detail: String,
    },
    /// The data directory or the database files cannot be created or written.
    #[error(
        "cannot write the troupe data directory {}: {source}; make it writable by this user \
         or point TROUPE_HOME at a writable directory",
        path.display()
    )]
    Unwritable {
        /// The directory or file that refused the write.
        path: PathBuf,
        /// The file-system error.
        #[source]
        source: io::Error,
    },
    /// Any other input/output failure (disk full, device error, a writer that
    /// failed during an export).
    #[error("session store: cannot {op} at {}: {source}{}", path.display(), io_hint(source))]
    Io {
        /// What was being done, as a verb phrase ("flush the database").
        op: String,
        /// The path involved (the database directory for database operations).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A stored record or the database file is damaged.
    #[error(
        "the session store is damaged: {what}: {detail}; the record cannot be used (move the \
         data directory's `db` aside to start with an empty store)"
    )]
    Corrupt {
        /// Which record or file.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A record could not be encoded as JSON.
    #[error("cannot encode a record for the session store: {0}")]
    Encode(#[source] serde_json::Error),
    /// The session or run does not exist.
    #[error("{what} not found; list what exists with `troupe sessions list` or `troupe runs list`")]
    NotFound {
        /// What was looked up, e.g. `session "abc"`.
        what: String,
    },
    /// A session or run with this id already exists.
    #[error("{what} already exists; choose another id")]
    AlreadyExists {
        /// What was being created, e.g. `session "abc"`.
        what: String,
    },
    /// An id cannot be used as a key.
    #[error("invalid {what} id {id:?}: {reason}")]
    InvalidId {
        /// `session`, `parent session`, `run`, `call` or `span`.
        what: &'static str,
        /// The id as given.
        id: String,
        /// Why it is refused.
        reason: String,
    },
    /// The database engine reported an internal failure that is neither I/O
    /// nor corruption.
    #[error("the session database failed: {detail}; if this persists, report it with the log")]
    Database {
        /// The engine's message.
        detail: String,
    },
    /// A rewind of a session's conversation was refused; nothing changed.
    #[error(transparent)]
    Rewind(#[from] crate::rewind::RewindRefusal),
}

/// A hint appended to I/O error messages for the failures a person can fix.
fn io_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            "; the disk is full: free some space (old sessions can go with `troupe sessions rm`)"
        }
        io::ErrorKind::FileTooLarge => "; a file grew past the file-system limit",
        _ => "",
    }
}

/// Whether an I/O error means "this location cannot be written by us".
pub(crate) fn is_unwritable(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::PermissionDenied
            | io::ErrorKind::ReadOnlyFilesystem
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::AlreadyExists
            | io::ErrorKind::IsADirectory
    )
}

/// Maps a failure to create a directory of the store.
pub(crate) fn dir_error(path: &Path, source: io::Error) -> StoreError {
    if is_unwritable(&source) {
        StoreError::Unwritable {
            path: path.to_path_buf(),
            source,
        }
    } else {
        StoreError::Io {
            op: "create the directory".to_owned(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Maps a sled error raised while opening the database in `db_dir`.
pub(crate) fn open_error(db_dir: &Path, error: sled::Error) -> StoreError {
    match error {
        sled::Error::Io(source)
            if source.kind() == io::ErrorKind::Other
                && source.to_string().starts_with(SLED_LOCK_MESSAGE) =>
        {
            StoreError::Locked {
                path: db_dir.to_path_buf(),
                detail: "its lock file is held".to_owned(),
            }
        }
        other => sled_error("open the database", db_dir, other),
    }
}

/// Maps a sled error raised by operation `op` on the database in `db_dir`.
pub(crate) fn sled_error(op: &str, db_dir: &Path, error: sled::Error) -> StoreError {
    match error {
        sled::Error::Io(source) if is_unwritable(&source) => StoreError::Unwritable {
            path: db_dir.to_path_buf(),
            source,
        },
        sled::Error::Io(source) => StoreError::Io {
            op: op.to_owned(),
            path: db_dir.to_path_buf(),
            source,
        },
        sled::Error::Corruption { at, .. } => StoreError::Corrupt {
            what: format!("database file in {}", db_dir.display()),
            detail: match at {
                Some(at) => format!("checksum mismatch at {at:?} while trying to {op}"),
                None => format!("damaged data found while trying to {op}"),
            },
        },
        sled::Error::CollectionNotFound(name) => StoreError::Database {
            detail: format!(
                "tree {:?} vanished while trying to {op}",
                String::from_utf8_lossy(&name)
            ),
        },
        sled::Error::Unsupported(detail) | sled::Error::ReportableBug(detail) => {
            StoreError::Database {
                detail: format!("{detail} (while trying to {op})"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        PathBuf::from("/data/troupe/db")
    }

    #[test]
    fn sled_lock_failure_is_locked_with_advice() {
        let error = sled::Error::Io(io::Error::other(format!(
            "{SLED_LOCK_MESSAGE} on \"/data/troupe/db/db\": Os {{ code: 11 }}"
        )));
        let mapped = open_error(&dir(), error);
        assert!(matches!(mapped, StoreError::Locked { .. }), "{mapped:?}");
        let text = mapped.to_string();
        assert!(text.contains("/data/troupe/db"), "{text}");
        assert!(text.contains("TROUPE_HOME"), "{text}");
    }

    #[test]
    fn other_io_is_not_mistaken_for_a_lock() {
        let error = sled::Error::Io(io::Error::other("something else"));
        assert!(matches!(open_error(&dir(), error), StoreError::Io { .. }));
    }

    #[test]
    fn permission_and_read_only_errors_are_unwritable() {
        for kind in [
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::ReadOnlyFilesystem,
            io::ErrorKind::NotADirectory,
        ] {
            let mapped = sled_error("flush", &dir(), sled::Error::Io(io::Error::from(kind)));
            assert!(matches!(mapped, StoreError::Unwritable { .. }), "{kind:?}");
            assert!(mapped.to_string().contains("TROUPE_HOME"));
        }
        let mapped = dir_error(&dir(), io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(matches!(mapped, StoreError::Unwritable { .. }));
        let mapped = dir_error(&dir(), io::Error::from(io::ErrorKind::Interrupted));
        assert!(matches!(mapped, StoreError::Io { .. }));
    }

    #[test]
    fn disk_full_says_so() {
        let mapped = sled_error(
            "flush the database",
            &dir(),
            sled::Error::Io(io::Error::from(io::ErrorKind::StorageFull)),
        );
        let text = mapped.to_string();
        assert!(text.contains("flush the database"), "{text}");
        assert!(text.contains("disk is full"), "{text}");
    }

    #[test]
    fn corruption_and_engine_failures_are_values() {
        let mapped = sled_error("read", &dir(), sled::Error::Unsupported("x".into()));
        assert!(matches!(mapped, StoreError::Database { .. }));
        let mapped = sled_error("read", &dir(), sled::Error::ReportableBug("y".into()));
        assert!(mapped.to_string().contains("y (while trying to read)"));
    }
}
