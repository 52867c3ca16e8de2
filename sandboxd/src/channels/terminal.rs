//! The terminal channels: `terminal.open` (create or attach to a session), `terminal.list` and
//! `terminal.kill`.
//!
//! The sessions themselves live in [`crate::terminal`]; this is the wire side of one viewer.

use std::time::Duration;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{
    ChannelError, ErrorCode, Frame, FrameCodec, Reply, TerminalOpen, DATA_CHUNK,
};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::FramedRead;

use super::{frame_writer, refuse, reply, FrameTx};
use crate::duplex::{self, ReadHalf};
use crate::sandbox::Sandbox;
use crate::terminal::{self, pty::DEFAULT_TERM, Session, SessionConfig, Step, Viewer};

/// Largest terminal side accepted, in cells.
const MAX_DIM: u16 = 1000;

fn dims(cols: Option<u16>, rows: Option<u16>) -> (u16, u16) {
    let fix = |v: Option<u16>, default: u16| match v {
        Some(v) if v > 0 => v.min(MAX_DIM),
        _ => default,
    };
    (fix(cols, 80), fix(rows, 24))
}

/// `terminal.open`: a new session, or an attach to one.
pub async fn open(sb: Sandbox, s: MuxStream, req: TerminalOpen) {
    let viewer = match &req.session {
        Some(id) => attach(&sb, id, &req),
        None => {
            let (cols, rows) = dims(req.cols, req.rows);
            let buffer = req
                .buffer_bytes
                .map(|b| (b.min(terminal::MAX_BUFFER as u64) as usize).max(terminal::MIN_BUFFER))
                .unwrap_or(terminal::DEFAULT_BUFFER);
            let cfg = SessionConfig {
                cols,
                rows,
                term: req.term.clone().unwrap_or_else(|| DEFAULT_TERM.to_string()),
                command: req.command.clone(),
                env: req.env.clone(),
                detach_after: req
                    .detach_secs
                    .map(Duration::from_secs)
                    .unwrap_or(terminal::DEFAULT_DETACH),
                buffer,
            };
            let nul_in_env = cfg
                .env
                .iter()
                .any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'));
            if nul_in_env {
                Err(ChannelError::new(
                    ErrorCode::Invalid,
                    "an env name is empty or holds '=' or NUL, or a value holds NUL",
                ))
            } else if cfg.command.as_deref().is_some_and(|c| c.contains('\0')) {
                Err(ChannelError::new(
                    ErrorCode::Invalid,
                    "the command may not contain NUL bytes",
                ))
            } else {
                Session::start(&sb, cfg)
            }
        }
    };
    match viewer {
        Ok(viewer) => serve_viewer(s, viewer).await,
        Err(e) => refuse(s, e).await,
    }
}

fn attach(sb: &Sandbox, id: &str, req: &TerminalOpen) -> Result<Viewer, ChannelError> {
    let session = agenthold_proto::is_session_id(id)
        .then(|| sb.terminals().get(id))
        .flatten()
        .ok_or_else(|| {
            ChannelError::new(
                ErrorCode::NotFound,
                format!(
                    "no terminal session {:?} in this sandbox: it ended, or never existed",
                    id.chars().take(40).collect::<String>()
                ),
            )
        })?;
    let size = match (req.cols, req.rows) {
        (Some(c), Some(r)) if c > 0 && r > 0 => Some((c.min(MAX_DIM), r.min(MAX_DIM))),
        _ => None,
    };
    session.attach(req.offset, size, false)
}

/// `terminal.list`.
pub async fn list(sb: Sandbox, mut s: MuxStream) {
    let sessions = sb.terminals().list();
    if reply(&mut s, &Reply::ok_with(&sessions)).await {
        let _ = s.shutdown().await;
    }
}

/// `terminal.kill`.
pub async fn kill(sb: Sandbox, mut s: MuxStream, id: String) {
    if agenthold_proto::is_session_id(&id) && sb.terminals().kill(&id) {
        if reply(&mut s, &Reply::ok()).await {
            let _ = s.shutdown().await;
        }
    } else {
        let err = ChannelError::new(ErrorCode::NotFound, "no such terminal session");
        refuse(s, err).await;
    }
}

/// Serves one viewer until its stream closes or the session ends: the reply carries the
/// session, offset and size ([`agenthold_proto::TerminalOpened`]), then the stream has the
/// session's frames.
async fn serve_viewer(mut s: MuxStream, mut viewer: Viewer) {
    if !reply(&mut s, &Reply::ok_with(&viewer.opened)).await {
        return;
    }
    let (r, w, _) = duplex::split(s);
    let (tx, writer) = frame_writer(w);
    let mut input = tokio::spawn(forward_input(viewer.session.clone(), r));
    let mut changed = viewer.subscribe();
    let out = async {
        if let Some((offset, bytes)) = viewer.first_redraw.take() {
            send_redraw(&tx, offset, bytes).await?;
        }
        loop {
            changed.borrow_and_update();
            match viewer.next_step() {
                Step::Data(d) => send(&tx, Frame::Data(d.into())).await?,
                Step::Redraw(offset, bytes) => send_redraw(&tx, offset, bytes).await?,
                Step::Resize(cols, rows) => send(&tx, Frame::Resize { cols, rows }).await?,
                Step::Exit(code) => {
                    let _ = tx.send(Frame::PtyExit(code)).await;
                    return Ok(());
                }
                Step::Wait => tokio::select! {
                    // The sender lives in the session, so this never fails while we hold it.
                    _ = changed.changed() => {}
                    _ = &mut input => return Err(()),
                    _ = tx.closed() => return Err(()),
                },
            }
        }
    };
    let _: Result<(), ()> = out.await;
    input.abort();
    // Detach before waiting for the writer: another viewer's flow control may wait on us.
    drop(viewer);
    drop(tx);
    let _ = writer.await;
}

async fn send(tx: &FrameTx, frame: Frame) -> Result<(), ()> {
    tx.send(frame).await.map_err(drop)
}

/// A redraw, announced with its offset and length.
async fn send_redraw(tx: &FrameTx, offset: u64, bytes: Vec<u8>) -> Result<(), ()> {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    send(tx, Frame::Redraw { offset, len }).await?;
    for chunk in bytes[..len as usize].chunks(DATA_CHUNK) {
        send(tx, Frame::Data(bytes::Bytes::copy_from_slice(chunk))).await?;
    }
    Ok(())
}

/// Keystrokes and resizes from the viewer, until its stream ends.
async fn forward_input(session: std::sync::Arc<Session>, r: ReadHalf) {
    let mut frames = FramedRead::new(r, FrameCodec::default());
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(Frame::Data(b)) => {
                if let Err(e) = session.input(&b).await {
                    tracing::debug!(error = %e, "cannot write to the terminal");
                }
            }
            Ok(Frame::Resize { cols, rows }) => {
                let (cols, rows) = dims(Some(cols), Some(rows));
                session.resize(cols, rows);
            }
            Ok(other) => tracing::debug!(?other, "unexpected frame on a terminal; ignored"),
            Err(e) => {
                tracing::debug!(error = %e, "bad frame on a terminal; detaching");
                return;
            }
        }
    }
}
