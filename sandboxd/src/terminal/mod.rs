//! Terminal sessions that outlive their viewers: a shell on a pty that keeps running when the
//! last viewer leaves (for a while), with its output kept by absolute offset for exact replay
//! and its screen kept for a redraw after any gap.
//!
//! Sessions belong to the [`Sandbox`](crate::Sandbox), so they survive tunnel reconnects; they
//! end with it (an agent that sleeps has none).

pub mod pty;
pub mod ring;
pub mod screen;
pub mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use session::{Session, SessionConfig, Step, Viewer};

use agenthold_proto::{ChannelError, ErrorCode, TerminalInfo, SESSION_ID_ALPHABET, SESSION_ID_LEN};

/// How long a session lives on without viewers when the server names no other time.
pub const DEFAULT_DETACH: Duration = Duration::from_secs(30 * 60);
/// Output kept per session for replay when the server names no other size.
pub const DEFAULT_BUFFER: usize = 1024 * 1024;
/// Bounds on the buffer a server may ask for.
pub const MIN_BUFFER: usize = 1024;
pub const MAX_BUFFER: usize = 256 * 1024 * 1024;
/// Viewers of one session at once.
pub const MAX_VIEWERS: usize = 32;
/// Sessions of one sandbox at once (each may hold a buffer of output).
pub const MAX_SESSIONS: usize = 64;
/// A fresh random session id: [`SESSION_ID_LEN`] lowercase letters and digits, long enough that
/// nobody guesses another's.
pub fn new_id() -> String {
    let mut out = String::with_capacity(SESSION_ID_LEN);
    while out.len() < SESSION_ID_LEN {
        let mut bytes = [0u8; 32];
        if getrandom::fill(&mut bytes).is_err() {
            // The kernel's generator does not fail once the system has booted; if it ever
            // does, the clock is still better than a fixed id.
            let nanos = session::now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15);
            bytes[..8].copy_from_slice(&nanos.to_le_bytes());
        }
        // Rejection sampling keeps every character equally likely (252 = 7 × 36).
        for b in bytes {
            if b < 252 && out.len() < SESSION_ID_LEN {
                out.push(SESSION_ID_ALPHABET[(b % 36) as usize] as char);
            }
        }
    }
    out
}

/// The sandbox's sessions by id.
#[derive(Default, Clone)]
pub struct Terminals {
    inner: Arc<Mutex<HashMap<String, Arc<Session>>>>,
}

impl Terminals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    fn full() -> ChannelError {
        ChannelError::new(
            ErrorCode::Busy,
            format!(
                "this sandbox already has {MAX_SESSIONS} terminal sessions; end one \
                 (DELETE …/terminals/ID) first"
            ),
        )
    }

    pub(crate) fn check_room(&self) -> Result<(), ChannelError> {
        if self.lock().len() >= MAX_SESSIONS {
            return Err(Self::full());
        }
        Ok(())
    }

    pub(crate) fn insert(&self, s: Arc<Session>) -> Result<(), ChannelError> {
        let mut map = self.lock();
        if map.len() >= MAX_SESSIONS {
            return Err(Self::full());
        }
        map.insert(s.id().to_string(), s);
        Ok(())
    }

    pub(crate) fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Ends a session; false when there is none by that id.
    pub fn kill(&self, id: &str) -> bool {
        let s = self.lock().remove(id);
        match s {
            Some(s) => {
                s.kill();
                true
            }
            None => false,
        }
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<TerminalInfo> {
        let sessions: Vec<Arc<Session>> = self.lock().values().cloned().collect();
        let mut out: Vec<TerminalInfo> = sessions.iter().map(|s| s.info()).collect();
        out.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        out
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_and_well_formed() {
        let a = new_id();
        let b = new_id();
        assert!(
            agenthold_proto::is_session_id(&a) && agenthold_proto::is_session_id(&b),
            "{a} {b}"
        );
        assert_ne!(a, b);
        for bad in [
            "",
            "short",
            "ABCDEFGHIJKLMNOP",
            "abcdefghijklmno/",
            "abcdefghijklmnopq",
        ] {
            assert!(!agenthold_proto::is_session_id(bad), "{bad}");
        }
    }
}
