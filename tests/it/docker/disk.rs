//! Disk limits on a real engine: a sandbox that fills its home or its `/tmp` gets "No space
//! left on device" at its own limit, the host's disk moves by at most that limit, the agent
//! works again after `rm`, a larger limit applies at the next start and keeps the files, a
//! lost mount (a host reboot) is made again before the sandbox starts, and destroy leaves no
//! image, mount or loop device behind. Needs Docker (scripts/docker-setup.sh), a static
//! sandboxd (scripts/build-sandboxd.sh) and root.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::docker::*;
use crate::common::{expect_error, wait_for, TestServer};
use serde_json::{json, Value};

const MIB: u64 = 1024 * 1024;
/// The home's limit in these tests.
const DISK_MB: u64 = 128;
/// The size of the in-memory `/tmp` in these tests.
const TMP_MB: u64 = 32;

async fn server(env: &DockerEnv) -> TestServer {
    env.server_with(false, |c| c.sandbox.tmp_mb = TMP_MB).await
}

async fn agent_with_disk(s: &TestServer, name: &str, disk_mb: u64) -> String {
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": name, "diskMb": disk_mb}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let agent: Value = r.json().await.expect("agent json");
    assert_eq!(agent["diskMb"], disk_mb, "{agent}");
    let id = agent["id"].as_str().expect("id").to_string();
    s.wait_state(&id, "running").await;
    id
}

/// The image and mount point of the agent's home, where the server keeps them.
fn disk_paths(s: &TestServer, env: &DockerEnv, id: &str) -> (PathBuf, PathBuf) {
    let dir = s.dir.path().join("disks");
    let name = env.volume(id);
    (dir.join(format!("{name}.ext4")), dir.join(name))
}

/// Bytes of the host's disk a (sparse) file takes.
fn allocated(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).expect("stat image").blocks() * 512
}

/// The size `df` reports for `path` in the sandbox, in MiB.
async fn df_size_mb(s: &TestServer, id: &str, path: &str) -> u64 {
    let out = s
        .exec_ok(id, &["sh", "-c", &format!("df -m {path} | tail -1")])
        .await;
    out.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("df output: {out:?}"))
}

fn is_mountpoint(path: &std::path::Path) -> bool {
    crate::common::mount_points()
        .iter()
        .any(|m| Path::new(m) == path)
}

