//! Homes with a size: one ext4 image per agent under `<data_dir>/disks/`, loop-mounted on the
//! host and handed to Docker as the home volume (a `local` volume that binds the mount), so a
//! sandbox that fills its home gets `ENOSPC` at its own limit and `df` shows that limit, while
//! the host's disk, dockerd and the database are untouched.
//!
//! The image is sparse and mounted with `discard`, so it takes on the host only what the agent
//! keeps. Every step is idempotent and crash-safe: an image is made under a temporary name and
//! renamed when complete, a mount is looked for before it is made, and removal does what is left
//! of it. The mounts live in the host's mount namespace: they outlast a server restart (a host
//! reboot drops them, and the next start mounts again) and dockerd sees them.
//!
//! This needs the server on the host, as root, with `mkfs.ext4`, `e2fsck`, `resize2fs`
//! (e2fsprogs), `mount` and `umount` (util-linux): all in a standard Debian install.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::error::DockerError;

const IMAGE_SUFFIX: &str = ".ext4";
/// An image being made; never mounted, removed when found.
const PARTIAL_SUFFIX: &str = ".ext4.partial";

pub struct Disks {
    dir: PathBuf,
    /// One disk step at a time: mkfs, mount and resize of one image must not interleave, and
    /// they are rare and quick enough that one lock for all is no bottleneck.
    lock: tokio::sync::Mutex<()>,
}

impl Disks {
    /// Prepares `dir` (owned by root, closed to everyone else: the agents' files are below it)
    /// and checks that this server can make and mount disks at all.
    pub async fn open(dir: PathBuf) -> Result<Disks, DockerError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(DockerError::Disk(
                "per-agent disk limits loop-mount an ext4 image per agent, which needs the \
                 server to run as root; run it as root, or set sandbox.default_disk_mb: 0 \
                 (agents then share the host's disk without a limit)"
                    .into(),
            ));
        }
        for tool in ["mkfs.ext4", "e2fsck", "resize2fs", "mount", "umount"] {
            if which(tool).is_none() {
                return Err(DockerError::Disk(format!(
                    "per-agent disk limits need `{tool}` (Debian: e2fsprogs and mount), which \
                     is not on PATH; install it, or set sandbox.default_disk_mb: 0"
                )));
            }
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| DockerError::Disk(format!("cannot create {}: {e}", dir.display())))?;
        warn_if_private_mounts();
        Ok(Disks {
            dir,
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The image file of the home called `name`.
    pub fn image(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{IMAGE_SUFFIX}"))
    }

    /// Where that image is mounted on the host.
    pub fn mountpoint(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Whether the home called `name` has an image.
    pub fn exists(&self, name: &str) -> bool {
        self.image(name).exists()
    }

    /// The names of every home that has an image here (orphans of a crash included).
    pub fn names(&self) -> Result<Vec<String>, DockerError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| DockerError::Disk(format!("listing {}: {e}", self.dir.display())))?;
        let mut names = Vec::new();
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            if let Some(name) = file
                .strip_suffix(PARTIAL_SUFFIX)
                .or_else(|| file.strip_suffix(IMAGE_SUFFIX))
            {
                names.push(name.to_string());
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Makes the home `name` ready for a container: its image exists (made now, empty, if
    /// `make` allows it; else [`DockerError::HomeMissing`]), holds at least `size_mb` when
    /// `may_grow` (a larger limit grows the filesystem, keeping its files; it never shrinks),
    /// and is mounted. Growing needs the home unused (no running sandbox): it is done with the
    /// image unmounted, as online resizing needs `CAP_SYS_RESOURCE`, which a server in a
    /// restricted root may lack. Returns the mount point.
    pub async fn ensure(
        &self,
        name: &str,
        size_mb: u64,
        make: bool,
        may_grow: bool,
    ) -> Result<PathBuf, DockerError> {
        let _one = self.lock.lock().await;
        let image = self.image(name);
        let mountpoint = self.mountpoint(name);
        let bytes = size_mb.saturating_mul(1024 * 1024);
        if !image.exists() {
            if !make {
                return Err(DockerError::HomeMissing {
                    home: format!("disk image {}", image.display()),
                });
            }
            self.make_image(name, bytes).await?;
        }
        match std::fs::create_dir(&mountpoint) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(DockerError::Disk(format!(
                    "cannot create {}: {e}",
                    mountpoint.display()
                )))
            }
        }
        let current = std::fs::metadata(&image)
            .map_err(|e| DockerError::Disk(format!("{}: {e}", image.display())))?
            .len();
        if current < bytes && may_grow {
            if self.is_mounted(&mountpoint)? {
                run("umount", &[mountpoint.as_os_str()])
                    .await
                    .map_err(|e| {
                        DockerError::Disk(format!(
                            "cannot grow the home while something uses it: {e}"
                        ))
                    })?;
            }
            grow(&image, bytes).await?;
            tracing::info!(home = name, size_mb, "agent disk grown");
        }
        if !self.is_mounted(&mountpoint)? {
            run(
                "mount",
                &[
                    "-t".as_ref(),
                    "ext4".as_ref(),
                    "-o".as_ref(),
                    "loop,nodev,nosuid,discard".as_ref(),
                    image.as_os_str(),
                    mountpoint.as_os_str(),
                ],
            )
            .await?;
            // mkfs leaves an empty `lost+found` the agent has no use for; without it a fresh
            // home is empty, so Docker copies the image's own /home/agent into it, as it does
            // for a plain volume. Only an empty one goes (rmdir), and fsck makes it again if it
            // ever needs it.
            let _ = std::fs::remove_dir(mountpoint.join("lost+found"));
        }
        Ok(mountpoint)
    }

    /// Unmounts and deletes the home `name`, whatever is left of it.
    pub async fn remove(&self, name: &str) -> Result<(), DockerError> {
        let _one = self.lock.lock().await;
        let mountpoint = self.mountpoint(name);
        if mountpoint.exists() && self.is_mounted(&mountpoint)? {
            if let Err(e) = run("umount", &[mountpoint.as_os_str()]).await {
                // Something on the host still has a file open in it: detach it now, and the
                // kernel lets go of the image when that closes.
                tracing::warn!(home = name, error = %e, "unmounting lazily");
                run("umount", &["-l".as_ref(), mountpoint.as_os_str()]).await?;
            }
        }
        for result in [
            remove_dir_if_present(&mountpoint),
            remove_file_if_present(&self.image(name)),
            remove_file_if_present(&self.partial(name)),
        ] {
            result?;
        }
        Ok(())
    }

    fn partial(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{PARTIAL_SUFFIX}"))
    }

    /// Makes an empty ext4 image of `bytes` (sparse: it takes almost nothing until written).
    async fn make_image(&self, name: &str, bytes: u64) -> Result<(), DockerError> {
        let partial = self.partial(name);
        let file = std::fs::File::create(&partial)
            .map_err(|e| DockerError::Disk(format!("cannot create {}: {e}", partial.display())))?;
        file.set_len(bytes)
            .map_err(|e| DockerError::Disk(format!("cannot size {}: {e}", partial.display())))?;
        drop(file);
        // No reserved blocks (the agent may be root or not; either way the limit is the limit).
        // The file is new and sparse, so it reads as zeros: the journal needs no zeroing, and
        // mkfs marks the inode tables zeroed (it discards the file first), so nothing is
        // written in the background after the mount either.
        run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-m".as_ref(),
                "0".as_ref(),
                "-E".as_ref(),
                "lazy_journal_init=1".as_ref(),
                partial.as_os_str(),
            ],
        )
        .await?;
        std::fs::rename(&partial, self.image(name))
            .map_err(|e| DockerError::Disk(format!("cannot rename {}: {e}", partial.display())))?;
        Ok(())
    }

    /// A mount point is mounted when it lies on another device than the folder holding it.
    fn is_mounted(&self, mountpoint: &Path) -> Result<bool, DockerError> {
        let dev = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.dev())
                .map_err(|e| DockerError::Disk(format!("{}: {e}", p.display())))
        };
        Ok(dev(mountpoint)? != dev(&self.dir)?)
    }
}

