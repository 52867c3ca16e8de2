//! `GET /api/v1/agents/{id}/terminal`: a WebSocket onto a login shell (the `pty` channel).
//! Binary messages carry terminal bytes both ways; text messages from the client are JSON
//! control messages. Opening it wakes a sleeping agent.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use sandboxd::proto::{self, Frame, FrameCodec, PtyOpen, Request as Channel};
use serde::Deserialize;
use tokio_util::codec::Framed;
use utoipa::IntoParams;

use super::error::{ApiError, ApiQuery, ErrorBody};
use super::AppState;
use crate::activity::Use;

/// Close code for a shell that ended.
const CLOSE_NORMAL: u16 = 1000;
/// Close code for a failure on our side (the sandbox went away, waking failed).
const CLOSE_ERROR: u16 = 1011;
const MAX_DIM: u16 = 1000;

#[derive(Deserialize, IntoParams)]
pub struct TerminalQuery {
    pub cols: Option<u16>,
    pub rows: Option<u16>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Control {
    Resize { cols: u16, rows: u16 },
}

fn check_dims(cols: u16, rows: u16) -> Result<(), ApiError> {
    if cols == 0 || rows == 0 || cols > MAX_DIM || rows > MAX_DIM {
        return Err(ApiError::invalid(format!(
            "cols and rows must be between 1 and {MAX_DIM}"
        )));
    }
    Ok(())
}

/// Upgrades to a WebSocket onto a login shell in the agent's sandbox.
#[utoipa::path(get, path = "/api/v1/agents/{id}/terminal", tag = "terminal",
    params(("id" = String, Path), TerminalQuery),
    responses((status = 101, description = "WebSocket: binary = terminal bytes; client text = {\"type\":\"resize\",\"cols\",\"rows\"}; closes with 1000 when the shell exits"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn terminal(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<TerminalQuery>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let cols = q.cols.unwrap_or(80);
    let rows = q.rows.unwrap_or(24);
    check_dims(cols, rows)?;
    // Fail before the upgrade for an unknown agent, so the client sees a 404.
    st.lc.get(&id).await?;
    Ok(ws.on_upgrade(move |socket| run(st, id, cols, rows, socket)))
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let reason: String = reason.chars().take(100).collect();
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

async fn run(st: AppState, id: String, cols: u16, rows: u16, mut socket: WebSocket) {
    let _hold = st.lc.activity.hold(&id, Use::Terminal);
    if !st.lc.tunnels.is_connected(&id) {
        let _ = socket
            .send(Message::Binary("Starting the sandbox…\r\n".into()))
            .await;
    }
    let handle = match st.lc.wake(&id, || {}).await {
        Ok(h) => h,
        Err(e) => {
            let msg = format!("\r\nThe sandbox could not be started: {e}\r\n");
            let _ = socket.send(Message::Binary(msg.into())).await;
            return close(&mut socket, CLOSE_ERROR, "the sandbox could not be started").await;
        }
    };
    let opened = async {
        let mut stream = handle.open().await.map_err(|e| e.to_string())?;
        let open = PtyOpen {
            cols,
            rows,
            term: Some("xterm-256color".into()),
        };
        proto::open_channel(&mut stream, &Channel::Pty(open))
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(stream)
    };
    let stream = match opened.await {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("\r\nThe terminal could not be opened: {e}\r\n");
            let _ = socket.send(Message::Binary(msg.into())).await;
            return close(&mut socket, CLOSE_ERROR, "the terminal could not be opened").await;
        }
    };
    let mut pty = Framed::new(stream, FrameCodec::default());
    loop {
        tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    st.lc.activity.touch(&id);
                    if pty.send(Frame::Data(b)).await.is_err() { break; }
                }
                Some(Ok(Message::Text(t))) => match serde_json::from_str::<Control>(&t) {
                    Ok(Control::Resize { cols, rows }) if check_dims(cols, rows).is_ok() => {
                        if pty.send(Frame::Resize { cols, rows }).await.is_err() { break; }
                    }
                    // A bad control message is ignored rather than ending someone's shell.
                    _ => tracing::debug!(agent = id, "ignored terminal control message"),
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            frame = pty.next() => match frame {
                Some(Ok(Frame::Data(b))) => {
                    if socket.send(Message::Binary(b)).await.is_err() { return; }
                }
                Some(Ok(Frame::PtyExit(code))) => {
                    return close(&mut socket, CLOSE_NORMAL, &format!("the shell exited with code {code}")).await;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    let _ = socket
        .send(Message::Binary(
            "\r\nThe connection to the sandbox was lost.\r\n".into(),
        ))
        .await;
    close(
        &mut socket,
        CLOSE_ERROR,
        "the connection to the sandbox was lost",
    )
    .await;
}
