//! The sandbox driver: what makes, starts, stops and removes the sandboxes.
//!
//! Every method is idempotent (creating what exists, stopping what is stopped, destroying what is
//! gone all succeed), so reconcile can repeat any of them after a crash without harm.

pub mod docker;
pub mod fake;
mod open;
pub mod pull;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::agents::runtimes::EngineRuntimes;

pub use open::{open, Wiring};
pub use pull::{PullMeter, PullSink};

/// What a sandbox is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSpec {
    pub id: String,
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    /// The home's size limit; `None` for a home without one (the host's disk).
    pub disk_mb: Option<u64>,
    /// The engine's runtime to run it with (`runc`, `runsc`).
    pub runtime: String,
    /// The agent may become root: its container is made without `no-new-privileges`, so a
    /// setuid program (`sudo`) can raise a process to uid 0. Only this agent's.
    pub allow_root: bool,
}

impl SandboxSpec {
    /// The spec of `agent`, with `default_runtime` for an agent that names none (made before
    /// agents had a runtime of their own).
    pub fn of(agent: &crate::model::Agent, default_runtime: &str) -> SandboxSpec {
        SandboxSpec {
            id: agent.id.clone(),
            image: agent.image.clone(),
            cpus: agent.cpus,
            memory_mb: agent.memory_mb,
            disk_mb: agent.disk_mb,
            runtime: if agent.runtime.is_empty() {
                default_runtime.to_string()
            } else {
                agent.runtime.clone()
            },
            allow_root: agent.allow_root,
        }
    }

    /// The spec of the agent `new` is about to become.
    pub fn of_new(new: &crate::model::NewAgent) -> SandboxSpec {
        SandboxSpec {
            id: new.id.clone(),
            image: new.image.clone(),
            cpus: new.cpus,
            memory_mb: new.memory_mb,
            disk_mb: new.disk_mb,
            runtime: new.runtime.clone(),
            allow_root: new.allow_root,
        }
    }

    /// What the sandbox is made from that a running one cannot change (all but its id, CPUs
    /// and memory), as one string: a warm pool entry is claimed only by a create whose spec has
    /// the same digest (its CPUs and memory are changed at the claim), and one whose digest or
    /// limits the config no longer gives is stale.
    pub fn digest(&self) -> String {
        format!(
            "image={} runtime={} diskMb={} allowRoot={}",
            self.image,
            self.runtime,
            self.disk_mb.map_or("none".to_string(), |d| d.to_string()),
            self.allow_root
        )
    }

    /// Its CPU and memory limits.
    pub fn limits(&self) -> Limits {
        Limits {
            cpus: self.cpus,
            memory_mb: self.memory_mb,
        }
    }

    /// Whether the container is made with `no-new-privileges`, when the server's config asks for
    /// it (`configured`): always, except for an agent allowed root, whose `sudo` needs setuid.
    /// Capabilities are dropped all the same, so root stays root inside the container only.
    pub fn no_new_privileges(&self, configured: bool) -> bool {
        configured && !self.allow_root
    }
}

pub use crate::model::Limits;

/// The message of a start that asked the engine for a runtime it lacks.
pub fn missing_runtime(runtime: &str, have: &[String]) -> String {
    format!(
        "the container engine has no runtime {runtime:?} (it has {}): install it and register \
         it with the engine (scripts/docker-setup.sh does so for runsc), or choose another \
         runtime and rebuild",
        have.join(", ")
    )
}

/// What the driver sees of a sandbox right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxStatus {
    /// No sandbox exists (never made, or removed from outside).
    Missing,
    Stopped,
    Running,
    /// Frozen: its processes are kept but get no CPU.
    Paused,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub status: SandboxStatus,
}

/// Something that happened to a sandbox outside the server's own operations.
#[derive(Debug, Clone, PartialEq)]
pub enum DriverEvent {
    Started(String),
    Stopped(String),
    Removed(String),
    Paused(String),
    Unpaused(String),
}

