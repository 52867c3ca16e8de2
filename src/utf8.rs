//! Turning a byte stream into text chunks without splitting a character across two chunks.

/// Holds back the incomplete tail of a UTF-8 sequence until the next chunk completes it.
#[derive(Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    pub fn decode(&mut self, chunk: &[u8]) -> String {
        self.pending.extend_from_slice(chunk);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // Invalid bytes: replace them and go on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                        // An incomplete sequence at the end: wait for the rest.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Whatever is left at the end of the stream.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_are_joined() {
        let bytes = "aé€😀z".as_bytes();
        for cut in 0..bytes.len() {
            let mut d = Utf8Decoder::default();
            let mut s = d.decode(&bytes[..cut]);
            s.push_str(&d.decode(&bytes[cut..]));
            s.push_str(&d.finish());
            assert_eq!(s, "aé€😀z", "cut at {cut}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut d = Utf8Decoder::default();
        assert_eq!(d.decode(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(d.decode(b"\xe2\x82"), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
