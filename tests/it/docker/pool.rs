//! Warm pools on a real engine: a claimed agent runs at once, its container, home and network
//! carry its own names and labels, its home holds nothing but setup's work, exec works with its
//! env, and it is the same as a cold create of the same settings (other CPUs and memory given
//! with `docker update`); a restart with ready entries keeps them and leaks nothing.

use std::time::Duration;

use crate::common::docker::*;
use crate::common::{wait_for, wait_for_value, TestServer};
use agenthold::agents::preset::Preset;
use agenthold::config::Config;
use serde_json::{json, Value};

/// `hot` keeps two entries; `cold` is the same preset with no pool, for a cold create to
/// compare a claimed agent with.
fn warm_preset(c: &mut Config) {
    for (name, warm) in [("hot", 2), ("cold", 0)] {
        c.presets.insert(
            name.into(),
            Preset {
                env: [("PROJECT".to_string(), "demo".to_string())].into(),
                setup: Some("echo ran > setup-ran".into()),
                egress: Some(
                    serde_json::from_value(
                        json!({"allow": ["pypi.example"], "deny": ["bad.example"]}),
                    )
                    .expect("rules"),
                ),
                warm,
                ..Default::default()
            },
        );
    }
}

/// `warm_preset` with `hot` keeping one entry.
fn one_warm(c: &mut Config) {
    warm_preset(c);
    if let Some(p) = c.presets.get_mut("hot") {
        p.warm = 1;
    }
}

async fn ready_entries(s: &TestServer) -> Vec<String> {
    let entries = s.store.list_pool_entries().await.expect("entries");
    entries
        .into_iter()
        .filter(|e| e.state == agenthold::store::pool::EntryState::Ready)
        .map(|e| e.id)
        .collect()
}

