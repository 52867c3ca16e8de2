//! Byte tunnels: `CONNECT` (answered `200`, then both ways copied) and TLS the firewall
//! redirected from port 443 (decided on the ClientHello's server name), each spliced in the
//! kernel when the client's socket allows it.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::rewound::Rewound;
use super::{until_cut, Caller, Ended, Proxy};
use crate::egress::counted::Counted;
use crate::egress::dial::Destination;
use crate::egress::granted::Inside;
use crate::egress::open::UpstreamSlot;

/// Bytes buffered each way while a tunnel copies: bounded memory per connection.
const SPLICE_BUF: usize = 64 * 1024;

impl Proxy {
    /// Answers `200` and, once the client has the answer, copies both ways until either side
    /// closes or the rules no longer allow the destination. `guard` (`secret_guard: all`, an
    /// agent with grants): what turns out to be TLS is intercepted instead, so a placeholder in
    /// it is refused rather than carried off unseen.
    pub(super) fn tunnel(
        self: &Arc<Self>,
        req: Request<Incoming>,
        mut upstream: Counted<TcpStream>,
        slot: UpstreamSlot,
        ended: Ended,
        guard: bool,
    ) -> Response<Body> {
        let proxy = self.clone();
        tokio::spawn(async move {
            let closing = proxy.closing.clone();
            let (caller, dest) = (ended.caller.clone(), ended.dest.clone());
            let reason = match hyper::upgrade::on(req).await {
                // The client's own socket, when hyper gives it back, lets the tunnel splice
                // (bytes the client sent after its request head, already read, go first).
                Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        let mut tcp = parts.io.into_inner();
                        let early = parts.read_buf.to_vec();
                        match first_flight(guard, &mut tcp, early, &upstream, &slot, &closing).await
                        {
                            Ok(early) if guard && is_tls(&early) => {
                                let client = Rewound::new(early, tcp);
                                let relay = proxy.relay_tls(client, upstream, caller, dest);
                                until_cut(relay, &slot, &closing).await
                            }
                            Ok(early) => splice_tcp(&tcp, &early, &upstream, &slot, &closing).await,
                            Err(why) => Some(why),
                        }
                    }
                    Err(upgraded) => {
                        let mut client = TokioIo::new(upgraded);
                        match first_flight(
                            guard,
                            &mut client,
                            Vec::new(),
                            &upstream,
                            &slot,
                            &closing,
                        )
                        .await
                        {
                            Ok(early) if guard && is_tls(&early) => {
                                let client = Rewound::new(early, client);
                                let relay = proxy.relay_tls(client, upstream, caller, dest);
                                until_cut(relay, &slot, &closing).await
                            }
                            Ok(early) => {
                                let mut client = Rewound::new(early, client);
                                splice(&mut client, &mut upstream, &slot, &closing).await
                            }
                            Err(why) => Some(why),
                        }
                    }
                },
                Err(e) => Some(e.to_string()),
            };
            drop(slot);
            ended.report(reason);
        });
        Response::new(Body::empty())
    }

    /// A TLS connection the firewall redirected from port 443: decided on the server name in
    /// its ClientHello, which then goes on to the destination unchanged. A refusal closes the
    /// connection (no HTTP answer can be read inside TLS); the event says why.
    pub(super) async fn transparent_tls(self: &Arc<Self>, mut tcp: TcpStream, caller: Arc<Caller>) {
        use tokio::io::AsyncWriteExt;
        let (name, hello) = match crate::egress::sni::read_client_hello(
            &mut tcp,
            self.settings.header_timeout,
        )
        .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(agent = %caller.id, "egress proxy: port 443 without a usable ClientHello: {e}");
                return;
            }
        };
        let Some(dest) = Destination::parse(&name, Some(443)).filter(|d| d.port == 443) else {
            return;
        };
        let granted = self.sandboxes.granted(&caller.id).await;
        let Ok((mut upstream, slot, ended)) = self.open_for(caller.clone(), &dest).await else {
            return;
        };
        // It is TLS already (its ClientHello was read): guarded is intercepted.
        if granted.inside(&dest.host, dest.port, self.settings.secret_guard) != Inside::Spliced {
            let proxy = self.clone();
            tokio::spawn(async move {
                let client = Rewound::new(hello, tcp);
                let relay = proxy.clone().relay_tls(client, upstream, caller, dest);
                let reason = until_cut(relay, &slot, &proxy.closing).await;
                drop(slot);
                ended.report(reason);
            });
            return;
        }
        if upstream.write_all(&hello).await.is_err() {
            ended.report(Some("the destination closed at once".into()));
            return;
        }
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = splice_tcp(&tcp, b"", &upstream, &slot, &closing).await;
            drop(slot);
            ended.report(reason);
        });
    }
}

/// The first byte of a TLS record that starts a handshake: a ClientHello comes first in every
/// TLS connection.
const TLS_HANDSHAKE: u8 = 0x16;

fn is_tls(first: &[u8]) -> bool {
    first.first() == Some(&TLS_HANDSHAKE)
}

/// Under `guard`, what the client sends first (`early` if it already did), to tell TLS from the
/// rest; empty when the destination speaks first (a protocol that is not TLS, whose client waits
/// for it: SMTP, FTP, SSH servers). Without `guard`, `early` as it is. `Err`: why the
/// connection ended before either side spoke.
async fn first_flight<C>(
    guard: bool,
    client: &mut C,
    early: Vec<u8>,
    upstream: &Counted<TcpStream>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Result<Vec<u8>, String>
where
    C: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    if !guard || !early.is_empty() {
        return Ok(early);
    }
    let mut buf = vec![0u8; 4096];
    let mut peeked = [0u8; 1];
    // Both are cancel-safe: bytes not read here stay in their socket for the relay.
    tokio::select! {
        read = client.read(&mut buf) => {
            let n = read.map_err(|e| e.to_string())?;
            buf.truncate(n);
            Ok(buf)
        }
        _ = upstream.parts().0.peek(&mut peeked) => Ok(Vec::new()),
        () = slot.cancelled.cancelled() => Err("closed: the agent's egress rules no longer allow it".into()),
        () = closing.cancelled() => Err("closed: the server is shutting down".into()),
    }
}

/// Copies both ways between a sandbox and its destination until either closes, the rules no
/// longer allow it, or the server stops; returns why it ended early, if it did.
async fn splice<C>(
    client: &mut C,
    upstream: &mut Counted<TcpStream>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Option<String>
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let copy = tokio::io::copy_bidirectional_with_sizes(client, upstream, SPLICE_BUF, SPLICE_BUF);
    until_cut(copy, slot, closing).await
}

/// [`splice`] between two TCP sockets, in the kernel (`splice(2)` through a pipe each way): the
/// bytes are not copied through the server. `early` is what the client sent that was already
/// read, sent first.
async fn splice_tcp(
    client: &TcpStream,
    early: &[u8],
    upstream: &Counted<TcpStream>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Option<String> {
    let (upstream, tally) = upstream.parts();
    until_cut(
        crate::egress::zerocopy::relay(client, upstream, early, tally),
        slot,
        closing,
    )
    .await
}
