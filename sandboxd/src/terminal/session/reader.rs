//! The reader task (see the overview in [`super`]): output from the pty into the ring and the
//! screen, held back while a viewer that keeps up is a whole buffer behind.

use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::DATA_CHUNK;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Session;
use crate::terminal::pty;

/// How long the reader waits for a viewer that is a whole buffer behind before leaving it
/// behind (a frozen browser tab must not freeze the shell for everyone).
pub const STALL: Duration = Duration::from_secs(5);

/// How much the reader takes from the pty at once: small against the ring, so flow control can
/// hold a viewer's bytes in it.
pub(super) fn chunk_size(capacity: usize) -> usize {
    (capacity / 4).clamp(1, DATA_CHUNK)
}

/// Moves output from the pty into the session until the terminal closes.
pub(super) async fn read_output(s: Arc<Session>) {
    let chunk = chunk_size(s.lock().ring.capacity());
    let mut buf = vec![0u8; chunk];
    let mut progress = s.progress.subscribe();
    loop {
        s.wait_for_viewers(&mut progress).await;
        match pty::read(&s.master, &mut buf).await {
            Ok(0) => return,
            Ok(n) => s.output(&buf[..n]),
            Err(e) => {
                tracing::debug!(error = %e, "terminal read failed");
                return;
            }
        }
    }
}

impl Session {
    fn output(&self, data: &[u8]) {
        let mut st = self.lock();
        st.ring.push(data);
        st.screen.process(data);
        drop(st);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Returns once no viewer that keeps up is a whole buffer behind; a viewer that has not
    /// moved for [`STALL`] stops counting.
    async fn wait_for_viewers(&self, progress: &mut watch::Receiver<u64>) {
        let since = Instant::now();
        loop {
            progress.borrow_and_update();
            let behind: Vec<u64> = {
                let st = self.lock();
                let (end, limit) = (st.ring.end(), st.lag_limit());
                st.viewers
                    .iter()
                    .filter(|(_, c)| !c.stuck && end.saturating_sub(c.pos) > limit)
                    .map(|(id, _)| *id)
                    .collect()
            };
            if behind.is_empty() {
                return;
            }
            if tokio::time::timeout_at(since + STALL, progress.changed())
                .await
                .is_err()
            {
                let mut st = self.lock();
                for id in behind {
                    if let Some(c) = st.viewers.get_mut(&id) {
                        c.stuck = true;
                    }
                }
                tracing::debug!(session = %self.id, "a viewer fell behind; it will get a redraw");
            }
        }
    }
}
