//! "The internet" of the egress TLS tests: an HTTPS server with a certificate authority of its
//! own, on port 443 of a loopback address of its own (port 443 because programs that ignore the
//! proxy variables reach it only through transparent mode, which takes ports 80 and 443; an
//! address of its own because other tests may hold 443 elsewhere). Tests name it through
//! `sandbox.egress.resolve` and trust its CA through `sandbox.egress.ca_certificates`.
//!
//! It speaks HTTP/2 and HTTP/1.1 (ALPN), records every request it gets, and serves:
//! - `/echo-headers`: the `Authorization` it received (or `none`);
//! - `/trusted`: the word `trusted`;
//! - `/sse?n=N`: N server-sent events, each only after the client acknowledged the one before
//!   with `/ack/I` (a proxy that held events back would stall the stream);
//! - `/bytes/N`: N MiB, a fixed block again and again, streamed ([`Internet::sha256`] of the same);
//! - behind Basic credentials ([`Internet::require_basic`]): a git repository for dumb HTTP at
//!   `/git/repo.git`, and a simple package index at `/simple/` with one wheel, `tinypkg`.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http::{header, Request, Response, StatusCode, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use sha2::Digest;
use tokio_rustls::rustls;

use crate::common::docker::tool;

const MIB: usize = 1 << 20;
/// What `/simple/tinypkg/` offers, and what `import tinypkg; tinypkg.GREETING` says.
pub const WHEEL: &str = "tinypkg-0.1-py3-none-any.whl";
pub const GREETING: &str = "hello from tinypkg";
/// The one file of `/git/repo.git`'s one commit, and its content.
pub const GIT_FILE: &str = "README";
pub const GIT_TEXT: &str = "hello from the test internet";

type Body = BoxBody<Bytes, std::convert::Infallible>;

/// One request the server got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub version: Version,
}

pub struct Internet {
    /// The loopback address it listens on, port 443.
    pub ip: IpAddr,
    /// Its CA's PEM, in a file for `sandbox.egress.ca_certificates`.
    pub ca_file: PathBuf,
    state: Arc<State>,
    dir: tempfile::TempDir,
}

struct State {
    seen: Mutex<Vec<Seen>>,
    /// The highest event `/ack/I` acknowledged.
    acks: tokio::sync::watch::Sender<u32>,
    /// `user:password` that `/git/` and the index want, when set.
    basic: Mutex<Option<String>>,
    git: PathBuf,
    wheel: Bytes,
    block: Bytes,
}

impl Internet {
    /// Starts it, with a certificate for each of `names`.
    pub async fn start(names: &[&str]) -> Internet {
        let dir = tempfile::tempdir().expect("a folder");
        let (ca_pem, tls) = certificates(names);
        let ca_file = dir.path().join("internet-ca.pem");
        std::fs::write(&ca_file, &ca_pem).expect("the CA's file");
        let block: Bytes = (0..MIB)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>()
            .into();
        let state = Arc::new(State {
            seen: Mutex::new(Vec::new()),
            acks: tokio::sync::watch::Sender::new(0),
            basic: Mutex::new(None),
            git: git_repository(dir.path()),
            wheel: wheel().into(),
            block,
        });
        let (ip, listener) = bind_443().await;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let serving = state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let state = serving.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&state, req)) }
                    });
                    let io = TokioIo::new(tls);
                    let _ = if h2 {
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service)
                            .await
                    } else {
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await
                    };
                });
            }
        });
        Internet {
            ip,
            ca_file,
            state,
            dir,
        }
    }

    /// `sandbox.egress.resolve` for `names`: all of them here.
    pub fn resolve(&self, names: &[&str]) -> std::collections::BTreeMap<String, IpAddr> {
        names.iter().map(|n| (n.to_string(), self.ip)).collect()
    }

    /// From now on `/git/` and the index answer only requests with these Basic credentials
    /// (`401` asking for them without, `403` with others).
    pub fn require_basic(&self, user: &str, password: &str) {
        *self.state.basic.lock().expect("lock") = Some(format!("{user}:{password}"));
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("lock").clone()
    }

    /// The sha256 (hex) of what `/bytes/{mib}` sends, by the host's `sha256sum`.
    pub fn sha256(&self, mib: usize) -> String {
        let block = self.dir.path().join("block");
        std::fs::write(&block, &self.state.block).expect("the block's file");
        let mut child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sha256sum");
        let mut stdin = child.stdin.take().expect("its stdin");
        for _ in 0..mib {
            stdin
                .write_all(&self.state.block)
                .expect("feeding sha256sum");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("sha256sum's answer");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

/// A CA and a leaf for `names` it signed (with distinct names: a leaf whose issuer reads as its
/// own subject is taken as self-signed), and server settings offering h2 and HTTP/1.1.
fn certificates(names: &[&str]) -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "agenthold test internet CA");
    let ca_cert = ca.self_signed(&ca_key).expect("the authority");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("a key");
    let mut leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .expect("params");
    leaf.distinguished_name
        .push(DnType::CommonName, names.first().copied().unwrap_or("test"));
    let leaf = leaf
        .signed_by(&key, &issuer)
        .expect("the server's certificate");
    let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], der)
        .expect("TLS settings");
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (ca_cert.pem(), Arc::new(tls))
}