/// Loop devices backed by `image` (`losetup -j`).
fn loop_devices_of(image: &std::path::Path) -> String {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(image)
        .output()
        .expect("losetup");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_home_or_tmp_stops_at_the_limit_and_harms_nothing_else() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        let s = server(&env).await;
        let id = agent_with_disk(&s, "filler", DISK_MB).await;
        let (image, mountpoint) = disk_paths(&s, &env, &id);
        assert!(image.is_file(), "no disk image at {}", image.display());
        assert!(
            is_mountpoint(&mountpoint),
            "{} is not mounted",
            mountpoint.display()
        );
        // Its loop device reads and writes the image directly (no second page cache).
        let dio = Command::new("losetup")
            .args(["-n", "-O", "DIO", "-j"])
            .arg(&image)
            .output()
            .expect("losetup");
        assert_eq!(String::from_utf8_lossy(&dio.stdout).trim(), "1");

        // df in the sandbox shows the limit, not the host's disk (ext4 keeps some for itself: its
        // journal and inode tables).
        let size = df_size_mb(&s, &id, "/home/agent").await;
        assert!(
            (DISK_MB * 85 / 100..=DISK_MB).contains(&size),
            "df shows {size} MiB for a {DISK_MB} MiB home"
        );
        assert_eq!(df_size_mb(&s, &id, "/tmp").await, TMP_MB);

        let free_before = crate::common::free_bytes(s.dir.path());
        let out = s
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    "dd if=/dev/zero of=/home/agent/fill bs=1M count=400 2>&1; sync",
                ],
            )
            .await;
        let said = out["stdout"].as_str().unwrap_or_default();
        assert!(said.contains("No space left on device"), "dd said: {out}");
        let used = free_before.saturating_sub(crate::common::free_bytes(s.dir.path()));
        assert!(
            used <= (DISK_MB + 16) * MIB,
            "the host lost {} MiB to a {DISK_MB} MiB home",
            used / MIB
        );
        assert!(
            allocated(&image) <= (DISK_MB + 1) * MIB,
            "the image takes {} MiB of the host",
            allocated(&image) / MIB
        );

        // A file upload into the full home is refused as such, and leaves nothing half-written.
        let r = s
            .put(&format!("/api/v1/agents/{id}/fs/write?path=upload.bin"))
            .body(vec![7u8; 4 * MIB as usize])
            .send()
            .await
            .expect("upload");
        // The refusal may come before the whole body was sent: the connection is not reused.
        assert_eq!(
            r.headers().get("connection").and_then(|v| v.to_str().ok()),
            Some("close")
        );
        let msg = expect_error(r, 507, "no_space").await;
        assert!(msg.contains("No space left on device"), "{msg}");
        assert_eq!(
            s.exec_ok(&id, &["sh", "-c", "ls /home/agent"]).await,
            "fill\n"
        );

        // /tmp is in memory with its own size: filling it does not touch the home or the host.
        let out = s
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1",
                ],
            )
            .await;
        assert!(
            out["stdout"]
                .as_str()
                .unwrap_or_default()
                .contains("No space left on device"),
            "dd into /tmp said: {out}"
        );

        // After rm the agent works as before, and (the mount discards) the host gets the space
        // back.
        s.exec_ok(&id, &["rm", "/home/agent/fill", "/tmp/fill"])
            .await;
        assert_eq!(
            s.exec_ok(
                &id,
                &[
                    "sh",
                    "-c",
                    "head -c 1048576 /dev/zero > /home/agent/ok && wc -c < /home/agent/ok"
                ]
            )
            .await,
            "1048576\n"
        );
        wait_for("the image gives the space back", || {
            let image = image.clone();
            async move { allocated(&image) < (DISK_MB / 2) * MIB }
        })
        .await;
        let r = s.get("/api/v1/health").send().await.expect("health");
        assert_eq!(r.status(), 200);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_limit_applies_at_the_next_start_and_keeps_the_files() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = agent_with_disk(&s, "grower", 64).await;
    s.exec_ok(&id, &["sh", "-c", "echo kept > /home/agent/marker"])
        .await;
    // Out of inodes, which is when people ask for more: the grow (it checks the filesystem
    // first, which needs room for its own lost+found) still works.
    let out = s.exec(&id,
        &[
            "sh",
            "-c",
            "mkdir -p /home/agent/many && cd /home/agent/many && seq 1 20000 | xargs touch 2>&1 | tail -1",
        ],
    )
    .await;
    assert!(
        out["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("No space left on device"),
        "the inodes did not run out: {out}"
    );

    // A limit below the minimum is refused and changes nothing.
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 32}),
        )
        .await;
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["field"], "diskMb", "{body}");
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 256}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let agent: Value = r.json().await.expect("json");
    assert_eq!(agent["diskMb"], 256);
    assert_eq!(agent["needsRebuild"], false);

    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let size = df_size_mb(&s, &id, "/home/agent").await;
    assert!(
        (256 * 85 / 100..=256).contains(&size),
        "df shows {size} MiB after growing to 256"
    );
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/marker"]).await,
        "kept\n"
    );
    s.exec_ok(&id, &["sh", "-c", "touch /home/agent/many/after-the-grow"])
        .await;
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 128}),
        )
        .await;
    let msg = expect_error(r, 409, "conflict").await;
    assert!(msg.contains("only grow"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_mount_is_made_again_and_destroy_leaves_nothing() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = agent_with_disk(&s, "keeper", 64).await;
    let (image, mountpoint) = disk_paths(&s, &env, &id);
    s.exec_ok(&id, &["sh", "-c", "echo kept > /home/agent/marker"])
        .await;

    // A host reboot drops the mount while the sandbox sleeps. Started by hand then, the
    // sandbox does not start at all (rather than write to the host's disk under the mount
    // point); the next start through agenthold mounts the image first. The container and the
    // volume removed outside as well are made anew around the same files.
    s.stop_sleeping(&id).await;
    let out = Command::new("umount")
        .arg(&mountpoint)
        .output()
        .expect("umount");
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mountpoint(&mountpoint));
    assert!(
        docker_try(&["start", &env.container(&id)]).is_err(),
        "the sandbox started on an unmounted home"
    );
    assert_eq!(
        std::fs::read_dir(&mountpoint).map(|d| d.count()).ok(),
        Some(0),
        "something was written under the unmounted mount point"
    );
    docker(&["rm", "-f", &env.container(&id)]);
    docker(&["volume", "rm", &env.volume(&id)]);
    s.start_running(&id).await;
    assert!(is_mountpoint(&mountpoint));
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/marker"]).await,
        "kept\n"
    );

    // An image without an agent (a crash between making it and recording the agent, or a
    // server that lost its database row) is an orphan, removed when the server starts.
    let orphan = image.with_file_name(format!("{}.ext4", env.volume("zzorphan0001")));
    std::fs::write(&orphan, b"").expect("orphan image");

    s.destroy(&id).await;
    assert!(!is_mountpoint(&mountpoint), "still mounted");
    assert!(!mountpoint.exists(), "mount point left behind");
    assert!(!image.exists(), "image left behind");
    assert_eq!(
        loop_devices_of(&image),
        "",
        "a loop device still holds the image"
    );
    assert!(env.objects(&["volume", "ls"]).is_empty());

    let s = env.restart_with(s, |c| c.sandbox.tmp_mb = TMP_MB).await;
    wait_for("the orphan image is removed", || {
        let orphan = orphan.clone();
        async move { !orphan.exists() }
    })
    .await;
    drop(s);
}

