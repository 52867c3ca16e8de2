//! `sandbox.docker`: the Docker driver's names, networks and hardening, and the host mounts
//! every sandbox gets; their defaults and their checks. Only the Docker driver reads them:
//! what the layers above need of them (the sandboxes' networks) comes through the `Driver`.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use super::de::{de_ipv4_net, de_opt_string};
use super::validate::Fail;
use super::{ConfigError, SandboxConfig};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// Starts every container, volume and network name; lets several installations share a host.
    pub name_prefix: String,
    /// Each agent's internal network takes one subnet of this pool.
    #[serde(deserialize_with = "de_ipv4_net")]
    pub network_pool: Ipv4Net,
    /// The prefix length of each agent's subnet.
    pub subnet_bits: u8,
    /// The server's own container; empty means detect it.
    pub server_container: String,
    /// The volume sandboxd is served from; empty means `<name_prefix>-sandboxd`.
    pub sandboxd_volume: String,
    /// The Docker endpoint; empty means `DOCKER_HOST` or `/var/run/docker.sock`.
    pub socket: String,
    pub no_new_privileges: bool,
    pub cap_drop: Vec<String>,
    /// `HOST:CONTAINER[:ro|:rw]` bind mounts added to every sandbox.
    pub host_mounts: Vec<String>,
    /// Where `sandbox.runtime` was before every driver had runtimes: still read (see
    /// [`take_moved_keys`]), with a warning. Empty, as older files write it, is left out.
    #[serde(
        rename = "runtime",
        deserialize_with = "de_opt_string",
        skip_serializing
    )]
    pub moved_runtime: Option<String>,
    /// Where `sandbox.allowed_runtimes` was; read the same way.
    #[serde(rename = "allowed_runtimes", skip_serializing)]
    pub moved_allowed_runtimes: Option<Vec<String>>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            name_prefix: "agenthold".to_string(),
            network_pool: Ipv4Net::new(Ipv4Addr::new(10, 213, 0, 0), 16)
                .expect("16 is a valid IPv4 prefix length"),
            subnet_bits: 28,
            server_container: String::new(),
            sandboxd_volume: String::new(),
            socket: String::new(),
            no_new_privileges: true,
            cap_drop: [
                "NET_RAW",
                "MKNOD",
                "AUDIT_WRITE",
                "SYS_CHROOT",
                "SETFCAP",
                "NET_BIND_SERVICE",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            host_mounts: Vec::new(),
            moved_runtime: None,
            moved_allowed_runtimes: None,
        }
    }
}

impl DockerConfig {
    /// The server's container id or name, if set rather than to be detected.
    pub fn server_container(&self) -> Option<&str> {
        non_empty(&self.server_container)
    }

    /// The Docker endpoint, if set rather than taken from `DOCKER_HOST` or the default socket.
    pub fn socket(&self) -> Option<&str> {
        non_empty(&self.socket)
    }

    /// The volume name sandboxd is served from, with the default filled in.
    pub fn sandboxd_volume_name(&self) -> String {
        match non_empty(&self.sandboxd_volume) {
            Some(v) => v.to_string(),
            None => format!("{}-sandboxd", self.name_prefix),
        }
    }

    /// `host_mounts`, parsed. Load has validated them, so this fails only on a hand-built config.
    pub fn parsed_host_mounts(&self) -> Result<Vec<HostMount>, String> {
        self.host_mounts
            .iter()
            .map(|m| HostMount::parse(m))
            .collect()
    }
}

fn non_empty(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// One `HOST:CONTAINER[:ro|:rw]` entry of `sandbox.docker.host_mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMount {
    pub host: PathBuf,
    pub container: PathBuf,
    pub read_only: bool,
}

impl HostMount {
    pub fn parse(s: &str) -> Result<HostMount, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (host, container, read_only) = match parts.as_slice() {
            [h, c] => (*h, *c, false),
            [h, c, "ro"] => (*h, *c, true),
            [h, c, "rw"] => (*h, *c, false),
            [_, _, mode] => {
                return Err(format!(
                    "(\"{s}\") has mode \"{mode}\"; write ro or rw, or leave it out"
                ))
            }
            _ => {
                return Err(format!(
                    "(\"{s}\") is not HOST:CONTAINER or HOST:CONTAINER:ro \
                     (paths cannot contain ':')"
                ))
            }
        };
        for (what, p) in [("host", host), ("container", container)] {
            if !p.starts_with('/') {
                return Err(format!(
                    "(\"{s}\") needs an absolute {what} path, starting with '/'"
                ));
            }
        }
        if container == "/" || container.trim_end_matches('/') == "/home/agent" {
            // Covering / or the home volume would hide the sandbox's own filesystem or home.
            return Err(format!(
                "(\"{s}\") would cover {container}; mount somewhere below it instead"
            ));
        }
        Ok(HostMount {
            host: PathBuf::from(host),
            container: PathBuf::from(container),
            read_only,
        })
    }
}

