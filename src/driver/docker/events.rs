//! Docker's event stream, turned into [`DriverEvent`]s for this installation's sandboxes.
//!
//! The stream is filtered by our labels, reconnects with backoff when dockerd goes away, and
//! after a reconnect resyncs from a container list (events during the gap are lost). Events that
//! arrive while one of the driver's own operations on that sandbox is under way (a stop inside a
//! start, a rebuild's removal) are dropped, except the death of a container the operation has
//! already launched: that is the sandbox itself failing (sandboxd exiting at boot), not us.
//! Anything later is passed on, and the lifecycle checks it against the container's real state,
//! so a late echo of our own operation changes nothing while an outside change right after one
//! is never missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::models::{ContainerSummaryStateEnum, EventMessage};
use bollard::query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder};
use bollard::Docker;
use futures::StreamExt;
use tokio::sync::mpsc;

use super::names::{Names, LABEL_MANAGED, LABEL_PREFIX, LABEL_ROLE};
use crate::driver::DriverEvent;

/// The first wait before reconnecting to a lost event stream; it doubles with each failure.
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait: a restarted dockerd is followed again within this much of answering.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

#[derive(Default)]
struct Track {
    /// Start times of the operations in flight.
    active: Vec<SystemTime>,
    /// When one of them last asked Docker to start the container: a `die` or `destroy` from
    /// then on is the new sandbox failing, which no operation of ours causes.
    launched: Option<Launch>,
}

struct Launch {
    at: SystemTime,
    /// Docker's id of the container launched, when known: a `destroy` or `die` of another
    /// one (the container it replaced, whose removal Docker may report late) is never the new
    /// sandbox failing, whatever its time.
    container: Option<String>,
}

/// The driver's own operations per sandbox, so their events can be told from outside ones.
#[derive(Default, Clone)]
pub struct OwnOps {
    inner: Arc<Mutex<HashMap<String, Track>>>,
}

pub struct OpGuard {
    ops: OwnOps,
    id: String,
    start: SystemTime,
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let mut map = self.ops.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(track) = map.get_mut(&self.id) else {
            return;
        };
        if let Some(i) = track.active.iter().position(|t| *t == self.start) {
            track.active.swap_remove(i);
        }
        if track.active.is_empty() {
            map.remove(&self.id);
        }
    }
}

impl OwnOps {
    /// Marks an operation on `id` as running until the guard drops.
    pub fn begin(&self, id: &str) -> OpGuard {
        let start = SystemTime::now();
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_default()
            .active
            .push(start);
        OpGuard {
            ops: self.clone(),
            id: id.to_string(),
            start,
        }
    }

    /// Marks that an operation under way on `id` is about to start its container (Docker's
    /// id `container`, when known). Call it right before the start request, after any stop or
    /// removal the operation makes itself.
    pub fn launching(&self, id: &str, container: Option<&str>) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(track) = map.get_mut(id) {
            track.launched = Some(Launch {
                at: SystemTime::now(),
                container: container.map(str::to_string),
            });
        }
    }

    /// Takes back [`OwnOps::launching`]: the operation removes the container it launched (it
    /// would not start) to make another, and launches that one later.
    pub fn unlaunch(&self, id: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(track) = map.get_mut(id) {
            track.launched = None;
        }
    }

    /// Whether an operation of ours on `id` is under way.
    pub fn busy(&self, id: &str) -> bool {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.contains_key(id)
    }

    /// Whether `event` on `id` at `at`, about Docker's container `container` (when the event
    /// says), belongs to one of our operations still under way.
    ///
    /// A stop or removal arriving while one runs is ours, or older than it and made moot by it
    /// (an operation begins only from a settled state, and ends in the state it chooses), unless
    /// it comes from the container the operation has since launched: one that happened after
    /// the launch, and not to another container. A start is ours if it happened inside the
    /// operation.
    pub fn caused_by_us(
        &self,
        id: &str,
        at: SystemTime,
        container: Option<&str>,
        event: &DriverEvent,
    ) -> bool {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(track) = map.get(id) else {
            return false;
        };
        match event {
            DriverEvent::Stopped(_) | DriverEvent::Removed(_) => match &track.launched {
                None => true,
                Some(l) => {
                    let other = matches!(
                        (container, l.container.as_deref()),
                        (Some(seen), Some(launched)) if seen != launched
                    );
                    at < l.at || other
                }
            },
            DriverEvent::Started(_) | DriverEvent::Paused(_) | DriverEvent::Unpaused(_) => {
                track.active.iter().any(|s| at >= *s)
            }
        }
    }
}

