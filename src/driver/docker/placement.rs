//! Where the server runs (on the host or in a container) and so how sandboxes get sandboxd and
//! reach the tunnel.
//!
//! - On the host: sandboxd is copied into a folder of its own under the data directory, which
//!   holds nothing else and is bind-mounted read-only at `/opt/agenthold` (the folder the binary
//!   came from may hold anything: a config with the admin token, the database, a build tree), and
//!   sandboxd dials the bridge gateway `.1`.
//! - In a container: the server copies its own sandboxd into a volume that every sandbox mounts
//!   read-only, joins every agent network at `.2`, and sandboxd dials that. The agent bridges get
//!   no address on the host at all ([`INHIBIT_IPV4`]): a sandbox then has no way to the host's own
//!   addresses, which on the host the firewall rules ensure, and which a server in a container
//!   could not ensure since it cannot change the host's firewall.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;

use super::error::{is_not_found, status_of, DockerError};
use super::files;
use super::names::Names;

/// Where sandboxd lives inside every sandbox.
pub const SANDBOXD_DIR: &str = "/opt/agenthold";
/// Its file name there, and in the folders it is served from.
pub const SANDBOXD_FILE: &str = "sandboxd";

/// The bridge driver option that leaves the host without an address on the bridge (Docker still
/// records the gateway `.1` in the network's IPAM, but nothing answers there).
pub const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

#[derive(Debug, Clone)]
pub enum Placement {
    /// The server runs on the host; `dir` holds the static sandboxd and nothing else (see
    /// [`stage_sandboxd`]).
    Host { dir: PathBuf },
    /// The server runs in container `server` (its full id); sandboxd is in volume `volume`.
    Container { server: String, volume: String },
}

impl Placement {
    /// The sandbox's entrypoint.
    pub fn entrypoint(&self) -> String {
        match self {
            Placement::Host { .. } | Placement::Container { .. } => {
                format!("{SANDBOXD_DIR}/{SANDBOXD_FILE}")
            }
        }
    }

    /// Whether the host needs an address (the gateway `.1`) on every agent bridge: only when the
    /// server runs on the host, because that is where sandboxd dials it.
    pub fn host_on_bridge(&self) -> bool {
        matches!(self, Placement::Host { .. })
    }

    /// The bridge driver options of a new agent network.
    pub fn network_options(&self) -> HashMap<String, String> {
        if self.host_on_bridge() {
            HashMap::new()
        } else {
            HashMap::from([(INHIBIT_IPV4.to_string(), "true".to_string())])
        }
    }

    /// Whether a container's mount at [`SANDBOXD_DIR`] is the one [`Placement::mount`] makes now
    /// (a container made by an older server may mount a folder that holds more than sandboxd).
    pub fn serves(&self, mounts: &[bollard::models::MountPoint]) -> bool {
        mounts
            .iter()
            .find(|m| m.destination.as_deref() == Some(SANDBOXD_DIR))
            .is_some_and(|m| match self {
                Placement::Host { dir } => m.source.as_deref().map(Path::new) == Some(dir),
                Placement::Container { volume, .. } => m.name.as_deref() == Some(volume),
            })
    }

    /// The read-only mount that puts sandboxd at [`SANDBOXD_DIR`].
    pub fn mount(&self) -> Mount {
        let (typ, source) = match self {
            Placement::Host { dir } => (MountType::BIND, dir.to_string_lossy().into_owned()),
            Placement::Container { volume, .. } => (MountType::VOLUME, volume.clone()),
        };
        Mount {
            target: Some(SANDBOXD_DIR.to_string()),
            source: Some(source),
            typ: Some(typ),
            read_only: Some(true),
            ..Default::default()
        }
    }
}

/// Whether a network with these driver options has an address of the host on its bridge. Docker
/// reads the option with Go's `strconv.ParseBool`, so every spelling it accepts counts.
pub fn bridge_has_host_address(options: Option<&HashMap<String, String>>) -> bool {
    let inhibited = options
        .and_then(|o| o.get(INHIBIT_IPV4))
        .is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
    !inhibited
}

