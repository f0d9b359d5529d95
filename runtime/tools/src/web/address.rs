//! Which addresses `web_fetch` may connect to: a pure decision on one IP
//! address and port. Loopback, private, link-local, shared (CGNAT),
//! unique-local, multicast, broadcast, unspecified, documentation and other
//! reserved ranges are refused, and so are the cloud metadata addresses; an
//! IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64, 6to4) is judged
//! by the IPv4 address it carries. The user's `[web] allow_private` names
//! exact `IP:PORT` pairs that are reached anyway.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address is refused: the kind of range it lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `100.64.0.0/10`, shared by carrier-grade NAT.
    SharedNat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `169.254.169.254`, `fd00:ec2::254`: a cloud instance's metadata service.
    Metadata,
    /// `fc00::/7` (and the deprecated site-local `fec0::/10`).
    UniqueLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Documentation, benchmarking, protocol-assignment and reserved ranges.
    Reserved,
}

impl Blocked {
    /// The range, as refusals name it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Unspecified => "an unspecified address",
            Self::Loopback => "a loopback address",
            Self::Private => "a private address (RFC 1918)",
            Self::SharedNat => "a shared (carrier-grade NAT) address",
            Self::LinkLocal => "a link-local address",
            Self::Metadata => "a cloud metadata address",
            Self::UniqueLocal => "a unique-local (private) IPv6 address",
            Self::Multicast => "a multicast address",
            Self::Broadcast => "the broadcast address",
            Self::Reserved => "a reserved or documentation address",
        }
    }
}

/// The range `ip` lies in when `web_fetch` must not reach it, `None` for a
/// public address.
pub(crate) fn blocked(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<Blocked> {
    let [a, b, c, _] = ip.octets();
    let kind = match (a, b, c) {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => Blocked::Metadata,
        _ if ip == Ipv4Addr::BROADCAST => Blocked::Broadcast,
        (0, ..) => Blocked::Unspecified,
        (127, ..) => Blocked::Loopback,
        (10, ..) | (192, 168, _) => Blocked::Private,
        (172, 16..=31, _) => Blocked::Private,
        (100, 64..=127, _) => Blocked::SharedNat,
        (169, 254, _) => Blocked::LinkLocal,
        (224..=239, ..) => Blocked::Multicast,
        // 192.0.0/24 protocol assignments, 192.0.2/24, 198.51.100/24 and
        // 203.0.113/24 documentation, 192.88.99/24 6to4 relays, 198.18/15
        // benchmarking, 240/4 reserved.
        (192, 0, 0 | 2) | (198, 51, 100) | (203, 0, 113) | (192, 88, 99) => Blocked::Reserved,
        (198, 18..=19, _) | (240..=255, ..) => Blocked::Reserved,
        _ => return None,
    };
    Some(kind)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<Blocked> {
    if let Some(v4) = embedded_v4(ip) {
        // Judged as the IPv4 address it reaches.
        return blocked_v4(v4);
    }
    let segments = ip.segments();
    let kind = match segments {
        _ if ip.is_unspecified() => Blocked::Unspecified,
        _ if ip.is_loopback() => Blocked::Loopback,
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254] => Blocked::Metadata,
        [first, ..] if first & 0xfe00 == 0xfc00 => Blocked::UniqueLocal,
        [first, ..] if first & 0xffc0 == 0xfec0 => Blocked::UniqueLocal,
        [first, ..] if first & 0xffc0 == 0xfe80 => Blocked::LinkLocal,
        [first, ..] if first & 0xff00 == 0xff00 => Blocked::Multicast,
        // ::/96 (IPv4-compatible, deprecated) and the rest of ::/8.
        [0, ..] => Blocked::Reserved,
        // 64:ff9b:1::/48 local-use NAT64, 100::/64 discard-only,
        // 2001::/23 protocol assignments (Teredo, ORCHID, …),
        // 2001:db8::/32 and 3fff::/20 documentation.
        [0x0064, 0xff9b, 1, ..] | [0x0100, 0, 0, 0, ..] => Blocked::Reserved,
        [0x2001, second, ..] if second < 0x0200 => Blocked::Reserved,
        [0x2001, 0x0db8, ..] => Blocked::Reserved,
        [first, ..] if first & 0xfff0 == 0x3ff0 => Blocked::Reserved,
        _ => return None,
    };
    Some(kind)
}

/// The IPv4 address an IPv6 address carries and reaches: IPv4-mapped
/// (`::ffff:a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let from = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0x0064, 0xff9b, 0, 0, 0, 0, high, low] => Some(from(high, low)),
        [0x2002, high, low, ..] => Some(from(high, low)),
        _ => None,
    }
}

/// An address `web_fetch` refused to connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The address.
    pub(crate) ip: IpAddr,
    /// Its range.
    pub(crate) kind: Blocked,
}

