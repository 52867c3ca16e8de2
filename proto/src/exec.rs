//! The `exec` channel's header, the limits its command line is held to, and how it ends.

use serde::{Deserialize, Serialize};

use crate::limits::{MAX_EXEC_ARGS_LEN, MAX_EXEC_ARG_LEN, MAX_PATH_LEN};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecRequest {
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Killed (the whole process group) after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Bytes of each of stdout and stderr forwarded; the rest is read and dropped.
    #[serde(default)]
    pub output_cap: Option<u64>,
    /// Who runs it. Absent (an older server) is the sandbox's account, and left out when it is
    /// that, so an older sandboxd reads the same header as before. sandboxd cannot tell whether
    /// the agent may be root: the server decides (its `allowRoot`) before it sends `Root`.
    /// `runAs` on the wire, since `user` is the hello's (an account name) in the same header
    /// namespace.
    #[serde(default, skip_serializing_if = "RunAs::is_account")]
    pub run_as: RunAs,
}

/// Who a command runs as.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RunAs {
    /// The sandbox's account (the image's `agent`, else its `USER`, else root).
    #[default]
    Agent,
    /// uid 0, with root's groups: sandboxd does not drop to the account.
    Root,
}

impl RunAs {
    pub fn is_account(&self) -> bool {
        *self == RunAs::Agent
    }

    /// As the API and the process records write it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunAs::Agent => "agent",
            RunAs::Root => "root",
        }
    }
}

/// Why an exec's command line cannot be sent or run (see [`ExecRequest::check_size`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecTooLarge {
    #[error(
        "the command and env take {0} bytes (each argument and each KEY=VALUE counted with a \
         terminating NUL); at most {MAX_EXEC_ARGS_LEN} bytes (1 MiB) are accepted"
    )]
    Total(usize),
    #[error(
        "argument {index} of the command is {len} bytes; Linux runs no command with an argument \
         over {max} bytes: pass a long script on stdin instead (for example command [\"sh\"] \
         with the script as stdin)",
        max = MAX_EXEC_ARG_LEN - 1
    )]
    Argument { index: usize, len: usize },
    #[error(
        "env variable {name:?} is {len} bytes as KEY=VALUE; Linux runs no command with a \
         variable over {max} bytes",
        max = MAX_EXEC_ARG_LEN - 1
    )]
    EnvVar { name: String, len: usize },
    #[error("cwd of {0} bytes is longer than {MAX_PATH_LEN} bytes")]
    Cwd(usize),
}

impl ExecTooLarge {
    /// The request field it is about.
    pub fn field(&self) -> &'static str {
        match self {
            ExecTooLarge::Total(_) | ExecTooLarge::Argument { .. } => "command",
            ExecTooLarge::EnvVar { .. } => "env",
            ExecTooLarge::Cwd(_) => "cwd",
        }
    }
}

impl ExecRequest {
    /// Checks the command line against the limits above, returning the bytes it counts.
    ///
    /// Both sides check: the server to answer with a reason before anything reaches the
    /// sandbox, sandboxd because its header limit is only large enough for requests that pass.
    pub fn check_size(&self) -> Result<usize, ExecTooLarge> {
        let mut total = 0usize;
        for (index, arg) in self.command.iter().enumerate() {
            let len = arg.len() + 1;
            if len > MAX_EXEC_ARG_LEN {
                return Err(ExecTooLarge::Argument {
                    index,
                    len: arg.len(),
                });
            }
            total += len;
        }
        for (k, v) in &self.env {
            let len = k.len() + 1 + v.len() + 1;
            if len > MAX_EXEC_ARG_LEN {
                return Err(ExecTooLarge::EnvVar {
                    name: k.chars().take(64).collect(),
                    len: len - 1,
                });
            }
            total += len;
        }
        if total > MAX_EXEC_ARGS_LEN {
            return Err(ExecTooLarge::Total(total));
        }
        match &self.cwd {
            Some(cwd) if cwd.len() > MAX_PATH_LEN => Err(ExecTooLarge::Cwd(cwd.len())),
            _ => Ok(total),
        }
    }
}

/// How an `exec` ended, sent as the last frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecExit {
    /// The exit code; `128 + signal` when a signal ended it, -1 when it could not be started.
    pub exit_code: i32,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub truncated: bool,
}
