//! What lets a browser into a preview: a cookie for that preview's host alone, signed by the
//! server, and the one-time codes that hand a signed-in person's access from the API's origin
//! to a preview's.
//!
//! A grant names its preview by id, so it opens that preview and nothing else, and stops
//! opening it once the preview is deleted (a new preview on the same port has a new id).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::store::{constant_time_eq, new_token};

/// The cookie a preview's host sets; stripped before a request reaches the app.
pub const COOKIE: &str = "agenthold_preview";
/// How long a grant lasts at most (less when its preview expires sooner).
pub const GRANT_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// How long a sign-in hand-off code may wait to be used.
const CODE_TTL: Duration = Duration::from_secs(60);
/// Codes outstanding at most: more are refused until some are used or expire.
const MAX_CODES: usize = 10_000;

/// Signs and checks grants with the server's preview key.
pub struct Grants {
    key: Vec<u8>,
    codes: Mutex<HashMap<String, (String, Instant)>>,
}

impl Grants {
    pub fn new(key: Vec<u8>) -> Grants {
        Grants {
            key,
            codes: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self, message: &str) -> String {
        // HMAC takes a key of any length.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(message.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A cookie value granting preview `id` until `ends` (Unix seconds).
    pub fn sign(&self, id: &str, ends: i64) -> String {
        let message = format!("{id}.{ends}");
        format!("{message}.{}", self.mac(&message))
    }

    /// Whether `value` grants preview `id` at `now` (Unix seconds).
    pub fn allows(&self, value: &str, id: &str, now: i64) -> bool {
        let mut parts = value.rsplitn(2, '.');
        let (Some(mac), Some(message)) = (parts.next(), parts.next()) else {
            return false;
        };
        let Some((granted, ends)) = message.split_once('.') else {
            return false;
        };
        let Ok(ends) = ends.parse::<i64>() else {
            return false;
        };
        granted == id
            && ends > now
            && constant_time_eq(mac.as_bytes(), self.mac(message).as_bytes())
    }

    /// A one-time code for preview `id`, or `None` when too many are outstanding.
    pub fn new_code(&self, id: &str) -> Option<String> {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        codes.retain(|_, (_, at)| now.duration_since(*at) < CODE_TTL);
        if codes.len() >= MAX_CODES {
            return None;
        }
        let code = new_token();
        codes.insert(code.clone(), (id.to_string(), now));
        Some(code)
    }

    /// Spends `code`: the preview it was made for, if it is still good.
    pub fn take_code(&self, code: &str) -> Option<String> {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        let (id, at) = codes.remove(code)?;
        (at.elapsed() < CODE_TTL).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_opens_its_preview_until_it_ends_and_nothing_else() {
        let g = Grants::new(b"key".to_vec());
        let v = g.sign("p1", 100);
        assert!(g.allows(&v, "p1", 99));
        assert!(!g.allows(&v, "p1", 100), "ended");
        assert!(!g.allows(&v, "p2", 99), "another preview");
        assert!(
            !Grants::new(b"other".to_vec()).allows(&v, "p1", 99),
            "another key"
        );
        let forged = v.replace(".100.", ".999.");
        assert!(!g.allows(&forged, "p1", 150), "a longer end is not signed");
        for junk in ["", ".", "p1", "p1.100", "p1.x.abc", "..."] {
            assert!(!g.allows(junk, "p1", 0), "{junk:?}");
        }
    }

    #[test]
    fn a_code_is_spent_once() {
        let g = Grants::new(b"key".to_vec());
        let c = g.new_code("p1").expect("a code");
        assert_eq!(g.take_code(&c).as_deref(), Some("p1"));
        assert_eq!(g.take_code(&c), None);
        assert_eq!(g.take_code("made-up"), None);
    }
}
