//! Dials the server's tunnel by address: sandboxd never resolves names (static glibc).

use std::net::SocketAddr;
use std::time::Duration;

use agenthold_proto::boot::{BootConfig, AGENT_HEADER};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::WebSocketStream;

/// Connecting and upgrading together must finish within this.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("tunnel URL {url:?}: {why}")]
    BadUrl { url: String, why: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server answered the upgrade with HTTP {0}")]
    Refused(u16),
    #[error("WebSocket handshake failed: {0}")]
    Handshake(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("dialing took longer than {} s", DIAL_TIMEOUT.as_secs())]
    Timeout,
}

/// Where the tunnel is, checked once.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub url: String,
}

impl Target {
    /// Accepts `ws://IP:PORT/path` only: a host name would need a DNS lookup.
    pub fn parse(url: &str) -> Result<Target, DialError> {
        let bad = |why: &str| DialError::BadUrl {
            url: url.into(),
            why: why.into(),
        };
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| bad("only ws:// URLs are supported"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let addr = authority
            .parse::<SocketAddr>()
            .map_err(|_| bad("the host must be an IP address with a port (no name lookups)"))?;
        Ok(Target {
            addr,
            url: url.into(),
        })
    }
}

pub async fn dial(
    target: &Target,
    boot: &BootConfig,
) -> Result<WebSocketStream<TcpStream>, DialError> {
    tokio::time::timeout(DIAL_TIMEOUT, dial_inner(target, boot))
        .await
        .map_err(|_| DialError::Timeout)?
}

async fn dial_inner(
    target: &Target,
    boot: &BootConfig,
) -> Result<WebSocketStream<TcpStream>, DialError> {
    let mut request = target.url.as_str().into_client_request()?;
    let bad_header = |what: &str| DialError::BadUrl {
        url: target.url.clone(),
        why: format!("the {what} cannot be sent as an HTTP header"),
    };
    let auth = HeaderValue::from_str(&format!("Bearer {}", boot.token))
        .map_err(|_| bad_header("token"))?;
    let agent = HeaderValue::from_str(&boot.agent_id).map_err(|_| bad_header("agent id"))?;
    request.headers_mut().insert("authorization", auth);
    request.headers_mut().insert(AGENT_HEADER, agent);

    let stream = TcpStream::connect(target.addr)
        .await
        .map_err(|source| DialError::Connect {
            addr: target.addr,
            source,
        })?;
    let _ = stream.set_nodelay(true);
    match tokio_tungstenite::client_async(request, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            Err(DialError::Refused(resp.status().as_u16()))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_addresses_only() {
        let t = Target::parse("ws://10.1.2.3:8090/tunnel").unwrap();
        assert_eq!(t.addr, "10.1.2.3:8090".parse().unwrap());
        assert!(Target::parse("ws://[::1]:8090/tunnel").is_ok());
        assert!(Target::parse("ws://127.0.0.1:9").is_ok());
        for bad in [
            "ws://server:8090/tunnel",
            "wss://10.0.0.1:8090/tunnel",
            "ws://10.0.0.1/tunnel",
            "ws://u:p@10.0.0.1:1/t",
            "http://10.0.0.1:1/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
