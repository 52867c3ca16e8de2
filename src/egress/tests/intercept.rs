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
use crate::egress::substitute::MAX_BODY;

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
    intercepting_with(internet, SecretGuard::Hosts, grants()).await
}

async fn intercepting_with(internet: &Internet, guard: SecretGuard, granted: Granted) -> Setup {
    let mut s = setup_with(
        &["api.test", "x.test", "pypi.test"],
        &[],
        |c| {
            for name in ["api.test", "x.test"] {
                c.resolve
                    .insert(name.to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST));
            }
            c.secret_guard = guard;
        },
        granted,
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
    let tls = tls_through(proxy, host, port, roots, alpn).await?;
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

/// An HTTP/2 client to `host:port` through `s`'s interception, trusting its CA.
async fn h2_through(s: &Setup, host: &str, port: u16) -> Client {
    through(s.addr, host, port, trusting(s, None), &[b"h2"])
        .await
        .unwrap()
}

/// A client that sends plain HTTP through the proxy at `proxy`.
fn plain_http_client(proxy: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(format!("http://{proxy}")).unwrap())
        .build()
        .unwrap()
}

/// A TLS connection to `host:port` through the proxy's `CONNECT`, offering `alpn`; an error
/// when the proxy refuses the `CONNECT`.
async fn tls_through(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    roots: RootCertStore,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    let (tcp, status, _) = ask(
        proxy,
        &format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"),
    )
    .await;
    if status != 200 {
        return Err(std::io::Error::other(format!("CONNECT answered {status}")));
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_string()).unwrap(), tcp)
        .await
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
    for (i, (alpn, version)) in [
        (&[&b"http/1.1"[..]][..], Version::HTTP_11),
        (&[&b"h2"[..], &b"http/1.1"[..]][..], Version::HTTP_2),
    ]
    .into_iter()
    .enumerate()
    {
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
        // One use event per secret and destination in a window: the second use is not told.
        if i == 0 {
            let e = s.next_secret_event().await;
            assert!(e.allowed && e.host == "api.test", "{e:?}");
            assert_eq!(e.secret.as_deref(), Some("GH"));
        }
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
    let mut c = h2_through(&s, "x.test", net.port).await;
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
    let client = plain_http_client(s.addr);
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

/// A placeholder of another agent (or an earlier boot) is refused `403` wherever the proxy reads
/// the request: inside an intercepted connection, over plain HTTP, and for an agent with no
/// grants at all; the destination sees nothing.
#[tokio::test]
async fn another_agents_placeholder_is_refused_and_the_destination_sees_nothing() {
    let theirs = format!("{}{}", crate::egress::PLACEHOLDER_PREFIX, "c3".repeat(32));
    let net = internet().await;
    let mut s = intercepting(&net).await;
    let mut c = h2_through(&s, "api.test", net.port).await;
    let resp = c
        .send(get(
            "api.test",
            "/echo",
            &[("authorization", &format!("Bearer {theirs}"))],
        ))
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body = text_of(resp).await;
    assert!(
        body.contains("stands for no secret of this agent"),
        "{body}"
    );
    assert_eq!(
        net.seen.load(Ordering::SeqCst),
        0,
        "nothing reached api.test"
    );
    // After the CONNECT's own (allowed) event.
    let e = loop {
        let e = s.next_egress().await;
        if !e.allowed {
            break e;
        }
    };
    assert!(e.secret.is_none(), "{e:?}");
    assert!(
        e.reason
            .as_deref()
            .is_some_and(|r| r.contains("no secret of this agent")),
        "{e:?}"
    );
    let ask_plain = |addr: SocketAddr| {
        let theirs = theirs.clone();
        async move {
            plain_http_client(addr)
                .get("http://pypi.test:9/")
                .header("authorization", theirs)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        ask_plain(s.addr).await,
        403,
        "plain HTTP, an agent with grants"
    );
    let bare = setup(&["pypi.test"], &[], |_| {}).await;
    assert_eq!(
        ask_plain(bare.addr).await,
        403,
        "plain HTTP, an agent without grants"
    );
}

/// What a hostile sandbox sends inside an intercepted connection: a placeholder smuggled in a
/// folded header line (obsolete line folding), and a 10 MB header. Each is refused, the
/// connection closed, and the destination sees nothing.
#[tokio::test]
async fn a_folded_header_and_a_10_mb_header_inside_interception_reach_nothing() {
    let net = internet().await;
    let s = intercepting(&net).await;
    let folded = format!(
        "GET /echo HTTP/1.1\r\nHost: api.test\r\nX-Note: hello\r\n Authorization: Bearer {TOKEN}\r\n\r\n"
    );
    let mut huge = b"GET /echo HTTP/1.1\r\nHost: api.test\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 10 * 1024 * 1024));
    huge.extend_from_slice(format!("\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").as_bytes());
    for (what, request, status) in [
        ("a folded header", folded.into_bytes(), "HTTP/1.1 400"),
        ("a 10 MB header", huge, "HTTP/1.1 431"),
    ] {
        let mut tls = tls_through(
            s.addr,
            "api.test",
            net.port,
            trusting(&s, None),
            &[b"http/1.1"],
        )
        .await
        .unwrap();
        // The proxy may close before the whole header is written: the answer is what counts.
        let _ = tls.write_all(&request).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut answer))
            .await
            .expect("the connection closed");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with(status), "{what}: {answer}");
        assert!(!answer.contains(VALUE), "{what}: {answer}");
    }
    assert_eq!(
        net.seen.load(Ordering::SeqCst),
        0,
        "nothing reached api.test"
    );
}