/// The sandboxd binary to use: `sandbox.sandboxd_path` if set, else `sandboxd` next to the running
/// executable, else (for development) `target/sandboxd/sandboxd` as `scripts/build-sandboxd.sh`
/// leaves it, found by walking up from the executable. Only a static binary is accepted.
pub fn locate_sandboxd(explicit: Option<&Path>) -> Result<PathBuf, DockerError> {
    if let Some(p) = explicit {
        return match files::is_static_elf(p) {
            Ok(true) => Ok(p.to_path_buf()),
            Ok(false) => Err(DockerError::Sandboxd(format!(
                "sandbox.sandboxd_path {} is dynamically linked; sandboxes need a static build \
                 (scripts/build-sandboxd.sh)",
                p.display()
            ))),
            Err(e) => Err(DockerError::Sandboxd(format!(
                "sandbox.sandboxd_path {}: {e}",
                p.display()
            ))),
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| DockerError::Sandboxd(format!("cannot find the running executable: {e}")))?;
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        candidates.push(dir.join("sandboxd"));
        for a in dir.ancestors() {
            if a.file_name().is_some_and(|n| n == "target") {
                candidates.push(a.join("sandboxd").join("sandboxd"));
            }
        }
    }
    let mut notes = Vec::new();
    for c in &candidates {
        match files::is_static_elf(c) {
            Ok(true) => return Ok(c.clone()),
            Ok(false) => notes.push(format!("{} (dynamically linked)", c.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!("{} (missing)", c.display()))
            }
            Err(e) => notes.push(format!("{} ({e})", c.display())),
        }
    }
    Err(DockerError::Sandboxd(format!(
        "no static sandboxd found; looked at {}. Build one with scripts/build-sandboxd.sh or set \
         sandbox.sandboxd_path",
        notes.join(", ")
    )))
}

/// Copies `binary` into `dir` as its only file, for the sandboxes to mount: whatever else lies
/// next to the original stays out of their reach. A changed binary (an upgrade) goes in under a
/// new inode by rename, never rewritten in place: running sandboxes still execute the old one
/// (Linux refuses writes to a running executable), and each takes the new one at its next start.
/// Returns the folder's absolute path (Docker's bind mounts need one).
pub fn stage_sandboxd(binary: &Path, dir: &Path) -> Result<PathBuf, DockerError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let err = |what: &str, e: std::io::Error| DockerError::Sandboxd(format!("{what}: {e}"));
    let bytes = std::fs::read(binary).map_err(|e| err(&binary.display().to_string(), e))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| err(&format!("creating {}", dir.display()), e))?;
    // Searchable by every account inside, whatever the umask made of it.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| err(&format!("opening up {}", dir.display()), e))?;
    let dir =
        std::fs::canonicalize(dir).map_err(|e| err(&format!("resolving {}", dir.display()), e))?;
    let target = dir.join(SANDBOXD_FILE);
    if std::fs::read(&target).is_ok_and(|have| have == bytes) {
        return Ok(dir);
    }
    let tmp = dir.join(format!(".{SANDBOXD_FILE}.new"));
    std::fs::write(&tmp, &bytes).map_err(|e| err(&format!("writing {}", tmp.display()), e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| err(&format!("making {} executable", tmp.display()), e))?;
    std::fs::rename(&tmp, &target)
        .map_err(|e| err(&format!("moving sandboxd into {}", dir.display()), e))?;
    tracing::info!(source = %binary.display(), dir = %dir.display(), "sandboxd staged for the sandboxes");
    Ok(dir)
}

/// Our own container's id, when we run in one on this engine: `server_container` if set, else
/// the id Docker bind-mounts `/etc/hostname` from (seen in `/proc/self/mountinfo`).
pub async fn detect_server_container(
    docker: &Docker,
    configured: Option<&str>,
) -> Result<Option<String>, DockerError> {
    if let Some(c) = configured {
        let info = docker
            .inspect_container(c, None)
            .await
            .map_err(DockerError::api(format!(
                "sandbox.docker.server_container {c:?}"
            )))?;
        return Ok(info.id);
    }
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Ok(None);
    };
    for id in container_ids_in_mountinfo(&mountinfo) {
        match docker.inspect_container(&id, None).await {
            Ok(info) => return Ok(info.id),
            // A container of another engine (this one runs nested, say): not ours.
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(DockerError::api("inspecting our own container")(e)),
        }
    }
    Ok(None)
}

