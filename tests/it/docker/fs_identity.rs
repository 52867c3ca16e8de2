//! The file API acts as the agent account, in a real container: issue 11, item 2, where a
//! symlink in the home let an upload replace `/etc/passwd` (and the agent become root at the
//! next start) and a download read root-only files. Needs Docker (scripts/docker-setup.sh) and a
//! static sandboxd (scripts/build-sandboxd.sh).

use crate::common::docker::*;

/// `/etc/passwd` with the `agent` account's uid set to 0.
fn with_agent_as_root(passwd: &str) -> String {
    passwd
        .lines()
        .map(|line| {
            let mut f: Vec<&str> = line.split(':').collect();
            if f.len() >= 3 && f[0] == "agent" {
                f[2] = "0";
            }
            f.join(":") + "\n"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_api_cannot_make_the_agent_root() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("fsid", AGENT_IMAGE)).await;
    let base = format!("/api/v1/agents/{id}/fs");

    // The red team's sequence, as the agent: a copy of /etc/passwd making it uid 0, a symlink
    // from the home to /etc, and the copy uploaded through the link.
    let original = s.exec_ok(&id, &["cat", "/etc/passwd"]).await;
    let forged = with_agent_as_root(&original);
    assert_ne!(forged, original, "the image has no agent line: {original}");
    s.exec_ok(&id, &["sh", "-c", "cd /home/agent && ln -sfn /etc project"])
        .await;
    for path in [
        "project/passwd",
        "/etc/passwd",
        "/home/agent/project/passwd",
    ] {
        let r = s
            .put(&format!("{base}/write?path={path}"))
            .body(forged.clone())
            .send()
            .await
            .expect("write request");
        assert_eq!(
            r.status(),
            403,
            "PUT {path}: {}",
            r.text().await.unwrap_or_default()
        );
    }
    assert_eq!(s.exec_ok(&id, &["cat", "/etc/passwd"]).await, original);
    assert_eq!(
        s.exec_ok(&id, &["stat", "-c", "%u:%g", "/etc/passwd"])
            .await
            .trim(),
        "0:0"
    );
    // No temporary file of an upload was left in /etc either.
    let etc = s.exec_ok(&id, &["ls", "-a", "/etc"]).await;
    assert!(!etc.contains("agenthold-tmp"), "{etc}");
    // Nor may the API make or remove anything there.
    let r = s
        .post(&format!("{base}/mkdir?path=project/evil.d"))
        .send()
        .await
        .expect("mkdir request");
    assert_eq!(r.status(), 403);
    for path in ["project/passwd", "/etc/passwd"] {
        let r = s
            .delete(&format!("{base}/remove?path={path}"))
            .send()
            .await
            .expect("remove request");
        assert_eq!(r.status(), 403, "DELETE {path}");
    }

    // Root-only files, through a link or by name, are not served.
    s.exec_ok(
        &id,
        &[
            "sh",
            "-c",
            "cd /home/agent && ln -s /etc/shadow shadow && ln -s /etc/agenthold/boot.json boot",
        ],
    )
    .await;
    for path in [
        "shadow",
        "boot",
        "project/shadow",
        "/etc/shadow",
        "/etc/agenthold/boot.json",
        "/proc/self/root/etc/shadow",
        "/proc/1/root/etc/shadow",
    ] {
        let r = s
            .get(&format!("{base}/read?path={path}"))
            .send()
            .await
            .expect("read request");
        let status = r.status().as_u16();
        assert!(
            status == 403 || status == 404,
            "GET {path}: {status} {}",
            r.text().await.unwrap_or_default()
        );
    }

    // What the agent may touch still works, and is the agent's.
    let r = s
        .post(&format!("{base}/mkdir?path=work/deep"))
        .send()
        .await
        .expect("mkdir request");
    assert_eq!(r.status(), 204);
    let r = s
        .put(&format!("{base}/write?path=work/deep/notes.txt"))
        .body("hello")
        .send()
        .await
        .expect("write request");
    assert_eq!(r.status(), 204);
    assert_eq!(
        s.exec_ok(
            &id,
            &[
                "stat",
                "-c",
                "%U:%G",
                "/home/agent/work",
                "/home/agent/work/deep/notes.txt"
            ]
        )
        .await,
        "agent:agent\nagent:agent\n"
    );
    // World-readable files outside the home are served by their absolute path.
    let r = s
        .get(&format!("{base}/read?path=/etc/passwd"))
        .send()
        .await
        .expect("read request");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("body"), original);

    // After a stop and a start the agent is who it was.
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    assert_eq!(s.exec_ok(&id, &["id", "-u"]).await.trim(), "1000");
    assert_eq!(s.exec_ok(&id, &["cat", "/etc/passwd"]).await, original);
    s.stop().await;
}

