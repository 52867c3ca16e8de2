//! Bearer and boot tokens. Only a token's SHA-256 is stored, so a leaked database does not leak
//! working tokens; a fast hash suffices because the tokens are 256 random bits, not passwords.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// A fresh token: 32 random bytes from the OS-seeded CSPRNG, as 64 hex characters.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The SHA-256 of `token`, as 64 lowercase hex characters; what the store keeps.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Compares without stopping at the first difference, so the time taken does not tell an
/// attacker how much of a guess was right. Lengths are not secret (hashes are all 64 long).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `token` is the one whose hash is `stored_hash`.
pub fn verify_token(token: &str, stored_hash: &str) -> bool {
    constant_time_eq(hash_token(token).as_bytes(), stored_hash.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hashes_are_sha256_hex() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let t = new_token();
        assert!(verify_token(&t, &hash_token(&t)));
        assert!(!verify_token(&t, &hash_token("other")));
        assert!(!verify_token(&t, ""));
    }

    #[test]
    fn constant_time_eq_compares_whole_slices() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
