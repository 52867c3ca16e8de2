//! What a sandbox container is made of: its limits (CPU, memory, PIDs, files, tmpfs, writable
//! layer), its mounts, its network and resolver, and what it may not do. One function, so that
//! everything a sandbox is allowed is read in one place.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount, MountType, NetworkingConfig,
    ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};

use super::network::NetRef;
use super::{pull, DockerDriver};
use crate::driver::SandboxSpec;

impl DockerDriver {
    /// The container's settings; it joins its network by Docker id (names can be shared).
    /// `storage_opt` carries the writable layer's size limit, when asked for (see [`layer`]).
    pub(super) fn container_body(
        &self,
        spec: &SandboxSpec,
        image: &pull::ImageFacts,
        net: &NetRef,
        storage_opt: Option<HashMap<String, String>>,
    ) -> ContainerCreateBody {
        let id = &spec.id;
        let network = net.id.clone();
        // In transparent mode the sandbox's resolver is the server, on the gateway (inside the
        // subnet, so it is routable even where Docker gives internal networks no default
        // route); the firewall hands its port 53 to the egress resolver. Docker's embedded
        // resolver forwards there.
        let dns = (self.dns_port.is_some() && self.firewall.is_some())
            .then(|| vec![net.net.gateway().to_string()]);
        let mut mounts = vec![
            Mount {
                target: Some(agenthold_proto::LOGICAL_HOME.to_string()),
                source: Some(self.names.volume(id)),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            },
            self.placement.mount(),
        ];
        mounts.extend(self.host_mounts.iter().map(|m| Mount {
            target: Some(m.container.to_string_lossy().into_owned()),
            source: Some(m.host.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        }));
        let memory = memory_bytes(spec.memory_mb);
        let mut security_opt = Vec::new();
        if spec.no_new_privileges(self.cfg.no_new_privileges) {
            security_opt.push("no-new-privileges:true".to_string());
        }
        ContainerCreateBody {
            image: Some(spec.image.clone()),
            hostname: Some(id.chars().take(63).collect()),
            entrypoint: Some(vec![self.placement.entrypoint()]),
            // An explicit empty command, so the image's CMD never becomes sandboxd's arguments.
            cmd: Some(Vec::new()),
            // sandboxd needs root to adopt the home volume and drop to the agent account, or
            // to the image's own user, which it is told of here.
            user: Some("0:0".to_string()),
            env: image
                .user
                .as_ref()
                .map(|u| vec![format!("{}={u}", agenthold_proto::boot::IMAGE_USER_ENV)]),
            labels: Some(self.names.labels("sandbox", Some(id))),
            host_config: Some(HostConfig {
                init: Some(true),
                nano_cpus: Some(nano_cpus(spec.cpus)),
                memory: Some(memory),
                // No swap beyond the memory limit.
                memory_swap: Some(memory),
                pids_limit: Some(if self.pids_limit > 0 {
                    self.pids_limit
                } else {
                    -1
                }),
                ulimits: Some(vec![ResourcesUlimits {
                    name: Some("nofile".to_string()),
                    soft: Some(i64::from(self.nofile.soft)),
                    hard: Some(i64::from(self.nofile.hard)),
                }]),
                runtime: Some(spec.runtime.clone()),
                mounts: Some(mounts),
                tmpfs: self.tmpfs(),
                storage_opt,
                security_opt: Some(security_opt),
                cap_drop: Some(self.cfg.cap_drop.clone()),
                network_mode: Some(network.clone()),
                dns,
                // Sleeping sandboxes must stay stopped, whatever happens to the engine.
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::NO),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(network, EndpointSettings::default())])),
            }),
            ..Default::default()
        }
    }

    /// `/tmp` and `/var/tmp` in memory with a size, so a sandbox cannot fill the host's disk
    /// through them; `exec` because builds and installers run what they unpack there.
    fn tmpfs(&self) -> Option<HashMap<String, String>> {
        (self.tmp_mb > 0).then(|| {
            let opts = format!("rw,exec,nosuid,nodev,size={}m,mode=1777", self.tmp_mb);
            HashMap::from([
                ("/tmp".to_string(), opts.clone()),
                ("/var/tmp".to_string(), opts),
            ])
        })
    }
}

/// A memory limit in MiB, as the engine takes it (bytes).
pub(super) fn memory_bytes(memory_mb: u64) -> i64 {
    i64::try_from(memory_mb.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX)
}

/// A CPU limit, as the engine takes it (billionths of a CPU).
pub(super) fn nano_cpus(cpus: f64) -> i64 {
    (cpus * 1e9).round() as i64
}
