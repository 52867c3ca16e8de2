//! Swapping placeholders for secret values in a request (issue #34), and refusing a request that
//! carries a placeholder to where its secret may not go. Pure: the proxy calls it on each request
//! it sees inside (plain HTTP, and HTTPS it intercepts) before anything is sent on.

use base64::Engine;
use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};

use super::granted::{Grant, Granted, PLACEHOLDER_LEN, PLACEHOLDER_PREFIX};

/// The largest body rewritten for an `in_body` secret: a form or JSON request, not an upload.
pub const MAX_BODY: usize = 1024 * 1024;

/// Why a request may not be sent on. Never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstError {
    #[error("secret {name} may only be sent to {hosts}, not to {dest}")]
    NotHere {
        name: String,
        hosts: String,
        dest: String,
    },
    #[error(
        "secret {name} may only be sent over HTTPS: to allow plain HTTP to {dest}, name the port \
         in the secret's host rule (like \"{host}:{port}\")"
    )]
    OnlyHttps {
        name: String,
        dest: String,
        host: String,
        port: u16,
    },
    #[error(
        "secret {name} goes only in the {allowed} header; a request with its placeholder in \
         {header} is refused (servers echo such headers back)"
    )]
    WrongHeader {
        name: String,
        header: String,
        allowed: String,
    },
    #[error("the value of secret {name} cannot go in the {header} header (it is not a valid header value)")]
    BadValue { name: String, header: String },
    #[error(
        "a request body that may hold secret {name} is rewritten only up to {MAX_BODY} bytes; \
         this one is larger"
    )]
    BodyTooLarge { name: String },
    #[error(
        "{found}… stands for no secret of this agent: placeholders differ per agent and per \
         boot, so one copied from another agent, kept from an earlier boot, or of a secret no \
         longer granted is refused"
    )]
    Foreign { found: String },
}

impl SubstError {
    /// The secret the error is about: none for a placeholder that is none of the agent's.
    pub fn secret(&self) -> Option<&str> {
        match self {
            SubstError::NotHere { name, .. }
            | SubstError::OnlyHttps { name, .. }
            | SubstError::WrongHeader { name, .. }
            | SubstError::BadValue { name, .. }
            | SubstError::BodyTooLarge { name } => Some(name),
            SubstError::Foreign { .. } => None,
        }
    }
}

/// Where a request goes, as the grants are checked against it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// A normalized host name (or an address as text).
    pub host: &'a str,
    pub port: u16,
    /// Plain HTTP (not inside TLS the proxy terminated).
    pub plain: bool,
}

impl Target<'_> {
    /// Whether `grant`'s value may be sent here.
    fn check(&self, grant: &Grant) -> Result<(), SubstError> {
        let dest = format!("{}:{}", self.host, self.port);
        if !grant.allows(self.host, self.port) {
            return Err(SubstError::NotHere {
                name: grant.name.clone(),
                hosts: grant
                    .hosts
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                dest,
            });
        }
        // Over plain HTTP a value is visible to every network on the way: only where the
        // operator said so, by naming the port in the rule.
        let named = grant
            .hosts
            .iter()
            .any(|r| r.matches_name(self.host, self.port) && r.names_port());
        // Port 443 is HTTPS's: naming it asks for HTTPS, never for plain HTTP there.
        if self.plain && (!named || self.port == 443) {
            return Err(SubstError::OnlyHttps {
                name: grant.name.clone(),
                dest,
                host: self.host.to_string(),
                port: self.port,
            });
        }
        Ok(())
    }
}

