//! Web origins (`scheme://host[:port]`), as `server.public_url` names one and as browsers send
//! them in `Origin`, compared the way browsers mean them: scheme and host without regard to
//! case, a default port the same as none.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::uri::Authority;
use ipnet::IpNet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOrigin {
    https: bool,
    /// Lowercase; an IPv6 address keeps its brackets, as in a Host header.
    host: String,
    port: u16,
}

impl WebOrigin {
    /// Reads `server.public_url`: an origin, with at most a trailing `/` (people paste the
    /// address from the browser's bar) and no path, query or user.
    pub fn parse_public_url(s: &str) -> Result<WebOrigin, String> {
        let t = s.trim();
        let bare = t.strip_suffix('/').unwrap_or(t);
        Self::parse_origin(bare).ok_or_else(|| {
            format!(
                "\"{s}\" is not an http(s) origin like https://agents.example.com or \
                 http://10.0.0.5:8080 (scheme, host and port only: no path, query or user)"
            )
        })
    }

    /// Reads an `Origin` header's value; `null` and anything that is not an http(s) origin
    /// is `None`.
    pub fn parse_origin(s: &str) -> Option<WebOrigin> {
        let (scheme, authority) = s.split_once("://")?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return None;
        };
        Self::from_authority(https, authority)
    }

    /// The origin of a request that came in with this `Host` (or HTTP/2 `:authority`).
    pub fn from_authority(https: bool, authority: &str) -> Option<WebOrigin> {
        // Authority's parser refuses paths, queries, fragments and spaces, but takes a user.
        if authority.contains('@') {
            return None;
        }
        let a = Authority::from_str(authority).ok()?;
        let host = a.host();
        if host.is_empty() {
            return None;
        }
        // Read here rather than with port_u16(): Authority takes a port beyond 65535 and then
        // reports none, which would pass for the default.
        let port_text = match authority.rfind(':') {
            Some(i) if !authority[i..].contains(']') => &authority[i + 1..],
            _ => "",
        };
        let port = match port_text {
            "" if https => 443,
            "" => 80,
            p => p.parse::<u16>().ok()?,
        };
        Some(WebOrigin {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    pub fn is_https(&self) -> bool {
        self.https
    }
}

/// Written as it is shown, for comparing two configs.
impl serde::Serialize for WebOrigin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for WebOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, default) = if self.https {
            ("https", 443)
        } else {
            ("http", 80)
        };
        if self.port == default {
            write!(f, "{scheme}://{}", self.host)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// Reads one `server.trusted_proxies` entry: an address (`10.0.0.2`, `::1`) or a network
/// (`10.0.0.0/24`).
pub fn parse_ip_net(s: &str) -> Result<IpNet, String> {
    let t = s.trim();
    if t.contains('/') {
        let net = IpNet::from_str(t)
            .map_err(|_| format!("\"{s}\" is not an IP address or network like 10.0.0.0/24"))?;
        if net.trunc() != net {
            return Err(format!(
                "\"{s}\" has host bits set; did you mean {}?",
                net.trunc()
            ));
        }
        Ok(net)
    } else {
        IpAddr::from_str(t)
            .map(IpNet::from)
            .map_err(|_| format!("\"{s}\" is not an IP address or network like 10.0.0.0/24"))
    }
}

/// True if `peer` is one of `proxies`. An IPv4 peer seen on an IPv6 socket
/// (`::ffff:10.0.0.2`) counts as its IPv4 address, as people write it in the config.
pub fn is_trusted(proxies: &[IpNet], peer: SocketAddr) -> bool {
    let ip = peer.ip().to_canonical();
    proxies.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(s: &str) -> String {
        WebOrigin::parse_origin(s)
            .map(|o| o.to_string())
            .unwrap_or_else(|| "-".into())
    }

    #[test]
    fn origins_compare_as_browsers_mean_them() {
        assert_eq!(origin("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(
            origin("HTTPS://Agents.Example.COM"),
            "https://agents.example.com"
        );
        assert_eq!(origin("https://a.example:443"), "https://a.example");
        assert_eq!(origin("http://a.example:80"), "http://a.example");
        assert_eq!(origin("http://[::1]:8080"), "http://[::1]:8080");
        assert_eq!(
            WebOrigin::parse_origin("http://a.example"),
            WebOrigin::from_authority(false, "A.example:80")
        );
        assert_ne!(
            WebOrigin::parse_origin("https://a.example"),
            WebOrigin::from_authority(false, "a.example")
        );
        assert_ne!(
            WebOrigin::parse_origin("http://a.example:8081"),
            WebOrigin::from_authority(false, "a.example:8080")
        );
        for bad in [
            "null",
            "",
            "https://",
            "file:///etc",
            "ftp://a.example",
            "http://a.example/",
            "http://a.example/x",
            "http://a.example?x",
            "http://a.example#x",
            "http://user@a.example",
            "http://a.example:99999",
            "http://a.example:8o",
            "http://a b",
        ] {
            assert_eq!(origin(bad), "-", "{bad:?}");
        }
    }

    #[test]
    fn public_url_may_end_in_a_slash_but_has_no_path() {
        let o = WebOrigin::parse_public_url("https://agents.example.com/").unwrap();
        assert_eq!(o.to_string(), "https://agents.example.com");
        assert!(o.is_https());
        for bad in [
            "agents.example.com",
            "https://agents.example.com/ui",
            "https://agents.example.com//",
            "ws://agents.example.com",
        ] {
            assert!(WebOrigin::parse_public_url(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn proxies_are_addresses_or_networks() {
        let nets: Vec<IpNet> = ["10.0.0.2", "192.168.0.0/24", "::1"]
            .iter()
            .map(|s| parse_ip_net(s).unwrap())
            .collect();
        let at = |s: &str| SocketAddr::new(s.parse().unwrap(), 1234);
        assert!(is_trusted(&nets, at("10.0.0.2")));
        assert!(!is_trusted(&nets, at("10.0.0.3")));
        assert!(is_trusted(&nets, at("192.168.0.77")));
        assert!(is_trusted(&nets, at("::ffff:10.0.0.2")));
        assert!(is_trusted(&nets, at("::1")));
        assert!(!is_trusted(&[], at("127.0.0.1")));
        assert!(parse_ip_net("10.0.0.1/24")
            .unwrap_err()
            .contains("did you mean 10.0.0.0/24"));
        assert!(parse_ip_net("proxy.local").is_err());
    }
}
