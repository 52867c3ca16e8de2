//! Pulling a sandbox's image when the engine does not have it, reporting progress as it goes.
//!
//! The engine streams one JSON message per layer step (`Pulling fs layer`, `Downloading` with
//! byte counts, `Extracting`, `Pull complete`, …). Every message is read at once (the engine
//! must never wait on us) and folded into a [`PullMeter`], which reports a few times a second.

use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::models::CreateImageInfo;
use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures::StreamExt;

use super::error::{is_not_found, DockerError};
use crate::driver::pull::REPORT_INTERVAL;
use crate::driver::{PullMeter, PullSink};

/// A pull that takes longer than this fails instead of leaving the agent in `creating`.
const PULL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// A pull whose progress stalls this long fails too.
const PULL_STALL: Duration = Duration::from_secs(120);

/// Makes sure the engine has `image`, pulling it if it does not; the pull's progress goes to
/// `sink`. A pull that fails, stalls or finds no such image is [`DockerError::ImageMissing`]
/// with the engine's or the registry's reason.
pub(super) async fn ensure_image(
    docker: &Docker,
    image: &str,
    sink: &PullSink,
) -> Result<ImageFacts, DockerError> {
    match docker.inspect_image(image).await {
        Ok(info) => return Ok(ImageFacts::of(info)),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(DockerError::api(format!("inspecting image {image}"))(e)),
    }
    let reference = with_tag(image);
    tracing::info!(image = reference, "image not here; pulling it");
    let mut meter = PullMeter::start(sink.clone(), &reference);
    let pulled = tokio::time::timeout(PULL_TIMEOUT, follow(docker, &reference, &mut meter))
        .await
        .unwrap_or_else(|_| Err(format!("the pull took longer than {PULL_TIMEOUT:?}")));
    let result = match pulled {
        Ok(()) => match docker.inspect_image(image).await {
            Ok(info) => Ok(ImageFacts::of(info)),
            Err(e) => Err(format!("still missing after the pull: {e}")),
        },
        Err(why) => Err(why),
    };
    match &result {
        Ok(_) => tracing::info!(image = reference, "image pulled"),
        Err(why) => tracing::warn!(image = reference, "pulling the image failed: {why}"),
    }
    meter.finish(result.as_ref().map(|_| ()).map_err(Clone::clone));
    result.map_err(|why| DockerError::ImageMissing {
        image: image.to_string(),
        why,
    })
}

/// What a sandbox made from the image needs to know of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ImageFacts {
    /// The image's `USER`, when it names one: commands run as it when the image has no
    /// `agent` account (sandboxd itself must start as root).
    pub user: Option<String>,
}

impl ImageFacts {
    fn of(info: bollard::models::ImageInspect) -> ImageFacts {
        ImageFacts {
            user: info
                .config
                .and_then(|c| c.user)
                .filter(|u| !u.trim().is_empty()),
        }
    }
}

/// Reads the engine's pull stream to its end, feeding `meter`; `Err` says why the pull failed.
async fn follow(docker: &Docker, reference: &str, meter: &mut PullMeter) -> Result<(), String> {
    let mut stream = docker.create_image(
        Some(
            CreateImageOptionsBuilder::default()
                .from_image(reference)
                .build(),
        ),
        None,
        None,
    );
    // Reports wait for the meter's interval; the tick sends the last one of a quiet spell.
    let mut tick = tokio::time::interval(REPORT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stall = tokio::time::sleep(PULL_STALL);
    tokio::pin!(stall);
    let mut last_status = String::new();
    loop {
        tokio::select! {
            next = stream.next() => match next {
                None => return Ok(()),
                Some(Ok(info)) => {
                    stall.as_mut().reset(tokio::time::Instant::now() + PULL_STALL);
                    log(reference, &info, &mut last_status);
                    record(meter, &info);
                    meter.flush();
                }
                Some(Err(e)) => return Err(describe(e)),
            },
            _ = tick.tick() => meter.flush(),
            _ = &mut stall => {
                return Err(format!("the pull made no progress for {PULL_STALL:?}"));
            }
        }
    }
}

/// Folds one engine message into the meter. Messages that are not about a layer (`Pulling
/// from …`, `Digest: …`, `Status: …`) and retries (`Retrying in 5 seconds`) change nothing.
fn record(meter: &mut PullMeter, info: &CreateImageInfo) {
    let (Some(status), Some(id)) = (info.status.as_deref(), info.id.as_deref()) else {
        return;
    };
    let count = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
    match status {
        "Pulling fs layer" | "Waiting" => meter.layer(id),
        "Downloading" => {
            let detail = info.progress_detail.as_ref();
            let current = count(detail.and_then(|d| d.current)).unwrap_or(0);
            meter.downloading(id, current, count(detail.and_then(|d| d.total)));
        }
        "Verifying Checksum" | "Download complete" | "Extracting" => meter.downloaded(id),
        "Pull complete" | "Already exists" => meter.complete(id),
        _ => {}
    }
}

fn log(reference: &str, info: &CreateImageInfo, last_status: &mut String) {
    let status = info.status.as_deref().unwrap_or_default();
    if status != last_status {
        tracing::info!(
            image = reference,
            layer = info.id.as_deref().unwrap_or_default(),
            "{status}"
        );
        *last_status = status.to_string();
    } else if let Some(p) = &info.progress_detail {
        tracing::debug!(
            image = reference,
            "{status} {}/{}",
            p.current.unwrap_or(0),
            p.total.unwrap_or(0)
        );
    }
}

/// The engine's reason in words a person can act on. The engine reports a missing image as a
/// 404 answer or, once the pull has begun, as an error message in the stream.
fn describe(e: BollardError) -> String {
    let (status, message) = match e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => (Some(status_code), message),
        BollardError::DockerStreamError { error } => (None, error),
        other => return format!("pulling failed: {other}"),
    };
    if status == Some(404) || names_a_missing_image(&message) {
        format!("the registry has no such image or tag ({message})")
    } else {
        message
    }
}

