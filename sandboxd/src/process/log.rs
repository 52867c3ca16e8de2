//! A background process's output on disk, addressed by absolute offsets over both streams.
//!
//! The output is a run of segment files in the process's folder, each named by the offset of
//! its first byte and holding records of `[stream: u8][len: u32 LE][len bytes]`. When the
//! segments together pass the process's budget the oldest is deleted, so the disk a process
//! takes is bounded, and memory holds only the list of segments: a process that writes a
//! gigabyte costs its budget on disk and a few hundred bytes here.
//!
//! A reader keeps a [`Cursor`]: the offset it has reached and the segment file it is reading.
//! It reads only records the writer has finished, so it never sees a wrong byte, and bytes
//! that left before it got to them come back as a gap.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes in front of each record: the stream and the length.
const RECORD_HEAD: u64 = 5;
/// Largest record a segment may hold; longer ones are a damaged file.
const MAX_RECORD: u32 = 16 << 20;
/// Fewest segments a budget is cut into: deleting one frees at most this share of it.
const SEGMENTS_PER_BUDGET: u64 = 8;
const MIN_SEGMENT: u64 = 16 * 1024;
const SUFFIX: &str = ".seg";

/// Which output stream bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn byte(self) -> u8 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }

    fn from_byte(b: u8) -> Option<Stream> {
        match b {
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Segment {
    /// Offset of its first byte.
    start: u64,
    /// Offset after its last finished record.
    end: u64,
    /// File bytes of its finished records: a reader reads no further.
    len: u64,
    path: PathBuf,
}

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

/// The output log of one process.
#[derive(Debug)]
pub struct OutputLog {
    dir: PathBuf,
    budget: u64,
    segment_size: u64,
    segments: VecDeque<Segment>,
    /// The segment being written, open for appending.
    writing: Option<File>,
    /// Offset of the next byte.
    end: u64,
}

impl OutputLog {
    /// A new, empty log in `dir` (made if missing), keeping about `budget` bytes.
    pub fn create(dir: &Path, budget: u64) -> std::io::Result<OutputLog> {
        private_dir(dir)?;
        Ok(OutputLog::empty(dir, budget, 0))
    }

    fn empty(dir: &Path, budget: u64, end: u64) -> OutputLog {
        let budget = budget.max(MIN_SEGMENT);
        OutputLog {
            dir: dir.to_path_buf(),
            budget,
            segment_size: (budget / SEGMENTS_PER_BUDGET).max(MIN_SEGMENT),
            segments: VecDeque::new(),
            writing: None,
            end,
        }
    }

    /// The log a previous sandboxd left in `dir`, read-only from now on: its segments in
    /// order, each up to its last whole record. Files that are not segments, or damaged ones,
    /// end the log where they begin.
    pub fn open_finished(dir: &Path, budget: u64) -> OutputLog {
        let mut starts: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let start = name.strip_suffix(SUFFIX)?.parse::<u64>().ok()?;
                Some((start, e.path()))
            })
            .collect();
        starts.sort();
        let mut log = OutputLog::empty(dir, budget, 0);
        for (start, path) in starts {
            // A later start is a hole (output lost to a full disk); an earlier one is damage.
            if !log.segments.is_empty() && start < log.end {
                break;
            }
            let Some((records_end, len)) = scan_whole_records(&path, start) else {
                break;
            };
            log.segments.push_back(Segment {
                start,
                end: records_end,
                len,
                path,
            });
            log.end = records_end;
        }
        log
    }

    /// Offset of the next byte: all the output so far.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The oldest offset still kept.
    pub fn start(&self) -> u64 {
        self.segments.front().map_or(self.end, |s| s.start)
    }

    /// Appends bytes from `stream`; the oldest segments go once the budget is passed.
    pub fn append(&mut self, stream: Stream, data: &[u8]) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let full = self
            .segments
            .back()
            .is_none_or(|s| s.len >= self.segment_size);
        if full || self.writing.is_none() {
            self.writing = None;
            let path = self.dir.join(format!("{:020}{SUFFIX}", self.end));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&path)?;
            self.segments.push_back(Segment {
                start: self.end,
                end: self.end,
                len: 0,
                path,
            });
            self.writing = Some(file);
        }
        let (Some(file), Some(seg)) = (self.writing.as_mut(), self.segments.back_mut()) else {
            return Ok(());
        };
        let mut record = Vec::with_capacity(RECORD_HEAD as usize + data.len());
        record.push(stream.byte());
        record.extend_from_slice(&(data.len() as u32).to_le_bytes());
        record.extend_from_slice(data);
        if let Err(e) = file.write_all(&record) {
            // Whatever part of the record reached the disk lies past `seg.len`, where no
            // reader looks (and a later scan stops at it).
            self.writing = None;
            if seg.len == 0 {
                let _ = std::fs::remove_file(&seg.path);
                self.segments.pop_back();
            }
            self.skip(data.len() as u64);
            return Err(e);
        }
        seg.len += record.len() as u64;
        seg.end += data.len() as u64;
        self.end += data.len() as u64;
        self.trim();
        Ok(())
    }

    /// `len` bytes of output could not be kept: they read as a gap, never as other bytes, and
    /// the next append starts a segment of its own after them.
    pub fn skip(&mut self, len: u64) {
        self.writing = None;
        self.end += len;
    }

    fn trim(&mut self) {
        let mut total: u64 = self.segments.iter().map(|s| s.len).sum();
        while total > self.budget && self.segments.len() > 1 {
            if let Some(old) = self.segments.pop_front() {
                total -= old.len;
                let _ = std::fs::remove_file(&old.path);
            }
        }
    }

    /// No more output: the segment being written is closed.
    pub fn seal(&mut self) {
        self.writing = None;
    }

    /// Deletes every segment (the process is forgotten).
    pub fn remove_all(&mut self) {
        self.writing = None;
        for s in self.segments.drain(..) {
            let _ = std::fs::remove_file(&s.path);
        }
    }

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