fn event_time(e: &EventMessage) -> SystemTime {
    match (e.time_nano, e.time) {
        (Some(n), _) if n > 0 => UNIX_EPOCH + Duration::from_nanos(n.unsigned_abs()),
        (_, Some(s)) if s > 0 => UNIX_EPOCH + Duration::from_secs(s.unsigned_abs()),
        _ => SystemTime::now(),
    }
}

fn to_driver_event(names: &Names, e: &EventMessage) -> Option<DriverEvent> {
    let attrs = e.actor.as_ref()?.attributes.as_ref()?;
    let id = names.agent_of(Some(attrs))?;
    match e.action.as_deref()? {
        "start" => Some(DriverEvent::Started(id)),
        "die" => Some(DriverEvent::Stopped(id)),
        "destroy" => Some(DriverEvent::Removed(id)),
        "pause" => Some(DriverEvent::Paused(id)),
        "unpause" => Some(DriverEvent::Unpaused(id)),
        _ => None,
    }
}

fn since_arg(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
}

/// Follows Docker's events until `tx`'s receiver is dropped. `since` is when the driver started,
/// so nothing between reconcile and the first subscription is missed.
pub async fn follow(
    docker: Docker,
    names: Names,
    ops: OwnOps,
    since: SystemTime,
    tx: mpsc::UnboundedSender<(DriverEvent, SystemTime)>,
) {
    let mut since = since;
    let mut backoff = MIN_BACKOFF;
    let mut reconnect = false;
    loop {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            (
                "label".to_string(),
                vec![
                    format!("{LABEL_MANAGED}=true"),
                    format!("{LABEL_PREFIX}={}", names.prefix()),
                    format!("{LABEL_ROLE}=sandbox"),
                ],
            ),
            (
                "event".to_string(),
                vec![
                    "start".to_string(),
                    "die".to_string(),
                    "destroy".to_string(),
                    "pause".to_string(),
                    "unpause".to_string(),
                ],
            ),
        ]);
        let opts = EventsOptionsBuilder::default()
            .since(&since_arg(since))
            .filters(&filters)
            .build();
        let mut stream = docker.events(Some(opts));
        if reconnect {
            // Whatever happened while we were away shows only in the containers' states now
            // (a restarted dockerd has lost its events; the replay from `since` is best effort).
            match resync(&docker, &names, &ops, &tx).await {
                Ok(()) => {
                    tracing::info!("docker events: reconnected");
                    // dockerd answers again: the next break starts over with short waits, even
                    // if no event arrives in between.
                    backoff = MIN_BACKOFF;
                }
                Err(e) => tracing::debug!("docker events: resync failed: {e}"),
            }
        }
        loop {
            let item = tokio::select! {
                _ = tx.closed() => return,
                item = stream.next() => item,
            };
            match item {
                Some(Ok(ev)) => {
                    backoff = MIN_BACKOFF;
                    let at = event_time(&ev);
                    since = at;
                    let Some(de) = to_driver_event(&names, &ev) else {
                        continue;
                    };
                    let id = de.agent().to_string();
                    let container = ev.actor.as_ref().and_then(|a| a.id.as_deref());
                    if ops.caused_by_us(&id, at, container, &de) {
                        tracing::trace!(?de, "docker event from our own operation");
                        continue;
                    }
                    tracing::debug!(?de, "docker event");
                    if tx.send((de, at)).is_err() {
                        return;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!("docker events: {e}; reconnecting");
                    break;
                }
                None => {
                    tracing::warn!("docker events: the stream ended; reconnecting");
                    break;
                }
            }
        }
        reconnect = true;
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
        // Events replayed from before the break are fine to see twice: the lifecycle's guarded
        // transitions make repeats harmless.
    }
}

