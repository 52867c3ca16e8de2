//! Getting an upload onto the disk while it still arrives, and giving back the memory a large
//! transfer used.

use std::io;

/// Written bytes are handed to the kernel's writeback in ranges this large (see [`Writeback`]).
pub(super) const WRITEBACK_RANGE: u64 = 8 << 20;
/// Bytes that may be on their way to the disk before the upload waits for the disk.
const WRITEBACK_AHEAD: u64 = 64 << 20;
/// A background `fdatasync` starts once this much was written since the last one started.
const SYNC_EVERY: u64 = 64 << 20;

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
pub(super) struct Writeback {
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
    pub(super) fn advance(&mut self, file: &std::fs::File, written: u64) -> io::Result<()> {
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
    pub(super) fn reap(&mut self, wait: bool) -> io::Result<()> {
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
    pub(super) fn finish(mut self) -> io::Result<()> {
        self.reap(true)
    }
}

/// Returns the heap a large transfer used to the system. An upload passes through buffers,
/// yamux frames and the stream's grown window, a download through frames and messages; glibc
/// keeps what was freed for the next allocation, and sandboxd's idle RSS (4.4 MiB) stayed at
/// 15 MiB after a 1 GiB upload.
pub(super) fn give_back_memory() {
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
