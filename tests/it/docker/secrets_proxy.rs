//! Secrets swapped in by the egress proxy, from real sandboxes (issue #34): "the internet" is an
//! HTTPS server on loopback with a CA of its own (trusted by the proxy through
//! `sandbox.egress.ca_certificates`), named `api.test` and `other.test` through
//! `sandbox.egress.resolve`; it answers each request with the `Authorization` it received.
//!
//! Uses the grants (`PUT /api/v1/secrets/{name}`, agents' `secrets`, the placeholder in the
//! sandbox's env).

use serde_json::json;

use agenthold::egress::SecretGuard;

use crate::common::docker::*;
use crate::common::internet::{put_secret, Internet};
use crate::common::TestServer;

const IMAGE: &str = "agenthold/agent:bookworm";
const VALUE: &str = "sk-test-the-real-value";

/// A server whose proxy trusts `internet`'s CA and finds `api.test` and `other.test` there.
async fn server(env: &DockerEnv, internet: &Internet, guard: SecretGuard) -> TestServer {
    env.server_with(false, |c| {
        c.sandbox.egress.resolve = internet.resolve(&["api.test", "other.test"]);
        c.sandbox.egress.ca_certificates = internet.ca_file.clone();
        c.sandbox.egress.secret_guard = guard;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_secret_reaches_its_host_only_and_the_sandbox_sees_a_placeholder() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let internet = Internet::start(&["api.test", "other.test"]).await;
    let s = server(&env, &internet, SecretGuard::Hosts).await;
    put_secret(&s, "API_TOKEN", VALUE, &["api.test"]).await;
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
            "curl -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://{host}/echo-headers"
        )
    };
    // Through the proxy's interception (curl trusts the installation CA agenthold installed).
    let out = s.exec_ok(&id, &["bash", "-c", &curl("api.test")]).await;
    assert_eq!(out.trim(), format!("Bearer {VALUE}"));
    // Spliced, untouched: the other host gets the worthless placeholder, never the value.
    let out = s.exec_ok(&id, &["bash", "-c", &curl("other.test")]).await;
    assert!(out.trim().starts_with("Bearer agenthold-secret:"), "{out}");
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
    // The egress log names the secret of the swap and of the refusal, never its value.
    let log = s.get_json(&format!("/api/v1/agents/{id}/egress/log")).await;
    assert!(!log.to_string().contains(VALUE), "{log}");
    let about_the_secret = |allowed: bool, host: &str| {
        log.as_array().is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e["secret"] == "API_TOKEN" && e["allowed"] == allowed && e["host"] == host)
        })
    };
    assert!(about_the_secret(true, "api.test"), "no swap logged: {log}");
    assert!(
        about_the_secret(false, "other.test"),
        "no refusal logged: {log}"
    );
    // A placeholder copied from this agent is refused in another's requests, even to the
    // secret's own host and with the same secret granted, and api.test sees none of them.
    let placeholder = env_out
        .lines()
        .find_map(|l| l.strip_prefix("API_TOKEN="))
        .expect("the placeholder")
        .to_string();
    let other = s
        .running_agent(json!({
            "name": "copier",
            "image": IMAGE,
            "egress": {"allow": ["api.test"]},
            "secrets": ["API_TOKEN"],
        }))
        .await;
    let seen_before = internet.seen().len();
    let copied = format!(
        "curl -s -o /dev/null -w '%{{http_code}}' --max-time 20 -H 'Authorization: Bearer {placeholder}' https://api.test/echo-headers"
    );
    let out = s.exec(&other, &["bash", "-c", &copied]).await;
    assert_eq!(out["stdout"].as_str().unwrap_or_default(), "403", "{out}");
    assert_eq!(internet.seen().len(), seen_before, "api.test saw the copy");
    s.destroy(&other).await;
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
    let internet = Internet::start(&["api.test", "other.test"]).await;
    let s = server(&env, &internet, SecretGuard::All).await;
    put_secret(&s, "API_TOKEN", VALUE, &["api.test"]).await;
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
                "curl -sS --max-time 20 -w ' %{http_code}' -H \"Authorization: Bearer $API_TOKEN\" https://other.test/echo-headers",
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
        internet.seen().is_empty(),
        "the server saw a request: {:?}",
        internet.seen()
    );
    // Without a placeholder: through the interception (curl trusts the installation CA).
    let out = s
        .exec_ok(
            &id,
            &[
                "bash",
                "-c",
                "curl -sS --max-time 20 https://other.test/echo-headers",
            ],
        )
        .await;
    assert_eq!(out.trim(), "none");
    assert_eq!(internet.seen().len(), 1);
    s.destroy(&id).await;
}
