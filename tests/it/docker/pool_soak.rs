//! Warm pools survive a SIGKILL at any moment (real Docker, the real server binary): seeded
//! rounds of creates that claim entries of a preset with `warm: 2` (half of them asking for
//! other memory, so that the claim resizes the sandbox), destroys, and the keeper's refills, the
//! server killed at a random moment of each round, requests in flight or not. After each
//! restart: every agent is whole (it runs and answers, with its own memory or `needsRebuild`),
//! no id is both an agent and an entry, the pool is back at its target, and Docker, the host
//! firewall, the disk images and SQLite hold exactly the agents and the entries.
//!
//! `SOAK_CLAIMS` (default 20: CI's run) and `SOAK_SEED` (default: random, printed) lengthen or
//! replay it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::holdings::*;
use crate::common::docker::*;
use crate::common::free_port;
use crate::common::process::{docker_sandbox_yaml, ServerConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// How long an agent may take to settle after a restart.
const SETTLE: Duration = Duration::from_secs(60);
/// The preset's `warm`.
const TARGET: u64 = 2;
/// Agents kept at most between rounds; older ones are destroyed in the next burst.
const KEEP: usize = 3;
/// The memory half of the creates ask for, other than the preset's (`default_memory_mb` of
/// `docker_sandbox_yaml`, 128), so that their claim resizes the sandbox.
const OTHER_MB: u64 = 96;

fn config(dir: &std::path::Path, env: &DockerEnv) -> ServerConfig {
    let sandbox = docker_sandbox_yaml(&env.prefix, &env.pool, BUSYBOX_IMAGE, None)
        + &format!("presets:\n  hot:\n    warm: {TARGET}\n    env: {{PROJECT: demo}}\n");
    let server = ServerConfig::write(dir, "0.0.0.0", &sandbox, SETTLE);
    // One egress port and one resolver port for every run, as a deployment has: entries kept across a restart are
    // then claimable (a new port would make them stale, their proxy settings naming the old).
    let yaml = std::fs::read_to_string(&server.path).expect("read the config");
    let dns = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.local_addr())
        .expect("a free UDP port")
        .port();
    let pinned = yaml
        .replacen("    port: 0\n", &format!("    port: {}\n", free_port()), 1)
        .replacen("    dns_port: 0\n", &format!("    dns_port: {dns}\n"), 1);
    assert_ne!(yaml, pinned, "the egress port is in the config");
    std::fs::write(&server.path, pinned).expect("write the config");
    server
}

/// `SOAK_CLAIMS` (else 20) and `SOAK_SEED` (else a random one), printed for a replay.
fn params() -> (usize, u64) {
    let claims = std::env::var("SOAK_CLAIMS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20);
    let seed = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("pool_soak: SOAK_SEED={seed} SOAK_CLAIMS={claims}");
    (claims, seed)
}

/// The `hot` pool as `GET /api/v1/pool` shows it: (ready, starting).
async fn pool(server: &ServerConfig) -> (u64, u64) {
    let (st, body) = server.call("GET", "/api/v1/pool", None).await;
    assert_eq!(st, 200, "GET /api/v1/pool: {body}");
    let hot = body
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["preset"] == "hot"))
        .unwrap_or_else(|| panic!("no hot pool in {body}"));
    assert_eq!(hot["target"], TARGET, "{hot}");
    (
        hot["ready"].as_u64().unwrap_or(0),
        hot["starting"].as_u64().unwrap_or(0),
    )
}

