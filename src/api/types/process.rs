//! The bodies of the background-process API (`/api/v1/agents/{id}/processes…`) and its
//! `process` event.

use std::collections::BTreeMap;

use agenthold_proto::{ProcessInfo, ProcessState as WireState};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::OutputStream;

// `command`, `cwd` and `env` read as in `ExecBody`, each body with its own words; they are not
// one flattened struct because serde's `flatten` cannot be combined with `deny_unknown_fields`
// (and utoipa would render it as an `allOf`).
/// `POST /api/v1/agents/{id}/processes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartProcess {
    /// The program and its arguments, as `exec` takes them (no shell unless you name one; the
    /// same size limits, `413` beyond).
    #[schema(min_items = 1, example = json!(["npm", "run", "dev"]))]
    pub command: Vec<String>,
    /// Working directory; /home/agent by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// As `exec`'s `env`: the names an agent's `env` takes, within exec's size limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// A name of your own (1 to 64 of letters, digits, `.`, `_`, `-`, starting with a letter or
    /// digit), usable wherever an id is; two running processes of an agent cannot share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", example = "web")]
    pub tag: Option<String>,
    /// Keep a pipe to the process's stdin for `…/stdin`; without it, stdin is `/dev/null`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// While it runs, the agent does not fall asleep (a quiet process otherwise lets it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_awake: bool,
    /// Kills the whole tree after this long (at most 30 days); none by default.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::whole::option"
    )]
    #[schema(minimum = 1, maximum = 2592000000.0, example = 3600000)]
    pub timeout_ms: Option<u64>,
    /// As `exec`'s `user`: `root` for an agent with `allowRoot` only (`403` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<super::RunUser>,
}

/// How a process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    /// It exited by itself (see `exitCode`).
    Exited,
    /// A signal ended it (see `signal`): one sent through the API, its timeout, or its own.
    Killed,
    /// It was running when its sandbox stopped (the agent slept, or was stopped); its output up
    /// to then is still readable.
    Lost,
}

impl From<WireState> for ProcessState {
    fn from(s: WireState) -> Self {
        match s {
            WireState::Running => ProcessState::Running,
            WireState::Exited => ProcessState::Exited,
            WireState::Killed => ProcessState::Killed,
            WireState::Lost => ProcessState::Lost,
        }
    }
}

impl ProcessState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Exited => "exited",
            ProcessState::Killed => "killed",
            ProcessState::Lost => "lost",
        }
    }
}

// The API's side of `agenthold_proto::ProcessInfo` (sandboxd's report, with epoch
// milliseconds): times in RFC 3339 and a schema, converted in one place (`From` below).
/// A background process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Made by the agent's sandboxd; use it, or the tag, in the process's URLs.
    pub id: String,
    pub tag: Option<String>,
    /// The command line (an argument past the first 8 KiB in all is cut and ends in `…`).
    pub command: Vec<String>,
    /// Its process id in the sandbox: the leader of its process group.
    pub pid: Option<i32>,
    pub state: ProcessState,
    /// Set once it exited by itself; 127 when the program was not found, 126 when it could not
    /// be run.
    pub exit_code: Option<i32>,
    /// The signal that ended it, without `SIG` (`TERM`, `KILL`).
    pub signal: Option<String>,
    /// Ended by its `timeoutMs`.
    pub timed_out: bool,
    /// RFC 3339.
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Output so far, both streams together, in bytes: the offset of the next byte.
    pub output_bytes: u64,
    /// The oldest offset still kept (`sandbox.process_output_kb`); reading from before it
    /// starts with a gap.
    pub output_start: u64,
    pub keep_awake: bool,
    /// A pipe to its stdin is open.
    pub stdin_open: bool,
    /// The destinations the egress proxy refused for the agent while the process ran (each host
    /// and port once, at most 32). Kept in the server's memory for processes started through
    /// it: empty for others, and after a server restart.
    #[serde(default)]
    pub egress_denied: Vec<super::egress::EgressDenied>,
    /// Who it runs as (`agent`: the sandbox's account).
    #[serde(default)]
    pub user: super::RunUser,
}

