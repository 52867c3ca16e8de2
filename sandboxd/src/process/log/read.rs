//! Reading a process's output log: a reader's [`Cursor`], and the [`Piece`]s it gets (data of
//! one stream, a gap where bytes left before it got to them, or the end so far).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{damaged, parse_head, OutputLog, Stream, RECORD_HEAD};

/// What a read found.
#[derive(Debug, PartialEq)]
pub enum Piece {
    Data {
        offset: u64,
        stream: Stream,
        bytes: Vec<u8>,
    },
    /// `from..to` has left the log; reading goes on at `to`.
    Gap { from: u64, to: u64 },
    /// Nothing more yet: the reader is at the end of the output so far.
    End,
}

impl OutputLog {
    /// The next piece for `cursor`: at most `max` bytes of one stream, from the records that
    /// follow each other in one segment; positioned reads of one file, short enough to do
    /// under the lock the writer takes.
    pub fn read(&self, cursor: &mut Cursor, max: usize) -> std::io::Result<Piece> {
        let first = self.start();
        if cursor.at < first {
            let gap = Piece::Gap {
                from: cursor.at,
                to: first,
            };
            cursor.at = first;
            cursor.open = None;
            return Ok(gap);
        }
        if cursor.at >= self.end {
            return Ok(Piece::End);
        }
        let Some(seg) = self
            .segments
            .iter()
            .find(|s| s.start <= cursor.at && cursor.at < s.end)
        else {
            // In a hole: the bytes up to the next kept ones were lost.
            let to = self
                .segments
                .iter()
                .map(|s| s.start)
                .find(|start| *start > cursor.at)
                .unwrap_or(self.end);
            let gap = Piece::Gap {
                from: cursor.at,
                to,
            };
            cursor.at = to;
            cursor.open = None;
            return Ok(gap);
        };
        let reuse = cursor
            .open
            .as_ref()
            .is_some_and(|o| o.start == seg.start && o.logical <= cursor.at);
        if !reuse {
            cursor.open = Some(OpenSegment {
                start: seg.start,
                file: File::open(&seg.path)?,
                pos: 0,
                logical: seg.start,
            });
        }
        let Some(open) = cursor.open.as_mut() else {
            return Ok(Piece::End);
        };
        loop {
            if open.pos + RECORD_HEAD > seg.len {
                return Ok(Piece::End);
            }
            let mut head = [0u8; RECORD_HEAD as usize];
            open.file.read_exact_at(&mut head, open.pos)?;
            let (stream, len) = parse_head(&head).ok_or_else(damaged)?;
            let len = len as u64;
            if open.logical + len <= cursor.at {
                open.pos += RECORD_HEAD + len;
                open.logical += len;
                continue;
            }
            let offset = cursor.at;
            let mut bytes = Vec::new();
            take_from_record(open, &mut cursor.at, len, max, &mut bytes)?;
            // Records are as small as the pipe reads that made them; following records of
            // the same stream join this piece, so a reader pays one frame per `max` bytes
            // instead of one per few KiB.
            while bytes.len() < max && open.logical == cursor.at {
                if open.pos + RECORD_HEAD > seg.len {
                    break;
                }
                open.file.read_exact_at(&mut head, open.pos)?;
                let (next, len) = parse_head(&head).ok_or_else(damaged)?;
                if next != stream {
                    break;
                }
                take_from_record(open, &mut cursor.at, len as u64, max, &mut bytes)?;
            }
            return Ok(Piece::Data {
                offset,
                stream,
                bytes,
            });
        }
    }
}

/// Appends to `bytes` what is left of the record at `open` from offset `at` on, up to `max`
/// bytes in all, moving `at` along, and past the record when it is used up.
fn take_from_record(
    open: &mut OpenSegment,
    at: &mut u64,
    len: u64,
    max: usize,
    bytes: &mut Vec<u8>,
) -> std::io::Result<()> {
    let skip = *at - open.logical;
    let n = (len - skip).min(max.saturating_sub(bytes.len()) as u64);
    let have = bytes.len();
    bytes.resize(have + n as usize, 0);
    open.file
        .read_exact_at(&mut bytes[have..], open.pos + RECORD_HEAD + skip)?;
    *at += n;
    if skip + n == len {
        open.pos += RECORD_HEAD + len;
        open.logical += len;
    }
    Ok(())
}

/// A reader's place in a log.
#[derive(Debug)]
pub struct Cursor {
    /// The offset of the next byte this reader gets.
    pub at: u64,
    open: Option<OpenSegment>,
}

#[derive(Debug)]
struct OpenSegment {
    start: u64,
    file: File,
    /// File position of the record that holds `logical`.
    pos: u64,
    /// Offset of that record's first byte.
    logical: u64,
}

impl Cursor {
    pub fn at(offset: u64) -> Cursor {
        Cursor {
            at: offset,
            open: None,
        }
    }
}
