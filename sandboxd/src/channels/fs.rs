//! The file browser's channels: `fs.list`, `fs.read`, `fs.write`, `fs.mkdir`, `fs.remove`.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

use super::{refuse, reply};
use crate::mux::MuxStream;
use crate::paths::Resolved;
use crate::proto::{ChannelError, ErrorCode, Reply};
use crate::sandbox::Sandbox;

const COPY_BUF: usize = 256 * 1024;
const NEW_FILE_MODE: u32 = 0o644;

#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
    mode: u32,
    mtime: String,
}

#[derive(Debug, Serialize)]
struct Size {
    size: u64,
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

pub async fn list(sb: Sandbox, mut s: MuxStream, path: String) {
    let result = match resolve(&sb, &path) {
        Ok(r) => blocking(move || list_dir(&r)).await,
        Err(e) => Err(e),
    };
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

fn list_dir(r: &Resolved) -> Result<Vec<Entry>, ChannelError> {
    let err = io_err(&r.logical);
    let mut entries = Vec::new();
    for dirent in std::fs::read_dir(&r.physical).map_err(&err)? {
        let dirent = dirent.map_err(&err)?;
        // Entries that vanish between readdir and lstat are simply not listed.
        let Ok(meta) = std::fs::symlink_metadata(dirent.path()) else {
            continue;
        };
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            "symlink"
        } else if ft.is_dir() {
            "dir"
        } else if ft.is_file() {
            "file"
        } else {
            "other"
        };
        entries.push(Entry {
            name: dirent.file_name().to_string_lossy().into_owned(),
            kind,
            size: meta.len(),
            mode: meta.mode() & 0o7777,
            mtime: rfc3339(meta.mtime(), meta.mtime_nsec()),
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
    let opened = match resolve(&sb, &path) {
        Ok(r) => blocking(move || open_for_read(&r)).await,
        Err(e) => Err(e),
    };
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
}

fn open_for_read(r: &Resolved) -> Result<(std::fs::File, u64), ChannelError> {
    let err = io_err(&r.logical);
    // Checked before opening: opening a FIFO would block.
    let meta = std::fs::metadata(&r.physical).map_err(&err)?;
    if meta.is_dir() {
        return Err(ChannelError::new(
            ErrorCode::IsDir,
            format!("{} is a directory", r.logical.display()),
        ));
    }
    if !meta.is_file() {
        return Err(ChannelError::new(
            ErrorCode::Invalid,
            format!("{} is not a regular file", r.logical.display()),
        ));
    }
    let file = std::fs::File::open(&r.physical).map_err(&err)?;
    Ok((file, meta.len()))
}

/// Removes the temporary file unless the write was committed, whatever way the task ends.
struct TempFile {
    path: Option<PathBuf>,
}

impl TempFile {
    /// The file became the target: nothing to clean up.
    fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

struct WritePlan {
    target: Resolved,
    temp: PathBuf,
    mode: u32,
}

/// Bytes gathered before one write to the file.
const WRITE_BATCH: usize = 1 << 20;

pub async fn write(sb: Sandbox, mut s: MuxStream, path: String) {
    let account = sb.account().clone();
    let prepared = match resolve(&sb, &path) {
        Ok(r) => blocking(move || prepare_write(r)).await,
        Err(e) => Err(e),
    };
    let (plan, file) = match prepared {
        Ok(v) => v,
        Err(e) => return refuse(s, e).await,
    };
    let guard = TempFile {
        path: Some(plan.temp.clone()),
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let mut file = tokio::fs::File::from_std(file);
    let received = receive(&mut s, &mut file).await;
    let size = match received {
        Ok(Some(n)) => n,
        Ok(None) => {
            tracing::info!(path = %plan.target.logical.display(), "fs.write abandoned by the peer; nothing written");
            return;
        }
        Err(e) => {
            return refuse(s, e).await;
        }
    };
    let file = file.into_std().await;
    let committed = blocking(move || {
        commit(&plan, file, &account)?;
        guard.keep();
        Ok(())
    })
    .await;
    match committed {
        Ok(()) => {
            if reply(&mut s, &Reply::ok_with(&Size { size })).await {
                let _ = s.shutdown().await;
            }
        }
        Err(e) => refuse(s, e).await,
    }
}

/// Copies the stream into `file` until a clean end. `None` means the peer reset the stream:
/// the caller must not commit.
async fn receive(
    s: &mut MuxStream,
    file: &mut tokio::fs::File,
) -> Result<Option<u64>, ChannelError> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    // tokio's File hands every write to a blocking thread; batching the stream's small reads
    // into large writes keeps that cost per megabyte, not per yamux frame.
    let mut file = tokio::io::BufWriter::with_capacity(WRITE_BATCH, file);
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) if crate::duplex::was_reset(s) => return Ok(None),
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "fs.write stream failed");
                return Ok(None);
            }
        };
        file.write_all(&buf[..n])
            .await
            .map_err(|e| ChannelError::from_io(&e, "writing the file"))?;
        total += n as u64;
    }
    file.flush()
        .await
        .map_err(|e| ChannelError::from_io(&e, "writing the file"))?;
    Ok(Some(total))
}

