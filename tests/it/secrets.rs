//! Secrets through the API: set (made, then rotated), listed without values, deleted; bad
//! fields refused by name; kept sealed across a restart, with no value in the database file.

use serde_json::{json, Value};

use crate::common::{expect_error, TestServer};

const VALUE: &str = "sk-test-9f8e7d6c5b4a";
const ROTATED: &str = "sk-test-rotated-0a1b2c";

async fn put(s: &TestServer, name: &str, body: Value) -> (u16, Value) {
    s.call("PUT", &format!("/api/v1/secrets/{name}"), Some(body))
        .await
}

#[tokio::test]
async fn a_secret_is_set_listed_without_its_value_rotated_and_deleted() {
    let s = TestServer::start().await;
    let (status, made) = put(
        &s,
        "ANTHROPIC_API_KEY",
        json!({"value": VALUE, "hosts": ["api.anthropic.test"], "header": "x-api-key", "format": "{value}"}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["name"], "ANTHROPIC_API_KEY");
    assert_eq!(made["hosts"], json!(["api.anthropic.test"]));
    assert_eq!(made["header"], "x-api-key");
    assert!(made.get("value").is_none(), "{made}");
    let (status, rotated) = put(
        &s,
        "ANTHROPIC_API_KEY",
        json!({"value": ROTATED, "hosts": ["api.anthropic.test"]}),
    )
    .await;
    assert_eq!(status, 200, "a rotation: {rotated}");
    assert_eq!(rotated["createdAt"], made["createdAt"]);
    assert_eq!(rotated["header"], "Authorization", "the default header");
    assert_eq!(rotated["format"], "Bearer {value}");
    let r = s
        .http
        .get(s.url("/api/v1/secrets"))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains(VALUE) && !text.contains(ROTATED),
        "no value listed: {text}"
    );
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);

    // Kept sealed: a restart reads it back, and the database file holds no value in clear.
    let s = s.restart_with(|_| {}).await;
    let (status, list) = s.call("GET", "/api/v1/secrets", None).await;
    assert_eq!(status, 200);
    assert_eq!(list[0]["name"], "ANTHROPIC_API_KEY");
    for entry in std::fs::read_dir(s.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            for v in [VALUE, ROTATED] {
                assert!(
                    !bytes.windows(v.len()).any(|w| w == v.as_bytes()),
                    "{} holds a value in clear",
                    path.display()
                );
            }
        }
    }
    let key = s.dir.path().join("secrets.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let (status, _) = s
        .call("DELETE", "/api/v1/secrets/ANTHROPIC_API_KEY", None)
        .await;
    assert_eq!(status, 204);
    let r = s
        .http
        .delete(s.url("/api/v1/secrets/ANTHROPIC_API_KEY"))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found").await;
}

