//! The server's end of the sandboxd tunnel: a WebSocket endpoint on `sandbox.tunnel_listen`
//! that authenticates a sandbox by its boot token and runs one yamux session per agent.

pub mod conn;
mod host;
pub mod registry;

pub use host::{BootRefusal, TunnelHost};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::mux::{self, Mode, MuxHandle, MuxStream};
use agenthold_proto::{
    self as proto, Activity, ChannelError, ErrorCode, Frame, FrameCodec, Ping, ProcessWatch, Reply,
    Request,
};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::Router;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::listener::ThrottledLog;
use crate::metrics::TunnelRefusal;

/// sandboxd must say hello this soon after connecting.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Pings in a row that may go unanswered before the session counts as dead.
const MAX_MISSED_PINGS: u32 = 3;
/// Largest WebSocket message accepted on the tunnel. sandboxd's byte-stream adapter sends at
/// most `wsio::MAX_MESSAGE` plus one write (a yamux frame: a 12-byte header, or a body of at
/// most `mux::SPLIT_SEND_SIZE`); anything larger ends the session.
pub const MAX_WS_MESSAGE: usize = 4 * 1024 * 1024;
const _: () = assert!(
    agenthold_proto::wsio::MAX_MESSAGE + agenthold_proto::mux::SPLIT_SEND_SIZE <= MAX_WS_MESSAGE,
    "sandboxd's messages must fit the server's limit"
);

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

pub fn router(lc: Arc<dyn TunnelHost>) -> Router {
    Router::new()
        .route(agenthold_proto::boot::TUNNEL_PATH, get(accept))
        .layer(Extension(Arc::new(ThrottledLog::default())))
        .with_state(lc)
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, message.to_string()).into_response()
}

/// `invalid_tokens` logs wrong tokens, one line per source address per ten seconds: anything on
/// a sandbox network can send them as fast as it likes, naming any agent id it likes.
async fn accept(
    State(lc): State<Arc<dyn TunnelHost>>,
    Extension(invalid_tokens): Extension<Arc<ThrottledLog>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let agent_id = headers
        .get(agenthold_proto::boot::AGENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let (Some(agent_id), Some(token)) = (agent_id, token) else {
        lc.metrics().tunnel_refused(TunnelRefusal::no_credentials);
        return refuse(StatusCode::UNAUTHORIZED, "agent id and boot token required");
    };
    match lc.authorize_boot(&agent_id, &token).await {
        Ok(()) => {}
        Err(e @ BootRefusal::InvalidToken) => {
            lc.metrics().tunnel_refused(TunnelRefusal::invalid_token);
            if let Some(refused) = invalid_tokens.count(peer.ip()) {
                tracing::warn!(
                    %peer,
                    refused,
                    last_agent = agent_id,
                    "tunnel connections with an invalid token refused (at most one such line \
                     per address per 10s; agenthold_tunnel_refusals_total counts them all)"
                );
            }
            return refuse(StatusCode::UNAUTHORIZED, &e.to_string());
        }
        Err(e @ BootRefusal::NotStarted(_)) => {
            lc.metrics().tunnel_refused(TunnelRefusal::not_started);
            return refuse(StatusCode::CONFLICT, &e.to_string());
        }
    }
    ws.max_message_size(MAX_WS_MESSAGE)
        .on_upgrade(move |socket| run_session(lc, agent_id, socket))
}

/// axum's socket as the byte stream the mux runs on.
fn socket_io(
    socket: WebSocket,
) -> agenthold_proto::wsio::WsIo<
    impl futures::Stream<Item = std::io::Result<Bytes>>
        + futures::Sink<Bytes, Error = std::io::Error>
        + Unpin
        + Send,
> {
    let sink_stream = socket
        .sink_map_err(std::io::Error::other)
        .with(|b: Bytes| futures::future::ready(Ok::<_, std::io::Error>(Message::Binary(b))))
        .filter_map(|m| {
            futures::future::ready(match m {
                Ok(Message::Binary(b)) => Some(Ok(b)),
                Ok(Message::Close(_)) => Some(Err(std::io::ErrorKind::ConnectionAborted.into())),
                Ok(Message::Text(_)) => Some(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "text message on the tunnel",
                ))),
                Ok(_) => None,
                Err(e) => Some(Err(std::io::Error::other(e))),
            })
        });
    agenthold_proto::wsio::WsIo::new(Box::pin(sink_stream))
}

