//! Extra certificate authorities (`sandbox.egress.ca_certificates`), installed at boot: for
//! networks whose outbound TLS is re-signed by a proxy the sandbox must trust.
//!
//! The authorities go into the system bundle between two marker lines, so that every boot
//! replaces what the last one added (a changed or removed setting leaves nothing behind), and
//! whatever else rewrote the bundle in between (`update-ca-certificates`) is kept. A bundle of
//! their own, the system's plus the extras, is what the `CA_BUNDLE_ENV` variables name: tools
//! that ignore the system bundle read that one, and images without a system bundle get it too.

use std::io;
use std::path::{Path, PathBuf};

use agenthold_proto::boot::CA_BUNDLE_PATH;

const BEGIN: &str = "# agenthold: sandbox.egress.ca_certificates (begin; rewritten at each boot)";
const END: &str = "# agenthold: sandbox.egress.ca_certificates (end)";

/// Where the bundles are.
#[derive(Debug, Clone)]
pub struct TrustPaths {
    /// The system bundles a distribution may have (Debian, Ubuntu and Alpine; Fedora and RHEL);
    /// each that exists gets the extras.
    pub system: Vec<PathBuf>,
    /// The bundle sandboxd writes.
    pub bundle: PathBuf,
}

impl TrustPaths {
    pub fn container() -> TrustPaths {
        TrustPaths {
            system: vec![
                PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
                PathBuf::from("/etc/pki/tls/certs/ca-bundle.crt"),
            ],
            bundle: PathBuf::from(CA_BUNDLE_PATH),
        }
    }
}

/// Puts `extra` (PEM, already checked by the server) into the system bundles and writes the
/// agent's own bundle; with `None`, takes out what an earlier boot put in.
pub fn install(extra: Option<&str>, paths: &TrustPaths) -> io::Result<()> {
    let mut base = None;
    for system in &paths.system {
        let current = match std::fs::read_to_string(system) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: {e}", system.display()),
                ))
            }
        };
        let own = without_marked(&current);
        let updated = match extra {
            Some(pem) => with_marked(&own, pem),
            None => own.clone(),
        };
        if updated != current {
            replace(system, &updated, 0o644)?;
        }
        base.get_or_insert(own);
    }
    match extra {
        Some(pem) => replace(
            &paths.bundle,
            &with_marked(&base.unwrap_or_default(), pem),
            0o644,
        ),
        None => match std::fs::remove_file(&paths.bundle) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// `bundle` without the part between the markers (and the markers).
fn without_marked(bundle: &str) -> String {
    let mut out = String::with_capacity(bundle.len());
    let mut inside = false;
    for line in bundle.split_inclusive('\n') {
        match line.trim_end() {
            BEGIN => inside = true,
            END if inside => inside = false,
            _ if !inside => out.push_str(line),
            _ => {}
        }
    }
    out
}

fn with_marked(bundle: &str, pem: &str) -> String {
    let mut out = String::with_capacity(bundle.len() + pem.len() + 160);
    out.push_str(bundle);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(BEGIN);
    out.push('\n');
    out.push_str(pem.trim_end());
    out.push('\n');
    out.push_str(END);
    out.push('\n');
    out
}

/// Writes `path` whole or not at all: a program starting meanwhile reads the old bundle or the
/// new one, never half of one.
fn replace(path: &Path, text: &str, mode: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.agenthold-new",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("bundle")
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEM: &str = "-----BEGIN CERTIFICATE-----\nSYS\n-----END CERTIFICATE-----\n";
    const EXTRA: &str = "-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----\n";

    fn paths(dir: &Path) -> TrustPaths {
        TrustPaths {
            system: vec![dir.join("system.crt"), dir.join("absent/ca-bundle.crt")],
            bundle: dir.join("agenthold/ca-certificates.crt"),
        }
    }

    #[test]
    fn extras_are_added_once_replaced_by_a_change_and_removed_with_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        std::fs::write(&p.system[0], SYSTEM).unwrap();

        for _ in 0..3 {
            install(Some(EXTRA), &p).unwrap();
        }
        let system = std::fs::read_to_string(&p.system[0]).unwrap();
        assert!(system.starts_with(SYSTEM), "{system}");
        assert_eq!(system.matches("CORP").count(), 1, "{system}");
        assert_eq!(std::fs::read_to_string(&p.bundle).unwrap(), system);
        assert!(
            !p.system[1].exists(),
            "a bundle the image lacks is not made"
        );

        // Something else rewrote the bundle meanwhile: its part stays, the extras follow it.
        let rewritten =
            format!("{system}-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n");
        std::fs::write(&p.system[0], rewritten).unwrap();
        install(Some(&EXTRA.replace("CORP", "CORP2")), &p).unwrap();
        let system = std::fs::read_to_string(&p.system[0]).unwrap();
        assert!(
            system.contains("NEW") && system.contains("CORP2"),
            "{system}"
        );
        assert!(!system.contains("CORP\n"), "{system}");
        assert!(system.trim_end().ends_with(END), "{system}");

        install(None, &p).unwrap();
        let system = std::fs::read_to_string(&p.system[0]).unwrap();
        assert!(
            !system.contains("CORP") && !system.contains("agenthold"),
            "{system}"
        );
        assert!(system.contains("SYS") && system.contains("NEW"), "{system}");
        assert!(!p.bundle.exists());
    }

    #[test]
    fn an_image_without_a_system_bundle_gets_the_agents_own() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        install(Some(EXTRA), &p).unwrap();
        let bundle = std::fs::read_to_string(&p.bundle).unwrap();
        assert!(
            bundle.contains("CORP") && bundle.starts_with(BEGIN),
            "{bundle}"
        );
        assert!(!p.system[0].exists());
        install(None, &p).unwrap();
        assert!(!p.bundle.exists());
    }
}
