//! The ext4 filesystem in an image: the e2fsprogs and util-linux tools run on it (to their end,
//! even if the server dies meanwhile) and its size as its superblock records it.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::super::error::DockerError;

/// Grows the unmounted image to `bytes` and its filesystem with it. resize2fs wants a freshly
/// checked filesystem. A grow cut short leaves the filesystem smaller than wanted (the next
/// start grows again) or marked as having errors (the check before the mount repairs it).
pub(super) async fn grow(image: &Path, bytes: u64) -> Result<(), DockerError> {
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
pub(super) async fn check(image: &Path) -> Result<(), DockerError> {
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
pub(super) fn filesystem_bytes(image: &Path) -> Result<u64, DockerError> {
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
pub(super) async fn run(tool: &str, args: &[&std::ffi::OsStr]) -> Result<String, DockerError> {
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
pub(super) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
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
