//! Every route of the OpenAPI document the server serves × every kind of credential → the
//! status the access rules give. The rules are written out here, route by route, apart from the
//! server's own table: a route the document gains without a rule here fails the test.

use serde_json::{json, Value};

use super::{sign_in, token, user};
use crate::common::TestServer;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Need {
    Public,
    SignedIn,
    Scope(&'static str),
}
use Need::{Public, Scope, SignedIn};

pub(super) const READ: Need = Scope("agents:read");
pub(super) const WRITE: Need = Scope("agents:write");
pub(super) const USE: Need = Scope("agents:use");
const ANSWER: Need = Scope("approvals:answer");
const ADMIN: Need = Scope("admin");
const SCOPES: [&str; 5] = [
    "agents:read",
    "agents:write",
    "agents:use",
    "approvals:answer",
    "admin",
];

/// What each route needs: the product's access model, one line a route.
pub(super) fn rule(method: &str, path: &str) -> Option<Need> {
    let need = match (method, path) {
        ("GET", "/api/v1/health") => Public,
        ("GET", "/api/v1/limits" | "/api/v1/presets") => READ,
        ("GET", "/api/v1/pool") => SignedIn,
        ("POST", "/api/v1/admin/reload") => ADMIN,
        ("POST" | "GET", "/api/v1/session") => Public,
        ("DELETE", "/api/v1/session") => SignedIn,
        ("GET", "/api/v1/me") => SignedIn,
        ("GET" | "POST", "/api/v1/users") => ADMIN,
        ("PATCH" | "DELETE", "/api/v1/users/{id}") => ADMIN,
        ("GET", "/api/v1/secrets") => ADMIN,
        ("PUT" | "DELETE", "/api/v1/secrets/{name}") => ADMIN,
        ("GET" | "POST", "/api/v1/tokens") => SignedIn,
        ("DELETE", "/api/v1/tokens/{id}") => SignedIn,
        ("GET", "/api/v1/audit") => READ,
        ("GET", "/api/v1/events") => READ,
        ("GET", "/api/v1/agents") => READ,
        ("POST", "/api/v1/agents") => WRITE,
        ("GET", "/api/v1/agents/{id}") => READ,
        ("PATCH" | "DELETE", "/api/v1/agents/{id}") => WRITE,
        ("POST", "/api/v1/agents/{id}/start") => WRITE,
        ("POST", "/api/v1/agents/{id}/stop") => WRITE,
        ("POST", "/api/v1/agents/{id}/pause") => WRITE,
        ("POST", "/api/v1/agents/{id}/rebuild") => WRITE,
        ("POST", "/api/v1/agents/{id}/setup") => WRITE,
        ("POST", "/api/v1/agents/{id}/keep-alive") => USE,
        ("GET", "/api/v1/agents/{id}/egress/log") => READ,
        ("GET", "/api/v1/agents/{id}/members") => READ,
        ("POST", "/api/v1/agents/{id}/members") => WRITE,
        ("DELETE", "/api/v1/agents/{id}/members/{user}") => WRITE,
        ("POST", "/api/v1/agents/{id}/access-token") => WRITE,
        ("POST", "/api/v1/agents/{id}/join") => USE,
        ("POST", "/api/v1/agents/{id}/exec") => USE,
        ("POST", "/api/v1/agents/{id}/code") => USE,
        ("GET" | "POST", "/api/v1/agents/{id}/code/contexts") => USE,
        ("DELETE", "/api/v1/agents/{id}/code/contexts/{cid}") => USE,
        ("POST", "/api/v1/agents/{id}/code/contexts/{cid}/restart") => USE,
        ("GET" | "POST", "/api/v1/agents/{id}/processes") => USE,
        ("GET" | "DELETE", "/api/v1/agents/{id}/processes/{pid}") => USE,
        ("GET", "/api/v1/agents/{id}/processes/{pid}/output") => USE,
        ("POST", "/api/v1/agents/{id}/processes/{pid}/stdin") => USE,
        ("POST", "/api/v1/agents/{id}/processes/{pid}/signal") => USE,
        ("GET", "/api/v1/agents/{id}/processes/{pid}/wait") => USE,
        ("GET" | "POST", "/api/v1/agents/{id}/sessions") => USE,
        ("GET" | "PATCH" | "DELETE", "/api/v1/agents/{id}/sessions/{sid}") => USE,
        ("POST", "/api/v1/agents/{id}/sessions/{sid}/prompt") => USE,
        ("POST", "/api/v1/agents/{id}/sessions/{sid}/cancel") => USE,
        ("GET", "/api/v1/agents/{id}/sessions/{sid}/events") => USE,
        ("GET", "/api/v1/agents/{id}/ports") => USE,
        ("GET" | "POST", "/api/v1/agents/{id}/previews") => USE,
        ("DELETE", "/api/v1/agents/{id}/previews/{pid}") => USE,
        ("GET", "/api/v1/previews/{pid}/open") => Public,
        ("GET", "/api/v1/approvals") => READ,
        ("GET", "/api/v1/approvals/{aid}") => READ,
        ("POST", "/api/v1/approvals/{aid}") => ANSWER,
        ("GET", "/api/v1/agents/{id}/terminal") => USE,
        ("GET", "/api/v1/agents/{id}/terminals") => USE,
        ("DELETE", "/api/v1/agents/{id}/terminals/{sid}") => USE,
        ("GET", "/api/v1/agents/{id}/fs/list") => USE,
        ("GET", "/api/v1/agents/{id}/fs/read") => USE,
        ("PUT", "/api/v1/agents/{id}/fs/write") => USE,
        ("POST", "/api/v1/agents/{id}/fs/mkdir") => USE,
        ("DELETE", "/api/v1/agents/{id}/fs/remove") => USE,
        ("POST", "/api/v1/agents/{id}/fs/rename") => USE,
        ("GET", "/api/v1/agents/{id}/fs/stat") => USE,
        ("GET", "/api/v1/agents/{id}/fs/exists") => USE,
        ("GET", "/api/v1/agents/{id}/fs/watch") => USE,
        ("POST", "/api/v1/agents/{id}/fs/write-files") => USE,
        _ => return None,
    };
    Some(need)
}

#[derive(Debug, Clone)]
enum Credential {
    Bearer(String),
    Cookie(String),
    Nothing,
}

/// What a credential should get on a route.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Past the access rules: whatever the handler answers, never their refusals.
    Passes,
    Unauthorized,
    /// 403 for a missing scope.
    Forbidden,
    /// 404: the agent does not exist for this credential.
    Hidden,
}

