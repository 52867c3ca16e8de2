//! `sandbox.egress.ca_certificates` in real sandboxes: an HTTPS server this test runs on loopback
//! under a made-up name, with a certificate from a certificate authority the test makes, plays a
//! network whose TLS is re-signed by a corporate proxy. Every sandbox also trusts the installation
//! CA (the egress proxy's, for the hosts of granted secrets), with or without the setting. Needs
//! Docker and the ready image.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::common::docker::*;

const NAME: &str = "corp.test";
/// The ready image: it has curl, Python and the system bundle of `ca-certificates`.
const IMAGE: &str = "agenthold/agent:bookworm";

struct Authority {
    pem: String,
    tls: Arc<rustls::ServerConfig>,
}

/// A certificate authority, and a server certificate for [`NAME`] it signed.
fn authority() -> Authority {
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "agenthold test corporate root");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("the authority");
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().expect("a key");
    let leaf = CertificateParams::new(vec![NAME.to_string()])
        .expect("params")
        .signed_by(&leaf_key, &issuer)
        .expect("the server's certificate");
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der())
        .expect("the server's key");
    // The one provider the build has (ring, the dev-dependency's feature).
    let tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .expect("the server's TLS settings");
    Authority {
        pem: ca_cert.pem(),
        tls: Arc::new(tls),
    }
}

/// An HTTPS server on loopback that answers every request with `trusted`.
async fn https_server(tls: Arc<rustls::ServerConfig>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust the certificate hangs up here.
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
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntrusted",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn configure(c: &mut agenthold::config::Config, ca_file: Option<&std::path::Path>) {
    c.sandbox.egress.resolve =
        BTreeMap::from([(NAME.to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST))]);
    c.sandbox.egress.ca_certificates = ca_file.map(|p| p.to_path_buf()).unwrap_or_default();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_trust_the_configured_authorities_and_only_then() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let ca = authority();
    let dir = tempfile::tempdir().expect("a folder");
    let ca_file = dir.path().join("corp-root.pem");
    std::fs::write(&ca_file, &ca.pem).expect("the authority's file");
    let port = https_server(ca.tls.clone()).await;
    let url = format!("https://{NAME}:{port}/");
    let curl = format!("curl -sS --max-time 20 {url}; echo \" exit=$?\"");
    let python = format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\", timeout=20).read().decode())'"
    );

    // Without the setting the sandbox does not trust the server: curl's 60 is "peer certificate
    // cannot be authenticated".
    let s = env.server_with(false, |c| configure(c, None)).await;
    let id = s
        .running_agent(json!({"name": "corp", "image": IMAGE, "egress": {"allow": [NAME]}}))
        .await;
    let out = s.exec(&id, &["bash", "-c", &curl]).await;
    let stdout = out["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("exit=60"), "{out}");
    // The installation CA is trusted all the same: in the system bundle and in the agent's own,
    // which the usual variables name.
    let installation = std::fs::read_to_string(s.dir.path().join("egress-ca.crt"))
        .expect("the installation CA, made at the first start");
    let body = |pem: &str| {
        pem.lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>()
    };
    for bundle in [
        "/etc/ssl/certs/ca-certificates.crt",
        agenthold_proto::boot::CA_BUNDLE_PATH,
    ] {
        let text = s.exec_ok(&id, &["cat", bundle]).await;
        let joined: String = text.lines().collect();
        assert!(
            joined.contains(&body(&installation)),
            "the installation CA in {bundle}"
        );
    }
    let env_out = s.exec_ok(&id, &["env"]).await;
    for var in agenthold_proto::boot::CA_BUNDLE_ENV {
        let want = format!("{var}={}\n", agenthold_proto::boot::CA_BUNDLE_PATH);
        assert!(env_out.contains(&want), "{want} in {env_out}");
    }

    // With it (a restart, as for every proxy setting), the agent's next start trusts it: curl,
    // Python, and every variable the usual tools read.
    let s = env.restart_with(s, |c| configure(c, Some(&ca_file))).await;
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let out = s.exec_ok(&id, &["bash", "-c", &curl]).await;
    assert!(out.contains("trusted exit=0"), "{out}");
    let out = s.exec_ok(&id, &["bash", "-c", &python]).await;
    assert_eq!(out.trim(), "trusted");
    let env_out = s.exec_ok(&id, &["env"]).await;
    for var in agenthold_proto::boot::CA_BUNDLE_ENV {
        let want = format!("{var}={}\n", agenthold_proto::boot::CA_BUNDLE_PATH);
        assert!(env_out.contains(&want), "{want} in {env_out}");
    }

    // A second start adds nothing twice; the system bundle keeps what the image had.
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let count = s
        .exec_ok(
            &id,
            &[
                "bash",
                "-c",
                "grep -c 'agenthold: sandbox.egress.ca_certificates (begin' /etc/ssl/certs/ca-certificates.crt; \
                 grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt",
            ],
        )
        .await;
    let counts: Vec<u32> = count
        .lines()
        .map(|l| l.trim().parse().expect("a count"))
        .collect();
    assert_eq!(counts[0], 1, "{count}");
    assert!(counts[1] > 100, "the image's own authorities stay: {count}");

    // Taken away again, the agent's next start trusts the server no more.
    let s = env.restart_with(s, |c| configure(c, None)).await;
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let out = s.exec(&id, &["bash", "-c", &curl]).await;
    let stdout = out["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("exit=60"), "{out}");
    s.destroy(&id).await;
}
