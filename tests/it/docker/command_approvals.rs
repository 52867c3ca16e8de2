//! Approvals for commands, inside a real sandbox: a member's `rm -rf ~` on an agent whose
//! `approvals.commands` is `dangerous` waits; rejected, and then left to expire, it runs neither
//! time, and a marker file in the home is still there; allowed, it runs and the home is emptied.
//! Needs Docker and the test images.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::docker::*;
use crate::common::{TestServer, DEADLINE};

/// A member's token (`agents:use`), made by signing in as the member.
async fn member_token(s: &TestServer) -> String {
    let (status, v) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(json!({ "name": "bob", "role": "member", "password": "correct horse battery" })),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "name": "bob", "password": "correct horse battery" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&json!({ "name": "t", "scopes": ["agents:read", "agents:use"] }))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    v["token"].as_str().expect("a token").to_string()
}

/// `rm -rf ~` as `bob` in the background: its status and error code once it ends.
fn rm_home(s: &TestServer, bob: &str, id: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let http = s.http.clone();
    let url = s.url(&format!("/api/v1/agents/{id}/exec"));
    let bob = bob.to_string();
    tokio::spawn(async move {
        let r = http
            .post(url)
            .bearer_auth(bob)
            .json(&json!({ "command": ["sh", "-c", "rm -rf ~"] }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    })
}

/// The held `rm -rf ~`'s approval id, once it is queued.
async fn pending_id(s: &TestServer) -> String {
    let approval = s.pending_command("sh -c 'rm -rf ~'").await;
    approval["id"].as_str().expect("id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_or_expired_rm_rf_home_leaves_the_home_alone() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sessions.approval_timeout = Duration::from_secs(2);
        })
        .await;
    let id = s
        .running_agent(json!({
            "name": "guarded",
            "image": AGENT_IMAGE,
            "approvals": { "commands": "dangerous" },
        }))
        .await;
    s.exec_ok(&id, &["sh", "-c", "echo keep > ~/marker"]).await;
    let bob = member_token(&s).await;
    // A user member of the admin's agent: not its owner, so his dangerous commands wait.
    let (status, v) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/members"),
            Some(json!({ "user": "bob", "role": "user" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");

    // Rejected.
    let held = rm_home(&s, &bob, &id);
    let aid = pending_id(&s).await;
    let (status, v) = s.answer_approval(&aid, "reject").await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_rejected")),
        "{v}"
    );
    assert_eq!(
        s.exec_ok(&id, &["sh", "-c", "cat ~/marker"]).await,
        "keep\n"
    );

    // Expired.
    let held = rm_home(&s, &bob, &id);
    let (status, v) = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_expired")),
        "{v}"
    );
    assert_eq!(
        s.exec_ok(&id, &["sh", "-c", "cat ~/marker"]).await,
        "keep\n"
    );

    // What is not dangerous runs for the member at once.
    let r = s
        .http
        .post(s.url(&format!("/api/v1/agents/{id}/exec")))
        .bearer_auth(&bob)
        .json(&json!({ "command": ["sh", "-c", "ls ~"] }))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(
        v["stdout"].as_str().unwrap_or_default().contains("marker"),
        "{v}"
    );

    // Allowed, it runs: the home is emptied.
    let held = rm_home(&s, &bob, &id);
    let aid = pending_id(&s).await;
    let (status, v) = s.answer_approval(&aid, "allow").await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        s.exec_ok(&id, &["sh", "-c", "ls -A ~ | grep -c marker || true"])
            .await
            .trim(),
        "0",
        "the approved rm -rf ~ ran"
    );
    s.destroy(&id).await;
}
