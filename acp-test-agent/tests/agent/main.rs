//! The agent, run as the built binary and driven over its stdio as agenthold will drive it.

mod fs;
mod harness;
mod protocol;
mod restore;
mod tool;
mod turns;
