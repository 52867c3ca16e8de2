//! The red team's findings (issue #11) replayed on a real engine. Each finding has its own,
//! fuller test; this file covers on Docker those whose own tests run on the fake driver, so
//! that every finding is replayed against real sandboxes in CI:
//!
//! | # | finding | on Docker |
//! |---|---|---|
//! | 1 | connection floods from a sandbox | `docker::flood` |
//! | 2 | the file API writing as root | `docker::fs_identity` |
//! | 3 | no disk limit | `docker::disk`, `docker::rootfs` |
//! | 4 | cookie requests from another origin | here |
//! | 5 | no open-files limit | `docker::limits` |
//! | 6 | the sandbox seeing the server's folder | `docker::repair` |
//! | 7 | exec bodies without a size limit | here |
//! | 8 | upload temp files left in the home | here |
//! | 9 | a stream flood dropping the tunnel | here |
//! | 10 | no `Secure` cookie, a case-sensitive bearer | here |
//!
//! Needs Docker (scripts/docker-setup.sh), a static sandboxd (scripts/build-sandboxd.sh) and
//! root.

use crate::common::docker::*;
use crate::common::{expect_error, TestServer, TOKEN};
use serde_json::{json, Value};

/// Signs in with the admin token; the session cookie's `name=value` and its whole header.
async fn sign_in(s: &TestServer, forwarded_https: bool) -> (String, String) {
    let mut r = s.http.post(s.url("/api/v1/session"));
    if forwarded_https {
        r = r.header("x-forwarded-proto", "https");
    }
    let r = r
        .json(&json!({ "token": TOKEN }))
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), 204);
    let header = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    let pair = header.split(';').next().unwrap_or_default().to_string();
    (pair, header)
}

#[tokio::test(flavor = "multi_thread")]
async fn findings_4_7_8_and_10_on_a_real_sandbox() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.server.trusted_proxies = vec!["127.0.0.1/32".parse().expect("net")];
        })
        .await;
    let id = s.running_agent(("redteam", AGENT_IMAGE)).await;

    // 4. With the session cookie, another origin can neither stop the agent nor get a shell.
    let (pair, _) = sign_in(&s, false).await;
    let r = s
        .http
        .post(s.url(&format!("/api/v1/agents/{id}/stop")))
        .header("cookie", &pair)
        .header("origin", "http://127.0.0.1:28555")
        .send()
        .await
        .expect("stop");
    expect_error(r, 403, "forbidden").await;
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal"));
        let mut req = url.into_client_request().expect("ws request");
        req.headers_mut()
            .insert("cookie", pair.parse().expect("cookie"));
        req.headers_mut()
            .insert("origin", "https://evil.example".parse().expect("origin"));
        match tokio_tungstenite::connect_async(req).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 403)
            }
            Err(e) => panic!("expected a 403, got {e}"),
            Ok(_) => panic!("a shell was handed to another origin"),
        }
    }
    assert_eq!(s.state(&id).await, "running");

    // 7. A command of exactly 1 MiB (each argument counted with its NUL) runs in the real
    // sandbox, under its own ARG_MAX; one byte more is refused with 413 naming the limit.
    let mut command: Vec<String> = ["sh", "-c", "echo $#", "sh"].map(String::from).into();
    let head: usize = command.iter().map(|a| a.len() + 1).sum();
    let mut left = (1usize << 20) - head;
    while left > 0 {
        let n = left.min(65_536);
        command.push("a".repeat(n - 1));
        left -= n;
    }
    let exec_with = |command: Vec<String>| {
        s.post(&format!("/api/v1/agents/{id}/exec"))
            .json(&json!({ "command": command }))
            .send()
    };
    let r = exec_with(command.clone()).await.expect("exec");
    assert_eq!(r.status(), 200);
    let out: Value = r.json().await.expect("exec json");
    assert_eq!(out["stdout"], format!("{}\n", command.len() - 4), "{out}");
    if let Some(last) = command.last_mut() {
        last.push('b');
    }
    let msg = expect_error(exec_with(command).await.expect("exec"), 413, "too_large").await;
    assert!(
        msg.contains("1048577 bytes") && msg.contains("1048576"),
        "{msg}"
    );

    // 8. An upload cut off by the sandbox stopping half-way leaves no temporary file in the
    // home once it starts again.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let upload = tokio::spawn(
        s.put(&format!(
            "/api/v1/agents/{id}/fs/write?path=/home/agent/cut.bin"
        ))
        .body(body)
        .send(),
    );
    tx.send(Ok(vec![7u8; 1 << 20])).await.expect("first chunk");
    let temp_in_home = || async {
        s.exec_ok(&id, &["ls", "-A", "/home/agent"])
            .await
            .lines()
            .any(|l| l.starts_with(".cut.bin"))
    };
    crate::common::wait_for("the upload's temporary file appears", temp_in_home).await;
    s.stop_sleeping(&id).await;
    drop(tx);
    let _ = upload.await;
    s.start_running(&id).await;
    let home = s.exec_ok(&id, &["ls", "-A", "/home/agent"]).await;
    assert!(
        !home
            .lines()
            .any(|l| l.starts_with(".cut.bin") || l == "cut.bin"),
        "left in the home: {home}"
    );

    // 10. Behind a trusted proxy that says HTTPS, the cookie is Secure; the bearer scheme may
    // be written in any case.
    let (_, header) = sign_in(&s, true).await;
    assert!(header.contains("Secure"), "{header}");
    let r = reqwest::Client::new()
        .get(s.url("/api/v1/agents"))
        .header("authorization", format!("bearer {TOKEN}"))
        .send()
        .await
        .expect("agents");
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_9_a_stream_flood_past_the_tunnels_own_limit_leaves_the_tunnel_up() {
    const FLOOD: usize = 300;
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| c.server.max_connections_per_ip = 1024)
        .await;
    let cap = s.lc.config().sandbox.max_streams_per_agent;
    assert!(cap < agenthold_proto::mux::MAX_STREAMS && FLOOD > agenthold_proto::mux::MAX_STREAMS);
    let id = s.running_agent(("deluge", AGENT_IMAGE)).await;
    let conn = s.lc.tunnels().conn_id(&id).expect("the agent's tunnel");

    let (running, refused) = crate::common::exec_flood(&s, &id, FLOOD).await;
    assert_eq!(running.len(), cap);
    assert_eq!(refused, FLOOD - cap);
    s.assert_same_tunnel(&id, conn);

    // The flood ends: its streams are given back, and the same tunnel carries exec again.
    drop(running);
    s.wait_exec_works(&id, "after the flood").await;
    s.assert_same_tunnel(&id, conn);
}
