//! Teams: users, API tokens and who may call what. [`matrix`] holds every route of the OpenAPI
//! document against every kind of credential; the others test signing in, users and tokens.

mod access;
mod audit;
mod cli;
mod command_approvals;
mod matrix;
mod sign_in;
mod tokens;
mod users;

use serde_json::{json, Value};

use crate::common::TestServer;

/// Makes a user (as the admin) and returns their id.
pub async fn user(s: &TestServer, name: &str, role: &str, password: Option<&str>) -> String {
    let mut body = json!({ "name": name, "role": role });
    if let Some(p) = password {
        body["password"] = json!(p);
    }
    let (status, v) = s.call("POST", "/api/v1/users", Some(body)).await;
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

/// Makes a token with the credential `auth` (a bearer token) and returns (token, id).
pub async fn token_by(s: &TestServer, auth: &str, body: Value) -> (String, String) {
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .bearer_auth(auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{body} → {v}");
    let token = v["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("aht_"), "{token}");
    (token, v["id"].as_str().unwrap().to_string())
}

/// Makes a token as the admin.
pub async fn token(s: &TestServer, body: Value) -> (String, String) {
    token_by(s, &s.token, body).await
}

/// Signs in with a name and password; the session cookie's `name=value`.
pub async fn sign_in(s: &TestServer, name: &str, password: &str) -> String {
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "name": name, "password": password }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    cookie.split(';').next().unwrap().to_string()
}

/// `GET path` with a bearer token: status and body.
pub async fn get_as(s: &TestServer, auth: &str, path: &str) -> (u16, Value) {
    let r = s
        .http
        .get(s.url(path))
        .bearer_auth(auth)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}
