//! Image pull progress: what a driver reports while it fetches an agent's image, and the meter
//! that folds per-layer reports into a few [`PullProgress`] reports a second.
//!
//! A pull reports through a [`PullSink`] that the caller (the lifecycle) hands to the driver
//! call that may pull. Reports are plain function calls that must not block: the lifecycle's
//! sink records the progress and publishes it on the event hub, whose broadcast never waits for
//! a slow subscriber.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::{PullProgress, PullStatus};

/// At most one progress report per this interval (the first report and the final one are
/// always sent at once): enough for a smooth bar, little enough for the event stream.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(250);

/// Receives one agent's pull reports. Cheap to clone.
#[derive(Clone)]
pub struct PullSink(Option<Arc<dyn Fn(PullProgress) + Send + Sync>>);

impl PullSink {
    /// `report` is called from inside the pull: it must return at once.
    pub fn new(report: impl Fn(PullProgress) + Send + Sync + 'static) -> PullSink {
        PullSink(Some(Arc::new(report)))
    }

    /// A sink that drops every report, for callers that show no progress.
    pub fn discard() -> PullSink {
        PullSink(None)
    }

    fn send(&self, progress: PullProgress) {
        if let Some(report) = &self.0 {
            report(progress);
        }
    }
}

impl std::fmt::Debug for PullSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "PullSink"
        } else {
            "PullSink(discard)"
        })
    }
}

#[derive(Debug, Default)]
struct Layer {
    downloaded: u64,
    size: Option<u64>,
    complete: bool,
}

/// Keeps one pull's per-layer state and reports it, throttled, to a [`PullSink`]. Dropped
/// without [`PullMeter::finish`] (the pull's future was cancelled), it reports a failure, so no
/// watcher is left with a pull that never ends.
#[derive(Debug)]
pub struct PullMeter {
    sink: PullSink,
    image: String,
    layers: HashMap<String, Layer>,
    percent: u8,
    last_sent: Option<Instant>,
    /// What the last report said, so that a report that would say the same is not sent.
    last: Option<PullProgress>,
    dirty: bool,
    finished: bool,
}

impl PullMeter {
    /// Reports `pulling` at 0% at once, so watchers learn that a pull began before the
    /// registry has said anything.
    pub fn start(sink: PullSink, image: &str) -> PullMeter {
        let mut meter = PullMeter {
            sink,
            image: image.to_string(),
            layers: HashMap::new(),
            percent: 0,
            last_sent: None,
            last: None,
            dirty: true,
            finished: false,
        };
        meter.flush();
        meter
    }

    fn layer_mut(&mut self, id: &str) -> &mut Layer {
        self.dirty = true;
        self.layers.entry(id.to_string()).or_default()
    }

    /// The image has a layer `id` (announced before its download starts).
    pub fn layer(&mut self, id: &str) {
        if !self.layers.contains_key(id) {
            self.layer_mut(id);
        }
    }

    /// `current` bytes of layer `id` are downloaded, of `total` when known.
    pub fn downloading(&mut self, id: &str, current: u64, total: Option<u64>) {
        let layer = self.layer_mut(id);
        if let Some(total) = total.filter(|t| *t > 0) {
            layer.size = Some(total);
        }
        layer.downloaded = layer.downloaded.max(current);
    }

    /// Layer `id` is fully downloaded (it may still be unpacking).
    pub fn downloaded(&mut self, id: &str) {
        let layer = self.layer_mut(id);
        if let Some(size) = layer.size {
            layer.downloaded = size;
        }
    }

    /// Layer `id` is unpacked, or was already on the machine.
    pub fn complete(&mut self, id: &str) {
        let layer = self.layer_mut(id);
        if let Some(size) = layer.size {
            layer.downloaded = size;
        }
        layer.complete = true;
    }

    /// Sends the progress if it changed since the last report and that report is at least
    /// [`REPORT_INTERVAL`] old. Call it after updates and on a timer, so that the last change
    /// before a quiet spell is not held back.
    pub fn flush(&mut self) {
        if !self.dirty
            || self
                .last_sent
                .is_some_and(|t| t.elapsed() < REPORT_INTERVAL)
        {
            return;
        }
        let progress = self.snapshot(PullStatus::Pulling, None);
        if self.last.as_ref() == Some(&progress) {
            self.dirty = false;
            return;
        }
        self.send(progress);
    }

    /// Reports the end of the pull: `done` at 100%, or `failed` with `error`.
    pub fn finish(mut self, result: Result<(), String>) {
        let progress = match result {
            Ok(()) => {
                for layer in self.layers.values_mut() {
                    layer.complete = true;
                    layer.downloaded = layer.size.unwrap_or(layer.downloaded);
                }
                self.percent = 100;
                self.snapshot(PullStatus::Done, None)
            }
            Err(e) => self.snapshot(PullStatus::Failed, Some(e)),
        };
        self.finished = true;
        self.send(progress);
    }

