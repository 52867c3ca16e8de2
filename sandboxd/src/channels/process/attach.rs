//! `process.attach`: a process's output and its stdin on one stream (see
//! [`agenthold_proto::ProcessAttach`]).

use std::sync::Arc;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{Frame, FrameCodec, ProcessAttach, Reply};
use futures::StreamExt;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::output::{readable_from, send};
use crate::channels::{frame_writer, refuse, reply, FrameTx};
use crate::duplex::{self, ReadHalf, ResetProbe};
use crate::process::Process;
use crate::sandbox::Sandbox;

pub async fn attach(sb: Sandbox, mut s: MuxStream, req: ProcessAttach) {
    let p = match readable_from(&sb, &req.process, req.offset) {
        Ok(p) => p,
        Err(e) => return refuse(s, e).await,
    };
    let info = p.info();
    if !reply(&mut s, &Reply::ok_with(&info)).await {
        return;
    }
    let (r, w, probe) = duplex::split(s);
    let (tx, writer) = frame_writer(w);
    if !info.stdin_open {
        let _ = tx.send(Frame::StdinEof).await;
    }
    let gone = CancellationToken::new();
    let input = tokio::spawn(take_stdin(
        p.clone(),
        r,
        probe,
        tx.clone(),
        info.stdin_open,
        gone.clone(),
    ));
    send(&p, req.offset, true, &tx, &gone).await;
    drop(tx);
    input.abort();
    let _ = writer.await;
}

/// Writes what the server sends for the process's stdin until the server leaves, then cancels
/// `gone`. Once stdin is not open, says so with one `StdinEof` and drops the rest.
async fn take_stdin(
    p: Arc<Process>,
    r: ReadHalf,
    probe: ResetProbe,
    tx: FrameTx,
    mut open: bool,
    gone: CancellationToken,
) {
    let mut frames = FramedRead::new(r, FrameCodec::default());
    loop {
        let (data, eof) = match frames.next().await {
            Some(Ok(Frame::Data(b))) => (b, false),
            Some(Ok(Frame::StdinEof)) => (Default::default(), true),
            Some(Ok(_)) => continue,
            // The stream's end, clean or not, is the server leaving.
            Some(Err(_)) | None => break,
        };
        if !open {
            continue;
        }
        match p
            .write_stdin_queued(&mut &data[..], eof, || probe.was_reset())
            .await
        {
            Ok(_) => open = !eof,
            Err(_) => {
                open = false;
                let _ = tx.send(Frame::StdinEof).await;
            }
        }
    }
    gone.cancel();
}