/// Takes `sandbox.docker.runtime` and `allowed_runtimes`, written where they were before
/// every driver had runtimes, as `sandbox.runtime` and `sandbox.allowed_runtimes`, so that
/// older files keep working (the startup warnings say where they belong now). Both places at
/// once must agree.
pub(super) fn take_moved_keys(sb: &mut SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    if let Some(runtime) = &sb.docker.moved_runtime {
        if sb.runtime.is_empty() {
            sb.runtime.clone_from(runtime);
        } else if sb.runtime != *runtime {
            return Err(fail(
                "sandbox.docker.runtime",
                format!(
                    "({runtime:?}) is the old place of sandbox.runtime, which says {:?}; keep \
                     only sandbox.runtime",
                    sb.runtime
                ),
            ));
        }
    }
    if let Some(allowed) = &sb.docker.moved_allowed_runtimes {
        match &sb.allowed_runtimes {
            None => sb.allowed_runtimes = Some(allowed.clone()),
            Some(now) if now != allowed => {
                return Err(fail(
                    "sandbox.docker.allowed_runtimes",
                    format!(
                        "({}) is the old place of sandbox.allowed_runtimes, which says ({}); \
                         keep only sandbox.allowed_runtimes",
                        allowed.join(", "),
                        now.join(", ")
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The startup warnings for keys read from where they were before.
pub(super) fn moved_key_warnings(d: &DockerConfig) -> Vec<String> {
    [
        ("runtime", d.moved_runtime.is_some()),
        ("allowed_runtimes", d.moved_allowed_runtimes.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(key, _)| {
        format!(
            "sandbox.docker.{key} has moved to sandbox.{key}, where it applies to every \
             driver; it is read from its old place for now, move it"
        )
    })
    .collect()
}

pub(super) fn validate(d: &DockerConfig, fail: &Fail) -> Result<(), ConfigError> {
    check_dns_label(&d.name_prefix).map_err(|p| fail("sandbox.docker.name_prefix", p))?;
    if d.network_pool.trunc() != d.network_pool {
        return Err(fail(
            "sandbox.docker.network_pool",
            format!(
                "({}) has host bits set; did you mean {}?",
                d.network_pool,
                d.network_pool.trunc()
            ),
        ));
    }
    if d.subnet_bits <= d.network_pool.prefix_len() || d.subnet_bits > 29 {
        return Err(fail(
            "sandbox.docker.subnet_bits",
            format!(
                "({}) must be above the pool's prefix length ({}) and at most 29, \
                 so the pool holds several subnets of at least 8 addresses",
                d.subnet_bits,
                d.network_pool.prefix_len()
            ),
        ));
    }
    for (key, v) in [
        ("sandbox.docker.server_container", &d.server_container),
        ("sandbox.docker.sandboxd_volume", &d.sandboxd_volume),
        ("sandbox.docker.socket", &d.socket),
    ] {
        if v.trim() != v.as_str() || v.contains(char::is_control) {
            return Err(fail(
                key,
                format!("({v:?}) has spaces or control characters at its ends"),
            ));
        }
    }
    for (i, cap) in d.cap_drop.iter().enumerate() {
        if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(fail(
                &format!("sandbox.docker.cap_drop[{i}]"),
                format!("({cap:?}) is not a capability name like NET_RAW"),
            ));
        }
    }
    for (i, m) in d.host_mounts.iter().enumerate() {
        HostMount::parse(m).map_err(|p| fail(&format!("sandbox.docker.host_mounts[{i}]"), p))?;
    }
    Ok(())
}

fn check_dns_label(s: &str) -> Result<(), String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ok_ends = !s.starts_with('-') && !s.ends_with('-');
    if s.is_empty() || s.len() > 32 || !ok_chars || !ok_ends {
        return Err(format!(
            "({s:?}) must be 1 to 32 lowercase letters, digits or '-', \
             not starting or ending with '-'"
        ));
    }
    Ok(())
}
