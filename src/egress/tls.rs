//! The TLS of an intercepted connection: toward the sandbox, a certificate for the host it asked
//! for signed by the installation CA; toward the destination, a client that verifies it against
//! the public roots plus `sandbox.egress.ca_certificates`.

use std::sync::Arc;

use tokio_rustls::rustls::client::ClientConfig;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, ServerConfig};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::RootCertStore;

use super::ca::{CaError, InstallationCa};

/// The protocols an intercepted connection may speak, as ALPN names them.
pub const H2: &[u8] = b"h2";
pub const HTTP11: &[u8] = b"http/1.1";

/// What the proxy needs to intercept: the CA and the client toward destinations.
pub struct Interception {
    pub ca: Arc<InstallationCa>,
    provider: Arc<CryptoProvider>,
    upstream: ClientConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("sandbox.egress.ca_certificates: {0}")]
    ExtraRoots(String),
    #[error("{0}")]
    Rustls(#[from] tokio_rustls::rustls::Error),
}

/// The build's TLS provider: ring, as in the rest of the tree. rustls deprecates it only for
/// lacking post-quantum key exchange, which ring does not offer.
#[allow(deprecated)]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

impl Interception {
    /// `extra_roots`: the PEM of `sandbox.egress.ca_certificates`, if set.
    pub fn new(
        ca: Arc<InstallationCa>,
        extra_roots: Option<&str>,
    ) -> Result<Interception, TlsSetupError> {
        let provider = provider();
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(pem) = extra_roots {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| TlsSetupError::ExtraRoots(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsSetupError::ExtraRoots(e.to_string()))?;
            }
        }
        let upstream = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Interception {
            ca,
            provider,
            upstream,
        })
    }

    /// The client toward a destination, offering `alpn`.
    pub fn upstream(&self, alpn: Vec<Vec<u8>>) -> Arc<ClientConfig> {
        let mut config = self.upstream.clone();
        config.alpn_protocols = alpn;
        Arc::new(config)
    }

    /// The server toward the sandbox for `host`, offering `alpn` (what the destination chose).
    pub fn server(&self, host: &str, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, CaError> {
        let leaf = self.ca.leaf(host)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| CaError::Leaf {
                host: host.to_string(),
                why: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCert(leaf)));
        config.alpn_protocols = alpn;
        Ok(Arc::new(config))
    }
}

/// The connection's one certificate, whatever name the ClientHello asks for: the proxy decided on
/// the name it dialled, and a certificate for that name is all it will show.
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}
