//! Inbound streams: read each header (with a deadline) and hand the stream to its channel.
//!
//! Every stream runs in its own task, and a bad header costs only that stream an error reply:
//! the session and the other channels go on.

use std::time::Duration;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{
    self as proto, ChannelError, ErrorCode, FsExists, FsList, FsMkdir, FsRead, FsRemove, FsRename,
    FsStat, FsWatch, FsWrite, ProcessGet, ProcessRemove, ProtoError, Reply, Request, TerminalKill,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::channels::{self, code, exec, fs, ports, process, terminal};
use crate::sandbox::Sandbox;

/// How long a peer may take to send a stream's header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves every stream the peer opens until the session ends.
pub async fn serve_inbound(sb: Sandbox, mut inbound: mpsc::UnboundedReceiver<MuxStream>) {
    while let Some(stream) = inbound.recv().await {
        sb.spawn(handle(sb.clone(), stream));
    }
}

async fn handle(sb: Sandbox, mut s: MuxStream) {
    let req = match tokio::time::timeout(HEADER_TIMEOUT, proto::read_server_request(&mut s)).await {
        Ok(Ok(req)) => req,
        Ok(Err(ProtoError::Eof)) => return,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "bad channel header");
            return channels::refuse(s, e.to_channel_error()).await;
        }
        Err(_) => {
            let err = ChannelError::new(
                ErrorCode::Invalid,
                format!("no channel header within {} s", HEADER_TIMEOUT.as_secs()),
            );
            return channels::refuse(s, err).await;
        }
    };
    tracing::debug!(channel = req.channel(), "channel opened");
    match req {
        Request::Ping(_) => {
            if channels::reply(&mut s, &Reply::ok()).await {
                let _ = s.shutdown().await;
            }
        }
        Request::FsList(FsList { path }) => fs::list(sb, s, path).await,
        Request::FsRead(FsRead { path }) => fs::read(sb, s, path).await,
        Request::FsWrite(FsWrite { path, parents }) => fs::write(sb, s, path, parents).await,
        Request::FsMkdir(FsMkdir { path }) => fs::mkdir(sb, s, path).await,
        Request::FsRemove(FsRemove { path, recursive }) => fs::remove(sb, s, path, recursive).await,
        Request::FsRename(FsRename {
            from,
            to,
            overwrite,
        }) => fs::rename(sb, s, from, to, overwrite).await,
        Request::FsStat(FsStat { path }) => fs::stat(sb, s, path).await,
        Request::FsExists(FsExists { path }) => fs::exists(sb, s, path).await,
        Request::FsWatch(FsWatch { path, recursive }) => fs::watch(sb, s, path, recursive).await,
        Request::Exec(req) => exec::exec(sb, s, req).await,
        Request::TerminalOpen(req) => terminal::open(sb, s, req).await,
        Request::TerminalList(_) => terminal::list(sb, s).await,
        Request::TerminalKill(TerminalKill { session }) => terminal::kill(sb, s, session).await,
        Request::ProcessStart(req) => process::start(sb, s, req).await,
        Request::ProcessList(req) => process::list(sb, s, req).await,
        Request::ProcessGet(ProcessGet { process: p }) => process::get(sb, s, p).await,
        Request::ProcessOutput(req) => process::output(sb, s, req).await,
        Request::ProcessStdin(req) => process::stdin(sb, s, req).await,
        Request::ProcessAttach(req) => process::attach(sb, s, req).await,
        Request::ProcessSignal(req) => process::signal(sb, s, req).await,
        Request::ProcessWait(req) => process::wait(sb, s, req).await,
        Request::ProcessRemove(ProcessRemove { process: p }) => process::remove(sb, s, p).await,
        Request::PortsList(_) => ports::list(sb, s).await,
        Request::PortConnect(c) => ports::connect(s, c.port).await,
        Request::CodeRun(req) => code::run(sb, s, req).await,
        Request::CodeContextCreate(r) => code::create(sb, s, r.env).await,
        Request::CodeContextList(_) => code::list(sb, s).await,
        Request::CodeContextRestart(r) => code::restart(sb, s, r.context, r.env).await,
        Request::CodeContextRemove(r) => code::remove(sb, s, r.context).await,
        Request::Hello(_) | Request::Activity(_) | Request::ProcessWatch(_) => {
            let err = ChannelError::new(
                ErrorCode::Invalid,
                "this channel is opened by sandboxd, not by the server",
            );
            channels::refuse(s, err).await
        }
    }
}
