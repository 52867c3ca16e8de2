//! The server image (`Dockerfile`) deployed the way the README shows: a container with the
//! engine's socket mounted, a data volume and its API published on the host's loopback, driving
//! sibling sandbox containers. Everything goes through the HTTP API, as a user's would.
//!
//! Needs Docker, the test images (scripts/docker-setup.sh) and the server image
//! (scripts/build-server-image.sh, tag `agenthold:dev` or `$AGENTHOLD_SERVER_IMAGE`). It tests
//! the image as it was built: rebuild the image after changing the server.
//!
//! Network traffic goes only to loopback, to a listener this test runs on this machine, and to
//! this test's own containers.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::Client;
use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::common::DEADLINE;

/// What `scripts/build-server-image.sh` tags when told nothing else.
const DEFAULT_SERVER_IMAGE: &str = "agenthold:dev";
/// Names another tag (the script reads it too).
const SERVER_IMAGE_ENV: &str = "AGENTHOLD_SERVER_IMAGE";
/// The server's ports inside its container (`scripts/container-config.yaml` and the default).
const API_PORT: u16 = 8080;
/// The preview listener, as `scripts/container-config.yaml` sets it.
const PREVIEWS_PORT: u16 = 8081;
const TUNNEL_PORT: u16 = 8090;

/// The server image; fails the test when it is missing.
fn server_image() -> String {
    let image =
        std::env::var(SERVER_IMAGE_ENV).unwrap_or_else(|_| DEFAULT_SERVER_IMAGE.to_string());
    if let Err(e) = docker_try(&["image", "inspect", &image]) {
        panic!(
            "the server image {image} is missing ({e}); build it with \
             scripts/build-server-image.sh (scripts/test does this before cargo test)"
        );
    }
    image
}

/// The server running in its container: the container, its data volume and its config file,
/// all removed when this is dropped, also when the test panics. Declared after the
/// [`DockerEnv`], so it goes first: the networks the env removes must have lost their last
/// member, the server, by then.
struct ServerContainer {
    name: String,
    data_volume: String,
    sandboxd_volume: String,
    /// Its API, once it answers (with the token it was given).
    api: Client,
    _config_dir: tempfile::TempDir,
    /// Its share of the machine (see [`crate::common::exclusive`]).
    _share: Option<crate::common::share::Shared>,
}

impl ServerContainer {
    async fn start(env: &DockerEnv, image: &str) -> ServerContainer {
        let config_dir = tempfile::tempdir().expect("temp dir");
        let config = config_dir.path().join("config.yaml");
        // The image's own config (scripts/container-config.yaml) plus this test's share of the
        // engine, so it meets no other test and no other installation.
        std::fs::write(
            &config,
            format!(
                "server:\n  listen: 0.0.0.0:{API_PORT}\n  data_dir: /data\n  \
                 previews:\n    listen: 0.0.0.0:{PREVIEWS_PORT}\n\
                 sandbox:\n  driver: docker\n  default_image: {BUSYBOX_IMAGE}\n  \
                 default_cpus: 1.0\n  default_memory_mb: 256\n  default_disk_mb: 0\n  \
                 docker:\n    name_prefix: {}\n    network_pool: {}\n",
                env.prefix, env.pool
            ),
        )
        .expect("writing the config");
        let token = format!(
            "{:032x}{:032x}",
            rand::random::<u128>(),
            rand::random::<u128>()
        );
        let mut s = ServerContainer {
            name: format!("{}-server", env.prefix),
            data_volume: format!("{}-data", env.prefix),
            sandboxd_volume: format!("{}-sandboxd", env.prefix),
            api: Client {
                token,
                ..Client::new(String::new(), DEADLINE)
            },
            _config_dir: config_dir,
            _share: crate::common::share::Shared::take().await,
        };
        docker(&["volume", "create", &s.data_volume]);
        let config_mount = format!("{}:/etc/agenthold/config.yaml:ro", config.display());
        let data_mount = format!("{}:/data", s.data_volume);
        let token_env = format!("AGENTHOLD_ADMIN_TOKEN={}", s.api.token);
        let api = format!("127.0.0.1::{API_PORT}");
        docker(&[
            "run",
            "-d",
            "--name",
            &s.name,
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-v",
            &data_mount,
            "-v",
            &config_mount,
            "-e",
            &token_env,
            // The engine picks a free port on the host's loopback.
            "-p",
            &api,
            image,
        ]);
        let published = docker(&["port", &s.name, &format!("{API_PORT}/tcp")]);
        let addr = published
            .lines()
            .find(|l| l.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("the API is not published on loopback: {published:?}"))
            .to_string();
        s.api.base = format!("http://{addr}");
        s.wait_healthy().await;
        s
    }

