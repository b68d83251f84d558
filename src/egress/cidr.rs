//! An address range (`10.0.0.0/8`, `fd00::/8`, or one address), and how an
//! IPv6 address that carries an IPv4 one is read as that IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address range: a network address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a text is not an address range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("`{0}` is not an IP address (write 10.0.0.0/8, fd00::/8 or one address)")]
    Address(String),
    /// The prefix length is not a number within the address's bits.
    #[error("`{text}`: the prefix length must be a number from 0 to {max}")]
    Prefix {
        /// The range as written.
        text: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// Bits are set below the prefix (`10.0.0.1/8`): a typo more often than not.
    #[error("`{0}` has bits set below its prefix length; write the network address")]
    HostBits(String),
}

impl Cidr {
    /// One address as a range of its own (`/32`, `/128`).
    pub fn host(addr: IpAddr) -> Self {
        Self {
            addr,
            prefix: bits(addr),
        }
    }

    /// A range from its parts, as they are written in the source (tests and
    /// the fixed lists of [`super::address`]).
    pub const fn new(addr: IpAddr, prefix: u8) -> Self {
        Self { addr, prefix }
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this range. An IPv4 range never holds an IPv6
    /// address and back: callers [`canonical`] an address first.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u32::from(net).into(), self.prefix, 32)
                    == masked(u32::from(ip).into(), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(u128::from(net), self.prefix, 128)
                    == masked(u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }

    /// Whether every address of `other` lies in this range.
    pub fn covers(&self, other: &Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }
}

fn bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn masked(value: u128, prefix: u8, width: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let shift = u32::from(width - prefix.min(width));
    (value >> shift) << shift
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(text.to_string()))?;
        let max = bits(addr);
        let prefix = match prefix {
            None => max,
            Some(p) => {
                p.parse::<u8>()
                    .ok()
                    .filter(|p| *p <= max)
                    .ok_or_else(|| CidrError::Prefix {
                        text: text.to_string(),
                        max,
                    })?
            }
        };
        let cidr = Cidr { addr, prefix };
        let value = match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        if masked(value, prefix, max) != value {
            return Err(CidrError::HostBits(text.to_string()));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The address a packet to `ip` really reaches, for the checks: an IPv6
/// address that embeds an IPv4 one is read as that IPv4 address, so
/// `::ffff:169.254.169.254` is checked as `169.254.169.254`. The forms:
/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`, deprecated but
/// still routed by some stacks), IPv4-translated (`::ffff:0:0:0/96`) and the
/// NAT64 well-known prefix (`64:ff9b::/96`) whose gateway forwards to the
/// embedded address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6] == [0; 6] && u32::from(embedded) > 1;
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || translated || nat64 {
        IpAddr::V4(embedded)
    } else {
        IpAddr::V6(Ipv6Addr::from(u128::from(v6)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_hold_their_addresses_only() {
        assert!(cidr("10.0.0.0/8").contains("10.255.1.2".parse().unwrap()));
        assert!(!cidr("10.0.0.0/8").contains("11.0.0.1".parse().unwrap()));
        assert!(cidr("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(!cidr("0.0.0.0/0").contains("::1".parse().unwrap()));
        assert!(cidr("fd00::/8").contains("fd12::1".parse().unwrap()));
        assert!(cidr("127.0.0.1").contains("127.0.0.1".parse().unwrap()));
        assert!(!cidr("127.0.0.1").contains("127.0.0.2".parse().unwrap()));
        assert!(cidr("127.0.0.0/8").covers(&cidr("127.0.0.1")));
        assert!(!cidr("127.0.0.1").covers(&cidr("127.0.0.0/8")));
    }

    #[test]
    fn bad_ranges_say_why() {
        assert!(matches!(
            "10.0.0.1/8".parse::<Cidr>(),
            Err(CidrError::HostBits(_))
        ));
        assert!(matches!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Prefix { .. })
        ));
        assert!(matches!(
            "10.0.0.0/".parse::<Cidr>(),
            Err(CidrError::Prefix { .. })
        ));
        assert!(matches!(
            "example.com/8".parse::<Cidr>(),
            Err(CidrError::Address(_))
        ));
    }

    #[test]
    fn embedded_ipv4_is_read_as_ipv4() {
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        for form in [
            "::ffff:169.254.169.254",
            "::ffff:a9fe:a9fe",
            "::169.254.169.254",
            "::ffff:0:169.254.169.254",
            "64:ff9b::169.254.169.254",
        ] {
            assert_eq!(canonical(form.parse().unwrap()), metadata, "{form}");
        }
        assert_eq!(
            canonical("::1".parse().unwrap()),
            "::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            canonical("::".parse().unwrap()),
            "::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            canonical("2001:db8::1".parse().unwrap()),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
    }
}
