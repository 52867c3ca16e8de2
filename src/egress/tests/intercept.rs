//! Interception and substitution on real sockets: "the internet" is an HTTPS server on loopback
//! with a CA of its own (under made-up names), and the sandbox is a client that trusts the
//! installation CA and goes through the proxy.

use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use bytes::Bytes;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;

const TOKEN: &str = "agenthold-secret:tok-123";
const OTHER: &str = "agenthold-secret:oth-456";
const VALUE: &str = "ghp_the_real_value";
const BIG: usize = 32 * 1024 * 1024;

/// "The internet": one HTTPS server for every name, with its own CA.
struct Internet {
    port: u16,
    ca_pem: String,
    /// Requests it received.
    seen: Arc<AtomicUsize>,
    /// Lets `/sse` send its second event.
    next_event: Arc<tokio::sync::Notify>,
}

use crate::egress::tls::provider;

async fn internet() -> Internet {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![
        "api.test".to_string(),
        "x.test".to_string(),
        "pypi.test".to_string(),
    ])
    .unwrap()
    .signed_by(&key, &issuer)
    .unwrap();
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let next_event = Arc::new(tokio::sync::Notify::new());
    let (s, n) = (seen.clone(), next_event.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen, next) = (acceptor.clone(), s.clone(), n.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = hyper::service::service_fn(move |req| {
                    let (seen, next) = (seen.clone(), next.clone());
                    async move { Ok::<_, std::convert::Infallible>(answer(req, &seen, next).await) }
                });
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            });
        }
    });
    Internet {
        port,
        ca_pem: ca_cert.pem(),
        seen,
        next_event,
    }
}

type AnyBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// `/echo`: the request's version, headers and body as text; `/sse`: one event, then another
/// once let; `/big`: [`BIG`] bytes.
async fn answer(
    req: Request<Incoming>,
    seen: &AtomicUsize,
    next: Arc<tokio::sync::Notify>,
) -> Response<AnyBody> {
    seen.fetch_add(1, Ordering::SeqCst);
    match req.uri().path() {
        "/sse" => {
            let events = async_stream::stream! {
                yield Ok::<_, std::io::Error>(Frame::data(Bytes::from("data: one\n\n")));
                next.notified().await;
                yield Ok(Frame::data(Bytes::from("data: two\n\n")));
            };
            Response::new(StreamBody::new(events).boxed())
        }
        "/big" => {
            let chunks = async_stream::stream! {
                let chunk = Bytes::from(vec![7u8; 64 * 1024]);
                for _ in 0..BIG / chunk.len() {
                    yield Ok::<_, std::io::Error>(Frame::data(chunk.clone()));
                }
            };
            Response::new(StreamBody::new(chunks).boxed())
        }
        _ => {
            let mut text = format!("version: {:?}\n", req.version());
            for (k, v) in req.headers() {
                text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
            }
            let body = req.into_body().collect().await.unwrap().to_bytes();
            text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
            Response::new(Full::new(Bytes::from(text)).map_err(|e| match e {}).boxed())
        }
    }
}

fn grants() -> Granted {
    Granted::new(vec![
        Grant::new(
            "GH".into(),
            TOKEN.into(),
            vec!["api.test".parse().unwrap()],
            "Authorization".into(),
            "Bearer {value}".into(),
            true,
            VALUE.into(),
        ),
        Grant::new(
            "XKEY".into(),
            OTHER.into(),
            vec!["x.test".parse().unwrap()],
            "X-Api-Key".into(),
            "{value}".into(),
            false,
            "x-value".into(),
        ),
    ])
}

async fn intercepting(internet: &Internet) -> Setup {
    let mut s = setup_with(
        &["api.test", "x.test", "pypi.test"],
        &[],
        |c| {
            for name in ["api.test", "x.test"] {
                c.resolve
                    .insert(name.to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST));
            }
        },
        grants(),
        Some(&internet.ca_pem),
    )
    .await;
    // The events so far are none of the test's.
    while s.events.try_recv().is_ok() {}
    s
}