    /// The end of the server's log, for failure messages.
    fn logs(&self) -> String {
        match std::process::Command::new("docker")
            .args(["logs", "--tail", "60", &self.name])
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("(no logs: {e})"),
        }
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let health = self
                .http
                .get(self.url("/api/v1/health"))
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            if let Ok(r) = health {
                if r.status() == 200 {
                    let body: Value = r.json().await.expect("health json");
                    assert_eq!(body["driver"], "docker", "{body}");
                    return;
                }
            }
            let running = docker_try(&["inspect", "-f", "{{.State.Running}}", &self.name]);
            if running.as_deref() != Ok("true") {
                panic!(
                    "the server container stopped before it answered ({running:?}); its log:\n{}",
                    self.logs()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "the server container did not answer on {} within {DEADLINE:?}; its log:\n{}",
                    self.base,
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Which of `addrs` (`ip:port`) agent `id` can open a TCP connection to. All are tried at
    /// once with busybox `nc`, whose `-e` ends the connection as soon as it is made and whose
    /// `-w 2` gives up on a silent address; refused, unreachable and timed out are all "no".
    async fn reachable(&self, id: &str, addrs: &[String]) -> Vec<bool> {
        let script = probe_script(addrs, |ip, port| {
            format!("nc -w 2 {ip} {port} -e echo >/dev/null 2>&1")
        });
        probe_results(&self.exec(id, &["sh", "-c", &script]).await, addrs)
    }

    /// Stops the server the way `docker stop` does (SIGTERM, then a grace period), then
    /// removes its container and data volume, and the sandboxd volume it filled.
    fn remove(&self) {
        let _ = docker_try(&["stop", "-t", "10", &self.name]);
        let _ = docker_try(&["rm", "-f", "-v", &self.name]);
        let _ = docker_try(&["volume", "rm", "-f", &self.data_volume]);
        let _ = docker_try(&["volume", "rm", "-f", &self.sandboxd_volume]);
    }
}

impl std::ops::Deref for ServerContainer {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.api
    }
}

impl Drop for ServerContainer {
    fn drop(&mut self) {
        // After a panic the log is what explains it.
        if std::thread::panicking() {
            eprintln!("the server container's log:\n{}", self.logs());
        }
        let _ = docker_try(&["rm", "-f", "-v", &self.name]);
        let _ = docker_try(&["volume", "rm", "-f", &self.data_volume]);
        let _ = docker_try(&["volume", "rm", "-f", &self.sandboxd_volume]);
    }
}

/// The bridge of `network` on the host and its IPv4 addresses (`ip -o` lines; empty: none).
fn bridge_ipv4(network: &str) -> (String, String) {
    let id = docker(&["network", "inspect", "-f", "{{.Id}}", network]);
    let bridge = format!("br-{}", id.get(..12).expect("network id"));
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", &bridge])
        .output()
        .expect("ip addr show dev");
    assert!(
        out.status.success(),
        "no bridge {bridge} for {network}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let addrs = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (bridge, addrs)
}

/// Every object whose name contains `prefix`: containers, volumes, networks.
fn named_objects(prefix: &str) -> Vec<String> {
    let filter = format!("name={prefix}");
    let mut out = Vec::new();
    for (args, format) in [
        (&["ps", "-a"][..], "{{.Names}}"),
        (&["volume", "ls"][..], "{{.Name}}"),
        (&["network", "ls"][..], "{{.Name}}"),
    ] {
        let mut a = args.to_vec();
        a.extend(["--filter", &filter, "--format", format]);
        out.extend(
            docker(&a)
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| format!("{} {l}", args[0])),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_in_a_container_drives_sibling_sandboxes_that_cannot_reach_the_host() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let image = server_image();

    // A listener on every address of the host, run by this test: the sandbox must not reach it
    // on any of them. The control: the test itself reaches it on each.
    let listener = listen_on("0.0.0.0").await;
    let hosts = host_addresses();
    assert!(!hosts.is_empty(), "no host address to test with");
    for h in &hosts {
        tokio::net::TcpStream::connect((h.as_str(), listener.port()))
            .await
            .unwrap_or_else(|e| panic!("the test's own listener on {h} does not answer: {e}"));
    }

    let srv = ServerContainer::start(&env, &image).await;

    // A server in a container cannot loop-mount: it says so, and refuses a disk limit plainly.
    let limits: Value = srv
        .request(reqwest::Method::GET, "/api/v1/limits")
        .send()
        .await
        .expect("limits")
        .json()
        .await
        .expect("limits json");
    assert_eq!(limits["maxDiskMb"], Value::Null, "{limits}");
    assert_eq!(limits["defaultDiskMb"], Value::Null, "{limits}");
    let r = srv
        .request(reqwest::Method::POST, "/api/v1/agents")
        .json(&json!({"name": "sized", "image": BUSYBOX_IMAGE, "diskMb": 256}))
        .send()
        .await
        .expect("create request");
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.expect("error json");
    assert_eq!(body["error"]["field"], "diskMb", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("on the host"),
        "{body}"
    );

    // Create, and wait until its sandboxd has dialled the server.
    let r = srv
        .request(reqwest::Method::POST, "/api/v1/agents")
        .json(&json!({"name": "boxed", "image": BUSYBOX_IMAGE}))
        .send()
        .await
        .expect("create request");
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let agent: Value = r.json().await.expect("agent json");
    let id = agent["id"].as_str().expect("id").to_string();
    srv.wait_state(&id, "running").await;

    // The server joined the agent's network at .2; the host has no address on its bridge.
    let network = env.network(&id);
    let subnet: Ipv4Net = docker(&[
        "network",
        "inspect",
        "-f",
        "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
        &network,
    ])
    .parse()
    .expect("the agent network's subnet");
    let base = u32::from(subnet.network());
    let gateway = Ipv4Addr::from(base + 1);
    let server_addr = Ipv4Addr::from(base + 2);
    let joined = docker(&[
        "inspect",
        "-f",
        &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
        &srv.name,
    ]);
    assert_eq!(joined, server_addr.to_string(), "the server's address");
    let (bridge, bridge_addrs) = bridge_ipv4(&network);
    assert!(
        bridge_addrs.is_empty(),
        "the host has an address on {bridge}: {bridge_addrs}"
    );

    // Exec and files work through the tunnel to .2.
    let out = srv.exec(&id, &["echo", "hello from the sandbox"]).await;
    assert_eq!(out["exitCode"], 0, "{out}");
    assert_eq!(out["stdout"], "hello from the sandbox\n", "{out}");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let fs = |op: &str| format!("/api/v1/agents/{id}/fs/{op}?path=in-container.bin");
    let r = srv
        .request(reqwest::Method::PUT, &fs("write"))
        .body(bytes.clone())
        .send()
        .await
        .expect("write request");
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    let read = |srv: &ServerContainer| {
        let req = srv.request(reqwest::Method::GET, &fs("read"));
        async move {
            let r = req.send().await.expect("read request");
            assert_eq!(r.status(), 200);
            r.bytes().await.expect("read body").to_vec()
        }
    };
    assert!(read(&srv).await == bytes, "the file read back differs");

    // What the sandbox reaches: the tunnel on .2 (the control: this is how sandboxd got in),
    // and nothing of the host: not the bridge's .1, not any of the host's own addresses.
    let mut addrs = vec![
        format!("{server_addr}:{TUNNEL_PORT}"),
        format!("{gateway}:{}", listener.port()),
    ];
    addrs.extend(hosts.iter().map(|h| format!("{h}:{}", listener.port())));
    let got = srv.reachable(&id, &addrs).await;
    assert!(
        got[0],
        "the tunnel at {} is out of the sandbox's reach",
        addrs[0]
    );
    for (addr, open) in addrs.iter().zip(&got).skip(1) {
        assert!(!open, "the sandbox reaches the host at {addr}");
    }
    // The API shares the server's addresses, .2 included: it answers a sandbox only with 403.
    // By hand over nc (busybox's static wget crashes in its name lookup); stdin stays open
    // until the server has answered and closed, as it may drop a half-closed request.
    let request = format!(
        "(printf 'GET /api/v1/agents HTTP/1.1\\r\\nHost: {server_addr}\\r\\n\
         Authorization: Bearer {}\\r\\nConnection: close\\r\\n\\r\\n'; sleep 3) \
         | nc -w 3 {server_addr} {API_PORT}",
        srv.token
    );
    let out = srv.exec(&id, &["sh", "-c", &request]).await;
    let answer = out["stdout"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 403"),
        "the API did not refuse the sandbox (with the admin token) with 403: {out}"
    );
    // So does the preview listener, whatever preview the request names.
    let request = format!(
        "(printf 'GET / HTTP/1.1\\r\\nHost: 80-any.localhost\\r\\n\
         Authorization: Bearer {}\\r\\nConnection: close\\r\\n\\r\\n'; sleep 3) \
         | nc -w 3 {server_addr} {PREVIEWS_PORT}",
        srv.token
    );
    let out = srv.exec(&id, &["sh", "-c", &request]).await;
    let answer = out["stdout"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 403"),
        "the preview listener did not refuse the sandbox with 403: {out}"
    );

    // Stop and start: the sandbox is stopped in Docker, and comes back with its home.
    let container = env.container(&id);
    srv.act(&id, "stop").await;
    srv.wait_state(&id, "sleeping").await;
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &container]),
        "false"
    );
    srv.act(&id, "start").await;
    srv.wait_state(&id, "running").await;
    let out = srv.exec(&id, &["echo", "back again"]).await;
    assert_eq!(out["stdout"], "back again\n", "{out}");
    assert!(
        read(&srv).await == bytes,
        "the file did not survive stop/start"
    );

