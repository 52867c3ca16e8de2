//! The file browser's channels: `fs.list`, `fs.read`, `fs.write`, `fs.mkdir`, `fs.remove`.

//!
//! Every operation runs as the account ([`crate::fsid`]) on paths opened without following a
//! symlink out of the home ([`crate::fspath`]), so the API reaches exactly what the agent's own
//! shell may, and whatever it creates is the account's without any `chown`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ChannelError, ErrorCode, Reply, Size};
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

use super::{refuse, reply};
use crate::fsid::FsIdentity;
use crate::fspath::Location;
use crate::paths::Resolved;
use crate::sandbox::Sandbox;
use crate::uploads::{self, Record};

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
        let kind = match kind_of(&st) {
            SFlag::S_IFLNK => "symlink",
            SFlag::S_IFDIR => "dir",
            SFlag::S_IFREG => "file",
            _ => "other",
        };
        entries.push(Entry {
            name: name.to_string_lossy().into_owned(),
            kind,
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
            ErrorCode::Invalid,
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

/// Removes the temporary file unless the write was committed, whatever way the task ends.
struct TempFile {
    /// The directory and the temporary name in it.
    temp: Option<(Arc<OwnedFd>, OsString)>,
    /// Dropped after the file is removed or renamed: a crash in between leaves the record, and
    /// the next start removes what it names.
    record: Option<Record>,
    identity: FsIdentity,
}

impl TempFile {
    /// The file became the target: nothing to clean up.
    fn keep(mut self) {
        self.temp = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let record = self.record.take();
        let Some((dir, name)) = self.temp.take() else {
            return;
        };
        let identity = self.identity.clone();
        // Removed as the account (the directory is the account's, and the agent may have put
        // anything under that name since), then the record as sandboxd (its directory is root's),
        // in that order. On a thread of its own: a drop must not block the runtime.
        let cleanup = move || {
            let removed = identity.run_sync(move || {
                match unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => Ok(()),
                    Err(e) => Err(ChannelError::from_io(&e.into(), "a temporary file")),
                }
            });
            if let Err(e) = removed {
                tracing::warn!(error = %e, "cannot remove the temporary file of an abandoned upload");
            }
            drop(record);
        };
        if let Err(e) = std::thread::Builder::new()
            .name("fs.write cleanup".into())
            .spawn(cleanup)
        {
            tracing::warn!(error = %e, "cannot start the cleanup of an abandoned upload");
        }
    }
}

struct WritePlan {
    target: Resolved,
    /// The target's directory, opened once: the upload lands where it was checked.
    dir: Arc<OwnedFd>,
    name: OsString,
    temp: OsString,
    mode: u32,
}

/// Bytes handed to the disk in one `write`.
const WRITE_BATCH: usize = 1 << 20;
/// Full batches that may wait for the disk while the stream goes on arriving. With the batch
/// being filled and the one being written, one upload holds at most 4 MiB.
const BATCHES_QUEUED: usize = 2;
/// Written bytes are handed to the kernel's writeback in ranges this large (see [`Writeback`]).
const WRITEBACK_RANGE: u64 = 8 << 20;
/// Bytes that may be on their way to the disk before the upload waits for the disk.
const WRITEBACK_AHEAD: u64 = 64 << 20;
/// A background `fdatasync` starts once this much was written since the last one started.
const SYNC_EVERY: u64 = 64 << 20;

pub async fn write(sb: Sandbox, mut s: MuxStream, path: String) {
    let (plan, file, guard) = match prepare_write(&sb, &path).await {
        Ok(v) => v,
        Err(e) => return refuse(s, e).await,
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let shown = plan.target.logical.display().to_string();
    let started = std::time::Instant::now();
    let identity = sb.fs_identity().clone();
    let (file, size) = match receive(&mut s, file, shown.clone(), identity).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            tracing::info!(path = %shown, "fs.write abandoned by the peer; nothing written");
            return;
        }
        Err(e) => {
            return refuse(s, e).await;
        }
    };
    let received = started.elapsed();
    let committed = sb
        .fs_identity()
        .run(move || {
            let committed = commit(&plan, file);
            if size >= WRITEBACK_RANGE {
                give_back_memory();
            }
            committed
        })
        .await;
    if committed.is_ok() {
        guard.keep();
    }
    tracing::debug!(
        path = %shown,
        size,
        received_ms = received.as_millis() as u64,
        commit_ms = started.elapsed().saturating_sub(received).as_millis() as u64,
        "fs.write"
    );
    match committed {
        Ok(()) => {
            if reply(&mut s, &Reply::ok_with(&Size { size })).await {
                let _ = s.shutdown().await;
            }
        }
        Err(e) => refuse(s, e).await,
    }
}

