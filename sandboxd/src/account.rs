//! The account shells and commands run as, read straight from `/etc/passwd` and `/etc/group`.
//!
//! sandboxd is linked statically against glibc, where `getpwnam` and friends may load the image's
//! NSS modules (undefined behaviour), so the files are parsed here instead.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The account sandboxd prefers when the image has one.
pub const AGENT_ACCOUNT: &str = "agent";
pub const PASSWD_PATH: &str = "/etc/passwd";
pub const GROUP_PATH: &str = "/etc/group";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary gid included).
    pub groups: Vec<u32>,
    /// An executable login shell.
    pub shell: PathBuf,
}

/// One line of `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    shell: String,
}

impl Account {
    /// The `agent` account if `/etc/passwd` has one, else our own.
    pub fn detect() -> Account {
        Account::detect_from(Path::new(PASSWD_PATH), Path::new(GROUP_PATH))
    }

    /// Like [`Account::detect`], reading the given files.
    pub fn detect_from(passwd: &Path, group: &Path) -> Account {
        let entries = read_passwd(passwd);
        let uid = nix::unistd::getuid().as_raw();
        let entry = entries
            .iter()
            .find(|e| e.name == AGENT_ACCOUNT)
            .or_else(|| entries.iter().find(|e| e.uid == uid));
        Account::build(entry, group)
    }

    /// The account of our own uid, for the fake driver, where commands run as the server's user.
    pub fn current() -> Account {
        Account::current_from(Path::new(PASSWD_PATH), Path::new(GROUP_PATH))
    }

    /// Like [`Account::current`], reading the given files.
    pub fn current_from(passwd: &Path, group: &Path) -> Account {
        let uid = nix::unistd::getuid().as_raw();
        let entries = read_passwd(passwd);
        Account::build(entries.iter().find(|e| e.uid == uid), group)
    }

    fn build(entry: Option<&PasswdEntry>, group: &Path) -> Account {
        let (name, uid, gid, shell) = match entry {
            Some(e) => (e.name.clone(), e.uid, e.gid, Some(e.shell.as_str())),
            None => {
                let uid = nix::unistd::getuid().as_raw();
                let name = if uid == 0 {
                    "root".to_string()
                } else {
                    format!("uid{uid}")
                };
                (name, uid, nix::unistd::getgid().as_raw(), None)
            }
        };
        let groups = supplementary_groups(group, &name, gid);
        Account {
            name,
            uid,
            gid,
            groups,
            shell: pick_shell(shell),
        }
    }

    /// True when sandboxd must switch to this account before running anything as it: we are
    /// root and the account is not.
    pub fn needs_switch(&self) -> bool {
        nix::unistd::geteuid().is_root() && self.uid != 0
    }

    /// The owner new files should get, when it differs from ours.
    pub fn chown_target(&self) -> Option<(nix::unistd::Uid, nix::unistd::Gid)> {
        self.needs_switch().then(|| {
            (
                nix::unistd::Uid::from_raw(self.uid),
                nix::unistd::Gid::from_raw(self.gid),
            )
        })
    }

    /// `-bash` for `/bin/bash`: the argv0 that makes a shell a login shell.
    pub fn login_argv0(&self) -> String {
        let base = self
            .shell
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sh".into());
        format!("-{base}")
    }
}

/// Unreadable or odd files give no entries: the caller falls back to our own uid.
fn read_passwd(path: &Path) -> Vec<PasswdEntry> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().filter_map(parse_passwd_line).collect(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the passwd file");
            Vec::new()
        }
    }
}

fn parse_passwd_line(line: &str) -> Option<PasswdEntry> {
    if line.starts_with('#') {
        return None;
    }
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() < 7 || fields[0].is_empty() {
        return None;
    }
    Some(PasswdEntry {
        name: fields[0].to_string(),
        uid: fields[2].parse().ok()?,
        gid: fields[3].parse().ok()?,
        shell: fields[6].to_string(),
    })
}

/// The primary gid first, then every group that lists `name` as a member.
fn supplementary_groups(path: &Path, name: &str, primary: u32) -> Vec<u32> {
    let mut groups = vec![primary];
    let Ok(text) = std::fs::read_to_string(path) else {
        return groups;
    };
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 4 {
            continue;
        }
        let Ok(gid) = fields[2].parse::<u32>() else {
            continue;
        };
        if fields[3].split(',').any(|m| m.trim() == name) && !groups.contains(&gid) {
            groups.push(gid);
        }
    }
    groups
}

fn pick_shell(wanted: Option<&str>) -> PathBuf {
    wanted
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .filter(|p| is_executable(p))
        .or_else(|| Some(PathBuf::from("/bin/bash")).filter(|p| is_executable(p)))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(passwd: &str, group: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("passwd");
        let g = dir.path().join("group");
        std::fs::write(&p, passwd).unwrap();
        std::fs::write(&g, group).unwrap();
        (dir, p, g)
    }

    #[test]
    fn prefers_the_agent_account_and_its_groups() {
        let (_d, p, g) = files(
            "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/nonexistent/zsh\n",
            "root:x:0:\nagent:x:1000:\ndocker:x:999:bob,agent\nwheel:x:10:agentx\n",
        );
        let a = Account::detect_from(&p, &g);
        assert_eq!(a.name, "agent");
        assert_eq!((a.uid, a.gid), (1000, 1000));
        assert_eq!(a.groups, vec![1000, 999]);
        // The listed shell does not exist, so a real one is picked.
        assert!(a.shell == Path::new("/bin/bash") || a.shell == Path::new("/bin/sh"));
    }

    #[test]
    fn falls_back_to_our_own_uid() {
        let uid = nix::unistd::getuid().as_raw();
        let (_d, p, g) = files(
            &format!("me:x:{uid}:4242::/x:/bin/sh\n# comment\nbroken\n"),
            "",
        );
        let a = Account::detect_from(&p, &g);
        assert_eq!((a.name.as_str(), a.uid, a.gid), ("me", uid, 4242));
        assert_eq!(a.shell, Path::new("/bin/sh"));
        assert_eq!(a.login_argv0(), "-sh");
    }

    #[test]
    fn works_without_any_passwd_file() {
        let a = Account::detect_from(Path::new("/nonexistent/passwd"), Path::new("/nonexistent"));
        assert_eq!(a.uid, nix::unistd::getuid().as_raw());
        assert!(a.name == "root" || a.name.starts_with("uid"));
    }
}
