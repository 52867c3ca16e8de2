//! The agent API over real HTTP: auth, validation of hostile input, errors, OpenAPI, SSE.

use crate::common::sse;
use crate::common::{expect_error, TestServer, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn health_needs_no_token_and_names_the_driver() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["driver"], "fake");
    assert!(body["version"].as_str().is_some());
}

#[tokio::test]
async fn missing_or_wrong_token_is_401() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/api/v1/agents")).send().await.unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("authorization", "Basic Zm9vOmJhcg==")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    assert_eq!(s.get("/api/v1/agents").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn the_bearer_scheme_may_be_written_in_any_case() {
    let s = TestServer::start().await;
    // RFC 9110 11.1: the scheme is case-insensitive; some clients send it in lower case.
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let r = s
            .http
            .get(s.url("/api/v1/agents"))
            .header("authorization", format!("{scheme} {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("authorization", format!("bearer wrong-{TOKEN}"))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
}

#[tokio::test]
async fn requests_from_the_sandbox_pool_are_forbidden_whatever_the_token() {
    let s = TestServer::start_with(|c| {
        c.sandbox.docker.network_pool = "127.0.0.0/8".parse().unwrap();
    })
    .await;
    for path in ["/api/v1/health", "/api/v1/agents", "/api/v1/openapi.json"] {
        let r = s.get(path).send().await.unwrap();
        expect_error(r, 403, "forbidden").await;
    }
}

#[tokio::test]
async fn bad_bodies_are_400_with_a_message() {
    let s = TestServer::start().await;
    let cases: Vec<(&str, String)> = vec![
        ("not json", "{".into()),
        ("wrong type", r#"{"name": 7}"#.into()),
        ("unknown field", r#"{"name": "a", "colour": "red"}"#.into()),
        ("missing name", "{}".into()),
        ("empty name", r#"{"name": ""}"#.into()),
        ("huge name", json!({"name": "a".repeat(10_000)}).to_string()),
        ("not dns-safe", r#"{"name": "Bad_Name"}"#.into()),
        ("negative cpus", r#"{"name": "a", "cpus": -1}"#.into()),
        ("too many cpus", r#"{"name": "a", "cpus": 1000}"#.into()),
        ("negative memory", r#"{"name": "a", "memoryMb": -5}"#.into()),
        (
            "too much memory",
            r#"{"name": "a", "memoryMb": 99999999}"#.into(),
        ),
        (
            "disk below the minimum",
            r#"{"name": "a", "diskMb": 63}"#.into(),
        ),
        (
            "disk above the maximum",
            r#"{"name": "a", "diskMb": 102401}"#.into(),
        ),
        ("negative disk", r#"{"name": "a", "diskMb": -1}"#.into()),
        (
            "idle too long",
            r#"{"name": "a", "idleMinutes": 99999999}"#.into(),
        ),
        (
            "image with spaces",
            r#"{"name": "a", "image": "debian bookworm"}"#.into(),
        ),
    ];
    for (what, body) in cases {
        let r = s
            .post("/api/v1/agents")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{what}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid", "{what}: {body}");
    }
    // The field a form should mark.
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "ok", "cpus": 99}))
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "cpus");
    // Still healthy, and nothing was created.
    let agents: Vec<Value> = serde_json::from_value(s.get_json("/api/v1/agents").await).unwrap();
    assert!(agents.is_empty());
}

#[tokio::test]
async fn unknown_agents_and_routes_are_404() {
    let s = TestServer::start().await;
    for (method, path) in [
        ("GET", "/api/v1/agents/nosuchagent"),
        ("POST", "/api/v1/agents/nosuchagent/start"),
        ("POST", "/api/v1/agents/nosuchagent/stop"),
        ("POST", "/api/v1/agents/nosuchagent/rebuild"),
        ("DELETE", "/api/v1/agents/nosuchagent"),
        ("GET", "/api/v1/agents/nosuchagent/fs/list?path=."),
        ("GET", "/api/v1/nothing-here"),
    ] {
        let r = s
            .http
            .request(method.parse().unwrap(), s.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
    }
}

#[tokio::test]
async fn names_are_unique_and_defaults_apply() {
    let s = TestServer::start().await;
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "builder"}))
        .await;
    assert_eq!(r.status(), 201);
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["state"], "creating");
    assert_eq!(a["image"], "debian:bookworm-slim");
    assert_eq!(a["cpus"], 2.0);
    assert_eq!(a["memoryMb"], 4096);
    assert_eq!(a["diskMb"], 10240);
    assert_eq!(a["idleMinutes"], 15);
    assert_eq!(a["needsRebuild"], false);
    let id = a["id"].as_str().unwrap();
    assert!(id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "builder"}))
        .await;
    expect_error(r, 409, "conflict").await;
}

