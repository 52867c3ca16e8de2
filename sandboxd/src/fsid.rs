//! Who the file channels act as: the account's identity, never sandboxd's.
//!
//! In a container sandboxd is root, and file operations done as root let the agent reach what its
//! account may not: a symlink in the home to `/etc` let an upload replace `/etc/passwd`, and one
//! to `/etc/shadow` let a download read it. So every file operation's system calls run on a
//! thread of their own that has taken the account's filesystem identity first, and the kernel's
//! own permission checks decide what the API may touch, exactly as for the agent's shell.
//!
//! Why a thread and `setfsuid`, and why it is safe:
//! - Linux keeps credentials per thread; only the C library makes `setuid` and friends apply to
//!   the whole process (glibc's wrappers signal every thread to repeat the call). The raw system
//!   calls used here (`setgroups`, `setfsgid`, `setfsuid`) change the calling thread alone, so
//!   terminals, exec spawning and the tunnel, which run on other threads, keep root.
//! - The thread is made for one operation and ends with it: nothing else ever runs on it (tokio's
//!   pools reuse threads, so the work must never go to one of those with these credentials), and
//!   no way back to root is needed. Threads it starts (the background sync of an upload, whose
//!   writer runs as the account too) inherit the identity, which is what they should have.
//! - Only the filesystem ids change. The real, effective and saved uids stay 0: with them set to
//!   the account, the agent's processes could signal (even SIGKILL or SIGSTOP, which act on the
//!   whole process) or trace this thread. With a non-zero fsuid the kernel drops the capabilities
//!   that bypass file permissions (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`,
//!   `CAP_CHOWN`, `CAP_FSETID`, ...) from the thread, so opening, creating, renaming and removing
//!   are checked as for the account, and what it creates is the account's.
//! - Changing a filesystem id marks the process not dumpable. sandboxd is root and stays so; that
//!   only keeps its `/proc` entries root's, which they are already.
//!
//! Where sandboxd is not root (the fake driver) or the account is root, nothing changes: the
//! operations already run as the account.
//!
//! gVisor (`runsc`) has no `setfsuid`/`setfsgid` (they fail with `ENOSYS`). There the thread
//! takes the account's ids as its *effective* ids instead (`setresuid(-1, uid, -1)`, the raw
//! system call, on this thread alone), which the filesystem ids follow. The real and saved ids
//! stay 0, so the account's processes still can neither signal the thread (that needs their uid
//! to match its real or saved uid) nor trace it (that needs all three to match); and an
//! effective uid other than 0 empties the thread's effective capabilities, so the permission
//! checks are the account's, as above.

use agenthold_proto::{ChannelError, ErrorCode};
use nix::errno::Errno;
use nix::libc;

use crate::account::Account;

/// The identity file operations take; cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsIdentity {
    /// `None`: run as we are.
    switch: Option<Ids>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ids {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

/// The thread could not take the account's identity; the operation did not run.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("cannot set the supplementary groups: {0}")]
    Groups(Errno),
    #[error("the kernel kept filesystem ids {uid}:{gid} instead of the account's")]
    NotApplied { uid: u32, gid: u32 },
}

impl FsIdentity {
    /// The account's identity, switched to when sandboxd is root and the account is not.
    pub fn of(account: &Account) -> FsIdentity {
        FsIdentity {
            switch: account.needs_switch().then(|| Ids {
                uid: account.uid,
                gid: account.gid,
                groups: account.groups.clone(),
            }),
        }
    }

    /// Whether operations run with other credentials than sandboxd's.
    pub fn switches(&self) -> bool {
        self.switch.is_some()
    }

    /// Runs blocking file work as the account and returns its result.
    pub async fn run<T, F>(&self, f: F) -> Result<T, ChannelError>
    where
        F: FnOnce() -> Result<T, ChannelError> + Send + 'static,
        T: Send + 'static,
    {
        let Some(ids) = self.switch.clone() else {
            return tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|e| Err(internal(e)));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("fs as account".into())
            .spawn(move || {
                // The caller may be gone (the stream was dropped); the result is then unwanted.
                let _ = tx.send(ids.run(f));
            });
        if let Err(e) = spawned {
            return Err(internal(e));
        }
        rx.await.unwrap_or_else(|e| Err(internal(e)))
    }

    /// Like [`FsIdentity::run`], from blocking code: the calling thread waits.
    pub fn run_sync<T, F>(&self, f: F) -> Result<T, ChannelError>
    where
        F: FnOnce() -> Result<T, ChannelError> + Send + 'static,
        T: Send + 'static,
    {
        let Some(ids) = self.switch.clone() else {
            return f();
        };
        std::thread::Builder::new()
            .name("fs as account".into())
            .spawn(move || ids.run(f))
            .map_err(internal)?
            .join()
            .unwrap_or_else(|_| Err(internal("the file operation panicked")))
    }
}

impl Ids {
    /// Takes the identity, then runs `f`; only ever on a thread made for this.
    fn run<T>(&self, f: impl FnOnce() -> Result<T, ChannelError>) -> Result<T, ChannelError> {
        match self.assume() {
            Ok(()) => f(),
            Err(e) => {
                tracing::error!(error = %e, "a file operation could not take the account's identity");
                Err(ChannelError::new(ErrorCode::Io, e.to_string()))
            }
        }
    }