/// Without an `agent` account the file API is the image's `USER`, or root when that is root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_api_is_the_images_user_without_an_agent_account() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let put = |id: &str, path: &str| {
        s.put(&format!("/api/v1/agents/{id}/fs/write?path={path}"))
            .body("x")
            .send()
    };

    let worker = s.running_agent(("worker", WORKER_IMAGE)).await;
    assert_eq!(
        put(&worker, "notes.txt").await.expect("write").status(),
        204
    );
    assert_eq!(
        s.exec_ok(&worker, &["stat", "-c", "%U", "/home/agent/notes.txt"])
            .await
            .trim(),
        "worker"
    );
    let r = put(&worker, "/etc/agenthold-fsid-test")
        .await
        .expect("write");
    assert_eq!(r.status(), 403);
    let r = s
        .get(&format!("/api/v1/agents/{worker}/fs/read?path=/etc/shadow"))
        .send()
        .await
        .expect("read");
    assert_eq!(r.status(), 403);

    // An image that runs as root: the file API is root as well, as its shell is.
    let root = s.running_agent(("root", DEBIAN_IMAGE)).await;
    let r = put(&root, "/etc/agenthold-fsid-test").await.expect("write");
    assert_eq!(r.status(), 204);
    assert_eq!(
        s.exec_ok(&root, &["cat", "/etc/agenthold-fsid-test"]).await,
        "x"
    );
    s.stop().await;
}

