//! The `activity` channel: CPU time used by the sandbox's processes, so a long build with nobody
//! watching still counts as activity.

use std::time::Duration;

use agenthold_proto::mux::MuxHandle;
use agenthold_proto::{self as proto, Activity, Frame, FrameCodec};
use futures::SinkExt;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;

use crate::sandbox::Sandbox;

/// Opens the `activity` channel and reports every `interval` until the session or `stop` ends.
pub async fn report(sb: Sandbox, handle: MuxHandle, interval: Duration, stop: CancellationToken) {
    let mut stream = match handle.open().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot open the activity channel");
            return;
        }
    };
    if let Err(e) = proto::open(&mut stream, Activity {}).await {
        tracing::warn!(error = %e, "the server refused the activity channel");
        return;
    }
    let mut out = FramedWrite::new(stream, FrameCodec::default());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A process that keeps the agent awake started or ended: said at once, not at the
            // next tick, so that a short idle time cannot slip in between.
            _ = sb.processes().keep_awake_changed() => {}
            _ = stop.cancelled() => break,
        }
        let cpu_ms = sb.cpu_ms().await;
        let keep_awake = sb.processes().keep_awake();
        if let Err(e) = out.send(Frame::Activity { cpu_ms, keep_awake }).await {
            tracing::debug!(error = %e, "activity channel closed");
            return;
        }
    }
    let _ = out.get_mut().shutdown().await;
}
