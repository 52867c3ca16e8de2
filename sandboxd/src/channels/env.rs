//! The environment shells and commands start with: nothing inherited from sandboxd.

use crate::account::Account;
use crate::sandbox::Sandbox;

pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The account's own variables, then the ones the server hands every program (boot.json's
/// `env`: the egress proxy's).
pub fn base(sb: &Sandbox) -> Vec<(String, String)> {
    let (account, home) = (sb.account(), &sb.options().home);
    let mut env = vec![
        ("HOME".into(), home.to_string_lossy().into_owned()),
        ("USER".into(), account.name.clone()),
        ("LOGNAME".into(), account.name.clone()),
        ("SHELL".into(), account.shell.to_string_lossy().into_owned()),
        ("PATH".into(), PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    env.extend(sb.options().env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

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

pub fn gids(account: &Account) -> Vec<nix::unistd::Gid> {
    account
        .groups
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect()
}
