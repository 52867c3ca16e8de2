//! `sandbox.egress.ca_certificates` in real sandboxes: an HTTPS server this test runs on loopback
//! under a made-up name, with a certificate from a certificate authority the test makes, plays a
//! network whose TLS is re-signed by a corporate proxy. Every sandbox also trusts the installation
//! CA (the egress proxy's, for the hosts of granted secrets), with or without the setting. Needs
//! Docker and the ready image.

use serde_json::json;

use crate::common::docker::*;
use crate::common::internet::Internet;

const NAME: &str = "corp.test";
/// The ready image: it has curl, Python and the system bundle of `ca-certificates`.
const IMAGE: &str = "agenthold/agent:bookworm";

fn configure(c: &mut agenthold::config::Config, internet: &Internet, trusted: bool) {
    c.sandbox.egress.resolve = internet.resolve(&[NAME]);
    c.sandbox.egress.ca_certificates = if trusted {
        internet.ca_file.clone()
    } else {
        Default::default()
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_trust_the_configured_authorities_and_only_then() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let internet = Internet::start(&[NAME]).await;
    let url = format!("https://{NAME}/trusted");
    let curl = format!("curl -sS --max-time 20 {url}; echo \" exit=$?\"");
    let python = format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\", timeout=20).read().decode())'"
    );

    // Without the setting the sandbox does not trust the server: curl's 60 is "peer certificate
    // cannot be authenticated".
    let s = env
        .server_with(false, |c| configure(c, &internet, false))
        .await;
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
    let s = env.restart_with(s, |c| configure(c, &internet, true)).await;
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
    let s = env
        .restart_with(s, |c| configure(c, &internet, false))
        .await;
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let out = s.exec(&id, &["bash", "-c", &curl]).await;
    let stdout = out["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("exit=60"), "{out}");
    s.destroy(&id).await;
}
