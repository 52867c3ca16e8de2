//! Faults at any moment leave nothing stuck, doubled or leaked, and `error` is never a dead end
//! (real Docker, the real server binary).
//!
//! - `error_is_never_a_dead_end`: duplicate networks, a network or container removed outside, a
//!   container of somebody else's under the agent's name, a lost home: each is repaired by a
//!   `start` or a `rebuild`, or said plainly, and `DELETE` from `error` removes what is ours.
//! - `fault_soak`: seeded rounds of concurrent creates, starts, stops, rebuilds and destroys,
//!   outside `docker rm -f` / `stop` / `kill` / `network rm`, and a SIGKILL of the server at a
//!   random moment; after each round every agent settles (an `error` is repaired by one start or
//!   rebuild) and Docker, the host firewall and SQLite hold exactly what the agents need.
//!   `SOAK_ROUNDS` (default 3) and `SOAK_SEED` (default: random, printed) replay or lengthen it.
//! - `dockerd_restart_soak`: the same rounds against a second dockerd of the test's own
//!   (`common/engine.rs`), which each round also restarts (SIGKILL or SIGTERM, then started
//!   again) at a random moment, while operations are under way or while the server is down.
//! - `a_create_cut_short_by_dockerd_is_made_by_the_next_start`: what such a restart can leave of
//!   a create (no home, or an empty home without labels) does not stop the next start.
//!
//! Needs Docker (scripts/docker-setup.sh), root (the second dockerd) and a static sandboxd
//! (scripts/build-sandboxd.sh).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::holdings::*;
use crate::common::docker::*;
use crate::common::engine::Engine;
use crate::common::process::{docker_sandbox_yaml, ServerConfig};
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// The bound on how long an agent may take to settle after a crash.
const SETTLE: Duration = Duration::from_secs(60);

fn config(dir: &std::path::Path, env: &DockerEnv) -> ServerConfig {
    let sandbox = docker_sandbox_yaml(&env.prefix, &env.pool, BUSYBOX_IMAGE, None);
    ServerConfig::write(dir, "0.0.0.0", &sandbox, SETTLE)
}

