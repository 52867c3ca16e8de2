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

impl DockerError {
    /// Docker refused to start a container because containerd or runc still holds a task of it
    /// (or its folder), as a dockerd killed while starting it leaves: "task <id>: already
    /// exists", "failed to start shim: mkdir …: file exists" or "id already in use", at every
    /// later start. Only a new container starts.
    pub fn is_stale_task(&self) -> bool {
        let DockerError::Api {
            source: bollard::errors::Error::DockerResponseServerError { message, .. },
            ..
        } = self
        else {
            return false;
        };
        (message.starts_with("task ") && message.ends_with("already exists"))
            || (message.contains("failed to start shim") && message.contains("file exists"))
            || message == "id already in use"
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(message: &str) -> DockerError {
        DockerError::api("starting container x")(
            bollard::errors::Error::DockerResponseServerError {
                status_code: 500,
                message: message.into(),
            },
        )
    }

    #[test]
    fn a_task_left_by_a_killed_dockerd_is_told_from_other_refusals() {
        assert!(refused("task 1f45a623ae39: already exists").is_stale_task());
        assert!(refused(
            "failed to start shim: mkdir /run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/2788: file exists: unknown"
        )
        .is_stale_task());
        assert!(refused("id already in use").is_stale_task());
        assert!(!refused("container 1f45 is already running").is_stale_task());
        assert!(!refused("Conflict. The container name \"/x\" is already in use").is_stale_task());
        assert!(!DockerError::Other("task x: already exists".into()).is_stale_task());
    }
}
