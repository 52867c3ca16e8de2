//! Image pulls on a real engine from a registry the test serves on loopback
//! (`common/registry.rs`): progress on the event stream and on the agent while the pull runs, a
//! rebuild onto a new tag, and a missing image or a broken download ending in `error` with the
//! reason instead of a hang. Needs Docker (scripts/docker-setup.sh) and a static sandboxd
//! (scripts/build-sandboxd.sh).

use crate::common::sse;
use std::time::Duration;

use crate::common::docker::*;
use crate::common::registry::{Fault, Registry, TestImage};
use crate::common::sse::{pulls, states, Events};
use serde_json::{json, Value};

const REPO: &str = "agenthold-test/pulled";
/// The random layer: big enough for several progress reports at the registry's pace.
const FILLER_MIB: usize = 12;

fn unique_tag() -> String {
    format!("t{:08x}", rand::random::<u32>())
}

/// Removes the images a test pulled (only those) when it ends, whether it passed or not.
/// Made before the [`DockerEnv`], so it is dropped after it: the env removes the containers
/// first, and an image a container still uses cannot be removed.
struct PulledImages(Vec<String>);

impl Drop for PulledImages {
    fn drop(&mut self) {
        for image in &self.0 {
            // An image that was never pulled is not there: nothing to do.
            let _ = docker_try(&["image", "rm", image]);
        }
    }
}

fn num(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{v} is not a whole number"))
}

/// Checks the reports of one pull that succeeded: they start at 0, grow, and end `done`.
fn assert_pull_succeeded(pulls: &[&Value], image: &str) {
    assert!(pulls.len() >= 2, "{pulls:?}");
    let (last, running) = pulls.split_last().expect("pull events");
    assert_eq!(running[0]["status"], "pulling", "{pulls:?}");
    assert_eq!(running[0]["percent"], 0, "{pulls:?}");
    for p in running {
        assert_eq!(p["status"], "pulling", "{pulls:?}");
        assert_eq!(p["image"], image);
        assert_eq!(p["error"], Value::Null);
    }
    for pair in running.windows(2) {
        assert!(
            num(&pair[1]["percent"]) >= num(&pair[0]["percent"])
                && num(&pair[1]["bytesDone"]) >= num(&pair[0]["bytesDone"]),
            "progress went back: {pulls:?}"
        );
        assert!(
            num(&pair[1]["percent"]) < 100,
            "100% before done: {pulls:?}"
        );
    }
    assert_eq!(last["status"], "done", "{pulls:?}");
    assert_eq!(last["image"], image);
    assert_eq!(last["percent"], 100);
    assert_eq!(last["error"], Value::Null);
    assert_eq!(last["layersDone"], last["layersTotal"], "{last}");
    assert_eq!(last["bytesDone"], last["bytesTotal"], "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_reports_growing_progress_then_the_agent_runs_and_a_rebuild_pulls_its_new_tag() {
    if skip_docker_tests() {
        return;
    }
    let registry = Registry::start(
        REPO,
        TestImage::from_local(BUSYBOX_IMAGE, FILLER_MIB),
        Fault::None,
    )
    .await;
    let image = registry.reference(&unique_tag());
    let retagged = registry.reference(&unique_tag());
    let _pulled = PulledImages(vec![image.clone(), retagged.clone()]);
    let env = DockerEnv::new_or_skip().expect("an engine answered a moment ago");
    let s = env.server(false).await;
    let mut events = Events::open(&s).await;

    // The big layer stops half way until released: meanwhile the pull must be visible.
    registry.hold_at_half();
    let id = s.create_agent(("pulled", image.as_str())).await;
    let before = events
        .about_until(&id, |kind, d| {
            kind == "pull" && d["bytesDone"].as_u64().unwrap_or(0) > 0
        })
        .await;
    let agent = s.agent(&id).await;
    assert_eq!(agent["state"], "creating", "{agent}");
    assert_eq!(agent["pull"]["status"], "pulling", "{agent}");
    assert_eq!(agent["pull"]["image"], image.as_str(), "{agent}");
    assert!(num(&agent["pull"]["bytesDone"]) > 0, "{agent}");
    assert_eq!(agent["pull"]["layersTotal"], 2, "{agent}");
    registry.release();
    let after = events
        .about_until(&id, |kind, d| {
            assert_ne!(d["state"], "error", "the agent failed: {d}");
            kind == "agent" && d["state"] == "running"
        })
        .await;
    let all: Vec<(String, Value)> = before.into_iter().chain(after).collect();

    let pulls = pulls(&all);
    assert_pull_succeeded(&pulls, &image);
    let steps: std::collections::BTreeSet<u64> = pulls
        .iter()
        .map(|p| num(&p["bytesDone"]))
        .filter(|b| *b > 0)
        .collect();
    assert!(steps.len() >= 3, "too few progress steps: {pulls:?}");
    let done = pulls.last().expect("done");
    assert_eq!(done["layersTotal"], 2, "{done}");
    // The base layer may be downloaded, or found already here from an earlier pull.
    let big = registry.image().big_layer().bytes.len() as u64;
    assert!(
        num(&done["bytesTotal"]) >= big
            && num(&done["bytesTotal"]) <= registry.image().layer_bytes(),
        "{done}"
    );

    // Pull events come while creating; the agent moves on only after the pull is done, and
    // no longer shows one.
    let done_at = all
        .iter()
        .position(|(k, d)| k == "pull" && d["status"] == "done")
        .expect("done event");
    let starting_at = all
        .iter()
        .position(|(k, d)| k == "agent" && d["state"] == "starting")
        .expect("starting event");
    assert!(done_at < starting_at, "{all:?}");
    for (kind, d) in &all[..done_at] {
        if kind == "agent" {
            assert_eq!(d["state"], "creating", "{all:?}");
        }
    }
    assert_eq!(states(&all).last().map(String::as_str), Some("running"));
    let agent = s.agent(&id).await;
    assert_eq!(agent["pull"], Value::Null, "{agent}");

    // The sandbox runs what the registry served.
    let filler = s
        .exec_ok(&id, &["busybox", "wc", "-c", "/agenthold-filler"])
        .await;
    let want = (FILLER_MIB * 1024 * 1024).to_string();
    assert_eq!(filler.split_whitespace().next(), Some(want.as_str()));

    // A rebuild onto another tag pulls it (the engine has the image by its id already, so the
    // pull names no layers).
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"image": retagged}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.act(&id, "rebuild").await;
    // (The change itself was announced as an agent event, still running.)
    let mut rebuilding = false;
    let rebuilt = events
        .about_until(&id, |kind, d| {
            assert_ne!(d["state"], "error", "the rebuild failed: {d}");
            rebuilding |= kind == "agent" && d["state"] == "rebuilding";
            rebuilding && kind == "agent" && d["state"] == "running"
        })
        .await;
    let pulls = sse::pulls(&rebuilt);
    assert_pull_succeeded(&pulls, &retagged);
    let rebuilding = rebuilt
        .iter()
        .position(|(k, d)| k == "agent" && d["state"] == "rebuilding")
        .expect("rebuilding event");
    let first_pull = rebuilt
        .iter()
        .position(|(k, _)| k == "pull")
        .expect("pull event");
    assert!(rebuilding < first_pull, "{rebuilt:?}");

    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 202);
    events.about_until(&id, |kind, _| kind == "deleted").await;
    s.stop().await;
}

