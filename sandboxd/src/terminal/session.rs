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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agenthold_proto::{ChannelError, ErrorCode, TerminalInfo, TerminalOpened, DATA_CHUNK};
use tokio::process::Child;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::pty::{self, Master};
use super::ring::Ring;
use super::screen::Screen;
use super::MAX_VIEWERS;
use crate::sandbox::Sandbox;

/// How long the reader waits for a viewer that is a whole buffer behind before leaving it
/// behind (a frozen browser tab must not freeze the shell for everyone).
pub const STALL: Duration = Duration::from_secs(5);
/// How long output may keep draining after the shell exited, when a background job still holds
/// the terminal open.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

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
        (self.ring.capacity() - chunk_size(self.ring.capacity())) as u64
    }
}

/// How much the reader takes from the pty at once: small against the ring, so flow control can
/// hold a viewer's bytes in it.
fn chunk_size(capacity: usize) -> usize {
    (capacity / 4).clamp(1, DATA_CHUNK)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a viewer sends next.
pub enum Step {
    Data(Vec<u8>),
    /// A redraw of the screen as of output offset `.0`.
    Redraw(u64, Vec<u8>),
    Resize(u16, u16),
    Exit(i32),
    /// Nothing yet.
    Wait,
}

/// One viewer's place in a session; detaches when dropped.
pub struct Viewer {
    pub session: Arc<Session>,
    pub id: u64,
    size_gen: u64,
    /// Sent before anything else: `Some` when the viewer starts with a redraw.
    pub first_redraw: Option<(u64, Vec<u8>)>,
    pub opened: TerminalOpened,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.session.detach(self.id);
    }
}

impl Viewer {
    /// The next thing to send, moving this viewer's offset past it.
    pub fn next_step(&mut self) -> Step {
        let s = &self.session;
        let mut st = s.lock();
        if st.size_gen != self.size_gen {
            self.size_gen = st.size_gen;
            return Step::Resize(st.cols, st.rows);
        }
        let (start, end, limit) = (st.ring.start(), st.ring.end(), st.lag_limit());
        let Some(cur) = st.viewers.get(&self.id) else {
            return Step::Wait;
        };
        let pos = cur.pos;
        if pos < start {
            let redraw = st.screen.redraw();
            if let Some(c) = st.viewers.get_mut(&self.id) {
                c.pos = end;
                c.stuck = false;
            }
            drop(st);
            s.progress.send_modify(|v| *v += 1);
            return Step::Redraw(end, redraw);
        }
        if pos < end {
            let data = st.ring.read(pos, DATA_CHUNK).unwrap_or_default();
            if let Some(c) = st.viewers.get_mut(&self.id) {
                c.pos = pos + data.len() as u64;
                if end - c.pos <= limit {
                    c.stuck = false;
                }
            }
            drop(st);
            s.progress.send_modify(|v| *v += 1);
            return Step::Data(data);
        }
        if let Some(code) = st.exit {
            st.exit_seen = true;
            drop(st);
            s.viewers_changed.notify_one();
            return Step::Exit(code);
        }
        Step::Wait
    }

