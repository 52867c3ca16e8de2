//! The loop devices behind the homes' images, seen through sysfs: which device holds an image
//! (so that no tool touches an image a mount still holds), keeping one open while it is mounted
//! again, and switching one to direct I/O.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::super::error::DockerError;

/// How long an image unmounted here may stay attached to its loop device before it counts as
/// in use. Docker answers a stop once the container no longer runs, and only then unmounts the
/// volume's own bind of the home (its `_data`), which holds the filesystem open; the kernel
/// writes the superblock out and lets the loop device go when the last of them goes. A check or
/// a grow of the image before then is undone by that write, and leaves a corrupt filesystem.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits (up to [`RELEASE_WAIT`]) until no loop device is backed by `image`, the sign that no
/// mount anywhere (another mount namespace, Docker's bind of the volume) holds its filesystem.
/// Returns the device that still holds it, if one does.
pub(super) async fn released(image: &Path) -> Result<Option<PathBuf>, DockerError> {
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
pub(super) fn pin(device: &Path, image: &Path) -> Result<std::fs::File, DockerError> {
    let gone = || {
        DockerError::Disk(format!(
            "{} let go of {} while it was being mounted again; start the agent again",
            device.display(),
            image.display()
        ))
    };
    // Read-write, as losetup opens it: on a read-only descriptor the kernel allows this ioctl
    // only with CAP_SYS_ADMIN, which a server with trimmed capabilities lacks.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .map_err(|_| gone())?;
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
pub(super) fn direct_io(name: &str, mountpoint: &Path) {
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
    // Read-write, as losetup opens it: on a read-only descriptor the kernel allows this ioctl
    // only with CAP_SYS_ADMIN, which a server with trimmed capabilities lacks.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .map_err(|e| DockerError::Disk(format!("{}: {e}", device.display())))?;
    // SAFETY: the fd is open for the duration of the call, and this ioctl reads no memory.
    unsafe { loop_set_direct_io(file.as_raw_fd(), 1) }.map_err(|e| {
        DockerError::Disk(format!("LOOP_SET_DIRECT_IO on {}: {e}", device.display()))
    })?;
    Ok(())
}
