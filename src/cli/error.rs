//! What can go wrong talking to the server, and how it is told to a person.

use std::fmt;

use crate::api::types::{ErrorBody, ErrorCode};

/// A failure of an [`ApiClient`](super::ApiClient) call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body (or an unexpected status).
    #[error("{message} ({code})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// Nothing answered at the server URL.
    #[error("cannot reach the agenthold server at {url}: {detail}")]
    Connect { url: String, detail: String },
    /// The server URL given to the client is not usable.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The server sent something that does not follow docs/api.md.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// The transport failed after the connection was made.
    #[error("{0}")]
    Transport(String),
}

impl ClientError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The API's machine word (`not_found`, `conflict`, …) when the server gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    pub(crate) fn not_found(message: String) -> Self {
        ClientError::Api {
            status: 404,
            code: "not_found".into(),
            message,
        }
    }

    pub(crate) fn from_reqwest(url: &str, err: reqwest::Error) -> Self {
        if err.is_connect() {
            ClientError::Connect {
                url: url.to_string(),
                detail: innermost_cause(&err),
            }
        } else if err.is_decode() {
            ClientError::Protocol(innermost_cause(&err))
        } else if err.is_timeout() {
            ClientError::Transport(format!("timed out: {}", innermost_cause(&err)))
        } else {
            // The URL is left out: it is the server's plus a path the user did not type.
            let cause = innermost_cause(&err);
            let top = err.without_url().to_string();
            if top == cause {
                ClientError::Transport(cause)
            } else {
                ClientError::Transport(format!("{top}: {cause}"))
            }
        }
    }

    /// A non-success answer: the API's error body when there is one, else the status itself.
    pub(crate) fn from_status(status: u16, body: &[u8]) -> Self {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(env) => ClientError::Api {
                status,
                code: env.error.code,
                message: env.error.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let message = if text.is_empty() {
                    format!("the server answered HTTP {status}")
                } else {
                    // A proxy's HTML page is noise; keep the first line of it at most.
                    let first = text.lines().next().unwrap_or_default();
                    format!(
                        "the server answered HTTP {status}: {}",
                        truncate(first, 200)
                    )
                };
                ClientError::Api {
                    status,
                    code: ErrorCode::for_status(status)
                        .map_or("http_error", ErrorCode::as_str)
                        .to_string(),
                    message,
                }
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// reqwest's top-level message ("error sending request") hides the cause a person can act on.
fn innermost_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The lines printed to stderr for a failed command: the error, then a hint when one helps.
pub struct Report<'a> {
    pub error: &'a anyhow::Error,
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error.downcast_ref::<ClientError>() {
            Some(ClientError::Connect { url, .. }) => {
                writeln!(f, "error: {:#}", self.error)?;
                write!(
                    f,
                    "hint: is `agenthold serve` running at {url}? \
                     Point the client elsewhere with --server URL or AGENTHOLD_URL."
                )
            }
            Some(ClientError::Api { status: 401, .. }) => {
                writeln!(f, "error: {:#}", self.error)?;
                write!(
                    f,
                    "hint: pass the server's API token with --token TOKEN or AGENTHOLD_TOKEN."
                )
            }
            // `{:#}` keeps any context the command added ("downloading x: …").
            _ => write!(f, "error: {:#}", self.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_bodies_become_code_and_message() {
        let err = ClientError::from_status(
            409,
            br#"{"error":{"code":"conflict","message":"agent is sleeping"}}"#,
        );
        assert_eq!(err.to_string(), "agent is sleeping (conflict)");
        assert_eq!(err.status(), Some(409));
    }

    #[test]
    fn bodies_that_are_not_api_errors_still_name_the_status() {
        let err = ClientError::from_status(502, b"<html>\nBad Gateway</html>");
        assert_eq!(
            err.to_string(),
            "the server answered HTTP 502: <html> (http_error)"
        );
        let err = ClientError::from_status(404, b"");
        assert_eq!(err.code(), Some("not_found"));
    }

    #[test]
    fn reports_carry_hints_for_connection_and_auth() {
        let err = anyhow::Error::new(ClientError::Connect {
            url: "http://127.0.0.1:9".into(),
            detail: "Connection refused (os error 111)".into(),
        });
        let text = Report { error: &err }.to_string();
        assert!(text.starts_with("error: cannot reach"), "{text}");
        assert!(text.contains("http://127.0.0.1:9") && text.contains("AGENTHOLD_URL"));

        let err = anyhow::Error::new(ClientError::from_status(
            401,
            br#"{"error":{"code":"unauthorized","message":"missing or wrong token"}}"#,
        ));
        let text = Report { error: &err }.to_string();
        assert!(text.starts_with("error: missing or wrong token (unauthorized)\n"));
        assert!(text.contains("--token") && text.contains("AGENTHOLD_TOKEN"));

        let err = anyhow::anyhow!("plain");
        assert_eq!(Report { error: &err }.to_string(), "error: plain");

        let err =
            anyhow::Error::new(ClientError::Transport("reset".into())).context("downloading x");
        assert_eq!(
            Report { error: &err }.to_string(),
            "error: downloading x: reset"
        );
    }
}
