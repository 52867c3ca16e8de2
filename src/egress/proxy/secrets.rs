//! A request the proxy sees inside (plain HTTP, or HTTPS it intercepts) on its way out: its
//! placeholders swapped for the values they stand for, or the request refused before anything
//! of it reaches the destination. Each refusal is an `egress` event naming the secret, and so is
//! a use once the request was sent on ([`Proxy::tell_used`], bounded by [`super::uses`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;

use super::bodies::BodyPlace;
use super::{event, text, Caller, Proxy};
use crate::egress::dial::Destination;
use crate::egress::granted::Granted;
use crate::egress::substitute::{self, BodyKind, SubstError, Target, MAX_BODY};

/// A request ready to go on, and the secrets swapped into it (to be told once it was sent).
pub(super) struct Swapped {
    pub req: Request<Body>,
    pub used: Vec<String>,
}

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
    ) -> Result<Swapped, Response<Body>> {
        let to = Target {
            host: &dest.host,
            port: dest.port,
            plain,
        };
        let (mut parts, body) = req.into_parts();
        // Also for an agent without grants: another agent's placeholder is refused wherever
        // the proxy reads the request.
        let mut used = substitute::headers(granted, to, &mut parts.headers)
            .map_err(|e| self.refuse_secret(caller, dest, &e))?;
        if granted.is_empty() {
            return Ok(Swapped {
                req: Request::from_parts(parts, Body::new(body)),
                used,
            });
        }
        let kind = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|ct| BodyKind::of(Some(ct)));
        let body = match (kind, substitute::body_grant(granted, to)) {
            (Some(kind), Some(grant)) => {
                let declared = parts
                    .headers
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<usize>().ok());
                if declared.is_some_and(|n| n > MAX_BODY) {
                    let e = SubstError::BodyTooLarge {
                        name: grant.name.clone(),
                    };
                    return Err(self.refuse_secret(caller, dest, &e));
                }
                // Held whole to be rewritten: a place in the budget of bodies first, as large
                // as the body says it is (the most a body may be when it does not), and the
                // body within the timeout, so that a slow sender gives its place back.
                let place = self
                    .bodies
                    .take(&caller.id, declared.unwrap_or(MAX_BODY))
                    .map_err(|full| {
                        text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("agenthold: {full}\n"),
                        )
                    })?;
                let timeout = self.settings.body_timeout;
                let collected =
                    tokio::time::timeout(timeout, Limited::new(body, MAX_BODY).collect()).await;
                let bytes = match collected {
                    Ok(Ok(collected)) => collected.to_bytes(),
                    Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                        let e = SubstError::BodyTooLarge {
                            name: grant.name.clone(),
                        };
                        return Err(self.refuse_secret(caller, dest, &e));
                    }
                    Ok(Err(e)) => {
                        return Err(text(
                            StatusCode::BAD_REQUEST,
                            format!("agenthold: reading the request body: {e}\n"),
                        ))
                    }
                    Err(_) => {
                        return Err(text(
                            StatusCode::REQUEST_TIMEOUT,
                            format!(
                                "agenthold: a request body that may hold a secret must arrive \
                                 within {timeout:?} (sandbox.egress.secret_body_timeout) to be \
                                 rewritten\n"
                            ),
                        ))
                    }
                };
                let bytes = match substitute::body(granted, to, kind, &bytes) {
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
                        Bytes::from(rewritten)
                    }
                    Ok(None) => bytes,
                    Err(e) => return Err(self.refuse_secret(caller, dest, &e)),
                };
                Body::new(Held {
                    body: Full::new(bytes),
                    _place: place,
                })
            }
            _ => Body::new(body),
        };
        Ok(Swapped {
            req: Request::from_parts(parts, body),
            used,
        })
    }

    /// Tells that `used` went to `dest`: called once the request carrying them was sent on (not
    /// before a dial that may be refused), and bounded per agent and secret.
    pub(super) fn tell_used(&self, caller: &Caller, dest: &Destination, used: Vec<String>) {
        for name in used {
            if self.uses.worth_telling(&caller.id, &name, dest) {
                let mut e = event(caller, dest, true, None, None, None);
                e.secret = Some(name);
                self.sandboxes.publish(e);
            }
        }
    }

    fn refuse_secret(
        &self,
        caller: &Caller,
        dest: &Destination,
        why: &SubstError,
    ) -> Response<Body> {
        let reason = why.to_string();
        let mut e = event(caller, dest, false, None, Some(reason.clone()), None);
        e.secret = why.secret().map(str::to_string);
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

/// A body held whole, with its place in the budget until it has been sent (or dropped).
struct Held {
    body: Full<Bytes>,
    _place: BodyPlace,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
