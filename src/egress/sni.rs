//! The server name a TLS client asks for (SNI), read from its ClientHello, for connections the
//! firewall redirects to the proxy from port 443: the name the rules are checked against. The
//! bytes read are handed to the destination unchanged.

use std::time::Duration;

use tls_parser::{
    parse_tls_extensions, parse_tls_plaintext, TlsExtension, TlsMessage, TlsMessageHandshake,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A TLS record's header: type, version, length.
const RECORD_HEADER: usize = 5;
/// The largest plaintext record TLS allows; a ClientHello fits in one in practice.
const MAX_RECORD: usize = 16 * 1024;
const HANDSHAKE: u8 = 22;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SniError {
    #[error("the client sent no TLS ClientHello in time")]
    Timeout,
    #[error("the client closed before its ClientHello: {0}")]
    Read(String),
    #[error("this is not a TLS ClientHello")]
    NotTls,
    #[error("the ClientHello names no server (no SNI)")]
    NoName,
}

/// Reads the first TLS record from `tcp` within `limit` and returns the server name it asks
/// for, with every byte read (to send on to the destination).
pub async fn read_client_hello(
    tcp: &mut TcpStream,
    limit: Duration,
) -> Result<(String, Vec<u8>), SniError> {
    let read = async {
        let mut buf = vec![0u8; RECORD_HEADER];
        tcp.read_exact(&mut buf)
            .await
            .map_err(|e| SniError::Read(e.to_string()))?;
        if buf[0] != HANDSHAKE {
            return Err(SniError::NotTls);
        }
        let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
        if len == 0 || len > MAX_RECORD {
            return Err(SniError::NotTls);
        }
        buf.resize(RECORD_HEADER + len, 0);
        tcp.read_exact(&mut buf[RECORD_HEADER..])
            .await
            .map_err(|e| SniError::Read(e.to_string()))?;
        Ok(buf)
    };
    let buf = tokio::time::timeout(limit, read)
        .await
        .map_err(|_| SniError::Timeout)??;
    let name = server_name(&buf)?;
    Ok((name, buf))
}

/// The host name in a ClientHello record.
pub fn server_name(record: &[u8]) -> Result<String, SniError> {
    let (_, plaintext) = parse_tls_plaintext(record).map_err(|_| SniError::NotTls)?;
    let hello = plaintext
        .msg
        .iter()
        .find_map(|m| match m {
            TlsMessage::Handshake(TlsMessageHandshake::ClientHello(h)) => Some(h),
            _ => None,
        })
        .ok_or(SniError::NotTls)?;
    let (_, extensions) =
        parse_tls_extensions(hello.ext.ok_or(SniError::NoName)?).map_err(|_| SniError::NotTls)?;
    extensions
        .iter()
        .find_map(|e| match e {
            // Type 0 is a host name, the only kind defined.
            TlsExtension::SNI(names) => names
                .iter()
                .find(|(kind, _)| kind.0 == 0)
                .and_then(|(_, name)| std::str::from_utf8(name).ok())
                .map(str::to_string),
            _ => None,
        })
        .ok_or(SniError::NoName)
}

/// A minimal ClientHello naming `name`, as a TLS client would send it: for tests.
pub fn client_hello(name: &str) -> Vec<u8> {
    let name = name.as_bytes();
    let mut sni = Vec::new();
    let list_len = name.len() + 3;
    sni.extend_from_slice(&[0, 0]); // extension type: server_name
    sni.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
    sni.extend_from_slice(&(list_len as u16).to_be_bytes());
    sni.push(0); // host_name
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    body.extend_from_slice(&sni);
    let mut hs = vec![1u8]; // client_hello
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut record = vec![HANDSHAKE, 0x03, 0x01];
    record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    record.extend_from_slice(&hs);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_comes_out_of_a_client_hello() {
        assert_eq!(server_name(&client_hello("pypi.org")).unwrap(), "pypi.org");
    }

    #[test]
    fn anything_else_is_refused_without_a_panic() {
        assert_eq!(
            server_name(b"GET / HTTP/1.1\r\n\r\n"),
            Err(SniError::NotTls)
        );
        let hello = client_hello("pypi.org");
        for cut in 0..hello.len() {
            assert!(server_name(&hello[..cut]).is_err());
        }
    }
}