    // A network made while the server ran on the host, with the host's address on its bridge
    // (made here by hand, as the driver did then), is made anew at the next rebuild.
    srv.act(&id, "stop").await;
    srv.wait_state(&id, "sleeping").await;
    docker(&["network", "disconnect", "-f", &network, &srv.name]);
    docker(&["network", "rm", &network]);
    let half = Ipv4Net::new(
        Ipv4Addr::from(base + (1u32 << (32 - subnet.prefix_len())) / 2),
        subnet.prefix_len() + 1,
    )
    .expect("upper half of the subnet");
    let labels = [
        "agenthold.managed=true".to_string(),
        format!("agenthold.prefix={}", env.prefix),
        "agenthold.role=network".to_string(),
        format!("agenthold.agent={id}"),
    ];
    let mut create = vec![
        "network".to_string(),
        "create".to_string(),
        "--internal".to_string(),
        format!("--subnet={subnet}"),
        format!("--ip-range={half}"),
        format!("--gateway={gateway}"),
    ];
    create.extend(labels.iter().map(|l| format!("--label={l}")));
    create.push(network.clone());
    docker(&create.iter().map(String::as_str).collect::<Vec<_>>());
    let (old_bridge, old_addrs) = bridge_ipv4(&network);
    assert!(
        old_addrs.contains(&format!("inet {gateway}/")),
        "the hand-made network has no host address on {old_bridge}: {old_addrs:?}"
    );
    srv.act(&id, "rebuild").await;
    srv.wait_state(&id, "running").await;
    let (bridge, bridge_addrs) = bridge_ipv4(&network);
    assert_ne!(bridge, old_bridge, "the network was not made anew");
    assert!(
        bridge_addrs.is_empty(),
        "after the rebuild the host still has an address on {bridge}: {bridge_addrs}"
    );
    assert!(
        read(&srv).await == bytes,
        "the file did not survive the rebuild"
    );

    // Destroy: container, home volume and network go; the sandboxd volume is the server's.
    srv.destroy(&id).await;
    assert_eq!(env.objects(&["ps", "-a"]), Vec::<String>::new());
    assert_eq!(env.objects(&["network", "ls"]), Vec::<String>::new());
    assert_eq!(
        env.objects(&["volume", "ls"]),
        vec![srv.sandboxd_volume.clone()]
    );

    // The server goes too, and with it everything that carries the test's prefix.
    srv.remove();
    assert!(
        docker_try(&["inspect", &srv.name]).is_err(),
        "the server container is still there"
    );
    assert_eq!(named_objects(&env.prefix), Vec::<String>::new());
}
