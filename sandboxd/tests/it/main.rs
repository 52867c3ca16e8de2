//! sandboxd's channels tested through real headers on a real mux session.

mod agent;
mod code;
mod exec;
mod fs;
mod harness;
mod ports;
mod process;
mod protocol;
mod terminal;
