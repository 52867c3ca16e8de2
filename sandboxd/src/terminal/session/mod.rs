//! One terminal session: a shell on a pty, its output ring and screen, and its viewers.
//!
//! Three kinds of task touch a session:
//! - the *owner* holds the shell's process, ends it when asked, when the sandbox stops or when
//!   nobody has watched for `detach_after`, and removes the session once its end was seen;
//! - the *reader* moves output from the pty into the ring and the screen. It never waits for a
//!   viewer that is far behind for longer than [`STALL`]: a viewer stuck that long is left
//!   behind and later gets a redraw instead of the bytes it missed. Up to then it does wait, so
//!   a live viewer loses nothing, the way a real terminal slows a program down;
//! - each *viewer* copies from the ring at its own offset to its stream, and forwards
//!   keystrokes and resizes the other way.

mod owner;
mod reader;
#[cfg(test)]
mod tests;
mod viewer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agenthold_proto::{ChannelError, ErrorCode, TerminalInfo};
use tokio::process::Child;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::pty::{self, Master};
use super::ring::Ring;
use super::screen::Screen;
use crate::sandbox::Sandbox;

pub use reader::STALL;
pub use viewer::{Step, Viewer};

/// What a new session is made of.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub cols: u16,
    pub rows: u16,
    pub term: String,
    /// A command line for the account's shell; `None` is an interactive login shell.
    pub command: Option<String>,
    /// Set in the shell's environment over sandboxd's own.
    pub env: Vec<(String, String)>,
    /// How long the session lives on without viewers.
    pub detach_after: Duration,
    /// How much output is kept for replay, in bytes.
    pub buffer: usize,
}

pub struct Session {
    id: String,
    command: String,
    created_at_ms: u64,
    detach_after: Duration,
    master: Arc<Master>,
    state: Mutex<State>,
    /// Bumped on new output, a resize and the end: viewers wait on it.
    changed: watch::Sender<u64>,
    /// Bumped when a viewer moves on or leaves: the reader waits on it when a viewer is behind.
    progress: watch::Sender<u64>,
    /// Viewers came or went: the owner re-reads the detach deadline.
    viewers_changed: Notify,
    kill: CancellationToken,
}

struct Cursor {
    /// The offset of the next byte this viewer sends.
    pos: u64,
    /// Left behind by the reader; gets a redraw once its offset leaves the ring.
    stuck: bool,
}

struct State {
    ring: Ring,
    screen: Screen,
    cols: u16,
    rows: u16,
    /// Bumped at every resize, so each viewer can tell its peer the new size once.
    size_gen: u64,
    viewers: HashMap<u64, Cursor>,
    next_viewer: u64,
    last_input_ms: u64,
    /// When the last viewer left (or the session started).
    idle_since: Instant,
    /// Set once the shell was reaped and its output drained: nothing more will come.
    exit: Option<i32>,
    /// A viewer has delivered the exit, so the session may go.
    exit_seen: bool,
    /// Removed from the registry; nobody new may attach.
    closed: bool,
}

