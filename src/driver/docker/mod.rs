//! The Docker driver: one container, one home volume and one internal network per agent, on a
//! real engine through bollard.
//!
//! - container `<prefix>-<id>`: entrypoint sandboxd (read-only at `/opt/agenthold`), `--init`,
//!   CPU, memory and PID limits, optional runtime, no-new-privileges and dropped capabilities;
//! - volume `<prefix>-home-<id>` at `/home/agent`: a plain volume, or, for an agent with a disk
//!   limit, one that binds the agent's loop-mounted ext4 image (see [`disk`]);
//! - `/tmp` and `/var/tmp` on size-limited `tmpfs` (they count toward the memory limit);
//! - network `<prefix>-net-<id>`: internal bridge on a subnet of `network_pool`, recorded in the
//!   store so no two agents ever share one; containers take addresses from its upper half.
//!
//! Every object carries our labels (see [`names`]), which is how `list`, reconcile and the event
//! stream find exactly this installation's objects. Every method is idempotent.

mod boot;
mod disk;
mod error;
mod events;
mod exit;
mod files;
mod firewall;
mod layer;
mod names;
mod network;
mod placement;
mod pull;
mod subnet;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, ContainerSummaryStateEnum, EndpointSettings,
    HostConfig, Mount, MountType, NetworkingConfig, ResourcesUlimits, RestartPolicy,
    RestartPolicyNameEnum, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, ListNetworksOptionsBuilder,
    ListVolumesOptionsBuilder, RemoveVolumeOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures::stream::BoxStream;

use super::{
    Driver, DriverError, DriverEvent, EngineRuntimes, PullSink, SandboxInfo, SandboxSpec,
    SandboxStatus,
};
use crate::config::{Config, DockerConfig, HostMount, NofileLimit};
use crate::metrics::{Repair, Repairs};
use crate::store::{StoreError, SubnetBook};
use disk::Disks;

pub use error::DockerError;
use error::{is_not_found, status_of};
use events::OwnOps;
use firewall::Firewall;
use names::Names;
use network::NetRef;
use placement::remove_force;
pub use placement::{locate_sandboxd, Placement};
use subnet::AgentNet;

/// Seconds a stop waits after SIGTERM before Docker kills the sandbox. sandboxd kills its
/// process groups on SIGTERM, so this is only for a sandbox that hangs.
const STOP_GRACE_SECS: i32 = 10;
/// How long each Docker API call may take to answer.
const API_TIMEOUT_SECS: u64 = 120;

pub struct DockerDriver {
    docker: Docker,
    subnets: std::sync::Arc<dyn SubnetBook>,
    names: Names,
    cfg: DockerConfig,
    pids_limit: i64,
    nofile: NofileLimit,
    /// Counts what the driver finds out of place and puts right (`/metrics`).
    repairs: Repairs,
    host_mounts: Vec<HostMount>,
    /// The agents' disk images, or why this server cannot make them.
    disks: Result<Disks, String>,
    /// Size of the `tmpfs` at `/tmp` and `/var/tmp`; 0 leaves them on the container's layer.
    tmp_mb: u64,
    /// The size of each container's writable layer, where the engine can enforce one.
    layer: layer::LayerLimit,
    placement: Placement,
    /// Host mode only: keeps sandboxes away from the host's own addresses.
    firewall: Option<Firewall>,
    tunnel_port: u16,
    /// The egress proxy's port, on the same addresses as the tunnel.
    egress_port: u16,
    /// The egress resolver's (UDP) port when transparent mode is on.
    dns_port: Option<u16>,
    /// Serialises subnet allocation within this server (the store's unique index guards the
    /// rest).
    alloc: tokio::sync::Mutex<()>,
    ops: OwnOps,
    started_at: SystemTime,
    /// Boot tokens already in stopped containers (see `stage_boot`), by agent: the container
    /// they went into (Docker's id, which a re-created container does not share) and the token.
    staged: std::sync::Mutex<HashMap<String, (String, String)>>,
    /// The engine's runtimes, as it last said.
    runtimes: std::sync::Mutex<EngineRuntimes>,
}

/// The runtimes `docker info` lists; an engine that lists none has only runc.
fn engine_runtimes(info: &bollard::models::SystemInfo) -> EngineRuntimes {
    let mut names: Vec<String> = info
        .runtimes
        .as_ref()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default();
    let default = info
        .default_runtime
        .clone()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "runc".to_string());
    if !names.contains(&default) {
        names.push(default.clone());
    }
    names.sort();
    EngineRuntimes { names, default }
}

/// What [`DockerDriver::create_all`] found or made.
struct Made {
    net: NetRef,
    /// The container, when it existed already.
    existing: Option<Existing>,
}

/// Whether a create may make the agent's home volume, or must find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Home {
    /// A create or a rebuild: a missing home is made (empty).
    Make,
    /// A start: the home was made at create, so a missing one was removed from outside, which
    /// must be said rather than papered over with an empty one.
    Keep,
}

