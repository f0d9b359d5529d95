//! Anthropic Messages adapter (placeholder until the adapter lands).

use super::{ChatRequest, EventStream, Provider, ProviderError, ProviderErrorKind};
use crate::config::ResolvedProvider;

/// Anthropic Messages streaming provider.
pub struct AnthropicProvider {
    name: String,
    model: String,
}

impl AnthropicProvider {
    /// Builds the provider.
    pub fn new(config: &ResolvedProvider) -> Result<Self, ProviderError> {
        Ok(Self {
            name: config.name.clone(),
            model: config.model.clone(),
        })
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }
    fn model(&self) -> &str {
        &self.model
    }
    fn stream(&self, _request: &ChatRequest) -> EventStream {
        let err = ProviderError::new(
            &self.name,
            ProviderErrorKind::Configuration,
            "not built yet",
        );
        Box::pin(futures::stream::once(async move { Err(err) }))
    }
}