/// What the sandbox trusts: the installation CA (and, to tell splicing apart, `extra`).
fn trusting(s: &Setup, extra: Option<&str>) -> RootCertStore {
    let pem = std::fs::read_to_string(s._data.path().join("egress-ca.crt")).unwrap();
    let mut roots = RootCertStore::empty();
    for pem in std::iter::once(pem.as_str()).chain(extra) {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    roots
}

enum Client {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Client {
    async fn send(&mut self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        let sent = match self {
            Client::H1(s) => s.send_request(req),
            Client::H2(s) => {
                return tokio::time::timeout(DEADLINE, s.send_request(req))
                    .await
                    .expect("an answer in time")
                    .unwrap()
            }
        };
        tokio::time::timeout(DEADLINE, sent)
            .await
            .expect("an answer in time")
            .unwrap()
    }
}

/// A TLS connection to `host:port` through the proxy's CONNECT, speaking `alpn`.
async fn through(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    roots: RootCertStore,
    alpn: &[&[u8]],
) -> Result<Client, std::io::Error> {
    let (tcp, status, _) = ask(
        proxy,
        &format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200);
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_string()).unwrap(), tcp)
        .await?;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok(if h2 {
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        Client::H2(send)
    } else {
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        Client::H1(send)
    })
}

fn get(host: &str, path: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .uri(format!("https://{host}{path}"))
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::new(Bytes::new())).unwrap()
}

async fn text_of(resp: Response<Incoming>) -> String {
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

impl Setup {
    /// The next egress event about a secret.
    async fn next_secret_event(&mut self) -> EgressEvent {
        loop {
            let e = self.next_egress().await;
            assert!(
                !format!("{e:?}").contains(VALUE),
                "a value in an event: {e:?}"
            );
            if e.secret.is_some() {
                return e;
            }
        }
    }
}

#[tokio::test]
async fn a_placeholder_becomes_the_value_for_its_host_over_http1_and_http2() {
    let net = internet().await;
    let mut s = intercepting(&net).await;
    for (alpn, version) in [
        (&[&b"http/1.1"[..]][..], Version::HTTP_11),
        (&[&b"h2"[..], &b"http/1.1"[..]][..], Version::HTTP_2),
    ] {
        let mut c = through(s.addr, "api.test", net.port, trusting(&s, None), alpn)
            .await
            .unwrap();
        let resp = c
            .send(get("api.test", "/echo", &[("authorization", TOKEN)]))
            .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), version);
        let echoed = text_of(resp).await;
        assert!(
            echoed.contains(&format!("version: {version:?}")),
            "the destination speaks what the sandbox does: {echoed}"
        );
        assert!(
            echoed.contains(&format!("authorization: Bearer {VALUE}\n")),
            "{echoed}"
        );
        assert!(!echoed.contains(TOKEN), "{echoed}");
        let e = s.next_secret_event().await;
        assert!(e.allowed && e.host == "api.test", "{e:?}");
        assert_eq!(e.secret.as_deref(), Some("GH"));
    }
}

