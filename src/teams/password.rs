//! Users' passwords: Argon2id with the crate's defaults (OWASP's parameters: 19 MiB, 2 passes,
//! one lane), in PHC strings. Hashing is slow on purpose, so it runs off the async threads.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::RngCore;
use std::sync::OnceLock;
use tokio::sync::Semaphore;

/// Hashes at once, at most: each takes 19 MiB and a core for a while, and sign-in tries come
/// from anyone, so a flood of them waits here rather than filling memory and the blocking pool.
const AT_ONCE: usize = 2;

fn slots() -> &'static Semaphore {
    static SLOTS: Semaphore = Semaphore::const_new(AT_ONCE);
    &SLOTS
}

/// Shortest and longest password accepted (the upper bound keeps a hash's cost bounded).
pub const MIN_LEN: usize = 8;
pub const MAX_LEN: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("password must be {MIN_LEN} to {MAX_LEN} characters")]
    Length,
    #[error("hashing the password failed: {0}")]
    Hash(String),
    #[error("a password task died: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Checks the rule a new password must meet.
pub fn check(password: &str) -> Result<(), PasswordError> {
    let n = password.chars().count();
    if (MIN_LEN..=MAX_LEN).contains(&n) {
        Ok(())
    } else {
        Err(PasswordError::Length)
    }
}

fn hash_now(password: &str) -> Result<String, PasswordError> {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let salt = SaltString::encode_b64(&bytes).map_err(|e| PasswordError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// The PHC string to keep for `password` (which must have passed [`check`]).
pub async fn hash(password: String) -> Result<String, PasswordError> {
    let _slot = slots().acquire().await;
    tokio::task::spawn_blocking(move || hash_now(&password)).await?
}

/// A hash no password is checked against for real: a sign-in with an unknown name verifies
/// against it, so that it takes as long as one with a known name.
fn dummy() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_now("not a password anyone has: only its cost matters")
            .unwrap_or_else(|_| String::new())
    })
}

/// Whether `password` is the one behind `stored` (a PHC string); with `None` (no such user, or
/// one without a password) it does the same work and answers no.
pub async fn verify(password: String, stored: Option<String>) -> Result<bool, PasswordError> {
    let _slot = slots().acquire().await;
    tokio::task::spawn_blocking(move || {
        let (phc, real) = match &stored {
            Some(s) => (s.as_str(), true),
            None => (dummy(), false),
        };
        let ok = PasswordHash::new(phc).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        });
        ok && real
    })
    .await
    .map_err(PasswordError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse".into()).await.unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse".into(), Some(h.clone()))
            .await
            .unwrap());
        assert!(!verify("wrong horse!".into(), Some(h)).await.unwrap());
        assert!(!verify("correct horse".into(), None).await.unwrap());
    }

    #[test]
    fn lengths_are_bounded() {
        assert!(check("1234567").is_err());
        assert!(check("12345678").is_ok());
        assert!(check(&"x".repeat(MAX_LEN)).is_ok());
        assert!(check(&"x".repeat(MAX_LEN + 1)).is_err());
    }
}
