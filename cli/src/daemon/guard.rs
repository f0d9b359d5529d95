//! Who may talk to the daemon: pure checks of a request's `Authorization`,
//! `Host` and `Origin` headers, each answering with the API error to send.
//!
//! The daemon listens on loopback and trusts only requests that carry its
//! token; a page in a browser on the same machine cannot get one, but it can
//! make the browser send requests to a loopback port under a name it
//! controls (DNS rebinding), so a `Host` or `Origin` that is not the daemon's
//! own address is refused before the token is even looked at.

use std::net::SocketAddr;

use super::error::ApiError;

/// Checks `Authorization: Bearer TOKEN` against `token` in constant time.
pub(crate) fn check_token(authorization: Option<&str>, token: &str) -> Result<(), ApiError> {
    let Some(value) = authorization else {
        return Err(ApiError::unauthorized(
            "missing Authorization: Bearer TOKEN (the token is in $TROUPE_HOME/daemon.token)",
        ));
    };
    let presented = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.trim().as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized("wrong token"))
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// The host names a request may use for a daemon listening on `listen`:
/// the address itself; on loopback (or all interfaces) `localhost`,
/// `127.0.0.1` and `[::1]` with the same port; and the names given with
/// `--allow-host` (a name alone allows it with any port, `name:port` only
/// that port).
fn allowed_host(host: &str, listen: SocketAddr, extra: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let port = listen.port();
    if host == listen.to_string() {
        return true;
    }
    let without_port = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host.as_str(), |(name, _)| name);
    if extra
        .iter()
        .map(|name| name.trim().to_ascii_lowercase())
        .any(|name| name == host || name == without_port)
    {
        return true;
    }
    if !listen.ip().is_loopback() && !listen.ip().is_unspecified() {
        return false;
    }
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .any(|name| host == format!("{name}:{port}"))
}

/// Refuses a request whose `Host` (required) or `Origin` (when sent) names
/// another server than this daemon.
pub(crate) fn check_origin(
    host: Option<&str>,
    origin: Option<&str>,
    listen: SocketAddr,
    extra: &[String],
) -> Result<(), ApiError> {
    match host {
        Some(host) if allowed_host(host, listen, extra) => {}
        Some(host) => {
            return Err(ApiError::forbidden(format!(
                "foreign Host {host:?}: this daemon answers only to its own address"
            )));
        }
        None => return Err(ApiError::forbidden("missing Host header")),
    }
    match origin {
        None => Ok(()),
        Some(origin) => match origin.strip_prefix("http://") {
            Some(rest) if allowed_host(rest.trim_end_matches('/'), listen, extra) => Ok(()),
            _ => Err(ApiError::forbidden(format!(
                "foreign Origin {origin:?}: cross-site requests are refused"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> SocketAddr {
        "127.0.0.1:7878".parse().unwrap()
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        assert!(check_token(Some("Bearer s3cret"), "s3cret").is_ok());
        assert!(check_token(Some("bearer s3cret"), "s3cret").is_ok());
        for bad in [
            None,
            Some(""),
            Some("s3cret"),
            Some("Bearer "),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Basic s3cret"),
        ] {
            let err = check_token(bad, "s3cret").unwrap_err();
            assert_eq!(err.status.as_u16(), 401, "{bad:?}");
        }
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"a", b"ab"));
    }

    #[test]
    fn the_daemons_own_names_pass_and_foreign_ones_are_refused() {
        for host in [
            "127.0.0.1:7878",
            "localhost:7878",
            "[::1]:7878",
            "LOCALHOST:7878",
        ] {
            assert!(
                check_origin(Some(host), None, listen(), &[]).is_ok(),
                "{host}"
            );
        }
        for host in [
            "evil.example:7878",
            "localhost:80",
            "127.0.0.1",
            "localhost.evil:7878",
        ] {
            let err = check_origin(Some(host), None, listen(), &[]).unwrap_err();
            assert_eq!(err.status.as_u16(), 403, "{host}");
        }
        assert_eq!(
            check_origin(None, None, listen(), &[])
                .unwrap_err()
                .status
                .as_u16(),
            403
        );
        assert!(
            check_origin(
                Some("localhost:7878"),
                Some("http://localhost:7878"),
                listen(),
                &[]
            )
            .is_ok()
        );
        for origin in [
            "http://evil.example",
            "https://localhost:7878",
            "http://localhost:7878.evil",
            "null",
        ] {
            let err =
                check_origin(Some("localhost:7878"), Some(origin), listen(), &[]).unwrap_err();
            assert_eq!(err.status.as_u16(), 403, "{origin}");
        }
    }

    #[test]
    fn a_daemon_on_another_interface_answers_only_to_that_address() {
        let listen: SocketAddr = "10.0.0.5:9000".parse().unwrap();
        assert!(check_origin(Some("10.0.0.5:9000"), None, listen, &[]).is_ok());
        assert!(check_origin(Some("localhost:9000"), None, listen, &[]).is_err());
    }

    #[test]
    fn names_allowed_by_the_operator_pass_with_any_or_their_port() {
        let all: SocketAddr = "0.0.0.0:7777".parse().unwrap();
        let extra = vec!["troupe".to_string(), "api.internal:443".to_string()];
        assert!(check_origin(Some("troupe:7777"), None, all, &extra).is_ok());
        assert!(check_origin(Some("TROUPE"), None, all, &extra).is_ok());
        assert!(check_origin(Some("api.internal:443"), None, all, &extra).is_ok());
        assert!(check_origin(Some("api.internal:80"), None, all, &extra).is_err());
        assert!(check_origin(Some("troupe.evil:7777"), None, all, &extra).is_err());
        assert!(check_origin(Some("troupe:7777"), Some("http://troupe:7777"), all, &extra).is_ok());
        // Without the list, only loopback names reach a daemon on all interfaces.
        assert!(check_origin(Some("troupe:7777"), None, all, &[]).is_err());
        assert!(check_origin(Some("localhost:7777"), None, all, &[]).is_ok());
    }
}