/// Ids of the containers whose `hostname` file is mounted at our `/etc/hostname`. Only that mount
/// point counts: on a host, `/var/lib/docker/containers/<id>/mounts/shm` entries of other
/// containers show up too and must not be mistaken for ours.
fn container_ids_in_mountinfo(mountinfo: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(root), Some(mount_point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        if *mount_point != "/etc/hostname" {
            continue;
        }
        let mut parts = root.split('/').peekable();
        while let Some(p) = parts.next() {
            if p == "containers" {
                if let Some(id) = parts.peek() {
                    if id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit()) {
                        out.push(id.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Copies `binary` into the sandboxd volume, through a container that is created (never started)
/// from the server's own image with the volume mounted: the volume's folder on the host is out of
/// reach from inside our container, but Docker's archive API writes into a stopped container's
/// volumes.
pub async fn fill_sandboxd_volume(
    docker: &Docker,
    names: &Names,
    server: &str,
    volume: &str,
    binary: &Path,
) -> Result<(), DockerError> {
    let bytes = tokio::fs::read(binary)
        .await
        .map_err(|e| DockerError::Sandboxd(format!("reading {}: {e}", binary.display())))?;
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.to_string()),
            labels: Some(names.labels("sandboxd", None)),
            ..Default::default()
        })
        .await
        .map_err(DockerError::api(format!("creating volume {volume}")))?;
    let me = docker
        .inspect_container(server, None)
        .await
        .map_err(DockerError::api("inspecting our own container"))?;
    let image = me
        .image
        .ok_or_else(|| DockerError::Sandboxd("our own container has no image id".into()))?;
    let helper = format!("{}-sandboxd-fill", names.prefix());
    remove_force(docker, &helper).await?;
    let body = ContainerCreateBody {
        image: Some(image),
        // Never started: it exists only so the archive API can reach the volume.
        entrypoint: Some(vec!["/nonexistent".to_string()]),
        cmd: Some(Vec::new()),
        labels: Some(names.labels("sandboxd-fill", None)),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_string()),
            mounts: Some(vec![Mount {
                target: Some(SANDBOXD_DIR.to_string()),
                source: Some(volume.to_string()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    docker
        .create_container(
            Some(
                CreateContainerOptionsBuilder::default()
                    .name(&helper)
                    .build(),
            ),
            body,
        )
        .await
        .map_err(DockerError::api("creating the sandboxd copy helper"))?;
    let tar = files::sandboxd_tar("sandboxd", &bytes)
        .map_err(|e| DockerError::Sandboxd(format!("packing sandboxd: {e}")))?;
    let uploaded = docker
        .upload_to_container(
            &helper,
            Some(UploadToContainerOptionsBuilder::default().path("/").build()),
            bollard::body_full(tar.into()),
        )
        .await
        .map_err(DockerError::api(format!(
            "copying sandboxd into volume {volume}"
        )));
    remove_force(docker, &helper).await?;
    uploaded?;
    tracing::info!(volume, source = %binary.display(), "sandboxd copied into its volume");
    Ok(())
}

/// `docker rm -f -v NAME`, where a missing container is fine. `-v` removes only the anonymous
/// volumes of the image's `VOLUME` lines, which would otherwise pile up; named volumes (the
/// home) stay.
pub async fn remove_force(docker: &Docker, name: &str) -> Result<(), DockerError> {
    match docker
        .remove_container(
            name,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        // An earlier removal is still under way (a server killed mid-destroy left it to
        // dockerd): wait for it to finish.
        Err(e) if status_of(&e) == Some(409) => wait_removed(docker, name).await,
        Err(e) => Err(DockerError::api(format!("removing container {name}"))(e)),
    }
}

/// How long a removal that dockerd already runs may take before we give up on it.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) async fn wait_removed(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let deadline = tokio::time::Instant::now() + REMOVAL_WAIT;
    loop {
        match docker.inspect_container(name, None).await {
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(DockerError::api(format!("inspecting container {name}"))(e)),
            Ok(_) if tokio::time::Instant::now() >= deadline => {
                return Err(DockerError::Other(format!(
                    "container {name} was still being removed after {REMOVAL_WAIT:?}"
                )))
            }
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_container_is_found_by_the_hostname_mount_only() {
        let id = "a".repeat(64);
        let other = "b".repeat(64);
        let info = format!(
            "1 0 0:1 / / rw - overlay overlay rw\n\
             2 1 0:2 /var/lib/docker/containers/{other}/mounts/shm /var/lib/docker/containers/{other}/mounts/shm rw - tmpfs shm rw\n\
             3 1 254:1 /var/lib/docker/containers/{id}/hostname /etc/hostname rw - ext4 /dev/vda rw\n"
        );
        assert_eq!(container_ids_in_mountinfo(&info), vec![id]);
        assert!(container_ids_in_mountinfo("1 0 0:1 / / rw - overlay overlay rw\n").is_empty());
    }

    #[test]
    fn only_a_server_in_a_container_takes_the_host_off_the_bridges() {
        let host = Placement::Host {
            dir: PathBuf::from("/x"),
        };
        let container = Placement::Container {
            server: "c".repeat(64),
            volume: "v".into(),
        };
        assert!(host.host_on_bridge());
        assert!(bridge_has_host_address(Some(&host.network_options())));
        assert!(!container.host_on_bridge());
        assert!(!bridge_has_host_address(Some(&container.network_options())));
        // What Docker reports for a network made before, or by hand.
        assert!(bridge_has_host_address(None));
        let opt = |v: &str| HashMap::from([(INHIBIT_IPV4.to_string(), v.to_string())]);
        assert!(!bridge_has_host_address(Some(&opt("1"))));
        assert!(bridge_has_host_address(Some(&opt("false"))));
    }
}