/// A second network with the agent's name and labels, as a crash while dockerd makes one leaves.
/// Through the API as the server calls it: the CLI checks for a duplicate name, the API does not.
async fn make_duplicate_network(env: &DockerEnv, id: &str, subnet: &str) {
    use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
    let docker = bollard::Docker::connect_with_defaults().expect("docker");
    let labels = [
        ("agenthold.managed", "true"),
        ("agenthold.prefix", env.prefix.as_str()),
        ("agenthold.role", "network"),
        ("agenthold.agent", id),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    docker
        .create_network(NetworkCreateRequest {
            name: env.network(id),
            driver: Some("bridge".into()),
            internal: Some(true),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(subnet.to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .expect("a second network with the agent's name");
}

/// Somebody else's running container under the agent's container name, made with `docker run`
/// and `extra` options; returns its id.
fn run_foreign_container(env: &DockerEnv, id: &str, extra: &[&str]) -> String {
    let name = env.container(id);
    let mut args = vec!["run", "-d", "--name", name.as_str()];
    args.extend_from_slice(extra);
    args.extend([BUSYBOX_IMAGE, "sleep", "600"]);
    docker(&args)
}

/// The last /28 of the test's /24: the driver hands subnets out from the first.
fn spare_subnet(env: &DockerEnv) -> String {
    let base = env.pool.trim_end_matches(".0/24");
    format!("{base}.240/28")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_is_never_a_dead_end() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = config(dir.path(), &env);
    let p = server.start().await;
    let id = server.create_agent("mender").await;
    server.settles_to(&id, "running", "after create").await;
    // A stop cut short by a crash is taken up again at the next start, and /metrics counts it.
    server.act(&id, "stop").await;
    p.kill();
    let _p = server.start().await;
    server.settles_to(&id, "sleeping", "a stop resumed").await;
    assert_eq!(
        metric(
            &server,
            "agenthold_reconcile_repairs_total{kind=\"resumed_operation\"}"
        )
        .await,
        Some(1.0)
    );
    server.act(&id, "start").await;
    server.settles_to(&id, "running", "started again").await;
    server
        .exec_ok(&id, &["sh", "-c", "echo kept > /home/agent/mark"])
        .await;
    // Only sandboxd reaches the sandbox, not whatever lies next to it on the host (a config
    // with the admin token, the database, a build tree).
    let canary = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sandboxd/canary");
    std::fs::write(&canary, "secret").expect("write the canary");
    assert_eq!(
        server.exec_ok(&id, &["ls", "-A", "/opt/agenthold"]).await,
        "sandboxd\n"
    );

    // Two networks with the agent's name (Docker allows it): a stop and start keeps the one
    // its sandbox is on and removes the other, and the name is unambiguous again.
    make_duplicate_network(&env, &id, &spare_subnet(&env)).await;
    assert_eq!(networks_of(&MAIN, &id).len(), 2);
    server.act(&id, "stop").await;
    server
        .settles_to(&id, "sleeping", "stop with a duplicate network")
        .await;
    server.act(&id, "start").await;
    server
        .settles_to(&id, "running", "start with a duplicate network")
        .await;
    assert_eq!(
        networks_of(&MAIN, &id).len(),
        1,
        "the duplicate network was removed"
    );
    assert_eq!(
        metric(
            &server,
            "agenthold_reconcile_repairs_total{kind=\"duplicate_network\"}"
        )
        .await,
        Some(1.0)
    );
    docker(&["network", "inspect", &env.network(&id)]);

    // The network removed while the sandbox sleeps: the container still names the old one, so
    // the start makes the container anew, on a new network, with the home kept.
    server.act(&id, "stop").await;
    server.settles_to(&id, "sleeping", "stop").await;
    docker(&["network", "rm", &env.network(&id)]);
    server.act(&id, "start").await;
    server
        .settles_to(&id, "running", "start with its network gone")
        .await;
    assert_eq!(
        server
            .exec_ok(&id, &["cat", "/home/agent/mark"])
            .await
            .trim(),
        "kept"
    );

    // Container and network both removed outside: the agent sleeps, and a start makes both.
    docker(&["rm", "-f", &env.container(&id)]);
    // The removal's events reach the server a moment later.
    server.wait_state(&id, "sleeping").await;
    docker(&["network", "rm", &env.network(&id)]);
    server.act(&id, "start").await;
    server
        .settles_to(&id, "running", "start with nothing but the home")
        .await;

    // Somebody else's container under the agent's name is neither adopted nor removed: the
    // start fails saying so, and once it is gone the same agent starts from `error`.
    server.act(&id, "stop").await;
    server.settles_to(&id, "sleeping", "stop").await;
    docker(&["rm", "-f", &env.container(&id)]);
    // With our prefix label but no agent label: still not ours.
    let prefix_label = format!("agenthold.prefix={}", env.prefix);
    let foreign = run_foreign_container(&env, &id, &["--label", &prefix_label]);
    server.act(&id, "start").await;
    let state = server.settled(&id).await.unwrap_or_default();
    assert!(
        state.starts_with("error") && state.contains("agenthold did not make"),
        "a foreign container: {state}"
    );
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.Running}}", &foreign]),
        "true",
        "the foreign container was left alone"
    );
    docker(&["rm", "-f", &foreign]);
    server.act(&id, "start").await;
    server.settles_to(&id, "running", "start from error").await;
    assert_eq!(
        server
            .exec_ok(&id, &["cat", "/home/agent/mark"])
            .await
            .trim(),
        "kept"
    );

    // The home removed outside (its volume, and the disk image that holds its files): a start
    // says so plainly instead of making an empty one; a rebuild then gives the agent a new,
    // empty home.
    server.act(&id, "stop").await;
    server.settles_to(&id, "sleeping", "stop").await;
    docker(&["rm", "-f", &env.container(&id)]);
    docker(&["volume", "rm", &env.volume(&id)]);
    let disk = dir.path().join("data/disks").join(env.volume(&id));
    let out = std::process::Command::new("umount")
        .arg(&disk)
        .output()
        .expect("umount");
    assert!(out.status.success(), "umount {}: {out:?}", disk.display());
    std::fs::remove_file(disk.with_extension("ext4")).expect("removing the disk image");
    server.act(&id, "start").await;
    let state = server.settled(&id).await.unwrap_or_default();
    assert!(
        state.starts_with("error") && state.contains("home") && state.contains("rebuild"),
        "a lost home: {state}"
    );
    server.act(&id, "rebuild").await;
    server
        .settles_to(&id, "running", "rebuild after a lost home")
        .await;
    server
        .exec_ok(&id, &["sh", "-c", "test ! -e /home/agent/mark"])
        .await;

    // DELETE from `error` removes everything of ours (duplicates too) and the agent, and leaves
    // somebody else's container under the agent's name alone.
    make_duplicate_network(&env, &id, &spare_subnet(&env)).await;
    server.act(&id, "stop").await;
    server.settles_to(&id, "sleeping", "stop").await;
    docker(&["rm", "-f", &env.container(&id)]);
    let foreign = run_foreign_container(&env, &id, &[]);
    server.act(&id, "start").await;
    assert!(server
        .settled(&id)
        .await
        .is_some_and(|s| s.starts_with("error")));
    let (st, body) = server
        .call("DELETE", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(st, 202, "DELETE from error: {body}");
    assert_eq!(server.settled(&id).await, None, "the agent is gone");
    assert!(networks_of(&MAIN, &id).is_empty(), "networks left");
    assert!(
        labelled(&MAIN, &["volume", "ls"], &id).is_empty(),
        "home left"
    );
    assert!(
        labelled(&MAIN, &["ps", "-a"], &id).is_empty(),
        "containers left"
    );
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.Running}}", &foreign]),
        "true",
        "the foreign container was left alone"
    );
    docker(&["rm", "-f", &foreign]);
    assert!(firewall_agents(&env).is_empty(), "firewall rules left");
}

