//! `fs.watch`: a directory's changes, from inotify, as [`WatchEvent`]s.
//!
//! What is watched is what the account may list, and nothing else:
//! - every directory is opened as the account ([`crate::fsid`]) through [`Location`] (no
//!   symbolic link out of the home is followed) and read-checked by the kernel when the watch is
//!   added: the watch is added through `/proc/self/fd/N` on the account's thread, and inotify
//!   wants read permission on the directory from the thread that adds it. A directory the
//!   account may not read is not watched, so nothing under it is reported;
//! - with `recursive`, subdirectories are opened from their parent without following a symbolic
//!   link, and those made (or moved in) later are added the same way.
//!
//! It is bounded: a sandbox has at most [`MAX_WATCHERS`] watch channels and [`MAX_WATCHES`]
//! watched directories between them (inotify's instances and watches are counted per uid, and
//! sandboxd's uid is root's, the host's too without a user namespace), and each channel queues at
//! most [`QUEUE`] events for a peer that reads slowly. Beyond that, events are dropped and one
//! `gap` event says so once the queue has room again; an event equal to one still queued is not
//! queued twice. inotify's own queue overflowing is a `gap` too.
//!
//! Events follow fsnotify (and so E2B): a rename is `rename` of the old path, then `create` of
//! the new one if it is still in view; a directory's own removal is reported by its parent.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{self as proto, ChannelError, ErrorCode, Reply, WatchEvent, WatchKind};
use futures::StreamExt;
use inotify::{EventMask, EventOwned, Inotify, WatchDescriptor, WatchMask, Watches};
use nix::dir::{Dir, Type};
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{as_account, io_err, kind_of, name_of, refuse, reply};
use crate::sandbox::Sandbox;

/// Watch channels a sandbox may have open at once.
pub const MAX_WATCHERS: usize = 8;
/// Directories watched in a sandbox, all its channels together.
pub const MAX_WATCHES: usize = 4096;
/// Events one channel holds for its peer.
pub const QUEUE: usize = 256;

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::MODIFY)
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::EXCL_UNLINK);

/// The watch channels and watches of one sandbox.
#[derive(Debug, Clone, Default)]
pub struct WatchBudget {
    watchers: Arc<AtomicUsize>,
    watches: Arc<AtomicUsize>,
}

