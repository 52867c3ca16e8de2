//! `allowRoot` on the fake driver: where it comes from (request, preset, default), the gate on
//! `"user": "root"` for exec and processes (`403` naming `allowRoot`, `400` for another user),
//! the container's security options the fake records, and a `PATCH` (at once for the gate, a
//! rebuild for the container).

use crate::common::{expect_error, TestServer};
use agenthold::agents::preset::Preset;
use agenthold::driver::fake::SECURITY_OPT_FILE;
use serde_json::{json, Value};

/// The security options the fake driver made `id`'s sandbox with.
fn security_opt(s: &TestServer, id: &str) -> String {
    std::fs::read_to_string(s.dir.path().join("fake").join(id).join(SECURITY_OPT_FILE))
        .unwrap_or_else(|e| panic!("no security options recorded for {id}: {e}"))
}

async fn server() -> TestServer {
    TestServer::start_with(|c| {
        c.presets.insert(
            "rooted".into(),
            Preset {
                allow_root: true,
                ..Default::default()
            },
        );
    })
    .await
}

async fn exec_as(s: &TestServer, id: &str, user: Value) -> reqwest::Response {
    s.send(
        "POST",
        &format!("/api/v1/agents/{id}/exec"),
        &json!({"command": ["id", "-u"], "user": user}),
    )
    .await
}

async fn start_as(s: &TestServer, id: &str, user: Value) -> reqwest::Response {
    s.send(
        "POST",
        &format!("/api/v1/agents/{id}/processes"),
        &json!({"command": ["id", "-u"], "user": user}),
    )
    .await
}

#[tokio::test]
async fn allow_root_comes_from_the_request_else_the_preset_else_false() {
    let s = server().await;
    let plain = s.created_agent(json!({"name": "plain"})).await;
    assert_eq!(plain["allowRoot"], false);
    let asked = s
        .created_agent(json!({"name": "asked", "allowRoot": true}))
        .await;
    assert_eq!(asked["allowRoot"], true);
    let from_preset = s
        .created_agent(json!({"name": "pre", "preset": "rooted"}))
        .await;
    assert_eq!(from_preset["allowRoot"], true);
    let refused = s
        .created_agent(json!({"name": "no", "preset": "rooted", "allowRoot": false}))
        .await;
    assert_eq!(refused["allowRoot"], false, "the request's own wins");
    let presets = s.get_json("/api/v1/presets").await;
    let rooted = presets
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rooted")
        .cloned()
        .unwrap_or_default();
    assert_eq!(rooted["allowRoot"], true, "{presets}");

    // The container side: only the agent allowed root is made without no-new-privileges.
    for (agent, opts) in [(&plain, "no-new-privileges:true"), (&asked, "")] {
        let id = agent["id"].as_str().unwrap();
        s.wait_state(id, "running").await;
        assert_eq!(security_opt(&s, id), opts, "{agent}");
    }

    for bad in [json!("yes"), json!(1), json!(null)] {
        let r = s
            .send(
                "POST",
                "/api/v1/agents",
                &json!({"name": "bad", "allowRoot": bad}),
            )
            .await;
        if bad.is_null() {
            // null is "not given", as for every optional field.
            assert_eq!(r.status(), 201);
            continue;
        }
        expect_error(r, 400, "invalid").await;
    }
}

#[tokio::test]
async fn root_on_exec_and_processes_needs_allow_root() {
    let s = server().await;
    let plain = s.running_agent(json!({"name": "plain"})).await;
    let rooted = s
        .running_agent(json!({"name": "rooted", "allowRoot": true}))
        .await;

    for r in [
        exec_as(&s, &plain, json!("root")).await,
        start_as(&s, &plain, json!("root")).await,
    ] {
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "forbidden");
        assert_eq!(body["error"]["field"], "user");
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("allowRoot"), "{msg}");
    }
    for bad in [json!("admin"), json!("ROOT"), json!(""), json!(0)] {
        expect_error(exec_as(&s, &rooted, bad.clone()).await, 400, "invalid").await;
        expect_error(start_as(&s, &rooted, bad).await, 400, "invalid").await;
    }
    // "agent" is the default, said out loud.
    let r = exec_as(&s, &plain, json!("agent")).await;
    assert_eq!(r.status(), 200);

    // The fake's sandboxd runs in the server's process: as root here only when the tests do.
    let root_here = nix::unistd::geteuid().is_root();
    let r = exec_as(&s, &rooted, json!("root")).await;
    if root_here {
        assert_eq!(r.status(), 200);
        let out: Value = r.json().await.unwrap();
        assert_eq!(out["stdout"], "0\n", "{out}");
        let r = start_as(&s, &rooted, json!("root")).await;
        assert_eq!(r.status(), 201);
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["user"], "root", "{p}");
    } else {
        // sandboxd cannot become root: it says so, without blaming allowRoot.
        let msg = expect_error(r, 403, "forbidden").await;
        assert!(!msg.contains("allowRoot"), "{msg}");
    }
    let r = start_as(&s, &plain, json!("agent")).await;
    assert_eq!(r.status(), 201);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["user"], "agent", "{p}");
}

#[tokio::test]
async fn a_patch_of_allow_root_gates_at_once_and_rebuilds_the_container() {
    let s = server().await;
    let id = s.running_agent(json!({"name": "later"})).await;
    assert_eq!(
        exec_as(&s, &id, json!("root")).await.status(),
        403,
        "not allowed yet"
    );
    let r = s.patch_agent(&id, json!({"allowRoot": true})).await;
    assert_eq!(r.status(), 200);
    let agent: Value = r.json().await.unwrap();
    assert_eq!(agent["allowRoot"], true);
    assert_eq!(agent["needsRebuild"], true, "sudo follows at the rebuild");
    assert_ne!(exec_as(&s, &id, json!("root")).await.status(), 403);
    assert_eq!(security_opt(&s, &id), "no-new-privileges:true");

    s.act(&id, "rebuild").await;
    s.wait_state(&id, "running").await;
    assert_eq!(security_opt(&s, &id), "");
    assert_eq!(s.agent(&id).await["needsRebuild"], false);

    // Taking it away: refused at once.
    let r = s.patch_agent(&id, json!({"allowRoot": false})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(exec_as(&s, &id, json!("root")).await.status(), 403);
    let r = s.patch_agent(&id, json!({"allowRoot": "no"})).await;
    expect_error(r, 400, "invalid").await;
}
