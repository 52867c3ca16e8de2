//! What runs in a child between fork and exec (`CommandExt::pre_exec`): its signals back to their
//! defaults, and the switch to the account. Only async-signal-safe calls: the child of a
//! multi-threaded process must not allocate or take a lock another thread may have held at the
//! fork.

use crate::account::Account;

/// Runs in the child between fork and exec: switch to the account for good.
///
/// Only async-signal-safe calls, and `groups` is built before the fork so nothing allocates here.
pub fn drop_privileges(
    account_uid: u32,
    account_gid: u32,
    groups: &[nix::unistd::Gid],
) -> std::io::Result<()> {
    use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};
    setgroups(groups)?;
    setgid(Gid::from_raw(account_gid))?;
    setuid(Uid::from_raw(account_uid))?;
    Ok(())
}

/// Runs in the child between fork and exec: the signals a shell or a command acts on are back
/// to their defaults, and none is blocked. sandboxd may have been started with some ignored
/// (under `nohup`, SIGHUP is), and an ignored signal stays ignored across exec: a closed
/// terminal's hang-up would then leave its shell running until the SIGKILL after the grace.
///
/// Only async-signal-safe calls.
pub fn default_signals() -> std::io::Result<()> {
    use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
    // Every one: a background process's shim ignores all it can, and nohup (sandboxd's own
    // start) leaves SIGHUP ignored.
    for sig in Signal::iterator().filter(|s| !matches!(s, Signal::SIGKILL | Signal::SIGSTOP)) {
        // SAFETY: restores a default disposition; no handler of ours is installed.
        unsafe { signal(sig, SigHandler::SigDfl) }?;
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// The account's groups as [`drop_privileges`] takes them, built before the fork.
pub fn gids(account: &Account) -> Vec<nix::unistd::Gid> {
    account
        .groups
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect()
}