fn time(ms: u64) -> String {
    let t = DateTime::<Utc>::from_timestamp_millis(ms as i64).unwrap_or_default();
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl From<ProcessInfo> for Process {
    fn from(p: ProcessInfo) -> Self {
        Process {
            id: p.id,
            tag: p.tag,
            command: p.command,
            pid: p.pid,
            state: p.state.into(),
            exit_code: p.exit_code,
            signal: p.signal,
            timed_out: p.timed_out,
            started_at: time(p.started_at_ms),
            ended_at: p.ended_at_ms.map(time),
            output_bytes: p.output_bytes,
            output_start: p.output_start,
            keep_awake: p.keep_awake,
            stdin_open: p.stdin_open,
            egress_denied: Vec::new(),
            user: p.run_as.into(),
        }
    }
}

/// One line of `GET …/processes/{pid}/output` (NDJSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OutputLine {
    /// Bytes from `offset` on, as UTF-8 text.
    Text {
        offset: u64,
        stream: OutputStream,
        data: String,
    },
    /// Bytes from `offset` on that are not UTF-8 text, in standard base64.
    Bytes {
        offset: u64,
        stream: OutputStream,
        data64: String,
    },
    /// `from..to` has left the buffer; what follows starts at `to`.
    Gap { gap: Gap },
    /// The last line: the process has ended and all its output was sent.
    Exit { exit: Box<Process> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
}

/// `POST …/processes/{pid}/signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    /// A name (`TERM`, `SIGINT`, `kill`: any case, with or without `SIG`) or a number, of the
    /// signals Linux numbers 1 to 31 but 16.
    #[schema(
        pattern = r#"^[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*(?:\+?0*(?:[1-9]|1[0-57-9]|2[0-9]|3[01])|(?:[Ss][Ii][Gg])?(?:[Hh][Uu][Pp]|[Ii][Nn][Tt]|[Qq][Uu][Ii][Tt]|[Ii][Ll][Ll]|[Tt][Rr][Aa][Pp]|[Aa][Bb][Rr][Tt]|[Bb][Uu][Ss]|[Ff][Pp][Ee]|[Kk][Ii][Ll][Ll]|[Uu][Ss][Rr]1|[Ss][Ee][Gg][Vv]|[Uu][Ss][Rr]2|[Pp][Ii][Pp][Ee]|[Aa][Ll][Rr][Mm]|[Tt][Ee][Rr][Mm]|[Cc][Hh][Ll][Dd]|[Cc][Oo][Nn][Tt]|[Ss][Tt][Oo][Pp]|[Tt][Ss][Tt][Pp]|[Tt][Tt][Ii][Nn]|[Tt][Tt][Oo][Uu]|[Uu][Rr][Gg]|[Xx][Cc][Pp][Uu]|[Xx][Ff][Ss][Zz]|[Vv][Tt][Aa][Ll][Rr][Mm]|[Pp][Rr][Oo][Ff]|[Ww][Ii][Nn][Cc][Hh]|[Ii][Oo]|[Pp][Ww][Rr]|[Ss][Yy][Ss]))[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$"#,
        example = "TERM"
    )]
    pub signal: String,
}

/// The answer to `POST …/processes/{pid}/stdin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StdinWritten {
    /// Bytes written to the process's stdin.
    pub written: u64,
}

/// The `process` event's data: agent `id`'s process started or ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProcessEvent {
    /// The agent's id.
    pub id: String,
    pub process: Process,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_have_the_documented_json_form() {
        let cases = [
            (
                OutputLine::Text {
                    offset: 3,
                    stream: OutputStream::Stdout,
                    data: "hi\n".into(),
                },
                r#"{"offset":3,"stream":"stdout","data":"hi\n"}"#,
            ),
            (
                OutputLine::Bytes {
                    offset: 5,
                    stream: OutputStream::Stderr,
                    data64: "/w==".into(),
                },
                r#"{"offset":5,"stream":"stderr","data64":"/w=="}"#,
            ),
            (
                OutputLine::Gap {
                    gap: Gap { from: 0, to: 9 },
                },
                r#"{"gap":{"from":0,"to":9}}"#,
            ),
        ];
        for (line, json) in cases {
            assert_eq!(serde_json::to_string(&line).ok().as_deref(), Some(json));
            assert_eq!(serde_json::from_str::<OutputLine>(json).ok(), Some(line));
        }
    }

    #[test]
    fn a_process_from_the_wire_keeps_every_field() {
        let p: Process = ProcessInfo {
            id: "abc".into(),
            tag: Some("web".into()),
            command: vec!["sleep".into()],
            pid: Some(7),
            state: WireState::Killed,
            exit_code: None,
            signal: Some("TERM".into()),
            timed_out: true,
            started_at_ms: 1_700_000_000_000,
            ended_at_ms: Some(1_700_000_000_500),
            output_bytes: 9,
            output_start: 2,
            keep_awake: true,
            stdin_open: false,
            run_as: agenthold_proto::RunAs::Root,
        }
        .into();
        let json = serde_json::to_value(&p).unwrap_or_default();
        assert_eq!(json["state"], "killed");
        assert_eq!(json["startedAt"], "2023-11-14T22:13:20.000Z");
        assert_eq!(json["endedAt"], "2023-11-14T22:13:20.500Z");
        assert_eq!(json["outputStart"], 2);
        assert_eq!(json["timedOut"], true);
        assert_eq!(json["user"], "root");
    }
}
