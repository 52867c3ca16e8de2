//! The limit on what a sandbox writes outside its home and `/tmp`: its container's writable
//! layer (`apt-get install`, `pip install` as root, files under `/var`, ...).
//!
//! Docker enforces `--storage-opt size=` with the btrfs storage driver (a quota group per
//! container, counting the image's files too) and with overlay2 on an XFS mounted with project
//! quotas (`pquota`), and refuses it everywhere else. So the driver asks for it only where the
//! engine reports one of those, and the first time the engine refuses anyway (an XFS without
//! `pquota`, which `docker info` does not show) it stops asking, says why once, and makes the
//! container without it: a missing limit must not stop sandboxes.

use std::collections::HashMap;
use std::sync::RwLock;

use bollard::models::SystemInfo;

pub struct LayerLimit {
    mb: u64,
    /// Why the engine cannot enforce the limit; `None` while it does (or is believed to).
    unavailable: RwLock<Option<String>>,
}

impl LayerLimit {
    /// The limit of `mb` MiB (0: none) on an engine described by `info`.
    pub fn new(mb: u64, info: &SystemInfo) -> LayerLimit {
        let unavailable = if mb == 0 {
            Some("sandbox.rootfs_mb is 0".to_string())
        } else {
            engine_supports(info.driver.as_deref(), info.driver_status.as_deref()).err()
        };
        if let (Some(why), true) = (&unavailable, mb > 0) {
            tracing::warn!("sandboxes' writes outside their home and /tmp are not limited: {why}");
        }
        LayerLimit {
            mb,
            unavailable: RwLock::new(unavailable),
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

    /// Whether `e`, the answer to a create that asked for the limit, is the engine refusing the
    /// option. If so the limit is off from now on (said once), and the create should be tried
    /// again without it.
    pub fn refused(&self, e: &bollard::errors::Error) -> bool {
        let bollard::errors::Error::DockerResponseServerError { message, .. } = e else {
            return false;
        };
        if !is_refusal(message) {
            return false;
        }
        let mut g = match self.unavailable.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if g.is_none() {
            tracing::warn!(
                engine = %message,
                "sandboxes' writes outside their home and /tmp are not limited: the engine \
                 refuses --storage-opt size"
            );
            *g = Some(format!("the Docker engine refuses it: {message}"));
        }
        true
    }
}

/// `Ok` when the engine's storage can limit a container's writable layer, as far as
/// `docker info` tells (it does not show XFS's mount options).
fn engine_supports(driver: Option<&str>, status: Option<&[Vec<String>]>) -> Result<(), String> {
    let backing = status
        .unwrap_or_default()
        .iter()
        .find(|kv| kv.first().map(String::as_str) == Some("Backing Filesystem"))
        .and_then(|kv| kv.get(1))
        .map(String::as_str);
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

/// Docker's answers to a size it cannot apply ("--storage-opt is supported only for overlay
/// over xfs with 'pquota' mount option", "Storage Option not supported", "Storage opt size not
/// supported").
fn is_refusal(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("storage-opt") || m.contains("storage opt") || m.contains("storage option")
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
    fn a_refusal_turns_the_limit_off_and_other_errors_do_not() {
        let limit = LayerLimit::new(512, &info("overlay2", "xfs"));
        assert_eq!(limit.enforced_mb(), Some(512));
        assert_eq!(
            limit.storage_opt(),
            Some(HashMap::from([("size".into(), "512m".into())]))
        );
        let other = bollard::errors::Error::DockerResponseServerError {
            status_code: 400,
            message: "invalid mount config".into(),
        };
        assert!(!limit.refused(&other));
        assert_eq!(limit.enforced_mb(), Some(512));
        let refusal = bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "--storage-opt is supported only for overlay over xfs with 'pquota' mount \
                      option"
                .into(),
        };
        assert!(limit.refused(&refusal));
        assert_eq!(limit.enforced_mb(), None);
        assert_eq!(limit.storage_opt(), None);
        assert!(limit.unavailable().unwrap().contains("pquota"));
    }

    #[test]
    fn zero_means_no_limit_and_other_engines_none() {
        assert_eq!(
            LayerLimit::new(0, &info("overlay2", "xfs")).storage_opt(),
            None
        );
        assert_eq!(
            LayerLimit::new(64, &info("overlay2", "extfs")).enforced_mb(),
            None
        );
    }
}
