//! Code that keeps state, in the dev image's ipykernel on a real engine: variables kept between
//! runs, a PNG displayed from raw bytes, an exception's traceback, contexts and their restart,
//! the streamed lines, a kernel killed for memory, and 1,000 runs without sandboxd growing.
//! Needs Docker (scripts/docker-setup.sh), the dev image (scripts/build-agent-image.sh) and a
//! static sandboxd (scripts/build-sandboxd.sh).

use crate::common::docker::*;
use crate::common::TestServer;
use agenthold::config::AGENT_IMAGE as DEV_IMAGE;
use serde_json::{json, Value};

async fn dev_agent(s: &TestServer, name: &str, memory_mb: u64) -> String {
    if docker_try(&["image", "inspect", DEV_IMAGE]).is_err() {
        panic!("image {DEV_IMAGE} is missing; run scripts/build-agent-image.sh first");
    }
    s.running_agent(json!({"name": name, "image": DEV_IMAGE, "memoryMb": memory_mb}))
        .await
}

async fn run(s: &TestServer, id: &str, body: Value) -> Value {
    let (st, out) = s
        .call("POST", &format!("/api/v1/agents/{id}/code"), Some(body))
        .await;
    assert_eq!(st, 200, "{out}");
    out
}

async fn code(s: &TestServer, id: &str, code: &str) -> Value {
    run(s, id, json!({"code": code})).await
}

/// A 1×1 PNG made from bytes (no matplotlib), displayed, and its base64 printed to compare.
const PNG: &str = r#"
import base64, struct, zlib
from IPython.display import Image, display
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b''))
display(Image(data=png))
print(base64.b64encode(png).decode())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_keeps_state_between_runs_and_says_what_it_made() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "coder", 512).await;

    let first = code(&s, &id, "x = 41\nprint('hi')\nx + 1").await;
    assert_eq!(first["results"], json!([{"text/plain": "42"}]), "{first}");
    assert_eq!(
        (&first["stdout"], &first["error"], &first["executionCount"]),
        (&json!("hi\n"), &Value::Null, &json!(1)),
        "{first}"
    );
    let kept = code(&s, &id, "x * 2").await;
    assert_eq!(kept["results"][0]["text/plain"], "82", "{kept}");

    // A PNG from raw bytes comes back as base64 under its MIME type.
    let png = code(&s, &id, PNG).await;
    let b64 = png["stdout"].as_str().expect("stdout").trim();
    assert_eq!(
        png["results"][0]["image/png"].as_str().map(str::trim),
        Some(b64),
        "{png}"
    );

    // An exception: its class, its message and a traceback naming the line, no colours.
    let err = code(&s, &id, "def f():\n    return 1 / 0\nf()").await;
    assert_eq!(err["error"]["name"], "ZeroDivisionError", "{err}");
    assert_eq!(err["error"]["value"], "division by zero", "{err}");
    let tb = err["error"]["traceback"].as_str().expect("traceback");
    assert!(
        tb.contains("return 1 / 0") && !tb.contains('\u{1b}'),
        "{tb}"
    );

    // A context of its own, and a restart that forgets.
    let base = format!("/api/v1/agents/{id}/code/contexts");
    let (st, made) = s.call("POST", &base, None).await;
    assert_eq!(st, 201, "{made}");
    let cid = made["id"].as_str().expect("id").to_string();
    let other = run(&s, &id, json!({"code": "'x' in dir()", "context": cid})).await;
    assert_eq!(other["results"][0]["text/plain"], "False", "{other}");
    let (_, list) = s.call("GET", &base, None).await;
    let ids: Vec<&Value> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|c| &c["id"])
        .collect();
    assert_eq!(ids, [&json!("default"), &json!(cid)], "{list}");
    let (st, restarted) = s
        .call("POST", &format!("{base}/default/restart"), None)
        .await;
    assert_eq!(
        (st, &restarted["executionCount"]),
        (200, &json!(0)),
        "{restarted}"
    );
    let gone = code(&s, &id, "x").await;
    assert_eq!(gone["error"]["name"], "NameError", "{gone}");
    let (st, _) = s.call("DELETE", &format!("{base}/{cid}"), None).await;
    assert_eq!(st, 204);
    let (st, _) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/code"),
            Some(json!({"code": "1", "context": cid})),
        )
        .await;
    assert_eq!(st, 404);

    // Streamed: the lines as they come, `done` last.
    let r = s
        .post(&format!("/api/v1/agents/{id}/code?stream=true"))
        .json(&json!({"code": "print('a')\n7 * 6"}))
        .send()
        .await
        .expect("stream");
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("body");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(
        lines[..],
        [
            json!({"stdout": "a\n"}),
            json!({"result": {"text/plain": "42"}}),
            json!({"done": {"executionCount": 2, "truncated": false}}),
        ],
        "{text}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_killed_for_memory_is_said_and_the_context_starts_anew() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "hungry", 192).await;
    code(&s, &id, "x = 1").await;
    // Bytes written, not only reserved: 1 GiB against 192 MiB (and its swap).
    let hog = code(&s, &id, "b = b'\\x01' * (1024 * 1024 * 1024)").await;
    assert_eq!(hog["error"]["name"], "KernelOutOfMemory", "{hog}");
    assert_eq!(hog["executionCount"], Value::Null, "{hog}");
    // The agent lives on, and the next run has a new kernel without the old variables.
    assert_eq!(s.state(&id).await, "running");
    let next = code(&s, &id, "'x' in dir()").await;
    assert_eq!(next["results"][0]["text/plain"], "False", "{next}");
    assert_eq!(next["executionCount"], 1, "{next}");
    s.stop().await;
}