/// Whether `web_fetch` may connect to `ip` on `port`: a public address, or
/// one `allow_private` names with this very port.
pub(crate) fn check(ip: IpAddr, port: u16, allow_private: &[SocketAddr]) -> Result<(), Refused> {
    let ip = canonical(ip);
    let Some(kind) = blocked(ip) else {
        return Ok(());
    };
    let named = allow_private
        .iter()
        .any(|allowed| canonical(allowed.ip()) == ip && allowed.port() == port);
    if named {
        Ok(())
    } else {
        Err(Refused { ip, kind })
    }
}

/// `ip`, with an IPv4-mapped IPv6 address written as the IPv4 one.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<Blocked> {
        blocked(text.parse().unwrap())
    }

    #[test]
    fn public_addresses_pass() {
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "100.63.255.255",
            "192.169.0.1",
            "169.255.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "2001:4860:4860::8888",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(kind(public), None, "{public}");
        }
    }

    #[test]
    fn every_dangerous_range_is_refused_with_its_kind() {
        let cases = [
            ("0.0.0.0", Blocked::Unspecified),
            ("0.1.2.3", Blocked::Unspecified),
            ("::", Blocked::Unspecified),
            ("127.0.0.1", Blocked::Loopback),
            ("127.255.255.254", Blocked::Loopback),
            ("::1", Blocked::Loopback),
            ("10.0.0.1", Blocked::Private),
            ("172.16.0.1", Blocked::Private),
            ("172.31.255.255", Blocked::Private),
            ("192.168.1.1", Blocked::Private),
            ("100.64.0.1", Blocked::SharedNat),
            ("100.127.255.255", Blocked::SharedNat),
            ("169.254.0.1", Blocked::LinkLocal),
            ("fe80::1", Blocked::LinkLocal),
            ("169.254.169.254", Blocked::Metadata),
            ("fd00:ec2::254", Blocked::Metadata),
            ("fc00::1", Blocked::UniqueLocal),
            ("fd12:3456::1", Blocked::UniqueLocal),
            ("fec0::1", Blocked::UniqueLocal),
            ("224.0.0.1", Blocked::Multicast),
            ("239.255.255.250", Blocked::Multicast),
            ("ff02::1", Blocked::Multicast),
            ("255.255.255.255", Blocked::Broadcast),
            ("240.0.0.1", Blocked::Reserved),
            ("192.0.2.1", Blocked::Reserved),
            ("198.51.100.1", Blocked::Reserved),
            ("203.0.113.1", Blocked::Reserved),
            ("198.18.0.1", Blocked::Reserved),
            ("192.0.0.8", Blocked::Reserved),
            ("2001:db8::1", Blocked::Reserved),
            ("2001::1", Blocked::Reserved),
            ("3fff::1", Blocked::Reserved),
            ("100::1", Blocked::Reserved),
            ("::7f00:1", Blocked::Reserved),
            ("64:ff9b:1::1", Blocked::Reserved),
        ];
        for (text, expected) in cases {
            assert_eq!(kind(text), Some(expected), "{text}");
        }
    }

    #[test]
    fn an_ipv6_address_carrying_an_ipv4_one_is_judged_by_it() {
        assert_eq!(kind("::ffff:127.0.0.1"), Some(Blocked::Loopback));
        assert_eq!(kind("::ffff:169.254.169.254"), Some(Blocked::Metadata));
        assert_eq!(kind("::ffff:10.1.2.3"), Some(Blocked::Private));
        assert_eq!(kind("::ffff:8.8.8.8"), None);
        assert_eq!(kind("64:ff9b::7f00:1"), Some(Blocked::Loopback));
        assert_eq!(kind("64:ff9b::a9fe:a9fe"), Some(Blocked::Metadata));
        assert_eq!(kind("2002:c0a8:101::1"), Some(Blocked::Private));
        assert_eq!(kind("2002:7f00:1::"), Some(Blocked::Loopback));
    }

    #[test]
    fn allow_private_names_one_address_and_one_port() {
        let allow: Vec<SocketAddr> = vec![
            "127.0.0.1:8080".parse().unwrap(),
            "[::1]:3000".parse().unwrap(),
        ];
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(check(ip("127.0.0.1"), 8080, &allow), Ok(()));
        assert_eq!(check(ip("::ffff:127.0.0.1"), 8080, &allow), Ok(()));
        assert_eq!(check(ip("::1"), 3000, &allow), Ok(()));
        assert_eq!(
            check(ip("127.0.0.1"), 8081, &allow),
            Err(Refused {
                ip: ip("127.0.0.1"),
                kind: Blocked::Loopback
            })
        );
        assert!(check(ip("127.0.0.2"), 8080, &allow).is_err());
        assert!(check(ip("::1"), 8080, &allow).is_err());
        assert!(check(ip("169.254.169.254"), 80, &[]).is_err());
        assert_eq!(check(ip("8.8.8.8"), 443, &[]), Ok(()));
    }
}