    /// Gives the calling thread, and it alone, the account's filesystem identity.
    fn assume(&self) -> Result<(), SwitchError> {
        // SAFETY: the raw system call (not glibc's `setgroups`, which would apply it to every
        // thread of the process) reads `len` gids from a buffer that lives across the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_setgroups,
                self.groups.len() as libc::size_t,
                self.groups.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(SwitchError::Groups(Errno::last()));
        }
        // Groups before the uid: they need CAP_SETGID, which a changed fsuid happens not to take
        // away, but this order does not depend on that. No file work runs until all are checked.
        // SAFETY: plain system calls on integers; they change only the calling thread.
        unsafe {
            libc::syscall(libc::SYS_setfsgid, self.gid as libc::c_long);
            libc::syscall(libc::SYS_setfsuid, self.uid as libc::c_long);
        }
        let (uid, gid) = current_fs_ids();
        if uid == self.uid && gid == self.gid {
            return Ok(());
        }
        if fs_ids_unsupported() {
            return self.assume_effective();
        }
        Err(SwitchError::NotApplied { uid, gid })
    }

    /// Where the kernel has no filesystem ids (gVisor): the effective ids, on this thread
    /// alone, real and saved ids left 0 (see the module's comment). Groups are set already.
    fn assume_effective(&self) -> Result<(), SwitchError> {
        // SAFETY: plain system calls on integers; the raw calls (not glibc's, which apply them
        // to every thread) change only the calling thread. The gid first: changing it needs
        // CAP_SETGID, which the thread loses with an effective uid other than 0.
        unsafe {
            libc::syscall(
                libc::SYS_setresgid,
                -1 as libc::c_long,
                self.gid as libc::c_long,
                -1 as libc::c_long,
            );
            libc::syscall(
                libc::SYS_setresuid,
                -1 as libc::c_long,
                self.uid as libc::c_long,
                -1 as libc::c_long,
            );
        }
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        if uid != self.uid || gid != self.gid {
            return Err(SwitchError::NotApplied { uid, gid });
        }
        Ok(())
    }
}

/// Whether this kernel lacks `setfsuid` (gVisor's does).
fn fs_ids_unsupported() -> bool {
    // SAFETY: -1 changes nothing; the call only reports.
    let rc = unsafe { libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) };
    rc == -1 && Errno::last() == Errno::ENOSYS
}

/// The calling thread's filesystem ids. `setfsuid` reports no error; given an invalid id (-1)
/// it changes nothing and returns the current one.
pub fn current_fs_ids() -> (u32, u32) {
    // SAFETY: as above; -1 leaves the ids as they are.
    unsafe {
        (
            libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) as u32,
            libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long) as u32,
        )
    }
}

fn internal(e: impl std::fmt::Display) -> ChannelError {
    ChannelError::new(ErrorCode::Io, format!("internal error: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn is_denied(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::PermissionDenied
    }

    fn account(uid: u32, gid: u32, groups: Vec<u32>) -> Account {
        Account {
            name: "someone".into(),
            uid,
            gid,
            groups,
            shell: "/bin/sh".into(),
        }
    }

    #[tokio::test]
    async fn only_the_operations_thread_takes_the_identity() {
        let before = current_fs_ids();
        let id = FsIdentity::of(&account(65534, 65533, vec![65533, 4242]));
        if !nix::unistd::geteuid().is_root() {
            assert!(!id.switches());
            eprintln!("skipped the switch: needs root");
            return;
        }
        let (ids, groups) = id
            .run(|| {
                Ok((
                    current_fs_ids(),
                    nix::unistd::getgroups().unwrap_or_default(),
                ))
            })
            .await
            .unwrap();
        assert_eq!(ids, (65534, 65533));
        let mut groups: Vec<u32> = groups.iter().map(|g| g.as_raw()).collect();
        groups.sort();
        assert_eq!(groups, vec![4242, 65533]);
        // Nothing leaked to this thread or to the process: a root-only file is still readable
        // here and from tokio's pool.
        assert_eq!(current_fs_ids(), before);
        assert_eq!(nix::unistd::geteuid().as_raw(), 0);
        let theirs = tokio::task::spawn_blocking(current_fs_ids).await.unwrap();
        assert_eq!(theirs, (0, 0));
    }

    #[test]
    fn the_effective_ids_way_changes_one_thread_and_checks_as_the_account() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root only").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ids = Ids {
            uid: 65534,
            gid: 65533,
            groups: vec![65533],
        };
        let got = std::thread::spawn(move || {
            // SAFETY: as in `assume`, on this thread alone.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_setgroups,
                    ids.groups.len() as libc::size_t,
                    ids.groups.as_ptr(),
                )
            };
            assert_eq!(rc, 0);
            ids.assume_effective().unwrap();
            let read = std::fs::read(&secret).map_err(|e| is_denied(&e));
            let real = nix::unistd::getresuid().unwrap();
            (
                read,
                current_fs_ids(),
                real.real.as_raw(),
                real.saved.as_raw(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(got, (Err(true), (65534, 65533), 0, 0));
        // Nothing leaked to this thread.
        assert_eq!(nix::unistd::geteuid().as_raw(), 0);
        assert_eq!(current_fs_ids(), (0, 0));
    }

    #[tokio::test]
    async fn the_kernel_checks_as_the_account() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root only").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let id = FsIdentity::of(&account(65534, 65534, vec![65534]));
        let s = secret.clone();
        let read = id
            .run(move || Ok(std::fs::read(&s).map_err(|e| is_denied(&e))))
            .await
            .unwrap();
        assert_eq!(read, Err(true));
        let d = dir.path().join("new");
        let made = id
            .run(move || Ok(std::fs::write(&d, b"x").map_err(|e| is_denied(&e))))
            .await
            .unwrap();
        assert_eq!(made, Err(true));
        // Root (the account being root) is not switched.
        let root = FsIdentity::of(&account(0, 0, vec![0]));
        assert!(!root.switches());
        let s = secret.clone();
        assert!(root
            .run(move || Ok(std::fs::read(&s).is_ok()))
            .await
            .unwrap());
    }
}
