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
//! the file's, so a grow cut short is done again; every mount of a released image is preceded by
//! `e2fsck -p`, which is instant on a clean filesystem and repairs one a crash or a cut-short grow
//! left marked; and removal does what is left of it. An image is touched by a tool (a check, a
//! grow) only once no loop device is backed by it: until then some mount still holds its
//! filesystem, and the kernel's last write of the superblock would undo the tool's work. The
//! tools are not killed with the server: a grow or a check finishes even when the server dies
//! meanwhile. The mounts live in the host's mount namespace:
//! they outlast a server restart (a host reboot drops them, and the next start mounts again)
//! and dockerd sees them.
//!
//! This needs the server on the host, as root, with `mkfs.ext4`, `e2fsck`, `resize2fs`
//! (e2fsprogs), `mount` and `umount` (util-linux): all in a standard Debian install.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::process::Command;

use super::error::DockerError;

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
        direct_io(name, mountpoint);
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

/// How long an image unmounted here may stay attached to its loop device before it counts as
/// in use. Docker answers a stop once the container no longer runs, and only then unmounts the
/// volume's own bind of the home (its `_data`), which holds the filesystem open; the kernel
/// writes the superblock out and lets the loop device go when the last of them goes. A check or
/// a grow of the image before then is undone by that write, and leaves a corrupt filesystem.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits (up to [`RELEASE_WAIT`]) until no loop device is backed by `image`, the sign that no
/// mount anywhere (another mount namespace, Docker's bind of the volume) holds its filesystem.
/// Returns the device that still holds it, if one does.
async fn released(image: &Path) -> Result<Option<PathBuf>, DockerError> {
    let image = canonical(image)?;
    let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
    loop {
        match loop_device_of(&image)? {
            None => return Ok(None),
            Some(device) if tokio::time::Instant::now() >= deadline => return Ok(Some(device)),
            Some(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

fn canonical(image: &Path) -> Result<PathBuf, DockerError> {
    image
        .canonicalize()
        .map_err(|e| DockerError::Disk(format!("{}: {e}", image.display())))
}

/// The loop device backed by `image` (an absolute, canonical path), read from sysfs. An error
/// when sysfs cannot be read: "no device" would let a check or a grow touch a held image.
fn loop_device_of(image: &Path) -> Result<Option<PathBuf>, DockerError> {
    let entries = std::fs::read_dir("/sys/block").map_err(|e| {
        DockerError::Disk(format!(
            "cannot list /sys/block to see whether a loop device holds {}: {e}",
            image.display()
        ))
    })?;
    Ok(entries
        .flatten()
        .find(|entry| backs(&entry.path(), image))
        .map(|entry| Path::new("/dev").join(entry.file_name())))
}

/// Whether the block device at `sys` (its folder under `/sys/block`) is a loop device backed by
/// `image`. A deleted backing file reads `<path> (deleted)`, which matches no image.
fn backs(sys: &Path, image: &Path) -> bool {
    std::fs::read(sys.join("loop/backing_file")).is_ok_and(|backing| {
        backing.strip_suffix(b"\n").unwrap_or(&backing) == image.as_os_str().as_encoded_bytes()
    })
}

/// Holds `device` open while it is mounted again: a loop device made by `mount -o loop` lets go
/// of its file when its last user closes it, and another home's mount could then take it over.
/// Open, it is checked to still be backed by `image`.
fn pin(device: &Path, image: &Path) -> Result<std::fs::File, DockerError> {
    let gone = || {
        DockerError::Disk(format!(
            "{} let go of {} while it was being mounted again; start the agent again",
            device.display(),
            image.display()
        ))
    };
    let file = std::fs::File::open(device).map_err(|_| gone())?;
    let sys = device
        .file_name()
        .map(|dev| Path::new("/sys/block").join(dev))
        .ok_or_else(gone)?;
    if !backs(&sys, &canonical(image)?) {
        return Err(gone());
    }
    Ok(file)
}

/// Has the loop device behind `mountpoint` read and write its image with direct I/O: without
/// it every block is cached twice (in the home's page cache and the image file's), and a synced
/// write, which is what an upload ends with, goes a third slower. Best effort: a filesystem
/// under the image without `O_DIRECT` keeps buffered I/O. Done with the ioctl itself rather
/// than `findmnt` and `losetup`: two programs per start cost a burst of creates more than the
/// rest of the disk's work together.
fn direct_io(name: &str, mountpoint: &Path) {
    let device = match mounted_device(mountpoint) {
        Ok(device) => device,
        Err(e) => {
            tracing::warn!(home = name, error = %e, "cannot find the disk's loop device");
            return;
        }
    };
    if let Err(e) = set_direct_io(&device) {
        tracing::warn!(home = name, device = %device.display(), error = %e, "the disk keeps buffered I/O");
    }
}

/// The block device mounted at `mountpoint`: the device number of the mounted root, named
/// through sysfs (`/sys/dev/block/MAJ:MIN` links to the device's folder, named as in `/dev`).
fn mounted_device(mountpoint: &Path) -> Result<PathBuf, DockerError> {
    let dev = std::fs::metadata(mountpoint)
        .map_err(|e| DockerError::Disk(format!("{}: {e}", mountpoint.display())))?
        .dev();
    let sys = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    ));
    let target = std::fs::read_link(&sys)
        .map_err(|e| DockerError::Disk(format!("{}: {e}", sys.display())))?;
    let device = target
        .file_name()
        .ok_or_else(|| DockerError::Disk(format!("{} names no device", sys.display())))?;
    Ok(Path::new("/dev").join(device))
}

// LOOP_SET_DIRECT_IO from <linux/loop.h>: its argument is the flag itself, not a pointer.
nix::ioctl_write_int_bad!(loop_set_direct_io, 0x4C08);

fn set_direct_io(device: &Path) -> Result<(), DockerError> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(device)
        .map_err(|e| DockerError::Disk(format!("{}: {e}", device.display())))?;
    // SAFETY: the fd is open for the duration of the call, and this ioctl reads no memory.
    unsafe { loop_set_direct_io(file.as_raw_fd(), 1) }.map_err(|e| {
        DockerError::Disk(format!("LOOP_SET_DIRECT_IO on {}: {e}", device.display()))
    })?;
    Ok(())
}

/// Grows the unmounted image to `bytes` and its filesystem with it. resize2fs wants a freshly
/// checked filesystem. A grow cut short leaves the filesystem smaller than wanted (the next
/// start grows again) or marked as having errors (the check before the mount repairs it).
async fn grow(image: &Path, bytes: u64) -> Result<(), DockerError> {
    fsck(image, true).await?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| DockerError::Disk(format!("cannot grow {}: {e}", image.display())))?;
    run("resize2fs", &[image.as_os_str()]).await?;
    Ok(())
}

