//! What the soaks check after each round: that Docker, the host firewall, the host's disk images
//! and SQLite hold exactly what the server's agents (and warm pool entries) need, nothing more,
//! and that an agent left in `error` is repaired by one `start` or `rebuild`. Used by
//! `docker::repair`'s fault soaks and `docker::pool_soak`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::common::docker::*;
use crate::common::process::ServerConfig;

/// The engine a test's objects are on: the main one, or a second dockerd (`-H` its host).
#[derive(Clone)]
pub(super) struct Target {
    pub(super) host: Option<String>,
}

/// The main engine, which every test but the dockerd soak uses.
pub(super) const MAIN: Target = Target { host: None };

impl Target {
    pub(super) fn docker_try(&self, args: &[&str]) -> Result<String, String> {
        match &self.host {
            None => docker_try(args),
            Some(host) => {
                let mut a = vec!["-H", host.as_str()];
                a.extend_from_slice(args);
                docker_try(&a)
            }
        }
    }

    pub(super) fn docker(&self, args: &[&str]) -> String {
        self.docker_try(args)
            .unwrap_or_else(|e| panic!("docker {args:?} failed: {e}"))
    }
}

/// The Docker ids of the agent's objects of one kind (`ps -a`, `volume ls`, `network ls`), found
/// by its labels.
pub(super) fn labelled(on: &Target, kind: &[&str], id: &str) -> Vec<String> {
    let filter = format!("label=agenthold.agent={id}");
    let mut args: Vec<&str> = kind.to_vec();
    let format = if kind[0] == "volume" {
        "{{.Name}}"
    } else {
        "{{.ID}}"
    };
    args.extend(["--filter", &filter, "--format", format]);
    on.docker(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn networks_of(on: &Target, id: &str) -> Vec<String> {
    labelled(on, &["network", "ls"], id)
}

/// Agents with host firewall rules of this test's installation.
pub(super) fn firewall_agents(env: &DockerEnv) -> BTreeSet<String> {
    let out = Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .expect("iptables");
    let head = format!("agenthold:{}:", env.prefix);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.trim_matches('"').strip_prefix(&head).map(str::to_string))
        .collect()
}

/// Everything with this test's prefix label on `on`, by kind, as `kind:agent` counts.
pub(super) fn prefixed(on: &Target, env: &DockerEnv) -> BTreeMap<String, usize> {
    let filter = format!("label=agenthold.prefix={}", env.prefix);
    let mut counts = BTreeMap::new();
    for (kind, args, format) in [
        (
            "container",
            &["ps", "-a"][..],
            "{{.Label \"agenthold.agent\"}}",
        ),
        (
            "volume",
            &["volume", "ls"],
            "{{.Label \"agenthold.agent\"}}",
        ),
        (
            "network",
            &["network", "ls"],
            "{{.Label \"agenthold.agent\"}}",
        ),
    ] {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--filter", &filter, "--format", format]);
        for agent in on.docker(&a).lines().filter(|l| !l.is_empty()) {
            *counts.entry(format!("{kind}:{agent}")).or_insert(0) += 1;
        }
    }
    counts
}

/// Settles `id` after a round; an `error` must be repaired by one start (or, for a lost home,
/// one rebuild). Returns whether the agent still exists.
pub(super) async fn settle_and_repair(
    server: &ServerConfig,
    id: &str,
    log: &mut Vec<String>,
) -> bool {
    let Some(state) = server.settled(id).await else {
        return false;
    };
    if let Some(why) = state.strip_prefix("error: ") {
        let op = if why.contains("rebuild the agent to give it a new") {
            "rebuild"
        } else {
            "start"
        };
        log.push(format!("{id}: {why} -> {op}"));
        server.act(id, op).await;
        let after = server.settled(id).await;
        assert_eq!(
            after.as_deref(),
            Some("running"),
            "one {op} did not repair {id} ({why})"
        );
    }
    true
}

/// `SOAK_ROUNDS` (else `default_rounds`) and `SOAK_SEED` (else a random one), printed so that a
/// failed run can be replayed.
pub(super) fn soak_params(name: &str, default_rounds: usize) -> (usize, u64) {
    let rounds: usize = std::env::var("SOAK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default_rounds);
    let seed: u64 = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{name}: SOAK_SEED={seed} SOAK_ROUNDS={rounds}");
    (rounds, seed)
}

/// The database of a server whose data folder is `dir/data`, read-only.
fn database(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        dir.join("data/agenthold.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the database")
}

/// The ids of one column of the database (`SELECT <id> FROM <table>`).
pub(super) fn stored_ids(dir: &std::path::Path, table: &str) -> BTreeSet<String> {
    let db = database(dir);
    let mut q = db
        .prepare(&format!("SELECT id FROM {table}"))
        .expect("prepare");
    let rows = q.query_map([], |r| r.get(0)).expect("query");
    rows.map(|r| r.expect("row")).collect()
}

/// Each stored subnet, by the id (agent or warm pool entry) that holds it.
fn stored_subnets(dir: &std::path::Path) -> BTreeMap<String, String> {
    let db = database(dir);
    let mut q = db
        .prepare("SELECT id, subnet FROM subnets")
        .expect("prepare");
    let rows = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query");
    rows.map(|r| r.expect("row")).collect()
}

/// Asserts that `on` holds exactly one container, volume and network for each of `ids` (agents
/// and warm pool entries, by their `agenthold.agent` label) and nothing else with the test's
/// prefix; the host firewall exactly their rules; the host exactly one mounted disk image each
/// (none half made); SQLite's subnets exactly theirs, each Docker's. `what` names the round in
/// a failure.
pub(super) fn assert_holds_exactly(
    on: &Target,
    env: &DockerEnv,
    dir: &std::path::Path,
    ids: &BTreeSet<String>,
    what: &str,
) {
    let want: BTreeMap<String, usize> = ids
        .iter()
        .flat_map(|id| ["container", "volume", "network"].map(|k| (format!("{k}:{id}"), 1)))
        .collect();
    assert_eq!(prefixed(on, env), want, "{what}: Docker's objects");
    assert_eq!(&firewall_agents(env), ids, "{what}: firewall");
    let disks = dir.join("data/disks");
    let images: BTreeSet<String> = std::fs::read_dir(&disks)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".ext4"))
                .collect()
        })
        .unwrap_or_default();
    let want_images: BTreeSet<String> = ids
        .iter()
        .map(|id| format!("{}.ext4", env.volume(id)))
        .collect();
    assert_eq!(images, want_images, "{what}: disk images");
    for id in ids {
        assert!(
            !mounts_named(&env.volume(id)).is_empty(),
            "{what}: {} is not mounted",
            disks.join(env.volume(id)).display()
        );
    }
    let stored = stored_subnets(dir);
    let holders: BTreeSet<String> = stored.keys().cloned().collect();
    assert_eq!(&holders, ids, "{what}: the ids holding a subnet");
    for id in ids {
        let net = networks_of(on, id);
        let docker_subnet = on.docker(&[
            "network",
            "inspect",
            "--format",
            "{{(index .IPAM.Config 0).Subnet}}",
            &net[0],
        ]);
        assert_eq!(
            stored.get(id).map(String::as_str),
            Some(docker_subnet.as_str()),
            "{what}: subnet of {id}"
        );
    }
}
