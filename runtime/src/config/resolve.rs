//! Provider resolution (placeholder).

use super::{Config, ResolvedProvider};

/// A provider resolution error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(pub String);

/// Resolves the provider to use.
pub fn resolve_provider(
    _config: &Config,
    _name: Option<&str>,
) -> Result<ResolvedProvider, ResolveError> {
    Err(ResolveError("not built yet".into()))
}