/// Replaces every placeholder in `headers` (names of the secrets used, in order, once each), or
/// refuses when one may not go to `to`, or when one is none of `granted`'s (for an agent without
/// grants too); `headers` is unchanged on an error.
pub fn headers(
    granted: &Granted,
    to: Target<'_>,
    headers: &mut HeaderMap,
) -> Result<Vec<String>, SubstError> {
    for (name, value) in headers.iter() {
        let basic = (name == AUTHORIZATION)
            .then(|| basic_credentials(value.as_bytes()))
            .flatten();
        let found = foreign(granted, value.as_bytes())
            .or_else(|| basic.as_deref().and_then(|c| foreign(granted, c)));
        if let Some(found) = found {
            let shown = PLACEHOLDER_PREFIX.len() + 8;
            return Err(SubstError::Foreign {
                found: String::from_utf8_lossy(&found[..shown]).into_owned(),
            });
        }
    }
    if granted.is_empty() {
        return Ok(Vec::new());
    }
    let mut used = Vec::new();
    let mut changes: Vec<(HeaderName, usize, HeaderValue)> = Vec::new();
    for name in headers.keys() {
        for (i, value) in headers.get_all(name).iter().enumerate() {
            if let Some(new) = header_value(granted, to, name, value.as_bytes(), &mut used)? {
                let mut new = HeaderValue::from_bytes(&new).map_err(|_| SubstError::BadValue {
                    name: used.last().cloned().unwrap_or_default(),
                    header: name.to_string(),
                })?;
                // HTTP/2 then never puts it in a compression table.
                new.set_sensitive(true);
                changes.push((name.clone(), i, new));
            }
        }
    }
    for (name, index, value) in changes {
        let mut all: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
        all[index] = value;
        headers.remove(&name);
        for v in all {
            headers.append(name.clone(), v);
        }
    }
    Ok(used)
}

/// One header value with its placeholders replaced, `None` when it holds none.
fn header_value(
    granted: &Granted,
    to: Target<'_>,
    name: &HeaderName,
    value: &[u8],
    used: &mut Vec<String>,
) -> Result<Option<Vec<u8>>, SubstError> {
    let basic = (name == AUTHORIZATION)
        .then(|| basic_credentials(value))
        .flatten();
    let present: Vec<&Grant> = granted
        .iter()
        .filter(|g| {
            contains(value, g.placeholder.as_bytes())
                || basic
                    .as_ref()
                    .is_some_and(|c| contains(c, g.placeholder.as_bytes()))
        })
        .collect();
    if present.is_empty() {
        return Ok(None);
    }
    for g in &present {
        to.check(g)?;
        // Only in the secret's own header: a value in Origin, Referer or a header of the
        // sandbox's choosing could come back in the answer, and the sandbox would read it.
        if !name.as_str().eq_ignore_ascii_case(&g.header) {
            return Err(SubstError::WrongHeader {
                name: g.name.clone(),
                header: name.to_string(),
                allowed: g.header.clone(),
            });
        }
    }
    for g in &present {
        if !used.contains(&g.name) {
            used.push(g.name.clone());
        }
    }
    // The secret's own header holding just the placeholder: the value in the secret's format.
    if let [g] = present[..] {
        if name.as_str().eq_ignore_ascii_case(&g.header) && value == g.placeholder.as_bytes() {
            return Ok(Some(g.format.replace("{value}", g.value()).into_bytes()));
        }
    }
    if let Some(creds) = basic.filter(|c| {
        present
            .iter()
            .any(|g| contains(c, g.placeholder.as_bytes()))
    }) {
        let creds = present.iter().fold(creds, |c, g| {
            replace(&c, g.placeholder.as_bytes(), g.value().as_bytes())
        });
        let encoded = base64::engine::general_purpose::STANDARD.encode(creds);
        return Ok(Some(format!("Basic {encoded}").into_bytes()));
    }
    Ok(Some(present.iter().fold(value.to_vec(), |v, g| {
        replace(&v, g.placeholder.as_bytes(), g.value().as_bytes())
    })))
}

/// The decoded `user:password` of `Basic …` credentials.
fn basic_credentials(value: &[u8]) -> Option<Vec<u8>> {
    let (scheme, rest) = std::str::from_utf8(value).ok()?.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
}

/// How a body is written, as far as placeholders in it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Form,
    Json,
}

impl BodyKind {
    /// The kind a `Content-Type` names, `None` for bodies never rewritten.
    pub fn of(content_type: Option<&str>) -> Option<BodyKind> {
        let essence = content_type?.split(';').next()?.trim().to_ascii_lowercase();
        match essence.as_str() {
            "application/x-www-form-urlencoded" => Some(BodyKind::Form),
            "application/json" => Some(BodyKind::Json),
            e if e.starts_with("application/") && e.ends_with("+json") => Some(BodyKind::Json),
            _ => None,
        }
    }
}

