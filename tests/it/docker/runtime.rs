//! gVisor (`runsc`) as an agent's runtime (issue #17), on the real engine: what a runc agent can
//! do, a runsc agent can do too, with gVisor's kernel underneath; agents on both side by side;
//! and a runtime switched through a rebuild keeps the home. Needs Docker with runsc registered
//! (scripts/docker-setup.sh) when Docker tests are required.

use crate::common::docker::*;
use crate::common::{read_until, send_keys, TestServer, Ws, DEADLINE, TOKEN};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// The kernel release gVisor reports.
const GVISOR_KERNEL: &str = "4.4.0";

/// Fails the test when the engine lacks runsc: the setup script registers it.
pub(super) fn require_runsc() {
    let runtimes = docker(&["info", "--format", "{{json .Runtimes}}"]);
    assert!(
        runtimes.contains("\"runsc\""),
        "the engine has no runtime runsc ({runtimes}); run scripts/docker-setup.sh"
    );
}

async fn agent_on(s: &TestServer, name: &str, runtime: &str, extra: Value) -> String {
    let mut body = json!({"name": name, "image": AGENT_IMAGE, "runtime": runtime});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let r = s.send("POST", "/api/v1/agents", &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let a: Value = r.json().await.expect("agent");
    assert_eq!(a["runtime"], runtime);
    let id = a["id"].as_str().expect("id").to_string();
    s.wait_state(&id, "running").await;
    id
}

/// The runtime Docker made the agent's container with.
fn container_runtime(env: &DockerEnv, id: &str) -> String {
    docker(&[
        "inspect",
        "--format",
        "{{.HostConfig.Runtime}}",
        &env.container(id),
    ])
}

async fn kernel(s: &TestServer, id: &str) -> String {
    s.exec_ok(id, &["uname", "-r"]).await.trim().to_string()
}

/// The bytes of 1 MiB block `i` of the big file: one pseudo-random MiB with `i` in its first
/// eight bytes, so a block out of place or repeated is seen (and making them costs a copy, not
/// a hash: the test runs unoptimised).
fn block(base: &Bytes, i: u64) -> Bytes {
    let mut b = base.to_vec();
    b[..8].copy_from_slice(&i.to_le_bytes());
    Bytes::from(b)
}

fn random_mib() -> Bytes {
    let mut b = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    Bytes::from(b)
}

/// Writes 1 GiB through the file API and reads it back, both streamed; every byte must match.
async fn gib_round_trip(s: &TestServer, id: &str) {
    const BLOCKS: u64 = 1024;
    const MIB: usize = 1 << 20;
    let base = random_mib();
    let body = {
        let base = base.clone();
        futures::stream::iter(0..BLOCKS).map(move |i| Ok::<_, std::io::Error>(block(&base, i)))
    };
    let t = std::time::Instant::now();
    let r = s
        .put(&format!("/api/v1/agents/{id}/fs/write?path=big.bin"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .expect("write");
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    let wrote = t.elapsed();
    let t = std::time::Instant::now();
    let r = s
        .get(&format!("/api/v1/agents/{id}/fs/read?path=big.bin"))
        .send()
        .await
        .expect("read");
    assert_eq!(r.status(), 200);
    let mut n = 0usize;
    let mut want = block(&base, 0);
    let mut stream = r.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let mut chunk = chunk.expect("read body");
        while !chunk.is_empty() {
            let at = n % MIB;
            let take = chunk.len().min(MIB - at);
            assert!(
                chunk[..take] == want[at..at + take],
                "the file read back differs within bytes {n}..{}",
                n + take
            );
            n += take;
            chunk = chunk.slice(take..);
            if n.is_multiple_of(MIB) {
                want = block(&base, (n / MIB) as u64);
            }
        }
    }
    assert_eq!(n as u64, BLOCKS << 20);
    eprintln!(
        "1 GiB under runsc: written in {wrote:?}, read in {:?}",
        t.elapsed()
    );
    s.exec_ok(id, &["rm", "big.bin"]).await;
}

async fn terminal_at(s: &TestServer, id: &str, query: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?{query}"));
    let mut req = url.into_client_request().expect("request");
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("header"),
    );
    tokio_tungstenite::connect_async(req)
        .await
        .expect("terminal")
        .0
}

/// The session id from the first control message.
async fn session_of(ws: &mut Ws) -> String {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no session message in time");
        match msg {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).expect("control message");
                assert_eq!(v["type"], "session", "{v}");
                return v["id"].as_str().expect("session id").to_string();
            }
            Some(Ok(_)) => {}
            other => panic!("terminal ended before its session message: {other:?}"),
        }
    }
}

