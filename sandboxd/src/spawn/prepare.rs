//! The checks every command of the sandbox gets, whether it runs as an `exec` or as a background
//! process: its command line, its working directory and its environment.

use agenthold_proto::{ChannelError, ErrorCode, ExecRequest, RunAs};

use super::env;
use crate::sandbox::Sandbox;

/// Where a command runs, what environment it gets and who it runs as, checked.
pub struct Prepared {
    pub cwd: std::path::PathBuf,
    pub env: Vec<(String, String)>,
    /// The account to switch to between fork and exec; `None` stays who sandboxd is (root in
    /// a container, for a command run as root or an image whose account is root).
    pub switch: Option<Switch>,
}

/// An account to become: uid, gid and supplementary groups, built before the fork.
#[derive(Clone)]
pub struct Switch {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<nix::unistd::Gid>,
}

impl Switch {
    /// Drops to it; async-signal-safe, for `pre_exec`.
    pub fn apply(&self) -> std::io::Result<()> {
        super::pre_exec::drop_privileges(self.uid, self.gid, &self.groups)
    }
}

/// Who runs `user`'s command. sandboxd does not know the agent's `allowRoot`: the server is
/// the gate and sends `Root` only for an agent allowed it, so this trusts the request (what
/// reaches sandboxd comes over the authenticated tunnel). It only refuses what it cannot do:
/// root when sandboxd is not root itself (the fake driver's in-process sandboxes).
fn switch_for(sb: &Sandbox, user: RunAs) -> Result<Option<Switch>, ChannelError> {
    let account = sb.account();
    match user {
        RunAs::Agent => Ok(account.needs_switch().then(|| Switch {
            uid: account.uid,
            gid: account.gid,
            groups: super::pre_exec::gids(account),
        })),
        RunAs::Root if nix::unistd::geteuid().is_root() => Ok(None),
        RunAs::Root => Err(ChannelError::new(
            ErrorCode::PermissionDenied,
            "this sandbox's sandboxd does not run as root (a fake-driver sandbox), so it cannot \
             run a command as root"
                .to_string(),
        )),
    }
}

/// Checks a command line, its cwd and env the way every command of the sandbox is checked.
pub(crate) fn prepare(sb: &Sandbox, req: &ExecRequest) -> Result<Prepared, ChannelError> {
    let invalid = |m: String| ChannelError::new(ErrorCode::Invalid, m);
    match req.command.first() {
        None => return Err(invalid("the command is empty".into())),
        Some(c) if c.is_empty() => return Err(invalid("the command name is empty".into())),
        _ => {}
    }
    // The server checks this too; a request that skipped it gets the reason here, not a late
    // E2BIG as exit code 126 (the header limit alone counts JSON, not what execve takes).
    req.check_size()
        .map_err(|e| ChannelError::new(ErrorCode::TooLarge, e.to_string()))?;
    if req.command.iter().any(|a| a.contains('\0')) {
        return Err(invalid("command arguments cannot contain NUL".into()));
    }
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(invalid(format!("invalid environment variable {k:?}")));
        }
    }
    let cwd = match &req.cwd {
        Some(c) => {
            let r = sb.paths().resolve(c)?;
            match std::fs::metadata(&r.physical) {
                Ok(m) if m.is_dir() => r.physical,
                Ok(_) => {
                    return Err(ChannelError::new(
                        ErrorCode::NotDir,
                        format!(
                            "working directory {} is not a directory",
                            r.logical.display()
                        ),
                    ))
                }
                Err(e) => {
                    return Err(ChannelError::from_io(
                        &e,
                        &format!("working directory {}", r.logical.display()),
                    ))
                }
            }
        }
        None => sb.options().home.clone(),
    };
    let switch = switch_for(sb, req.run_as)?;
    let mut env = env::base(sb, req.run_as);
    env.extend(req.env.iter().cloned());
    Ok(Prepared { cwd, env, switch })
}
