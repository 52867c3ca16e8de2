//! Opening an API path without following a symlink out of where it points.
//!
//! A path under the home is resolved from a descriptor of the home with `openat2` and
//! `RESOLVE_BENEATH`: a symlink in it that leads out of the home (or `..` that would) is not
//! followed, so files elsewhere are only reached by naming them, never by a link the agent
//! planted. `RESOLVE_NO_MAGICLINKS` everywhere keeps `/proc/self/fd/*` and its kind, which reach
//! sandboxd's own open files whatever the path says, out of reach. Both are on top of the
//! account's identity ([`crate::fsid`]), which is what decides what may be touched.
//!
//! Kernels without `openat2` (before 5.6, gVisor of 2022, or a seccomp profile that refuses it)
//! get a walk that opens one component at a time and follows no symlink at all.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::OnceLock;

use agenthold_proto::LOGICAL_HOME;
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};

use crate::paths::Resolved;

/// How often a resolution the kernel reports as raced (`EAGAIN`) is tried.
const RACE_RETRIES: usize = 8;

/// A path split into a base directory and the components below it. Opening it must happen on
/// the thread that carries the account's identity.
#[derive(Debug)]
pub struct Location {
    base: OwnedFd,
    /// Under the home: nothing may resolve outside `base`.
    beneath: bool,
    parts: Vec<OsString>,
}

impl Location {
    /// Opens the base of `r`: the home for paths under it, else `/`.
    pub fn open(r: &Resolved, home: &Path) -> io::Result<Location> {
        let (base, beneath, rest) = match r.logical.strip_prefix(LOGICAL_HOME) {
            Ok(rest) => (home, true, rest),
            Err(_) => (Path::new("/"), false, r.logical.as_path()),
        };
        let parts = rest
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(p.to_os_string()),
                _ => None,
            })
            .collect();
        let base = nix::fcntl::open(
            base,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Location {
            base,
            beneath,
            parts,
        })
    }

    pub fn parts(&self) -> &[OsString] {
        &self.parts
    }

    /// The path itself.
    pub fn open_path(&self, flags: OFlag) -> io::Result<OwnedFd> {
        self.open_prefix(self.parts.len(), flags, Mode::empty())
    }

    /// The first `n` components (none: the base itself).
    pub fn open_prefix(&self, n: usize, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let parts = &self.parts[..n.min(self.parts.len())];
        let flags = flags | OFlag::O_CLOEXEC;
        if openat2_works() {
            let mut rel = parts.iter().fold(OsString::new(), |mut acc, p| {
                if !acc.is_empty() {
                    acc.push("/");
                }
                acc.push(p);
                acc
            });
            if rel.is_empty() {
                rel.push(".");
            }
            let mut resolve = ResolveFlag::RESOLVE_NO_MAGICLINKS;
            if self.beneath {
                resolve |= ResolveFlag::RESOLVE_BENEATH;
            }
            let how = OpenHow::new().flags(flags).mode(mode).resolve(resolve);
            let mut tries = 0;
            loop {
                match openat2(self.base.as_fd(), rel.as_os_str(), how) {
                    Err(Errno::EAGAIN) if tries < RACE_RETRIES => tries += 1,
                    other => return other.map_err(explain),
                }
            }
        } else {
            walk(self.base.as_fd(), parts, flags, mode)
        }
    }

    /// The directory holding the path, and the path's last name. The path must name something
    /// below the base.
    pub fn open_parent(&self) -> io::Result<(OwnedFd, &OsStr)> {
        let Some(name) = self.parts.last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "does not name a file",
            ));
        };
        let dir = self.open_prefix(
            self.parts.len() - 1,
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            Mode::empty(),
        )?;
        Ok((dir, name.as_os_str()))
    }
}

/// Says why a resolution was refused, in terms a client can act on.
fn explain(e: Errno) -> io::Error {
    match e {
        // RESOLVE_BENEATH's answer to an absolute symlink or `..` out of the home.
        Errno::EXDEV => io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a symbolic link on the way leads out of the home, which is not followed \
             (name the target by its absolute path)",
        ),
        Errno::ELOOP => io::Error::new(
            io::ErrorKind::PermissionDenied,
            "too many symbolic links, or a /proc link, which is not followed",
        ),
        e => e.into(),
    }
}

