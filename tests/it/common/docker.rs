//! Helpers for the tests against a real Docker engine (`tests/it/docker/`).
//!
//! Each test gets its own `name_prefix` and its own /24 of the network pool, so tests running at
//! once (and leftovers of earlier runs) never meet. [`DockerEnv`]'s `Drop` removes everything
//! carrying the test's prefix label, even when the test panics.
//!
//! These tests need Docker, the test images (`scripts/docker-setup.sh`) and a static sandboxd
//! (`scripts/build-sandboxd.sh`). Without an engine they skip, saying so once for the binary
//! ([`skip_docker_tests`]); with `AGENTHOLD_DOCKER_TESTS=require` they fail instead.

use std::net::SocketAddr;
use std::process::Command;

use agenthold::config::{Config, DriverKind};

use serde_json::Value;

use crate::common::TestServer;

pub const AGENT_IMAGE: &str = "agenthold-test/agent:latest";
pub const DEBIAN_IMAGE: &str = "debian:bookworm-slim";
pub const BUSYBOX_IMAGE: &str = "agenthold-test/busybox:latest";
/// Debian with `USER worker` (uid 1234) and no agent account.
pub const WORKER_IMAGE: &str = "agenthold-test/worker:latest";
/// busybox with `USER 4321:4321`, a uid its passwd does not list.
pub const UID_USER_IMAGE: &str = "agenthold-test/busybox-user-4321:latest";
/// busybox with `USER ghost`, a name it does not have.
pub const GHOST_USER_IMAGE: &str = "agenthold-test/busybox-user-ghost:latest";

/// Runs the host's `tool` with `args`, returning its stdout; panics with its stderr when it
/// fails.
pub fn tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `docker ARGS`, returning stdout; panics with stderr when it fails.
pub fn docker(args: &[&str]) -> String {
    tool("docker", args)
}

/// Like [`docker`], but a failure is returned rather than a panic.
pub fn docker_try(args: &[&str]) -> Result<String, String> {
    docker_try_at(None, args)
}

/// [`docker_try`] against the engine at `host` (`unix://…`), or the shared one.
pub fn docker_try_at(host: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("docker");
    if let Some(h) = host {
        cmd.args(["-H", h]);
    }
    let out = cmd.args(args).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// True when no Docker engine answers and a Docker test should end at once: a plain `cargo test`
/// on a machine without Docker skips the Docker tests, saying so once per test binary.
/// `scripts/test` sets `AGENTHOLD_DOCKER_TESTS=require`, and there a missing engine fails the test.
pub fn skip_docker_tests() -> bool {
    let Err(e) = docker_try(&["info", "--format", "{{.ServerVersion}}"]) else {
        return false;
    };
    if std::env::var("AGENTHOLD_DOCKER_TESTS").as_deref() == Ok("require") {
        panic!("these tests need a running Docker engine ({e}); run scripts/docker-setup.sh first");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        // Past the test harness's capture, so that it shows in a passing run.
        let _ = writeln!(
            std::io::stderr(),
            "skipping the Docker tests of this binary: no Docker engine answers ({}); \
             scripts/test runs them",
            e.lines().next().unwrap_or_default()
        );
    });
    true
}

/// One test's share of the engine.
pub struct DockerEnv {
    pub prefix: String,
    pub pool: String,
}

impl DockerEnv {
    /// This test's share of the engine, or `None` when the test should end at once (see
    /// [`skip_docker_tests`]).
    pub fn new_or_skip() -> Option<DockerEnv> {
        (!skip_docker_tests()).then(DockerEnv::new)
    }

    /// Fails the test when the test images are missing.
    fn new() -> DockerEnv {
        // AGENTHOLD_TEST_LOG=debug shows the server's log while a Docker test runs.
        if let Ok(filter) = std::env::var("AGENTHOLD_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        for image in [
            AGENT_IMAGE,
            DEBIAN_IMAGE,
            BUSYBOX_IMAGE,
            WORKER_IMAGE,
            UID_USER_IMAGE,
            GHOST_USER_IMAGE,
        ] {
            if docker_try(&["image", "inspect", image]).is_err() {
                panic!("image {image} is missing; run scripts/docker-setup.sh first");
            }
        }
        let n: u32 = rand::random();
        let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let tag: String = (0..6)
            .map(|i| alphabet[((n >> (i * 5)) as usize) % alphabet.len()] as char)
            .collect();
        // 10.213.100.0 - 10.213.254.0: away from the default pool's first subnets. Each test
        // of this process gets a /24 of its own (tests run side by side; there are fewer than
        // 155 of them).
        static GIVEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<u8>>> =
            std::sync::LazyLock::new(Default::default);
        let x = {
            let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
            let free: Vec<u8> = (100..=254).filter(|x| !given.contains(x)).collect();
            assert!(!free.is_empty(), "every test address pool is taken");
            let x = free[rand::random_range(0..free.len())];
            given.insert(x);
            x
        };
        DockerEnv {
            prefix: format!("aht{tag}"),
            pool: format!("10.213.{x}.0/24"),
        }
    }