/// A destination presenting a chain the proxy cannot verify (a CA of the same name as the one it
/// trusts, with another key: a forged chain) is never sent the request nor the value.
#[tokio::test]
async fn a_destination_with_a_forged_chain_gets_nothing() {
    let real = internet().await;
    let forged = internet().await;
    let s = intercepting(&real).await;
    // The proxy meets the destination before it finishes the sandbox's handshake: a chain it
    // cannot verify ends that handshake, or (once under way) the request is answered 502.
    match through(
        s.addr,
        "api.test",
        forged.port,
        trusting(&s, None),
        &[b"h2"],
    )
    .await
    {
        Ok(mut c) => {
            let resp = c
                .send(get("api.test", "/echo", &[("authorization", TOKEN)]))
                .await;
            assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
            let body = text_of(resp).await;
            assert!(!body.contains(VALUE), "{body}");
        }
        // The sandbox's handshake ended by the proxy, not refused by the sandbox's own check.
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}"),
    }
    // The same through the real host is served: the refusal was the chain's.
    let mut c = h2_through(&s, "api.test", real.port).await;
    let resp = c
        .send(get("api.test", "/echo", &[("authorization", TOKEN)]))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        forged.seen.load(Ordering::SeqCst),
        0,
        "the forged host saw a request"
    );
}