#[tokio::test]
async fn bad_fields_are_refused_by_name_and_nothing_is_kept() {
    let s = TestServer::start().await;
    let cases = [
        (
            "HTTP_PROXY",
            json!({"value": "v", "hosts": ["a.test"]}),
            "name",
        ),
        ("GOOD", json!({"value": "", "hosts": ["a.test"]}), "value"),
        (
            "GOOD",
            json!({"value": "a\r\nX-Evil: 1", "hosts": ["a.test"]}),
            "value",
        ),
        ("GOOD", json!({"value": "v", "hosts": []}), "hosts"),
        ("GOOD", json!({"value": "v", "hosts": ["*"]}), "hosts"),
        (
            "GOOD",
            json!({"value": "v", "hosts": ["a.test"], "header": "Host"}),
            "header",
        ),
        (
            "GOOD",
            json!({"value": "v", "hosts": ["a.test"], "header": "proxy-authorization"}),
            "header",
        ),
        (
            "GOOD",
            json!({"value": "v", "hosts": ["a.test"], "format": "Bearer"}),
            "format",
        ),
    ];
    for (name, body, field) in cases {
        let r = s
            .http
            .put(s.url(&format!("/api/v1/secrets/{name}")))
            .bearer_auth(&s.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{name} {body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["field"], field, "{name} {body}: {v}");
        assert!(!v.to_string().contains("X-Evil"), "no value echoed: {v}");
    }
    let (_, list) = s.call("GET", "/api/v1/secrets", None).await;
    assert_eq!(list, json!([]));
}

/// `agenthold secrets set` reads the value from stdin (never argv), `list` shows no value, `rm`
/// deletes; no value on stdin is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_from_the_command_line() {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;

    use crate::cli::{cli, run};
    let s = TestServer::start().await;
    let mut set = cli(&s)
        .args([
            "secrets",
            "set",
            "GITHUB_TOKEN",
            "--host",
            "api.github.test",
            "--host",
            "*.githubusercontent.test",
            "--format",
            "token {value}",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = set.stdin.take().unwrap();
    stdin
        .write_all(format!("{VALUE}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = set.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, out, _) = run(&s, &["secrets", "list"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("GITHUB_TOKEN") && out.contains("api.github.test"),
        "{out}"
    );
    assert!(!out.contains(VALUE), "{out}");
    let (code, out, _) = run(&s, &["secrets", "list", "--json"]).await;
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["format"], "token {value}");
    // The trailing line break `echo` adds is not part of the value: the server got it exact.
    let sealed = s.store.list_secrets().await.unwrap();
    assert_eq!(sealed.len(), 1);
    // The sealed value is the value plus Poly1305's 16-byte tag.
    assert_eq!(sealed[0].sealed.len(), VALUE.len() + 16);

    let (code, _, err) = run(&s, &["secrets", "set", "EMPTY", "--host", "a.test"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("no value on stdin"), "{err}");
    let (code, _, err) = run(&s, &["secrets", "rm", "GITHUB_TOKEN"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&s, &["secrets", "rm", "GITHUB_TOKEN"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("no secret named GITHUB_TOKEN"), "{err}");
}

const GRANTED: &str = "ghp_granted_value_5e4d3c";

async fn make_secret(s: &TestServer, name: &str) {
    let (status, v) = put(
        s,
        name,
        json!({"value": GRANTED, "hosts": ["api.github.test"]}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
}

#[tokio::test]
async fn grants_name_existing_secrets_once_each_and_a_deletion_takes_them_off() {
    let s = TestServer::start().await;
    make_secret(&s, "GITHUB_TOKEN").await;
    make_secret(&s, "NPM_TOKEN").await;
    // A name that is no secret is 409 (it conflicts with the secrets there are); a list that
    // breaks its rules whatever the secrets, 400.
    let bad = [
        (json!(["NO_SUCH_SECRET"]), "NO_SUCH_SECRET", 409),
        (json!(["GITHUB_TOKEN", "GITHUB_TOKEN"]), "twice", 400),
        (json!(["HTTP_PROXY"]), "HTTP_PROXY", 400),
        (json!(["not a name"]), "not a name", 400),
        (
            json!((0..65).map(|i| format!("S{i}")).collect::<Vec<_>>()),
            "at most 64",
            400,
        ),
    ];
    for (secrets, says, code) in &bad {
        let body = json!({"name": "refused", "secrets": secrets});
        let (status, v) = s.call("POST", "/api/v1/agents", Some(body)).await;
        assert_eq!(status, *code, "{secrets}: {v}");
        assert_eq!(v["error"]["field"], "secrets", "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{secrets}: {message}");
    }
    let (_, list) = s.call("GET", "/api/v1/agents", None).await;
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(0),
        "nothing made: {list}"
    );

    let agent = s
        .created_agent(json!({"name": "granted", "secrets": ["GITHUB_TOKEN", "NPM_TOKEN"]}))
        .await;
    assert_eq!(agent["secrets"], json!(["GITHUB_TOKEN", "NPM_TOKEN"]));
    let id = agent["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/agents/{id}");
    for (secrets, says, code) in &bad[..2] {
        let (status, v) = s
            .call("PATCH", &path, Some(json!({"secrets": secrets})))
            .await;
        assert_eq!(status, *code, "{secrets}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
    }
    let (status, v) = s
        .call("PATCH", &path, Some(json!({"secrets": ["NPM_TOKEN"]})))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["secrets"], json!(["NPM_TOKEN"]));

    // Deleting a granted secret is allowed: its name leaves every agent, so a secret made
    // again under that name is granted to nobody until granted anew.
    let (status, _) = s.call("DELETE", "/api/v1/secrets/NPM_TOKEN", None).await;
    assert_eq!(status, 204);
    let (_, v) = s.call("GET", &path, None).await;
    assert_eq!(v["secrets"], json!([]), "{v}");
    make_secret(&s, "NPM_TOKEN").await;
    let (_, v) = s.call("GET", &path, None).await;
    assert_eq!(v["secrets"], json!([]), "{v}");
    let text = v.to_string();
    assert!(!text.contains(GRANTED), "no value in the record: {text}");
}

/// Over the real tunnel (the fake driver runs sandboxd in process): a granted secret is a
/// variable holding a placeholder, never the value; another agent's differs, and so does the
/// next boot's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_sees_a_placeholder_per_agent_and_boot_never_the_value() {
    let s = TestServer::start().await;
    make_secret(&s, "GITHUB_TOKEN").await;
    let body = |name: &str| json!({"name": name, "secrets": ["GITHUB_TOKEN"], "env": {"GITHUB_TOKEN": "from-env"}});
    let a = s.running_agent(body("one")).await;
    let b = s.running_agent(body("two")).await;
    let seen = |id: String| {
        let s = &s;
        async move {
            let out = s.exec_ok(&id, &["sh", "-c", "env"]).await;
            assert!(!out.contains(GRANTED), "the value is in the sandbox: {out}");
            out.lines()
                .find_map(|l| l.strip_prefix("GITHUB_TOKEN="))
                .unwrap_or_else(|| panic!("no GITHUB_TOKEN in {out}"))
                .to_string()
        }
    };
    let pa = seen(a.clone()).await;
    assert!(pa.starts_with("agenthold-secret:"), "{pa}");
    assert_eq!(pa.len(), "agenthold-secret:".len() + 64);
    assert_eq!(seen(a.clone()).await, pa, "the same within a boot");
    assert_ne!(seen(b).await, pa, "another agent's differs");
    s.stop_sleeping(&a).await;
    let after = seen(a.clone()).await;
    assert!(after.starts_with("agenthold-secret:"));
    assert_ne!(after, pa, "the next boot's differs");
    // Taken away: the variable is the agent's own again for new processes.
    let (status, _) = s
        .call(
            "PATCH",
            &format!("/api/v1/agents/{a}"),
            Some(json!({"secrets": []})),
        )
        .await;
    assert_eq!(status, 200);
    let out = s.exec_ok(&a, &["sh", "-c", "echo $GITHUB_TOKEN"]).await;
    assert_eq!(out.trim(), "from-env");
}
