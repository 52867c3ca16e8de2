//! Plain Docker, driven the way a person would drive it without agenthold: the baselines.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::Command;

/// Runs `docker ARGS`, failing with its stderr when it fails.
pub async fn docker(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running the docker CLI (is Docker installed?)")?;
    if !out.status.success() {
        bail!(
            "docker {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// How long `docker ARGS` takes.
pub async fn timed(args: &[&str]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    docker(args).await?;
    Ok(t.elapsed())
}

/// Removes every container, volume and network labelled with `prefix`, the baseline containers
/// named with it and the agents' firewall rules. Used at the end and on interruption; never
/// fails.
/// Marks the volumes and networks a plain-Docker baseline makes (not `agenthold.prefix`: the
/// benchmark's server would take those for its own and remove them as orphans).
pub const BASELINE_LABEL: &str = "agenthold.bench";

pub async fn remove_everything(prefix: &str) {
    let label = format!("label=agenthold.prefix={prefix}");
    let name = format!("name={prefix}");
    for filter in [&label, &name] {
        if let Ok(ids) = docker(&["ps", "-aq", "--filter", filter]).await {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f", "-v"];
                args.extend(ids);
                let _ = docker(&args).await;
            }
        }
    }
    // The server's objects, and those of the plain-Docker baselines.
    let baseline = format!("label={BASELINE_LABEL}={prefix}");
    for filter in [&label, &baseline] {
        if let Ok(ids) = docker(&["volume", "ls", "-q", "--filter", filter]).await {
            for id in ids.split_whitespace() {
                let _ = docker(&["volume", "rm", "-f", id]).await;
            }
        }
        if let Ok(ids) = docker(&["network", "ls", "-q", "--filter", filter]).await {
            for id in ids.split_whitespace() {
                let _ = docker(&["network", "rm", id]).await;
            }
        }
    }
    remove_firewall_rules(prefix).await;
    unmount_disks(prefix).await;
}

/// Unmounts the disk images of the benchmark's agents' homes (mounted under the temporary data
/// directory, named like their volumes), so the directory can go and no loop device stays
/// behind: the agents were removed with the Docker CLI, not destroyed by the server.
async fn unmount_disks(prefix: &str) {
    let home = format!("{prefix}-home-");
    let mountinfo = tokio::fs::read_to_string("/proc/self/mountinfo")
        .await
        .unwrap_or_default();
    for target in mountinfo.lines().filter_map(|l| l.split(' ').nth(4)) {
        if target
            .rsplit('/')
            .next()
            .is_some_and(|last| last.starts_with(&home))
        {
            let _ = Command::new("umount").args(["-l", target]).output().await;
        }
    }
}

/// Removes the host firewall rules the driver put in place for the benchmark's agents (tagged
/// `agenthold:<prefix>:<agent>`). The server removes an agent's rules when it destroys the
/// agent, but the benchmark removes its agents with the Docker CLI after stopping the server:
/// without this every run left three INPUT rules per agent behind (1075 after a few runs
/// here), and every packet the host receives, loopback included, walks them all.
async fn remove_firewall_rules(prefix: &str) {
    let tag = format!("agenthold:{prefix}:");
    let Ok(out) = Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .await
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rule) = line.strip_prefix("-A INPUT ") else {
            continue;
        };
        // iptables-nft prints the comment in quotes; the argument must go back without them.
        let args: Vec<&str> = rule
            .split_whitespace()
            .map(|w| w.trim_matches('"'))
            .collect();
        if !args.iter().any(|w| w.starts_with(&tag)) {
            continue;
        }
        let _ = Command::new("iptables")
            .args(["-w", "-D", "INPUT"])
            .args(&args)
            .output()
            .await;
    }
}
