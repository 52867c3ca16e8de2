//! Choosing and starting the driver `sandbox.driver` names, so that the server above knows
//! only the [`Driver`] trait: another driver is one more arm here.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;

use super::fake::FakeDriver;
use super::Driver;
use crate::config::{Config, DriverKind};
use crate::metrics::Repairs;
use crate::store::SubnetBook;

/// What a driver gets from the server beside the config: where the sandboxes reach it, and
/// where it keeps and counts what it needs.
pub struct Wiring {
    /// Where each agent network's subnet is recorded, so no two agents share one.
    pub subnets: Arc<dyn SubnetBook>,
    /// The tunnel's listener.
    pub tunnel: SocketAddr,
    /// The egress proxy's port, on the tunnel's addresses.
    pub egress_port: u16,
    /// The egress resolver's UDP port, in transparent mode.
    pub dns_port: Option<u16>,
    pub repairs: Repairs,
    /// The installation CA's certificate (PEM): every sandbox trusts it, next to
    /// `sandbox.egress.ca_certificates`, for the destinations the proxy intercepts.
    pub egress_ca: String,
}

/// Starts the configured driver (connecting to its engine, which may fill the sandboxd
/// volume when the server runs in a container).
pub async fn open(config: &Config, wiring: Wiring) -> anyhow::Result<Arc<dyn Driver>> {
    Ok(match config.sandbox.driver {
        DriverKind::Fake => Arc::new(FakeDriver::new(config, wiring.tunnel)),
        DriverKind::Docker => Arc::new(
            super::docker::DockerDriver::connect(
                config,
                wiring.subnets,
                wiring.tunnel,
                wiring.egress_port,
                wiring.dns_port,
                wiring.repairs,
                &wiring.egress_ca,
            )
            .await
            .context("starting the docker driver")?,
        ),
    })
}
