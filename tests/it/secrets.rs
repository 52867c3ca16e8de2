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
