//! A typed connection to one agent's sandbox: every call the server makes of sandboxd's
//! channels for background processes (`process.rs`, `output.rs`, `stdin.rs`, and `attach.rs`
//! for a caller that talks to one over a single stream), commands (`exec.rs`) and files
//! (`files.rs`) as a method, so that its callers (the API's handlers, the setup script, and
//! next the agent sessions) neither open raw streams nor repeat how a command is launched: a
//! command reaches the sandbox only as a [`crate::launch::Launch`], with the agent's env (and
//! its granted secrets' placeholders for this session's boot, [`crate::launch::BootEnv`]) in
//! it, and a process only with the server's limits.
//!
//! A [`SandboxConn`] comes from the lifecycle: `wake_conn` wakes the agent for it, `conn` and
//! `running_conn` take one whose sandboxd is connected now. Each call opens one stream of the
//! agent's session, within its cap. What counts as use of the agent: a file call touches it and
//! an exec holds it while it runs; process calls count through the wake that got the
//! connection, so that the setup script's follower, which does not wake, keeps nobody awake.

mod attach;
mod code;
mod error;
mod exec;
mod files;
mod output;
mod ports;
mod process;
mod stdin;

use agenthold_proto::{self as proto, Channel};

pub use attach::{Attached, AttachedOutput, StdinWriter};
pub use code::CodeRunStream;
pub use error::ConnError;
pub use exec::{ExecOutput, ExecPiece, ExecRun};
pub use files::{FileReader, UploadLimit};
pub use output::{OutputPiece, OutputReader};
pub use process::{NoSuchProcess, ProcessName};

use super::registry::{Link, LinkStream};
use crate::activity::ActivityTracker;
use crate::launch::{BootEnv, ProcessLimits};

/// One agent's sandbox, as its session's link to it. Cheap to make; holds no stream itself.
#[derive(Clone)]
pub struct SandboxConn {
    id: String,
    link: Link,
    activity: ActivityTracker,
    limits: ProcessLimits,
    boot: BootEnv,
}

impl SandboxConn {
    /// The sandbox of agent `id` over `link`; its uses are counted in `activity`, its
    /// processes started within `limits`, its programs started with `boot`'s variables.
    pub fn new(
        id: &str,
        link: Link,
        activity: ActivityTracker,
        limits: ProcessLimits,
        boot: BootEnv,
    ) -> SandboxConn {
        SandboxConn {
            id: id.to_string(),
            link,
            activity,
            limits,
            boot,
        }
    }

    /// What a program of `agent` started over this connection gets as its variables (for the
    /// channels that take plain variables: terminals and code kernels).
    pub fn launch_env(
        &self,
        agent: &crate::model::Agent,
    ) -> std::collections::BTreeMap<String, String> {
        self.boot.launch_env(agent)
    }

    /// Opens `header`'s channel on a fresh stream: the stream, ready for the channel's own
    /// bytes, and sandboxd's reply.
    async fn open<C: Channel>(&self, header: C) -> Result<(LinkStream, C::Reply), ConnError> {
        let mut stream = self.link.open().await?;
        let reply = proto::open(&mut stream, header).await?;
        Ok((stream, reply))
    }
}
