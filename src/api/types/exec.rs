//! The bodies of `POST /api/v1/agents/{id}/exec`: the request, the whole answer, and the lines
//! of the streamed answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::egress::EgressDenied;
use super::whole;
#[cfg(doc)]
use super::ErrorBody;

/// `POST /api/v1/agents/{id}/exec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecBody {
    /// The program and its arguments; no shell unless you name one. With `env`, at most 1 MiB
    /// (each argument and each `KEY=VALUE` counted with a NUL), each argument at most 131071
    /// bytes (Linux's limit): send a longer script as `stdin` (`["sh"]`). Beyond: `413`.
    #[schema(min_items = 1, example = json!(["sh", "-c", "make test"]))]
    pub command: Vec<String>,
    /// Working directory; /home/agent by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Counted with `command` towards its 1 MiB; each `KEY=VALUE` at most 131071 bytes. Names
    /// as an agent's `env` takes them (the egress proxy's variables and `AGENTHOLD_*` are
    /// reserved: `400`, `field` `env`, the same message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Kills the whole process group after this long (1 to `server.exec_max_timeout`); the
    /// server's default applies when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 1, example = 300000)]
    pub timeout_ms: Option<u64>,
    /// `root` runs it as uid 0 (home `/root`), for an agent with `allowRoot` only (`403`
    /// otherwise); `agent` or absent: the sandbox's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<RunUser>,
}

/// Who a command runs as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunUser {
    /// The sandbox's account (`agent` in the ready image; the image's `USER` otherwise).
    #[default]
    Agent,
    /// uid 0, inside the container only; needs the agent's `allowRoot`.
    Root,
}

impl From<RunUser> for agenthold_proto::RunAs {
    fn from(u: RunUser) -> Self {
        match u {
            RunUser::Agent => agenthold_proto::RunAs::Agent,
            RunUser::Root => agenthold_proto::RunAs::Root,
        }
    }
}

impl From<agenthold_proto::RunAs> for RunUser {
    fn from(u: agenthold_proto::RunAs) -> Self {
        match u {
            agenthold_proto::RunAs::Agent => RunUser::Agent,
            agenthold_proto::RunAs::Root => RunUser::Root,
        }
    }
}

/// The answer to an exec, once the command has ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// The command's exit status; 128 + N when signal N ended it (a timeout kills with SIGKILL).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// Output beyond the server's cap (server.exec_output_cap_kb) was cut.
    pub truncated: bool,
    /// The destinations the egress proxy refused for the agent while the command ran (each host
    /// and port once, at most 32); a download that failed with a tool's own message may have
    /// failed for this.
    #[serde(default)]
    pub egress_denied: Vec<EgressDenied>,
}

/// Which of the command's outputs a streamed chunk comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// One line of a streamed exec (`Accept: application/x-ndjson`): output as it comes, then the
/// exit. A stream that fails after it began ends with an error line instead (an
/// [`ErrorBody`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ExecLine {
    Output { stream: OutputStream, data: String },
    Exit(ExecExit),
}

/// The last line of a streamed exec. A client takes the line by its `exitCode`; the other fields
/// default when missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecExit {
    pub exit_code: i32,
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub truncated: bool,
    /// As in [`ExecResult`].
    #[serde(default)]
    pub egress_denied: Vec<EgressDenied>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_lines_have_the_documented_json_form() {
        let out = ExecLine::Output {
            stream: OutputStream::Stderr,
            data: "x".into(),
        };
        assert_eq!(
            serde_json::to_string(&out).ok().as_deref(),
            Some(r#"{"stream":"stderr","data":"x"}"#)
        );
        let exit = ExecLine::Exit(ExecExit {
            exit_code: 137,
            timed_out: true,
            duration_ms: 5,
            truncated: false,
            egress_denied: vec![EgressDenied {
                host: "pypi.org".into(),
                port: 443,
                rule: None,
            }],
        });
        assert_eq!(
            serde_json::to_string(&exit).ok().as_deref(),
            Some(
                r#"{"exitCode":137,"timedOut":true,"durationMs":5,"truncated":false,"egressDenied":[{"host":"pypi.org","port":443,"rule":null}]}"#
            )
        );
    }
}
