//! The request and answer bodies of the HTTP API, declared once: the server reads and writes
//! them, the CLI and `agenthold bench` write and read them the other way, and the OpenAPI
//! document is generated from them. Every schema of the document is a type here, and only here.
//!
//! What the server keeps (the store's agent, the config's presets, the egress proxy's rules and
//! events, the driver's pull progress) has types of its own elsewhere; the API's are made from
//! them by `From` conversions that name every field, so a field added to the store or the config
//! reaches the API only when it is added to the type here as well.
//!
//! One file per resource: `agent` (the agent as shown), `agents` (its create and update bodies),
//! `pull`, `egress`, `preset`, `exec`, [`process`], `files`, `terminal` (the WebSocket's
//! messages), `terminals` (the session list), `session` (signing in), `teams` (users and tokens), `secrets`, `server` (health and
//! limits), `admin` (the config's reload) and `error`; `whole` reads the whole numbers they take. Each type is also named from
//! here.

mod admin;
mod agent;
mod agents;
mod code;
pub mod conversation;
mod egress;
mod error;
mod exec;
mod files;
mod preset;
mod previews;
pub mod process;
mod pull;
mod secrets;
mod server;
mod session;
mod teams;
mod terminal;
mod terminals;
pub(crate) mod whole;

pub use crate::model::audit::{Action as AuditAction, AuditEntry};
pub use crate::model::teams::{AgentAccess, MemberRole};
pub use admin::ConfigReload;
pub use agent::AgentOwner;
pub use agent::{Agent, AgentState, SetupState, SetupStatus};
pub use agents::{CreateAgent, ExpiringEvent, KeepAlive, UpdateAgent};
pub use code::{CodeContext, CodeError, Execution, RunCode};
pub use egress::{EgressChange, EgressDenied, EgressEvent, EgressLogEntry, EgressRules};
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use exec::{ExecBody, ExecExit, ExecLine, ExecResult, OutputStream, RunUser};
pub use files::{
    DirEntry, FileEvent, FileEventKind, FileInfo, FileWritten, FilesWritten, PathExists, RenameBody,
};
pub use preset::{PoolInfo, PresetInfo};
pub use previews::{CreatePreview, ListeningPort, Preview, PreviewAccess};
pub use pull::{PullProgress, PullStatus};
pub use secrets::{PutSecret, Secret};
pub use server::{HarnessInfo, Health, Limits};
pub use session::{PasswordSignIn, SessionStatus, SignIn, TokenSignIn};
pub use teams::{
    AccessToken, AddMember, AgentMember, CreateToken, CreateUser, CreatedToken, JoinAgent, Me,
    Role, Scope, Token, UpdateUser, User,
};
pub use terminal::{close, TerminalMessage};
pub use terminals::TerminalSession;
