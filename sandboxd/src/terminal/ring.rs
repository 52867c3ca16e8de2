//! A terminal session's recent output, addressed by absolute byte offsets.
//!
//! Offset 0 is the first byte the session ever produced; the ring keeps the last `capacity`
//! bytes, so a viewer that saw up to offset N can be given exactly the bytes after N while they
//! are still here.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Ring {
    buf: VecDeque<u8>,
    capacity: usize,
    /// The offset of `buf[0]`.
    start: u64,
}

impl Ring {
    /// A ring keeping at most `capacity` bytes (at least 1).
    pub fn new(capacity: usize) -> Ring {
        let capacity = capacity.max(1);
        Ring {
            // Grows as output arrives: most sessions never fill a large buffer.
            buf: VecDeque::new(),
            capacity,
            start: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The oldest offset still held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The offset of the next byte to be pushed: everything the session has produced.
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    pub fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.capacity {
            // Only the tail survives; the bytes before it count as produced and dropped.
            let skip = data.len() - self.capacity;
            self.start += (self.buf.len() + skip) as u64;
            self.buf.clear();
            &data[skip..]
        } else {
            data
        };
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.capacity);
        if overflow > 0 {
            self.buf.drain(..overflow);
            self.start += overflow as u64;
        }
        self.buf.extend(data);
    }

    /// Up to `max` bytes from offset `from`; `None` when `from` has left the ring (or lies
    /// beyond its end).
    pub fn read(&self, from: u64, max: usize) -> Option<Vec<u8>> {
        if from < self.start || from > self.end() {
            return None;
        }
        let at = (from - self.start) as usize;
        let n = (self.buf.len() - at).min(max);
        let (a, b) = self.buf.as_slices();
        let mut out = Vec::with_capacity(n);
        if at < a.len() {
            let take = (a.len() - at).min(n);
            out.extend_from_slice(&a[at..at + take]);
            out.extend_from_slice(&b[..n - take]);
        } else {
            let at = at - a.len();
            out.extend_from_slice(&b[at..at + n]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_survive_wrapping() {
        let mut r = Ring::new(8);
        r.push(b"abcdef");
        assert_eq!((r.start(), r.end()), (0, 6));
        assert_eq!(r.read(2, 100).unwrap(), b"cdef");
        r.push(b"ghij");
        assert_eq!((r.start(), r.end()), (2, 10));
        assert_eq!(r.read(2, 100).unwrap(), b"cdefghij");
        assert_eq!(r.read(5, 3).unwrap(), b"fgh");
        assert!(r.read(1, 10).is_none(), "evicted");
        assert_eq!(r.read(10, 10).unwrap(), b"");
        assert!(r.read(11, 10).is_none(), "from the future");
    }

    #[test]
    fn a_push_larger_than_the_ring_keeps_its_tail() {
        let mut r = Ring::new(4);
        r.push(b"xy");
        r.push(b"0123456789");
        assert_eq!((r.start(), r.end()), (8, 12));
        assert_eq!(r.read(8, 100).unwrap(), b"6789");
    }

    #[test]
    fn matches_a_plain_model_under_random_pushes() {
        // A tiny xorshift keeps the test deterministic without a random-number crate.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut r = Ring::new(100);
        let mut all: Vec<u8> = Vec::new();
        for _ in 0..500 {
            let n = (next() % 150) as usize;
            let chunk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            r.push(&chunk);
            all.extend_from_slice(&chunk);
            assert_eq!(r.end(), all.len() as u64);
            let from = r.start() + next() % (r.end() - r.start() + 1);
            let got = r.read(from, 1000).unwrap();
            assert_eq!(got, &all[from as usize..]);
        }
    }
}