async fn run_session(lc: Arc<dyn TunnelHost>, id: String, socket: WebSocket) {
    let conn_id = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let mut session = mux::spawn(socket_io(socket), Mode::Server);
    let cancel = CancellationToken::new();

    match tokio::time::timeout(HELLO_TIMEOUT, session.inbound.recv()).await {
        Ok(Some(stream)) => {
            if let Err(e) = accept_hello(&id, stream).await {
                tracing::warn!(agent = id, "tunnel session refused: {e}");
                session.driver.abort();
                return;
            }
        }
        _ => {
            tracing::warn!(agent = id, "sandboxd connected but said no hello");
            session.driver.abort();
            return;
        }
    }
    lc.tunnels()
        .insert(&id, conn_id, session.handle.clone(), cancel.clone());
    tracing::info!(agent = id, conn = conn_id, "sandbox connected");
    lc.clone().on_hello(&id).await;

    let missed = Arc::new(AtomicU32::new(0));
    let mut ping_every = tokio::time::interval(lc.ping_interval());
    ping_every.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = &mut session.driver => break,
            stream = session.inbound.recv() => match stream {
                Some(s) => { tokio::spawn(serve_inbound(lc.clone(), id.clone(), s)); }
                None => break,
            },
            _ = ping_every.tick() => {
                if lc.is_paused(&id) {
                    // A frozen sandboxd answers nothing until it is thawed, which is no sign of a
                    // dead session; the pings it missed while frozen do not count.
                    missed.store(0, Ordering::Relaxed);
                    continue;
                }
                if missed.load(Ordering::Relaxed) >= MAX_MISSED_PINGS {
                    tracing::warn!(agent = id, "sandboxd missed {MAX_MISSED_PINGS} pings; dropping the session");
                    break;
                }
                tokio::spawn(ping(session.handle.clone(), missed.clone(), lc.ping_interval()));
            }
        }
    }
    session.driver.abort();
    lc.tunnels().remove_conn(&id, conn_id);
    tracing::info!(agent = id, conn = conn_id, "sandbox disconnected");
}

async fn accept_hello(id: &str, mut stream: MuxStream) -> Result<(), String> {
    let req = proto::read_request(&mut stream)
        .await
        .map_err(|e| e.to_string())?;
    let refusal = match &req {
        Request::Hello(h) if h.agent_id == id => None,
        Request::Hello(h) => Some(format!("hello names agent {:?}", h.agent_id)),
        other => Some(format!("expected hello, got {}", other.channel())),
    };
    if let Some(why) = refusal {
        let _ = proto::write_message(
            &mut stream,
            &Reply::Error(ChannelError::new(ErrorCode::Unauthorized, why.clone())),
        )
        .await;
        return Err(why);
    }
    proto::write_message(&mut stream, &Reply::ok())
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Channels sandboxd may open towards the server.
async fn serve_inbound(lc: Arc<dyn TunnelHost>, id: String, mut stream: MuxStream) {
    let req = match tokio::time::timeout(HELLO_TIMEOUT, proto::read_request(&mut stream)).await {
        Ok(Ok(req)) => req,
        Ok(Err(e)) => {
            let _ = proto::write_message(&mut stream, &Reply::Error(e.to_channel_error())).await;
            return;
        }
        Err(_) => return,
    };
    match req {
        Request::Ping(Ping {}) => {
            let _ = proto::write_message(&mut stream, &Reply::ok()).await;
        }
        Request::Activity(Activity {}) => {
            let reported = reports(stream, |frame| {
                if let Frame::Activity { cpu_ms, keep_awake } = frame {
                    lc.activity().sample(&id, cpu_ms, keep_awake);
                }
            })
            .await;
            if reported {
                // No reports means nothing known to keep the agent awake.
                lc.activity().sample_ended(&id);
            }
        }
        Request::ProcessWatch(ProcessWatch {}) => {
            reports(stream, |frame| {
                if let Frame::Process(info) = frame {
                    lc.process_reported(&id, *info);
                }
            })
            .await;
        }
        other => {
            let msg = format!("the server does not serve {} channels", other.channel());
            let _ = proto::write_message(
                &mut stream,
                &Reply::Error(ChannelError::new(ErrorCode::UnknownChannel, msg)),
            )
            .await;
        }
    }
}

/// Accepts a channel of reports from sandboxd and hands each frame to `each` until it ends;
/// false when the channel could not even be accepted.
async fn reports(mut stream: MuxStream, mut each: impl FnMut(Frame)) -> bool {
    if proto::write_message(&mut stream, &Reply::ok())
        .await
        .is_err()
    {
        return false;
    }
    let mut frames = FramedRead::new(stream, FrameCodec::default());
    while let Some(Ok(frame)) = frames.next().await {
        each(frame);
    }
    true
}

async fn ping(handle: MuxHandle, missed: Arc<AtomicU32>, timeout: Duration) {
    let round_trip = async {
        let mut s = handle.open().await.ok()?;
        proto::open(&mut s, Ping {}).await.ok()
    };
    match tokio::time::timeout(timeout, round_trip).await {
        Ok(Some(_)) => missed.store(0, Ordering::Relaxed),
        _ => {
            missed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
