//! agenthold: self-hosted sandboxes for AI agents.

pub mod activity;
pub mod agents;
pub mod api;
pub mod audit;
pub mod bench;
pub mod cli;
pub mod code;
pub mod config;
pub mod credentials;
pub mod driver;
pub mod egress;
pub mod events;
pub mod launch;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod previews;
pub mod server;
pub mod sessions;
pub mod store;
pub mod teams;
pub mod tunnel;
pub mod utf8;
pub mod web;
