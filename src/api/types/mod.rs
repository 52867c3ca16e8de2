//! The request and answer bodies of the HTTP API, declared once: the server reads and writes
//! them, the CLI and `agenthold bench` write and read them the other way, and the OpenAPI
//! document is generated from them. The agent itself is [`crate::model::Agent`].

//!
//! One file per resource: `agents`, `exec`, [`process`], `terminal`, `server` (health
//! and limits), `admin` (the config's reload) and `error`; `whole` reads the whole numbers they
//! take. Each type is also named from here.

mod admin;
mod agents;
mod error;
mod exec;
pub mod process;
mod server;
mod terminal;
pub(crate) mod whole;

pub use admin::ConfigReload;
pub use agents::{CreateAgent, UpdateAgent};
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use exec::{ExecBody, ExecExit, ExecLine, ExecResult, OutputStream};
pub use server::{Health, Limits};
pub use terminal::{close, TerminalMessage};
