//! Starting a background process (`process.start`: the limit and tag checks, its folder, the
//! launch) and supervising it until it ends: its output into the log, a kill or timeout, and
//! its end recorded.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agenthold_proto::process::{shown_command, tag_problem, ProcessStart, MAX_OUTPUT, MIN_OUTPUT};
use agenthold_proto::{ChannelError, ErrorCode, ProcessInfo, ProcessState, DATA_CHUNK};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::log::{OutputLog, Stream};
use super::shim::Ended;
use super::spawn::{self, Launched, Start};
use super::{cancelled, Process, Processes, State};
use crate::sandbox::Sandbox;
use crate::spawn::prepare;
use crate::terminal::{new_id, session::now_ms};

/// How long output may keep coming after the tree is gone (nothing should hold the pipes
/// then; this bounds a surprise).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

fn invalid(m: impl Into<String>) -> ChannelError {
    ChannelError::new(ErrorCode::Invalid, m)
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
        run_as: req.run.run_as,
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
