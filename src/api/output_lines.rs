//! A process's output frames as the NDJSON lines of `GET …/processes/{pid}/output`.
//!
//! Each line names the offset of its first byte, so a client joins lines by offset. Text goes
//! as UTF-8; a character cut between two frames of the same stream is held back until the
//! next one completes it, and bytes that are not UTF-8 go as base64, as does text made mostly
//! of control characters (JSON would write each as six bytes).

use std::borrow::Cow;

use base64::Engine;

use super::types::process::{Gap, OutputLine, Process};
use super::types::OutputStream;

/// Turns frames into lines, counting offsets.
pub struct OutputLines {
    /// The offset of the next byte to come.
    at: u64,
    /// The start of a character cut at the end of the last frame, its offset and stream.
    held: Option<(u64, OutputStream, Vec<u8>)>,
}

impl OutputLines {
    /// Lines for output that starts at `offset`.
    pub fn new(offset: u64) -> OutputLines {
        OutputLines {
            at: offset,
            held: None,
        }
    }

    pub fn stdout(&mut self, bytes: &[u8]) -> Vec<OutputLine> {
        self.data(OutputStream::Stdout, bytes)
    }

    pub fn stderr(&mut self, bytes: &[u8]) -> Vec<OutputLine> {
        self.data(OutputStream::Stderr, bytes)
    }

    fn data(&mut self, stream: OutputStream, bytes: &[u8]) -> Vec<OutputLine> {
        let mut out = Vec::new();
        // Borrowed unless a cut character is held back: the bytes are copied once, into the
        // line.
        let (offset, joined): (u64, Cow<'_, [u8]>) = match self.held.take() {
            Some((offset, s, mut held)) if s == stream => {
                held.extend_from_slice(bytes);
                (offset, Cow::Owned(held))
            }
            other => {
                if let Some((offset, s, held)) = other {
                    out.push(binary(offset, s, &held));
                }
                (self.at, Cow::Borrowed(bytes))
            }
        };
        self.at += bytes.len() as u64;
        match std::str::from_utf8(&joined) {
            Ok(_) if inflated_by_json(&joined) => out.push(binary(offset, stream, &joined)),
            Ok(text) => out.push(OutputLine::Text {
                offset,
                stream,
                data: text.to_string(),
            }),
            Err(e) if e.error_len().is_none() => {
                // Only the end is cut: send what is whole, hold the rest for the next frame.
                let whole = e.valid_up_to();
                if whole > 0 {
                    out.push(OutputLine::Text {
                        offset,
                        stream,
                        data: String::from_utf8_lossy(&joined[..whole]).into_owned(),
                    });
                }
                self.held = Some((offset + whole as u64, stream, joined[whole..].to_vec()));
            }
            Err(_) => out.push(binary(offset, stream, &joined)),
        }
        out
    }

    /// `from..to` left the buffer before it could be read.
    pub fn gap(&mut self, from: u64, to: u64) -> Vec<OutputLine> {
        let mut out = self.finish();
        out.push(OutputLine::Gap {
            gap: Gap { from, to },
        });
        self.at = to;
        out
    }

    /// The process ended and everything was sent.
    pub fn exit(&mut self, process: Process) -> Vec<OutputLine> {
        let mut out = self.finish();
        out.push(OutputLine::Exit {
            exit: Box::new(process),
        });
        out
    }

    /// No more frames: what is held back goes as it is.
    pub fn finish(&mut self) -> Vec<OutputLine> {
        self.held
            .take()
            .map(|(offset, s, held)| binary(offset, s, &held))
            .into_iter()
            .collect()
    }
}

/// Whether more than a quarter of `text` is control characters, each of which JSON writes as
/// six bytes (`\u0000`): base64's third more is then the smaller line, and far cheaper to
/// decode. Text with colour codes or the odd tab stays readable text.
fn inflated_by_json(text: &[u8]) -> bool {
    let escaped = text
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t'))
        .count();
    escaped * 4 > text.len()
}