#[tokio::test]
async fn changing_image_or_resources_needs_a_rebuild() {
    let s = TestServer::start().await;
    let a: Value = s
        .send("POST", "/api/v1/agents", &json!({"name": "p"}))
        .await
        .json()
        .await
        .unwrap();
    let id = a["id"].as_str().unwrap();
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"name": "q", "idleMinutes": 5}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["name"], "q");
    assert_eq!(a["idleMinutes"], 5);
    assert_eq!(a["needsRebuild"], false);
    let a: Value = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"memoryMb": 2048}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["memoryMb"], 2048);
    assert_eq!(a["needsRebuild"], true);
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"cpus": 0}),
        )
        .await;
    expect_error(r, 400, "invalid").await;

    // A larger home needs no rebuild (a start grows it); a smaller one is refused.
    let a: Value = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 20480}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["diskMb"], 20480);
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 10240}),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid", "{body}");
    assert_eq!(body["error"]["field"], "diskMb", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("only grow"),
        "{body}"
    );
}

#[tokio::test]
async fn without_a_default_disk_new_agents_have_no_limit_unless_they_ask() {
    let s = TestServer::start_with(|c| c.sandbox.default_disk_mb = 0).await;
    let l = s.get_json("/api/v1/limits").await;
    assert_eq!(l["defaultDiskMb"], Value::Null);
    assert_eq!(l["maxDiskMb"], 102400);
    let create = |body: Value| s.post("/api/v1/agents").json(&body).send();
    let a: Value = create(json!({"name": "free"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(a["diskMb"], Value::Null);
    let b: Value = create(json!({"name": "sized", "diskMb": 512}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b["diskMb"], 512);
    // A home made without a limit keeps it that way.
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{}", a["id"].as_str().unwrap()),
            &json!({"diskMb": 1024}),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "diskMb", "{body}");
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let s = TestServer::start().await;
    let doc = s.get_json("/api/v1/openapi.json").await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/health",
        "/api/v1/agents",
        "/api/v1/agents/{id}",
        "/api/v1/agents/{id}/start",
        "/api/v1/agents/{id}/stop",
        "/api/v1/agents/{id}/rebuild",
        "/api/v1/agents/{id}/exec",
        "/api/v1/agents/{id}/terminal",
        "/api/v1/agents/{id}/terminals",
        "/api/v1/agents/{id}/terminals/{sid}",
        "/api/v1/agents/{id}/fs/list",
        "/api/v1/agents/{id}/fs/read",
        "/api/v1/agents/{id}/fs/write",
        "/api/v1/agents/{id}/fs/mkdir",
        "/api/v1/agents/{id}/fs/remove",
        "/api/v1/events",
        "/api/v1/limits",
    ] {
        assert!(paths.contains_key(p), "{p} is not described");
    }
    assert!(doc["components"]["schemas"]["Agent"].is_object());
    assert!(doc["components"]["schemas"]["TerminalSession"].is_object());
    let rules = &doc["components"]["schemas"]["EgressRules"];
    assert_eq!(
        rules["properties"]["allow"]["items"]["type"], "string",
        "{rules}"
    );
    assert_eq!(rules["properties"]["allow"]["maxItems"], 256, "{rules}");
    assert!(doc["components"]["schemas"]["EgressEvent"]["properties"]["bytesDown"].is_object());
    let agent_egress = &doc["components"]["schemas"]["Agent"]["properties"]["egress"];
    assert!(
        agent_egress.to_string().contains("EgressRules"),
        "{agent_egress}"
    );
    let terminal = &paths["/api/v1/agents/{id}/terminal"]["get"]["description"];
    assert!(
        terminal
            .as_str()
            .unwrap_or_default()
            .contains("\"type\":\"redraw\""),
        "the terminal route documents its protocol: {terminal}"
    );
}

/// Every operation of the document, as (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                out.push((method.clone(), path.clone(), op.clone()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_openapi_document_states_every_status_and_constraint() {
    let s = TestServer::start_with(|c| {
        c.sandbox.max_cpus = 3.5;
        c.sandbox.max_memory_mb = 2048;
        c.sandbox.max_disk_mb = 4096;
        c.server.exec_max_timeout = Duration::from_secs(600);
    })
    .await;
    let doc = s.get_json("/api/v1/openapi.json").await;
    let error_body = json!({"$ref": "#/components/schemas/ErrorBody"});
    let mut ids = std::collections::HashSet::new();
    for (method, path, op) in operations(&doc) {
        let what = format!("{method} {path}");
        let id = op["operationId"].as_str().unwrap_or_default();
        assert!(
            ids.insert(id.to_string()),
            "{what}: operationId {id:?} twice"
        );
        let responses = op["responses"].as_object().unwrap();
        // Anyone may ask for the health; every other operation may be refused a credential.
        if path != "/api/v1/health" {
            assert!(responses.contains_key("401"), "{what} documents no 401");
        }
        assert!(responses.contains_key("403"), "{what} documents no 403");
        for (status, r) in responses {
            if status.starts_with('4') && status != "408" || status.starts_with('5') {
                assert_eq!(
                    r["content"]["application/json"]["schema"], error_body,
                    "{what} {status}"
                );
            }
        }
        if op["requestBody"]["content"]["application/json"].is_object() {
            for status in ["400", "413"] {
                assert!(
                    responses.contains_key(status),
                    "{what} documents no {status}"
                );
            }
        }
        // A parameter is where the route reads it: in the path only if the path names it.
        for p in op["parameters"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap();
            let in_path = path.contains(&format!("{{{name}}}"));
            assert_eq!(p["in"] == "path", in_path, "{what}: parameter {p}");
            if p["in"] == "query" {
                assert!(responses.contains_key("400"), "{what} documents no 400");
            }
        }
    }
    assert!(ids.len() >= 31, "{ids:?}");

    // The constraints the server checks, with this server's limits.
    let schemas = &doc["components"]["schemas"];
    for schema in ["CreateAgent", "UpdateAgent"] {
        let p = &schemas[schema]["properties"];
        assert_eq!(
            p["name"]["pattern"], "^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
            "{schema}"
        );
        assert_eq!(p["name"]["maxLength"], 63, "{schema}");
        assert_eq!(p["name"]["minLength"], 1, "{schema}");
        assert_eq!(p["image"]["maxLength"], 255, "{schema}");
        assert_eq!(p["cpus"]["exclusiveMinimum"], 0, "{schema}");
        assert_eq!(p["cpus"]["maximum"], 3.5, "{schema}");
        assert_eq!(p["memoryMb"]["minimum"], 16, "{schema}");
        assert_eq!(p["memoryMb"]["maximum"], 2048, "{schema}");
        assert_eq!(p["diskMb"]["minimum"], 64, "{schema}");
        assert_eq!(p["diskMb"]["maximum"], 4096, "{schema}");
        assert_eq!(p["idleMinutes"]["maximum"], 10080, "{schema}");
        assert_eq!(schemas[schema]["additionalProperties"], false, "{schema}");
    }
    assert_eq!(
        schemas["ExecBody"]["properties"]["timeoutMs"]["maximum"],
        600_000
    );
    let rule = &schemas["EgressRules"]["properties"]["allow"]["items"];
    assert_eq!(rule["maxLength"], 261, "{rule}");
    assert!(rule["pattern"].as_str().is_some_and(|p| p.starts_with('^')));
    let codes = &schemas["ErrorDetail"]["properties"]["code"]["enum"];
    assert!(
        codes
            .as_array()
            .is_some_and(|c| c.len() == 10 && c.contains(&json!("no_space"))),
        "{codes}"
    );
    let param = |path: &str, method: &str, name: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{method} {path} has no {name}"))
    };
    for (op, method) in [
        ("read", "get"),
        ("write", "put"),
        ("mkdir", "post"),
        ("remove", "delete"),
    ] {
        let path = param(&format!("/api/v1/agents/{{id}}/fs/{op}"), method, "path");
        assert_eq!(path["in"], "query", "{op}");
        assert_eq!(path["required"], true, "{op}");
        assert_eq!(path["schema"]["minLength"], 1, "{op}");
        assert!(path["schema"]["pattern"].is_string(), "{op}");
    }
    assert_eq!(
        param("/api/v1/agents/{id}/fs/list", "get", "path")["required"],
        false
    );
    let wait = param(
        "/api/v1/agents/{id}/processes/{pid}/wait",
        "get",
        "timeoutMs",
    );
    assert_eq!(wait["schema"]["maximum"], 600_000, "{wait}");
    let tag = &schemas["StartProcess"]["properties"]["tag"]["pattern"];
    assert_eq!(tag, "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$");

    // A created agent leads to every operation that takes its id.
    let links = doc["paths"]["/api/v1/agents"]["post"]["responses"]["201"]["links"]
        .as_object()
        .unwrap();
    for (method, path, op) in operations(&doc) {
        if path.contains("{id}") {
            let id = op["operationId"].as_str().unwrap();
            assert_eq!(
                links[id],
                json!({"operationId": id, "parameters": {"id": "$response.body#/id"}}),
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn bodies_are_json_objects_and_whole_numbers_may_be_written_with_a_zero_fraction() {
    let s = TestServer::start().await;
    let id = s.running_agent("whole").await;
    // serde would read a struct from an array; the schema says object.
    for body in [r#"[null, null]"#, r#"["x"]"#, r#"{"egress": [[], []]}"#] {
        let r = s
            .patch(&format!("/api/v1/agents/{id}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }
    let r = s
        .post("/api/v1/agents")
        .header("content-type", "application/json")
        .body(r#"["name"]"#)
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;
    // JSON Schema's `integer` is a value: 1024.0 is one.
    let a: Value = s
        .patch(&format!("/api/v1/agents/{id}"))
        .header("content-type", "application/json")
        .body(r#"{"memoryMb": 1024.0, "idleMinutes": 0.0}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(a["memoryMb"], 1024, "{a}");
    assert_eq!(a["idleMinutes"], 0, "{a}");
    for body in [r#"{"memoryMb": 1024.5}"#, r#"{"idleMinutes": -1.0}"#] {
        let r = s
            .patch(&format!("/api/v1/agents/{id}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }
    // Rules are ASCII: a rule padded with other white space is refused (its length limit
    // counts bytes, which no schema can state).
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"egress": {"allow": ["\u{3000}pypi.org"]}}),
        )
        .await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("allow[0]"), "{msg}");
    let a: Value = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"egress": {"allow": [" pypi.org\t"]}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["egress"]["allow"], json!(["pypi.org"]), "{a}");
    // Images are printable ASCII without spaces, as the schema's pattern says.
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"image": "débian"}),
        )
        .await;
    expect_error(r, 400, "invalid").await;
}

/// Signs in with `token` and returns the whole `Set-Cookie` header.
async fn sign_in_cookie(s: &TestServer, token: &str) -> String {
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    r.headers()["set-cookie"].to_str().unwrap().to_string()
}

/// Signs in with `token` and returns the `name=value` of the session cookie.
async fn sign_in(s: &TestServer, token: &str) -> String {
    let cookie = sign_in_cookie(s, token).await;
    cookie.split(';').next().unwrap().to_string()
}

async fn status_with_cookie(s: &TestServer, pair: &str) -> u16 {
    s.http
        .get(s.url("/api/v1/agents"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn web_sessions_survive_a_restart_but_not_a_new_admin_token_or_sign_out() {
    let s = TestServer::start().await;
    let kept = sign_in(&s, TOKEN).await;
    let signed_out = sign_in(&s, TOKEN).await;
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &signed_out)
        // As the web UI's own page sends it (see the same-origin tests below).
        .header("origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    let s = s.restart_with(|_| {}).await;
    assert_eq!(
        status_with_cookie(&s, &kept).await,
        200,
        "kept across a restart"
    );
    assert_eq!(
        status_with_cookie(&s, &signed_out).await,
        401,
        "a signed-out session stays out after a restart"
    );

    // The operator replaces the admin token: every session of the old one ends, and going
    // back to the old token does not revive them.
    let s = s
        .restart_with(|c| c.server.admin_token = Some("another-admin-token-0123456789".into()))
        .await;
    assert_eq!(status_with_cookie(&s, &kept).await, 401);
    let s = s.restart_with(|_| {}).await;
    assert_eq!(status_with_cookie(&s, &kept).await, 401);
    assert_eq!(status_with_cookie(&s, &sign_in(&s, TOKEN).await).await, 200);
}

#[tokio::test]
async fn a_web_session_ends_after_its_time() {
    let ttl = |c: &mut agenthold::config::Config| c.server.session_ttl = Duration::from_secs(3);
    let s = TestServer::start_with(ttl).await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(
        cookie.contains("Max-Age=3;"),
        "the browser is told too: {cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    assert_eq!(status_with_cookie(&s, &pair).await, 200);
    crate::common::wait_for("the session to end", || async {
        status_with_cookie(&s, &pair).await == 401
    })
    .await;
    // Nor does a restart bring it back.
    let s = s.restart_with(ttl).await;
    assert_eq!(status_with_cookie(&s, &pair).await, 401);
}

#[tokio::test]
async fn web_session_cookie_signs_in_and_out() {
    let s = TestServer::start().await;
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({"token": "nope"}))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &pair)
        .header("origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn limits_tell_clients_what_the_server_allows() {
    let s = TestServer::start_with(|c| c.server.max_file_mb = 7).await;
    let l = s.get_json("/api/v1/limits").await;
    assert_eq!(l["maxFileMb"], 7);
    assert_eq!(l["maxCpus"], 8.0);
    assert_eq!(l["defaultImage"], "debian:bookworm-slim");
    assert_eq!(l["defaultDiskMb"], 10240);
    assert_eq!(l["maxDiskMb"], 102400);
    assert_eq!(l["tmpMb"], 1024);
    assert_eq!(
        l["rootfsMb"],
        Value::Null,
        "the fake driver limits no layer"
    );
    let r = s.http.get(s.url("/api/v1/limits")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_every_state_change_and_the_deletion() {
    use futures::StreamExt;
    let s = TestServer::start().await;
    let r = s.get("/api/v1/events").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = r.bytes_stream();
    let id = s.running_agent("watched").await;
    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let mut text = String::new();
    let mut states = Vec::new();
    let deadline = tokio::time::Instant::now() + crate::common::DEADLINE;
    while !text.contains("event: deleted") {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("no deleted event")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    for block in text.split("\n\n") {
        if block.contains("event: agent") {
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let a: Value = serde_json::from_str(data).unwrap();
            if a["id"] == id.as_str() {
                states.push(a["state"].as_str().unwrap().to_string());
            }
        }
    }
    for want in ["creating", "starting", "running", "destroying"] {
        assert!(
            states.iter().any(|s| s == want),
            "{want} missing from {states:?}"
        );
    }
    assert!(text.contains(&format!("{{\"id\":\"{id}\"}}")), "{text}");
}

#[tokio::test]
async fn the_web_ui_is_served_and_api_paths_never_fall_back_to_it() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let r = s.http.get(s.url("/agents/some-page")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = s.get("/api/v1/not-a-route").send().await.unwrap();
    expect_error(r, 404, "not_found").await;
}

/// The fake driver pretends to pull images under `pull.invalid/` (see `driver::fake`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pulls_are_announced_as_pull_events_and_shown_on_the_agent() {
    let s = TestServer::start().await;
    let mut events = sse::Events::open(&s).await;
    let image = "pull.invalid/tools:1";
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "pulling", "image": image}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    assert!(
        created.get("pull").is_some(),
        "pull is always present: {created}"
    );

    let first = events
        .about_until(&id, |kind, d| {
            kind == "pull" && d["percent"].as_u64() > Some(0)
        })
        .await;
    let agent = s.agent(&id).await;
    assert_eq!(agent["state"], "creating");
    assert_eq!(agent["pull"]["status"], "pulling", "{agent}");
    assert_eq!(agent["pull"]["image"], image);
    let rest = events
        .about_until(&id, |kind, d| kind == "agent" && d["state"] == "running")
        .await;
    let all: Vec<_> = first.into_iter().chain(rest).collect();
    let pulls = sse::pulls(&all);
    let keys: Vec<&str> = pulls[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec![
        "bytesDone",
        "bytesTotal",
        "error",
        "id",
        "image",
        "layersDone",
        "layersTotal",
        "percent",
        "status",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(pulls[0]["status"], "pulling");
    assert_eq!(pulls[0]["percent"], 0);
    let done = pulls.last().unwrap();
    assert_eq!(done["status"], "done");
    assert_eq!(done["percent"], 100);
    assert_eq!(done["layersDone"], 3);
    assert_eq!(done["bytesDone"], done["bytesTotal"]);
    assert!(pulls.len() >= 3, "{pulls:?}");
    for pair in pulls.windows(2) {
        assert!(
            pair[1]["percent"].as_u64() >= pair[0]["percent"].as_u64(),
            "{pulls:?}"
        );
    }
    assert_eq!(s.agent(&id).await["pull"], Value::Null);

    // The image is here now: another agent made from it pulls nothing.
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "second", "image": image}),
        )
        .await;
    let second: Value = r.json().await.unwrap();
    let second = second["id"].as_str().unwrap().to_string();
    let seen = events
        .about_until(&second, |kind, d| {
            kind == "agent" && d["state"] == "running"
        })
        .await;
    assert!(sse::pulls(&seen).is_empty(), "{seen:?}");

    // A missing image: `error` with the reason, and a `failed` pull event carrying it.
    let missing = "pull.invalid/missing:1";
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "missing", "image": missing}),
        )
        .await;
    let broken: Value = r.json().await.unwrap();
    let broken = broken["id"].as_str().unwrap().to_string();
    let seen = events
        .about_until(&broken, |kind, d| kind == "agent" && d["state"] == "error")
        .await;
    let pulls = sse::pulls(&seen);
    let failed = pulls.last().unwrap();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["image"], missing);
    let agent = s.agent(&broken).await;
    let error = agent["error"].as_str().unwrap();
    assert!(error.contains(missing), "{error}");
    assert!(error.contains(failed["error"].as_str().unwrap()), "{error}");
    assert!(error.contains("no such image or tag"), "{error}");
}

/// Another port on the same host: the same site for `SameSite`, another origin.
const OTHER_PORT: &str = "http://127.0.0.1:28555";

/// A form post as a browser sends it from some page: the cookie and, unless `origin` is `None`,
/// that page's `Origin`; `extra` adds headers.
async fn cookie_post(
    s: &TestServer,
    path: &str,
    pair: &str,
    origin: Option<&str>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut r = s
        .http
        .post(s.url(path))
        .header("cookie", pair)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x=1");
    if let Some(o) = origin {
        r = r.header("origin", o);
    }
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

async fn home_names(s: &TestServer, id: &str) -> Vec<String> {
    let list: Vec<Value> = serde_json::from_value(
        s.get_json(&format!("/api/v1/agents/{id}/fs/list?path=."))
            .await,
    )
    .unwrap();
    list.iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// A page's `Origin` (or none) and the other headers its browser adds.
type Page = (
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
);

/// Every way a page that is not the server's own could send the cookie: another port of the
/// host, another site, an opaque origin, no Origin at all, a same-site claim.
const NOT_OURS: &[Page] = &[
    (Some(OTHER_PORT), &[]),
    (Some("https://evil.example"), &[]),
    (Some("null"), &[]),
    (None, &[]),
    (None, &[("sec-fetch-site", "same-site")]),
    // Sec-Fetch-Site stands in only for a missing Origin, never against a foreign one.
    (Some(OTHER_PORT), &[("sec-fetch-site", "same-origin")]),
];

async fn refused(r: reqwest::Response, what: &str) {
    let msg = expect_error(r, 403, "forbidden").await;
    assert!(
        msg.contains("server.public_url") && msg.contains("Origin"),
        "{what}: the refusal says how to fix it: {msg}"
    );
}

#[tokio::test]
async fn cookie_requests_that_change_things_must_come_from_the_servers_own_origin() {
    let s = TestServer::start().await;
    let id = s.running_agent("csrf").await;
    let pair = sign_in(&s, TOKEN).await;
    let stop = format!("/api/v1/agents/{id}/stop");
    let start = format!("/api/v1/agents/{id}/start");
    let mkdir = format!("/api/v1/agents/{id}/fs/mkdir?path=pwned");

    for (origin, extra) in NOT_OURS {
        let what = format!("{origin:?} {extra:?}");
        refused(cookie_post(&s, &stop, &pair, *origin, extra).await, &what).await;
        refused(cookie_post(&s, &mkdir, &pair, *origin, extra).await, &what).await;
    }
    let r = cookie_post(&s, &stop, &pair, Some(OTHER_PORT), &[]).await;
    let msg = expect_error(r, 403, "forbidden").await;
    assert!(
        msg.contains(OTHER_PORT) && msg.contains(&s.base),
        "names both origins: {msg}"
    );
    assert_eq!(s.state(&id).await, "running", "no stop got through");
    assert!(!home_names(&s, &id).await.contains(&"pwned".to_string()));

    let r = s.post(&stop).send().await.unwrap();
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "sleeping").await;
    for (origin, extra) in NOT_OURS {
        let what = format!("{origin:?} {extra:?}");
        refused(cookie_post(&s, &start, &pair, *origin, extra).await, &what).await;
    }
    assert_eq!(s.state(&id).await, "sleeping", "no start got through");
    // Nor may another page sign the browser out.
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &pair)
        .header("origin", OTHER_PORT)
        .send()
        .await
        .unwrap();
    refused(r, "sign-out").await;
    // Reading needs no Origin (another origin's page cannot read the answer).
    assert_eq!(status_with_cookie(&s, &pair).await, 200);

    // The server's own pages go on working: the Origin it is reached at (as the web UI sends
    // it), or a browser's same-origin word when there is no Origin.
    let own = Some(s.base.as_str());
    let r = cookie_post(&s, &start, &pair, own, &[]).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    s.wait_state(&id, "running").await;
    let r = cookie_post(
        &s,
        &mkdir,
        &pair,
        None,
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    assert!(home_names(&s, &id).await.contains(&"pwned".to_string()));
    let r = cookie_post(&s, &stop, &pair, own, &[]).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    s.wait_state(&id, "sleeping").await;
}

#[tokio::test]
async fn bearer_requests_need_no_origin() {
    let s = TestServer::start().await;
    let id = s.running_agent("bearer").await;
    let mkdir = format!("/api/v1/agents/{id}/fs/mkdir?path=made");
    // A program sends no Origin; a foreign one does not matter either, since no page can
    // set Authorization on a request to us without a CORS grant this server never gives.
    let r = s.post(&mkdir).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let r = s
        .post(&mkdir)
        .header("origin", OTHER_PORT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // The token wins over a cookie that comes with it.
    let pair = sign_in(&s, TOKEN).await;
    let r = s
        .post(&format!("/api/v1/agents/{id}/stop"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "sleeping").await;
}

/// Opens the terminal WebSocket with the session cookie and `origin`.
async fn cookie_terminal(
    s: &TestServer,
    id: &str,
    pair: &str,
    origin: Option<&str>,
) -> Result<crate::common::Ws, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?cols=80&rows=24"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("cookie", pair.parse().unwrap());
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_websockets_with_the_cookie_must_come_from_the_servers_own_origin() {
    use tokio_tungstenite::tungstenite::Error;
    let s = TestServer::start().await;
    let id = s.running_agent("wsorigin").await;
    let pair = sign_in(&s, TOKEN).await;
    for origin in [
        Some("https://evil.example"),
        Some("null"),
        Some(OTHER_PORT),
        None,
    ] {
        match cookie_terminal(&s, &id, &pair, origin).await {
            Err(Error::Http(resp)) => {
                assert_eq!(resp.status(), 403, "{origin:?}");
                let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
                assert_eq!(body["error"]["code"], "forbidden", "{body}");
                let msg = body["error"]["message"].as_str().unwrap();
                assert!(msg.contains("server.public_url"), "{msg}");
            }
            Err(e) => panic!("{origin:?}: expected a 403, got {e}"),
            Ok(_) => panic!("{origin:?}: a shell was handed to another origin"),
        }
    }
    assert!(
        serde_json::from_value::<Vec<Value>>(
            s.get_json(&format!("/api/v1/agents/{id}/terminals")).await
        )
        .unwrap()
        .is_empty(),
        "no session was started"
    );

    let mut ws = cookie_terminal(&s, &id, &pair, Some(&s.base))
        .await
        .expect("the server's own page gets its terminal");
    crate::common::send_keys(&mut ws, "echo own-'origin'\r").await;
    crate::common::read_until(&mut ws, "own-origin").await;
    // And a program with the token, which sends no Origin, as before.
    let mut ws = s.terminal(&id, 80, 24).await;
    crate::common::send_keys(&mut ws, "echo by-'token'\r").await;
    crate::common::read_until(&mut ws, "by-token").await;
}

#[tokio::test]
async fn public_url_is_the_only_own_origin_and_https_makes_the_cookie_secure() {
    let s = TestServer::start_with(|c| {
        c.server.public_url =
            agenthold::config::WebOrigin::parse_public_url("https://agents.example.com").ok();
    })
    .await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(cookie.contains("; Secure"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let path = "/api/v1/agents";
    let create = |origin: &'static str| {
        s.http
            .post(s.url(path))
            .header("cookie", &pair)
            .header("origin", origin)
            .json(&json!({"name": origin.len().to_string()}))
            .send()
    };
    // The address the request reached is not enough once the operator named the public one.
    refused(create("http://127.0.0.1:1").await.unwrap(), "host").await;
    let r = s
        .http
        .post(s.url(path))
        .header("cookie", &pair)
        .header("origin", &s.base)
        .json(&json!({"name": "by-host"}))
        .send()
        .await
        .unwrap();
    refused(r, "the Host's own origin").await;
    refused(create("http://agents.example.com").await.unwrap(), "http").await;
    let r = create("https://agents.example.com").await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // Signing out clears the cookie with the same attributes.
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &pair)
        .header("origin", "https://agents.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("Max-Age=0") && cleared.contains("Secure"),
        "{cleared}"
    );
}

#[tokio::test]
async fn only_a_trusted_proxy_can_say_the_browser_uses_https() {
    let sign_in_via = |s: &TestServer, proto: Option<&'static str>| {
        let mut r = s
            .http
            .post(s.url("/api/v1/session"))
            .json(&json!({ "token": TOKEN }));
        if let Some(p) = proto {
            r = r.header("x-forwarded-proto", p);
        }
        r.send()
    };
    let set_cookie = |r: reqwest::Response| {
        assert_eq!(r.status(), 204);
        r.headers()["set-cookie"].to_str().unwrap().to_string()
    };

    // Plain http, as on a laptop: no Secure, or the browser would never send the cookie back.
    let s = TestServer::start().await;
    let plain = set_cookie(sign_in_via(&s, None).await.unwrap());
    assert!(!plain.contains("Secure"), "{plain}");
    // Anyone may send the header; without trusted proxies nobody is believed.
    let claimed = set_cookie(sign_in_via(&s, Some("https")).await.unwrap());
    assert!(!claimed.contains("Secure"), "{claimed}");

    let s = s
        .restart_with(|c| c.server.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()])
        .await;
    let proxied = set_cookie(sign_in_via(&s, Some("https")).await.unwrap());
    assert!(proxied.contains("; Secure"), "{proxied}");
    let proxied_http = set_cookie(sign_in_via(&s, Some("http")).await.unwrap());
    assert!(!proxied_http.contains("Secure"), "{proxied_http}");
    // Behind it, the server's own origin is https at the same host.
    let pair = proxied.split(';').next().unwrap().to_string();
    let https_own = s.base.replace("http://", "https://");
    let post = |origin: String| {
        s.http
            .post(s.url("/api/v1/agents"))
            .header("cookie", &pair)
            .header("x-forwarded-proto", "https")
            .header("origin", origin)
            .json(&json!({"name": "proxied"}))
            .send()
    };
    refused(post(s.base.clone()).await.unwrap(), "http behind https").await;
    let r = post(https_own).await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

/// `GET /metrics` as a Prometheus scraper sees it, with a `label` filter on one line.
async fn metric(s: &TestServer, line_start: &str) -> Option<f64> {
    let text = s
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

#[tokio::test]
async fn metrics_count_agents_and_operations_behind_auth() {
    let s = TestServer::start_with(|c| c.server.metrics_token = Some("scrape-only".into())).await;
    // Behind the API's auth...
    let r = s.http.get(s.url("/metrics")).send().await.unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s.get("/metrics").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/openmetrics-text")));
    // ...and the scraper's token opens it and nothing else.
    let scrape = |path: &str| {
        s.http
            .get(s.url(path))
            .header("authorization", "bearer scrape-only")
            .send()
    };
    assert_eq!(scrape("/metrics").await.unwrap().status(), 200);
    let r = scrape("/api/v1/agents").await.unwrap();
    expect_error(r, 401, "unauthorized").await;

    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(0.0)
    );
    let id = s.running_agent("counted").await;
    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(1.0)
    );
    crate::common::wait_for("the create is timed", || async {
        metric(
            &s,
            "agenthold_operation_seconds_count{kind=\"create\",outcome=\"ok\"}",
        )
        .await
            == Some(1.0)
    })
    .await;
    assert_eq!(metric(&s, "agenthold_tunnel_connections").await, Some(1.0));
    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    crate::common::wait_for("the destroy is timed", || async {
        metric(
            &s,
            "agenthold_operation_seconds_count{kind=\"destroy\",outcome=\"ok\"}",
        )
        .await
            == Some(1.0)
    })
    .await;
    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(0.0)
    );
}

#[tokio::test]
async fn egress_rules_are_set_at_create_changed_by_patch_and_checked() {
    let s = TestServer::start_with(|c| {
        c.sandbox.egress.default = serde_json::from_value(json!({"allow": ["pypi.org"]})).unwrap();
    })
    .await;
    // None given: the server's default.
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "plain"}))
        .await;
    assert_eq!(r.status(), 201);
    let plain: Value = r.json().await.unwrap();
    assert_eq!(plain["egress"], json!({"allow": ["pypi.org"], "deny": []}));

    let r = s.send("POST", "/api/v1/agents", &json!({"name": "a", "egress": {"allow": ["*.PythonHosted.org.", "203.0.113.0/24:443"], "deny": ["*"]}})).await;
    assert_eq!(r.status(), 201);
    let a: Value = r.json().await.unwrap();
    let id = a["id"].as_str().unwrap().to_string();
    assert_eq!(
        a["egress"],
        json!({"allow": ["*.pythonhosted.org", "203.0.113.0/24:443"], "deny": ["*"]})
    );
    s.wait_state(&id, "running").await;

    // A change applies without a rebuild and reads back.
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"egress": {"allow": ["github.com:443"]}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(
        a["egress"],
        json!({"allow": ["github.com:443"], "deny": []})
    );
    assert_eq!(a["needsRebuild"], false);
    assert_eq!(s.agent(&id).await["egress"], a["egress"]);

    // Hostile input: a rule that is not a name, an address or a CIDR; too many rules; a field
    // that does not exist. Each is 400 and changes nothing.
    let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.example")).collect();
    for (body, says) in [
        (
            json!({"egress": {"allow": ["not a host"]}}),
            "is not an egress rule",
        ),
        (
            json!({"egress": {"allow": ["foo.*.org"]}}),
            "a wildcard may only start a rule",
        ),
        (
            json!({"egress": {"allow": ["pypi.org:0"]}}),
            "is not a port",
        ),
        (json!({"egress": {"allow": many}}), "at most 256"),
        (json!({"egress": {"allowed": []}}), "allowed"),
        (json!({"egress": ["pypi.org"]}), "egress"),
    ] {
        let r = s
            .send("PATCH", &format!("/api/v1/agents/{id}"), &body)
            .await;
        let msg = expect_error(r, 400, "invalid").await;
        assert!(msg.contains(says), "{says}: {msg}");
    }
    assert_eq!(
        s.agent(&id).await["egress"],
        json!({"allow": ["github.com:443"], "deny": []})
    );
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "b", "egress": {"deny": ["300.1.1.1/8"]}}),
        )
        .await;
    expect_error(r, 400, "invalid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_sleeps_has_no_sleep_time() {
    let s = TestServer::start().await;
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "insomniac", "idleMinutes": 0}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.wait_state(&id, "running").await;
    let a = s.agent(&id).await;
    assert!(a["sleepsAt"].is_null(), "{a}");
}
