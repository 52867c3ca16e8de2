//! The key secrets are sealed with at rest, kept in a file of its own (`server.secrets_key_file`)
//! so that a copy of the database alone reveals no value, and the sealing itself.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::egress::PLACEHOLDER_PREFIX;

/// Bytes of the key.
const KEY_LEN: usize = 32;
/// Bytes of a nonce (XChaCha20's).
pub const NONCE_LEN: usize = 24;
/// What the placeholders' key is derived for: never the sealing key itself.
const PLACEHOLDER_KEY_LABEL: &[u8] = b"agenthold secrets: placeholder key v1";

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the secrets key file {path} could not be {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "the secrets key file {0} is readable by others than its owner: run `chmod 600 {0}` (and \
         consider the secrets it sealed exposed)"
    )]
    Exposed(PathBuf),
    #[error(
        "the secrets key file {0} does not hold a key (64 hexadecimal digits): restore it from a \
         backup, or move it away to start over (the secrets it sealed are then lost)"
    )]
    Malformed(PathBuf),
    #[error(
        "secret {0} could not be unsealed: it was sealed with another key than \
         server.secrets_key_file's (or the database was altered); set it again"
    )]
    Unseal(String),
}

/// Seals and unseals secret values with the installation's key.
pub struct Vault {
    cipher: XChaCha20Poly1305,
    /// Derived from the key (HMAC-SHA256 of a label): placeholders can be made, and the key not
    /// learned, from it.
    placeholder_key: [u8; 32],
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(..)")
    }
}

impl Vault {
    /// Reads the key at `path`, or makes one there (mode 0600) when there is no file.
    pub fn open(path: &Path) -> Result<Vault, VaultError> {
        let io = |what| {
            let path = path.to_path_buf();
            move |source| VaultError::Io { path, what, source }
        };
        let key = match std::fs::read_to_string(path) {
            Ok(text) => {
                let mode = std::fs::metadata(path)
                    .map_err(io("read"))?
                    .permissions()
                    .mode();
                if mode & 0o077 != 0 {
                    return Err(VaultError::Exposed(path.to_path_buf()));
                }
                hex::decode(text.trim())
                    .ok()
                    .filter(|k| k.len() == KEY_LEN)
                    .ok_or_else(|| VaultError::Malformed(path.to_path_buf()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = vec![0u8; KEY_LEN];
                rand::rng().fill_bytes(&mut key);
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(io("made (its directory)"))?;
                }
                // create_new: two servers starting on one data directory cannot both write one.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(io("made"))?;
                file.write_all(format!("{}\n", hex::encode(&key)).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io("written"))?;
                tracing::info!(path = %path.display(), "made the secrets key");
                key
            }
            Err(e) => return Err(io("read")(e)),
        };
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| VaultError::Malformed(path.to_path_buf()))?;
        let mut mac = hmac_of(&key);
        mac.update(PLACEHOLDER_KEY_LABEL);
        Ok(Vault {
            cipher,
            placeholder_key: mac.finalize().into_bytes().into(),
        })
    }

    /// What agent `agent`'s sandbox sees for secret `name` during the boot whose token hashes
    /// to `boot`: `agenthold-secret:` and an HMAC over the three, so it differs per agent and
    /// per boot, cannot be guessed without the key, and needs no storage. Each input goes in
    /// with its length first, so that no two triples make the same message.
    pub fn placeholder(&self, agent: &str, boot: &str, name: &str) -> String {
        let mut mac = hmac_of(&self.placeholder_key);
        for part in [agent, boot, name] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        format!(
            "{PLACEHOLDER_PREFIX}{}",
            hex::encode(mac.finalize().into_bytes())
        )
    }

    /// `value` sealed for secret `name` (bound to it: a sealed value moved to another name does
    /// not unseal), as (nonce, ciphertext).
    pub fn seal(&self, name: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: name.as_bytes(),
                },
            )
            // Encryption fails only past 256 GiB of plaintext; values are capped far below.
            .unwrap_or_default();
        (nonce.to_vec(), sealed)
    }

    pub fn unseal(&self, name: &str, nonce: &[u8], sealed: &[u8]) -> Result<String, VaultError> {
        if nonce.len() != NONCE_LEN {
            return Err(VaultError::Unseal(name.to_string()));
        }
        let plain = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Unseal(name.to_string()))?;
        String::from_utf8(plain).map_err(|_| VaultError::Unseal(name.to_string()))
    }
}

fn hmac_of(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length; this never fails.
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::PLACEHOLDER_LEN;

    #[test]
    fn a_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/secrets.key");
        let v = Vault::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (nonce, sealed) = v.seal("GITHUB_TOKEN", "ghp_value");
        assert!(!sealed.windows(9).any(|w| w == b"ghp_value"));
        let again = Vault::open(&path).unwrap();
        assert_eq!(
            again.unseal("GITHUB_TOKEN", &nonce, &sealed).unwrap(),
            "ghp_value"
        );
        assert!(
            again.unseal("OTHER", &nonce, &sealed).is_err(),
            "bound to its name"
        );
        let (n2, _) = v.seal("GITHUB_TOKEN", "ghp_value");
        assert_ne!(nonce, n2, "a fresh nonce each time");
    }

    #[test]
    fn placeholders_differ_by_agent_boot_and_name_and_keep_for_one() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vault::open(&dir.path().join("k")).unwrap();
        let p = v.placeholder("agent1", "boot1", "GITHUB_TOKEN");
        assert!(p.starts_with(PLACEHOLDER_PREFIX));
        assert_eq!(p.len(), PLACEHOLDER_LEN);
        assert_eq!(p, v.placeholder("agent1", "boot1", "GITHUB_TOKEN"));
        for other in [
            v.placeholder("agent2", "boot1", "GITHUB_TOKEN"),
            v.placeholder("agent1", "boot2", "GITHUB_TOKEN"),
            v.placeholder("agent1", "boot1", "OTHER"),
            // Without lengths, these would hash the same bytes as the first.
            v.placeholder("agent1b", "oot1", "GITHUB_TOKEN"),
        ] {
            assert_ne!(p, other);
        }
        let another = Vault::open(&dir.path().join("k2")).unwrap();
        assert_ne!(p, another.placeholder("agent1", "boot1", "GITHUB_TOKEN"));
    }

    #[test]
    fn an_exposed_or_broken_key_file_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        Vault::open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Vault::open(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "not a key").unwrap();
        let e = Vault::open(&path).unwrap_err().to_string();
        assert!(e.contains("64 hexadecimal digits"), "{e}");
        let other = Vault::open(&dir.path().join("other.key")).unwrap();
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        let v = Vault::open(&path).unwrap();
        let (n, s) = other.seal("A", "x");
        assert!(v
            .unseal("A", &n, &s)
            .unwrap_err()
            .to_string()
            .contains("another key"));
    }
}