fn take(counter: &AtomicUsize, max: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

impl WatchBudget {
    fn join(&self) -> Option<Held> {
        take(&self.watchers, MAX_WATCHERS).then(|| Held {
            budget: self.clone(),
            mine: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Watches in use, all channels together.
    pub fn watches(&self) -> usize {
        self.watches.load(Ordering::Acquire)
    }
}

/// One channel's share of the budget, given back when it ends.
#[derive(Debug, Clone)]
struct Held {
    budget: WatchBudget,
    mine: Arc<AtomicUsize>,
}

impl Held {
    fn take(&self) -> bool {
        let ok = take(&self.budget.watches, MAX_WATCHES);
        if ok {
            self.mine.fetch_add(1, Ordering::AcqRel);
        }
        ok
    }

    fn give_back(&self, n: usize) {
        self.budget.watches.fetch_sub(n, Ordering::AcqRel);
        self.mine.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The channel's end: the inotify descriptor is closed with its stream, which removes every
/// watch it holds.
struct Leave(Held);

impl Drop for Leave {
    fn drop(&mut self) {
        let mine = self.0.mine.swap(0, Ordering::AcqRel);
        self.0.budget.watches.fetch_sub(mine, Ordering::AcqRel);
        self.0.budget.watchers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Directories to watch, found as the account: their watch ids and paths.
struct Added {
    watches: Vec<(i32, (WatchDescriptor, String))>,
    /// The budget ran out before every directory was watched.
    truncated: bool,
    /// With `existing`: what the tree held once its watches were in place, by path.
    existing: Vec<String>,
}

/// Adds a watch on `root` (open as the account, on the account's thread) and, with `recursive`,
/// on every directory below it the account may read. With `existing`, also lists what each
/// directory holds once its watch is in place: for a directory made while the channel runs,
/// what was made in it before its watch was added would otherwise never be reported (`mkdir d
/// && touch d/x` is faster than the watcher).
fn add_tree(
    watches: &mut Watches,
    root: OwnedFd,
    logical: String,
    recursive: bool,
    existing: bool,
    held: &Held,
) -> io::Result<Added> {
    let mut added = Added {
        watches: Vec::new(),
        truncated: false,
        existing: Vec::new(),
    };
    if !held.take() {
        added.truncated = true;
        return Ok(added);
    }
    match add_one(watches, &root) {
        Ok(wd) => added
            .watches
            .push((wd.get_watch_descriptor_id(), (wd, logical.clone()))),
        Err(e) => {
            held.give_back(1);
            return Err(e);
        }
    }
    if !recursive {
        return Ok(added);
    }
    // Directories still to look into; each opened only when its turn comes, so a wide tree
    // does not hold a descriptor per directory.
    let mut todo: Vec<(OwnedFd, String)> = vec![(root, logical)];
    while let Some((dir_fd, path)) = todo.pop() {
        let Ok(at) = dir_fd.try_clone() else { continue };
        let Ok(mut dir) = Dir::from_fd(dir_fd) else {
            continue;
        };
        let mut children = Vec::new();
        for dirent in dir.iter().flatten() {
            let Some(name) = name_of(dirent.file_name()) else {
                continue;
            };
            if existing {
                added.existing.push(join(&path, name));
            }
            let is_dir = match dirent.file_type() {
                Some(t) => t == Type::Directory,
                None => fstatat(&at, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| kind_of(&st) == SFlag::S_IFDIR),
            };
            if is_dir {
                children.push(name.to_os_string());
            }
        }
        drop(dir);
        for name in children {
            let Ok(child) = open_dir_at(&at, &name) else {
                // The account may not read it (or it went away): not watched, not reported.
                continue;
            };
            if !held.take() {
                added.truncated = true;
                return Ok(added);
            }
            let child_path = join(&path, &name);
            match add_one(watches, &child) {
                Ok(wd) => added
                    .watches
                    .push((wd.get_watch_descriptor_id(), (wd, child_path.clone()))),
                Err(_) => {
                    held.give_back(1);
                    continue;
                }
            }
            todo.push((child, child_path));
        }
    }
    Ok(added)
}

fn open_dir_at(at: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(openat(
        at,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// Watches the directory `dir` is open on. Through `/proc/self/fd`, so the directory is the one
/// opened (no path is looked up again), and on the calling thread, whose identity inotify checks
/// read permission against.
fn add_one(watches: &mut Watches, dir: &OwnedFd) -> io::Result<WatchDescriptor> {
    let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
    watches.add(path, MASK)
}

fn join(dir: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Adds watches as the account, on the path the API names.
async fn add_as_account(
    sb: &Sandbox,
    watches: &Watches,
    held: &Held,
    path: String,
    recursive: bool,
    existing: bool,
) -> Result<Added, ChannelError> {
    let (mut watches, held) = (watches.clone(), held.clone());
    as_account(sb, &path, move |r, loc| {
        let fd = loc
            .open_path(OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(io_err(&r.logical))?;
        let logical = r.logical.display().to_string();
        add_tree(&mut watches, fd, logical, recursive, existing, &held).map_err(io_err(&r.logical))
    })
    .await
}

pub async fn watch(sb: Sandbox, s: MuxStream, path: String, recursive: bool) {
    let Some(held) = sb.watch_budget().join() else {
        let busy = ChannelError::new(
            ErrorCode::Busy,
            format!("this sandbox has {MAX_WATCHERS} watches open already"),
        );
        return refuse(s, busy).await;
    };
    let leave = Leave(held.clone());
    let stream = Inotify::init().and_then(|i| i.into_event_stream(vec![0u8; 64 * 1024]));
    let events = match stream {
        Ok(e) => e,
        Err(e) => {
            let code = if e.raw_os_error() == Some(nix::libc::EMFILE) {
                ErrorCode::Busy
            } else {
                ErrorCode::Io
            };
            return refuse(s, ChannelError::new(code, format!("inotify: {e}"))).await;
        }
    };
    let watches = events.watches();
    let added = match add_as_account(&sb, &watches, &held, path, recursive, false).await {
        Ok(a) if a.truncated => {
            let busy = ChannelError::new(
                ErrorCode::Busy,
                format!(
                    "more directories than the {MAX_WATCHES} a sandbox may watch; \
                     watch a smaller tree"
                ),
            );
            return refuse(s, busy).await;
        }
        Ok(a) => a,
        Err(e) => return refuse(s, e).await,
    };
    let Some((root_wd, (_, root))) = added.watches.first().cloned() else {
        return refuse(s, ChannelError::new(ErrorCode::Io, "nothing was watched")).await;
    };
    let mut s = s;
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    let mut state = State {
        dirs: added.watches.into_iter().collect(),
        root_wd,
        root,
        recursive,
        held: held.clone(),
        watches,
    };
    serve(&sb, s, events, &mut state).await;
    drop(leave);
}

struct State {
    /// Watch id to the watch and the directory's path.
    dirs: HashMap<i32, (WatchDescriptor, String)>,
    root_wd: i32,
    root: String,
    recursive: bool,
    held: Held,
    watches: Watches,
}

/// What one inotify event comes to.
#[derive(Default)]
struct Outcome {
    events: Vec<WatchEvent>,
    /// A directory to watch (made or moved in, with `recursive`).
    add: Option<String>,
    /// The watched directory itself is gone.
    ended: bool,
}

impl State {
    fn event(&self, kind: WatchKind, path: String) -> WatchEvent {
        WatchEvent { kind, path }
    }

    fn forget(&mut self, wd: i32) {
        if self.dirs.remove(&wd).is_some() {
            self.held.give_back(1);
        }
    }

    /// Stops watching `path` and everything below it (it moved away).
    fn forget_tree(&mut self, path: &str) {
        let prefix = format!("{path}/");
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, (_, p))| p.as_str() == path || p.starts_with(&prefix))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            // Removing a watch the kernel already dropped fails harmlessly.
            if let Some((desc, _)) = self.dirs.get(&wd) {
                let _ = self.watches.remove(desc.clone());
            }
            self.forget(wd);
        }
    }

    fn translate(&mut self, ev: EventOwned) -> Outcome {
        let mut out = Outcome::default();
        let wd = ev.wd.get_watch_descriptor_id();
        if ev.mask.contains(EventMask::Q_OVERFLOW) {
            out.events
                .push(self.event(WatchKind::Gap, self.root.clone()));
            return out;
        }
        if ev.mask.contains(EventMask::IGNORED) {
            self.forget(wd);
            out.ended = wd == self.root_wd;
            return out;
        }
        let Some(dir) = self.dirs.get(&wd).map(|(_, p)| p.clone()) else {
            return out;
        };
        let Some(name) = ev.name else {
            // About a watched directory itself; a subdirectory's is reported by its parent.
            if wd == self.root_wd {
                if ev.mask.contains(EventMask::DELETE_SELF) {
                    out.events.push(self.event(WatchKind::Remove, dir));
                    out.ended = true;
                } else if ev.mask.contains(EventMask::MOVE_SELF) {
                    out.events.push(self.event(WatchKind::Rename, dir));
                    out.ended = true;
                }
            }
            return out;
        };
        let path = join(&dir, &name);
        let is_dir = ev.mask.contains(EventMask::ISDIR);
        let kind = if ev.mask.contains(EventMask::CREATE) {
            WatchKind::Create
        } else if ev.mask.contains(EventMask::MODIFY) {
            WatchKind::Write
        } else if ev.mask.contains(EventMask::DELETE) {
            WatchKind::Remove
        } else if ev.mask.contains(EventMask::MOVED_FROM) {
            if is_dir && self.recursive {
                self.forget_tree(&path);
            }
            WatchKind::Rename
        } else if ev.mask.contains(EventMask::MOVED_TO) {
            WatchKind::Create
        } else {
            return out;
        };
        if kind == WatchKind::Create && is_dir && self.recursive {
            out.add = Some(path.clone());
        }
        out.events.push(self.event(kind, path));
        out
    }
}

/// Queues events for the peer, in order, coalescing and dropping as the module says.
struct Queue {
    tx: mpsc::Sender<WatchEvent>,
    /// Events handed to the peer so far (by the writer task).
    sent: Arc<AtomicU64>,
    /// Events queued so far.
    queued: u64,
    /// The last event queued, and its number.
    last: Option<(WatchEvent, u64)>,
    /// Events dropped since the last gap.
    dropped: u64,
}

impl Queue {
    /// False once the peer is gone.
    fn push(&mut self, ev: WatchEvent) -> bool {
        if self.dropped > 0 {
            // Nothing may overtake the gap that is owed.
            self.dropped += 1;
            return true;
        }
        if let Some((last, n)) = &self.last {
            if *last == ev && *n > self.sent.load(Ordering::Acquire) {
                return true;
            }
        }
        match self.tx.try_send(ev.clone()) {
            Ok(()) => {
                self.queued += 1;
                self.last = Some((ev, self.queued));
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped = 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

async fn serve(
    sb: &Sandbox,
    s: MuxStream,
    mut events: inotify::EventStream<Vec<u8>>,
    state: &mut State,
) {
    let (mut rd, mut wr) = tokio::io::split(s);
    let (tx, mut rx) = mpsc::channel::<WatchEvent>(QUEUE);
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let mut writer = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if proto::write_message(&mut wr, &ev).await.is_err() {
                return;
            }
            counted.fetch_add(1, Ordering::Release);
        }
        let _ = wr.shutdown().await;
    });
    let mut queue = Queue {
        tx: tx.clone(),
        sent,
        queued: 0,
        last: None,
        dropped: 0,
    };
    let mut probe = [0u8; 64];
    let mut writer_done = false;
    loop {
        let owed = queue.dropped > 0;
        tokio::select! {
            ev = events.next() => {
                let Some(Ok(ev)) = ev else { break };
                let out = state.translate(ev);
                let mut open = true;
                for e in out.events {
                    open &= queue.push(e);
                }
                if let Some(dir) = out.add {
                    match add_as_account(sb, &state.watches, &state.held, dir.clone(), true, true).await {
                        Ok(added) => {
                            for path in added.existing {
                                open &= queue.push(WatchEvent { kind: WatchKind::Create, path });
                            }
                            if added.truncated {
                                open &= queue.push(WatchEvent { kind: WatchKind::Gap, path: dir });
                            }
                            state.dirs.extend(added.watches);
                        }
                        // Gone already, or not the account's to read: not watched.
                        Err(e) => tracing::debug!(error = %e, "fs.watch: a new directory is not watched"),
                    }
                }
                if !open || out.ended {
                    break;
                }
            }
            permit = tx.reserve(), if owed => {
                let Ok(permit) = permit else { break };
                permit.send(WatchEvent { kind: WatchKind::Gap, path: state.root.clone() });
                queue.queued += 1;
                queue.last = None;
                queue.dropped = 0;
            }
            // The server never sends after the header: a read that ends means it left.
            read = rd.read(&mut probe) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
            }
            _ = &mut writer, if !writer_done => {
                writer_done = true;
                break;
            }
            _ = sb.cancel_token().cancelled() => break,
        }
    }
    // What is queued still goes out (a removal of the watched directory, say).
    drop(queue);
    drop(tx);
    if !writer_done {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: WatchKind, path: &str) -> WatchEvent {
        WatchEvent {
            kind,
            path: path.into(),
        }
    }

    #[tokio::test]
    async fn a_flood_is_cut_short_and_repeats_still_queued_are_coalesced() {
        let (tx, mut rx) = mpsc::channel(3);
        let sent = Arc::new(AtomicU64::new(0));
        let mut q = Queue {
            tx,
            sent: sent.clone(),
            queued: 0,
            last: None,
            dropped: 0,
        };
        // A write repeated while the first is still queued is queued once.
        assert!(q.push(ev(WatchKind::Write, "/a")));
        assert!(q.push(ev(WatchKind::Write, "/a")));
        assert_eq!(rx.try_recv().ok(), Some(ev(WatchKind::Write, "/a")));
        assert!(rx.try_recv().is_err());
        // Once delivered, the same event again is news.
        sent.store(1, Ordering::Release);
        assert!(q.push(ev(WatchKind::Write, "/a")));
        assert_eq!(rx.try_recv().ok(), Some(ev(WatchKind::Write, "/a")));
        // A flood: the queue fills, the rest is counted, not kept, and nothing overtakes the
        // gap that is owed, even once there is room again.
        for i in 0..10 {
            assert!(q.push(ev(WatchKind::Create, &format!("/f{i}"))));
        }
        assert_eq!(q.dropped, 7);
        let kept: Vec<WatchEvent> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(kept.len(), 3);
        assert!(q.push(ev(WatchKind::Remove, "/late")));
        assert!(rx.try_recv().is_err());
        assert_eq!(q.dropped, 8);
    }

    #[test]
    fn the_budget_caps_watchers_and_watches_and_is_given_back() {
        let budget = WatchBudget::default();
        let held: Vec<Held> = (0..MAX_WATCHERS).filter_map(|_| budget.join()).collect();
        assert_eq!(held.len(), MAX_WATCHERS);
        assert!(budget.join().is_none());
        let mine = held[0].clone();
        let taken = (0..MAX_WATCHES + 10).filter(|_| mine.take()).count();
        assert_eq!(taken, MAX_WATCHES);
        assert!(!held[1].take());
        mine.give_back(1);
        assert!(held[1].take());
        drop(Leave(mine));
        assert_eq!(budget.watches(), 1);
        drop(held);
    }
}
