//! A second dockerd for the tests that restart dockerd itself (`docker::daemon_restart`, the
//! dockerd soak of `docker::repair`): restarting the engine every other Docker test shares would
//! break them.
//!
//! [`Engine`] runs one with its own socket, data and exec roots, pid file and managed containerd
//! in one folder, no iptables rules (the main engine's chains stay untouched) and a default
//! bridge the test makes itself (`--bridge=none` would delete the host's `docker0`). Everything
//! of it is removed at the end, on a panic too, and a later run removes what an interrupted one
//! left. Needs root and the busybox test image on the main engine (scripts/docker-setup.sh).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::docker::{docker, tool, DockerEnv, BUSYBOX_IMAGE};

/// How long a second dockerd may take to answer, or to stop.
pub const ENGINE_WAIT: Duration = Duration::from_secs(60);
/// Every second engine's folder is `/tmp/<this><random>`; a later run finds leftovers by it.
const DIR_PREFIX: &str = "agenthold-test-dockerd-";

/// A second dockerd, for one test alone.
pub struct Engine {
    dir: PathBuf,
    /// The default bridge made for it (Linux names: at most 15 bytes).
    bridge: String,
    /// `n` of the /24 its agent networks take addresses from, `10.213.<n>.0/24`; its default
    /// bridge has the next one. `n` is even, in 60..100: clear of the other Docker tests
    /// (100..255) and the default pool's first subnets.
    net: u8,
    daemon: Option<Child>,
}