fn prepare_write(target: Resolved) -> Result<(WritePlan, std::fs::File), ChannelError> {
    let shown = target.logical.display().to_string();
    let existing = match std::fs::metadata(&target.physical) {
        Ok(m) if m.is_dir() => {
            return Err(ChannelError::new(
                ErrorCode::IsDir,
                format!("{shown} is a directory"),
            ))
        }
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(ChannelError::from_io(&e, &shown)),
    };
    let (Some(parent), Some(name)) = (target.physical.parent(), target.physical.file_name()) else {
        return Err(ChannelError::new(
            ErrorCode::Invalid,
            format!("{shown} does not name a file"),
        ));
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(ChannelError::new(
                ErrorCode::NotDir,
                format!("the parent of {shown} is not a directory"),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ChannelError::new(
                ErrorCode::NotFound,
                format!("the parent directory of {shown} does not exist"),
            ))
        }
        Err(e) => return Err(ChannelError::from_io(&e, &shown)),
    }
    let mode = existing
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(NEW_FILE_MODE);
    // Keep the temporary name within NAME_MAX however long the target's name is.
    let short = &name.as_bytes()[..name.len().min(200)];
    let prefix = String::from_utf8_lossy(short);
    loop {
        let temp = parent.join(format!(".{prefix}.agenthold-tmp-{}", unique_suffix()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
        {
            Ok(file) => return Ok((WritePlan { target, temp, mode }, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ChannelError::from_io(&e, &shown)),
        }
    }
}

fn commit(
    plan: &WritePlan,
    file: std::fs::File,
    account: &crate::account::Account,
) -> Result<(), ChannelError> {
    let shown = plan.target.logical.display().to_string();
    let err = |e: io::Error| ChannelError::from_io(&e, &shown);
    file.sync_all().map_err(err)?;
    drop(file);
    std::fs::set_permissions(&plan.temp, std::fs::Permissions::from_mode(plan.mode))
        .map_err(err)?;
    if let Some((uid, gid)) = account.chown_target() {
        nix::unistd::chown(&plan.temp, Some(uid), Some(gid))
            .map_err(|e| err(io::Error::from(e)))?;
    }
    std::fs::rename(&plan.temp, &plan.target.physical).map_err(err)
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:x}{nanos:08x}{n:x}", std::process::id())
}

pub async fn mkdir(sb: Sandbox, s: MuxStream, path: String) {
    let account = sb.account().clone();
    let result = match resolve(&sb, &path) {
        Ok(r) => blocking(move || make_dirs(&r, &account)).await,
        Err(e) => Err(e),
    };
    finish(s, result).await;
}

fn make_dirs(r: &Resolved, account: &crate::account::Account) -> Result<(), ChannelError> {
    let err = io_err(&r.logical);
    if let Ok(m) = std::fs::metadata(&r.physical) {
        if m.is_dir() {
            return Ok(());
        }
        return Err(ChannelError::new(
            ErrorCode::Exists,
            format!("{} exists and is not a directory", r.logical.display()),
        ));
    }
    // The directories about to be made, so only they are handed to the account.
    let mut missing = Vec::new();
    let mut cur = Some(r.physical.as_path());
    while let Some(p) = cur {
        if std::fs::symlink_metadata(p).is_ok() {
            break;
        }
        missing.push(p.to_path_buf());
        cur = p.parent();
    }
    std::fs::create_dir_all(&r.physical).map_err(&err)?;
    if let Some((uid, gid)) = account.chown_target() {
        for dir in missing {
            nix::unistd::chown(&dir, Some(uid), Some(gid)).map_err(|e| err(e.into()))?;
        }
    }
    Ok(())
}

pub async fn remove(sb: Sandbox, s: MuxStream, path: String, recursive: bool) {
    let result = match resolve(&sb, &path) {
        Ok(r) => blocking(move || remove_path(&r, recursive)).await,
        Err(e) => Err(e),
    };
    finish(s, result).await;
}

fn remove_path(r: &Resolved, recursive: bool) -> Result<(), ChannelError> {
    if r.is_home() || r.physical == Path::new("/") {
        return Err(ChannelError::new(
            ErrorCode::Invalid,
            format!("refusing to remove {}", r.logical.display()),
        ));
    }
    let err = io_err(&r.logical);
    let meta = std::fs::symlink_metadata(&r.physical).map_err(&err)?;
    if !meta.is_dir() {
        return std::fs::remove_file(&r.physical).map_err(&err);
    }
    if recursive {
        return std::fs::remove_dir_all(&r.physical).map_err(&err);
    }
    std::fs::remove_dir(&r.physical).map_err(|e| {
        if e.kind() == io::ErrorKind::DirectoryNotEmpty {
            ChannelError::new(
                ErrorCode::Invalid,
                format!(
                    "{} is a directory that is not empty; remove it with recursive=true",
                    r.logical.display()
                ),
            )
        } else {
            err(e)
        }
    })
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
