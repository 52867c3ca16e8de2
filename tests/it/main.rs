//! agenthold's integration tests, one binary: real servers on loopback ports (in this process
//! with the fake driver, or the `agenthold` binary as a process of its own), and under
//! [`docker`] the tests against a real Docker engine, which skip with one line when no engine
//! answers (`cargo test --test it docker::` selects them; `AGENTHOLD_DOCKER_TESTS=require` makes
//! a missing engine fail them).
//!
//! All of them share this process and run side by side: a test that changes or measures
//! something of the whole process holds [`common::exclusive`].

mod admin_token;
mod api;
mod cli;
mod cli_previews;
mod cli_sessions;
mod code;
mod common;
mod crash;
mod docker;
mod exec;
mod files;
mod flood;
mod lifetimes;
mod pause;
mod pool;
mod presets;
mod previews;
mod processes;
mod races;
mod real_harness;
mod reload;
mod root;
mod runtime;
mod secrets;
mod sessions;
mod teams;
mod terminal;
mod terminal_sessions;
mod tunnel;
mod wake;
