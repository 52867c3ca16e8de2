//! `agenthold users`, `tokens`, `audit`, `access`, `members` and `join` against a live server.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::get_as;
use crate::cli::{cli, run};
use crate::common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_tokens_from_the_command_line() {
    let s = TestServer::start().await;
    s.create_agent("web").await;
    let mut add = cli(&s)
        .args(["users", "add", "ann", "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = add.stdin.take().unwrap();
    stdin.write_all(b"ann's password\n").await.unwrap();
    drop(stdin);
    let out = add.wait_with_output().await.unwrap();
    assert!(out.status.success());
    let ann = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (code, out, _) = run(&s, &["users", "list"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("ann") && out.contains("member") && out.contains(&ann),
        "{out}"
    );

    let (code, token, err) = run(
        &s,
        &[
            "tokens",
            "create",
            "ci",
            "--scope",
            "agents:read",
            "--agent",
            "web",
            "--expires-in-days",
            "7",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();
    let (status, agents) = get_as(&s, &token, "/api/v1/agents").await;
    assert_eq!((status, agents.as_array().unwrap().len()), (200, 1));
    let (code, out, _) = run(&s, &["tokens", "list", "--json"]).await;
    assert_eq!(code, 0);
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(list.len(), 1);
    let id = list[0]["id"].as_str().unwrap().to_string();
    let (code, _, err) = run(&s, &["tokens", "create", "bad", "--scope", "everything"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("not a scope"), "{err}");
    assert_eq!(run(&s, &["tokens", "revoke", &id]).await.0, 0);
    assert_eq!(get_as(&s, &token, "/api/v1/agents").await.0, 401);
    assert_eq!(run(&s, &["users", "remove", "ann"]).await.0, 0);
    let (code, _, err) = run(&s, &["users", "remove", "admin"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("built-in"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_keeps_a_token_only_the_user_can_read_and_later_commands_use_it() {
    use std::os::unix::fs::PermissionsExt;
    let s = TestServer::start().await;
    // Public: a member sees it without being one of its members.
    s.create_agent(serde_json::json!({ "name": "web", "access": "public" }))
        .await;
    super::user(&s, "ann", "member", Some("ann's password")).await;
    let config = tempfile::tempdir().unwrap();
    let as_ann = |args: &[&str]| {
        let mut c = cli(&s);
        c.env_remove("AGENTHOLD_TOKEN")
            .env("XDG_CONFIG_HOME", config.path())
            .args(args);
        c
    };
    let mut login = as_ann(&["login", "ann"]);
    let mut child = login
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"ann's password\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("as ann (member)"), "{err}");
    let kept = config.path().join("agenthold/tokens.json");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    let out = as_ann(&["agents", "list", "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let agents: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(agents.len(), 1);
    let out = as_ann(&["users", "list"]).output().await.unwrap();
    assert!(!out.status.success(), "a member's token is no admin");

    // A wrong password keeps nothing new.
    let before = std::fs::read_to_string(&kept).unwrap();
    let mut child = as_ann(&["login", "ann"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"wrong password\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_from_the_command_line() {
    let s = TestServer::start().await;
    let id = s.create_agent("web").await;
    let (code, out, err) = run(&s, &["audit", "--agent", "web", "--action", "agent.create"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one entry: {out}");
    assert!(
        lines[0].contains("ACTION") && lines[0].contains("WHO"),
        "{out}"
    );
    assert!(
        lines[1].contains("agent.create") && lines[1].contains("admin") && lines[1].contains("web"),
        "{out}"
    );
    let (code, out, err) = run(&s, &["--json", "audit", "--limit", "5", "--since", "1h"]).await;
    assert_eq!(code, 0, "{err}");
    let entries: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(entries[0]["agentId"], id.as_str(), "{out}");
    // A bad filter is the server's 400, told on stderr.
    let (code, _, err) = run(&s, &["audit", "--action", "explode"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("not an action"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_members_and_join_from_the_command_line() {
    let s = TestServer::start().await;
    let id = s.create_agent("club").await;
    super::user(&s, "ann", "member", Some("ann's password")).await;
    super::user(&s, "bob", "member", Some("bob's password")).await;
    let (code, out, err) = run(&s, &["access", "club"]).await;
    assert_eq!((code, out.trim()), (0, "private"), "{err}");
    let (code, _, err) = run(&s, &["access", "club", "everyone"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("not an access policy"), "{err}");
    let (code, token, err) = run(&s, &["access", "club", "protected", "--new-token"]).await;
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();
    assert!(token.starts_with("ahj_"), "{token}");

    let (code, _, err) = run(&s, &["members", "club", "add", "ann", "--role", "operator"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&s, &["members", "club"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("ann") && out.contains("operator"), "{out}");
    let (code, _, _) = run(&s, &["members", "club", "remove", "ann"]).await;
    assert_eq!(code, 0);
    let (_, out, _) = run(&s, &["members", "club", "--json"]).await;
    assert_eq!(out.trim(), "[]");

    // bob joins with the token, by the agent's id (the agent is in no list of his before).
    let cookie = super::sign_in(&s, "bob", "bob's password").await;
    let r = s
        .http
        .post(s.url("/api/v1/tokens"))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", s.api_addr))
        .json(&serde_json::json!({ "name": "bob", "scopes": ["agents:read", "agents:use"] }))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    let bob = v["token"].as_str().unwrap().to_string();
    assert_eq!(get_as(&s, &bob, "/api/v1/agents").await.0, 200);
    let join = |args: Vec<String>| {
        let mut c = cli(&s);
        c.env("AGENTHOLD_TOKEN", &bob).args(args);
        c
    };
    let out = join(vec!["join".into(), id.clone(), "ahj_wrong".into()])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the access token"), "{err}");
    let out = join(vec!["join".into(), id.clone(), token.clone()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id);
    let (status, agents) = get_as(&s, &bob, "/api/v1/agents").await;
    assert_eq!((status, agents.as_array().unwrap().len()), (200, 1));
}