/// A full (or last) buffer on its way to the disk.
struct Batch {
    buf: Vec<u8>,
    len: usize,
}

/// How the stream ended.
enum End {
    Clean,
    /// Reset, or failed: the peer does not want the file.
    Abandoned,
    /// The disk writer stopped (it failed); its error says why.
    WriterGone,
}

/// Copies the stream into `file` until a clean end, returning the file and its size. `None`
/// means the peer reset the stream: the caller must not commit.
///
/// The stream is read here and the file written on a blocking thread, with a few batches in
/// between: the network goes on arriving while the disk writes, and the stream is read as soon
/// as data comes, so its flow-control window is handed back at once instead of after each disk
/// write (with tokio's `File` behind a `BufWriter`, as before, both took turns). Buffers go back
/// and forth, so one upload allocates at most `BATCHES_QUEUED + 2` of them.
async fn receive(
    s: &mut MuxStream,
    file: std::fs::File,
    shown: String,
    identity: FsIdentity,
) -> Result<Option<(std::fs::File, u64)>, ChannelError> {
    let (full_tx, full_rx) = tokio::sync::mpsc::channel::<Batch>(BATCHES_QUEUED);
    let (empty_tx, mut empty_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let abandoned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = abandoned.clone();
    // The bytes too are written as the account: the kernel checks disk space (ext4's blocks kept
    // for root, quotas) at write time, against the writer's own capabilities.
    let writer = tokio::task::spawn_blocking(move || {
        identity.run_sync(move || write_batches(file, full_rx, empty_tx, &stop, &shown))
    });

    let mut buf = vec![0u8; WRITE_BATCH];
    let mut len = 0;
    let end = loop {
        match s.read(&mut buf[len..]).await {
            Ok(0) if crate::duplex::was_reset(s) => break End::Abandoned,
            Ok(0) => break End::Clean,
            Ok(n) => len += n,
            Err(e) => {
                tracing::debug!(error = %e, "fs.write stream failed");
                break End::Abandoned;
            }
        }
        if len == buf.len() {
            let next = empty_rx
                .try_recv()
                .unwrap_or_else(|_| vec![0u8; WRITE_BATCH]);
            let batch = Batch {
                buf: std::mem::replace(&mut buf, next),
                len,
            };
            len = 0;
            if full_tx.send(batch).await.is_err() {
                break End::WriterGone;
            }
        }
    };
    let end = match end {
        End::Clean if len > 0 => match full_tx.send(Batch { buf, len }).await {
            Ok(()) => End::Clean,
            Err(_) => End::WriterGone,
        },
        other => other,
    };
    if matches!(end, End::Abandoned) {
        // Nothing more is worth writing; the writer drops what is still queued.
        abandoned.store(true, Ordering::Relaxed);
    }
    drop(full_tx);
    let written = writer.await.unwrap_or_else(|e| {
        Err(ChannelError::new(
            ErrorCode::Io,
            format!("internal error: {e}"),
        ))
    });
    match end {
        End::Abandoned => Ok(None),
        End::Clean => written.map(Some),
        // The writer only stops early on an error; never commit a file it did not finish.
        End::WriterGone => Err(written.err().unwrap_or_else(|| {
            ChannelError::new(ErrorCode::Io, "the file writer stopped before the end")
        })),
    }
}

/// The blocking half of [`receive`]: writes batches in order and hands the buffers back.
fn write_batches(
    file: std::fs::File,
    mut full: tokio::sync::mpsc::Receiver<Batch>,
    empty: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    abandoned: &std::sync::atomic::AtomicBool,
    shown: &str,
) -> Result<(std::fs::File, u64), ChannelError> {
    use std::io::Write;
    let failed = |e: io::Error| ChannelError::from_io(&e, &format!("writing {shown}"));
    let mut writeback = Writeback::default();
    let mut written = 0u64;
    while let Some(batch) = full.blocking_recv() {
        if abandoned.load(Ordering::Relaxed) {
            // Nothing of this file is kept; a background sync still running ends on its own.
            return Ok((file, written));
        }
        (&file).write_all(&batch.buf[..batch.len]).map_err(failed)?;
        written += batch.len as u64;
        // The reader may be gone already; then the buffer is simply freed.
        let _ = empty.send(batch.buf);
        writeback.advance(&file, written).map_err(failed)?;
    }
    writeback.finish().map_err(failed)?;
    Ok((file, written))
}

/// Gets an upload onto the disk while the rest still arrives, so the sync before the rename
/// (what makes a write whole or absent across a crash) finds little left to do.
///
/// Left alone, the kernel keeps a fresh upload in the page cache (background writeback starts at
/// a share of RAM, gigabytes here), and the final sync wrote the whole file after the last byte
/// had come in: 3.2 s of 7.7 s for 1 GiB. Two things make the disk work alongside the network:
/// - Every [`WRITEBACK_RANGE`] is handed to writeback (`sync_file_range`), and the upload waits
///   for the ranges more than [`WRITEBACK_AHEAD`] behind, so it cannot pile up dirty pages faster
///   than the disk takes them (in a sandbox with a memory limit, dirty pages are what reclaim
///   cannot drop).
/// - Every [`SYNC_EVERY`] an `fdatasync` runs on a thread of its own, the upload going on
///   meanwhile. Writeback only reaches the device; a disk with a write cache (a VM's disk, whose
///   cache is the host's page cache) writes the data out at the flush a sync sends, and with
///   writeback alone the final sync still took 1.3 s for 1 GiB.
///
/// A failed background sync fails the write: the kernel reports a writeback error once per open
/// file, so the final sync would otherwise succeed on data that never reached the disk.
/// `sync_file_range` is best effort: where it is not supported (gVisor, other kernels) it is
/// switched off and the syncs do all the work.
#[derive(Default)]
struct Writeback {
    /// Bytes handed to writeback so far.
    started: u64,
    /// Bytes known to be written back.
    waited: u64,
    ranges_off: bool,
    /// Bytes written when the last background sync started.
    synced: u64,
    sync: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl Writeback {
    /// Called after every write; `written` is the file's size so far.
    fn advance(&mut self, file: &std::fs::File, written: u64) -> io::Result<()> {
        self.reap(false)?;
        if !self.ranges_off && written - self.started >= WRITEBACK_RANGE {
            self.ranges_off = !self.push_ranges(file, written);
        }
        if self.sync.is_none() && written - self.synced >= SYNC_EVERY {
            // The sync thread needs a descriptor of its own, of the same open file. Without one
            // (out of descriptors or threads) the final sync simply does more.
            if let Ok(fd) = file.try_clone() {
                self.sync = std::thread::Builder::new()
                    .name("fs.write sync".into())
                    .spawn(move || fd.sync_data())
                    .ok();
                if self.sync.is_some() {
                    self.synced = written;
                }
            }
        }
        Ok(())
    }

    /// Hands the bytes up to `written` to writeback and waits for those more than
    /// [`WRITEBACK_AHEAD`] behind. False when `sync_file_range` does not work here.
    fn push_ranges(&mut self, file: &std::fs::File, written: u64) -> bool {
        use nix::libc;
        let started = sync_file_range(
            file,
            self.started,
            written - self.started,
            libc::SYNC_FILE_RANGE_WRITE,
        );
        self.started = written;
        let behind = written.saturating_sub(WRITEBACK_AHEAD);
        let waited = behind <= self.waited
            || sync_file_range(
                file,
                self.waited,
                behind - self.waited,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
        self.waited = self.waited.max(behind);
        started && waited
    }

    /// Collects the background sync's result once it is done (or, with `wait`, waits for it).
    fn reap(&mut self, wait: bool) -> io::Result<()> {
        if !self.sync.as_ref().is_some_and(|s| wait || s.is_finished()) {
            return Ok(());
        }
        match self.sync.take().map(|s| s.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the background sync failed")),
            None => Ok(()),
        }
    }

    /// Waits for the background sync; its error is the upload's.
    fn finish(mut self) -> io::Result<()> {
        self.reap(true)
    }
}

/// Returns the heap a large transfer used to the system. An upload passes through buffers,
/// yamux frames and the stream's grown window, a download through frames and messages; glibc
/// keeps what was freed for the next allocation, and sandboxd's idle RSS (4.4 MiB) stayed at
/// 15 MiB after a 1 GiB upload.
fn give_back_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory; it takes no pointers.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

fn sync_file_range(file: &std::fs::File, offset: u64, len: u64, flags: u32) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on a descriptor `file` keeps open; no memory is passed.
    let rc =
        unsafe { nix::libc::sync_file_range(file.as_raw_fd(), offset as _, len as _, flags as _) };
    if rc != 0 {
        tracing::debug!(
            error = %io::Error::last_os_error(),
            "sync_file_range failed; the final fsync does all the writing"
        );
    }
    rc == 0
}

/// Where an upload goes, looked at as the account: the target's directory, its name, and the
/// mode the new file gets (the old file's, if there is one).
fn locate_target(r: &Resolved, loc: &Location) -> Result<(OwnedFd, OsString, u32), ChannelError> {
    let shown = r.logical.display().to_string();
    let existing = match loc.open_path(OFlag::O_PATH) {
        Ok(fd) => Some(fstat(&fd).map_err(errno_err(&r.logical))?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(ChannelError::from_io(&e, &shown)),
    };
    if existing
        .as_ref()
        .is_some_and(|st| kind_of(st) == SFlag::S_IFDIR)
    {
        return Err(ChannelError::new(
            ErrorCode::IsDir,
            format!("{shown} is a directory"),
        ));
    }
    let (dir, name) = loc.open_parent().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ChannelError::new(
            ErrorCode::NotFound,
            format!("the parent directory of {shown} does not exist"),
        ),
        io::ErrorKind::NotADirectory => ChannelError::new(
            ErrorCode::NotDir,
            format!("the parent of {shown} is not a directory"),
        ),
        io::ErrorKind::InvalidInput => {
            ChannelError::new(ErrorCode::Invalid, format!("{shown} does not name a file"))
        }
        _ => ChannelError::from_io(&e, &shown),
    })?;
    let mode = existing
        .map(|st| st.st_mode & 0o7777)
        .unwrap_or(NEW_FILE_MODE);
    Ok((dir, name.to_os_string(), mode))
}

/// Makes the temporary file an upload is written to, as the account, next to the target.
async fn prepare_write(
    sb: &Sandbox,
    path: &str,
) -> Result<(WritePlan, std::fs::File, TempFile), ChannelError> {
    let (target, dir, name, mode) = as_account(sb, path, |r, loc| {
        let (dir, name, mode) = locate_target(&r, &loc)?;
        Ok((r, dir, name, mode))
    })
    .await?;
    let dir = Arc::new(dir);
    let shown = target.logical.display().to_string();
    let near = target
        .physical
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    loop {
        let temp = OsString::from(uploads::temp_name(&name, &unique_suffix()));
        // Recorded before it exists, so no moment leaves a temporary file without a record. As
        // sandboxd: the record directory is root's.
        let recorded = {
            let sb = sb.clone();
            let at = near.join(&temp);
            blocking(move || Ok(sb.uploads().begin(&at))).await?
        };
        let record = match recorded {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // Only the cleanup after a crash is lost; the upload itself can go on.
                tracing::warn!(error = %e, "cannot record an upload");
                None
            }
        };
        let (at, t) = (dir.clone(), temp.clone());
        let created = sb
            .fs_identity()
            .run(move || {
                Ok(openat(
                    at.as_fd(),
                    t.as_os_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                ))
            })
            .await?;
        match created {
            Ok(fd) => {
                let guard = TempFile {
                    temp: Some((dir.clone(), temp.clone())),
                    record,
                    identity: sb.fs_identity().clone(),
                };
                let plan = WritePlan {
                    target,
                    dir,
                    name,
                    temp,
                    mode,
                };
                return Ok((plan, std::fs::File::from(fd), guard));
            }
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(ChannelError::from_io(&e.into(), &shown)),
        }
    }
}

fn commit(plan: &WritePlan, file: std::fs::File) -> Result<(), ChannelError> {
    let shown = plan.target.logical.display().to_string();
    let err = |e: io::Error| ChannelError::from_io(&e, &shown);
    file.sync_all().map_err(err)?;
    fchmod(&file, Mode::from_bits_truncate(plan.mode)).map_err(|e| err(e.into()))?;
    drop(file);
    renameat(
        plan.dir.as_fd(),
        plan.temp.as_os_str(),
        plan.dir.as_fd(),
        plan.name.as_os_str(),
    )
    .map_err(|e| err(e.into()))
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
    let result = as_account(&sb, &path, |r, loc| make_dirs(&r, &loc)).await;
    finish(s, result).await;
}

/// `mkdir -p`, one component at a time, each checked to be a directory beneath the base.
fn make_dirs(r: &Resolved, loc: &Location) -> Result<(), ChannelError> {
    let err = io_err(&r.logical);
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
    let n = loc.parts().len();
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
    if r.is_home() || loc.parts().is_empty() {
        return Err(ChannelError::new(
            ErrorCode::Invalid,
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
                ErrorCode::Invalid,
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