/// Waits until `n` entries are ready, and returns them.
async fn wait_ready(s: &TestServer, n: usize) -> Vec<String> {
    // Making a sandbox on a loaded machine takes a while: poll for minutes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let ready = ready_entries(s).await;
        if ready.len() >= n {
            return ready;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} warm pool entries did not become ready (ready: {ready:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_one_ready(s: &TestServer) -> String {
    wait_ready(s, 1).await.remove(0)
}

/// What an agent sees of itself that a claim must make the same as a cold create: its
/// environment (its own id, name and network gateway written as placeholders), account, home and setup's log.
async fn as_seen_inside(env: &DockerEnv, s: &TestServer, agent: &Value) -> Value {
    let id = agent["id"].as_str().expect("id");
    let name = agent["name"].as_str().expect("name");
    // The proxy is at its own network's gateway.
    let gateway = network_gateway(&env.network(id));
    wait_for("setup done", || async {
        s.agent(id).await["setup"]["state"] == "done"
    })
    .await;
    let env = s.exec_ok(id, &["sh", "-c", "env | sort"]).await;
    let env: Vec<String> = env
        .lines()
        .map(|l| {
            l.replace(id, "<ID>")
                .replace(name, "<NAME>")
                .replace(&format!("//{gateway}:"), "//<GATEWAY>:")
        })
        .collect();
    let record = s.agent(id).await;
    json!({
        "env": env,
        "account": s.exec_ok(id, &["sh", "-c", "id; pwd; echo $HOME"]).await,
        "home": s.exec_ok(id, &["sh", "-c", "cd ~ && ls -A && stat -c '%u:%g %a' ."]).await,
        "setup": record["setup"]["log"],
        "egress": record["egress"],
        "env_field": record["env"],
        "state": record["state"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_agent_runs_at_once_under_its_own_names() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server_with(false, warm_preset).await;
    let entries = wait_ready(&s, 2).await;
    let entry = entries[0].clone();
    // Before the claim: a container that names the id, and no agent.
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{index .Config.Labels \"agenthold.agent\"}}",
            &env.container(&entry)
        ])
        .trim(),
        entry
    );
    assert_eq!(s.get_json("/api/v1/agents").await, json!([]));

    let agent: Value = s
        .created_agent(json!({"name": "warm-claimed", "preset": "hot"}))
        .await;
    assert_eq!(agent["warm"], true, "{agent}");
    assert!(entries.contains(&agent["id"].as_str().unwrap_or_default().to_string()));
    assert_eq!(agent["state"], "running", "a claim answers running");
    let id = agent["id"].as_str().expect("id").to_string();
    assert_eq!(
        s.exec_ok(&id, &["sh", "-c", "echo $PROJECT"]).await,
        "demo\n"
    );
    // The same as a cold create from the same settings, field by field.
    let cold: Value = s
        .created_agent(json!({"name": "cold-made", "preset": "cold"}))
        .await;
    assert_eq!(cold["warm"], false, "{cold}");
    let cold_id = cold["id"].as_str().expect("id").to_string();
    s.wait_state(&cold_id, "running").await;
    let warm_seen = as_seen_inside(&env, &s, &agent).await;
    let cold_seen = as_seen_inside(&env, &s, &cold).await;
    for field in [
        "env",
        "account",
        "home",
        "setup",
        "egress",
        "env_field",
        "state",
    ] {
        assert_eq!(
            warm_seen[field], cold_seen[field],
            "{field}: the claimed agent differs from a cold one"
        );
    }
    assert_eq!(s.exec_ok(&id, &["cat", "setup-ran"]).await, "ran\n");
    let label = "{{index .Labels \"agenthold.agent\"}}";
    let named = [
        docker(&[
            "inspect",
            "--format",
            "{{index .Config.Labels \"agenthold.agent\"}}",
            &env.container(&id),
        ]),
        docker(&["volume", "inspect", "--format", label, &env.volume(&id)]),
        docker(&["network", "inspect", "--format", label, &env.network(&id)]),
    ];
    for (what, labelled) in ["container", "volume", "network"].iter().zip(named) {
        assert_eq!(labelled.trim(), id, "the {what}'s label names the agent");
    }
    // The pool refills behind the claim.
    let refilled = wait_ready(&s, 2).await;
    assert!(!refilled.contains(&id), "{refilled:?}");

    // Another image than the preset's: a cold create, and a correct one.
    let other: Value = s
        .created_agent(json!({"name": "other-image", "preset": "hot", "image": DEBIAN_IMAGE}))
        .await;
    assert_eq!(other["warm"], false, "{other}");
    let other_id = other["id"].as_str().expect("id").to_string();
    assert!(!refilled.contains(&other_id));
    s.wait_state(&other_id, "running").await;
    assert_eq!(
        s.exec_ok(
            &other_id,
            &["sh", "-c", "echo $PROJECT; . /etc/os-release; echo $ID"]
        )
        .await,
        "demo\ndebian\n"
    );
    assert_eq!(ready_entries(&s).await.len(), 2, "the pool was left alone");

    // Other CPUs and memory: a claim, and `docker update` gives the container the agent's.
    let sized: Value = s
        .created_agent(json!({"name": "sized", "preset": "hot", "cpus": 0.5, "memoryMb": 300}))
        .await;
    assert_eq!(sized["warm"], true, "{sized}");
    let sized_id = sized["id"].as_str().expect("id");
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}}",
            &env.container(sized_id),
        ])
        .trim(),
        format!("500000000 {m} {m}", m = 300 * 1024 * 1024)
    );
    assert_eq!(s.agent(sized_id).await["needsRebuild"], false);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_ready_entries_leaks_nothing() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // The resolver's UDP port, which a server on port 0 would pick anew at each start.
    let dns = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.local_addr())
        .expect("a free UDP port")
        .port();
    let s = env
        .server_with(false, |c| {
            one_warm(c);
            c.sandbox.egress.dns_port = dns;
        })
        .await;
    let entry = wait_one_ready(&s).await;
    // The entry's sandboxd dials the tunnel's port again, and its proxy and resolver settings
    // name the egress proxy's and the resolver's: the new server listens on all three, as a
    // deployment does (a change of any makes the entry stale).
    let (tunnel, egress) = (s.tunnel_addr.port(), s.egress_addr.port());
    let same_ports = move |c: &mut Config| {
        c.sandbox.tunnel_listen = format!("0.0.0.0:{tunnel}").parse().expect("addr");
        c.sandbox.egress.port = egress;
        c.sandbox.egress.dns_port = dns;
    };
    let s = env
        .restart_with(s, |c| {
            one_warm(c);
            same_ports(c);
        })
        .await;
    // The running entry is kept: its sandboxd dials in again.
    let again = wait_one_ready(&s).await;
    assert_eq!(again, entry, "the entry survives a restart");
    // A setting a sandbox is made with, changed across a restart (`sandbox.pids_limit` takes
    // effect only at one): the entry is stale, and replaced by one made with it.
    let pids = s.lc.config().sandbox.pids_limit + 1;
    let s = env
        .restart_with(s, |c| {
            one_warm(c);
            same_ports(c);
            c.sandbox.pids_limit = pids;
        })
        .await;
    let fresh = wait_for_value("the stale entry replaced", || async {
        let ready = ready_entries(&s).await;
        (ready.len() == 1 && ready[0] != entry).then(|| ready[0].clone())
    })
    .await;
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.PidsLimit}}",
            &env.container(&fresh)
        ]),
        pids.to_string()
    );
    assert!(docker_try(&["inspect", &env.container(&entry)]).is_err());
    // Without a pool, its objects all go.
    let s = env.restart_with(s, |_| {}).await;
    wait_for_value("the entry's objects removed", || async {
        let left: Vec<String> = [
            env.objects(&["ps", "-a"]),
            env.objects(&["volume", "ls"]),
            env.objects(&["network", "ls"]),
        ]
        .concat();
        let subnets = s.store.subnets_in_use().await.ok()?;
        (left.is_empty()
            && s.store.list_pool_entries().await.ok()?.is_empty()
            && subnets.is_empty())
        .then_some(())
    })
    .await;
    s.stop().await;
}

