//! How config values are read: addresses, networks and durations parsed inside serde's
//! visitors (so a bad value's message carries its own dotted key and line), and empty strings
//! taken as unset; and durations written back as the file writes them, for comparing two
//! configs key by key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Deserializer};

use super::origin::{parse_ip_net, WebOrigin};
use super::parse_listen_addr;

pub(super) fn de_socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    d.deserialize_str(ParseStr {
        expecting: "an address like 127.0.0.1:8080 or :8080",
        parse: parse_listen_addr,
    })
}

pub(super) fn de_ipv4_net<'de, D: Deserializer<'de>>(d: D) -> Result<Ipv4Net, D::Error> {
    d.deserialize_str(ParseStr {
        expecting: "an IPv4 network like 10.213.0.0/16",
        parse: |s: &str| {
            s.trim()
                .parse::<Ipv4Net>()
                .map_err(|_| format!("\"{s}\" is not an IPv4 network like 10.213.0.0/16"))
        },
    })
}

/// `http://host:port`, or empty for none.
pub(super) fn de_opt_upstream<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::egress::SocketAddrOrName>, D::Error> {
    d.deserialize_str(ParseStr {
        expecting: "an http://host:port proxy address, or \"\" for none",
        parse: parse_upstream,
    })
}

pub(super) fn parse_upstream(s: &str) -> Result<Option<crate::egress::SocketAddrOrName>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let bad = || format!("\"{s}\" is not a proxy address like http://proxy.example:3128");
    let rest = s.strip_prefix("http://").ok_or_else(bad)?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let valid =
        host.parse::<std::net::IpAddr>().is_ok() || crate::egress::normalize_name(host).is_some();
    if !valid || rest.contains('@') {
        return Err(bad());
    }
    Ok(Some(crate::egress::SocketAddrOrName {
        host: host.to_string(),
        port,
    }))
}

/// Parses inside the visitor rather than after it, so serde_yaml_ng attaches the failing
/// value's own dotted path and line to the message (not its parent's).
struct ParseStr<F> {
    expecting: &'static str,
    parse: F,
}

impl<T, F: FnOnce(&str) -> Result<T, String>> serde::de::Visitor<'_> for ParseStr<F> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        (self.parse)(s).map_err(E::custom)
    }
}

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a duration like 30s, 15m or 1h")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
            humantime::parse_duration(s.trim()).map_err(|e| {
                E::custom(format!(
                    "\"{s}\" is not a duration like 30s, 15m or 1h ({e})"
                ))
            })
        }
        // A bare number is the likeliest mistake (`30` for `30s`): say what is missing.
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "{n} has no unit; write a duration like {n}s, {n}m or {n}h"
            )))
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "{n} is not a duration like 30s, 15m or 1h"
            )))
        }
        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "{n} is not a duration like 30s, 15m or 1h"
            )))
        }
    }
    d.deserialize_any(V)
}

/// A duration as the file writes it (`1h 30m`), so that it compares as one key, not as its
/// seconds and nanoseconds.
pub(super) fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

pub(super) fn de_opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

pub(super) fn de_opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(de_opt_string(d)?.map(PathBuf::from))
}

/// `server.public_url`: an http(s) origin; empty or left out means none.
pub(super) fn de_opt_origin<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<WebOrigin>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<WebOrigin>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an origin like https://agents.example.com")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_str(ParseStr {
                expecting: "an origin like https://agents.example.com",
                parse: |s: &str| {
                    if s.trim().is_empty() {
                        Ok(None)
                    } else {
                        WebOrigin::parse_public_url(s).map(Some)
                    }
                },
            })
        }
    }
    d.deserialize_option(V)
}

/// One `server.trusted_proxies` entry, parsed in its own visitor so a bad one is named by
/// its index.
struct ProxyNet(IpNet);

impl<'de> Deserialize<'de> for ProxyNet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ProxyNet, D::Error> {
        d.deserialize_str(ParseStr {
            expecting: "an IP address or network like 10.0.0.0/24",
            parse: |s: &str| parse_ip_net(s).map(ProxyNet),
        })
    }
}

pub(super) fn de_ip_nets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    Ok(Vec::<ProxyNet>::deserialize(d)?
        .into_iter()
        .map(|p| p.0)
        .collect())
}
