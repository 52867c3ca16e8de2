//! The small files the driver hands to containers (boot.json, sandboxd) as tar archives, and the
//! check that a sandboxd binary is static.

use std::path::Path;

use agenthold_proto::boot::BootConfig;

/// A tar rooted at `/` holding `etc/agenthold/boot.json`, readable by root only: the token in it
/// lets whoever holds it act as the sandbox. Parent folders that the image lacks are made by
/// Docker when it unpacks, so `/etc` itself is not in the archive (its mode stays the image's).
pub fn boot_tar(boot: &BootConfig) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec_pretty(boot).map_err(std::io::Error::other)?;
    let mut b = tar::Builder::new(Vec::new());
    append_dir(&mut b, "etc/agenthold/", 0o755)?;
    append_file(&mut b, "etc/agenthold/boot.json", 0o600, &json)?;
    b.into_inner()
}

/// A tar rooted at `/` holding `opt/agenthold/<name>` with `binary`'s bytes.
pub fn sandboxd_tar(name: &str, binary: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    append_dir(&mut b, "opt/agenthold/", 0o755)?;
    append_file(&mut b, &format!("opt/agenthold/{name}"), 0o755, binary)?;
    b.into_inner()
}

fn header(mode: u32, size: u64, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(size);
    h.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    h
}

fn append_dir(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) -> std::io::Result<()> {
    let mut h = header(mode, 0, tar::EntryType::Directory);
    b.append_data(&mut h, path, std::io::empty())
}

fn append_file(
    b: &mut tar::Builder<Vec<u8>>,
    path: &str,
    mode: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let mut h = header(mode, data.len() as u64, tar::EntryType::Regular);
    b.append_data(&mut h, path, data)
}

/// Whether the ELF file at `path` is statically linked (has no `PT_INTERP`). A dynamic sandboxd
/// would start only in images whose libc happens to match, so the driver refuses it.
pub fn is_static_elf(path: &Path) -> std::io::Result<bool> {
    let data = std::fs::read(path)?;
    elf_is_static(&data).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a 64-bit little-endian ELF file", path.display()),
        )
    })
}

fn elf_is_static(data: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if data.get(0..4)? != b"\x7fELF" || *data.get(4)? != 2 || *data.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(data.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?);
        if p_type == PT_INTERP {
            return Some(false);
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_tar_holds_a_private_boot_file() {
        let boot = BootConfig {
            agent_id: "abc".into(),
            token: "secret".into(),
            tunnel_url: "ws://10.213.0.1:8090/tunnel".into(),
            env: Default::default(),
            ca_certificates: None,
        };
        let raw = boot_tar(&boot).expect("tar");
        let mut ar = tar::Archive::new(raw.as_slice());
        let mut seen = Vec::new();
        for entry in ar.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").to_string_lossy().into_owned();
            let mode = entry.header().mode().expect("mode");
            if path == "etc/agenthold/boot.json" {
                assert_eq!(mode, 0o600);
                let back: BootConfig = serde_json::from_reader(&mut entry).expect("json");
                assert_eq!(back, boot);
            }
            seen.push(path);
        }
        assert_eq!(seen, ["etc/agenthold/", "etc/agenthold/boot.json"]);
    }

    #[test]
    fn elf_interp_detection() {
        assert_eq!(elf_is_static(b"not an elf"), None);
        assert_eq!(elf_is_static(b""), None);
        // The test binary itself is dynamic unless built with crt-static.
        let me = std::env::current_exe().expect("current exe");
        let data = std::fs::read(&me).expect("read self");
        let linked_static = cfg!(target_feature = "crt-static");
        assert_eq!(elf_is_static(&data), Some(linked_static));
        // A truncated program header table is refused, not read out of bounds.
        assert_eq!(elf_is_static(&data[..0x40]), None);
    }
}
