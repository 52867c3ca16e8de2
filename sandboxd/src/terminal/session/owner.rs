//! The owner task (see the overview in [`super`]): the shell's process from its start to its
//! reaping, and the session's removal once its end was seen.

use std::sync::Arc;
use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

use super::reader::read_output;
use super::Session;
use crate::sandbox::Sandbox;
use crate::terminal::pty;

/// How long output may keep draining after the shell exited, when a background job still holds
/// the terminal open.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The owner task: see the overview in [`super`].
pub(super) async fn own(sb: Sandbox, s: Arc<Session>, mut child: Child, pid: i32) {
    let mut reader = tokio::spawn(read_output(s.clone()));
    let mut removed = false;
    let status = loop {
        let deadline = s.detach_deadline();
        tokio::select! {
            status = child.wait() => break status,
            _ = s.kill.cancelled() => {
                removed = true;
                break pty::hang_up(pid, &mut child).await;
            }
            _ = sb.cancel_token().cancelled() => {
                removed = true;
                break pty::hang_up(pid, &mut child).await;
            }
            _ = sleep_until(deadline) => {
                if s.detach_deadline().is_some_and(|d| d <= Instant::now()) {
                    tracing::info!(session = %s.id, "nobody watched the terminal session for {:?}; ending it", s.detach_after);
                    removed = true;
                    break pty::hang_up(pid, &mut child).await;
                }
            }
            _ = s.viewers_changed.notified() => {}
        }
    };
    if removed {
        sb.terminals().remove(&s.id);
        s.lock().closed = true;
    }
    if tokio::time::timeout(DRAIN_GRACE, &mut reader)
        .await
        .is_err()
    {
        reader.abort();
    }
    let code = pty::exit_code(status);
    tracing::info!(session = %s.id, code, "terminal session ended");
    s.lock().exit = Some(code);
    s.changed.send_modify(|v| *v += 1);
    // Keep an exited session attachable until someone has seen its last bytes and its exit, so
    // a viewer that was away when it ended still gets them.
    if !removed {
        loop {
            if s.lock().exit_seen {
                break;
            }
            let deadline = s.detach_deadline();
            tokio::select! {
                _ = s.kill.cancelled() => break,
                _ = sb.cancel_token().cancelled() => break,
                _ = sleep_until(deadline) => {
                    if s.detach_deadline().is_some_and(|d| d <= Instant::now()) {
                        break;
                    }
                }
                _ = s.viewers_changed.notified() => {}
            }
        }
    }
    sb.terminals().remove(&s.id);
    s.lock().closed = true;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Session {
    /// When the session ends for want of viewers, if it has none now.
    fn detach_deadline(&self) -> Option<Instant> {
        let st = self.lock();
        st.viewers
            .is_empty()
            .then(|| st.idle_since + self.detach_after)
    }
}
