//! Provider resolution (SPEC §1.2, §2): picks the provider entry to use and
//! decides every value of it from the entry, the standard environment
//! variables (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `OPENAI_API_KEY`,
//! `OPENAI_BASE_URL`) and the defaults in `config`.
//!
//! Pure functions of a [`Config`] and an [`Env`] lookup; nothing here reads
//! files, touches the network or builds a provider (that is `llm`'s job). Every
//! [`ResolveError`] is a configuration/usage error (exit code 2 territory).

use std::net::IpAddr;

use super::file::{ProviderFile, Thinking};
use super::load::check_http_url;
use super::paths::Env;
use super::{
    Config, DEFAULT_CONTEXT_WINDOW, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_MAX_TOKENS,
    DEFAULT_THINKING_BUDGET, Protocol, ResolvedProvider,
};

/// Name of the implicit Anthropic provider used when no entries are configured.
pub(crate) const IMPLICIT_ANTHROPIC_NAME: &str = "claude";
/// Name of the implicit OpenAI provider used when no entries are configured.
pub(crate) const IMPLICIT_OPENAI_NAME: &str = "openai";
/// Entry-name prefixes that imply the OpenAI protocol when `protocol` is absent
/// (compared case-insensitively); every other name implies Anthropic.
pub(crate) const OPENAI_NAME_PREFIXES: [&str; 2] = ["openai", "gpt"];
/// Host name that always means this machine.
const LOCALHOST: &str = "localhost";

/// Why no provider could be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The requested (or default) name is not a provider entry.
    #[error("unknown provider {name:?} (known providers: {})", known.join(", "))]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The names that exist (the implicit ones when none is configured).
        known: Vec<String>,
    },
    /// Several entries exist and none was chosen.
    #[error(
        "several providers are configured ({}); set default_provider in the config file or pass --provider NAME",
        names.join(", ")
    )]
    Ambiguous {
        /// The configured names.
        names: Vec<String>,
    },
    /// No entries, and none of the standard variables is set.
    #[error(
        "no provider configured: set ANTHROPIC_API_KEY or OPENAI_API_KEY (or ANTHROPIC_BASE_URL / OPENAI_BASE_URL for a local server), or add a [providers.NAME] entry to the config file"
    )]
    NoProvider,
    /// A non-loopback endpoint and no key.
    #[error(
        "provider {provider:?} needs an API key for {base_url}: set {var} (only loopback servers may run without a key)"
    )]
    MissingApiKey {
        /// Entry name.
        provider: String,
        /// The variable to set.
        var: String,
        /// The endpoint that needs the key.
        base_url: String,
    },
    /// A base-URL variable holds something that is not an http(s) URL.
    #[error("{var} is not usable: {reason}")]
    BadBaseUrlEnv {
        /// `ANTHROPIC_BASE_URL` or `OPENAI_BASE_URL`.
        var: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// An explicit `max_tokens` that leaves no room for the thinking budget.
    #[error(
        "provider {provider:?}: the thinking budget ({budget} tokens) must be below max_tokens ({max_tokens}); raise providers.{provider}.max_tokens or lower providers.{provider}.thinking"
    )]
    ThinkingExceedsMaxTokens {
        /// Entry name.
        provider: String,
        /// Thinking budget.
        budget: u32,
        /// Configured `max_tokens`.
        max_tokens: u32,
    },
}

impl ResolvedProvider {
    /// The same provider with another model (the `--model` override).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }
}

/// The protocol implied by an entry name: names starting with `openai` or
/// `gpt` (any case) speak OpenAI Chat Completions, every other name
/// Anthropic. The Responses protocol is only ever chosen by writing
/// `protocol = "openai-responses"`.
pub(crate) fn infer_protocol(name: &str) -> Protocol {
    let lower = name.to_ascii_lowercase();
    if OPENAI_NAME_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        Protocol::OpenAi
    } else {
        Protocol::Anthropic
    }
}

/// Whether `url` points at this machine (`localhost`, `*.localhost`,
/// `127.0.0.0/8`, `::1`, or an IPv4-mapped loopback address).
pub(crate) fn is_loopback_url(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => {
            let host = host.trim_end_matches('.').to_ascii_lowercase();
            host == LOCALHOST || host.ends_with(&format!(".{LOCALHOST}"))
        }
    }
}

