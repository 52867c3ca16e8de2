//! Background processes: started through the API, owned by sandboxd, outliving the request
//! that started them and every tunnel drop.
//!
//! Each process has a folder under the sandbox's process directory (in the container's own
//! filesystem, never the home): its record (`process.json`) and its output ([`log`]). A
//! sandboxd that starts finds the folders of the one before it; processes that were running
//! then are `lost`, and their output stays readable. The tree of each process is held by a
//! [`shim`], so a kill or a timeout leaves nothing of it alive.

pub mod log;
pub mod shim;
pub mod spawn;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agenthold_proto::process::{shown_command, tag_problem, ProcessStart, MAX_OUTPUT, MIN_OUTPUT};
use agenthold_proto::{
    is_session_id, ChannelError, ErrorCode, ProcessInfo, ProcessState, DATA_CHUNK,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::ChildStdin;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use self::log::{OutputLog, Stream};
use self::shim::Ended;
use self::spawn::{Control, Launched, Start};
use crate::channels::exec::prepare;
use crate::sandbox::Sandbox;
use crate::terminal::{new_id, session::now_ms};

/// How long output may keep coming after the tree is gone (nothing should hold the pipes
/// then; this bounds a surprise).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long a removal waits for a running process's tree to be killed and reaped.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How often a stdin write the process does not take checks whether its caller went away.
const STDIN_CHECK: Duration = Duration::from_millis(500);
const RECORD: &str = "process.json";

/// What a process's folder records about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    info: ProcessInfo,
    output_budget: u64,
}

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

