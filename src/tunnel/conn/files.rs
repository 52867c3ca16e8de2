//! The file calls: list, read, write, mkdir, remove, rename, stat, exists and watch. Each is a
//! use of the agent.

use agenthold_proto::{
    self as proto, FileStat, FsExists, FsList, FsMkdir, FsRead, FsRemove, FsRename, FsStat,
    FsWatch, FsWrite, Reply, WatchEvent,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ConnError, SandboxConn};
use crate::tunnel::registry::LinkStream;

/// Largest `fs.list` answer read from a sandbox.
const MAX_LISTING: u64 = 64 * 1024 * 1024;

/// A file being read: its size, then its bytes.
pub struct FileReader {
    pub size: u64,
    pub bytes: LinkStream,
}

/// The largest file a write may bring (`server.max_file_mb`).
#[derive(Debug, Clone, Copy)]
pub struct UploadLimit {
    max_mb: u64,
}

impl UploadLimit {
    pub fn mb(max_mb: u64) -> UploadLimit {
        UploadLimit { max_mb }
    }

    fn bytes(&self) -> u64 {
        self.max_mb.saturating_mul(1024 * 1024)
    }

    fn too_large(&self) -> ConnError {
        ConnError::FileTooLarge {
            max_mb: self.max_mb,
        }
    }

    /// Refuses an upload whose declared length is over the limit before anything is sent.
    pub fn admit(&self, declared: Option<u64>) -> Result<(), ConnError> {
        match declared {
            Some(n) if n > self.bytes() => Err(self.too_large()),
            _ => Ok(()),
        }
    }
}

impl SandboxConn {
    /// Opens a file channel, counting it as use of the agent.
    async fn open_file<C: proto::Channel>(
        &self,
        header: C,
    ) -> Result<(LinkStream, C::Reply), ConnError> {
        self.activity.touch(&self.id);
        self.open(header).await
    }

    /// A directory's entries (relative to the home unless absolute; the home when empty), as
    /// sandboxd describes them.
    pub async fn list_dir<T: DeserializeOwned>(&self, path: String) -> Result<Vec<T>, ConnError> {
        let (stream, _) = self.open_file(FsList { path }).await?;
        let mut body = Vec::new();
        stream
            .take(MAX_LISTING)
            .read_to_end(&mut body)
            .await
            .map_err(ConnError::ListingCut)?;
        serde_json::from_slice(&body).map_err(ConnError::BadListing)
    }

    /// Opens a file for reading.
    pub async fn read_file(&self, path: String) -> Result<FileReader, ConnError> {
        let (bytes, size) = self.open_file(FsRead { path }).await?;
        Ok(FileReader {
            size: size.size,
            bytes,
        })
    }

    /// Writes a file from `body` (the directories above it made first, as the account): it is
    /// replaced whole, or not at all when `body` breaks off, passes `limit` or the sandbox
    /// refuses.
    pub async fn write_file<S, E>(
        &self,
        path: String,
        mut body: S,
        limit: UploadLimit,
    ) -> Result<(), ConnError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (stream, _) = self
            .open_file(FsWrite {
                path,
                parents: true,
            })
            .await?;
        let (mut from_sandbox, mut to_sandbox) = tokio::io::split(stream);
        let upload = async {
            let mut written: u64 = 0;
            while let Some(chunk) = body.next().await {
                // Returning early drops the stream without a shutdown: a reset, so sandboxd
                // discards the partial file.
                let chunk = chunk.map_err(|e| ConnError::UploadCut(std::io::Error::other(e)))?;
                written += chunk.len() as u64;
                if written > limit.bytes() {
                    return Err(limit.too_large());
                }
                to_sandbox
                    .write_all(&chunk)
                    .await
                    .map_err(ConnError::UploadFailed)?;
            }
            to_sandbox.shutdown().await.map_err(ConnError::UploadFailed)
        };
        // sandboxd answers once, at the end; an answer before that is a failure (a full disk)
        // after which it reads no more, so the rest of the body would wait forever on the
        // stream's window.
        let answer = proto::read_message::<_, Reply>(&mut from_sandbox);
        tokio::pin!(answer);
        tokio::select! {
            // An answer that is already there wins over a send that failed because of it.
            biased;
            early = &mut answer => {
                early
                    .map_err(ConnError::Unconfirmed)?
                    .into_result()
                    .map_err(ConnError::Refused)?;
                return Err(ConnError::ConfirmedEarly);
            }
            sent = upload => sent?,
        }
        answer
            .await
            .map_err(ConnError::Unconfirmed)?
            .into_result()
            .map_err(ConnError::Refused)?;
        Ok(())
    }

    /// Makes a directory and its parents.
    pub async fn mkdir(&self, path: String) -> Result<(), ConnError> {
        self.open_file(FsMkdir { path }).await?;
        Ok(())
    }

    /// Removes a file, or a directory (with everything in it when `recursive`).
    pub async fn remove_path(&self, path: String, recursive: bool) -> Result<(), ConnError> {
        self.open_file(FsRemove { path, recursive }).await?;
        Ok(())
    }

    /// Moves or renames `from` to `to`; an existing `to` is refused unless `overwrite`.
    pub async fn rename_path(
        &self,
        from: String,
        to: String,
        overwrite: bool,
    ) -> Result<(), ConnError> {
        self.open_file(FsRename {
            from,
            to,
            overwrite,
        })
        .await?;
        Ok(())
    }

    /// What the path is (a symbolic link itself, not what it points to).
    pub async fn stat(&self, path: String) -> Result<FileStat, ConnError> {
        Ok(self.open_file(FsStat { path }).await?.1)
    }

    /// Whether the account can see that the path exists.
    pub async fn exists(&self, path: String) -> Result<bool, ConnError> {
        Ok(self.open_file(FsExists { path }).await?.1.exists)
    }

    /// Changes under a directory, as they happen, until the stream is dropped or the sandbox
    /// ends it (the directory went away). An event that is not one is the end.
    pub async fn watch(
        &self,
        path: String,
        recursive: bool,
    ) -> Result<impl Stream<Item = WatchEvent> + Send + 'static, ConnError> {
        let (stream, _) = self.open_file(FsWatch { path, recursive }).await?;
        Ok(futures::stream::unfold(stream, |mut s| async move {
            match proto::read_message::<_, WatchEvent>(&mut s).await {
                Ok(ev) => Some((ev, s)),
                Err(e) => {
                    if !matches!(e, proto::ProtoError::Eof) {
                        tracing::debug!(error = %e, "fs.watch ended");
                    }
                    None
                }
            }
        }))
    }
}