/// Issue 32's files, in a real container and as the `agent` account: a write makes its missing
/// directories as the agent, `stat` names the agent as owner, `exists` sees nothing of root's
/// that the agent cannot, a rename cannot go through a link to /etc, and `fs/watch` reports
/// create, write, rename and remove within 100 ms of the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_issue_32_act_as_the_agent_and_watch_is_prompt() {
    use crate::common::sse::Events;
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("files32", AGENT_IMAGE)).await;
    let base = format!("/api/v1/agents/{id}/fs");

    // Parents made by the write are the agent's.
    let r = s
        .put(&format!("{base}/write?path=made/by/write/f.txt"))
        .body("hello")
        .send()
        .await
        .expect("write request");
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    assert_eq!(
        s.exec_ok(
            &id,
            &[
                "stat",
                "-c",
                "%U",
                "/home/agent/made",
                "/home/agent/made/by/write",
                "/home/agent/made/by/write/f.txt"
            ]
        )
        .await,
        "agent\nagent\nagent\n"
    );
    // Not where the agent may not write, even with parents to make.
    let r = s
        .put(&format!("{base}/write?path=/etc/agenthold-new/f"))
        .body("x")
        .send()
        .await
        .expect("write request");
    assert_eq!(r.status(), 403);
    assert!(s
        .exec_ok(&id, &["ls", "/etc"])
        .await
        .lines()
        .all(|l| l != "agenthold-new"));

    let stat: serde_json::Value = s
        .get(&format!("{base}/stat?path=made/by/write/f.txt"))
        .send()
        .await
        .expect("stat")
        .json()
        .await
        .expect("stat body");
    assert_eq!(stat["owner"], "agent", "{stat}");
    assert_eq!(stat["mode"], "0644");
    assert_eq!(stat["size"], 5);
    let root: serde_json::Value = s
        .get(&format!("{base}/stat?path=/etc/passwd"))
        .send()
        .await
        .expect("stat")
        .json()
        .await
        .expect("stat body");
    assert_eq!(root["owner"], "root", "{root}");

    // `exists` as the agent: root's secrets behind an unreadable directory are not there.
    s.exec_ok(
        &id,
        &["sh", "-c", "cd /home/agent && ln -sfn /etc etc-link"],
    )
    .await;
    for (path, want) in [
        ("made/by/write/f.txt", true),
        ("/etc/passwd", true),
        ("/root/.bashrc", false),
        ("etc-link/passwd", false),
        ("nope", false),
    ] {
        let v: serde_json::Value = s
            .get(&format!("{base}/exists?path={path}"))
            .send()
            .await
            .expect("exists")
            .json()
            .await
            .expect("exists body");
        assert_eq!(v["exists"], want, "exists {path}");
    }
    // A rename cannot reach /etc, by name or through the link.
    for to in ["/etc/passwd", "etc-link/passwd", "/etc/moved"] {
        let r = s
            .send(
                "POST",
                &format!("{base}/rename"),
                &serde_json::json!({"from": "made/by/write/f.txt", "to": to, "overwrite": true}),
            )
            .await;
        // 403 through the link; by name, the home and /etc are two filesystems (400) before
        // the kernel even looks at permissions.
        let status = r.status().as_u16();
        assert!(status == 403 || status == 400, "rename to {to}: {status}");
    }
    assert!(s
        .exec_ok(&id, &["cat", "/etc/passwd"])
        .await
        .lines()
        .all(|l| l != "hello"));
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/made/by/write/f.txt"])
            .await,
        "hello"
    );
    let r = s
        .send(
            "POST",
            &format!("{base}/rename"),
            &serde_json::json!({"from": "made/by/write/f.txt", "to": "made/g.txt"}),
        )
        .await;
    assert_eq!(r.status(), 204);

    // The watch: every change within 100 ms of the command that made it returning.
    let r = s
        .get(&format!("{base}/watch?path=made&recursive=true"))
        .send()
        .await
        .expect("watch");
    assert_eq!(r.status(), 200);
    let mut events = Events::of(r);
    let dir = "/home/agent/made";
    let steps: [(&str, Vec<(&str, String)>); 5] = [
        (
            "echo hi > made/new.txt",
            vec![
                ("create", format!("{dir}/new.txt")),
                ("write", format!("{dir}/new.txt")),
            ],
        ),
        (
            "echo more >> made/new.txt",
            vec![("write", format!("{dir}/new.txt"))],
        ),
        (
            "mv made/new.txt made/by/renamed.txt",
            vec![
                ("rename", format!("{dir}/new.txt")),
                ("create", format!("{dir}/by/renamed.txt")),
            ],
        ),
        (
            "rm made/by/renamed.txt",
            vec![("remove", format!("{dir}/by/renamed.txt"))],
        ),
        ("rm made/g.txt", vec![("remove", format!("{dir}/g.txt"))]),
    ];
    for (script, want) in steps {
        s.exec_ok(&id, &["sh", "-c", &format!("cd /home/agent && {script}")])
            .await;
        let returned = tokio::time::Instant::now();
        for (kind, path) in want {
            let (k, data) = events
                .next(returned + std::time::Duration::from_secs(5))
                .await;
            let late = returned.elapsed();
            assert_eq!(
                (k.as_str(), data["path"].as_str()),
                (kind, Some(path.as_str())),
                "{script}"
            );
            assert!(
                late <= std::time::Duration::from_millis(100),
                "{kind} {path} came {late:?} after {script} returned"
            );
        }
    }
    s.stop().await;
}