/// Creates an agent from `fault`'s registry and returns its events up to `error`.
/// `None` when the Docker tests are skipped.
async fn failed_pull(fault: Fault) -> Option<(Registry, String, Vec<(String, Value)>, Value)> {
    if skip_docker_tests() {
        return None;
    }
    let registry = Registry::start(REPO, TestImage::from_local(BUSYBOX_IMAGE, 4), fault).await;
    let image = registry.reference(&unique_tag());
    let _pulled = PulledImages(vec![image.clone()]);
    let env = DockerEnv::new_or_skip().expect("an engine answered a moment ago");
    let s = env.server(false).await;
    let mut events = Events::open(&s).await;
    let started = std::time::Instant::now();
    let id = s.create_agent(("broken", image.as_str())).await;
    let seen = events
        .about_until(&id, |kind, d| {
            assert_ne!(d["state"], "running", "{d}");
            kind == "agent" && d["state"] == "error"
        })
        .await;
    // No hang: the engine's one retry of a broken download waits 5 s.
    assert!(started.elapsed() < Duration::from_secs(25), "{seen:?}");
    let agent = s.agent(&id).await;
    assert_eq!(agent["state"], "error");
    assert_eq!(agent["pull"], Value::Null, "{agent}");
    assert!(
        docker_try(&["image", "inspect", &image]).is_err(),
        "a failed pull left {image}"
    );
    s.stop().await;
    Some((registry, image, seen, agent))
}

fn assert_pull_failed(pulls: &[&Value], image: &str, error: &str) {
    let (last, before) = pulls.split_last().expect("pull events");
    assert!(!before.is_empty(), "{pulls:?}");
    assert!(before.iter().all(|p| p["status"] == "pulling"), "{pulls:?}");
    assert_eq!(last["status"], "failed", "{pulls:?}");
    assert_eq!(last["image"], image);
    assert!(num(&last["percent"]) < 100, "{last}");
    let why = last["error"].as_str().expect("failed pull has an error");
    assert!(
        error.contains(why),
        "the agent's error {error:?} lacks {why:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_is_an_error_with_the_registrys_reason() {
    let Some((registry, image, seen, agent)) = failed_pull(Fault::NoManifest).await else {
        return;
    };
    let error = agent["error"].as_str().expect("error message");
    assert!(error.contains(&image), "{error}");
    assert!(error.contains("no such image or tag"), "{error}");
    assert!(error.contains("manifest unknown"), "{error}");
    assert_pull_failed(&pulls(&seen), &image, error);
    assert!(
        registry
            .requests()
            .iter()
            .any(|r| r.contains("/manifests/")),
        "the engine never asked the registry: {:?}",
        registry.requests()
    );
    assert_eq!(states(&seen).last().map(String::as_str), Some("error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_breaks_off_is_an_error_after_some_progress() {
    let Some((registry, image, seen, agent)) = failed_pull(Fault::BreakBigLayer).await else {
        return;
    };
    let error = agent["error"].as_str().expect("error message");
    assert!(error.contains(&image), "{error}");
    let pulls = pulls(&seen);
    assert_pull_failed(&pulls, &image, error);
    assert!(
        pulls.iter().any(|p| num(&p["bytesDone"]) > 0),
        "no progress before the break: {pulls:?}"
    );
    assert!(registry.big_layer_gets() >= 1);
}
