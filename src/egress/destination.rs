//! Where a request goes: the scheme, host, port and path prefix the rule
//! author writes literally, and the path segments and query parameters below
//! it that a request may fill from a tenant's values. A value is
//! percent-encoded as one segment or one parameter, so no value can change
//! the host, the port, climb out of the prefix or add a parameter.

use std::fmt;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`) is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URL schemes a destination may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A destination as the rule author wrote it, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    scheme: Scheme,
    host: String,
    port: u16,
    prefix: String,
}

/// Why a destination, a path segment or a parameter is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// Not `http://` or `https://`.
    #[error("the URL must start with https:// or http://")]
    Scheme,
    /// Userinfo (`user@host`) hides the host and carries credentials.
    #[error("the URL must not hold a user or password (`user@`): name a Secret for credentials")]
    UserInfo,
    /// The host is empty or not a DNS name or IP address.
    #[error("`{0}` is not a host name or IP address")]
    Host(String),
    /// The port is not a number from 1 to 65535.
    #[error("`{0}` is not a port (1 to 65535)")]
    Port(String),
    /// A query or fragment in the destination: parameters are given apart.
    #[error("the URL must not hold `?` or `#`: give query parameters apart")]
    Query,
    /// A path prefix with `.`/`..` segments, `%` or `\`: it must be plain.
    #[error("the path `{0}` must be plain: no `.` or `..` segments, `%` or `\\`")]
    Path(String),
    /// A segment below the prefix that is empty, `.` or `..`.
    #[error("a path segment below the destination must not be empty, `.` or `..`")]
    Segment,
}

impl Destination {
    /// Parses a destination: `https://host[:port][/path/prefix]`.
    pub fn parse(text: &str) -> Result<Self, DestinationError> {
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(DestinationError::Scheme);
        };
        if rest.contains(['?', '#']) {
            return Err(DestinationError::Query);
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(DestinationError::UserInfo);
        }
        let (host, port) = split_port(authority)?;
        let host = checked_host(host)?;
        let prefix = checked_prefix(path)?;
        Ok(Self {
            scheme,
            port: port.unwrap_or(scheme.default_port()),
            host,
            prefix,
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host as written (lower case), without brackets for IPv6.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's when none is written.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `Host` header's value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The request target: the prefix, then each of `segments` encoded as
    /// one segment, then `query` encoded.
    pub fn path_and_query(
        &self,
        segments: &[String],
        query: &[(String, String)],
    ) -> Result<String, DestinationError> {
        let mut out = self.prefix.trim_end_matches('/').to_string();
        for s in segments {
            if s.is_empty() || s == "." || s == ".." {
                return Err(DestinationError::Segment);
            }
            out.push('/');
            out.extend(utf8_percent_encode(s, COMPONENT));
        }
        if out.is_empty() || (segments.is_empty() && self.prefix.ends_with('/')) {
            out.push('/');
        }
        for (i, (k, v)) in query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.extend(utf8_percent_encode(k, COMPONENT));
            out.push('=');
            out.extend(utf8_percent_encode(v, COMPONENT));
        }
        Ok(out)
    }

    /// The whole URL of a request, as logs, status and the cache name it.
    pub fn url(
        &self,
        segments: &[String],
        query: &[(String, String)],
    ) -> Result<String, DestinationError> {
        Ok(format!("{self}{}", self.path_and_query(segments, query)?))
    }
}

impl fmt::Display for Destination {
    /// The scheme and authority (without the prefix).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.authority())
    }
}

fn split_port(authority: &str) -> Result<(&str, Option<u16>), DestinationError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| DestinationError::Host(authority.to_string()))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| DestinationError::Host(authority.to_string()))?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|n| *n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| DestinationError::Port(p.to_string()))?,
        ),
    };
    Ok((host, port))
}

/// A DNS name of letters, digits, `-` and `.`, a dotted IPv4 address (four
/// decimal parts), or an IPv6 address. Numeric forms a resolver would read
/// as an address (`2130706433`, `0x7f.1`, `127.1`) are refused: their
/// meaning depends on the resolver.
fn checked_host(host: &str) -> Result<String, DestinationError> {
    let bad = || DestinationError::Host(host.to_string());
    if host.contains(':') {
        let ip: std::net::Ipv6Addr = host.parse().map_err(|_| bad())?;
        return Ok(ip.to_string());
    }
    let host = host.to_ascii_lowercase();
    let labels: Vec<&str> = host.trim_end_matches('.').split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if host.is_empty() || host.len() > 253 || !labels.iter().all(label_ok) {
        return Err(bad());
    }
    let last = labels.last().copied().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && last.bytes().skip(2).all(|b| b.is_ascii_hexdigit()));
    if numeric {
        let ip: std::net::Ipv4Addr = host.parse().map_err(|_| bad())?;
        if ip.to_string() != host {
            return Err(bad());
        }
    }
    Ok(host)
}

