//! The checks every command of the sandbox gets, whether it runs as an `exec` or as a background
//! process: its command line, its working directory and its environment.

use agenthold_proto::{ChannelError, ErrorCode, ExecRequest};

use super::env;
use crate::sandbox::Sandbox;

/// Where a command runs and what environment it gets, checked.
pub struct Prepared {
    pub cwd: std::path::PathBuf,
    pub env: Vec<(String, String)>,
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
    let mut env = env::base(sb);
    env.extend(req.env.iter().cloned());
    Ok(Prepared { cwd, env })
}
