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

/// What a hidden value is shown as.
pub(crate) const MASK: &str = "***";

/// Shortest value masked in free text: a shorter one is no credential, and
/// masking it would garble ordinary words.
const MIN_MASKED_CHARS: usize = 4;

/// What a URL that does not parse is shown as.
const UNPARSABLE: &str = "(a URL that does not parse)";

/// `url` for display: `scheme://host[:port]/path`, with user information,
/// query values and the fragment masked (`http://***@h:8080/mcp?key=***#***`).
pub fn display_endpoint(url: &str) -> String {
    let Ok(parsed) = Url::parse(url) else {
        return UNPARSABLE.to_owned();
    };
    let mut out = format!("{}://", parsed.scheme());
    if !parsed.username().is_empty() || parsed.password().is_some() {
        out.push_str(MASK);
        out.push('@');
    }
    if let Some(host) = parsed.host_str() {
        out.push_str(host);
    }
    if let Some(port) = parsed.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(parsed.path());
    if let Some(query) = parsed.query() {
        let items: Vec<String> = query
            .split('&')
            .map(|item| match item.split_once('=') {
                Some((name, _)) => format!("{name}={MASK}"),
                None if item.is_empty() => String::new(),
                None => MASK.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&items.join("&"));
    }
    if parsed.fragment().is_some() {
        out.push('#');
        out.push_str(MASK);
    }
    out
}

/// Checks that `url` is an absolute `http://` or `https://` URL with a host;
/// the message never quotes the URL (it may hold credentials).
pub(crate) fn check_endpoint(url: &str) -> Result<(), String> {
    const EXPECTED: &str = "expected an http:// or https:// URL";
    let parsed =
        Url::parse(url).map_err(|err| format!("the URL does not parse ({err}); {EXPECTED}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "unsupported URL scheme {:?} in {}; {EXPECTED}",
            parsed.scheme(),
            display_endpoint(url)
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "the URL {} has no host; {EXPECTED}",
            display_endpoint(url)
        ));
    }
    Ok(())
}

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
    fn endpoints_show_scheme_host_port_and_path_only() {
        for (url, shown) in [
            ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/mcp"),
            ("https://h.example/mcp/", "https://h.example/mcp/"),
            (
                "http://user:pass@h:1/p?k=v&g=w#frag",
                "http://***@h:1/p?k=***&g=***#***",
            ),
            ("http://user@h/p", "http://***@h/p"),
            ("http://:pass@h/p", "http://***@h/p"),
            ("http://h/p?token", "http://h/p?***"),
            ("http://h/p?k=&g=", "http://h/p?k=***&g=***"),
            ("http://h/p?", "http://h/p?"),
            ("http://[::1]:9/mcp", "http://[::1]:9/mcp"),
            ("HTTP://H.EXAMPLE:80/a", "http://h.example/a"),
            ("not a url ghp_secret", UNPARSABLE),
            ("http://h/${TOKEN}", "http://h/$%7BTOKEN%7D"),
        ] {
            assert_eq!(display_endpoint(url), shown, "{url}");
        }
    }

    #[test]
    fn url_checks_never_quote_the_url() {
        assert_eq!(check_endpoint("https://h/mcp?k=secret1"), Ok(()));
        for bad in [
            "ftp://user:secret1@h/x?k=secret1",
            "secret1",
            "http://",
            "file:///x?k=secret1",
        ] {
            let err = check_endpoint(bad).unwrap_err();
            assert!(err.contains("expected an http:// or https:// URL"), "{err}");
            assert!(!err.contains("secret1"), "{err}");
        }
    }

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
