//! The benchmark's cases, one file each, and what they share ([`common`]). Each returns rows
//! for the table; timings use `Instant` around the whole user-visible operation, ours and
//! Docker's alike.

pub(super) mod audit;
mod burst;
pub(super) mod code;
pub(super) mod common;
pub mod create;
mod echo;
pub(super) mod egress;
mod exec;
mod files;
mod footprint;
pub(super) mod previews;
pub(super) mod processes;
mod restart;
pub(super) mod runtime;
pub(super) mod secrets;
pub(super) mod sessions;
mod wake;

use std::path::Path;
use std::time::Duration;

use super::server_proc::ServerProc;
use crate::cli::ApiClient;

pub use burst::{burst, paused_memory, server_rss_with_agents, warm_burst};
pub use create::create_to_shell;
pub use echo::keystroke_echo;
pub use exec::exec_true;
pub use files::files;
pub use footprint::footprint;
pub use processes::processes;
pub use restart::restart;
pub use sessions::sessions;
pub use wake::{wake_from_paused_to_first_byte, wake_to_first_byte};

/// The longest one step (an agent to run, a terminal to answer) may take.
const STEP_DEADLINE: Duration = Duration::from_secs(120);

pub struct Ctx<'a> {
    pub server: &'a mut ServerProc,
    pub prefix: &'a str,
    pub image: &'a str,
    pub runs: usize,
    pub tmp: &'a Path,
    pub quick: bool,
}

impl Ctx<'_> {
    fn client(&self) -> ApiClient {
        self.server.client.clone()
    }
}