impl DriverEvent {
    /// The agent whose sandbox it happened to.
    pub fn agent(&self) -> &str {
        match self {
            DriverEvent::Started(id)
            | DriverEvent::Stopped(id)
            | DriverEvent::Removed(id)
            | DriverEvent::Paused(id)
            | DriverEvent::Unpaused(id) => id,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("the sandbox driver is unavailable: {0}")]
    Unavailable(String),
    /// The image is neither on the machine nor could it be pulled; `why` says what the
    /// registry or the engine answered.
    #[error("image {image:?} is not available: {why}")]
    ImageMissing { image: String, why: String },
    #[error("{0}")]
    Failed(String),
}

#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// `docker` or `fake`, as reported by the health route.
    fn kind(&self) -> &'static str;
    /// The runtimes the engine has.
    fn runtimes(&self) -> EngineRuntimes;
    /// The networks sandboxes' addresses come from: the API refuses every request from them (a
    /// sandbox may not drive agenthold), and the egress proxy never dials them (nor one
    /// sandbox another through it).
    fn sandbox_networks(&self) -> Vec<ipnet::IpNet>;
    /// Why this driver cannot give a home a size limit (`diskMb`), or `None` when it can.
    fn disk_limits_unavailable(&self) -> Option<String> {
        None
    }
    /// The limit on what a sandbox writes outside its home and `/tmp`, in MiB, if this driver
    /// enforces one.
    fn rootfs_limit_mb(&self) -> Option<u64> {
        None
    }
    /// The engine's id of what `image` names now (it changes when an image is made anew or
    /// pulled again under the same name); `None` when the driver has no images, or the engine
    /// does not have this one; an error when the engine could not say.
    async fn image_id(&self, _image: &str) -> Result<Option<String>, DriverError> {
        Ok(None)
    }
    /// What this driver puts into every sandbox it makes beside the sandbox's own spec (the
    /// engine settings, limits, mounts and capabilities, the ports and certificates sandboxes
    /// are given to reach the server), as one string: a warm pool entry made when it was
    /// different is stale. Empty for a driver with nothing of the kind.
    fn made_with(&self) -> String {
        String::new()
    }
    /// The engine's id of the image sandbox `id` was made from; `None` when the driver has no
    /// images, or there is no such sandbox.
    async fn made_from(&self, _id: &str) -> Result<Option<String>, DriverError> {
        Ok(None)
    }
    /// Makes the sandbox (and whatever it needs: image, home, network) without starting it.
    /// A pull of a missing image reports its progress to `pull`.
    async fn create(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError>;
    /// Hands the sandbox a fresh boot token and starts it; creates it first if it is missing
    /// (reporting a pull to `pull`, as `create` does).
    async fn start(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DriverError>;
    /// Stops the sandbox (a paused one is thawed first, so its processes see the stop).
    async fn stop(&self, id: &str) -> Result<(), DriverError>;
    /// Freezes the running sandbox: its processes and memory are kept, it gets no CPU.
    /// Pausing a paused sandbox succeeds.
    async fn pause(&self, id: &str) -> Result<(), DriverError>;
    /// Thaws a paused sandbox; one that is not paused is left as it is.
    async fn unpause(&self, id: &str) -> Result<(), DriverError>;
    /// Gives the running sandbox `id` new CPU and memory limits (a claimed warm pool entry
    /// gets its agent's).
    async fn resize(&self, id: &str, limits: Limits) -> Result<(), DriverError>;
    /// Puts `token` into the stopped sandbox ahead of its next start, so that a `start` with
    /// the same token has less to do (waking a sandbox is what a person waits for). `false`
    /// when the driver does nothing ahead of time, or the sandbox is not stopped; `start`
    /// still hands over any token it is given.
    async fn stage_boot(&self, _spec: &SandboxSpec, _token: &str) -> Result<bool, DriverError> {
        Ok(false)
    }
    /// Remakes the sandbox from `spec`, keeping its home (reporting a pull to `pull`).
    async fn rebuild(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError>;
    /// Removes the sandbox, its home and its network.
    async fn destroy(&self, id: &str) -> Result<(), DriverError>;
    async fn inspect(&self, id: &str) -> Result<SandboxStatus, DriverError>;
    /// Why a sandbox that stopped by itself stopped, when the reason makes it a failure (it ran
    /// out of memory); `None` for an ordinary stop, or when the driver cannot tell.
    async fn failure_reason(&self, _id: &str) -> Option<String> {
        None
    }
    /// How a stopped sandbox ended (its exit code, the last lines it logged), for the message
    /// of a start it cut short; `None` when the driver cannot tell.
    async fn exit_report(&self, _id: &str) -> Option<String> {
        None
    }
    /// Every sandbox this installation owns, whether or not an agent knows it.
    async fn list(&self) -> Result<Vec<SandboxInfo>, DriverError>;
    /// Changes seen outside the server's own calls, for as long as the driver lives, each with
    /// the time it happened (events arrive late; the lifecycle drops those older than its own
    /// last move of the agent).
    fn events(&self) -> BoxStream<'static, (DriverEvent, std::time::SystemTime)>;
    /// The server is stopping. Sandboxes that can outlive it (containers) are left alone.
    async fn shutdown(&self) {}
    /// The agent whose sandbox connects from `peer` to the server's address `local` on its
    /// own network, for the egress proxy; `None` for anyone else, and always for a driver
    /// whose sandboxes have no network of their own.
    async fn sandbox_at(
        &self,
        _local: std::net::IpAddr,
        _peer: std::net::IpAddr,
    ) -> Option<String> {
        None
    }
    /// The agent whose sandbox sends from `peer` (a DNS query, which carries no server address
    /// of its own), and the server's address on that agent's network.
    async fn sandbox_from(&self, _peer: std::net::IpAddr) -> Option<(String, std::net::IpAddr)> {
        None
    }
}
