//! The `exec` channel: one command without a terminal, in its own process group.
//!
//! The group is what gets killed at the timeout, when the caller goes away, when the command
//! itself ends (leftover background children) and at shutdown, so nothing it started outlives it
//! unless it leaves the group on purpose (`setsid`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ExecExit, ExecRequest, Frame, FrameCodec, Reply, DATA_CHUNK};
use bytes::Bytes;
use futures::StreamExt;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::{frame_writer, refuse, reply, FrameTx};
use crate::duplex::{self, ReadHalf, ResetProbe};
use crate::sandbox::Sandbox;
use crate::spawn::{pre_exec, prepare, Prepared};

/// How long output may keep flowing after the group is gone, from processes that left it but
/// still hold the pipes.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
const SIGKILL_EXIT: i32 = 128 + 9;

fn command(req: &ExecRequest, p: &Prepared) -> Command {
    let mut cmd = Command::new(&req.command[0]);
    cmd.args(&req.command[1..])
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&p.cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let switch = p.switch.clone();
    // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            pre_exec::default_signals()?;
            if let Some(s) = &switch {
                s.apply()?;
            }
            Ok(())
        });
    }
    cmd
}

pub async fn exec(sb: Sandbox, mut s: MuxStream, req: ExecRequest) {
    let prepared = match prepare(&sb, &req) {
        Ok(p) => p,
        Err(e) => return refuse(s, e).await,
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let started = Instant::now();
    let (r, w, probe) = duplex::split(s);
    let (tx, writer) = frame_writer(w);
    match command(&req, &prepared).spawn() {
        Ok(child) => run(&sb, &req, child, r, probe, tx, started).await,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let msg = format!("sandboxd: cannot run {:?}: {e}\n", req.command[0]);
            let _ = tx.send(Frame::Stderr(Bytes::from(msg))).await;
            let _ = tx
                .send(Frame::ExecExit(ExecExit {
                    exit_code: code,
                    timed_out: false,
                    duration_ms: elapsed_ms(started),
                    truncated: false,
                }))
                .await;
            drop(tx);
        }
    }
    if let Ok(Err(e)) = writer.await {
        tracing::debug!(error = %e, "exec output stream ended early");
    }
}

enum Ending {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut,
    PeerGone,
    Shutdown,
}

async fn run(
    sb: &Sandbox,
    req: &ExecRequest,
    mut child: Child,
    r: ReadHalf,
    probe: ResetProbe,
    tx: FrameTx,
    started: Instant,
) {
    let Some(pid) = child.id().map(|p| p as i32) else {
        return;
    };
    sb.procs().track_group(pid);
    let cap = req.output_cap.unwrap_or(u64::MAX);
    let out = child
        .stdout
        .take()
        .map(|o| tokio::spawn(pump(o, cap, tx.clone(), Frame::Stdout)));
    let err = child
        .stderr
        .take()
        .map(|o| tokio::spawn(pump(o, cap, tx.clone(), Frame::Stderr)));
    let peer_gone = CancellationToken::new();
    let input = tokio::spawn(feed_stdin(r, probe, child.stdin.take(), peer_gone.clone()));

    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let timeout = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    let ending = tokio::select! {
        status = child.wait() => Ending::Exited(status),
        _ = timeout => Ending::TimedOut,
        _ = peer_gone.cancelled() => Ending::PeerGone,
        _ = tx.closed() => Ending::PeerGone,
        _ = sb.cancel_token().cancelled() => Ending::Shutdown,
    };
    let status = match ending {
        Ending::Exited(status) => status,
        other => {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            if matches!(other, Ending::PeerGone) {
                tracing::info!(pid, "exec caller went away; killed the command");
            }
            let status = child.wait().await;
            if matches!(other, Ending::TimedOut) {
                finish(sb, pid, out, err, input, tx, started, SIGKILL_EXIT, true).await;
                return;
            }
            status
        }
    };
    let code = match status {
        Ok(st) => exit_code(st),
        Err(e) => {
            tracing::warn!(error = %e, "cannot wait for the command");
            -1
        }
    };
    finish(sb, pid, out, err, input, tx, started, code, false).await;
}

type Pump = Option<tokio::task::JoinHandle<bool>>;

#[allow(clippy::too_many_arguments)]
async fn finish(
    sb: &Sandbox,
    pid: i32,
    out: Pump,
    err: Pump,
    input: tokio::task::JoinHandle<()>,
    tx: FrameTx,
    started: Instant,
    exit_code: i32,
    timed_out: bool,
) {
    // Whatever the command left running in its group goes with it.
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    sb.procs().forget(pid);
    input.abort();
    let mut truncated = false;
    for pump in [out, err].into_iter().flatten() {
        let abort = pump.abort_handle();
        match tokio::time::timeout(DRAIN_GRACE, pump).await {
            Ok(Ok(t)) => truncated |= t,
            Ok(Err(_)) => {}
            Err(_) => abort.abort(),
        }
    }
    let _ = tx
        .send(Frame::ExecExit(ExecExit {
            exit_code,
            timed_out,
            duration_ms: elapsed_ms(started),
            truncated,
        }))
        .await;
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn elapsed_ms(t: Instant) -> u64 {
    t.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
}

/// Forwards one output pipe, up to `cap` bytes; reads and drops the rest so the command never
/// blocks on a full pipe. Returns whether anything was dropped.
async fn pump<R: AsyncRead + Unpin>(
    mut pipe: R,
    cap: u64,
    tx: FrameTx,
    wrap: fn(Bytes) -> Frame,
) -> bool {
    let mut buf = vec![0u8; DATA_CHUNK];
    let mut sent = 0u64;
    let mut truncated = false;
    let mut peer_open = true;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return truncated,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(sent).min(n as u64) as usize;
        if room < n {
            truncated = true;
        }
        if room > 0 && peer_open {
            sent += room as u64;
            peer_open = tx
                .send(wrap(Bytes::copy_from_slice(&buf[..room])))
                .await
                .is_ok();
        }
    }
}

/// Feeds stdin frames to the command. Marks `peer_gone` when the stream is reset, or ends
/// before `StdinEof` without a clean close.
async fn feed_stdin(
    r: ReadHalf,
    probe: ResetProbe,
    mut stdin: Option<ChildStdin>,
    peer_gone: CancellationToken,
) {
    let mut frames = FramedRead::new(r, FrameCodec::default());
    loop {
        match frames.next().await {
            Some(Ok(Frame::Data(b))) => {
                if let Some(w) = stdin.as_mut() {
                    // A command that stopped reading its stdin is not an error of ours.
                    if w.write_all(&b).await.is_err() {
                        stdin = None;
                    }
                }
            }
            Some(Ok(Frame::StdinEof)) => stdin = None,
            Some(Ok(other)) => tracing::debug!(?other, "unexpected frame on exec; ignored"),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "exec stream failed");
                peer_gone.cancel();
                return;
            }
            None => {
                if probe.was_reset() {
                    peer_gone.cancel();
                }
                // A clean half-close only means no more stdin.
                return;
            }
        }
    }
}
