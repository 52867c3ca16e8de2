//! Agent sessions: conversations with a harness (a coding agent speaking the Agent Client
//! Protocol) that runs in the agent's sandbox, and the approval queue their permission requests
//! go to.

pub mod record;
