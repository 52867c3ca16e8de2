//! sandboxd: the agenthold in-sandbox daemon, and the wire protocol it shares with the server.
//!
//! The server's fake driver runs [`agent::run`] in-process with [`SandboxOptions::fake`].

pub mod account;
pub mod agent;
pub mod backoff;
pub mod boot;
pub mod channels;
pub mod dial;
pub mod duplex;
pub mod fsid;
pub mod fspath;
pub mod mux;
pub mod paths;
pub mod procs;
pub mod proto;
pub mod sandbox;
pub mod serve;
pub mod terminal;
pub mod uploads;
pub mod wsio;

pub use account::Account;
pub use agent::{run, AgentError};
pub use sandbox::{CpuScope, Sandbox, SandboxOptions};
