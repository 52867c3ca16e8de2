//! [`Frame`]s: the messages inside the `exec`, `activity`, `terminal.open` and `process.*` channels once they
//! are open, as `u32` length + kind byte + payload, with [`MAX_FRAME_LEN`] enforced on both sides.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use crate::exec::ExecExit;
use crate::header::ProtoError;
use crate::limits::MAX_FRAME_LEN;
use crate::process::ProcessInfo;

/// A message inside the `exec`, `activity` and `terminal.open` channels.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Terminal bytes (both ways) or stdin bytes (server to sandboxd).
    Data(Bytes),
    Stdout(Bytes),
    Stderr(Bytes),
    /// No more stdin: from the server, close it; on `process.attach` from sandboxd, the
    /// process's stdin is not open (what is sent for it is dropped).
    StdinEof,
    Resize {
        cols: u16,
        rows: u16,
    },
    /// The terminal session's shell ended with this code.
    PtyExit(i32),
    /// The last frame of an `exec` channel.
    ExecExit(ExecExit),
    /// CPU time used by the sandbox's processes since sandboxd started, in milliseconds, and
    /// whether a process started with `keep_awake` runs (a trailing byte; absent is false).
    Activity {
        cpu_ms: u64,
        keep_awake: bool,
    },
    /// `terminal.open`: the next `len` bytes of `Data` frames redraw the screen as it was at
    /// output offset `offset`; the live output from `offset` follows them.
    Redraw {
        offset: u64,
        len: u32,
    },
    /// `process.output`: the output from `from` to `to` has left the buffer; what follows
    /// starts at `to`.
    Gap {
        from: u64,
        to: u64,
    },
    /// A process as it now is: the end of `process.output`, each entry of `process.list`,
    /// each change on `process.watch`.
    Process(Box<ProcessInfo>),
}

pub(crate) const K_DATA: u8 = 1;
pub(crate) const K_STDOUT: u8 = 2;
pub(crate) const K_STDERR: u8 = 3;
pub(crate) const K_STDIN_EOF: u8 = 4;
pub(crate) const K_RESIZE: u8 = 5;
pub(crate) const K_PTY_EXIT: u8 = 6;
pub(crate) const K_EXEC_EXIT: u8 = 7;
pub(crate) const K_ACTIVITY: u8 = 8;
pub(crate) const K_REDRAW: u8 = 9;
pub(crate) const K_GAP: u8 = 10;
pub(crate) const K_PROCESS: u8 = 11;

/// Encodes [`Frame`]s as `u32` length + kind byte + payload, with [`MAX_FRAME_LEN`] enforced
/// on both sides.
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec {
            inner: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME_LEN + 1)
                .new_codec(),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtoError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        let raw = match self.inner.decode(src) {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ProtoError::FrameTooLarge(peek_len(src)))
            }
            Err(e) => return Err(e.into()),
        };
        decode_payload(raw.freeze()).map(Some)
    }
}

fn peek_len(src: &BytesMut) -> usize {
    if src.len() >= 4 {
        u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize
    } else {
        0
    }
}

fn decode_payload(mut raw: Bytes) -> Result<Frame, ProtoError> {
    if raw.is_empty() {
        return Err(ProtoError::Malformed("empty frame".into()));
    }
    let kind = raw.get_u8();
    let short = || ProtoError::Malformed(format!("frame kind {kind} too short"));
    Ok(match kind {
        K_DATA => Frame::Data(raw),
        K_STDOUT => Frame::Stdout(raw),
        K_STDERR => Frame::Stderr(raw),
        K_STDIN_EOF => Frame::StdinEof,
        K_RESIZE => {
            if raw.len() < 4 {
                return Err(short());
            }
            Frame::Resize {
                cols: raw.get_u16(),
                rows: raw.get_u16(),
            }
        }
        K_PTY_EXIT => {
            if raw.len() < 4 {
                return Err(short());
            }
            Frame::PtyExit(raw.get_i32())
        }
        K_EXEC_EXIT => Frame::ExecExit(
            serde_json::from_slice(&raw).map_err(|e| ProtoError::Malformed(e.to_string()))?,
        ),
        K_ACTIVITY => {
            if raw.len() < 8 {
                return Err(short());
            }
            Frame::Activity {
                cpu_ms: raw.get_u64(),
                keep_awake: raw.first().is_some_and(|b| *b == 1),
            }
        }
        K_REDRAW => {
            if raw.len() < 12 {
                return Err(short());
            }
            Frame::Redraw {
                offset: raw.get_u64(),
                len: raw.get_u32(),
            }
        }
        K_GAP => {
            if raw.len() < 16 {
                return Err(short());
            }
            Frame::Gap {
                from: raw.get_u64(),
                to: raw.get_u64(),
            }
        }
        K_PROCESS => Frame::Process(Box::new(
            serde_json::from_slice(&raw).map_err(|e| ProtoError::Malformed(e.to_string()))?,
        )),
        other => return Err(ProtoError::UnknownFrame(other)),
    })
}

impl Encoder<Frame> for FrameCodec {
    type Error = ProtoError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), ProtoError> {
        let mut payload = BytesMut::new();
        match frame {
            Frame::Data(b) => put_bytes(&mut payload, K_DATA, &b),
            Frame::Stdout(b) => put_bytes(&mut payload, K_STDOUT, &b),
            Frame::Stderr(b) => put_bytes(&mut payload, K_STDERR, &b),
            Frame::StdinEof => payload.put_u8(K_STDIN_EOF),
            Frame::Resize { cols, rows } => {
                payload.put_u8(K_RESIZE);
                payload.put_u16(cols);
                payload.put_u16(rows);
            }
            Frame::PtyExit(code) => {
                payload.put_u8(K_PTY_EXIT);
                payload.put_i32(code);
            }
            Frame::ExecExit(exit) => put_json(&mut payload, K_EXEC_EXIT, &exit)?,
            Frame::Activity { cpu_ms, keep_awake } => {
                payload.put_u8(K_ACTIVITY);
                payload.put_u64(cpu_ms);
                payload.put_u8(u8::from(keep_awake));
            }
            Frame::Redraw { offset, len } => {
                payload.put_u8(K_REDRAW);
                payload.put_u64(offset);
                payload.put_u32(len);
            }
            Frame::Gap { from, to } => {
                payload.put_u8(K_GAP);
                payload.put_u64(from);
                payload.put_u64(to);
            }
            Frame::Process(info) => put_json(&mut payload, K_PROCESS, &info)?,
        }
        if payload.len() > MAX_FRAME_LEN + 1 {
            return Err(ProtoError::FrameTooLarge(payload.len()));
        }
        self.inner
            .encode(payload.freeze(), dst)
            .map_err(ProtoError::Io)
    }
}

fn put_json<T: serde::Serialize>(
    payload: &mut BytesMut,
    kind: u8,
    value: &T,
) -> Result<(), ProtoError> {
    let json = serde_json::to_vec(value).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    payload.put_u8(kind);
    payload.put_slice(&json);
    Ok(())
}

fn put_bytes(payload: &mut BytesMut, kind: u8, b: &[u8]) {
    payload.reserve(1 + b.len());
    payload.put_u8(kind);
    payload.put_slice(b);
}

/// Largest data chunk a sender should put in one frame.
pub const DATA_CHUNK: usize = 64 * 1024;
