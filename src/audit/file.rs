//! `server.audit_log`: every entry also appended to a file as one JSON line, for shipping to
//! a log system. A write that fails is logged; the entry is still in the store.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::model::audit::AuditEntry;

pub struct JsonLines {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl JsonLines {
    /// Opens `path` for appending, creating it readable by the server's user alone.
    pub fn open(path: &Path) -> std::io::Result<JsonLines> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(JsonLines {
            path: path.to_path_buf(),
            file: Arc::new(Mutex::new(file)),
        })
    }

    pub async fn append(&self, entry: &AuditEntry) {
        let mut line = match serde_json::to_vec(entry) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("an audit entry could not be written as JSON: {e}");
                return;
            }
        };
        line.push(b'\n');
        let file = Arc::clone(&self.file);
        // One write of the whole line: lines of concurrent entries never interleave.
        let written = tokio::task::spawn_blocking(move || {
            file.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write_all(&line)
        })
        .await;
        let failed = match written {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(path = %self.path.display(), "appending to server.audit_log: {failed}");
    }
}
