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
