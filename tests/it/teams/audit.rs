//! The audit log: an entry for each action with the right principal, the filters and their
//! refusals, paging, who sees what, retention, the JSON-lines file, and no secret anywhere.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::{get_as, sign_in, token, token_by, user};
use crate::common::{wait_for, TestServer, TOKEN};

/// A request with bearer `auth`: status and JSON body.
async fn call_as(
    s: &TestServer,
    auth: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = s
        .http
        .request(method.parse().unwrap(), s.url(path))
        .bearer_auth(auth);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A token of user `name`'s own (signing in with `password`), as the web UI makes one.
async fn own_token(s: &TestServer, name: &str, password: &str, scopes: Value) -> String {
    let cookie = sign_in(s, name, password).await;
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&json!({"name": "ci", "scopes": scopes}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    v["token"].as_str().unwrap().to_string()
}

/// The log as the admin reads it, with `query` (`?…`).
async fn audit(s: &TestServer, query: &str) -> Vec<Value> {
    let (status, v) = s.call("GET", &format!("/api/v1/audit{query}"), None).await;
    assert_eq!(status, 200, "{v}");
    v.as_array().unwrap().clone()
}

fn find<'a>(entries: &'a [Value], action: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["action"] == action)
        .unwrap_or_else(|| panic!("no {action} entry in {entries:#?}"))
}

