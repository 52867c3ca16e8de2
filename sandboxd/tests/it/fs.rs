use std::time::Duration;

use agenthold_proto::{
    self as proto, ErrorCode, FsList, FsMkdir, FsRead, FsRemove, FsWrite, Request,
};
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
        .open(&Request::FsWrite(FsWrite {
            path: "half.bin".into(),
            parents: false,
        }))
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
        .open(&Request::FsWrite(FsWrite {
            path: "deep.bin".into(),
            parents: false,
        }))
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
        .open(&Request::FsWrite(FsWrite {
            path: "keep.txt".into(),
            parents: false,
        }))
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
    h.open(&Request::FsMkdir(FsMkdir {
        path: "a/b/c".into(),
    }))
    .await
    .1
    .unwrap();
    // mkdir -p semantics: again is fine.
    h.open(&Request::FsMkdir(FsMkdir {
        path: "a/b/c".into(),
    }))
    .await
    .1
    .unwrap();
    h.write_file("a/b/file.txt", b"hello").await.unwrap();
    std::os::unix::fs::symlink("file.txt", h.home.path().join("a/b/link")).unwrap();

    let (mut s, r) = h
        .open(&Request::FsList(FsList { path: "a/b".into() }))
        .await;
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
        .refused(&Request::FsRemove(FsRemove {
            path: "a".into(),
            recursive: false,
        }))
        .await;
    // What the directory holds now is in the way, not the request.
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(e.message.contains("recursive"), "{}", e.message);
    h.open(&Request::FsRemove(FsRemove {
        path: "a/b/link".into(),
        recursive: false,
    }))
    .await
    .1
    .unwrap();
    assert!(
        h.home.path().join("a/b/file.txt").exists(),
        "removing a link removed its target"
    );
    h.open(&Request::FsRemove(FsRemove {
        path: "a".into(),
        recursive: true,
    }))
    .await
    .1
    .unwrap();
    assert!(!h.home.path().join("a").exists());
    let e = h
        .refused(&Request::FsRemove(FsRemove {
            path: "a".into(),
            recursive: true,
        }))
        .await;
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
async fn wrong_kinds_of_paths_get_clear_codes() {
    let h = Harness::start().await;
    h.open(&Request::FsMkdir(FsMkdir { path: "d".into() }))
        .await
        .1
        .unwrap();
    h.write_file("f", b"x").await.unwrap();

    assert_eq!(
        h.refused(&Request::FsRead(FsRead { path: "d".into() }))
            .await
            .code,
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
        h.refused(&Request::FsRead(FsRead {
            path: "nope".into()
        }))
        .await
        .code,
        ErrorCode::NotFound
    );
    assert_eq!(
        h.refused(&Request::FsList(FsList { path: "f".into() }))
            .await
            .code,
        ErrorCode::NotDir
    );
    assert_eq!(
        h.refused(&Request::FsMkdir(FsMkdir { path: "f".into() }))
            .await
            .code,
        ErrorCode::Exists
    );
    assert_eq!(
        h.refused(&Request::FsMkdir(FsMkdir { path: "f/g".into() }))
            .await
            .code,
        ErrorCode::NotDir
    );
    for home in ["", "/home/agent", "."] {
        let e = h
            .refused(&Request::FsRemove(FsRemove {
                path: home.into(),
                recursive: true,
            }))
            .await;
        // Never removed, whatever is asked: forbidden.
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{home:?}");
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
            Request::FsRead(FsRead { path: p.into() }),
            Request::FsWrite(FsWrite {
                path: p.into(),
                parents: false,
            }),
            Request::FsList(FsList { path: p.into() }),
            Request::FsMkdir(FsMkdir { path: p.into() }),
            Request::FsRemove(FsRemove {
                path: p.into(),
                recursive: true,
            }),
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
        .refused(&Request::FsRead(FsRead {
            path: "/etc/passwd".into(),
        }))
        .await;
    assert!(
        e.message.contains("outside the agent's home"),
        "{}",
        e.message
    );
}

/// What an upload's record directory holds.
fn records(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_upload_in_progress_is_recorded_outside_the_home_until_it_ends() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("uploads");
    let h = Harness::start_with(|o| o.upload_records = Some(dir.clone())).await;
    std::fs::create_dir(h.home.path().join("sub")).unwrap();
    let (mut s, r) = h
        .open(&Request::FsWrite(FsWrite {
            path: "sub/half.bin".into(),
            parents: false,
        }))
        .await;
    r.unwrap();
    s.write_all(&pattern(1 << 20)).await.unwrap();
    s.flush().await.unwrap();
    let sub = h.home.path().join("sub");
    eventually(Duration::from_secs(10), "the temporary file", || {
        !leftovers(&sub).is_empty()
    })
    .await;
    assert_eq!(records(&dir), [format!("sub/{}", leftovers(&sub)[0])]);
    s.shutdown().await.unwrap();
    let done: proto::Reply = proto::read_message(&mut s).await.unwrap();
    done.into_result().unwrap();
    assert!(records(&dir).is_empty() && leftovers(&sub).is_empty());
    h.write_file("whole.bin", b"x").await.unwrap();
    assert!(records(&dir).is_empty());
}

#[tokio::test]
async fn temporary_files_left_by_a_crash_go_at_the_next_start_and_nothing_else() {
    use sandboxd::uploads::{temp_name, Uploads};
    use std::os::unix::fs::symlink;

    let home = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = state.path().join("uploads");
    let uid = sandboxd::Account::current().uid;
    let h = home.path();

    // A previous run, killed mid-upload: its uploads were recorded the way fs.write records
    // them, and the records were never removed.
    let previous = Uploads::new(Some(dir.clone()), h.to_path_buf(), uid);
    let crashed = |rel: &str| {
        let temp = h.join(rel);
        std::mem::forget(previous.begin(&temp).unwrap().expect("recorded"));
        temp
    };
    std::fs::create_dir_all(h.join("src/deep")).unwrap();
    let stale = crashed(&format!(
        "src/deep/{}",
        temp_name("big.bin".as_ref(), "abc1")
    ));
    std::fs::write(&stale, vec![7u8; 1 << 20]).unwrap();
    let top = crashed(&temp_name("notes".as_ref(), "abc2"));
    std::fs::write(&top, b"half").unwrap();

    // Since then the agent replaced one recorded file with a symlink out of the home...
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let swapped = crashed(&temp_name("a".as_ref(), "abc3"));
    symlink(&victim, &swapped).unwrap();
    // ...and a recorded file's directory with a symlink to a directory outside that holds a
    // file of the same name (as if sandboxd had made it).
    std::fs::create_dir(h.join("moved")).unwrap();
    let name = temp_name("b".as_ref(), "abc4");
    crashed(&format!("moved/{name}"));
    std::fs::remove_dir(h.join("moved")).unwrap();
    symlink(outside.path(), h.join("moved")).unwrap();
    std::fs::write(outside.path().join(&name), b"keep").unwrap();
    // A symlink named like a temporary file but never recorded is not sandboxd's either.
    let planted = h.join(temp_name("c".as_ref(), "abc5"));
    symlink(&victim, &planted).unwrap();
    // A record whose file was committed (renamed) just before the crash.
    crashed(&temp_name("gone".as_ref(), "abc6"));
    assert_eq!(records(&dir).len(), 5);

    // The next start, with the same record directory.
    let boot = agenthold_proto::boot::BootConfig {
        agent_id: "a1".into(),
        token: "t".into(),
        // Nothing listens there: the cleanup must not wait for the server.
        tunnel_url: "ws://127.0.0.1:1/tunnel".into(),
        env: Default::default(),
        ca_certificates: None,
    };
    let mut opts = crate::harness::options(h);
    opts.upload_records = Some(dir.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(sandboxd::run(boot, opts, shutdown.clone()));
    eventually(Duration::from_secs(10), "the records to be used up", || {
        records(&dir).is_empty()
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();

    assert!(
        !stale.exists() && !top.exists(),
        "stale temporary files stayed"
    );
    assert!(h.join("src/deep").is_dir());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert_eq!(std::fs::read(outside.path().join(&name)).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&swapped).unwrap().is_symlink());
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_symlink());
}

#[tokio::test]
async fn a_record_directory_others_may_write_to_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("uploads");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A record someone else could have written: it must not remove the file it names.
    let name = sandboxd::uploads::temp_name("x".as_ref(), "abc7");
    std::fs::write(home.path().join(&name), b"keep").unwrap();
    std::fs::write(dir.join("abc7"), &name).unwrap();
    let uploads = sandboxd::uploads::Uploads::new(
        Some(dir.clone()),
        home.path().to_path_buf(),
        sandboxd::Account::current().uid,
    );
    assert_eq!(uploads.remove_stale(), 0);
    assert!(home.path().join(&name).exists());
    assert!(uploads
        .begin(&home.path().join(".y.agenthold-tmp-1"))
        .unwrap()
        .is_none());
}

/// An unprivileged account the file channels must act as (sandboxd being root).
fn nobody() -> sandboxd::Account {
    sandboxd::Account {
        name: "nobody".into(),
        uid: 65534,
        gid: 65534,
        groups: vec![65534],
        shell: "/bin/sh".into(),
    }
}

/// A directory of root's the account may look into but not write to, holding a file anyone may
/// read and one only root may: a stand-in for `/etc`, with `passwd` and `shadow`.
fn roots_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("passwd"), b"root:x:0:0\n").unwrap();
    std::fs::set_permissions(
        dir.path().join("passwd"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(dir.path().join("shadow"), b"secret").unwrap();
    std::fs::set_permissions(
        dir.path().join("shadow"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    dir
}

/// A sandbox as in a container: sandboxd is root, absolute paths are served, the account is
/// `nobody`, which owns the home.
async fn as_nobody() -> Option<Harness> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to act as another account");
        return None;
    }
    let h = Harness::start_with(|o| {
        o.account = nobody();
        o.confine_to_home = false;
        std::os::unix::fs::chown(&o.home, Some(65534), Some(65534)).unwrap();
    })
    .await;
    Some(h)
}

/// Issue 11, item 2: a symlink in the home to `/etc` let an upload replace `/etc/passwd`.
#[tokio::test]
async fn a_write_through_a_symlink_out_of_the_home_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let Some(h) = as_nobody().await else { return };
    let etc = roots_dir();
    std::os::unix::fs::symlink(etc.path(), h.home.path().join("project")).unwrap();
    let e = h
        .write_file("project/passwd", b"agent:x:0:0\n")
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    // Named by its absolute path, the kernel refuses it: the account may not write there.
    let abs = format!("{}/passwd", etc.path().display());
    let e = h.write_file(&abs, b"agent:x:0:0\n").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    let passwd = etc.path().join("passwd");
    assert_eq!(std::fs::read(&passwd).unwrap(), b"root:x:0:0\n");
    assert_eq!(std::fs::metadata(&passwd).unwrap().uid(), 0);
    assert!(leftovers(etc.path()).is_empty());
    for p in ["project/new", "project/sub"] {
        let e = h
            .refused(&Request::FsMkdir(FsMkdir { path: p.into() }))
            .await;
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{p}: {}", e.message);
    }
    let e = h
        .refused(&Request::FsRemove(FsRemove {
            path: "project/passwd".into(),
            recursive: false,
        }))
        .await;
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    assert!(passwd.exists());
    let e = h
        .refused(&Request::FsRemove(FsRemove {
            path: abs.clone(),
            recursive: false,
        }))
        .await;
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    assert!(passwd.exists());
}

