//! The `code.*` channels: runs in a kernel's context, and the contexts themselves (see
//! [`crate::kernel`]).

use std::time::Duration;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{self as proto, ChannelError, CodeEvent, CodeRun, ErrorCode, Reply};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{refuse, reply};
use crate::sandbox::Sandbox;

/// Events queued between the kernel's messages and the stream.
const QUEUE: usize = 64;

pub async fn run(sb: Sandbox, mut s: MuxStream, req: CodeRun) {
    if let Err(e) = req.check() {
        let code = match e {
            proto::CodeRunInvalid::TooLarge(_) => ErrorCode::TooLarge,
            proto::CodeRunInvalid::Context(_) => ErrorCode::Invalid,
        };
        return refuse(s, ChannelError::new(code, e.to_string())).await;
    }
    let held = match sb
        .kernels()
        .hold(&sb, req.context.as_deref(), &req.env)
        .await
    {
        Ok(h) => h,
        Err(e) => return refuse(s, e.to_channel_error()).await,
    };
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let (tx, mut rx) = mpsc::channel::<CodeEvent>(QUEUE);
    let timeout = req.timeout_ms.map(Duration::from_millis);
    let cancel = sb.cancel_token().clone();
    let writer = async move {
        while let Some(event) = rx.recv().await {
            if let Err(e) = proto::write_code_event(&mut s, &event).await {
                // Dropping the queue tells the run its caller left: it interrupts the code.
                tracing::debug!(error = %e, "code output stream ended early");
                return;
            }
        }
        let _ = s.shutdown().await;
    };
    let execute = async move {
        tokio::select! {
            _ = held.execute(req.code, timeout, &tx) => {}
            // The sandbox shutting down kills the kernels with every process it started.
            _ = cancel.cancelled() => {}
        }
    };
    tokio::join!(writer, execute);
}

pub async fn create(sb: Sandbox, mut s: MuxStream, env: Vec<(String, String)>) {
    match sb.kernels().create(&sb, &env).await {
        Ok(info) => {
            reply(&mut s, &Reply::ok_with(&info)).await;
            let _ = s.shutdown().await;
        }
        Err(e) => refuse(s, e.to_channel_error()).await,
    }
}

pub async fn list(sb: Sandbox, mut s: MuxStream) {
    reply(&mut s, &Reply::ok_with(&sb.kernels().list())).await;
    let _ = s.shutdown().await;
}

pub async fn restart(sb: Sandbox, mut s: MuxStream, context: String, env: Vec<(String, String)>) {
    if let Err(e) = proto::check_context_id(&context) {
        return refuse(s, ChannelError::new(ErrorCode::Invalid, e.to_string())).await;
    }
    match sb.kernels().restart(&sb, &context, &env).await {
        Ok(info) => {
            reply(&mut s, &Reply::ok_with(&info)).await;
            let _ = s.shutdown().await;
        }
        Err(e) => refuse(s, e.to_channel_error()).await,
    }
}

pub async fn remove(sb: Sandbox, mut s: MuxStream, context: String) {
    if let Err(e) = proto::check_context_id(&context) {
        return refuse(s, ChannelError::new(ErrorCode::Invalid, e.to_string())).await;
    }
    match sb.kernels().remove(&context) {
        Ok(()) => {
            reply(&mut s, &Reply::ok()).await;
            let _ = s.shutdown().await;
        }
        Err(e) => refuse(s, e.to_channel_error()).await,
    }
}