/// The `in_body` grant whose value may go to `to`, if one may: its body must then be read
/// (bounded by [`MAX_BODY`]) and passed through [`body`].
pub fn body_grant<'a>(granted: &'a Granted, to: Target<'_>) -> Option<&'a Grant> {
    granted.iter().find(|g| g.in_body && to.check(g).is_ok())
}

/// A body with placeholders replaced, and the secrets it now holds (no `Debug`: the body holds
/// values).
pub struct Rewritten {
    pub body: Vec<u8>,
    pub used: Vec<String>,
}

/// `body` with the placeholders of `in_body` grants replaced (written as `kind` writes text), or
/// `None` when it holds none. A placeholder of a secret that may not go to `to` refuses it.
pub fn body(
    granted: &Granted,
    to: Target<'_>,
    kind: BodyKind,
    body: &[u8],
) -> Result<Option<Rewritten>, SubstError> {
    let mut out = body.to_vec();
    let mut used = Vec::new();
    for g in granted.iter() {
        let written = match kind {
            BodyKind::Form => vec![
                g.placeholder.clone(),
                form_urlencoded::byte_serialize(g.placeholder.as_bytes()).collect(),
            ],
            BodyKind::Json => vec![g.placeholder.clone()],
        };
        if !written.iter().any(|w| contains(&out, w.as_bytes())) {
            continue;
        }
        to.check(g)?;
        if !g.in_body {
            continue;
        }
        let value = match kind {
            BodyKind::Form => form_urlencoded::byte_serialize(g.value().as_bytes()).collect(),
            BodyKind::Json => {
                let quoted = serde_json::Value::String(g.value().to_string()).to_string();
                quoted[1..quoted.len() - 1].to_string()
            }
        };
        for w in &written {
            out = replace(&out, w.as_bytes(), value.as_bytes());
        }
        used.push(g.name.clone());
    }
    Ok((!used.is_empty()).then_some(Rewritten { body: out, used }))
}