fn checked_prefix(path: &str) -> Result<String, DestinationError> {
    let plain = !path.contains(['%', '\\'])
        && !path.bytes().any(|b| b.is_ascii_control() || b == b' ')
        && path.split('/').all(|s| s != "." && s != "..");
    if plain {
        Ok(path.to_string())
    } else {
        Err(DestinationError::Path(path.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(s: &str) -> Destination {
        Destination::parse(s).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn literal_destinations_parse() {
        let d = dest("https://API.Example.com:8443/v1/vpcs");
        assert_eq!(
            (d.host(), d.port(), d.scheme()),
            ("api.example.com", 8443, Scheme::Https)
        );
        assert_eq!(d.authority(), "api.example.com:8443");
        assert_eq!(dest("http://10.0.0.1").port(), 80);
        assert_eq!(dest("https://[fd00::1]:9/x").host(), "fd00::1");
        assert_eq!(dest("https://[fd00::1]:9/x").authority(), "[fd00::1]:9");
        assert_eq!(dest("https://a.b").authority(), "a.b");
    }

    #[test]
    fn destinations_that_hide_where_they_go_are_refused() {
        for (text, err) in [
            ("ftp://a.b", DestinationError::Scheme),
            ("//a.b", DestinationError::Scheme),
            ("https://user:pw@a.b", DestinationError::UserInfo),
            ("https://a.b@evil.example", DestinationError::UserInfo),
            ("https://a.b/x?y=1", DestinationError::Query),
            ("https://a.b#frag", DestinationError::Query),
            ("https://a.b:0", DestinationError::Port("0".into())),
            ("https://a.b:+80", DestinationError::Port("+80".into())),
            ("https://a.b:99999", DestinationError::Port("99999".into())),
            ("https:///x", DestinationError::Host("".into())),
            (
                "https://2130706433",
                DestinationError::Host("2130706433".into()),
            ),
            ("https://127.1", DestinationError::Host("127.1".into())),
            (
                "https://0x7f.0x1",
                DestinationError::Host("0x7f.0x1".into()),
            ),
            (
                "https://017.0.0.1",
                DestinationError::Host("017.0.0.1".into()),
            ),
            (
                "https://a_b.example",
                DestinationError::Host("a_b.example".into()),
            ),
            (
                "https://a.b/v1/../admin",
                DestinationError::Path("/v1/../admin".into()),
            ),
            (
                "https://a.b/v1/%2e%2e",
                DestinationError::Path("/v1/%2e%2e".into()),
            ),
            ("https://a.b/v1\\x", DestinationError::Path("/v1\\x".into())),
        ] {
            assert_eq!(Destination::parse(text), Err(err), "{text}");
        }
    }

    #[test]
    fn tenant_values_stay_below_the_prefix() {
        let d = dest("https://api.example.com/v1/vpcs");
        let p = |segs: &[&str], q: &[(&str, &str)]| {
            let q: Vec<(String, String)> = q
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            d.path_and_query(&strings(segs), &q)
        };
        assert_eq!(p(&["vpc-1"], &[]).unwrap(), "/v1/vpcs/vpc-1");
        assert_eq!(
            p(&["a/../../admin"], &[]).unwrap(),
            "/v1/vpcs/a%2F..%2F..%2Fadmin"
        );
        assert_eq!(p(&["x?y=1#z"], &[]).unwrap(), "/v1/vpcs/x%3Fy%3D1%23z");
        assert_eq!(
            p(&["@evil.example"], &[]).unwrap(),
            "/v1/vpcs/%40evil.example"
        );
        assert_eq!(p(&["%2e%2e"], &[]).unwrap(), "/v1/vpcs/%252e%252e");
        assert_eq!(
            p(&[], &[("id", "a&admin=true"), ("n", "é")]).unwrap(),
            "/v1/vpcs?id=a%26admin%3Dtrue&n=%C3%A9"
        );
        for bad in ["", ".", ".."] {
            assert_eq!(p(&[bad], &[]), Err(DestinationError::Segment), "{bad:?}");
        }
        assert_eq!(dest("https://a.b").path_and_query(&[], &[]).unwrap(), "/");
        assert_eq!(
            dest("https://a.b/x/").path_and_query(&[], &[]).unwrap(),
            "/x/"
        );
        assert_eq!(
            d.url(&strings(&["v"]), &[]).unwrap(),
            "https://api.example.com/v1/vpcs/v"
        );
    }
}
