use std::time::Duration;

use sandboxd::proto::{ErrorCode, Request};
use tokio::io::AsyncWriteExt;

use crate::harness::{eventually, Harness};

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test]
async fn a_64_mib_file_streams_in_and_back_out() {
    let h = Harness::start().await;
    let data = pattern(64 << 20);
    let reply = h.write_file("big.bin", &data).await.unwrap();
    assert_eq!(reply["size"].as_u64(), Some(data.len() as u64));
    let back = h.read_file("/home/agent/big.bin").await.unwrap();
    assert!(back == data, "read back differs");
    let meta = std::fs::metadata(h.home.path().join("big.bin")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
}

fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("agenthold-tmp"))
        .collect()
}

#[tokio::test]
async fn an_interrupted_write_leaves_nothing_behind() {
    let h = Harness::start().await;
    let target = h.home.path().join("half.bin");
    let (mut s, r) = h
        .open(&Request::FsWrite {
            path: "half.bin".into(),
        })
        .await;
    r.unwrap();
    s.write_all(&pattern(1 << 20)).await.unwrap();
    s.flush().await.unwrap();
    // Wait until the temporary file exists, so the reset really lands mid-write.
    eventually(Duration::from_secs(10), "the temporary file", || {
        !leftovers(h.home.path()).is_empty()
    })
    .await;
    drop(s);
    eventually(Duration::from_secs(10), "the temporary file to go", || {
        leftovers(h.home.path()).is_empty()
    })
    .await;
    assert!(!target.exists());
    h.ping().await;
}

/// Reset after several batches went to the disk (and to writeback): still nothing is left.
#[tokio::test]
async fn a_write_interrupted_deep_into_the_file_leaves_nothing_behind() {
    let h = Harness::start().await;
    let target = h.home.path().join("deep.bin");
    let (mut s, r) = h
        .open(&Request::FsWrite {
            path: "deep.bin".into(),
        })
        .await;
    r.unwrap();
    let chunk = pattern(1 << 20);
    for _ in 0..24 {
        s.write_all(&chunk).await.unwrap();
    }
    s.flush().await.unwrap();
    // Wait until most of it is in the temporary file, so the reset lands mid-write.
    eventually(
        Duration::from_secs(20),
        "the temporary file to fill",
        || {
            std::fs::read_dir(h.home.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().contains("agenthold-tmp"))
                .any(|e| e.metadata().is_ok_and(|m| m.len() >= 16 << 20))
        },
    )
    .await;
    drop(s);
    eventually(Duration::from_secs(10), "the temporary file to go", || {
        leftovers(h.home.path()).is_empty()
    })
    .await;
    assert!(!target.exists());
    h.ping().await;
}

#[tokio::test]
async fn an_interrupted_overwrite_keeps_the_old_file() {
    let h = Harness::start().await;
    h.write_file("keep.txt", b"old contents").await.unwrap();
    let (mut s, r) = h
        .open(&Request::FsWrite {
            path: "keep.txt".into(),
        })
        .await;
    r.unwrap();
    s.write_all(b"new contents that never finish")
        .await
        .unwrap();
    s.flush().await.unwrap();
    eventually(Duration::from_secs(10), "the temporary file", || {
        !leftovers(h.home.path()).is_empty()
    })
    .await;
    drop(s);
    eventually(Duration::from_secs(10), "the temporary file to go", || {
        leftovers(h.home.path()).is_empty()
    })
    .await;
    assert_eq!(h.read_file("keep.txt").await.unwrap(), b"old contents");
}

#[tokio::test]
async fn an_overwrite_keeps_the_mode() {
    let h = Harness::start().await;
    use std::os::unix::fs::PermissionsExt;
    let p = h.home.path().join("run.sh");
    std::fs::write(&p, "old").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.write_file("run.sh", b"#!/bin/sh\n").await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"#!/bin/sh\n");
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o755
    );
}