/// `e2fsck -p` before a mount: instant on a clean filesystem, a full check and the safe repairs
/// on one marked as having errors.
async fn check(image: &Path) -> Result<(), DockerError> {
    fsck(image, false).await
}

async fn fsck(image: &Path, force: bool) -> Result<(), DockerError> {
    let mut args: Vec<&std::ffi::OsStr> = vec!["-p".as_ref()];
    if force {
        args.push("-f".as_ref());
    }
    args.push(image.as_os_str());
    let out = command("e2fsck", &args).await?;
    // 0: clean; 1: errors corrected. Anything else needs a person.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(DockerError::Disk(format!(
            "{} has errors e2fsck cannot repair by itself ({}); repair it by hand with \
             `e2fsck -f {}` on the host, or destroy the agent",
            image.display(),
            String::from_utf8_lossy(&out.stdout).trim(),
            image.display()
        )));
    }
    Ok(())
}

/// The size of the ext4 filesystem in `image`, read from its superblock (1 KiB in): what a
/// grow actually reached, whatever the file's length.
fn filesystem_bytes(image: &Path) -> Result<u64, DockerError> {
    let bad = |why: String| DockerError::Disk(format!("{}: {why}", image.display()));
    let mut sb = [0u8; 1024];
    std::fs::File::open(image)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(1024))?;
            f.read_exact(&mut sb)
        })
        .map_err(|e| bad(format!("cannot read its superblock: {e}")))?;
    let u32_at = |o: usize| u32::from_le_bytes([sb[o], sb[o + 1], sb[o + 2], sb[o + 3]]);
    if u16::from_le_bytes([sb[0x38], sb[0x39]]) != 0xEF53 {
        return Err(bad("not an ext4 filesystem".into()));
    }
    const INCOMPAT_64BIT: u32 = 0x80;
    let high = if u32_at(0x60) & INCOMPAT_64BIT != 0 {
        u64::from(u32_at(0x150))
    } else {
        0
    };
    let blocks = high << 32 | u64::from(u32_at(0x4));
    let log = u32_at(0x18);
    if log > 6 {
        return Err(bad(format!("an impossible block size (log {log})")));
    }
    Ok(blocks.saturating_mul(1024 << log))
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

/// Runs a disk tool to its end, even if the server dies meanwhile (a grow or check cut short
/// is what would need repairing).
async fn command(
    tool: &str,
    args: &[&std::ffi::OsStr],
) -> Result<std::process::Output, DockerError> {
    Command::new(which(tool).unwrap_or_else(|| PathBuf::from(tool)))
        .args(args)
        .output()
        .await
        .map_err(|e| DockerError::Disk(format!("cannot run {tool}: {e}")))
}

/// Runs a disk tool; its stderr becomes the error.
async fn run(tool: &str, args: &[&std::ffi::OsStr]) -> Result<String, DockerError> {
    let out = command(tool, args).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A superblock as mkfs writes it, for the size reading.
    fn image_with(
        blocks_lo: u32,
        blocks_hi: u32,
        log_block: u32,
        incompat: u32,
    ) -> tempfile::NamedTempFile {
        let mut sb = vec![0u8; 2048];
        let base = 1024;
        sb[base + 0x4..base + 0x8].copy_from_slice(&blocks_lo.to_le_bytes());
        sb[base + 0x18..base + 0x1c].copy_from_slice(&log_block.to_le_bytes());
        sb[base + 0x38..base + 0x3a].copy_from_slice(&0xEF53u16.to_le_bytes());
        sb[base + 0x60..base + 0x64].copy_from_slice(&incompat.to_le_bytes());
        sb[base + 0x150..base + 0x154].copy_from_slice(&blocks_hi.to_le_bytes());
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), sb).expect("write");
        f
    }

    #[test]
    fn the_filesystem_size_comes_from_the_superblock() {
        let f = image_with(16384, 0, 2, 0);
        assert_eq!(filesystem_bytes(f.path()).unwrap(), 64 << 20);
        // The high half counts only with the 64bit feature.
        let f = image_with(1, 1, 2, 0);
        assert_eq!(filesystem_bytes(f.path()).unwrap(), 4096);
        let f = image_with(0, 1, 2, 0x80);
        assert_eq!(filesystem_bytes(f.path()).unwrap(), (1u64 << 32) * 4096);
        let f = image_with(1, 0, 40, 0);
        assert!(filesystem_bytes(f.path()).is_err());
        let garbage = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(garbage.path(), [0u8; 100]).unwrap();
        assert!(filesystem_bytes(garbage.path()).is_err());
    }
}
