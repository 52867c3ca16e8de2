//! Secrets swapped in by the egress proxy, from real sandboxes (issue #34): "the internet" is an
//! HTTPS server on loopback with a CA of its own (trusted by the proxy through
//! `sandbox.egress.ca_certificates`), named `api.test` and `other.test` through
//! `sandbox.egress.resolve`; it answers each request with the `Authorization` it received.
//!
//! Uses the grants (`PUT /api/v1/secrets/{name}`, agents' `secrets`, the placeholder in the
//! sandbox's env).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use agenthold::egress::SecretGuard;

use crate::common::docker::*;
use crate::common::TestServer;

const IMAGE: &str = "agenthold/agent:bookworm";
const VALUE: &str = "sk-test-the-real-value";

/// "The internet": its port, its CA's PEM, and the `Host` of each request it received.
struct Internet {
    port: u16,
    ca_pem: String,
    hosts: Arc<Mutex<Vec<String>>>,
}

/// An HTTPS server for `api.test` and `other.test` on loopback.
async fn echo_authorization() -> Internet {
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    // Names of their own: a leaf whose issuer reads as its own subject is taken as self-signed.
    ca.distinguished_name
        .push(DnType::CommonName, "agenthold test internet CA");
    let ca_cert = ca.self_signed(&ca_key).expect("the authority");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("a key");
    let mut leaf = CertificateParams::new(vec!["api.test".to_string(), "other.test".to_string()])
        .expect("params");
    leaf.distinguished_name.push(DnType::CommonName, "api.test");
    let leaf = leaf
        .signed_by(&key, &issuer)
        .expect("the server's certificate");
    let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
    let tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], der)
        .expect("TLS settings");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let all_seen = hosts.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen_hosts) = (acceptor.clone(), all_seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&seen).to_ascii_lowercase();
                if let Some(host) = head.lines().find_map(|l| l.strip_prefix("host:")) {
                    hosts_seen(&seen_hosts).push(host.trim().to_string());
                }
                let auth = head
                    .lines()
                    .find_map(|l| l.strip_prefix("authorization:"))
                    .unwrap_or("none")
                    .trim()
                    .to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{auth}",
                    auth.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Internet {
        port,
        ca_pem: ca_cert.pem(),
        hosts,
    }
}

fn hosts_seen(hosts: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
    hosts.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server whose proxy trusts `net`'s CA and finds `api.test` and `other.test` on loopback.
async fn server(
    env: &DockerEnv,
    net: &Internet,
    dir: &tempfile::TempDir,
    guard: SecretGuard,
) -> TestServer {
    let ca_file = dir.path().join("internet.pem");
    std::fs::write(&ca_file, &net.ca_pem).expect("the CA's file");
    env.server_with(false, |c| {
        c.sandbox.egress.resolve = BTreeMap::from([
            ("api.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ("other.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ]);
        c.sandbox.egress.ca_certificates = ca_file.clone();
        c.sandbox.egress.secret_guard = guard;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_secret_reaches_its_host_only_and_the_sandbox_sees_a_placeholder() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let net = echo_authorization().await;
    let port = net.port;
    let dir = tempfile::tempdir().expect("a folder");
    let s = server(&env, &net, &dir, SecretGuard::Hosts).await;
    let (status, body) = s
        .call(
            "PUT",
            "/api/v1/secrets/API_TOKEN",
            Some(json!({"value": VALUE, "hosts": ["api.test"]})),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let id = s
        .running_agent(json!({
            "name": "secrets",
            "image": IMAGE,
            "egress": {"allow": ["api.test", "other.test"]},
            "secrets": ["API_TOKEN"],
        }))
        .await;
    let env_out = s.exec_ok(&id, &["env"]).await;
    assert!(!env_out.contains(VALUE), "the value in the sandbox's env");
    assert!(
        env_out.contains("API_TOKEN=agenthold-secret:"),
        "the placeholder: {env_out}"
    );
    let curl = |host: &str| {
        format!(
            "curl -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://{host}:{port}/echo-headers"
        )
    };
    // Through the proxy's interception (curl trusts the installation CA agenthold installed).
    let out = s.exec_ok(&id, &["bash", "-c", &curl("api.test")]).await;
    assert_eq!(out.trim(), format!("bearer {}", VALUE.to_ascii_lowercase()));
    // Spliced, untouched: the other host gets the worthless placeholder, never the value.
    let out = s.exec_ok(&id, &["bash", "-c", &curl("other.test")]).await;
    assert!(out.trim().starts_with("bearer agenthold-secret:"), "{out}");
    // Plain HTTP to a host the secret does not name: refused before it leaves.
    let out = s
        .exec(
            &id,
            &[
                "bash",
                "-c",
                "curl -s -o /dev/null -w '%{http_code}' -H \"Authorization: $API_TOKEN\" http://other.test:9/",
            ],
        )
        .await;
    assert_eq!(out["stdout"].as_str().unwrap_or_default(), "403", "{out}");
    s.destroy(&id).await;
}

/// `sandbox.egress.secret_guard: all`: HTTPS to a host the secret does not name is intercepted
/// too, so the placeholder is refused `403` there and the server sees nothing; without a
/// placeholder the request goes through the interception as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_guard_on_all_a_placeholder_to_another_host_is_refused() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let net = echo_authorization().await;
    let port = net.port;
    let dir = tempfile::tempdir().expect("a folder");
    let s = server(&env, &net, &dir, SecretGuard::All).await;
    let (status, body) = s
        .call(
            "PUT",
            "/api/v1/secrets/API_TOKEN",
            Some(json!({"value": VALUE, "hosts": ["api.test"]})),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let id = s
        .running_agent(json!({
            "name": "guarded",
            "image": IMAGE,
            "egress": {"allow": ["api.test", "other.test"]},
            "secrets": ["API_TOKEN"],
        }))
        .await;
    let out = s
        .exec(
            &id,
            &[
                "bash",
                "-c",
                &format!(
                    "curl -sS --max-time 20 -w ' %{{http_code}}' -H \"Authorization: Bearer $API_TOKEN\" https://other.test:{port}/echo-headers"
                ),
            ],
        )
        .await;
    let stdout = out["stdout"].as_str().unwrap_or_default();
    assert!(stdout.ends_with(" 403"), "{out}");
    assert!(
        stdout.contains("secret API_TOKEN may only be sent to api.test") && !stdout.contains(VALUE),
        "{out}"
    );
    assert!(
        hosts_seen(&net.hosts).is_empty(),
        "the server saw a request: {:?}",
        hosts_seen(&net.hosts)
    );
    // Without a placeholder: through the interception (curl trusts the installation CA).
    let out = s
        .exec_ok(
            &id,
            &[
                "bash",
                "-c",
                &format!("curl -sS --max-time 20 https://other.test:{port}/echo-headers"),
            ],
        )
        .await;
    assert_eq!(out.trim(), "none");
    assert_eq!(hosts_seen(&net.hosts).len(), 1);
    s.destroy(&id).await;
}
