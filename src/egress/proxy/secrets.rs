//! A request the proxy sees inside (plain HTTP, or HTTPS it intercepts) on its way out: its
//! placeholders swapped for the values they stand for, or the request refused before anything
//! of it reaches the destination. Each swap and refusal is an `egress` event naming the secret.

use axum::body::Body;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::{event, text, Caller, Proxy};
use crate::egress::dial::Destination;
use crate::egress::granted::Granted;
use crate::egress::substitute::{self, BodyKind, SubstError, Target, MAX_BODY};

impl Proxy {
    /// `req` ready to send on to `dest`, or the answer that refuses it (already told as an
    /// event). `plain`: HTTP, not inside TLS the proxy terminated.
    pub(super) async fn with_secrets(
        &self,
        caller: &Caller,
        dest: &Destination,
        granted: &Granted,
        plain: bool,
        req: Request<Incoming>,
    ) -> Result<Request<Body>, Response<Body>> {
        if granted.is_empty() {
            return Ok(req.map(Body::new));
        }
        let to = Target {
            host: &dest.host,
            port: dest.port,
            plain,
        };
        let (mut parts, body) = req.into_parts();
        let mut used = substitute::headers(granted, to, &mut parts.headers)
            .map_err(|e| self.refuse_secret(caller, dest, &e))?;
        let kind = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|ct| BodyKind::of(Some(ct)));
        let body = match (kind, substitute::body_grant(granted, to)) {
            (Some(kind), Some(grant)) => {
                // Bounded: the body is held whole to be rewritten.
                let bytes = match Limited::new(body, MAX_BODY).collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                        let e = SubstError::BodyTooLarge {
                            name: grant.name.clone(),
                        };
                        return Err(self.refuse_secret(caller, dest, &e));
                    }
                    Err(e) => {
                        return Err(text(
                            StatusCode::BAD_REQUEST,
                            format!("agenthold: reading the request body: {e}\n"),
                        ))
                    }
                };
                match substitute::body(granted, to, kind, &bytes) {
                    Ok(Some(substitute::Rewritten {
                        body: rewritten,
                        used: names,
                    })) => {
                        parts.headers.remove(header::TRANSFER_ENCODING);
                        parts
                            .headers
                            .insert(header::CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
                        for name in names {
                            if !used.contains(&name) {
                                used.push(name);
                            }
                        }
                        Body::from(Bytes::from(rewritten))
                    }
                    Ok(None) => Body::from(bytes),
                    Err(e) => return Err(self.refuse_secret(caller, dest, &e)),
                }
            }
            _ => Body::new(body),
        };
        for name in used {
            let mut e = event(caller, dest, true, None, None, None);
            e.secret = Some(name);
            self.sandboxes.publish(e);
        }
        Ok(Request::from_parts(parts, body))
    }

    fn refuse_secret(
        &self,
        caller: &Caller,
        dest: &Destination,
        why: &SubstError,
    ) -> Response<Body> {
        let reason = why.to_string();
        let mut e = event(caller, dest, false, None, Some(reason.clone()), None);
        e.secret = Some(why.secret().to_string());
        if self.refusals.worth_telling(&caller.id, dest) {
            self.sandboxes.publish(e);
        } else {
            self.sandboxes.record(&e);
        }
        let status = match why {
            SubstError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::FORBIDDEN,
        };
        text(status, format!("agenthold: {reason}\n"))
    }
}
