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
use crate::egress::open::UpstreamSlot;

/// Bytes buffered each way while a tunnel copies: bounded memory per connection.
const SPLICE_BUF: usize = 64 * 1024;

impl Proxy {
    /// Answers `200` and, once the client has the answer, copies both ways until either side
    /// closes or the rules no longer allow the destination.
    pub(super) fn tunnel(
        &self,
        req: Request<Incoming>,
        mut upstream: Counted<TcpStream>,
        slot: UpstreamSlot,
        ended: Ended,
    ) -> Response<Body> {
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = match hyper::upgrade::on(req).await {
                // The client's own socket, when hyper gives it back, lets the tunnel splice
                // (bytes the client sent after its request head, already read, go first).
                Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        let tcp = parts.io.into_inner();
                        splice_tcp(&tcp, &parts.read_buf, &upstream, &slot, &closing).await
                    }
                    Err(upgraded) => {
                        let mut client = TokioIo::new(upgraded);
                        splice(&mut client, &mut upstream, &slot, &closing).await
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
        if granted.intercepts(&dest.host, dest.port) {
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