fn names_a_missing_image(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "manifest unknown",
        "not found",
        "repository does not exist",
        "name unknown",
    ]
    .iter()
    .any(|s| m.contains(s))
}

/// `name` with `:latest` added when it names no tag or digest: a pull without a tag would fetch
/// every tag of the repository.
pub(super) fn with_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bollard::models::ProgressDetail;

    use super::*;
    use crate::model::{PullProgress, PullStatus};

    #[test]
    fn pulls_name_a_tag() {
        assert_eq!(with_tag("debian"), "debian:latest");
        assert_eq!(with_tag("debian:bookworm-slim"), "debian:bookworm-slim");
        assert_eq!(with_tag("127.0.0.1:5000/x/y"), "127.0.0.1:5000/x/y:latest");
        assert_eq!(with_tag("127.0.0.1:5000/x/y:1"), "127.0.0.1:5000/x/y:1");
        assert_eq!(with_tag("x@sha256:abcd"), "x@sha256:abcd");
    }

    fn msg(status: &str, id: &str, current: Option<i64>, total: Option<i64>) -> CreateImageInfo {
        CreateImageInfo {
            id: Some(id.into()),
            status: Some(status.into()),
            progress_detail: current.map(|c| ProgressDetail {
                current: Some(c),
                total,
            }),
            error_detail: None,
        }
    }

    #[test]
    fn engine_messages_become_layer_and_byte_counts() {
        let seen: Arc<Mutex<Vec<PullProgress>>> = Arc::default();
        let sink = PullSink::new({
            let seen = seen.clone();
            move |p| seen.lock().unwrap().push(p)
        });
        let mut meter = PullMeter::start(sink, "r/x:1");
        for m in [
            msg("Pulling from r/x", "1", None, None),
            msg("Already exists", "base", None, None),
            msg("Pulling fs layer", "big", None, None),
            msg("Downloading", "big", Some(1000), Some(4000)),
            msg("Retrying in 5 seconds", "big", None, None),
            msg("Downloading", "big", Some(3000), Some(4000)),
            msg("Verifying Checksum", "big", None, None),
            msg("Extracting", "big", Some(10), Some(4000)),
            msg("Pull complete", "big", None, None),
            msg("Digest: sha256:00", "", None, None),
        ] {
            record(&mut meter, &m);
        }
        meter.finish(Ok(()));
        let seen = seen.lock().unwrap();
        let last = seen.last().unwrap();
        assert_eq!(last.status, PullStatus::Done);
        assert_eq!((last.layers_done, last.layers_total), (2, 2));
        assert_eq!((last.bytes_done, last.bytes_total), (4000, 4000));
    }

    #[test]
    fn a_missing_image_is_described_as_such() {
        let why = describe(BollardError::DockerResponseServerError {
            status_code: 404,
            message: "manifest for r/x:1 not found: manifest unknown".into(),
        });
        assert_eq!(
            why,
            "the registry has no such image or tag (manifest for r/x:1 not found: manifest unknown)"
        );
        let why = describe(BollardError::DockerStreamError {
            error: "manifest unknown".into(),
        });
        assert_eq!(
            why,
            "the registry has no such image or tag (manifest unknown)"
        );
        let why = describe(BollardError::DockerStreamError {
            error: "unknown blob".into(),
        });
        assert_eq!(why, "unknown blob");
    }
}