#[tokio::test]
async fn mkdir_list_and_remove() {
    let h = Harness::start().await;
    h.open(&Request::FsMkdir {
        path: "a/b/c".into(),
    })
    .await
    .1
    .unwrap();
    // mkdir -p semantics: again is fine.
    h.open(&Request::FsMkdir {
        path: "a/b/c".into(),
    })
    .await
    .1
    .unwrap();
    h.write_file("a/b/file.txt", b"hello").await.unwrap();
    std::os::unix::fs::symlink("file.txt", h.home.path().join("a/b/link")).unwrap();

    let (mut s, r) = h.open(&Request::FsList { path: "a/b".into() }).await;
    r.unwrap();
    let mut body = Vec::new();
    use tokio::io::AsyncReadExt;
    s.read_to_end(&mut body).await.unwrap();
    let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let list = list.as_array().unwrap();
    let names: Vec<(&str, &str)> = list
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        vec![("c", "dir"), ("file.txt", "file"), ("link", "symlink")]
    );
    let file = &list[1];
    assert_eq!(file["size"], 5);
    assert_eq!(file["mode"], 0o644);
    let mtime = file["mtime"].as_str().unwrap();
    assert!(mtime.ends_with('Z') && mtime.len() == 20, "{mtime}");

    let e = h
        .refused(&Request::FsRemove {
            path: "a".into(),
            recursive: false,
        })
        .await;
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("recursive"), "{}", e.message);
    h.open(&Request::FsRemove {
        path: "a/b/link".into(),
        recursive: false,
    })
    .await
    .1
    .unwrap();
    assert!(
        h.home.path().join("a/b/file.txt").exists(),
        "removing a link removed its target"
    );
    h.open(&Request::FsRemove {
        path: "a".into(),
        recursive: true,
    })
    .await
    .1
    .unwrap();
    assert!(!h.home.path().join("a").exists());
    let e = h
        .refused(&Request::FsRemove {
            path: "a".into(),
            recursive: true,
        })
        .await;
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
async fn wrong_kinds_of_paths_get_clear_codes() {
    let h = Harness::start().await;
    h.open(&Request::FsMkdir { path: "d".into() })
        .await
        .1
        .unwrap();
    h.write_file("f", b"x").await.unwrap();

    assert_eq!(
        h.refused(&Request::FsRead { path: "d".into() }).await.code,
        ErrorCode::IsDir
    );
    assert_eq!(
        h.write_file("d", b"x").await.unwrap_err().code,
        ErrorCode::IsDir
    );
    assert_eq!(
        h.write_file("nope/f", b"x").await.unwrap_err().code,
        ErrorCode::NotFound
    );
    assert_eq!(
        h.refused(&Request::FsRead {
            path: "nope".into()
        })
        .await
        .code,
        ErrorCode::NotFound
    );
    assert_eq!(
        h.refused(&Request::FsList { path: "f".into() }).await.code,
        ErrorCode::NotDir
    );
    assert_eq!(
        h.refused(&Request::FsMkdir { path: "f".into() }).await.code,
        ErrorCode::Exists
    );
    assert_eq!(
        h.refused(&Request::FsMkdir { path: "f/g".into() })
            .await
            .code,
        ErrorCode::NotDir
    );
    for home in ["", "/home/agent", "."] {
        let e = h
            .refused(&Request::FsRemove {
                path: home.into(),
                recursive: true,
            })
            .await;
        assert_eq!(e.code, ErrorCode::Invalid);
    }
    assert!(h.home.path().exists());
}

#[tokio::test]
async fn hostile_paths_are_invalid() {
    let h = Harness::start().await;
    let long = "x".repeat(4096);
    let hostile = [
        "../etc/passwd",
        "a/../../b",
        "/home/agent/../root",
        "bad\0name",
        long.as_str(),
        "/etc/passwd",
        "/tmp",
    ];
    for p in hostile {
        for req in [
            Request::FsRead { path: p.into() },
            Request::FsWrite { path: p.into() },
            Request::FsList { path: p.into() },
            Request::FsMkdir { path: p.into() },
            Request::FsRemove {
                path: p.into(),
                recursive: true,
            },
        ] {
            let e = h.refused(&req).await;
            assert_eq!(
                e.code,
                ErrorCode::Invalid,
                "{} {p:?}: {}",
                req.channel(),
                e.message
            );
        }
    }
    let e = h
        .refused(&Request::FsRead {
            path: "/etc/passwd".into(),
        })
        .await;
    assert!(
        e.message.contains("outside the agent's home"),
        "{}",
        e.message
    );
}