/// The first placeholder in `hay` that is none of `granted`'s: placeholders have one shape (the
/// prefix and 64 hexadecimal digits), so another agent's is told from text that merely names the
/// prefix.
fn foreign<'a>(granted: &Granted, hay: &'a [u8]) -> Option<&'a [u8]> {
    let prefix = PLACEHOLDER_PREFIX.as_bytes();
    let mut from = 0;
    while let Some(i) = hay[from..].windows(prefix.len()).position(|w| w == prefix) {
        let start = from + i;
        let token = &hay[start..(start + PLACEHOLDER_LEN).min(hay.len())];
        let shaped = token.len() == PLACEHOLDER_LEN
            && token[prefix.len()..].iter().all(u8::is_ascii_hexdigit);
        if shaped && !granted.iter().any(|g| g.placeholder.as_bytes() == token) {
            return Some(token);
        }
        from = start + prefix.len();
    }
    None
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if !needle.is_empty() && hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "agenthold-secret:p1";
    const Q: &str = "agenthold-secret:q2";

    fn granted() -> Granted {
        let grant = |name: &str, p: &str, hosts: &[&str], in_body, value: &str| {
            Grant::new(
                name.into(),
                p.into(),
                hosts.iter().map(|h| h.parse().unwrap()).collect(),
                "Authorization".into(),
                "Bearer {value}".into(),
                in_body,
                value.into(),
            )
        };
        Granted::new(vec![
            grant(
                "GITHUB_TOKEN",
                P,
                &["api.test", "git.test:8080"],
                false,
                "ghp_real",
            ),
            grant("FORM_KEY", Q, &["api.test"], true, "v&l=ue\"x"),
        ])
    }

    fn tls(host: &str) -> Target<'_> {
        Target {
            host,
            port: 443,
            plain: false,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn another_agents_placeholder_is_refused_with_or_without_grants() {
        let mine = format!("{PLACEHOLDER_PREFIX}{}", "a1".repeat(32));
        let theirs = format!("{PLACEHOLDER_PREFIX}{}", "b2".repeat(32));
        let g = Granted::new(vec![Grant::new(
            "API".into(),
            mine.clone(),
            vec!["api.test".parse().unwrap()],
            "Authorization".into(),
            "Bearer {value}".into(),
            false,
            "real".into(),
        )]);
        let basic = |creds: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(creds)
            )
        };
        for granted in [g.clone(), Granted::default()] {
            for (header, value) in [
                ("authorization", format!("Bearer {theirs}")),
                ("authorization", basic(&format!("x:{theirs}"))),
                ("x-anything", format!("k={theirs};")),
            ] {
                let mut h = map(&[(header, &value)]);
                let e = headers(&granted, tls("api.test"), &mut h).unwrap_err();
                assert!(matches!(e, SubstError::Foreign { .. }), "{value}: {e:?}");
                assert_eq!(e.secret(), None);
                assert!(
                    !e.to_string().contains(&theirs),
                    "the whole placeholder shown"
                );
                assert_eq!(h[header], value.as_str(), "unchanged on a refusal");
            }
        }
        // Its own placeholder is swapped; text that only names the prefix is no placeholder.
        let mut h = map(&[("authorization", &mine)]);
        assert_eq!(headers(&g, tls("api.test"), &mut h).unwrap(), vec!["API"]);
        assert_eq!(h["authorization"], "Bearer real");
        for text in [
            format!("{PLACEHOLDER_PREFIX}short"),
            format!("{PLACEHOLDER_PREFIX}{}", "z".repeat(64)),
            PLACEHOLDER_PREFIX.to_string(),
        ] {
            let mut h = map(&[("x-note", &text)]);
            assert_eq!(
                headers(&Granted::default(), tls("api.test"), &mut h).unwrap(),
                Vec::<String>::new()
            );
        }
    }

    #[test]
    fn the_secrets_header_gets_its_format_and_no_other_header_gets_a_value() {
        let g = granted();
        let mut h = map(&[("authorization", P), ("accept", "*/*")]);
        let used = headers(&g, tls("api.test"), &mut h).unwrap();
        assert_eq!(used, vec!["GITHUB_TOKEN".to_string()]);
        assert_eq!(h["authorization"], "Bearer ghp_real");
        assert!(h["authorization"].is_sensitive());
        assert_eq!(h["accept"], "*/*");
        // A header a server may echo back (Origin, Referer, one of the sandbox's choosing) would
        // hand the value to the sandbox: refused, whatever its case.
        for header in ["origin", "referer", "x-api-key", "host"] {
            let mut h = map(&[("Authorization", P), (header, &format!("key={P}"))]);
            let e = headers(&g, tls("api.test"), &mut h).unwrap_err();
            assert!(
                matches!(e, SubstError::WrongHeader { .. }),
                "{header}: {e:?}"
            );
            assert_eq!(
                h[header],
                format!("key={P}").as_str(),
                "unchanged on a refusal"
            );
            assert!(!e.to_string().contains("ghp_real"));
        }
        let mut bearer = map(&[("authorization", &format!("Bearer {P}"))]);
        headers(&g, tls("api.test"), &mut bearer).unwrap();
        assert_eq!(bearer["authorization"], "Bearer ghp_real");
    }

    #[test]
    fn basic_credentials_are_decoded_replaced_and_encoded_again() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut h = map(&[(
            "authorization",
            &format!("Basic {}", b64(&format!("x:{P}"))),
        )]);
        let used = headers(&granted(), tls("api.test"), &mut h).unwrap();
        assert_eq!(used, vec!["GITHUB_TOKEN".to_string()]);
        assert_eq!(
            h["authorization"],
            format!("Basic {}", b64("x:ghp_real")).as_str()
        );
        let mut elsewhere = map(&[(
            "authorization",
            &format!("basic {}", b64(&format!("x:{P}"))),
        )]);
        let e = headers(&granted(), tls("other.test"), &mut elsewhere).unwrap_err();
        assert_eq!(e.secret(), Some("GITHUB_TOKEN"));
    }

    #[test]
    fn a_placeholder_to_another_host_is_refused_naming_the_hosts_and_no_value() {
        let mut h = map(&[("x-other", "1"), ("authorization", P)]);
        let before = h.clone();
        let e = headers(&granted(), tls("other.test"), &mut h).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("GITHUB_TOKEN") && text.contains("api.test, git.test:8080"),
            "{text}"
        );
        assert!(!text.contains("ghp_real"));
        assert_eq!(h, before, "unchanged");
        assert!(
            headers(&granted(), tls("api.test"), &mut map(&[("a", "b")]))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn plain_http_carries_a_value_only_where_the_rule_names_the_port() {
        let plain = |host, port| Target {
            host,
            port,
            plain: true,
        };
        let e = headers(
            &granted(),
            plain("other.test", 80),
            &mut map(&[("authorization", P)]),
        );
        assert!(matches!(e, Err(SubstError::NotHere { .. })), "{e:?}");
        // "api.test" allows every port, but names none: not over plain HTTP.
        let mut h = map(&[("authorization", P)]);
        let e = headers(&granted(), plain("api.test", 80), &mut h).unwrap_err();
        assert!(e.to_string().contains("only be sent over HTTPS"), "{e}");
        assert!(e.to_string().contains("\"api.test:80\""), "{e}");
        headers(&granted(), plain("git.test", 8080), &mut h).unwrap();
        assert_eq!(h["authorization"], "Bearer ghp_real");
        // Port 443 named is HTTPS asked for: never plain HTTP there.
        let g = Granted::new(vec![Grant::new(
            "GH".into(),
            P.into(),
            vec!["api.github.test:443".parse().unwrap()],
            "Authorization".into(),
            "Bearer {value}".into(),
            false,
            "ghp_real".into(),
        )]);
        let e = headers(
            &g,
            plain("api.github.test", 443),
            &mut map(&[("authorization", P)]),
        );
        assert!(matches!(e, Err(SubstError::OnlyHttps { .. })), "{e:?}");
    }

    #[test]
    fn a_value_that_is_no_header_value_is_refused_without_showing_it() {
        let g = Granted::new(vec![Grant::new(
            "BAD".into(),
            P.into(),
            vec!["api.test".parse().unwrap()],
            "Authorization".into(),
            "{value}".into(),
            false,
            "line\nbreak".into(),
        )]);
        let e = headers(&g, tls("api.test"), &mut map(&[("authorization", P)])).unwrap_err();
        assert!(matches!(e, SubstError::BadValue { .. }));
        assert!(!e.to_string().contains("line"));
    }

    #[test]
    fn bodies_of_in_body_secrets_are_rewritten_as_their_kind_writes_text() {
        let g = granted();
        let form = format!(
            "a=1&key={}&b=2",
            form_urlencoded::byte_serialize(Q.as_bytes()).collect::<String>()
        );
        let Rewritten { body: out, used } =
            body(&g, tls("api.test"), BodyKind::Form, form.as_bytes())
                .unwrap()
                .unwrap();
        assert_eq!(used, vec!["FORM_KEY".to_string()]);
        let pairs: Vec<(String, String)> = form_urlencoded::parse(&out).into_owned().collect();
        assert_eq!(pairs[1], ("key".into(), "v&l=ue\"x".into()));
        let json = format!(r#"{{"key":"{Q}"}}"#);
        let out = body(&g, tls("api.test"), BodyKind::Json, json.as_bytes())
            .unwrap()
            .unwrap()
            .body;
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["key"], "v&l=ue\"x");
        assert!(body(&g, tls("api.test"), BodyKind::Json, b"{}")
            .unwrap()
            .is_none());
        // Not an in_body secret: left alone; another host: refused.
        let with_p = format!(r#"{{"t":"{P}"}}"#);
        assert!(body(&g, tls("api.test"), BodyKind::Json, with_p.as_bytes())
            .unwrap()
            .is_none());
        assert!(body(&g, tls("other.test"), BodyKind::Json, json.as_bytes()).is_err());
        assert_eq!(body_grant(&g, tls("api.test")).unwrap().name, "FORM_KEY");
        assert!(body_grant(&g, tls("git.test")).is_none());
        assert_eq!(
            BodyKind::of(Some("application/json; charset=utf-8")),
            Some(BodyKind::Json)
        );
        assert_eq!(BodyKind::of(Some("text/plain")), None);
    }
}