    /// A server with the Docker driver, the tunnel on every address (sandboxes dial the bridge
    /// gateway), and this test's prefix and pool.
    pub async fn server(&self, api_on_all_addresses: bool) -> TestServer {
        self.server_with(api_on_all_addresses, |_| {}).await
    }

    /// [`DockerEnv::server`], with `tweak` applied to the config last.
    pub async fn server_with(
        &self,
        api_on_all_addresses: bool,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        TestServer::start_with(|c| {
            self.configure(c, api_on_all_addresses);
            tweak(c);
        })
        .await
    }

    /// Stops `s` and starts a server on its data directory, configured as
    /// [`DockerEnv::server_with`] does (`tweak` applied last).
    pub async fn restart_with(&self, s: TestServer, tweak: impl FnOnce(&mut Config)) -> TestServer {
        s.restart_with(|c| {
            self.configure(c, false);
            tweak(c);
        })
        .await
    }

    fn configure(&self, c: &mut Config, api_on_all_addresses: bool) {
        c.sandbox.driver = DriverKind::Docker;
        c.sandbox.tunnel_listen = "0.0.0.0:0".parse().expect("addr");
        if api_on_all_addresses {
            c.server.listen = "0.0.0.0:0".parse().expect("addr");
        }
        c.sandbox.default_image = AGENT_IMAGE.to_string();
        c.sandbox.default_cpus = 1.0;
        c.sandbox.default_memory_mb = 256;
        c.sandbox.docker.name_prefix = self.prefix.clone();
        c.sandbox.docker.network_pool = self.pool.parse().expect("test pool");
    }

    pub fn container(&self, id: &str) -> String {
        format!("{}-{id}", self.prefix)
    }

    pub fn volume(&self, id: &str) -> String {
        format!("{}-home-{id}", self.prefix)
    }

    pub fn network(&self, id: &str) -> String {
        format!("{}-net-{id}", self.prefix)
    }

    fn label(&self) -> String {
        format!("label=agenthold.prefix={}", self.prefix)
    }

    /// Names of this test's objects of one kind (`ps -a`, `volume ls`, `network ls`).
    pub fn objects(&self, kind: &[&str]) -> Vec<String> {
        let label = self.label();
        let mut args: Vec<&str> = kind.to_vec();
        args.extend(["--filter", &label, "--format", "{{.Names}}"]);
        if kind[0] != "ps" {
            let last = args.len() - 1;
            args[last] = "{{.Name}}";
        }
        docker_try(&args)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    fn cleanup(&self) {
        for c in self.objects(&["ps", "-a"]) {
            let _ = docker_try(&["rm", "-f", &c]);
        }
        // By id: a crash can leave two networks with one name.
        let label = self.label();
        let nets = docker_try(&["network", "ls", "-q", "--filter", &label]).unwrap_or_default();
        for n in nets.lines().filter(|l| !l.is_empty()) {
            let _ = docker_try(&["network", "rm", n]);
        }
        for v in self.objects(&["volume", "ls"]) {
            let _ = docker_try(&["volume", "rm", "-f", &v]);
        }
        // Homes with a disk limit are loop mounts under the server's data directory, named like
        // their volumes; the data directory itself goes with the test's temporary folder.
        for mountpoint in mounts_named(&format!("{}-home-", self.prefix)) {
            let _ = Command::new("umount").args(["-l", &mountpoint]).output();
        }
        // The driver's host firewall rules carry `agenthold:<prefix>:<id>` comments.
        let tag = format!("agenthold:{}:", self.prefix);
        if let Ok(out) = Command::new("iptables")
            .args(["-w", "-S", "INPUT"])
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains(&tag) {
                    if let Some(rest) = line.strip_prefix("-A INPUT ") {
                        let mut args = vec!["-w", "-D", "INPUT"];
                        args.extend(rest.split_whitespace().map(|w| w.trim_matches('"')));
                        let _ = Command::new("iptables").args(&args).output();
                    }
                }
            }
        }
    }
}