    /// A receiver that wakes when [`next_step`](Self::next_step) may have something new.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.session.changed.subscribe()
    }
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
        sb.spawn(own(sb.clone(), session, child, pid));
        Ok(viewer)
    }

    /// Adds a viewer. `offset` is what it has seen: within the ring it gets exactly the bytes
    /// after it; older, or absent, a redraw first. `size` resizes the session when it differs.
    pub fn attach(
        self: &Arc<Self>,
        offset: Option<u64>,
        size: Option<(u16, u16)>,
        created: bool,
    ) -> Result<Viewer, ChannelError> {
        let mut st = self.lock();
        if st.closed {
            return Err(ended(&self.id));
        }
        if st.viewers.len() >= MAX_VIEWERS {
            return Err(ChannelError::new(
                ErrorCode::Busy,
                format!(
                    "terminal session {} already has {MAX_VIEWERS} viewers, the most it takes",
                    self.id
                ),
            ));
        }
        let end = st.ring.end();
        if let Some(o) = offset {
            if o > end {
                return Err(ChannelError::new(
                    ErrorCode::Invalid,
                    format!("offset {o} is beyond the session's output, which ends at {end}"),
                ));
            }
        }
        let resized = match size {
            Some(size) => self.resize_locked(&mut st, size.0, size.1),
            None => false,
        };
        let (pos, first_redraw) = match offset {
            Some(o) if o >= st.ring.start() => (o, None),
            // Nothing was ever written: an empty screen needs no redraw.
            _ if end == 0 => (0, None),
            _ => (end, Some((end, st.screen.redraw()))),
        };
        let id = st.next_viewer;
        st.next_viewer += 1;
        st.viewers.insert(id, Cursor { pos, stuck: false });
        let opened = TerminalOpened {
            session: self.id.clone(),
            offset: pos,
            cols: st.cols,
            rows: st.rows,
            created,
        };
        let size_gen = st.size_gen;
        drop(st);
        if resized {
            self.changed.send_modify(|v| *v += 1);
        }
        self.viewers_changed.notify_one();
        Ok(Viewer {
            session: self.clone(),
            id,
            size_gen,
            first_redraw,
            opened,
        })
    }

    fn detach(&self, viewer: u64) {
        let mut st = self.lock();
        st.viewers.remove(&viewer);
        if st.viewers.is_empty() {
            st.idle_since = Instant::now();
        }
        drop(st);
        self.viewers_changed.notify_one();
        // The reader may have been waiting for this viewer.
        self.progress.send_modify(|v| *v += 1);
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

    /// When the session ends for want of viewers, if it has none now.
    fn detach_deadline(&self) -> Option<Instant> {
        let st = self.lock();
        st.viewers
            .is_empty()
            .then(|| st.idle_since + self.detach_after)
    }

    fn output(&self, data: &[u8]) {
        let mut st = self.lock();
        st.ring.push(data);
        st.screen.process(data);
        drop(st);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Returns once no viewer that keeps up is a whole buffer behind; a viewer that has not
    /// moved for [`STALL`] stops counting.
    async fn wait_for_viewers(&self, progress: &mut watch::Receiver<u64>) {
        let since = Instant::now();
        loop {
            progress.borrow_and_update();
            let behind: Vec<u64> = {
                let st = self.lock();
                let (end, limit) = (st.ring.end(), st.lag_limit());
                st.viewers
                    .iter()
                    .filter(|(_, c)| !c.stuck && end.saturating_sub(c.pos) > limit)
                    .map(|(id, _)| *id)
                    .collect()
            };
            if behind.is_empty() {
                return;
            }
            if tokio::time::timeout_at(since + STALL, progress.changed())
                .await
                .is_err()
            {
                let mut st = self.lock();
                for id in behind {
                    if let Some(c) = st.viewers.get_mut(&id) {
                        c.stuck = true;
                    }
                }
                tracing::debug!(session = %self.id, "a viewer fell behind; it will get a redraw");
            }
        }
    }
}

fn ended(id: &str) -> ChannelError {
    ChannelError::new(
        ErrorCode::NotFound,
        format!("terminal session {id} has ended"),
    )
}

/// Moves output from the pty into the session until the terminal closes.
async fn read_output(s: Arc<Session>) {
    let chunk = chunk_size(s.lock().ring.capacity());
    let mut buf = vec![0u8; chunk];
    let mut progress = s.progress.subscribe();
    loop {
        s.wait_for_viewers(&mut progress).await;
        match pty::read(&s.master, &mut buf).await {
            Ok(0) => return,
            Ok(n) => s.output(&buf[..n]),
            Err(e) => {
                tracing::debug!(error = %e, "terminal read failed");
                return;
            }
        }
    }
}

/// The owner task: see the module comment.
async fn own(sb: Sandbox, s: Arc<Session>, mut child: Child, pid: i32) {
    let mut reader = tokio::spawn(read_output(s.clone()));
    let mut removed = false;
    let status = loop {
        let deadline = s.detach_deadline();
        tokio::select! {
            status = child.wait() => break status,
            _ = s.kill.cancelled() => {
                removed = true;
                break pty::hang_up(pid, &mut child).await;
            }
            _ = sb.cancel_token().cancelled() => {
                removed = true;
                break pty::hang_up(pid, &mut child).await;
            }
            _ = sleep_until(deadline) => {
                if s.detach_deadline().is_some_and(|d| d <= Instant::now()) {
                    tracing::info!(session = %s.id, "nobody watched the terminal session for {:?}; ending it", s.detach_after);
                    removed = true;
                    break pty::hang_up(pid, &mut child).await;
                }
            }
            _ = s.viewers_changed.notified() => {}
        }
    };
    if removed {
        sb.terminals().remove(&s.id);
        s.lock().closed = true;
    }
    if tokio::time::timeout(DRAIN_GRACE, &mut reader)
        .await
        .is_err()
    {
        reader.abort();
    }
    let code = pty::exit_code(status);
    tracing::info!(session = %s.id, code, "terminal session ended");
    s.lock().exit = Some(code);
    s.changed.send_modify(|v| *v += 1);
    // Keep an exited session attachable until someone has seen its last bytes and its exit, so
    // a viewer that was away when it ended still gets them.
    if !removed {
        loop {
            if s.lock().exit_seen {
                break;
            }
            let deadline = s.detach_deadline();
            tokio::select! {
                _ = s.kill.cancelled() => break,
                _ = sb.cancel_token().cancelled() => break,
                _ = sleep_until(deadline) => {
                    if s.detach_deadline().is_some_and(|d| d <= Instant::now()) {
                        break;
                    }
                }
                _ = s.viewers_changed.notified() => {}
            }
        }
    }
    sb.terminals().remove(&s.id);
    s.lock().closed = true;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxOptions;

    const DEADLINE: Duration = Duration::from_secs(30);

    fn sandbox(dir: &tempfile::TempDir) -> Sandbox {
        Sandbox::new(SandboxOptions::fake(dir.path().to_path_buf()))
    }

    fn config(command: &str, detach_after: Duration, buffer: usize) -> SessionConfig {
        SessionConfig {
            cols: 80,
            rows: 24,
            term: "xterm-256color".into(),
            command: Some(command.into()),
            env: Vec::new(),
            detach_after,
            buffer,
        }
    }

    /// Reads a viewer to its end: the output (replays and live bytes) and the exit code.
    /// `slow` makes it yield between reads, so the reader gets far ahead of it.
    async fn drain(v: &mut Viewer, slow: bool) -> (Vec<u8>, i32) {
        let mut out = Vec::new();
        let mut changed = v.subscribe();
        let run = async {
            loop {
                changed.borrow_and_update();
                match v.next_step() {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::Redraw(..) => panic!("a viewer that keeps up never needs a redraw"),
                    Step::Resize(..) => {}
                    Step::Exit(code) => return code,
                    Step::Wait => {
                        let _ = changed.changed().await;
                    }
                }
                if slow {
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                }
            }
        };
        let code = tokio::time::timeout(DEADLINE, run)
            .await
            .expect("the session did not end in time");
        (out, code)
    }

    /// Reads a viewer until its output holds `needle`.
    async fn read_until(v: &mut Viewer, needle: &str) {
        let mut out = Vec::new();
        let mut changed = v.subscribe();
        let run = async {
            while !String::from_utf8_lossy(&out).contains(needle) {
                changed.borrow_and_update();
                match v.next_step() {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::Wait => {
                        let _ = changed.changed().await;
                    }
                    Step::Redraw(..) | Step::Resize(..) => {}
                    Step::Exit(code) => panic!("the session ended ({code}) before {needle:?}"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, run)
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} within {DEADLINE:?}"));
    }

    async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "{what}: not true within {DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_slow_viewer_loses_nothing_through_a_small_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let sb = sandbox(&dir);
        // About 110 KB of output through a 4 KiB ring: flow control must hold the shell back.
        let mut v = Session::start(&sb, config("seq 1 20000", DEADLINE, 4096)).unwrap();
        let (out, code) = drain(&mut v, true).await;
        assert_eq!(code, 0);
        let text = String::from_utf8(out).unwrap().replace("\r\n", "\n");
        let want: String = (1..=20000).map(|i| format!("{i}\n")).collect();
        assert!(
            text == want,
            "got {} bytes, want {}",
            text.len(),
            want.len()
        );
        sb.shutdown().await;
    }

    #[tokio::test]
    async fn a_session_without_viewers_ends_after_its_detach_time() {
        let dir = tempfile::tempdir().unwrap();
        let sb = sandbox(&dir);
        // As if sandboxd ran under `nohup`: its shells must still take the hang-up. (For the
        // whole test process: every shell and command of these tests is started by sandboxd's
        // code, which gives them the default dispositions back.)
        // SAFETY: no handler is installed, a disposition is set to "ignore".
        unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGHUP,
                nix::sys::signal::SigHandler::SigIgn,
            )
        }
        .expect("ignore SIGHUP");
        let command = "echo ready; exec sleep 600";
        let mut v = Session::start(&sb, config(command, Duration::from_millis(200), 4096)).unwrap();
        let id = v.opened.session.clone();
        let session = v.session.clone();
        assert!(sb.terminals().get(&id).is_some());
        // The hang-up then finds `sleep` running, not a shell still setting up its own handlers.
        read_until(&mut v, "ready\r\n").await;
        drop(v);
        wait_until("the detached session ends", || {
            sb.terminals().get(&id).is_none()
        })
        .await;
        wait_until("its shell was ended", || session.info().exit_code.is_some()).await;
        // SIGHUP ended it: 128 + 1.
        assert_eq!(session.info().exit_code, Some(129));
        let again = session.attach(None, None, false);
        assert!(matches!(again, Err(e) if e.code == ErrorCode::NotFound));
        sb.shutdown().await;
    }

    #[tokio::test]
    async fn a_viewer_that_was_away_still_gets_the_last_bytes_and_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let sb = sandbox(&dir);
        let v = Session::start(&sb, config("printf last-words; exit 5", DEADLINE, 4096)).unwrap();
        let id = v.opened.session.clone();
        let session = v.session.clone();
        drop(v);
        wait_until("the shell exits", || session.info().exit_code.is_some()).await;
        // Still listed and attachable: nobody has seen the end yet.
        assert_eq!(sb.terminals().list().len(), 1);
        let mut late = session.attach(Some(0), None, false).unwrap();
        let (out, code) = drain(&mut late, false).await;
        assert_eq!(String::from_utf8_lossy(&out), "last-words");
        assert_eq!(code, 5);
        drop(late);
        wait_until("seen, the session goes", || {
            sb.terminals().get(&id).is_none()
        })
        .await;
        sb.shutdown().await;
    }

    #[tokio::test]
    async fn viewers_are_limited_and_offsets_checked() {
        let dir = tempfile::tempdir().unwrap();
        let sb = sandbox(&dir);
        let first = Session::start(&sb, config("printf hello; sleep 600", DEADLINE, 4096)).unwrap();
        let s = first.session.clone();
        wait_until("output arrives", || s.info().offset == 5).await;
        let future = s.attach(Some(6), None, false);
        assert!(matches!(future, Err(e) if e.code == ErrorCode::Invalid));
        let mut more = Vec::new();
        for _ in 1..MAX_VIEWERS {
            more.push(s.attach(Some(5), None, false).unwrap());
        }
        let full = s.attach(None, None, false);
        assert!(matches!(full, Err(e) if e.code == ErrorCode::Busy));
        drop(more);
        // A place freed is a place taken; without an offset, a redraw comes first.
        let v = s.attach(None, None, false).unwrap();
        let (at, redraw) = v.first_redraw.clone().unwrap();
        assert_eq!(at, 5);
        assert!(String::from_utf8_lossy(&redraw).contains("hello"));
        assert!(sb.terminals().kill(s.id()));
        wait_until("killed", || s.info().exit_code.is_some()).await;
        sb.shutdown().await;
    }
}
