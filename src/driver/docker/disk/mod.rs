//! Homes with a size: one ext4 image per agent under `<data_dir>/disks/`, loop-mounted on the
//! host and handed to Docker as the home volume (a `local` volume that binds the mount), so a
//! sandbox that fills its home gets `ENOSPC` at its own limit and `df` shows that limit, while
//! the host's disk, dockerd and the database are untouched.
//!
//! The image is sparse and mounted with `discard`, so it takes on the host only what the agent
//! keeps. The volume binds the folder `home` inside the filesystem, not its root: the root keeps
//! the `lost+found` that fsck needs, out of the sandbox's reach, and while the image is not
//! mounted that folder does not exist, so Docker refuses to start the sandbox instead of handing
//! it the empty mount point on the host's disk.
//!
//! Every step is idempotent and crash-safe: an image is made under a temporary name and renamed
//! when complete; whether to grow is read from the filesystem's own size (the superblock), not
//! the file's, so a grow cut short is done again; every mount of a released image but one mkfs has just made is
//! preceded by `e2fsck -p`, which is instant on a clean filesystem and repairs one a crash or a
//! cut-short grow left marked; and removal does what is left of it. An image is touched by a tool (a check, a
//! grow) only once no loop device is backed by it: until then some mount still holds its
//! filesystem, and the kernel's last write of the superblock would undo the tool's work. The
//! tools are not killed with the server: a grow or a check finishes even when the server dies
//! meanwhile. The mounts live in the host's mount namespace:
//! they outlast a server restart (a host reboot drops them, and the next start mounts again)
//! and dockerd sees them.
//!
//! This needs the server on the host, as root, with `mkfs.ext4`, `e2fsck`, `resize2fs`
//! (e2fsprogs), `mount` and `umount` (util-linux): all in a standard Debian install.

mod ext4;
mod loopdev;

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::DockerError;
use ext4::{check, filesystem_bytes, grow, run, which};
use loopdev::{direct_io, pin, released};

const IMAGE_SUFFIX: &str = ".ext4";
/// The folder inside each filesystem that is the agent's home.
const HOME_FOLDER: &str = "home";
/// An image being made; never mounted, removed when found.
const PARTIAL_SUFFIX: &str = ".ext4.partial";

/// Whether an image about to be mounted needs `e2fsck` first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// Made by mkfs in this same step: nothing can have marked it.
    New,
    /// Mounted before, or made before a crash: it may have been left marked.
    No,
}

