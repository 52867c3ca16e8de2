//! The temporary files of `fs.write`, and what happens to them when sandboxd dies mid-upload.
//!
//! An upload goes to a temporary file next to its target and is renamed over it at the end; a
//! sandboxd that is killed (SIGKILL, the OOM killer, the container stopped hard) cannot remove
//! that file, and it stayed in the home for good. So every upload first leaves a *record* (one
//! small file naming the temporary file, relative to the home) in a directory of sandboxd's
//! own outside the home, removed with the upload; at the next start, the temporary files that
//! records still name are removed, then the records.
//!
//! A record, rather than a search of the home for names like ours at start: uploads land
//! anywhere under the home, so a search would walk all of it (node_modules, build trees) on
//! every wake, or stop at some depth and miss files; and it would act on names the agent chose,
//! so every match would be a file a hostile agent may have planted. A record names exactly what
//! sandboxd made, costs nothing at start, and the agent cannot write one: the directory is
//! sandboxd's (in a container root's, mode 0700) and is not used unless it checks out so.
//! What a record names is still handled with care, since the agent may have changed the home
//! since: the path is opened one directory at a time from the home without following symlinks,
//! and only a regular file with our exact name and an owner a temporary file of ours can have
//! is removed (`unlinkat` removes a name, never what a link points to).

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use agenthold_proto::MAX_PATH_LEN;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// What every temporary name holds between the target's name and the unique suffix.
const TEMP_MARK: &str = ".agenthold-tmp-";
/// The most of the target's name kept in a temporary name, so it stays within `NAME_MAX`.
const TARGET_NAME_KEPT: usize = 200;

/// The temporary name of an upload to a file named `target`: `.{target}.agenthold-tmp-{suffix}`,
/// `suffix` being lowercase hex.
pub fn temp_name(target: &OsStr, suffix: &str) -> String {
    let short = &target.as_bytes()[..target.len().min(TARGET_NAME_KEPT)];
    format!(".{}{TEMP_MARK}{suffix}", String::from_utf8_lossy(short))
}

/// Whether `name` is one [`temp_name`] makes.
pub fn is_temp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".") else {
        return false;
    };
    let mark = TEMP_MARK.as_bytes();
    let Some(at) = rest.windows(mark.len()).rposition(|w| w == mark) else {
        return false;
    };
    let suffix = &rest[at + mark.len()..];
    !suffix.is_empty()
        && suffix
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Records of the uploads in progress; one per sandbox.
#[derive(Debug)]
pub struct Uploads {
    /// Where records go; `None` keeps none (the fake driver's default, tests).
    dir: Option<PathBuf>,
    home: PathBuf,
    /// Who may own a temporary file of ours: the account, as which it is created, and sandboxd,
    /// whose own uid it is when no switch happens (and whose it was, before the rename, for
    /// uploads cut off under an older sandboxd).
    owners: [u32; 2],
    /// The record directory once checked; `None` inside when it is not fit for use.
    checked: OnceLock<Option<PathBuf>>,
}

/// One upload's record; dropping it removes it, so it must outlive the temporary file.
#[derive(Debug)]
pub struct Record {
    path: PathBuf,
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!(record = %self.path.display(), error = %e, "cannot remove an upload record");
        }
    }
}

impl Uploads {
    pub fn new(dir: Option<PathBuf>, home: PathBuf, account_uid: u32) -> Uploads {
        Uploads {
            dir,
            home,
            owners: [nix::unistd::geteuid().as_raw(), account_uid],
            checked: OnceLock::new(),
        }
    }

