//! The ids sandboxd makes for terminal sessions and background processes.

/// Characters of a terminal session id, and its length (sandboxd makes them; anything else is
/// simply not a session).
pub const SESSION_ID_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
pub const SESSION_ID_LEN: usize = 16;

/// True for a string that could be a session id; anything else is simply not found.
pub fn is_session_id(id: &str) -> bool {
    id.len() == SESSION_ID_LEN && id.bytes().all(|b| SESSION_ID_ALPHABET.contains(&b))
}
