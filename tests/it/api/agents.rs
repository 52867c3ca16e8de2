//! Agents over the API: creation and its defaults, updates and what needs a rebuild, egress
//! rules, and hostile or malformed bodies refused with a message.

use crate::common::{expect_error, TestServer};
use serde_json::{json, Value};

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
            .request(method.parse().unwrap(), path)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
    }
}

#[tokio::test]
async fn names_are_unique_and_defaults_apply() {
    let s = TestServer::start().await;
    let a = s.created_agent("builder").await;
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
    let id = s.create_agent("p").await;
    let r = s
        .patch_agent(&id, json!({"name": "q", "idleMinutes": 5}))
        .await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["name"], "q");
    assert_eq!(a["idleMinutes"], 5);
    assert_eq!(a["needsRebuild"], false);
    let a: Value = s
        .patch_agent(&id, json!({"memoryMb": 2048}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["memoryMb"], 2048);
    assert_eq!(a["needsRebuild"], true);
    let r = s.patch_agent(&id, json!({"cpus": 0})).await;
    expect_error(r, 400, "invalid").await;

    // A larger home needs no rebuild (a start grows it); a smaller one is refused.
    let a: Value = s
        .patch_agent(&id, json!({"diskMb": 20480}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["diskMb"], 20480);
    let r = s.patch_agent(&id, json!({"diskMb": 10240})).await;
    // Valid on its own, refused for this agent's home as it is: a conflict.
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict", "{body}");
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
async fn bodies_are_json_objects_and_whole_numbers_may_be_written_with_a_zero_fraction() {
    let s = TestServer::start().await;
    let id = s.running_agent("whole").await;
    // The body as written here, which `json!` could not write.
    let raw = |method: &str, path: &str, body: &'static str| {
        s.request(method.parse().unwrap(), path)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let agent = format!("/api/v1/agents/{id}");
    // serde would read a struct from an array; the schema says object.
    for body in [r#"[null, null]"#, r#"["x"]"#, r#"{"egress": [[], []]}"#] {
        let r = raw("PATCH", &agent, body).await.unwrap();
        expect_error(r, 400, "invalid").await;
    }
    let r = raw("POST", "/api/v1/agents", r#"["name"]"#).await.unwrap();
    expect_error(r, 400, "invalid").await;
    // JSON Schema's `integer` is a value: 1024.0 is one.
    let r = raw(
        "PATCH",
        &agent,
        r#"{"memoryMb": 1024.0, "idleMinutes": 0.0}"#,
    )
    .await
    .unwrap();
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["memoryMb"], 1024, "{a}");
    assert_eq!(a["idleMinutes"], 0, "{a}");
    for body in [r#"{"memoryMb": 1024.5}"#, r#"{"idleMinutes": -1.0}"#] {
        let r = raw("PATCH", &agent, body).await.unwrap();
        expect_error(r, 400, "invalid").await;
    }
    // Rules are ASCII: a rule padded with other white space is refused (its length limit
    // counts bytes, which no schema can state).
    let r = s
        .patch_agent(&id, json!({"egress": {"allow": ["\u{3000}pypi.org"]}}))
        .await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("allow[0]"), "{msg}");
    let a: Value = s
        .patch_agent(&id, json!({"egress": {"allow": [" pypi.org\t"]}}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["egress"]["allow"], json!(["pypi.org"]), "{a}");
    // Images are printable ASCII without spaces, as the schema's pattern says.
    let r = s.patch_agent(&id, json!({"image": "débian"})).await;
    expect_error(r, 400, "invalid").await;
}

#[tokio::test]
async fn egress_rules_are_set_at_create_changed_by_patch_and_checked() {
    let s = TestServer::start_with(|c| {
        c.sandbox.egress.default = serde_json::from_value(json!({"allow": ["pypi.org"]})).unwrap();
    })
    .await;
    // None given: the server's default.
    let plain = s.created_agent("plain").await;
    assert_eq!(plain["egress"], json!({"allow": ["pypi.org"], "deny": []}));

    let a = s
        .created_agent(json!({"name": "a", "egress": {"allow": ["*.PythonHosted.org.", "203.0.113.0/24:443"], "deny": ["*"]}}))
        .await;
    let id = a["id"].as_str().unwrap().to_string();
    assert_eq!(
        a["egress"],
        json!({"allow": ["*.pythonhosted.org", "203.0.113.0/24:443"], "deny": ["*"]})
    );
    s.wait_state(&id, "running").await;

    // A change applies without a rebuild and reads back; it replaces only the lists it names.
    let r = s
        .patch_agent(&id, json!({"egress": {"allow": ["github.com:443"]}}))
        .await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(
        a["egress"],
        json!({"allow": ["github.com:443"], "deny": ["*"]})
    );
    assert_eq!(a["needsRebuild"], false);
    assert_eq!(s.agent(&id).await["egress"], a["egress"]);
    let r = s
        .patch_agent(&id, json!({"egress": {"deny": [], "allow": null}}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.agent(&id).await["egress"],
        json!({"allow": ["github.com:443"], "deny": []})
    );
    let r = s
        .patch_agent(
            &id,
            json!({"egress": {"allow": ["pypi.org"], "deny": ["evil.example"]}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = s
        .patch_agent(
            &id,
            json!({"egress": {"allow": ["github.com:443"], "deny": []}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.agent(&id).await["egress"],
        json!({"allow": ["github.com:443"], "deny": []})
    );

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
        let r = s.patch_agent(&id, body).await;
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
    let id = s
        .running_agent(json!({"name": "insomniac", "idleMinutes": 0}))
        .await;
    let a = s.agent(&id).await;
    assert!(a["sleepsAt"].is_null(), "{a}");
}
