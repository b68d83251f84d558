//! Which addresses a request may connect to: every address a destination
//! resolves to is checked here, at dial time, and the connection goes to
//! that checked address itself (`super::dial`), so an answer that changes
//! between the check and the dial cannot steer it.
//!
//! Refused unless the rule author allows them: loopback, link-local, the
//! cluster's API server. Refused always: the unspecified and multicast
//! addresses. Cloud metadata addresses are refused unless the allow-list
//! names that very address (`169.254.169.254/32`): a wide range such as
//! `0.0.0.0/0` or `169.254.0.0/16` never opens them. In general an allow
//! entry opens a refused address only when the entry lies inside the
//! refused range it is in, so allowing "everything" allows nothing refused.
//! IPv6 forms that carry an IPv4 address are checked as that address
//! ([`super::cidr::canonical`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cidr::{Cidr, canonical};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// `0.0.0.0/8`, `::`: a connection to them reaches the local host.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: kiln's own pod (its metrics, its health).
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`: the node's link.
    LinkLocal,
    /// A cloud's instance metadata service: credentials of the node.
    Metadata,
    /// Multicast and broadcast: no HTTP server is there.
    Multicast,
    /// An address of the cluster's API server.
    ApiServer,
}

impl Class {
    /// The class as status, errors and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Unspecified => "unspecified",
            Class::Loopback => "loopback",
            Class::LinkLocal => "link-local",
            Class::Metadata => "cloud metadata",
            Class::Multicast => "multicast",
            Class::ApiServer => "the cluster's API server",
        }
    }

    /// Whether a rule author's allow-list may open it at all.
    fn openable(self) -> bool {
        !matches!(self, Class::Unspecified | Class::Multicast)
    }

    /// Whether an allowed host name opens it (its addresses are the host's
    /// business); metadata and the API server need their address named.
    fn opened_by_host(self) -> bool {
        matches!(self, Class::Loopback | Class::LinkLocal)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
    Cidr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix)
}

const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
    let [a, b, c, d, e, f, g, h] = segments;
    Cidr::new(IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)), prefix)
}

/// The fixed refused ranges.
const REFUSED: &[(Cidr, Class)] = &[
    (v4(0, 0, 0, 0, 8), Class::Unspecified),
    (v6([0; 8], 128), Class::Unspecified),
    (v4(127, 0, 0, 0, 8), Class::Loopback),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), Class::Loopback),
    (v4(169, 254, 0, 0, 16), Class::LinkLocal),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Class::LinkLocal),
    // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle (also below).
    (v4(169, 254, 169, 254, 32), Class::Metadata),
    // AWS ECS task metadata and credentials.
    (v4(169, 254, 170, 2, 32), Class::Metadata),
    // Alibaba Cloud.
    (v4(100, 100, 100, 200, 32), Class::Metadata),
    // Oracle Cloud.
    (v4(192, 0, 0, 192, 32), Class::Metadata),
    // AWS over IPv6 (Nitro).
    (
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
        Class::Metadata,
    ),
    (v4(224, 0, 0, 0, 4), Class::Multicast),
    (v4(255, 255, 255, 255, 32), Class::Multicast),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Class::Multicast),
];

/// What one rule author allows beyond the defaults, per source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AllowList {
    /// Address ranges: an entry opens a refused address inside it when the
    /// entry lies within the refused range (see the module's docs).
    pub cidrs: Vec<Cidr>,
    /// Host names (as the destination writes them) whose loopback and
    /// link-local addresses are allowed.
    pub hosts: Vec<String>,
}

/// The process-wide part of the checks: the API server's addresses and the
/// test-only switch for servers on loopback.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    api_server: Vec<IpAddr>,
    loopback_for_tests: bool,
}

/// An address the checks refused, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("address {addr} is refused: {class}")]
pub struct Refusal {
    /// The address as resolved.
    pub addr: IpAddr,
    /// The first refused range it is in.
    pub class: Class,
}

impl AddressPolicy {
    /// The defaults, with the cluster's API server at `api_server`.
    pub fn new(api_server: impl IntoIterator<Item = IpAddr>) -> Self {
        Self {
            api_server: api_server.into_iter().map(canonical).collect(),
            loopback_for_tests: false,
        }
    }

    /// Allows loopback addresses (other than the API server's) to every
    /// source: a test's stand-in server. Never set by a rule, only by the
    /// tests' options of the engine.
    pub fn allowing_loopback_for_tests(mut self) -> Self {
        self.loopback_for_tests = true;
        self
    }

    /// Whether `ip`, one address `host` resolved to, may be connected to
    /// under `allow`.
    pub fn check(&self, host: &str, ip: IpAddr, allow: &AllowList) -> Result<(), Refusal> {
        let ip = canonical(ip);
        let host_allowed = allow.hosts.iter().any(|h| h.eq_ignore_ascii_case(host));
        let api = self
            .api_server
            .iter()
            .filter(|a| **a == ip)
            .map(|a| (Cidr::host(*a), Class::ApiServer));
        for (range, class) in REFUSED.iter().copied().chain(api) {
            if !range.contains(ip) {
                continue;
            }
            let opened = class.openable()
                && ((host_allowed && class.opened_by_host())
                    || (self.loopback_for_tests && class == Class::Loopback)
                    || allow
                        .cidrs
                        .iter()
                        .any(|entry| entry.contains(ip) && range.covers(entry)));
            if !opened {
                return Err(Refusal { addr: ip, class });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn allow(cidrs: &[&str]) -> AllowList {
        AllowList {
            cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            hosts: vec![],
        }
    }

    fn refused(policy: &AddressPolicy, addr: &str, allowed: &AllowList) -> Option<Class> {
        policy.check("h", ip(addr), allowed).err().map(|r| r.class)
    }

    #[test]
    fn the_defaults_refuse_the_local_and_metadata_addresses_in_every_form() {
        let p = AddressPolicy::new([ip("10.96.0.1")]);
        let none = AllowList::default();
        for (addr, class) in [
            ("127.0.0.1", Class::Loopback),
            ("127.1.2.3", Class::Loopback),
            ("::1", Class::Loopback),
            ("::ffff:127.0.0.1", Class::Loopback),
            ("0.0.0.0", Class::Unspecified),
            ("::", Class::Unspecified),
            ("::ffff:0.0.0.0", Class::Unspecified),
            ("169.254.1.1", Class::LinkLocal),
            ("fe80::1", Class::LinkLocal),
            ("169.254.169.254", Class::LinkLocal),
            ("::ffff:169.254.169.254", Class::LinkLocal),
            ("::ffff:a9fe:a9fe", Class::LinkLocal),
            ("64:ff9b::a9fe:a9fe", Class::LinkLocal),
            ("::169.254.169.254", Class::LinkLocal),
            ("100.100.100.200", Class::Metadata),
            ("::ffff:100.100.100.200", Class::Metadata),
            ("fd00:ec2::254", Class::Metadata),
            ("192.0.0.192", Class::Metadata),
            ("10.96.0.1", Class::ApiServer),
            ("::ffff:10.96.0.1", Class::ApiServer),
            ("224.0.0.1", Class::Multicast),
            ("255.255.255.255", Class::Multicast),
        ] {
            assert_eq!(refused(&p, addr, &none), Some(class), "{addr}");
        }
        for addr in ["10.0.0.5", "192.168.1.1", "93.184.216.34", "2001:db8::1"] {
            assert_eq!(refused(&p, addr, &none), None, "{addr}");
        }
    }

    #[test]
    fn a_wide_allow_entry_opens_nothing_refused() {
        let p = AddressPolicy::new([ip("10.96.0.1")]);
        let wide = allow(&["0.0.0.0/0", "::/0", "169.254.0.0/16", "10.0.0.0/8"]);
        assert_eq!(refused(&p, "127.0.0.1", &wide), Some(Class::Loopback));
        assert_eq!(
            refused(&p, "::ffff:169.254.169.254", &wide),
            Some(Class::Metadata)
        );
        assert_eq!(refused(&p, "169.254.169.254", &wide), Some(Class::Metadata));
        assert_eq!(
            refused(&p, "169.254.3.4", &wide),
            None,
            "link-local opened by its own range"
        );
        assert_eq!(refused(&p, "10.96.0.1", &wide), Some(Class::ApiServer));
    }

    #[test]
    fn an_exact_allow_entry_opens_its_address() {
        let p = AddressPolicy::new([ip("10.96.0.1")]);
        let exact = allow(&["127.0.0.1/32", "169.254.169.254/32", "10.96.0.1/32"]);
        assert_eq!(refused(&p, "127.0.0.1", &exact), None);
        assert_eq!(refused(&p, "127.0.0.2", &exact), Some(Class::Loopback));
        assert_eq!(refused(&p, "::ffff:169.254.169.254", &exact), None);
        assert_eq!(refused(&p, "10.96.0.1", &exact), None);
        assert_eq!(
            refused(&p, "0.0.0.0", &allow(&["0.0.0.0/32"])),
            Some(Class::Unspecified),
            "never opened"
        );
    }

    #[test]
    fn an_allowed_host_opens_loopback_and_link_local_only() {
        let p = AddressPolicy::new([ip("127.0.0.9")]);
        let hosts = AllowList {
            cidrs: vec![],
            hosts: vec!["Internal.Example".into()],
        };
        let check = |addr| {
            p.check("internal.example", ip(addr), &hosts)
                .err()
                .map(|r| r.class)
        };
        assert_eq!(check("127.0.0.1"), None);
        assert_eq!(check("169.254.5.5"), None);
        assert_eq!(check("169.254.169.254"), Some(Class::Metadata));
        assert_eq!(check("127.0.0.9"), Some(Class::ApiServer));
        assert_eq!(
            p.check("other.example", ip("127.0.0.1"), &hosts)
                .err()
                .map(|r| r.class),
            Some(Class::Loopback)
        );
    }

    #[test]
    fn the_test_switch_opens_loopback_but_not_the_api_server() {
        let p = AddressPolicy::new([ip("127.0.0.1")]).allowing_loopback_for_tests();
        let none = AllowList::default();
        assert_eq!(refused(&p, "127.0.0.2", &none), None);
        assert_eq!(refused(&p, "127.0.0.1", &none), Some(Class::ApiServer));
        assert_eq!(
            refused(&p, "169.254.169.254", &none),
            Some(Class::LinkLocal)
        );
    }
}