struct Existing {
    /// Docker's id, which a re-created container does not share.
    id: String,
    running: bool,
    /// The Docker ids of the networks it is on.
    networks: Vec<String>,
    /// Whether it mounts sandboxd the way this server serves it.
    sandboxd_current: bool,
}

/// Whether a container in `status` counts as up (a paused or restarting one too).
fn is_running(status: Option<ContainerStateStatusEnum>) -> bool {
    matches!(
        status,
        Some(
            ContainerStateStatusEnum::RUNNING
                | ContainerStateStatusEnum::PAUSED
                | ContainerStateStatusEnum::RESTARTING
        )
    )
}

impl DockerDriver {
    /// Connects to the engine, works out where sandboxd comes from, and (in a container) fills
    /// the sandboxd volume. Fails with a clear message when the engine or sandboxd is missing.
    pub async fn connect(
        config: &Config,
        subnets: std::sync::Arc<dyn SubnetBook>,
        tunnel: SocketAddr,
        egress_port: u16,
        dns_port: Option<u16>,
        repairs: Repairs,
    ) -> Result<DockerDriver, DockerError> {
        let cfg = config.sandbox.docker.clone();
        let docker = connect_engine(&cfg).await?;
        let info = docker.info().await.map_err(DockerError::api(
            "asking the engine for its storage driver and runtimes",
        ))?;
        let layer = match config.sandbox.rootfs_mb {
            0 => layer::LayerLimit::off(),
            mb => layer::LayerLimit::new(mb, &info),
        };
        let runtimes = engine_runtimes(&info);
        tracing::info!(
            runtimes = runtimes.names.join(","),
            default = runtimes.default,
            "container runtimes"
        );
        let names = Names::new(&cfg.name_prefix);
        let host_mounts = cfg
            .parsed_host_mounts()
            .map_err(|e| DockerError::Other(format!("sandbox.docker.host_mounts {e}")))?;
        for m in &host_mounts {
            tracing::warn!(
                host = %m.host.display(),
                container = %m.container.display(),
                read_only = m.read_only,
                "host mount: every sandbox can reach this host path (a host-access risk)"
            );
        }
        let binary = placement::locate_sandboxd(config.sandbox.sandboxd_path.as_deref())?;
        let server = placement::detect_server_container(&docker, cfg.server_container()).await?;
        let (placement, firewall) = match server {
            Some(server) => {
                let volume = cfg.sandboxd_volume_name();
                placement::fill_sandboxd_volume(&docker, &names, &server, &volume, &binary).await?;
                // No host firewall rules from in here: the agent bridges get no host address
                // instead (see `create_network`), so the host is out of a sandbox's reach anyway.
                (Placement::Container { server, volume }, None)
            }
            None => {
                let dir =
                    placement::stage_sandboxd(&binary, &config.server.data_dir.join("sandboxd"))?;
                (
                    Placement::Host { dir },
                    Some(Firewall::new(&cfg.name_prefix)),
                )
            }
        };
        let disks = match &placement {
            Placement::Host { .. } => Disks::open(config.server.data_dir.join("disks"))
                .await
                .map_err(|e| e.to_string()),
            Placement::Container { .. } => Err(
                "disk limits need the server on the host (it loop-mounts an ext4 image per \
                 agent, which a server in a container cannot)"
                    .to_string(),
            ),
        };
        if let Err(why) = &disks {
            if config.sandbox.default_disk_mb > 0 {
                return Err(DockerError::Disk(format!(
                    "sandbox.default_disk_mb is {} but {why}; set it to 0 to run without disk \
                     limits",
                    config.sandbox.default_disk_mb
                )));
            }
            tracing::warn!("agents get no disk limits: {why}");
        }
        tracing::info!(?placement, sandboxd = %binary.display(), "docker driver ready");
        Ok(DockerDriver {
            docker,
            subnets,
            names,
            pids_limit: config.sandbox.pids_limit,
            nofile: config.sandbox.nofile,
            repairs,
            host_mounts,
            disks,
            tmp_mb: config.sandbox.tmp_mb,
            layer,
            placement,
            firewall,
            tunnel_port: tunnel.port(),
            egress_port,
            dns_port,
            cfg,
            alloc: tokio::sync::Mutex::new(()),
            ops: OwnOps::default(),
            started_at: SystemTime::now(),
            staged: Default::default(),
            runtimes: std::sync::Mutex::new(runtimes),
        })
    }

    /// Fails when the engine lacks `runtime`, before a container asks for it (Docker's own
    /// answer, "unknown runtime", comes only at start and names no remedy). The engine may have
    /// gained it since the driver connected (dockerd rereads its runtimes on SIGHUP).
    async fn check_runtime(&self, runtime: &str) -> Result<(), DockerError> {
        let has = |r: &EngineRuntimes| r.names.iter().any(|n| n == runtime);
        if has(&self.runtimes.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(());
        }
        let info = self
            .docker
            .info()
            .await
            .map_err(DockerError::api("asking the engine for its runtimes"))?;
        let now = engine_runtimes(&info);
        let found = has(&now);
        let names = now.names.clone();
        *self.runtimes.lock().unwrap_or_else(|e| e.into_inner()) = now;
        if found {
            Ok(())
        } else {
            Err(DockerError::Other(super::missing_runtime(runtime, &names)))
        }
    }