async fn resync(
    docker: &Docker,
    names: &Names,
    ops: &OwnOps,
    tx: &mpsc::UnboundedSender<(DriverEvent, SystemTime)>,
) -> Result<(), bollard::errors::Error> {
    let list = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&names.filter("sandbox"))
                .build(),
        ))
        .await?;
    for c in list {
        let Some(id) = names.agent_of(c.labels.as_ref()) else {
            continue;
        };
        // A container between our own steps (stopped inside a start, not yet started again)
        // says nothing; the operation settles the agent.
        if ops.busy(&id) {
            continue;
        }
        let ev = match c.state {
            Some(ContainerSummaryStateEnum::RUNNING) => DriverEvent::Started(id),
            Some(ContainerSummaryStateEnum::PAUSED) => DriverEvent::Paused(id),
            _ => DriverEvent::Stopped(id),
        };
        // What the list shows is true now.
        if tx.send((ev, SystemTime::now())).is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn event(action: &str, labels: HashMap<String, String>) -> EventMessage {
        EventMessage {
            action: Some(action.to_string()),
            actor: Some(EventActor {
                id: Some("c0ffee".into()),
                attributes: Some(labels),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn container_events_map_to_driver_events() {
        let names = Names::new("ah");
        let labels = names.labels("sandbox", Some("abc"));
        let ev = |a| to_driver_event(&names, &event(a, labels.clone()));
        assert_eq!(ev("start"), Some(DriverEvent::Started("abc".into())));
        assert_eq!(ev("die"), Some(DriverEvent::Stopped("abc".into())));
        assert_eq!(ev("destroy"), Some(DriverEvent::Removed("abc".into())));
        assert_eq!(ev("pause"), Some(DriverEvent::Paused("abc".into())));
        assert_eq!(ev("unpause"), Some(DriverEvent::Unpaused("abc".into())));
        assert_eq!(ev("oom"), None);
        let other = Names::new("other").labels("sandbox", Some("abc"));
        assert_eq!(to_driver_event(&names, &event("start", other)), None);
    }

    #[test]
    fn events_inside_our_operations_are_ours() {
        let ops = OwnOps::default();
        let stopped = DriverEvent::Stopped("abc".into());
        let started = DriverEvent::Started("abc".into());
        let before = SystemTime::now() - Duration::from_secs(5);
        let guard = ops.begin("abc");
        let during = SystemTime::now();
        assert!(ops.busy("abc"));
        assert!(ops.caused_by_us("abc", during, None, &stopped));
        assert!(ops.caused_by_us("abc", during, None, &started));
        assert!(!ops.caused_by_us("other", during, None, &stopped));
        // A start from before the operation is not ours; a stop from before it, arriving
        // now, is moot (a late `die` of an earlier boot must not fail the start under way).
        assert!(!ops.caused_by_us("abc", before, None, &started));
        assert!(ops.caused_by_us("abc", before, None, &stopped));
        // Once the operation is over, a late event is passed on (the lifecycle checks it
        // against the container's real state), so an outside change right after it is seen.
        drop(guard);
        assert!(!ops.busy("abc"));
        assert!(!ops.caused_by_us("abc", during, None, &stopped));
        let later = SystemTime::now() + Duration::from_secs(5);
        assert!(!ops.caused_by_us("abc", later, None, &stopped));
    }

    #[test]
    fn a_container_dying_after_our_start_launched_it_is_not_ours() {
        let ops = OwnOps::default();
        let id = "abc";
        let _start = ops.begin(id);
        // The stop inside the start (the container ran with an old token) is ours...
        let inner_stop = SystemTime::now();
        ops.launching(id, None);
        let launched = SystemTime::now() + Duration::from_millis(1);
        assert!(ops.caused_by_us(id, inner_stop, None, &DriverEvent::Stopped(id.into())));
        // ...and so is the start itself, but the new sandbox dying (sandboxd exiting at
        // boot) or being removed is not, even while the start is still under way.
        assert!(ops.caused_by_us(id, launched, None, &DriverEvent::Started(id.into())));
        assert!(!ops.caused_by_us(id, launched, None, &DriverEvent::Stopped(id.into())));
        assert!(!ops.caused_by_us(id, launched, None, &DriverEvent::Removed(id.into())));
        // A start that removes the container it launched, to make another, removed it itself.
        ops.unlaunch(id);
        assert!(ops.caused_by_us(id, launched, None, &DriverEvent::Removed(id.into())));
    }

    #[test]
    fn a_replaced_container_reported_late_is_ours_and_the_launched_one_is_not() {
        let ops = OwnOps::default();
        let id = "abc";
        let _rebuild = ops.begin(id);
        ops.launching(id, Some("new"));
        // Docker reports the old container's removal with a time after the launch.
        let late = SystemTime::now() + Duration::from_millis(5);
        let removed = DriverEvent::Removed(id.into());
        let stopped = DriverEvent::Stopped(id.into());
        assert!(ops.caused_by_us(id, late, Some("old"), &removed));
        assert!(ops.caused_by_us(id, late, Some("old"), &stopped));
        // The launched container dying or vanishing is the sandbox failing.
        assert!(!ops.caused_by_us(id, late, Some("new"), &removed));
        assert!(!ops.caused_by_us(id, late, Some("new"), &stopped));
        // An event that names no container is judged by its time alone.
        assert!(!ops.caused_by_us(id, late, None, &stopped));
    }
}
