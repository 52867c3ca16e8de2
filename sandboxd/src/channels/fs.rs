//! The file browser's channels: `fs.list`, `fs.read`, `fs.write`, `fs.mkdir`, `fs.remove`.

use std::io;
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
use crate::uploads::{self, Record, Uploads};

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
    drop(file);
    if size >= WRITEBACK_RANGE {
        let _ = blocking(|| {
            give_back_memory();
            Ok(())
        })
        .await;
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
    /// Dropped after the file is removed or renamed: a crash in between leaves the record, and
    /// the next start removes what it names.
    _record: Option<Record>,
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
    record: Option<Record>,
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
    let account = sb.account().clone();
    let prepared = match resolve(&sb, &path) {
        Ok(r) => {
            let sb = sb.clone();
            blocking(move || prepare_write(r, sb.uploads())).await
        }
        Err(e) => Err(e),
    };
    let (mut plan, file) = match prepared {
        Ok(v) => v,
        Err(e) => return refuse(s, e).await,
    };
    let guard = TempFile {
        path: Some(plan.temp.clone()),
        _record: plan.record.take(),
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let shown = plan.target.logical.display().to_string();
    let started = std::time::Instant::now();
    let (file, size) = match receive(&mut s, file, shown.clone()).await {
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
    let committed = blocking(move || {
        let committed = commit(&plan, file, &account);
        if committed.is_ok() {
            guard.keep();
        }
        if size >= WRITEBACK_RANGE {
            give_back_memory();
        }
        committed
    })
    .await;
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
) -> Result<Option<(std::fs::File, u64)>, ChannelError> {
    let (full_tx, full_rx) = tokio::sync::mpsc::channel::<Batch>(BATCHES_QUEUED);
    let (empty_tx, mut empty_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let abandoned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = abandoned.clone();
    let writer =
        tokio::task::spawn_blocking(move || write_batches(file, full_rx, empty_tx, &stop, &shown));

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

fn prepare_write(
    target: Resolved,
    uploads: &Uploads,
) -> Result<(WritePlan, std::fs::File), ChannelError> {
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
    loop {
        let temp = parent.join(uploads::temp_name(name, &unique_suffix()));
        // Recorded before it exists, so no moment leaves a temporary file without a record.
        let record = match uploads.begin(&temp) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // Only the cleanup after a crash is lost; the upload itself can go on.
                tracing::warn!(error = %e, "cannot record an upload");
                None
            }
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
        {
            Ok(file) => {
                let plan = WritePlan {
                    target,
                    temp,
                    mode,
                    record,
                };
                return Ok((plan, file));
            }
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
