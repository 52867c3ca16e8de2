//! A session's viewers: attaching at an offset (or with a redraw), stepping through the ring at
//! their own pace, and detaching.

use std::sync::Arc;

use agenthold_proto::{ChannelError, ErrorCode, TerminalOpened, DATA_CHUNK};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{ended, Cursor, Session};
use crate::terminal::MAX_VIEWERS;

/// What a viewer sends next.
pub enum Step {
    Data(Vec<u8>),
    /// A redraw of the screen as of output offset `.0`.
    Redraw(u64, Vec<u8>),
    Resize(u16, u16),
    Exit(i32),
    /// Nothing yet.
    Wait,
}

/// One viewer's place in a session; detaches when dropped.
pub struct Viewer {
    pub session: Arc<Session>,
    pub id: u64,
    size_gen: u64,
    /// Sent before anything else: `Some` when the viewer starts with a redraw.
    pub first_redraw: Option<(u64, Vec<u8>)>,
    pub opened: TerminalOpened,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.session.detach(self.id);
    }
}

impl Viewer {
    /// The next thing to send, moving this viewer's offset past it.
    pub fn next_step(&mut self) -> Step {
        let s = &self.session;
        let mut st = s.lock();
        if st.size_gen != self.size_gen {
            self.size_gen = st.size_gen;
            return Step::Resize(st.cols, st.rows);
        }
        let (start, end, limit) = (st.ring.start(), st.ring.end(), st.lag_limit());
        let Some(cur) = st.viewers.get(&self.id) else {
            return Step::Wait;
        };
        let pos = cur.pos;
        if pos < start {
            let redraw = st.screen.redraw();
            if let Some(c) = st.viewers.get_mut(&self.id) {
                c.pos = end;
                c.stuck = false;
            }
            drop(st);
            s.progress.send_modify(|v| *v += 1);
            return Step::Redraw(end, redraw);
        }
        if pos < end {
            let data = st.ring.read(pos, DATA_CHUNK).unwrap_or_default();
            if let Some(c) = st.viewers.get_mut(&self.id) {
                c.pos = pos + data.len() as u64;
                if end - c.pos <= limit {
                    c.stuck = false;
                }
            }
            drop(st);
            s.progress.send_modify(|v| *v += 1);
            return Step::Data(data);
        }
        if let Some(code) = st.exit {
            st.exit_seen = true;
            drop(st);
            s.viewers_changed.notify_one();
            return Step::Exit(code);
        }
        Step::Wait
    }

    /// A receiver that wakes when [`next_step`](Self::next_step) may have something new.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.session.changed.subscribe()
    }
}

impl Session {
    /// Adds a viewer. `offset` is what it has seen: within the ring it gets exactly the bytes
    /// after it; older, or absent, a redraw first. `size` resizes the session when it differs.
    pub fn attach(
        self: &Arc<Self>,
        offset: Option<u64>,
        size: Option<(u16, u16)>,
        created: bool,
    ) -> Result<Viewer, ChannelError> {
        let mut st = self.lock();
        if st.closed {
            return Err(ended(&self.id));
        }
        if st.viewers.len() >= MAX_VIEWERS {
            return Err(ChannelError::new(
                ErrorCode::Busy,
                format!(
                    "terminal session {} already has {MAX_VIEWERS} viewers, the most it takes",
                    self.id
                ),
            ));
        }
        let end = st.ring.end();
        if let Some(o) = offset {
            if o > end {
                return Err(ChannelError::new(
                    ErrorCode::Invalid,
                    format!("offset {o} is beyond the session's output, which ends at {end}"),
                ));
            }
        }
        let resized = match size {
            Some(size) => self.resize_locked(&mut st, size.0, size.1),
            None => false,
        };
        let (pos, first_redraw) = match offset {
            Some(o) if o >= st.ring.start() => (o, None),
            // Nothing was ever written: an empty screen needs no redraw.
            _ if end == 0 => (0, None),
            _ => (end, Some((end, st.screen.redraw()))),
        };
        let id = st.next_viewer;
        st.next_viewer += 1;
        st.viewers.insert(id, Cursor { pos, stuck: false });
        let opened = TerminalOpened {
            session: self.id.clone(),
            offset: pos,
            cols: st.cols,
            rows: st.rows,
            created,
        };
        let size_gen = st.size_gen;
        drop(st);
        if resized {
            self.changed.send_modify(|v| *v += 1);
        }
        self.viewers_changed.notify_one();
        Ok(Viewer {
            session: self.clone(),
            id,
            size_gen,
            first_redraw,
            opened,
        })
    }

    fn detach(&self, viewer: u64) {
        let mut st = self.lock();
        st.viewers.remove(&viewer);
        if st.viewers.is_empty() {
            st.idle_since = Instant::now();
        }
        drop(st);
        self.viewers_changed.notify_one();
        // The reader may have been waiting for this viewer.
        self.progress.send_modify(|v| *v += 1);
    }
}
