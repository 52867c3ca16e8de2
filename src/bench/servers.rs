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

/// The made-up name of the benchmark's HTTPS server reached through TLS interception (a secret
/// names it); [`crate::bench::server_proc::EGRESS_NAME`] is the same server reached spliced.
pub const SECRET_NAME: &str = "api.bench.test";

/// The files of the benchmark's own little PKI in its folder: a CA every sandbox and the proxy
/// trust (`sandbox.egress.ca_certificates`), and the HTTPS server's certificate and key.
pub const CA_FILE: &str = "internet-ca.pem";
const CERT_FILE: &str = "internet.crt";
const KEY_FILE: &str = "internet.key";

/// Makes the CA and a server certificate for [`SECRET_NAME`] and `names` in `dir`.
pub fn write_internet_pki(dir: &std::path::Path, names: &[&str]) -> anyhow::Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    ca.distinguished_name
        .push(DnType::CommonName, "agenthold bench internet CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut all = vec![SECRET_NAME.to_string()];
    all.extend(names.iter().map(|n| n.to_string()));
    let mut leaf = CertificateParams::new(all)?;
    leaf.distinguished_name
        .push(DnType::CommonName, SECRET_NAME);
    let leaf = leaf.signed_by(&key, &issuer)?;
    std::fs::write(dir.join(CA_FILE), ca_cert.pem())?;
    std::fs::write(dir.join(CERT_FILE), leaf.pem())?;
    std::fs::write(dir.join(KEY_FILE), key.serialize_pem())?;
    Ok(())
}

/// An HTTPS server (HTTP/1.1) on `bind` with the certificate [`write_internet_pki`] made in
/// `dir`: `/small` answers `ok`, anything else `bytes` zero bytes, streamed. Returns its port.
pub async fn https_zeros(
    dir: &std::path::Path,
    bind: impl ToSocketAddrs,
    bytes: u64,
) -> anyhow::Result<u16> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs =
        CertificateDer::pem_file_iter(dir.join(CERT_FILE))?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(dir.join(KEY_FILE))?;
    let mut config =
        tokio_rustls::rustls::ServerConfig::builder_with_provider(crate::egress::tls_provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = TcpListener::bind(bind).await?;
    let port = listener.local_addr()?.port();
    let chunk = bytes::Bytes::from(vec![0u8; 1 << 20]);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, chunk) = (acceptor.clone(), chunk.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let chunk = chunk.clone();
                        async move {
                            let resp = if req.uri().path() == "/small" {
                                axum::response::Response::new(axum::body::Body::from("ok"))
                            } else {
                                zeros(chunk, bytes)
                            };
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(port)
}

/// An answer of `bytes` zero bytes, streamed from `chunk`.
pub fn zeros(chunk: bytes::Bytes, bytes: u64) -> axum::response::Response {
    let size = chunk.len() as u64;
    let (full, rest) = (bytes / size, (bytes % size) as usize);
    let tail = (rest > 0).then(|| chunk.slice(..rest));
    let parts = std::iter::repeat_n(chunk, full as usize).chain(tail);
    let stream = futures::stream::iter(parts.map(Ok::<_, std::io::Error>));
    axum::response::Response::builder()
        .header("content-length", bytes)
        .body(axum::body::Body::from_stream(stream))
        .unwrap_or_default()
}
