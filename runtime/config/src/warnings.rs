//! Start-up warnings about settings that are accepted but change nothing in
//! this run: configuration keys whose feature does not exist yet, and a cost
//! budget the provider in use cannot be measured against.
//!
//! [`startup_warnings`] is a pure function of the merged configuration and the
//! provider chosen for the run; the command line prints what it returns before
//! the run starts. Nothing a file says is silently accepted: a key the runtime
//! does not act on is either an error (unknown keys, see `load`) or named here.

use super::{Config, ResolvedProvider};

/// What every warning about a key whose feature does not exist yet says.
pub const NOT_SUPPORTED: &str = "is not supported yet and has no effect";

/// The warnings for a run of `provider` under `config`, in a stable order
/// (the window's own warning is `compact::window_warning`).
pub fn startup_warnings(config: &Config, provider: &ResolvedProvider) -> Vec<String> {
    let mut warnings = Vec::new();
    if config.budget_usd_written && provider.price.is_none() {
        warnings.push(format!(
            "`limits.budget_usd` has no effect with provider `{name}`, which has no `price`: \
             no cost is estimated. Add `price = {{ input = …, output = … }}` (USD per million \
             tokens) under `[providers.{name}]`",
            name = provider.name
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{McpServerFile, Price, ProviderFile};
    use troupe_protocol::model::Protocol;

    fn provider(price: Option<Price>) -> ResolvedProvider {
        ResolvedProvider {
            name: "claude".into(),
            protocol: Protocol::Anthropic,
            model: "m".into(),
            base_url: "http://127.0.0.1:9".into(),
            api_key: None,
            api_key_env: "ANTHROPIC_API_KEY".into(),
            context_window: 200_000,
            max_tokens: 8_192,
            thinking_budget: None,
            price,
            idle_timeout: Duration::from_secs(300),
            max_retries: 4,
            store: false,
        }
    }

    #[test]
    fn nothing_written_nothing_to_say() {
        assert!(startup_warnings(&Config::default(), &provider(None)).is_empty());
    }

    #[test]
    fn unsupported_keys_and_an_unpriced_budget_are_named_and_mcp_servers_are_not() {
        let mut config = Config::default();
        config
            .mcp_servers
            .insert("github".into(), McpServerFile::default());
        config
            .mcp_servers
            .insert("search".into(), McpServerFile::default());
        config
            .providers
            .insert("local".into(), ProviderFile::default());
        config.budget_usd_written = true;
        assert_eq!(
            startup_warnings(&config, &provider(None)),
            vec![
                "`limits.budget_usd` has no effect with provider `claude`, which has no \
                 `price`: no cost is estimated. Add `price = { input = …, output = … }` (USD \
                 per million tokens) under `[providers.claude]`"
                    .to_owned(),
            ]
        );
        let priced = provider(Some(Price {
            input: 3.0,
            output: 15.0,
            ..Price::default()
        }));
        assert!(startup_warnings(&config, &priced).is_empty());
        config.budget_usd_written = false;
        assert!(startup_warnings(&config, &provider(None)).is_empty());
    }
}
