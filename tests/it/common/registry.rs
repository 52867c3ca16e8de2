//! A minimal Docker Registry (HTTP API v2) on loopback, serving one image, so that tests can
//! make the engine really pull (there is no registry here). Docker treats registries on
//! 127.0.0.0/8 as insecure, so plain HTTP is allowed (`docker info` lists them).
//!
//! The image is a local image (`docker save`) plus one extra layer of random bytes, so every
//! test pulls a new image id, and the layer is big enough to report progress in several steps.
//! The image is an OCI image with uncompressed layers (their digests are then their diff ids).
//! Blobs stream in chunks with short pauses; a [`Fault`] makes the registry fail on purpose, and
//! [`Registry::hold_at_half`] stops the big layer half way until [`Registry::release`].

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode};
use bytes::Bytes;
use sha2::{Digest, Sha256};

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// Blobs go out in pieces this big with a pause between them: a local pull would otherwise be
/// over before the engine reports any progress.
const CHUNK: usize = 256 * 1024;
const CHUNK_PAUSE: Duration = Duration::from_millis(40);

/// How the registry misbehaves on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Every manifest is unknown (`404 MANIFEST_UNKNOWN`): the image does not exist.
    NoManifest,
    /// The big layer's first download breaks off half way; afterwards the registry has lost
    /// it (`404 BLOB_UNKNOWN`), so the engine's retry fails too instead of trying for minutes.
    BreakBigLayer,
}

/// A blob and its digest (`sha256:…`).
#[derive(Clone)]
pub struct Blob {
    pub digest: String,
    pub bytes: Bytes,
}

impl Blob {
    fn of(bytes: Vec<u8>) -> Blob {
        Blob {
            digest: format!("sha256:{}", hex::encode(Sha256::digest(&bytes))),
            bytes: Bytes::from(bytes),
        }
    }
}

/// One image as a registry holds it.
pub struct TestImage {
    pub manifest: Blob,
    pub config: Blob,
    /// The base image's layers, then the random one.
    pub layers: Vec<Blob>,
}

impl TestImage {
    /// `base` (a local image) with one more layer holding `filler_mib` MiB of random bytes.
    pub fn from_local(base: &str, filler_mib: usize) -> TestImage {
        let saved = Command::new("docker")
            .args(["save", base])
            .output()
            .unwrap_or_else(|e| panic!("cannot run docker save {base}: {e}"));
        assert!(
            saved.status.success(),
            "docker save {base} failed: {}",
            String::from_utf8_lossy(&saved.stderr)
        );
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        let mut archive = tar::Archive::new(&saved.stdout[..]);
        for entry in archive.entries().expect("docker save output is a tar") {
            let mut entry = entry.expect("tar entry");
            let path = entry
                .path()
                .expect("tar path")
                .to_string_lossy()
                .into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("tar entry data");
            files.insert(path, data);
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&files["manifest.json"]).expect("docker save manifest.json");
        let config_file = manifest[0]["Config"]
            .as_str()
            .expect("Config in manifest.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&files[config_file]).expect("image config json");
        let mut layers: Vec<Blob> = manifest[0]["Layers"]
            .as_array()
            .expect("Layers in manifest.json")
            .iter()
            .map(|l| Blob::of(files[l.as_str().expect("layer path")].clone()))
            .collect();

        let filler = filler_layer(filler_mib);
        config["rootfs"]["diff_ids"]
            .as_array_mut()
            .expect("rootfs.diff_ids")
            .push(filler.digest.clone().into());
        if let Some(history) = config["history"].as_array_mut() {
            history.push(serde_json::json!({
                "created": "2026-11-30T00:00:00Z",
                "created_by": "agenthold test registry: random filler layer",
            }));
        }
        layers.push(filler);
        let config = Blob::of(serde_json::to_vec(&config).expect("config json"));
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config.digest, "size": config.bytes.len()},
            "layers": layers.iter().map(|l| serde_json::json!({
                "mediaType": LAYER_TYPE, "digest": l.digest, "size": l.bytes.len(),
            })).collect::<Vec<_>>(),
        });
        TestImage {
            manifest: Blob::of(serde_json::to_vec(&manifest).expect("manifest json")),
            config,
            layers,
        }
    }

    /// The random layer, the one that takes time.
    pub fn big_layer(&self) -> &Blob {
        self.layers.last().expect("the filler layer")
    }

    pub fn layer_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.bytes.len() as u64).sum()
    }
}

/// A tar with one file of random bytes.
fn filler_layer(mib: usize) -> Blob {
    let mut data = vec![0u8; mib * 1024 * 1024];
    rand::Rng::fill(&mut rand::rng(), &mut data[..]);
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    tar.append_data(&mut header, "agenthold-filler", &data[..])
        .expect("tar filler");
    Blob::of(tar.into_inner().expect("tar bytes"))
}

struct State {
    /// Repository name (`agenthold-test/pulled`) the image is served under, any tag.
    name: String,
    image: TestImage,
    fault: Fault,
    broke: AtomicBool,
    hold: AtomicBool,
    gate: tokio::sync::Notify,
    released: AtomicBool,
    /// Requests seen, `METHOD path`, for failure messages.
    log: Mutex<Vec<String>>,
    big_layer_gets: AtomicUsize,
}

