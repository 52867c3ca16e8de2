//! The pages the preview listener answers with itself, when it cannot hand a request to the
//! app: no such preview, a deleted one, a sandbox that is starting, a port nobody listens on.
//! Plain HTML for browsers; whatever they show is escaped.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use agenthold_proto::ListeningPort;

/// Escapes text for HTML (a `Host` header is the client's to choose).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page of agenthold's own, with `head` extra in its head (a refresh).
fn page(status: StatusCode, title: &str, body: &str, head: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title>{head}\
         <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;\
         padding:0 1em;color:#222}}code{{background:#eee;padding:0 .2em}}</style></head>\
         <body><h1>{title}</h1>{body}<p><small>agenthold preview</small></p></body></html>"
    );
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub fn no_preview(host: &str) -> Response {
    page(
        StatusCode::NOT_FOUND,
        "No preview here",
        &format!(
            "<p>No preview answers at <code>{}</code>. A preview's address is \
             <code>PORT-AGENT.DOMAIN</code>; make one from the agent's Ports panel, with \
             <code>agenthold preview AGENT PORT</code>, or the API.</p>",
            escape(host)
        ),
        "",
    )
}

pub fn gone() -> Response {
    page(
        StatusCode::GONE,
        "This preview has ended",
        "<p>It was deleted, or it expired. Ask for a new preview of the port.</p>",
        "",
    )
}

pub fn forbidden(why: &str) -> Response {
    page(
        StatusCode::FORBIDDEN,
        "Not allowed",
        &format!("<p>{}</p>", escape(why)),
        "",
    )
}

pub fn needs_token() -> Response {
    let mut r = page(
        StatusCode::UNAUTHORIZED,
        "This preview needs its token",
        "<p>Open the link with <code>?token=…</code> as it was shared, or send \
         <code>Authorization: Bearer …</code>.</p>",
        "",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"agenthold preview\""),
    );
    r
}

pub fn needs_sign_in() -> Response {
    let mut r = page(
        StatusCode::UNAUTHORIZED,
        "Sign in to open this preview",
        "<p>This preview is private: open it in a browser signed in to agenthold, or send the \
         admin token as <code>Authorization: Bearer …</code>.</p>",
        "",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"agenthold preview\""),
    );
    r
}

/// Shown while the sandbox starts: it reloads itself every second.
pub fn starting(agent: &str) -> Response {
    let mut r = page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Starting the sandbox…",
        &format!(
            "<p>Agent <code>{}</code> was asleep; it is starting. This page reloads by itself.</p>",
            escape(agent)
        ),
        "<meta http-equiv=\"refresh\" content=\"1\">",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// The sandbox could not be had: in `error`, or it did not wake in time.
pub fn unavailable(why: &str) -> Response {
    let mut r = page(
        StatusCode::SERVICE_UNAVAILABLE,
        "The sandbox is not available",
        &format!("<p>{}</p>", escape(why)),
        "",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// The agent's previews hold all the connections they may: try again in a moment.
pub fn busy() -> Response {
    let mut r = page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Too many connections",
        "<p>This agent's previews hold as many connections as its sandbox allows them \
         (<code>sandbox.max_streams_per_agent</code>, less what is kept for the API). Try again \
         in a moment.</p>",
        "",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Nothing listens on the port: say which ports do.
pub fn not_listening(port: u16, listening: &[ListeningPort]) -> Response {
    let list = if listening.is_empty() {
        "<p>Nothing listens on any TCP port in the sandbox.</p>".to_string()
    } else {
        let items: String = listening
            .iter()
            .map(|p| {
                format!(
                    "<li><code>{}</code> on <code>{}</code>{}</li>",
                    p.port,
                    escape(&p.address),
                    p.process
                        .as_deref()
                        .map(|c| format!(" ({})", escape(c)))
                        .unwrap_or_default()
                )
            })
            .collect();
        format!("<p>These ports listen in the sandbox:</p><ul>{items}</ul>")
    };
    page(
        StatusCode::BAD_GATEWAY,
        &format!("Nothing listens on port {port}"),
        &format!(
            "<p>Nothing accepts connections on port {port} at <code>127.0.0.1</code> or \
             <code>::1</code> in the sandbox. Start the server there (listening on \
             <code>127.0.0.1</code> or <code>0.0.0.0</code>), then reload.</p>{list}"
        ),
        "",
    )
}

/// The app's connection failed before it answered.
pub fn bad_gateway(why: &str) -> Response {
    page(
        StatusCode::BAD_GATEWAY,
        "The app did not answer",
        &format!("<p>{}</p>", escape(why)),
        "",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_chose_is_escaped() {
        assert_eq!(escape("<script>\"x'&"), "&lt;script&gt;&quot;x&#39;&amp;");
    }
}
