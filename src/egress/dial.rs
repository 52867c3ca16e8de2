//! From a destination a sandbox names to an open TCP connection, or the reason there is none:
//! the rules on the name, then the addresses it resolves to (each checked against the rules and
//! against [`super::reachable`]), then the dial, directly or through `upstream_proxy`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rule::{normalize_name, Rule};
use super::rules::{EgressRules, NameVerdict, Verdict};

/// `host:port` of an upstream proxy, as the operator wrote it (a name is resolved per dial).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketAddrOrName {
    pub host: String,
    pub port: u16,
}

/// Written as it is shown, for comparing two configs.
impl serde::Serialize for SocketAddrOrName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for SocketAddrOrName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// How the dialer reaches destinations (`sandbox.egress`'s `resolve`, `upstream_proxy` and
/// `connect_timeout`).
#[derive(Debug, Clone)]
pub struct DialSettings {
    /// Host names answered from here instead of DNS.
    pub resolve: BTreeMap<String, IpAddr>,
    /// A proxy every dial goes through; `None` dials directly.
    pub upstream_proxy: Option<SocketAddrOrName>,
    pub connect_timeout: Duration,
}

/// The longest answer head an upstream proxy may send to our CONNECT.
const MAX_UPSTREAM_HEAD: usize = 16 * 1024;

/// A destination as the sandbox named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// A normalized host name, or an address written as text.
    pub host: String,
    pub port: u16,
}

impl Destination {
    /// `host:port` from a request target or a `Host` header; `default_port` when it has none.
    pub fn parse(authority: &str, default_port: Option<u16>) -> Option<Destination> {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && (!h.contains(':') || h.ends_with(']')) => {
                (h, p.parse::<u16>().ok().filter(|p| *p > 0)?)
            }
            _ => (authority, default_port?),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = match host.parse::<IpAddr>() {
            Ok(addr) => addr.to_canonical().to_string(),
            Err(_) => normalize_name(host)?,
        };
        Some(Destination { host, port })
    }