impl Engine {
    /// Removes what earlier, interrupted runs left, then makes and starts a new engine with the
    /// busybox test image.
    pub fn new() -> Engine {
        for stale in leftovers() {
            eprintln!(
                "removing the second dockerd an earlier run left: {}",
                stale.display()
            );
            let prefix = std::fs::read_to_string(stale.join("prefix")).unwrap_or_default();
            drop(Engine::adopt(stale));
            // Its server's host firewall rules too: dropping a DockerEnv of that prefix
            // removes them (and anything of the prefix on the main engine, of which there is
            // none).
            if !prefix.trim().is_empty() {
                drop(DockerEnv {
                    prefix: prefix.trim().to_string(),
                    pool: String::new(),
                });
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in("/tmp")
            .expect("a folder for the second dockerd")
            .keep();
        let tag = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .expect("folder name")
            .to_lowercase();
        let bridge = format!(
            "ahd{}",
            &tag.chars()
                .filter(char::is_ascii_alphanumeric)
                .take(8)
                .collect::<String>()
        );
        // Two engines of this process choosing at once could both find one /24 unrouted: the
        // choice holds until the bridge has its address (and so its route).
        static CHOOSING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let choosing = CHOOSING.lock().unwrap_or_else(|e| e.into_inner());
        let net = free_net();
        std::fs::write(dir.join("owner"), owner_line(std::process::id() as i32)).expect("owner");
        std::fs::write(dir.join("bridge"), &bridge).expect("bridge");
        std::fs::write(dir.join("net"), net.to_string()).expect("net");
        std::fs::write(dir.join("daemon.json"), "{}\n").expect("daemon.json");
        // From here on, Drop cleans up whatever the rest of this makes.
        let mut engine = Engine {
            dir,
            bridge,
            net,
            daemon: None,
        };
        tool(
            "ip",
            &["link", "add", "name", &engine.bridge, "type", "bridge"],
        );
        tool(
            "ip",
            &[
                "addr",
                "add",
                &format!("10.213.{}.1/24", net + 1),
                "dev",
                &engine.bridge,
            ],
        );
        drop(choosing);
        tool("ip", &["link", "set", &engine.bridge, "up"]);
        engine.start();
        // No registry here: the image comes from the main engine.
        let mut save = Command::new("docker")
            .args(["save", BUSYBOX_IMAGE])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let out = Command::new("docker")
            .args(["-H", &engine.host(), "load"])
            .stdin(save.stdout.take().expect("save's stdout"))
            .output()
            .expect("docker load");
        assert!(
            save.wait().expect("docker save").success(),
            "docker save {BUSYBOX_IMAGE}"
        );
        assert!(
            out.status.success(),
            "loading {BUSYBOX_IMAGE} into the second dockerd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        engine
    }

    /// An engine folder an earlier run left, to clean up.
    fn adopt(dir: PathBuf) -> Engine {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let bridge = read("bridge").trim().to_string();
        let net = read("net").trim().parse().unwrap_or(0);
        Engine {
            dir,
            bridge,
            net,
            daemon: None,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The agent network pool the server gets (the default bridge is on the next /24).
    pub fn pool(&self) -> String {
        format!("10.213.{}.0/24", self.net)
    }

    /// Tasks a dockerd restart left to containerd: the container ids of this engine's shims
    /// that no container of it has, each with whether a process still runs in it. Docker's API
    /// no longer reaches them; the cleanup ends them.
    pub fn orphan_tasks(&self) -> Vec<(String, bool)> {
        let known = self
            .docker_try(&["ps", "-aq", "--no-trunc"])
            .unwrap_or_default();
        processes_mentioning(&self.dir)
            .into_iter()
            .filter_map(|pid| {
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                let id = cmd.split_once(" -id ")?.1.split_whitespace().next()?;
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default();
                // runc's init waits in a task made but never started: nothing of the image runs.
                let running = children.split_whitespace().any(|c| {
                    std::fs::read_to_string(format!("/proc/{c}/comm"))
                        .is_ok_and(|comm| !comm.starts_with("runc"))
                });
                (!known.contains(id)).then(|| (id.to_string(), running))
            })
            .collect()
    }

    /// Records the `name_prefix` of the server run on this engine, so that a later run removes
    /// that server's host firewall rules should this one be interrupted.
    pub fn serves(&self, prefix: &str) {
        std::fs::write(self.dir.join("prefix"), prefix).expect("prefix");
    }

    /// `docker -H <this engine> ARGS`.
    pub fn docker_try(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .args(args)
            .output()
            .map_err(|e| format!("cannot run docker: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    pub fn docker(&self, args: &[&str]) -> String {
        self.docker_try(args)
            .unwrap_or_else(|e| panic!("docker {args:?} on the second dockerd: {e}"))
    }

    /// `true` or `false`: whether the container runs.
    pub fn running(&self, container: &str) -> String {
        self.docker(&["inspect", "--format", "{{.State.Running}}", container])
    }

    pub fn answers(&self) -> bool {
        self.docker_try(&["version", "--format", "{{.Server.Version}}"])
            .is_ok()
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Starts dockerd on this folder and waits until it answers.
    pub fn start(&mut self) {
        if let Err(e) = self.try_start() {
            panic!("{e}");
        }
    }

    /// [`Engine::start`], without a panic (cleanup runs it from `Drop`, maybe while unwinding).
    fn try_start(&mut self) -> Result<(), String> {
        if self.daemon.is_some() {
            return Err("the second dockerd already runs".into());
        }
        // dockerd 20.10 counts a pid file naming a zombie as a daemon still running (and refuses
        // to start), or as a containerd to wait for: a killed daemon's files must go first.
        for pidfile in ["dockerd.pid", "exec/containerd/containerd.pid"] {
            let pidfile = self.dir.join(pidfile);
            if read_pid(&pidfile).is_some_and(|p| !alive(p)) {
                let _ = std::fs::remove_file(&pidfile);
            }
        }
        let d = |p: &str| self.dir.join(p).display().to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))
            .map_err(|e| format!("dockerd.log: {e}"))?;
        let err_log = log.try_clone().map_err(|e| format!("dockerd.log: {e}"))?;
        let child = Command::new("dockerd")
            .args(["--config-file", &d("daemon.json")])
            .args(["-H", &self.host()])
            .args(["--data-root", &d("data")])
            .args(["--exec-root", &d("exec")])
            .args(["--pidfile", &d("dockerd.pid")])
            // The main engine owns the host's iptables chains and sysctls; this one keeps off.
            .args(["--iptables=false", "--ip-masq=false", "--ip-forward=false"])
            .args(["--bridge", &self.bridge])
            // Namespaces of its own, in case it finds a system containerd and uses that: the
            // main engine's containers live in `moby`, and tests run beside this one.
            .args(["--containerd-namespace", &format!("{}-moby", self.bridge)])
            .args([
                "--containerd-plugins-namespace",
                &format!("{}-moby-plugins", self.bridge),
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("cannot run dockerd ({e}); run scripts/docker-setup.sh"))?;
        self.daemon = Some(child);
        let deadline = Instant::now() + ENGINE_WAIT;
        while !self.answers() {
            if let Some(Ok(Some(status))) = self.daemon.as_mut().map(|c| c.try_wait()) {
                self.daemon = None;
                return Err(format!(
                    "the second dockerd exited ({status}); its log:\n{}",
                    self.log_tail()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the second dockerd did not answer within {ENGINE_WAIT:?}; its log:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Sends `signal` to dockerd and waits until it has exited.
    pub fn signal(&mut self, signal: Signal) {
        let mut child = self.daemon.take().expect("the second dockerd runs");
        kill(Pid::from_raw(child.id() as i32), signal).expect("signal dockerd");
        let deadline = Instant::now() + ENGINE_WAIT;
        loop {
            if child.try_wait().expect("wait for dockerd").is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("dockerd did not exit within {ENGINE_WAIT:?} of {signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // A killed dockerd takes its managed containerd along (the kernel kills it with its
        // parent); the restart must not find it still running.
        let pidfile = self.dir.join("exec/containerd/containerd.pid");
        if let Some(pid) = read_pid(&pidfile) {
            assert!(
                wait_gone(pid, ENGINE_WAIT),
                "containerd {pid} outlived its dockerd"
            );
        }
    }

    pub fn restart_after(&mut self, signal: Signal) {
        self.signal(signal);
        self.start();
    }

    /// Every trace of the engine: its containers, networks (and their bridges) through its own
    /// API, then the daemon, its containerd and shims, its mounts, the bridge and the folder.
    fn cleanup(&mut self) {
        // A daemon left running by an interrupted run is not our child: stop it by its pid file.
        let stale_pid = read_pid(&self.dir.join("dockerd.pid")).filter(|p| alive(*p));
        if self.daemon.is_none() && stale_pid.is_none() && self.dir.join("data").exists() {
            // Down (killed by a test that then failed): bring it up to remove what it made.
            if let Err(e) = self.try_start() {
                eprintln!("{e}\nremoving the second dockerd's objects without it");
            }
        }
        if self.answers() {
            let ids = self.docker_try(&["ps", "-aq"]).unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = self.docker_try(&["rm", "-f", id]);
            }
            let nets = self
                .docker_try(&["network", "ls", "--format", "{{.Name}}"])
                .unwrap_or_default();
            for n in nets
                .lines()
                .filter(|n| !["bridge", "host", "none"].contains(n))
            {
                let _ = self.docker_try(&["network", "rm", n]);
            }
        }
        match self.daemon.take() {
            Some(mut child) => {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
                let deadline = Instant::now() + ENGINE_WAIT;
                while !matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                    if Instant::now() >= deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            None => {
                if let Some(pid) = read_pid(&self.dir.join("dockerd.pid")).filter(|p| alive(*p)) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                    if !wait_gone(pid, ENGINE_WAIT) {
                        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                        wait_gone(pid, ENGINE_WAIT);
                    }
                }
            }
        }
        // Containers a daemon that never came back still holds: runc can end them by itself.
        let runc_root = self.dir.join("exec/runtime-runc/moby");
        if let Ok(entries) = std::fs::read_dir(&runc_root) {
            for e in entries.flatten() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&runc_root)
                    .args(["delete", "--force"])
                    .arg(e.file_name())
                    .output();
            }
        }
        // Its containerd and shims, found by the folder on their command lines.
        for pid in processes_mentioning(&self.dir) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            wait_gone(pid, Duration::from_secs(10));
        }
        // Mounts below the folder (overlays, network namespaces, the data root), deepest first.
        let mut mounts = mounts_below(&self.dir);
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).output();
        }
        // Bridges: the default one, and any agent network bridge a dead daemon could not remove.
        if !self.bridge.is_empty() {
            let _ = Command::new("ip")
                .args(["link", "del", &self.bridge])
                .output();
        }
        if self.net != 0 {
            for br in bridges_in(&format!("10.213.{}.", self.net)) {
                if br.starts_with("br-") {
                    let _ = Command::new("ip").args(["link", "del", &br]).output();
                }
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if self.dir.exists() {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
    }

    /// The main engine and the host's network setup are as this engine found them: `docker0`
    /// is there, the main engine answers, and no iptables rule names one of this engine's
    /// bridges.
    pub fn assert_main_engine_untouched(&self) {
        assert!(
            Command::new("ip")
                .args(["link", "show", "docker0"])
                .output()
                .expect("ip")
                .status
                .success(),
            "the host's docker0 is gone"
        );
        docker(&["info", "--format", "{{.ServerVersion}}"]);
        let mut ours = bridges_in(&format!("10.213.{}.", self.net));
        ours.push(self.bridge.clone());
        for table in ["filter", "nat"] {
            let rules = Command::new("iptables")
                .args(["-w", "-t", table, "-S"])
                .output()
                .expect("iptables");
            let rules = String::from_utf8_lossy(&rules.stdout);
            for line in rules.lines() {
                // The server's own host firewall rules (tagged with its prefix) are expected.
                if line.contains("agenthold:") {
                    continue;
                }
                for br in &ours {
                    assert!(
                        !line.contains(br.as_str()),
                        "the second dockerd touched iptables ({table}): {line}"
                    );
                }
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Engine folders whose test process is gone.
fn leftovers() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(DIR_PREFIX))
        })
        .filter(|p| {
            // A run still going on (another test binary's, another checkout's) keeps its engine.
            let owner = std::fs::read_to_string(p.join("owner")).unwrap_or_default();
            let pid = owner.split_whitespace().next().and_then(|w| w.parse().ok());
            // A bare pid (as older runs wrote) is taken as the owner's while it lives.
            let bare = !owner.trim().contains(' ');
            !pid.is_some_and(|pid| alive(pid) && (bare || owner_line(pid) == owner))
        })
        .collect()
}

/// What an engine folder's `owner` file holds: the test process's pid and its start time (in
/// clock ticks since boot), so that a later process that got the same pid is not taken for it.
fn owner_line(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 22; the fields after the parenthesised command name start at field 3.
    let started = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .unwrap_or_default();
    format!("{pid} {started}\n")
}

/// An even `n` of 60..100 such that no route on this machine uses 10.213.n.0/24 or the /24
/// after it.
fn free_net() -> u8 {
    let routes = Command::new("ip")
        .args(["-4", "route"])
        .output()
        .expect("ip route");
    let routes = String::from_utf8_lossy(&routes.stdout).to_string();
    let start = rand::random::<u8>() % 20;
    (0..20)
        .map(|i| 60 + 2 * ((start + i) % 20))
        .find(|n| {
            !routes.contains(&format!("10.213.{n}."))
                && !routes.contains(&format!("10.213.{}.", n + 1))
        })
        .expect("every /24 of 10.213.60.0 - 10.213.99.0 is routed already")
}

fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold spaces.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Waits until `pid` no longer runs; whether it stopped within `limit`.
fn wait_gone(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Processes whose command line names `dir` (its containerd and containerd's shims).
fn processes_mentioning(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string();
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me && alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

/// Mount points at or below `dir`.
fn mounts_below(dir: &Path) -> Vec<String> {
    crate::common::mount_points()
        .into_iter()
        .filter(|m| Path::new(m).starts_with(dir))
        .collect()
}

/// Interfaces holding an IPv4 address that starts with `prefix`.
fn bridges_in(prefix: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.nth(1)?;
            let addr = w.nth(1)?;
            addr.starts_with(prefix).then(|| name.to_string())
        })
        .collect()
}