/// A create that dockerd cut short is made by the next start: the home it never had is not
/// taken for one removed outside, and an empty, unlabelled volume with the home's name (dockerd,
/// killed while making a volume, leaves its folder without the labels) is made anew; one with
/// files in it is somebody else's and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_cut_short_by_dockerd_is_made_by_the_next_start() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("phoenix", BUSYBOX_IMAGE)).await;
    s.stop_sleeping(&id).await;
    // As a create cut short by dockerd leaves it: nothing in Docker, `error` in the store.
    docker(&["rm", "-f", &env.container(&id)]);
    docker(&["network", "rm", &env.network(&id)]);
    docker(&["volume", "rm", &env.volume(&id)]);
    let failed = "creating the sandbox failed: the sandbox driver is unavailable: inspecting \
                  image: client error (SendRequest)";
    s.store
        .fail(&id, &[agenthold::model::AgentState::Sleeping], failed)
        .await
        .expect("fail the agent");
    // An unlabelled volume with the home's name and a file in it: not ours, left alone.
    docker(&["volume", "create", &env.volume(&id)]);
    let folder = docker(&[
        "volume",
        "inspect",
        "--format",
        "{{.Mountpoint}}",
        &env.volume(&id),
    ]);
    let file = std::path::Path::new(&folder).join("theirs");
    std::fs::write(&file, "x").expect("a file in the volume");
    s.act(&id, "start").await;
    let last = s.wait_state(&id, &["error"]).await;
    let msg = last["error"].as_str().unwrap_or_default();
    assert!(msg.contains("agenthold did not make"), "{msg}");
    assert!(file.exists(), "the volume was left alone");
    // Empty, as a killed dockerd leaves it: made anew, and the agent runs.
    std::fs::remove_file(&file).expect("remove the file");
    s.act(&id, "start").await;
    s.wait_state(&id, "running").await;
    assert_eq!(s.exec_ok(&id, &["echo", "made"]).await, "made\n");
    assert_eq!(
        labelled(&MAIN, &["volume", "ls"], &id).len(),
        1,
        "a home of ours"
    );
    s.stop().await;
}

/// One value of the server's `/metrics`, by the start of its line.
async fn metric(server: &ServerConfig, line_start: &str) -> Option<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.base))
        .bearer_auth(crate::common::TOKEN)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// One outside change to a random agent, as an operator or a crash elsewhere would make it.
