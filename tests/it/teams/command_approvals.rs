//! Approvals for commands: an agent's `approvals.commands` holds exec, process starts and terminal
//! opens of anyone but its owner and admins (and of supervised tokens) as approvals of kind
//! `command`, which run when allowed and fail closed otherwise. The fake driver runs commands on
//! the host: the "dangerous" ones here are harmless as run (`rm -rf ~` without a shell removes a
//! directory literally named `~`, which does not exist); the Docker test
//! (`docker::command_approvals`) checks inside a sandbox that nothing ran.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::{token, token_by, user};
use crate::common::{wait_for_value, TestServer, DEADLINE};

/// An agent with `approvals.commands` = `which` (the admin's), and the token of `bob`, a user
/// member of it (not its owner: his commands are the ones held).
async fn setup(s: &TestServer, which: &str, token_body: Value) -> (String, String) {
    let id = s
        .running_agent(json!({ "name": "held", "approvals": { "commands": which } }))
        .await;
    user(s, "bob", "member", Some("correct horse battery")).await;
    let (status, v) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/members"),
            Some(json!({ "user": "bob", "role": "user" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let bob = member_token(s, token_body).await;
    (id, bob)
}

/// A token of the member `bob`, made as him (signed in with his password).
async fn member_token(s: &TestServer, body: Value) -> String {
    let cookie = super::sign_in(s, "bob", "correct horse battery").await;
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{body} → {v}");
    v["token"].as_str().unwrap().to_string()
}

/// Exec as `auth`: status and body.
async fn exec_as(s: &TestServer, auth: &str, id: &str, command: &[&str]) -> (u16, Value) {
    let r = s
        .http
        .post(s.url(&format!("/api/v1/agents/{id}/exec")))
        .bearer_auth(auth)
        .json(&json!({ "command": command }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `exec_as` in the background, for a command that waits for an answer.
fn exec_later(
    s: &TestServer,
    auth: &str,
    id: &str,
    command: Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let http = s.http.clone();
    let url = s.url(&format!("/api/v1/agents/{id}/exec"));
    let auth = auth.to_string();
    tokio::spawn(async move {
        let r = http
            .post(url)
            .bearer_auth(auth)
            .json(&json!({ "command": command }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangerous_holds_rm_rf_home_lets_ls_through_and_runs_once_allowed() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "dangerous",
        json!({ "name": "t", "scopes": ["agents:read", "agents:use", "approvals:answer"] }),
    )
    .await;
    let (status, v) = exec_as(&s, &bob, &id, &["ls"]).await;
    assert_eq!(status, 200, "ls is not held: {v}");

    // Held, then rejected: 403 approval_rejected.
    let held = exec_later(&s, &bob, &id, json!(["rm", "-rf", "~"]));
    let a = s.pending_command("rm -rf ~").await;
    assert_eq!(a["agentId"], id);
    assert_eq!(a["sessionId"], Value::Null);
    assert_eq!(a["requester"], "bob (token t)");
    let kinds: Vec<(&str, &str)> = a["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("allow", "allow_once"), ("reject", "reject_once")]);
    // Nobody approves their own command.
    let (status, v) = s
        .http
        .post(s.url(&format!("/api/v1/approvals/{}", a["id"].as_str().unwrap())))
        .bearer_auth(&bob)
        .json(&json!({ "optionId": "allow" }))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(status, 403, "{:?}", v.text().await);
    let (status, v) = s.answer_approval(a["id"].as_str().unwrap(), "reject").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["outcome"], "selected");
    let (status, v) = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_rejected")),
        "{v}"
    );

    // Held, then allowed: it runs (`reboot` as an argument of echo matches the default list).
    let held = exec_later(&s, &bob, &id, json!(["echo", "reboot"]));
    let a = s.pending_command("echo reboot").await;
    let (status, v) = s.answer_approval(a["id"].as_str().unwrap(), "allow").await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(
        (status, v["stdout"].as_str()),
        (200, Some("reboot\n")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_it_expires_and_nothing_runs() {
    let s = TestServer::start_with(|c| {
        c.sessions.approval_timeout = Duration::from_secs(1);
    })
    .await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "t", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let marker = s.dir.path().join("expired-marker");
    let (status, v) = exec_as(&s, &bob, &id, &["touch", marker.to_str().unwrap()]).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_expired")),
        "{v}"
    );
    assert!(!marker.exists(), "an expired command must not run");
    let list = s.get_json("/api/v1/approvals?state=resolved").await;
    let a = &list.as_array().unwrap()[0];
    assert_eq!(
        (a["outcome"].as_str(), a["optionId"].as_str()),
        (Some("expired"), Some("reject"))
    );
    assert_eq!(a["decidedBy"], "timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_allow_tokens_answer_for_themselves() {
    let s = TestServer::start().await;
    let (id, deny) = setup(
        &s,
        "always",
        json!({ "name": "sub", "scopes": ["agents:read", "agents:use"], "approvals": "deny" }),
    )
    .await;
    let marker = s.dir.path().join("denied-marker");
    let (status, v) = exec_as(&s, &deny, &id, &["touch", marker.to_str().unwrap()]).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_rejected")),
        "{v}"
    );
    assert!(!marker.exists());
    assert_eq!(
        s.get_json("/api/v1/approvals").await,
        json!([]),
        "nothing waits"
    );
    let allow = member_token(
        &s,
        json!({ "name": "cron", "scopes": ["agents:read", "agents:use"], "approvals": "allow" }),
    )
    .await;
    // A member's `allow` is no answer on the admin's agent: it waits for the owner or an admin
    // (nobody approves their own command), and runs once they allow it.
    let held = exec_later(&s, &allow, &id, json!(["echo", "ok"]));
    let a = s.pending_command("echo ok").await;
    let (status, v) = s.answer_approval(a["id"].as_str().unwrap(), "allow").await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = held.await.unwrap();
    assert_eq!((status, v["stdout"].as_str()), (200, Some("ok\n")), "{v}");

    // The owner's supervised `allow` token (a batch job's) runs what its `ask` twin waits for,
    // at once, and the audit log says it was approved in advance.
    let (batch, _) = token(
        &s,
        json!({ "name": "batch", "scopes": ["agents:use"], "supervised": true, "approvals": "allow" }),
    )
    .await;
    let (status, v) = exec_as(&s, &batch, &id, &["echo", "batch"]).await;
    assert_eq!(
        (status, v["stdout"].as_str()),
        (200, Some("batch\n")),
        "{v}"
    );
    assert_eq!(
        s.get_json("/api/v1/approvals?state=pending").await,
        json!([])
    );
    let entries = s.get_json("/api/v1/audit?action=exec&limit=1").await;
    assert_eq!(entries[0]["tokenName"], "batch", "{entries}");
    assert_eq!(
        entries[0]["detail"], "echo batch (approved in advance by the token's approvals: allow)",
        "{entries}"
    );
    let (ask, _) = token(
        &s,
        json!({ "name": "batch-ask", "scopes": ["agents:use"], "supervised": true }),
    )
    .await;
    let held = exec_later(&s, &ask, &id, json!(["echo", "asked"]));
    let a = s.pending_command("echo asked").await;
    s.answer_approval(a["id"].as_str().unwrap(), "reject").await;
    let (status, _) = held.await.unwrap();
    assert_eq!(status, 403);
}

/// Which commands wait is the owner's (or an admin's) to change: an operator member, and the
/// owner's own supervised token, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_changes_which_commands_wait() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "ops", "scopes": ["agents:read", "agents:write", "agents:use"] }),
    )
    .await;
    let (status, v) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/members"),
            Some(json!({ "user": "bob", "role": "operator" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let patch = |auth: String| {
        let s = &s;
        let id = id.clone();
        async move {
            let r = s
                .http
                .patch(s.url(&format!("/api/v1/agents/{id}")))
                .bearer_auth(auth)
                .json(&json!({ "approvals": { "commands": "never" } }))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    };
    assert_eq!(
        patch(bob).await,
        403,
        "an operator may not turn approvals off"
    );
    let (sup, _) = token(
        &s,
        json!({ "name": "own", "scopes": ["agents:read", "agents:write"], "supervised": true }),
    )
    .await;
    assert_eq!(patch(sup).await, 403, "nor the owner's supervised token");
    let agent = s.get_json(&format!("/api/v1/agents/{id}")).await;
    assert_eq!(agent["approvals"]["commands"], "always");
    assert_eq!(
        patch(s.token.clone()).await,
        200,
        "the owner (the admin) may"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervised_token_is_held_even_as_an_admin() {
    let s = TestServer::start().await;
    let id = s
        .running_agent(json!({ "name": "held", "approvals": { "commands": "dangerous" } }))
        .await;
    let (sup, _) = token(
        &s,
        json!({ "name": "agent", "scopes": ["agents:use", "approvals:answer"], "supervised": true }),
    )
    .await;
    // The admin's own commands are not held.
    assert_eq!(s.exec(&id, &["echo", "reboot"]).await["exitCode"], 0);
    // Its supervised token's are, and it cannot answer them.
    let (status, _) = exec_as(&s, &sup, &id, &["ls"]).await;
    assert_eq!(status, 200);
    let held = {
        let http = s.http.clone();
        let url = s.url(&format!("/api/v1/agents/{id}/exec"));
        let sup = sup.clone();
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(sup)
                .json(&json!({ "command": ["echo", "reboot"] }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let a = s.pending_command("echo reboot").await;
    let aid = a["id"].as_str().unwrap().to_string();
    let r = s
        .http
        .post(s.url(&format!("/api/v1/approvals/{aid}")))
        .bearer_auth(&sup)
        .json(&json!({ "optionId": "allow" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Two answers at once: one wins, the other is 409.
    let (one, two) = tokio::join!(
        s.answer_approval(&aid, "allow"),
        s.answer_approval(&aid, "reject")
    );
    let mut statuses = [one.0, two.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{one:?} {two:?}");
    let status = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    assert_eq!(status, if one.0 == 200 { 200 } else { 403 });

    // Under `always` every command of it waits.
    let r = s
        .patch_agent(&id, json!({ "approvals": { "commands": "always" } }))
        .await;
    assert_eq!(r.status(), 200);
    let held = {
        let http = s.http.clone();
        let url = s.url(&format!("/api/v1/agents/{id}/processes"));
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(sup)
                .json(&json!({ "command": ["true"] }))
                .send()
                .await
                .unwrap()
        })
    };
    let a = s.pending_command("true").await;
    s.answer_approval(a["id"].as_str().unwrap(), "reject").await;
    let r = tokio::time::timeout(DEADLINE, held).await.unwrap().unwrap();
    crate::common::expect_error(r, 403, "approval_rejected").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_exec_says_it_waits_on_its_first_line() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "t", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let r = s
        .http
        .post(s.url(&format!("/api/v1/agents/{id}/exec")))
        .bearer_auth(&bob)
        .header("accept", "application/x-ndjson")
        .json(&json!({ "command": ["echo", "streamed"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut text = String::new();
    while !text.contains('\n') {
        let chunk = tokio::time::timeout(DEADLINE, body.next())
            .await
            .expect("the first line comes before any answer")
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let a = &first["approval"];
    assert_eq!(
        (a["kind"].as_str(), a["command"].as_str()),
        (Some("command"), Some("echo streamed")),
        "{first}"
    );
    s.answer_approval(a["id"].as_str().unwrap(), "allow").await;
    while let Some(chunk) = tokio::time::timeout(DEADLINE, body.next()).await.unwrap() {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|l| l["data"] == "streamed\n"), "{text}");
    assert_eq!(lines.last().unwrap()["exitCode"], 0, "{text}");
}

/// A held streamed exec answers `200` at once; its audit entry tells what came of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_streamed_exec_is_audited_with_its_outcome() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "t", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    for (word, option, status) in [("refused", "reject", 403), ("allowed", "allow", 200)] {
        let r = s
            .http
            .post(s.url(&format!("/api/v1/agents/{id}/exec")))
            .bearer_auth(&bob)
            .header("accept", "application/x-ndjson")
            .json(&json!({ "command": ["echo", word] }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let a = s.pending_command(&format!("echo {word}")).await;
        s.answer_approval(a["id"].as_str().unwrap(), option).await;
        let text = tokio::time::timeout(DEADLINE, r.text())
            .await
            .unwrap()
            .unwrap();
        assert!(text.lines().count() >= 2, "{text}");
        let entry = wait_for_value(&format!("the audit entry of echo {word}"), || async {
            let v = s.get_json("/api/v1/audit?action=exec").await;
            v.as_array()?
                .iter()
                .find(|e| e["detail"] == format!("echo {word}").as_str())
                .cloned()
        })
        .await;
        assert_eq!(entry["status"], status, "{entry}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_command_fails_closed_across_a_restart() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "t", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let marker = s.dir.path().join("restart-marker");
    let held = {
        let http = s.http.clone();
        let url = s.url(&format!("/api/v1/agents/{id}/exec"));
        let cmd = json!({ "command": ["touch", marker.to_str().unwrap()] });
        tokio::spawn(async move { http.post(url).bearer_auth(bob).json(&cmd).send().await })
    };
    let a = s
        .pending_command(&format!("touch {}", marker.to_str().unwrap()))
        .await;
    let s = s.restart_with(|_| {}).await;
    let _ = tokio::time::timeout(DEADLINE, held).await;
    let after = s
        .get_json(&format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()))
        .await;
    assert_eq!(after["outcome"], "expired", "{after}");
    assert_eq!(after["decidedBy"], "restart");
    let (status, _) = s.answer_approval(a["id"].as_str().unwrap(), "allow").await;
    assert_eq!(status, 409);
    assert!(!marker.exists());
}

#[tokio::test]
async fn token_and_agent_settings_are_checked() {
    let s = TestServer::start().await;
    for bad in [json!("sometimes"), json!(1), json!(null)] {
        let (status, v) = s
            .call(
                "POST",
                "/api/v1/tokens",
                Some(json!({ "name": "x", "scopes": ["agents:use"], "approvals": bad })),
            )
            .await;
        if bad.is_null() {
            assert_eq!(status, 201, "null is the default: {v}");
        } else {
            assert_eq!(status, 400, "{bad} → {v}");
        }
    }
    // A token cannot make one laxer than itself.
    let (sup, _) = token(
        &s,
        json!({ "name": "sup", "scopes": ["agents:use"], "supervised": true }),
    )
    .await;
    let (ask, _) = token(&s, json!({ "name": "ask", "scopes": ["agents:use"] })).await;
    for (auth, body) in [
        (&sup, json!({ "name": "y", "scopes": ["agents:use"] })),
        (
            &ask,
            json!({ "name": "y", "scopes": ["agents:use"], "approvals": "allow" }),
        ),
    ] {
        let r = s
            .http
            .post(s.url("/api/v1/tokens"))
            .bearer_auth(auth)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{body}");
    }
    let (_, id) = token_by(
        &s,
        &sup,
        json!({ "name": "z", "scopes": ["agents:use"], "supervised": true, "approvals": "deny" }),
    )
    .await;
    let tokens = s.get_json("/api/v1/tokens").await;
    let z = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap();
    assert_eq!(
        (z["supervised"].as_bool(), z["approvals"].as_str()),
        (Some(true), Some("deny"))
    );

    // An agent's setting: default never, set on create and by PATCH, checked.
    let a = s.created_agent("plain").await;
    assert_eq!(a["approvals"], json!({ "commands": "never" }));
    let r = s
        .patch_agent(
            a["id"].as_str().unwrap(),
            json!({ "approvals": { "commands": "always" } }),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["approvals"]["commands"], "always", "{v}");
    for bad in [
        json!({ "commands": "sometimes" }),
        json!({ "commands": "always", "other": 1 }),
        json!("always"),
    ] {
        let (status, v) = s
            .call(
                "POST",
                "/api/v1/agents",
                Some(json!({ "name": "bad", "approvals": bad })),
            )
            .await;
        assert_eq!(status, 400, "{bad} → {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_approval_left_pending_in_the_store_never_runs_after_a_start() {
    use agenthold::model::sessions::{ApprovalKind, ApprovalRecord, OptionRecord};
    let s = TestServer::start().await;
    let id = s.create_agent("crashed").await;
    // As a server killed while a command waited leaves it: pending, with nobody waiting.
    let option = |id: &str, kind: &str| OptionRecord {
        option_id: id.into(),
        name: id.into(),
        kind: kind.into(),
    };
    s.store
        .add_command_approval(ApprovalRecord {
            id: "ghostapproval".into(),
            agent_id: id.clone(),
            kind: ApprovalKind::Command,
            session_id: None,
            command: Some("rm -rf ~".into()),
            requester: Some("bob".into()),
            tool_call: Value::Null,
            options: vec![
                option("allow", "allow_once"),
                option("reject", "reject_once"),
            ],
            created_at: "2026-12-06T00:00:00Z".into(),
            expires_at: "2099-01-01T00:00:00Z".into(),
            outcome: None,
            option_id: None,
            decided_by: None,
            rpc_id: Value::Null,
        })
        .await
        .unwrap();
    let s = s.restart_with(|_| {}).await;
    let a = s.get_json("/api/v1/approvals/ghostapproval").await;
    assert_eq!(
        (
            a["outcome"].as_str(),
            a["optionId"].as_str(),
            a["decidedBy"].as_str()
        ),
        (Some("expired"), Some("reject"), Some("restart")),
        "{a}"
    );
    let (status, _) = s.answer_approval("ghostapproval", "allow").await;
    assert_eq!(status, 409);
}

/// A held command whose credential ends while it waits never runs, even if allowed after; and
/// under `always`, writing to a process's stdin (which a shell reads as commands) waits too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_s_held_command_never_runs_and_stdin_waits_under_always() {
    let s = TestServer::start().await;
    let (id, bob) = setup(
        &s,
        "always",
        json!({ "name": "ci", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let marker = s.dir.path().join("revoked-marker");
    let command = format!("touch {}", marker.display());
    let held = exec_later(&s, &bob, &id, json!(["touch", marker.to_str().unwrap()]));
    let a = s.pending_command(&command).await;
    // Bob's token is revoked (as bob: his own token) while his command waits.
    let tokens = s.get_json("/api/v1/tokens").await;
    let tid = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/tokens/{tid}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, v) = held.await.unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("approval_expired")),
        "{v}"
    );
    // Its approval is no longer pending: an allow now runs nothing.
    let (status, v) = s.answer_approval(a["id"].as_str().unwrap(), "allow").await;
    assert_eq!(status, 409, "{v}");
    assert!(
        !marker.exists(),
        "a revoked credential's command must not run"
    );

    // The admin (the owner) starts a shell reading stdin; bob's input to it waits.
    let (status, p) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({ "command": ["sh"], "tag": "sh" })),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let bob2 = member_token(
        &s,
        json!({ "name": "ci2", "scopes": ["agents:read", "agents:use"] }),
    )
    .await;
    let typed = tokio::spawn({
        let url = s.url(&format!("/api/v1/agents/{id}/processes/sh/stdin"));
        let http = s.http.clone();
        async move {
            http.post(url)
                .bearer_auth(bob2)
                .body("echo typed\n")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let a = s.pending_command("(input to process sh)").await;
    let (status, v) = s.answer_approval(a["id"].as_str().unwrap(), "reject").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(typed.await.unwrap(), 403);
}
