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