/// Grows the unmounted image to `bytes` and its filesystem with it. resize2fs wants a freshly
/// checked filesystem; `-p` repairs only what is safe without asking.
async fn grow(image: &Path, bytes: u64) -> Result<(), DockerError> {
    let checked = Command::new(which("e2fsck").unwrap_or_else(|| PathBuf::from("e2fsck")))
        .args(["-f", "-p"])
        .arg(image)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| DockerError::Disk(format!("cannot run e2fsck: {e}")))?;
    // 0: clean; 1: errors corrected. Anything else needs a person.
    if !matches!(checked.status.code(), Some(0 | 1)) {
        return Err(DockerError::Disk(format!(
            "e2fsck {} found errors it cannot fix by itself: {}",
            image.display(),
            String::from_utf8_lossy(&checked.stdout).trim()
        )));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| DockerError::Disk(format!("cannot grow {}: {e}", image.display())))?;
    run("resize2fs", &[image.as_os_str()]).await?;
    Ok(())
}

fn remove_dir_if_present(p: &Path) -> Result<(), DockerError> {
    match std::fs::remove_dir(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DockerError::Disk(format!(
            "cannot remove {}: {e}",
            p.display()
        ))),
        _ => Ok(()),
    }
}

fn remove_file_if_present(p: &Path) -> Result<(), DockerError> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DockerError::Disk(format!(
            "cannot remove {}: {e}",
            p.display()
        ))),
        _ => Ok(()),
    }
}

/// Runs a disk tool; its stderr becomes the error.
async fn run(tool: &str, args: &[&std::ffi::OsStr]) -> Result<String, DockerError> {
    let out = Command::new(which(tool).unwrap_or_else(|| PathBuf::from(tool)))
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| DockerError::Disk(format!("cannot run {tool}: {e}")))?;
    if !out.status.success() {
        let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        return Err(DockerError::Disk(format!(
            "{tool} {} failed: {}",
            shown.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where `tool` is on `PATH`, or in the sbin folders a non-login root shell may lack.
fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A server in a mount namespace of its own (systemd's `PrivateMounts=`, `ProtectSystem=`…)
/// mounts where dockerd cannot see: the sandbox would get the empty folder under the mount.
fn warn_if_private_mounts() {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    if let (Some(own), Some(init)) = (ns("self"), ns("1")) {
        if own != init {
            tracing::warn!(
                "the server runs in a mount namespace other than init's; the agents' disk \
                 mounts must be visible to dockerd (no PrivateMounts=/ProtectSystem= on the \
                 service), or sandboxes get an empty home"
            );
        }
    }
}
