//! The Docker driver's own errors, turned into [`DriverError`] at the trait boundary.

use crate::driver::DriverError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("cannot reach the Docker engine{endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("image {image:?} is not available: {why}")]
    ImageMissing { image: String, why: String },
    #[error("no free /{bits} subnet is left in sandbox.docker.network_pool {pool}")]
    PoolExhausted { pool: String, bits: u8 },
    #[error("recording the sandbox's subnet: {0}")]
    Store(#[from] StoreError),
    #[error("sandboxd: {0}")]
    Sandboxd(String),
    #[error("isolating the sandbox from the host: {0}")]
    Firewall(String),
    /// An object has the name of one of ours but not our labels: somebody else made it, and it
    /// is neither adopted nor removed.
    #[error(
        "a Docker {kind} named {name} exists that agenthold did not make (it lacks agenthold's \
         labels); agenthold leaves it alone: remove or rename it, then start the agent again"
    )]
    Foreign { kind: &'static str, name: String },
    /// The agent's home was removed outside agenthold (with its container, for a volume).
    #[error(
        "the agent's home ({home}) is gone, removed outside agenthold, and its files with it; \
         rebuild the agent to give it a new, empty home"
    )]
    HomeMissing { home: String },
    /// Making, mounting, growing or removing an agent's disk image.
    #[error("the agent's disk: {0}")]
    Disk(String),
    #[error("{0}")]
    Other(String),
}

impl DockerError {
    /// Docker answered 404: what the call named no longer exists.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DockerError::Api { source, .. } if is_not_found(source))
    }

    pub fn api(what: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> DockerError {
        let what = what.into();
        move |source| DockerError::Api { what, source }
    }
}

/// The HTTP status of a Docker error answer, if it was one.
pub fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Docker answered 404: the object does not exist.
pub fn is_not_found(e: &bollard::errors::Error) -> bool {
    status_of(e) == Some(404)
}

/// Errors that mean the engine itself is down or unreachable, rather than that it refused.
fn is_transport(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error::*;
    matches!(
        e,
        IOError { .. }
            | HyperResponseError { .. }
            | RequestTimeoutError
            | HyperLegacyError { .. }
            | SocketNotFoundError(..)
    )
}

impl From<DockerError> for DriverError {
    fn from(e: DockerError) -> DriverError {
        match e {
            DockerError::Connect { .. } => DriverError::Unavailable(e.to_string()),
            DockerError::Api { ref source, .. } if is_transport(source) => {
                DriverError::Unavailable(e.to_string())
            }
            DockerError::ImageMissing { image, why } => DriverError::ImageMissing { image, why },
            other => DriverError::Failed(other.to_string()),
        }
    }
}
