//! The file API over the real tunnel: streamed 64 MiB round trip, list, mkdir -p, remove,
//! whole-or-nothing writes, hostile paths and limits.

use crate::common::client::query as q;
use crate::common::{expect_error, wait_for, TestServer};
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

/// A deterministic pseudo-random 64 KiB block, repeated with its index mixed in.
fn block(i: u64) -> Bytes {
    let mut b = vec![0u8; 64 * 1024];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for byte in b.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    Bytes::from(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_mib_round_trip_is_byte_identical() {
    let s = TestServer::start().await;
    let id = s.running_agent("files").await;
    const BLOCKS: u64 = 1024; // 64 MiB
    let mut want = Sha256::new();
    for i in 0..BLOCKS {
        want.update(block(i));
    }
    let body = futures::stream::iter((0..BLOCKS).map(|i| Ok::<_, std::io::Error>(block(i))));
    let r = s
        .put(&format!("/api/v1/agents/{id}/fs/write?path=big.bin"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());

    let r = s
        .get(&format!("/api/v1/agents/{id}/fs/read?path=big.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.content_length(), Some(BLOCKS * 64 * 1024));
    let mut got = Sha256::new();
    let mut n = 0u64;
    let mut stream = r.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        n += chunk.len() as u64;
        got.update(&chunk);
    }
    assert_eq!(n, BLOCKS * 64 * 1024);
    assert_eq!(got.finalize(), want.finalize());

    let list = s.list_dir(&id, ".").await;
    let big = list
        .iter()
        .find(|e| e["name"] == "big.bin")
        .expect("listed");
    assert_eq!(big["type"], "file");
    assert_eq!(big["size"], BLOCKS * 64 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_list_remove_and_errors() {
    let s = TestServer::start().await;
    let id = s.running_agent("tree").await;
    let base = format!("/api/v1/agents/{id}/fs");
    // `mkdir -p a/b/c`, then a file with a hostile name in it.
    let name = "we ird \"name\" 'q' <script>alert(1)<script> ü.txt";
    s.write_tree(&id, &[(&format!("a/b/c/{name}"), "hello")])
        .await;
    let list = s.list_dir(&id, "a/b/c").await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], name);
    // Absolute paths under /home/agent are the same files.
    let r = s
        .get(&format!(
            "{base}/read?path={}",
            q(&format!("/home/agent/a/b/c/{name}"))
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");

    // A directory where a file is wanted, and the reverse: what the path names now is in the
    // way, not the request (409, as the document lists for a conflict with the current state).
    expect_error(
        s.get(&format!("{base}/read?path=a")).send().await.unwrap(),
        409,
        "conflict",
    )
    .await;
    let r = s
        .get(&format!("{base}/list?path={}", q(&format!("a/b/c/{name}"))))
        .send()
        .await
        .unwrap();
    expect_error(r, 409, "conflict").await;
    // Missing paths.
    expect_error(
        s.get(&format!("{base}/read?path=nope"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    expect_error(
        s.delete(&format!("{base}/remove?path=nope"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    // A non-empty directory needs recursive=true: a conflict with what it holds now.
    expect_error(
        s.delete(&format!("{base}/remove?path=a"))
            .send()
            .await
            .unwrap(),
        409,
        "conflict",
    )
    .await;
    let r = s
        .delete(&format!("{base}/remove?path=a&recursive=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let list = s.list_dir(&id, ".").await;
    assert!(list.iter().all(|e| e["name"] != "a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_are_refused() {
    let s = TestServer::start().await;
    let id = s.running_agent("hostile").await;
    let base = format!("/api/v1/agents/{id}/fs");
    let long = "x".repeat(4096);
    for path in [
        "../etc/passwd",
        "a/../../x",
        "/etc/passwd",
        "a\0b",
        long.as_str(),
        "",
    ] {
        for (method, route) in [
            ("GET", "read"),
            ("PUT", "write"),
            ("POST", "mkdir"),
            ("DELETE", "remove"),
        ] {
            let r = s
                .request(
                    method.parse().unwrap(),
                    &format!("{base}/{route}?path={}", q(path)),
                )
                .body("x")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            assert!(
                status == 400 || status == 403,
                "{method} {route} {path:?} gave {status}"
            );
        }
    }
    // Nothing escaped: the server's data dir holds no stray file.
    assert!(!s.dir.path().join("x").exists());
    assert_eq!(s.get("/api/v1/health").send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_upload_leaves_no_file() {
    let s = TestServer::start().await;
    let id = s.running_agent("broken").await;
    let base = format!("/api/v1/agents/{id}/fs");
    // An existing file must survive a failed overwrite untouched.
    s.write_tree(&id, &[("keep.txt", "original")]).await;
    for path in ["keep.txt", "new.bin"] {
        let body = futures::stream::iter((0..40u64).map(|i| {
            if i < 20 {
                Ok(block(i))
            } else {
                Err(std::io::Error::other("the client went away"))
            }
        }));
        let r = s
            .put(&format!("{base}/write?path={path}"))
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await;
        assert!(r.is_err() || !r.unwrap().status().is_success());
    }
    // The sandbox finishes discarding asynchronously; poll for the settled listing.
    wait_for("partial upload discarded", || async {
        let list = s.list_dir(&id, ".").await;
        let names: Vec<&str> = list.iter().filter_map(|e| e["name"].as_str()).collect();
        names == ["keep.txt"]
    })
    .await;
    let r = s
        .get(&format!("{base}/read?path=keep.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "original");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_over_the_limit_are_413_and_leave_nothing() {
    let s = TestServer::start_with(|c| c.server.max_file_mb = 1).await;
    let id = s.running_agent("limits").await;
    let base = format!("/api/v1/agents/{id}/fs");
    // Declared too large: refused from the header alone, before any byte of the body.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(s.api_addr).await.unwrap();
        let head = format!(
            "PUT {base}/write?path=big HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
             content-length: {}\r\n\r\n",
            crate::common::TOKEN,
            2u64 << 30
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tcp.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(
            answer.contains("1 MiB") && answer.contains("too_large"),
            "{answer}"
        );
    }
    // Streamed, with no length up front.
    let body = futures::stream::iter((0..40u64).map(|i| Ok::<_, std::io::Error>(block(i))));
    let r = s
        .put(&format!("{base}/write?path=big"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await;
    if let Ok(r) = r {
        assert_eq!(r.status(), 413);
        // Refused before the body ended: the connection is not reused for the next request.
        assert_eq!(
            r.headers().get("connection").and_then(|v| v.to_str().ok()),
            Some("close")
        );
    }
    wait_for("oversized upload discarded", || async {
        s.list_dir(&id, ".")
            .await
            .iter()
            .all(|e| e["name"] != "big" && !e["name"].as_str().unwrap().contains("tmp"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_wake_a_sleeping_agent() {
    let s = TestServer::start().await;
    let id = s.sleeping_agent("nap").await;
    let r = s
        .get(&format!("/api/v1/agents/{id}/fs/list?path=."))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(s.state(&id).await, "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_the_agent_wrote_is_downloaded_never_shown_on_the_ui_origin() {
    // The attacker: code in the sandbox writes HTML with a script (or output that looks like
    // it) and gets someone to open its download link. The browser must save it, and must never
    // guess it is a page of the UI's origin, where the script would act with the viewer's cookie.
    let s = TestServer::start().await;
    let id = s.running_agent("pages").await;
    let page = "<html><script>fetch('/api/v1/agents')</script></html>";
    s.write_tree(&id, &[("evil.html", page)]).await;
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };

    let r = s
        .get(&format!("/api/v1/agents/{id}/fs/read?path=evil.html"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(
        header(&r, "content-disposition").as_deref(),
        Some("attachment; filename=\"evil.html\"; filename*=UTF-8''evil.html")
    );
    assert_eq!(r.text().await.unwrap(), page);

    // The editor asks for it inline; still never sniffed.
    let r = s
        .get(&format!(
            "/api/v1/agents/{id}/fs/read?path=evil.html&inline=true"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert!(header(&r, "content-disposition").is_some_and(|v| v.starts_with("inline;")));

    // A process's output: the same.
    let started = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            &serde_json::json!({"command": ["cat", "evil.html"], "tag": "show"}),
        )
        .await;
    assert_eq!(started.status(), 201);
    let r = s
        .get(&format!("/api/v1/agents/{id}/processes/show/output"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert!(header(&r, "content-disposition").is_some_and(|v| v.starts_with("attachment;")));

    // And every other answer of the API, errors included.
    for path in ["/api/v1/health", "/api/v1/agents", "/api/v1/no-such-route"] {
        let r = s.get(path).send().await.unwrap();
        assert_eq!(
            header(&r, "x-content-type-options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
    }
}

/// `PUT fs/write` makes the missing directories above the file; `stat`, `exists` and `rename`
/// answer as documented, and no path leads out of the home (the fake driver serves nothing else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_makes_parents_and_stat_exists_rename_answer() {
    let server = TestServer::start().await;
    let s = &server;
    let id = s.running_agent("meta").await;
    let base = format!("/api/v1/agents/{id}/fs");
    let put = |path: &str, body: &'static str| {
        s.put(&format!("{base}/write?path={}", q(path)))
            .body(body)
            .send()
    };
    let r = put("deep/er/still/f.txt", "hello").await.unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    let r = s
        .get(&format!("{base}/read?path=deep/er/still/f.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");
    // A file where a directory would go: a conflict with the tree as it is.
    expect_error(
        put("deep/er/still/f.txt/g", "x").await.unwrap(),
        409,
        "conflict",
    )
    .await;

    let stat = |path: String| {
        let url = format!("{base}/stat?path={}", q(&path));
        async move { s.get(&url).send().await.unwrap() }
    };
    let st: serde_json::Value = stat("deep/er/still/f.txt".into())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(st["path"], "/home/agent/deep/er/still/f.txt");
    assert_eq!(st["type"], "file");
    assert_eq!(st["size"], 5);
    assert_eq!(st["mode"], "0644");
    assert!(st["mtime"].as_str().unwrap().ends_with('Z'), "{st}");
    assert!(!st["owner"].as_str().unwrap().is_empty(), "{st}");
    let dir: serde_json::Value = stat("deep/er".into()).await.json().await.unwrap();
    assert_eq!(dir["type"], "dir");
    assert_eq!(dir["owner"], st["owner"]);
    let home: serde_json::Value = stat("/home/agent".into()).await.json().await.unwrap();
    assert_eq!(home["type"], "dir");
    expect_error(stat("nope".into()).await, 404, "not_found").await;
    expect_error(stat("../x".into()).await, 400, "invalid").await;
    expect_error(stat("/etc/passwd".into()).await, 400, "invalid").await;

    // A symbolic link out of the home: it exists and is described, but nothing is reached
    // through it.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "outside").unwrap();
    s.exec_ok(&id, &["ln", "-s", outside.path().to_str().unwrap(), "out"])
        .await;
    let link: serde_json::Value = stat("out".into()).await.json().await.unwrap();
    assert_eq!(link["type"], "symlink");
    expect_error(stat("out/secret".into()).await, 403, "forbidden").await;
    expect_error(put("out/new/f", "x").await.unwrap(), 403, "forbidden").await;
    assert!(!outside.path().join("new").exists());

    let exists = |path: &str| {
        let url = format!("{base}/exists?path={}", q(path));
        async move {
            let r = s.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200, "exists {url}");
            let v: serde_json::Value = r.json().await.unwrap();
            v["exists"].as_bool().unwrap()
        }
    };
    assert!(exists("deep/er/still/f.txt").await);
    assert!(exists("deep").await);
    assert!(exists(".").await);
    assert!(exists("out").await);
    for missing in [
        "nope",
        "nope/deeper",
        "deep/er/still/f.txt/under-a-file",
        "/etc/passwd",
        "/home/agentx",
        "out/secret",
    ] {
        assert!(!exists(missing).await, "{missing}");
    }
    for bad in ["../x", "a/../../b", ""] {
        let r = s
            .get(&format!("{base}/exists?path={}", q(bad)))
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }

    let rename = |from: &str, to: &str, overwrite: bool| {
        let body = serde_json::json!({"from": from, "to": to, "overwrite": overwrite});
        let url = format!("{base}/rename");
        async move { s.send("POST", &url, &body).await }
    };
    let r = rename("deep/er/still/f.txt", "deep/g.txt", false).await;
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    assert!(!exists("deep/er/still/f.txt").await);
    assert!(exists("deep/g.txt").await);
    put("other.txt", "other").await.unwrap();
    expect_error(
        rename("other.txt", "deep/g.txt", false).await,
        409,
        "conflict",
    )
    .await;
    let r = rename("other.txt", "deep/g.txt", true).await;
    assert_eq!(r.status(), 204);
    let r = s
        .get(&format!("{base}/read?path=deep/g.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "other");
    // Directories move too, with what is in them.
    assert_eq!(rename("deep", "moved", false).await.status(), 204);
    assert!(exists("moved/er/still").await && !exists("deep").await);
    expect_error(rename("nope", "x", false).await, 404, "not_found").await;
    expect_error(
        rename("moved/g.txt", "no/such/dir/g", false).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        rename("moved", "moved/er/inside", false).await,
        409,
        "conflict",
    )
    .await;
    for (from, to) in [
        ("../x", "y"),
        ("moved/g.txt", "../y"),
        ("moved/g.txt", "/etc/y"),
    ] {
        expect_error(rename(from, to, true).await, 400, "invalid").await;
    }
    // The home itself is never moved or removed, whatever is asked: forbidden, not malformed.
    for (from, to) in [
        ("/home/agent", "h2"),
        ("/home/agent/", "/home/agent/"),
        ("moved/g.txt", "/home/agent"),
    ] {
        expect_error(rename(from, to, true).await, 403, "forbidden").await;
    }
    expect_error(
        s.delete(&format!(
            "{base}/remove?path={}&recursive=true",
            q("/home/agent/")
        ))
        .send()
        .await
        .unwrap(),
        403,
        "forbidden",
    )
    .await;
    expect_error(
        rename("moved/g.txt", "out/g.txt", false).await,
        403,
        "forbidden",
    )
    .await;
    assert!(!outside.path().join("g.txt").exists());
    let r = s
        .send(
            "POST",
            &format!("{base}/rename"),
            &serde_json::json!({"from": "a"}),
        )
        .await;
    expect_error(r, 400, "invalid").await;
}

/// One multipart body, several files: each is written (parents made) or reported failed, and a
/// bad one does not stop the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_files_writes_each_part_and_reports_each() {
    let server = TestServer::start().await;
    let s = &server;
    let id = s.running_agent("batch").await;
    let base = format!("/api/v1/agents/{id}/fs");
    let boundary = "XyZzYboundary";
    let mut body = Vec::new();
    for (path, content) in [
        ("a/b/one.txt", &b"one"[..]),
        ("../escape.txt", b"no"),
        ("two.bin", &[0u8, 1, 2, 255][..]),
        ("/etc/outside", b"no"),
    ] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
                 filename=\"{path}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let r = s
        .post(&format!("{base}/write-files"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    let files = v["files"].as_array().unwrap();
    let got: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["error"]["code"].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("a/b/one.txt", None),
            ("../escape.txt", Some("invalid")),
            ("two.bin", None),
            ("/etc/outside", Some("invalid")),
        ],
        "{v}"
    );
    let read = |path: &str| {
        let url = format!("{base}/read?path={}", q(path));
        async move { s.get(&url).send().await.unwrap().bytes().await.unwrap() }
    };
    assert_eq!(&read("a/b/one.txt").await[..], b"one");
    assert_eq!(&read("two.bin").await[..], &[0u8, 1, 2, 255]);
    assert!(!s.dir.path().join("escape.txt").exists());

    // Not multipart at all.
    let r = s
        .post(&format!("{base}/write-files"))
        .header("content-type", "application/json")
        .body("[]")
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;
    // A form with no parts: nothing to write is a client's mistake, said so.
    let r = s
        .post(&format!("{base}/write-files"))
        .header("content-type", "multipart/form-data; boundary=b0undary")
        .body("--b0undary--\r\n")
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;
}

/// Within this long of the change: inotify is immediate, so this only allows for a busy machine.
const WATCH_LATENCY: std::time::Duration = std::time::Duration::from_millis(100);

/// `fs/watch` reports create, write, rename and remove as they happen, under subdirectories made
/// later too; hostile paths are refused; the sandbox's watches are bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_changes_as_they_happen() {
    use crate::common::sse::Events;
    let server = TestServer::start().await;
    let s = &server;
    let id = s.running_agent("watch").await;
    let base = format!("/api/v1/agents/{id}/fs");
    s.write_tree(&id, &[("w/keep", "")]).await;
    let r = s
        .get(&format!("{base}/watch?path=w&recursive=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut events = Events::of(r);
    let home = "/home/agent/w";
    let mut expect = async |script: &str, want: &[(&str, String)]| {
        s.exec_ok(&id, &["sh", "-c", script]).await;
        let done = tokio::time::Instant::now();
        for (kind, path) in want {
            let (k, data) = events.next(done + WATCH_LATENCY * 10).await;
            assert_eq!(
                (k.as_str(), &data["path"]),
                (*kind, &serde_json::json!(path)),
                "after {script}: {data}"
            );
            assert_eq!(data["type"], *kind);
        }
    };
    expect(
        "echo hi > w/f",
        &[
            ("create", format!("{home}/f")),
            ("write", format!("{home}/f")),
        ],
    )
    .await;
    expect(
        "mv w/f w/g",
        &[
            ("rename", format!("{home}/f")),
            ("create", format!("{home}/g")),
        ],
    )
    .await;
    expect("rm w/g", &[("remove", format!("{home}/g"))]).await;
    expect("mkdir w/sub", &[("create", format!("{home}/sub"))]).await;
    expect(
        "touch w/sub/inner",
        &[("create", format!("{home}/sub/inner"))],
    )
    .await;
    // A tree made faster than a watch can be added to each new directory: what was in one before
    // its watch is reported all the same (in no set order, a file perhaps twice).
    s.exec_ok(
        &id,
        &[
            "sh",
            "-c",
            "mkdir -p w/fast/deeper/a/b && touch w/fast/x w/fast/deeper/a/b/y",
        ],
    )
    .await;
    let mut missing: std::collections::BTreeSet<String> = [
        "fast",
        "fast/x",
        "fast/deeper",
        "fast/deeper/a",
        "fast/deeper/a/b",
        "fast/deeper/a/b/y",
    ]
    .iter()
    .map(|p| format!("{home}/{p}"))
    .collect();
    let done = tokio::time::Instant::now() + WATCH_LATENCY * 10;
    while !missing.is_empty() {
        let (k, data) = events.next(done).await;
        assert_eq!(k, "create", "{data}");
        missing.remove(data["path"].as_str().unwrap_or_default());
    }
    drop(events);

    // Not directories, not there, or not the home's.
    let outside = tempfile::tempdir().unwrap();
    s.exec_ok(&id, &["ln", "-s", outside.path().to_str().unwrap(), "out"])
        .await;
    for (path, status) in [
        ("../x", 400),
        ("/etc", 400),
        ("w/keep", 409),
        ("nope", 404),
        ("out", 403),
        ("out/.", 403),
    ] {
        let r = s
            .get(&format!("{base}/watch?path={}", q(path)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "watch {path}");
    }

    // At most 8 watches at once in a sandbox; a closed one frees its place.
    let mut open = Vec::new();
    for _ in 0..8 {
        let r = s.get(&format!("{base}/watch?path=w")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        open.push(r);
    }
    let r = s.get(&format!("{base}/watch?path=w")).send().await.unwrap();
    expect_error(r, 409, "conflict").await;
    open.pop();
    wait_for("a closed watch frees its place", || async {
        s.get(&format!("{base}/watch?path=w"))
            .send()
            .await
            .unwrap()
            .status()
            == 200
    })
    .await;
}