/// Port 443 of a loopback address no other test is on.
async fn bind_443() -> (IpAddr, tokio::net::TcpListener) {
    let mut last = None;
    for _ in 0..20 {
        let ip = IpAddr::V4(Ipv4Addr::new(
            127,
            1 + rand::random::<u8>() % 250,
            rand::random(),
            1 + rand::random::<u8>() % 250,
        ));
        match tokio::net::TcpListener::bind((ip, 443)).await {
            Ok(l) => return (ip, l),
            Err(e) => last = Some(e),
        }
    }
    panic!("no loopback address with port 443 free: {last:?}");
}

/// A bare repository with one commit, ready for dumb HTTP (`update-server-info`).
fn git_repository(dir: &Path) -> PathBuf {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).expect("a folder");
    std::fs::write(work.join(GIT_FILE), format!("{GIT_TEXT}\n")).expect("a file");
    let w = work.to_str().expect("a path");
    let bare = dir.join("repo.git");
    let b = bare.to_str().expect("a path");
    tool("git", &["-C", w, "init", "-q", "-b", "main"]);
    tool("git", &["-C", w, "add", GIT_FILE]);
    tool(
        "git",
        &[
            "-C",
            w,
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@test",
            "commit",
            "-q",
            "-m",
            "one",
        ],
    );
    tool("git", &["clone", "-q", "--bare", w, b]);
    tool("git", &["-C", b, "update-server-info"]);
    bare
}

/// A pure-Python wheel of `tinypkg`, built by hand (a zip with its dist-info).
fn wheel() -> Vec<u8> {
    let files = [
        ("tinypkg/__init__.py", format!("GREETING = \"{GREETING}\"\n")),
        (
            "tinypkg-0.1.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n".to_string(),
        ),
        (
            "tinypkg-0.1.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: agenthold-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_string(),
        ),
    ];
    let mut record = String::new();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, text) in &files {
        zip.start_file(*name, options).expect("a zip entry");
        zip.write_all(text.as_bytes()).expect("a zip entry");
        let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(text.as_bytes()));
        record.push_str(&format!("{name},sha256={digest},{}\n", text.len()));
    }
    record.push_str("tinypkg-0.1.dist-info/RECORD,,\n");
    zip.start_file("tinypkg-0.1.dist-info/RECORD", options)
        .expect("a zip entry");
    zip.write_all(record.as_bytes()).expect("a zip entry");
    zip.finish().expect("the wheel").into_inner()
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed());
    *resp.status_mut() = status;
    resp
}

