//! Docker's event stream, turned into [`DriverEvent`]s for this installation's sandboxes.
//!
//! The stream is filtered by our labels, reconnects with backoff when dockerd goes away, and
//! after a reconnect resyncs from a container list (events during the gap are lost). Events that
//! arrive while one of the driver's own operations on that sandbox is under way (a stop inside a
//! start, a rebuild's removal) are dropped. Anything later is passed on, and the lifecycle checks
//! it against the container's real state, so a late echo of our own operation changes nothing
//! while an outside change right after one is never missed.

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

#[derive(Default)]
struct Track {
    /// Start times of the operations in flight.
    active: Vec<SystemTime>,
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

    /// Whether an event on `id` at `at` falls inside one of our operations still under way.
    pub fn caused_by_us(&self, id: &str, at: SystemTime) -> bool {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id)
            .is_some_and(|t| t.active.iter().any(|s| at >= *s))
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
    tx: mpsc::UnboundedSender<DriverEvent>,
) {
    let mut since = since;
    let mut backoff = Duration::from_millis(250);
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
                ],
            ),
        ]);
        let opts = EventsOptionsBuilder::default()
            .since(&since_arg(since))
            .filters(&filters)
            .build();
        let mut stream = docker.events(Some(opts));
        if reconnect {
            // Whatever happened while we were away shows only in the containers' states now.
            match resync(&docker, &names, &ops, &tx).await {
                Ok(()) => tracing::info!("docker events: reconnected"),
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
                    backoff = Duration::from_millis(250);
                    let at = event_time(&ev);
                    since = at;
                    let Some(de) = to_driver_event(&names, &ev) else {
                        continue;
                    };
                    let id = match &de {
                        DriverEvent::Started(id)
                        | DriverEvent::Stopped(id)
                        | DriverEvent::Removed(id) => id.clone(),
                    };
                    if ops.caused_by_us(&id, at) {
                        tracing::trace!(?de, "docker event from our own operation");
                        continue;
                    }
                    tracing::debug!(?de, "docker event");
                    if tx.send(de).is_err() {
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
        backoff = (backoff * 2).min(Duration::from_secs(10));
        // Events replayed from before the break are fine to see twice: the lifecycle's guarded
        // transitions make repeats harmless.
    }
}

async fn resync(
    docker: &Docker,
    names: &Names,
    ops: &OwnOps,
    tx: &mpsc::UnboundedSender<DriverEvent>,
) -> Result<(), bollard::errors::Error> {
    let now = SystemTime::now();
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
        if ops.caused_by_us(&id, now) {
            continue;
        }
        let ev = match c.state {
            Some(ContainerSummaryStateEnum::RUNNING) => DriverEvent::Started(id),
            _ => DriverEvent::Stopped(id),
        };
        if tx.send(ev).is_err() {
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
        assert_eq!(ev("oom"), None);
        let other = Names::new("other").labels("sandbox", Some("abc"));
        assert_eq!(to_driver_event(&names, &event("start", other)), None);
    }

    #[test]
    fn events_inside_our_operations_are_ours() {
        let ops = OwnOps::default();
        let before = SystemTime::now() - Duration::from_secs(5);
        let guard = ops.begin("abc");
        let during = SystemTime::now();
        assert!(ops.caused_by_us("abc", during));
        assert!(!ops.caused_by_us("other", during));
        assert!(!ops.caused_by_us("abc", before));
        // Once the operation is over, a late event is passed on (the lifecycle checks it
        // against the container's real state), so an outside change right after it is seen.
        drop(guard);
        assert!(!ops.caused_by_us("abc", during));
        let later = SystemTime::now() + Duration::from_secs(5);
        assert!(!ops.caused_by_us("abc", later));
    }
}
