//! The terminal WebSocket's text messages and close codes.

use serde::{Deserialize, Serialize};

/// A text message of the terminal WebSocket (binary messages are terminal bytes). The server
/// sends all of them; a client sends only `Resize`. See the terminal route's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TerminalMessage {
    /// First from the server: the session, and the absolute offset of the next output byte.
    Session {
        id: String,
        offset: u64,
        #[serde(default)]
        cols: u16,
        #[serde(default)]
        rows: u16,
    },
    /// The next binary message (`bytes` long) redraws the whole screen as it was at `offset`.
    Redraw { offset: u64, bytes: u64 },
    /// From the server: the session's size changed. From a client: change it.
    Resize { cols: u16, rows: u16 },
    /// The shell exited with `code`; a close with [`close::NORMAL`] follows.
    Exit { code: i32 },
}

/// The close codes of the terminal WebSocket.
pub mod close {
    /// The shell exited.
    pub const NORMAL: u16 = 1000;
    /// A failure on the server's side (the sandbox went away, waking failed); a client that has
    /// a session id may reattach.
    pub const ERROR: u16 = 1011;
    /// An attach that cannot succeed, mirroring HTTP 400, 404 and 409.
    pub const BAD_REQUEST: u16 = 4400;
    pub const SESSION_GONE: u16 = 4404;
    pub const BUSY: u16 = 4409;
    /// The agent has `sandbox.max_streams_per_agent` channels open (mirroring HTTP 429):
    /// nothing is wrong with the session; a later attach will do.
    pub const TOO_MANY_STREAMS: u16 = 4429;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_messages_have_the_documented_json_form() {
        let cases = [
            (
                TerminalMessage::Session {
                    id: "s".into(),
                    offset: 7,
                    cols: 80,
                    rows: 24,
                },
                r#"{"type":"session","id":"s","offset":7,"cols":80,"rows":24}"#,
            ),
            (
                TerminalMessage::Redraw {
                    offset: 4000,
                    bytes: 900,
                },
                r#"{"type":"redraw","offset":4000,"bytes":900}"#,
            ),
            (
                TerminalMessage::Resize {
                    cols: 100,
                    rows: 30,
                },
                r#"{"type":"resize","cols":100,"rows":30}"#,
            ),
            (
                TerminalMessage::Exit { code: 3 },
                r#"{"type":"exit","code":3}"#,
            ),
        ];
        for (msg, json) in cases {
            assert_eq!(serde_json::to_string(&msg).ok().as_deref(), Some(json));
            assert_eq!(
                serde_json::from_str::<TerminalMessage>(json).ok(),
                Some(msg)
            );
        }
    }
}