/// A shell in a terminal, left and attached to again: the same shell (its variable) answers.
async fn terminal_with_reattach(s: &TestServer, id: &str) {
    let mut ws = terminal_at(s, id, "cols=80&rows=24").await;
    let session = session_of(&mut ws).await;
    send_keys(&mut ws, "K=kept; echo ready$((40+2))\r").await;
    read_until(&mut ws, "ready42").await;
    drop(ws);
    let mut ws = terminal_at(s, id, &format!("session={session}")).await;
    assert_eq!(session_of(&mut ws).await, session);
    send_keys(&mut ws, "echo \"$K-$(uname -r)\"\r").await;
    read_until(&mut ws, &format!("kept-{GVISOR_KERNEL}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_agent_does_what_a_runc_agent_does_side_by_side() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    require_runsc();
    let s = env.server(true).await;
    let limits = s.get_json("/api/v1/limits").await;
    assert_eq!(limits["runtimes"], json!(["runc", "runsc"]));
    let g = agent_on(&s, "gvisor", "runsc", json!({})).await;
    let r = agent_on(&s, "plain", "runc", json!({})).await;
    assert_eq!(container_runtime(&env, &g), "runsc");
    assert_eq!(container_runtime(&env, &r), "runc");
    assert_eq!(kernel(&s, &g).await, GVISOR_KERNEL);
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    assert_eq!(
        kernel(&s, &r).await,
        host.trim(),
        "runc shares the host's kernel"
    );
    assert_eq!(
        s.exec_ok(&g, &["sh", "-c", "id -un; pwd; echo hi > f; cat f"])
            .await,
        "agent\n/home/agent\nhi\n"
    );

    gib_round_trip(&s, &g).await;
    terminal_with_reattach(&s, &g).await;

    // Only the tunnel is reachable, as under runc (`docker::isolation`): not the API
    // on the agent's gateway, not the host's addresses, not the other agent's gateway.
    let gw = network_gateway(&env.network(&g));
    let tunnel = format!("{gw}:{}", s.tunnel_addr.port());
    assert!(
        can_connect(&s, &g, &tunnel).await,
        "the tunnel is not reachable"
    );
    let mut addrs = vec![format!("{gw}:{}", s.api_addr.port())];
    let gw_other = network_gateway(&env.network(&r));
    addrs.push(listen_on(&gw_other).await.to_string());
    for h in host_addresses() {
        addrs.push(listen_on(&h).await.to_string());
    }
    for (addr, open) in addrs.iter().zip(reachable(&s, &g, &addrs).await) {
        assert!(!open, "the gVisor agent reaches {addr}");
    }

    // Sleep and wake: an exec wakes it, on gVisor still.
    s.stop_sleeping(&g).await;
    assert_eq!(kernel(&s, &g).await, GVISOR_KERNEL);
    assert_eq!(s.state(&g).await, "running");
    // The runc agent went on meanwhile.
    assert_eq!(s.exec_ok(&r, &["echo", "ok"]).await, "ok\n");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_the_runtime_through_a_rebuild_keeps_the_home() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    require_runsc();
    let s = env.server(false).await;
    let id = agent_on(&s, "switch", "runc", json!({})).await;
    s.exec_ok(&id, &["sh", "-c", "echo before > kept.txt"])
        .await;
    for (runtime, kernel_is_gvisor) in [("runsc", true), ("runc", false)] {
        let r = s
            .send(
                "PATCH",
                &format!("/api/v1/agents/{id}"),
                &json!({"runtime": runtime}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let a: Value = r.json().await.expect("agent");
        assert_eq!(a["needsRebuild"], true);
        s.act(&id, "rebuild").await;
        s.wait_state(&id, "running").await;
        assert_eq!(container_runtime(&env, &id), runtime);
        assert_eq!(kernel(&s, &id).await == GVISOR_KERNEL, kernel_is_gvisor);
        assert_eq!(s.exec_ok(&id, &["cat", "kept.txt"]).await, "before\n");
        assert_eq!(s.agent(&id).await["needsRebuild"], false);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_gvisor_the_disk_and_memory_limits_hold() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    require_runsc();
    let s = env.server(false).await;
    let id = agent_on(&s, "hog", "runsc", json!({"memoryMb": 128, "diskMb": 128})).await;
    // The home's disk limit (a loop-mounted ext4 image, bound in) holds under gVisor too.
    let fill = s
        .exec(&id, &["sh", "-c", "head -c 209715200 /dev/zero > fill"])
        .await;
    assert_ne!(fill["exitCode"], 0, "{fill}");
    assert!(
        fill["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("No space left on device"),
        "{fill}"
    );
    s.exec_ok(&id, &["rm", "fill"]).await;
    // gVisor's kernel sees the limit as the machine's memory.
    let meminfo = s.exec_ok(&id, &["grep", "MemTotal", "/proc/meminfo"]).await;
    assert!(meminfo.contains(" 131072 kB"), "{meminfo}");
    s.exec_ok(&id, &["sh", "-c", "echo safe > kept.txt"]).await;
    // Under runc the kernel kills only the hog; under gVisor the host sees one sandbox process
    // (its kernel) pass the limit, and the whole sandbox ends: the agent says why.
    let _ = s
        .post(&format!("/api/v1/agents/{id}/exec"))
        .json(&json!({"command": ["sh", "-c", "head -c 629145600 /dev/zero | tail"], "timeoutMs": 60000}))
        .send()
        .await;
    let a = s.wait_state(&id, &["error"]).await;
    let error = a["error"].as_str().unwrap_or_default();
    assert!(error.contains("memory"), "{a}");
    s.start_running(&id).await;
    assert_eq!(s.exec_ok(&id, &["cat", "kept.txt"]).await, "safe\n");
    assert_eq!(kernel(&s, &id).await, GVISOR_KERNEL);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_the_engine_lacks_ends_the_start_in_error_saying_so() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sandbox.allowed_runtimes =
                Some(vec!["runc".into(), "agenthold-no-such-runtime".into()]);
        })
        .await;
    let r = s
        .post("/api/v1/agents")
        .json(
            &json!({"name": "nope", "image": AGENT_IMAGE, "runtime": "agenthold-no-such-runtime"}),
        )
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let a: Value = r.json().await.expect("agent");
    let id = a["id"].as_str().expect("id").to_string();
    let a = s.wait_state(&id, &["error"]).await;
    let error = a["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no runtime \"agenthold-no-such-runtime\""),
        "{a}"
    );
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"runtime": "runc"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.start_running(&id).await;
    assert_eq!(container_runtime(&env, &id), "runc");
    s.stop().await;
}
