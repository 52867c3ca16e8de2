//! The tunnel between the agenthold server and sandboxd, the daemon in each sandbox: what both
//! sides must agree on, and nothing else (the daemon is the `sandboxd` crate, the server the
//! `agenthold` one).
//!
//! sandboxd dials the server over a WebSocket ([`wsio`] makes its messages a byte stream) that
//! carries a yamux session ([`mux`]); every yamux stream is one channel, opened by a header and
//! answered by a [`reply`], both framed as [`header`] says. [`channel`] declares every channel
//! once, with the types of its header and reply ([`exec`] and [`process`] hold the larger ones,
//! [`session_id`] the ids of terminal sessions and processes); [`frame`] is the framing some
//! channels use once open; [`boot`] is what the server hands a sandbox before it starts.
//!
//! Every length is checked before anything is allocated ([`limits`] holds those more than one
//! module checks), and every check has a test that plays a hostile peer (`tests.rs`).

pub mod boot;
pub mod channel;
pub mod code;
pub mod exec;
pub mod frame;
pub mod header;
pub mod limits;
pub mod mux;
pub mod process;
pub mod reply;
pub mod session_id;
pub mod wsio;

pub use channel::*;
pub use code::{
    check_context_id, read_code_event, write_code_event, CodeContext, CodeContextCreate,
    CodeContextList, CodeContextRemove, CodeContextRestart, CodeDone, CodeError, CodeEvent,
    CodeRun, CodeRunInvalid, MAX_CODE_EVENT_LEN, MAX_CODE_LEN, MAX_CODE_OUTPUT, MAX_CONTEXTS,
};
pub use exec::{ExecExit, ExecRequest, ExecTooLarge, RunAs};
pub use frame::{Frame, FrameCodec, DATA_CHUNK};
pub use header::*;
pub use limits::*;
pub use process::{
    ProcessAttach, ProcessGet, ProcessInfo, ProcessList, ProcessOutput, ProcessRemove,
    ProcessSignal, ProcessStart, ProcessState, ProcessStdin, ProcessWait, ProcessWatch,
};
pub use reply::{ChannelError, ErrorCode, Reply};
pub use session_id::{is_session_id, SESSION_ID_ALPHABET, SESSION_ID_LEN};

/// The agent's home, as paths in the API and inside the sandbox name it.
pub const LOGICAL_HOME: &str = "/home/agent";
/// The protocol's version, which sandboxd reports at hello.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests;