impl State {
    /// Most a viewer may be behind before the reader waits for it: a full read more and its
    /// next byte would leave the ring.
    fn lag_limit(&self) -> u64 {
        (self.ring.capacity() - reader::chunk_size(self.ring.capacity())) as u64
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent before anything that could panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Starts the shell, registers the session and attaches its first viewer.
    pub fn start(sb: &Sandbox, cfg: SessionConfig) -> Result<Viewer, ChannelError> {
        let terminals = sb.terminals();
        terminals.check_room()?;
        let term = pty::open_terminal(cfg.cols, cfg.rows).map_err(|e| {
            ChannelError::new(ErrorCode::Io, format!("cannot open a terminal: {e}"))
        })?;
        let mut child = pty::spawn_shell(sb, &term, &cfg.term, cfg.command.as_deref(), &cfg.env)
            .map_err(|e| {
                let what = format!("cannot start {}", sb.account().shell.display());
                ChannelError::from_io(&e, &what)
            })?;
        // Only the shell may hold the terminal's slave side, or its exit would never read as EIO.
        let pty::Terminal { master, slave } = term;
        drop(slave);
        let Some(pid) = child.id().map(|p| p as i32) else {
            return Err(ChannelError::new(
                ErrorCode::Io,
                "the shell ended before it started",
            ));
        };
        sb.procs().track_session(pid);
        let kill_now = |child: &mut Child| {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.start_kill();
        };
        // SAFETY: the OwnedFd is valid and is owned by the AsyncFd for the AsyncFd's whole life.
        let master = match unsafe { tokio::io::unix::AsyncFd::register(master) } {
            Ok(m) => Arc::new(m),
            Err(e) => {
                kill_now(&mut child);
                let e = std::io::Error::from(e);
                return Err(ChannelError::from_io(&e, "terminal"));
            }
        };
        let command = match &cfg.command {
            Some(c) => c.clone(),
            None => sb.account().shell.display().to_string(),
        };
        let now = now_ms();
        let session = Arc::new(Session {
            id: super::new_id(),
            command,
            created_at_ms: now,
            detach_after: cfg.detach_after,
            master,
            state: Mutex::new(State {
                ring: Ring::new(cfg.buffer),
                screen: Screen::new(cfg.cols, cfg.rows),
                cols: cfg.cols,
                rows: cfg.rows,
                size_gen: 0,
                viewers: HashMap::new(),
                next_viewer: 0,
                last_input_ms: now,
                idle_since: Instant::now(),
                exit: None,
                exit_seen: false,
                closed: false,
            }),
            changed: watch::channel(0).0,
            progress: watch::channel(0).0,
            viewers_changed: Notify::new(),
            kill: CancellationToken::new(),
        });
        // The first viewer is in before the owner runs, so a session that ends with its last
        // viewer (detach_after 0) cannot end before it had one.
        let viewer = session.attach(None, None, true)?;
        if let Err(e) = terminals.insert(session.clone()) {
            kill_now(&mut child);
            return Err(e);
        }
        tracing::info!(session = %session.id, pid, "terminal session started");
        sb.spawn(owner::own(sb.clone(), session, child, pid));
        Ok(viewer)
    }

    /// Keystrokes from a viewer.
    pub async fn input(&self, data: &[u8]) -> std::io::Result<()> {
        self.lock().last_input_ms = now_ms();
        pty::write_all(&self.master, data).await
    }

    /// Resizes the pty and the screen; every viewer is told if the size changed.
    pub fn resize(&self, cols: u16, rows: u16) {
        let mut st = self.lock();
        let changed = self.resize_locked(&mut st, cols, rows);
        drop(st);
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
    }

    fn resize_locked(&self, st: &mut State, cols: u16, rows: u16) -> bool {
        if cols == 0 || rows == 0 || (st.cols, st.rows) == (cols, rows) {
            return false;
        }
        if let Err(e) = pty::set_size(self.master.get_ref(), cols, rows) {
            tracing::debug!(error = %e, "cannot resize the terminal");
            return false;
        }
        st.screen.resize(cols, rows);
        st.cols = cols;
        st.rows = rows;
        st.size_gen += 1;
        true
    }

    /// Ends the shell (SIGHUP, then SIGKILL); viewers get what is left and the exit.
    pub fn kill(&self) {
        self.kill.cancel();
    }

    pub fn info(&self) -> TerminalInfo {
        let st = self.lock();
        TerminalInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            cols: st.cols,
            rows: st.rows,
            created_at_ms: self.created_at_ms,
            last_input_at_ms: st.last_input_ms,
            viewers: st.viewers.len() as u32,
            offset: st.ring.end(),
            exit_code: st.exit,
        }
    }
}

fn ended(id: &str) -> ChannelError {
    ChannelError::new(
        ErrorCode::NotFound,
        format!("terminal session {id} has ended"),
    )
}
