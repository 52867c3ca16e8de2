//! API tokens: made with at most the maker's power, limited to agents, listed, revoked.

use serde_json::{json, Value};

use super::{get_as, sign_in, token, token_by, user};
use crate::common::sse::Events;
use crate::common::{TestServer, DEADLINE};

/// `POST /api/v1/tokens` with a bearer token: status and body.
async fn make(s: &TestServer, auth: &str, body: Value) -> (u16, Value) {
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .bearer_auth(auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_token_requests_are_400_and_more_than_the_maker_has_is_403() {
    let s = TestServer::start().await;
    s.create_agent("web").await;
    for (body, field) in [
        (
            json!({ "name": "", "scopes": ["agents:read"] }),
            Some("name"),
        ),
        (
            json!({ "name": "x".repeat(65), "scopes": ["agents:read"] }),
            Some("name"),
        ),
        (json!({ "name": "ci", "scopes": [] }), Some("scopes")),
        (
            json!({ "name": "ci", "scopes": ["agents:read"], "expiresInDays": 0 }),
            Some("expiresInDays"),
        ),
        (
            json!({ "name": "ci", "scopes": ["agents:read"], "expiresInDays": 3651 }),
            Some("expiresInDays"),
        ),
        (json!({ "name": "ci", "scopes": ["everything"] }), None),
        (
            json!({ "name": "ci", "scopes": ["agents:read"], "supervised": "yes" }),
            None,
        ),
        (json!({ "scopes": ["agents:read"] }), None),
    ] {
        let (status, v) = make(&s, &s.token, body.clone()).await;
        assert_eq!(status, 400, "{body} → {v}");
        if let Some(f) = field {
            assert_eq!(v["error"]["field"], f, "{body} → {v}");
        }
    }
    // Admin reaches users and tokens, no agent's: not for a token limited to some agents.
    let (status, v) = make(
        &s,
        &s.token,
        json!({ "name": "ci", "scopes": ["admin"], "agents": [] }),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    // An agent that does not exist for the caller is a missing resource.
    let (status, v) = make(
        &s,
        &s.token,
        json!({ "name": "ci", "scopes": ["agents:read"], "agents": ["nosuch"] }),
    )
    .await;
    assert_eq!(
        (status, &v["error"]["field"]),
        (404, &json!("agents")),
        "{v}"
    );
    let (t, _) = token(
        &s,
        json!({ "name": "reader", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let (status, v) = make(
        &s,
        &t,
        json!({ "name": "more", "scopes": ["agents:write"] }),
    )
    .await;
    assert_eq!(status, 403, "a token cannot make a token with more: {v}");
    user(&s, "mia", "member", Some("mia's password")).await;
    let cookie = sign_in(&s, "mia", "mia's password").await;
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", &cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&json!({ "name": "root", "scopes": ["admin"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a member's token cannot be admin");
}

#[tokio::test]
async fn a_token_limited_to_an_agent_sees_nothing_else() {
    let s = TestServer::start().await;
    let web = s.create_agent("web").await;
    let db = s.create_agent("db").await;
    let (t, _) = token(
        &s,
        json!({ "name": "web-only", "scopes": ["agents:read", "agents:use"], "agents": ["web"] }),
    )
    .await;
    let (status, list) = get_as(&s, &t, "/api/v1/agents").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![web.as_str()]);
    assert_eq!(
        get_as(&s, &t, &format!("/api/v1/agents/{web}")).await.0,
        200
    );
    let (status, v) = get_as(&s, &t, &format!("/api/v1/agents/{db}")).await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(
        get_as(&s, &t, &format!("/api/v1/events?agent={db}"))
            .await
            .0,
        404
    );

    // The event stream: the snapshot and what follows leave the other agent out.
    let r = s
        .http
        .get(s.url("/api/v1/events"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut events = Events::of(r);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    s.patch_agent(&db, json!({ "labels": { "seen": "no" } }))
        .await;
    s.patch_agent(&web, json!({ "labels": { "seen": "yes" } }))
        .await;
    loop {
        let (kind, e) = events.next(deadline).await;
        if ["agent", "pull", "deleted", "expiring"].contains(&kind.as_str()) {
            assert_eq!(
                e["id"],
                web.as_str(),
                "the other agent's {kind} reached the token: {e}"
            );
        }
        if kind == "agent" && e["labels"]["seen"] == "yes" {
            break;
        }
    }

    // A token it makes is no wider: the same agents, and no others.
    let (status, v) = make(
        &s,
        &t,
        json!({ "name": "wider", "scopes": ["agents:read"], "agents": ["db"] }),
    )
    .await;
    assert_eq!(
        (status, v["error"]["field"].clone()),
        (404, json!("agents")),
        "{v}"
    );
    let (child, _) = token_by(
        &s,
        &t,
        json!({ "name": "child", "scopes": ["agents:read"] }),
    )
    .await;
    let (_, me) = get_as(&s, &child, "/api/v1/me").await;
    assert_eq!(me["token"]["agents"], json!([web]), "{me}");
    assert_eq!(me["scopes"], json!(["agents:read"]), "{me}");
}

#[tokio::test]
async fn tokens_are_listed_for_their_user_and_revoked_at_once() {
    let s = TestServer::start().await;
    user(&s, "mia", "member", Some("mia's password")).await;
    let cookie = sign_in(&s, "mia", "mia's password").await;
    let origin = format!("http://{}", s.api_addr);
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", &cookie)
        .header("origin", &origin)
        .json(&json!({ "name": "mia-ci", "scopes": ["agents:read"], "expiresInDays": 30 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mia: Value = r.json().await.unwrap();
    assert!(mia["expiresAt"].is_string(), "{mia}");
    let mia_token = mia["token"].as_str().unwrap().to_string();
    let (admin_token, admin_id) =
        token(&s, json!({ "name": "admin-ci", "scopes": ["admin"] })).await;

    // Mia sees hers; an admin sees all; the list never shows a token itself.
    let (_, hers) = get_as(&s, &mia_token, "/api/v1/tokens").await;
    assert_eq!(hers.as_array().unwrap().len(), 1, "{hers}");
    assert!(hers[0].get("token").is_none() && hers[0].get("tokenHash").is_none());
    let (_, all) = get_as(&s, &admin_token, "/api/v1/tokens").await;
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    assert!(!all.to_string().contains(&mia_token));

    // Another user's token is not there for Mia to revoke.
    let r = s
        .http
        .delete(s.url(&format!("/api/v1/tokens/{admin_id}")))
        .bearer_auth(&mia_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(get_as(&s, &admin_token, "/api/v1/users").await.0, 200);
    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/tokens/{}", mia["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 204, "an admin revokes anyone's");
    assert_eq!(get_as(&s, &mia_token, "/api/v1/agents").await.0, 401);
    // Revoked for good: a restart reads it from the database.
    let s = s.restart_with(|_| {}).await;
    assert_eq!(get_as(&s, &mia_token, "/api/v1/agents").await.0, 401);
    assert_eq!(get_as(&s, &admin_token, "/api/v1/users").await.0, 200);
}

/// Revoking a token ends what it streams within a second: the event stream, a streaming exec
/// and a terminal WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_closes_its_streams_within_a_second() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let s = TestServer::start().await;
    let id = s.running_agent("busy").await;
    let (t, tid) = token(
        &s,
        json!({ "name": "streams", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let events = s
        .http
        .get(s.url("/api/v1/events"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut events = events.bytes_stream();
    let exec = s
        .http
        .post(s.url(&format!("/api/v1/agents/{id}/exec")))
        .bearer_auth(&t)
        .header("accept", "application/x-ndjson")
        .json(&json!({ "command": ["sh", "-c", "echo started; sleep 600"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(exec.status(), 200);
    let mut exec = exec.bytes_stream();
    let first = tokio::time::timeout(DEADLINE, exec.next()).await.unwrap();
    assert!(String::from_utf8_lossy(&first.unwrap().unwrap()).contains("started"));
    let mut req = s
        .ws_url(&format!("/api/v1/agents/{id}/terminal?cols=80&rows=24"))
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {t}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    crate::common::send_keys(&mut ws, "echo up-'and'-running\r").await;
    crate::common::read_until(&mut ws, "up-and-running").await;

    let (status, _) = s
        .call("DELETE", &format!("/api/v1/tokens/{tid}"), None)
        .await;
    assert_eq!(status, 204);
    let within = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    // Each ends: the stream runs out (or fails), the socket closes.
    loop {
        match tokio::time::timeout_at(within, events.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(_) => break,
            Err(_) => panic!("the event stream was still open a second after the revocation"),
        }
    }
    loop {
        match tokio::time::timeout_at(within, exec.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(_) => break,
            Err(_) => panic!("the streaming exec was still open a second after the revocation"),
        }
    }
    loop {
        use tokio_tungstenite::tungstenite::Message;
        match tokio::time::timeout_at(within, ws.next()).await {
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("the terminal was still open a second after the revocation"),
        }
    }
}

#[tokio::test]
async fn the_event_stream_shows_processes_only_to_tokens_that_may_use_agents() {
    let s = TestServer::start().await;
    let id = s.running_agent("watched").await;
    let (reader, _) = token(&s, json!({ "name": "reader", "scopes": ["agents:read"] })).await;
    let (user, _) = token(
        &s,
        json!({ "name": "user", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let open = |t: String| {
        let s = &s;
        async move {
            let r = s
                .http
                .get(s.url("/api/v1/events"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            Events::of(r)
        }
    };
    let mut reads = open(reader).await;
    let mut uses = open(user).await;
    let (status, started) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({ "command": ["echo", "secret-command-line"] })),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    // A change every stream carries, after the process's start: the reader's stream reaches it
    // without a process event before it.
    let r = s
        .patch_agent(&id, json!({ "labels": { "after": "process" } }))
        .await;
    assert_eq!(r.status(), 200);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut saw_process = false;
    loop {
        let (kind, data) = uses.next(deadline).await;
        saw_process |= kind == "process";
        if kind == "agent" && data["labels"]["after"] == "process" {
            break;
        }
    }
    assert!(saw_process, "agents:use sees the process");
    loop {
        let (kind, data) = reads.next(deadline).await;
        assert_ne!(kind, "process", "agents:read alone must not see {data}");
        if kind == "agent" && data["labels"]["after"] == "process" {
            break;
        }
    }
}