/// Resolves the provider to use.
///
/// Choice: `requested` (the CLI's `--provider`), else `default_provider`, else
/// the only entry. With no entries at all, the implicit entries `claude`
/// (anthropic) and `openai` (openai) exist, and the automatic choice follows
/// the environment: `ANTHROPIC_API_KEY`, then `OPENAI_API_KEY`, then
/// `ANTHROPIC_BASE_URL`, then `OPENAI_BASE_URL` (the first one set wins).
pub fn resolve_provider(
    config: &Config,
    requested: Option<&str>,
    env: &impl Env,
) -> Result<ResolvedProvider, ResolveError> {
    let implicit = ProviderFile::default();
    let (name, entry) = if config.providers.is_empty() {
        let name = match requested.or(config.default_provider.as_deref()) {
            Some(name) => name.to_owned(),
            None => auto_choice(env).ok_or(ResolveError::NoProvider)?.to_owned(),
        };
        let protocol = match name.as_str() {
            IMPLICIT_ANTHROPIC_NAME => Protocol::Anthropic,
            IMPLICIT_OPENAI_NAME => Protocol::OpenAi,
            _ => {
                return Err(ResolveError::UnknownProvider {
                    name,
                    known: vec![
                        IMPLICIT_ANTHROPIC_NAME.to_owned(),
                        IMPLICIT_OPENAI_NAME.to_owned(),
                    ],
                });
            }
        };
        let entry = ProviderFile {
            protocol: Some(protocol),
            ..implicit
        };
        (name, entry)
    } else {
        let name = match requested.or(config.default_provider.as_deref()) {
            Some(name) => name,
            None => match config.providers.keys().collect::<Vec<_>>().as_slice() {
                [only] => only.as_str(),
                names => {
                    return Err(ResolveError::Ambiguous {
                        names: names.iter().map(|n| (*n).clone()).collect(),
                    });
                }
            },
        };
        let entry = config
            .providers
            .get(name)
            .ok_or_else(|| ResolveError::UnknownProvider {
                name: name.to_owned(),
                known: config.providers.keys().cloned().collect(),
            })?
            .clone();
        (name.to_owned(), entry)
    };
    resolve_entry(&name, &entry, env)
}

/// The implicit provider the environment points at, if any.
fn auto_choice(env: &impl Env) -> Option<&'static str> {
    let candidates = [
        (
            Protocol::Anthropic.default_api_key_env(),
            IMPLICIT_ANTHROPIC_NAME,
        ),
        (Protocol::OpenAi.default_api_key_env(), IMPLICIT_OPENAI_NAME),
        (Protocol::Anthropic.base_url_env(), IMPLICIT_ANTHROPIC_NAME),
        (Protocol::OpenAi.base_url_env(), IMPLICIT_OPENAI_NAME),
    ];
    candidates
        .into_iter()
        .find(|(var, _)| env.non_empty(var).is_some())
        .map(|(_, name)| name)
}

/// Decides every value of one entry.
pub fn resolve_entry(
    name: &str,
    entry: &ProviderFile,
    env: &impl Env,
) -> Result<ResolvedProvider, ResolveError> {
    let protocol = entry.protocol.unwrap_or_else(|| infer_protocol(name));
    let base_url = match (&entry.base_url, env.non_empty(protocol.base_url_env())) {
        (Some(url), _) => url.clone(),
        (None, Some(url)) => {
            check_http_url(&url).map_err(|reason| ResolveError::BadBaseUrlEnv {
                var: protocol.base_url_env().to_owned(),
                reason,
            })?;
            url
        }
        (None, None) => protocol.public_base_url().to_owned(),
    };
    let base_url = base_url.trim_end_matches('/').to_owned();
    let api_key_env = entry
        .api_key_env
        .clone()
        .unwrap_or_else(|| protocol.default_api_key_env().to_owned());
    let api_key = env.non_empty(&api_key_env);
    if api_key.is_none() && !is_loopback_url(&base_url) {
        return Err(ResolveError::MissingApiKey {
            provider: name.to_owned(),
            var: api_key_env,
            base_url,
        });
    }
    let thinking_budget = match entry.thinking {
        None | Some(Thinking::Enabled(false)) => None,
        Some(Thinking::Enabled(true)) => Some(DEFAULT_THINKING_BUDGET),
        Some(Thinking::Budget(budget)) => Some(budget),
    };
    let max_tokens = max_tokens_for(name, protocol, entry.max_tokens, thinking_budget)?;
    Ok(ResolvedProvider {
        name: name.to_owned(),
        protocol,
        model: entry
            .model
            .clone()
            .unwrap_or_else(|| protocol.default_model().to_owned()),
        base_url,
        api_key,
        api_key_env,
        context_window: entry.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
        max_tokens,
        thinking_budget,
        price: entry.price,
        idle_timeout: entry
            .idle_timeout_secs
            .map_or(DEFAULT_IDLE_TIMEOUT, std::time::Duration::from_secs),
        max_retries: entry.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
        store: protocol == Protocol::OpenAiResponses && entry.store == Some(true),
    })
}

