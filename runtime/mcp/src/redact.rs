//! What of an MCP server's settings may be shown (SPEC §8, §15). A server's
//! URL, headers and environment can hold credentials, so every message, log
//! line, span and listing that names a server shows them through this module
//! only.
//!
//! [`display_endpoint`] renders a URL as `scheme://host[:port]/path`, with the
//! user information, every query value and the fragment replaced by [`MASK`]
//! (query names stay); header and environment values are never shown, only
//! their names. [`Redaction`] masks, in any text about one server (an error a
//! library worded, a line its process wrote to stderr), every value that came
//! from an environment variable, every header and environment value, and the
//! secret parts of its URL; the URL itself, wherever it appears whole, becomes
//! its displayed form. Pure functions; nothing here reads the environment.

use std::fmt;
use std::sync::Arc;

use reqwest::Url;

use troupe_config::endpoint::{MASK, display_endpoint};

/// Shortest value masked in free text: a shorter one is no credential, and
/// masking it would garble ordinary words.
const MIN_MASKED_CHARS: usize = 4;

/// The values to hide in any text about one server, each with what it is
/// replaced by, longest first (so a whole URL goes before its parts).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redaction {
    replacements: Arc<[(String, String)]>,
}

impl fmt::Debug for Redaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redaction")
            .field("values", &self.replacements.len())
            .finish()
    }
}

impl Redaction {
    /// What hides `secrets` (each replaced by [`MASK`]) and `urls` (each,
    /// whole, replaced by its displayed form, and its user information,
    /// query values and fragment by [`MASK`]). Values shorter than
    /// `MIN_MASKED_CHARS` are left alone.
    pub fn new<'a>(
        secrets: impl IntoIterator<Item = &'a str>,
        urls: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut replacements: Vec<(String, String)> = Vec::new();
        let mut add = |needle: &str, replacement: String| {
            if needle.chars().count() >= MIN_MASKED_CHARS
                && !replacements.iter().any(|(seen, _)| seen == needle)
            {
                replacements.push((needle.to_owned(), replacement));
            }
        };
        for secret in secrets {
            add(secret, MASK.to_owned());
        }
        for url in urls {
            let shown = display_endpoint(url);
            add(url, shown.clone());
            for part in url_secrets(url) {
                add(&part, MASK.to_owned());
            }
            if let Ok(parsed) = Url::parse(url) {
                add(parsed.as_str(), shown);
            }
        }
        replacements.sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Self {
            replacements: replacements.into(),
        }
    }

    /// `text` with every value to hide replaced.
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (needle, replacement) in self.replacements.iter() {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), replacement);
            }
        }
        out
    }
}

/// The parts of `url` that may be credentials, as written and decoded: user
/// name, password, query values, fragment.
fn url_secrets(url: &str) -> Vec<String> {
    let Ok(parsed) = Url::parse(url) else {
        return Vec::new();
    };
    let mut parts = vec![parsed.username().to_owned()];
    parts.extend(parsed.password().map(str::to_owned));
    if let Some(query) = parsed.query() {
        parts.extend(
            query
                .split('&')
                .map(|item| item.split_once('=').map_or(item, |(_, value)| value))
                .map(str::to_owned),
        );
        parts.extend(parsed.query_pairs().map(|(_, value)| value.into_owned()));
    }
    parts.extend(parsed.fragment().map(str::to_owned));
    parts.retain(|part| !part.is_empty());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redaction_hides_values_and_urls_in_any_text() {
        let url = "http://me:pw-secret@h:1/mcp/ghp_path?token=ghp_query&x=a%20bc#ghp_frag";
        let redaction = Redaction::new(["ghp_path", "Bearer ghp_header", "ab"], [url]);
        let text = format!(
            "cannot reach {url}: error for url (http://h:1/mcp/ghp_path?token=ghp_query&x=a%20bc#ghp_frag) \
             with Bearer ghp_header; user me and pw-secret; ab stays; a bc is decoded"
        );
        assert_eq!(
            redaction.apply(&text),
            "cannot reach http://***@h:1/mcp/***?token=***&x=***#***: error for url \
             (http://h:1/mcp/***?token=***&x=***#***) with ***; user me and ***; ab stays; \
             *** is decoded"
        );
        assert_eq!(Redaction::default().apply("untouched"), "untouched");
        assert_eq!(
            format!("{redaction:?}"),
            format!("Redaction {{ values: {} }}", redaction.replacements.len())
        );
    }
}
