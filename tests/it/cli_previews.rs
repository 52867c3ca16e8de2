//! `agenthold ports|preview|previews` against a live server (fake driver, whose sandbox's
//! loopback is the host's): a listener this test opens shows in `ports`, and the URLs `preview`
//! prints answer through the preview listener.

use std::net::SocketAddr;
use std::path::Path;

use axum::Router;
use serde_json::Value;

use crate::cli::{cli, run};
use crate::common::previews::{browser, serve_on_loopback};
use crate::common::{wait_for_value, TestServer, TOKEN};

/// An app as an agent would serve one, on 127.0.0.1 (the sandbox's loopback here).
async fn app(says: &'static str) -> SocketAddr {
    let router = Router::new().fallback(move || async move { says });
    serve_on_loopback(router).await
}

/// `GET` of a preview URL (`http://{port}-{agent}.localhost:{listener port}/…`) through the
/// preview listener, with the URL's host as `Host`: `*.localhost` need not resolve here.
fn get(s: &TestServer, url: &str) -> reqwest::RequestBuilder {
    let url = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let host = format!(
        "{}:{}",
        url.host_str().expect("a host"),
        url.port().expect("a port")
    );
    let mut to = format!("http://{}{}", s.previews_addr, url.path());
    if let Some(q) = url.query() {
        to = format!("{to}?{q}");
    }
    browser().get(to).header("host", host)
}

/// The one line of stdout, a URL.
fn url_line(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one line, the URL: {out:?}");
    lines[0].to_string()
}