#[tokio::test]
async fn basic_credentials_and_json_bodies_are_rewritten() {
    let net = internet().await;
    let mut s = intercepting(&net).await;
    let mut c = through(
        s.addr,
        "api.test",
        net.port,
        trusting(&s, None),
        &[b"http/1.1"],
    )
    .await
    .unwrap();
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let creds = format!("Basic {}", b64(&format!("git:{TOKEN}")));
    let echoed = text_of(
        c.send(get("api.test", "/echo", &[("authorization", &creds)]))
            .await,
    )
    .await;
    let want = format!("authorization: Basic {}\n", b64(&format!("git:{VALUE}")));
    assert!(echoed.contains(&want), "{echoed}");
    let json = format!(r#"{{"key":"{TOKEN}"}}"#);
    let req = Request::post("https://api.test/echo")
        .header("host", "api.test")
        .header("content-type", "application/json")
        .header("content-length", json.len())
        .body(Full::new(Bytes::from(json)))
        .unwrap();
    let echoed = text_of(c.send(req).await).await;
    assert!(
        echoed.contains(&format!(r#"body: {{"key":"{VALUE}"}}"#)),
        "{echoed}"
    );
    let want = format!(
        "content-length: {}\n",
        format!(r#"{{"key":"{VALUE}"}}"#).len()
    );
    assert!(echoed.contains(&want), "{echoed}");
    assert_eq!(s.next_secret_event().await.secret.as_deref(), Some("GH"));
}

/// On a connection intercepted for `api.test`, a request naming another host is `421`, and a
/// placeholder in a header other than the secret's is `403`: neither reaches the destination,
/// whose answer could otherwise carry the value back (an echoed Origin) or to another site.
#[tokio::test]
async fn a_request_for_another_host_or_a_placeholder_in_another_header_goes_nowhere() {
    let net = internet().await;
    let s = intercepting(&net).await;
    for alpn in [&[&b"http/1.1"[..]][..], &[&b"h2"[..]][..]] {
        let mut c = through(s.addr, "api.test", net.port, trusting(&s, None), alpn)
            .await
            .unwrap();
        let resp = c
            .send(get("other.test", "/echo", &[("authorization", TOKEN)]))
            .await;
        assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
        let resp = c
            .send(get(
                "api.test",
                "/echo",
                &[("authorization", TOKEN), ("origin", TOKEN)],
            ))
            .await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let body = text_of(resp).await;
        assert!(
            body.contains("goes only in the Authorization header"),
            "{body}"
        );
        assert!(!body.contains(VALUE), "{body}");
    }
    assert_eq!(
        net.seen.load(Ordering::SeqCst),
        0,
        "nothing reached the destination"
    );
}

#[tokio::test]
async fn a_placeholder_for_another_host_is_refused_and_the_destination_sees_nothing() {
    let net = internet().await;
    let mut s = intercepting(&net).await;
    let mut c = through(s.addr, "x.test", net.port, trusting(&s, None), &[b"h2"])
        .await
        .unwrap();
    let resp = c
        .send(get(
            "x.test",
            "/echo",
            &[("authorization", &format!("Bearer {TOKEN}"))],
        ))
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body = text_of(resp).await;
    assert!(
        body.contains("secret GH may only be sent to api.test") && !body.contains(VALUE),
        "{body}"
    );
    assert_eq!(
        net.seen.load(Ordering::SeqCst),
        0,
        "nothing reached the destination"
    );
    let e = s.next_secret_event().await;
    assert!(!e.allowed && e.secret.as_deref() == Some("GH"), "{e:?}");
    // Plain HTTP to a host the secret does not name: refused before any dial.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(format!("http://{}", s.addr)).unwrap())
        .build()
        .unwrap();
    let resp = client
        .get("http://pypi.test:9/")
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(resp
        .text()
        .await
        .unwrap()
        .contains("may only be sent to api.test"));
}

#[tokio::test]
async fn streams_pass_as_they_come_and_a_large_download_arrives_whole() {
    let net = internet().await;
    let s = intercepting(&net).await;
    let mut c = through(s.addr, "api.test", net.port, trusting(&s, None), &[b"h2"])
        .await
        .unwrap();
    let mut sse = c.send(get("api.test", "/sse", &[])).await.into_body();
    let first = tokio::time::timeout(DEADLINE, sse.frame())
        .await
        .expect("the first event before the second is sent")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "data: one\n\n");
    net.next_event.notify_one();
    let second = tokio::time::timeout(DEADLINE, sse.frame())
        .await
        .expect("the second event")
        .unwrap()
        .unwrap();
    assert_eq!(second.into_data().unwrap(), "data: two\n\n");

    let mut c = through(
        s.addr,
        "api.test",
        net.port,
        trusting(&s, None),
        &[b"http/1.1"],
    )
    .await
    .unwrap();
    let mut big = c.send(get("api.test", "/big", &[])).await.into_body();
    let (mut total, mut sevens) = (0usize, true);
    while let Some(frame) = tokio::time::timeout(DEADLINE, big.frame()).await.unwrap() {
        if let Ok(data) = frame.unwrap().into_data() {
            total += data.len();
            sevens &= data.iter().all(|b| *b == 7);
        }
    }
    assert_eq!(total, BIG);
    assert!(sevens);
}

#[tokio::test]
async fn a_destination_without_a_grant_stays_spliced_end_to_end() {
    let net = internet().await;
    let s = intercepting(&net).await;
    // Trusting only the installation CA fails: the sandbox sees the destination's own certificate.
    assert!(through(
        s.addr,
        "pypi.test",
        net.port,
        trusting(&s, None),
        &[b"http/1.1"]
    )
    .await
    .is_err());
    let mut c = through(
        s.addr,
        "pypi.test",
        net.port,
        trusting(&s, Some(&net.ca_pem)),
        &[b"http/1.1"],
    )
    .await
    .unwrap();
    let echoed = text_of(
        c.send(get("pypi.test", "/echo", &[("authorization", TOKEN)]))
            .await,
    )
    .await;
    assert!(
        echoed.contains(&format!("authorization: {TOKEN}\n")),
        "untouched: {echoed}"
    );
}
