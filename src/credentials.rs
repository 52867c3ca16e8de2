//! How a request carries who it is, read the same way by every listener (the API's and the
//! previews'): the `Authorization: Bearer` token, cookies by name, and the web UI's session
//! cookie's name; and what a listener must be able to ask of the server's authentication.

use std::net::IpAddr;

use http::{header, HeaderMap};

/// The web UI's session cookie (set host-only on the API's origin).
pub const SESSION_COOKIE: &str = "agenthold_session";

/// The token of an `Authorization: Bearer <token>` header. The scheme is matched without
/// regard to case, as RFC 9110 (11.1) says; clients send `bearer` too.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// The value of cookie `name` in a request's `Cookie` headers (the first, when there are
/// several: see [`cookies`]).
pub fn cookie<'a>(headers: &'a HeaderMap, name: &'a str) -> Option<&'a str> {
    cookies(headers, name).next()
}

/// Every value of cookie `name`. A browser sends one per scope that matches (a host's own and
/// one a sibling host set for the parent domain), so a check takes any value that verifies
/// rather than the first, which a neighbour could have planted.
pub fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// What a listener other than the API asks of the server's authentication.
pub trait Gatekeeper: Send + Sync {
    /// The admin token or a live API token: a credential of this server, never to be passed
    /// on to a previewed app.
    fn is_our_token(&self, token: &str) -> bool;
    /// Whether `token` may use agent `agent_id` (the `agents:use` scope, and the agent within
    /// its list): what lets a bearer into a preview that is not public.
    fn may_use_agent(&self, token: &str, agent_id: &str) -> bool;
    /// A peer on the sandboxes' networks: never served.
    fn is_sandbox_peer(&self, ip: IpAddr) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let token = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().expect("a header value"));
            bearer_token(&h).map(str::to_string)
        };
        for v in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR   t0k "] {
            assert_eq!(token(v).as_deref(), Some("t0k"), "{v:?}");
        }
        for v in ["Basic dDBr", "Bearer", "Bearer ", "Bearert0k", "t0k"] {
            assert_eq!(token(v), None, "{v:?}");
        }
    }
}