fn answer(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    state.seen.lock().expect("lock").push(Seen {
        path: path.clone(),
        authorization: authorization.clone(),
        version: req.version(),
    });
    if path == "/echo-headers" {
        return full(
            StatusCode::OK,
            authorization.unwrap_or_else(|| "none".to_string()),
        );
    }
    if path == "/trusted" {
        return full(StatusCode::OK, "trusted");
    }
    if let Some(i) = path.strip_prefix("/ack/") {
        let i: u32 = i.parse().unwrap_or(0);
        state.acks.send_modify(|a| *a = (*a).max(i));
        return full(StatusCode::OK, "ok");
    }
    if path == "/sse" {
        return events(state, req.uri().query());
    }
    if let Some(mib) = path.strip_prefix("/bytes/") {
        let Ok(mib) = mib.parse::<usize>() else {
            return full(StatusCode::BAD_REQUEST, "a number of MiB");
        };
        let block = state.block.clone();
        let frames = futures::stream::iter(
            (0..mib).map(move |_| Ok::<_, std::convert::Infallible>(Frame::data(block.clone()))),
        );
        let mut resp = Response::new(StreamBody::new(frames).boxed());
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, (mib * MIB).into());
        return resp;
    }
    if let Some(refusal) = basic_refusal(state, authorization.as_deref()) {
        return refusal;
    }
    if let Some(rest) = path.strip_prefix("/git/repo.git/") {
        // Dumb HTTP: the repository's files as they are (`info/refs` first, then objects).
        if rest.split('/').any(|p| p == ".." || p.is_empty()) {
            return full(StatusCode::NOT_FOUND, "no such file");
        }
        return match std::fs::read(state.git.join(rest)) {
            Ok(bytes) => full(StatusCode::OK, bytes),
            Err(_) => full(StatusCode::NOT_FOUND, "no such file"),
        };
    }
    match path.as_str() {
        "/simple/" | "/simple/tinypkg/" => {
            let mut resp = full(
                StatusCode::OK,
                format!("<!DOCTYPE html><html><body><a href=\"/files/{WHEEL}\">{WHEEL}</a></body></html>\n"),
            );
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/html"),
            );
            resp
        }
        p if p == format!("/files/{WHEEL}") => full(StatusCode::OK, state.wheel.clone()),
        _ => full(StatusCode::NOT_FOUND, "no such page"),
    }
}

/// `401` without credentials and `403` with wrong ones, when [`Internet::require_basic`] was set.
fn basic_refusal(state: &State, authorization: Option<&str>) -> Option<Response<Body>> {
    let want = state.basic.lock().expect("lock").clone()?;
    let Some(given) = authorization else {
        let mut resp = full(StatusCode::UNAUTHORIZED, "credentials, please");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Basic realm=\"test\""),
        );
        return Some(resp);
    };
    let decoded = given
        .strip_prefix("Basic ")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    (decoded.as_deref() != Some(want.as_str()))
        .then(|| full(StatusCode::FORBIDDEN, "wrong credentials"))
}

/// `n` events (`?n=N`, 3 without), each sent once the one before was acknowledged.
fn events(state: &State, query: Option<&str>) -> Response<Body> {
    let n: u32 = query
        .and_then(|q| q.strip_prefix("n="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    // Each stream counts its own acknowledgements.
    state.acks.send_replace(0);
    let mut acks = state.acks.subscribe();
    let stream = async_stream::stream! {
        for i in 1..=n {
            if i > 1 && acks.wait_for(|a| *a >= i - 1).await.is_err() {
                return;
            }
            yield Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(format!("data: event {i}\n\n"))));
        }
        // The stream ends only after the last event arrived, too.
        let _ = acks.wait_for(|a| *a >= n).await;
    };
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// Sets secret `name` to `value`, to be sent to `hosts` alone (made or changed: either is fine).
pub async fn put_secret(
    api: &crate::common::client::Client,
    name: &str,
    value: &str,
    hosts: &[&str],
) {
    let (status, body) = api
        .call(
            "PUT",
            &format!("/api/v1/secrets/{name}"),
            Some(serde_json::json!({"value": value, "hosts": hosts})),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
}
