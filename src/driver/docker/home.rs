//! The agent's home: its Docker volume, and for an agent with a disk limit the ext4 image that
//! volume binds (see [`super::disk`]). The home outlives every container, so it is the one
//! object here that is never made anew without being asked, and never taken from a stranger.

use std::collections::HashMap;

use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::RemoveVolumeOptionsBuilder;

use super::disk::Disks;
use super::error::is_not_found;
use super::{DockerDriver, DockerError};

/// Whether a create may make the agent's home volume, or must find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Home {
    /// A create or a rebuild: a missing home is made (empty).
    Make,
    /// A start: the home was made at create, so a missing one was removed from outside, which
    /// must be said rather than papered over with an empty one.
    Keep,
}

impl DockerDriver {
    /// The disks, or why there are none.
    pub(super) fn disks(&self) -> Result<&Disks, DockerError> {
        self.disks
            .as_ref()
            .map_err(|why| DockerError::Disk(format!("this agent has a disk limit, but {why}")))
    }

    /// Mounts the agent's disk image (making it if `home` allows), before every start: a host
    /// reboot drops the mount, and a raised limit grows it here unless the sandbox is running
    /// (then at its next start). Returns the folder the home volume binds.
    pub(super) async fn ensure_disk(
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
    pub(super) async fn ensure_volume(
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
    pub(super) async fn recheck_home(&self, id: &str, name: &str) -> Result<(), DockerError> {
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
}
