//! The harness's stdout cut into lines, each at most a given size: a longer line is dropped as
//! it comes (never held whole), so a harness that writes 100 MB without a newline costs the
//! server no more than the limit. The start of a dropped line is kept, so that what it was (a
//! request, the answer to one) can still be told and answered.

/// How much of an over-long line is kept to tell what it was.
pub const KEPT_PREFIX: usize = 4096;

/// What one piece of output gave.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A whole line (without its newline), and the output offset just after it.
    Whole(Vec<u8>, u64),
    /// A line longer than the limit ended; its first [`KEPT_PREFIX`] bytes, and the offset just
    /// after it.
    TooLong(Vec<u8>, u64),
}

pub struct Lines {
    max: usize,
    partial: Vec<u8>,
    /// Dropping the rest of a line found too long (its prefix is in `partial`).
    skipping: bool,
}

impl Lines {
    pub fn new(max: usize) -> Lines {
        Lines {
            max,
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// Forgets a partial line (the output it belonged to is gone).
    pub fn reset(&mut self) {
        self.partial.clear();
        self.skipping = false;
    }

    /// Feeds `bytes`, which start at output offset `at`.
    pub fn feed(&mut self, bytes: &[u8], at: u64, out: &mut Vec<Line>) {
        let mut rest = bytes;
        let mut pos = at;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let end = pos + i as u64 + 1;
                    if self.skipping {
                        self.skipping = false;
                        out.push(Line::TooLong(std::mem::take(&mut self.partial), end));
                    } else if self.partial.len() + i > self.max {
                        self.keep_prefix(&rest[..i]);
                        out.push(Line::TooLong(std::mem::take(&mut self.partial), end));
                    } else {
                        self.partial.extend_from_slice(&rest[..i]);
                        out.push(Line::Whole(std::mem::take(&mut self.partial), end));
                    }
                    rest = &rest[i + 1..];
                    pos = end;
                }
                None => {
                    if !self.skipping {
                        if self.partial.len() + rest.len() > self.max {
                            self.keep_prefix(rest);
                            self.skipping = true;
                        } else {
                            self.partial.extend_from_slice(rest);
                        }
                    }
                    pos += rest.len() as u64;
                    rest = &[];
                }
            }
        }
    }

    /// Cuts the partial line to its first [`KEPT_PREFIX`] bytes (with `more` after it), giving
    /// back the memory of the rest.
    fn keep_prefix(&mut self, more: &[u8]) {
        let room = KEPT_PREFIX.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&more[..room.min(more.len())]);
        self.partial.truncate(KEPT_PREFIX);
        self.partial.shrink_to(KEPT_PREFIX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_at_newlines_across_pieces() {
        let mut l = Lines::new(100);
        let mut out = Vec::new();
        l.feed(b"ab", 0, &mut out);
        assert!(out.is_empty());
        l.feed(b"c\nde\n", 2, &mut out);
        assert_eq!(
            out,
            vec![
                Line::Whole(b"abc".to_vec(), 4),
                Line::Whole(b"de".to_vec(), 7)
            ]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_dropped_without_being_held_but_its_start_is_kept() {
        let mut l = Lines::new(5000);
        let mut out = Vec::new();
        l.feed(b"{\"id\":7,", 0, &mut out);
        for i in 0..1000u64 {
            l.feed(&[b'x'; 1000], 8 + i * 1000, &mut out);
            assert!(l.partial.capacity() <= 8 * 1024, "a long line is not held");
        }
        l.feed(b"x\nok\n", 1_000_008, &mut out);
        let Line::TooLong(prefix, end) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(*end, 1_000_010);
        assert_eq!(prefix.len(), KEPT_PREFIX);
        assert!(prefix.starts_with(b"{\"id\":7,"));
        assert_eq!(out[1], Line::Whole(b"ok".to_vec(), 1_000_013));
        let mut out = Vec::new();
        let mut l = Lines::new(4);
        l.feed(b"12345\n", 0, &mut out);
        assert_eq!(out, vec![Line::TooLong(b"12345".to_vec(), 6)]);
    }
}
