//! What listens in the sandbox, and connections to it for previews. Neither counts as use
//! here: a listing must not keep an agent awake, and a preview holds its agent through the
//! gateway for as long as it streams.

use agenthold_proto::{ListeningPort, PortConnect, PortsList};

use super::{ConnError, SandboxConn};
use crate::tunnel::registry::LinkStream;

impl SandboxConn {
    /// The TCP ports listening in the sandbox, by port.
    pub async fn list_ports(&self) -> Result<Vec<ListeningPort>, ConnError> {
        let (_, ports) = self.open(PortsList {}).await?;
        Ok(ports.ports)
    }

    /// A connection to `port` on the sandbox's own loopback: its bytes, both ways.
    pub async fn connect_port(&self, port: u16) -> Result<LinkStream, ConnError> {
        let (stream, _) = self.open(PortConnect { port }).await?;
        Ok(stream)
    }
}