async fn previews_json(s: &TestServer, agent: &str) -> Vec<Value> {
    let (code, out, err) = run(s, &["--json", "previews", agent]).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_and_previews_from_the_command_line() {
    let s = TestServer::start().await;
    s.running_agent("web").await;
    let app = app("hello from the app").await;
    let port = app.port().to_string();

    // The test's listener is among the sandbox's, as a table and as JSON.
    let (code, out, err) = run(&s, &["ports", "web"]).await;
    assert_eq!(code, 0, "{err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["PORT", "ADDRESS", "PROCESS"], "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{port} ")) && l.contains("127.0.0.1")),
        "{out}"
    );
    let (code, out, err) = run(&s, &["--json", "ports", "web"]).await;
    assert_eq!(code, 0, "{err}");
    let ports: Vec<Value> = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(
        ports
            .iter()
            .any(|p| p["port"] == app.port() && p["address"] == "127.0.0.1"),
        "{out}"
    );

    // A private preview (the default): the URL on stdout, alone; it opens with the admin token.
    let (code, out, err) = run(&s, &["preview", "web", &port]).await;
    assert_eq!(code, 0, "{err}");
    let url = url_line(&out);
    assert_eq!(
        url,
        format!("http://{port}-web.localhost:{}/", s.previews_addr.port())
    );
    let r = get(&s, &url).send().await.expect("GET the preview");
    assert_eq!(r.status(), 401, "no credentials");
    let r = get(&s, &url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET the preview");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("body"), "hello from the app");

    // Again: the same URL, and a word on stderr that it was there already.
    let (code, out, err) = run(&s, &["preview", "web", &port]).await;
    assert_eq!((code, url_line(&out)), (0, url.clone()), "{err}");
    assert!(err.contains("already had a preview"), "{err}");
    // The same through `--access private`, spelled out.
    let (code, out, err) = run(&s, &["preview", "web", &port, "--access", "private"]).await;
    assert_eq!((code, url_line(&out)), (0, url.clone()), "{err}");

    // Another access for a port that has a preview: refused, saying how to make room.
    let listed = previews_json(&s, "web").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let pid = listed[0]["id"].as_str().expect("id").to_string();
    let (code, out, err) = run(&s, &["preview", "web", &port, "--public"]).await;
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("already has a private preview")
            && err.contains(&format!("agenthold previews web --delete {pid}")),
        "{err}"
    );

    // The list, as a table; then deleted by its port: the URL is gone (410).
    let (code, out, err) = run(&s, &["previews", "web"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID "), "{out}");
    assert!(
        out.contains(&pid) && out.contains("private") && out.contains(&url),
        "{out}"
    );
    let (code, _, err) = run(&s, &["previews", "web", "--delete", &port]).await;
    assert_eq!(code, 0, "{err}");
    assert!(previews_json(&s, "web").await.is_empty());
    let r = get(&s, &url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET the preview");
    assert_eq!(r.status(), 410);
    let (code, _, err) = run(&s, &["previews", "web", "--delete", &port]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("port {port} of web has no preview")),
        "{err}"
    );
    let (code, _, err) = run(&s, &["previews", "web", "--delete", &pid]).await;
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");

    // A token preview: the URL carries the token, shown this once; without it, 401.
    let (code, out, err) = run(&s, &["preview", "web", &port, "--access", "token"]).await;
    assert_eq!(code, 0, "{err}");
    let with_token = url_line(&out);
    assert!(
        with_token.starts_with(&format!("{url}?token=")),
        "{with_token}"
    );
    assert!(err.contains("the token is shown only now"), "{err}");
    let r = get(&s, &url).send().await.expect("GET without the token");
    assert_eq!(r.status(), 401);
    // With it, a GET is sent back to the bare URL with a cookie for the preview's host alone.
    let r = get(&s, &with_token)
        .send()
        .await
        .expect("GET with the token");
    assert_eq!(r.status(), 302);
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a cookie")
        .to_string();
    assert!(cookie.starts_with("agenthold_preview="), "{cookie}");
    let r = get(&s, &url)
        .header("cookie", cookie)
        .send()
        .await
        .expect("GET with the cookie");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("body"), "hello from the app");
    // Its token cannot be printed again: asking again fails and says what to do.
    let (code, out, err) = run(&s, &["preview", "web", &port, "--access", "token"]).await;
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("shown only when it was made") && err.contains("--delete"),
        "{err}"
    );
}

/// A `$BROWSER` that writes the URL it is given to the file `$OPENED`.
fn fake_browser(dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-browser");
    std::fs::write(&path, "#!/bin/sh\nprintf '%s\\n' \"$1\" >> \"$OPENED\"\n")
        .expect("write the fake browser");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_starts_a_private_preview_at_the_sign_in_hand_off() {
    let s = TestServer::start().await;
    s.running_agent("opener").await;
    let private = app("private app").await;
    let public = app("public app").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let browser_cmd = fake_browser(dir.path());
    let opened = dir.path().join("opened");
    let opened_urls = || async {
        std::fs::read_to_string(&opened)
            .ok()
            .map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
    };

    // Private: the browser goes to the API's hand-off, which sends a signed-in person on to
    // the preview's host with a one-time code.
    let out = cli(&s)
        .env("BROWSER", &browser_cmd)
        .env("OPENED", &opened)
        .args(["preview", "opener", &private.port().to_string(), "--open"])
        .output()
        .await
        .expect("run the CLI");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("opened in the browser"), "{err}");
    let url = url_line(&String::from_utf8_lossy(&out.stdout));
    let pid = previews_json(&s, "opener").await[0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let first = wait_for_value("the browser is given a URL", || async {
        opened_urls().await.and_then(|u| u.first().cloned())
    })
    .await;
    assert_eq!(first, format!("{}/api/v1/previews/{pid}/open", s.base));
    let r = browser()
        .get(&first)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET the hand-off");
    assert_eq!(r.status(), 302);
    let to = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("a Location")
        .to_string();
    assert!(
        to.starts_with(&format!("{}.agenthold/auth?code=", url)),
        "{to} after {url}"
    );

    // Public: the browser gets the URL itself.
    let out = cli(&s)
        .env("BROWSER", &browser_cmd)
        .env("OPENED", &opened)
        .args([
            "preview",
            "opener",
            &public.port().to_string(),
            "--public",
            "--open",
        ])
        .output()
        .await
        .expect("run the CLI");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public_url = url_line(&String::from_utf8_lossy(&out.stdout));
    let second = wait_for_value("the browser is given the public URL", || async {
        opened_urls().await.and_then(|u| u.get(1).cloned())
    })
    .await;
    assert_eq!(second, public_url);
    let r = get(&s, &public_url).send().await.expect("GET the preview");
    assert_eq!(r.text().await.expect("body"), "public app");

    // No browser to be had: the URL is printed all the same, and the CLI says so.
    let empty = tempfile::tempdir().expect("tempdir");
    let out = cli(&s)
        .env("BROWSER", "")
        .env("PATH", empty.path())
        .env_remove("XDG_CURRENT_DESKTOP")
        .env_remove("DESKTOP_SESSION")
        .args([
            "preview",
            "opener",
            &public.port().to_string(),
            "--public",
            "--open",
        ])
        .output()
        .await
        .expect("run the CLI");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(url_line(&String::from_utf8_lossy(&out.stdout)), public_url);
    assert!(
        err.contains("could not open a browser") && err.contains(&public_url),
        "{err}"
    );
}

#[tokio::test]
async fn bad_ports_and_unknown_agents_are_clear_errors() {
    let s = TestServer::start().await;
    s.sleeping_agent("napper").await;
    for port in ["0", "70000", "web"] {
        let (code, out, err) = run(&s, &["preview", "napper", port]).await;
        assert_eq!((code, out.as_str()), (2, ""), "{port}: {err}");
        assert!(err.contains(&format!("invalid value '{port}'")), "{err}");
    }
    let (code, _, err) = run(
        &s,
        &["preview", "napper", "80", "--expires-in-minutes", "0"],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    for args in [
        &["preview", "nosuch", "8000"][..],
        &["ports", "nosuch"],
        &["previews", "nosuch"],
    ] {
        let (code, out, err) = run(&s, args).await;
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(
            err.contains("no agent with the id or name \"nosuch\""),
            "{err}"
        );
    }
    // A sleeping agent listens on nothing; the CLI says why the list is empty.
    let (code, out, err) = run(&s, &["ports", "napper"]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, "PORT  ADDRESS  PROCESS\n"),
        "{err}"
    );
    assert!(err.contains("napper is sleeping"), "{err}");
}
