//! A session's screen as a terminal would show it, kept up to date with every byte of output,
//! so a viewer who missed bytes (or arrives new) can be given a correct picture instead of a
//! replay cut in the middle of an escape sequence.
//!
//! `vt100` holds the cells, attributes, cursor, alternate screen and input modes. Two things it
//! tracks but does not expose are tracked here beside it: the window title and the scroll
//! region (DECSTBM), which full-screen programs such as `less` and `vim` rely on.

use std::num::NonZeroU16;

/// Redraws above this size fall back to plain text (only a hostile program gets there: a
/// 1000×1000 screen of cells that each change colour).
const MAX_REDRAW: usize = 8 * 1024 * 1024;
/// Longest window title kept.
const MAX_TITLE: usize = 512;

#[derive(Default)]
struct Extras {
    title: Option<String>,
}

impl vt100::Callbacks for Extras {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        // Control characters would end the OSC sequence early when the title is replayed.
        let clean: String = String::from_utf8_lossy(title)
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_TITLE)
            .collect();
        self.title = Some(clean);
    }
}

/// Watches for DECSTBM and the sequences that reset it.
#[derive(Default)]
struct Margins {
    /// 1-based top and bottom rows, or `None` for the whole screen.
    region: Option<(u16, u16)>,
    rows: u16,
}

impl vte::Perform for Margins {
    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        match (action, intermediates) {
            ('r', []) => {
                let mut it = params.iter().map(|p| p.first().copied().unwrap_or(0));
                let top = it.next().filter(|&v| v > 0).unwrap_or(1);
                let bottom = it.next().filter(|&v| v > 0).unwrap_or(self.rows);
                let bottom = bottom.min(self.rows);
                // A terminal ignores a region that is not at least two rows.
                if top < bottom {
                    self.region = if top == 1 && bottom == self.rows {
                        None
                    } else {
                        Some((top, bottom))
                    };
                }
            }
            // DECSTR, the soft reset.
            ('p', [b'!']) => self.region = None,
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        // RIS, the full reset.
        if intermediates.is_empty() && byte == b'c' {
            self.region = None;
        }
    }
}

pub struct Screen {
    parser: vt100::Parser<Extras>,
    margins_parser: vte::Parser,
    margins: Margins,
}

fn dim(v: u16) -> NonZeroU16 {
    NonZeroU16::new(v).unwrap_or(NonZeroU16::MIN)
}

impl Screen {
    pub fn new(cols: u16, rows: u16) -> Screen {
        Screen {
            // No scrollback: replay comes from the output ring, the screen only redraws.
            parser: vt100::Parser::new_with_callbacks(dim(rows), dim(cols), 0, Extras::default()),
            margins_parser: vte::Parser::new(),
            margins: Margins {
                region: None,
                rows: rows.max(1),
            },
        }
    }

    pub fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
        self.margins_parser.advance(&mut self.margins, bytes);
    }

    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.parser.set_size(dim(rows), dim(cols));
        // A terminal resets the scroll region when its size changes.
        self.margins = Margins {
            region: None,
            rows: rows.max(1),
        };
    }

    pub fn vt(&self) -> &vt100::Screen {
        self.parser.screen()
    }

    /// Bytes that turn any terminal of this size into this screen: a soft reset, the right
    /// buffer (main or alternate), every cell with its attributes, the cursor, the input modes
    /// (keypad, cursor keys, bracketed paste, mouse), the scroll region and the title.
    ///
    /// Limits: the main screen's contents are lost while the alternate screen is shown (vt100
    /// keeps only the active one reachable), and origin mode is not restored.
    pub fn redraw(&self) -> Vec<u8> {
        let screen = self.parser.screen();
        let mut out = String::new();
        // DECSTR resets margins, attributes, origin and insert modes; leaving the alternate
        // screen first makes the sequence below land on a known buffer.
        out.push_str("\x1b[!p\x1b[?1049l");
        if screen.alternate_screen() {
            out.push_str("\x1b[?1049h");
        }
        out.push_str(&screen.state_formatted());
        if let Some((top, bottom)) = self.margins.region {
            // DECSTBM homes the cursor: put it back, then the attributes that may disturb.
            out.push_str(&format!("\x1b[{top};{bottom}r"));
            out.push_str(&screen.cursor_state_formatted());
            out.push_str(&screen.attributes_formatted());
        }
        if let Some(title) = &self.parser.callbacks().title {
            out.push_str(&format!("\x1b]2;{title}\x07"));
        }
        if out.len() > MAX_REDRAW {
            let mut plain = String::from("\x1b[!p\x1b[?1049l\x1b[H\x1b[2J");
            plain.push_str(&screen.contents().replace('\n', "\r\n"));
            return plain.into_bytes();
        }
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(redraw: &[u8], cols: u16, rows: u16) -> vt100::Parser {
        let mut p = vt100::Parser::new(dim(rows), dim(cols), 0);
        // What the viewer showed before: garbage that the redraw must wipe.
        p.process(b"\x1b[31mold junk everywhere\r\n\x1b[?1049hmore junk");
        p.process(redraw);
        p
    }

    #[test]
    fn redraw_reproduces_text_colours_cursor_and_modes() {
        let mut s = Screen::new(40, 10);
        s.process(b"plain \x1b[1;32mbold green\x1b[0m\r\nsecond line\x1b[4;7H\x1b[?1h\x1b[?2004h");
        let p = replay(&s.redraw(), 40, 10);
        assert_eq!(p.screen().contents(), s.vt().contents());
        assert_eq!(p.screen().cursor_position(), (3, 6));
        assert_eq!(p.screen().contents_formatted(), s.vt().contents_formatted());
        assert!(p.screen().application_cursor());
        assert!(p.screen().bracketed_paste());
        assert!(!p.screen().alternate_screen());
    }

    #[test]
    fn redraw_restores_the_alternate_screen() {
        let mut s = Screen::new(20, 5);
        s.process(b"shell prompt$ \x1b[?1049h\x1b[Hfull screen app\x1b[3;2H");
        let p = replay(&s.redraw(), 20, 5);
        assert!(p.screen().alternate_screen());
        assert_eq!(p.screen().contents(), s.vt().contents());
        assert_eq!(p.screen().cursor_position(), (2, 1));
    }

    #[test]
    fn redraw_keeps_the_scroll_region_and_title() {
        let mut s = Screen::new(20, 6);
        s.process(b"\x1b]2;my title\x07\x1b[2;5r\x1b[3;4Hx");
        let redraw = s.redraw();
        let text = String::from_utf8_lossy(&redraw);
        assert!(text.contains("\x1b[2;5r"), "{text:?}");
        assert!(text.contains("\x1b]2;my title\x07"), "{text:?}");
        let p = replay(&redraw, 20, 6);
        assert_eq!(p.screen().cursor_position(), s.vt().cursor_position());
        // A reset forgets the region.
        s.process(b"\x1bc");
        assert!(!String::from_utf8_lossy(&s.redraw()).contains("\x1b[2;5r"));
    }

    #[test]
    fn titles_cannot_smuggle_control_characters() {
        let mut s = Screen::new(20, 5);
        s.process(b"\x1b]2;evil\x1b\\\x07");
        s.process(b"\x1b]0;a\x1bb\x07");
        let text = String::from_utf8_lossy(&s.redraw()).into_owned();
        let osc = text.rfind("\x1b]2;").unwrap();
        assert!(!text[osc + 4..text.len() - 1].contains('\x1b'), "{text:?}");
    }
}