/// Waits until the pool holds its target, all ready: each entry is a container started and a
/// sandboxd connected, made one at a time, so on a loaded machine it takes a while.
async fn pool_at_target(server: &ServerConfig, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let now = pool(server).await;
        if now == (TARGET, 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the pool is not back at its target (ready, starting: {now:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every agent, as the API lists them.
async fn agents(server: &ServerConfig) -> Vec<Value> {
    let (st, body) = server.call("GET", "/api/v1/agents", None).await;
    assert_eq!(st, 200, "GET /api/v1/agents: {body}");
    body.as_array().cloned().unwrap_or_default()
}

/// One request of the burst; `None` when the server was killed before it answered.
async fn send(server: &ServerConfig, method: reqwest::Method, path: &str, body: Option<Value>) {
    let mut r = server.request(method, path);
    if let Some(b) = body {
        r = r.json(&b);
    }
    if let Ok(r) = r.send().await {
        let st = r.status().as_u16();
        // 409: the agent is busy with a repair of the round before; fine.
        assert!(matches!(st, 201 | 202 | 404 | 409), "{path}: {st}");
    }
}

/// The claimed agent's sandbox has the memory it asked for, unless it says `needsRebuild` (a
/// crash between the claim and `docker update`).
fn sized_as_asked(env: &DockerEnv, agent: &Value, what: &str) {
    if agent["needsRebuild"] == true {
        return;
    }
    let id = agent["id"].as_str().expect("id");
    let mb = agent["memoryMb"].as_u64().expect("memoryMb");
    let memory = docker(&[
        "inspect",
        "--format",
        "{{.HostConfig.Memory}}",
        &env.container(id),
    ]);
    assert_eq!(
        memory,
        (mb * 1024 * 1024).to_string(),
        "{what}: memory of {id}, which does not say needsRebuild"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_soak() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let (want_claims, seed) = params();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = config(dir.path(), &env);
    let (mut claims, mut cold, mut kills) = (0, 0, 0);
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut next_name = 0;
    let mut round = 0;
    let began = Instant::now();
    while claims < want_claims {
        assert!(
            round < want_claims * 3,
            "{round} rounds made only {claims} claims (seed {seed})"
        );
        let what = format!("round {round} (seed {seed})");
        let p = server.start().await;
        pool_at_target(&server, &format!("{what}, before the burst")).await;
        let older: Vec<String> = known.iter().cloned().collect();

        // The burst: one to three creates from the pool at random moments, and destroys of the
        // agents beyond KEEP; the kill lands among them or in the refills that follow.
        let sent = tokio::time::Instant::now();
        let mut calls = Vec::new();
        for _ in 0..rng.random_range(1..=3) {
            next_name += 1;
            let mut body = json!({ "name": format!("soak{next_name}"), "preset": "hot" });
            if rng.random_bool(0.5) {
                body["memoryMb"] = json!(OTHER_MB);
            }
            calls.push((
                rng.random_range(0..1500),
                reqwest::Method::POST,
                "/api/v1/agents".to_string(),
                Some(body),
            ));
        }
        for id in older.iter().take(older.len().saturating_sub(KEEP - 1)) {
            calls.push((
                rng.random_range(0..1500),
                reqwest::Method::DELETE,
                format!("/api/v1/agents/{id}"),
                None,
            ));
        }
        let kill_after = Duration::from_millis(rng.random_range(50..3000));
        let burst = futures::future::join_all(calls.into_iter().map(|(after, m, path, body)| {
            let server = &server;
            async move {
                tokio::time::sleep_until(sent + Duration::from_millis(after)).await;
                send(server, m, &path, body).await;
            }
        }));
        tokio::select! {
            _ = burst => tokio::time::sleep_until(sent + kill_after).await,
            _ = tokio::time::sleep_until(sent + kill_after) => {}
        }
        p.kill();
        kills += 1;

        // After the restart: every agent settles whole (an error is repaired by one start or
        // rebuild), runs, answers, and has the memory it asked for.
        let p = server.start().await;
        let mut log = Vec::new();
        let mut now: BTreeSet<String> = BTreeSet::new();
        for a in agents(&server).await {
            let id = a["id"].as_str().expect("id").to_string();
            if settle_and_repair(&server, &id, &mut log).await {
                now.insert(id);
            }
        }
        // Claims, creates and destroys are all taken up again by reconcile: none needs a hand.
        assert!(log.is_empty(), "{what}: agents needed a repair: {log:?}");
        for id in &now {
            if server.settled(id).await.as_deref() == Some("sleeping") {
                server.act(id, "start").await;
            }
            server
                .settles_to(id, "running", &format!("{what}: {id}"))
                .await;
            server.exec_ok(id, &["sh", "-c", "true"]).await;
            let agent = server.agent(id).await;
            sized_as_asked(&env, &agent, &what);
            if !known.contains(id) {
                if agent["warm"] == true {
                    claims += 1;
                } else {
                    cold += 1;
                }
            }
        }
        known = now;

        // The pool is back at its target, its entries are no agents, and the engine, the host
        // and SQLite hold exactly the agents and the entries.
        pool_at_target(&server, &what).await;
        let entries = stored_ids(dir.path(), "pool_entries");
        assert_eq!(entries.len() as u64, TARGET, "{what}: entries {entries:?}");
        assert!(
            entries.is_disjoint(&known),
            "{what}: an id is both an agent and an entry: {entries:?} {known:?}"
        );
        assert_eq!(
            stored_ids(dir.path(), "agents"),
            known,
            "{what}: agent rows"
        );
        let all: BTreeSet<String> = known.union(&entries).cloned().collect();
        assert_holds_exactly(&MAIN, &env, dir.path(), &all, &what);
        println!(
            "{what}: killed after {kill_after:?}, {} agents, claims so far {claims}, cold \
             creates {cold}",
            known.len()
        );
        p.kill();
        round += 1;
    }
    println!(
        "pool_soak: seed {seed}, {round} rounds, {claims} claims, {cold} cold creates, {kills} \
         kills, {:?} in all",
        began.elapsed()
    );
}
