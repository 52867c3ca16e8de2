//! Background processes: started through the API, owned by sandboxd, outliving the request
//! that started them and every tunnel drop.
//!
//! Each process has a folder under the sandbox's process directory (in the container's own
//! filesystem, never the home): its record (`process.json`, [`record`]) and its output
//! ([`log`]). A sandboxd that starts finds the folders of the one before it; processes that
//! were running then are `lost`, and their output stays readable. The tree of each process is
//! held by a [`shim`], so a kill or a timeout leaves nothing of it alive.
//!
//! This file holds one process's state and what callers ask of it; [`registry`] the sandbox's
//! processes, [`start`] starting and supervising one, [`stdin`] writing to it.

pub mod log;
mod record;
mod registry;
pub mod shim;
pub mod spawn;
mod start;
mod stdin;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use agenthold_proto::{ChannelError, ErrorCode, ProcessInfo};
use tokio::process::ChildStdin;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use self::registry::Processes;
pub use self::start::start;

use self::log::{OutputLog, Stream};
use self::spawn::Control;

/// One background process.
pub struct Process {
    id: String,
    dir: PathBuf,
    state: Mutex<State>,
    /// Bumped at new output and at the end: readers and waiters watch it.
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// Cancelled to kill the tree (a removal).
    kill: CancellationToken,
    /// Cancelled once the tree is gone: a stdin write still waiting gives up.
    ended: CancellationToken,
    control: Option<Control>,
}

struct State {
    info: ProcessInfo,
    log: OutputLog,
    budget: u64,
    /// Its end is recorded and its output complete: nothing more will come.
    done: bool,
    /// An append failed (the disk is full); said once.
    write_failed: bool,
}

impl State {
    /// The record's info with the output's extent as it is now.
    fn info_now(&self) -> ProcessInfo {
        let mut info = self.info.clone();
        info.output_bytes = self.log.end();
        info.output_start = self.log.start();
        info
    }
}

impl Process {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The process as it now is.
    pub fn info(&self) -> ProcessInfo {
        self.lock().info_now()
    }

    /// True once it has ended and all its output is in.
    pub fn is_done(&self) -> bool {
        self.lock().done
    }

    /// Reads the next piece of output for `cursor` (see [`log::OutputLog::read`]), and whether
    /// the process is done (so an [`log::Piece::End`] is the very end).
    pub fn read(
        &self,
        cursor: &mut log::Cursor,
        max: usize,
    ) -> std::io::Result<(log::Piece, bool)> {
        let st = self.lock();
        let piece = st.log.read(cursor, max)?;
        Ok((piece, st.done))
    }

    pub fn output_end(&self) -> u64 {
        self.lock().log.end()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn append(&self, stream: Stream, data: &[u8]) {
        {
            let mut st = self.lock();
            if let Err(e) = st.log.append(stream, data) {
                if !st.write_failed {
                    st.write_failed = true;
                    tracing::warn!(process = %self.id, error = %e, "cannot keep the process's output; it is dropped while this lasts");
                }
            }
        }
        self.bump();
    }

    /// Sends `signal` to the process's group; refused once it has ended.
    pub fn signal(&self, signal: i32) -> Result<(), ChannelError> {
        let ended = || ChannelError::new(ErrorCode::Invalid, "the process has already ended");
        if !self.lock().info.state.is_running() {
            return Err(ended());
        }
        let sig = nix::sys::signal::Signal::try_from(signal)
            .map_err(|_| ChannelError::new(ErrorCode::Invalid, format!("no signal {signal}")))?;
        match self.control.map(|c| c.signal(sig)) {
            Some(Ok(())) => Ok(()),
            Some(Err(nix::errno::Errno::ESRCH)) | None => Err(ended()),
            Some(Err(e)) => Err(ChannelError::new(
                ErrorCode::Io,
                format!("cannot signal the process: {e}"),
            )),
        }
    }

    /// Waits until the process is done, or `timeout` is up.
    pub async fn wait_done(&self, timeout: Duration) {
        let mut rx = self.subscribe();
        let _ = tokio::time::timeout(timeout, async {
            loop {
                rx.borrow_and_update();
                if self.is_done() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

fn cancelled() -> CancellationToken {
    let t = CancellationToken::new();
    t.cancel();
    t
}