pub struct Registry {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Registry {
    /// Serves `image` as repository `name` (any tag) on a free loopback port.
    pub async fn start(name: &str, image: TestImage, fault: Fault) -> Registry {
        let state = Arc::new(State {
            name: name.to_string(),
            image,
            fault,
            broke: AtomicBool::new(false),
            hold: AtomicBool::new(false),
            gate: tokio::sync::Notify::new(),
            released: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
            big_layer_gets: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the test registry");
        let addr = listener.local_addr().expect("registry address");
        let app = axum::Router::new().fallback({
            let state = state.clone();
            move |req: Request<Body>| {
                let state = state.clone();
                async move { serve(&state, req) }
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Registry { addr, state, task }
    }

    /// `127.0.0.1:PORT/NAME:TAG`.
    pub fn reference(&self, tag: &str) -> String {
        format!("{}/{}:{tag}", self.addr, self.state.name)
    }

    pub fn image(&self) -> &TestImage {
        &self.state.image
    }

    /// From now on the big layer stops half way until [`Registry::release`].
    pub fn hold_at_half(&self) {
        self.state.hold.store(true, Ordering::SeqCst);
    }

    pub fn release(&self) {
        self.state.released.store(true, Ordering::SeqCst);
        self.state.gate.notify_waiters();
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.log.lock().expect("log").clone()
    }

    pub fn big_layer_gets(&self) -> usize {
        self.state.big_layer_gets.load(Ordering::SeqCst)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({"errors": [{"code": code, "message": message}]});
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("error response")
}

fn serve(state: &Arc<State>, req: Request<Body>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    state
        .log
        .lock()
        .expect("log")
        .push(format!("{method} {path}"));
    if method != Method::GET && method != Method::HEAD {
        return error(StatusCode::METHOD_NOT_ALLOWED, "UNSUPPORTED", "read-only");
    }
    let mut resp = route(state, &path, method == Method::HEAD);
    resp.headers_mut().insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    resp
}

fn route(state: &Arc<State>, path: &str, head: bool) -> Response<Body> {
    if path == "/v2/" || path == "/v2" {
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .expect("ping response");
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", "not a registry path");
    };
    let image = &state.image;
    if let Some((name, reference)) = rest.rsplit_once("/manifests/") {
        let known = reference == image.manifest.digest || !reference.starts_with("sha256:");
        if name != state.name || !known || state.fault == Fault::NoManifest {
            return error(
                StatusCode::NOT_FOUND,
                "MANIFEST_UNKNOWN",
                "manifest unknown",
            );
        }
        return blob_response(&image.manifest, MANIFEST_TYPE, head, None);
    }
    if let Some((name, digest)) = rest.rsplit_once("/blobs/") {
        if name != state.name {
            return error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", "repository unknown");
        }
        if digest == image.config.digest {
            return blob_response(&image.config, "application/octet-stream", head, None);
        }
        let Some(layer) = image.layers.iter().find(|l| l.digest == digest) else {
            return error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "blob unknown");
        };
        if layer.digest != image.big_layer().digest || head {
            return blob_response(layer, "application/octet-stream", head, None);
        }
        state.big_layer_gets.fetch_add(1, Ordering::SeqCst);
        if state.fault == Fault::BreakBigLayer && state.broke.swap(true, Ordering::SeqCst) {
            return error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "blob unknown");
        }
        return blob_response(
            layer,
            "application/octet-stream",
            false,
            Some(state.clone()),
        );
    }
    error(StatusCode::NOT_FOUND, "NOT_FOUND", "not a registry path")
}

/// The blob, with its digest and length; `slow` streams it in paused chunks (the big layer),
/// honouring the hold and the break fault.
fn blob_response(
    blob: &Blob,
    content_type: &str,
    head: bool,
    slow: Option<Arc<State>>,
) -> Response<Body> {
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, blob.bytes.len())
        .header("docker-content-digest", &blob.digest);
    let body = match (head, slow) {
        (true, _) => Body::empty(),
        (false, None) => Body::from(blob.bytes.clone()),
        (false, Some(state)) => {
            let bytes = blob.bytes.clone();
            Body::from_stream(async_stream::stream! {
                let half = bytes.len() / 2;
                let mut sent = 0;
                while sent < bytes.len() {
                    if sent >= half {
                        if state.fault == Fault::BreakBigLayer {
                            yield Err(std::io::Error::other("the test registry breaks off"));
                            return;
                        }
                        if state.hold.load(Ordering::SeqCst) {
                            // Checked after registering, so a release in between is not lost.
                            let released = state.gate.notified();
                            if !state.released.load(Ordering::SeqCst) {
                                released.await;
                            }
                        }
                    }
                    let end = (sent + CHUNK).min(bytes.len());
                    yield Ok::<Bytes, std::io::Error>(bytes.slice(sent..end));
                    sent = end;
                    tokio::time::sleep(CHUNK_PAUSE).await;
                }
            })
        }
    };
    builder.body(body).expect("blob response")
}