/// Whether this kernel (and seccomp profile) has `openat2`; checked once.
fn openat2_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match openat2(nix::fcntl::AT_FDCWD, "/", how) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "no openat2 here: file paths through symbolic links are refused");
                false
            }
        }
    })
}

/// The fallback without `openat2`: one component at a time, no symlink followed.
fn walk(base: BorrowedFd<'_>, parts: &[OsString], flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let Some((last, dirs)) = parts.split_last() else {
        return Ok(openat(base, ".", flags, mode)?);
    };
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for part in dirs {
        let at = cur.as_ref().map_or(base, |c| c.as_fd());
        let next = openat(at, part.as_os_str(), dir_flags, Mode::empty())
            .map_err(|e| symlink_or(at, part, e))?;
        cur = Some(next);
    }
    let at = cur.as_ref().map_or(base, |c| c.as_fd());
    openat(at, last.as_os_str(), flags | OFlag::O_NOFOLLOW, mode)
        .map_err(|e| symlink_or(at, last, e))
}

/// A symlink met by [`walk`] is reported as such, not as the `ENOTDIR`/`ELOOP` it gives.
fn symlink_or(dir: BorrowedFd<'_>, name: &OsStr, e: Errno) -> io::Error {
    if matches!(e, Errno::ENOTDIR | Errno::ELOOP) {
        let is_link =
            fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
                SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
            });
        if is_link {
            return io::Error::new(
                io::ErrorKind::PermissionDenied,
                "symbolic links are not followed here (this kernel has no openat2)",
            );
        }
    }
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::PathMap;
    use std::os::unix::fs::symlink;

    fn resolve(home: &Path, p: &str) -> Location {
        let map = PathMap {
            home: home.to_path_buf(),
            confine_to_home: false,
        };
        Location::open(&map.resolve(p).unwrap(), home).unwrap()
    }

    #[test]
    fn symlinks_inside_the_home_are_followed_and_out_of_it_not() {
        let home = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir(h.join("real")).unwrap();
        std::fs::write(h.join("real/f"), b"in").unwrap();
        std::fs::write(outside.path().join("f"), b"out").unwrap();
        symlink("real", h.join("rel")).unwrap();
        symlink(outside.path(), h.join("abs")).unwrap();
        symlink("../..", h.join("real/up")).unwrap();

        let read = |p: &str| -> io::Result<Vec<u8>> {
            use std::io::Read;
            let fd = resolve(h, p).open_path(OFlag::O_RDONLY)?;
            let mut bytes = Vec::new();
            std::fs::File::from(fd).read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        assert_eq!(read("real/f").unwrap(), b"in");
        if openat2_works() {
            assert_eq!(read("rel/f").unwrap(), b"in");
        }
        for p in ["abs/f", "real/up/etc/passwd", "/home/agent/abs/f"] {
            let e = read(p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{p}: {e}");
        }
        // Absolute paths outside the home are served as they are, but never through /proc's
        // magic links.
        let out = format!("{}/f", outside.path().display());
        assert_eq!(read(&out).unwrap(), b"out");
        let e = read("/proc/self/cwd").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let loc = resolve(h, "real/f");
        let (_dir, name) = loc.open_parent().unwrap();
        assert_eq!(name, "f");
        assert!(resolve(h, "").open_parent().is_err());
    }

    /// The fallback for kernels without `openat2`, called directly since this one has it.
    #[test]
    fn the_walk_follows_no_symlink() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir(h.join("real")).unwrap();
        std::fs::write(h.join("real/f"), b"in").unwrap();
        symlink("real", h.join("rel")).unwrap();
        symlink("f", h.join("real/link")).unwrap();
        let base = nix::fcntl::open(h, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let parts = |p: &str| -> Vec<OsString> { p.split('/').map(OsString::from).collect() };
        let open = |p: &str| walk(base.as_fd(), &parts(p), OFlag::O_RDONLY, Mode::empty());
        assert!(open("real/f").is_ok());
        for p in ["rel/f", "real/link"] {
            let e = open(p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{p}: {e}");
        }
        assert_eq!(
            open("real/none").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