#[tokio::test]
async fn every_action_is_recorded_with_its_principal_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let log_path = log.clone();
    let s = TestServer::start_with(move |c| c.server.audit_log = Some(log_path)).await;
    let password = "correct-horse-battery";
    let ann = user(&s, "ann", "member", Some(password)).await;
    // A token of the admin's own, whose value must appear nowhere either.
    let (t, _) = token(&s, json!({"name": "deploy", "scopes": ["agents:read"]})).await;
    let ann_token = own_token(
        &s,
        "ann",
        password,
        json!(["agents:read", "agents:write", "agents:use"]),
    )
    .await;
    let (status, agent) = call_as(
        &s,
        &ann_token,
        "POST",
        "/api/v1/agents",
        Some(json!({"name": "box"})),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let id = agent["id"].as_str().unwrap().to_string();
    s.wait_state(&id, "running").await;
    let (status, v) = call_as(
        &s,
        &ann_token,
        "POST",
        &format!("/api/v1/agents/{id}/exec"),
        Some(
            json!({"command": ["sh", "-c", "echo hi"], "env": {"SECRET_VALUE": "env-secret-123"}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let r = s
        .http
        .put(s.url(&format!("/api/v1/agents/{id}/fs/write?path=notes.txt")))
        .bearer_auth(&ann_token)
        .body("file-contents-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (status, v) = call_as(
        &s,
        &ann_token,
        "DELETE",
        &format!("/api/v1/agents/{id}/fs/remove?path=notes.txt"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{v}");
    let (status, v) = call_as(
        &s,
        &ann_token,
        "POST",
        &format!("/api/v1/agents/{id}/processes"),
        Some(json!({"command": ["sleep", "30"]})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = call_as(
        &s,
        &ann_token,
        "PATCH",
        &format!("/api/v1/agents/{id}"),
        Some(json!({"env": {"PATCHED_VALUE": "env-secret-456"}, "labels": {"team": "x"}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let mut term = s.terminal(&id, 80, 24).await;
    crate::common::send_keys(&mut term, "exit\r").await;
    drop(term);
    // A refused and a good sign-in, then a token, a user change and a reload by the admin.
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({"name": "ann", "password": "wrong-password-xyz"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let (status, _) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{ann}"),
            Some(json!({"password": "another-password-1"})),
        )
        .await;
    assert_eq!(status, 200);
    let (reload_status, _) = s.call("POST", "/api/v1/admin/reload", None).await;
    let (status, _) = call_as(
        &s,
        &ann_token,
        "DELETE",
        &format!("/api/v1/agents/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 202);

    // Recorded once answered: no waiting needed.
    let entries = audit(&s, "?limit=1000").await;
    let by_ann = |action: &str| {
        let e = find(&entries, action);
        assert_eq!(e["userName"], "ann", "{e}");
        assert_eq!(e["userId"], ann.as_str(), "{e}");
        assert_eq!(e["tokenName"], "ci", "{e}");
        assert_eq!(e["agentId"], id.as_str(), "{e}");
        assert_eq!(e["agentName"], "box", "{e}");
        assert_eq!(e["address"], "127.0.0.1", "{e}");
        e.clone()
    };
    assert_eq!(by_ann("agent.create")["status"], 201);
    assert_eq!(by_ann("exec")["detail"], "sh -c 'echo hi'");
    assert_eq!(by_ann("fs.write")["detail"], "notes.txt");
    assert_eq!(by_ann("fs.remove")["detail"], "notes.txt");
    assert_eq!(by_ann("process.start")["detail"], "sleep 30");
    assert_eq!(by_ann("agent.update")["detail"], "sets env, labels");
    assert_eq!(by_ann("agent.destroy")["status"], 202);
    let term = find(&entries, "terminal.open");
    assert_eq!(term["userName"], "admin");
    assert_eq!(term["tokenName"], Value::Null);
    assert_eq!(term["detail"], "login shell");
    let sign_ins: Vec<&Value> = entries
        .iter()
        .filter(|e| e["action"] == "sign_in")
        .collect();
    assert!(
        sign_ins
            .iter()
            .any(|e| e["status"] == 204 && e["userId"] == ann.as_str()),
        "{sign_ins:#?}"
    );
    assert!(
        sign_ins
            .iter()
            .any(|e| e["status"] == 401 && e["userName"] == "ann" && e["userId"].is_null()),
        "{sign_ins:#?}"
    );
    let made = entries
        .iter()
        .filter(|e| e["action"] == "token.create")
        .count();
    assert_eq!(made, 2);
    assert!(entries
        .iter()
        .any(|e| e["action"] == "token.create" && e["detail"] == "deploy [agents:read]"));
    assert_eq!(find(&entries, "user.create")["detail"], "ann (member)");
    assert_eq!(
        find(&entries, "user.update")["detail"],
        format!("user {ann} password changed")
    );
    assert_eq!(find(&entries, "config.reload")["status"], reload_status);
    assert_eq!(find(&entries, "config.reload")["userName"], "admin");

    // No secret in any entry: tokens, passwords, env values, file contents.
    let all = serde_json::to_string(&entries).unwrap();
    for secret in [
        &ann_token,
        &t,
        TOKEN,
        password,
        "wrong-password-xyz",
        "another-password-1",
        "env-secret-123",
        "env-secret-456",
        "file-contents-secret",
    ] {
        assert!(!all.contains(secret), "{secret} is in the audit log");
    }

    // The file holds the same entries, oldest first.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut from_file: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    from_file.reverse();
    assert_eq!(from_file, entries);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for secret in [
        &ann_token,
        password,
        "env-secret-123",
        "file-contents-secret",
    ] {
        assert!(!text.contains(secret), "{secret} is in the audit file");
    }
}

/// Stages `n` entries through the store: user `u{i%3}`, agent `a{i%4}`, an hour apart, the
/// newest now.
async fn stage(s: &TestServer, n: usize) {
    use agenthold::model::audit::{Action, Entry};
    let now = chrono::Utc::now();
    let entries = (0..n)
        .map(|i| {
            let e = Entry {
                user_id: Some(format!("u{}", i % 3)),
                user_name: format!("user{}", i % 3),
                token_name: None,
                action: if i % 2 == 0 {
                    Action::Exec
                } else {
                    Action::FsWrite
                },
                agent_id: Some(format!("a{}", i % 4)),
                agent_name: Some(format!("agent{}", i % 4)),
                detail: Some(format!("entry {i}")),
                address: "127.0.0.1".parse().unwrap(),
                status: 200,
            };
            (e, now - chrono::Duration::hours((n - 1 - i) as i64))
        })
        .collect();
    s.store.add_audit_entries(entries).await.unwrap();
}

#[tokio::test]
async fn filters_narrow_paging_walks_and_bad_filters_are_400() {
    let s = TestServer::start().await;
    stage(&s, 48).await;
    let page = audit(&s, "?agent=a1&limit=5").await;
    assert_eq!(page.len(), 5);
    assert!(page.iter().all(|e| e["agentId"] == "a1"));
    let ids: Vec<i64> = page.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    assert_eq!(audit(&s, "?agent=agent1").await.len(), 12, "by name too");
    assert_eq!(audit(&s, "?user=user2&action=exec").await.len(), 8);
    assert_eq!(audit(&s, "?user=u2").await.len(), 16);
    assert_eq!(audit(&s, "?since=630m").await.len(), 11);
    assert_eq!(audit(&s, "?until=2430m").await.len(), 7);
    // Paging with `before` visits every entry once.
    let mut seen = BTreeSet::new();
    let mut before = String::new();
    loop {
        let page = audit(&s, &format!("?limit=7{before}")).await;
        for e in &page {
            assert!(seen.insert(e["id"].as_i64().unwrap()));
        }
        if page.len() < 7 {
            break;
        }
        before = format!("&before={}", page.last().unwrap()["id"]);
    }
    assert_eq!(seen.len(), 48);
    assert!(
        audit(&s, "?since=1h&until=2h").await.is_empty(),
        "a range the wrong way round holds nothing"
    );
    for (query, field) in [
        ("?action=rm", "action"),
        ("?since=yesterday", "since"),
        ("?until=2026-13-01T00:00:00Z", "until"),
        ("?since=10h30m", "since"),
        ("?agent=", "agent"),
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?before=0", "before"),
    ] {
        let (status, v) = s.call("GET", &format!("/api/v1/audit{query}"), None).await;
        assert_eq!(status, 400, "{query}: {v}");
        assert_eq!(v["error"]["field"], field, "{query}: {v}");
    }
    for query in ["?limit=ten", "?colour=red"] {
        let (status, v) = s.call("GET", &format!("/api/v1/audit{query}"), None).await;
        assert_eq!(status, 400, "{query}: {v}");
    }
}

#[tokio::test]
async fn members_see_their_own_actions_and_their_agents_only() {
    let s = TestServer::start().await;
    stage(&s, 6).await;
    let bob = user(&s, "bob", "member", None).await;
    let (status, v) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{bob}"),
            Some(json!({"password": "bobs-password-1"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let bob_token = own_token(
        &s,
        "bob",
        "bobs-password-1",
        json!(["agents:read", "agents:write"]),
    )
    .await;
    let (status, _) = call_as(
        &s,
        &bob_token,
        "POST",
        "/api/v1/agents",
        Some(json!({"name": "bobs"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, v) = get_as(&s, &bob_token, "/api/v1/audit").await;
    assert_eq!(status, 200, "{v}");
    let mine = v.as_array().unwrap();
    assert!(!mine.is_empty());
    assert!(
        mine.iter().all(|e| e["userId"] == bob.as_str()),
        "{mine:#?}"
    );
    assert!(
        audit(&s, "").await.len() > mine.len(),
        "the admin sees everyone's"
    );
    // Without agents:read, not at all.
    let (writer, _) = token_by(
        &s,
        &bob_token,
        json!({"name": "w", "scopes": ["agents:write"]}),
    )
    .await;
    let (status, _) = get_as(&s, &writer, "/api/v1/audit").await;
    assert_eq!(status, 403);

    // The owner reads what others did on their agent; a token of theirs limited to another
    // agent reads nothing of this one.
    let bobs = s
        .get_json("/api/v1/agents")
        .await
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "bobs")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, v) = s
        .call(
            "PATCH",
            &format!("/api/v1/agents/{bobs}"),
            Some(json!({"idleMinutes": 30})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = get_as(&s, &bob_token, "/api/v1/audit?action=agent.update").await;
    assert_eq!(
        v.as_array().unwrap().len(),
        1,
        "the admin's change of bob's agent: {v}"
    );
    let (status, _) = call_as(
        &s,
        &bob_token,
        "POST",
        "/api/v1/agents",
        Some(json!({"name": "other"})),
    )
    .await;
    assert_eq!(status, 201);
    let (narrow, _) = token_by(
        &s,
        &bob_token,
        json!({"name": "narrow", "scopes": ["agents:read"], "agents": ["other"]}),
    )
    .await;
    let (_, v) = get_as(&s, &narrow, "/api/v1/audit").await;
    let seen = v.as_array().unwrap();
    assert!(
        seen.iter().all(|e| e["agentName"] == "other"),
        "only the token's agent: {seen:#?}"
    );
}

#[tokio::test]
async fn entries_older_than_the_retention_are_pruned() {
    let s = TestServer::start().await;
    stage(&s, 10).await;
    assert_eq!(audit(&s, "?user=user0").await.len(), 4);
    // Kept forever with 0s; pruned at start (and hourly) with a retention.
    let s = s
        .restart_with(|c| c.server.audit_retention = std::time::Duration::ZERO)
        .await;
    assert_eq!(audit(&s, "?user=user0").await.len(), 4);
    let s = s
        .restart_with(|c| {
            c.server.audit_retention = std::time::Duration::from_secs(5 * 3600 + 1800)
        })
        .await;
    wait_for("old entries pruned", || async {
        let staged: Vec<Value> = audit(&s, "?action=exec")
            .await
            .into_iter()
            .chain(audit(&s, "?action=fs.write").await)
            .collect();
        staged.len() == 6
    })
    .await;
}

/// The team's changes and answers are in the log with who made them, each read back: a stop
/// and a start, an access token and a join, an approval's answer, a prompt, members added and
/// removed, a token revoked and a user removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_changes_and_answers_are_recorded_with_their_principal() {
    use crate::common::acp::{harness, test_agent, Chat};
    use crate::common::client::Client;
    let s = TestServer::start_with(|c| {
        let agent = test_agent();
        let path = agent.to_str().expect("utf-8 path");
        c.harnesses.insert("test".into(), harness(path, &[]));
        c.sandbox.default_harness = Some("test".into());
    })
    .await;
    let password = "correct-horse-battery";
    let as_user = |token: String| Client {
        token,
        ..s.api.clone()
    };
    let mut people = Vec::new();
    for name in ["ann", "bob", "carl"] {
        let id = user(&s, name, "member", Some(password)).await;
        let scopes = json!([
            "agents:read",
            "agents:write",
            "agents:use",
            "approvals:answer"
        ]);
        people.push((id, as_user(own_token(&s, name, password, scopes).await)));
    }
    let (ann, bob) = (&people[0].1, &people[1].1);
    let carl_id = people[2].0.clone();
    let id = ann
        .create_agent(json!({
            "name": "club", "access": "protected", "approvals": {"commands": "always"},
        }))
        .await;
    ann.wait_state(&id, "running").await;
    let agent = |what: &str| format!("/api/v1/agents/{id}{what}");

    let (status, v) = ann.call("POST", &agent("/stop"), None).await;
    assert_eq!(status, 202, "{v}");
    ann.wait_state(&id, "sleeping").await;
    let (status, v) = ann.call("POST", &agent("/start"), None).await;
    assert_eq!(status, 202, "{v}");
    ann.wait_state(&id, "running").await;
    let (status, v) = ann.call("POST", &agent("/access-token"), None).await;
    assert_eq!(status, 201, "{v}");
    let access = v["accessToken"].as_str().expect("access token").to_string();
    let (status, v) = bob
        .call(
            "POST",
            &agent("/join"),
            Some(json!({"accessToken": access})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // Bob's command waits for the owner, who allows it.
    let held = {
        let bob = bob.clone();
        let path = agent("/exec");
        tokio::spawn(async move {
            bob.call("POST", &path, Some(json!({"command": ["echo", "ok"]})))
                .await
        })
    };
    let aid = ann.pending_command("echo ok").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (status, v) = ann.answer_approval(&aid, "allow").await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = held.await.expect("held exec");
    assert_eq!((status, v["stdout"].as_str()), (200, Some("ok\n")), "{v}");
    let chat = Chat::open(ann, &id, json!({})).await;
    assert_eq!(Chat::text(&chat.ask("hello log").await), "hello log");
    let (status, v) = ann
        .call(
            "POST",
            &agent("/members"),
            Some(json!({"user": "carl", "role": "operator"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = ann.call("DELETE", &agent("/members/carl"), None).await;
    assert_eq!(status, 204, "{v}");
    let (_, tid) = token(
        &s,
        json!({"name": "short-lived", "scopes": ["agents:read"]}),
    )
    .await;
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/tokens/{tid}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = s
        .call("DELETE", &format!("/api/v1/users/{carl_id}"), None)
        .await;
    assert_eq!(status, 204);

    let entries = audit(&s, "?limit=1000").await;
    let check = |action: &str, who: &str, status: u16| {
        let e = find(&entries, action);
        assert_eq!(
            (e["userName"].as_str(), e["status"].as_u64()),
            (Some(who), Some(u64::from(status))),
            "{action}: {e}"
        );
        if who != "admin" {
            assert_eq!(e["tokenName"], "ci", "{action}: {e}");
            assert_eq!(e["agentId"], id.as_str(), "{action}: {e}");
        }
        e.clone()
    };
    check("agent.stop", "ann", 202);
    check("agent.start", "ann", 202);
    check("access_token.rotate", "ann", 201);
    check("agent.join", "bob", 200);
    check("approval.answer", "ann", 200);
    assert_eq!(check("exec", "bob", 200)["detail"], "echo ok");
    assert_eq!(check("session.prompt", "ann", 202)["detail"], "hello log");
    check("member.add", "ann", 200);
    check("member.remove", "ann", 204);
    check("token.revoke", "admin", 204);
    check("user.delete", "admin", 204);
    let all = serde_json::to_string(&entries).expect("json");
    assert!(
        !all.contains(&access),
        "the access token is in the audit log"
    );
}
