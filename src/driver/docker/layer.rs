//! The limit on what a sandbox writes outside its home and `/tmp`: its container's writable
//! layer (`apt-get install`, `pip install` as root, files under `/var`, ...).
//!
//! Docker enforces `--storage-opt size=` with the btrfs storage driver (a quota group per
//! container, counting the image's files too) and with overlay2 on an XFS mounted with project
//! quotas (`pquota`), and refuses it everywhere else. So the driver asks for it only where the
//! engine reports one of those. When a create that asked for it fails and the same create
//! without it works (an XFS without `pquota`, which `docker info` does not show; a btrfs whose
//! quotas cannot be turned on), the engine refused the limit: the driver stops asking and says
//! why once. A missing limit must not stop sandboxes.

use std::collections::HashMap;
use std::sync::RwLock;

use bollard::models::SystemInfo;

pub struct LayerLimit {
    mb: u64,
    /// Why the engine cannot enforce the limit; `None` while it does (or is believed to).
    unavailable: RwLock<Option<String>>,
}

impl LayerLimit {
    /// The limit asked for, in MiB.
    pub fn requested_mb(&self) -> u64 {
        self.mb
    }

    /// The limit of `mb` MiB (at least 1) on an engine described by `info`.
    pub fn new(mb: u64, info: &SystemInfo) -> LayerLimit {
        let unavailable = engine_supports(info.driver.as_deref(), info.driver_status.as_deref())
            .err()
            .inspect(|why| warn_unlimited(why));
        LayerLimit {
            mb,
            unavailable: RwLock::new(unavailable),
        }
    }

    /// No limit (`sandbox.rootfs_mb: 0`).
    pub fn off() -> LayerLimit {
        LayerLimit {
            mb: 0,
            unavailable: RwLock::new(Some("sandbox.rootfs_mb is 0".to_string())),
        }
    }

    /// The `StorageOpt` of a new container, if the limit applies.
    pub fn storage_opt(&self) -> Option<HashMap<String, String>> {
        self.unavailable()
            .is_none()
            .then(|| HashMap::from([("size".to_string(), format!("{}m", self.mb))]))
    }

    /// The limit in MiB, if the engine enforces it.
    pub fn enforced_mb(&self) -> Option<u64> {
        self.unavailable().is_none().then_some(self.mb)
    }

    /// Why sandboxes' writable layers have no limit, if they have none.
    pub fn unavailable(&self) -> Option<String> {
        match self.unavailable.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The engine refused a create that asked for the limit (`refusal`, its answer) and took the
    /// same create without it: the limit is off from now on, said once.
    pub fn refused(&self, refusal: &str) {
        let mut g = match self.unavailable.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if g.is_none() {
            let why = format!("the Docker engine refuses --storage-opt size: {refusal}");
            warn_unlimited(&why);
            *g = Some(why);
        }
    }
}

fn warn_unlimited(why: &str) {
    tracing::warn!(
        "what sandboxes write outside their home and in-memory /tmp is not limited \
         (set sandbox.rootfs_mb: 0 to silence this): {why}"
    );
}

/// `Ok` when the engine's storage can limit a container's writable layer, as far as
/// `docker info` tells (it does not show XFS's mount options).
fn engine_supports(driver: Option<&str>, status: Option<&[Vec<String>]>) -> Result<(), String> {
    let field = |name: &str| {
        status
            .unwrap_or_default()
            .iter()
            .find(|kv| kv.first().map(String::as_str) == Some(name))
            .and_then(|kv| kv.get(1))
            .map(String::as_str)
    };
    // With the containerd image store, `Driver` names a snapshotter, and the engine drops
    // `StorageOpt` without a word.
    if field("driver-type") == Some("io.containerd.snapshotter.v1") {
        return Err(format!(
            "the Docker engine stores containers with containerd's {} snapshotter, which \
             ignores --storage-opt size",
            driver.unwrap_or("unknown")
        ));
    }
    let backing = field("Backing Filesystem");
    match (driver, backing) {
        (Some("overlay2"), Some("xfs")) | (Some("btrfs"), _) => Ok(()),
        (driver, backing) => Err(format!(
            "the Docker engine stores containers with {} on {}; it limits a container's \
             writable layer only with btrfs, or overlay2 on XFS mounted with pquota",
            driver.unwrap_or("an unknown storage driver"),
            backing.unwrap_or("an unknown filesystem"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(backing: &str) -> Vec<Vec<String>> {
        vec![
            vec!["Backing Filesystem".into(), backing.into()],
            vec!["Supports d_type".into(), "true".into()],
        ]
    }

    #[test]
    fn only_btrfs_and_overlay2_on_xfs_are_asked_for_a_size() {
        assert!(engine_supports(Some("overlay2"), Some(&status("xfs"))).is_ok());
        assert!(engine_supports(Some("btrfs"), Some(&status("btrfs"))).is_ok());
        let why = engine_supports(Some("overlay2"), Some(&status("extfs"))).unwrap_err();
        assert!(why.contains("overlay2 on extfs"), "{why}");
        assert!(engine_supports(Some("vfs"), Some(&status("xfs"))).is_err());
        assert!(engine_supports(Some("overlay2"), None).is_err());
        assert!(engine_supports(None, None).is_err());
    }

    fn info(driver: &str, backing: &str) -> SystemInfo {
        SystemInfo {
            driver: Some(driver.into()),
            driver_status: Some(status(backing)),
            ..Default::default()
        }
    }

    #[test]
    fn a_refusal_turns_the_limit_off() {
        let limit = LayerLimit::new(512, &info("overlay2", "xfs"));
        assert_eq!(limit.enforced_mb(), Some(512));
        assert_eq!(
            limit.storage_opt(),
            Some(HashMap::from([("size".into(), "512m".into())]))
        );
        limit.refused(
            "--storage-opt is supported only for overlay over xfs with 'pquota' mount option",
        );
        assert_eq!(limit.enforced_mb(), None);
        assert_eq!(limit.storage_opt(), None);
        assert!(limit.unavailable().unwrap_or_default().contains("pquota"));
    }

    #[test]
    fn the_containerd_image_store_is_not_asked_for_a_size() {
        let mut status = status("btrfs");
        status.push(vec![
            "driver-type".into(),
            "io.containerd.snapshotter.v1".into(),
        ]);
        let why = engine_supports(Some("btrfs"), Some(&status)).unwrap_err();
        assert!(why.contains("snapshotter"), "{why}");
    }

    #[test]
    fn zero_means_no_limit_and_other_engines_none() {
        assert_eq!(LayerLimit::off().storage_opt(), None);
        assert_eq!(
            LayerLimit::new(64, &info("overlay2", "extfs")).enforced_mb(),
            None
        );
    }
}
