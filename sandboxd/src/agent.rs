//! The daemon loop: dial, say hello, serve the session, reconnect; kill everything at shutdown.
//!
//! Used by `main.rs` inside a container and by the server's fake driver in-process, which is
//! why nothing here exits the process or touches global state.

use std::time::Duration;

use agenthold_proto::boot::BootConfig;
use agenthold_proto::mux::{self, MuxHandle, Session};
use agenthold_proto::wsio;
use agenthold_proto::LOGICAL_HOME;
use agenthold_proto::{self as proto, Hello, Ping};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::channels::{activity, process};
use crate::dial::{self, DialError, Target};
use crate::sandbox::Sandbox;
use crate::serve;

pub use crate::cpu::CpuScope;
pub use crate::sandbox::SandboxOptions;

/// How long the server may take to answer a hello or a ping.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Unanswered pings in a row before the session is given up.
pub const MAX_MISSED_PINGS: u32 = 3;
/// A ping's timeout that fires this much later than it was due says the sandbox was frozen
/// (`docker pause`: the server keeps the session meanwhile), not that the server is gone.
const FROZEN_LATENESS: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] DialError),
}

/// How one session ended.
#[derive(Debug)]
pub enum SessionEnd {
    /// Shutdown was requested.
    Shutdown,
    /// The server closed the tunnel, or it broke.
    Closed(String),
    /// The server stopped answering pings.
    PingTimeout,
    /// The server did not accept the hello.
    HelloFailed(String),
}

