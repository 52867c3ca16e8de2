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
//!
//! This file owns the format and the writing; [`read`] the reading.

mod read;
#[cfg(test)]
mod tests;

pub use self::read::{Cursor, Piece};

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
