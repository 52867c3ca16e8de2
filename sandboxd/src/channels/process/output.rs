//! A process's output on a channel: from an offset, and with `follow` what comes after it until
//! the process's end, the last frame saying how the process stands.

use std::sync::Arc;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{self as proto, ChannelError, ErrorCode, Frame, ProcessOutput, Reply};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::channels::{frame_writer, refuse, reply, FrameTx};
use crate::duplex;
use crate::process::log::{Cursor, Piece, Stream};
use crate::process::Process;
use crate::sandbox::Sandbox;

/// `process.output`.
pub async fn output(sb: Sandbox, mut s: MuxStream, req: ProcessOutput) {
    let p = match readable_from(&sb, &req.process, req.offset) {
        Ok(p) => p,
        Err(e) => return refuse(s, e).await,
    };
    if !reply(&mut s, &Reply::ok_with(&p.info())).await {
        return;
    }
    let (mut r, w, _) = duplex::split(s);
    let (tx, writer) = frame_writer(w);
    // The server sends nothing on this channel: its end (or a reset) is the reader leaving.
    let gone = CancellationToken::new();
    let watcher = tokio::spawn({
        let gone = gone.clone();
        async move {
            let mut sink = [0u8; 64];
            while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
            gone.cancel();
        }
    });
    send(&p, req.offset, req.follow, &tx, &gone).await;
    drop(tx);
    watcher.abort();
    let _ = writer.await;
}

/// The process `name`, when its output can be read from `offset` (at most the output so far).
pub(super) fn readable_from(
    sb: &Sandbox,
    name: &str,
    offset: u64,
) -> Result<Arc<Process>, ChannelError> {
    let p = sb.processes().resolve(name)?;
    let end = p.output_end();
    if offset > end {
        return Err(ChannelError::new(
            ErrorCode::Invalid,
            format!("offset {offset} is past the process's output so far ({end} bytes)"),
        ));
    }
    Ok(p)
}

/// Sends `p`'s output from `offset` on `tx` (what is there, and with `follow` what comes until
/// its end), then a `Process` frame, unless the reader is `gone` or the queue closed first.
pub(super) async fn send(
    p: &Process,
    offset: u64,
    follow: bool,
    tx: &FrameTx,
    gone: &CancellationToken,
) {
    let mut cursor = Cursor::at(offset);
    let mut changed = p.subscribe();
    loop {
        changed.borrow_and_update();
        let (piece, done) = match p.read(&mut cursor, proto::DATA_CHUNK) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(process = %p.id(), error = %e, "cannot read the process's output");
                return;
            }
        };
        let frame = match piece {
            Piece::Data { stream, bytes, .. } => match stream {
                Stream::Stdout => Frame::Stdout(bytes.into()),
                Stream::Stderr => Frame::Stderr(bytes.into()),
            },
            Piece::Gap { from, to } => Frame::Gap { from, to },
            // The last frame says how the process stands; a stream without it was cut.
            Piece::End if done || !follow => {
                let _ = tx.send(Frame::Process(Box::new(p.info()))).await;
                return;
            }
            Piece::End => {
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    _ = gone.cancelled() => return,
                    _ = tx.closed() => return,
                }
                continue;
            }
        };
        if tx.send(frame).await.is_err() {
            return;
        }
    }
}
