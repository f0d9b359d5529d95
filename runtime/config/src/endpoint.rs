//! How an MCP server's URL may be shown and checked (SPEC §8, §15): a URL can
//! hold credentials, so every message, log line, span and listing that names
//! an endpoint shows it through [`display_endpoint`], and [`check_endpoint`]
//! explains a bad one without quoting it. Pure functions.

use url::Url;

/// What a hidden value is shown as.
pub const MASK: &str = "***";

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
pub fn check_endpoint(url: &str) -> Result<(), String> {
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
}
