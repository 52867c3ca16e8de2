//! The harness's stdout cut into lines, each at most a given size: a longer line is dropped as
//! it comes (never held whole), so a harness that writes 100 MB without a newline costs the
//! server no more than the limit.

/// What one piece of output gave.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A whole line (without its newline), and the output offset just after it.
    Whole(Vec<u8>, u64),
    /// A line longer than the limit ended (or was found to be too long); its bytes were
    /// dropped. The offset just after what was dropped so far.
    TooLong(u64),
}

pub struct Lines {
    max: usize,
    partial: Vec<u8>,
    /// Dropping the rest of a line found too long.
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
                        out.push(Line::TooLong(end));
                    } else if self.partial.len() + i > self.max {
                        self.partial.clear();
                        out.push(Line::TooLong(end));
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
                            self.partial = Vec::new();
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
    fn a_line_over_the_limit_is_dropped_without_being_held() {
        let mut l = Lines::new(4);
        let mut out = Vec::new();
        for i in 0..1000u64 {
            l.feed(&[b'x'; 1000], i * 1000, &mut out);
            assert!(l.partial.capacity() <= 1000, "a long line is not held");
        }
        l.feed(b"x\nok\n", 1_000_000, &mut out);
        assert_eq!(
            out,
            vec![
                Line::TooLong(1_000_002),
                Line::Whole(b"ok".to_vec(), 1_000_005)
            ]
        );
        let mut out = Vec::new();
        l.feed(b"12345\n", 0, &mut out);
        assert_eq!(out, vec![Line::TooLong(6)]);
    }
}