    // ---- images -------------------------------------------------------------------------

    async fn ensure_image(
        &self,
        image: &str,
        progress: &PullSink,
    ) -> Result<pull::ImageFacts, DockerError> {
        pull::ensure_image(&self.docker, image, progress).await
    }

    // ---- volumes ------------------------------------------------------------------------

    /// The disks, or why there are none.
    fn disks(&self) -> Result<&Disks, DockerError> {
        self.disks
            .as_ref()
            .map_err(|why| DockerError::Disk(format!("this agent has a disk limit, but {why}")))
    }

    /// Mounts the agent's disk image (making it if `home` allows), before every start: a host
    /// reboot drops the mount, and a raised limit grows it here unless the sandbox is running
    /// (then at its next start). Returns the folder the home volume binds.
    async fn ensure_disk(
        &self,
        id: &str,
        size_mb: u64,
        home: Home,
        running: bool,
    ) -> Result<std::path::PathBuf, DockerError> {
        self.disks()?
            .ensure(
                &self.names.volume(id),
                size_mb,
                home == Home::Make,
                !running,
            )
            .await
    }

    /// The home volume; for a home with a disk limit, `disk` is the folder in its mounted image
    /// that the volume binds (the files live in the image, so such a volume is remade freely).
    /// Called only while the agent has no container, so no container holds the volume.
    async fn ensure_volume(
        &self,
        id: &str,
        home: Home,
        disk: Option<&std::path::Path>,
    ) -> Result<(), DockerError> {
        let name = self.names.volume(id);
        if home == Home::Keep && disk.is_none() {
            match self.docker.inspect_volume(&name).await {
                Ok(v) => return self.own_volume(id, &name, &v),
                Err(e) if is_not_found(&e) => {
                    return Err(DockerError::HomeMissing {
                        home: format!("Docker volume {name}"),
                    });
                }
                Err(e) => return Err(DockerError::api(format!("inspecting volume {name}"))(e)),
            }
        }
        let driver_opts = disk.map(|d| {
            HashMap::from([
                ("type".to_string(), "none".to_string()),
                ("o".to_string(), "bind".to_string()),
                ("device".to_string(), d.to_string_lossy().into_owned()),
            ])
        });
        let request = VolumeCreateRequest {
            name: Some(name.clone()),
            labels: Some(self.names.labels("home", Some(id))),
            driver_opts: driver_opts.clone(),
            ..Default::default()
        };
        // Creating an existing volume returns it unchanged: idempotent by itself.
        let v = self
            .docker
            .create_volume(request.clone())
            .await
            .map_err(DockerError::api(format!("creating volume {name}")))?;
        self.own_volume(id, &name, &v)?;
        let Some(want) = driver_opts else {
            return Ok(());
        };
        if want.get("device") == v.options.get("device") {
            return Ok(());
        }
        if v.options.get("o").map(String::as_str) != Some("bind") {
            // A plain volume holds files of its own: never removed to make room.
            return Err(DockerError::Disk(format!(
                "volume {name} is a plain Docker volume with files of its own, but the agent \
                 has a disk limit; move its files and remove the volume by hand"
            )));
        }
        // A volume of ours binding something else (made for another data directory, or by an
        // older server): it holds no files, so it is made again.
        tracing::warn!(
            agent = id,
            volume = name,
            found = ?v.options.get("device"),
            "the home volume does not bind the agent's disk; making it again"
        );
        self.docker
            .remove_volume(
                &name,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
            .map_err(DockerError::api(format!("removing volume {name}")))?;
        self.docker
            .create_volume(request)
            .await
            .map_err(DockerError::api(format!("creating volume {name}")))?;
        Ok(())
    }

    /// A volume with the home's name that we did not make is never mounted as the home.
    fn own_volume(
        &self,
        id: &str,
        name: &str,
        v: &bollard::models::Volume,
    ) -> Result<(), DockerError> {
        if self.names.is_agents(Some(&v.labels), id) {
            Ok(())
        } else {
            Err(DockerError::Foreign {
                kind: "volume",
                name: name.to_string(),
            })
        }
    }

    /// Looks again at volume `name`, which Docker showed without our labels where the agent's
    /// home is. Docker 20.10 answers a create of an existing volume so the first time after
    /// dockerd restarts, while an inspect has the labels (and from then on so does a create):
    /// then it is ours. A dockerd killed while making a volume can leave it without its labels:
    /// such a volume that holds nothing (empty, or binding the agent's own disk image) is
    /// removed, so that the home can be made (or, a plain home that is gone, said to be). Any
    /// other stays, and is `Foreign`.
    async fn recheck_home(&self, id: &str, name: &str) -> Result<(), DockerError> {
        let foreign = || DockerError::Foreign {
            kind: "volume",
            name: name.to_string(),
        };
        let v = match self.docker.inspect_volume(name).await {
            Ok(v) => v,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(DockerError::api(format!("inspecting volume {name}"))(e)),
        };
        if self.names.is_agents(Some(&v.labels), id) {
            return Ok(());
        }
        // Its folder is readable only by a server on the host, as root; else it is not known
        // to be empty.
        let empty = std::fs::read_dir(&v.mountpoint).is_ok_and(|mut d| d.next().is_none());
        let plain = v.driver == "local" && v.options.is_empty();
        // A volume that binds the agent's own disk holds no files itself (they are in the image).
        let binds_disk = v.driver == "local"
            && v.options.get("o").map(String::as_str) == Some("bind")
            && self.disks.as_ref().is_ok_and(|d| {
                v.options.get("device").map(std::path::Path::new) == Some(d.home(name).as_path())
            });
        if !(v.labels.is_empty() && ((plain && empty) || binds_disk)) {
            tracing::debug!(
                volume = name,
                labels = ?v.labels,
                driver = v.driver,
                options = ?v.options,
                empty,
                "not a home a killed dockerd left half made"
            );
            return Err(foreign());
        }
        tracing::warn!(
            volume = name,
            "an empty volume without labels has the home's name (a dockerd killed while making \
             it leaves it so); removing it to make the home"
        );
        let opts = RemoveVolumeOptionsBuilder::default().force(false).build();
        match self.docker.remove_volume(name, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(DockerError::api(format!("removing volume {name}"))(e)),
        }
    }

    // ---- containers ---------------------------------------------------------------------

    /// The container's settings; it joins its network by Docker id (names can be shared).
    /// `storage_opt` carries the writable layer's size limit, when asked for (see [`layer`]).
    fn container_body(
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
        let memory = i64::try_from(spec.memory_mb.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
        let mut security_opt = Vec::new();
        if self.cfg.no_new_privileges {
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
                nano_cpus: Some((spec.cpus * 1e9).round() as i64),
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

    /// The agent's container as Docker has it, if it exists. One that has the agent's name but
    /// not our labels is somebody else's: an error, never adopted.
    async fn own_container(
        &self,
        id: &str,
    ) -> Result<Option<bollard::models::ContainerInspectResponse>, DockerError> {
        let name = self.names.container(id);
        match self.docker.inspect_container(&name, None).await {
            Ok(info) => {
                let labels = info.config.as_ref().and_then(|c| c.labels.as_ref());
                if self.names.is_agents(labels, id) {
                    let status = info.state.as_ref().and_then(|s| s.status);
                    match status {
                        // A removal a killed server left to dockerd: it goes on, so the
                        // container is as good as gone (waiting beats using it and failing).
                        Some(ContainerStateStatusEnum::REMOVING) => {
                            placement::wait_removed(&self.docker, &name).await?;
                            Ok(None)
                        }
                        // A removal that failed half-way; no use can be made of it.
                        Some(ContainerStateStatusEnum::DEAD) => {
                            remove_force(&self.docker, &name).await?;
                            Ok(None)
                        }
                        _ => Ok(Some(info)),
                    }
                } else {
                    Err(DockerError::Foreign {
                        kind: "container",
                        name,
                    })
                }
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(DockerError::api(format!("inspecting container {name}"))(e)),
        }
    }

    /// Makes everything the sandbox needs; an existing container is kept as it is (rebuild is
    /// what applies a new spec), unless the network it was made on is gone: then it is made
    /// anew on the agent's network, keeping the home.
    async fn create_all(
        &self,
        spec: &SandboxSpec,
        pull: &PullSink,
        home: Home,
    ) -> Result<Made, DockerError> {
        let made = match self.create_once(spec, pull, home).await {
            Err(DockerError::Foreign {
                kind: "volume",
                name,
            }) => {
                self.recheck_home(&spec.id, &name).await?;
                self.create_once(spec, pull, home).await?
            }
            r => r?,
        };
        let Some(existing) = &made.existing else {
            return Ok(made);
        };
        let on_network = existing.networks.contains(&made.net.id);
        if on_network && existing.sandboxd_current {
            return Ok(made);
        }
        if existing.running {
            // Never pulled from under a running sandbox; its next start remakes it.
            return Ok(made);
        }
        if on_network {
            tracing::info!(
                agent = spec.id,
                "the sandbox's container mounts sandboxd from where an older server served it; \
                 making the container anew, keeping its home"
            );
        } else {
            tracing::warn!(
                agent = spec.id,
                network = made.net.id,
                "the sandbox's container is not on the agent's network (it was removed or made \
                 anew outside agenthold); making the container anew, keeping its home"
            );
        }
        self.forget_staged(&spec.id);
        remove_force(&self.docker, &existing.id).await?;
        self.repairs.record(Repair::container_remade);
        self.create_once(spec, pull, Home::Keep).await
    }

    async fn create_once(
        &self,
        spec: &SandboxSpec,
        pull: &PullSink,
        home: Home,
    ) -> Result<Made, DockerError> {
        let id = &spec.id;
        let name = self.names.container(id);
        let t = std::time::Instant::now();
        let existing = self.own_container(id).await?.map(|info| Existing {
            running: is_running(info.state.and_then(|s| s.status)),
            // A container that never ran has no endpoint ids yet, only the network it names.
            networks: info
                .network_settings
                .and_then(|n| n.networks)
                .into_iter()
                .flat_map(|n| n.into_values().filter_map(|e| e.network_id))
                .chain(
                    info.host_config
                        .as_ref()
                        .and_then(|h| h.network_mode.clone()),
                )
                .collect(),
            sandboxd_current: self
                .placement
                .serves(info.mounts.as_deref().unwrap_or_default()),
            id: info.id.unwrap_or_default(),
        });
        let exists = existing.is_some();
        let running = existing.as_ref().is_some_and(|e| e.running);
        log_step(id, "inspect container", t);
        // Independent of each other: made side by side, which is most of a create's time.
        let image = async {
            let t = std::time::Instant::now();
            if exists {
                return Ok(None);
            }
            let facts = self.ensure_image(&spec.image, pull).await?;
            log_step(id, "image", t);
            Ok::<_, DockerError>(Some(facts))
        };
        // A container's volume exists as long as the container does (Docker refuses to remove
        // a volume in use): only a new container needs it made.
        let volume = async {
            let t = std::time::Instant::now();
            // The disk is mounted before every start, even of an existing container: a host
            // reboot drops the mount, and the container would bind the empty folder below.
            let disk = match spec.disk_mb {
                Some(mb) => Some(self.ensure_disk(id, mb, home, running).await?),
                None => None,
            };
            if !exists {
                self.ensure_volume(id, home, disk.as_deref()).await?;
                log_step(id, "volume", t);
            }
            Ok::<_, DockerError>(())
        };
        let network = async {
            let t = std::time::Instant::now();
            let net = self.ensure_network(id).await;
            log_step(id, "network", t);
            net
        };
        let (image, volume, net) = tokio::join!(image, volume, network);
        let image = image?;
        volume?;
        let net = net?;
        if let Some(image) = image {
            self.check_runtime(&spec.runtime).await?;
            let t = std::time::Instant::now();
            let create = |storage_opt| {
                self.docker.create_container(
                    Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                    self.container_body(spec, &image, &net, storage_opt),
                )
            };
            let size = self.layer.storage_opt();
            let asked = size.is_some();
            let mut r = create(size).await;
            // Refused with the limit and taken without it: the engine cannot apply it.
            if let Err(bollard::errors::Error::DockerResponseServerError {
                status_code,
                message,
            }) = &r
            {
                if asked && !matches!(status_code, 404 | 409) {
                    let without = create(None).await;
                    if without.is_ok() {
                        self.layer.refused(message);
                    }
                    r = without;
                }
            }
            match r {
                Ok(_) => tracing::info!(
                    agent = id,
                    container = name,
                    image = spec.image,
                    "container created"
                ),
                // Made meanwhile: ours if it has our labels, refused if not.
                Err(e) if status_of(&e) == Some(409) => {
                    self.own_container(id).await?;
                }
                Err(e) if is_not_found(&e) => {
                    return Err(DockerError::ImageMissing {
                        image: spec.image.clone(),
                        why: e.to_string(),
                    })
                }
                Err(e) => return Err(DockerError::api(format!("creating container {name}"))(e)),
            }
            log_step(id, "create container", t);
        }
        Ok(Made { net, existing })
    }

    /// A container with the agent's name that is not ours counts as missing: it is not the
    /// agent's sandbox (and a start says so).
    async fn container_status(&self, id: &str) -> Result<SandboxStatus, DockerError> {
        match self.own_container(id).await {
            Ok(Some(info)) => Ok(if is_running(info.state.and_then(|s| s.status)) {
                SandboxStatus::Running
            } else {
                SandboxStatus::Stopped
            }),
            Ok(None) | Err(DockerError::Foreign { .. }) => Ok(SandboxStatus::Missing),
            Err(e) => Err(e),
        }
    }

    /// `Some` when the container's main process was killed by the kernel for lack of memory.
    async fn oom_reason(&self, id: &str) -> Result<Option<String>, DockerError> {
        let name = self.names.container(id);
        let info = match self.docker.inspect_container(&name, None).await {
            Ok(info) => info,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(DockerError::api(format!("inspecting container {name}"))(e)),
        };
        let Some(state) = info.state else {
            return Ok(None);
        };
        let stopped = !is_running(state.status);
        // Docker sets OOMKilled for any kill in the container's memory cgroup since it started,
        // even one that only ended a command; SIGKILL's exit status says the sandbox itself
        // (init or sandboxd) died of it.
        if !(stopped && state.oom_killed == Some(true) && state.exit_code == Some(137)) {
            return Ok(None);
        }
        let limit = info
            .host_config
            .and_then(|h| h.memory)
            .filter(|m| *m > 0)
            .map(|m| format!(" of {} MiB", m / (1024 * 1024)))
            .unwrap_or_default();
        Ok(Some(format!(
            "the sandbox ran out of memory (its limit{limit}) and was stopped; start it \
             again, or give it more memory (memoryMb) and rebuild it"
        )))
    }

    async fn stop_container(&self, id: &str) -> Result<(), DockerError> {
        let name = self.names.container(id);
        match self
            .docker
            .stop_container(
                &name,
                Some(
                    StopContainerOptionsBuilder::default()
                        .t(STOP_GRACE_SECS)
                        .build(),
                ),
            )
            .await
        {
            // 304 (already stopped) is a success for bollard.
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(DockerError::api(format!("stopping container {name}"))(e)),
        }
    }

    /// The server's address on the agent's network: the bridge's own address when the server
    /// runs on the host, its container's when it runs in one.
    fn server_on(&self, net: &AgentNet) -> std::net::Ipv4Addr {
        match self.placement {
            Placement::Host { .. } => net.gateway(),
            Placement::Container { .. } => net.server_addr(),
        }
    }

    fn tunnel_url(&self, net: &AgentNet) -> String {
        format!(
            "ws://{}:{}{}",
            self.server_on(net),
            self.tunnel_port,
            agenthold_proto::boot::TUNNEL_PATH
        )
    }

    /// The proxy variables every program in the sandbox starts with: both spellings, since
    /// tools read one or the other.
    fn proxy_env(&self, net: &AgentNet) -> std::collections::BTreeMap<String, String> {
        let url = format!("http://{}:{}", self.server_on(net), self.egress_port);
        let local = "localhost,127.0.0.1,::1".to_string();
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
            .into_iter()
            .map(|k| (k.to_string(), url.clone()))
            .chain(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), local.clone())))
            .collect()
    }

    async fn start_inner(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DockerError> {
        let id = &spec.id;
        let name = self.names.container(id);
        let begun = std::time::Instant::now();
        let Made { net, existing } = self.create_all(spec, pull, Home::Keep).await?;
        let NetRef { net, bridge, .. } = net;
        let tunnel_url = self.tunnel_url(&net);
        // The firewall rules and the boot.json upload do not depend on each other, and both
        // must be done before the container starts: side by side.
        let firewall = async {
            let t = std::time::Instant::now();
            if let Some(fw) = &self.firewall {
                let ports = firewall::Ports {
                    tunnel: self.tunnel_port,
                    proxy: self.egress_port,
                    transparent_dns: self.dns_port,
                };
                fw.ensure(id, &bridge, net.gateway(), ports).await?;
                log_step(id, "firewall", t);
            }
            Ok::<_, DockerError>(())
        };
        let upload = async {
            // boot.json goes into a stopped container only: a running sandboxd would keep the
            // old token, which the server no longer accepts.
            let running = existing.as_ref().is_some_and(|c| c.running);
            if running {
                self.stop_container(id).await?;
            }
            // Staged while the sandbox went to sleep: this very token is in this very
            // container already.
            let staged = !running
                && existing
                    .as_ref()
                    .is_some_and(|c| self.take_staged(id, &c.id, token));
            if !staged {
                self.upload_boot(id, &net, token).await?;
            }
            Ok::<_, DockerError>(())
        };
        let (firewall, upload) = tokio::join!(firewall, upload);
        firewall?;
        upload?;
        // From here on a `die` is the new sandbox failing (sandboxd exiting at boot), which the
        // lifecycle must hear about even while this start is still under way.
        self.ops.launching(id);
        let t = std::time::Instant::now();
        self.docker
            .start_container(&name, None)
            .await
            .map_err(DockerError::api(format!("starting container {name}")))?;
        log_step(id, "start container", t);
        log_step(id, "start, in all", begun);
        tracing::info!(
            agent = id,
            container = name,
            tunnel = tunnel_url,
            "sandbox started"
        );
        Ok(())
    }

    /// Removes whatever exists of the agent, found by its labels (a container, any number of
    /// networks, the home, the firewall rules), and frees its subnet. Objects with its names
    /// but not our labels are somebody else's and stay.
    async fn destroy_inner(&self, id: &str) -> Result<(), DockerError> {
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&self.names.filter_agent("sandbox", id))
                    .build(),
            ))
            .await
            .map_err(DockerError::api(format!(
                "listing the containers of agent {id}"
            )))?;
        for c in containers {
            if let Some(cid) = c.id {
                remove_force(&self.docker, &cid).await?;
            }
        }
        if let Some(fw) = &self.firewall {
            fw.remove(id).await?;
        }
        self.remove_agent_networks(id).await?;
        let volume = self.names.volume(id);
        match self.docker.inspect_volume(&volume).await {
            Ok(v) if self.names.is_agents(Some(&v.labels), id) => {
                match self
                    .docker
                    .remove_volume(
                        &volume,
                        Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
                    )
                    .await
                {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(DockerError::api(format!("removing volume {volume}"))(e)),
                }
            }
            Ok(_) => tracing::warn!(
                agent = id,
                volume,
                "a volume with the agent's home's name was not made by agenthold; left alone"
            ),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(DockerError::api(format!("inspecting volume {volume}"))(e)),
        }
        if let Ok(disks) = &self.disks {
            disks.remove(&volume).await?;
        }
        match self.subnets.set_subnet(id, None).await {
            // An orphan has no row: nothing to free.
            Ok(()) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(
            agent = id,
            "sandbox destroyed (container, home volume, network)"
        );
        Ok(())
    }

    async fn list_inner(&self) -> Result<Vec<SandboxInfo>, DockerError> {
        let mut found: BTreeMap<String, SandboxStatus> = BTreeMap::new();
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&self.names.filter("sandbox"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing containers"))?;
        for c in containers {
            if let Some(id) = self.names.agent_of(c.labels.as_ref()) {
                let status = match c.state {
                    Some(
                        ContainerSummaryStateEnum::RUNNING
                        | ContainerSummaryStateEnum::PAUSED
                        | ContainerSummaryStateEnum::RESTARTING,
                    ) => SandboxStatus::Running,
                    _ => SandboxStatus::Stopped,
                };
                found.insert(id, status);
            }
        }
        // A home volume or network without its container is ours too, so orphans of a crash
        // between steps are found and removed as well.
        let volumes = self
            .docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&self.names.filter("home"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing volumes"))?;
        for v in volumes.volumes.unwrap_or_default() {
            if let Some(id) = self.names.agent_of(Some(&v.labels)) {
                found.entry(id).or_insert(SandboxStatus::Missing);
            }
        }
        let networks = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&self.names.filter("network"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing networks"))?;
        for n in networks {
            if let Some(id) = self.names.agent_of(n.labels.as_ref()) {
                found.entry(id).or_insert(SandboxStatus::Missing);
            }
        }
        if let Some(fw) = &self.firewall {
            for id in fw.agents().await? {
                found.entry(id).or_insert(SandboxStatus::Missing);
            }
        }
        if let Ok(disks) = &self.disks {
            for name in disks.names()? {
                if let Some(id) = self.names.agent_of_volume(&name) {
                    found.entry(id).or_insert(SandboxStatus::Missing);
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|(id, status)| SandboxInfo { id, status })
            .collect())
    }
}

/// How long one step of a create or a start took, for `AGENTHOLD_LOG=agenthold::driver=debug`:
/// where the time of "create → shell" goes.
fn log_step(agent: &str, step: &str, since: std::time::Instant) {
    tracing::debug!(
        agent,
        step,
        ms = since.elapsed().as_secs_f64() * 1000.0,
        "sandbox step"
    );
}

/// Connects to `socket` (a path or URL) or, if unset, to `DOCKER_HOST` or the default socket,
/// and agrees on an API version the engine speaks.
async fn connect_engine(cfg: &DockerConfig) -> Result<Docker, DockerError> {
    let (endpoint, docker) = match cfg.socket() {
        Some(s) if s.starts_with('/') => (
            s.to_string(),
            Docker::connect_with_unix(s, API_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION),
        ),
        Some(s) => (s.to_string(), Docker::connect_with_host(s)),
        None => (
            std::env::var("DOCKER_HOST").unwrap_or_else(|_| "/var/run/docker.sock".to_string()),
            Docker::connect_with_defaults(),
        ),
    };
    let connect_err = |source| DockerError::Connect {
        endpoint: format!(" at {endpoint}"),
        source,
    };
    let docker = docker.map_err(connect_err)?;
    let docker = docker.negotiate_version().await.map_err(connect_err)?;
    let docker = docker.with_timeout(Duration::from_secs(API_TIMEOUT_SECS));
    Ok(docker)
}

#[async_trait]
impl Driver for DockerDriver {
    fn kind(&self) -> &'static str {
        "docker"
    }

    async fn sandbox_from(&self, peer: std::net::IpAddr) -> Option<(String, std::net::IpAddr)> {
        let std::net::IpAddr::V4(peer) = crate::egress::canonical(peer) else {
            return None;
        };
        if !self.cfg.network_pool.contains(&peer) {
            return None;
        }
        let holders = self.subnets.holders().await.ok()?;
        holders.into_iter().find_map(|(id, subnet)| {
            let net = AgentNet::new(subnet.parse().ok()?);
            let server = self.server_on(&net);
            (net.subnet.contains(&peer) && peer != server).then_some((id, server.into()))
        })
    }

    async fn sandbox_at(&self, local: std::net::IpAddr, peer: std::net::IpAddr) -> Option<String> {
        let (std::net::IpAddr::V4(local), std::net::IpAddr::V4(peer)) = (
            crate::egress::canonical(local),
            crate::egress::canonical(peer),
        ) else {
            return None;
        };
        // Anyone may knock (the proxy listens where the tunnel does): only the agent networks
        // cost a look at the database.
        if !self.cfg.network_pool.contains(&peer) {
            return None;
        }
        let holders = match self.subnets.holders().await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("egress proxy: cannot read the agents' subnets: {e}");
                return None;
            }
        };
        // Each agent network is the agent's alone: a peer inside it that came in on the
        // server's own address there is that agent's sandbox.
        holders.into_iter().find_map(|(id, subnet)| {
            let net = AgentNet::new(subnet.parse().ok()?);
            (net.subnet.contains(&peer) && self.server_on(&net) == local && peer != local)
                .then_some(id)
        })
    }

    fn runtimes(&self) -> EngineRuntimes {
        self.runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn disk_limits_unavailable(&self) -> Option<String> {
        self.disks.as_ref().err().cloned()
    }

    fn rootfs_limit_mb(&self) -> Option<u64> {
        self.layer.enforced_mb()
    }

    async fn create(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        self.create_all(spec, pull, Home::Make).await?;
        Ok(())
    }

    async fn start(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        match self.start_inner(spec, token, pull).await {
            // Something vanished under the start: a removal a killed server left to dockerd
            // finished after the container was found. Everything is looked up afresh.
            Err(e) if e.is_not_found() => {
                tracing::info!(agent = spec.id, "{e}; starting again from the lookup");
                Ok(self.start_inner(spec, token, pull).await?)
            }
            // A dockerd killed while it started the container leaves containerd a task of it that
            // no later start gets past: the container is made anew, keeping the home.
            Err(e) if e.is_stale_task() => {
                tracing::warn!(
                    agent = spec.id,
                    "{e} (left by a dockerd restart); making the container and its network anew, \
                     keeping its home"
                );
                // Its removal is part of this start, not the new sandbox failing.
                self.ops.unlaunch(&spec.id);
                self.forget_staged(&spec.id);
                if let Some(info) = self.own_container(&spec.id).await? {
                    let container = info.id.unwrap_or_else(|| self.names.container(&spec.id));
                    remove_force(&self.docker, &container).await?;
                }
                // That task may run on, out of dockerd's sight (its sandboxd dialling with the old
                // token), at the address the new container would get on the agent's bridge: with
                // the network made anew it is on no bridge at all.
                if let Some(net) = self.agent_network(&spec.id).await? {
                    if let Err(e) = self.remove_network(&net).await {
                        tracing::warn!(agent = spec.id, "{e}; keeping the network");
                    }
                }
                self.repairs.record(Repair::container_remade);
                Ok(self.start_inner(spec, token, pull).await?)
            }
            r => Ok(r?),
        }
    }

    async fn stop(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        Ok(self.stop_container(id).await?)
    }

    async fn stage_boot(&self, spec: &SandboxSpec, token: &str) -> Result<bool, DriverError> {
        let _op = self.ops.begin(&spec.id);
        Ok(self.stage_boot_inner(spec, token).await?)
    }

    async fn rebuild(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        // The home volume and the network stay; only the container is made anew (and whatever
        // else is missing: a rebuild is also how an agent whose home was lost gets a new one).
        self.forget_staged(&spec.id);
        if let Some(info) = self.own_container(&spec.id).await? {
            let container = info.id.unwrap_or_else(|| self.names.container(&spec.id));
            remove_force(&self.docker, &container).await?;
        }
        let home_gone = match spec.disk_mb {
            Some(_) => !self.disks()?.exists(&self.names.volume(&spec.id)),
            None => self
                .docker
                .inspect_volume(&self.names.volume(&spec.id))
                .await
                .is_err_and(|e| is_not_found(&e)),
        };
        if home_gone {
            tracing::warn!(
                agent = spec.id,
                "the agent's home was gone; the rebuild makes a new, empty one"
            );
        }
        self.create_all(spec, pull, Home::Make).await?;
        Ok(())
    }

    async fn destroy(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        self.forget_staged(id);
        Ok(self.destroy_inner(id).await?)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxStatus, DriverError> {
        Ok(self.container_status(id).await?)
    }

    async fn failure_reason(&self, id: &str) -> Option<String> {
        match self.oom_reason(id).await {
            Ok(reason) => reason,
            Err(e) => {
                tracing::debug!(agent = id, "why the sandbox stopped is unknown: {e}");
                None
            }
        }
    }

    async fn exit_report(&self, id: &str) -> Option<String> {
        exit::report(&self.docker, &self.names.container(id)).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, DriverError> {
        Ok(self.list_inner().await?)
    }

    fn events(&self) -> BoxStream<'static, (DriverEvent, SystemTime)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(events::follow(
            self.docker.clone(),
            self.names.clone(),
            self.ops.clone(),
            self.started_at,
            tx,
        ));
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|e| (e, rx))
        }))
    }
}

impl std::fmt::Debug for DockerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerDriver")
            .field("prefix", &self.names.prefix())
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}
