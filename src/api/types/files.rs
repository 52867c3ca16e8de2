//! The file browser's listing entry.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

// One entry of `fs/list`. sandboxd's `fs.list` channel sends the listing as JSON of this very
// shape, so the server reads it into this type and answers with it: no field it does not name
// passes through.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DirEntry {
    #[schema(example = "app.py")]
    pub name: String,
    /// file, dir, symlink or other
    #[serde(rename = "type")]
    #[schema(pattern = "^(?:file|dir|symlink|other)$", example = "file")]
    pub kind: String,
    pub size: u64,
    /// The permission bits (and the file type's, as `st_mode` has them).
    pub mode: u32,
    /// RFC 3339.
    #[schema(example = "2026-11-29T07:10:00Z")]
    pub mtime: String,
}

/// `fs/stat`'s answer: the path itself (a symbolic link is not followed).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FileInfo {
    /// Absolute.
    #[schema(example = "/home/agent/src/app.py")]
    pub path: String,
    #[serde(rename = "type")]
    #[schema(pattern = "^(?:file|dir|symlink|other)$", example = "file")]
    pub kind: String,
    pub size: u64,
    /// The permission bits, in octal.
    #[schema(pattern = "^[0-7]{4}$", example = "0644")]
    pub mode: String,
    /// RFC 3339.
    #[schema(example = "2026-11-29T07:10:00Z")]
    pub mtime: String,
    /// The owner's user name in the sandbox, or its uid when it has none.
    #[schema(example = "agent")]
    pub owner: String,
}

impl From<agenthold_proto::FileStat> for FileInfo {
    fn from(s: agenthold_proto::FileStat) -> FileInfo {
        let kind = match s.kind.as_str() {
            "file" | "dir" | "symlink" => s.kind,
            _ => "other".to_string(),
        };
        FileInfo {
            path: s.path,
            kind,
            size: s.size,
            mode: s.mode,
            mtime: s.mtime,
            owner: s.owner,
        }
    }
}

/// `fs/exists`'s answer.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct PathExists {
    pub exists: bool,
}

/// `fs/rename`'s body.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    /// What to move: relative to /home/agent unless absolute.
    #[schema(min_length = 1, max_length = 4096, example = "draft.txt")]
    pub from: String,
    /// Where it goes; its directory must exist.
    #[schema(min_length = 1, max_length = 4096, example = "docs/final.txt")]
    pub to: String,
    /// Replace what `to` names (a file, or an empty directory when moving a directory);
    /// without, an existing `to` is a `409`.
    #[serde(default)]
    pub overwrite: bool,
}

/// What happened, in an event of `fs/watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileEventKind {
    Create,
    Write,
    Remove,
    /// Renamed away from `path`; the new name, if it is in view, comes as a `create`.
    Rename,
    /// Events were lost (a flood, or a directory beyond the sandbox's watch limit): read the
    /// directory again. `path` is the directory concerned.
    Gap,
}

/// One event of `fs/watch`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileEvent {
    #[serde(rename = "type")]
    pub kind: FileEventKind,
    /// Absolute.
    #[schema(example = "/home/agent/src/app.py")]
    pub path: String,
}

impl From<agenthold_proto::WatchEvent> for FileEvent {
    fn from(e: agenthold_proto::WatchEvent) -> FileEvent {
        use agenthold_proto::WatchKind as K;
        let kind = match e.kind {
            K::Create => FileEventKind::Create,
            K::Write => FileEventKind::Write,
            K::Remove => FileEventKind::Remove,
            K::Rename => FileEventKind::Rename,
            K::Gap => FileEventKind::Gap,
        };
        FileEvent { kind, path: e.path }
    }
}

/// One file of `fs/write-files`: written whole, or the error that stopped it.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FileWritten {
    /// As the request named it.
    pub path: String,
    /// Null when the file was written.
    pub error: Option<super::ErrorDetail>,
}

/// `fs/write-files`'s answer: one result per part, in the request's order.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct FilesWritten {
    pub files: Vec<FileWritten>,
}
