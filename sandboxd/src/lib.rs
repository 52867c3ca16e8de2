//! sandboxd: the agenthold in-sandbox daemon, and the wire protocol it shares with the server.

pub mod boot;
pub mod mux;
pub mod proto;
pub mod wsio;
