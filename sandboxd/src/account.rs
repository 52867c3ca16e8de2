//! The account shells and commands run as, read straight from `/etc/passwd` and `/etc/group`.
//!
//! sandboxd is linked statically against glibc, where `getpwnam` and friends may load the image's
//! NSS modules (undefined behaviour), so the files are parsed here instead.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agenthold_proto::boot::IMAGE_USER_ENV;

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

/// The image names a `USER` that does not exist in it; Docker itself refuses to run such an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the image's USER {spec:?} cannot be used: {why}")]
pub struct UnknownUser {
    pub spec: String,
    pub why: String,
}

impl Account {
    /// The `agent` account if `/etc/passwd` has one, else the image's `USER` (from
    /// [`IMAGE_USER_ENV`]), else our own.
    pub fn detect() -> Result<Account, UnknownUser> {
        let image_user = std::env::var(IMAGE_USER_ENV).ok();
        Account::detect_from(
            Path::new(PASSWD_PATH),
            Path::new(GROUP_PATH),
            image_user.as_deref(),
        )
    }

    /// Like [`Account::detect`], reading the given files and `USER`.
    pub fn detect_from(
        passwd: &Path,
        group: &Path,
        image_user: Option<&str>,
    ) -> Result<Account, UnknownUser> {
        let entries = read_passwd(passwd);
        if let Some(agent) = entries.iter().find(|e| e.name == AGENT_ACCOUNT) {
            return Ok(Account::build(Some(agent), group));
        }
        if let Some(spec) = image_user.map(str::trim).filter(|s| !s.is_empty()) {
            return Account::of_user_spec(spec, &entries, group);
        }
        let uid = nix::unistd::getuid().as_raw();
        Ok(Account::build(entries.iter().find(|e| e.uid == uid), group))
    }

    /// The account a Docker `USER` names: `name`, `uid`, `name:group` or `uid:gid`. As in
    /// Docker, a uid needs no passwd entry (its group is then 0), a name does.
    fn of_user_spec(
        spec: &str,
        entries: &[PasswdEntry],
        group: &Path,
    ) -> Result<Account, UnknownUser> {
        let fail = |why: String| UnknownUser {
            spec: spec.to_string(),
            why,
        };
        let (user, grp) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        let entry = match user.parse::<u32>() {
            Ok(uid) => entries
                .iter()
                .find(|e| e.uid == uid)
                .cloned()
                .or(Some(PasswdEntry {
                    name: format!("uid{uid}"),
                    uid,
                    gid: 0,
                    shell: String::new(),
                })),
            Err(_) => entries.iter().find(|e| e.name == user).cloned(),
        }
        .ok_or_else(|| fail(format!("there is no user {user:?} in {PASSWD_PATH}")))?;
        let gid = match grp {
            None => entry.gid,
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group_id(group, g)
                    .ok_or_else(|| fail(format!("there is no group {g:?} in {GROUP_PATH}")))?,
            },
        };
        let mut account = Account::build(Some(&entry), group);
        if account.gid != gid {
            account.gid = gid;
            account.groups = supplementary_groups(group, &account.name, gid);
        }
        Ok(account)
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
/// The name `/etc/passwd` gives `uid`, if any.
pub fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string(PASSWD_PATH).ok()?;
    text.lines()
        .filter_map(parse_passwd_line)
        .find(|e| e.uid == uid)
        .map(|e| e.name)
}

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

/// The gid of the group called `name`.
fn group_id(path: &Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 3 && f[0] == name)
        .and_then(|f| f[2].parse().ok())
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
        let a = Account::detect_from(&p, &g, None).unwrap();
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
        let a = Account::detect_from(&p, &g, None).unwrap();
        assert_eq!((a.name.as_str(), a.uid, a.gid), ("me", uid, 4242));
        assert_eq!(a.shell, Path::new("/bin/sh"));
        assert_eq!(a.login_argv0(), "-sh");
    }

    #[test]
    fn without_an_agent_account_the_images_user_is_taken() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1001::/home/node:/bin/sh\n";
        let group = "root:x:0:\nnode:x:1001:\nstaff:x:50:node\n";
        let (_d, p, g) = files(passwd, group);
        let of = |spec: &str| Account::detect_from(&p, &g, Some(spec));
        let a = of("node").unwrap();
        assert_eq!((a.name.as_str(), a.uid, a.gid), ("node", 1000, 1001));
        assert_eq!(a.groups, vec![1001, 50]);
        let a = of("1000").unwrap();
        assert_eq!((a.name.as_str(), a.gid), ("node", 1001));
        let a = of("node:staff").unwrap();
        assert_eq!((a.uid, a.gid), (1000, 50));
        let a = of(" 1000:7 ").unwrap();
        assert_eq!((a.uid, a.gid), (1000, 7));
        // A uid the image does not list still works, as in Docker, with group 0.
        let a = of("4321").unwrap();
        assert_eq!((a.name.as_str(), a.uid, a.gid), ("uid4321", 4321, 0));
        let a = of("0").unwrap();
        assert_eq!((a.name.as_str(), a.uid), ("root", 0));
        // Names must exist.
        let e = of("ghost").unwrap_err();
        assert!(e.to_string().contains("no user \"ghost\""), "{e}");
        let e = of("node:ghosts").unwrap_err();
        assert!(e.to_string().contains("no group \"ghosts\""), "{e}");
        // An empty USER is none.
        let own = nix::unistd::getuid().as_raw();
        assert_eq!(of("").unwrap().uid, own);
    }

    #[test]
    fn the_agent_account_wins_over_the_images_user() {
        let (_d, p, g) = files(
            "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\nnode:x:1001:1001::/x:/bin/sh\n",
            "",
        );
        let a = Account::detect_from(&p, &g, Some("node")).unwrap();
        assert_eq!(a.name, "agent");
    }

    #[test]
    fn works_without_any_passwd_file() {
        let a = Account::detect_from(
            Path::new("/nonexistent/passwd"),
            Path::new("/nonexistent"),
            None,
        )
        .unwrap();
        assert_eq!(a.uid, nix::unistd::getuid().as_raw());
        assert!(a.name == "root" || a.name.starts_with("uid"));
    }
}