fn binary(offset: u64, stream: OutputStream, bytes: &[u8]) -> OutputLine {
    OutputLine::Bytes {
        offset,
        stream,
        data64: base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

/// The bytes of a data line, whichever way it carries them; `None` for other lines and for
/// base64 that does not decode.
pub fn line_bytes(line: &OutputLine) -> Option<(u64, OutputStream, Vec<u8>)> {
    match line {
        OutputLine::Text {
            offset,
            stream,
            data,
        } => Some((*offset, *stream, data.as_bytes().to_vec())),
        OutputLine::Bytes {
            offset,
            stream,
            data64,
        } => base64::engine::general_purpose::STANDARD
            .decode(data64)
            .ok()
            .map(|b| (*offset, *stream, b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joins the lines back into (stream, byte) pairs, checking each line's offset.
    fn join(lines: &[OutputLine], mut at: u64) -> Vec<(OutputStream, u8)> {
        let mut out = Vec::new();
        for l in lines {
            if let OutputLine::Gap { gap } = l {
                at = gap.to;
                continue;
            }
            let Some((offset, stream, bytes)) = line_bytes(l) else {
                continue;
            };
            assert_eq!(offset, at, "{l:?}");
            at += bytes.len() as u64;
            out.extend(bytes.into_iter().map(|b| (stream, b)));
        }
        out
    }

    #[test]
    fn a_character_cut_between_frames_is_sent_whole_and_offsets_stay_exact() {
        let mut l = OutputLines::new(10);
        let text = "héllo wörld".as_bytes();
        let mut lines = l.stdout(&text[..2]); // "h" and the first byte of "é"
        lines.extend(l.stdout(&text[2..]));
        lines.extend(l.finish());
        assert_eq!(
            lines,
            vec![
                OutputLine::Text {
                    offset: 10,
                    stream: OutputStream::Stdout,
                    data: "h".into()
                },
                OutputLine::Text {
                    offset: 11,
                    stream: OutputStream::Stdout,
                    data: "éllo wörld".into()
                },
            ]
        );
    }

    #[test]
    fn text_mostly_of_control_characters_goes_as_base64_and_colour_codes_stay_text() {
        let mut l = OutputLines::new(0);
        let zeros = vec![0u8; 4096];
        let coloured = "\x1b[31mred\x1b[0m and \tplain\r\n".as_bytes();
        let mut lines = l.stdout(&zeros);
        lines.extend(l.stdout(coloured));
        assert!(
            matches!(&lines[0], OutputLine::Bytes { offset: 0, .. }),
            "{:?}",
            lines[0]
        );
        assert!(
            matches!(&lines[1], OutputLine::Text { offset: 4096, .. }),
            "{:?}",
            lines[1]
        );
        let mut expected: Vec<_> = zeros.iter().map(|b| (OutputStream::Stdout, *b)).collect();
        expected.extend(coloured.iter().map(|b| (OutputStream::Stdout, *b)));
        assert_eq!(join(&lines, 0), expected);
    }

    #[test]
    fn bytes_that_are_not_text_go_as_base64_and_join_exactly() {
        let mut l = OutputLines::new(0);
        let mut lines = Vec::new();
        let mut expected = Vec::new();
        let pieces: [(OutputStream, &[u8]); 5] = [
            (OutputStream::Stdout, b"ok \xe2\x82"), // a cut euro sign...
            (OutputStream::Stderr, b"err"),         // ...that the other stream interrupts
            (OutputStream::Stdout, b"\xff\xfe raw"),
            (OutputStream::Stdout, "€ fine".as_bytes()),
            (OutputStream::Stderr, b"\xc3"), // cut at the very end
        ];
        for (s, b) in pieces {
            expected.extend(b.iter().map(|x| (s, *x)));
            lines.extend(match s {
                OutputStream::Stdout => l.stdout(b),
                OutputStream::Stderr => l.stderr(b),
            });
        }
        lines.extend(l.finish());
        assert_eq!(join(&lines, 0), expected);
        assert!(lines.iter().any(|x| matches!(x, OutputLine::Bytes { .. })));
    }

    #[test]
    fn a_gap_moves_the_offset_on() {
        let mut l = OutputLines::new(5);
        let mut lines = l.gap(5, 100);
        lines.extend(l.stderr(b"x"));
        assert_eq!(
            lines[1],
            OutputLine::Text {
                offset: 100,
                stream: OutputStream::Stderr,
                data: "x".into()
            }
        );
    }
}
