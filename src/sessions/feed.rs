//! Who follows a session's transcript is woken when it grows: one `watch` of the last
//! sequence number per session followed. Readers then read the events from the store, so a
//! slow reader never holds events in memory and never misses one.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

#[derive(Default)]
pub struct Feeds {
    map: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Feeds {
    /// The session's transcript reaches `seq`.
    pub fn grew(&self, session: &str, seq: u64) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = map.get(session) {
            tx.send_if_modified(|last| {
                let grew = seq > *last;
                *last = (*last).max(seq);
                grew
            });
        }
    }

    /// A receiver that changes whenever the session's transcript grows.
    pub fn follow(&self, session: &str) -> watch::Receiver<u64> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Senders nobody follows any more are dropped on the way, so the map holds only the
        // sessions someone follows.
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.entry(session.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// The session is gone: its followers see the sender close.
    pub fn forget(&self, session: &str) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(session);
    }
}