/// A bind mount of a folder on the host, undone when dropped (a failed test included).
struct Hold(PathBuf);

impl Hold {
    fn new(source: &std::path::Path, target: PathBuf) -> Hold {
        std::fs::create_dir_all(&target).expect("hold folder");
        let out = Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(&target)
            .output()
            .expect("mount --bind");
        assert!(
            out.status.success(),
            "mount --bind: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Hold(target)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_still_held_elsewhere_is_neither_checked_nor_grown_until_released() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = agent_with_disk(&s, "held", 64).await;
    let (image, mountpoint) = disk_paths(&s, &env, &id);
    s.exec_ok(&id, &["sh", "-c", "echo kept > /home/agent/marker"])
        .await;
    s.stop_sleeping(&id).await;

    // Another mount of the filesystem outlives the server's own, as Docker's bind of the volume
    // does for a moment after a stop: a grow then (a check and resize2fs on the image) would be
    // undone by the kernel's last write of the superblock, leaving it corrupt. The start waits,
    // then mounts the same loop device again and keeps the size; the next start grows.
    let hold = Hold::new(&mountpoint.join("home"), s.dir.path().join("hold"));
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"diskMb": 256}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.start_running(&id).await;
    assert!(is_mountpoint(&mountpoint));
    assert_eq!(
        loop_devices_of(&image).lines().count(),
        1,
        "a second loop device over the image: {}",
        loop_devices_of(&image)
    );
    let size = df_size_mb(&s, &id, "/home/agent").await;
    assert!(size < 64, "grown to {size} MiB while held elsewhere");
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/marker"]).await,
        "kept\n"
    );
    // What the sandbox writes shows through the other mount: one filesystem, not two.
    s.exec_ok(&id, &["sh", "-c", "echo both > /home/agent/shared"])
        .await;
    assert_eq!(
        std::fs::read_to_string(hold.0.join("shared")).expect("read through the hold"),
        "both\n"
    );

    drop(hold);
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    let size = df_size_mb(&s, &id, "/home/agent").await;
    assert!(
        (256 * 85 / 100..=256).contains(&size),
        "df shows {size} MiB after the release and a start"
    );
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/marker"]).await,
        "kept\n"
    );
}