    fn send(&mut self, progress: PullProgress) {
        self.last_sent = Some(Instant::now());
        self.dirty = false;
        self.last = Some(progress.clone());
        self.sink.send(progress);
    }

    fn snapshot(&mut self, status: PullStatus, error: Option<String>) -> PullProgress {
        let layers_total = self.layers.len() as u32;
        let layers_done = self.layers.values().filter(|l| l.complete).count() as u32;
        let (mut bytes_done, mut bytes_total, mut sized) = (0u64, 0u64, 0u64);
        let mut unsized_pending = 0u64;
        for l in self.layers.values() {
            match l.size {
                Some(size) => {
                    bytes_done += l.downloaded.min(size);
                    bytes_total += size;
                    sized += 1;
                }
                None if !l.complete => unsized_pending += 1,
                None => {}
            }
        }
        if status != PullStatus::Done {
            let unpacked = ratio(layers_done as u64, layers_total as u64);
            // Layers whose size is not known yet are guessed at the average known size, so
            // the estimate does not jump to "almost done" while they wait for their turn.
            let downloaded = match bytes_total.checked_div(sized) {
                Some(average) => ratio(bytes_done, bytes_total + unsized_pending * average),
                None => unpacked,
            };
            let estimate = (90.0 * downloaded + 10.0 * unpacked).floor() as u8;
            self.percent = self.percent.max(estimate.min(99));
        }
        PullProgress {
            image: self.image.clone(),
            status,
            layers_done,
            layers_total,
            bytes_done,
            bytes_total,
            percent: self.percent,
            error,
        }
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64).clamp(0.0, 1.0)
    }
}

impl Drop for PullMeter {
    fn drop(&mut self) {
        if !self.finished {
            let progress =
                self.snapshot(PullStatus::Failed, Some("the pull was interrupted".into()));
            self.send(progress);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn recording() -> (PullSink, Arc<Mutex<Vec<PullProgress>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = PullSink::new({
            let seen = seen.clone();
            move |p| seen.lock().unwrap().push(p)
        });
        (sink, seen)
    }

    #[test]
    fn reports_are_throttled_but_the_first_and_the_last_are_sent_at_once() {
        let (sink, seen) = recording();
        let mut m = PullMeter::start(sink, "x:1");
        for i in 0..100 {
            m.downloading("a", i * 10, Some(1000));
            m.flush();
        }
        m.finish(Ok(()));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].status, PullStatus::Pulling);
        assert_eq!(seen[0].percent, 0);
        assert_eq!(seen[1].status, PullStatus::Done);
        assert_eq!(seen[1].percent, 100);
        assert_eq!((seen[1].layers_done, seen[1].layers_total), (1, 1));
        assert_eq!((seen[1].bytes_done, seen[1].bytes_total), (1000, 1000));
    }

    #[test]
    fn a_report_that_would_say_nothing_new_is_not_sent() {
        let (sink, seen) = recording();
        let mut m = PullMeter::start(sink, "x:1");
        m.downloading("a", 10, Some(100));
        m.last_sent = None; // as if the interval had passed
        m.flush();
        m.downloading("a", 10, Some(100));
        m.last_sent = None;
        m.flush();
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_estimate_grows_and_waits_for_layers_of_unknown_size() {
        let (sink, seen) = recording();
        let mut m = PullMeter::start(sink, "x:1");
        m.layer("a");
        m.layer("b");
        m.layer("base");
        m.complete("base"); // already on the machine
        m.downloading("a", 500, Some(1000));
        let half_of_a = m.snapshot(PullStatus::Pulling, None);
        assert_eq!((half_of_a.bytes_done, half_of_a.bytes_total), (500, 1000));
        // b is guessed at a's size: 500 of ~2000 bytes, 1 of 3 layers.
        assert_eq!(half_of_a.percent, 25);
        m.downloaded("a");
        m.complete("a");
        m.downloading("b", 100, Some(100));
        let later = m.snapshot(PullStatus::Pulling, None);
        assert!(later.percent > half_of_a.percent, "{later:?}");
        assert!(later.percent < 100, "{later:?}");
        // A bigger layer than guessed lowers the estimate, but the report never goes back.
        m.downloading("b", 100, Some(1_000_000));
        assert_eq!(m.snapshot(PullStatus::Pulling, None).percent, later.percent);
        drop(m);
        let seen = seen.lock().unwrap();
        let last = seen.last().unwrap();
        assert_eq!(last.status, PullStatus::Failed);
        assert_eq!(last.error.as_deref(), Some("the pull was interrupted"));
    }

    #[test]
    fn a_failure_carries_its_reason() {
        let (sink, seen) = recording();
        PullMeter::start(sink, "x:1").finish(Err("manifest unknown".into()));
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[1],
            PullProgress {
                image: "x:1".into(),
                status: PullStatus::Failed,
                layers_done: 0,
                layers_total: 0,
                bytes_done: 0,
                bytes_total: 0,
                percent: 0,
                error: Some("manifest unknown".into()),
            }
        );
    }
}