struct Who {
    label: String,
    credential: Credential,
    /// What it gets on a route that needs `need`, on an agent route or not.
    expect: Box<dyn Fn(Need, bool) -> Expect>,
}

/// A request as the matrix sends it: every path parameter filled, a JSON object as the body.
async fn send(s: &TestServer, who: &Who, method: &str, path: &str) -> (u16, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = s.http.request(m, s.url(path));
    req = match &who.credential {
        Credential::Bearer(t) => req.bearer_auth(t),
        // A browser's page of this server: the Origin it sends.
        Credential::Cookie(c) => req
            .header("cookie", c)
            .header("origin", format!("http://{}", s.api_addr)),
        Credential::Nothing => req,
    };
    if matches!(method, "POST" | "PUT" | "PATCH") {
        req = req.json(&json!({}));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    // An event stream would not end: only a refusal's body is read.
    let body = if status >= 400 {
        r.json().await.unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    (status, body)
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn every_route_answers_every_credential_as_the_access_rules_say() {
    let s = TestServer::start().await;
    let mine = s.create_agent("mine").await;
    s.create_agent("theirs").await;
    user(&s, "mia", "member", Some("mia's password")).await;
    let member = sign_in(&s, "mia", "mia's password").await;

    let mut who: Vec<Who> = vec![
        Who {
            label: "the admin token".into(),
            credential: Credential::Bearer(s.token.clone()),
            expect: Box::new(|_, _| Expect::Passes),
        },
        Who {
            label: "a member's web session".into(),
            credential: Credential::Cookie(member),
            expect: Box::new(|need, _| {
                if need == ADMIN {
                    Expect::Forbidden
                } else {
                    Expect::Passes
                }
            }),
        },
    ];
    for missing in SCOPES {
        let scopes: Vec<&str> = SCOPES.into_iter().filter(|s| *s != missing).collect();
        let (t, _) = token(
            &s,
            json!({ "name": format!("without-{missing}"), "scopes": scopes }),
        )
        .await;
        who.push(Who {
            label: format!("a token without {missing}"),
            credential: Credential::Bearer(t),
            expect: Box::new(move |need, _| {
                if need == Scope(missing) {
                    Expect::Forbidden
                } else {
                    Expect::Passes
                }
            }),
        });
    }
    // Every scope but admin, which a token limited to some agents cannot have.
    let (limited, _) = token(
        &s,
        json!({ "name": "theirs-only", "scopes": &SCOPES[..4], "agents": ["theirs"] }),
    )
    .await;
    who.push(Who {
        label: "a token limited to another agent".into(),
        credential: Credential::Bearer(limited),
        expect: Box::new(|need, agent_route| {
            if agent_route {
                Expect::Hidden
            } else if need == ADMIN {
                Expect::Forbidden
            } else {
                Expect::Passes
            }
        }),
    });
    let (revoked, id) = token(&s, json!({ "name": "revoked", "scopes": SCOPES })).await;
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/tokens/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let (expired, id) = token(
        &s,
        json!({ "name": "expired", "scopes": SCOPES, "expiresInDays": 1 }),
    )
    .await;
    // A day is long to wait: the token's end is moved into the past in the database, which a
    // restart reads.
    let db = s.dir.path().join("agenthold.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE api_tokens SET expires_at = '2020-01-01T00:00:00.000Z' WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let s = s.restart_with(|_| {}).await;
    for (label, t) in [("an expired token", expired), ("a revoked token", revoked)] {
        who.push(Who {
            label: label.into(),
            credential: Credential::Bearer(t),
            expect: Box::new(|_, _| Expect::Unauthorized),
        });
    }
    who.push(Who {
        label: "no credential".into(),
        credential: Credential::Nothing,
        expect: Box::new(|_, _| Expect::Unauthorized),
    });

    let doc = s.get_json("/api/v1/openapi.json").await;
    let mut routes: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let m = method.to_uppercase();
            if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m.as_str()) {
                routes.push((m, path.clone()));
            }
        }
    }
    assert!(
        routes.len() > 50,
        "only {} routes in the document",
        routes.len()
    );
    // Signing out ends the member's session: last.
    routes.sort_by_key(|(m, p)| (m == "DELETE" && p == "/api/v1/session", p.clone()));
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (method, path) in &routes {
        let need = rule(method, path)
            .unwrap_or_else(|| panic!("{method} {path} has no access rule in this test: add one"));
        if need == Public {
            continue;
        }
        let agent_route = path.starts_with("/api/v1/agents/{id}");
        for w in &who {
            let expect = (w.expect)(need, agent_route);
            // What passes is sent to an agent that does not exist, so that nothing is changed
            // (the handler answers 404); what is hidden, to an agent that does.
            let agent = if expect == Expect::Hidden {
                &mine
            } else {
                "nosuchagent1"
            };
            let url = path
                .replace("{id}", agent)
                .replace("{pid}", "nosuch")
                .replace("{sid}", "nosuch")
                .replace("{aid}", "nosuch")
                .replace("{user}", "nosuch");
            let (status, body) = send(&s, w, method, &url).await;
            let msg = message(&body);
            let ok = match expect {
                Expect::Passes => {
                    status != 401 && !(status == 403 && msg.contains("does not have the scope"))
                }
                Expect::Unauthorized => status == 401,
                Expect::Forbidden => status == 403 && msg.contains("does not have the scope"),
                Expect::Hidden => {
                    status == 404 && msg == format!("there is no agent with id {mine}")
                }
            };
            checked += 1;
            if !ok {
                wrong.push(format!(
                    "{method} {path} with {}: expected {expect:?}, got {status} {body}",
                    w.label
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {checked}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
