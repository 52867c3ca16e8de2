//! The Docker driver on a real engine: create, exec as the right account, stop/start, rebuild,
//! destroy, and what Docker really holds at each step. Needs Docker (scripts/docker-setup.sh)
//! and a static sandboxd (scripts/build-sandboxd.sh).

use crate::common::docker::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_image_runs_as_agent_and_home_survives_stop_start_and_rebuild() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("builder", AGENT_IMAGE)).await;
    let container = env.container(&id);

    assert_eq!(s.exec_ok(&id, &["id", "-un"]).await.trim(), "agent");
    s.exec_ok(&id, &["sh", "-c", "echo kept > /home/agent/keep.txt"])
        .await;

    // What Docker holds: names, labels, limits, hardening, the read-only sandboxd mount.
    let inspect: serde_json::Value =
        serde_json::from_str(&docker(&["inspect", &container])).expect("inspect json");
    let c = &inspect[0];
    let hc = &c["HostConfig"];
    assert_eq!(hc["Init"], true);
    assert_eq!(hc["NanoCpus"], 1_000_000_000i64);
    assert_eq!(hc["Memory"], 256i64 * 1024 * 1024);
    assert_eq!(hc["PidsLimit"], 4096);
    assert!(
        hc["SecurityOpt"].to_string().contains("no-new-privileges"),
        "{hc}"
    );
    assert!(hc["CapDrop"].to_string().contains("NET_RAW"), "{hc}");
    // Joined by the network's id: Docker lets two networks share a name.
    assert_eq!(
        hc["NetworkMode"],
        docker(&[
            "network",
            "inspect",
            "--format",
            "{{.Id}}",
            &env.network(&id)
        ])
    );
    assert_eq!(c["Config"]["Labels"]["agenthold.agent"], id.as_str());
    assert_eq!(
        c["Config"]["Labels"]["agenthold.prefix"],
        env.prefix.as_str()
    );
    let mounts = c["Mounts"].as_array().expect("mounts");
    let opt = mounts
        .iter()
        .find(|m| m["Destination"] == "/opt/agenthold")
        .expect("sandboxd mount");
    assert_eq!(opt["RW"], false);
    let home = mounts
        .iter()
        .find(|m| m["Destination"] == "/home/agent")
        .expect("home mount");
    assert_eq!(home["Name"], env.volume(&id));
    // The container's address is in the upper half of its /28; the gateway is .1.
    let ip = container_ip(&container);
    let last: u8 = ip
        .rsplit('.')
        .next()
        .and_then(|o| o.parse().ok())
        .expect("ip");
    assert!(
        last % 16 >= 8,
        "{ip} is not in the upper half of its subnet"
    );
    assert!(network_gateway(&env.network(&id)).ends_with(&format!(".{}", last - last % 16 + 1)));
    // boot.json is private to root.
    let boot = s.exec(&id, &["cat", "/etc/agenthold/boot.json"]).await;
    assert_ne!(
        boot["exitCode"], 0,
        "the agent account can read the boot token: {boot}"
    );

    // Stop and start. The next boot's token goes into the container as it goes to sleep (so a
    // wake need not write it), and that token is the one the start uses.
    let first_token = boot_token(&container);
    s.stop_sleeping(&id).await;
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.Running}}", &container]),
        "false"
    );
    let staged = boot_token(&container);
    assert_ne!(staged, first_token, "the next boot got no token of its own");
    s.start_running(&id).await;
    assert_eq!(boot_token(&container), staged);
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/keep.txt"])
            .await
            .trim(),
        "kept"
    );
    // A staged token serves one boot: here one started from outside, after which the API's
    // start hands over a new token.
    s.stop_sleeping(&id).await;
    let staged = boot_token(&container);
    docker(&["start", &container]);
    s.wait_state(&id, "running").await;
    docker(&["stop", "-t", "5", &container]);
    s.wait_state(&id, "sleeping").await;
    s.start_running(&id).await;
    assert_ne!(
        boot_token(&container),
        staged,
        "a staged token served two boots"
    );

    // Rebuild with another image: a new container, the same home.
    let old_id = docker(&["inspect", "--format", "{{.Id}}", &container]);
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            &json!({"image": DEBIAN_IMAGE}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.act(&id, "rebuild").await;
    s.wait_state(&id, &["rebuilding", "starting", "running"])
        .await;
    s.wait_state(&id, "running").await;
    assert_ne!(
        docker(&["inspect", "--format", "{{.Id}}", &container]),
        old_id
    );
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/keep.txt"])
            .await
            .trim(),
        "kept"
    );
    // debian:bookworm-slim has no agent account: commands run as root there.
    assert_eq!(s.exec_ok(&id, &["id", "-un"]).await.trim(), "root");

    // Destroy removes container, volume and network, then the agent.
    s.destroy(&id).await;
    assert!(docker_try(&["inspect", &container]).is_err());
    assert!(docker_try(&["volume", "inspect", &env.volume(&id)]).is_err());
    assert!(docker_try(&["network", "inspect", &env.network(&id)]).is_err());
    assert!(s.store.subnets_in_use().await.expect("subnets").is_empty());
    let rules = std::process::Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .expect("iptables");
    let tag = format!("agenthold:{}:{id}", env.prefix);
    assert!(
        !String::from_utf8_lossy(&rules.stdout).contains(&tag),
        "the host firewall rules of {id} outlived it"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_removes_labelled_objects_of_unknown_agents() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let orphan = "orphan0abc12";
    let labels = |role: &str| {
        [
            "agenthold.managed=true".to_string(),
            format!("agenthold.prefix={}", env.prefix),
            format!("agenthold.role={role}"),
            format!("agenthold.agent={orphan}"),
        ]
    };
    let mut args = vec!["volume".to_string(), "create".to_string()];
    for l in labels("home") {
        args.extend(["--label".to_string(), l]);
    }
    args.push(env.volume(orphan));
    docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut args = vec![
        "create".to_string(),
        "--name".to_string(),
        env.container(orphan),
    ];
    for l in labels("sandbox") {
        args.extend(["--label".to_string(), l]);
    }
    args.push(BUSYBOX_IMAGE.to_string());
    docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // Another installation's object with the same agent id is not ours to touch.
    let other = format!("{}x-home-{orphan}", env.prefix);
    docker(&[
        "volume",
        "create",
        "--label",
        "agenthold.managed=true",
        "--label",
        &format!("agenthold.prefix={}x", env.prefix),
        "--label",
        "agenthold.role=home",
        "--label",
        &format!("agenthold.agent={orphan}"),
        &other,
    ]);

    let s = env.server(false).await;
    // Reconcile runs before the server answers, so the orphans are already gone.
    assert!(docker_try(&["inspect", &env.container(orphan)]).is_err());
    assert!(docker_try(&["volume", "inspect", &env.volume(orphan)]).is_err());
    assert!(docker_try(&["volume", "inspect", &other]).is_ok());
    let _ = docker_try(&["volume", "rm", &other]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_debian_runs_as_root() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("plain", DEBIAN_IMAGE)).await;
    assert_eq!(s.exec_ok(&id, &["id", "-un"]).await.trim(), "root");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_agent_account_commands_run_as_the_images_user() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let worker = s.running_agent(("worker", WORKER_IMAGE)).await;
    assert_eq!(
        s.exec_ok(&worker, &["id", "-un"]).await.trim(),
        "worker",
        "the image says USER worker"
    );
    // The home volume was handed to that user.
    assert_eq!(
        s.exec_ok(
            &worker,
            &["sh", "-c", "echo mine > ~/f && stat -c %U ~/f ~"]
        )
        .await
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["worker", "worker"]
    );
    // A terminal's shell runs as the same user.
    let mut ws = s.terminal(&worker, 80, 24).await;
    crate::common::send_keys(&mut ws, "echo I-am-$(id -un)\r").await;
    crate::common::read_until(&mut ws, "I-am-worker").await;

    // A uid the image does not list works, as in Docker, with group 0.
    let uid = s.running_agent(("uid", UID_USER_IMAGE)).await;
    assert_eq!(s.exec_ok(&uid, &["id", "-u"]).await.trim(), "4321");

    // A user the image does not have: the agent ends in error saying which.
    let ghost = s.create_agent(("ghost", GHOST_USER_IMAGE)).await;
    let last = s.wait_state(&ghost, &["error"]).await;
    let msg = last["error"].as_str().unwrap_or_default();
    assert!(msg.contains("no user \"ghost\""), "{msg}");
    s.stop().await;
}

