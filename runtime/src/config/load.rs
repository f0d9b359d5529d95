//! Loading and merging of configuration files (placeholder).

use std::path::PathBuf;

use super::Config;

/// Where configuration files are looked for.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    /// User config file path.
    pub user: Option<PathBuf>,
    /// Project root.
    pub project_root: Option<PathBuf>,
}

/// A configuration error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Loads configuration.
pub fn load_config(_sources: &ConfigSources) -> Result<Config, ConfigError> {
    Ok(Config::default())
}