    /// The record directory, made if missing; `None` (and a warning, once) unless it is a
    /// directory of sandboxd's own that nobody else may write to, since a record is an
    /// instruction to remove a file.
    fn dir(&self) -> Option<&Path> {
        self.checked
            .get_or_init(|| {
                let dir = self.dir.as_ref()?;
                match check_dir(dir, self.owners[0]) {
                    Ok(()) => Some(dir.clone()),
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e,
                            "upload records are off: a temporary file left by a crash stays");
                        None
                    }
                }
            })
            .as_deref()
    }

    /// Records that the temporary file `temp` is about to be made. `Ok(None)` when no record is
    /// kept: no record directory, or `temp` outside the home (which the removal at start
    /// never touches). `AlreadyExists` means the name is taken: pick another.
    pub fn begin(&self, temp: &Path) -> io::Result<Option<Record>> {
        let Some(dir) = self.dir() else {
            return Ok(None);
        };
        let Ok(relative) = temp.strip_prefix(&self.home) else {
            return Ok(None);
        };
        let Some(suffix) = temp
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.rsplit(TEMP_MARK).next())
        else {
            return Ok(None);
        };
        let path = dir.join(suffix);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?;
        let record = Record { path };
        // No sync: a record only has to outlive sandboxd's process, not the machine; after a
        // power cut a half-written temporary file may be gone or lost as well.
        file.write_all(relative.as_os_str().as_bytes())?;
        Ok(Some(record))
    }

    /// Removes the temporary files the records of an earlier run name, then the records.
    /// Run at start, before any upload of this run can begin. Returns how many files went.
    pub fn remove_stale(&self) -> usize {
        let Some(dir) = self.dir() else {
            return 0;
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the upload records");
                return 0;
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let record = entry.path();
            // file_type does not follow symlinks: only plain files are records.
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                match read_record(&record).and_then(|rel| self.remove_temp(&rel)) {
                    Ok(Some(rel)) => {
                        removed += 1;
                        tracing::info!(file = %rel.display(), "removed the temporary file of an upload cut off by a crash");
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(record = %record.display(), error = %e,
                        "left the temporary file of a cut-off upload alone"),
                }
            }
            // Used or not, a record is never worth a second look.
            if let Err(e) = std::fs::remove_file(&record) {
                tracing::warn!(record = %record.display(), error = %e, "cannot remove an upload record");
            }
        }
        removed
    }

    /// Removes the temporary file at `rel` under the home if it is still one of ours. `None`
    /// when it is already gone (the upload was committed, or ended, just before the crash).
    fn remove_temp(&self, rel: &Path) -> io::Result<Option<PathBuf>> {
        let refuse = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", rel.display()),
            )
        };
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(p) => parts.push(p),
                _ => return Err(refuse("not a plain path under the home")),
            }
        }
        let Some(name) = parts.pop() else {
            return Err(refuse("empty"));
        };
        if !is_temp_name(name.as_bytes()) {
            return Err(refuse("not the name of a temporary file"));
        }
        let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let home = nix::fcntl::open(&self.home, dir_flags, Mode::empty())?;
        let mut dir: OwnedFd = home;
        for part in parts {
            // O_NOFOLLOW: a directory swapped for a symlink since does not lead out of the home.
            dir = match openat(
                dir.as_fd(),
                part,
                dir_flags | OFlag::O_NOFOLLOW,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
        }
        let st = match fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(refuse("not a regular file any more"));
        }
        if !self.owners.contains(&st.st_uid) {
            return Err(refuse("owned by someone else"));
        }
        unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir)?;
        Ok(Some(rel.to_path_buf()))
    }
}

fn check_dir(dir: &Path, euid: u32) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    let unfit = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            why.to_string(),
        ))
    };
    if !meta.is_dir() {
        return unfit("not a directory (a symlink?)");
    }
    if meta.uid() != euid {
        return unfit("not owned by sandboxd's user");
    }
    if meta.mode() & 0o022 != 0 {
        return unfit("writable by others");
    }
    Ok(())
}

/// A record's contents: the temporary file's path relative to the home.
fn read_record(path: &Path) -> io::Result<PathBuf> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_PATH_LEN as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.is_empty() || bytes.len() > MAX_PATH_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an upload record",
        ));
    }
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_exactly() {
        let name = temp_name(OsStr::new("notes.txt"), "1a2b3c");
        assert_eq!(name, ".notes.txt.agenthold-tmp-1a2b3c");
        assert!(is_temp_name(name.as_bytes()));
        let long = temp_name(OsStr::new(&"n".repeat(300)), "ff");
        assert!(long.len() <= 255 && is_temp_name(long.as_bytes()));
        for other in [
            "notes.txt.agenthold-tmp-1a",
            ".notes.txt.agenthold-tmp-",
            ".notes.txt.agenthold-tmp-1A",
            ".notes.txt.agenthold-tmp-1a.bak",
            ".notes.txt",
        ] {
            assert!(!is_temp_name(other.as_bytes()), "{other}");
        }
    }
}