/// The mount points (as `/proc/self/mountinfo` lists them) whose last component starts with
/// `start`.
pub fn mounts_named(start: &str) -> Vec<String> {
    crate::common::mount_points()
        .into_iter()
        .filter(|m| {
            m.rsplit('/')
                .next()
                .is_some_and(|last| last.starts_with(start))
        })
        .collect()
}

impl Drop for DockerEnv {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// sandboxd's host pid in a container, once it runs: the container's first process is Docker's
/// init (`--init`) and sandboxd its child. Until the init's fork has exec'd, the child is not
/// yet sandboxd, so `None`.
pub fn sandboxd_pid(container: &str) -> Option<i32> {
    let init = docker_try(&["inspect", "--format", "{{.State.Pid}}", container]).ok()?;
    let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).ok()?;
    children.split_whitespace().find_map(|c| {
        let comm = std::fs::read_to_string(format!("/proc/{c}/comm")).ok()?;
        if comm.trim() == "sandboxd" {
            c.parse().ok()
        } else {
            None
        }
    })
}

/// The container's address on its agent network.
pub fn container_ip(container: &str) -> String {
    docker(&[
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        container,
    ])
}

/// The gateway (host side) of a network.
pub fn network_gateway(network: &str) -> String {
    docker(&[
        "network",
        "inspect",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        network,
    ])
}

/// A TCP listener the test runs on `ip`, accepting (and dropping) connections in the background.
pub async fn listen_on(ip: &str) -> SocketAddr {
    let l = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {ip}: {e}"));
    let addr = l.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            drop(sock);
        }
    });
    addr
}

/// A shell script that tries every one of `addrs` (`ip:port`) at once with `probe(ip, port)` (a
/// command that succeeds when the connection opens) and prints `<i>:open` or `<i>:closed` for
/// each; [`probe_results`] reads its output.
pub fn probe_script(addrs: &[String], probe: impl Fn(&str, &str) -> String) -> String {
    let mut script = String::new();
    for (i, addr) in addrs.iter().enumerate() {
        let (ip, port) = addr.rsplit_once(':').expect("ip:port");
        let probe = probe(ip, port);
        script.push_str(&format!(
            "({probe} && echo {i}:open || echo {i}:closed) &\n"
        ));
    }
    script.push_str("wait\n");
    script
}

/// Which of `addrs` the exec result of a [`probe_script`] found open.
pub fn probe_results(out: &Value, addrs: &[String]) -> Vec<bool> {
    let stdout = out["stdout"].as_str().unwrap_or_default();
    (0..addrs.len())
        .map(|i| {
            let open = stdout.lines().any(|l| l == format!("{i}:open"));
            let closed = stdout.lines().any(|l| l == format!("{i}:closed"));
            assert!(open != closed, "no clear answer for {}: {out}", addrs[i]);
            open
        })
        .collect()
}

/// From inside agent `id`: which of `addrs` (`ip:port`) accept a TCP connection? All are tried
/// at once with bash's /dev/tcp and a 2 s limit; a dropped packet shows as a timeout, a refused
/// one as an error: both are "no". Needs bash in the image.
pub async fn reachable(s: &TestServer, id: &str, addrs: &[String]) -> Vec<bool> {
    let script = probe_script(addrs, |ip, port| {
        format!("timeout 2 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null")
    });
    probe_results(&s.exec(id, &["bash", "-c", &script]).await, addrs)
}

pub async fn can_connect(s: &TestServer, id: &str, addr: &str) -> bool {
    reachable(s, id, &[addr.to_string()]).await[0]
}

/// The host's own IPv4 addresses outside loopback, veths and agent bridges (those of tests
/// running at the same time come and go).
pub fn host_addresses() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dev, addr) = (f.get(1)?, f.get(3)?);
            // Bridges the tests make (their names start with `ah`: a second engine's, a test's
            // own) come and go while other tests run: an address listed now may be gone when
            // it is used. Docker's own (`br-`, `veth`) are no host address either.
            let skip = *dev == "lo"
                || dev.starts_with("br-")
                || dev.starts_with("veth")
                || dev.starts_with("ah");
            (!skip).then(|| addr.split('/').next().unwrap_or_default().to_string())
        })
        .collect()
}
