//! "The internet" the egress benchmark and tests talk to: small servers on this machine,
//! reached by the proxy under made-up names (`sandbox.egress.resolve`).

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, ToSocketAddrs};

/// A TCP server on `bind` that sends `greeting` on each connection, then echoes what it gets.
/// Returns its port.
pub async fn echo_server(
    bind: impl ToSocketAddrs,
    greeting: &'static [u8],
) -> std::io::Result<u16> {
    let listener = TcpListener::bind(bind).await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if s.write_all(greeting).await.is_err() {
                    return;
                }
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Ok(port)
}

/// An HTTP server on `bind` that answers every request with `hello from HOST\n`, HOST being its
/// `Host` header (so a test sees which name the proxy asked for). Returns its port.
pub async fn hello_server(bind: impl ToSocketAddrs) -> std::io::Result<u16> {
    let listener = TcpListener::bind(bind).await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().fallback(|headers: axum::http::HeaderMap| async move {
        let host = headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        format!("hello from {host}\n")
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(port)
}
