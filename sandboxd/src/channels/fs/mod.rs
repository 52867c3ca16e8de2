//! The file browser's channels: `fs.list`, `fs.read`, `fs.write`, `fs.mkdir`, `fs.remove`,
//! `fs.rename`, `fs.stat`, `fs.exists` and `fs.watch`.

//!
//! Every operation runs as the account ([`crate::fsid`]) on paths opened without following a
//! symlink out of the home ([`crate::fspath`]), so the API reaches exactly what the agent's own
//! shell may, and whatever it creates is the account's without any `chown`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ChannelError, ErrorCode, Reply, Size};
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::Serialize;
use tokio::io::{AsyncWriteExt, BufReader};

mod meta;
mod watch;
mod write;
mod writeback;

pub use meta::{exists, rename, stat};
pub use watch::{watch, WatchBudget};
pub use write::write;
use writeback::{give_back_memory, WRITEBACK_RANGE};

use super::{refuse, reply};
use crate::fspath::Location;
use crate::paths::Resolved;
use crate::sandbox::Sandbox;

const COPY_BUF: usize = 256 * 1024;

#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
    mode: u32,
    mtime: String,
}

fn resolve(sb: &Sandbox, path: &str) -> Result<Resolved, ChannelError> {
    sb.paths().resolve(path)
}

/// Runs blocking file work off the runtime's threads.
async fn blocking<T, F>(f: F) -> Result<T, ChannelError>
where
    F: FnOnce() -> Result<T, ChannelError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ChannelError::new(
            ErrorCode::Io,
            format!("internal error: {e}"),
        ))
    })
}

fn io_err(what: &Path) -> impl Fn(io::Error) -> ChannelError + '_ {
    move |e| ChannelError::from_io(&e, &what.display().to_string())
}

fn errno_err(what: &Path) -> impl Fn(Errno) -> ChannelError + '_ {
    move |e| ChannelError::from_io(&e.into(), &what.display().to_string())
}

/// Runs `f` as the account, with the path's location opened.
async fn as_account<T, F>(sb: &Sandbox, path: &str, f: F) -> Result<T, ChannelError>
where
    F: FnOnce(Resolved, Location) -> Result<T, ChannelError> + Send + 'static,
    T: Send + 'static,
{
    let r = resolve(sb, path)?;
    let home = sb.options().home.clone();
    sb.fs_identity()
        .run(move || {
            let loc = Location::open(&r, &home).map_err(io_err(&r.logical))?;
            f(r, loc)
        })
        .await
}

fn kind_of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// The API's name for a file's type.
fn kind_name(st: &FileStat) -> &'static str {
    match kind_of(st) {
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFDIR => "dir",
        SFlag::S_IFREG => "file",
        _ => "other",
    }
}

fn name_of(raw: &std::ffi::CStr) -> Option<&OsStr> {
    let name = OsStr::from_bytes(raw.to_bytes());
    (name != "." && name != "..").then_some(name)
}

pub async fn list(sb: Sandbox, mut s: MuxStream, path: String) {
    let result = as_account(&sb, &path, |r, loc| list_dir(&r, &loc)).await;
    let body = match result.and_then(|entries| {
        serde_json::to_vec(&entries).map_err(|e| {
            ChannelError::new(ErrorCode::Io, format!("cannot encode the listing: {e}"))
        })
    }) {
        Ok(body) => body,
        Err(e) => return refuse(s, e).await,
    };
    if reply(&mut s, &Reply::ok()).await {
        let _ = s.write_all(&body).await;
        let _ = s.shutdown().await;
    }
}