/// sandboxd's resident memory in kB, read inside the container.
async fn sandboxd_rss_kb(s: &TestServer, id: &str) -> u64 {
    let out = s
        .exec_ok(
            id,
            &["sh", "-c", "grep VmRSS /proc/$(pgrep -xo sandboxd)/status"],
        )
        .await;
    out.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {out:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_runs_do_not_grow_sandboxd() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "many", 512).await;
    // Warm up: the kernel, the allocator's pools, the tunnel's buffers.
    for _ in 0..50 {
        code(&s, &id, "1+1").await;
    }
    let before = sandboxd_rss_kb(&s, &id).await;
    for i in 0..1000 {
        let out = code(&s, &id, "1+1").await;
        assert_eq!(out["results"][0]["text/plain"], "2", "run {i}: {out}");
    }
    let after = sandboxd_rss_kb(&s, &id).await;
    // A leak of even 4 KiB a run would show as 4 MB.
    assert!(
        after <= before + 2048,
        "sandboxd grew from {before} kB to {after} kB over 1,000 runs"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_starts_with_the_agents_env_and_a_restart_takes_a_new_one() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    if docker_try(&["image", "inspect", DEV_IMAGE]).is_err() {
        panic!("image {DEV_IMAGE} is missing; run scripts/build-agent-image.sh first");
    }
    let id = s
        .running_agent(json!({"name": "keyed", "image": DEV_IMAGE, "env": {"MODEL_KEY": "k1"}}))
        .await;
    let read = "import os; print(os.environ.get('MODEL_KEY'), 'HTTP_PROXY' in os.environ)";
    let out = code(&s, &id, read).await;
    assert_eq!(
        out["stdout"], "k1 True\n",
        "the agent's env over the sandbox's: {out}"
    );
    let r = s
        .patch_agent(&id, json!({"env": {"MODEL_KEY": "k2"}}))
        .await;
    assert_eq!(r.status(), 200);
    // A running kernel keeps what it started with; a restart (or a new context) takes the new.
    let out = code(&s, &id, read).await;
    assert_eq!(out["stdout"], "k1 True\n", "{out}");
    let (st, _) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/code/contexts/default/restart"),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let out = code(&s, &id, read).await;
    assert_eq!(out["stdout"], "k2 True\n", "{out}");
    let (st, made) = s
        .call("POST", &format!("/api/v1/agents/{id}/code/contexts"), None)
        .await;
    assert_eq!(st, 201, "{made}");
    let out = run(&s, &id, json!({"code": read, "context": made["id"]})).await;
    assert_eq!(out["stdout"], "k2 True\n", "{out}");
    s.destroy(&id).await;
}
