//! Tests against a real Docker engine, each with its own share of it (`common::docker`).
//! They need a static sandboxd (scripts/build-sandboxd.sh) and the test images
//! (scripts/docker-setup.sh); without an engine they skip, saying so once for the binary.

mod clients;
mod code;
mod command_approvals;
mod crash;
mod daemon_restart;
mod disk;
mod egress;
mod egress_ca;
mod flood;
mod fs_identity;
mod holdings;
mod idle;
mod in_container;
mod isolation;
mod lifecycle;
mod limits;
mod outside;
mod pause;
mod pool;
mod pool_soak;
mod presets;
mod previews;
mod proc_view;
mod processes;
mod pull;
mod redteam;
mod repair;
mod root;
mod rootfs;
mod runtime;
mod secrets_proxy;
mod sessions;
mod terminal;
mod ttl;