    fn addr(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr() {
            Some(IpAddr::V6(a)) => write!(f, "[{a}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// Why no connection was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The rules say no: `rule` is the deny rule that matched, or `None` when no allow rule did.
    #[error("{}", match .rule { Some(r) => format!("the deny rule \"{r}\" matches it"), None => "no allow rule matches it".into() })]
    Denied { rule: Option<Rule> },
    /// Allowed by the rules, but only to addresses the proxy never dials.
    #[error("it resolves to {addr}, which is not a public address (loopback, private, link-local and this host's own addresses are never reachable)")]
    NotPublic { addr: IpAddr },
    /// It could not be reached (no such name, refused, timed out).
    #[error("{0}")]
    Unreachable(String),
}

impl Refusal {
    /// Refusals by the rules or the reach check are the sandbox's to fix (`403`); the others
    /// are the destination's (`502`).
    pub fn is_policy(&self) -> bool {
        !matches!(self, Refusal::Unreachable(_))
    }
}

/// A connection the rules allowed: the stream, the address it went to, and the rule.
pub struct Opened {
    pub stream: TcpStream,
    pub addr: IpAddr,
    pub rule: Rule,
}

/// Resolves, decides and dials for every agent alike; the rules are per call.
pub struct Dialer {
    resolve: BTreeMap<String, IpAddr>,
    upstream: Option<SocketAddrOrName>,
    connect_timeout: Duration,
    /// Never dialled, even when public: the agent networks.
    never: Vec<IpNet>,
    /// The server's own ports (API, tunnel, proxy): never dialled on this host, even at an
    /// address the operator's `resolve` map gives.
    own_ports: Vec<u16>,
    /// DNS lookups under way at once, for every agent together.
    lookups: tokio::sync::Semaphore,
}

/// DNS lookups the proxy makes at once (each holds a thread of the blocking pool).
const MAX_LOOKUPS: usize = 32;

/// Whether, behind an upstream proxy, a name the server cannot resolve may be handed to the
/// upstream as a name: only when an explicit name rule allowed it, and no deny rule is about
/// addresses. `*` and address rules need an address the server checked itself: the upstream
/// reaches whatever its own network does, the LAN included.
fn upstream_may_resolve(rule: &Rule, rules: &EgressRules) -> bool {
    rule.is_name_rule() && !rules.denies_addresses()
}

impl Dialer {
    pub fn new(settings: DialSettings, never: Vec<IpNet>, own_ports: Vec<u16>) -> Dialer {
        Dialer {
            resolve: settings.resolve,
            upstream: settings.upstream_proxy,
            connect_timeout: settings.connect_timeout,
            never,
            own_ports,
            lookups: tokio::sync::Semaphore::new(MAX_LOOKUPS),
        }
    }

    /// Decides on `dest` under `rules` and, if it is allowed, connects to it.
    pub async fn open(&self, rules: &EgressRules, dest: &Destination) -> Result<Opened, Refusal> {
        let (by_name, candidates, trusted) = match dest.addr() {
            Some(addr) => (None, vec![addr], false),
            None => {
                let by_name = match rules.decide_name(&dest.host, dest.port) {
                    NameVerdict::Final(Verdict::Denied(rule)) => {
                        return Err(Refusal::Denied { rule })
                    }
                    NameVerdict::Final(Verdict::Allowed(rule))
                    | NameVerdict::AllowedByName(rule) => Some(rule),
                    NameVerdict::ByAddress => None,
                };
                match self.resolve.get(&dest.host) {
                    Some(addr) => (by_name, vec![*addr], true),
                    None => match self.lookup(dest).await {
                        Ok(addrs) => (by_name, addrs, false),
                        // Behind an upstream proxy the server may not resolve outside names at
                        // all; a name an explicit name rule allows is then the upstream's to
                        // find. Never under `*` or with address deny rules: those need an
                        // address the server checked itself (the upstream reaches the LAN).
                        Err(e) => match (&self.upstream, by_name) {
                            (Some(_), Some(rule)) if upstream_may_resolve(&rule, rules) => {
                                let stream = self.through_upstream(dest).await?;
                                let addr = stream
                                    .peer_addr()
                                    .map(|a| a.ip())
                                    .map_err(|e| Refusal::Unreachable(e.to_string()))?;
                                return Ok(Opened { stream, addr, rule });
                            }
                            _ => return Err(e),
                        },
                    },
                }
            }
        };
        let mut refusal = None;
        for addr in candidates {
            let verdict = rules.decide_addr(addr, dest.port, by_name.as_ref());
            let rule = match verdict {
                Verdict::Allowed(rule) => rule,
                Verdict::Denied(rule) => {
                    refusal.get_or_insert(Refusal::Denied { rule });
                    continue;
                }
            };
            // The operator's own addresses are reached only through a rule that names them
            // (a name, a wildcard, an address range no wider than the private range that holds
            // them): `*`, `0.0.0.0/0` and `::/0` mean public destinations alone.
            let public_only = !trusted || !rule.names_on_purpose(addr);
            let own_service = self.own_ports.contains(&dest.port) && super::is_own(addr);
            if own_service || (public_only && !super::reachable(addr, &self.never)) {
                refusal = Some(Refusal::NotPublic { addr });
                continue;
            }
            let stream = if self.upstream.is_some() && !trusted {
                let target = Destination {
                    host: addr.to_string(),
                    port: dest.port,
                };
                self.through_upstream(&target).await
            } else {
                self.connect(SocketAddr::new(addr, dest.port)).await
            };
            match stream {
                Ok(stream) => return Ok(Opened { stream, addr, rule }),
                // The next address may answer; the last failure is the one reported.
                Err(e) => refusal = Some(e),
            }
        }
        Err(refusal
            .unwrap_or_else(|| Refusal::Unreachable(format!("{} has no address", dest.host))))
    }

    async fn lookup(&self, dest: &Destination) -> Result<Vec<IpAddr>, Refusal> {
        let timed_out = || Refusal::Unreachable(format!("looking up {} timed out", dest.host));
        let lookup = async {
            // The system resolver blocks a thread per lookup, for its own timeout even after
            // ours: a bounded number at once keeps a sandbox's slow names from taking the
            // threads the database needs.
            let _permit = self
                .lookups
                .acquire()
                .await
                .map_err(|_| Refusal::Unreachable("the server is stopping".into()))?;
            tokio::net::lookup_host((dest.host.as_str(), dest.port))
                .await
                .map_err(|e| Refusal::Unreachable(format!("cannot resolve {}: {e}", dest.host)))
        };
        let found = tokio::time::timeout(self.connect_timeout, lookup)
            .await
            .map_err(|_| timed_out())??;
        Ok(found.map(|a| a.ip().to_canonical()).collect())
    }

    async fn connect(&self, addr: SocketAddr) -> Result<TcpStream, Refusal> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Refusal::Unreachable(format!("connecting to {addr} timed out")))?
            .map_err(|e| Refusal::Unreachable(format!("cannot connect to {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// A tunnel to `dest` through the upstream proxy, by `CONNECT`.
    async fn through_upstream(&self, dest: &Destination) -> Result<TcpStream, Refusal> {
        let Some(upstream) = &self.upstream else {
            return Err(Refusal::Unreachable("no upstream proxy".into()));
        };
        let addr = tokio::net::lookup_host((upstream.host.as_str(), upstream.port))
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                Refusal::Unreachable(format!("cannot resolve the upstream proxy {upstream}"))
            })?;
        let mut stream = self.connect(addr).await?;
        let handshake = async {
            let line = format!("CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n");
            stream.write_all(line.as_bytes()).await?;
            let mut head = Vec::with_capacity(256);
            let mut byte = [0u8; 1];
            // Byte by byte: what follows the head is the destination's, not ours to read.
            while !head.ends_with(b"\r\n\r\n") {
                if head.len() >= MAX_UPSTREAM_HEAD || stream.read(&mut byte).await? == 0 {
                    return Err(std::io::Error::other(
                        "the upstream proxy closed or sent too much",
                    ));
                }
                head.push(byte[0]);
            }
            Ok(head)
        };
        let head = tokio::time::timeout(self.connect_timeout, handshake)
            .await
            .map_err(|_| {
                Refusal::Unreachable(format!("the upstream proxy {upstream} did not answer"))
            })?
            .map_err(|e| Refusal::Unreachable(format!("upstream proxy {upstream}: {e}")))?;
        let status = String::from_utf8_lossy(&head);
        let status = status.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(Refusal::Unreachable(format!(
                "the upstream proxy {upstream} refused {dest}: {status}"
            )));
        }
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_explicit_names_go_to_the_upstream_unresolved() {
        let rules = |allow: &[&str], deny: &[&str]| EgressRules {
            allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
            deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
        };
        let rule = |r: &str| r.parse::<Rule>().unwrap();
        assert!(upstream_may_resolve(
            &rule("pypi.org"),
            &rules(&["pypi.org"], &[])
        ));
        assert!(upstream_may_resolve(
            &rule("*.pypi.org"),
            &rules(&["*.pypi.org"], &["evil.example"])
        ));
        assert!(!upstream_may_resolve(&rule("*"), &rules(&["*"], &[])));
        assert!(!upstream_may_resolve(
            &rule("pypi.org"),
            &rules(&["pypi.org"], &["10.0.0.0/8"])
        ));
    }

    #[test]
    fn destinations_parse_from_authorities() {
        let d = |s: &str, p| Destination::parse(s, p);
        assert_eq!(d("PyPI.org:443", None).unwrap().to_string(), "pypi.org:443");
        assert_eq!(d("pypi.org", Some(80)).unwrap().to_string(), "pypi.org:80");
        assert_eq!(
            d("[2001:db8::1]:443", None).unwrap().to_string(),
            "[2001:db8::1]:443"
        );
        assert_eq!(
            d("[::ffff:10.0.0.1]:80", None).unwrap().to_string(),
            "10.0.0.1:80"
        );
        assert_eq!(
            d("203.0.113.9", Some(80)).unwrap().to_string(),
            "203.0.113.9:80"
        );
        assert!(d("pypi.org", None).is_none());
        assert!(d("pypi.org:0", None).is_none());
        assert!(d("py pi.org:80", None).is_none());
        assert!(d("a:b:c", None).is_none());
    }
}