/// Runs sandboxd until `shutdown` is cancelled, then kills every process it started.
///
/// Only a tunnel URL that can never work is an error; everything else is retried.
pub async fn run(
    boot: BootConfig,
    opts: SandboxOptions,
    shutdown: CancellationToken,
) -> Result<(), AgentError> {
    let target = Target::parse(&boot.tunnel_url)?;
    let sb = Sandbox::new(opts);
    // Before the first session, so no upload of this run can be in progress.
    let stale = sb.clone();
    let _ = tokio::task::spawn_blocking(move || stale.uploads().remove_stale()).await;
    let mut backoff = Backoff::default();
    tracing::info!(agent = %boot.agent_id, addr = %target.addr, user = %sb.account().name, "sandboxd starting");
    loop {
        let dialed = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = dial::dial(&target, &boot) => r,
        };
        match dialed {
            Ok(ws) => {
                let io = wsio::WsIo::new(wsio::tungstenite_bytes(ws));
                let session = mux::spawn(io, mux::Mode::Client);
                let end = run_session(session, &boot.agent_id, &sb, &shutdown).await;
                match &end {
                    SessionEnd::Shutdown => break,
                    SessionEnd::HelloFailed(why) => {
                        tracing::warn!(%why, "the server did not accept our hello")
                    }
                    SessionEnd::Closed(why) => {
                        // A session that got past hello was a working one: start over quickly.
                        backoff.reset();
                        tracing::warn!(%why, "tunnel closed; reconnecting")
                    }
                    SessionEnd::PingTimeout => {
                        backoff.reset();
                        tracing::warn!("the server stopped answering pings; reconnecting")
                    }
                }
            }
            // The server may not have marked the agent as starting yet: worth another try.
            Err(DialError::Refused(status)) => {
                tracing::warn!(status, "the server refused the tunnel; retrying")
            }
            Err(e) => tracing::warn!(error = %e, "cannot reach the server; retrying"),
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    tracing::info!("sandboxd stopping; ending every process it started");
    sb.shutdown().await;
    Ok(())
}

/// Serves one tunnel session: hello, activity reports, inbound channels and pings.
pub async fn run_session(
    session: Session,
    agent_id: &str,
    sb: &Sandbox,
    shutdown: &CancellationToken,
) -> SessionEnd {
    let Session {
        handle,
        inbound,
        mut driver,
    } = session;
    let hello = tokio::select! {
        _ = shutdown.cancelled() => {
            driver.abort();
            return SessionEnd::Shutdown;
        }
        r = tokio::time::timeout(ANSWER_TIMEOUT, say_hello(&handle, agent_id, sb)) => r,
    };
    match hello {
        Ok(Ok(())) => tracing::info!("connected to the server"),
        Ok(Err(why)) => {
            driver.abort();
            return SessionEnd::HelloFailed(why);
        }
        Err(_) => {
            driver.abort();
            return SessionEnd::HelloFailed("no answer to hello".into());
        }
    }
    let stop = shutdown.child_token();
    let interval = sb.options().activity_interval;
    tokio::spawn(activity::report(
        sb.clone(),
        handle.clone(),
        interval,
        stop.clone(),
    ));
    tokio::spawn(process::report(sb.clone(), handle.clone(), stop.clone()));
    let serving = tokio::spawn(serve::serve_inbound(sb.clone(), inbound));
    let mut pinger = tokio::spawn(ping_until_missed(handle, sb.options().ping_interval));
    let end = tokio::select! {
        _ = shutdown.cancelled() => SessionEnd::Shutdown,
        r = &mut driver => SessionEnd::Closed(match r {
            Ok(Ok(())) => "closed by the server".into(),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        }),
        _ = &mut pinger => SessionEnd::PingTimeout,
    };
    stop.cancel();
    pinger.abort();
    serving.abort();
    // Dropping the connection closes every stream, which ends their channels.
    driver.abort();
    end
}

async fn say_hello(handle: &MuxHandle, agent_id: &str, sb: &Sandbox) -> Result<(), String> {
    let mut s = handle.open().await.map_err(|e| e.to_string())?;
    let account = sb.account();
    let hello = Hello {
        agent_id: agent_id.into(),
        version: proto::VERSION.into(),
        user: account.name.clone(),
        uid: account.uid,
        home: LOGICAL_HOME.into(),
    };
    proto::open(&mut s, hello)
        .await
        .map_err(|e| e.to_string())?;
    let _ = s.shutdown().await;
    Ok(())
}

/// Pings every `interval`; returns after [`MAX_MISSED_PINGS`] misses in a row. A ping whose
/// wait ran across a freeze of the sandbox (of any length) is no miss: its answer may simply
/// not have been read yet when the process was thawed, and the next ping tells.
async fn ping_until_missed(handle: MuxHandle, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut missed = 0;
    while missed < MAX_MISSED_PINGS {
        tick.tick().await;
        let due = tokio::time::Instant::now() + ANSWER_TIMEOUT;
        match tokio::time::timeout_at(due, ping(&handle)).await {
            Ok(Ok(())) => missed = 0,
            Ok(Err(e)) => {
                missed += 1;
                tracing::debug!(error = %e, missed, "ping failed");
            }
            Err(_) if frozen_meanwhile(due, tokio::time::Instant::now()) => {
                tracing::debug!("ping unanswered across a freeze; not counted");
            }
            Err(_) => {
                missed += 1;
                tracing::debug!(missed, "ping unanswered");
            }
        }
    }
}

/// Whether a timer due at `due` that fired at `now` fired so late that the process cannot have
/// been running in between (frozen by the cgroup freezer).
fn frozen_meanwhile(due: tokio::time::Instant, now: tokio::time::Instant) -> bool {
    now.saturating_duration_since(due) > FROZEN_LATENESS
}

async fn ping(handle: &MuxHandle) -> Result<(), String> {
    let mut s = handle.open().await.map_err(|e| e.to_string())?;
    proto::open(&mut s, Ping {})
        .await
        .map_err(|e| e.to_string())?;
    let _ = s.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_timer_that_fired_long_after_it_was_due_tells_of_a_freeze() {
        let due = tokio::time::Instant::now();
        assert!(!frozen_meanwhile(due, due));
        assert!(!frozen_meanwhile(due, due + Duration::from_millis(500)));
        assert!(frozen_meanwhile(due, due + Duration::from_secs(3)));
        assert!(frozen_meanwhile(due, due + Duration::from_secs(24 * 3600)));
        // A timer is never early; if the clock says so, it is no freeze.
        assert!(!frozen_meanwhile(due + Duration::from_secs(5), due));
    }
}
