//! Users: made, changed and deleted by admins; names and passwords checked; the last admin and
//! the built-in `admin` kept.

use serde_json::json;

use super::{get_as, sign_in, user};
use crate::common::TestServer;

#[tokio::test]
async fn admins_manage_users_within_the_rules() {
    let s = TestServer::start().await;
    let users = s.get_json("/api/v1/users").await;
    assert_eq!(users.as_array().unwrap().len(), 1, "{users}");
    assert_eq!(users[0]["name"], "admin");
    assert_eq!(users[0]["hasPassword"], false);

    for (body, field) in [
        (json!({ "name": "Ann", "role": "member" }), "name"),
        (json!({ "name": "", "role": "member" }), "name"),
        (json!({ "name": "a".repeat(64), "role": "member" }), "name"),
        (
            json!({ "name": "ann", "role": "member", "password": "short" }),
            "password",
        ),
        (
            json!({ "name": "ann", "role": "member", "password": "x".repeat(1025) }),
            "password",
        ),
    ] {
        let (status, v) = s.call("POST", "/api/v1/users", Some(body.clone())).await;
        assert_eq!(status, 400, "{body} → {v}");
        assert_eq!(v["error"]["field"], field, "{v}");
    }
    for body in [
        json!({ "name": "ann", "role": "owner" }),
        json!({ "name": "ann", "role": "member", "extra": 1 }),
        json!({ "role": "member" }),
    ] {
        let (status, v) = s.call("POST", "/api/v1/users", Some(body.clone())).await;
        assert_eq!(status, 400, "{body} → {v}");
    }
    let ann = user(&s, "ann", "admin", Some("ann's password")).await;
    let (status, v) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(json!({ "name": "ann", "role": "member" })),
        )
        .await;
    assert_eq!(status, 409, "{v}");

    // The built-in admin stays what it is; its password can be set.
    for body in [json!({ "role": "member" }), json!({ "name": "root" })] {
        let (status, v) = s.call("PATCH", "/api/v1/users/admin", Some(body)).await;
        assert_eq!(status, 409, "{v}");
    }
    let (status, _) = s.call("DELETE", "/api/v1/users/admin", None).await;
    assert_eq!(status, 409);
    let (status, v) = s
        .call(
            "PATCH",
            "/api/v1/users/admin",
            Some(json!({ "password": "admin's password" })),
        )
        .await;
    assert_eq!(
        (status, v["hasPassword"].clone()),
        (200, json!(true)),
        "{v}"
    );
    sign_in(&s, "admin", "admin's password").await;

    let (status, v) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{ann}"),
            Some(json!({ "role": "member" })),
        )
        .await;
    assert_eq!((status, v["role"].clone()), (200, json!("member")), "{v}");
    let (status, _) = s
        .call("PATCH", "/api/v1/users/nosuch", Some(json!({})))
        .await;
    assert_eq!(status, 404);
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/users/{ann}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/users/{ann}"), None)
        .await;
    assert_eq!(status, 404);
    let (status, v) = get_as(&s, &s.token, "/api/v1/me").await;
    assert_eq!(
        (status, v["user"]["name"].clone()),
        (200, json!("admin")),
        "{v}"
    );
}

#[tokio::test]
async fn a_deleted_or_demoted_user_loses_their_sessions_tokens_and_admin_power() {
    let s = TestServer::start().await;
    let bo = user(&s, "bo", "admin", Some("bo's password")).await;
    let cookie = sign_in(&s, "bo", "bo's password").await;
    // Bo's own token, made with Bo's session (an admin's token may have `admin`).
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", &cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&json!({ "name": "bo-ci", "scopes": ["admin", "agents:read"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let bo_token = r.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(get_as(&s, &bo_token, "/api/v1/users").await.0, 200);
    let (status, _) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{bo}"),
            Some(json!({ "role": "member" })),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        get_as(&s, &bo_token, "/api/v1/users").await.0,
        403,
        "a token never outdoes its user"
    );
    assert_eq!(get_as(&s, &bo_token, "/api/v1/agents").await.0, 200);
    let (status, _) = s.call("DELETE", &format!("/api/v1/users/{bo}"), None).await;
    assert_eq!(status, 204);
    assert_eq!(get_as(&s, &bo_token, "/api/v1/agents").await.0, 401);
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}