fn outside_change(
    on: &Target,
    env: &DockerEnv,
    rng: &mut StdRng,
    ids: &[String],
) -> Option<String> {
    let id = ids.get(rng.random_range(0..ids.len().max(1)))?;
    let container = env.container(id);
    let (what, args): (&str, Vec<String>) = match rng.random_range(0..4) {
        0 => ("rm -f", vec!["rm".into(), "-f".into(), container]),
        1 => (
            "stop",
            vec!["stop".into(), "-t".into(), "1".into(), container],
        ),
        2 => ("kill", vec!["kill".into(), container]),
        _ => {
            // By id: with duplicates (the very bug) the name would be ambiguous. The engine
            // may be restarting: then there is nothing to remove.
            let filter = format!("label=agenthold.agent={id}");
            let nets = on
                .docker_try(&["network", "ls", "-q", "--filter", &filter])
                .ok()?;
            let net = nets.lines().next()?.to_string();
            ("network rm", vec!["network".into(), "rm".into(), net])
        }
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Refusals are part of the game (a running sandbox keeps its network; a restarting engine
    // answers nothing).
    let r = on.docker_try(&args);
    Some(format!(
        "{what} {id}: {}",
        if r.is_ok() { "done" } else { "refused" }
    ))
}

/// Seeded rounds of faults against a server on the main engine, or (with `engine`) on a second
/// dockerd that is also restarted once a round.
async fn soak(name: &str, default_rounds: usize, env: &DockerEnv, mut engine: Option<Engine>) {
    let (rounds, seed) = soak_params(name, default_rounds);
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let (on, server) = match &engine {
        None => (MAIN, config(dir.path(), env)),
        Some(e) => {
            e.serves(&env.prefix);
            // /29s: 32 networks in the engine's /24, for the 8 agents of a round and the
            // subnets a dockerd killed while making a network leaves taken on the host.
            let sandbox =
                docker_sandbox_yaml(&env.prefix, &e.pool(), BUSYBOX_IMAGE, Some(&e.socket()))
                    + "    subnet_bits: 29\n";
            let on = Target {
                host: Some(e.host()),
            };
            (
                on,
                ServerConfig::write(dir.path(), "0.0.0.0", &sandbox, SETTLE),
            )
        }
    };
    let mut ids: Vec<String> = Vec::new();
    let mut next_name = 0;
    let (mut kills, mut restarts, mut repairs, mut slowest) = (0, 0, 0, Duration::ZERO);
    let mut orphans_at_end = (0, 0);
    for round in 0..rounds {
        let p = server.start().await;
        // A burst: creates up to 8 agents in all, and a random operation on each older one.
        let mut ops = Vec::new();
        while ids.len() + ops.len() < 8 {
            next_name += 1;
            ops.push(("create".to_string(), format!("soak{next_name}")));
        }
        for id in &ids {
            let op = ["start", "stop", "rebuild", "destroy", "none"][rng.random_range(0..5)];
            ops.push((op.to_string(), id.clone()));
        }
        let kill_after = Duration::from_millis(rng.random_range(50..1500));
        let outside_after = Duration::from_millis(rng.random_range(0..1500));
        let mut rng2 = StdRng::seed_from_u64(rng.random());
        let sent = Instant::now();
        // On the second engine, a restart of dockerd (killed, or stopped as by systemd) 0 to 2 s
        // after the burst: while the server runs, or after it was killed. It runs on a thread of
        // its own (it waits for dockerd) and hands the engine back when dockerd answers again.
        let restart = engine.take().map(|mut e| {
            let signal = if rng.random_bool(0.5) {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            let after = Duration::from_millis(rng.random_range(0..2000));
            let task = tokio::spawn(async move {
                tokio::time::sleep_until(tokio::time::Instant::from_std(sent + after)).await;
                let began = sent.elapsed();
                let e = tokio::task::spawn_blocking(move || {
                    e.restart_after(signal);
                    e
                })
                .await;
                e.map(|e| (e, began))
            });
            (signal, task)
        });
        let calls = ops.iter().map(|(op, target)| {
            let server = &server;
            async move {
                let (method, path, body) = match op.as_str() {
                    "create" => (
                        "POST",
                        "/api/v1/agents".to_string(),
                        Some(serde_json::json!({ "name": target })),
                    ),
                    "destroy" => ("DELETE", format!("/api/v1/agents/{target}"), None),
                    "none" => return None,
                    op => ("POST", format!("/api/v1/agents/{target}/{op}"), None),
                };
                let (st, body): (u16, Value) = server.call(method, &path, body).await;
                // 409: the agent was busy with the round before's repair; fine.
                assert!(matches!(st, 201 | 202 | 409), "{op} {target}: {st} {body}");
                (op == "create" && st == 201)
                    .then(|| body["id"].as_str().unwrap_or_default().to_string())
            }
        });
        let created = futures::future::join_all(calls);
        let chaos = async {
            let mut outside = None;
            let start = tokio::time::Instant::from_std(sent);
            tokio::time::sleep_until(start + outside_after.min(kill_after)).await;
            if rng2.random_bool(0.7) {
                outside = outside_change(&on, env, &mut rng2, &ids);
            }
            tokio::time::sleep_until(start + kill_after).await;
            outside
        };
        let (created, outside) = tokio::join!(created, chaos);
        ids.extend(created.into_iter().flatten());
        p.kill();
        kills += 1;
        let killed_at = sent.elapsed();
        // The server needs its engine to start: the restart must be over first.
        let restarted = match restart {
            Some((signal, task)) => {
                let (e, began) = task
                    .await
                    .expect("the dockerd restart task")
                    .unwrap_or_else(|e| panic!("restarting dockerd failed ({e}); seed {seed}"));
                engine = Some(e);
                restarts += 1;
                Some(format!("{signal} at {began:?}"))
            }
            None => None,
        };

        // Restart and settle: every agent reaches running or sleeping, or an error that one
        // start or rebuild repairs.
        let p = server.start().await;
        let began = Instant::now();
        let mut log = Vec::new();
        let mut alive = Vec::new();
        for id in &ids {
            if settle_and_repair(&server, id, &mut log).await {
                alive.push(id.clone());
            }
        }
        repairs += log.len();
        // Then everything runs (a start makes what an outside removal took, and wakes what a
        // dockerd restart stopped), and answers.
        for id in &alive {
            if server.settled(id).await.as_deref() == Some("sleeping") {
                server.act(id, "start").await;
            }
        }
        for id in &alive {
            server
                .settles_to(id, "running", &format!("round {round}: {id} (seed {seed})"))
                .await;
            server.exec_ok(id, &["sh", "-c", "true"]).await;
        }
        slowest = slowest.max(began.elapsed());
        ids = alive;
        let restarted = restarted
            .map(|r| format!(", dockerd restarted by {r}"))
            .unwrap_or_default();
        // What dockerd lost track of (see the figures at the end).
        let orphans = engine
            .as_ref()
            .map(Engine::orphan_tasks)
            .unwrap_or_default();
        let running = orphans.iter().filter(|(_, r)| *r).count();
        let orphaned = if orphans.is_empty() {
            String::new()
        } else {
            format!(", orphaned tasks: {} ({running} running)", orphans.len())
        };
        orphans_at_end = (orphans.len(), running);
        println!(
            "round {round}: killed after {killed_at:?}{restarted}, outside: {outside:?}, {} \
             agents{orphaned}, repairs: {log:?}",
            ids.len()
        );

        let agents: BTreeSet<String> = ids.iter().cloned().collect();
        assert_holds_exactly(
            &on,
            env,
            dir.path(),
            &agents,
            &format!("round {round} (seed {seed})"),
        );
        assert_eq!(
            stored_ids(dir.path(), "agents"),
            agents,
            "round {round}: agent rows (seed {seed})"
        );
        p.kill();
    }
    if let Some(e) = &engine {
        e.assert_main_engine_untouched();
    }
    println!(
        "{name}: seed {seed}, {rounds} rounds, {next_name} agents, {kills} kills, {restarts} \
         dockerd restarts, {repairs} repairs, slowest settle {slowest:?}"
    );
    if engine.is_some() {
        // Tasks of containers whose start dockerd was killed in: containerd keeps them, out of
        // the API's reach (the agents were given new containers, on new networks).
        println!(
            "{name}: {} tasks orphaned by dockerd at the end, {} of them running",
            orphans_at_end.0, orphans_at_end.1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_soak() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    soak("fault_soak", 3, &env, None).await;
}

/// [`fault_soak`] on a second dockerd of the test's own, which each round also restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_restart_soak() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // The engine loads images onto the host's disk: no exclusive test measures it meanwhile.
    let _share = crate::common::Shared::take().await;
    let engine = Engine::new();
    soak("dockerd_restart_soak", 3, &env, Some(engine)).await;
}
