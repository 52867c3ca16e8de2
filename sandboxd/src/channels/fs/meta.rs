//! `fs.stat`, `fs.exists` and `fs.rename`: about paths rather than their bytes, as the account
//! and through [`Location`] like every other file channel.

use std::io;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ChannelError, ErrorCode, Exists, FileStat as Stat, Reply};
use nix::errno::Errno;
use nix::fcntl::{renameat, renameat2, AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{fstat, fstatat, FileStat};
use tokio::io::AsyncWriteExt;

use super::{as_account, errno_err, finish, io_err, kind_name, refuse, reply, rfc3339};
use crate::fspath::Location;
use crate::paths::Resolved;
use crate::sandbox::Sandbox;

/// The path itself, a symbolic link included (not what it points to).
fn lstat(r: &Resolved, loc: &Location) -> Result<FileStat, ChannelError> {
    if loc.parts().is_empty() {
        let fd = loc.open_path(OFlag::O_PATH).map_err(io_err(&r.logical))?;
        return fstat(&fd).map_err(errno_err(&r.logical));
    }
    let (dir, name) = loc.open_parent().map_err(io_err(&r.logical))?;
    fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno_err(&r.logical))
}

async fn send<T: serde::Serialize>(mut s: MuxStream, result: Result<T, ChannelError>) {
    match result {
        Ok(v) => {
            if reply(&mut s, &Reply::ok_with(&v)).await {
                let _ = s.shutdown().await;
            }
        }
        Err(e) => refuse(s, e).await,
    }
}

pub async fn stat(sb: Sandbox, s: MuxStream, path: String) {
    let result = as_account(&sb, &path, |r, loc| Ok((lstat(&r, &loc)?, r))).await;
    let result = result.map(|(st, r)| {
        // Looked up as sandboxd: /etc/passwd is everyone's to read anyway.
        let owner = crate::account::user_name(st.st_uid).unwrap_or_else(|| st.st_uid.to_string());
        Stat {
            path: r.logical.display().to_string(),
            kind: kind_name(&st).to_string(),
            size: st.st_size.max(0) as u64,
            mode: format!("{:04o}", st.st_mode & 0o7777),
            mtime: rfc3339(st.st_mtime, st.st_mtime_nsec),
            owner,
        }
    });
    send(s, result).await
}

/// Whether the account can see the path: a path outside what this sandbox serves, one behind
/// a symbolic link out of the home, one in a directory the account may not search, and a
/// missing one all simply do not exist. Only a malformed path (`..`, NUL, too long) is an error.
pub async fn exists(sb: Sandbox, s: MuxStream, path: String) {
    let r = match sb.paths().resolve_served(&path) {
        Ok(Some(r)) => r,
        Ok(None) => return send(s, Ok(Exists { exists: false })).await,
        Err(e) => return refuse(s, e).await,
    };
    let home = sb.options().home.clone();
    let result = sb
        .fs_identity()
        .run(move || {
            let found = Location::open(&r, &home).and_then(|loc| {
                if loc.parts().is_empty() {
                    return loc.open_path(OFlag::O_PATH).map(drop);
                }
                let (dir, name) = loc.open_parent()?;
                fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map(drop)
                    .map_err(io::Error::from)
            });
            match found {
                Ok(()) => Ok(true),
                Err(e) if unseen(&e) => Ok(false),
                Err(e) => Err(ChannelError::from_io(&e, &r.logical.display().to_string())),
            }
        })
        .await;
    send(s, result.map(|exists| Exists { exists })).await
}

/// The errors that mean "not there, as far as the account can tell".
fn unseen(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    matches!(
        e.kind(),
        K::NotFound | K::PermissionDenied | K::NotADirectory | K::InvalidInput
    )
}

pub async fn rename(sb: Sandbox, s: MuxStream, from: String, to: String, overwrite: bool) {
    let result = match (sb.paths().resolve(&from), sb.paths().resolve(&to)) {
        (Ok(f), Ok(t)) => {
            let home = sb.options().home.clone();
            sb.fs_identity()
                .run(move || move_path(&f, &t, &home, overwrite))
                .await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    finish(s, result).await
}

fn move_path(
    from: &Resolved,
    to: &Resolved,
    home: &std::path::Path,
    overwrite: bool,
) -> Result<(), ChannelError> {
    for r in [from, to] {
        if r.is_home() {
            return Err(ChannelError::new(
                ErrorCode::PermissionDenied,
                format!("refusing to rename {}", r.logical.display()),
            ));
        }
    }
    let shown = format!("{} to {}", from.logical.display(), to.logical.display());
    let err = |e: io::Error| ChannelError::from_io(&e, &shown);
    let src = Location::open(from, home).map_err(io_err(&from.logical))?;
    let dst = Location::open(to, home).map_err(io_err(&to.logical))?;
    let (src_dir, src_name) = src.open_parent().map_err(io_err(&from.logical))?;
    let (dst_dir, dst_name) = dst.open_parent().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ChannelError::new(
            ErrorCode::NotFound,
            format!(
                "the parent directory of {} does not exist",
                to.logical.display()
            ),
        ),
        _ => ChannelError::from_io(&e, &to.logical.display().to_string()),
    })?;
    // The source must be there (and be the account's to see) before anything else is said.
    fstatat(&src_dir, src_name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno_err(&from.logical))?;
    let flags = if overwrite {
        RenameFlags::empty()
    } else {
        RenameFlags::RENAME_NOREPLACE
    };
    let renamed = match renameat2(&src_dir, src_name, &dst_dir, dst_name, flags) {
        // No RENAME_NOREPLACE on this filesystem or kernel: look, then rename.
        Err(Errno::EINVAL | Errno::ENOSYS) if !overwrite => {
            match fstatat(&dst_dir, dst_name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => Err(Errno::EEXIST),
                Err(Errno::ENOENT) => renameat(&src_dir, src_name, &dst_dir, dst_name),
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    renamed.map_err(|e| match e {
        Errno::EEXIST | Errno::ENOTEMPTY => ChannelError::new(
            ErrorCode::Exists,
            format!("{} exists", to.logical.display()),
        ),
        Errno::EXDEV => ChannelError::new(
            ErrorCode::Invalid,
            format!("cannot move {shown}: they are on different filesystems"),
        ),
        // Only when `from` is a directory now: the tree, not the request, is in the way.
        Errno::EINVAL => ChannelError::new(
            ErrorCode::Conflict,
            format!("cannot move {shown}: a directory cannot go inside itself"),
        ),
        e => err(e.into()),
    })
}