impl Process {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The process as it now is.
    pub fn info(&self) -> ProcessInfo {
        let st = self.lock();
        let mut info = st.info.clone();
        info.output_bytes = st.log.end();
        info.output_start = st.log.start();
        info
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

    fn persist(&self) {
        let record = {
            let st = self.lock();
            let mut info = st.info.clone();
            info.output_bytes = st.log.end();
            info.output_start = st.log.start();
            Record {
                info,
                output_budget: st.budget,
            }
        };
        if let Err(e) = write_record(&self.dir, &record) {
            tracing::warn!(process = %self.id, error = %e, "cannot write the process's record");
        }
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

    /// Writes `data` to the process's stdin, then closes it when `eof`. One write at a time: a
    /// second is refused at once rather than queued behind one the process does not read.
    /// `gone` says the caller went away; a write the process does not take is given up then,
    /// or when the process ends.
    pub async fn write_stdin<R: AsyncRead + Unpin>(
        &self,
        data: &mut R,
        eof: bool,
        gone: impl Fn() -> bool,
    ) -> Result<u64, ChannelError> {
        use tokio::io::AsyncWriteExt;
        let ended = || ChannelError::new(ErrorCode::Invalid, "the process has ended");
        let Ok(mut stdin) = self.stdin.try_lock() else {
            return Err(ChannelError::new(
                ErrorCode::Busy,
                "another write to this process's stdin is under way (the process may not be \
                 reading it); try again once it is done",
            ));
        };
        let Some(pipe) = stdin.as_mut() else {
            let why = if self.lock().info.state.is_running() {
                "the process's stdin is not open: start it with \"stdin\": true (and it was not \
                 closed with eof)"
            } else {
                "the process has ended"
            };
            return Err(ChannelError::new(ErrorCode::Invalid, why));
        };
        let mut buf = vec![0u8; DATA_CHUNK];
        let mut written = 0u64;
        loop {
            let n = tokio::select! {
                r = data.read(&mut buf) => r.map_err(|e| ChannelError::from_io(&e, "reading the input"))?,
                _ = self.ended.cancelled() => {
                    *stdin = None;
                    return Err(ended());
                }
            };
            if n == 0 {
                break;
            }
            let write = pipe.write_all(&buf[..n]);
            tokio::pin!(write);
            let mut check = tokio::time::interval(STDIN_CHECK);
            let outcome = loop {
                tokio::select! {
                    r = &mut write => break r,
                    _ = self.ended.cancelled() => {
                        *stdin = None;
                        return Err(ended());
                    }
                    _ = check.tick() => if gone() {
                        return Err(ChannelError::new(ErrorCode::Invalid, "the caller went away"));
                    }
                }
            };
            if let Err(e) = outcome {
                *stdin = None;
                self.lock().info.stdin_open = false;
                return Err(ChannelError::new(
                    ErrorCode::Invalid,
                    format!("the process no longer reads its stdin ({e})"),
                ));
            }
            written += n as u64;
        }
        if eof {
            *stdin = None;
            self.lock().info.stdin_open = false;
            self.persist();
        }
        Ok(written)
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

fn write_record(dir: &Path, record: &Record) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!("{RECORD}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&json)?;
    std::fs::rename(&tmp, dir.join(RECORD))
}

/// The sandbox's processes by id.
#[derive(Clone)]
pub struct Processes {
    inner: Arc<Inner>,
}

struct Inner {
    dir: Option<PathBuf>,
    map: Mutex<HashMap<String, Arc<Process>>>,
    /// Starts past their check and not yet in `map`: they count against the limit, and their
    /// tags are taken. Changed only with `map` locked.
    starting: Mutex<Vec<Option<String>>>,
    /// Every start and end, for the `process.watch` channel.
    events: broadcast::Sender<ProcessInfo>,
    /// Told when a process started with `keep_awake` starts or ends.
    keep_awake_changed: tokio::sync::Notify,
}

impl Processes {
    /// The processes a previous sandboxd left in `dir` (those it had running are `lost`).
    /// Without a directory this sandbox runs no processes.
    pub fn load(dir: Option<PathBuf>) -> Processes {
        let mut map = HashMap::new();
        if let Some(dir) = &dir {
            if let Err(e) = log::private_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot make the process directory");
            }
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match load_one(&path) {
                    Some(p) => {
                        map.insert(p.id.clone(), Arc::new(p));
                    }
                    None => {
                        let _ = std::fs::remove_dir_all(&path);
                    }
                }
            }
        }
        Processes {
            inner: Arc::new(Inner {
                dir,
                map: Mutex::new(map),
                starting: Default::default(),
                events: broadcast::channel(256).0,
                keep_awake_changed: tokio::sync::Notify::new(),
            }),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Process>>> {
        self.inner.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A process by id, or by tag: the running one with that tag, else the one started last.
    pub fn resolve(&self, name: &str) -> Result<Arc<Process>, ChannelError> {
        let map = self.map();
        if is_session_id(name) {
            if let Some(p) = map.get(name) {
                return Ok(p.clone());
            }
        }
        let mut best: Option<(bool, u64, &Arc<Process>)> = None;
        for p in map.values() {
            let info = p.lock().info.clone();
            if info.tag.as_deref() != Some(name) {
                continue;
            }
            let key = (info.state.is_running(), info.started_at_ms);
            if best.as_ref().is_none_or(|(r, t, _)| key > (*r, *t)) {
                best = Some((key.0, key.1, p));
            }
        }
        best.map(|(_, _, p)| p.clone()).ok_or_else(|| {
            ChannelError::new(
                ErrorCode::NotFound,
                format!(
                    "no process {:?} (by id or tag)",
                    name.chars().take(80).collect::<String>()
                ),
            )
        })
    }

    /// Every process, oldest first.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let all: Vec<Arc<Process>> = self.map().values().cloned().collect();
        let mut out: Vec<ProcessInfo> = all.iter().map(|p| p.info()).collect();
        out.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        out
    }

    /// True while a process started with `keep_awake` runs.
    pub fn keep_awake(&self) -> bool {
        self.map().values().any(|p| {
            let st = p.lock();
            st.info.keep_awake && st.info.state.is_running()
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ProcessInfo> {
        self.inner.events.subscribe()
    }

    /// Resolves when a process started with `keep_awake` has started or ended since the last
    /// call (the activity report then goes out at once).
    pub async fn keep_awake_changed(&self) {
        self.inner.keep_awake_changed.notified().await
    }

    fn publish(&self, info: ProcessInfo) {
        if info.keep_awake {
            self.inner.keep_awake_changed.notify_one();
        }
        let _ = self.inner.events.send(info);
    }

    /// Forgets a process: kills its tree if it runs, waits for that, deletes its folder.
    pub async fn remove(&self, name: &str) -> Result<(), ChannelError> {
        let p = self.resolve(name)?;
        if !p.is_done() {
            p.kill.cancel();
            p.wait_done(KILL_WAIT).await;
            if !p.is_done() {
                // Kept, so that it still counts and can be asked about until it has ended.
                return Err(ChannelError::new(
                    ErrorCode::Busy,
                    format!(
                        "process {} did not end within {KILL_WAIT:?} of being killed; try again",
                        p.id
                    ),
                ));
            }
        }
        self.map().remove(&p.id);
        p.lock().log.remove_all();
        let _ = std::fs::remove_dir_all(&p.dir);
        Ok(())
    }

    /// Forgets finished processes: those that ended over `retention_ms` ago, then the ones that
    /// ended longest ago while more than `keep` are left.
    pub fn evict_finished(&self, keep: usize, retention_ms: Option<u64>) {
        let now = now_ms();
        let gone: Vec<Arc<Process>> = {
            let mut map = self.map();
            let mut finished: Vec<(u64, String)> = map
                .values()
                .filter(|p| p.is_done())
                .map(|p| (p.lock().info.ended_at_ms.unwrap_or(0), p.id.clone()))
                .collect();
            finished.sort();
            let expired = finished
                .iter()
                .take_while(|(ended, _)| {
                    retention_ms.is_some_and(|r| ended.saturating_add(r) <= now)
                })
                .count();
            let n = expired.max(finished.len().saturating_sub(keep));
            finished
                .into_iter()
                .take(n)
                .filter_map(|(_, id)| map.remove(&id))
                .collect()
        };
        for p in gone {
            p.lock().log.remove_all();
            let _ = std::fs::remove_dir_all(&p.dir);
        }
    }
}

fn load_one(dir: &Path) -> Option<Process> {
    let raw = std::fs::read(dir.join(RECORD)).ok()?;
    let Record {
        mut info,
        output_budget,
    } = serde_json::from_slice(&raw).ok()?;
    let name_ok = dir.file_name().and_then(|n| n.to_str()) == Some(info.id.as_str());
    if !name_ok || !is_session_id(&info.id) {
        return None;
    }
    let log = OutputLog::open_finished(dir, output_budget);
    if info.state.is_running() {
        // It ended with the sandboxd before us; when is the last sign it gave.
        info.state = ProcessState::Lost;
        info.ended_at_ms = Some(last_written_ms(dir).unwrap_or_else(now_ms));
    }
    info.stdin_open = false;
    info.output_bytes = log.end();
    info.output_start = log.start();
    let (changed, _) = watch::channel(0);
    let p = Process {
        id: info.id.clone(),
        dir: dir.to_path_buf(),
        state: Mutex::new(State {
            info,
            log,
            budget: output_budget,
            done: true,
            write_failed: false,
        }),
        changed,
        stdin: tokio::sync::Mutex::new(None),
        kill: CancellationToken::new(),
        ended: cancelled(),
        control: None,
    };
    p.persist();
    Some(p)
}

fn last_written_ms(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
}

fn invalid(m: impl Into<String>) -> ChannelError {
    ChannelError::new(ErrorCode::Invalid, m)
}

fn cancelled() -> CancellationToken {
    let t = CancellationToken::new();
    t.cancel();
    t
}

/// A start under way: counted against the limit, its tag taken, until it is in the map or has
/// failed.
struct StartSlot<'a> {
    procs: &'a Processes,
    tag: Option<String>,
}

impl<'a> StartSlot<'a> {
    /// Taken while the map is locked, so the check and the count are one step.
    fn take(procs: &'a Processes, tag: Option<String>) -> StartSlot<'a> {
        lock(&procs.inner.starting).push(tag.clone());
        StartSlot { procs, tag }
    }
}

impl Drop for StartSlot<'_> {
    fn drop(&mut self) {
        let mut starting = lock(&self.procs.inner.starting);
        if let Some(i) = starting.iter().position(|t| *t == self.tag) {
            starting.swap_remove(i);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a process for `process.start`.
pub async fn start(sb: &Sandbox, req: ProcessStart) -> Result<ProcessInfo, ChannelError> {
    let procs = sb.processes();
    let Some(root) = procs.inner.dir.clone() else {
        return Err(invalid("this sandbox keeps no background processes"));
    };
    if let Some(tag) = &req.tag {
        if let Some(why) = tag_problem(tag) {
            return Err(invalid(why));
        }
    }
    let prepared = prepare(sb, &req.run)?;
    let slot = {
        let map = procs.map();
        let running: Vec<ProcessInfo> = map
            .values()
            .map(|p| p.lock().info.clone())
            .filter(|i| i.state.is_running())
            .collect();
        let starting = lock(&procs.inner.starting).clone();
        if running.len() + starting.len() >= req.max_running as usize {
            return Err(ChannelError::new(
                ErrorCode::Busy,
                format!(
                    "this sandbox already runs {} background processes, the most it may \
                     (sandbox.max_processes); end one first",
                    running.len() + starting.len()
                ),
            ));
        }
        if let Some(tag) = &req.tag {
            let taken = running
                .iter()
                .find(|i| i.tag.as_deref() == Some(tag))
                .map(|i| i.id.clone())
                .or_else(|| {
                    starting
                        .iter()
                        .any(|t| t.as_deref() == Some(tag))
                        .then(|| "being started".to_string())
                });
            if let Some(other) = taken {
                return Err(ChannelError::new(
                    ErrorCode::Exists,
                    format!(
                        "process {other} with tag {tag:?} is still running; end it or pick another tag"
                    ),
                ));
            }
        }
        StartSlot::take(procs, req.tag.clone())
    };
    let id = new_id();
    let dir = root.join(&id);
    let budget = req.output_bytes.clamp(MIN_OUTPUT, MAX_OUTPUT);
    let log = OutputLog::create(&dir, budget)
        .map_err(|e| ChannelError::from_io(&e, "making the process's folder"))?;
    let launched = spawn::launch(sb, &req.run.command, &prepared, req.stdin).await;
    let launched = match launched {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ChannelError::from_io(&e, "starting the process"));
        }
    };
    let mut info = ProcessInfo {
        id: id.clone(),
        tag: req.tag.clone(),
        command: shown_command(&req.run.command),
        pid: None,
        state: ProcessState::Running,
        exit_code: None,
        signal: None,
        timed_out: false,
        started_at_ms: now_ms(),
        ended_at_ms: None,
        output_bytes: 0,
        output_start: 0,
        keep_awake: req.keep_awake,
        stdin_open: false,
    };
    let (changed, _) = watch::channel(0);
    let (mut launched, failed) = match launched {
        Start::Running(l) => {
            info.pid = Some(l.pid);
            info.stdin_open = req.stdin;
            (Some(l), None)
        }
        Start::CannotStart { code, message } => {
            info.state = ProcessState::Exited;
            info.exit_code = Some(code);
            info.ended_at_ms = Some(info.started_at_ms);
            (None, Some(message))
        }
    };
    let process = Arc::new(Process {
        id: id.clone(),
        dir,
        state: Mutex::new(State {
            info,
            log,
            budget,
            done: launched.is_none(),
            write_failed: false,
        }),
        changed,
        stdin: tokio::sync::Mutex::new(launched.as_mut().and_then(|l| l.stdin.take())),
        kill: CancellationToken::new(),
        ended: if launched.is_some() {
            CancellationToken::new()
        } else {
            cancelled()
        },
        control: launched.as_ref().map(|l| l.control()),
    });
    if let Some(message) = failed {
        process.append(Stream::Stderr, format!("sandboxd: {message}\n").as_bytes());
        process.lock().log.seal();
    }
    {
        let mut map = procs.map();
        map.insert(id, process.clone());
        // Counted in the map now, not twice.
        drop(slot);
    }
    procs.evict_finished(req.max_running as usize, req.retention_ms);
    process.persist();
    // Announced before its supervisor runs, so a start is always told before its end.
    let info = process.info();
    procs.publish(info.clone());
    if let Some(launched) = launched {
        let timeout = req.run.timeout_ms.map(Duration::from_millis);
        sb.spawn(supervise(sb.clone(), process.clone(), *launched, timeout));
    }
    Ok(info)
}

/// Runs alongside a process: keeps its output, kills its tree when asked or when its time is
/// up, and records its end.
async fn supervise(
    sb: Sandbox,
    p: Arc<Process>,
    mut launched: Launched,
    timeout: Option<Duration>,
) {
    let groups: Vec<i32> = [Some(launched.pid), launched.own_pid()]
        .into_iter()
        .flatten()
        .collect();
    for g in &groups {
        sb.procs().track_group(*g);
    }
    let out = launched
        .stdout
        .take()
        .map(|o| tokio::spawn(pump(p.clone(), o, Stream::Stdout)));
    let err = launched
        .stderr
        .take()
        .map(|o| tokio::spawn(pump(p.clone(), o, Stream::Stderr)));
    let control = launched.control();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let (mut timed_out, mut lost, mut killing) = (false, false, false);
    let wait = launched.wait();
    tokio::pin!(wait);
    let ended = loop {
        tokio::select! {
            e = &mut wait => break e,
            _ = &mut deadline, if !killing => {
                timed_out = true;
                killing = true;
                control.kill_tree();
            }
            _ = p.kill.cancelled(), if !killing => {
                killing = true;
                control.kill_tree();
            }
            _ = sb.cancel_token().cancelled(), if !killing => {
                lost = true;
                killing = true;
                control.kill_tree();
            }
        }
    };
    for pump in [out, err].into_iter().flatten() {
        let abort = pump.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, pump).await.is_err() {
            abort.abort();
        }
    }
    for g in &groups {
        sb.procs().forget(*g);
    }
    // A stdin write waiting on the tree gives up; the pipe goes with it (or with this).
    p.ended.cancel();
    if let Ok(mut stdin) = p.stdin.try_lock() {
        *stdin = None;
    }
    let info = {
        let mut st = p.lock();
        st.log.seal();
        let info = &mut st.info;
        info.ended_at_ms = Some(now_ms());
        info.timed_out = timed_out;
        info.stdin_open = false;
        match (lost, ended) {
            (false, Some(Ended::Exited(code))) => {
                info.state = ProcessState::Exited;
                info.exit_code = Some(code);
            }
            (false, Some(Ended::Signaled(sig))) => {
                info.state = ProcessState::Killed;
                info.signal = Some(agenthold_proto::process::signal_name(sig));
            }
            // The sandbox is stopping, or the shim was killed from inside the sandbox.
            _ => info.state = ProcessState::Lost,
        }
        st.done = true;
        st.info.clone()
    };
    p.persist();
    p.bump();
    tracing::debug!(process = %p.id, state = ?info.state, exit = ?info.exit_code, "background process ended");
    sb.processes().publish(p.info());
}

async fn pump<R: AsyncRead + Unpin>(p: Arc<Process>, mut pipe: R, stream: Stream) {
    let mut buf = vec![0u8; DATA_CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => p.append(stream, &buf[..n]),
        }
    }
}
