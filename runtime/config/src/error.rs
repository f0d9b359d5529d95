//! Why a configuration file cannot be used: read, parsed or checked, each
//! with the file, the key and the line where it is known.

use std::io;
use std::path::{Path, PathBuf};

/// A configuration error. Its message starts with `FILE:LINE:` (except for
/// files that cannot be read at all) and names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read (permissions, a directory, not UTF-8).
    #[error("{}: cannot read the configuration file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is not valid TOML.
    #[error("{}:{line}: TOML syntax error: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A key is unknown or its value is wrong.
    #[error("{}:{line}: {key}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: usize,
        /// Dotted key path, e.g. `providers.claude.max_tokens`.
        key: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

impl ConfigError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. } | Self::Syntax { path, .. } | Self::Invalid { path, .. } => {
                path
            }
        }
    }

    /// The 1-based line, when the error points into the file.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Read { .. } => None,
            Self::Syntax { line, .. } | Self::Invalid { line, .. } => Some(*line),
        }
    }

    /// The dotted key path, when the error is about a key.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            Self::Read { .. } | Self::Syntax { .. } => None,
        }
    }
}
