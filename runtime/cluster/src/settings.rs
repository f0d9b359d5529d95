//! How a node joins the cluster: the server's URL (with a token or a user
//! and password in it), a `.creds` file, the node's name, its capacity and
//! the lease on its runs; and the pure readings of those settings (the URL
//! split from its secret, the URL with its secret masked, a node name from
//! the host name).

use std::path::PathBuf;
use std::time::Duration;

use troupe_protocol::cluster::is_valid_token;

use crate::ClusterError;

/// The capacity of a node unless told otherwise.
pub const DEFAULT_CAPACITY: u32 = 4;

/// The lease on a run unless told otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// The most replicas a stream may have.
pub const MAX_REPLICAS: usize = 5;

/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_secs(3);

/// How a node joins the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `nats://[TOKEN@|USER:PASSWORD@]HOST:PORT`.
    pub url: String,
    /// A NATS `.creds` file.
    pub credentials: Option<PathBuf>,
    /// This node's name (a valid subject token).
    pub node: String,
    /// The most runs this node runs at once.
    pub capacity: u32,
    /// How long a run's work-queue message stays with this node without an
    /// in-progress acknowledgement.
    pub lease: Duration,
    /// How many copies the servers keep of each stream and bucket.
    pub replicas: usize,
}

/// What the URL gives to authenticate with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlAuth {
    /// Nothing.
    None,
    /// `nats://TOKEN@host`.
    Token(String),
    /// `nats://USER:PASSWORD@host`.
    UserPassword(String, String),
}

/// A server URL split from its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// The URL without user information.
    pub address: String,
    /// The credentials it carried.
    pub auth: UrlAuth,
    /// The URL with its secret masked, for messages.
    pub masked: String,
}

/// Reads a server URL: `nats://`, `tls://`, `ws://` or `wss://`, a host and
/// a port (4222 when absent), optionally `TOKEN@` or `USER:PASSWORD@`
/// (percent-encoded).
pub fn parse_url(text: &str) -> Result<ServerUrl, ClusterError> {
    let mut url = url::Url::parse(text.trim()).map_err(|err| {
        ClusterError::Settings(format!(
            "the cluster URL {} is not a URL: {err}",
            masked_text(text)
        ))
    })?;
    if !matches!(url.scheme(), "nats" | "tls" | "ws" | "wss") {
        return Err(ClusterError::Settings(format!(
            "the cluster URL {} must start with nats://",
            masked_text(text)
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ClusterError::Settings(format!(
            "the cluster URL {} names no host",
            masked_text(text)
        )));
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8_lossy()
            .into_owned()
    };
    let user = decode(url.username());
    let auth = match url.password() {
        Some(password) => UrlAuth::UserPassword(user, decode(password)),
        None if !user.is_empty() => UrlAuth::Token(user),
        None => UrlAuth::None,
    };
    let had_secret = auth != UrlAuth::None;
    // Neither can fail on a URL with a host.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    if url.port().is_none() {
        let _ = url.set_port(Some(4222));
    }
    let address = url.to_string().trim_end_matches('/').to_string();
    let masked = if had_secret {
        address.replacen("://", "://***@", 1)
    } else {
        address.clone()
    };
    Ok(ServerUrl {
        address,
        auth,
        masked,
    })
}

/// `text` with anything between `://` and the last `@` before the host
/// replaced by `***`: for a URL that does not even parse.
pub fn masked_text(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
        None => text.to_string(),
    }
}

/// The default name of a node: its host name and process id, with any
/// character a subject token cannot hold replaced by `-`.
pub fn default_node_name(host: &str, pid: u32) -> String {
    let host: String = host
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                ch
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let host = if host.is_empty() { "node".into() } else { host };
    format!("{host}-{pid}")
}

/// Checks a node's name, capacity and lease.
pub fn check(settings: &ClusterSettings) -> Result<(), ClusterError> {
    if !is_valid_token(&settings.node) {
        return Err(ClusterError::Settings(format!(
            "the node name {:?} must be 1 to 128 letters, digits, `-` or `_`",
            settings.node
        )));
    }
    if settings.capacity == 0 {
        return Err(ClusterError::Settings(
            "the capacity must be at least 1".into(),
        ));
    }
    if settings.lease < MIN_LEASE {
        return Err(ClusterError::Settings(format!(
            "the lease must be at least {} s",
            MIN_LEASE.as_secs()
        )));
    }
    if !(1..=MAX_REPLICAS).contains(&settings.replicas) {
        return Err(ClusterError::Settings(format!(
            "the replicas must be 1 to {MAX_REPLICAS}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_split_from_its_token_or_user_and_password_and_masked() {
        let plain = parse_url("nats://127.0.0.1:4222").unwrap();
        assert_eq!(plain.address, "nats://127.0.0.1:4222");
        assert_eq!(plain.auth, UrlAuth::None);
        assert_eq!(plain.masked, "nats://127.0.0.1:4222");
        let token = parse_url("nats://s3cret@127.0.0.1:4333").unwrap();
        assert_eq!(token.auth, UrlAuth::Token("s3cret".into()));
        assert_eq!(token.address, "nats://127.0.0.1:4333");
        assert_eq!(token.masked, "nats://***@127.0.0.1:4333");
        let user = parse_url("nats://ann:p%40ss@nats.example:4222").unwrap();
        assert_eq!(
            user.auth,
            UrlAuth::UserPassword("ann".into(), "p@ss".into())
        );
        assert_eq!(user.masked, "nats://***@nats.example:4222");
        assert!(!user.masked.contains("p%40s") && !user.masked.contains("ann"));
        assert_eq!(
            parse_url("nats://host").unwrap().address,
            "nats://host:4222"
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_showing_its_secret() {
        for bad in [
            "http://u:secret@host:1",
            "nats://u:secret@",
            "u:secret@host",
        ] {
            let err = parse_url(bad).unwrap_err().to_string();
            assert!(!err.contains("secret"), "{err}");
        }
        assert_eq!(masked_text("nats://a:b@h:1/x"), "nats://***@h:1/x");
        assert_eq!(masked_text("nats://h:1"), "nats://h:1");
        assert_eq!(masked_text("u:secret@h"), "***@h");
    }

    #[test]
    fn the_default_node_name_is_a_valid_token() {
        assert_eq!(
            default_node_name("build.example.org", 42),
            "build-example-org-42"
        );
        assert_eq!(default_node_name("", 7), "node-7");
        assert!(is_valid_token(&default_node_name(
            &"h".repeat(300),
            u32::MAX
        )));
    }

    #[test]
    fn settings_are_checked() {
        let good = ClusterSettings {
            url: "nats://h".into(),
            credentials: None,
            node: "a-1".into(),
            capacity: 1,
            lease: DEFAULT_LEASE,
            replicas: 1,
        };
        assert!(check(&good).is_ok());
        for bad in [
            ClusterSettings {
                node: "a.b".into(),
                ..good.clone()
            },
            ClusterSettings {
                capacity: 0,
                ..good.clone()
            },
            ClusterSettings {
                lease: Duration::from_secs(1),
                ..good.clone()
            },
            ClusterSettings {
                replicas: 0,
                ..good.clone()
            },
            ClusterSettings {
                replicas: 6,
                ..good.clone()
            },
        ] {
            assert!(check(&bad).is_err(), "{bad:?}");
        }
    }
}