pub struct Disks {
    dir: PathBuf,
    /// One step at a time per image: its mkfs, check, grow, mount and removal must not
    /// interleave. Per image, because a check or a grow of a large home takes a while and must
    /// not hold up every other agent's start.
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
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
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| DockerError::Disk(format!("cannot create {}: {e}", dir.display())))?;
        check_mount_namespace()?;
        Ok(Disks {
            dir,
            locks: Default::default(),
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

    /// The folder the home volume binds: [`HOME_FOLDER`] inside the mounted filesystem.
    pub fn home(&self, name: &str) -> PathBuf {
        self.mountpoint(name).join(HOME_FOLDER)
    }

    fn lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(name.to_string()).or_default().clone()
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
    /// `may_grow` and nothing uses it (a larger limit grows the filesystem, keeping its files;
    /// it never shrinks), and is mounted. A grow that cannot be done now (the home is in use, or
    /// the grow failed) is logged and tried again at the next start; the home keeps its size.
    /// Growing is done with the image unmounted: online resizing needs `CAP_SYS_RESOURCE`,
    /// which a server in a restricted root may lack. Returns the folder the volume binds.
    pub async fn ensure(
        &self,
        name: &str,
        size_mb: u64,
        make: bool,
        may_grow: bool,
    ) -> Result<PathBuf, DockerError> {
        let lock = self.lock(name);
        let _one = lock.lock().await;
        let image = self.image(name);
        let mountpoint = self.mountpoint(name);
        let bytes = size_mb.saturating_mul(1024 * 1024);
        let made = !image.exists();
        if made {
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
        let held = if may_grow && filesystem_bytes(&image)? < bytes {
            self.grow(name, &image, &mountpoint, bytes).await
        } else {
            None
        };
        if !self.is_mounted(&mountpoint)? {
            // An image mkfs has just made is clean: checking it would only cost a burst time.
            let checked = if made { Checked::New } else { Checked::No };
            self.mount(name, &image, &mountpoint, held, checked).await?;
        }
        let home = self.home(name);
        match std::fs::create_dir(&home) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(DockerError::Disk(format!(
                    "cannot create {}: {e}",
                    home.display()
                )))
            }
        }
        Ok(home)
    }

    /// Mounts `image` at `mountpoint`. An image still attached to a loop device (`held`, or
    /// found by [`released`]) is still in use: that device is mounted again as it is, never a
    /// second one, since two devices over one file are two filesystems writing the same blocks.
    /// Otherwise the image is checked first (unless mkfs has just made it), and gets a loop
    /// device of its own.
    async fn mount(
        &self,
        name: &str,
        image: &Path,
        mountpoint: &Path,
        held: Option<PathBuf>,
        checked: Checked,
    ) -> Result<(), DockerError> {
        let held = match held {
            Some(device) => Some(device),
            None => released(image).await?,
        };
        let _pinned;
        let (source, options) = match held {
            None => {
                if checked == Checked::No {
                    check(image).await?;
                }
                (image.to_path_buf(), "loop,nodev,nosuid,discard")
            }
            Some(device) => {
                tracing::warn!(
                    home = name,
                    device = %device.display(),
                    "the disk is still in use elsewhere; mounting its loop device again"
                );
                _pinned = pin(&device, image)?;
                (device, "nodev,nosuid,discard")
            }
        };
        run(
            "mount",
            &[
                "-t".as_ref(),
                "ext4".as_ref(),
                "-o".as_ref(),
                options.as_ref(),
                source.as_os_str(),
                mountpoint.as_os_str(),
            ],
        )
        .await?;
        // Off the async workers: the kernel may write the image's cached pages out first.
        let (name, mountpoint) = (name.to_string(), mountpoint.to_path_buf());
        let _ = tokio::task::spawn_blocking(move || direct_io(&name, &mountpoint)).await;
        Ok(())
    }

    /// Grows the image to `bytes` if nothing holds it; never fails the start it is part of.
    /// Returns the loop device that still holds the image, if one does (the image then keeps
    /// its size until a later start).
    async fn grow(
        &self,
        name: &str,
        image: &Path,
        mountpoint: &Path,
        bytes: u64,
    ) -> Option<PathBuf> {
        let unmounted = match self.is_mounted(mountpoint) {
            Ok(false) => Ok(()),
            Ok(true) => run("umount", &[mountpoint.as_os_str()]).await.map(|_| ()),
            Err(e) => Err(e),
        };
        let mut held = None;
        let unused = match unmounted {
            Ok(()) => match released(image).await {
                Ok(None) => Ok(()),
                Ok(Some(device)) => {
                    let e = DockerError::Disk(format!("{} still holds it", device.display()));
                    held = Some(device);
                    Err(e)
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let grown = match unused {
            Ok(()) => grow(image, bytes).await,
            Err(e) => Err(DockerError::Disk(format!(
                "the home is in use ({e}); it grows at a later start"
            ))),
        };
        match grown {
            Ok(()) => tracing::info!(
                home = name,
                size_mb = bytes / (1024 * 1024),
                "agent disk grown"
            ),
            Err(e) => tracing::warn!(home = name, error = %e, "the agent's disk keeps its size"),
        }
        held
    }

    /// Unmounts and deletes the home `name`, whatever is left of it. Nothing below the mount
    /// point is ever deleted recursively: with the image unmounted it is an empty folder, and
    /// anything else in it is left for a person (with a warning), never removed as root.
    pub async fn remove(&self, name: &str) -> Result<(), DockerError> {
        let lock = self.lock(name);
        let _one = lock.lock().await;
        let mountpoint = self.mountpoint(name);
        if mountpoint.exists() && self.is_mounted(&mountpoint)? {
            if let Err(e) = run("umount", &[mountpoint.as_os_str()]).await {
                // Something on the host still has a file open in it: detach it now, and the
                // kernel lets go of the image when that closes.
                tracing::warn!(home = name, error = %e, "unmounting lazily");
                run("umount", &["-l".as_ref(), mountpoint.as_os_str()]).await?;
            }
        }
        match std::fs::remove_dir(&mountpoint) {
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => tracing::warn!(
                home = name,
                folder = %mountpoint.display(),
                "the unmounted mount point holds files (written there while the image was not \
                 mounted); left alone"
            ),
            other => ignore_missing(other, &mountpoint)?,
        }
        ignore_missing(std::fs::remove_file(self.image(name)), &self.image(name))?;
        ignore_missing(
            std::fs::remove_file(self.partial(name)),
            &self.partial(name),
        )?;
        self.locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        Ok(())
    }

    fn partial(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{PARTIAL_SUFFIX}"))
    }

    /// Makes an empty ext4 image of `bytes` (sparse: it takes almost nothing until written).
    async fn make_image(&self, name: &str, bytes: u64) -> Result<(), DockerError> {
        let partial = self.partial(name);
        // Only root reads an agent's disk on the host (its uids may be anybody's here).
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(|e| DockerError::Disk(format!("cannot create {}: {e}", partial.display())))?;
        file.set_len(bytes)
            .map_err(|e| DockerError::Disk(format!("cannot size {}: {e}", partial.display())))?;
        drop(file);
        // No reserved blocks (the agent may be root or not; either way the limit is the limit).
        // `-T default`: the block size and inode ratio of a large filesystem even for a small
        // first size, since a grow keeps them. The file is new and sparse, so it reads as zeros:
        // the journal needs no zeroing, and mkfs marks the inode tables zeroed (it discards the
        // file first), so nothing is written in the background after the mount either.
        run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-T".as_ref(),
                "default".as_ref(),
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

fn ignore_missing(r: std::io::Result<()>, p: &Path) -> Result<(), DockerError> {
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DockerError::Disk(format!(
            "cannot remove {}: {e}",
            p.display()
        ))),
        _ => Ok(()),
    }
}

/// A server in a mount namespace of its own (systemd's `PrivateMounts=`, `ProtectSystem=`…)
/// mounts where dockerd cannot see them, and no sandbox could start.
fn check_mount_namespace() -> Result<(), DockerError> {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    match (ns("self"), ns("1")) {
        (Some(own), Some(init)) if own != init => Err(DockerError::Disk(
            "the server runs in a mount namespace other than init's, so dockerd would not see \
             the agents' disk mounts; run it in the host's (no PrivateMounts= or \
             ProtectSystem= on its service), or set sandbox.default_disk_mb: 0"
                .into(),
        )),
        _ => Ok(()),
    }
}
