//! sandboxd: the agenthold in-sandbox daemon. The wire protocol it shares with the server is the
//! `agenthold-proto` crate.
//!
//! The server's fake driver runs [`agent::run`] in-process with [`SandboxOptions::fake`].

pub mod account;
pub mod agent;
pub mod backoff;
pub mod channels;
pub mod cpu;
pub mod dial;
pub mod duplex;
pub mod fsid;
pub mod fspath;
pub mod kernel;
pub mod paths;
pub mod process;
pub mod procs;
pub mod sandbox;
pub mod serve;
pub mod spawn;
pub mod terminal;
pub mod trust;
pub mod uploads;

pub use account::Account;
pub use agent::{run, AgentError};
pub use cpu::CpuScope;
pub use sandbox::{Sandbox, SandboxOptions};
