//! `fs.write`: an upload streamed into a temporary file next to its target, handed to the disk
//! while it still arrives, synced, and renamed into place, so a write is whole or absent across a
//! crash; the temporary file is recorded (see [`crate::uploads`]) before it exists and removed
//! whatever way the upload ends.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ChannelError, ErrorCode, Reply, Size};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fchmod, fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::writeback::{give_back_memory, Writeback, WRITEBACK_RANGE};
use super::{as_account, blocking, errno_err, kind_of, make_dirs_upto, refuse, reply};
use crate::fsid::FsIdentity;
use crate::fspath::Location;
use crate::paths::Resolved;
use crate::sandbox::Sandbox;
use crate::uploads::{self, Record};

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

/// The mode of a file the upload creates; one it replaces keeps its own.
const NEW_FILE_MODE: u32 = 0o644;
/// Bytes handed to the disk in one `write`.
const WRITE_BATCH: usize = 1 << 20;
/// Full batches that may wait for the disk while the stream goes on arriving. With the batch
/// being filled and the one being written, one upload holds at most 4 MiB.
const BATCHES_QUEUED: usize = 2;

pub async fn write(sb: Sandbox, mut s: MuxStream, path: String, parents: bool) {
    let (plan, file, guard) = match prepare_write(&sb, &path, parents).await {
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

/// Where an upload goes, looked at as the account: the target's directory, its name, and the
/// mode the new file gets (the old file's, if there is one). With `parents`, the directories
/// missing above it are made first, as by `fs.mkdir`.
fn locate_target(
    r: &Resolved,
    loc: &Location,
    parents: bool,
) -> Result<(OwnedFd, OsString, u32), ChannelError> {
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
    let mut parent = loc.open_parent();
    if parents && matches!(&parent, Err(e) if e.kind() == io::ErrorKind::NotFound) {
        let above = loc.parts().len().saturating_sub(1);
        make_dirs_upto(r, loc, above).map_err(|e| match e.code {
            // The last directory's name is taken by a file: as if it were on the way.
            ErrorCode::Exists => ChannelError::new(
                ErrorCode::NotDir,
                format!("the parent of {shown} is not a directory"),
            ),
            _ => e,
        })?;
        parent = loc.open_parent();
    }
    let (dir, name) = parent.map_err(|e| match e.kind() {
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
    parents: bool,
) -> Result<(WritePlan, std::fs::File, TempFile), ChannelError> {
    let (target, dir, name, mode) = as_account(sb, path, move |r, loc| {
        let (dir, name, mode) = locate_target(&r, &loc, parents)?;
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