fn list_dir(r: &Resolved, loc: &Location) -> Result<Vec<Entry>, ChannelError> {
    let err = io_err(&r.logical);
    let fd = loc
        .open_path(OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .map_err(&err)?;
    let at = fd.try_clone().map_err(&err)?;
    let mut dir = Dir::from_fd(fd).map_err(errno_err(&r.logical))?;
    let mut entries = Vec::new();
    for dirent in dir.iter() {
        let dirent = dirent.map_err(errno_err(&r.logical))?;
        let Some(name) = name_of(dirent.file_name()) else {
            continue;
        };
        // Entries that vanish between readdir and lstat are simply not listed.
        let Ok(st) = fstatat(&at, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        entries.push(Entry {
            name: name.to_string_lossy().into_owned(),
            kind: kind_name(&st),
            size: st.st_size.max(0) as u64,
            mode: st.st_mode & 0o7777,
            mtime: rfc3339(st.st_mtime, st.st_mtime_nsec),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

fn rfc3339(secs: i64, nsec: i64) -> String {
    chrono::DateTime::from_timestamp(secs, nsec.clamp(0, 999_999_999) as u32)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub async fn read(sb: Sandbox, mut s: MuxStream, path: String) {
    let opened = as_account(&sb, &path, |r, loc| open_for_read(&r, &loc)).await;
    let (file, size) = match opened {
        Ok(v) => v,
        Err(e) => return refuse(s, e).await,
    };
    if !reply(&mut s, &Reply::ok_with(&Size { size })).await {
        return;
    }
    let mut file = BufReader::with_capacity(COPY_BUF, tokio::fs::File::from_std(file));
    match tokio::io::copy_buf(&mut file, &mut s).await {
        // A short body tells the peer something went wrong; there is no second reply.
        Ok(_) => {
            let _ = s.shutdown().await;
        }
        Err(e) => tracing::debug!(error = %e, "fs.read ended early"),
    }
    drop(file);
    if size >= WRITEBACK_RANGE {
        let _ = blocking(|| {
            give_back_memory();
            Ok(())
        })
        .await;
    }
}

fn open_for_read(r: &Resolved, loc: &Location) -> Result<(std::fs::File, u64), ChannelError> {
    let err = io_err(&r.logical);
    let must_be_file = |st: &FileStat| match kind_of(st) {
        SFlag::S_IFREG => Ok(()),
        SFlag::S_IFDIR => Err(ChannelError::new(
            ErrorCode::IsDir,
            format!("{} is a directory", r.logical.display()),
        )),
        _ => Err(ChannelError::new(
            ErrorCode::Conflict,
            format!("{} is not a regular file", r.logical.display()),
        )),
    };
    // Looked at before opening: opening a FIFO would block, a device may act on being opened.
    let probe = loc.open_path(OFlag::O_PATH).map_err(&err)?;
    must_be_file(&fstat(&probe).map_err(errno_err(&r.logical))?)?;
    // Non-blocking, in case it was swapped for a FIFO in between; then it is refused here.
    let fd = loc
        .open_path(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY)
        .map_err(&err)?;
    let st = fstat(&fd).map_err(errno_err(&r.logical))?;
    must_be_file(&st)?;
    Ok((std::fs::File::from(fd), st.st_size.max(0) as u64))
}

pub async fn mkdir(sb: Sandbox, s: MuxStream, path: String) {
    let result = as_account(&sb, &path, |r, loc| make_dirs(&r, &loc)).await;
    finish(s, result).await;
}

/// `mkdir -p`, one component at a time, each checked to be a directory beneath the base.
fn make_dirs(r: &Resolved, loc: &Location) -> Result<(), ChannelError> {
    make_dirs_upto(r, loc, loc.parts().len())
}

/// [`make_dirs`] for the first `n` components of the path.
fn make_dirs_upto(r: &Resolved, loc: &Location, n: usize) -> Result<(), ChannelError> {
    let err = io_err(&r.logical);
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
    let n = n.min(loc.parts().len());
    for i in 1..=n {
        match loc.open_prefix(i, dir_flags, Mode::empty()) {
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::NotADirectory && i == n => {
                return Err(ChannelError::new(
                    ErrorCode::Exists,
                    format!("{} exists and is not a directory", r.logical.display()),
                ))
            }
            Err(e) => return Err(err(e)),
        }
        let parent = loc
            .open_prefix(i - 1, dir_flags, Mode::empty())
            .map_err(&err)?;
        // Made by the account, so it is the account's; the mode is narrowed by the umask.
        match mkdirat(
            &parent,
            loc.parts()[i - 1].as_os_str(),
            Mode::from_bits_truncate(0o777),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(err(e.into())),
        }
        loc.open_prefix(i, dir_flags, Mode::empty()).map_err(&err)?;
    }
    Ok(())
}

pub async fn remove(sb: Sandbox, s: MuxStream, path: String, recursive: bool) {
    let result = as_account(&sb, &path, move |r, loc| remove_path(&r, &loc, recursive)).await;
    finish(s, result).await;
}

fn remove_path(r: &Resolved, loc: &Location, recursive: bool) -> Result<(), ChannelError> {
    // Never allowed, whatever the home holds: forbidden, as an act the account may not do.
    if r.is_home() || loc.parts().is_empty() {
        return Err(ChannelError::new(
            ErrorCode::PermissionDenied,
            format!("refusing to remove {}", r.logical.display()),
        ));
    }
    let err = io_err(&r.logical);
    let (dir, name) = loc.open_parent().map_err(&err)?;
    let st = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno_err(&r.logical))?;
    if kind_of(&st) != SFlag::S_IFDIR {
        return unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir).map_err(errno_err(&r.logical));
    }
    if recursive {
        return remove_tree(dir.as_fd(), name).map_err(&err);
    }
    unlinkat(&dir, name, UnlinkatFlags::RemoveDir).map_err(|e| {
        if e == Errno::ENOTEMPTY {
            ChannelError::new(
                ErrorCode::Conflict,
                format!(
                    "{} is a directory that is not empty; remove it with recursive=true",
                    r.logical.display()
                ),
            )
        } else {
            err(e.into())
        }
    })
}

/// `rm -r` through descriptors: no symlink is followed, whatever the tree holds.
fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let fd = openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let at = fd.try_clone()?;
    let mut children = Vec::new();
    let mut dir = Dir::from_fd(fd)?;
    for dirent in dir.iter() {
        let dirent = dirent?;
        if let Some(child) = name_of(dirent.file_name()) {
            children.push((child.to_os_string(), dirent.file_type()));
        }
    }
    drop(dir);
    for (child, kind) in children {
        let is_dir = match kind {
            Some(t) => t == Type::Directory,
            None => fstatat(&at, child.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| kind_of(&st) == SFlag::S_IFDIR),
        };
        let removed = if is_dir {
            remove_tree(at.as_fd(), &child)
        } else {
            unlinkat(&at, child.as_os_str(), UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
        };
        match removed {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(unlinkat(parent, name, UnlinkatFlags::RemoveDir)?)
}

async fn finish(mut s: MuxStream, result: Result<(), ChannelError>) {
    match result {
        Ok(()) => {
            if reply(&mut s, &Reply::ok()).await {
                let _ = s.shutdown().await;
            }
        }
        Err(e) => refuse(s, e).await,
    }
}