/// Makes `dir` (and its parents) with only its owner let in: what a process wrote is not the
/// sandbox account's to read back from here, nor to change.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn damaged() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "a damaged output segment")
}

fn parse_head(head: &[u8; RECORD_HEAD as usize]) -> Option<(Stream, u32)> {
    let stream = Stream::from_byte(head[0])?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    (len <= MAX_RECORD).then_some((stream, len))
}

/// The offset after the last whole record of a segment starting at `start`, and the file
/// bytes up to it; `None` when the file cannot be read.
fn scan_whole_records(path: &Path, start: u64) -> Option<(u64, u64)> {
    let file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let (mut pos, mut end) = (0u64, start);
    let mut head = [0u8; RECORD_HEAD as usize];
    while pos + RECORD_HEAD <= size {
        if file.read_exact_at(&mut head, pos).is_err() {
            break;
        }
        let Some((_, len)) = parse_head(&head) else {
            break;
        };
        if pos + RECORD_HEAD + len as u64 > size {
            break;
        }
        pos += RECORD_HEAD + len as u64;
        end += len as u64;
    }
    Some((end, pos))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(log: &OutputLog, from: u64) -> (Vec<Piece>, u64) {
        let mut c = Cursor::at(from);
        let mut out = Vec::new();
        loop {
            match log.read(&mut c, 1 << 20).unwrap() {
                Piece::End => return (out, c.at),
                p => out.push(p),
            }
        }
    }

    fn joined(pieces: &[Piece]) -> Vec<(Stream, u8)> {
        let mut out = Vec::new();
        for p in pieces {
            if let Piece::Data { stream, bytes, .. } = p {
                out.extend(bytes.iter().map(|b| (*stream, *b)));
            }
        }
        out
    }

    #[test]
    fn reads_both_streams_in_order_from_any_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
        log.append(Stream::Stdout, b"hello ").unwrap();
        log.append(Stream::Stderr, b"oops").unwrap();
        log.append(Stream::Stdout, b"world").unwrap();
        assert_eq!((log.start(), log.end()), (0, 15));
        let (pieces, at) = read_all(&log, 0);
        assert_eq!(at, 15);
        assert_eq!(
            pieces[1],
            Piece::Data {
                offset: 6,
                stream: Stream::Stderr,
                bytes: b"oops".to_vec()
            }
        );
        // From the middle of a record.
        let (pieces, _) = read_all(&log, 8);
        assert_eq!(
            pieces[0],
            Piece::Data {
                offset: 8,
                stream: Stream::Stderr,
                bytes: b"ps".to_vec()
            }
        );
        assert_eq!(read_all(&log, 15).0, vec![]);
    }

    #[test]
    fn records_of_one_stream_are_read_as_one_piece_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
        for i in 0..10u8 {
            log.append(Stream::Stdout, &[i; 100]).unwrap();
        }
        log.append(Stream::Stderr, b"err").unwrap();
        log.append(Stream::Stdout, b"out").unwrap();
        let mut c = Cursor::at(50);
        let Piece::Data {
            offset,
            stream,
            bytes,
        } = log.read(&mut c, 400).unwrap()
        else {
            panic!("no data");
        };
        assert_eq!((offset, stream, bytes.len()), (50, Stream::Stdout, 400));
        assert_eq!(&bytes[..50], &[0u8; 50][..]);
        assert_eq!(&bytes[350..], &[4u8; 50][..]);
        // The rest of stdout stops at the stderr record, then each stream comes on its own.
        let Piece::Data { offset, bytes, .. } = log.read(&mut c, 1 << 20).unwrap() else {
            panic!("no data");
        };
        assert_eq!((offset, bytes.len()), (450, 550));
        assert_eq!(
            log.read(&mut c, 1 << 20).unwrap(),
            Piece::Data {
                offset: 1000,
                stream: Stream::Stderr,
                bytes: b"err".to_vec()
            }
        );
        assert_eq!(
            log.read(&mut c, 1 << 20).unwrap(),
            Piece::Data {
                offset: 1003,
                stream: Stream::Stdout,
                bytes: b"out".to_vec()
            }
        );
        assert_eq!(log.read(&mut c, 1 << 20).unwrap(), Piece::End);
    }

    #[test]
    fn a_small_budget_drops_the_oldest_and_readers_get_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), MIN_SEGMENT).unwrap();
        let chunk = vec![7u8; 4000];
        for _ in 0..100 {
            log.append(Stream::Stdout, &chunk).unwrap();
        }
        assert_eq!(log.end(), 400_000);
        assert!(log.start() > 0, "nothing was dropped");
        let on_disk: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(on_disk <= 2 * MIN_SEGMENT + 8000, "{on_disk} bytes kept");
        let (pieces, at) = read_all(&log, 10);
        assert_eq!(
            pieces[0],
            Piece::Gap {
                from: 10,
                to: log.start()
            }
        );
        assert_eq!(at, 400_000);
        assert_eq!(joined(&pieces).len() as u64, 400_000 - log.start());
    }

    #[test]
    fn a_reader_keeps_its_open_segment_after_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), MIN_SEGMENT).unwrap();
        let mut all = Vec::new();
        // Within the budget: nothing has left yet when the reader starts.
        for i in 0..5u8 {
            let chunk = vec![i; 3000];
            log.append(Stream::Stdout, &chunk).unwrap();
            all.extend_from_slice(&chunk);
        }
        assert_eq!(log.start(), 0);
        let mut c = Cursor::at(0);
        let mut got = Vec::new();
        match log.read(&mut c, 100).unwrap() {
            Piece::Data { bytes, .. } => got.extend(bytes),
            other => panic!("{other:?}"),
        }
        // The writer moves on far enough to drop the segment the reader is in.
        for i in 5..40u8 {
            let chunk = vec![i; 3000];
            log.append(Stream::Stdout, &chunk).unwrap();
            all.extend_from_slice(&chunk);
        }
        assert!(log.start() > c.at);
        // The next read is a gap, never a wrong byte.
        match log.read(&mut c, 100).unwrap() {
            Piece::Gap { from, to } => assert_eq!((from, to), (100, log.start())),
            other => panic!("{other:?}"),
        }
        let (pieces, _) = read_all(&log, c.at);
        let rest: Vec<u8> = joined(&pieces).into_iter().map(|(_, b)| b).collect();
        assert_eq!(rest, all[c.at as usize..]);
        assert_eq!(got, all[..100]);
    }

    #[test]
    fn a_log_left_behind_reads_the_same_and_stops_at_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), MIN_SEGMENT * 8).unwrap();
        for i in 0..20u8 {
            log.append(
                if i % 3 == 0 {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                },
                &vec![i; 5000],
            )
            .unwrap();
        }
        let (before, _) = read_all(&log, 0);
        let end = log.end();
        drop(log);
        let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
        assert_eq!(again.end(), end);
        assert_eq!(read_all(&again, 0).0, before);
        // A crash mid-write leaves half a record at the end: it is not read.
        let last = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .max()
            .unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&last)
            .unwrap();
        f.write_all(&[1, 100, 0, 0, 0, b'x']).unwrap();
        std::fs::write(dir.path().join("junk.seg"), b"not a segment").unwrap();
        let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
        assert_eq!(again.end(), end);
        // A record header claiming more than the limit stops the scan there.
        std::fs::write(&last, [1u8, 255, 255, 255, 255]).unwrap();
        let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
        assert!(again.end() < end);
    }

    #[test]
    fn bytes_that_could_not_be_kept_read_as_a_gap_also_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
        log.append(Stream::Stdout, b"before").unwrap();
        log.skip(10);
        log.append(Stream::Stderr, b"after").unwrap();
        log.skip(3);
        assert_eq!(log.end(), 24);
        let expect = vec![
            Piece::Data {
                offset: 0,
                stream: Stream::Stdout,
                bytes: b"before".to_vec(),
            },
            Piece::Gap { from: 6, to: 16 },
            Piece::Data {
                offset: 16,
                stream: Stream::Stderr,
                bytes: b"after".to_vec(),
            },
            Piece::Gap { from: 21, to: 24 },
        ];
        assert_eq!(read_all(&log, 0), (expect, 24));
        drop(log);
        let again = OutputLog::open_finished(dir.path(), 1 << 20);
        // The lost bytes at the very end left no trace on disk; the hole between is kept.
        let (pieces, end) = read_all(&again, 0);
        assert_eq!(end, 21);
        assert_eq!(pieces[1], Piece::Gap { from: 6, to: 16 });
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn matches_a_plain_model_under_random_appends_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OutputLog::create(dir.path(), MIN_SEGMENT * 2).unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut all: Vec<(Stream, u8)> = Vec::new();
        for _ in 0..400 {
            let n = (next() % 3000) as usize;
            let stream = if next() % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            let chunk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            log.append(stream, &chunk).unwrap();
            all.extend(chunk.iter().map(|b| (stream, *b)));
            let from = next() % (log.end() + 1);
            let mut c = Cursor::at(from);
            let mut got = Vec::new();
            let mut first = true;
            loop {
                match log.read(&mut c, (next() % 5000 + 1) as usize).unwrap() {
                    Piece::End => break,
                    Piece::Gap { from: f, to } => {
                        assert!(first && f == from && to == log.start());
                    }
                    Piece::Data {
                        offset,
                        stream,
                        bytes,
                    } => {
                        assert_eq!(offset, c.at - bytes.len() as u64);
                        got.extend(bytes.iter().map(|b| (stream, *b)));
                    }
                }
                first = false;
            }
            let begin = from.max(log.start()) as usize;
            assert_eq!(got, all[begin..]);
        }
    }
}
