//! agenthold: self-hosted sandboxes for AI agents.

pub mod cli;
pub mod config;
pub mod model;
pub mod store;
pub mod web;
