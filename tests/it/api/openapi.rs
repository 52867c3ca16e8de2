//! `GET /api/v1/openapi.json`: every route, status and constraint the server has, described.

use crate::common::TestServer;
use serde_json::{json, Value};
use std::time::Duration;

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
        // Anyone may ask for the health, and a preview's sign-in hand-off sends a browser
        // without a credential to sign in (302); every other operation may be refused one.
        if path != "/api/v1/health" && path != "/api/v1/previews/{pid}/open" {
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
            .is_some_and(|c| c.len() == 12 && c.contains(&json!("approval_expired"))),
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

    // A created agent leads to every operation that takes its id but the file routes (whose
    // `404` for a missing path a link's follower would take for the agent missing).
    let links = doc["paths"]["/api/v1/agents"]["post"]["responses"]["201"]["links"]
        .as_object()
        .unwrap();
    for (method, path, op) in operations(&doc) {
        if path.contains("/fs/") {
            let id = op["operationId"].as_str().unwrap();
            assert!(!links.contains_key(id), "{method} {path}");
        } else if path.contains("{id}") {
            let id = op["operationId"].as_str().unwrap();
            assert_eq!(
                links[id],
                json!({"operationId": id, "parameters": {"id": "$response.body#/id"}}),
                "{method} {path}"
            );
        }
    }
}
