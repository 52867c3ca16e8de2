//! Cuts a byte stream into lines, whatever the chunk boundaries, for NDJSON and SSE.

use bytes::{Buf, Bytes, BytesMut};

/// A server that never ends a line must not make us buffer without bound.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: BytesMut,
    /// The last chunk ended in `\r`; a `\n` opening the next chunk belongs to it.
    after_cr: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub struct LineTooLong;

impl LineSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a chunk; returns the lines it completed, without their terminators.
    /// `\n`, `\r\n` and a lone `\r` all end a line (SSE allows all three).
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<Vec<Bytes>, LineTooLong> {
        let mut lines = Vec::new();
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.buf.extend_from_slice(&chunk[..pos]);
            self.check_len()?;
            lines.push(self.buf.split().freeze());
            let was_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
            if was_cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.buf.extend_from_slice(chunk);
        self.check_len()?;
        Ok(lines)
    }

    /// The stream ended: whatever is left is a last, unterminated line.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.buf.has_remaining() {
            Some(self.buf.split().freeze())
        } else {
            None
        }
    }

    fn check_len(&self) -> Result<(), LineTooLong> {
        if self.buf.len() > MAX_LINE {
            Err(LineTooLong)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new();
        let mut out = Vec::new();
        for c in chunks {
            for l in s.push(c).expect("short lines") {
                out.push(String::from_utf8_lossy(&l).into_owned());
            }
        }
        if let Some(l) = s.finish() {
            out.push(format!("<rest>{}", String::from_utf8_lossy(&l)));
        }
        out
    }

    #[test]
    fn lines_survive_any_chunking() {
        assert_eq!(
            feed(&[b"a\nb", b"c\n", b"\n", b"d"]),
            ["a", "bc", "", "<rest>d"]
        );
        assert_eq!(feed(&[b"a\r\nb\rc\n"]), ["a", "b", "c"]);
        // A CRLF split across chunks is one terminator, not two.
        assert_eq!(feed(&[b"a\r", b"\nb\n"]), ["a", "b"]);
        assert_eq!(feed(&[b"a\r", b"b\n"]), ["a", "b"]);
    }

    #[test]
    fn multibyte_characters_split_across_chunks_are_kept_whole() {
        let text = "h\u{e9}llo \u{1F600}\n".as_bytes();
        let (a, b) = text.split_at(2);
        assert_eq!(feed(&[a, b]), ["h\u{e9}llo \u{1F600}"]);
    }

    #[test]
    fn endless_lines_are_refused() {
        let mut s = LineSplitter::new();
        let big = vec![b'x'; MAX_LINE];
        assert!(s.push(&big).is_ok());
        assert_eq!(s.push(b"x"), Err(LineTooLong));
    }
}
