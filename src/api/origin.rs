//! The same-origin rule for the web UI's session cookie. `SameSite=Strict` keeps the cookie from
//! other sites, but a site is a registrable domain: pages on another port of the same host, or
//! on a sibling subdomain, are the same site and their requests carry the cookie. So a request
//! authenticated by the cookie that changes something, or opens a WebSocket (which no CORS
//! check guards), must also name this server's own origin in `Origin`.

use std::net::{IpAddr, SocketAddr};

use axum::http::{header, HeaderMap, Method, Uri};

use crate::config::{is_trusted, ServerConfig, WebOrigin};

/// The longest piece of a client's `Origin` repeated in a refusal.
const MAX_SHOWN: usize = 100;

/// Why a cookie request was refused; the message says how an operator would fix it.
#[derive(Debug, thiserror::Error)]
pub enum OriginRefused {
    #[error(
        "the request's Origin ({origin}) is not this server's own ({own}): with the session \
         cookie, only agenthold's own pages may change things or open a terminal. If that is \
         the address you open agenthold at (behind a proxy, or under another name), set \
         server.public_url to it"
    )]
    Foreign { origin: String, own: String },
    #[error(
        "a request with the session cookie that changes something or opens a WebSocket must \
         carry an Origin header naming this server's own origin ({own}), which browsers send; \
         programs should use Authorization: Bearer instead. Behind a proxy, set \
         server.public_url to the address you open agenthold at"
    )]
    Missing { own: String },
    #[error(
        "the request has no Host header, so this server's own origin is unknown and the \
         request's Origin cannot be checked; set server.public_url to the address you open \
         agenthold at"
    )]
    UnknownOwn,
}

/// Requests the rule applies to: every method but the safe ones, and every upgrade (a
/// WebSocket is opened with a GET, and browsers let any page open one to any server).
pub fn needs_same_origin(method: &Method, headers: &HeaderMap) -> bool {
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    !safe || headers.contains_key(header::UPGRADE)
}