/// A thousand connections to an intercepted host from one sandbox: at most its cap are served
/// (each its own TLS session), the rest refused `429` at once; another agent is still answered
/// on its own, and once they close the sandbox is served again.
#[tokio::test]
async fn a_thousand_connections_to_an_intercepted_host_are_capped() {
    let net = internet().await;
    let mut s = setup_with(
        &["api.test"],
        &[],
        |c| {
            c.resolve
                .insert("api.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST));
            // Long, so that no held connection times out (freeing its place) while the rest
            // are opened.
            c.header_timeout = Duration::from_secs(300);
        },
        grants(),
        Some(&net.ca_pem),
    )
    .await;
    // About four handles per held connection, in this one process.
    let files = crate::listener::raise_nofile_limit().unwrap();
    assert!(
        files >= 5000,
        "RLIMIT_NOFILE is {files}: too low for this test"
    );
    let cap = EgressConfig::default().max_connections;
    let connect = format!(
        "CONNECT api.test:{0} HTTP/1.1\r\nHost: api.test:{0}\r\n\r\n",
        net.port
    );
    let mut held = Vec::new();
    let (mut served, mut refused) = (0, 0);
    for _ in 0..1000 {
        let mut c = connect_from("127.0.0.1", s.addr).await;
        c.write_all(connect.as_bytes()).await.unwrap();
        let mut status = [0u8; 12];
        tokio::time::timeout(DEADLINE, c.read_exact(&mut status))
            .await
            .expect("an answer")
            .unwrap();
        match &status {
            b"HTTP/1.1 200" => served += 1,
            b"HTTP/1.1 429" => refused += 1,
            other => panic!("{}", String::from_utf8_lossy(other)),
        }
        held.push(c);
    }
    assert_eq!(served, cap, "served past the agent's cap");
    assert_eq!(refused, 1000 - cap);
    // Another agent's connection is its own: answered by its rules (it has none: 403), not a cap.
    let mut other = connect_from("127.0.0.3", s.addr).await;
    other.write_all(connect.as_bytes()).await.unwrap();
    let mut status = [0u8; 12];
    tokio::time::timeout(DEADLINE, other.read_exact(&mut status))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(&status, b"HTTP/1.1 403");
    drop(held);
    let echoed = wait_for_served(&mut s, &net).await;
    assert!(
        echoed.contains(&format!("authorization: Bearer {VALUE}")),
        "{echoed}"
    );
}

/// Once the sandbox's held connections are gone, an intercepted request with its placeholder is
/// served; the answer is what api.test saw.
async fn wait_for_served(s: &mut Setup, net: &Internet) -> String {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Ok(mut c) = through(s.addr, "api.test", net.port, trusting(s, None), &[b"h2"]).await
        {
            let resp = c
                .send(get("api.test", "/echo", &[("authorization", TOKEN)]))
                .await;
            if resp.status() == StatusCode::OK {
                return text_of(resp).await;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn streams_pass_as_they_come_and_a_large_download_arrives_whole() {
    let net = internet().await;
    let s = intercepting(&net).await;
    let mut c = h2_through(&s, "api.test", net.port).await;
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

/// `secret_guard: all`: TLS to a host no secret names is intercepted too, so a placeholder sent
/// there is refused `403` (an event says which secret) and the destination sees nothing, while
/// a request without one goes through as usual.
#[tokio::test]
async fn with_the_guard_on_all_a_placeholder_to_a_host_no_secret_names_is_refused() {
    let net = internet().await;
    let mut s = intercepting_with(&net, SecretGuard::All, grants()).await;
    for (i, alpn) in [&[&b"http/1.1"[..]][..], &[&b"h2"[..]][..]]
        .iter()
        .enumerate()
    {
        // Trusting only the installation CA works: the proxy terminates it.
        let mut c = through(s.addr, "pypi.test", net.port, trusting(&s, None), alpn)
            .await
            .expect("intercepted under the guard");
        let resp = c
            .send(get(
                "pypi.test",
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
        // One refusal event per destination a second: the second is only recorded.
        if i == 0 {
            let e = s.next_secret_event().await;
            assert!(
                !e.allowed && e.secret.as_deref() == Some("GH") && e.host == "pypi.test",
                "{e:?}"
            );
        }
        assert_eq!(net.seen.load(Ordering::SeqCst), 0, "nothing reached it");
    }
    let mut c = h2_through(&s, "pypi.test", net.port).await;
    let resp = c.send(get("pypi.test", "/echo", &[("x-plain", "1")])).await;
    assert_eq!(resp.status(), 200);
    assert!(text_of(resp).await.contains("x-plain: 1"));
    assert_eq!(net.seen.load(Ordering::SeqCst), 1);
}

/// Under `all`, an agent without grants is never intercepted, and a tunnel that is not TLS
/// (its client speaks something else first, or its server speaks first) is spliced as before.
#[tokio::test]
async fn with_the_guard_on_all_agents_without_grants_and_tunnels_that_are_not_tls_stay_spliced() {
    let net = internet().await;
    let s = intercepting_with(&net, SecretGuard::All, Granted::default()).await;
    assert!(
        through(
            s.addr,
            "pypi.test",
            net.port,
            trusting(&s, None),
            &[b"http/1.1"]
        )
        .await
        .is_err(),
        "no grants: the destination's own certificate"
    );
    let s = intercepting_with(&net, SecretGuard::All, grants()).await;
    for greeting in [&b""[..], &b"220 hello\r\n"[..]] {
        let echo = echo_server("127.0.0.1:0", greeting).await.unwrap();
        let (mut tcp, status, _) = ask(
            s.addr,
            &format!("CONNECT pypi.test:{echo} HTTP/1.1\r\nHost: pypi.test:{echo}\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200);
        let mut got = vec![0u8; greeting.len()];
        tokio::time::timeout(DEADLINE, tcp.read_exact(&mut got))
            .await
            .expect("the server's greeting, with the client silent")
            .unwrap();
        assert_eq!(got, greeting);
        tcp.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tokio::time::timeout(DEADLINE, tcp.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"ping");
    }
}

/// A grant whose value may go over plain HTTP to `pypi.test:port`, in its header and in bodies.
fn plain_grant(port: u16) -> Granted {
    Granted::new(vec![Grant::new(
        "GH".into(),
        TOKEN.into(),
        vec![format!("pypi.test:{port}").parse().unwrap()],
        "Authorization".into(),
        "Bearer {value}".into(),
        true,
        VALUE.into(),
    )])
}

/// Bodies held whole to swap an `inBody` secret share one budget, of which one agent holds at
/// most a quarter (at least one largest body): past it a body is refused `503` at once
/// (nothing held), and a place comes back once a body is sent.
#[tokio::test]
async fn bodies_held_for_secrets_share_a_budget_and_past_it_are_refused_503() {
    let port = hello_server("127.0.0.1:0").await.unwrap();
    let s = setup_with(
        &["pypi.test"],
        &[],
        |c| c.secret_body_budget_mb = 4,
        plain_grant(port),
        None,
    )
    .await;
    const N: usize = 12;
    let head = format!(
        "POST http://pypi.test:{port}/ HTTP/1.1\r\nHost: pypi.test:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {MAX_BODY}\r\n\r\n"
    );
    let start = format!(r#"{{"k":"{TOKEN}","pad":""#);
    let rest = format!("{}\"}}", "x".repeat(MAX_BODY - start.len() - 2));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (go, _) = tokio::sync::watch::channel(false);
    for _ in 0..N {
        let (head, start, rest, tx, mut go) = (
            head.clone(),
            start.clone(),
            rest.clone(),
            tx.clone(),
            go.subscribe(),
        );
        let addr = s.addr;
        tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(head.as_bytes()).await.unwrap();
            tcp.write_all(start.as_bytes()).await.unwrap();
            let mut status = [0u8; 12];
            tokio::select! {
                // Refused at once, or held until the rest is sent.
                read = tcp.read_exact(&mut status) => {
                    read.unwrap();
                    let _ = tx.send(String::from_utf8_lossy(&status).into_owned());
                    return;
                }
                _ = go.wait_for(|go| *go) => {}
            }
            tcp.write_all(rest.as_bytes()).await.unwrap();
            tcp.read_exact(&mut status).await.unwrap();
            let _ = tx.send(String::from_utf8_lossy(&status).into_owned());
        });
    }
    for _ in 0..N - 1 {
        let status = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("a refusal at once")
            .unwrap();
        assert_eq!(status, "HTTP/1.1 503", "past the agent's share of 1 MiB");
    }
    go.send_replace(true);
    for _ in 0..1 {
        let status = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("the held bodies go through")
            .unwrap();
        assert_eq!(status, "HTTP/1.1 200", "within the budget");
    }
    // Their places came back.
    let client = plain_http_client(s.addr);
    let resp = client
        .post(format!("http://pypi.test:{port}/"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"k":"{TOKEN}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

/// A sandbox that sends a body to be rewritten slower than `secret_body_timeout` allows gets
/// `408`, and its place in the budget comes back: holding the budget by dribbling is no attack.
#[tokio::test]
async fn a_body_for_a_secret_that_dribbles_in_is_refused_408_and_frees_its_place() {
    let port = hello_server("127.0.0.1:0").await.unwrap();
    let s = setup_with(
        &["pypi.test"],
        &[],
        |c| {
            c.secret_body_budget_mb = 1;
            c.secret_body_timeout = Duration::from_secs(1);
        },
        plain_grant(port),
        None,
    )
    .await;
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST http://pypi.test:{port}/ HTTP/1.1\r\nHost: pypi.test:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {MAX_BODY}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(format!(r#"{{"k":"{TOKEN}","pad":""#).as_bytes())
        .await
        .unwrap();
    // It holds the agent's whole share until it is late (`bodies_held_…` shows a held place
    // refusing others): then it is refused 408, and a body as large goes through.
    let mut status = [0u8; 12];
    tokio::time::timeout(DEADLINE, tcp.read_exact(&mut status))
        .await
        .expect("a refusal once the body is late")
        .unwrap();
    assert_eq!(&status, b"HTTP/1.1 408");
    let client = plain_http_client(s.addr);
    let resp = client
        .post(format!("http://pypi.test:{port}/"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"k":"{TOKEN}","pad":"{}"}}"#,
            "x".repeat(MAX_BODY - 100)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "its place came back");
}

/// A loop of requests using a secret on one connection is one use event per destination in a
/// window (the rest are neither told nor recorded), so it cannot push the agent's refusals out of
/// its egress log, where every refusal is recorded.
#[tokio::test]
async fn a_loop_of_uses_is_one_event_and_cannot_push_a_refusal_out_of_the_log() {
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
    let refused = c
        .send(get(
            "api.test",
            "/echo",
            &[("authorization", TOKEN), ("origin", TOKEN)],
        ))
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    for _ in 0..LOG_LEN + 50 {
        let resp = c
            .send(get("api.test", "/echo", &[("authorization", TOKEN)]))
            .await;
        assert_eq!(resp.status(), 200);
        text_of(resp).await;
    }
    let (mut uses, mut refusals) = (0, 0);
    while let Ok(e) = s.events.try_recv() {
        if let AgentEvent::Egress(e) = e {
            match (e.secret.is_some(), e.allowed) {
                (true, true) => uses += 1,
                (true, false) => refusals += 1,
                _ => {}
            }
        }
    }
    assert_eq!((uses, refusals), (1, 1));
    let log = s.sandbox.log.entries(AGENT);
    assert!(
        log.iter().any(|e| !e.allowed && e.host == "api.test"),
        "the refusal is still in the log: {log:?}"
    );
}

/// Over plain HTTP a use is told once the request was sent on: not when the dial failed.
#[tokio::test]
async fn over_plain_http_a_use_is_told_only_once_the_request_was_sent() {
    let port = hello_server("127.0.0.1:0").await.unwrap();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let granted = Granted::new(vec![Grant::new(
        "GH".into(),
        TOKEN.into(),
        vec![
            format!("pypi.test:{closed}").parse().unwrap(),
            format!("pypi.test:{port}").parse().unwrap(),
        ],
        "Authorization".into(),
        "Bearer {value}".into(),
        false,
        VALUE.into(),
    )]);
    let mut s = setup_with(&["pypi.test"], &[], |_| {}, granted, None).await;
    while s.events.try_recv().is_ok() {}
    let client = plain_http_client(s.addr);
    for (to, status) in [(closed, 502), (port, 200)] {
        let resp = client
            .get(format!("http://pypi.test:{to}/"))
            .header("authorization", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status);
    }
    let e = s.next_secret_event().await;
    assert!(
        e.allowed && e.port == port,
        "the first use told is the one sent: {e:?}"
    );
}
