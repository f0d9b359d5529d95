//! Resolving a host once and connecting only to what was checked: a
//! [`reqwest::dns::Resolve`] that looks the name up ([`HostLookup`]), checks
//! every address ([`super::address::check`]) and hands the HTTP client only
//! addresses that passed. The client never resolves on its own, so a name
//! whose answer changes between a check and the connection (DNS rebinding)
//! has no window. A name with any refused address is refused whole, and the
//! refusal is kept for the result to explain.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::address::{self, Refused};

/// Looks host names up. The system's resolver in the product; tests give
/// their own (a name that resolves to 127.0.0.1).
pub trait HostLookup: Send + Sync {
    /// The addresses of `host`.
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>>;
}

/// The system's resolver (`getaddrinfo` on a blocking thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl HostLookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|addr| addr.ip()).collect())
        })
    }
}

/// Why a name's addresses were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameRefused {
    /// The name.
    pub(crate) host: String,
    /// The first address refused.
    pub(crate) refused: Refused,
}

/// The resolver of one request: the port it connects to, the allowances,
/// and where a refusal is written down.
#[derive(Clone)]
pub(crate) struct CheckedResolver {
    pub(crate) lookup: Arc<dyn HostLookup>,
    pub(crate) port: u16,
    pub(crate) allow_private: Arc<[SocketAddr]>,
    pub(crate) refusal: Arc<Mutex<Option<NameRefused>>>,
}

impl CheckedResolver {
    /// The refusal written down by the last resolution, if any.
    pub(crate) fn take_refusal(&self) -> Option<NameRefused> {
        self.refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The addresses of `ips` that may be reached on `port`, or the first refusal.
pub(crate) fn checked(
    ips: &[IpAddr],
    port: u16,
    allow_private: &[SocketAddr],
) -> Result<Vec<IpAddr>, Refused> {
    ips.iter()
        .map(|ip| address::check(*ip, port, allow_private).map(|()| *ip))
        .collect()
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let ips = this.lookup.lookup(&host).await?;
            if ips.is_empty() {
                return Err(io::Error::other(format!("{host} has no address")).into());
            }
            match checked(&ips, this.port, &this.allow_private) {
                Ok(ips) => {
                    let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(refused) => {
                    let message = format!("{host} resolves to {}", refused.ip);
                    *this.refusal.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(NameRefused { host, refused });
                    Err(io::Error::other(message).into())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_refused_address_refuses_the_name() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(
            checked(&[ip("8.8.8.8"), ip("1.1.1.1")], 443, &[]),
            Ok(vec![ip("8.8.8.8"), ip("1.1.1.1")])
        );
        let refused = checked(&[ip("8.8.8.8"), ip("127.0.0.1")], 443, &[]).unwrap_err();
        assert_eq!(refused.ip, ip("127.0.0.1"));
        let allow = ["127.0.0.1:443".parse().unwrap()];
        assert!(checked(&[ip("127.0.0.1")], 443, &allow).is_ok());
    }
}