/// True if a trusted proxy says the client reached it over HTTPS. Only the last value counts:
/// it is the one our proxy set or added; earlier ones came from whoever called it.
fn forwarded_https(config: &ServerConfig, peer: SocketAddr, headers: &HeaderMap) -> bool {
    if config.trusted_proxies.is_empty() || !is_trusted(&config.trusted_proxies, peer) {
        return false;
    }
    headers
        .get_all("x-forwarded-proto")
        .iter()
        .next_back()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// The address of the client a request comes from: the peer, or when the peer is a trusted
/// proxy, the last address `X-Forwarded-For` names that is not one of the trusted proxies
/// (each proxy appends the address it saw; the ones before could be made up by the client).
/// What rate limits and records key on.
pub fn client_ip(config: &ServerConfig, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    let proxies = &config.trusted_proxies;
    if proxies.is_empty() || !is_trusted(proxies, peer) {
        return peer.ip().to_canonical();
    }
    let named: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    for entry in named.into_iter().rev() {
        // An entry that is not an address: nothing from there on can be told apart from
        // what the client wrote, so the proxy itself is who we know.
        let Ok(ip) = entry.trim().parse::<IpAddr>() else {
            break;
        };
        let ip = ip.to_canonical();
        if !proxies.iter().any(|n| n.contains(&ip)) {
            return ip;
        }
    }
    peer.ip().to_canonical()
}

/// Whether the browser talks to us over HTTPS, so the session cookie should be `Secure`.
pub fn is_https(config: &ServerConfig, peer: SocketAddr, headers: &HeaderMap) -> bool {
    config.public_url.as_ref().is_some_and(WebOrigin::is_https)
        || forwarded_https(config, peer, headers)
}

/// This server's origin as the browser sees it: `server.public_url`, else the request's `Host`
/// (HTTP/2's `:authority`) with the scheme a trusted proxy reports, or http.
fn own_origin(
    config: &ServerConfig,
    peer: SocketAddr,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<WebOrigin> {
    if let Some(o) = &config.public_url {
        return Some(o.clone());
    }
    let https = forwarded_https(config, peer, headers);
    match headers.get(header::HOST) {
        Some(host) => WebOrigin::from_authority(https, host.to_str().ok()?),
        None => WebOrigin::from_authority(https, uri.authority()?.as_str()),
    }
}

/// Checks a cookie-authenticated request that [`needs_same_origin`]: its `Origin` must be ours,
/// or, without one, `Sec-Fetch-Site` (which only browsers send, and pages cannot forge) must
/// say `same-origin`.
pub fn check(
    config: &ServerConfig,
    peer: SocketAddr,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), OriginRefused> {
    let own = own_origin(config, peer, uri, headers).ok_or(OriginRefused::UnknownOwn)?;
    let Some(origin) = headers.get(header::ORIGIN) else {
        let same = headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"same-origin"));
        return if same {
            Ok(())
        } else {
            Err(OriginRefused::Missing {
                own: own.to_string(),
            })
        };
    };
    let text = origin.to_str().ok();
    if text.and_then(WebOrigin::parse_origin).as_ref() == Some(&own) {
        return Ok(());
    }
    Err(OriginRefused::Foreign {
        origin: text.map_or_else(
            || "not readable text".to_string(),
            |t| t.chars().take(MAX_SHOWN).collect(),
        ),
        own: own.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("a header value"));
        }
        h
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().expect("an address"), 40000)
    }

    fn proxied() -> ServerConfig {
        ServerConfig {
            trusted_proxies: vec!["10.0.0.2/32".parse().expect("a network")],
            ..ServerConfig::default()
        }
    }

    #[test]
    fn safe_methods_need_no_origin_unless_they_upgrade() {
        let none = HeaderMap::new();
        assert!(!needs_same_origin(&Method::GET, &none));
        assert!(!needs_same_origin(&Method::HEAD, &none));
        assert!(!needs_same_origin(&Method::OPTIONS, &none));
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(needs_same_origin(&m, &none), "{m}");
        }
        assert!(needs_same_origin(
            &Method::GET,
            &headers(&[("upgrade", "websocket")])
        ));
    }

    #[test]
    fn the_origin_must_be_the_hosts_own() {
        let c = ServerConfig::default();
        let uri = Uri::from_static("/api/v1/agents");
        let p = peer("127.0.0.1");
        let ok = |h: &[(&'static str, &'static str)]| check(&c, p, &uri, &headers(h)).is_ok();
        assert!(ok(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ]));
        assert!(ok(&[
            ("host", "Example.com"),
            ("origin", "http://example.com:80")
        ]));
        assert!(ok(&[
            ("host", "127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(!ok(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:28555")
        ]));
        assert!(!ok(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://127.0.0.1:8080")
        ]));
        assert!(!ok(&[("host", "127.0.0.1:8080"), ("origin", "null")]));
        assert!(!ok(&[("host", "127.0.0.1:8080")]));
        assert!(!ok(&[
            ("host", "127.0.0.1:8080"),
            ("sec-fetch-site", "same-site")
        ]));
        // A same-origin claim does not excuse a foreign Origin.
        assert!(!ok(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(matches!(
            check(&c, p, &uri, &headers(&[("origin", "http://a.example")])),
            Err(OriginRefused::UnknownOwn)
        ));
        // HTTP/2 carries the host in the URI.
        let h2 = Uri::from_static("http://a.example:8080/api/v1/agents");
        assert!(check(&c, p, &h2, &headers(&[("origin", "http://a.example:8080")])).is_ok());
    }

    #[test]
    fn public_url_is_the_only_own_origin_when_set() {
        let c = ServerConfig {
            public_url: WebOrigin::parse_public_url("https://agents.example.com").ok(),
            ..ServerConfig::default()
        };
        let uri = Uri::from_static("/");
        let p = peer("127.0.0.1");
        let h = |o: &'static str| headers(&[("host", "127.0.0.1:8080"), ("origin", o)]);
        assert!(check(&c, p, &uri, &h("https://agents.example.com")).is_ok());
        assert!(check(&c, p, &uri, &h("http://127.0.0.1:8080")).is_err());
        assert!(check(&c, p, &uri, &h("http://agents.example.com")).is_err());
        assert!(is_https(&c, p, &HeaderMap::new()));
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let c = proxied();
        let xff = |v: &'static str| headers(&[("x-forwarded-for", v)]);
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        // Anyone else's header is ignored.
        assert_eq!(
            client_ip(&c, peer("10.0.0.9"), &xff("1.2.3.4")),
            ip("10.0.0.9")
        );
        // The proxy's own addition counts; what the client wrote before it does not.
        assert_eq!(
            client_ip(&c, peer("10.0.0.2"), &xff("6.6.6.6, 1.2.3.4")),
            ip("1.2.3.4")
        );
        // A chain of trusted proxies is walked back to the first untrusted address.
        assert_eq!(
            client_ip(&c, peer("10.0.0.2"), &xff("1.2.3.4, 10.0.0.2")),
            ip("1.2.3.4")
        );
        // An entry that is no address ends the walk; none at all: the proxy itself.
        assert_eq!(
            client_ip(&c, peer("10.0.0.2"), &xff("1.2.3.4, nonsense")),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_ip(&c, peer("10.0.0.2"), &HeaderMap::new()),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_ip(
                &ServerConfig::default(),
                peer("::ffff:1.2.3.4"),
                &xff("5.5.5.5")
            ),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn only_a_trusted_proxy_is_believed_about_https() {
        let c = proxied();
        let https = headers(&[("x-forwarded-proto", "https")]);
        assert!(is_https(&c, peer("10.0.0.2"), &https));
        assert!(is_https(&c, peer("::ffff:10.0.0.2"), &https));
        assert!(!is_https(&c, peer("10.0.0.3"), &https));
        assert!(!is_https(
            &ServerConfig::default(),
            peer("10.0.0.2"),
            &https
        ));
        assert!(!is_https(&c, peer("10.0.0.2"), &HeaderMap::new()));
        // The proxy's own word is the last one; what its client claimed comes before it.
        let h = headers(&[("x-forwarded-proto", "https, http")]);
        assert!(!is_https(&c, peer("10.0.0.2"), &h));
        let h = headers(&[
            ("x-forwarded-proto", "http"),
            ("x-forwarded-proto", "HTTPS"),
        ]);
        assert!(is_https(&c, peer("10.0.0.2"), &h));
        // Behind it, the own origin takes its scheme.
        let uri = Uri::from_static("/");
        let h = headers(&[
            ("host", "agents.example.com"),
            ("x-forwarded-proto", "https"),
            ("origin", "https://agents.example.com"),
        ]);
        assert!(check(&c, peer("10.0.0.2"), &uri, &h).is_ok());
        assert!(check(&c, peer("10.0.0.9"), &uri, &h).is_err());
    }
}
