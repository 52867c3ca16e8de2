//! Many WebSockets through one preview at once: all are opened first, then each sends a message
//! and waits for its echo, `rounds` times, all sockets together; every round trip is a sample.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::super::STEP_DEADLINE;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn open(listener: SocketAddr, host: &str) -> anyhow::Result<Socket> {
    let tcp = tokio::net::TcpStream::connect(listener)
        .await
        .context("connecting to the preview listener")?;
    tcp.set_nodelay(true)?;
    let req = format!("ws://{host}/ws").into_client_request()?;
    let (ws, _) = tokio_tungstenite::client_async(req, tcp)
        .await
        .context("the WebSocket upgrade through the preview")?;
    Ok(ws)
}

/// `rounds` echoes on `ws`, one after another; their round trips in ms, and how many came
/// back as sent.
async fn echo(mut ws: Socket, n: usize, rounds: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let mut times = Vec::with_capacity(rounds);
    let mut right = 0;
    for r in 0..rounds {
        let text = format!("socket {n} message {r}");
        let t = Instant::now();
        ws.send(Message::text(text.clone())).await?;
        let back = loop {
            match tokio::time::timeout(STEP_DEADLINE, ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => break Some(t),
                Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
                Ok(Some(Ok(_))) | Ok(None) | Ok(Some(Err(_))) => break None,
                Err(_) => bail!("no echo within {STEP_DEADLINE:?}"),
            }
        };
        times.push(ms(t.elapsed()));
        match back {
            Some(t) if t.as_str() == text => right += 1,
            _ => break,
        }
    }
    let _ = ws.close(None).await;
    Ok((times, right))
}

/// `sockets` WebSockets through the preview `host` at `listener`, `rounds` echoes each.
pub async fn echoes(
    listener: SocketAddr,
    host: &str,
    sockets: usize,
    rounds: usize,
) -> anyhow::Result<Row> {
    let opened = futures::future::try_join_all((0..sockets).map(|_| open(listener, host))).await?;
    let tasks: Vec<_> = opened
        .into_iter()
        .enumerate()
        .map(|(n, ws)| tokio::spawn(echo(ws, n, rounds)))
        .collect();
    let mut times = Vec::with_capacity(sockets * rounds);
    let mut right = 0;
    for t in tasks {
        let (t, r) = t.await??;
        times.extend(t);
        right += r;
    }
    Ok(Row::times(
        &format!("{sockets} WebSockets at once through a preview: echo round trip"),
        &times,
        None,
    )
    .judged(&[Bound::All {
        what: "echoed",
        done: right,
        of: sockets * rounds,
    }]))
}