#[tokio::test]
async fn a_read_of_a_root_only_file_is_refused_however_it_is_named() {
    let Some(h) = as_nobody().await else { return };
    let etc = roots_dir();
    let shadow = etc.path().join("shadow");
    std::os::unix::fs::symlink(&shadow, h.home.path().join("link")).unwrap();
    std::os::unix::fs::symlink(etc.path(), h.home.path().join("etc")).unwrap();
    let abs = shadow.display().to_string();
    for p in [
        "link",
        "etc/shadow",
        abs.as_str(),
        "/proc/self/root/etc/shadow",
    ] {
        let e = h.read_file(p).await.unwrap_err();
        assert!(
            matches!(e.code, ErrorCode::PermissionDenied | ErrorCode::NotFound),
            "{p}: {:?} {}",
            e.code,
            e.message
        );
    }
    // What the account may read, it reads, by its absolute path.
    let passwd = etc.path().join("passwd").display().to_string();
    assert_eq!(h.read_file(&passwd).await.unwrap(), b"root:x:0:0\n");
}

#[tokio::test]
async fn what_the_api_makes_in_the_home_is_the_accounts() {
    use std::os::unix::fs::MetadataExt;
    let Some(h) = as_nobody().await else { return };
    h.open(&Request::FsMkdir(FsMkdir { path: "a/b".into() }))
        .await
        .1
        .unwrap();
    h.write_file("a/b/f.txt", b"mine").await.unwrap();
    for p in ["a", "a/b", "a/b/f.txt"] {
        let meta = std::fs::metadata(h.home.path().join(p)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{p}");
    }
    // Symlinks that stay in the home are followed.
    std::os::unix::fs::symlink("a/b", h.home.path().join("here")).unwrap();
    assert_eq!(h.read_file("here/f.txt").await.unwrap(), b"mine");
    h.write_file("here/g.txt", b"too").await.unwrap();
    assert_eq!(
        std::fs::read(h.home.path().join("a/b/g.txt")).unwrap(),
        b"too"
    );
    // A directory the account may not write to stays as it is, even inside the home.
    let locked = h.home.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join("x"), b"root's").unwrap();
    let e = h.write_file("locked/x", b"no").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    let e = h
        .refused(&Request::FsRemove(FsRemove {
            path: "locked".into(),
            recursive: true,
        }))
        .await;
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    assert_eq!(std::fs::read(locked.join("x")).unwrap(), b"root's");
    // A recursive removal of the account's own tree goes through, symlinks removed, not followed.
    let etc = roots_dir();
    std::os::unix::fs::symlink(etc.path(), h.home.path().join("a/b/out")).unwrap();
    h.open(&Request::FsRemove(FsRemove {
        path: "a".into(),
        recursive: true,
    }))
    .await
    .1
    .unwrap();
    assert!(!h.home.path().join("a").exists());
    assert!(etc.path().join("passwd").exists());
}
