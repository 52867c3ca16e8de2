//! The `process.*` channels: the wire side of [`crate::process`]. A process's output goes out
//! as `output.rs` sends it, on `process.output` and on `process.attach` (`attach.rs`), which
//! also takes the process's stdin.

mod attach;
mod output;

pub use attach::attach;
pub use output::output;

use std::time::Duration;

use agenthold_proto::mux::{MuxHandle, MuxStream};
use agenthold_proto::process::{
    parse_signal, ProcessList, ProcessSignal, ProcessStart, ProcessStdin, ProcessWait, ProcessWatch,
};
use agenthold_proto::{self as proto, ChannelError, ErrorCode, Frame, FrameCodec, Reply, Size};
use futures::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;

use super::{refuse, reply};
use crate::duplex;
use crate::sandbox::Sandbox;

/// The longest wait a `process.wait` may ask for.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

async fn answer<T: serde::Serialize>(mut s: MuxStream, result: Result<T, ChannelError>) {
    match result {
        Ok(v) => {
            if reply(&mut s, &Reply::ok_with(&v)).await {
                let _ = s.shutdown().await;
            }
        }
        Err(e) => refuse(s, e).await,
    }
}

pub async fn start(sb: Sandbox, s: MuxStream, req: ProcessStart) {
    let r = crate::process::start(&sb, req).await;
    answer(s, r).await
}

pub async fn get(sb: Sandbox, s: MuxStream, name: String) {
    answer(s, sb.processes().resolve(&name).map(|p| p.info())).await
}

pub async fn list(sb: Sandbox, mut s: MuxStream, req: ProcessList) {
    if req.retention_ms.is_some() {
        sb.processes().evict_finished(usize::MAX, req.retention_ms);
    }
    let all = sb.processes().list();
    let count = Size {
        size: all.len() as u64,
    };
    if !reply(&mut s, &Reply::ok_with(&count)).await {
        return;
    }
    let mut out = FramedWrite::new(s, FrameCodec::default());
    for info in all {
        if out.send(Frame::Process(Box::new(info))).await.is_err() {
            return;
        }
    }
    let _ = out.get_mut().shutdown().await;
}

pub async fn signal(sb: Sandbox, s: MuxStream, req: ProcessSignal) {
    let r = parse_signal(&req.signal)
        .ok_or_else(|| {
            ChannelError::new(
                ErrorCode::Invalid,
                format!(
                    "{:?} is not a signal: give a name such as TERM, INT, KILL or HUP, or a number",
                    req.signal.chars().take(32).collect::<String>()
                ),
            )
        })
        .and_then(|sig| sb.processes().resolve(&req.process)?.signal(sig))
        .map(|()| proto::Empty {});
    answer(s, r).await
}

pub async fn wait(sb: Sandbox, s: MuxStream, req: ProcessWait) {
    let p = match sb.processes().resolve(&req.process) {
        Ok(p) => p,
        Err(e) => return refuse(s, e).await,
    };
    // The server sends nothing here: the stream's end is the caller giving up, and then the
    // stream is let go at once (a wait must not hold one of the session's streams for hours).
    let (mut r, w, _) = duplex::split(s);
    let caller_gone = async {
        let mut sink = [0u8; 64];
        while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        _ = p.wait_done(Duration::from_millis(req.timeout_ms).min(MAX_WAIT)) => {}
        _ = caller_gone => return,
    }
    let mut w = w;
    if reply(&mut w, &Reply::ok_with(&p.info())).await {
        let _ = w.shutdown().await;
    }
}

pub async fn remove(sb: Sandbox, s: MuxStream, name: String) {
    let r = sb.processes().remove(&name).await.map(|()| proto::Empty {});
    answer(s, r).await
}

/// `process.stdin`: the bytes the server sends until it half-closes go to the process.
pub async fn stdin(sb: Sandbox, mut s: MuxStream, req: ProcessStdin) {
    let p = match sb.processes().resolve(&req.process) {
        Ok(p) => p,
        Err(e) => return refuse(s, e).await,
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let (mut r, mut w, probe) = duplex::split(s);
    let result = p.write_stdin(&mut r, req.eof, || probe.was_reset()).await;
    if probe.was_reset() {
        return;
    }
    let second = match result {
        Ok(size) => Reply::ok_with(&Size { size }),
        Err(e) => Reply::Error(e),
    };
    if reply(&mut w, &second).await {
        let _ = w.shutdown().await;
    }
}

/// Opens `process.watch` towards the server and reports every process, then each start and
/// end, until `stop`.
pub async fn report(sb: Sandbox, handle: MuxHandle, stop: CancellationToken) {
    let mut stream = match handle.open().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot open the process watch channel");
            return;
        }
    };
    if let Err(e) = proto::open(&mut stream, ProcessWatch {}).await {
        tracing::warn!(error = %e, "the server refused the process watch channel");
        return;
    }
    let mut out = FramedWrite::new(stream, FrameCodec::default());
    // Subscribed before the snapshot, so nothing between the two is missed.
    let mut events = sb.processes().subscribe();
    let mut snapshot = true;
    loop {
        if std::mem::take(&mut snapshot) {
            for info in sb.processes().list() {
                if out.send(Frame::Process(Box::new(info))).await.is_err() {
                    return;
                }
            }
        }
        let info = tokio::select! {
            _ = stop.cancelled() => break,
            e = events.recv() => match e {
                Ok(info) => info,
                Err(RecvError::Lagged(_)) => {
                    // What was missed is in the snapshot; what is still queued is older than
                    // it and would undo it.
                    events = events.resubscribe();
                    snapshot = true;
                    continue;
                }
                Err(RecvError::Closed) => break,
            },
        };
        if out.send(Frame::Process(Box::new(info))).await.is_err() {
            return;
        }
    }
    let _ = out.get_mut().shutdown().await;
}
