//! The installation CA: the authority the proxy signs its certificates for intercepted hosts
//! with (issue #34). Made once, at the first start, in the data directory: its key in a file only
//! the server's user may read (like the secrets key), its certificate next to it, which every
//! sandbox trusts from boot. Leaf certificates are made on demand per host and kept a while.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;

/// The key's file in the data directory (mode 0600).
pub const CA_KEY_FILE: &str = "egress-ca.key";
/// The certificate's file in the data directory (public: every sandbox gets it).
pub const CA_CERT_FILE: &str = "egress-ca.crt";

/// How long a leaf certificate is valid, and how long the proxy reuses one: short, so that a
/// leaf copied out of the proxy's memory is soon worthless, and long against the cost of making
/// one per connection.
const LEAF_VALID: Duration = Duration::from_secs(24 * 60 * 60);
const LEAF_REUSE: Duration = Duration::from_secs(12 * 60 * 60);
/// Hosts whose leaf is kept: a sandbox naming endless hosts costs a bounded cache.
const MAX_LEAVES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("the egress CA file {path} could not be {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "the egress CA key {0} is readable by others than its owner: run `chmod 600 {0}` (and \
         consider it exposed: move it and {CA_CERT_FILE} away and restart to make a new CA)"
    )]
    Exposed(PathBuf),
    #[error(
        "the egress CA key {0} does not hold a key: restore it from a backup, or move it and \
         {CA_CERT_FILE} away and restart to make a new CA"
    )]
    Malformed(PathBuf),
    #[error("making a certificate: {0}")]
    Sign(#[from] rcgen::Error),
    #[error("the certificate for {host} could not be used for TLS: {why}")]
    Leaf { host: String, why: String },
}

/// The installation CA and its cache of leaf certificates.
pub struct InstallationCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<String, (Instant, Arc<CertifiedKey>)>>,
}

impl std::fmt::Debug for InstallationCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InstallationCa(..)")
    }
}

impl InstallationCa {
    /// Reads the CA in `data_dir`, or makes it there when it has no key yet.
    pub fn open(data_dir: &Path) -> Result<InstallationCa, CaError> {
        let key_path = data_dir.join(CA_KEY_FILE);
        let cert_path = data_dir.join(CA_CERT_FILE);
        let io = |path: &Path, what| {
            let path = path.to_path_buf();
            move |source| CaError::Io { path, what, source }
        };
        let (key, made) = match std::fs::read_to_string(&key_path) {
            Ok(text) => {
                let mode = std::fs::metadata(&key_path)
                    .map_err(io(&key_path, "read"))?
                    .permissions()
                    .mode();
                if mode & 0o077 != 0 {
                    return Err(CaError::Exposed(key_path));
                }
                let key =
                    KeyPair::from_pem(&text).map_err(|_| CaError::Malformed(key_path.clone()))?;
                (key, false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate()?;
                std::fs::create_dir_all(data_dir).map_err(io(data_dir, "made"))?;
                // create_new: two servers starting on one data directory cannot both write one.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&key_path)
                    .map_err(io(&key_path, "made"))?;
                file.write_all(key.serialize_pem().as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io(&key_path, "written"))?;
                tracing::info!(path = %key_path.display(), "made the egress CA key");
                (key, true)
            }
            Err(e) => return Err(io(&key_path, "read")(e)),
        };
        let existing = if made {
            None
        } else {
            match std::fs::read_to_string(&cert_path) {
                Ok(pem) => Some(pem),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(&cert_path, "read")(e)),
            }
        };
        let (issuer, pem) = match existing
            .and_then(|pem| Some((Issuer::from_ca_cert_pem(&pem, clone_key(&key)?).ok()?, pem)))
        {
            Some(found) => found,
            // No certificate (or an unreadable one) for the key: made anew from it. Sandboxes
            // get the new one at their next boot.
            None => {
                let params = ca_params();
                let cert = params.self_signed(&key)?;
                let pem = cert.pem();
                std::fs::write(&cert_path, &pem).map_err(io(&cert_path, "written"))?;
                std::fs::set_permissions(&cert_path, std::fs::Permissions::from_mode(0o644))
                    .map_err(io(&cert_path, "made readable"))?;
                (Issuer::new(params, key), pem)
            }
        };
        Ok(InstallationCa {
            issuer,
            pem,
            provider: super::tls::provider(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate (PEM), what sandboxes trust.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// A certificate and key for `host` (a normalized name or an address), signed by the CA:
    /// the one made for it earlier while that is fresh, else a new one.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let now = Instant::now();
        {
            let leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((made, leaf)) = leaves.get(host) {
                if now.duration_since(*made) < LEAF_REUSE {
                    return Ok(leaf.clone());
                }
            }
        }
        let leaf = Arc::new(self.make_leaf(host)?);
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if leaves.len() >= MAX_LEAVES {
            leaves.retain(|_, (made, _)| now.duration_since(*made) < LEAF_REUSE);
            if leaves.len() >= MAX_LEAVES {
                leaves.clear();
            }
        }
        leaves.insert(host.to_string(), (now, leaf.clone()));
        Ok(leaf)
    }

    fn make_leaf(&self, host: &str) -> Result<CertifiedKey, CaError> {
        let bad = |why: String| CaError::Leaf {
            host: host.to_string(),
            why,
        };
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match host.parse::<IpAddr>() {
            Ok(addr) => SanType::IpAddress(addr),
            Err(_) => SanType::DnsName(host.try_into()?),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        let now = time_now();
        // A few minutes back: a sandbox's clock a little behind the server's still accepts it.
        params.not_before = now - Duration::from_secs(5 * 60);
        params.not_after = now + LEAF_VALID;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = self
            .provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| bad(e.to_string()))?;
        Ok(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            signer,
        ))
    }
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "agenthold");
    dn.push(DnType::CommonName, "agenthold egress CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time_now();
    params.not_before = now - Duration::from_secs(60 * 60);
    params.not_after = now + Duration::from_secs(10 * 365 * 24 * 60 * 60);
    params
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// A second handle on the same key (rcgen's issuer owns the one it signs with).
fn clone_key(key: &KeyPair) -> Option<KeyPair> {
    KeyPair::from_pem(&key.serialize_pem()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_with_a_private_key_and_refused_when_exposed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = InstallationCa::open(dir.path()).unwrap();
        let key = dir.path().join(CA_KEY_FILE);
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = InstallationCa::open(dir.path()).unwrap();
        assert_eq!(ca.certificate_pem(), again.certificate_pem(), "made once");
        let a = ca.leaf("api.test").unwrap();
        assert!(Arc::ptr_eq(&a, &ca.leaf("api.test").unwrap()), "cached");
        ca.leaf("203.0.113.9").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = InstallationCa::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::write(&key, "not a key").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            InstallationCa::open(dir.path()),
            Err(CaError::Malformed(_))
        ));
    }
}