/// `max_tokens` for a response — the one place that accounts for the thinking
/// budget; the value is sent as is. Anthropic requires it to exceed the thinking
/// budget: when thinking is on and `max_tokens` is not written, it becomes the
/// budget plus the default answer allowance (SPEC §2: 8,192); an explicit value
/// that leaves no room is an error.
fn max_tokens_for(
    name: &str,
    protocol: Protocol,
    configured: Option<u32>,
    thinking_budget: Option<u32>,
) -> Result<u32, ResolveError> {
    let Some(budget) = thinking_budget.filter(|_| protocol == Protocol::Anthropic) else {
        return Ok(configured.unwrap_or(DEFAULT_MAX_TOKENS));
    };
    match configured {
        Some(max_tokens) if max_tokens <= budget => Err(ResolveError::ThinkingExceedsMaxTokens {
            provider: name.to_owned(),
            budget,
            max_tokens,
        }),
        Some(max_tokens) => Ok(max_tokens),
        None => Ok(budget.saturating_add(DEFAULT_MAX_TOKENS)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::Price;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn config_with(entries: &[(&str, ProviderFile)]) -> Config {
        Config {
            providers: entries
                .iter()
                .map(|(n, e)| ((*n).to_owned(), e.clone()))
                .collect(),
            ..Config::default()
        }
    }

    #[test]
    fn protocol_inference_from_names() {
        assert_eq!(infer_protocol("openai"), Protocol::OpenAi);
        assert_eq!(infer_protocol("openai-local"), Protocol::OpenAi);
        assert_eq!(infer_protocol("GPT5"), Protocol::OpenAi);
        assert_eq!(infer_protocol("claude"), Protocol::Anthropic);
        assert_eq!(infer_protocol("local"), Protocol::Anthropic);
    }

    #[test]
    fn loopback_detection() {
        for url in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3/v1",
            "http://localhost:11434/v1",
            "http://LOCALHOST",
            "http://api.localhost",
            "http://[::1]:9000",
            "http://[::ffff:127.0.0.1]/",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://api.anthropic.com",
            "http://192.168.1.5:8000/v1",
            "http://localhost.example.com",
            "http://[::2]",
            "not a url",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    #[test]
    fn only_anthropic_key_chooses_claude() {
        let p = resolve_provider(
            &Config::default(),
            None,
            &env(&[("ANTHROPIC_API_KEY", "sk-ant")]),
        )
        .unwrap();
        assert_eq!(p.name, "claude");
        assert_eq!(p.protocol, Protocol::Anthropic);
        assert_eq!(p.model, Protocol::Anthropic.default_model());
        assert_eq!(p.base_url, "https://api.anthropic.com");
        assert_eq!(p.api_key.as_deref(), Some("sk-ant"));
        assert_eq!(p.api_key_env, "ANTHROPIC_API_KEY");
        assert_eq!(p.context_window, DEFAULT_CONTEXT_WINDOW);
        assert_eq!(p.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(p.thinking_budget, None);
        assert_eq!(p.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert_eq!(p.max_retries, DEFAULT_MAX_RETRIES);
    }

    #[test]
    fn only_openai_key_chooses_openai() {
        let p =
            resolve_provider(&Config::default(), None, &env(&[("OPENAI_API_KEY", "sk")])).unwrap();
        assert_eq!(p.name, "openai");
        assert_eq!(p.protocol, Protocol::OpenAi);
        assert_eq!(p.base_url, "https://api.openai.com/v1");
        assert_eq!(p.model, Protocol::OpenAi.default_model());
    }

    #[test]
    fn both_keys_prefer_anthropic() {
        let p = resolve_provider(
            &Config::default(),
            None,
            &env(&[("OPENAI_API_KEY", "sk"), ("ANTHROPIC_API_KEY", "sk-ant")]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::Anthropic);
    }

    #[test]
    fn no_keys_and_no_urls_is_an_error() {
        let e = resolve_provider(&Config::default(), None, &env(&[("ANTHROPIC_API_KEY", "")]))
            .unwrap_err();
        assert_eq!(e, ResolveError::NoProvider);
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"));
    }

    #[test]
    fn base_url_only_chooses_that_protocol_without_a_key() {
        let p = resolve_provider(
            &Config::default(),
            None,
            &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1/")]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::OpenAi);
        assert_eq!(p.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(p.api_key, None);

        let p = resolve_provider(
            &Config::default(),
            None,
            &env(&[
                ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
                ("ANTHROPIC_BASE_URL", "http://localhost:9000"),
            ]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::Anthropic);
        assert_eq!(p.base_url, "http://localhost:9000");
    }

    #[test]
    fn remote_base_url_without_key_names_the_variable() {
        let e = resolve_provider(
            &Config::default(),
            None,
            &env(&[("OPENAI_BASE_URL", "http://10.0.0.5:8000/v1")]),
        )
        .unwrap_err();
        assert!(matches!(&e, ResolveError::MissingApiKey { var, .. } if var == "OPENAI_API_KEY"));
        assert!(e.to_string().contains("set OPENAI_API_KEY"), "{e}");
    }

    #[test]
    fn bad_base_url_variable_is_an_error() {
        let e = resolve_provider(
            &Config::default(),
            None,
            &env(&[("ANTHROPIC_BASE_URL", "localhost:9000")]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, ResolveError::BadBaseUrlEnv { var, .. } if var == "ANTHROPIC_BASE_URL")
        );
    }

    #[test]
    fn requested_implicit_name_without_entries() {
        let p = resolve_provider(
            &Config::default(),
            Some("openai"),
            &env(&[("ANTHROPIC_API_KEY", "a"), ("OPENAI_API_KEY", "o")]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::OpenAi);
        let e = resolve_provider(&Config::default(), Some("gemini"), &env(&[])).unwrap_err();
        assert_eq!(
            e,
            ResolveError::UnknownProvider {
                name: "gemini".into(),
                known: vec!["claude".into(), "openai".into()],
            }
        );
    }

    #[test]
    fn unknown_requested_provider_lists_known_names() {
        let config = config_with(&[
            ("a", ProviderFile::default()),
            ("b", ProviderFile::default()),
        ]);
        let e = resolve_provider(&config, Some("c"), &env(&[])).unwrap_err();
        assert!(e.to_string().contains("known providers: a, b"), "{e}");
    }

    #[test]
    fn choice_order_requested_then_default_then_only() {
        let local = ProviderFile {
            base_url: Some("http://127.0.0.1:1".into()),
            ..ProviderFile::default()
        };
        let mut config = config_with(&[("a", local.clone()), ("b", local.clone())]);
        let e = resolve_provider(&config, None, &env(&[])).unwrap_err();
        assert_eq!(
            e,
            ResolveError::Ambiguous {
                names: vec!["a".into(), "b".into()]
            }
        );
        config.default_provider = Some("b".into());
        assert_eq!(
            resolve_provider(&config, None, &env(&[])).unwrap().name,
            "b"
        );
        assert_eq!(
            resolve_provider(&config, Some("a"), &env(&[]))
                .unwrap()
                .name,
            "a"
        );
        let single = config_with(&[("only", local)]);
        assert_eq!(
            resolve_provider(&single, None, &env(&[])).unwrap().name,
            "only"
        );
    }

    #[test]
    fn the_responses_protocol_shares_openai_defaults_and_alone_stores() {
        let entry = |protocol, store| ProviderFile {
            protocol: Some(protocol),
            store,
            ..ProviderFile::default()
        };
        let config = config_with(&[("r", entry(Protocol::OpenAiResponses, Some(true)))]);
        let p = resolve_provider(&config, None, &env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(p.protocol, Protocol::OpenAiResponses);
        assert_eq!(p.api_key_env, "OPENAI_API_KEY");
        assert_eq!(p.base_url, "https://api.openai.com/v1");
        assert_eq!(p.model, "gpt-5");
        assert!(p.store);
        let config = config_with(&[("r", entry(Protocol::OpenAiResponses, None))]);
        let p = resolve_provider(
            &config,
            None,
            &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]),
        )
        .unwrap();
        assert_eq!(p.base_url, "http://127.0.0.1:9/v1");
        assert!(!p.store);
        // Names never imply the Responses protocol.
        assert_eq!(infer_protocol("openai-responses"), Protocol::OpenAi);
    }

    #[test]
    fn entry_fields_win_over_environment_and_defaults() {
        let entry = ProviderFile {
            protocol: Some(Protocol::OpenAi),
            model: Some("qwen3-coder".into()),
            base_url: Some("http://127.0.0.1:8080/v1/".into()),
            api_key_env: Some("LOCAL_KEY".into()),
            context_window: Some(32_768),
            max_tokens: Some(4_096),
            thinking: Some(Thinking::Budget(2_000)),
            price: Some(Price {
                input: 1.0,
                output: 2.0,
                ..Price::default()
            }),
            idle_timeout_secs: Some(60),
            max_retries: Some(1),
            store: None,
        };
        let config = config_with(&[("claude", entry)]);
        let p = resolve_provider(
            &config,
            None,
            &env(&[
                ("OPENAI_BASE_URL", "http://elsewhere/v1"),
                ("LOCAL_KEY", "k"),
                ("OPENAI_API_KEY", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::OpenAi);
        assert_eq!(p.model, "qwen3-coder");
        assert_eq!(p.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(p.api_key.as_deref(), Some("k"));
        assert_eq!(p.api_key_env, "LOCAL_KEY");
        assert_eq!(p.context_window, 32_768);
        assert_eq!(p.max_tokens, 4_096);
        assert_eq!(p.thinking_budget, Some(2_000));
        assert_eq!(p.price.map(|p| p.output), Some(2.0));
        assert_eq!(p.idle_timeout, Duration::from_secs(60));
        assert_eq!(p.max_retries, 1);
    }

    #[test]
    fn base_url_falls_back_to_the_protocol_variable() {
        let config = config_with(&[("gpt-local", ProviderFile::default())]);
        let p = resolve_provider(
            &config,
            None,
            &env(&[("OPENAI_BASE_URL", "http://localhost:11434/v1")]),
        )
        .unwrap();
        assert_eq!(p.protocol, Protocol::OpenAi);
        assert_eq!(p.base_url, "http://localhost:11434/v1");
        assert_eq!(p.api_key, None);
    }

    #[test]
    fn thinking_budget_and_max_tokens() {
        assert_eq!(
            max_tokens_for("c", Protocol::Anthropic, None, None),
            Ok(DEFAULT_MAX_TOKENS)
        );
        assert_eq!(
            max_tokens_for(
                "c",
                Protocol::Anthropic,
                None,
                Some(DEFAULT_THINKING_BUDGET)
            ),
            Ok(DEFAULT_THINKING_BUDGET + DEFAULT_MAX_TOKENS)
        );
        assert_eq!(
            max_tokens_for("c", Protocol::Anthropic, None, Some(10_000)),
            Ok(18_192)
        );
        assert_eq!(
            max_tokens_for("c", Protocol::Anthropic, Some(32_000), Some(16_000)),
            Ok(32_000)
        );
        assert_eq!(
            max_tokens_for("c", Protocol::Anthropic, Some(20_000), Some(16_000)),
            Ok(20_000)
        );
        assert!(matches!(
            max_tokens_for("c", Protocol::Anthropic, Some(8_192), Some(16_000)),
            Err(ResolveError::ThinkingExceedsMaxTokens { .. })
        ));
        assert_eq!(
            max_tokens_for("o", Protocol::OpenAi, Some(1_000), Some(16_000)),
            Ok(1_000)
        );

        let entry = ProviderFile {
            thinking: Some(Thinking::Enabled(true)),
            ..ProviderFile::default()
        };
        let p = resolve_entry("claude", &entry, &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(p.thinking_budget, Some(DEFAULT_THINKING_BUDGET));
        let off = ProviderFile {
            thinking: Some(Thinking::Enabled(false)),
            ..ProviderFile::default()
        };
        let p = resolve_entry("claude", &off, &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(p.thinking_budget, None);
    }

    #[test]
    fn with_model_overrides_only_the_model() {
        let p = resolve_provider(
            &Config::default(),
            None,
            &env(&[("ANTHROPIC_API_KEY", "k")]),
        )
        .unwrap();
        let q = p.clone().with_model("claude-opus-4-1");
        assert_eq!(q.model, "claude-opus-4-1");
        assert_eq!(q.with_model(p.model.clone()), p);
    }
}