/// The subnet the server gave agent `id`.
async fn subnet_of(s: &crate::common::TestServer, id: &str) -> String {
    s.store
        .subnet(id)
        .await
        .expect("subnet")
        .unwrap_or_else(|| panic!("agent {id} has no subnet"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_get_different_subnets() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let a = s.running_agent(("a", BUSYBOX_IMAGE)).await;
    let b = s.running_agent(("b", BUSYBOX_IMAGE)).await;
    let sa = subnet_of(&s, &a).await;
    let sb = subnet_of(&s, &b).await;
    assert_ne!(sa, sb);
    let pool: ipnet::Ipv4Net = env.pool.parse().expect("pool");
    for sn in [&sa, &sb] {
        let n: ipnet::Ipv4Net = sn.parse().expect("subnet");
        assert!(pool.contains(&n), "{n} outside {pool}");
        assert_eq!(n.prefix_len(), 28);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_ends_in_error_not_a_hang() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    // A registry on loopback where nothing listens: the pull fails at once, and no traffic
    // leaves this machine.
    let image = "127.0.0.1:9/agenthold-test/missing:latest";
    let id = s.create_agent(("ghost", image)).await;
    let last = s.wait_state(&id, &["error"]).await;
    let msg = last["error"].as_str().unwrap_or_default();
    assert!(msg.contains("image") && msg.contains("missing"), "{msg}");
    assert!(docker_try(&["inspect", &env.container(&id)]).is_err());
    s.stop().await;
}

/// The token in the container's boot.json (running or not).
fn boot_token(container: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("boot.json");
    docker(&[
        "cp",
        &format!("{container}:/etc/agenthold/boot.json"),
        path.to_str().expect("utf-8 path"),
    ]);
    let boot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("boot.json")).expect("boot json");
    boot["token"].as_str().expect("a token").to_string()
}

/// A subnet of the pool that a network agenthold does not know already has (another
/// installation, a leftover) is skipped, not fought over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subnet_taken_outside_agenthold_is_skipped() {
    struct Foreign(String);
    impl Drop for Foreign {
        fn drop(&mut self) {
            let _ = docker_try(&["network", "rm", &self.0]);
        }
    }
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let pool: ipnet::Ipv4Net = env.pool.parse().expect("pool");
    // Allocation starts at the bottom of the pool.
    let taken = format!("{}/28", pool.network());
    let foreign = Foreign(format!("{}-foreign", env.prefix));
    docker(&[
        "network",
        "create",
        "--internal",
        "--subnet",
        &taken,
        &foreign.0,
    ]);
    let s = env.server(false).await;
    let a = s.running_agent(("a", BUSYBOX_IMAGE)).await;
    let got = subnet_of(&s, &a).await;
    assert_ne!(got, taken);
    assert!(pool.contains(&got.parse::<ipnet::Ipv4Net>().expect("subnet")));
    s.stop().await;
}

/// A subnet of the pool that an interface of the host is on, unknown to the engine (the bridge a
/// dockerd killed while making a network leaves behind), is skipped: a network made on it would
/// get a second bridge with the same address, and the sandbox could never reach the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subnet_a_host_interface_is_on_is_skipped() {
    struct Bridge(String);
    impl Drop for Bridge {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &self.0])
                .output();
        }
    }
    let ip = |args: &[&str]| {
        crate::common::docker::tool("ip", args);
    };
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let pool: ipnet::Ipv4Net = env.pool.parse().expect("pool");
    // Allocation starts at the bottom of the pool.
    let taken = format!("{}/28", pool.network());
    let gateway = format!(
        "{}/28",
        std::net::Ipv4Addr::from(u32::from(pool.network()) + 1)
    );
    let bridge = Bridge(format!("{}-gh", env.prefix));
    ip(&["link", "add", "name", &bridge.0, "type", "bridge"]);
    ip(&["addr", "add", &gateway, "dev", &bridge.0]);
    ip(&["link", "set", &bridge.0, "up"]);
    let s = env.server(false).await;
    let a = s.running_agent(("a", BUSYBOX_IMAGE)).await;
    let got = subnet_of(&s, &a).await;
    assert_ne!(got, taken);
    assert_eq!(s.exec_ok(&a, &["echo", "reached"]).await, "reached\n");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_exec_wake_a_sleeping_agent_and_listings_do_not() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("waker", AGENT_IMAGE)).await;
    s.write_tree(&id, &[("kept.txt", "kept")]).await;
    let (st, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sleep", "1000"], "tag": "bg"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");

    // Listings answer from the server's own state and leave it asleep.
    s.stop_sleeping(&id).await;
    let (st, list) = s
        .call("GET", &format!("/api/v1/agents/{id}/processes"), None)
        .await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list[0]["tag"], "bg", "{list}");
    assert_eq!(list[0]["state"], "lost", "{list}");
    let (st, terminals) = s
        .call("GET", &format!("/api/v1/agents/{id}/terminals"), None)
        .await;
    assert_eq!((st, terminals), (200, json!([])));
    assert_eq!(s.state(&id).await, "sleeping");
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &env.container(&id)
        ]),
        "false"
    );

    // A file read wakes it.
    let r = s
        .get(&format!("/api/v1/agents/{id}/fs/read?path=kept.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "kept");
    assert_eq!(s.state(&id).await, "running");

    // So does a file write, and an exec sees it.
    s.stop_sleeping(&id).await;
    let r = s
        .put(&format!("/api/v1/agents/{id}/fs/write?path=asleep.txt"))
        .body("written while asleep")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    s.stop_sleeping(&id).await;
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/asleep.txt"]).await,
        "written while asleep"
    );
    assert_eq!(s.state(&id).await, "running");
}
