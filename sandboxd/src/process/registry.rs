//! The sandbox's processes by id: loaded from what a previous sandboxd left, found by id or
//! tag, listed, announced, and forgotten (one at a time, or the finished ones past the limits).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agenthold_proto::{is_session_id, ChannelError, ErrorCode, ProcessInfo};
use tokio::sync::broadcast;

use super::record::load_one;
use super::{log, Process};
use crate::terminal::session::now_ms;

/// How long a removal waits for a running process's tree to be killed and reaped.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// The sandbox's processes by id.
#[derive(Clone)]
pub struct Processes {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) dir: Option<PathBuf>,
    pub(super) map: Mutex<HashMap<String, Arc<Process>>>,
    /// Starts past their check and not yet in `map`: they count against the limit, and their
    /// tags are taken. Changed only with `map` locked.
    pub(super) starting: Mutex<Vec<Option<String>>>,
    /// Every start and end, for the `process.watch` channel.
    events: broadcast::Sender<ProcessInfo>,
    /// Told when a process started with `keep_awake` starts or ends.
    keep_awake_changed: tokio::sync::Notify,
}

impl Processes {
    /// The processes a previous sandboxd left in `dir` (those it had running are `lost`).
    /// Without a directory this sandbox runs no processes.
    pub fn load(dir: Option<PathBuf>) -> Processes {
        let mut map = HashMap::new();
        if let Some(dir) = &dir {
            if let Err(e) = log::private_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot make the process directory");
            }
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match load_one(&path) {
                    Some(p) => {
                        map.insert(p.id.clone(), Arc::new(p));
                    }
                    None => {
                        let _ = std::fs::remove_dir_all(&path);
                    }
                }
            }
        }
        Processes {
            inner: Arc::new(Inner {
                dir,
                map: Mutex::new(map),
                starting: Default::default(),
                events: broadcast::channel(256).0,
                keep_awake_changed: tokio::sync::Notify::new(),
            }),
        }
    }

    pub(super) fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Process>>> {
        self.inner.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A process by id, or by tag: the running one with that tag, else the one started last.
    pub fn resolve(&self, name: &str) -> Result<Arc<Process>, ChannelError> {
        let map = self.map();
        if is_session_id(name) {
            if let Some(p) = map.get(name) {
                return Ok(p.clone());
            }
        }
        let mut best: Option<(bool, u64, &Arc<Process>)> = None;
        for p in map.values() {
            let info = p.lock().info.clone();
            if info.tag.as_deref() != Some(name) {
                continue;
            }
            let key = (info.state.is_running(), info.started_at_ms);
            if best.as_ref().is_none_or(|(r, t, _)| key > (*r, *t)) {
                best = Some((key.0, key.1, p));
            }
        }
        best.map(|(_, _, p)| p.clone()).ok_or_else(|| {
            ChannelError::new(
                ErrorCode::NotFound,
                format!(
                    "no process {:?} (by id or tag)",
                    name.chars().take(80).collect::<String>()
                ),
            )
        })
    }

    /// Every process, oldest first.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let all: Vec<Arc<Process>> = self.map().values().cloned().collect();
        let mut out: Vec<ProcessInfo> = all.iter().map(|p| p.info()).collect();
        out.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        out
    }

    /// True while a process started with `keep_awake` runs.
    pub fn keep_awake(&self) -> bool {
        self.map().values().any(|p| {
            let st = p.lock();
            st.info.keep_awake && st.info.state.is_running()
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ProcessInfo> {
        self.inner.events.subscribe()
    }

    /// Resolves when a process started with `keep_awake` has started or ended since the last
    /// call (the activity report then goes out at once).
    pub async fn keep_awake_changed(&self) {
        self.inner.keep_awake_changed.notified().await
    }

    pub(super) fn publish(&self, info: ProcessInfo) {
        if info.keep_awake {
            self.inner.keep_awake_changed.notify_one();
        }
        let _ = self.inner.events.send(info);
    }

    /// Forgets a process: kills its tree if it runs, waits for that, deletes its folder.
    pub async fn remove(&self, name: &str) -> Result<(), ChannelError> {
        let p = self.resolve(name)?;
        if !p.is_done() {
            p.kill.cancel();
            p.wait_done(KILL_WAIT).await;
            if !p.is_done() {
                // Kept, so that it still counts and can be asked about until it has ended.
                return Err(ChannelError::new(
                    ErrorCode::Busy,
                    format!(
                        "process {} did not end within {KILL_WAIT:?} of being killed; try again",
                        p.id
                    ),
                ));
            }
        }
        self.map().remove(&p.id);
        p.lock().log.remove_all();
        let _ = std::fs::remove_dir_all(&p.dir);
        Ok(())
    }

    /// Forgets finished processes: those that ended over `retention_ms` ago, then the ones that
    /// ended longest ago while more than `keep` are left.
    pub fn evict_finished(&self, keep: usize, retention_ms: Option<u64>) {
        let now = now_ms();
        let gone: Vec<Arc<Process>> = {
            let mut map = self.map();
            let mut finished: Vec<(u64, String)> = map
                .values()
                .filter(|p| p.is_done())
                .map(|p| (p.lock().info.ended_at_ms.unwrap_or(0), p.id.clone()))
                .collect();
            finished.sort();
            let expired = finished
                .iter()
                .take_while(|(ended, _)| {
                    retention_ms.is_some_and(|r| ended.saturating_add(r) <= now)
                })
                .count();
            let n = expired.max(finished.len().saturating_sub(keep));
            finished
                .into_iter()
                .take(n)
                .filter_map(|(_, id)| map.remove(&id))
                .collect()
        };
        for p in gone {
            p.lock().log.remove_all();
            let _ = std::fs::remove_dir_all(&p.dir);
        }
    }
}
