//! A terminal session as `GET /api/v1/agents/{id}/terminals` lists it: the API's side of
//! sandboxd's [`TerminalInfo`] (epoch milliseconds), with times in RFC 3339.

use agenthold_proto::TerminalInfo;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalSession {
    /// Attach with `GET …/terminal?session=ID`.
    pub id: String,
    /// The shell, or the command line it runs.
    pub command: String,
    pub cols: u16,
    pub rows: u16,
    pub created_at: String,
    /// When a viewer last typed (the creation time if nobody has).
    pub last_input_at: String,
    /// WebSockets attached right now.
    pub viewers: u32,
    /// Output produced so far, in bytes: the offset of the next byte.
    pub offset: u64,
    /// Set once the shell has exited; the session stays until a viewer has seen its end.
    pub exit_code: Option<i32>,
}

fn time(ms: u64) -> String {
    let t = DateTime::<Utc>::from_timestamp_millis(ms as i64).unwrap_or_default();
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl From<TerminalInfo> for TerminalSession {
    fn from(t: TerminalInfo) -> Self {
        TerminalSession {
            id: t.id,
            command: t.command,
            cols: t.cols,
            rows: t.rows,
            created_at: time(t.created_at_ms),
            last_input_at: time(t.last_input_at_ms),
            viewers: t.viewers,
            offset: t.offset,
            exit_code: t.exit_code,
        }
    }
}
