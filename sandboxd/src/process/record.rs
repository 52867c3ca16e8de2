//! A process's record on disk (`process.json` in its folder): written at each change, and read
//! back by the next sandboxd, for which the processes that were running are `lost`.

use std::path::Path;
use std::sync::Mutex;

use agenthold_proto::{is_session_id, ProcessInfo, ProcessState};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::log::OutputLog;
use super::{cancelled, Process, State};
use crate::terminal::session::now_ms;

const RECORD: &str = "process.json";

/// What a process's folder records about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    info: ProcessInfo,
    output_budget: u64,
}

impl Process {
    pub(super) fn persist(&self) {
        let record = {
            let st = self.lock();
            Record {
                info: st.info_now(),
                output_budget: st.budget,
            }
        };
        if let Err(e) = write_record(&self.dir, &record) {
            tracing::warn!(process = %self.id, error = %e, "cannot write the process's record");
        }
    }
}

fn write_record(dir: &Path, record: &Record) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!("{RECORD}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&json)?;
    std::fs::rename(&tmp, dir.join(RECORD))
}

pub(super) fn load_one(dir: &Path) -> Option<Process> {
    let raw = std::fs::read(dir.join(RECORD)).ok()?;
    let Record {
        mut info,
        output_budget,
    } = serde_json::from_slice(&raw).ok()?;
    let name_ok = dir.file_name().and_then(|n| n.to_str()) == Some(info.id.as_str());
    if !name_ok || !is_session_id(&info.id) {
        return None;
    }
    let log = OutputLog::open_finished(dir, output_budget);
    if info.state.is_running() {
        // It ended with the sandboxd before us; when is the last sign it gave.
        info.state = ProcessState::Lost;
        info.ended_at_ms = Some(last_written_ms(dir).unwrap_or_else(now_ms));
    }
    info.stdin_open = false;
    info.output_bytes = log.end();
    info.output_start = log.start();
    let (changed, _) = watch::channel(0);
    let p = Process {
        id: info.id.clone(),
        dir: dir.to_path_buf(),
        state: Mutex::new(State {
            info,
            log,
            budget: output_budget,
            done: true,
            write_failed: false,
        }),
        changed,
        stdin: tokio::sync::Mutex::new(None),
        kill: CancellationToken::new(),
        ended: cancelled(),
        control: None,
    };
    p.persist();
    Some(p)
}

fn last_written_ms(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
}