/// Builds `tag` from the busybox test image with `/marker` holding `marker`, and returns the
/// image's id.
fn build_marked_image(tag: &str, marker: &str) -> String {
    use std::io::Write;
    let dockerfile = format!("FROM {BUSYBOX_IMAGE}\nRUN echo {marker} > /marker\n");
    let mut child = std::process::Command::new("docker")
        .args(["build", "-q", "-t", tag, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("docker build");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(dockerfile.as_bytes())
        .expect("write the Dockerfile");
    let out = child.wait_with_output().expect("docker build");
    assert!(out.status.success(), "docker build -t {tag} failed");
    docker(&["image", "inspect", "--format", "{{.Id}}", tag])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_made_anew_under_the_same_name_makes_the_entries_stale() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let tag = format!("agenthold-test/{}-pooled:latest", env.prefix);
    let first = build_marked_image(&tag, "one");
    let image = tag.clone();
    let s = env
        .server_with(false, |c| {
            c.presets.insert(
                "hot".into(),
                Preset {
                    image: Some(image),
                    warm: 1,
                    ..Default::default()
                },
            );
        })
        .await;
    let old = wait_one_ready(&s).await;

    // `docker build -t` again: the old entry goes, a new one is made from the new image, and
    // a create right after the build never gets the old one (it is cold until the new is
    // ready).
    let second = build_marked_image(&tag, "two");
    assert_ne!(first, second);
    let agent: Value = s
        .created_agent(json!({"name": "after-build", "preset": "hot"}))
        .await;
    let id = agent["id"].as_str().expect("id").to_string();
    assert_ne!(id, old, "a create claimed the entry of the old image");
    s.wait_state(&id, "running").await;
    assert_eq!(s.exec_ok(&id, &["cat", "/marker"]).await, "two\n");
    let fresh = wait_for_value("the stale entry replaced", || async {
        let ready = ready_entries(&s).await;
        (ready.len() == 1 && ready[0] != old).then(|| ready[0].clone())
    })
    .await;
    assert!(
        docker_try(&["inspect", &env.container(&old)]).is_err(),
        "the stale entry's container is gone"
    );
    let claimed: Value = s
        .created_agent(json!({"name": "claimed-new", "preset": "hot"}))
        .await;
    assert_eq!(claimed["warm"], true, "{claimed}");
    assert_eq!(claimed["id"], fresh.as_str());
    assert_eq!(s.exec_ok(&fresh, &["cat", "/marker"]).await, "two\n");
    s.stop().await;
    let _ = docker_try(&["rmi", "-f", &tag, &first]);
}
