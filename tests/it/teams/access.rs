//! Per-agent access: every route of one agent × every standing on it (owner, operator member,
//! user member, outsider) × every policy (private, protected, public) → what the access rules
//! give; joining a protected agent; lists and the event stream leave out what a caller does not
//! see. The rules are written out here, apart from the server's.

use serde_json::{json, Value};

use super::matrix::{rule, Need, READ, USE, WRITE};
use super::{sign_in, user};
use crate::common::client::Client;
use crate::common::sse::Events;
use crate::common::{TestServer, DEADLINE};

/// A member user's client: a user made by the admin, signed in, with a token of every scope a
/// member may hold.
async fn member(s: &TestServer, name: &str) -> Client {
    user(s, name, "member", Some("a long password")).await;
    let cookie = sign_in(s, name, "a long password").await;
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&json!({
            "name": "all",
            "scopes": ["agents:read", "agents:write", "agents:use", "approvals:answer"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    Client {
        token: v["token"].as_str().unwrap().to_string(),
        ..s.api.clone()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Read,
    Use,
    Operate,
    Govern,
    Join,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Standing {
    Admin,
    Owner,
    Operator,
    User,
    Outsider,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Allowed,
    Forbidden,
    Hidden,
}

/// What a route does to its agent.
fn act(method: &str, path: &str, need: Need) -> Act {
    match (method, path) {
        ("DELETE", "/api/v1/agents/{id}")
        | ("POST", "/api/v1/agents/{id}/members")
        | ("DELETE", "/api/v1/agents/{id}/members/{user}")
        | ("POST", "/api/v1/agents/{id}/access-token") => Act::Govern,
        ("POST", "/api/v1/agents/{id}/join") => Act::Join,
        _ if need == READ => Act::Read,
        _ if need == USE => Act::Use,
        _ if need == WRITE => Act::Operate,
        _ => panic!("{method} {path}: an agent route needs {need:?}"),
    }
}

/// The product's rules: admins and owners everything; operators all but governing; user
/// members read, use and join; outsiders read and use a public agent, join a protected one, and
/// find neither a private one nor a protected one otherwise.
fn expect(standing: Standing, access: &str, act: Act) -> Expect {
    use Expect::*;
    match (standing, act) {
        (Standing::Admin | Standing::Owner, _) => Allowed,
        (Standing::Operator, Act::Govern) => Forbidden,
        (Standing::Operator, _) => Allowed,
        (Standing::User, Act::Operate | Act::Govern) => Forbidden,
        (Standing::User, _) => Allowed,
        (Standing::Outsider, _) => match (access, act) {
            ("public", Act::Read | Act::Use) => Allowed,
            ("public", _) => Forbidden,
            ("protected", Act::Join) => Allowed,
            _ => Hidden,
        },
    }
}

async fn status_of(c: &Client, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = c
        .request(method.parse().unwrap(), path)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = if status >= 400 {
        r.json().await.unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    (status, body)
}

#[tokio::test]
async fn every_agent_route_answers_each_standing_as_the_access_rules_say() {
    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let otto = member(&s, "otto").await;
    let uma = member(&s, "uma").await;
    let nina = member(&s, "nina").await;
    let mut agents = Vec::new();
    for access in ["private", "protected", "public"] {
        let a = olga
            .created_agent(json!({ "name": format!("a-{access}"), "access": access }))
            .await;
        assert_eq!(a["owner"]["name"], "olga", "{a}");
        assert_eq!(a["access"], access);
        let id = a["id"].as_str().unwrap().to_string();
        for (who, role) in [("otto", "operator"), ("uma", "user")] {
            let (status, v) = olga
                .call(
                    "POST",
                    &format!("/api/v1/agents/{id}/members"),
                    Some(json!({ "user": who, "role": role })),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["role"], role);
        }
        agents.push((id, access));
    }
    let who: [(&str, &Client, Standing); 5] = [
        ("the admin", &s.api, Standing::Admin),
        ("the owner", &olga, Standing::Owner),
        ("an operator", &otto, Standing::Operator),
        ("a user member", &uma, Standing::User),
        ("an outsider", &nina, Standing::Outsider),
    ];

    let doc = s.get_json("/api/v1/openapi.json").await;
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/agents/{id}") {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            let m = method.to_uppercase();
            if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m.as_str()) {
                routes.push((m, path.clone()));
            }
        }
    }
    assert!(routes.len() > 40, "only {} agent routes", routes.len());
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (method, path) in &routes {
        let need = rule(method, path).unwrap_or_else(|| panic!("{method} {path} has no rule"));
        let act = act(method, path, need);
        for (id, access) in &agents {
            for (label, client, standing) in &who {
                let expect = expect(*standing, access, act);
                // Destroying is checked apart (it would end the agent for the rest).
                if expect == Expect::Allowed && method == "DELETE" && path == "/api/v1/agents/{id}"
                {
                    continue;
                }
                let url = path
                    .replace("{id}", id)
                    .replace("{pid}", "nosuch")
                    .replace("{sid}", "nosuch")
                    .replace("{cid}", "nosuch")
                    .replace("{user}", "nosuch");
                // What is let through gets a body no route takes (`[]`), so that it changes
                // nothing beyond what a route without a body does (start, stop, rebuild).
                let (status, body) = status_of(client, method, &url, &json!([])).await;
                let msg = body["error"]["message"].as_str().unwrap_or("");
                let hidden = status == 404 && msg == format!("there is no agent with id {id}");
                let forbidden = status == 403 && msg.contains("may do this on agent");
                let ok = match expect {
                    Expect::Allowed => !hidden && !forbidden && status != 401,
                    Expect::Forbidden => forbidden,
                    Expect::Hidden => hidden,
                };
                checked += 1;
                if !ok {
                    wrong.push(format!(
                        "{method} {path} on a {access} agent by {label}: expected {expect:?}, got {status} {body}"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {checked}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // Destroying: the operator and the user member may not, the owner may.
    let (id, _) = &agents[0];
    for c in [&otto, &uma] {
        let (status, _) = c
            .call("DELETE", &format!("/api/v1/agents/{id}"), None)
            .await;
        assert_eq!(status, 403);
    }
    let (status, _) = nina
        .call("DELETE", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 404);
    let (status, v) = olga
        .call("DELETE", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 202, "{v}");
}

#[tokio::test]
async fn only_the_owner_and_admins_change_access_and_operators_change_settings() {
    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let otto = member(&s, "otto").await;
    let id = olga.create_agent("shared").await;
    let members = format!("/api/v1/agents/{id}/members");
    let (status, _) = olga
        .call(
            "POST",
            &members,
            Some(json!({ "user": "otto", "role": "operator" })),
        )
        .await;
    assert_eq!(status, 200);
    let r = otto
        .patch_agent(&id, json!({ "labels": { "team": "ml" } }))
        .await;
    assert_eq!(r.status(), 200);
    let r = otto.patch_agent(&id, json!({ "access": "public" })).await;
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["field"], "access", "{v}");
    let r = olga.patch_agent(&id, json!({ "access": "public" })).await;
    assert_eq!(r.status(), 200);
    let r = s.patch_agent(&id, json!({ "access": "private" })).await;
    assert_eq!(r.status(), 200);

    // Members: bad and unknown users, the owner, a removal.
    for (body, status) in [
        (json!({ "user": "", "role": "user" }), 400),
        (json!({ "user": "nobody", "role": "user" }), 404),
        (json!({ "user": "olga", "role": "user" }), 400),
        (json!({ "user": "otto", "role": "boss" }), 400),
        (json!({ "user": "x".repeat(100_000), "role": "user" }), 400),
    ] {
        let (got, v) = olga.call("POST", &members, Some(body.clone())).await;
        assert_eq!(got, status, "{body}: {v}");
    }
    let (status, v) = olga.call("GET", &members, None).await;
    assert_eq!(status, 200);
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["userName"], "otto");
    let (status, _) = olga.call("DELETE", &format!("{members}/otto"), None).await;
    assert_eq!(status, 204);
    let (status, _) = olga.call("DELETE", &format!("{members}/otto"), None).await;
    assert_eq!(status, 404);
    // No longer a member: the private agent is gone for otto.
    let (status, _) = otto
        .call("GET", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 404);

    // A name taken by an agent otto cannot see: 409, saying nothing of that agent.
    let (status, v) = otto
        .call("POST", "/api/v1/agents", Some(json!({ "name": "shared" })))
        .await;
    assert_eq!(status, 409);
    assert!(!v.to_string().contains(&id), "{v}");
}

#[tokio::test]
async fn a_protected_agent_is_joined_with_its_access_token_and_rotation_ends_the_old_one() {
    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let nina = member(&s, "nina").await;
    let nils = member(&s, "nils").await;
    let id = olga
        .create_agent(json!({ "name": "club", "access": "protected" }))
        .await;
    let join = format!("/api/v1/agents/{id}/join");
    let rotate = format!("/api/v1/agents/{id}/access-token");
    // No token yet: nothing works.
    let (status, _) = nina
        .call("POST", &join, Some(json!({ "accessToken": "ahj_guess" })))
        .await;
    assert_eq!(status, 403);
    let (status, v) = olga.call("POST", &rotate, None).await;
    assert_eq!(status, 201, "{v}");
    let first = v["accessToken"].as_str().unwrap().to_string();
    assert!(first.starts_with("ahj_"));
    // An outsider cannot make one, nor see the agent.
    let (status, _) = nina.call("POST", &rotate, None).await;
    assert_eq!(status, 404);
    let (status, _) = nina
        .call("GET", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 404);
    for (body, status) in [
        (json!({ "accessToken": "ahj_wrong" }), 403),
        (json!({ "accessToken": "" }), 400),
        (json!({ "accessToken": "x".repeat(10_000) }), 400),
        (json!({}), 400),
    ] {
        let (got, v) = nina.call("POST", &join, Some(body.clone())).await;
        assert_eq!(got, status, "{body}: {v}");
    }
    let (status, v) = nina
        .call("POST", &join, Some(json!({ "accessToken": first })))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["id"], id.as_str());
    let (status, _) = nina
        .call("GET", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 200);
    let (_, members) = olga
        .call("GET", &format!("/api/v1/agents/{id}/members"), None)
        .await;
    assert_eq!(members[0]["userName"], "nina");
    assert_eq!(members[0]["role"], "user");
    // A user member may not rotate.
    let (status, _) = nina.call("POST", &rotate, None).await;
    assert_eq!(status, 403);

    let (_, v) = olga.call("POST", &rotate, None).await;
    let second = v["accessToken"].as_str().unwrap().to_string();
    let (status, _) = nils
        .call("POST", &join, Some(json!({ "accessToken": first })))
        .await;
    assert_eq!(status, 403, "the old token still works");
    let (status, _) = nils
        .call("POST", &join, Some(json!({ "accessToken": second })))
        .await;
    assert_eq!(status, 200);

    // A private agent is no one's to join: 404. A policy change ends the token.
    let private = olga.create_agent("hidden").await;
    let (status, _) = nina
        .call(
            "POST",
            &format!("/api/v1/agents/{private}/join"),
            Some(json!({ "accessToken": second })),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = olga
        .call(
            "POST",
            &format!("/api/v1/agents/{private}/access-token"),
            None,
        )
        .await;
    assert_eq!(status, 409);
    olga.patch_agent(&id, json!({ "access": "private" })).await;
    olga.patch_agent(&id, json!({ "access": "protected" }))
        .await;
    let nora = member(&s, "nora").await;
    let (status, _) = nora
        .call("POST", &join, Some(json!({ "accessToken": second })))
        .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn lists_and_the_event_stream_leave_out_agents_a_caller_does_not_see() {
    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let nina = member(&s, "nina").await;
    let private = olga.create_agent("secret").await;
    let protected = olga
        .create_agent(json!({ "name": "club", "access": "protected" }))
        .await;
    let public = olga
        .create_agent(json!({ "name": "square", "access": "public" }))
        .await;
    let listed = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        listed(nina.get_json("/api/v1/agents").await),
        vec![public.clone()]
    );
    assert_eq!(listed(olga.get_json("/api/v1/agents").await).len(), 3);
    assert_eq!(listed(s.get_json("/api/v1/agents").await).len(), 3);
    let (status, _) = nina
        .call("GET", &format!("/api/v1/events?agent={private}"), None)
        .await;
    assert_eq!(status, 404);

    let r = nina.get("/api/v1/events").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut events = Events::of(r);
    // A change of the private and the protected agent, then of the public one: nina's stream
    // carries only the last (events keep their order).
    for id in [&private, &protected, &public] {
        let r = olga
            .patch_agent(id, json!({ "labels": { "round": "2" } }))
            .await;
        assert_eq!(r.status(), 200);
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (kind, data) = events.next(deadline).await;
        let id = data["id"]
            .as_str()
            .or(data["agentId"].as_str())
            .unwrap_or("");
        assert!(
            id != private && id != protected,
            "{kind} of a hidden agent: {data}"
        );
        if kind == "agent" && id == public && data["labels"]["round"] == "2" {
            break;
        }
    }
    // Joining shows the agent in the list at once.
    let (status, v) = olga
        .call(
            "POST",
            &format!("/api/v1/agents/{protected}/access-token"),
            None,
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = nina
        .call(
            "POST",
            &format!("/api/v1/agents/{protected}/join"),
            Some(json!({ "accessToken": v["accessToken"] })),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed(nina.get_json("/api/v1/agents").await).len(), 2);
}

/// A streaming exec of `c` on agent `id` that prints `tick` every tenth of a second.
async fn ticking(
    c: &Client,
    id: &str,
) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin {
    use futures::StreamExt;
    let r = c
        .http
        .post(format!("{}/api/v1/agents/{id}/exec", c.base))
        .bearer_auth(&c.token)
        .header("accept", "application/x-ndjson")
        .json(&json!({ "command": ["sh", "-c", "while :; do echo tick; sleep 0.1; done"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let first = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap();
    assert!(first.is_some_and(|b| b.is_ok()), "the exec streams");
    stream
}

/// Waits (at most a second from now) for `stream` to run out.
async fn ends_within_a_second(
    mut stream: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    what: &str,
) {
    use futures::StreamExt;
    let within = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match tokio::time::timeout_at(within, stream.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(_) => return,
            Err(_) => panic!("{what} was still open a second later"),
        }
    }
}

/// Losing access ends what one streams, as a revoked credential does: an outsider's streams
/// on a public agent made private, a removed member's; a member who keeps access keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_access_to_an_agent_ends_ones_streams_there_within_a_second() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let nina = member(&s, "nina").await;
    let nils = member(&s, "nils").await;
    let id = olga
        .running_agent(json!({ "name": "square", "access": "public" }))
        .await;
    let (status, v) = olga
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/members"),
            Some(json!({ "user": "nils", "role": "user" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let nina_exec = ticking(&nina, &id).await;
    let mut nils_exec = ticking(&nils, &id).await;
    let mut req = s
        .ws_url(&format!("/api/v1/agents/{id}/terminal?cols=80&rows=24"))
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", nina.token).parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    crate::common::send_keys(&mut ws, "echo up-'and'-running\r").await;
    crate::common::read_until(&mut ws, "up-and-running").await;

    let r = olga.patch_agent(&id, json!({ "access": "private" })).await;
    assert_eq!(r.status(), 200);
    ends_within_a_second(nina_exec, "an outsider's exec on an agent made private").await;
    let within = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match tokio::time::timeout_at(within, ws.next()).await {
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("an outsider's terminal was still open a second later"),
        }
    }
    // Nils is a member: his exec goes on (ticks keep coming after the change).
    for _ in 0..3 {
        let next = tokio::time::timeout(DEADLINE, nils_exec.next())
            .await
            .unwrap();
        assert!(next.is_some_and(|b| b.is_ok()), "a member's exec goes on");
    }
    let (status, _) = olga
        .call("DELETE", &format!("/api/v1/agents/{id}/members/nils"), None)
        .await;
    assert_eq!(status, 204);
    ends_within_a_second(nils_exec, "a removed member's exec").await;
    // And their next requests are refused as for anyone without access.
    let (status, _) = nils
        .call("GET", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(status, 404);
}

/// Secrets are the admins': a member grants none the preset does not (nor adds one to an agent
/// of theirs); an admin does; anyone who may change the agent drops one.
#[tokio::test]
async fn only_admins_grant_secrets() {
    let s = TestServer::start().await;
    let (status, v) = s
        .call(
            "PUT",
            "/api/v1/secrets/API_KEY",
            Some(json!({"value": "sk-value", "hosts": ["api.test"]})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let olga = member(&s, "olga").await;
    let (status, v) = olga
        .call(
            "POST",
            "/api/v1/agents",
            Some(json!({"name": "mine", "secrets": ["API_KEY"]})),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("only admins grant secrets"));
    let id = olga.create_agent("mine").await;
    let r = olga.patch_agent(&id, json!({"secrets": ["API_KEY"]})).await;
    assert_eq!(r.status(), 403);
    let r = s.patch_agent(&id, json!({"secrets": ["API_KEY"]})).await;
    assert_eq!(r.status(), 200, "an admin grants");
    let r = olga.patch_agent(&id, json!({"secrets": []})).await;
    assert_eq!(r.status(), 200, "the owner drops it");
}

/// A command waiting for approval on a private agent is as hidden as the agent: an outsider's
/// list leaves it out and naming it is `404`, as for a token limited to another agent; the
/// owner and the member who asked see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_agents_approvals_are_hidden_from_outsiders() {
    let s = TestServer::start().await;
    let olga = member(&s, "olga").await;
    let nina = member(&s, "nina").await;
    let nils = member(&s, "nils").await;
    let id = olga
        .create_agent(json!({ "name": "vault", "approvals": { "commands": "always" } }))
        .await;
    olga.wait_state(&id, "running").await;
    let other = olga.create_agent("elsewhere").await;
    let (status, v) = olga
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/members"),
            Some(json!({ "user": "nina", "role": "user" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let held = {
        let nina = nina.clone();
        let path = format!("/api/v1/agents/{id}/exec");
        tokio::spawn(async move {
            nina.call(
                "POST",
                &path,
                Some(json!({ "command": ["echo", "waiting"] })),
            )
            .await
        })
    };
    let aid = olga.pending_command("echo waiting").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let limited = {
        let (status, v) = olga
            .call(
                "POST",
                "/api/v1/tokens",
                Some(json!({ "name": "one", "scopes": ["agents:read", "approvals:answer"], "agents": [other] })),
            )
            .await;
        assert_eq!(status, 201, "{v}");
        Client {
            token: v["token"].as_str().unwrap().to_string(),
            ..s.api.clone()
        }
    };
    let one = format!("/api/v1/approvals/{aid}");
    for (who, client) in [
        ("an outsider", &nils),
        ("a token of another agent", &limited),
    ] {
        let list = client.get_json("/api/v1/approvals").await;
        assert!(
            !list.to_string().contains(&aid),
            "{who} lists the private agent's approval: {list}"
        );
        let (status, _) = client.call("GET", &one, None).await;
        assert_eq!(status, 404, "{who} reads it");
        let (status, _) = client.answer_approval(&aid, "allow").await;
        assert_eq!(status, 404, "{who} answers it");
    }
    for client in [&olga, &nina] {
        let (status, v) = client.call("GET", &one, None).await;
        assert_eq!((status, v["id"].as_str()), (200, Some(aid.as_str())), "{v}");
    }
    let (status, v) = olga.answer_approval(&aid, "reject").await;
    assert_eq!(status, 200, "{v}");
    let (status, _) = held.await.unwrap();
    assert_eq!(status, 403);
}
